"""Stores to a buffer slice: `B[a:b] = A[a:b]`, `S[0:4, j] = 0.0`.

TileLang reads a store whose index has a slice as an element-wise operation over the
slice's elements; TVMScript's tirx parser hands the slice's TensorRegion to a scalar
BufferStore and fails inside an FFI call. Here (`install()` wraps the parser's Assign, and
eager functions call `store` directly):
    value a buffer slice or a buffer   T.copy(value, B[slice]): element-wise, the extents
                                       checked by T.copy's rules
    value a scalar (TIR or Python)     T.fill(B[slice], value)
    value an expression over slices    `B[0:N] = A[0:N] * 2 + C[k, 0:N]`: a T.Parallel over
                                       the target's sliced extents (constants) whose body
                                       stores the expression with each slice of the value
                                       read at its own start plus the loop index (the
                                       value's slices, in order, match the target's)
and anything else is a KernelDefinitionError naming the store.
"""

from __future__ import annotations

import copy

import tvm
from tvm.script.parser.core import dispatch, doc
from tvm.tirx import is_buffer_var
from tvm.tirx.script.builder import ir as _ir

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


def _slices_inside(node) -> bool:
    """Whether an expression reads some buffer slice (`A[0:N]` anywhere inside it)."""
    found = []

    class Finder(doc.NodeVisitor):
        def visit_Subscript(self, sub):  # noqa: N802 - doc's visitor naming
            if _sliced(sub):
                found.append(sub)
            self.generic_visit(sub)

    Finder().visit(node)
    return bool(found)


def _at(node, **fields):
    """`fields` with the source position of `node` (a doc node without one: none)."""
    pos = {k: getattr(node, k, None) for k in ("lineno", "col_offset", "end_lineno",
                                               "end_col_offset")}
    return pos | fields


def _elementwise(self, node, target):
    """`B[slices] = expr(A[slices'], ...)` as a T.Parallel over B's sliced extents."""
    from core.language.loops import Parallel
    construct = "B[a:b] = <expression>"
    buf = self.eval_expr(target.value)
    idx = _index_values(self, target)
    idx = list(idx) if isinstance(idx, (list, tuple)) else [idx]
    shape = list(buf.ty.shape)
    starts, extents = [], []
    for d, i in enumerate(idx):
        if isinstance(i, slice):
            if i.step not in (None, 1):
                raise KernelDefinitionError(f"slice step {i.step} of '{buf.name}': only "
                                            "step 1", construct=construct)
            lo = 0 if i.start is None else i.start
            hi = shape[d] if i.stop is None else i.stop
            extent = tvm.arith.Analyzer().simplify(hi - lo) if tvm.ir.is_prim_expr(hi) or \
                tvm.ir.is_prim_expr(lo) else hi - lo
            if not isinstance(extent, int):
                extent = int(extent.value) if isinstance(extent, tvm.tirx.IntImm) else None
            if extent is None:
                raise KernelDefinitionError(
                    f"the slice {d} of '{buf.name}' has no constant extent; an expression "
                    "stored to a slice runs as a T.Parallel, whose extents are constants",
                    construct=construct)
            starts.append(lo)
            extents.append(extent)
    names = [f"__mt_slice{k}" for k in range(len(extents))]

    class Rewrite(doc.NodeTransformer):
        def visit_Subscript(self, sub):  # noqa: N802 - doc's visitor naming
            if not _sliced(sub):
                return self.generic_visit(sub)
            elts = list(sub.slice.elts) if isinstance(sub.slice, doc.Tuple) else [sub.slice]
            count = sum(isinstance(e, doc.Slice) for e in elts)
            if count != len(names):
                raise KernelDefinitionError(
                    f"a slice of the value has {count} sliced dims, the target "
                    f"'{buf.name}' {len(names)}; they must match one by one",
                    construct=construct)
            k, out = 0, []
            for e in elts:
                if isinstance(e, doc.Slice):
                    if e.step is not None and not (isinstance(e.step, doc.Constant) and
                                                   e.step.value == 1):
                        raise KernelDefinitionError("a slice of the value has a step; only "
                                                    "step 1", construct=construct)
                    name = doc.Name(**_at(e, id=names[k], ctx=doc.Load()))
                    lower = e.lower if e.lower is not None else \
                        doc.Constant(**_at(e, value=0, kind=None))
                    out.append(doc.BinOp(**_at(e, left=lower, op=doc.Add(), right=name)))
                    k += 1
                else:
                    out.append(e)
            if isinstance(sub.slice, doc.Tuple):
                index = copy.copy(sub.slice)
                index.elts = out
            else:
                index = out[0]
            new = copy.copy(sub)
            new.slice = index
            return new

    value_ast = Rewrite().visit(node.value)
    with Parallel(*extents) as loop_vars:
        loop_vars = [loop_vars] if tvm.ir.is_prim_expr(loop_vars) else list(loop_vars)
        with self.var_table.with_frame():
            for name, v in zip(names, loop_vars):
                self.var_table.add(name, v)
            value = var_value(self.eval_expr(value_ast))
            it = iter(zip(starts, loop_vars))
            indices = []
            for i in idx:
                if isinstance(i, slice):
                    lo, v = next(it)
                    indices.append(v if isinstance(lo, int) and lo == 0 else lo + v)
                else:
                    indices.append(i)
            if not tvm.ir.is_prim_expr(value):
                value = tvm.tirx.const(value, str(buf.ty.dtype))
            elif str(value.ty.dtype) != str(buf.ty.dtype):
                value = tvm.tirx.Cast(str(buf.ty.dtype), value)
            _ir.buffer_store(buf, value, indices)
    return None


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
            if not (isinstance(node.value, doc.Subscript) and _sliced(node.value)) and \
                    _slices_inside(node.value):
                try:
                    return _elementwise(self, node, target)
                except KernelDefinitionError:
                    raise
                except Exception as exc:  # noqa: BLE001 - reported at the statement
                    self.report_error(node, exc)
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
