"""The DDP communication hook (see :mod:`mlcc.torch`)."""

import os
import threading
import warnings
from typing import Any, Callable, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from .. import progress
from ..ring import ring_bytes

# (elements, bytes per element) one all-reduce of a bucket puts on the wire.
Wire = Callable[[Any], Tuple[int, int]]


def _same(bucket) -> Tuple[int, int]:
    b = bucket.buffer()
    return b.numel(), b.element_size()


def _half(bucket) -> Tuple[int, int]:
    return bucket.buffer().numel(), 2


_KNOWN_WIRES = {
    default_hooks.allreduce_hook: _same,
    default_hooks.fp16_compress_hook: _half,
}
if hasattr(default_hooks, "bf16_compress_hook"):
    _KNOWN_WIRES[default_hooks.bf16_compress_hook] = _half


def wire_of(inner: Callable) -> Optional[Wire]:
    """What a known hook puts on the wire per bucket (``None`` for one it does not know)."""
    return _KNOWN_WIRES.get(inner)


def _plugin_owns_progress(backend: str) -> bool:
    # NCCL's profiler plugin (patches/nccl/profiler) writes this process's progress file
    # itself; a second file for the same process would count its bytes twice.
    return backend == "nccl" and "mlcc" in os.environ.get("NCCL_PROFILER_PLUGIN", "")


class ProgressState:
    """What :func:`progress_hook` needs: the process group, the hook it wraps, and the
    progress writer. Build it with :func:`register`."""

    def __init__(
        self,
        process_group: Optional[dist.ProcessGroup] = None,
        *,
        inner: Callable = default_hooks.allreduce_hook,
        inner_state: Any = None,
        wire: Optional[Wire] = None,
        writer: Optional[progress.ProgressWriter] = None,
        model_bytes: int = 0,
    ) -> None:
        group = process_group if process_group is not None else dist.group.WORLD
        self.process_group = process_group
        self.backend = str(dist.get_backend(group))
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.inner = inner
        self.inner_state = process_group if inner_state is None else inner_state
        self.wire = wire or wire_of(inner)
        if self.wire is None:
            raise ValueError(
                f"mlcc: hook {getattr(inner, '__name__', inner)!r} is not one mlcc knows; pass "
                "wire=lambda bucket: (elements, bytes_per_element) it puts on the wire"
            )
        if writer is None:
            writer = self._open_writer(model_bytes)
        self.writer = writer
        self._first = True
        self._lock = threading.Lock()
        # per iteration, the (elements, bytes per element) of each bucket: for tests and reports
        self.buckets: List[List[Tuple[int, int]]] = []

    def _open_writer(self, model_bytes: int) -> progress.ProgressWriter:
        if _plugin_owns_progress(self.backend):
            return progress.ProgressWriter()
        if not os.environ.get("MLCC_JOB_ID"):
            warnings.warn("mlcc: MLCC_JOB_ID is not set; progress off, training goes on "
                          "unscheduled", RuntimeWarning, stacklevel=3)
            return progress.ProgressWriter()
        return progress.ProgressWriter.open_env(
            progress.ROLE_WORKER, self.rank, world_size=self.world, model_bytes=model_bytes,
            arch=progress.ARCH_ALLREDUCE,
        )

    def on_bucket(self, bucket) -> int:
        """Counts a bucket handed to the all-reduce; returns the bytes it will receive."""
        elements, size = self.wire(bucket)
        with self._lock:
            if self._first:
                self.writer.iteration_begin()
                self.buckets.append([])
            self._first = bool(bucket.is_last())
            if self.buckets:
                self.buckets[-1].append((elements, size))
        moved = ring_bytes(self.backend, elements, size, self.world, self.rank)
        self.writer.add(progress.DIR_SEND, moved.sent)
        return moved.received

    def close(self) -> None:
        self.writer.close()


def progress_hook(
    state: ProgressState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """Counts the bucket, then runs the wrapped hook (the plain all-reduce by default)."""
    try:
        received = state.on_bucket(bucket)
    except Exception as e:  # never fail a training step over bookkeeping
        _warn_once(state, e)
        received = 0
    fut = state.inner(state.inner_state, bucket)
    if received <= 0 or not state.writer.active:
        return fut
    writer = state.writer

    def arrived(f: torch.futures.Future):
        value = f.value()
        writer.add(progress.DIR_RECV, received)
        return value

    return fut.then(arrived)


def _warn_once(state: ProgressState, e: Exception) -> None:
    if not getattr(state, "_warned", False):
        state._warned = True
        warnings.warn(f"mlcc: progress accounting failed ({e}); training goes on",
                      RuntimeWarning, stacklevel=3)


def register(
    model: "torch.nn.parallel.DistributedDataParallel",
    *,
    process_group: Optional[dist.ProcessGroup] = None,
    inner: Callable = default_hooks.allreduce_hook,
    inner_state: Any = None,
    wire: Optional[Wire] = None,
) -> ProgressState:
    """Registers :func:`progress_hook` on ``model`` and returns its state (``state.close()``
    removes the progress file; it is also removed when the process exits cleanly)."""
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    state = ProgressState(process_group, inner=inner, inner_state=inner_state, wire=wire,
                          model_bytes=model_bytes)
    model.register_comm_hook(state, progress_hook)
    import atexit

    atexit.register(state.close)
    return state
