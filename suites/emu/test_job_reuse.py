"""Job files are reused across launches (core/runtime/emu/job.py): a reused file must be
byte for byte what a new file would be, whatever the last launch wrote into it (its
buffers, the red zones past their ends, the gaps before them)."""

import os

import numpy as np
import pytest

from core.runtime.emu import job

LAYOUT = dict(schedule="random", checks=7, seed=11, workers=2, stack_bytes=1 << 16,
              max_findings=64)


def _payloads(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, n, dtype=np.uint8) for n in (1000, 70_000, 4096)]


@pytest.fixture(autouse=True)
def _no_idle_files():
    job._shutdown()
    yield
    job._shutdown()


def test_a_released_file_is_reused_and_equals_a_new_one():
    first = job.write_job((3, 1, 1), (64, 1, 1), _payloads(0), **LAYOUT)
    path = first.path
    raw = np.frombuffer(first.mm, dtype=np.uint8)
    # What a kernel writing out of bounds leaves behind: bytes in every red zone, in the
    # gap after the header, and across page boundaries.
    for offset, size in zip(first.offsets, first.sizes):
        raw[offset + size: offset + size + 9000] = 0xAB
        raw[offset - 100: offset] = 0xCD
    raw[job.HEADER.size: job.HEADER.size + 5000] = 0xEF
    raw[-10:] = 0x11
    del raw
    first.release()

    again = job.write_job((5, 1, 1), (32, 1, 1), _payloads(1), **LAYOUT)
    assert again.path == path, "a file of the same layout must be reused"
    fresh = job.write_job((5, 1, 1), (32, 1, 1), _payloads(1), **LAYOUT)  # none idle: new
    assert fresh.path != path
    try:
        assert bytes(again.mm) == bytes(fresh.mm)
        assert bytes(again.mm)[-4096:] == bytes(4096)
    finally:
        again.close()
        fresh.close()


def test_a_file_of_another_layout_is_not_reused():
    first = job.write_job((1, 1, 1), (1, 1, 1), _payloads(0), **LAYOUT)
    path = first.path
    first.release()
    other = job.write_job((1, 1, 1), (1, 1, 1), _payloads(0)[:2], **LAYOUT)
    try:
        assert other.path != path
    finally:
        other.close()


def test_idle_files_are_bounded_and_deleted_at_shutdown(monkeypatch):
    monkeypatch.setattr(job, "MAX_IDLE_FILES", 2)
    files = [job.write_job((1, 1, 1), (1, 1, 1), [np.zeros(n, np.uint8)], **LAYOUT)
             for n in (16, 32, 48)]
    for f in files:
        f.release()
    assert not os.path.exists(files[0].path)  # the least recently released went first
    assert all(os.path.exists(f.path) for f in files[1:])
    job._shutdown()
    assert not any(os.path.exists(f.path) for f in files)
