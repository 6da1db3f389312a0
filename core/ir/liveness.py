"""Lifetimes of a kernel's threadgroup buffers, counted in the top-level statements of its
body: a buffer is live from the first to the last top-level statement that names it (a
loop or `if` naming it anywhere inside is wholly in its life; its AllocBuffer is no use).
The top level runs on every thread of the threadgroup, once, so a barrier there orders
everything before it against everything after it.

Read by verify (the user's buffers live at once against the limit) and merge_threadgroup
(which buffers may share bytes).
"""

from __future__ import annotations

from math import prod

import tvm
from tvm import tirx

from core.ir import ops
from core.ir.stmt import as_int, children, items, visit_nodes, walk
from core.target import DTYPES


def top_level(body) -> list:
    """The kernel body as its list of top-level statements (nested sequences flattened)."""
    out = []
    for s in (items(body.seq) if isinstance(body, tirx.SeqStmt) else [body]):
        out.extend(top_level(s) if isinstance(s, tirx.SeqStmt) else [s])
    return out


def threadgroup_allocs(body) -> list:
    """The AllocBuffers of threadgroup ("shared") buffers inside `body`, in program order."""
    found = []
    walk(body, lambda s: found.append(s) if isinstance(s, tirx.AllocBuffer) and
         ops.buffer_scope(s.buffer) == "shared" else None)
    return found


def nbytes(buf) -> int:
    return prod(as_int(d) for d in buf.ty.shape) * DTYPES[str(buf.ty.dtype)].bytes


# the expressions of a statement with children outside those children
_HEADERS = {tirx.For: ("min", "extent"), tirx.IfThenElse: ("condition",),
            tirx.AttrStmt: ("value",)}


def named(stmt, keys) -> set:
    """Handles (of `keys`) of the buffers `stmt` names, its AllocBuffers aside."""
    found = set()

    def var(v):
        key = v.__chandle__()
        if key in keys:
            found.add(key)

    def visit(s):
        if isinstance(s, tirx.AllocBuffer):
            return
        kids = children(s)
        if not kids:
            visit_nodes(s, (tvm.ir.Var, var))
            return
        for field in _HEADERS.get(type(s), ()):
            visit_nodes(getattr(s, field), (tvm.ir.Var, var))
        for k in kids:
            visit(k)

    visit(stmt)
    return found


def lives(stmts, keys) -> dict:
    """{buffer handle: (first, last)} top-level indices; a buffer never named gets
    (len, len - 1), live nowhere."""
    life = {}
    for i, s in enumerate(stmts):
        for key in named(s, keys):
            life[key] = (life.get(key, (i, i))[0], i)
    for key in keys:
        life.setdefault(key, (len(stmts), len(stmts) - 1))
    return life


def peak(stmts, life, size) -> tuple:
    """(the most bytes live at one top-level statement, the handles live there)."""
    best, at = 0, []
    for i in range(len(stmts)):
        live = [k for k in size if life[k][0] <= i <= life[k][1]]
        total = sum(size[k] for k in live)
        if total > best:
            best, at = total, live
    return best, at
