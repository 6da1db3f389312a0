"""simdgroup_matrix 8x8 (float, half, bfloat) and device atomics."""

import ml_dtypes
import numpy as np
import pytest
import torch

from core.errors import MSLCompileError
from emucase import clean, line_of, run
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor

GEMM = r"""
kernel void gemm(const device IN* a [[buffer(0)]], const device IN* b [[buffer(1)]],
                 device float* c [[buffer(2)]], constant uint& K [[buffer(3)]],
                 uint sg [[simdgroup_index_in_threadgroup]]) {
  // Simdgroup sg computes rows 8*sg..8*sg+7 of C (16x8), B is given transposed (8xK).
  simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  for (uint k = 0; k < K; k += 8) {
    simdgroup_matrix<IN, 8, 8> ma, mb;
    simdgroup_load(ma, a, K, ulong2(k, 8 * sg));
    simdgroup_load(mb, b, K, ulong2(k, 0), true);
    simdgroup_multiply_accumulate(acc, ma, mb, acc);
  }
  simdgroup_store(acc, c, 8, ulong2(0, 8 * sg));
}
"""

DTYPES = {"float": np.float32, "half": np.float16, "bfloat": ml_dtypes.bfloat16}


@pytest.mark.parametrize("k", [8, 32])
@pytest.mark.parametrize("name", DTYPES)
def test_simdgroup_gemm_with_transposed_load(name, k, rng):
    dtype = DTYPES[name]
    a = rng.standard_normal((16, k)).astype(dtype)
    bt = rng.standard_normal((8, k)).astype(dtype)
    c = np.zeros((16, 8), np.float32)
    res = clean(GEMM.replace("IN", name), "gemm", 1, 64, a, bt,
                c, np.array([k], np.uint32))
    expect = a.astype(np.float32) @ bt.astype(np.float32).T
    # products of the inputs are exact in float32: only the summation order differs
    assert_close(c, expect, "float32", reduction_length=k, op_class="accumulation")
    # one lane per simdgroup records each tile access: A read once, C written once
    assert res.stats["device_bytes_read"][0] == a.nbytes
    assert res.stats["device_bytes_written"][2] == c.nbytes


def test_diagonal_constructor_multiply_and_strided_store():
    src = r"""
kernel void diag(device float* out [[buffer(0)]]) {
  simdgroup_float8x8 d(2.0f);
  simdgroup_float8x8 ones = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
  simdgroup_float8x8 r;
  simdgroup_multiply(r, d, ones);            // every element 2
  simdgroup_multiply_accumulate(r, ones, ones, r);  // + 8
  simdgroup_store(r, out, 16, ulong2(8, 0)); // right half of an 8x16 matrix
  simdgroup_store(d, out, 16, ulong2(0, 0), true);
}
"""
    out = np.zeros((8, 16), np.float32)
    clean(src, "diag", 1, 32, out)
    np.testing.assert_array_equal(out[:, 8:], np.full((8, 8), 10.0))
    np.testing.assert_array_equal(out[:, :8], 2 * np.eye(8))


def test_storing_a_float_matrix_through_a_half_pointer_is_rejected_at_its_line():
    src = r"""
kernel void bad(device half* out [[buffer(0)]]) {
  simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
  simdgroup_store(acc, out, 8);
}
"""
    with pytest.raises(MSLCompileError) as err:
        run(src, "bad", 1, 32, np.zeros(64, np.float16))
    assert err.value.line == line_of(src, "simdgroup_store")
    assert "simdgroup_store" in str(err.value) and err.value.kernel == "bad"


def test_nonuniform_matrix_pointer_is_a_divergence_finding():
    src = r"""
kernel void skew(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
  simdgroup_store(m, out + (lane & 1), 8);
}
"""
    res = run(src, "skew", 1, 32, np.zeros(80, np.float32))
    assert [f.kind for f in res.findings] == ["divergence"]
    assert "must be uniform" in res.findings[0].detail
    # The kernel's line, not the shim's: the meeting runs in a function of its own.
    assert res.findings[0].line == line_of(src, "simdgroup_store")


ATOMICS = r"""
kernel void histogram(device const uint* x [[buffer(0)]], device atomic_uint* bins [[buffer(1)]],
                      device atomic_int* total [[buffer(2)]], device atomic_float* fsum [[buffer(3)]],
                      uint i [[thread_position_in_grid]]) {
  uint v = x[i];
  atomic_fetch_add_explicit(&bins[v % 16], 1u, memory_order_relaxed);
  atomic_fetch_sub_explicit(&total[0], int(v), memory_order_relaxed);
  atomic_fetch_max_explicit(&total[1], int(v), memory_order_relaxed);
  atomic_fetch_min_explicit(&total[2], int(v), memory_order_relaxed);
  atomic_fetch_add_explicit(&fsum[0], 0.5f, memory_order_relaxed);
  threadgroup atomic_uint local_count;
  if (i % 256 == 0) atomic_store_explicit(&local_count, 0u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  atomic_fetch_add_explicit(&local_count, 1u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (i % 256 == 0) atomic_fetch_add_explicit(&total[3], int(atomic_load_explicit(&local_count, memory_order_relaxed)), memory_order_relaxed);
}
"""


def test_device_and_threadgroup_atomics_across_threadgroups(rng):
    x = rng.integers(0, 1000, 16 * 256).astype(np.uint32)
    bins = np.zeros(16, np.uint32)
    total = np.array([0, -1, 1 << 30, 0], np.int32)
    fsum = np.zeros(1, np.float32)
    res = clean(ATOMICS, "histogram", 16, 256, x, bins, total, fsum, workers=2)
    np.testing.assert_array_equal(bins, np.bincount(x % 16, minlength=16))
    assert total[0] == -int(x.sum()) and total[1] == x.max() and total[2] == x.min()
    assert total[3] == x.size and fsum[0] == 0.5 * x.size
    assert res.stats["atomic_ops"] == x.size * 6 + 16 * 3  # per group: store, load, add


def test_half_and_bfloat_arithmetic_rounds_like_torch(rng):
    src = r"""
kernel void fma_chain(const device half* h [[buffer(0)]], const device bfloat* b [[buffer(1)]],
                      device half* ho [[buffer(2)]], device bfloat* bo [[buffer(3)]],
                      uint i [[thread_position_in_grid]]) {
  half x = h[i];
  ho[i] = x * x + x / half(3.0f) - half(0.1f);
  bfloat y = b[i];
  bo[i] = y * y + y / bfloat(3.0f) - bfloat(0.1f);
}
"""
    n = 256
    h, b = random_tensor((n,), "float16", 1), random_tensor((n,), "bfloat16", 2)
    ho, bo = torch.zeros(n, dtype=torch.float16), torch.zeros(n, dtype=torch.bfloat16)
    clean(src, "fma_chain", 2, 128, h, b, ho, bo)
    for x, out, dt in ((h, ho, torch.float16), (b, bo, torch.bfloat16)):
        expect = x * x + x / torch.tensor(3.0, dtype=dt) - torch.tensor(0.1, dtype=dt)
        # exact: torch rounds half/bfloat after every op too, as MSL (and the emulator) must
        assert torch.equal(out, expect)


def test_packed_integer_carriers_are_integer_operations():
    src = r"""
kernel void carry(const device uint4* src [[buffer(0)]], device uint4* dst [[buffer(1)]],
                  device uint2* half_pairs [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  uint4 v = src[i];              // 8 bfloat values carried as raw bits
  dst[i] = v;                    // bit-preserving copy
  half_pairs[i] = v.xy + uint2(1u, 0xFFFFFFFFu);  // integer add, wraps
}
"""
    src_vals = random_tensor((4 * 8,), "bfloat16", 3)
    dst = torch.zeros_like(src_vals)
    pairs = np.zeros((4, 2), np.uint32)
    clean(src, "carry", 1, 4, src_vals, dst, pairs)
    assert torch.equal(dst.view(torch.int16), src_vals.view(torch.int16))
    words = src_vals.view(torch.int32).numpy().view(np.uint32).reshape(4, 4)
    np.testing.assert_array_equal(pairs[:, 0], words[:, 0] + np.uint32(1))
    np.testing.assert_array_equal(pairs[:, 1], words[:, 1] + np.uint32(0xFFFFFFFF))


def test_simdgroup_matrix_accesses_are_counted_by_kind(rng):
    # Per simdgroup: two loads per k step of 8 (A's tile and B's), one store of C.
    k = 32
    a = rng.standard_normal((16, k)).astype(np.float32)
    bt = rng.standard_normal((8, k)).astype(np.float32)
    c = np.zeros((16, 8), np.float32)
    res = clean(GEMM.replace("IN", "float"), "gemm", 1, 64, a, bt, c, np.array([k], np.uint32))
    assert_close(c, a @ bt.T, "float32", reduction_length=k, op_class="accumulation")
    simdgroups = 2
    assert res.stats["simd_matrix_load_ops"] == simdgroups * 2 * (k // 8)
    assert res.stats["simd_matrix_store_ops"] == simdgroups
    assert res.stats["simd_shuffle_ops"] == res.stats["simd_reduce_ops"] == 0
    assert res.stats["simd_ops"] == simdgroups * (2 * (k // 8) + 1)
