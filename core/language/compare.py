"""Comparisons in kernels promote mixed integer widths, as TVM's Python operators do.

TVMScript's tirx parser builds `a < b` (and <=, >, >=, ==, !=) with the bare `tirx.LT`
constructor, which requires equal dtypes, so `bx * 64 + i < L` with an int64 dim `L` and
int32 indices failed to parse ("mismatched types int32 vs int64") while the same
expression outside a kernel promotes. `install()` wraps the parser's comparison handlers:
when both operands are integer expressions of different widths, the narrower is cast to
the wider first; everything else goes to the original handler unchanged.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.script.parser._core import doc
from tvm.script.parser.core.dispatch import get_op, register_op

from core.language.buffers import var_value

_COMPARISONS = (doc.Eq, doc.NotEq, doc.Lt, doc.LtE, doc.Gt, doc.GtE)
_installed = False


def _int_dtype(x):
    if not tvm.ir.is_prim_expr(x):
        return None
    dt = tvm.DataType(str(x.ty.dtype))
    return dt if dt.type_code in (0, 1) and dt.lanes == 1 else None  # int, uint


def promote(a, b) -> tuple:
    """(a, b) with the narrower of two integer expressions cast to the wider dtype."""
    a, b = var_value(a), var_value(b)
    da, db = _int_dtype(a), _int_dtype(b)
    if da is None or db is None or da.bits == db.bits:
        return a, b
    if da.bits < db.bits:
        return tirx.Cast(str(db), a), b
    return a, tirx.Cast(str(da), b)


def install() -> None:
    """Wrap the tirx parser's comparison handlers (once per process)."""
    global _installed
    if _installed:
        return
    for ty in (tirx.Expr, tirx.IterVar):
        for op in _COMPARISONS:
            for index in (0, 1):
                original = get_op(ty, op, index)
                if original is None:
                    continue

                def promoted(a, b, _original=original):
                    return _original(*promote(a, b))
                register_op(ty, op, index)(promoted)
    _installed = True
