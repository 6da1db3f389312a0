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
                                       value's slices, in order, match the target's: as
                                       many sliced dims, equal extents)
and anything else is a KernelDefinitionError naming the store. `expression_store` is the
one lowering of the third form: prim_func bodies reach it through the parser (the value's
sliced subscripts read through a SliceReader bound in the var table), eager kernels
through core/language/eager.py's rewrite of the statement.
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


def target_slices(buf, idx, construct):
    """(starts, extents) of the sliced dims of the store target `buf[idx]`; each extent a
    constant (the T.Parallel an expression store runs as has constant extents)."""
    shape = list(buf.ty.shape)
    starts, extents = [], []
    for d, i in enumerate(idx):
        if not isinstance(i, slice):
            continue
        lo, extent = _span(buf, d, i, shape, construct)
        if extent is None:
            raise KernelDefinitionError(
                f"the slice {d} of '{buf.name}' has no constant extent; an expression "
                "stored to a slice runs as a T.Parallel, whose extents are constants",
                construct=construct)
        starts.append(lo)
        extents.append(extent)
    return starts, extents


def _span(buf, d, i: slice, shape, construct):
    """(start, constant extent or None) of slice `i` of dim `d` of `buf`."""
    if i.step not in (None, 1) and not (isinstance(i.step, tvm.tirx.IntImm) and
                                        int(i.step.value) == 1):
        raise KernelDefinitionError(f"slice step {i.step} of '{buf.name}': only step 1",
                                    construct=construct)
    lo = 0 if i.start is None else var_value(i.start)
    hi = shape[d] if i.stop is None else var_value(i.stop)
    extent = hi - lo
    if tvm.ir.is_prim_expr(extent):
        extent = tvm.arith.Analyzer().simplify(extent)
        extent = int(extent.value) if isinstance(extent, tvm.tirx.IntImm) else None
    return lo, extent


class SliceReader:
    """Reads the value side of an expression store at one element: `reader(A)[0:64]` is
    `A[0 + i]` for the T.Parallel's loop variable `i`. Each slice of a value must have as
    many sliced dims as the target and, dim by dim, the same extent."""

    def __init__(self, target, loop_vars, extents, construct, name_of=None):
        self.target, self.loop_vars, self.extents = target, loop_vars, extents
        self.construct = construct
        self.name_of = name_of or (lambda b: b.name)

    def __call__(self, buf):
        return _SlicedOperand(self, buf) if is_buffer_var(buf) else buf

    def element(self, buf, index):
        idx = list(index) if isinstance(index, (tuple, list)) else [index]
        if not has_slice(idx):
            return buf[tuple(idx)]
        sliced = [d for d, i in enumerate(idx) if isinstance(i, slice)]
        if len(sliced) != len(self.extents):
            raise KernelDefinitionError(
                f"a slice of the value has {len(sliced)} sliced dims, the target "
                f"'{self.name_of(self.target)}' {len(self.extents)}; they must match one by "
                "one",
                construct=self.construct)
        shape = list(buf.ty.shape)
        out, k = [], 0
        for d, i in enumerate(idx):
            if not isinstance(i, slice):
                out.append(var_value(i))
                continue
            lo, extent = _span(buf, d, i, shape, self.construct)
            if extent != self.extents[k]:
                got = "no constant extent" if extent is None else f"extent {extent}"
                raise KernelDefinitionError(
                    f"the value's slice of '{self.name_of(buf)}' has {got} in its sliced dim "
                    f"{k}, the target '{self.name_of(self.target)}' {self.extents[k]}; the "
                    "slices of an element-wise store must have equal extents",
                    construct=self.construct)
            v = self.loop_vars[k]
            out.append(v if isinstance(lo, int) and lo == 0 else lo + v)
            k += 1
        return buf[tuple(out)]


class _SlicedOperand:
    """A buffer on the value side of an expression store; indexing it reads one element."""

    def __init__(self, reader, buf):
        self.reader, self.buf = reader, buf

    def __getitem__(self, index):
        return self.reader.element(self.buf, index)

    def __getattr__(self, name):   # `A.shape`, `A.dtype`: the buffer's own
        return getattr(self.buf, name)


def expression_store(buf, index, value_of, construct="B[a:b] = <expression>", name_of=None):
    """`buf[index] = value` where the value reads buffer slices: a T.Parallel over the
    target's sliced extents; `value_of(reader)` builds the value at one element, every
    buffer it indexes passed through `reader` (SliceReader). `name_of(buffer)`: the name
    errors give a buffer (an eager kernel's parameters are named after tracing)."""
    from core.language.loops import Parallel
    idx = list(index) if isinstance(index, (tuple, list)) else [index]
    starts, extents = target_slices(buf, idx, construct)
    with Parallel(*extents) as loop_vars:
        loop_vars = [loop_vars] if tvm.ir.is_prim_expr(loop_vars) else list(loop_vars)
        value = var_value(value_of(SliceReader(buf, loop_vars, extents, construct, name_of)))
        if isinstance(value, tvm.ir.TensorRegion) or is_buffer_var(value):
            raise KernelDefinitionError(
                f"the value stored to the slice of '{buf.name}' is a whole region inside an "
                "expression; each slice it reads must be indexed (`A[0:N]`), not passed "
                "whole", construct=construct)
        it = iter(zip(starts, loop_vars))
        indices = []
        for i in idx:
            if isinstance(i, slice):
                lo, v = next(it)
                indices.append(v if isinstance(lo, int) and lo == 0 else lo + v)
            else:
                indices.append(var_value(i))
        if not tvm.ir.is_prim_expr(value):
            value = tvm.tirx.const(value, str(buf.ty.dtype))
        elif str(value.ty.dtype) != str(buf.ty.dtype):
            value = tvm.tirx.Cast(str(buf.ty.dtype), value)
        _ir.buffer_store(buf, value, indices)


_READER = "__mt_slice_reader"


def _elementwise(self, node, target):
    """`B[slices] = expr(A[slices'], ...)` in a prim_func body: expression_store, with the
    value's subscripts read through the reader (bound in the parser's var table)."""
    construct = "B[a:b] = <expression>"
    buf = self.eval_expr(target.value)
    idx = _index_values(self, target)

    class Rewrite(doc.NodeTransformer):
        def visit_Subscript(self, sub):  # noqa: N802 - doc's visitor naming
            sub = self.generic_visit(sub)
            if not _sliced(sub):
                return sub
            new = copy.copy(sub)
            new.value = doc.Call(**_at(sub, func=doc.Name(**_at(sub, id=_READER,
                                                                ctx=doc.Load())),
                                       args=[sub.value], keywords=[]))
            return new

    value_ast = Rewrite().visit(node.value)

    def value_of(reader):
        with self.var_table.with_frame():
            self.var_table.add(_READER, reader)
            return self.eval_expr(value_ast)

    expression_store(buf, idx, value_of, construct)
    return None


def install() -> None:
    """Wrap TVMScript's tirx Assign (a store to a slice is a T.copy, a T.fill or an
    expression store) and AugAssign (`B[a:b] += v`, an expression store), once per
    process."""
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
    original_aug = dispatch.get(token="tirx", type_name="AugAssign")

    def visit_aug_assign(self, node):
        """`B[a:b] += v`: the expression store `B[a:b] = B[a:b] + v`."""
        target = node.target
        if not (isinstance(target, doc.Subscript) and _sliced(target)):
            return original_aug(self, node)
        read = doc.Subscript(**_at(target, value=target.value, slice=target.slice,
                                   ctx=doc.Load()))
        value = doc.BinOp(**_at(node, left=read, op=node.op, right=node.value))
        assign = doc.Assign(**_at(node, targets=[target], value=value))
        try:
            return _elementwise(self, assign, target)
        except KernelDefinitionError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported at the statement
            self.report_error(node, exc)

    dispatch.register(token="tirx", type_name="AugAssign")(visit_aug_assign)
    _installed = True
