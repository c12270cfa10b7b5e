"""The progress ABI (``patches/progress/mlcc_progress.h``) from Python.

A training process tells mlccd what it is doing through one 512-byte shared-memory file,
``$MLCC_SHM_DIR/mlcc.<job>.<role>.<rank>.<pid>`` (docs/design.md §9). The C header is the
reference; this module writes and reads the same layout, and ``tests/test_progress.py`` compiles
the header to prove that both agree on every offset and on what a written file holds.

Pure Python (``mmap`` and ``memoryview``), no extension to build:

* every counter is one aligned 8-byte slot of a ``memoryview`` cast to ``"Q"``, which CPython
  stores with one 8-byte ``memcpy`` (a single store on x86-64 and aarch64), so a reader never
  sees half a counter;
* the counters read together (the iteration fields) go under the header's sequence lock, as in
  C: ``seq`` odd while a write is in progress, with a full barrier between the sequence stores
  and the fields (``_fence``: an uncontended ``threading.Lock`` round trip, whose C
  implementation is a full barrier);
* one ``threading.Lock`` serialises this process's writers (DDP runs comm hooks and their
  callbacks on more than one thread).

Nothing here ever raises into the training loop: a file that cannot be created, sized or mapped
gives a single warning and a writer that does nothing.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Optional

MAGIC = b"MLCCPRG1"
ABI_VERSION = 1
HEADER_SIZE = 256
FILE_SIZE = 512
JOB_ID_MAX = 64  # including the NUL
CC_NAME_MAX = 16  # including the NUL

ARCH_UNKNOWN, ARCH_ALLREDUCE, ARCH_PS = 0, 1, 2
ROLE_WORKER, ROLE_SERVER, ROLE_SCHEDULER = 0, 1, 2
DIR_SEND, DIR_RECV = 0, 1

ROLE_NAMES = {ROLE_WORKER: "worker", ROLE_SERVER: "server", ROLE_SCHEDULER: "scheduler"}

# Offsets, as in mlcc_progress.h (the test checks each against the compiled header).
HEADER_OFFSETS = {
    "magic": 0,
    "abi_version": 8,
    "header_size": 12,
    "job_id": 16,
    "arch": 80,
    "role": 84,
    "rank": 88,
    "world_size": 92,
    "model_bytes": 96,
    "pid": 104,
    "file_size": 108,
    "start_time_ns": 112,
    "cc_name": 120,
    "total_iterations": 136,
}
COUNTERS = (
    "seq",
    "bytes_sent",
    "bytes_received",
    "iteration",
    "iteration_start_ns",
    "iteration_start_sent",
    "last_iteration_bytes",
    "last_update_ns",
)
COUNTER_OFFSETS = {name: HEADER_SIZE + 8 * i for i, name in enumerate(COUNTERS)}
_SEQ, _SENT, _RECV, _ITER, _ITER_NS, _ITER_SENT, _LAST_ITER, _UPDATE = range(len(COUNTERS))

_JOB_ID = re.compile(r"[A-Za-z0-9._-]{1,63}")


def valid_job_id(job_id: str) -> bool:
    """A job id goes into a file name and onto the wire: 1-63 of ``[A-Za-z0-9._-]``."""
    return _JOB_ID.fullmatch(job_id) is not None


def parse_arch(s: Optional[str]) -> int:
    return {"allreduce": ARCH_ALLREDUCE, "ring": ARCH_ALLREDUCE, "ps": ARCH_PS}.get(
        s or "", ARCH_UNKNOWN
    )


def now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_REALTIME)


_FENCE = threading.Lock()


def _fence() -> None:
    # An uncontended lock round trip: CPython's lock is a pthread mutex or semaphore, whose
    # operations are full barriers, so stores on either side are not reordered across it.
    with _FENCE:
        pass


def _env_int(name: str) -> int:
    v = os.environ.get(name, "")
    try:
        return max(0, int(v)) if v else 0
    except ValueError:
        return 0


class ProgressWriter:
    """One process's progress file. Use :meth:`open` or :meth:`open_env`; both return a writer
    that does nothing (and say why once) when the file cannot be made."""

    def __init__(self) -> None:
        self.path: Optional[str] = None
        self._map: Optional[mmap.mmap] = None
        self._q: Optional[memoryview] = None
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return self._q is not None

    @classmethod
    def open(
        cls,
        job_id: str,
        *,
        arch: int = ARCH_ALLREDUCE,
        role: int = ROLE_WORKER,
        rank: int = 0,
        world_size: int = 0,
        model_bytes: int = 0,
        total_iterations: int = 0,
        cc_name: str = "",
        directory: Optional[str] = None,
    ) -> "ProgressWriter":
        w = cls()
        try:
            w._create(job_id, arch, role, rank, world_size, model_bytes, total_iterations,
                      cc_name, directory or "/dev/shm")
        except (OSError, ValueError) as e:
            w._drop()
            warnings.warn(f"mlcc: {e}; progress off, training goes on unscheduled",
                          RuntimeWarning, stacklevel=2)
        return w

    @classmethod
    def open_env(
        cls, role: int = ROLE_WORKER, rank: int = 0, *, world_size: int = 0,
        model_bytes: int = 0, arch: Optional[int] = None,
    ) -> "ProgressWriter":
        """Like ``mlcc_progress_open_env``: a no-op writer unless ``MLCC_JOB_ID`` is set. The
        environment (``MLCC_JOB_ARCH``, ``MLCC_WORLD_SIZE``, ``MLCC_MODEL_BYTES``) overrides the
        arguments, which are what the caller knows itself; ``MLCC_TOTAL_ITERATIONS``,
        ``MLCC_CC`` and ``MLCC_SHM_DIR`` are read as in C."""
        job = os.environ.get("MLCC_JOB_ID", "")
        if not job:
            return cls()
        env_arch = os.environ.get("MLCC_JOB_ARCH")
        return cls.open(
            job,
            arch=parse_arch(env_arch) if env_arch else (ARCH_ALLREDUCE if arch is None else arch),
            role=role,
            rank=rank,
            world_size=_env_int("MLCC_WORLD_SIZE") or world_size,
            model_bytes=_env_int("MLCC_MODEL_BYTES") or model_bytes,
            total_iterations=_env_int("MLCC_TOTAL_ITERATIONS"),
            cc_name=os.environ.get("MLCC_CC", ""),
            directory=os.environ.get("MLCC_SHM_DIR") or None,
        )

    def _create(self, job_id, arch, role, rank, world_size, model_bytes, total_iterations,
                cc_name, directory) -> None:
        if not valid_job_id(job_id):
            raise ValueError(f"invalid MLCC_JOB_ID {job_id!r} (1-63 chars of [A-Za-z0-9._-])")
        role_name = ROLE_NAMES.get(role, "unknown")
        path = os.path.join(directory, f"mlcc.{job_id}.{role_name}.{rank}.{os.getpid()}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o640)
        self.path = path
        try:
            os.fchmod(fd, 0o640)  # the umask may have narrowed it; mlccd's group reads
            os.ftruncate(fd, FILE_SIZE)
            self._map = mmap.mmap(fd, FILE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        m = self._map
        m[:] = bytes(FILE_SIZE)
        h = HEADER_OFFSETS
        struct.pack_into("<II", m, h["abi_version"], ABI_VERSION, HEADER_SIZE)
        m[h["job_id"]:h["job_id"] + len(job_id)] = job_id.encode()
        struct.pack_into("<IIII", m, h["arch"], arch, role, rank, world_size)
        struct.pack_into("<QII", m, h["model_bytes"], model_bytes, os.getpid(), FILE_SIZE)
        struct.pack_into("<Q", m, h["start_time_ns"], now_ns())
        cc = cc_name.encode()[: CC_NAME_MAX - 1]
        m[h["cc_name"]:h["cc_name"] + len(cc)] = cc
        struct.pack_into("<Q", m, h["total_iterations"], total_iterations)
        self._q = memoryview(m)[HEADER_SIZE:HEADER_SIZE + 8 * len(COUNTERS)].cast("Q")
        _fence()  # the magic goes last: a reader that sees it sees a complete header
        m[0:8] = MAGIC

    def iteration_begin(self) -> None:
        """Marks the start of a new iteration and closes the previous one's byte count."""
        q = self._q
        if q is None:
            return
        with self._lock:
            t = now_ns()
            q[_SEQ] += 1  # odd: a write is in progress
            _fence()
            sent, it = q[_SENT], q[_ITER]
            if it > 0:
                q[_LAST_ITER] = sent - q[_ITER_SENT]
            q[_ITER] = it + 1
            q[_ITER_NS] = t
            q[_ITER_SENT] = sent
            q[_UPDATE] = t
            _fence()
            q[_SEQ] += 1

    def add(self, direction: int, nbytes: int) -> None:
        """Counts bytes enqueued for sending (``DIR_SEND``) or received (``DIR_RECV``)."""
        q = self._q
        if q is None or nbytes <= 0:
            return
        with self._lock:
            i = _SENT if direction == DIR_SEND else _RECV
            q[i] += int(nbytes)
            q[_UPDATE] = now_ns()

    def close(self) -> None:
        """Unmaps and removes the file: mlccd forgets the process."""
        path = self.path if self._q is not None else None
        self._drop()
        if path:
            try:
                os.unlink(path)
            except OSError:
                pass

    def snapshot(self) -> bytes:
        """The file's bytes as they are now (empty when inactive)."""
        return bytes(self._map) if self._map is not None and self._q is not None else b""

    def _drop(self) -> None:
        with self._lock:
            if self._q is not None:
                self._q.release()
                self._q = None
            if self._map is not None:
                self._map.close()
                self._map = None
        # a half-made file (no magic) is removed, as in C
        if self.path and not self.active:
            try:
                with open(self.path, "rb") as f:
                    head = f.read(8)
                if head != MAGIC:
                    os.unlink(self.path)
            except OSError:
                pass

    def __enter__(self) -> "ProgressWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class Progress:
    """A progress file as a reader sees it."""

    job_id: str
    arch: int
    role: int
    rank: int
    world_size: int
    model_bytes: int
    pid: int
    start_time_ns: int
    cc_name: str
    total_iterations: int
    bytes_sent: int
    bytes_received: int
    iteration: int
    iteration_start_ns: int
    iteration_start_sent: int
    last_iteration_bytes: int
    last_update_ns: int


class ProgressFormatError(ValueError):
    pass


def parse(data: bytes) -> Progress:
    """Reads a file's bytes the way mlccd does (magic, version, sizes, a clean job id), taking
    the iteration fields at an even sequence number."""
    if len(data) != FILE_SIZE:
        raise ProgressFormatError(f"size {len(data)} bytes, expected {FILE_SIZE}")
    if data[:8] != MAGIC:
        raise ProgressFormatError("not an mlcc progress file (bad magic)")
    version, header_size = struct.unpack_from("<II", data, 8)
    if version != ABI_VERSION or header_size != HEADER_SIZE:
        raise ProgressFormatError(f"ABI version {version}, header {header_size}: unsupported")
    h = HEADER_OFFSETS
    job = data[h["job_id"]:h["job_id"] + JOB_ID_MAX].split(b"\0", 1)[0].decode("utf-8", "replace")
    if not valid_job_id(job):
        raise ProgressFormatError(f"job id {job!r} is not a clean name")
    arch, role, rank, world = struct.unpack_from("<IIII", data, h["arch"])
    model_bytes, pid, _size = struct.unpack_from("<QII", data, h["model_bytes"])
    (start,) = struct.unpack_from("<Q", data, h["start_time_ns"])
    cc = data[h["cc_name"]:h["cc_name"] + CC_NAME_MAX].split(b"\0", 1)[0].decode("ascii", "replace")
    (total,) = struct.unpack_from("<Q", data, h["total_iterations"])
    c = struct.unpack_from(f"<{len(COUNTERS)}Q", data, HEADER_SIZE)
    if c[_SEQ] & 1:
        raise ProgressFormatError("caught inside an update (odd sequence number)")
    return Progress(job, arch, role, rank, world, model_bytes, pid, start, cc, total,
                    *c[_SENT:])


def read(path: str, retries: int = 1000) -> Progress:
    """Reads one file as mlccd does: the header once, the counters under the sequence lock
    (seq even and unchanged across the read), retrying while the writer is inside an update."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size != FILE_SIZE:
            raise ProgressFormatError(f"size {size} bytes, expected {FILE_SIZE}")
        m = mmap.mmap(f.fileno(), FILE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
    try:
        q = memoryview(m)[HEADER_SIZE:HEADER_SIZE + 8 * len(COUNTERS)].cast("Q")
        try:
            for _ in range(max(1, retries)):
                s1 = q[_SEQ]
                _fence()
                counters = q.tolist()
                _fence()
                if s1 % 2 == 0 and q[_SEQ] == s1:
                    break
                time.sleep(0.00001)
            else:
                raise ProgressFormatError("writer stayed inside an update")
        finally:
            q.release()
        data = bytearray(m[:HEADER_SIZE]) + bytes(8 * len(COUNTERS))
        struct.pack_into(f"<{len(COUNTERS)}Q", data, HEADER_SIZE, *([0] + counters[1:]))
        data += bytes(FILE_SIZE - len(data))
        return parse(bytes(data))
    finally:
        m.close()
