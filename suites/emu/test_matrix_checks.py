"""simdgroup matrix loads and stores are checked as the element accesses they stand for.

A simdgroup_load or simdgroup_store is one operation of the simdgroup; its lowest active
lane records it, element by element (an 8x8 tile is 64 accesses, row by row), so the
checker judges it exactly as it would judge that lane reading or writing each element:
races with the other simdgroup's accesses (read-after-write, write-after-read,
write-after-write, with a transposed tile too), reads of threadgroup memory no thread
wrote, and red-zone accesses, each at the MSL line of the load or store, once per element
(the finding's count), and nothing once a barrier orders the two simdgroups. The counters
are the elements' accesses whether checks are on or off.
"""

from __future__ import annotations

import numpy as np
import pytest

from emucase import clean, line_of, run

# Two simdgroups and an 8x8 float tile in threadgroup memory, written whole and ordered by
# a barrier before the tested interval (so only FIRST and SECOND can conflict). Simdgroup 0
# runs FIRST, then simdgroup 1 runs SECOND; under the forward schedule the conflict is
# caught at SECOND, by its recording lane (thread 32) against thread 0.
KERNEL = r"""
kernel void tiles(device float* out [[buffer(0)]], const device float* src [[buffer(1)]],
                  uint tid [[thread_index_in_threadgroup]],
                  uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float tile[64];
  tile[tid] = 1000.0f + float(tid);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_float8x8 m;
  simdgroup_load(m, src, 8, ulong2(0, 8 * sg));
  if (sg == 0) { FIRST }
  SYNC
  if (sg == 1) { SECOND }
  simdgroup_store(m, out, 8, ulong2(0, 8 * sg));
}
"""
LOAD = "simdgroup_load(m, tile, 8, ulong2(0, 0), TRANSPOSE);"
STORE = "simdgroup_store(m, tile, 8, ulong2(0, 0), TRANSPOSE);"
CASES = {
    "RAW": (STORE, LOAD, "read conflicts with a write by thread 0"),
    "WAR": (LOAD, STORE, "write conflicts with a read by thread 0"),
    "WAW": (STORE, STORE, "write conflicts with a write by thread 0"),
}


def kernel(conflict: str, transpose: bool, sync: str = "") -> tuple[str, str]:
    first, second, _ = CASES[conflict]
    second = second.replace("m,", "m ,", 1)  # its own text, so its line is found by it
    src = (KERNEL.replace("FIRST", first).replace("SECOND", second).replace("SYNC", sync)
           .replace("TRANSPOSE", "true" if transpose else "false"))
    return src, second.replace("TRANSPOSE", "true" if transpose else "false")


def buffers():
    """out, and src: simdgroup s starts with rows 8s..8s+7 of an arange."""
    return np.zeros(128, np.float32), np.arange(128, dtype=np.float32)


@pytest.mark.parametrize("transpose", [False, True], ids=["rows", "transposed"])
@pytest.mark.parametrize("conflict", list(CASES))
def test_a_conflicting_tile_is_one_finding_per_element_at_its_line(conflict, transpose):
    src, second = kernel(conflict, transpose)
    res = run(src, "tiles", 1, 64, *buffers())
    assert len(res.findings) == 1, "\n".join(map(str, res.findings))
    f = res.findings[0]
    assert (f.kind, f.address_space, f.line) == ("race", "threadgroup", line_of(src, second))
    assert f.detail.startswith(CASES[conflict][2])
    assert f.thread == (32, 0, 0) and f.other_thread == 0
    assert f.count == 64  # every element of the tile, each its own access
    # The first element in the recording order: (0, 0), byte 0, rows or columns alike.
    assert f.buffer_or_offset == "'tile', byte 0"


@pytest.mark.parametrize("transpose", [False, True], ids=["rows", "transposed"])
@pytest.mark.parametrize("conflict", list(CASES))
def test_a_barrier_between_the_simdgroups_makes_it_clean(conflict, transpose):
    src, _ = kernel(conflict, transpose, "threadgroup_barrier(mem_flags::mem_threadgroup);")
    out, inputs = buffers()
    clean(src, "tiles", 1, 64, out, inputs)
    # Simdgroup s stores its matrix at rows 8s..8s+7. It starts as rows 8s..8s+7 of src; a
    # load replaces it with the tile: written by simdgroup 0 (RAW: a transposed store and a
    # transposed load cancel), or as initialized, 1000 + i (WAR; transposed if asked).
    initial = 1000 + np.arange(64, dtype=np.float32).reshape(8, 8)
    loaded = (initial.T if transpose else initial).reshape(-1)
    expect = {"RAW": (inputs[:64], inputs[:64]), "WAR": (loaded, inputs[64:]),
              "WAW": (inputs[:64], inputs[64:])}[conflict]
    np.testing.assert_array_equal(out[:64], expect[0])
    np.testing.assert_array_equal(out[64:], expect[1])


def test_loading_unwritten_threadgroup_memory_is_uninit_per_element():
    src = r"""
kernel void fresh(device float* out [[buffer(0)]]) {
  threadgroup float tile[64];
  simdgroup_float8x8 m;
  simdgroup_load(m, tile, 8);
  simdgroup_store(m, out, 8);
}
"""
    res = run(src, "fresh", 1, 32, np.zeros(64, np.float32))
    assert [f.kind for f in res.findings] == ["uninit"]
    f = res.findings[0]
    assert (f.address_space, f.line, f.thread, f.count) == (
        "threadgroup", line_of(src, "simdgroup_load"), (0, 0, 0), 64)
    assert f.detail.startswith("4-byte read of threadgroup memory that no thread has written")


def test_a_tile_reaching_into_the_red_zone_is_a_bounds_finding_per_element_outside():
    # Rows 1..8 of an 8-row variable: row 8 (8 floats) lies in the red zone after it.
    src = r"""
kernel void over(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float tile[64];
  tile[tid] = 1.0f;
  tile[tid + 32] = 1.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_float8x8 m;
  simdgroup_load(m, tile, 8, ulong2(0, 1));
  simdgroup_store(m, out, 8);
}
"""
    res = run(src, "over", 1, 32, np.zeros(64, np.float32))
    assert [f.kind for f in res.findings] == ["bounds"], "\n".join(map(str, res.findings))
    f = res.findings[0]
    # the first element outside, tile row 7 column 0, is lane 22's on the GPU (r = 7:
    # bits 1, 2 and 4 of the lane), and the finding names that lane
    assert (f.address_space, f.line, f.thread, f.count) == (
        "threadgroup", line_of(src, "simdgroup_load"), (22, 0, 0), 8)
    assert f.detail == ("4-byte read at byte offset 256 of threadgroup variable #0, "
                        "which holds 256 bytes")


def test_device_tiles_of_two_threadgroups_race_at_the_store():
    src = r"""
kernel void both(device float* out [[buffer(0)]], const device float* src [[buffer(1)]]) {
  simdgroup_float8x8 m;
  simdgroup_load(m, src, 8);
  simdgroup_store(m, out, 8);
}
"""
    res = run(src, "both", 2, 32, np.zeros(64, np.float32), np.ones(64, np.float32))
    assert [f.kind for f in res.findings] == ["race"]
    f = res.findings[0]
    # The two groups run on two workers at once: whichever stores second reports.
    assert f.group in {(0, 0, 0), (1, 0, 0)}
    assert (f.address_space, f.line, f.thread, f.count) == (
        "device", line_of(src, "simdgroup_store"), (0, 0, 0), 64)
    assert f.detail.startswith("write conflicts with a write by another threadgroup")
    assert f.buffer_or_offset == "buffer 0 ('out'), byte 0"


@pytest.mark.parametrize("checks", [("races", "uninit", "bounds"), ()], ids=["on", "off"])
def test_tile_accesses_count_as_their_elements(checks):
    src, _ = kernel("RAW", False, "threadgroup_barrier(mem_flags::mem_threadgroup);")
    res = clean(src, "tiles", 1, 64, *buffers(), checks=checks)
    # 64 element stores (tile[tid]) + one tile of 64 stores; one tile of 64 loads.
    assert res.stats["threadgroup_store_ops"] == 128
    assert res.stats["threadgroup_bytes_written"] == 512
    assert res.stats["threadgroup_load_ops"] == 64
    assert res.stats["threadgroup_bytes_read"] == 256
    # Two tiles loaded from src and one from the tile; three stored (the tile, two to out).
    assert res.stats["device_load_ops"] == 128 and res.stats["device_store_ops"] == 128
    assert res.stats["simd_matrix_load_ops"] == 3 and res.stats["simd_matrix_store_ops"] == 3
