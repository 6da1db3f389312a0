"""T.use_swizzle(panel, order="mlx") (core/ir/swizzle.py `mlx_order`, pass block_swizzle):
MLX's rasterization of a grid launched in MLX's shape, against torch.

TileLang's Metal GEMM example (the grid x scaled up by the panel, y down; the logical tile
computed as bx // panel, by * panel + bx % panel; rows past the tiles guarded) matches
torch.matmul on ragged shapes, with the rasterization applied once; bare block indices
after the call are MLX's remapped ones.
"""

import pytest
import torch

import core
import core.language as T
from core.ir.swizzle import mlx_order
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


@pytest.mark.parametrize("panel", [1, 2, 4])
def test_tilelang_metal_gemm_example_matches_torch(run, panel):
    M, N, K, bM, bN, bK = 72, 40, 32, 16, 16, 16
    tiles_m, tiles_n = -(-M // bM), -(-N // bN)

    @T.prim_func
    def matmul(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
               C: T.Tensor((M, N), "float32")):
        with T.Kernel(tiles_n * panel, T.ceildiv(tiles_m, panel), threads=64) as (bx, by):
            logical_bx = bx // panel
            logical_by = by * panel + bx % panel
            T.use_swizzle(panel_size=panel, order="mlx")
            A_s = T.alloc_shared((bM, bK), "float16")
            B_s = T.alloc_shared((bK, bN), "float16")
            C_l = T.alloc_fragment((bM, bN), "float32")
            if logical_by < tiles_m:
                T.clear(C_l)
                for ko in T.Pipelined(T.ceildiv(K, bK), num_stages=2):
                    T.copy(A[logical_by * bM, ko * bK], A_s)
                    T.copy(B[ko * bK, logical_bx * bN], B_s)
                    T.gemm(A_s, B_s, C_l)
                T.copy(C_l, C[logical_by * bM, logical_bx * bN])

    a, b = random_tensor((M, K), "float16", 1), random_tensor((K, N), "float16", 2)
    out = run(core.compile(matmul, out_idx=[2]), a, b)
    assert_close(out, a.double() @ b.double(), "float32", reduction_length=K,
                 op_class="accumulation", what=f"mlx gemm panel={panel}")


def test_bare_block_indices_are_mlx_remapped(run):
    panel, tiles_n, tiles_m = 4, 3, 8
    gx, gy = tiles_n * panel, tiles_m // panel

    @T.prim_func
    def order(O: T.Tensor((tiles_m, tiles_n), "int32")):
        with T.Kernel(gx, gy, threads=32) as (bx, by):
            launched = bx + by * 1000          # before the call: the launch position
            T.use_swizzle(panel, order="mlx")
            if T.get_thread_binding() == 0:
                O[by, bx] = launched

    out = run(core.compile(order, out_idx=[0]))
    want = torch.zeros(tiles_m, tiles_n, dtype=torch.int32)
    for y in range(gy):
        for x in range(gx):
            tx, ty = mlx_order(panel, x, y)
            want[ty, tx] = x + y * 1000
    assert_close(out, want, op_class="exact", what="mlx order")
