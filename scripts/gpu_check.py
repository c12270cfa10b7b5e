"""The Python half of scripts/gpu-check.sh (read that first): the programs its ranks run, and
the comparison it prints. Runs with PYTHONPATH=python (for mlcc.progress, mlcc.ring and
mlcc.torch.job); only `compare` works without PyTorch.

    gpu_check.py allreduce --rank R --world N --master HOST:PORT --bytes B --iterations K --out F
        Part A, one rank: a warm-up all-reduce of one element, then K all-reduces of B bytes of
        fp32 on cuda:0; after each, the rank reads its plugin progress file (mlcc.progress.read)
        once the transfers have settled, and writes every reading to F (JSON).
    gpu_check.py ddp --out F -- <python3 -m mlcc.torch.job arguments>
        Part B, one rank: runs mlcc.torch.job's main() in this process and reads the plugin's file
        at the same points: after DDP is set up, after each training step, and before
        destroy_process_group (the plugin removes the file when NCCL finalizes the last
        communicator, which the job does before it prints its report). The job's JSON report
        goes to stdout as usual; the readings go to F.
    gpu_check.py compare allreduce RANK0.json RANK1.json ...
    gpu_check.py compare ddp RANK0.json RANK1.json ... --reports REPORT0 REPORT1 ...
        Prints one table per rank and exits 1 on a mismatch (REPORTn: rank n's job stdout).

Each reading is taken once both ranks' kernels have finished (a barrier on the rendezvous
store, which moves no NCCL bytes) and the file's counters have stopped changing for a moment:
the plugin counts a sent step when NCCL's proxy sees its isend complete, which can trail the
kernel, so a reading right after torch.cuda.synchronize() could miss the last step.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from typing import Dict, List, Optional

from mlcc import progress
from mlcc.ring import nccl_ring

FIELDS = ("iteration", "bytes_sent", "bytes_received", "iteration_start_sent",
          "last_iteration_bytes", "rank", "world_size")

# Relative tolerance on every byte count. With NCCL_ALGO=Ring NCCL_PROTO=Simple and two ranks
# the plugin should count exactly 2(N-1)/N x S per rank: NCCL's ring (src/device/all_reduce.h,
# runRing) has each rank send chunk ringIx+1 in its first step and chunk ringIx in step k-1,
# i.e. every element of its channel's share once for N=2, and Simple puts only payload on the
# wire (LL doubles it with flags, LL128 adds 1/15). So any real error is large: LL/LL128
# framing (+100 % / +6.7 %), received counted as sent (+100 %), one proxy step missed or counted
# twice (a Simple step is NCCL_BUFFSIZE/NCCL_STEPS = 4 MiB/8 = 512 KiB by default,
# src/init.cc DEFAULT_BUFFSIZE, src/include/device.h NCCL_STEPS). 0.1 % (67 KB of a 64 MiB
# all-reduce, 20 KB of a 20 MB model) is far below all of them; it leaves room only for the
# 16-byte alignment of chunk boundaries (all_reduce.h: alignUp(divUp(remCount, nranks), 16 /
# sizeof(T))), which moves bytes between ranks when N > 2. GPU_CHECK_TOL overrides it.
DEFAULT_TOL = 0.001


# ---------------------------------------------------------------------------------------------
# Reading the plugin's progress file


def find_file(timeout: float = 10.0) -> Optional[str]:
    """This process's file: $MLCC_SHM_DIR/mlcc.<job>.worker.<rank>.<pid> (the plugin names it
    with the communicator's rank, or MLCC_RANK)."""
    pattern = os.path.join(os.environ.get("MLCC_SHM_DIR") or "/dev/shm",
                           f"mlcc.{os.environ.get('MLCC_JOB_ID', '')}.worker.*.{os.getpid()}")
    deadline = time.monotonic() + timeout
    while True:
        hits = glob.glob(pattern)
        if hits:
            return hits[0]
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def snapshot(path: str) -> Dict[str, int]:
    p = progress.read(path)
    return {f: getattr(p, f) for f in FIELDS}


def settle(path: str, quiet: float = 0.15, limit: float = 10.0) -> Dict[str, int]:
    """A reading once the counters have not changed for `quiet` seconds (at most `limit`)."""
    start = time.monotonic()
    last = snapshot(path)
    changed = start
    while True:
        time.sleep(0.01)
        now = time.monotonic()
        cur = snapshot(path)
        if cur != last:
            last, changed = cur, now
        elif now - changed >= quiet or now - start >= limit:
            return cur


class StoreBarrier:
    """A barrier on the rendezvous store (TCP, no NCCL traffic). Without a store (a PyTorch
    without _get_default_store) it does nothing and settle()'s quiet period has to do."""

    def __init__(self, store, world: int, prefix: str, timeout: float = 120.0) -> None:
        self.store, self.world, self.prefix, self.n = store, world, prefix, 0
        self.timeout = timeout

    def __call__(self) -> None:
        if self.store is None:
            return
        self.n += 1
        key = f"{self.prefix}/{self.n}"
        self.store.add(key, 1)
        deadline = time.monotonic() + self.timeout
        while int(self.store.add(key, 0)) < self.world:
            if time.monotonic() > deadline:
                raise TimeoutError(f"barrier {key}: the other rank did not arrive")
            time.sleep(0.002)


def default_store():
    import torch.distributed.distributed_c10d as c10d

    get = getattr(c10d, "_get_default_store", None)
    try:
        return get() if get else None
    except Exception:
        return None


def nccl_version(torch) -> str:
    try:
        v = torch.cuda.nccl.version()
    except Exception:
        return "?"
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v)
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}" if v < 10000 else \
        f"{v // 10000}.{v % 10000 // 100}.{v % 100}"


def wait_removed(path: Optional[str], timeout: float = 3.0) -> Optional[bool]:
    if not path:
        return None
    deadline = time.monotonic() + timeout
    while os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def write_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# Part A: one rank of the all-reduce loop


def run_allreduce(a: argparse.Namespace) -> int:
    import datetime

    import torch
    import torch.distributed as dist

    out = {"part": "allreduce", "rank": a.rank, "world": a.world, "element_size": 4,
           "elements": a.bytes // 4, "iterations": a.iterations, "torch": torch.__version__,
           "nccl": nccl_version(torch), "file": None, "error": None, "baseline": None,
           "steps": [], "final": None, "removed_at_finalize": None, "values_ok": None}
    try:
        # Both ranks on the one GPU: NCCL tells them apart by NCCL_HOSTID (gpu-check.sh).
        torch.cuda.set_device(0)
        host, port = a.master.rsplit(":", 1)
        timeout = datetime.timedelta(seconds=a.timeout)
        store = dist.TCPStore(host, int(port), a.world, a.rank == 0, timeout)
        dist.init_process_group("nccl", store=store, rank=a.rank, world_size=a.world,
                                timeout=timeout)
        barrier = StoreBarrier(store, a.world, "gpu-check")
        dev = torch.device("cuda", 0)
        # One element: creates the communicator (PyTorch does so at the first collective),
        # opens the plugin's file, and on NCCL 2.23-2.26 (API v1-v3, which does not say whether
        # a communicator spans nodes) shows the plugin a network transfer, so that the first
        # large all-reduce below can become the first-coll marker there as on 2.27+. At 4 bytes
        # it is below MLCC_NCCL_MARK_MIN_BYTES and never the marker itself.
        one = torch.ones(1, device=dev)
        dist.all_reduce(one)
        torch.cuda.synchronize()
        barrier()
        path = find_file()
        out["file"] = path
        if path is None:
            raise RuntimeError("the plugin wrote no progress file (not loaded? the communicator "
                               "on one node? see NCCL's log)")
        out["baseline"] = settle(path)
        x = torch.empty(a.bytes // 4, dtype=torch.float32, device=dev)
        ok = True
        for _ in range(a.iterations):
            x.fill_(a.rank + 1)
            t0 = time.monotonic()
            dist.all_reduce(x)
            torch.cuda.synchronize()
            t = time.monotonic() - t0
            barrier()
            r = settle(path)
            r["seconds"] = t
            out["steps"].append(r)
            write_json(a.out, out)  # so far: a rank that hangs later is killed without writing
            ok = ok and bool((x[:1024] == a.world * (a.world + 1) / 2).all().item())
        out["values_ok"] = ok
        out["final"] = settle(path)
        dist.destroy_process_group()
        out["removed_at_finalize"] = wait_removed(path)
    except Exception as e:  # the report says what went wrong; the exit code says that it did
        out["error"] = f"{type(e).__name__}: {e}"
    write_json(a.out, out)
    if out["error"]:
        print(f"gpu_check allreduce rank {a.rank}: {out['error']}", file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------------------------------------
# Part B: one rank of mlcc.torch.job, observed


def run_ddp(a: argparse.Namespace, job_argv: List[str]) -> int:
    import torch
    import torch.distributed as dist

    import mlcc.torch.job as job

    out = {"part": "ddp", "torch": torch.__version__, "nccl": nccl_version(torch), "file": None,
           "error": None, "baseline": None, "steps": [], "final": None,
           "removed_at_finalize": None}
    state = {"barrier": None}

    def read() -> Optional[Dict[str, int]]:
        if state["barrier"] is None:
            state["barrier"] = StoreBarrier(default_store(), dist.get_world_size(), "gpu-check")
        state["barrier"]()
        if out["file"] is None:
            out["file"] = find_file()
        if out["file"] is None:
            raise RuntimeError("the plugin wrote no progress file (not loaded? the communicator "
                               "on one node? see NCCL's log)")
        return settle(out["file"])

    def save() -> None:  # after every reading: a rank that hangs later is killed unwritten
        write_json(a.out, out)

    # After DDP's constructor (its parameter broadcast) and before the first step:
    # job.main calls wait_for_start(a) there.
    orig_wait = job.wait_for_start

    def wait_for_start(args):
        orig_wait(args)
        torch.cuda.synchronize()
        out["baseline"] = read()
        save()

    # After each step: job.main's loop ends every step with torch.cuda.synchronize(); only
    # those calls (by the caller's code object) take a reading.
    orig_sync = torch.cuda.synchronize

    def synchronize(*args, **kwargs):
        r = orig_sync(*args, **kwargs)
        if sys._getframe(1).f_code is job.main.__code__:
            out["steps"].append(read())
            save()
        return r

    # Before the job finalizes NCCL (and the plugin removes its file).
    orig_destroy = dist.destroy_process_group

    def destroy_process_group(*args, **kwargs):
        try:
            orig_sync()
            out["final"] = read()
        except Exception as e:
            out["error"] = f"final reading: {type(e).__name__}: {e}"
        r = orig_destroy(*args, **kwargs)
        out["removed_at_finalize"] = wait_removed(out["file"])
        return r

    job.wait_for_start = wait_for_start
    torch.cuda.synchronize = synchronize
    dist.destroy_process_group = destroy_process_group
    rc = 1
    try:
        rc = job.main(job_argv)
    except BaseException as e:
        out["error"] = out["error"] or f"{type(e).__name__}: {e}"
        raise
    finally:
        out["job_exit"] = rc
        write_json(a.out, out)
    return rc


# ---------------------------------------------------------------------------------------------
# Comparison


def within(value: Optional[int], expected: int, tol: float) -> bool:
    return value is not None and abs(value - expected) <= tol * expected


def fmt(v) -> str:
    return "-" if v is None else str(v)


def table(header: List[str], rows: List[List]) -> str:
    cells = [header] + [[fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  " + "  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells)


def check_common(obs: Dict, problems: List[str]) -> bool:
    if obs.get("error"):
        problems.append(f"run failed: {obs['error']}")
    if not obs.get("file"):
        problems.append("no progress file from the plugin")
        return False
    if obs.get("baseline") is None or not obs.get("steps"):
        problems.append("no readings")
        return False
    return True


def judge_steps(obs: Dict, expected: int, tol: float, problems: List[str], *, iter_from: int,
                last_from: int, in_iter: bool, hook: Optional[List[int]] = None) -> List[List]:
    """One row per step: the plugin's bytes sent during the step (difference of two readings,
    whatever its iteration marks), its own iteration counter, the bytes of its current iteration
    (bytes_sent - iteration_start_sent) and last_iteration_bytes (its previous iteration, what
    mlccd uses). Judged: every step's bytes; from step iter_from on, one plugin iteration per
    step; from last_from on, last_iteration_bytes; with in_iter, the current iteration's bytes;
    with hook, the hook's ring_sent."""
    rows = []
    prev = obs["baseline"]
    it0 = prev["iteration"]
    for i, r in enumerate(obs["steps"], 1):
        delta = r["bytes_sent"] - prev["bytes_sent"]
        cur = r["bytes_sent"] - r["iteration_start_sent"]
        last = r["last_iteration_bytes"]
        h = hook[i - 1] if hook is not None and i - 1 < len(hook) else None
        judged = [("sent", delta)]
        if hook is not None:
            judged.append(("hook", h))
        if in_iter:
            judged.append(("in-iteration", cur))
        if i >= last_from:
            judged.append(("last_iteration", last))
        bad = [name for name, v in judged if not within(v, expected, tol)]
        if i >= iter_from and r["iteration"] - prev["iteration"] != 1:
            bad.append(f"iteration +{r['iteration'] - prev['iteration']}")
        diff = max((abs(v - expected) for _, v in judged if v is not None), default=0)
        if bad:
            problems.append(f"step {i}: {', '.join(bad)}")
        row = [i, r["iteration"] - it0, expected]
        if hook is not None:
            row.append(h)
        row += [delta, cur, last, diff, "ok" if not bad else "MISMATCH: " + ", ".join(bad)]
        rows.append(row)
        prev = r
    return rows


def judge_totals(obs: Dict, expected_total: int, tol: float, problems: List[str]) -> str:
    last = obs["steps"][-1]
    sent = last["bytes_sent"] - obs["baseline"]["bytes_sent"]
    recv = last["bytes_received"] - obs["baseline"]["bytes_received"]
    lines = []
    for what, v in (("sent", sent), ("received", recv)):
        ok = within(v, expected_total, tol)
        if not ok:
            problems.append(f"{what} over all steps {v} B, expected {expected_total} B")
        lines.append(f"  {what} over all steps: plugin {v} B, expected {expected_total} B, "
                     f"diff {v - expected_total:+d} B: {'ok' if ok else 'MISMATCH'}")
    removed = obs.get("removed_at_finalize")
    lines.append("  progress file removed at NCCL finalize: "
                 + {True: "yes", False: "no (informational)", None: "-"}[removed])
    return "\n".join(lines)


def compare_allreduce(files: List[str], tol: float) -> int:
    failed = False
    for path in files:
        obs = load(path)
        if obs is None:
            print(f"\nPart A, {path}: missing (the rank died before writing it)")
            failed |= report(["no readings"])
            continue
        world, n, size = obs["world"], obs["elements"], obs["element_size"]
        expected = nccl_ring(n, size, world).sent
        problems: List[str] = []
        print(f"\nPart A, rank {obs['rank']} of {world}: all_reduce of {n} x fp32 = {n * size} B, "
              f"{obs['iterations']} steps; expected 2(N-1)/N x bytes = {expected} B per step "
              f"(mlcc.ring.nccl_ring); PyTorch {obs['torch']}, NCCL {obs['nccl']}")
        if check_common(obs, problems):
            rows = judge_steps(obs, expected, tol, problems, iter_from=1, last_from=2, in_iter=True)
            print(table(["step", "plugin-iter", "expected", "sent(step)", "in-iteration",
                         "last_iteration", "|diff|", "verdict"], rows))
            print(judge_totals(obs, expected * len(obs["steps"]), tol, problems))
            secs = [r["seconds"] for r in obs["steps"]]
            print(f"  median step {sorted(secs)[len(secs) // 2]:.3f} s")
            if obs.get("values_ok") is False:
                problems.append("the all-reduce computed wrong values")
            if len(obs["steps"]) != obs["iterations"]:
                problems.append(f"{len(obs['steps'])} of {obs['iterations']} steps ran")
        failed |= report(problems)
    return 1 if failed else 0


def first_coll_prediction(buckets: List[List[List[int]]], min_bytes: int) -> List[int]:
    """The plugin's iteration counter after each step, by its first-coll rule applied to the
    buckets DDP reduced (the hook's list): the first all-reduce of >= min_bytes is the marker,
    every later one with the same (elements, element size) starts an iteration (each DDP bucket
    is its own NCCL call, so its own kernel plan)."""
    marker = None
    n, out = 0, []
    for step in buckets:
        for e, z in step:
            if marker is None and e * z >= min_bytes:
                marker = (e, z)
            if marker == (e, z):
                n += 1
        out.append(n)
    return out


def compare_ddp(files: List[str], reports: List[str], tol: float) -> int:
    failed = False
    min_bytes = int(os.environ.get("MLCC_NCCL_MARK_MIN_BYTES") or 65536)
    for path, rpath in zip(files, reports):
        obs = load(path)
        rep = load_report(rpath)
        problems: List[str] = []
        if rep is None:
            print(f"\nPart B, {path}: the job printed no report")
            problems.append("no report from mlcc.torch.job")
            if obs is not None:
                check_common(obs, problems)
            failed |= report(problems)
            continue
        t = rep["torch"]
        world, param_bytes = t["world"], t["param_bytes"]
        expected = nccl_ring(param_bytes, 1, world).sent
        print(f"\nPart B, rank {rep['rank']} of {world}: mlcc.torch.job DDP, {t['layers']} linear "
              f"layers of width {t['width']}, {param_bytes} B of fp32 parameters, "
              f"{rep['iterations']} steps; expected 2(N-1)/N x parameter bytes = {expected} B per "
              f"step; PyTorch {t['version']}, NCCL {obs.get('nccl', '?') if obs else '?'}")
        if not rep.get("verified"):
            problems.append("ranks ended with different parameters (report: verified false)")
        if obs is not None and obs.get("job_exit") not in (0, None):
            problems.append(f"the job exited {obs['job_exit']}")
        layouts = []
        for step in t["buckets"]:
            if step not in layouts:
                layouts.append(step)
        for k, lay in enumerate(layouts):
            steps = [i + 1 for i, s in enumerate(t["buckets"]) if s == lay]
            shown = ", ".join(f"{e}x{z}B" for e, z in lay)
            print(f"  bucket layout {k + 1} (steps {steps[0]}-{steps[-1]}, {len(steps)} steps): "
                  f"{shown}")
        if obs is None:
            problems.append(f"no readings ({path} missing)")
        elif check_common(obs, problems):
            # DDP rebuilds its buckets once, after the first step (Reducer::rebuild_buckets, in
            # gradient-ready order), so the marker the plugin picked in step 1 may sit elsewhere
            # in the layout from step 2 on: from step 3 on every plugin iteration is a full step.
            rows = judge_steps(obs, expected, tol, problems, iter_from=3, last_from=3,
                               in_iter=False, hook=t["ring_sent"])
            print(table(["step", "plugin-iter", "expected", "hook", "sent(step)", "in-iteration",
                         "last_iteration", "|diff|", "verdict"], rows))
            print(judge_totals(obs, expected * len(obs["steps"]), tol, problems))
            pred = first_coll_prediction(t["buckets"], min_bytes)
            seen = [r["iteration"] - obs["baseline"]["iteration"] for r in obs["steps"]]
            print(f"  plugin iterations after each step: {seen}")
            print(f"  first-coll rule on the hook's buckets predicts: {pred}")
            if pred and pred[-1] < len(pred) - 1:
                print("  (the marker, the first bucket of >= "
                      f"{min_bytes} B, does not recur once per step: see the bucket layouts)")
            if len(obs["steps"]) != rep["iterations"]:
                problems.append(f"{len(obs['steps'])} readings for {rep['iterations']} steps")
        if len(t["ring_sent"]) != rep["iterations"]:
            problems.append(f"the hook saw {len(t['ring_sent'])} steps of {rep['iterations']}")
        failed |= report(problems)
    return 1 if failed else 0


def report(problems: List[str]) -> bool:
    if problems:
        print("  FAILED: " + "; ".join(problems))
        return True
    print("  passed")
    return False


def load(path: str) -> Optional[Dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_report(path: str) -> Optional[Dict]:
    """The job's report: its last stdout line that parses as a JSON object."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job_argv: List[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, job_argv = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(prog="gpu_check.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    ar = sub.add_parser("allreduce")
    ar.add_argument("--rank", type=int, required=True)
    ar.add_argument("--world", type=int, required=True)
    ar.add_argument("--master", required=True)
    ar.add_argument("--bytes", type=int, required=True)
    ar.add_argument("--iterations", type=int, required=True)
    ar.add_argument("--timeout", type=float, default=300)
    ar.add_argument("--out", required=True)
    dd = sub.add_parser("ddp")
    dd.add_argument("--out", required=True)
    cp = sub.add_parser("compare")
    cp.add_argument("part", choices=["allreduce", "ddp"])
    cp.add_argument("files", nargs="*")
    cp.add_argument("--reports", nargs="*", default=[])
    cp.add_argument("--tol", type=float,
                    default=float(os.environ.get("GPU_CHECK_TOL") or DEFAULT_TOL))
    a = p.parse_args(argv)
    if a.cmd == "allreduce":
        return run_allreduce(a)
    if a.cmd == "ddp":
        return run_ddp(a, job_argv)
    if a.part == "ddp":
        return compare_ddp(a.files, a.reports, a.tol)
    return compare_allreduce(a.files, a.tol)


if __name__ == "__main__":
    sys.exit(main())
