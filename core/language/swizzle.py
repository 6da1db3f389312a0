"""`T.use_swizzle(panel_size, order="row", enable=True)`: threadgroup rasterization.

Inside a 2-D `T.Kernel(gx, gy)`, the statements after the call see remapped block
indices: threadgroups launched one after another (consecutive linear ids) cover a panel
of `panel_size` tile rows ("row") or columns ("column") before moving on, so the A and B
tiles they read are shared while they run (L2 reuse on a GPU); panels alternate direction.
The mapping is a permutation of the grid: results never change, only which tiles run
together. Emitted as an AttrStmt `threadblock_swizzle_pattern` (node: the order, value:
the panel size) around the rest of the kernel body; core/transform/block_swizzle.py
substitutes the block indices. `block_order` is the mapping itself, on Python ints or on
TIR expressions.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir.annotations import SWIZZLE_PATTERN

ATTR_KEY = SWIZZLE_PATTERN   # read by core/transform/block_swizzle.py
ORDERS = ("row", "column")


def use_swizzle(panel_size: int, order: str = "row", enable: bool = True):
    """Remap the block indices of the rest of the kernel body (see the module doc)."""
    if order == "mlx":
        raise KernelDefinitionError(
            "order='mlx' remaps a grid launched in MLX's own shape (x scaled up by the "
            "panel, y down), which a T.Kernel grid is not; allowed orders: 'row', 'column'",
            construct="T.use_swizzle")
    if order not in ORDERS:
        raise KernelDefinitionError(f"order={order!r} is not allowed; allowed: "
                                    f"{', '.join(map(repr, ORDERS))}",
                                    construct="T.use_swizzle")
    if isinstance(panel_size, tirx.IntImm):
        panel_size = int(panel_size.value)
    if not isinstance(panel_size, int) or isinstance(panel_size, bool) or panel_size <= 0:
        raise KernelDefinitionError(f"panel_size={panel_size!r} must be a positive int "
                                    "known when the kernel is defined",
                                    construct="T.use_swizzle")
    if not isinstance(enable, (bool, int)):
        raise KernelDefinitionError(f"enable={enable!r} must be a Python bool",
                                    construct="T.use_swizzle")
    if not enable:
        return None
    return _ir.attr(tvm.ir.StringImm(order), ATTR_KEY, tirx.const(panel_size, "int32"))


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


def is_swizzle_attr(stmt) -> bool:
    return isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == ATTR_KEY


def attr_params(stmt) -> tuple:
    """(order, panel) of a swizzle AttrStmt."""
    return str(stmt.node.value), int(stmt.value.value)

