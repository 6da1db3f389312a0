"""The emulator's counters (`EmuResult.stats`): bytes moved and access operations.

The access-op counters count one operation per load or store instruction the kernel
executes, whatever its width: a `float4` load is one 16-byte device load. They are what
tells a vectorized kernel from a scalar one moving the same bytes (harness bench gates on
them), so they are checked here exactly, for device and threadgroup memory.
"""

import numpy as np
import pytest

from emucase import clean

COPY_SCALAR = r"""
kernel void copy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 uint gid [[thread_position_in_grid]]) {
  for (uint l = 0; l < 4; ++l) y[gid * 4 + l] = x[gid * 4 + l];
}
"""

COPY_VECTOR = r"""
kernel void copy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 uint gid [[thread_position_in_grid]]) {
  *(device float4*)(y + gid * 4) = *(device const float4*)(x + gid * 4);
}
"""

STAGED = r"""
kernel void staged(device const half* x [[buffer(0)]], device half* y [[buffer(1)]],
                   uint tid [[thread_index_in_threadgroup]],
                   uint g [[threadgroup_position_in_grid]]) {
  threadgroup half tile[128];
  *(threadgroup half2*)(tile + 2 * tid) = *(device const half2*)(x + g * 128 + 2 * tid);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[g * 128 + tid] = tile[127 - tid];
  y[g * 128 + 64 + tid] = tile[63 - tid];
}
"""


@pytest.mark.parametrize("body, loads_per_thread", [(COPY_SCALAR, 4), (COPY_VECTOR, 1)])
def test_device_access_ops_count_instructions_not_bytes(body, loads_per_thread, rng):
    x = rng.standard_normal(4 * 256).astype(np.float32)
    y = np.zeros_like(x)
    res = clean(body, "copy", 4, 64, x, y)
    np.testing.assert_array_equal(y, x)
    # the same bytes either way ...
    assert res.stats["device_bytes_read"][0] == x.nbytes
    assert res.stats["device_bytes_written"][1] == y.nbytes
    # ... in 4x fewer operations when each is a float4
    assert res.stats["device_load_ops"] == 256 * loads_per_thread
    assert res.stats["device_store_ops"] == 256 * loads_per_thread
    assert res.stats["threadgroup_load_ops"] == 0
    assert res.stats["threadgroup_store_ops"] == 0


def test_threadgroup_access_ops_and_bytes(rng):
    groups = 3
    x = rng.standard_normal(groups * 128).astype(np.float16)
    y = np.zeros_like(x)
    res = clean(STAGED, "staged", groups, 64, x, y)
    np.testing.assert_array_equal(y.reshape(groups, 128), x.reshape(groups, 128)[:, ::-1])
    threads = groups * 64
    assert res.stats["threadgroup_store_ops"] == threads        # one half2 store each
    assert res.stats["threadgroup_bytes_written"] == threads * 4
    assert res.stats["threadgroup_load_ops"] == threads * 2     # two half loads each
    assert res.stats["threadgroup_bytes_read"] == threads * 4
    assert res.stats["device_load_ops"] == threads
    assert res.stats["device_store_ops"] == threads * 2
    assert res.stats["barriers"] == groups
