"""The device race checker's granules (core/runtime/emu/src/checker.cpp).

The shadow of device memory is kept per 8-byte granule: one writer and one reader word,
under the granule's lock, while every access covered the whole granule (a `float2`, a
`half4`), per-byte words once a part of it was touched. None of that may show: a
whole-granule access must be reported exactly as the per-byte rule reports it (the first
conflicting byte, the other access), a part of a granule must conflict only where the bytes
overlap, and two workers touching one whole granule must always see each other, however
their accesses interleave.
"""

from __future__ import annotations

import numpy as np
import pytest

from emucase import clean, line_of, run

# Thread 0 and thread 32 of one threadgroup, or thread 0 of groups 0 and 1.
IN_GROUP = r"""
kernel void k(device float* x [[buffer(0)]], device float* res [[buffer(1)]],
              uint tid [[thread_index_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {
  if (tid == 0) { FIRST }
  res[g * 64 + tid] = 0.0f;
  if (tid == 32) { SECOND }
}
"""
ACROSS_GROUPS = r"""
kernel void k(device float* x [[buffer(0)]], device float* res [[buffer(1)]],
              uint tid [[thread_index_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {
  if (g == 0 && tid == 0) { FIRST }
  res[g * 64 + tid] = 0.0f;
  if (g == 1 && tid == 0) { SECOND }
}
"""
SCOPES = {"in a threadgroup": (IN_GROUP, 1, 32, "another thread of the threadgroup"),
          "across threadgroups": (ACROSS_GROUPS, 2, 0, "another threadgroup")}

# Whole-granule accesses (8 bytes) and accesses to one half of the granule (bytes 4..7).
WRITE_WHOLE = "*(device float2*)(x) = float2(7.0f, 8.0f);"
READ_WHOLE = "const float2 v = *(device float2*)(x); res[g * 64 + tid] = v.x + v.y;"
WRITE_HIGH = "x[1] = 9.0f;"
READ_HIGH = "res[g * 64 + tid] = x[1] * 2.0f;"
WRITE_LOW = "x[0] = 5.0f;"


def _launch(template: str, grid: int, first: str, second: str, **kw):
    src = template.replace("FIRST", first).replace("SECOND", second)
    x = np.zeros(64, np.float32)
    res = np.zeros(64 * grid, np.float32)
    return src, run(src, "k", grid, 64, x, res, workers=1, **kw), x


def _kind(statement: str) -> str:
    return "write" if statement in (WRITE_WHOLE, WRITE_HIGH, WRITE_LOW) else "read"


@pytest.mark.parametrize("scope", list(SCOPES))
@pytest.mark.parametrize("first, second, byte", [
    (WRITE_WHOLE, READ_WHOLE, 0), (READ_WHOLE, WRITE_WHOLE, 0), (WRITE_WHOLE, WRITE_WHOLE, 0),
    # A part of a granule written or read whole conflicts at the first byte both touch.
    (WRITE_WHOLE, READ_HIGH, 4), (READ_WHOLE, WRITE_HIGH, 4), (WRITE_HIGH, READ_WHOLE, 4),
    (WRITE_HIGH, WRITE_WHOLE, 4), (READ_HIGH, WRITE_WHOLE, 4),
], ids=["RAW", "WAR", "WAW", "whole-W/high-R", "whole-R/high-W", "high-W/whole-R",
        "high-W/whole-W", "high-R/whole-W"])
def test_a_conflict_is_reported_at_its_first_common_byte(scope, first, second, byte):
    template, grid, thread, other = SCOPES[scope]
    src, res, _ = _launch(template, grid, first, second)
    assert len(res.findings) == 1, "\n".join(map(str, res.findings))
    (f,) = res.findings
    assert (f.kind, f.address_space, f.buffer_or_offset) == ("race", "device", f"buffer 0 ('x'), byte {byte}")
    assert f.line == line_of(template, "{ SECOND }")
    assert f.group == ((1, 0, 0) if grid == 2 else (0, 0, 0)) and f.thread == (thread, 0, 0)
    assert f.detail.startswith(f"{_kind(second)} conflicts with a {_kind(first)} by {other}"), f.detail


@pytest.mark.parametrize("scope", list(SCOPES))
def test_the_two_halves_of_a_granule_do_not_conflict(scope):
    template, grid, _, _ = SCOPES[scope]
    src = template.replace("FIRST", WRITE_LOW).replace("SECOND", WRITE_HIGH)
    x = np.zeros(64, np.float32)
    clean(src, "k", grid, 64, x, np.zeros(64 * grid, np.float32), workers=1)
    assert x[:2].tolist() == [5.0, 9.0]


def test_a_granule_written_in_halves_reads_whole_after_a_device_barrier():
    src = r"""
kernel void k(device float* x [[buffer(0)]], device float* res [[buffer(1)]],
              uint tid [[thread_index_in_threadgroup]]) {
  if (tid == 0) x[0] = 5.0f;
  if (tid == 32) x[1] = 9.0f;
  threadgroup_barrier(mem_flags::mem_device);
  if (tid == 63) { const float2 v = *(device float2*)(x); res[0] = v.x + v.y; }
}
"""
    res = np.zeros(1, np.float32)
    clean(src, "k", 1, 64, np.zeros(2, np.float32), res)
    assert res[0] == 14.0


def test_a_whole_granule_read_by_many_groups_then_written_is_a_race():
    # Every group reads the granule (it becomes read-shared and later reads skip the shadow);
    # a write of it by the last group must still meet those reads.
    src = r"""
kernel void k(device half* x [[buffer(0)]], device float* res [[buffer(1)]],
              uint tid [[thread_index_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {
  const half4 v = *(device half4*)(x);
  res[g * 32 + tid] = float(v.x + v.y + v.z + v.w);
  if (g == 7 && tid == 31) *(device half4*)(x) = half4(1.0h);
}
"""
    res = run(src, "k", 8, 32, np.zeros(4, np.float16), np.zeros(256, np.float32), workers=1)
    (f,) = res.findings
    assert (f.kind, f.buffer_or_offset, f.group, f.thread) == (
        "race", "buffer 0 ('x'), byte 0", (7, 0, 0), (31, 0, 0))
    assert f.line == line_of(src, "= half4(1.0h)")
    assert f.detail.startswith("write conflicts with a read by another threadgroup")


# Two workers, every group on one granule: each access after the first meets the one
# before it under the granule's lock, so the counts are exact whatever the interleaving.
def test_every_group_writing_one_granule_is_caught_every_time():
    src = r"""
kernel void k(device half* x [[buffer(0)]], uint tid [[thread_index_in_threadgroup]],
              uint g [[threadgroup_position_in_grid]]) {
  if (tid == 0) *(device half4*)(x) = half4(half(g));
}
"""
    for _ in range(3):
        res = run(src, "k", 64, 32, np.zeros(4, np.float16), workers=2)
        (f,) = res.findings
        assert (f.kind, f.buffer_or_offset, f.count) == ("race", "buffer 0 ('x'), byte 0", 63)


def test_each_granule_written_by_one_group_and_read_by_another_is_one_race():
    # Group g writes granule g and reads granule g + 1: 63 granules are each written by one
    # group and read by another, in either order, so the two statements report 63 in all.
    src = r"""
kernel void k(device half* x [[buffer(0)]], device float* res [[buffer(1)]],
              uint tid [[thread_index_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {
  if (tid == 0) *(device half4*)(x + 4 * g) = half4(half(g));
  if (tid == 1 && g < 63) res[g] = float((*(device half4*)(x + 4 * (g + 1))).x);
}
"""
    for _ in range(3):
        res = run(src, "k", 64, 32, np.zeros(256, np.float16), np.zeros(64, np.float32),
                  workers=2)
        assert {f.kind for f in res.findings} == {"race"}
        assert sum(f.count for f in res.findings) == 63, "\n".join(map(str, res.findings))


def test_an_atomic_on_a_granule_written_whole_meets_the_plain_write():
    src = r"""
kernel void k(device float* x [[buffer(0)]], uint tid [[thread_index_in_threadgroup]],
              uint g [[threadgroup_position_in_grid]]) {
  if (g == 0 && tid == 0) *(device float2*)(x) = float2(1.0f, 2.0f);
  if (g == 1 && tid == 0) atomic_fetch_add_explicit((device atomic_float*)(x + 1), 1.0f, memory_order_relaxed);
}
"""
    res = run(src, "k", 2, 32, np.zeros(2, np.float32), workers=1)
    (f,) = res.findings
    assert (f.kind, f.buffer_or_offset, f.group) == ("race", "buffer 0 ('x'), byte 4", (1, 0, 0))
    assert f.detail.startswith("atomic update conflicts with a plain write by another threadgroup")
