"""Pass `block_swizzle`: `T.use_swizzle` takes effect here. The swizzle AttrStmt is gone
and the block indices after it are the remapped ones of `block_order` (a permutation of
the grid); a swizzle twice in one kernel is rejected."""

import pytest
import tvm
import tvm_ffi
from tvm import tirx

import core.language as T
from core.errors import KernelDefinitionError
from core.ir.annotations import SWIZZLE_PATTERN
from core.ir.kernel import kernels
from core.ir.stmt import substitute
from core.ir.swizzle import block_order
from core.transform import pipeline

from .irq import nodes, stores

GX, GY, PANEL = 4, 6, 2


def tiles(order):
    @T.prim_func
    def swizzled(A: T.Tensor((GY * 8, GX * 8), "float32"),
                 B: T.Tensor((GY * 8, GX * 8), "float32")):
        with T.Kernel(GX, GY, threads=64) as (bx, by):
            T.use_swizzle(PANEL, order=order)
            for i, j in T.Parallel(8, 8):
                B[by * 8 + i, bx * 8 + j] = A[by * 8 + i, bx * 8 + j]
    return swizzled


def _swizzles(func) -> list:
    return [a for a in nodes(func, tirx.AttrStmt) if a.attr_key == SWIZZLE_PATTERN]


def _tile_of_each_block(func) -> dict:
    """(bx, by) launch position -> (tile column, tile row) the block stores, read off the
    store's indices at i = j = 0."""
    nest = kernels(func)[0]
    bx, by = nest.block_vars
    store, = stores(func, "B")
    loop_vars = {f.loop_var.name: f.loop_var for f in nodes(func, tirx.For)}
    i, j = loop_vars["i"], loop_vars["j"]
    analyzer = tvm.sym.Analyzer()
    out = {}
    for x in range(GX):
        for y in range(GY):
            vmap = {bx: tirx.const(x, "int32"), by: tirx.const(y, "int32"),
                    i: tirx.const(0, "int32"), j: tirx.const(0, "int32")}
            row, col = (int(analyzer.simplify(substitute(e, vmap))) for e in store.indices)
            out[(x, y)] = (col // 8, row // 8)
    return out


@pytest.mark.parametrize("order", ["row", "column"])
def test_block_indices_are_remapped_as_block_order_says(order):
    before = pipeline.run(tiles(order), stop_after="legalize")
    assert len(_swizzles(before)) == 1
    identity = {(x, y): (x, y) for x in range(GX) for y in range(GY)}
    assert _tile_of_each_block(before) == identity
    after = pipeline.run(tiles(order), stop_after="block_swizzle")
    assert not _swizzles(after)
    remapped = _tile_of_each_block(after)
    assert remapped == {(x, y): block_order(order, PANEL, GX, GY, x, y) for x, y in identity}
    assert remapped != identity
    assert sorted(remapped.values()) == sorted(identity.values())   # a permutation


def test_a_kernel_without_swizzle_is_returned_as_it_is():
    @T.prim_func
    def plain(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            for i in T.Parallel(32):
                B[bx * 32 + i] = A[bx * 32 + i]
    before = pipeline.run(plain, stop_after="legalize")
    after = pipeline.run(plain, stop_after="block_swizzle")
    assert tvm_ffi.structural_equal(before, after)


def test_two_swizzles_in_one_kernel_are_rejected():
    @T.prim_func
    def twice(A: T.Tensor((32, 32), "float32"), B: T.Tensor((32, 32), "float32")):
        with T.Kernel(4, 4, threads=64) as (bx, by):
            T.use_swizzle(2)
            T.use_swizzle(2, order="column")
            for i, j in T.Parallel(8, 8):
                B[by * 8 + i, bx * 8 + j] = A[by * 8 + i, bx * 8 + j]
    pipeline.run(twice, stop_after="legalize")
    with pytest.raises(KernelDefinitionError, match="kernel 'twice', T.use_swizzle: is called "
                                                    "twice in one kernel"):
        pipeline.run(twice, stop_after="block_swizzle")


def test_mlx_order_remaps_bare_indices_once():
    """order="mlx": bare bx/by become MLX's rasterization; the kernel's own bx // panel,
    bx % panel and by * panel keep their meaning (the rasterization applies once)."""
    @T.prim_func
    def mlx(O: T.Tensor((8, 8), "int32"), P: T.Tensor((8, 8), "int32")):
        with T.Kernel(8, 2, threads=32) as (bx, by):
            T.use_swizzle(4, order="mlx")
            O[by * 4 + bx % 4, bx // 4] = 1
            P[by, bx] = 2

    out = pipeline.run(mlx, stop_after="block_swizzle")
    assert not _swizzles(out)
    (o,), (p,) = stores(out, "O"), stores(out, "P")
    assert [str(i) for i in o.indices] == ["by * 4 + bx % 4", "bx // 4"]
    assert [str(i) for i in p.indices] == ["by * 4 + bx % 4", "bx // 4"]
