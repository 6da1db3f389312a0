"""T.use_swizzle: block rasterization as a real remapping of the block indices."""

from __future__ import annotations

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from core.ir.swizzle import block_order
from harness.check.compare import assert_close
from harness.check.case import Status, run_case
from harness.gen.inputs import random_tensor


@pytest.mark.parametrize("order", ["row", "column"])
def test_mapping_is_a_permutation(order):
    for gx in range(1, 10):
        for gy in range(1, 10):
            for panel in range(1, 11):
                tiles = [block_order(order, panel, gx, gy, x, y)
                         for y in range(gy) for x in range(gx)]
                assert sorted(tiles) == sorted((x, y) for y in range(gy) for x in range(gx))


def _distinct_tiles_per_wave(order, panel, gx, gy, wave):
    """A and B tiles (rows by, columns bx) that `wave` consecutively launched threadgroups
    of a GEMM grid read, summed over the waves: what a cache shared by them must hold."""
    launch = [(x, y) for y in range(gy) for x in range(gx)]
    total = 0
    for start in range(0, len(launch), wave):
        tiles = [block_order(order, panel, gx, gy, x, y) if panel else (x, y)
                 for x, y in launch[start:start + wave]]
        total += len({t[1] for t in tiles}) + len({t[0] for t in tiles})
    return total


def test_swizzle_groups_tiles_that_share_operands():
    # 16 x 16 tiles, 16 threadgroups in flight: a row-major wave reads 1 A + 16 B tiles;
    # a panel of 4 rows reads 4 A + 4 B tiles.
    plain = _distinct_tiles_per_wave("row", 0, 16, 16, 16)
    swizzled = _distinct_tiles_per_wave("row", 4, 16, 16, 16)
    assert plain == 16 * 17 and swizzled == 16 * 8


@pytest.mark.parametrize("order,panel,gx,gy", [("row", 3, 5, 7), ("column", 2, 6, 3),
                                               ("row", 8, 4, 4), ("column", 1, 3, 5)])
def test_compiled_kernel_follows_the_mapping(run, order, panel, gx, gy):
    @T.prim_func
    def which(O: T.Tensor((gy, gx), "int32")):
        with T.Kernel(gx, gy, threads=32) as (bx, by):
            launched = T.alloc_var("int32")
            launched = bx + by * gx   # before the swizzle: the launch position
            T.use_swizzle(panel, order=order)
            if T.get_thread_binding(0) == 0:
                O[by, bx] = launched

    out = run(core.compile(which, out_idx=[0]))
    expected = torch.zeros(gy, gx, dtype=torch.int32)
    for y in range(gy):
        for x in range(gx):
            tx, ty = block_order(order, panel, gx, gy, x, y)
            expected[ty, tx] = x + y * gx
    assert torch.equal(out, expected)


@pytest.mark.parametrize("order,panel", [("row", 2), ("column", 3)])
def test_swizzled_gemm_matches_torch_on_ragged_shapes(run, order, panel):
    M, N, K, bM, bN, bK = 72, 88, 40, 16, 16, 16

    @T.prim_func
    def matmul(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
               C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=64) as (bx, by):
            A_s = T.alloc_shared((bM, bK), "float16")
            B_s = T.alloc_shared((bK, bN), "float16")
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.use_swizzle(panel_size=panel, order=order)
            T.clear(C_l)
            for ko in T.Pipelined(T.ceildiv(K, bK), num_stages=2):
                T.copy(A[by * bM, ko * bK], A_s)
                T.copy(B[ko * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bM, bx * bN])

    a, b = random_tensor((M, K), "float16", 1), random_tensor((K, N), "float16", 2)
    out = run(core.compile(matmul, out_idx=[2]), a, b)
    assert_close(out, a.double() @ b.double(), "float32", reduction_length=K,
                 op_class="accumulation")


def test_gemm_family_draws_swizzle(backend):
    params = dict(M=40, N=56, K=24, bM=16, bN=16, bK=16, threads=64, dtype="float32",
                  out_dtype="float32", trans_A=True, trans_B=False, num_stages=0,
                  init="clear_accum", a_operand="shared", epilogue="none", swizzle=2,
                  swizzle_order="column")
    result = run_case("gemm", params, backend=backend)
    assert result.status == Status.PASS, result


@pytest.mark.parametrize("kwargs,message", [
    (dict(panel_size=0), "panel_size=0 must be a positive int"),
    (dict(panel_size=4, order="diagonal"), "order='diagonal' is not allowed"),
    (dict(panel_size=3, order="mlx"), "panel_size=3 with order='mlx' must be a power of two"),
])
def test_bad_swizzle_arguments(kwargs, message):
    with pytest.raises(KernelDefinitionError, match=message):
        @T.prim_func
        def k(O: T.Tensor((4, 4), "int32")):
            with T.Kernel(4, 4, threads=32) as (bx, by):
                T.use_swizzle(**kwargs)
                O[by, bx] = 0


def test_disabled_swizzle_is_the_identity(run):
    @T.prim_func
    def k(O: T.Tensor((3, 5), "int32")):
        with T.Kernel(5, 3, threads=32) as (bx, by):
            T.use_swizzle(2, enable=False)
            if T.get_thread_binding() == 0:
                O[by, bx] = bx + by * 5

    assert torch.equal(run(core.compile(k, out_idx=[0])),
                       torch.arange(15, dtype=torch.int32).reshape(3, 5))


@pytest.mark.parametrize("dim_dtype", ["int32", "int64"])
def test_swizzle_on_a_symbolic_grid(run, dim_dtype):
    m, n = T.dynamic("m", dim_dtype), T.dynamic("n", dim_dtype)

    @T.prim_func
    def owner(A: T.Tensor((m, n), "float32"), O: T.Tensor((m, n), "int32")):
        with T.Kernel(T.ceildiv(n, 8), T.ceildiv(m, 8), threads=64) as (bx, by):
            launched = T.alloc_var("int32")
            launched = bx + by * T.ceildiv(n, 8)
            T.use_swizzle(3, order="column")
            for i, j in T.Parallel(8, 8):
                if by * 8 + i < m and bx * 8 + j < n:
                    O[by * 8 + i, bx * 8 + j] = launched

    M, N = 37, 61   # ragged: 8 x 5 tiles, the last row and column partial
    out = run(core.compile(owner, out_idx=[1]), torch.zeros(M, N))
    gx, gy = -(-N // 8), -(-M // 8)
    expected = torch.zeros(M, N, dtype=torch.int32)
    for y in range(gy):
        for x in range(gx):
            tx, ty = block_order("column", 3, gx, gy, x, y)
            expected[ty * 8:(ty + 1) * 8, tx * 8:(tx + 1) * 8] = x + y * gx
    assert torch.equal(out, expected)


def test_swizzle_outside_a_kernel_or_twice_is_an_error():
    @T.prim_func
    def outside(O: T.Tensor((4, 4), "int32")):
        T.use_swizzle(2)
        with T.Kernel(4, 4, threads=32) as (bx, by):
            O[by, bx] = 0

    with pytest.raises(KernelDefinitionError, match="T.use_swizzle: is only allowed inside"):
        core.compile(outside)

    @T.prim_func
    def twice(O: T.Tensor((4, 4), "int32")):
        with T.Kernel(4, 4, threads=32) as (bx, by):
            T.use_swizzle(2)
            T.use_swizzle(2, order="column")
            O[by, bx] = 0

    with pytest.raises(KernelDefinitionError, match="T.use_swizzle: is called twice"):
        core.compile(twice)
