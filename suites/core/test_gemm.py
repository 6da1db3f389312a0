"""T.gemm on simdgroup 8x8 matrices: shapes (ragged edges, K loops of one and many steps),
thread counts, transposes, input and output dtypes, pipelining, accumulation, epilogues
(Parallel, shared, fragments), the barriers the planner places for it, and the clear
errors of what the lowering rejects. Every run goes through the emulator with all checks
(the `run` fixture) and is compared with oracles/gemm.py; the plain TileLang GEMM is the
gemm family's (harness/gen/gemm.py), run and compared by `run_family`."""

import numpy as np
import pytest
import torch
import tvm
from tvm import tirx

import core
from core.errors import KernelDefinitionError, LoweringError
import core.language as T
from core.ir import matrix, ops
from core.ir.footprint import Footprint, LoopRange, may_race
from harness.check.barriers import check_barriers
from harness.check.compare import assert_close
from harness.gen import gemm as gemm_family
from harness.gen.inputs import random_tensor
from harness.gen.strategies import FLOATS, HALVES
from oracles.gemm import gemm as gemm_oracle


def gemm_params(M, N, K, bM, bN, bK, threads=128, dtype="float16", out="float32",
                trans_a=False, trans_b=False, stages=2):
    """TileLang's GEMM, C[M, N] = op(A) @ op(B), one (bM, bN) tile per threadgroup, as the
    gemm family (harness/gen/gemm.py) builds it: A and B tiles in threadgroup memory, a
    float32 fragment accumulator `C_local` cleared before the pipelined k loop, copied out."""
    return {"M": M, "N": N, "K": K, "bM": bM, "bN": bN, "bK": bK, "threads": threads,
            "dtype": dtype, "out_dtype": out, "trans_A": trans_a, "trans_B": trans_b,
            "num_stages": stages, "init": "clear"}


def matmul(*args, **kwargs):
    """The gemm family's kernel at `gemm_params(*args, **kwargs)`."""
    return gemm_family.build(gemm_params(*args, **kwargs)).func


def check(kernel, run, M, N, K, dtype="float16", out="float32", trans_a=False,
          trans_b=False):
    a = random_tensor((K, M) if trans_a else (M, K), dtype, 3)
    b = random_tensor((N, K) if trans_b else (K, N), dtype, 4)
    c = run(kernel, a, b)
    assert c.dtype == getattr(torch, out)
    assert_close(c, gemm_oracle(a, b, trans_a, trans_b), out, reduction_length=K,
                 op_class="accumulation")
    return kernel


# ---- correctness grids ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False),
                                             (True, True)])
def test_transposes_and_dtypes_ragged(trans_a, trans_b, dtype, run_family):
    # M, N not multiples of the block (masked edges), K not a multiple of bK; the output
    # has the input dtype (float32 accumulators converted in the epilogue).
    M, N, K = 72, 40, 48
    kernel, _, (c,) = run_family("gemm", gemm_params(M, N, K, 32, 32, 32, 64, dtype, dtype,
                                                     trans_a, trans_b))
    assert c.dtype == getattr(torch, dtype)
    expected = {"float32": "simdgroup_float8x8", "float16": "simdgroup_half8x8",
                "bfloat16": "simdgroup_bfloat8x8"}[dtype]
    assert expected in kernel.msl and "simdgroup_float8x8" in kernel.msl
    assert ("true)" in kernel.msl) == (trans_a or trans_b)


@pytest.mark.parametrize("M,N,K,bM,bN,bK,threads,dtype", [
    (64, 64, 64, 32, 32, 32, 128, "float16"),      # square, tile-aligned
    (128, 128, 128, 64, 64, 32, 128, "float16"),   # 4 simdgroups of 4x4 matrices
    (40, 56, 8, 16, 16, 8, 32, "float32"),         # a K loop of one step, ragged M and N
    (48, 96, 200, 16, 32, 64, 64, "bfloat16"),     # ragged K (200 = 3 x 64 + 8)
    (64, 64, 256, 64, 64, 16, 256, "float16"),     # 16 k tiles, 8 simdgroups
    (24, 64, 32, 24, 64, 32, 96, "float32"),       # 3 simdgroups (3 x 1 partition)
    (16, 16, 16, 16, 16, 16, 32, "bfloat16"),      # one block
    (64, 64, 64, 32, 32, 32, (32, 4), "float16"),  # 2-D threadgroup, simdgroup = one row
    (64, 32, 32, 32, 32, 16, (16, 4), "float32"),  # 2-D threadgroup, simdgroup = two rows
])
def test_shapes_blocks_threads(M, N, K, bM, bN, bK, threads, dtype, run_family):
    run_family("gemm", gemm_params(M, N, K, bM, bN, bK, threads, dtype))


@pytest.mark.parametrize("stages", [0, 1, 2, 3])
def test_pipelined_num_stages(stages, run_family):
    kernel, _, _ = run_family("gemm", gemm_params(64, 64, 128, 32, 32, 32, 128, stages=stages))
    # serial k loop: the copies wait for the last iteration's matrix loads (top barrier),
    # the matrix loads wait for the copies; the float32 tiles are stored straight to C
    assert kernel.msl.count("threadgroup_barrier") == 2


@pytest.mark.backend("emu")  # reads the emulator's counters
@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("K, wide", [(128, True), (100, False)])
def test_tile_copies_load_16_bytes_where_the_rows_allow(dtype, K, wide, run_family):
    # The A and B tiles are only read by simdgroup matrix loads, so their copies take
    # 8-lane runs: one 16-byte load (uint4) each where the rows are 8-aligned. Rows of
    # 100 elements are 4-aligned only: each run is split into two 8-byte loads, the
    # ragged last k tile masked; both against the oracle
    kernel, _, _ = run_family("gemm", gemm_params(40, 56, K, 32, 32, 32, 128, dtype, dtype,
                                                  trans_b=True))
    stats = kernel.last_run.stats[0]
    for operand in ("A", "B"):
        assert (f"(*(const device uint4*)({operand} + " in kernel.msl) == wide
    if wide:  # every device load moves 16 bytes (rows past M, N are not read)
        assert sum(stats["device_bytes_read"].values()) == 16 * stats["device_load_ops"]
    else:
        four = "uint2" if dtype == "bfloat16" else "half4"
        assert f"(*(const device {four}*)(A + " in kernel.msl


def test_direct_store_when_the_tile_is_provably_inside(run_family):
    aligned = core.compile(matmul(64, 64, 64, 32, 32, 32), out_idx=[2])
    assert "_stage" not in aligned.msl and "simdgroup_store(C_local" in aligned.msl
    # ragged at a multiple of 8: tiles inside are stored directly, the others dropped
    ragged, _, _ = run_family("gemm", gemm_params(72, 64, 64, 32, 32, 32))
    assert "_stage" not in ragged.msl and "simdgroup_store(C_local" in ragged.msl
    # a tile across the edge: it alone goes through the stage, masked
    straddling, _, _ = run_family("gemm", gemm_params(68, 64, 64, 32, 32, 32))
    assert "C_local_stage" in straddling.msl and "simdgroup_store(C_local" in straddling.msl


def test_accumulate_across_gemms_and_clear_accum(run):
    # C = A1 @ B1 (clear_accum) + A2^T @ B2; a second kernel adds both into a loaded C0.
    M, N, K = 32, 48, 24

    @T.prim_func
    def two(A1: T.Tensor((M, K), "float16"), B1: T.Tensor((K, N), "float16"),
            A2: T.Tensor((K, M), "float16"), B2: T.Tensor((K, N), "float16"),
            C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=64):
            A1_s = T.alloc_shared((M, K), "float16")
            A2_s = T.alloc_shared((K, M), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            C_l = T.alloc_fragment((M, N), "float32")
            T.fill(C_l, 7.0)
            T.copy(A1, A1_s)
            T.copy(B1, B_s)
            T.gemm(A1_s, B_s, C_l, clear_accum=True)
            T.copy(A2, A2_s)
            T.copy(B2, B_s)
            T.gemm(A2_s, B_s, C_l, transpose_A=True)
            T.copy(C_l, C)
    a1, b1, a2, b2 = (random_tensor(s, "float16", seed)
                      for seed, s in enumerate([(M, K), (K, N), (K, M), (K, N)], 5))
    ref = gemm_oracle(a1, b1) + gemm_oracle(a2, b2, transpose_a=True)
    out = run(core.compile(two, out_idx=[4]), a1, b1, a2, b2)
    assert_close(out, ref, "float32", reduction_length=2 * K, op_class="accumulation")

    @T.prim_func
    def onto(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"),
             C0: T.Tensor((M, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=32):
            A_s = T.alloc_shared((M, K), "float32")
            B_s = T.alloc_shared((K, N), "float32")
            C_l = T.alloc_fragment((M, N), "float32")
            T.copy(C0, C_l)                      # into the accumulator, converting
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C)
    a, b, c0 = (random_tensor((M, K), "float32", 6), random_tensor((K, N), "float32", 7),
                 random_tensor((M, N), "float16", 8))
    out = run(core.compile(onto, out_idx=[3]), a, b, c0)
    assert_close(out, gemm_oracle(a, b) + c0.float(), "float32", reduction_length=K,
                 op_class="accumulation")


@pytest.mark.parametrize("out", FLOATS)
def test_parallel_epilogue_on_the_accumulator(out, run):
    # C = alpha * A @ B + bias, element-wise over the accumulator after the gemm
    M, N, K, bM, bN, bK = 40, 72, 64, 32, 32, 16

    @T.prim_func
    def scaled(A: T.Tensor((M, K), "bfloat16"), B: T.Tensor((K, N), "bfloat16"),
               bias: T.Tensor((N,), "float32"), C: T.Tensor((M, N), out), alpha: T.float32):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, bK), "bfloat16")
            B_s = T.alloc_shared((bK, bN), "bfloat16")
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_l)
            for ko in T.Pipelined(K // bK, num_stages=3):
                T.copy(A[by * bM, ko * bK], A_s)
                T.copy(B[ko * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_l)
            for i, j in T.Parallel(bM, bN):
                C_l[i, j] = C_l[i, j] * alpha + T.if_then_else(
                    bx * bN + j < N, bias[T.min(bx * bN + j, N - 1)], 0.0)
            T.copy(C_l, C[by * bM, bx * bN])
    a, b, bias = random_tensor((M, K), "bfloat16", 9), random_tensor((K, N), "bfloat16", 10), random_tensor((N,), "float32", 2)
    out_t = run(core.compile(scaled, out_idx=[3]), a, b, bias, 0.5)
    assert_close(out_t, gemm_oracle(a, b) * 0.5 + bias, out, reduction_length=K,
                 op_class="accumulation")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_epilogue_through_shared(dtype, run):
    # T.copy(C_local, C_shared) (float32: simdgroup_store straight in; float16: staged and
    # converted), then T.copy(C_shared, C[...]) with masked edges
    M, N, K, b = 48, 24, 32, 32

    @T.prim_func
    def through(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"),
                C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, b), T.ceildiv(M, b), threads=64) as (bx, by):
            A_s = T.alloc_shared((b, K), "float16")
            B_s = T.alloc_shared((b, K), "float16")
            C_s = T.alloc_shared((b, b), dtype)
            C_l = T.alloc_fragment((b, b), "float32")
            T.copy(A[by * b, 0], A_s)
            T.copy(B[bx * b, 0], B_s)
            T.gemm(A_s, B_s, C_l, transpose_B=True, clear_accum=True)
            T.copy(C_l, C_s)
            T.copy(C_s, C[by * b, bx * b])
    a, bt = random_tensor((M, K), "float16", 11), random_tensor((N, K), "float16", 12)
    kernel = core.compile(through, out_idx=[2])
    assert ("C_l_stage" in kernel.msl) == (dtype != "float32")
    assert_close(run(kernel, a, bt), gemm_oracle(a, bt, transpose_b=True), dtype,
                 reduction_length=K, op_class="accumulation")


def test_fragment_operand_and_chained_gemms(run):
    # attention-like: S = Q @ K^T (accumulator), P = half(S) in a fragment (T.copy from the
    # accumulator), O = P @ V with P as the A operand in a fragment; then O's rows scaled
    # by a fragment-held A operand of a third gemm: O2 = (Q as fragment) @ W.
    L, D = 32, 16

    @T.prim_func
    def attn(Q: T.Tensor((L, D), "float16"), Kt: T.Tensor((L, D), "float16"),
             V: T.Tensor((L, D), "float16"), W: T.Tensor((D, D), "float16"),
             Out: T.Tensor((L, D), "float32"), Out2: T.Tensor((L, D), "float32")):
        with T.Kernel(1, threads=64):
            Q_s = T.alloc_shared((L, D), "float16")
            K_s = T.alloc_shared((L, D), "float16")
            V_s = T.alloc_shared((L, D), "float16")
            W_s = T.alloc_shared((D, D), "float16")
            Q_f = T.alloc_fragment((L, D), "float16")
            S = T.alloc_fragment((L, L), "float32")
            P = T.alloc_fragment((L, L), "float16")
            O_l = T.alloc_fragment((L, D), "float32")
            O2_l = T.alloc_fragment((L, D), "float32")
            T.copy(Q, Q_s)
            T.copy(Kt, K_s)
            T.copy(V, V_s)
            T.copy(W, W_s)
            T.copy(Q, Q_f)
            T.gemm(Q_s, K_s, S, transpose_B=True, clear_accum=True)
            T.copy(S, P)
            T.gemm(P, V_s, O_l, clear_accum=True)
            T.gemm(Q_f, W_s, O2_l, clear_accum=True)
            T.copy(O_l, Out)
            T.copy(O2_l, Out2)
    q, k, v, w = (random_tensor(s, "float16", seed, scale=0.5)
                  for seed, s in enumerate([(L, D), (L, D), (L, D), (D, D)], 13))
    o, o2 = run(core.compile(attn, out_idx=[4, 5]), q, k, v, w)
    # P is rounded to half from S: one half ulp of P may differ from the oracle's rounding
    p = gemm_oracle(q, k, transpose_b=True).half()
    assert_close(o, gemm_oracle(p, v), "float16", reduction_length=L, op_class="accumulation")
    assert_close(o2, gemm_oracle(q, w), "float32", reduction_length=D, op_class="accumulation")
    # copies in (1), operand staging of P (2: S stored -> read, P written -> loaded) and of
    # Q_f (1: written -> loaded)
    assert assert_every_barrier_necessary(attn, [4, 5], (q, k, v, w)) == 4


def test_symbolic_sizes(run):
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    bM, bN, bK = 32, 32, 16

    @T.prim_func
    def mm(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"),
           C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, bK), "float16")
            B_s = T.alloc_shared((bN, bK), "float16")
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_l)
            for ko in T.Pipelined(T.ceildiv(K, bK), num_stages=3):
                T.copy(A[by * bM, ko * bK], A_s)
                T.copy(B[bx * bN, ko * bK], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * bM, bx * bN])
    kernel = core.compile(mm, out_idx=[2])
    for m, n, k in [(40, 72, 24), (64, 32, 48)]:
        check(kernel, run, m, n, k, trans_b=True)


def test_chunked_epilogue_when_the_stage_does_not_fit(run_family):
    # a 128 x 128 float32 stage (64 KiB) cannot fit in 32 KiB: the float16 output is
    # stored and converted in chunks of rows
    kernel, _, _ = run_family("gemm", gemm_params(136, 128, 32, 128, 128, 32, 256, "float16",
                                                  "float16"))
    # 32 rows x 128 floats, declared as 16-byte words (it is read back as float4)
    assert "threadgroup uint4 C_local_stage_words[1024]" in kernel.msl


# ---- the barrier planner on gemm kernels ------------------------------------------------

def assert_every_barrier_necessary(func, out_idx, args):
    """Each barrier the planner placed, deleted in turn, lets the race checker find a race
    (harness/check/barriers.py); none is missing. Returns the number of barriers."""
    report = check_barriers(core.compile(func, out_idx=out_idx), args)
    assert report.ok, report.summary()
    return len(report.barriers)


def test_every_gemm_barrier_is_placed_and_necessary(run):
    # pipelined k loop (WAR at the top, RAW before the matrix loads), a Parallel epilogue
    # over the accumulator and a converting, masked copy out
    M, N, K, bM, bN, bK = 40, 40, 64, 32, 32, 16

    @T.prim_func
    def k(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
          C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=64) as (bx, by):
            A_s = T.alloc_shared((bM, bK), "float16")
            B_s = T.alloc_shared((bK, bN), "float16")
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_l)
            for ko in T.Pipelined(K // bK, num_stages=2):
                T.copy(A[by * bM, ko * bK], A_s)
                T.copy(B[ko * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_l)
            for i, j in T.Parallel(bM, bN):
                C_l[i, j] = T.max(C_l[i, j], 0.0)
            T.copy(C_l, C[by * bM, bx * bN])
    a, b = random_tensor((M, K), "float16", 14), random_tensor((K, N), "float16", 15)
    assert_close(run(core.compile(k, out_idx=[2]), a, b), torch.relu(gemm_oracle(a, b)),
                 "float16", reduction_length=K, op_class="accumulation")
    # k loop: 2; Parallel: store -> threads (1), threads -> load back (1); copy out:
    # store -> threads (1); the store after the load back is the same simdgroup's tile
    assert assert_every_barrier_necessary(k, [2], (a, b)) == 5


@pytest.mark.parametrize("case", ["one k step", "chunked epilogue"])
def test_gemm_barriers_necessary_without_a_loop_and_in_chunks(case):
    if case == "one k step":   # one-iteration k loop: only the copy -> load barrier
        M, N, K, bM, bN, bK, threads, expected = 40, 24, 16, 16, 16, 16, 64, 2
    else:                      # + per chunk: WAR before the stores, RAW after them
        M, N, K, bM, bN, bK, threads, expected = 128, 128, 64, 128, 128, 32, 256, 9
    func = matmul(M, N, K, bM, bN, bK, threads, "float16", "float16")
    args = (random_tensor((M, K), "float16", 16), random_tensor((K, N), "float16", 17))
    assert assert_every_barrier_necessary(func, [2], args) == expected


def _tile(buf, base, stride=16, write=False):
    return matrix.TileAccess(buf, base, tirx.const(stride, "int32"), tirx.const(0, "int32"),
                             tirx.const(0, "int32"), write)


def test_tile_footprints_are_whole_tiles_per_simdgroup():
    tx = tirx.Var("tx", "int32")
    axes = [(tx, 64, 1)]                       # two simdgroups
    buf = tirx.decl_buffer((512,), "float32", "S", scope="shared")
    group = tirx.floordiv(tx, 32)
    own = _tile(buf, group * 8, write=True)     # simdgroup g: columns 8g..8g+7, rows 0..7
    fp = Footprint.of_tile(own, axes, [], first_unit=64)
    assert sorted(set(fp.elements.tolist())) == sorted(
        r * 16 + c for r in range(8) for c in range(16))
    assert set(fp.threads.tolist()) == {64, 65}
    # the same simdgroup reading its own tile back: ordered; another simdgroup: a race
    assert not may_race(fp, Footprint.of_tile(_tile(buf, group * 8), axes, [], first_unit=64))
    other = _tile(buf, (1 - group) * 8)
    assert may_race(fp, Footprint.of_tile(other, axes, [], first_unit=64))
    # disjoint tile writes of the two simdgroups do not conflict; overlapping ones do
    assert not may_race(fp, fp)
    shifted = _tile(buf, group * 4, write=True)
    assert may_race(fp, Footprint.of_tile(shifted, axes, [], first_unit=64))
    # a plain access by lane 0 of the writing simdgroup is still another thread
    plain = Footprint.of(buf, tirx.const(0, "int32"), False, axes, [],
                         guards=[tx == 0])
    assert may_race(fp, plain)
    # a padded stride spans (rows - 1) * stride + cols elements; a k loop moves the tile
    kk = tirx.Var("kk", "int32")
    padded = Footprint.of_tile(_tile(buf, kk * 8, stride=40), axes, [LoopRange(kk, 2)],
                               first_unit=64)
    assert padded.elements.min() == 0 and padded.elements.max() == 7 * 40 + 8 + 7
    assert len(set(padded.elements.tolist())) == 2 * 64


def test_transposed_tiles_touch_the_same_elements():
    # simdgroup_load with transpose addresses (y + c) * stride + x + r: the same set
    src = r"""
kernel void t(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float S[16 * 16];
  for (uint i = tid; i < 256; i += 32) S[i] = float(i);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_float8x8 m;
  simdgroup_load(m, &S[0], 16, ulong2(8, 0), true);
  simdgroup_store(m, &out[0], 8, ulong2(0, 0), false);
}
"""
    from core.runtime import emu
    out = np.zeros(64, np.float32)
    res = emu.run_msl(src, "t", grid=(1, 1, 1), threadgroup=(32, 1, 1), buffers=[out])
    assert not res.by_kind("race")
    tile = out.reshape(8, 8)
    assert set(tile.ravel().astype(int)) == {r * 16 + 8 + c for r in range(8) for c in range(8)}
    assert tile[0, 1] == 16 + 8  # element (0, 1) is S[(0 + 1) * 16 + 8 + 0]


# ---- clear errors ---------------------------------------------------------------------------

def _gemm_kernel(a_shape=(16, 16), b_shape=(16, 16), c_shape=(16, 16), threads=32,
                 a_dtype="float16", b_dtype="float16", c_dtype="float32", a_scope="shared",
                 c_scope="fragment", **flags):
    alloc = {"shared": T.alloc_shared, "fragment": T.alloc_fragment, "local": T.alloc_local}

    @T.prim_func
    def bad(A: T.Tensor(a_shape, a_dtype), B: T.Tensor(b_shape, b_dtype),
            C: T.Tensor(c_shape, "float32")):
        with T.Kernel(1, threads=threads):
            A_s = alloc[a_scope](a_shape, a_dtype)
            B_s = T.alloc_shared(b_shape, b_dtype)
            C_l = alloc[c_scope](c_shape, c_dtype)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_l, clear_accum=True, **flags)
            T.copy(C_l, C)
    return bad


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(a_shape=(20, 16), c_shape=(20, 16)), LoweringError,
     r"T\.gemm: M, N, K = 20, 16, 16 must all be multiples of 8"),
    (dict(a_shape=(16, 12), b_shape=(12, 16)), LoweringError, r"M, N, K = 16, 16, 12"),
    (dict(threads=48), LoweringError, r"has 48 threads; T\.gemm needs a multiple of 32"),
    (dict(a_shape=(24, 16), c_shape=(24, 40), b_shape=(16, 40), threads=128), LoweringError,
     r"\(24, 40\) tile has 3 x 5 8x8 tiles, which cannot be split evenly over 4 "
     r"simdgroups \(128 threads\)"),
    (dict(threads=160), LoweringError, r"cannot be split evenly over 5 simdgroups"),
    (dict(b_dtype="float32"), KernelDefinitionError,
     r"operands A \(float16\) and B \(float32\) must have one dtype"),
    (dict(a_dtype="int8", b_dtype="int8"), KernelDefinitionError,
     r"must have one dtype among float32, float16, bfloat16"),
    (dict(c_dtype="float16"), KernelDefinitionError,
     r"operand C 'C_l'.*has dtype float16; the accumulator must be float32"),
    (dict(c_scope="local"), KernelDefinitionError,
     r"operand C 'C_l'.*is in local memory; allowed: a T.alloc_fragment or T.alloc_shared "
     r"accumulator"),
    (dict(a_shape=(16, 8), b_shape=(8, 16), transpose_A=True), KernelDefinitionError,
     r"shapes do not agree: op\(A\) is \(8, 16\)"),
    (dict(b_shape=(8, 16)), KernelDefinitionError,
     r"op\(A\) is \(16, 16\), op\(B\) is \(8, 16\), C is \(16, 16\)"),
])
def test_rejected_gemms_have_clear_errors(kwargs, error, match):
    with pytest.raises(error, match=match) as err:
        core.compile(_gemm_kernel(**kwargs))
    assert err.value.kernel == "bad"


def test_gemm_flags_must_be_constants():
    def build():
        @T.prim_func
        def dynamic_clear(A: T.Tensor((16, 64), "float16"), C: T.Tensor((16, 16), "float32")):
            with T.Kernel(1, threads=32):
                A_s = T.alloc_shared((16, 16), "float16")
                C_l = T.alloc_fragment((16, 16), "float32")
                for ko in range(4):
                    T.copy(A[0, ko * 16], A_s)
                    T.gemm(A_s, A_s, C_l, clear_accum=ko == 0)
                T.copy(C_l, C)
        return dynamic_clear
    with pytest.raises(KernelDefinitionError, match=r"clear_accum=.* is not a compile-time "
                                                    r"constant; pass True or False"):
        build()


def test_operand_forms_and_scopes_are_checked():
    @T.prim_func
    def local_operand(A: T.Tensor((16, 16), "float16"), C: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=32):
            A_l = T.alloc_local((16, 16), "float16")
            C_l = T.alloc_fragment((16, 16), "float32")
            T.copy(A, A_l)
            T.gemm(A_l, A_l, C_l)
            T.copy(C_l, C)
    with pytest.raises(KernelDefinitionError, match=r"operand A 'A_l'.*is in local memory; "
                                                    r"allowed: T.alloc_shared, T.alloc_"):
        core.compile(local_operand)

    @T.prim_func
    def origin_only(A: T.Tensor((16, 16), "float16"), C: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=32):
            A_s = T.alloc_shared((16, 16), "float16")
            C_l = T.alloc_fragment((16, 16), "float32")
            T.copy(A, A_s)
            T.gemm(A_s[0, 0], A_s, C_l)
            T.copy(C_l, C)
    with pytest.raises(KernelDefinitionError, match=r"must be a 2-D tile with constant "
                                                    r"extents"):
        core.compile(origin_only)


def _big_stage(keep_a):
    """A Parallel over a 64 x 128 accumulator and another fragment needs the accumulator's
    whole 32 KiB float32 stage (one over the accumulator alone runs in chunks of rows);
    `keep_a`: A_s is read again after the epilogue, so it lives beside the stage."""
    @T.prim_func
    def big(A: T.Tensor((64, 16), "float16"), B: T.Tensor((16, 128), "float16"),
            C: T.Tensor((64, 128), "float32"), A2: T.Tensor((64, 16), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 16), "float16")
            B_s = T.alloc_shared((16, 128), "float16")
            C_l = T.alloc_fragment((64, 128), "float32")
            D_l = T.alloc_fragment((64, 128), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(C, D_l)
            T.gemm(A_s, B_s, C_l, clear_accum=True)
            for i, j in T.Parallel(64, 128):
                C_l[i, j] = C_l[i, j] * D_l[i, j]
            T.copy(C_l, C)
            if keep_a:
                T.copy(A_s, A2)
    return big


def test_staging_beyond_threadgroup_memory_is_a_clear_error():
    # 32 KiB of stage beside 6 KiB of operands: A_s and B_s are dead by the epilogue, so
    # the stage takes their bytes (one 32 KiB arena); A_s read after it is live beside it
    assert "threadgroup uint4 tg_arena[2048];" in core.compile(_big_stage(False)).msl
    with pytest.raises(LoweringError, match=r"buffers live at once, 'C_l_stage' \(32768 "
                                            r"bytes\), 'A_s' \(2048 bytes\), total 34816 "
                                            r"bytes and exceed the 32768 bytes"):
        core.compile(_big_stage(True))


def _gemm_stage_and_reduction(K):
    """C = (A @ B) * D through the accumulator's whole 16 KiB float32 stage, and a column
    sum of D combined across simdgroups through the reductions' threadgroup stage."""
    @T.prim_func
    def both(A: T.Tensor((64, K), "float16"), B: T.Tensor((K, 64), "float16"),
             D: T.Tensor((64, 64), "float32"), C: T.Tensor((64, 64), "float32"),
             S: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, K), "float16")
            B_s = T.alloc_shared((K, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            D_l = T.alloc_fragment((64, 64), "float32")
            S_l = T.alloc_fragment((64,), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(D, D_l)
            T.gemm(A_s, B_s, C_l, clear_accum=True)
            for i, j in T.Parallel(64, 64):
                C_l[i, j] = C_l[i, j] * D_l[i, j]
            T.copy(C_l, C)
            T.reduce_sum(D_l, S_l, dim=0)
            T.copy(S_l, S)
    return both


@pytest.mark.parametrize("K", [32, 64])
def test_reduction_stage_beside_the_gemm_staging(run, K):
    # the gemm lowering's 16 KiB stage, the reduction's 1 KiB stage and the operands:
    # at K = 32 all fit side by side; at K = 64 (16 KiB of operands, 33 KiB in all, once
    # refused) pass merge_threadgroup puts the stages in the operands' bytes, dead by then
    a, b, d = (random_tensor(shape, dt, seed) for seed, (shape, dt) in
               enumerate((((64, K), "float16"), ((K, 64), "float16"), ((64, 64), "float32"))))
    kernel = core.compile(_gemm_stage_and_reduction(K), out_idx=[3, 4])
    assert ("tg_arena" in kernel.msl) == (K == 64)
    c, s = run(kernel, a, b, d)
    assert_close(c, gemm_oracle(a, b) * d, "float32", reduction_length=K,
                 op_class="accumulation")
    assert_close(s, d.double().sum(0), "float32", reduction_length=64,
                 op_class="accumulation")


def test_other_tile_ops_on_an_accumulator_are_rejected():
    @T.prim_func
    def rowsum(A: T.Tensor((16, 16), "float16"), C: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32):
            A_s = T.alloc_shared((16, 16), "float16")
            C_l = T.alloc_fragment((16, 16), "float32")
            R = T.alloc_fragment((16,), "float32")
            T.copy(A, A_s)
            T.gemm(A_s, A_s, C_l, clear_accum=True)
            T.reduce_sum(C_l, R, dim=1)
            T.copy(R, C)
    with pytest.raises(LoweringError, match=r"T\.reduce: is not supported on gemm accumulator "
                                            r"'C_l'.*T\.copy it into another fragment"):
        core.compile(rowsum)


def test_matrix_intrinsics_are_registered_and_printed_from_tables():
    from core.codegen import msl
    for name in ("tl.simdgroup_fill", "tl.simdgroup_load", "tl.simdgroup_store",
                 "tl.simdgroup_mma"):
        assert name in ops.INTRINSICS and name in msl.MATRIX_CALLS
        assert tvm.ir.Op.get(name) is not None
    kernel = core.compile(matmul(32, 32, 32, 32, 32, 32, 64, "bfloat16"), out_idx=[2])
    assert "make_filled_simdgroup_matrix<float, 8, 8>(0.0f)" in kernel.msl
    assert "simdgroup_bfloat8x8 A_mat[" in kernel.msl
    assert "simdgroup_multiply_accumulate(C_local[" in kernel.msl
    assert "simdgroup_load(A_mat[" in kernel.msl and ", ulong2(" in kernel.msl
