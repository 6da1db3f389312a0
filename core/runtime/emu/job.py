"""The job file: one launch's parameters and buffers, shared with the emulator process.

Layout (kept in sync with `JobHeader` in src/job.h): a 584-byte header, then every
buffer at a page-aligned offset, each followed by a red zone of unmapped-for-use bytes
(at least 64 KiB, and at least the buffer's own size up to 16 MiB) so that an access
past the end of a buffer lands in a red zone, where the checker reports it, instead of in
the next buffer. The file lives in shared memory (/dev/shm where it exists) and is mapped
by both processes, so the kernel's writes are read back without another copy.

Files are reused: a file of the same layout freed by an earlier launch of this process is
taken again (`release`), its pages already allocated, instead of a new file whose every
page the kernel must allocate and zero (most of the Python side of a launch). A reused
file is made byte for byte what a new one would be: the header and the buffers written,
every other byte zero (red zones a kernel wrote into are punched back to holes).
"""

from __future__ import annotations

import atexit
import mmap
import os
import struct
import tempfile
import threading
from dataclasses import dataclass, field

import numpy as np

MAGIC = b"MTJOB02\0"
MAX_BUFFERS = 31
# The header's fields in order, as (name in src/job.h's JobHeader, struct format); packed
# little-endian with no padding, which job.h's static_asserts pin on the C++ side and
# suites/emu/test_job_abi.py compares with these offsets.
FIELDS = (
    ("magic", "8s"), ("grid", "3I"), ("threadgroup", "3I"), ("schedule", "I"),
    ("checks", "I"), ("workers", "I"), ("nbuffers", "I"), ("seed", "Q"),
    ("stack_bytes", "Q"), ("max_findings", "I"), ("barrier_off", "I"),
    ("grid_threads", "3I"),            # the grid in threads if not whole groups, else 0s
    ("reserved", "I"),
    ("buffers", "QQ" * MAX_BUFFERS),   # (offset, size) per buffer
)
HEADER = struct.Struct("<" + "".join(f for _, f in FIELDS))
PAGE = 4096
MIN_RED_ZONE = 64 * 1024
MAX_RED_ZONE = 16 * 1024 * 1024

SCHEDULES = {"forward": 0, "reverse": 1, "random": 2}
CHECKS = {"races": 1, "uninit": 2, "bounds": 4}


def field_offsets() -> dict[str, int]:
    """Byte offset of every header field, from FIELDS."""
    offsets, at = {}, 0
    for name, fmt in FIELDS:
        offsets[name] = at
        at += struct.calcsize("<" + fmt)
    return offsets


def _align(n: int, a: int = PAGE) -> int:
    return (n + a - 1) // a * a


@dataclass
class JobFile:
    path: str
    mm: mmap.mmap
    offsets: list[int]
    sizes: list[int]
    owner: int = field(default_factory=os.getpid)

    def buffer_bytes(self, i: int) -> np.ndarray:
        return np.frombuffer(self.mm, dtype=np.uint8, count=self.sizes[i], offset=self.offsets[i])

    def close(self) -> None:
        """Delete the file now."""
        try:
            self.mm.close()
        finally:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def release(self) -> None:
        """Done with this launch: keep the file for a later launch of the same layout (at
        most MAX_IDLE_FILES kept), else delete it."""
        if self.owner != os.getpid() or not _can_reset:
            self.close()
            return
        evicted = []
        with _idle_lock:
            _idle.append(self)
            while len(_idle) > MAX_IDLE_FILES:
                evicted.append(_idle.pop(0))
        for job in evicted:
            job.close()


MAX_IDLE_FILES = 4
_idle: list[JobFile] = []      # least recently released first
_idle_lock = threading.Lock()
# Red zones are made holes again with MADV_REMOVE (Linux shared memory); without it a file
# is never reused.
_can_reset = hasattr(mmap, "MADV_REMOVE") and hasattr(mmap.mmap, "madvise")


def _take(offsets: list[int], sizes: list[int], total: int) -> JobFile | None:
    with _idle_lock:
        for i in range(len(_idle) - 1, -1, -1):
            job = _idle[i]
            if job.owner == os.getpid() and len(job.mm) == total and job.offsets == offsets \
                    and job.sizes == sizes:
                return _idle.pop(i)
    return None


def _zero(mm: mmap.mmap, start: int, end: int) -> None:
    """Make bytes [start, end) zero: whole pages become holes (no cost where nothing was
    written), partial pages are cleared."""
    first, last = _align(start), end // PAGE * PAGE
    if first >= last:
        np.frombuffer(mm, dtype=np.uint8, count=end - start, offset=start)[:] = 0
        return
    np.frombuffer(mm, dtype=np.uint8, count=first - start, offset=start)[:] = 0
    try:
        mm.madvise(mmap.MADV_REMOVE, first, last - first)
    except OSError:  # a file system that cannot punch holes
        np.frombuffer(mm, dtype=np.uint8, count=last - first, offset=first)[:] = 0
    np.frombuffer(mm, dtype=np.uint8, count=end - last, offset=last)[:] = 0


def _clear_outside_buffers(job: JobFile) -> None:
    at = HEADER.size
    for offset, size in zip(job.offsets, job.sizes):
        _zero(job.mm, at, offset)
        at = offset + size
    _zero(job.mm, at, len(job.mm))


def _shutdown() -> None:
    with _idle_lock:
        jobs = [j for j in _idle if j.owner == os.getpid()]
        _idle.clear()
    for job in jobs:
        job.close()


def _forget_after_fork() -> None:
    # The parent's idle files are mapped shared: a forked child writing into one would
    # write into the parent's. Forget them (the parent still owns and deletes them).
    global _idle_lock
    _idle.clear()
    _idle_lock = threading.Lock()


atexit.register(_shutdown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _shm_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def write_job(grid, threadgroup, payloads: list[np.ndarray], *, schedule: str, checks: int,
              seed: int, workers: int, stack_bytes: int, max_findings: int,
              barrier_off: int = 0, grid_threads=(0, 0, 0)) -> JobFile:
    """The job file holding the header and the bytes of every buffer (a new one, or a
    released one of the same layout made equal to a new one). `barrier_off`: the MSL line
    whose threadgroup_barrier calls the launch skips (0: none); `grid_threads`: the grid in
    threads where its last threadgroups are partial (0s: whole threadgroups)."""
    offsets, sizes = [], []
    end = HEADER.size
    for p in payloads:
        red = min(max(MIN_RED_ZONE, p.nbytes), MAX_RED_ZONE)
        start = _align(end + MIN_RED_ZONE)
        offsets.append(start)
        sizes.append(p.nbytes)
        end = start + p.nbytes + red
    total = _align(end + MIN_RED_ZONE)
    job = _take(offsets, sizes, total)
    if job is not None:
        _clear_outside_buffers(job)
    else:
        fd, path = tempfile.mkstemp(prefix="metaltile-job-", dir=_shm_dir())
        try:
            os.ftruncate(fd, total)
            mm = mmap.mmap(fd, total)
        finally:
            os.close(fd)
        job = JobFile(path, mm, offsets, sizes)
    slots = []
    for i in range(MAX_BUFFERS):
        slots += [offsets[i], sizes[i]] if i < len(payloads) else [0, 0]
    HEADER.pack_into(job.mm, 0, MAGIC, *grid, *threadgroup, SCHEDULES[schedule], checks,
                     workers, len(payloads), seed & (2**64 - 1), stack_bytes, max_findings,
                     barrier_off, *grid_threads, 0, *slots)
    for i, p in enumerate(payloads):
        job.buffer_bytes(i)[:] = p
    return job
