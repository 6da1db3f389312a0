"""Pass `thread_sync`: the barrier planner for threadgroup memory.

Expects: flattened, lowered TIR (one index per access; threadgroup buffers have scope
"shared").
Guarantees: a `threadgroup_barrier(mem_flags::mem_threadgroup)` (tl.threadgroup_barrier)
stands between any two accesses to one threadgroup element by two different threads,
at least one a write, that nothing else orders, including accesses in different
iterations of a loop (checked with the body run twice: the second pass sees the
accesses left pending at the end of the previous iteration). A conflict between a loop
and what came before it that the loop's own barriers do not order gets one barrier
before the loop; a loop of one iteration carries nothing over. Barriers are placed only
where every thread of the threadgroup arrives: never inside control flow whose condition
or bounds depend on the thread (such statements are treated as one opaque access set and
a needed barrier goes before them; a race between two accesses inside one branch of a
thread-dependent `if` cannot be ordered and is a LoweringError). A load is uniform only
from a device buffer the kernel never writes, at uniform indices (a routing table's count
read by every thread of the group alike, `for r in T.serial(T.ceildiv(Counts[e], 8))`), or
a one-element local scalar assigned once at the kernel's top level from uniform values
(`ty = by * 4 + bx % 4` guarding a block's tile ops); other per-thread and threadgroup
memory never is. No barrier
is placed unless some pair of accesses may race, decided from exact footprints
(core/ir/footprint.py): an element written and later read by the *same* thread needs no
barrier, and two accesses that the enclosing guards give to one and the same thread never
race even where their elements are unknown (a section `for z in T.Parallel(1)`, run under
`if (v < 1)`, reading what it wrote in an earlier iteration at an index of a
symbolic-extent loop): such a section is neither refused nor given a barrier inside.
A simdgroup_load/store is one access of its whole 8x8 tile by its simdgroup as a unit
(Footprint.of_tile): two tile accesses of one simdgroup are ordered, a tile access and
a plain access of another thread are not.
An atomic update (T.atomic_*) is a write that needs no barrier against other atomics.
A T.access_ptr pointer handed to user MSL (T.call_extern) is a read and/or a write, as its
access mask says, of the `extent` elements from the one it points at, or of any element of
its buffer when the kernel gave no extent (core/ir/ops.py: AccessPointer).
A statement that names no threadgroup buffer and holds no barrier adds no access and
orders none, so the planner passes what is pending over it without planning inside it
(found once per kernel, `_inert_statements`): most of a kernel's statements are of that
kind (device loads and stores, register arithmetic).

Decisions noted (core/ir/decisions.py): `barrier`, where the barriers it placed sit
(straight line, in an if, in a loop; "none").
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx import is_buffer_var

from core.errors import LoweringError
from core.ir import decisions, matrix, ops
from core.ir.footprint import Footprint, LoopRange, may_race
from core.ir.kernel import func_name, map_kernels
from core.ir.stmt import (as_int, children, collect, items, once_assigned_scalars, rebuild, seq,
                          visit_nodes, walk)


class _Planner:
    def __init__(self, nest, kernel=None):
        self.thread_axes = []
        stride = 1
        for var, size in zip(nest.thread_vars, nest.threads):
            self.thread_axes.append((var, size, stride))
            stride *= size
        # Variables and buffers by handle: a TVM Var's `==` builds an EQ expression, so
        # sets and dicts of Vars cost an FFI call per hit.
        self.thread_vars = {v.__chandle__() for v in nest.thread_vars}
        self.written = set()         # buffers the kernel stores to
        walk(nest.body, lambda st: self.written.add(st.buffer.__chandle__())
             if isinstance(st, tirx.BufferStore) else None)
        self.scalars = {b.__chandle__(): value    # `ty = by * 4 + bx % 4`
                        for b, value in once_assigned_scalars(nest.body).items()}
        self.first_unit = nest.num_threads   # simdgroup ids for matrix-tile accesses
        self.kernel = kernel
        self.root = nest.body        # keeps the statements `inert` names alive
        self.inert = _inert_statements(nest.body)
        self.loops = []              # enclosing uniform loops with constant ranges
        self.guards = []             # conditions of enclosing uniform ifs
        self.cache = {}
        self.races = {}              # may_race per pair of points, see `may_race`
        self.plans = {}              # plan(stmt, []) in one loop/guard context, see `plan`
        self.divergent_checked = {}  # `if`s check_divergent passed, per context
        self.uniform_headers = {}    # statement handle -> (statement, uniform_header)
        self.negations = {}          # condition handle -> (condition, Not(condition))
        self.inserted = 0            # barriers placed so far (plans only ever add them)

    # ---- uniformity ---------------------------------------------------------------------
    def uniform(self, exprs) -> bool:
        for e in exprs:
            variables, lds = collect(e, tvm.ir.Var, tvm.ir.TensorLoad)
            if any(v.__chandle__() in self.thread_vars for v in variables):
                return False
            if not all(self.read_only_device(ld) or self.uniform_scalar(ld) for ld in lds):
                return False
        return True

    def uniform_scalar(self, load) -> bool:
        """A kernel scalar assigned once, at the top level, from uniform values (a block's
        remapped tile index): every thread holds the same value."""
        value = self.scalars.get(load.source.__chandle__())
        return value is not None and self.uniform([value])

    def read_only_device(self, load) -> bool:
        """A load every thread of the group sees alike: a device buffer that this kernel
        never writes, at uniform indices."""
        src = load.source
        return (is_buffer_var(src) and ops.buffer_scope(src) == "global"
                and src.__chandle__() not in self.written
                and self.uniform(items(load.indices)))

    # ---- footprints -----------------------------------------------------------------
    def context(self, stmt):
        """(key, nodes): `stmt` in the enclosing loops and guards, for the caches. Keyed
        by object identity (the handles; each entry keeps `nodes` alive): a tuple of the
        nodes themselves would compare Vars with `==`, which builds a TIR EQ node per
        comparison."""
        nodes = (stmt, *(lp.var for lp in self.loops), *self.guards)
        return (len(self.loops), *(n.__chandle__() for n in nodes)), nodes

    def footprints(self, stmt) -> list:
        # The planner visits loop bodies more than once.
        key, nodes = self.context(stmt)
        entry = self.cache.get(key)
        if entry is None:
            entry = self.cache[key] = (nodes, self._footprints(stmt, self.loops))
        return entry[1]

    def _footprints(self, stmt, loops) -> list:
        out = []

        def visit(s, loops, guards):
            def add(buf, index, write, atomic=False):
                if ops.buffer_scope(buf) != "shared":
                    return
                if index is None:   # a pointer to user MSL: any element
                    out.append(Footprint.anywhere(buf, write, self.thread_axes, loops, guards))
                else:
                    out.append(Footprint.of(buf, index, write, self.thread_axes, loops,
                                            guards, atomic=atomic))

            if isinstance(s, tirx.For):
                ext = as_int(s.extent)
                start = as_int(s.min)
                bounded = ext is not None and start is not None
                inner = loops + [LoopRange(s.loop_var, ext, start)] if bounded else loops
                self.exprs(s.min, s.extent, add=add)
                visit(s.body, inner, guards)
                return
            if isinstance(s, tirx.IfThenElse):
                self.exprs(s.condition, add=add)
                visit(s.then_case, loops, guards + [s.condition])
                if s.else_case is not None:
                    visit(s.else_case, loops, guards + [self.negation(s.condition)])
                return
            if isinstance(s, tirx.BufferStore):
                add(s.buffer, s.indices[0], True)
                self.exprs(s.value, *s.indices, add=add)
            elif isinstance(s, tirx.Evaluate) and matrix.tile_access(s.value) is not None:
                tile = matrix.tile_access(s.value)
                if ops.buffer_scope(tile.buffer) == "shared":
                    out.append(Footprint.of_tile(tile, self.thread_axes, loops, guards,
                                                 first_unit=self.first_unit))
                self.exprs(*tile.reads, add=add)
            elif isinstance(s, tirx.Evaluate):
                self.exprs(s.value, add=add)
            for k in children(s):
                visit(k, loops, guards)

        visit(stmt, list(loops), list(self.guards))
        return out

    @staticmethod
    def exprs(*exprs, add):
        for e in exprs:
            calls, lds = collect(e, tvm.ir.Call, tvm.ir.TensorLoad)
            updated = []
            for a in filter(None, map(ops.decode_atomic, calls)):
                # an atomic update: a write ordered among atomics
                add(a.buffer, a.element.indices[0], True, atomic=True)
                updated.append(a.element)
            for p in filter(None, map(ops.access_pointer, calls)):
                # T.access_ptr handed to user MSL: its mask says read and/or write, its
                # extent which elements (none given: any)
                first = p.element.indices[0]
                index = None if not p.extent else first if p.extent == 1 else \
                    tirx.Ramp(first, tirx.const(1, str(first.ty.dtype)), p.extent)
                for write in (False, True):
                    if (p.writes if write else p.reads):
                        add(p.element.source, index, write)
                updated.append(p.element)
            for ld in lds:
                if is_buffer_var(ld.source) and not any(ld.same_as(u) for u in updated):
                    add(ld.source, ld.indices[0], False)

    def negation(self, cond):
        """`Not(cond)`, one node per condition: the else branch's guard is then the same
        object every time the branch is planned, so the caches keyed by it hit."""
        entry = self.negations.get(cond.__chandle__())
        if entry is None:
            entry = self.negations[cond.__chandle__()] = (cond, tirx.Not(cond))
        return entry[1]

    # ---- planning -------------------------------------------------------------------
    def plan(self, s, pending):
        """(new stmt, accesses pending after it) given `pending` before it.

        A loop's body is planned up to three times (alone, with what an iteration leaves
        the next, with what came before), so the plans of a nested loop's body with
        nothing pending repeat: they are kept per statement and loop/guard context (by
        handle; the entry holds the objects), with the barriers they placed."""
        if s.__chandle__() in self.inert:
            return s, pending
        if pending:
            return self._plan(s, pending)
        key, nodes = self.context(s)
        entry = self.plans.get(key)
        if entry is None:
            before = self.inserted
            planned, after = self._plan(s, [])
            entry = self.plans[key] = (nodes, planned, after, self.inserted - before)
        else:
            self.inserted += entry[3]
        return entry[1], list(entry[2])

    def uniform_header(self, s) -> bool:
        """`uniform` of a loop's range or an if's condition, once per statement."""
        entry = self.uniform_headers.get(s.__chandle__())
        if entry is None:
            exprs = [s.min, s.extent] if isinstance(s, tirx.For) else [s.condition]
            entry = self.uniform_headers[s.__chandle__()] = (s, self.uniform(exprs))
        return entry[1]

    def _plan(self, s, pending):
        kind = _kind(type(s))
        if kind is tirx.SeqStmt:
            out = []
            for k in items(s.seq):
                k, pending = self.plan(k, pending)
                out.append(k)
            return seq(out), pending
        if ops.is_barrier(s):
            return s, []
        if kind is tirx.For and self.uniform_header(s):
            ext = as_int(s.extent)
            if ext is not None and ext <= 0:  # never runs: a barrier there is never reached
                return s, pending
            start = as_int(s.min)
            pushed = ext is not None and start is not None
            enclosing = {lp.var.__chandle__() for lp in self.loops}
            if pushed:
                self.loops.append(LoopRange(s.loop_var, ext, start))
            # The loop's own barriers (its body and what one iteration leaves the next;
            # those accesses are matched with the next iteration's on the enclosing loops
            # only) ...
            if ext == 1:  # one iteration: nothing is carried over from a previous one
                body, after = self.plan(s.body, [])
            else:
                _, after_first = self.plan(s.body, [])
                carried = [fp.carried_over(enclosing) for fp in after_first]
                body, after = self.plan(s.body, carried)
            # ... then what came before: a conflict that none of them orders is settled
            # once, before the loop; otherwise it flows through the first iteration.
            prefix = None
            if pending:
                before = self.inserted
                _, after_first = self.plan(body, pending)
                if self.inserted > before:   # `pending` needed a barrier in the body
                    self.inserted = before + 1
                    prefix = ops.barrier()
                else:
                    after = after_first + after
            if pushed:
                self.loops.pop()
            if prefix is None and (ext is None or ext <= 0):
                after = pending + after
            return seq([prefix, rebuild(s, [body])]), after
        if kind is tirx.IfThenElse and self.uniform_header(s):
            self.guards.append(s.condition)
            then, p_then = self.plan(s.then_case, pending)
            self.guards.pop()
            if s.else_case is None:
                return tirx.IfThenElse(s.condition, then, None), pending + p_then
            self.guards.append(self.negation(s.condition))
            other, p_else = self.plan(s.else_case, pending)
            self.guards.pop()
            return tirx.IfThenElse(s.condition, then, other), p_then + p_else
        if kind is tirx.AttrStmt:
            body, pending = self.plan(s.body, pending)
            return rebuild(s, [body]), pending
        return self.leaf(s, pending)

    def conflicts(self, accesses, pending) -> bool:
        # only accesses of one buffer can race; the order of the pairs is kept, as it
        # decides which footprints get enumerated before the first race is found
        return any(self.may_race(a, p) for a in accesses for p in pending
                   if p.buffer_key == a.buffer_key)

    def may_race(self, a, b) -> bool:
        """`may_race(a, b)`, once per pair: a loop body is planned up to three times, and
        the same accesses (or their carried-over views, which share the points) meet
        again. The answer depends only on the points and the variables each side is
        matched on; the entry keeps the points alive, so their ids stay theirs."""
        if a.points is None or b.points is None:
            return may_race(a, b)
        key = (id(a.points), a.match, id(b.points), b.match)
        entry = self.races.get(key)
        if entry is None:
            entry = self.races[key] = (a.points, b.points, may_race(a, b))
        return entry[2]

    def leaf(self, s, pending):
        if isinstance(s, tirx.IfThenElse):
            key, nodes = self.context(s)
            if key not in self.divergent_checked:  # the same check in the same context
                self.check_divergent(s)
                self.divergent_checked[key] = nodes
        accesses = self.footprints(s)
        if self.conflicts(accesses, pending):
            self.inserted += 1
            return seq([ops.barrier(), s]), accesses
        return s, pending + accesses


    def check_divergent(self, s):
        """An `if` on a thread-dependent condition holds no barrier (not every thread would
        reach it), so a race between two accesses inside one branch cannot be ordered:
        that is an error, never a kernel silently left racing."""
        for cond, branch in ((s.condition, s.then_case),
                             (self.negation(s.condition), s.else_case)):
            if branch is None:
                continue
            self.guards.append(cond)
            planned, _ = self.plan(branch, [])
            self.guards.pop()
            if _count_barriers(planned):
                raise LoweringError(
                    "two threads may touch the same threadgroup memory inside an `if` whose "
                    f"condition depends on the thread ({cond}); a barrier there would not be "
                    "reached by every thread. Split the branch so the shared-memory exchange "
                    "happens outside it, or make the condition uniform",
                    kernel=self.kernel, construct="threadgroup barrier")


_KINDS = (tirx.SeqStmt, tirx.For, tirx.IfThenElse, tirx.AttrStmt)
_KIND_OF: dict = {}


def _kind(node_type):
    """The class of `_KINDS` a statement type is (None: a leaf), once per type: TVM's node
    classes are ABCs, and isinstance() on them is slow."""
    if node_type not in _KIND_OF:
        _KIND_OF[node_type] = next((k for k in _KINDS if issubclass(node_type, k)), None)
    return _KIND_OF[node_type]


def _inert_statements(body) -> set:
    """Handles of the statements of `body` (an unplanned kernel body) that name no
    threadgroup buffer, anywhere inside them, and hold no barrier: planning such a
    statement places nothing and passes the pending accesses through unchanged. A
    statement the planner builds itself is never in the set, so it is always planned."""
    shared = {}   # Var handle -> whether it is a threadgroup buffer's data

    def names_shared(node) -> bool:
        found = []

        def visit(v):
            key = v.__chandle__()
            known = shared.get(key)
            if known is None:
                known = shared[key] = is_buffer_var(v) and ops.buffer_scope(v) == "shared"
            if known:
                found.append(v)

        visit_nodes(node, (tvm.ir.Var, visit))
        return bool(found)

    inert = set()

    def visit_stmt(stmt) -> bool:
        kids = children(stmt)
        if kids:
            quiet = [visit_stmt(k) for k in kids]   # every child, for the set
            header = _HEADERS.get(_kind(type(stmt)))
            ok = all(quiet) and (
                not names_shared(stmt) if header is None     # another kind: all of it
                else not any(names_shared(getattr(stmt, f)) for f in header))
        else:
            ok = not ops.is_barrier(stmt) and not names_shared(stmt)
        if ok:
            inert.add(stmt.__chandle__())
        return ok

    visit_stmt(body)
    return inert


# the expressions of a statement with children outside those children (a sequence has
# none: with every child quiet it is, and is not walked again)
_HEADERS = {tirx.For: ("min", "extent"), tirx.IfThenElse: ("condition",),
            tirx.AttrStmt: ("value",), tirx.SeqStmt: ()}


def _count_barriers(stmt) -> int:
    found = []
    walk(stmt, lambda s: found.append(s) if ops.is_barrier(s) else None)
    return len(found)


def _barrier_places(stmt, place="straight_line") -> set:
    """Where `stmt`'s barriers sit: the `barrier` decision point's choices."""
    if ops.is_barrier(stmt):
        return {place}
    if isinstance(stmt, tirx.For):
        place = "in_loop"
    elif isinstance(stmt, tirx.IfThenElse) and place == "straight_line":
        place = "in_if"
    found = set()
    for kid in children(stmt):
        found |= _barrier_places(kid, place)
    return found


def thread_sync(func: tirx.PrimFunc) -> tirx.PrimFunc:
    name = func_name(func, None)
    decided = set()

    def plan_kernel(nest):
        body, _ = _Planner(nest, name).plan(nest.body, [])
        decided.update(_barrier_places(body) or {"none"})
        return nest.wrap(body)

    planned = map_kernels(func, plan_kernel)
    return decisions.note(planned, {decisions.choice("barrier", d) for d in decided})
