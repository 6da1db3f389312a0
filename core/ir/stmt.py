"""Small, explicit helpers over TIR statements and expressions used by the passes.

`rewrite(stmt, fn)` rebuilds a statement tree bottom-up, calling `fn` on every rebuilt
statement (it may return a replacement); `substitute` maps variables in any node;
`free_vars` lists the variables an expression or statement reads (`loads` its loads,
`collect` several kinds of node in one walk); `seq` flattens;
`bind_ranges` gives an arithmetic analyzer the loop ranges around a statement;
`ByHandle` maps Vars and buffers by identity without building EQ nodes.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from core.ir import ops
from core.ir.ffi import instance_test, items


def seq(stmts) -> tirx.Stmt:
    """A SeqStmt of `stmts` with nested sequences flattened (one stmt: itself)."""
    flat = []
    for s in stmts:
        if s is None:
            continue
        if _child_kind(type(s)) == _SEQ:
            flat.extend(items(s.seq))
        else:
            flat.append(s)
    if not flat:
        return tirx.Evaluate(tirx.const(0, "int32"))
    return flat[0] if len(flat) == 1 else tirx.SeqStmt(flat)


# How a statement's child statements are read, per concrete node type. TVM's node classes
# are ABCs, so every isinstance() on them runs the ABC machinery; `children` is called for
# every statement of every walk, so it decides the kind once per type.
_SEQ, _BODY, _BRANCHES, _LEAF = range(4)
_CHILD_KIND: dict = {}


def _child_kind(node_type) -> int:
    kind = _CHILD_KIND.get(node_type)
    if kind is None:
        kind = _CHILD_KIND[node_type] = (
            _SEQ if issubclass(node_type, tirx.SeqStmt)
            else _BODY if issubclass(node_type, (tirx.For, tirx.AttrStmt, tirx.While))
            else _BRANCHES if issubclass(node_type, tirx.IfThenElse) else _LEAF)
    return kind


def children(stmt) -> list:
    kind = _child_kind(type(stmt))
    if kind == _LEAF:
        return []
    if kind == _BODY:
        return [stmt.body]
    if kind == _SEQ:
        return items(stmt.seq)
    return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])


def _rebuild_for(stmt, new_children):
    return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, new_children[0],
                    stmt.thread_binding, stmt.annotations, stmt.step)


# Statement type -> how `rebuild` makes it from new children, decided once per type (as
# `_child_kind`: isinstance on TVM's ABC node classes is slow).
_REBUILDERS = (
    (tirx.SeqStmt, lambda stmt, new: seq(new)),
    (tirx.For, _rebuild_for),
    (tirx.AttrStmt, lambda stmt, new: tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value,
                                                    new[0])),
    (tirx.While, lambda stmt, new: tirx.While(stmt.condition, new[0])),
    (tirx.IfThenElse, lambda stmt, new: tirx.IfThenElse(stmt.condition, new[0],
                                                        new[1] if len(new) > 1 else None)),
)
_REBUILDER: dict = {}


def rebuild(stmt, new_children):
    """`stmt` with its child statements replaced (same order as `children`)."""
    node_type = type(stmt)
    make = _REBUILDER.get(node_type)
    if make is None:
        make = _REBUILDER[node_type] = next(
            (fn for t, fn in _REBUILDERS if issubclass(node_type, t)), lambda s, new: s)
    return make(stmt, new_children)


def rewrite(stmt, fn):
    """Post-order rebuild; `fn(stmt)` returns the replacement (or the stmt itself)."""
    kids = children(stmt)
    if kids:
        new_kids = [rewrite(k, fn) for k in kids]
        if any(not a.same_as(b) for a, b in zip(new_kids, kids)):
            stmt = rebuild(stmt, new_kids)
    return fn(stmt)


def walk(stmt, fn):
    """Pre-order visit of every statement."""
    # a stack rather than recursion, the children read inline: the passes walk every
    # kernel body many times
    pending = [stmt]
    while pending:
        stmt = pending.pop()
        fn(stmt)
        kind = _child_kind(type(stmt))
        if kind == _LEAF:
            continue
        if kind == _BODY:
            pending.append(stmt.body)
        elif kind == _SEQ:
            pending.extend(reversed(items(stmt.seq)))
        else:
            if stmt.else_case is not None:
                pending.append(stmt.else_case)
            pending.append(stmt.then_case)


# tvm_ffi.structural_walk/structural_map normalize their callback shorthand and look up
# each callback type's FFI type index on every call, in Python: on the small expressions
# the passes query thousands of times per kernel that fixed cost is most of the walk.
# `visit_nodes`/`map_nodes` keep the type indices and call the FFI entry points directly
# with the same (post-order, no def-region callbacks) semantics.
_TYPE_INDEX: dict = {}
_POST_ORDER = int(tvm_ffi.structural.WalkOrder.POSTORDER)


def _entries(pairs) -> list:
    out = []
    for node_type, fn in pairs:
        index = _TYPE_INDEX.get(node_type)
        if index is None:
            index = _TYPE_INDEX[node_type] = \
                tvm_ffi.core.TypeSchema.from_annotation(node_type).origin_type_index
        out.append((index, fn))
    return out


# A constant holds no expression but itself: a walk of one for other kinds of expression
# (a quarter of the walks the passes make: loop bounds, indices, literals) finds nothing.
_is_constant = instance_test((tirx.IntImm, tirx.FloatImm, tvm.ir.StringImm))
_FINDS_NOTHING: dict = {}   # (constant type, searched type) -> bool


def _finds_nothing(node, pairs) -> bool:
    """Whether a walk of `node`, a constant, can call none of `pairs`' functions: each
    searched type is a kind of expression the constant is not."""
    node_type = type(node)
    for searched, _ in pairs:
        key = (node_type, searched)
        answer = _FINDS_NOTHING.get(key)
        if answer is None:
            answer = _FINDS_NOTHING[key] = issubclass(searched, tvm.ir.Expr) \
                and not issubclass(node_type, searched)
        if not answer:
            return False
    return True


def visit_nodes(node, *pairs) -> None:
    """`tvm_ffi.structural_walk(node, [(type, fn), ...])` (post-order): `fn(n)` for every
    node `n` of `type` inside `node`."""
    if _is_constant(node) and _finds_nothing(node, pairs):
        return
    tvm_ffi.structural._ffi_api.StructuralWalk(node, _entries(pairs), [], _POST_ORDER)


def map_nodes(node, *pairs):
    """`tvm_ffi.structural_map(node, [(type, fn), ...])` (post-order): `node` with every
    node of `type` replaced by `fn(n)`."""
    if _is_constant(node) and _finds_nothing(node, pairs):
        return node
    return tvm_ffi.structural._ffi_api.StructuralMap(node, _entries(pairs), [], _POST_ORDER)


def substitute(node, vmap: dict):
    """`node` with every Var in `vmap` replaced (expressions or statements)."""
    if not vmap:
        return node
    return map_nodes(node, (tvm.ir.Var, lambda v: vmap.get(v, v)))


def free_vars(node) -> list:
    """Variables read by `node`, in first-occurrence order (buffers included)."""
    found = {}   # by handle: a Var's == builds an EQ node

    def visit(v):
        found.setdefault(v.__chandle__(), v)

    visit_nodes(node, (tvm.ir.Var, visit))
    return list(found.values())


def loads(node) -> list:
    """All buffer loads inside `node`."""
    out = []
    visit_nodes(node, (tvm.ir.TensorLoad, out.append))
    return out


def collect(node, *types) -> list:
    """One list per type in `types` of the nodes of that type inside `node`, in visit
    order: several of `loads`/`free_vars`-style queries in a single walk (each walk has a
    fixed cost of its own, which dominates on small expressions)."""
    found = [[] for _ in types]
    visit_nodes(node, *((t, out.append) for t, out in zip(types, found)))
    return found


class ByHandle:
    """A mapping keyed by TVM objects' identity (their FFI handle), for Vars and buffers.

    A dict or set of Vars finds the key by hash, then compares with `==`, which for a TVM
    expression builds an EQ node through the FFI (and the Python object for one node
    differs per attribute read, so `is` rarely short-cuts it). Keyed by the handle, a
    lookup is a dict lookup of an int; entries keep their key objects alive, so a handle
    is never reused while it is a key here."""

    __slots__ = ("_entries",)

    def __init__(self, items=()):
        self._entries = {}             # handle -> (key, value)
        for key, value in items:
            self[key] = value

    def __contains__(self, key) -> bool:
        return key.__chandle__() in self._entries

    def __getitem__(self, key):
        return self._entries[key.__chandle__()][1]

    def __setitem__(self, key, value):
        self._entries[key.__chandle__()] = (key, value)

    def get(self, key, default=None):
        entry = self._entries.get(key.__chandle__())
        return default if entry is None else entry[1]

    def pop(self, key, default=None):
        entry = self._entries.pop(key.__chandle__(), None)
        return default if entry is None else entry[1]

    def keys(self) -> list:
        return [k for k, _ in self._entries.values()]

    def items(self) -> list:
        return list(self._entries.values())

    def __iter__(self):
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._entries)


def choice_parts(e):
    """(condition, true value, false value) of a Select or an `if_then_else` call, else
    None."""
    if isinstance(e, tirx.Select):
        return e.condition, e.true_value, e.false_value
    if isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op) \
            and e.op.name == "prim.if_then_else":
        return tuple(e.args)
    return None


def once_assigned_scalars(body) -> dict:
    """{buffer: value} for the one-element local scalars a kernel body assigns exactly
    once, at its top level (TileLang's `ty = by * panel + bx % panel` before the tile
    ops): a load of one means its value everywhere after the store."""
    stores = {}   # buffer handle -> number of stores (a Var's == builds an EQ node)

    def count(s):
        if isinstance(s, tirx.BufferStore):
            key = s.buffer.__chandle__()
            stores[key] = stores.get(key, 0) + 1

    walk(body, count)
    top = []

    def flatten(s):
        if isinstance(s, tirx.SeqStmt):
            for t in s.seq:
                flatten(t)
        elif isinstance(s, tirx.AttrStmt):    # T.use_swizzle's scope, for one
            flatten(s.body)
        else:
            top.append(s)

    flatten(body)
    return {s.buffer: s.value for s in top
            if isinstance(s, tirx.BufferStore) and stores[s.buffer.__chandle__()] == 1
            and ops.buffer_scope(s.buffer) == "local"
            and tuple(as_int(d) for d in s.buffer.ty.shape) == (1,)}


def i32(x):
    """An int32 constant of a Python int; an expression as it is."""
    return tirx.const(x, "int32") if isinstance(x, int) else x


_is_int_imm = instance_test(tirx.IntImm)
_is_attr = instance_test(tirx.AttrStmt)


def as_int(e):
    """Python int of a constant expression, else None."""
    if isinstance(e, int):
        return e
    if _is_int_imm(e):
        return int(e.value)
    return None


def is_kernel_attr(stmt) -> bool:
    return _is_attr(stmt) and stmt.attr_key == "thread_extent"


def thread_tag(attr) -> str:
    return str(attr.node.thread_tag)


def bind_ranges(analyzer, ranges: dict):
    """`analyzer` with each variable of `ranges` ({var: (min, extent)}) bound to its loop
    range. A range the analyzer refuses (a variable it already holds with another range:
    TVM's InternalError "Trying to update var ... with a different const bound") is
    skipped: the analyzer then proves less, never something false. Any other error
    propagates."""
    for v, (lo, ext) in ranges.items():
        try:
            analyzer.bind(v, tvm.ir.Range.from_min_extent(lo, ext))
        except tvm.error.InternalError:
            continue
    return analyzer


def atomics_in(node) -> list:
    """Every `tl.atomic` call inside `node` (a statement or expression), decoded
    (`ops.decode_atomic`)."""
    found = []

    def visit(e):
        a = ops.decode_atomic(e)
        if a is not None:
            found.append(a)

    visit_nodes(node, (tvm.ir.Call, visit))
    return found
