"""Pass `fold_temporaries`: a thread-local array that one loop nest fills element by
element and only a later reduction's per-thread accumulation of the same shape reads is
not materialized; its element expression is accumulated directly.

The pattern is TileLang's `sq = x * x` (an element-wise T.Parallel into a fragment) read
only by `T.reduce_sum(sq, ...)`: after `lower_tile_ops` both are per-thread nests over the
fragment's rounds and runs, `sq[r * v + l] = x[r * v + l] * x[r * v + l]` and
`acc = acc + sq[k * v + m]`. Folding gives `acc = acc + x[k * v + m] * x[k * v + m]`, as a
hand-written kernel accumulates `dot(v, v)`: one array of registers per thread fewer.

Expects: lowered per-thread TIR (`lower_tile_ops`), before `vectorize` (whose run loops it
may remove) and before flattening; local arrays allocated by AllocBuffer statements.
Guarantees: a local array B is folded only when all of these hold:
  - B is stored by exactly one statement S and loaded exactly once in the kernel, by a
    statement of the nest N_L, a later statement of the sequence that holds S's nest N_S;
  - that statement is an accumulation, `acc[k] = op(acc[k], ... B[...] ...)` into another
    local array (a T.reduce_* step): a copy or element-wise reader keeps B, so its
    vector stores stay vector stores (`vectorize` works on whole runs of B);
  - N_S is serial loops and condition-only ifs down to S, and S's indices map its
    iterations one to one onto elements (no element is written twice); N_L has, level
    by level, loops of the same bounds and ifs of the same conditions (after renaming
    N_S's loop variables to N_L's), and below them no loop around the load; the load's
    indices are S's indices after that renaming, so each element is read at the
    iteration that wrote it;
  - S's value reads only thread-local arrays other than B (a copy from device or
    threadgroup memory keeps its vector loads, and no other thread's write can come
    between), calls only pure operations, and reads no array that any statement from N_S
    (excluded) through N_L (included) stores, so the value computed at the load is the
    value S computed.
Then the load becomes S's (renamed) value, and N_S and B's allocation are removed. Every
element is computed once, at the same iteration, from the same inputs; results are equal
up to the compiler contracting the moved arithmetic into its reader (x * x + acc may
become one fused multiply-add), which the tolerance policy covers. Anything else is left
as it is: the pass never fails.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer, detect_iter_map

from core.ir import ops
from core.ir.kernel import map_kernels
from core.ir.stmt import (children, collect, items, loads, map_nodes, rewrite, seq,
                          substitute)

_PURE_EFFECT = 1  # CallEffectKind.Pure and below (ExprAnnotation): no memory effects


def fold_temporaries(func: tirx.PrimFunc) -> tirx.PrimFunc:
    return map_kernels(func, lambda nest: nest.wrap(_fold_kernel(nest.body)))


def _fold_kernel(body):
    while True:
        folded = _fold_one(body)
        if folded is None:
            return body
        body = folded


def _fold_one(body):
    """`body` with one temporary folded, or None when none can be."""
    use = _BufferUse(body)
    load_count = {}
    for ld in loads(body):
        key = ld.source.__chandle__()
        load_count[key] = load_count.get(key, 0) + 1
    candidates = [buf for key, (buf, count) in use.store_counts.items() if count == 1
                  and load_count.get(key, 0) == 1 and ops.buffer_scope(buf) == "local"]
    for buf in candidates:
        for sq in use.sequences:
            found = _fold_in(sq, buf, use)
            if found is not None:
                old, new = found
                body = rewrite(body, lambda s, old=old, new=new: new if s.same_as(old) else s)
                return rewrite(body, lambda s, buf=buf: _drop_alloc(s, buf))
    return None


class _BufferUse:
    """What `_fold_one` asks of every item of every sequence for every candidate, from one
    walk of the kernel body (nothing changes until a fold is found; then a new walk):
    the buffers each statement stores to (by handle), how often each buffer is stored,
    the sequences in walk order; the buffers a statement loads from, on first ask."""

    def __init__(self, body):
        self.stored = {}         # statement handle -> (statement, {buffer handle})
        self.loaded = {}         # statement handle -> (statement, {buffer handle})
        self.store_counts = {}   # buffer handle -> [buffer, stores], in walk order
        self.sequences = []
        self._index(body)

    def _index(self, stmt) -> set:
        if isinstance(stmt, tirx.SeqStmt):
            self.sequences.append(stmt)
        stored = set()
        if isinstance(stmt, tirx.BufferStore):
            key = stmt.buffer.__chandle__()
            self.store_counts.setdefault(key, [stmt.buffer, 0])[1] += 1
            stored.add(key)
        for k in children(stmt):
            stored |= self._index(k)
        self.stored[stmt.__chandle__()] = (stmt, stored)
        return stored

    def stores_to(self, stmt, bufs) -> bool:
        """Whether `stmt` (a statement of the walked body) stores to any of `bufs`."""
        stored = self.stored[stmt.__chandle__()][1]
        return any(b.__chandle__() in stored for b in bufs)

    def loads_from(self, stmt, buf) -> bool:
        entry = self.loaded.get(stmt.__chandle__())
        if entry is None:
            entry = self.loaded[stmt.__chandle__()] = (
                stmt, {ld.source.__chandle__() for ld in loads(stmt)})
        return buf.__chandle__() in entry[1]


def _drop_alloc(stmt, buf):
    if isinstance(stmt, tirx.SeqStmt):
        kept = [s for s in stmt.seq
                if not (isinstance(s, tirx.AllocBuffer) and s.buffer.same_as(buf))]
        if len(kept) != len(stmt.seq):
            return seq(kept)
    return stmt


def _levels(stmt):
    """(levels, innermost): the For / else-less IfThenElse chain of single-child bodies
    above `stmt`'s innermost statement."""
    levels = []
    while isinstance(stmt, tirx.For) or (isinstance(stmt, tirx.IfThenElse)
                                         and stmt.else_case is None):
        levels.append(stmt)
        stmt = stmt.body if isinstance(stmt, tirx.For) else stmt.then_case
    return levels, stmt


def _fold_in(sequence, buf, use):
    """(old SeqStmt, new SeqStmt) folding `buf` inside `sequence` (a SeqStmt of the body
    `use` walked), or None."""
    stmts = items(sequence.seq)
    writer = next((i for i, s in enumerate(stmts) if use.stores_to(s, [buf])), None)
    if writer is None:
        return None
    reader = next((i for i, s in enumerate(stmts) if use.loads_from(s, buf)), None)
    if writer is None or reader is None or reader <= writer:
        return None
    levels_s, store = _levels(stmts[writer])
    if not isinstance(store, tirx.BufferStore) or not store.buffer.same_as(buf):
        return None
    if any(isinstance(lv, tirx.For) and lv.kind != tirx.ForKind.SERIAL for lv in levels_s):
        return None
    if not _pure(store.value, buf):
        return None
    read = [ld.source for ld in loads(store.value)]
    if any(use.stores_to(s, read) for s in stmts[writer + 1:reader + 1]):
        return None
    if not _one_element_per_iteration(levels_s, store):
        return None
    renamed = _match(levels_s, stmts[reader])
    if renamed is None:
        return None
    vmap, inner = renamed
    if collect(inner, tirx.For)[0]:
        return None                  # a loop below the matched levels would recompute it
    if not _accumulates(inner, buf):
        return None
    value = substitute(store.value, vmap)
    want = [substitute(i, vmap) for i in store.indices]
    analyzer = Analyzer()
    hits = []

    def fold(ld):
        if not ld.source.same_as(buf):
            return ld
        if len(ld.indices) != len(want) or not all(
                tvm_ffi.structural_equal(analyzer.simplify(a), analyzer.simplify(b))
                for a, b in zip(ld.indices, want)):
            return ld
        hits.append(ld)
        return value

    new_reader = map_nodes(stmts[reader], (tvm.ir.TensorLoad, fold))
    if not hits:
        return None
    stmts[reader] = new_reader
    del stmts[writer]
    return sequence, seq(stmts)


def _one_element_per_iteration(levels, store) -> bool:
    """The store's indices map N_S's iterations one to one onto elements (the analyzer's
    iter-map detection proves it bijective), so no later iteration overwrites the element
    the reader takes from an earlier one."""
    loops = {lv.loop_var: tvm.ir.Range.from_min_extent(lv.min, lv.extent)
             for lv in levels if isinstance(lv, tirx.For)}
    if not loops:
        return True
    return len(detect_iter_map(list(store.indices), loops, check_level="bijective").indices) > 0


def _match(levels_s, reader):
    """({N_S loop var: N_L loop var}, N_L's statement below the matched levels) when
    `reader` opens with levels matching `levels_s`, else None."""
    vmap, stmt = {}, reader
    for lv in levels_s:
        if isinstance(lv, tirx.For):
            if not isinstance(stmt, tirx.For) or stmt.kind != tirx.ForKind.SERIAL:
                return None
            if not (tvm_ffi.structural_equal(substitute(lv.min, vmap), stmt.min)
                    and tvm_ffi.structural_equal(substitute(lv.extent, vmap), stmt.extent)):
                return None
            vmap[lv.loop_var] = stmt.loop_var
            stmt = stmt.body
        else:
            if not isinstance(stmt, tirx.IfThenElse) or stmt.else_case is not None or \
                    not tvm_ffi.structural_equal(substitute(lv.condition, vmap),
                                                 stmt.condition):
                return None
            stmt = stmt.then_case
    return vmap, stmt


def _accumulates(stmt, buf) -> bool:
    """`stmt` (under condition-only ifs) is `acc[k] = f(acc[k], ...)` for a local array
    acc other than `buf`: a reduction's per-thread step."""
    while isinstance(stmt, tirx.IfThenElse) and stmt.else_case is None:
        stmt = stmt.then_case
    if not isinstance(stmt, tirx.BufferStore) or stmt.buffer.same_as(buf) or \
            ops.buffer_scope(stmt.buffer) != "local":
        return False
    return any(ld.source.same_as(stmt.buffer) and len(ld.indices) == len(stmt.indices)
               and all(tvm_ffi.structural_equal(a, b) for a, b in zip(ld.indices, stmt.indices))
               for ld in loads(stmt.value))


def _pure(value, buf) -> bool:
    """`value` reads only local arrays other than `buf` and calls only operations
    without memory effects."""
    lds, calls = collect(value, tvm.ir.TensorLoad, tvm.ir.Call)
    return all(ops.buffer_scope(ld.source) == "local" and not ld.source.same_as(buf)
               for ld in lds) and all(map(_pure_call, calls))


def _pure_call(call) -> bool:
    if not isinstance(call.op, tvm.ir.Op):
        return False
    effect = call.op.get_attr("TCallEffectKind")
    return effect is not None and int(effect) <= _PURE_EFFECT
