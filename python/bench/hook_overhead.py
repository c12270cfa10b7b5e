"""What the mlcc hook costs a DDP step: two-rank jobs over Gloo on loopback with and without
it, interleaved, in one sitting; and the hook's own bookkeeping per bucket. Prints JSON.

    python3 python/bench/hook_overhead.py [--repeat 5] [--iterations 30]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from test_torch import run_job  # noqa: E402


def step_times(hook: bool, iterations: int, shm: str):
    extra = [] if hook else ["--no-hook"]
    env = {"MLCC_JOB_ID": "bench", "MLCC_SHM_DIR": shm}
    times = []
    for code, out, err in run_job(2, *extra, "--model-bytes", "20MB", "--bucket-mb", "25",
                                  env=env, iterations=iterations):
        if code != 0:
            raise SystemExit(err)
        # the first steps build and rebuild DDP's buckets; time the steady ones
        times += json.loads(out.strip().splitlines()[-1])["iteration_s"][3:]
    return statistics.median(times)


def bookkeeping_us(calls: int = 200_000) -> float:
    """The hook's own work per bucket (counting, ring arithmetic, the progress writes)."""
    import tempfile

    from mlcc import progress
    from mlcc.ring import ring_bytes

    w = progress.ProgressWriter.open("bench", directory=tempfile.gettempdir())
    t0 = time.perf_counter()
    for i in range(calls):
        if i % 8 == 0:
            w.iteration_begin()
        moved = ring_bytes("gloo", 6_553_600 + (i % 8), 4, 3, 1)
        w.add(progress.DIR_SEND, moved.sent)
        w.add(progress.DIR_RECV, moved.received)
    dt = time.perf_counter() - t0
    w.close()
    return dt / calls * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=30)
    a = ap.parse_args()
    import tempfile

    shm = tempfile.mkdtemp(prefix="mlcc-bench-")
    rows = {"hook": [], "plain": []}
    for _ in range(a.repeat):
        for kind in ("plain", "hook"):
            rows[kind].append(step_times(kind == "hook", a.iterations, shm))
    plain, hook = statistics.median(rows["plain"]), statistics.median(rows["hook"])
    print(json.dumps({
        "bench": "ddp_step_with_and_without_the_mlcc_hook",
        "backend": "gloo", "world": 2, "model_bytes": 20_000_000, "repeat": a.repeat,
        "step_s_plain": rows["plain"], "step_s_hook": rows["hook"],
        "median_step_s_plain": plain, "median_step_s_hook": hook, "ratio": hook / plain,
        "bookkeeping_us_per_bucket": bookkeeping_us(),
    }, indent=1))


if __name__ == "__main__":
    main()
