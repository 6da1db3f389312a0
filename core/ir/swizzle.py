"""The block swizzle of `T.use_swizzle` (core/language/swizzle.py): its attribute and its
mapping.

The attribute: an AttrStmt with key `threadblock_swizzle_pattern` (SWIZZLE_PATTERN,
core/ir/annotations.py) around the rest of a kernel body, whose node is the order (a
StringImm, one of ORDERS) and whose value is the panel size (an int32 constant);
`is_swizzle_attr` recognizes it and `attr_params` decodes it. core/transform/block_swizzle.py
replaces it by its body with the block indices remapped.

The mapping, `block_order`: threadgroups launched one after another (consecutive linear
ids) cover a panel of `panel` tile rows ("row") or columns ("column") before moving on;
panels alternate direction. It is a permutation of the grid, on Python ints or on TIR
expressions.

Order "mlx" (`MLX`, TileLang's Metal GEMM option) is MLX's steel-GEMM rasterization for a
grid launched in MLX's shape (x: the tile columns times the panel, y: the tile rows over
the panel, rounded up): the threadgroup at (bx, by) computes tile
(bx >> log2(panel), (by << log2(panel)) + (bx & (panel - 1))) (`mlx_order`); the panel is
a power of two. It is not a permutation of the grid (a ragged last panel gives rows past
the tiles, which the kernel guards, as MLX and TileLang's example do).
"""

from __future__ import annotations

from tvm import tirx

from core.ir.annotations import SWIZZLE_PATTERN

ORDERS = ("row", "column")
MLX = "mlx"


def _int_ops():
    return (lambda a, b: a // b, lambda a, b: a % b, lambda c, a, b: a if c else b)


def _expr_ops():
    return (tirx.floordiv, tirx.floormod, tirx.Select)


def dtype_of(expr) -> str:
    return str(expr.ty.dtype)


def block_order(order: str, panel: int, gx, gy, bx, by):
    """(bx', by'): the tile that the threadgroup at launch position (bx, by) of a gx x gy
    grid computes. Python ints in, ints out; TIR expressions in, expressions out."""
    is_int = all(isinstance(v, int) for v in (gx, gy, bx, by))
    div, mod, select = _int_ops() if is_int else _expr_ops()
    if not is_int:  # one integer dtype for every term (an int64 grid, int32 indices)
        dt = "int64" if any(not isinstance(v, int) and dtype_of(v) == "int64"
                            for v in (gx, gy, bx, by)) else "int32"
        gx, gy, bx, by = (tirx.const(v, dt) if isinstance(v, int) else tirx.Cast(dt, v)
                          if dtype_of(v) != dt else v for v in (gx, gy, bx, by))
        panel = tirx.const(panel, dt)
    # Along `across` the panel is `panel` wide; `along` is the direction it is walked.
    along_extent = gx if order == "row" else gy
    linear = bx + by * gx
    total = gx * gy
    panel_blocks = panel * along_extent
    offset = mod(linear, panel_blocks)
    index = div(linear, panel_blocks)
    panels = div(total + panel_blocks - 1, panel_blocks)
    width = select(index + 1 < panels, panel, div(total - index * panel_blocks, along_extent))
    forward = div(offset, width)
    along = select(mod(index, 2) == 1, along_extent - 1 - forward, forward)
    across = mod(offset, width) + index * panel
    return (along, across) if order == "row" else (across, along)


def mlx_order(panel: int, bx, by):
    """(bx', by') of MLX's rasterization (see the module doc): ints or TIR expressions."""
    if isinstance(bx, int) and isinstance(by, int):
        return bx // panel, by * panel + bx % panel
    return tirx.floordiv(bx, panel), by * panel + tirx.floormod(bx, panel)


def is_swizzle_attr(stmt) -> bool:
    return isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == SWIZZLE_PATTERN


def attr_params(stmt) -> tuple:
    """(order, panel) of a swizzle AttrStmt."""
    return str(stmt.node.value), int(stmt.value.value)

