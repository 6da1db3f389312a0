"""T.gemm accumulators as TileLang's Metal kernels write them, on the emulator with every
check, against torch:

  - the accumulator in shared memory (`C_local = T.alloc_shared(..., accum_dtype)`, 4 of
    TileLang's 8 Metal test files): every input dtype, padded row strides, clear_accum,
    transposed operands, ragged M/N/K, an element-wise epilogue on the shared tile;
  - an accumulator epilogue whose float32 staging exceeds 32 KiB (TileLang's quickstart:
    ReLU over a 128x128 float32 accumulator) runs in chunks of rows, not rejected;
  - every barrier placed for a shared accumulator is necessary (harness/check/barriers.py);
  - a gemm operand in local memory is a clear error (device memory: test_gemm_global.py).
"""

import re

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.barriers import check_barriers
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from harness.gen.strategies import FLOATS
from oracles.gemm import gemm as gemm_oracle
from suites.core.test_gemm import assert_every_barrier_necessary


def gemm_shared_acc(M, N, K, bM, bN, bK, dtype, threads=128, pad=0, clear_accum=False,
                    trans_B=False, relu=False, out_dtype="float32", copy_each_step=False):
    """TileLang's Metal GEMM (testing/python/metal, in our words): C_local in shared."""
    b_shape, b_tile = ((N, K), (bN, bK)) if trans_B else ((K, N), (bK, bN))

    def b_origin(B, bx, ko):
        return B[bx * bN, ko * bK] if trans_B else B[ko * bK, bx * bN]

    @T.prim_func
    def gemm_kernel(A: T.Tensor((M, K), dtype), B: T.Tensor(b_shape, dtype),
                    C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((bM, bK), dtype, scope="shared")
            B_shared = T.alloc_shared(b_tile, dtype, scope="shared")
            C_local = T.alloc_shared((bM, bN + pad), "float32", scope="shared")
            if clear_accum:       # the first k step peeled: its gemm clears C_local
                T.copy(A[by * bM, 0], A_shared)
                T.copy(b_origin(B, bx, 0), B_shared)
                T.gemm(A_shared, B_shared, C_local[0:bM, 0:bN], transpose_B=trans_B,
                       clear_accum=True)
            else:
                T.clear(C_local)
            for ko in T.Pipelined(1 if clear_accum else 0, T.ceildiv(K, bK), num_stages=0):
                T.copy(A[by * bM, ko * bK], A_shared)
                T.copy(b_origin(B, bx, ko), B_shared)
                T.gemm(A_shared, B_shared, C_local[0:bM, 0:bN], transpose_B=trans_B)
                if copy_each_step:  # the running sum copied out: the loop reads C_local
                    T.copy(C_local[0:bM, 0:bN], C[by * bM, bx * bN])
            if relu:
                for i, j in T.Parallel(bM, bN):
                    C_local[i, j] = T.max(C_local[i, j], 0.0)
            T.copy(C_local[0:bM, 0:bN], C[by * bM, bx * bN])

    return gemm_kernel


def oracle(a, b, trans_B=False, relu=False):
    c = gemm_oracle(a, b, transpose_b=trans_B)
    return c.clamp(min=0) if relu else c


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("pad", [0, 4])
def test_shared_accumulator_gemm(run, dtype, pad):
    M, N, K = 40, 56, 48                       # ragged against 32 x 32 x 16 blocks
    func = gemm_shared_acc(M, N, K, 32, 32, 16, dtype, pad=pad)
    kernel = core.compile(func)
    assert "simdgroup_store(C_local_mat" in kernel.msl
    a, b = random_tensor((M, K), dtype, 2), random_tensor((K, N), dtype, 3)
    c = torch.zeros(M, N)
    run(kernel, a, b, c)
    assert_close(c, oracle(a, b), dtype=dtype, reduction_length=K, op_class="accumulation")


@pytest.mark.parametrize("clear_accum, trans_B, relu", [
    (True, False, False), (False, True, True), (True, True, True)])
def test_shared_accumulator_variants(run, clear_accum, trans_B, relu):
    M, N, K = 24, 40, 40
    func = gemm_shared_acc(M, N, K, 16, 16, 8, "float16", threads=64, pad=8,
                           clear_accum=clear_accum, trans_B=trans_B, relu=relu,
                           out_dtype="float16")
    a = random_tensor((M, K), "float16", 4)
    b = random_tensor((N, K) if trans_B else (K, N), "float16", 5)
    c = torch.zeros(M, N, dtype=torch.float16)
    run(core.compile(func), a, b, c)
    assert_close(c, oracle(a, b, trans_B, relu), dtype="float16", reduction_length=K,
                 op_class="accumulation")


@pytest.mark.backend("emu")  # reads the emulator's counters
@pytest.mark.parametrize("copy_each_step, clear_accum", [(False, False), (False, True),
                                                         (True, False)])
def test_shared_accumulator_held_in_matrices_across_the_k_loop(run, copy_each_step,
                                                               clear_accum):
    # C_local stays in the simdgroup matrices from the first k step to the last: filled
    # with T.clear's zeros (or loaded once, after the peeled clear_accum step) before the
    # loop and stored once after it, unless the loop touches C_local otherwise (here a
    # copy of the running sum each step), when every T.gemm loads and stores it around its
    # own multiply-accumulates
    M, N, K, bM, bN, bK, pad = 40, 56, 96, 32, 32, 16, 4
    func = gemm_shared_acc(M, N, K, bM, bN, bK, "float16", pad=pad, clear_accum=clear_accum,
                           copy_each_step=copy_each_step)
    kernel = core.compile(func)
    held = "gemm.shared_accumulator=held_across_k" in kernel.decisions
    assert held != copy_each_step, kernel.decisions
    # zeros straight into the matrices after T.clear: no load of C_local before the loop
    loop = kernel.msl.index("for (int ko")
    assert ("simdgroup_load(C_local_mat" in kernel.msl[:loop]) == (held and clear_accum)
    a, b = random_tensor((M, K), "float16", 8), random_tensor((K, N), "float16", 9)
    c = torch.zeros(M, N)
    run(kernel, a, b, c)
    assert_close(c, oracle(a, b), dtype="float16", reduction_length=K,
                 op_class="accumulation")
    if held:
        stats = kernel.last_run.stats[0]
        groups, steps = 2 * 2, K // bK
        # per group: the A and B tiles every step, the clear (or the peeled step's store
        # of C's matrices), and C's matrices once after the loop
        tiles = steps * (bM * bK + bK * bN) * 2
        first = bM * bN * 4 if clear_accum else bM * (bN + pad) * 4
        assert stats["threadgroup_bytes_written"] == groups * (tiles + first + bM * bN * 4)


def test_every_barrier_of_a_shared_accumulator_gemm_is_necessary():
    M, N, K = 40, 40, 48
    func = gemm_shared_acc(M, N, K, 16, 16, 16, "float16", threads=128, pad=4)
    args = (random_tensor((M, K), "float16", 6), random_tensor((K, N), "float16", 7),
            torch.zeros(M, N))
    # k-loop WAR, RAW before the matrix loads, epilogue
    assert assert_every_barrier_necessary(func, None, args) >= 3


def quickstart(M, N, K, bM=128, bN=128, bK=32, dtype="float16"):
    """TileLang's quickstart matmul + ReLU (in our words): a 128 x 128 float32 accumulator,
    whose ReLU epilogue would need 64 KiB of threadgroup staging at once."""

    @T.prim_func
    def matmul_relu(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
                    C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_shared = T.alloc_shared((bM, bK), dtype)
            B_shared = T.alloc_shared((bK, bN), dtype)
            C_local = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, bK), num_stages=3):
                T.copy(A[by * bM, ko * bK], A_shared)
                T.copy(B[ko * bK, bx * bN], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            for i, j in T.Parallel(bM, bN):
                C_local[i, j] = T.max(C_local[i, j], 0)
            T.copy(C_local, C[by * bM, bx * bN])

    return matmul_relu


def test_quickstart_relu_epilogue_runs_in_chunks(run):
    M, N, K = 136, 130, 64
    kernel = core.compile(quickstart(M, N, K))
    # 32 rows x 128 of float32 = 16 KiB, declared as 16-byte words (read back as float4)
    assert "threadgroup uint4 C_local_stage_words[1024];" in kernel.msl
    a, b = random_tensor((M, K), "float16", 8), random_tensor((K, N), "float16", 9)
    c = torch.zeros(M, N, dtype=torch.float16)
    run(kernel, a, b, c)
    assert_close(c, oracle(a, b, relu=True), dtype="float16", reduction_length=K,
                 op_class="accumulation")


def test_gemm_operand_in_local_memory_is_a_clear_error():
    @T.prim_func
    def local_a(A: T.Tensor((16, 16), "float16"), B: T.Tensor((16, 16), "float16"),
                C: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=32):
            A_l = T.alloc_local((16, 16), "float16")
            T.gemm(A_l, B[0:16, 0:16], C[0:16, 0:16], clear_accum=True)

    with pytest.raises(KernelDefinitionError, match=r"operand A 'A_l'.*is in local memory"):
        core.compile(local_a)


def splitk(M, N, K, bM, bN, bK, split_k, form):
    """TileLang's split-K GEMM examples (in our words): partial C tiles of K / split_k
    combined into C with T.atomic_add, as one tile op or element-wise in a T.Parallel."""
    splitK = K // split_k

    @T.prim_func
    def matmul(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
               C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), split_k, threads=128) as (bx, by, bz):
            A_shared = T.alloc_shared((bM, bK), "float16")
            B_shared = T.alloc_shared((bK, bN), "float16")
            C_local = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(splitK, bK), num_stages=0):
                T.copy(A[by * bM, bz * splitK + ko * bK], A_shared)
                T.copy(B[bz * splitK + ko * bK, bx * bN], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            if form == "tile":
                T.atomic_add(C[by * bM, bx * bN], C_local)
            else:
                for i, j in T.Parallel(bM, bN):
                    T.atomic_add(C[by * bM + i, bx * bN + j], C_local[i, j])

    return matmul


@pytest.mark.parametrize("form", ["tile", "parallel"])
@pytest.mark.parametrize("block", [16, 128])   # 128: a 64 KiB accumulator, staged in chunks
def test_split_k_with_atomic_add(run, form, block):
    # the tile form masks the ragged edges; the T.Parallel form stores where it is told
    # (TileLang's example has whole blocks: past the edge, the emulator reports bounds)
    M, N = (136, 130) if form == "tile" else (2 * block, block)
    K, split_k = 128, 2
    a, b = random_tensor((M, K), "float16", 10), random_tensor((K, N), "float16", 11)
    c = torch.zeros(M, N)
    run(core.compile(splitk(M, N, K, block, block, 32, split_k, form)), a, b, c)
    assert_close(c, oracle(a, b), dtype="float16", reduction_length=K,
                 op_class="accumulation")


def simdgroup_gemm(M, N, K, bM, bN, bK, dtype="float16"):
    """TileLang's testing/python/metal/test_metal_simdgroup_store.py kernel (our words): a
    fragment accumulator whose T.copy to device memory is simdgroup_store'd directly."""

    @T.prim_func
    def gemm_kernel(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
                    C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_shared = T.alloc_shared((bM, bK), dtype, scope="shared")
            B_shared = T.alloc_shared((bK, bN), dtype, scope="shared")
            C_local = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, bK), num_stages=0):
                T.copy(A[by * bM, ko * bK], A_shared)
                T.copy(B[ko * bK, bx * bN], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * bM, bx * bN])

    return gemm_kernel


@pytest.mark.parametrize("blocks", [(16, 16, 16), (32, 32, 32), (32, 64, 16), (64, 64, 32)])
def test_simdgroup_store_port(run, blocks):
    M = N = K = 128 if blocks[1] == 64 else 64
    kernel = core.compile(simdgroup_gemm(M, N, K, *blocks))
    src = kernel.msl
    assert "simdgroup_multiply_accumulate" in src and "make_filled_simdgroup_matrix" in src
    assert "simdgroup_store(C_local[" in src and ", &C[" in src      # straight to device
    assert not any("simdgroup_load" in ln and "C_local" in ln for ln in src.splitlines())
    a, b = random_tensor((M, K), "float16", 12), random_tensor((K, N), "float16", 13)
    c = torch.zeros(M, N)
    run(kernel, a, b, c)
    assert_close(c, oracle(a, b), dtype="float16", reduction_length=K, op_class="accumulation")


@pytest.mark.parametrize("M, N", [(40, 36), (64, 60), (20, 64), (40, 48)])
def test_ragged_float32_output_stores_inner_tiles_directly(run, M, N):
    """C in device memory that ends inside a block: the 8x8 tiles wholly inside are
    simdgroup_store'd straight to C, those across the edge go through the stage, masked
    (none when M and N are multiples of 8: no stage at all)."""
    K = 32
    kernel = core.compile(simdgroup_gemm(M, N, K, 32, 32, 16))
    assert "simdgroup_store(C_local[" in kernel.msl and ", &C[" in kernel.msl
    assert ("C_local_stage" in kernel.msl) == bool(M % 8 or N % 8)
    a, b = random_tensor((M, K), "float16", 14), random_tensor((K, N), "float16", 15)
    c = torch.zeros(M, N)
    run(kernel, a, b, c)
    assert_close(c, oracle(a, b), dtype="float16", reduction_length=K, op_class="accumulation")
    report = check_barriers(kernel, (a, b, torch.zeros(M, N)))
    assert report.ok, report.summary()


def test_address_space_port(run):
    """TileLang's test_metal_address_space.py kernel (our words, sizes cut for the CPU): a
    whole shared accumulator, a T.serial k loop, 64 threads; every pointer the MSL casts is
    qualified with its address space."""
    M = N = K = 64
    BM = BN = 16
    BK = 8

    @T.prim_func
    def kernel(A: T.Tensor((M, K), T.float16), B: T.Tensor((K, N), T.float16),
               C: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), threads=64) as (bx, by):
            As = T.alloc_shared((BM, BK), T.float16)
            Bs = T.alloc_shared((BK, BN), T.float16)
            Cl = T.alloc_shared((BM, BN), T.float32)
            T.clear(Cl)
            for k in T.serial(T.ceildiv(K, BK)):
                T.copy(A[by * BM, k * BK], As)
                T.copy(B[k * BK, bx * BN], Bs)
                T.gemm(As, Bs, Cl)
            T.copy(Cl, C[by * BM, bx * BN])

    compiled = core.compile(kernel)
    assert not re.findall(r"\((?:half\d*|char|void|float\d*)\*\)", compiled.msl)
    a, b = random_tensor((M, K), "float16", 16), random_tensor((K, N), "float16", 17)
    c = torch.zeros(M, N)
    run(compiled, a, b, c)
    assert_close(c, oracle(a, b), dtype="float16", reduction_length=K, op_class="accumulation")
