"""A synthetic PyTorch DDP job: wide linear layers on random data, light compute, heavy
gradients. ``mlcc-testbed`` runs it as its ``torch-ddp`` job kind; it is also the quickest way
to see mlcc schedule a real DDP job:

    python3 -m mlcc.torch.job --rank 0 --world 2 --master 10.0.0.1:29500 --model-bytes 20MB

Each rank prints one JSON report on stdout when it ends (the shape of ``mlcc-trainer``'s, with
a ``torch`` section: buckets per iteration, the bytes the hook counted, what the process's TCP
sockets sent while it trained, and its progress file as it stood before closing; and, on the
CPU, ``phases_s``: each iteration's forward, backward-with-all-reduces and optimizer seconds).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import socket
import struct
import sys
import threading
import time
from typing import Dict, List, Optional, Tuple

# struct tcp_info (linux/tcp.h): tcpi_unacked (segments in flight) and tcpi_bytes_acked
TCP_INFO_UNACKED = 24
TCP_INFO_BYTES_ACKED = 120
TCP_INFO_LEN = 216


def parse_bytes(s: str) -> int:
    units = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20,
             "GIB": 2**30}
    t = s.strip().upper()
    num = t.rstrip("KMGIB")
    unit = t[len(num):]
    if unit not in units:
        raise argparse.ArgumentTypeError(f"{s!r}: expected bytes such as 20MB or 1048576")
    try:
        v = float(num) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r}: expected bytes such as 20MB or 1048576")
    if not (v >= 1 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"{s!r}: must be at least one byte")
    return int(v)


def positive(s: str) -> int:
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{s}: must be at least 1")
    return v


def arguments(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python3 -m mlcc.torch.job",
        description="A synthetic DDP job (wide linear layers on random data) whose gradients "
        "DDP all-reduces through mlcc's progress hook. One process per rank.",
    )
    p.add_argument("--job", default=os.environ.get("MLCC_JOB_ID", "ddp"), help="job name")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=positive, required=True, help="ranks in the job")
    p.add_argument("--master", required=True, help="host:port of rank 0's rendezvous store")
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    p.add_argument("--model-bytes", type=parse_bytes, default=parse_bytes("20MB"),
                   help="gradient bytes per iteration (fp32 parameters); default 20MB")
    p.add_argument("--layers", type=positive, default=4, help="linear layers (default 4)")
    p.add_argument("--batch", type=positive, default=8, help="samples per rank and step")
    p.add_argument("--iterations", type=positive, default=20)
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
    p.add_argument("--threads", type=positive, default=1, help="torch intra-op threads")
    p.add_argument("--timeout", type=float, default=600.0, help="collective timeout (s)")
    p.add_argument("--no-hook", action="store_true", help="plain DDP, no mlcc hook")
    p.add_argument("--compress", choices=["none", "fp16"], default="none",
                   help="fp16: wrap PyTorch's fp16_compress_hook (half the bytes on the wire)")
    p.add_argument("--sample-ms", type=float, default=100.0,
                   help="how often to sample the sockets' acknowledged bytes (0: never)")
    p.add_argument("--cc", help="put the job's TCP sockets on this congestion control once "
                   "they are connected (as root any available one; without it, the host's "
                   "default, or what a cgroup's sock_ops program sets)")
    p.add_argument("--ready-file", help="created once the job is set up (a launcher's barrier)")
    p.add_argument("--start-file", help="wait for this file, holding a Unix start time, and "
                   "begin training --arrival-s after that time")
    p.add_argument("--arrival-s", type=float, default=0.0)
    a = p.parse_args(argv)
    if not 0 <= a.rank < a.world:
        p.error(f"--rank {a.rank} is not within 0..{a.world - 1}")
    host, _, port = a.master.rpartition(":")
    if not host or not port.isdigit():
        p.error(f"--master {a.master!r}: expected host:port")
    if not a.bucket_mb > 0:
        p.error("--bucket-mb must be above zero")
    return a


def remote_tcp_sockets() -> List[socket.socket]:
    """Duplicates of this process's connected TCP sockets, one per socket (a socket open under
    several descriptors, such as the sampler's own duplicates, counts once)."""
    out = []
    seen = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
            if not link.startswith("socket:") or link in seen:
                continue
            seen.add(link)
            s = socket.fromfd(int(fd), socket.AF_INET, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            if s.type == socket.SOCK_STREAM and s.getpeername():
                out.append(s)
                continue
        except OSError:
            pass
        s.close()
    return out


def acked_bytes(socks: List[socket.socket]) -> int:
    total = 0
    for s in socks:
        try:
            info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
            total += struct.unpack_from("<Q", info, TCP_INFO_BYTES_ACKED)[0]
        except OSError:
            pass
    return total


def tcp_acked(settle_s: float = 0.0) -> int:
    """Payload bytes of this process's TCP sockets the peers have acknowledged, read once no
    segment is in flight (or after ``settle_s``).

    Acknowledged, not sent: tcpi_bytes_sent also counts a segment the local qdisc dropped and
    TCP then sent again as new data, which no retransmission counter subtracts."""
    socks = remote_tcp_sockets()
    deadline = time.time() + settle_s
    while time.time() < deadline and any(in_flight(s) for s in socks):
        time.sleep(0.005)
    total = acked_bytes(socks)
    for s in socks:
        s.close()
    return total


def in_flight(s: socket.socket) -> bool:
    try:
        info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
        return struct.unpack_from("<I", info, TCP_INFO_UNACKED)[0] > 0
    except OSError:
        return False


def set_congestion_control(name: str) -> None:
    """Puts every connected TCP socket of this process on `name`: Gloo connects its full mesh
    while the process group is built, before any training traffic."""
    socks = remote_tcp_sockets()
    try:
        for s in socks:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
    except OSError as e:
        raise SystemExit(f"mlcc.torch.job: TCP_CONGESTION={name}: {e}")
    finally:
        for s in socks:
            s.close()


def congestion_control(socks: List[socket.socket]) -> str:
    for s in socks:
        try:
            return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()
        except OSError:
            continue
    return ""


class AckSampler(threading.Thread):
    """(Unix time, bytes acknowledged) of the job's sockets every ``every`` seconds."""

    def __init__(self, every: float) -> None:
        super().__init__(daemon=True)
        self.every = every
        self.samples: List[Tuple[float, int]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        socks: List[socket.socket] = []
        refresh = 0.0
        while not self.halt.wait(self.every):
            now = time.time()
            if now >= refresh:  # Gloo's connections are made once; look again now and then
                for s in socks:
                    s.close()
                socks, refresh = remote_tcp_sockets(), now + 2.0
            self.samples.append((now, acked_bytes(socks)))
        for s in socks:
            s.close()


_KEEP_ALIVE: List[object] = []


def width_for(model_bytes: int, layers: int) -> int:
    """The width of square linear layers (weights and bias, fp32) whose parameters come
    closest to ``model_bytes``: layers × (w² + w) × 4 bytes."""
    return max(1, round((math.sqrt(1 + model_bytes / layers) - 1) / 2))


def wait_for_start(a: argparse.Namespace) -> None:
    """The launcher's barrier: importing PyTorch and meeting the other ranks takes seconds on
    a loaded machine, which is not what a job's completion time should measure."""
    if a.ready_file:
        with open(a.ready_file, "w") as f:
            f.write(f"{os.getpid()}\n")
    if not a.start_file:
        return
    while True:
        try:
            with open(a.start_file) as f:
                t0 = float(f.read().strip())
            break
        except (OSError, ValueError):
            time.sleep(0.01)
    delay = t0 + a.arrival_s - time.time()
    if delay > 0:
        time.sleep(delay)


def main(argv: Optional[List[str]] = None) -> int:
    a = arguments(argv)
    start = time.time()
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    import mlcc.torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)  # the same initial model on every rank (DDP broadcasts it anyway)
    dist.init_process_group(a.backend, init_method=f"tcp://{a.master}", rank=a.rank,
                            world_size=a.world, timeout=datetime.timedelta(seconds=a.timeout))
    if a.cc:
        set_congestion_control(a.cc)
    device = torch.device("cuda", 0) if a.backend == "nccl" else torch.device("cpu")
    w = width_for(a.model_bytes, a.layers)
    layers: List[torch.nn.Module] = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(w, w), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers[:-1]).to(device)
    model = DDP(net, bucket_cap_mb=a.bucket_mb)
    if a.no_hook:
        state = None
        if a.compress == "fp16":
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    else:
        inner = default_hooks.fp16_compress_hook if a.compress == "fp16" else \
            default_hooks.allreduce_hook
        state = mlcc.torch.register(model, inner=inner)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cpu").manual_seed(a.rank)
    wait_for_start(a)
    sampler = AckSampler(a.sample_ms / 1000) if a.sample_ms > 0 else None
    if sampler:
        sampler.start()
    times: List[float] = []
    # When each iteration ended (Unix s): which of its own iterations a rank was in when
    # mlccd's learner first read it.
    ends: List[float] = []
    # Per iteration (s): forward, backward (with the all-reduces DDP overlaps with it: it
    # returns once every bucket is reduced), optimizer step. On a GPU these would be launch
    # times, so only the CPU's are kept.
    phases: List[Tuple[float, float, float]] = []
    acked_before = tcp_acked(settle_s=2.0)
    t_first = time.time()
    for _ in range(a.iterations):
        t0 = time.time()
        x = torch.randn(a.batch, w, generator=gen).to(device)
        loss = model(x).pow(2).mean()
        t_forward = time.time()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t_backward = time.time()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        t_end = time.time()
        times.append(t_end - t0)
        ends.append(t_end)
        if device.type == "cpu":
            phases.append((t_forward - t0, t_backward - t_forward, t_end - t_backward))
    end = time.time()
    report = finish(a, dist, torch, model, state, sampler, times, start, end, t_first, w,
                    acked_before)
    report["phases_s"] = phases
    report["iteration_end_unix_s"] = ends
    print(json.dumps(report), flush=True)
    # Kept alive past main(): freeing DDP, and with it Gloo's process group, after
    # destroy_process_group hung about one exit in ten with PyTorch 1.13 (Gloo's device thread
    # spinning in the kernel, the main thread in the destructor). Run as a script, the process
    # then leaves without finalising (os._exit below); everything of ours is closed by now.
    _KEEP_ALIVE.append((model, opt, state))
    return 0 if report["verified"] else 1


def finish(a, dist, torch, model, state, sampler, times, start, end, t_first, w,
           acked_before: int) -> Dict:
    # Every rank must hold the same parameters after the last step: DDP averaged them all.
    # The sums stay on the parameters' device: the NCCL backend has no CPU tensors ("No backend
    # type associated with device type cpu").
    sums = torch.stack([p.detach().double().sum() for p in model.parameters()])
    hi, lo = sums.clone(), sums.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    verified = bool(torch.equal(hi, lo))
    # The peers have received every training byte by now; once nothing is in flight they
    # have acknowledged them too (with the check's few hundred bytes).
    tcp_training = tcp_acked(settle_s=2.0) - acked_before
    if sampler:
        sampler.halt.set()
        sampler.join()
    socks = remote_tcp_sockets()
    cc = congestion_control(socks)
    for s in socks:
        s.close()
    buckets = state.buckets if state else []
    ring_sent = [sum(ring(state, e, z).sent for e, z in it) for it in buckets] if state else []
    snapshot = state.writer.snapshot() if state else b""
    sent = sum(ring_sent)
    if state:
        state.close()
    dist.destroy_process_group()
    return {
        "job": a.job, "role": "worker", "rank": a.rank, "iterations": a.iterations,
        "iteration_s": times, "jct_s": end - t_first, "bytes_sent": sent,
        "bytes_verified": sent if verified else 0, "progress_file": bool(snapshot),
        "cc": cc, "acked": sampler.samples if sampler else [], "verified": verified,
        "pid": os.getpid(),
        "torch": {
            "version": torch.__version__, "backend": a.backend, "world": a.world,
            "width": w, "layers": a.layers,
            "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "buckets": buckets, "ring_sent": ring_sent,
            "startup_s": t_first - start, "progress_hex": snapshot.hex(),
            "tcp_bytes_acked": tcp_training,
        },
    }


def ring(state, elements: int, size: int):
    from mlcc.ring import ring_bytes

    return ring_bytes(state.backend, elements, size, state.world, state.rank)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # see _KEEP_ALIVE
