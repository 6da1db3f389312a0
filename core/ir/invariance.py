"""Thread invariance: which stores of a kernel body every thread makes alike.

A statement outside T.Parallel runs on every thread of the threadgroup (TileLang's rule:
each thread computes the replicated value). A store of such a statement to device or
threadgroup memory whose element and value are the same on every thread (`OUT[bx] = s`
after a per-thread loop every thread runs alike) is then made by every thread at once:
identical bytes on a GPU, but a write-write race under Metal's memory model.
`single_writer_stores` finds them, so that lower_tile_ops can let one thread make them.

The analysis works on the kernel body before lower_tile_ops (tile ops and PARALLEL loops
still there) and is conservative: a value is *invariant* when it reads no thread index,
no variable of a T.Parallel loop, and loads only
  - one-element-or-larger `local` buffers (T.alloc_local, scalars) that are themselves
    invariant: every store to them is in uniform control (outside T.Parallel, under `if`s
    and loop bounds that are invariant), with invariant index and value, and no tile op
    other than a T.fill/T.copy of invariant operands writes them;
  - device buffers the kernel never writes, or writes only by single-writer stores (then
    only the writer reads them: the load is inside such a store's value);
  - threadgroup memory at invariant indices (in a race-free program, every thread reading
    one element in the same statement sees the same value);
and calls no atomic. A *single-writer store* is a BufferStore in uniform control, to a
device or threadgroup buffer, whose indices and value are invariant; a device buffer's
stores qualify only when the kernel reads it nowhere but inside such stores' values (a
read by another thread would need a device-memory barrier after the one writer's store).
Stores under a thread-dependent `if` are left alone: the kernel already chose its writers.
A fragment accessed element-wise outside T.Parallel is held whole by every thread
(layout_inference gives it that layout) and is treated as a local buffer: invariant when
all its writes are; `replicated_fragments` lists them and the statement-level stores to
one that are not (verify refuses those).
"""

from __future__ import annotations

import tvm
from tvm import tirx

from core.ir import ops
from core.ir.annotations import REDUCER
from core.ir.ops import FRAGMENT
from core.ir.stmt import atomics_in, children, collect, items, loads


def _h(node):
    return node.__chandle__()


class _Invariance:
    def __init__(self, nest):
        self.thread_vars = {_h(v) for v in nest.thread_vars}
        self.parallel_vars = set()
        self.locals = set()          # local buffers (not reducers); shrinks to invariant ones
        self.tile_uses = {}          # local buffer handle -> [(tile call, conds, parallel)]
        self.stores = []             # (BufferStore, enclosing conds and bounds, parallel)
        self.read_by = {}            # global buffer handle -> [stores whose own exprs read it]
        self.read_elsewhere = set()  # global buffers read by conditions, bounds, tile ops
        self.written = set()         # global buffers written in any way
        self.num_threads = nest.num_threads
        self.replicated = set()      # fragments accessed element-wise outside T.Parallel
        self._scan(nest.body, conds=[], parallel=False)
        self.locals |= self.replicated   # every thread holds all of it: as a local

    # ---- one walk collecting what the fixed point needs -------------------------------
    def _scan(self, s, conds, parallel):
        if isinstance(s, tirx.AllocBuffer) and ops.buffer_scope(s.buffer) == "local" \
                and REDUCER not in (s.annotations or {}):
            self.locals.add(_h(s.buffer))
        if isinstance(s, tirx.For):
            if s.kind == tirx.ForKind.PARALLEL:
                self.parallel_vars.add(_h(s.loop_var))
                parallel = True
            conds = conds + [s.min, s.extent]
            self._read_elsewhere(s.min, s.extent, parallel=parallel)
        if isinstance(s, tirx.IfThenElse):
            self._read_elsewhere(s.condition, parallel=parallel)
            for case in (s.then_case, s.else_case):
                if case is not None:
                    self._scan(case, conds + [s.condition], parallel)
            return
        if isinstance(s, tirx.BufferStore):
            self.stores.append((s, conds, parallel))
            if not parallel:
                self._replicated(s.value, *s.indices)
                if ops.buffer_scope(s.buffer) == FRAGMENT:
                    self.replicated.add(_h(s.buffer))
            if ops.buffer_scope(s.buffer) == "global":
                self.written.add(_h(s.buffer))
            for e in (s.value, *s.indices):
                for ld in loads(e):
                    if ops.buffer_scope(ld.source) == "global":
                        self.read_by.setdefault(_h(ld.source), []).append(s)
            return
        if isinstance(s, tirx.Evaluate):
            call = s.value
            if ops.is_tile_call(call):
                for r in _regions(call):
                    self.tile_uses.setdefault(_h(r.buffer), []).append((call, conds, parallel))
                    if r.scope == "global":      # conservatively both read and written
                        self.written.add(_h(r.buffer))
                        self.read_elsewhere.add(_h(r.buffer))
            for a in atomics_in(call):
                if ops.buffer_scope(a.buffer) == "global":
                    self.written.add(_h(a.buffer))
            self._read_elsewhere(call, parallel=parallel or ops.is_tile_call(call))
            return
        for k in children(s):
            self._scan(k, conds, parallel)

    def _replicated(self, *exprs):
        for e in exprs:
            for ld in loads(e):
                if ops.buffer_scope(ld.source) == FRAGMENT:
                    self.replicated.add(_h(ld.source))

    def _read_elsewhere(self, *exprs, parallel=True):
        if not parallel:
            self._replicated(*exprs)
        for e in exprs:
            for ld in loads(e):
                if ops.buffer_scope(ld.source) == "global":
                    self.read_elsewhere.add(_h(ld.source))

    # ---- the fixed point: both sets only shrink ----------------------------------------
    def solve(self):
        self.single = {_h(st.buffer) for st, _, _ in self.stores
                       if ops.buffer_scope(st.buffer) == "global"} - self.read_elsewhere
        self.single -= {h for h in self.single if h in self.tile_uses}
        while True:
            before = (set(self.locals), set(self.single))
            ok = {_h(st): self._store_ok(st, conds, par) for st, conds, par in self.stores}
            for st, _, _ in self.stores:
                if not ok[_h(st)]:
                    self.locals.discard(_h(st.buffer))
                    self.single.discard(_h(st.buffer))
            for h in list(self.single):   # read only by the one writer's own stores
                if not all(ok[_h(st)] and self._writer(st) for st in self.read_by.get(h, ())):
                    self.single.discard(h)
            for h, uses in self.tile_uses.items():
                if h in self.locals and not all(self._tile_ok(c, conds, par, h)
                                                for c, conds, par in uses):
                    self.locals.discard(h)
            if (self.locals, self.single) == before:
                break
        return [st for st, conds, par in self.stores
                if self._writer(st) and self._store_ok(st, conds, par)]

    def _writer(self, st):
        """A store to threadgroup memory, or to a device buffer only single writers touch."""
        scope = ops.buffer_scope(st.buffer)
        return scope == "shared" or (scope == "global" and _h(st.buffer) in self.single)

    def _store_ok(self, st, conds, parallel):
        return not parallel and all(self.invariant(e)
                                    for e in (*conds, *st.indices, st.value))

    def _tile_ok(self, call, conds, parallel, h):
        """A tile op naming local buffer `h` keeps it invariant: it only reads it, or it is
        a T.fill / T.copy of invariant operands in uniform control."""
        regions = _regions(call)
        first = 1 if ops.is_tile_call(call, "tl.copy") or ops.is_tile_call(call, "tl.reduce") \
            else 0           # the source of a copy or reduction is only read
        if all(_h(r.buffer) != h for r in regions[first:]):
            return True
        if parallel or not all(self.invariant(c) for c in conds):
            return False
        if ops.is_tile_call(call, "tl.fill"):
            return self.invariant(call.args[1]) and all(map(self.invariant, regions[0].mins))
        if ops.is_tile_call(call, "tl.reduce") and h in self.replicated:
            return True   # the whole source combined: alike on every thread holding it
        if ops.is_tile_call(call, "tl.copy"):
            src, dst = regions
            return src.scope != FRAGMENT and self._readable(src.buffer) and all(
                map(self.invariant, (*src.mins, *dst.mins)))
        return False

    def _readable(self, buf):
        scope, h = ops.buffer_scope(buf), _h(buf)
        if scope == "local" or h in self.replicated:
            return h in self.locals
        if scope == "global":
            return h not in self.written or h in self.single
        return scope == "shared"

    def invariant(self, e) -> bool:
        variables, lds, calls = collect(e, tvm.ir.Var, tvm.ir.TensorLoad, tvm.ir.Call)
        if any(_h(v) in self.thread_vars or _h(v) in self.parallel_vars for v in variables):
            return False
        if any(ops.decode_atomic(c) is not None for c in calls):
            return False
        return all(self._readable(ld.source) for ld in lds)


def _regions(call):
    return [ops.decode_region(a) for a in items(call.args) if ops.is_tile_call(a, "tl.region")]


def single_writer_stores(nest) -> set:
    """Handles (`__chandle__`) of the BufferStores of `nest` (a KernelNest before
    lower_tile_ops) that every thread makes alike: see the module docstring."""
    if nest.num_threads == 1:
        return set()
    return {_h(st) for st in _Invariance(nest).solve()}


def replicated_fragments(nest) -> tuple[set, list]:
    """(handles, stores): the fragments of `nest` accessed element-wise outside T.Parallel
    (every thread holds them whole, layout_inference), and the BufferStores outside
    T.Parallel to one of them whose element, value or enclosing condition may differ
    between threads: each thread would hold a different value of one replicated element."""
    inv = _Invariance(nest)
    if not inv.replicated or nest.num_threads == 1:
        return set(inv.replicated), []
    inv.solve()
    return set(inv.replicated), [st for st, conds, par in inv.stores
                                 if _h(st.buffer) in inv.replicated and not par
                                 and not inv._store_ok(st, conds, par)]
