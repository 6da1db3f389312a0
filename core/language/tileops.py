"""Tile operations of the DSL: `T.copy`, `T.fill`, `T.clear`.

Each call emits one tile-op call (core/ir/ops.py) whose operands are regions; the
lowering turns it into per-thread loops. Accepted operand forms, as in TileLang:
    A                      the whole buffer
    A[by * bM, k * bK]     a tile whose origin is given, extents from the other operand
    A[i0:i1, j0:j1]        a tile with explicit extents
TileLang's tuning keywords (`coalesced_width`, `disable_tma`, `eviction_policy`, ...) are
accepted and have no effect on Metal.
"""

from __future__ import annotations

import tvm
from tvm.tirx import is_buffer_var
from tvm.tirx.script.builder import ir as _ir

from core.ir import ops
from core.language.errors import KernelDefinitionError


def _region(x, construct):
    if isinstance(x, tvm.ir.TensorRegion):
        return ops.encode_region(x.source, [r.min for r in x.region],
                                 [r.extent for r in x.region])
    if is_buffer_var(x):
        shape = list(x.ty.shape)
        return ops.encode_region(x, [0] * len(shape), shape)
    if isinstance(x, tvm.ir.TensorLoad) and is_buffer_var(x.source):
        return ops.encode_region(x.source, list(x.indices))
    if hasattr(x, "scalar") and isinstance(x.scalar, tvm.ir.TensorLoad):  # T.alloc_var
        return _region(x.scalar.source, construct)
    raise KernelDefinitionError(
        f"operand {x!r} is not a buffer or a buffer tile; allowed: A, A[i, j] (tile origin), "
        "A[i0:i1, j0:j1]", construct=construct)


def copy(src, dst, coalesced_width=None, disable_tma=False, eviction_policy=None,
         annotations=None, **_tilelang_options):
    """dst := src, element-wise, converting the dtype; edge tiles are masked."""
    _ir.evaluate(ops.call("tl.copy", _region(src, "T.copy source"),
                          _region(dst, "T.copy destination")))


def fill(buffer, value):
    """Every element of `buffer` (or tile) := value."""
    region = _region(buffer, "T.fill")
    dtype = ops.buffer_dtype(ops.decode_region(region).buffer)
    if not isinstance(value, tvm.ir.Expr):
        value = tvm.tirx.const(value, dtype)
    _ir.evaluate(ops.call("tl.fill", region, value))


def clear(buffer):
    """Every element of `buffer` := 0."""
    fill(buffer, 0)
