"""T.gemm with C in device memory, on the emulator with every check, against torch.

Semantics (TileLang's): T.gemm(A, B, C[tile]) makes C[tile] = op(A) @ op(B), plus C[tile]'s
previous values unless clear_accum. Each simdgroup brings its 8x8 matrices of the tile in,
multiply-accumulates in float32, and writes them back: float32 tiles wholly inside C with
simdgroup_load/simdgroup_store straight from and to device memory; tiles across C's edge
through a float32 threadgroup stage, element-wise and masked; a float16/bfloat16 C always
through the stage, converting (a float matrix is never stored through a half pointer).
"""

import re

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError, LoweringError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from harness.gen.strategies import FLOATS, HALVES
from oracles.gemm import gemm as gemm_oracle
from suites.core.test_gemm import assert_every_barrier_necessary

# the float32 stage: an array, or a pointer to words when it is read back as vectors
FLOAT_STAGE = re.compile(r"threadgroup float\*? C_stage\b")


def gemm_global(M, N, K, bM, bN, bK, dtype, out_dtype="float32", threads=128,
                clear_first=True, trans_B=False):
    """A tiled GEMM that accumulates straight into its output: every k step's T.gemm
    reads and writes the block's tile of C in device memory. With `clear_first`, the first
    k step's gemm uses clear_accum (C's prior contents ignored); otherwise C += A @ B."""
    b_shape, b_tile = ((N, K), (bN, bK)) if trans_B else ((K, N), (bK, bN))

    def b_origin(B, bx, ko):
        return B[bx * bN, ko * bK] if trans_B else B[ko * bK, bx * bN]

    @T.prim_func
    def gemm_c_global(A: T.Tensor((M, K), dtype), B: T.Tensor(b_shape, dtype),
                      C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((bM, bK), dtype)
            B_shared = T.alloc_shared(b_tile, dtype)
            if clear_first:
                T.copy(A[by * bM, 0], A_shared)
                T.copy(b_origin(B, bx, 0), B_shared)
                T.gemm(A_shared, B_shared, C[by * bM:by * bM + bM, bx * bN:bx * bN + bN],
                       transpose_B=trans_B, clear_accum=True)
            for ko in T.serial(1 if clear_first else 0, T.ceildiv(K, bK)):
                T.copy(A[by * bM, ko * bK], A_shared)
                T.copy(b_origin(B, bx, ko), B_shared)
                T.gemm(A_shared, B_shared, C[by * bM:by * bM + bM, bx * bN:bx * bN + bN],
                       transpose_B=trans_B)

    return gemm_c_global


def oracle(a, b, c0=None, trans_B=False):
    c = gemm_oracle(a, b, transpose_b=trans_B).double()
    return c if c0 is None else c + c0.double()


@pytest.mark.parametrize("M, N, K", [(64, 64, 32), (40, 56, 48), (36, 20, 24)])
def test_float32_c_in_device_memory(run, M, N, K):
    kernel = core.compile(gemm_global(M, N, K, 32, 32, 16, "float16"))
    a, b = random_tensor((M, K), "float16", 4), random_tensor((K, N), "float16", 5)
    c = torch.full((M, N), 123.0)                  # clear_accum: prior contents ignored
    run(kernel, a, b, c)
    assert_close(c, oracle(a, b), dtype="float16", reduction_length=K,
                 op_class="accumulation")


def test_float32_tiles_inside_are_stored_directly():
    src = core.compile(gemm_global(36, 20, 48, 32, 32, 16, "float16")).msl
    assert "simdgroup_store(C_mat[" in src and ", &C[" in src       # straight to device
    assert "simdgroup_load(C_mat[" in src                           # and back from it
    assert FLOAT_STAGE.search(src)                                  # the straddling tiles


@pytest.mark.parametrize("out_dtype", HALVES)
@pytest.mark.parametrize("M, N, K", [(64, 32, 32), (40, 44, 40)])
def test_half_c_goes_through_a_float_stage(run, out_dtype, M, N, K):
    kernel = core.compile(gemm_global(M, N, K, 32, 32, 16, out_dtype, out_dtype))
    src = kernel.msl
    assert FLOAT_STAGE.search(src)
    assert ", &C[" not in src                     # no matrix stored through a half pointer
    a, b = random_tensor((M, K), out_dtype, 6), random_tensor((K, N), out_dtype, 7)
    c = torch.zeros(M, N, dtype=getattr(torch, out_dtype))
    run(kernel, a, b, c)
    assert_close(c, oracle(a, b), dtype=out_dtype, reduction_length=K,
                 op_class="accumulation")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("trans_B", [False, True])
def test_accumulates_into_prior_contents(run, dtype, trans_B):
    M, N, K = 48, 40, 32                          # ragged against 32 x 32 blocks
    kernel = core.compile(gemm_global(M, N, K, 32, 32, 16, dtype, threads=64,
                                      clear_first=False, trans_B=trans_B))
    a = random_tensor((M, K), dtype, 8)
    b = random_tensor((N, K) if trans_B else (K, N), dtype, 9)
    c0 = random_tensor((M, N), "float32", 2)
    c = c0.clone()
    run(kernel, a, b, c)
    assert_close(c, oracle(a, b, c0, trans_B), dtype=dtype, reduction_length=K,
                 op_class="accumulation")


def test_c_in_device_memory_with_an_integer_dtype_is_a_clear_error():
    @T.prim_func
    def int_c(A: T.Tensor((16, 16), "float16"), B: T.Tensor((16, 16), "float16"),
              C: T.Tensor((16, 16), "int32")):
        with T.Kernel(1, threads=32):
            A_s = T.alloc_shared((16, 16), "float16")
            B_s = T.alloc_shared((16, 16), "float16")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C[0:16, 0:16], clear_accum=True)

    with pytest.raises(KernelDefinitionError,
                       match=r"operand C 'C'.*int32.*device memory must be one of float32"):
        core.compile(int_c)


def test_a_device_tile_that_may_cross_the_edge_is_a_clear_error():
    @T.prim_func
    def ragged_a(A: T.Tensor((20, 16), "float16"), B: T.Tensor((16, 16), "float16"),
                 C: T.Tensor((32, 16), "float32")):
        with T.Kernel(2, threads=32) as bx:
            B_s = T.alloc_shared((16, 16), "float16")
            T.copy(B, B_s)
            T.gemm(A[bx * 16:bx * 16 + 16, 0:16], B_s, C[bx * 16:bx * 16 + 16, 0:16],
                   clear_accum=True)

    with pytest.raises(LoweringError,
                       match=r"operand 'A'.*not provably inside.*T.alloc_shared"):
        core.compile(ragged_a)


@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
def test_every_barrier_of_a_device_c_gemm_is_necessary(out_dtype):
    M, N, K = 40, 36, 48                          # edge tiles through the stage
    func = gemm_global(M, N, K, 16, 16, 16, "float16", out_dtype, threads=64)
    args = (random_tensor((M, K), "float16", 10), random_tensor((K, N), "float16", 11),
            torch.zeros(M, N, dtype=getattr(torch, out_dtype)))
    assert assert_every_barrier_necessary(func, None, args) >= 2


def splitk_accumulate(M, N, K, bM, bN, bK, split_k):
    """TileLang's split-K idea (examples/gemm_splitk, in our words) with each split adding
    its partial product to C through T.gemm on C's device tile: the splits run one after
    another in the block (a serial loop over them), every split's gemms accumulate."""
    splitK = K // split_k

    @T.prim_func
    def matmul(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
               C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_shared = T.alloc_shared((bM, bK), "float16")
            B_shared = T.alloc_shared((bK, bN), "float16")
            for s in T.serial(split_k):
                for ko in T.Pipelined(T.ceildiv(splitK, bK), num_stages=0):
                    T.copy(A[by * bM, s * splitK + ko * bK], A_shared)
                    T.copy(B[s * splitK + ko * bK, bx * bN], B_shared)
                    T.gemm(A_shared, B_shared, C[by * bM:by * bM + bM, bx * bN:bx * bN + bN])

    return matmul


def test_split_k_accumulating_in_device_memory(run):
    M, N, K = 72, 40, 64
    kernel = core.compile(splitk_accumulate(M, N, K, 32, 32, 16, 2))
    a, b = random_tensor((M, K), "float16", 12), random_tensor((K, N), "float16", 13)
    c0 = random_tensor((M, N), "float32", 3)
    c = c0.clone()
    run(kernel, a, b, c)
    assert_close(c, oracle(a, b, c0), dtype="float16", reduction_length=K,
                 op_class="accumulation")


def gemm_v2_global_c(M, N, K, bM, bN, dtype="float16", accum_dtype="float32", threads=128,
                     swizzle_panel=0, swizzle_order="row"):
    """TileLang's testing/python/metal/test_metal_gemm_v2.py global-C kernel, in our words:
    one T.gemm per block, A and B straight from device memory over the whole K, C the
    block's device tile, clear_accum; optionally with T.use_swizzle, or the "mlx" order:
    a grid of panel_size x more columns, each block remapping its own tile indices and
    skipping the ones past M."""
    mlx = bool(swizzle_panel) and swizzle_order == "mlx"
    tiles_n, tiles_m = -(-N // bN), -(-M // bM)
    grid_n = tiles_n * swizzle_panel if mlx else tiles_n
    grid_m = -(-tiles_m // swizzle_panel) if mlx else tiles_m

    @T.prim_func
    def gemm_kernel(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
                    C: T.Tensor((M, N), accum_dtype)):
        with T.Kernel(grid_n, grid_m, threads=threads) as (bx, by):
            tx = bx // swizzle_panel if mlx else bx
            ty = by * swizzle_panel + bx % swizzle_panel if mlx else by
            if swizzle_panel and not mlx:
                T.use_swizzle(panel_size=swizzle_panel, order=swizzle_order)
            if mlx:
                if ty < tiles_m:
                    T.gemm(A[ty * bM:(ty + 1) * bM, 0:K], B[0:K, tx * bN:(tx + 1) * bN],
                           C[ty * bM:(ty + 1) * bM, tx * bN:(tx + 1) * bN], clear_accum=True)
            else:
                T.gemm(A[ty * bM:(ty + 1) * bM, 0:K], B[0:K, tx * bN:(tx + 1) * bN],
                       C[ty * bM:(ty + 1) * bM, tx * bN:(tx + 1) * bN], clear_accum=True)

    return gemm_kernel


@pytest.mark.parametrize("accum_dtype, swizzle_panel, swizzle_order, M", [
    ("float32", 0, "row", 64),            # test_gemm_v2_cooperative_tensor_global_c
    ("float32", 2, "row", 64),
    ("float16", 2, "column", 96),
    ("float16", 4, "mlx", 64),            # ..._global_c_fp16_mlx_swizzle
    ("float16", 4, "mlx", 96),            # ..._multirow (sizes cut for the CPU)
])
def test_port_gemm_v2_global_c(run, accum_dtype, swizzle_panel, swizzle_order, M):
    N, K = 64, 32
    kernel = core.compile(gemm_v2_global_c(M, N, K, 16, 32, accum_dtype=accum_dtype,
                                           swizzle_panel=swizzle_panel,
                                           swizzle_order=swizzle_order))
    a, b = random_tensor((M, K), "float16", 14), random_tensor((K, N), "float16", 15)
    c = torch.zeros(M, N, dtype=getattr(torch, accum_dtype))
    run(kernel, a, b, c)
    assert_close(c, oracle(a, b), dtype=accum_dtype if accum_dtype != "float32" else "float16",
                 reduction_length=K, op_class="accumulation")


def test_a_device_c_stage_beyond_threadgroup_memory_is_a_clear_error():
    # a float16 C goes through a float32 stage of the whole 128 x 128 tile: 64 KiB
    # (pass merge_threadgroup: it is live beside the operand tiles, inside the k loop)
    with pytest.raises(LoweringError, match=r"live at once, 'C_stage' \(65536 bytes\).*"
                                            r"exceed the 32768 bytes"):
        core.compile(gemm_global(256, 256, 32, 128, 128, 16, "float16", "float16"))


@pytest.mark.parametrize("M, N", [(40, 56), (36, 20)])
def test_edge_stage_only_when_a_tile_can_straddle(M, N):
    src = core.compile(gemm_global(M, N, 32, 32, 32, 16, "float16")).msl
    straddles = M % 8 != 0 or N % 8 != 0
    assert ("C_stage" in src) == straddles
