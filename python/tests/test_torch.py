"""mlcc.torch end to end on this machine: DDP jobs of two ranks over Gloo on loopback, each
rank a `python3 -m mlcc.torch.job` process, their progress files checked against the bytes
Gloo's ring moves and against what their TCP sockets carried."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from mlcc import progress  # noqa: E402
from mlcc.ring import gloo_ring  # noqa: E402

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

# Gloo's TCP transport frames every send with a preamble (gloo/transport/tcp/pair.h: six
# 8-byte fields); allow a little more per segment, and the rendezvous store's and the final
# check's few kilobytes.
PER_SEGMENT_HEADER = 64
FIXED_SLACK = 64 * 1024


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(world, *extra, env=None, iterations=4, timeout=120):
    port = free_port()
    procs = []
    for rank in range(world):
        cmd = ["timeout", "-s", "ABRT", str(timeout - 10), sys.executable, "-X",
               "faulthandler", "-m", "mlcc.torch.job", "--rank", str(rank), "--world",
               str(world), "--master", f"127.0.0.1:{port}", "--iterations", str(iterations),
               "--model-bytes", "3MB", "--bucket-mb", "0.5", "--sample-ms", "20", *extra]
        e = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", **(env or {}))
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=e))
    out = []
    for p in procs:
        o, err = p.communicate(timeout=timeout)
        out.append((p.returncode, o, err))
    return out


def segments(elements, size, world):
    total = elements * size
    n = max(-(-total // 2**20), 2 * world)
    return -(-n // world) * world


@unittest.skipUnless(HAVE_TORCH, "PyTorch is not installed (apt install python3-torch)")
class DdpOverGloo(unittest.TestCase):
    def setUp(self):
        self.shm = tempfile.mkdtemp(prefix="mlcc-py-ddp-")

    def tearDown(self):
        shutil.rmtree(self.shm, ignore_errors=True)

    def env(self, job="ddp-t"):
        return {"MLCC_JOB_ID": job, "MLCC_SHM_DIR": self.shm, "MLCC_TOTAL_ITERATIONS": "4"}

    def reports(self, results):
        reps = []
        for code, out, err in results:
            self.assertEqual(code, 0, err)
            reps.append(json.loads(out.strip().splitlines()[-1]))
        return reps

    def test_the_progress_file_holds_the_bytes_gloos_ring_moves(self):
        reps = self.reports(run_job(2, env=self.env()))
        world = 2
        for rep in reps:
            t = rep["torch"]
            rank = rep["rank"]
            self.assertTrue(rep["verified"], "ranks ended with different parameters")
            self.assertGreaterEqual(len(t["buckets"][-1]), 3, "small buckets: several per step")
            self.assertEqual(len(t["buckets"]), 4)
            per_iter = [sum(gloo_ring(e, z, world, rank).sent for e, z in it)
                        for it in t["buckets"]]
            recv = sum(gloo_ring(e, z, world, rank).received
                       for it in t["buckets"] for e, z in it)
            p = progress.parse(bytes.fromhex(t["progress_hex"]))
            self.assertEqual(
                (p.job_id, p.arch, p.role, p.rank, p.world_size, p.model_bytes,
                 p.total_iterations, p.iteration),
                ("ddp-t", progress.ARCH_ALLREDUCE, progress.ROLE_WORKER, rank, world,
                 t["param_bytes"], 4, 4))
            self.assertEqual(p.bytes_sent, sum(per_iter))
            self.assertEqual(p.bytes_received, recv)
            self.assertEqual(p.last_iteration_bytes, per_iter[-2])
            self.assertEqual(p.iteration_start_sent, sum(per_iter[:-1]))
            # DDP all-reduces every gradient once per step: 2(N-1)/N of the parameters
            self.assertEqual(sum(e * z for e, z in t["buckets"][-1]), t["param_bytes"])
            # what TCP carried: the ring's bytes plus Gloo's framing, within one bucket's headers
            headers = sum(2 * segments(e, z, world) * PER_SEGMENT_HEADER
                          for it in t["buckets"] for e, z in it)
            self.assertGreaterEqual(t["tcp_bytes_acked"], p.bytes_sent)
            self.assertLessEqual(t["tcp_bytes_acked"], p.bytes_sent + headers + FIXED_SLACK)
            self.assertFalse(os.path.exists(os.path.join(
                self.shm, f"mlcc.ddp-t.worker.{rank}.{p.pid}")), "a clean exit removes the file")

    def test_a_wrapped_fp16_hook_counts_half_the_bytes(self):
        reps = self.reports(run_job(2, "--compress", "fp16", env=self.env("ddp-h")))
        for rep in reps:
            t = rep["torch"]
            self.assertTrue(all(z == 2 for it in t["buckets"] for _, z in it))
            p = progress.parse(bytes.fromhex(t["progress_hex"]))
            self.assertAlmostEqual(p.last_iteration_bytes, t["param_bytes"] / 2, delta=4096)

    def test_without_a_progress_directory_training_goes_on(self):
        env = self.env()
        env["MLCC_SHM_DIR"] = os.path.join(self.shm, "missing")
        for code, out, err in run_job(2, env=env):
            self.assertEqual(code, 0, err)
            self.assertEqual(err.count("progress off"), 1, err)
            rep = json.loads(out.strip().splitlines()[-1])
            self.assertTrue(rep["verified"])
            self.assertFalse(rep["progress_file"])

    def test_a_rank_killed_mid_iteration_leaves_a_whole_file_and_the_other_gives_up(self):
        port = free_port()
        env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", **self.env("ddp-k"))
        procs = [subprocess.Popen(
            [sys.executable, "-m", "mlcc.torch.job", "--rank", str(r), "--world", "2",
             "--master", f"127.0.0.1:{port}", "--iterations", "100000", "--model-bytes", "3MB",
             "--timeout", "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            for r in range(2)]
        try:
            victim = None
            deadline = time.time() + 120
            while victim is None and time.time() < deadline:
                for f in os.listdir(self.shm):
                    if f.startswith("mlcc.ddp-k.worker.1."):
                        p = progress.read(os.path.join(self.shm, f))
                        if p.iteration >= 3:
                            victim = f
                time.sleep(0.05)
            self.assertIsNotNone(victim, "rank 1 never reached its third iteration")
            procs[1].send_signal(signal.SIGKILL)
            procs[1].wait(timeout=30)
            # Left behind whole: mlccd reads it, sees its writer gone and drops it
            # (scheduler/tests/cases/monitor.rs: a_file_whose_writer_exits_is_dropped...).
            p = progress.read(os.path.join(self.shm, victim))
            self.assertGreaterEqual(p.iteration, 3)
            self.assertFalse(os.path.exists(f"/proc/{p.pid}/status") and
                             "State:\tZ" not in open(f"/proc/{p.pid}/status").read())
            # the survivor fails its collective within its timeout instead of hanging
            procs[0].wait(timeout=120)
            self.assertNotEqual(procs[0].returncode, 0)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.communicate()


if __name__ == "__main__":
    unittest.main()
