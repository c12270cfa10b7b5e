"""Bytes a rank of a ring all-reduce moves, as the libraries move them.

``gloo_ring`` follows Gloo's ``allreduce`` ring (gloo/allreduce.cc, the ``ring`` algorithm
PyTorch's ``ProcessGroupGloo`` runs for CPU tensors): the buffer is cut into ``world × s``
segments of at most 1 MiB (``kMaxSegmentSize``), at least two per rank; rank r reduce-scatters
by sending every chunk but its own to rank r−1, then all-gathers by sending every chunk but
rank r−1's. A segment past the buffer's end is short or empty, so the exact count differs from
2(N−1)/N × bytes by up to a segment's rounding. ``nccl_ring`` is the textbook 2(N−1)/N × bytes:
NCCL's own split depends on its channels and protocol, which its profiler plugin sees and this
hook does not (use the plugin where exact NCCL counts matter).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

GLOO_MAX_SEGMENT_BYTES = 1024 * 1024


class RingBytes(NamedTuple):
    sent: int
    received: int


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


@lru_cache(maxsize=4096)
def gloo_ring(
    elements: int,
    element_size: int,
    world: int,
    rank: int,
    max_segment_bytes: int = GLOO_MAX_SEGMENT_BYTES,
) -> RingBytes:
    """Payload bytes rank ``rank`` of ``world`` sends to rank−1 and receives from rank+1 in
    one Gloo ring all-reduce of ``elements`` elements of ``element_size`` bytes."""
    if world < 2 or elements <= 0:
        return RingBytes(0, 0)
    if element_size <= 0 or not 0 <= rank < world:
        raise ValueError(f"element size {element_size}, rank {rank} of {world}")
    total = elements * element_size
    max_seg = element_size * max(1, max_segment_bytes // element_size)
    segments = _round_up(max(-(-total // max_seg), 2 * world), world)
    per_rank = segments // world
    seg = _round_up(-(-total // segments), element_size)

    def length(index: int) -> int:
        return min(seg, max(0, total - (index % segments) * seg))

    steps = range(segments - per_rank)
    sent = sum(length((rank + 1) * per_rank + i) for i in steps)  # reduce-scatter
    sent += sum(length(rank * per_rank + i) for i in steps)  # all-gather
    received = sum(length((rank + 2) * per_rank + i) for i in steps)
    received += sum(length((rank + 1) * per_rank + i) for i in steps)
    return RingBytes(sent, received)


def nccl_ring(elements: int, element_size: int, world: int) -> RingBytes:
    """2(N−1)/N × the buffer, each way."""
    if world < 2 or elements <= 0:
        return RingBytes(0, 0)
    b = 2 * (world - 1) * elements * element_size // world
    return RingBytes(b, b)


def ring_bytes(backend: str, elements: int, element_size: int, world: int, rank: int) -> RingBytes:
    """What one all-reduce moves for ``backend`` (``"gloo"`` exactly, else the textbook ring)."""
    if backend == "gloo":
        return gloo_ring(elements, element_size, world, rank)
    return nccl_ring(elements, element_size, world)
