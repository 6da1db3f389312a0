"""TileLang's low-level simdgroup matrix intrinsics (TVM's Metal builtins, exported by
`tilelang.metal.language`): T.alloc_local(..., scope="metal.simdgroup"),
T.make_filled_simdgroup_matrix, T.simdgroup_load/store, T.simdgroup_multiply_accumulate,
with T.access_ptr / T.address_of pointers into device and threadgroup memory; results
against torch on every backend, and each misuse a clear error. The barrier tests of the
seed PR that use them are in test_seed_threadsync.py."""

from __future__ import annotations

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from harness.gen.strategies import FLOATS


def _matmul(M, N, K, dtype, transpose_b=False, via_shared=False):
    """C = A @ B (B given as (N, K) when transpose_b), one simdgroup per 8x8 tile of C
    computed by hand: the k loop loads an 8x8 tile of each operand and accumulates."""
    groups = (M // 8) * (N // 8)
    b_shape = (N, K) if transpose_b else (K, N)

    @T.prim_func
    def hand_mma(A: T.Tensor((M, K), dtype), B: T.Tensor(b_shape, dtype),
                 C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=32 * groups) as _bx:
            tid = T.get_thread_binding()
            g = tid // 32
            r0 = g // (N // 8) * 8
            c0 = g % (N // 8) * 8
            B_s = T.alloc_shared(b_shape, dtype)
            a = T.alloc_local((64,), dtype, scope="metal.simdgroup")
            b = T.alloc_local((64,), dtype, scope="metal.simdgroup")
            c = T.alloc_local((64,), "float32", scope="metal.simdgroup")
            if via_shared:
                T.copy(B, B_s)
            T.make_filled_simdgroup_matrix(c.data, 0, 0.0)
            for k in T.serial(K // 8):
                T.simdgroup_load(a.data, 0, T.access_ptr(A[r0, k * 8], "r"), K)
                if via_shared:
                    if transpose_b:
                        T.simdgroup_load(b.data, 0, T.address_of(B_s[c0, k * 8]), K, 8, 8, True)
                    else:
                        T.simdgroup_load(b.data, 0, T.address_of(B_s[k * 8, c0]), N)
                elif transpose_b:
                    T.simdgroup_load(b.data, 0, T.access_ptr(B[c0, k * 8], "r"), K, 8, 8,
                                     T.bool(True))
                else:
                    T.simdgroup_load(b.data, 0, T.access_ptr(B[k * 8, c0], "r"), N)
                T.simdgroup_multiply_accumulate(c.data, 0, a.data, 0, b.data, 0, c.data, 0)
            T.simdgroup_store(c.data, 0, T.access_ptr(C[r0, c0], "w"), N)
    return hand_mma


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("via_shared", [False, True])
def test_hand_written_matmul(run, dtype, transpose_b, via_shared):
    M, N, K = 16, 24, 32
    kernel = core.compile(_matmul(M, N, K, dtype, transpose_b, via_shared), out_idx=[2])
    a = random_tensor((M, K), dtype, 1)
    b = random_tensor((N, K) if transpose_b else (K, N), dtype, 2)
    want = a.double() @ (b.double().T if transpose_b else b.double())
    assert_close(run(kernel, a, b), want, dtype, reduction_length=K, op_class="accumulation")
    assert "simdgroup_multiply_accumulate(c[0], a[0], b[0], c[0])" in kernel.msl


def test_several_matrices_in_one_buffer(run):
    """A buffer of 128 elements holds two matrices; each is addressed by its number."""
    @T.prim_func
    def two(X: T.Tensor((8, 16), "float32"), Y: T.Tensor((8, 16), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            m = T.alloc_local((128,), "float32", scope="metal.simdgroup")
            T.simdgroup_load(m.data, 1, T.access_ptr(X[0, 0], "r"), 16)   # left half
            T.simdgroup_load(m.data, 0, T.access_ptr(X[0, 8], "r"), 16)   # right half
            T.simdgroup_store(m.data, 0, T.access_ptr(Y[0, 0], "w"), 16)
            T.simdgroup_store(m.data, 1, T.access_ptr(Y, "w", offset=8), 16)
    kernel = core.compile(two, out_idx=[1])
    assert "simdgroup_float8x8 m[2];" in kernel.msl
    x = random_tensor((8, 16), "float32", 3)
    assert_close(run(kernel, x), torch.cat([x[:, 8:], x[:, :8]], dim=1), "float32",
                 op_class="exact")


def _compile_error(body):
    with pytest.raises(KernelDefinitionError) as info:
        core.compile(body())
    return str(info.value)


def _one(stmt):
    def make():
        @T.prim_func
        def misuse(X: T.Tensor((16, 16), "float32"), H: T.Tensor((16, 16), "float16")):
            with T.Kernel(1, threads=32) as _bx:
                m = T.alloc_local((64,), "float32", scope="metal.simdgroup")
                stmt(m, X, H)
        return make
    return make()


@pytest.mark.parametrize("stmt,parts", [
    (lambda m, X, H: T.simdgroup_load(m.data, 0, T.access_ptr(X[0, 0], "r"), 16, 16, 16),
     ["T.simdgroup_load", "16x16", "8x8 only"]),
    (lambda m, X, H: T.simdgroup_load(m.data, 1, T.access_ptr(X[0, 0], "r"), 16),
     ["T.simdgroup_load", "matrix index 1 is outside buffer 'm' of 1 matrices"]),
    (lambda m, X, H: T.simdgroup_load(m.data, 0, T.access_ptr(H[0, 0], "r"), 16),
     ["T.simdgroup_load", "'m' is float32 but 'H' is float16", "do not convert"]),
    (lambda m, X, H: T.simdgroup_store(X.data, 0, T.access_ptr(X[0, 0], "w"), 16),
     ["T.simdgroup_store", "is not a simdgroup matrix buffer", "scope=\"metal.simdgroup\""]),
    (lambda m, X, H: T.simdgroup_store(m.data, 0, X[0, 0] + 1.0, 16),
     ["T.simdgroup_store", "must be T.access_ptr(buf[...], mode) or T.address_of"]),
    (lambda m, X, H: T.access_ptr(X[0, 0], "x"),
     ["T.access_ptr", "access_type='x'", "'r', 'w', 'rw'"]),
    (lambda m, X, H: T.alloc_local((48,), "float32", scope="metal.simdgroup"),
     ["T.alloc_local", "48 elements", "multiple of 64"]),
    (lambda m, X, H: T.alloc_local((64,), "int32", scope="metal.simdgroup"),
     ["T.alloc_local", "dtype int32", "float32, float16, bfloat16"]),
    (lambda m, X, H: T.alloc_local((64,), "float32", scope="shared"),
     ["T.alloc_local", "scope='shared'", "'metal.simdgroup'"]),
])
def test_misuse_is_a_clear_error(stmt, parts):
    text = _compile_error(lambda: _one(stmt))
    for part in parts:
        assert part in text, f"{part!r} not in {text!r}"


def test_element_access_of_a_matrix_is_refused():
    def make():
        @T.prim_func
        def misuse(X: T.Tensor((16, 16), "float32")):
            with T.Kernel(1, threads=32) as _bx:
                m = T.alloc_local((64,), "float32", scope="metal.simdgroup")
                m[0] = 1.0
                T.simdgroup_store(m.data, 0, T.access_ptr(X[0, 0], "w"), 16)
        return misuse
    text = _compile_error(make)
    assert "kernel 'misuse', simdgroup matrix 'm': is written element-wise" in text


def test_matrix_call_inside_parallel_is_refused():
    def make():
        @T.prim_func
        def misuse(X: T.Tensor((16, 16), "float32")):
            with T.Kernel(1, threads=32) as _bx:
                m = T.alloc_local((64,), "float32", scope="metal.simdgroup")
                for _i in T.Parallel(32):
                    T.simdgroup_store(m.data, 0, T.access_ptr(X[0, 0], "w"), 16)
        return misuse
    text = _compile_error(make)
    assert "T.simdgroup_store: is an operation of the whole simdgroup" in text


# ---- a matrix operation under a condition: every lane of its simdgroup must run it ------

def _guarded(guard):
    """Simdgroup g of 4 copies the 8x8 tile g of X (rows 8g..8g+7) to Y under `guard`."""
    @T.prim_func
    def copy_tiles(X: T.Tensor((32, 8), "float32"), Y: T.Tensor((32, 8), "float32"),
                   flag: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=128) as bx:
            tid = T.get_thread_binding()
            m = T.alloc_local((64,), "float32", scope="metal.simdgroup")
            g = tid // 32
            if guard(tid, g, bx, flag):
                T.simdgroup_load(m.data, 0, T.access_ptr(X[g * 8, 0], "r"), 8)
                T.simdgroup_store(m.data, 0, T.access_ptr(Y[g * 8, 0], "w"), 8)
    return copy_tiles


@pytest.mark.parametrize("name, guard, groups", [
    ("simdgroup index", lambda tid, g, bx, flag: g < 3, [0, 1, 2]),
    ("whole simdgroups of the thread index", lambda tid, g, bx, flag: tid >= 64, [2, 3]),
    ("uniform data", lambda tid, g, bx, flag: flag[0] > 0, [0, 1, 2, 3]),
    ("block index", lambda tid, g, bx, flag: tid // 32 + bx < 2, [0, 1]),
])
def test_a_condition_the_same_on_a_simdgroups_lanes_is_accepted(run, name, guard, groups):
    x = random_tensor((32, 8), "float32", 21)
    flag = torch.ones(1, dtype=torch.int32)
    want = torch.zeros(32, 8, dtype=torch.float64)
    for g in groups:
        want[8 * g:8 * g + 8] = x.double()[8 * g:8 * g + 8]
    out = torch.zeros(32, 8)
    run(core.compile(_guarded(guard)), x, out, flag)
    assert_close(out, want, "float32")


def test_a_matrix_op_under_an_if_splitting_a_simdgroup_is_a_clear_error():
    with pytest.raises(KernelDefinitionError, match=r"T.simdgroup_load: is an operation of the "
                       r"whole simdgroup .* under `if .*`, which splits a simdgroup: lanes "
                       r"0-15 of simdgroup 0 take it and lanes 16-31 do not"):
        core.compile(_guarded(lambda tid, g, bx, flag: tid < 16))


def test_a_condition_split_only_in_a_later_simdgroup_names_it():
    with pytest.raises(KernelDefinitionError, match=r"lanes 0-7 of simdgroup 2 take it and "
                                                    r"lanes 8-31 do not"):
        core.compile(_guarded(lambda tid, g, bx, flag: tid < 72))


def test_a_condition_on_per_lane_data_cannot_be_proven_uniform():
    with pytest.raises(KernelDefinitionError, match=r"cannot be proven the same on all lanes "
                                                    r"of simdgroup 0"):
        core.compile(_guarded(lambda tid, g, bx, flag: flag[tid % 1 + tid // 64] + tid > 0))


def test_a_loop_with_a_lane_dependent_trip_count_is_a_clear_error():
    @T.prim_func
    def k(X: T.Tensor((8, 8), "float32"), Y: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            tid = T.get_thread_binding()
            m = T.alloc_local((64,), "float32", scope="metal.simdgroup")
            for _ in T.serial(tid % 2 + 1):
                T.simdgroup_load(m.data, 0, T.access_ptr(X[0, 0], "r"), 8)
            T.simdgroup_store(m.data, 0, T.access_ptr(Y[0, 0], "w"), 8)

    with pytest.raises(KernelDefinitionError, match=r"T.simdgroup_load: .* under the bounds of "
                       r"loop '.*', which splits a simdgroup: lane 0 of simdgroup 0 computes 1 "
                       r"and lane 1 2"):
        core.compile(k)


# ---- T.access_ptr's access mask ----------------------------------------------------------

@pytest.mark.parametrize("intrinsic, mode, use", [("simdgroup_load", "w", "reads"),
                                                  ("simdgroup_store", "r", "writes")])
def test_a_mask_that_contradicts_the_tile_op_is_a_clear_error(intrinsic, mode, use):
    with pytest.raises(KernelDefinitionError, match=rf"T.{intrinsic} \(at .*\): the pointer is "
                       rf"T.access_ptr\(X\[...\], \"{mode}\"\), .*-only, but {intrinsic} "
                       rf"{use} the tile through it"):
        @T.prim_func
        def k(X: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=32) as _bx:
                m = T.alloc_local((64,), "float32", scope="metal.simdgroup")
                getattr(T, intrinsic)(m.data, 0, T.access_ptr(X[0, 0], mode), 8)


def test_rw_pointers_serve_both_tile_ops(run):
    @T.prim_func
    def k(X: T.Tensor((8, 8), "float32"), Y: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=32) as _bx:
            m = T.alloc_local((64,), "float32", scope="metal.simdgroup")
            T.simdgroup_load(m.data, 0, T.access_ptr(X[0, 0], "rw"), 8)
            T.simdgroup_store(m.data, 0, T.access_ptr(Y[0, 0], 3), 8)

    x = random_tensor((8, 8), "float32", 31)
    assert_close(run(core.compile(k, out_idx=[1]), x), x.double(), "float32")


WRITE_THROUGH = """
inline void put(threadgroup float* p, float v) { *p = v; }
inline void put_pair(threadgroup float* p, float v) { p[0] = v; p[1] = v + 1.0f; }
"""


def _extern_writes(mode, extent=None, pair=False):
    """Each thread writes S[2 * tid] (and S[2 * tid + 1] with `pair`) through a pointer
    handed to user MSL, then reads its neighbour's S[2 * ((tid + 1) % 64)]: only a barrier
    between them, placed because the mask says the pointer writes, makes it right."""
    n = 64
    kwargs = {} if extent is None else {"extent": extent}

    @T.prim_func
    def k(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n) as _bx:
            T.import_source(WRITE_THROUGH)
            tx = T.get_thread_binding()
            S = T.alloc_shared((2 * n,), "float32")
            T.call_extern("handle", "put_pair" if pair else "put",
                          T.access_ptr(S[2 * tx], mode, **kwargs), A[tx])
            B[tx] = S[2 * ((tx + 1) % n)]
    return k


@pytest.mark.parametrize("mode, extent, pair", [("w", None, False), ("w", 1, False),
                                                ("rw", None, True), ("w", 2, True)])
def test_a_write_pointer_handed_to_user_msl_is_a_write_for_the_barrier_planner(
        run, mode, extent, pair):
    kernel = core.compile(_extern_writes(mode, extent, pair), out_idx=[1])
    assert kernel.msl.count("threadgroup_barrier(") == 1
    a = random_tensor((64,), "float32", 32)
    assert_close(run(kernel, a), a.double().roll(-1), "float32")


def test_a_read_pointer_handed_to_user_msl_after_the_writes_gets_its_barrier(run):
    """T.access_ptr(S[...], "r", extent=2) read by user MSL after other threads wrote
    those elements: the read is ordered after the writes."""
    n = 64

    @T.prim_func
    def k(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n) as _bx:
            T.import_source("inline float sum2(threadgroup const float* p) "
                            "{ return p[0] + p[1]; }\n")
            tx = T.get_thread_binding()
            S = T.alloc_shared((n + 1,), "float32")
            S[tx] = A[tx]
            if tx == 0:
                S[n] = A[0]
            B[tx] = T.call_extern("float32", "sum2", T.access_ptr(S[tx], "r", extent=2))

    kernel = core.compile(k, out_idx=[1])
    assert kernel.msl.count("threadgroup_barrier(") == 1
    a = random_tensor((n,), "float32", 33)
    assert_close(run(kernel, a), a.double() + a.double().roll(-1), "float32")
