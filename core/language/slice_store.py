"""Stores to a buffer slice: `B[a:b] = A[a:b]`, `S[0:4, j] = 0.0`.

TileLang reads a store whose index has a slice as an element-wise operation over the
slice's elements; TVMScript's tirx parser hands the slice's TensorRegion to a scalar
BufferStore and fails inside an FFI call. Here (`install()` wraps the parser's Assign, and
eager functions call `store` directly):
    value a buffer slice or a buffer   T.copy(value, B[slice]): element-wise, the extents
                                       checked by T.copy's rules
    value a scalar (TIR or Python)     T.fill(B[slice], value)
and anything else (an arithmetic expression over slices) is a KernelDefinitionError naming
the store: write it as a T.Parallel loop.
"""

from __future__ import annotations

import tvm
from tvm.script.parser.core import dispatch, doc
from tvm.tirx import is_buffer_var

from core.errors import KernelDefinitionError
from core.language.buffers import var_value

_installed = False


def has_slice(index) -> bool:
    idx = index if isinstance(index, (tuple, list)) else (index,)
    return any(isinstance(i, slice) for i in idx)


def store(buf, index, value, construct="B[a:b] = ..."):
    """Emit the tile op of the slice store `buf[index] = value`."""
    from core.language.tileops import copy, fill
    idx = tuple(index) if isinstance(index, (tuple, list)) else (index,)
    region = buf[idx]
    value = var_value(value)
    if isinstance(value, tvm.ir.TensorRegion) or is_buffer_var(value):
        return copy(value, region)
    if isinstance(value, (bool, int, float)) or tvm.ir.is_prim_expr(value):
        return fill(region, value)
    raise KernelDefinitionError(
        f"the value stored to the slice of '{buf.name}' is {type(value).__name__}; a slice "
        "store takes a buffer slice (an element-wise copy) or a scalar (a fill); write "
        "other element-wise expressions as a T.Parallel loop", construct=construct)


def _index_values(self, target):
    """The evaluated index of a Subscript target, as TVMScript's visit_assign does."""
    if isinstance(target.slice, doc.Tuple):
        out = []
        for e in target.slice.elts:
            if isinstance(e, doc.Starred):
                out.extend(self.eval_expr(e.value))
            else:
                out.append(self.eval_expr(e))
        return out
    return self.eval_expr(target.slice)


def _sliced(target) -> bool:
    s = target.slice
    return isinstance(s, doc.Slice) or (
        isinstance(s, doc.Tuple) and any(isinstance(e, doc.Slice) for e in s.elts))


def install() -> None:
    """Wrap TVMScript's tirx Assign: a store to a slice is a T.copy or T.fill (once per
    process)."""
    global _installed
    if _installed:
        return
    original = dispatch.get(token="tirx", type_name="Assign")

    def visit_assign(self, node):
        if len(node.targets) == 1 and isinstance(node.targets[0], doc.Subscript) \
                and _sliced(node.targets[0]):
            target = node.targets[0]
            value = self.eval_expr(node.value)
            buf = self.eval_expr(target.value)
            try:
                store(buf, _index_values(self, target), value)
            except KernelDefinitionError:
                raise
            except Exception as exc:  # noqa: BLE001 - reported at the statement
                self.report_error(node, exc)
            return None
        return original(self, node)

    dispatch.register(token="tirx", type_name="Assign")(visit_assign)
    _installed = True
