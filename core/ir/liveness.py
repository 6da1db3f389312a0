"""Lifetimes of a kernel's threadgroup buffers, counted in the top-level statements of its
body: a buffer is live from the first to the last top-level statement that names it (a
loop or `if` naming it anywhere inside is wholly in its life; its AllocBuffer is no use).
The top level runs on every thread of the threadgroup, once, so a barrier there orders
everything before it against everything after it.

`timeline` refines that inside top-level loops: the body of a serial loop whose bounds
are the same on every thread runs on every thread too, statement by statement, once per
iteration. A buffer named only inside such a loop whose values never cross an iteration
(`fresh_each_iteration`: every element is written, in the iteration, before the body
first reads it) lives from the first to the last *body* statement naming it, so two such
buffers used one after the other in the body may share bytes (merge_threadgroup then puts
a barrier between them in the body, and one between the later one's last use and the
earlier one's first use of the next iteration). Any other buffer a loop names lives over
the whole loop.

Read by verify (the user's buffers live at once against the limit, at the top level) and
merge_threadgroup (which buffers may share bytes, on the timeline).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np
import tvm
from tvm import tirx

from core.ir import ops
from core.ir.footprint import LoopRange, exact_elements
from core.ir.stmt import as_int, children, free_vars, items, loads, visit_nodes, walk
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


# ---- inside top-level loops ----------------------------------------------------------------

@dataclass
class Timeline:
    """The kernel body as slots: one per top-level statement, or one per body statement of
    a top-level loop `timeline` looks inside (`bodies`: top index -> body statements).
    `slots[k]` is (top index, body index or None); `life[key]` (first slot, last slot)."""
    slots: list
    life: dict
    bodies: dict


def timeline(stmts, buffers: dict, thread_axes) -> Timeline:
    """`buffers`: handle -> threadgroup buffer (flat, constant size); `thread_axes`:
    [(thread var, extent, stride)] as core/ir/footprint.py takes them."""
    top = lives(stmts, buffers)
    thread_keys = {v.__chandle__() for v, _, _ in thread_axes}
    bodies = {i: top_level(s.body) for i, s in enumerate(stmts)
              if _uniform_loop(s, thread_keys) and len(top_level(s.body)) > 1}
    slots, first_slot = [], {}
    for i in range(len(stmts)):
        first_slot[i] = len(slots)
        slots.extend((i, j) for j in range(len(bodies[i]))) if i in bodies else \
            slots.append((i, None))
    first_slot[len(stmts)] = len(slots)
    life = {}
    for key, (lo, hi) in top.items():
        if lo > hi:
            life[key] = (len(slots), len(slots) - 1)
            continue
        life[key] = (first_slot[lo], first_slot[hi + 1] - 1)
        if lo != hi or lo not in bodies or \
                not fresh_each_iteration(bodies[lo], buffers[key], thread_axes):
            continue
        used = [j for j, b in enumerate(bodies[lo]) if named(b, {key})]
        life[key] = (first_slot[lo] + used[0], first_slot[lo] + used[-1])
    return Timeline(slots, life, bodies)


def _uniform_loop(s, thread_keys) -> bool:
    """A serial loop whose bounds every thread computes alike (no thread index, no load)."""
    if not isinstance(s, tirx.For) or s.kind != tirx.ForKind.SERIAL:
        return False
    bounds = [s.min, s.extent]
    return not any(v.__chandle__() in thread_keys for e in bounds for v in free_vars(e)) \
        and not any(loads(e) for e in bounds)


def fresh_each_iteration(body, buf, thread_axes) -> bool:
    """Whether no value of `buf` crosses an iteration of the loop whose body statements are
    `body`: the stores of the statements before the first one reading `buf` cover every
    element, proven exactly (enumerated indices and guards, loops of constant positive
    trip count without a break; a store that cannot be proven counts for nothing)."""
    key = buf.__chandle__()
    size = as_int(buf.ty.shape[0]) if len(buf.ty.shape) == 1 else None
    if not size:
        return False
    covered = np.zeros(size, dtype=bool)
    for s in body:
        writes, read = _stores_and_reads(s, key, thread_axes)
        if read:
            return bool(covered.all())
        for elements in writes:
            if elements.size and (elements.min() < 0 or elements.max() >= size):
                return False
            covered[elements] = True
    return True


def _stores_and_reads(stmt, key, thread_axes):
    """([elements stored, per provable store], whether `stmt` reads buffer `key`)."""
    writes, read = [], []

    def names_key(node):
        def var(v):
            if v.__chandle__() == key:
                read.append(True)
        visit_nodes(node, (tvm.ir.Var, var))

    def visit(s, loops, guards, exact):
        if isinstance(s, tirx.AllocBuffer):
            return
        if isinstance(s, tirx.BufferStore):
            for e in (s.value, *s.indices):
                names_key(e)
            if s.buffer.__chandle__() == key and exact:
                elements = exact_elements(s.indices[0], thread_axes, loops, guards)
                if elements is not None:
                    writes.append(elements)
            return
        if isinstance(s, tirx.For):
            names_key(s.min)
            names_key(s.extent)
            lo, ext = as_int(s.min), as_int(s.extent)
            breaks = bool(_breaks(s.body))
            bounded = lo is not None and ext is not None and ext > 0
            inner = loops + [LoopRange(s.loop_var, ext, lo)] if bounded else loops
            visit(s.body, inner, guards, exact and bounded and not breaks)
            return
        if isinstance(s, tirx.IfThenElse):
            names_key(s.condition)
            visit(s.then_case, loops, guards + [s.condition], exact)
            if s.else_case is not None:
                visit(s.else_case, loops, guards + [tirx.Not(s.condition)], exact)
            return
        kids = children(s)
        if not kids:
            names_key(s)
            return
        for field in _HEADERS.get(type(s), ()):
            names_key(getattr(s, field))
        if isinstance(s, tirx.While):
            names_key(s.condition)
            exact = False
        for k in kids:
            visit(k, loops, guards, exact)

    visit(stmt, [], [], True)
    return writes, bool(read)


def _breaks(stmt) -> list:
    found = []
    walk(stmt, lambda s: found.append(s) if isinstance(s, tirx.Evaluate) and
         ops.is_tile_call_any(s.value, "tl.loop_break") else None)
    return found
