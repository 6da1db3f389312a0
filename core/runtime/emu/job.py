"""The job file: one launch's parameters and buffers, shared with the emulator process.

Layout (kept in sync with `JobHeader` in src/job.h): a 568-byte header, then every
buffer at a page-aligned offset, each followed by a red zone of unmapped-for-use bytes
(at least 64 KiB, and at least the buffer's own size up to 16 MiB) so that an access
past the end of a buffer lands in a red zone, where the checker reports it, instead of in
the next buffer. The file lives in shared memory (/dev/shm where it exists) and is mapped
by both processes, so the kernel's writes are read back without another copy.
"""

from __future__ import annotations

import mmap
import os
import struct
import tempfile
from dataclasses import dataclass

import numpy as np

MAGIC = b"MTJOB01\0"
MAX_BUFFERS = 31
# The header's fields in order, as (name in src/job.h's JobHeader, struct format); packed
# little-endian with no padding, which job.h's static_asserts pin on the C++ side and
# suites/emu/test_job_abi.py compares with these offsets.
FIELDS = (
    ("magic", "8s"), ("grid", "3I"), ("threadgroup", "3I"), ("schedule", "I"),
    ("checks", "I"), ("workers", "I"), ("nbuffers", "I"), ("seed", "Q"),
    ("stack_bytes", "Q"), ("max_findings", "I"), ("reserved", "I"),
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

    def buffer_bytes(self, i: int) -> np.ndarray:
        return np.frombuffer(self.mm, dtype=np.uint8, count=self.sizes[i], offset=self.offsets[i])

    def close(self) -> None:
        try:
            self.mm.close()
        finally:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


def _shm_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def write_job(grid, threadgroup, payloads: list[np.ndarray], *, schedule: str, checks: int,
              seed: int, workers: int, stack_bytes: int, max_findings: int) -> JobFile:
    """Create the job file holding the header and the bytes of every buffer."""
    offsets, sizes = [], []
    end = HEADER.size
    for p in payloads:
        red = min(max(MIN_RED_ZONE, p.nbytes), MAX_RED_ZONE)
        start = _align(end + MIN_RED_ZONE)
        offsets.append(start)
        sizes.append(p.nbytes)
        end = start + p.nbytes + red
    total = _align(end + MIN_RED_ZONE)
    fd, path = tempfile.mkstemp(prefix="metaltile-job-", dir=_shm_dir())
    try:
        os.ftruncate(fd, total)
        mm = mmap.mmap(fd, total)
    finally:
        os.close(fd)
    slots = []
    for i in range(MAX_BUFFERS):
        slots += [offsets[i], sizes[i]] if i < len(payloads) else [0, 0]
    HEADER.pack_into(mm, 0, MAGIC, *grid, *threadgroup, SCHEDULES[schedule], checks, workers,
                     len(payloads), seed & (2**64 - 1), stack_bytes, max_findings, 0, *slots)
    job = JobFile(path, mm, offsets, sizes)
    for i, p in enumerate(payloads):
        job.buffer_bytes(i)[:] = p
    return job
