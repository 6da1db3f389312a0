"""`T.use_swizzle(panel_size, order="row", enable=True)`: threadgroup rasterization.

Inside a 2-D `T.Kernel(gx, gy)`, the statements after the call see remapped block
indices: threadgroups launched one after another (consecutive linear ids) cover a panel
of `panel_size` tile rows ("row") or columns ("column") before moving on, so the A and B
tiles they read are shared while they run (L2 reuse on a GPU); panels alternate direction.
The mapping is a permutation of the grid: results never change, only which tiles run
together. Emitted as an AttrStmt `threadblock_swizzle_pattern` (node: the order, value:
the panel size) around the rest of the kernel body; the attribute and the mapping
(`block_order`) are defined in core/ir/swizzle.py, and core/transform/block_swizzle.py
substitutes the block indices.

order="mlx" (TileLang's Metal GEMM option): the grid is launched in MLX's shape and the
block indices after the call are MLX's rasterization, bx' = bx // panel and
by' = by * panel + bx % panel (core/ir/swizzle.py, `mlx_order`), as TileLang's Metal code
generator redefines blockIdx. Where the kernel already writes that arithmetic itself
(`bx // panel`, `bx % panel`, `by * panel`: TileLang's example computes its logical tile
so), it keeps its meaning, as TileLang's generator recognizes those forms, so the
rasterization is applied once; the panel must be a power of two.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir.annotations import SWIZZLE_PATTERN
from core.ir.swizzle import MLX, ORDERS


def use_swizzle(panel_size: int, order: str = "row", enable: bool = True):
    """Remap the block indices of the rest of the kernel body (see the module doc)."""
    if order not in ORDERS + (MLX,):
        raise KernelDefinitionError(f"order={order!r} is not allowed; allowed: "
                                    f"{', '.join(map(repr, ORDERS + (MLX,)))}",
                                    construct="T.use_swizzle")
    if isinstance(panel_size, tirx.IntImm):
        panel_size = int(panel_size.value)
    if not isinstance(panel_size, int) or isinstance(panel_size, bool) or panel_size <= 0:
        raise KernelDefinitionError(f"panel_size={panel_size!r} must be a positive int "
                                    "known when the kernel is defined",
                                    construct="T.use_swizzle")
    if order == MLX and panel_size & (panel_size - 1):
        raise KernelDefinitionError(
            f"panel_size={panel_size} with order='mlx' must be a power of two (MLX's "
            "rasterization shifts by log2 of the panel)", construct="T.use_swizzle")
    if not isinstance(enable, (bool, int)):
        raise KernelDefinitionError(f"enable={enable!r} must be a Python bool",
                                    construct="T.use_swizzle")
    if not enable:
        return None
    return _ir.attr(tvm.ir.StringImm(order), SWIZZLE_PATTERN, tirx.const(panel_size, "int32"))
