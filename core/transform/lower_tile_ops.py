"""Pass `lower_tile_ops`: tile ops and T.Parallel loops -> per-thread loops.

Expects: a PrimFunc after `layout_inference` (fragments carry `tl.layout_vec`, replicated
ones `tl.layout_replicate`).
Guarantees: no tile-op calls, no PARALLEL loops and no fragment buffers remain. Each
fragment becomes a per-thread `local` array of `FragmentLayout.slots` elements; each
fragment access `F[i, j]` in a T.Parallel loop becomes `F_local[slot]`.

Work distribution (the same rule for T.Parallel loops, copies and fills, so they agree
with the fragment layout, core/ir/layout.py): the iteration space's flat index f is cut
into runs of `vec` consecutive elements, dealt to threads round-robin:

    for r in range(rounds):                  # serial, per thread
        run = r * threads + tid
        if run < runs:                       # only when runs % threads != 0
            for l in range(vec):             # annotated tl.vector_lanes = vec
                f = run * vec + l;  (i, j, ...) = unravel(f, extents)
                body(i, j, ...)             # fragment slot = r * vec + l

A T.Parallel runs in the layout of the fragments it accesses at its own extents (else the
default layout of its extents). In a replicated layout (a reduction's result) `threads`
are its holders and `tid` the thread's holder: every replica runs its holder's
iterations, and stores to threadgroup or device memory (in the loop or a T.copy out of
the fragment) (atomics too) are made by the owner replica only, so each element is stored once. A
lower-rank fragment read with a subset of the loop variables (`mx[i]` in T.Parallel(bM,
N)) reads the element's slot in its own layout, after `broadcast_ok` has proven that
every thread running the iteration holds it (else a LoweringError naming the fragment).

A store outside T.Parallel runs on every thread (TileLang's rule); one to device or
threadgroup memory whose element and value every thread computes alike (`OUT[bx] = s`
after a per-thread loop; core/ir/invariance.py decides, conservatively) is made by thread
0 only, under `if (tid == 0)` (consecutive ones share the `if`): the same bytes as every
thread storing them, without the write-write race. A store under a thread-dependent `if`,
of a per-thread value or element, or to a device buffer other threads read is left as
written. A fragment element accessed outside T.Parallel (`lse[0] = T.log(s[0]) + m[0]`,
a loop bound, a condition) is the thread's own slot: such a fragment's layout has every
thread hold all of it (layout_inference), element f at slot f, and verify has refused a
thread-dependent store into one.

A copy or fill by all threads of a threadgroup tile that nothing accesses element-wise
(only copies, fills and simdgroup matrix loads and stores touch it: a GEMM's A and B tiles)
takes runs of 16 bytes instead (8 halves, 4 floats; `wide_lanes`, METAL.copy_lanes), one
vector access each where vectorize proves the alignment: no thread reads such a tile back
in the layout, so the wider runs cost no barrier.

Copies convert the dtype (a Cast when the dtypes differ) and mask edge tiles of global
buffers: an out-of-bounds load reads 0, an out-of-bounds store is skipped. A bound is
checked only where the analyzer cannot prove it. Copies and fills involving a `local`
buffer run per thread over the whole tile (a last dim of 2 or 4 elements is a
vectorize candidate: one thread's 4-element lane of a device row is one `half4` load).
T.gemm and every use of a gemm accumulator go to core/transform/lower_gemm.py first; the
T.reduce family to core/transform/lower_reduce.py.
Both see the kernel through one KernelContext (core/transform/kernel_context.py): name,
threads, thread index, fresh names, the fragment table, the enclosing ranges and guards,
this pass's T.copy and T.Parallel lowering as functions, and the threadgroup bytes each
lowering publishes; neither reaches into this pass or into the other.

Decisions noted (core/ir/decisions.py): `threads`, the thread count's class, and what
the gemm and reduce lowerings decide, on the function.
"""

from __future__ import annotations

import dataclasses
from math import prod

import tvm
from tvm import tirx

from core.errors import LoweringError
from core.ir import decisions, ops
from core.ir.annotations import REDUCER
from core.ir.annotations import VECTOR_LANES  # read by vectorize
from core.ir.invariance import single_writer_stores
from core.ir.kernel import func_name, map_kernels
from core.ir.layout import FragmentLayout, broadcast_dims, broadcast_ok, run_width
from core.ir.ops import FRAGMENT
from core.ir.stmt import (as_int, atomics_in, children, i32, loads, map_nodes, rebuild, rewrite,
                          seq, substitute, walk)
from core.target import METAL
from core.transform.kernel_context import KernelContext
from core.transform.layout_inference import fragment_layout
from core.transform.lower_gemm import GemmLowering
from core.transform.lower_reduce import ReduceLowering


def unravel(flat, extents):
    """Row-major indices of flat index `flat` in a tile of `extents` (ints)."""
    idx = []
    stride = 1
    for e in reversed(extents):
        if e == 1:
            idx.append(i32(0))
        elif stride == 1:
            idx.append(tirx.floormod(flat, e) if e != prod(extents) else flat)
        else:
            q = tirx.floordiv(flat, stride)
            idx.append(q if stride * e == prod(extents) else tirx.floormod(q, e))
        stride *= e
    return list(reversed(idx))


class _KernelLowering:
    """Lowers one kernel's statements; T.gemm and its accumulators go to `self.gemm`, the
    T.reduce family to `self.reduce`, which see the kernel through `self.ctx` only."""

    def __init__(self, nest, kernel_name):
        self.nest = nest
        self.ctx = KernelContext(name=kernel_name, threads=nest.num_threads,
                                 tid=nest.linear_thread_index(), copy=self.copy,
                                 parallel=self.parallel, stmt=self.stmt)
        self.reducers = {}           # T.alloc_reducer buffer (local) -> its op
        self.ctx.decide("threads", decisions.thread_class(nest.num_threads))
        for attr in nest.attrs:
            self.ctx.ranges[attr.node.var] = (i32(0), attr.value)
        self.gemm = GemmLowering(self.ctx, nest.body)   # T.gemm and its accumulators
        self.reduce = ReduceLowering(self.ctx, nest.body)  # the T.reduce family
        # stores every thread makes alike (core/ir/invariance.py): thread 0 makes them
        self.single_writer = single_writer_stores(nest)
        self.writer = tirx.EQ(self.ctx.tid, i32(0))
        self.in_parallel = 0         # > 0 while lowering a T.Parallel body
        # threadgroup tiles copied in 16-byte runs (handle -> lanes; `_wide_tiles`)
        # and the accesses of each device buffer (handle -> tile ops and element accesses)
        self.wide, self.device_uses = _wide_tiles(nest.body, self.gemm.accumulators)

    # ---- statements -----------------------------------------------------------------
    def stmt(self, s):
        lowered = self.gemm.lower(s)
        if lowered is not None:
            return lowered
        if isinstance(s, tirx.AllocBuffer) and REDUCER in (s.annotations or {}):
            self.reducers[s.buffer] = str(s.annotations[REDUCER].value)
            return tirx.AllocBuffer(s.buffer)
        if isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.finalize_reducer"):
            buf = ops.decode_region(s.value.args[0]).buffer
            return self.reduce.finalize(buf, self.reducers[buf])
        if isinstance(s, tirx.AllocBuffer) and ops.buffer_scope(s.buffer) == FRAGMENT:
            layout = fragment_layout(s, self.ctx.threads)
            local = tirx.decl_buffer((layout.slots,), ops.buffer_dtype(s.buffer),
                                     s.buffer.name, scope="local")
            self.ctx.fragments[s.buffer] = (local, layout)
            return tirx.AllocBuffer(local)
        if isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL:
            return self.parallel(s)
        if isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.copy"):
            return self.copy(*(ops.decode_region(a) for a in s.value.args))
        if isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.atomic_tile"):
            src, dst = (ops.decode_region(a) for a in s.value.args[:2])
            return self.copy(src, dst, atomic=str(s.value.args[2].value))
        if isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.fill"):
            return self.fill(ops.decode_region(s.value.args[0]), s.value.args[1])
        if isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.reduce"):
            return self.reduce.lower(s.value)
        if isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.reduce_online"):
            return self.reduce.online(s.value)
        if isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.thread_allreduce"):
            return self.reduce.allreduce(s.value)
        if isinstance(s, tirx.BufferStore) and s.__chandle__() in self.single_writer:
            return tirx.IfThenElse(self.writer, self.elements(s), None)
        if isinstance(s, tirx.IfThenElse):
            branches = []
            for cond, case in ((s.condition, s.then_case),
                               (tirx.Not(s.condition), s.else_case)):
                self.ctx.guards.append(cond)
                branches.append(None if case is None else self.stmt(case))
                self.ctx.guards.pop()
            return tirx.IfThenElse(self.elements(s.condition), *branches)
        kids = children(s)
        if not kids:
            return self.elements(s)
        if isinstance(s, tirx.For):
            self.ctx.ranges[s.loop_var] = (s.min, s.extent)
            if self.in_parallel == 0 and self.reads_fragment(s.min, s.extent):
                s = tirx.For(s.loop_var, self.elements(s.min), self.elements(s.extent),
                             s.kind, s.body, s.thread_binding, s.annotations)
        lowered = [self.stmt(k) for k in kids]
        if isinstance(s, tirx.SeqStmt):
            lowered = self.merge_writers(lowered)
        return rebuild(s, lowered)

    # ---- fragment elements outside T.Parallel ---------------------------------------------
    def reads_fragment(self, *exprs) -> bool:
        return any(ld.source in self.ctx.fragments for e in exprs for ld in loads(e))

    def elements(self, node):
        """`node` (a leaf statement or an expression outside T.Parallel) with its fragment
        elements as the thread's own slots: such a fragment is held whole by every thread
        (layout_inference), element f at slot f. Inside T.Parallel, fragments_to_slots."""
        frags = self.ctx.fragments
        if self.in_parallel or not frags:
            return node

        def slot(buf, indices):
            local, layout = frags[buf]
            flat = i32(0)
            for index, extent in zip(indices, layout.shape):
                flat = flat * extent + index if as_int(flat) != 0 else index
            return local, layout.slot_expr(flat)

        def load(ld):
            if ld.source not in frags:
                return ld
            local, at = slot(ld.source, ld.indices)
            return tirx.BufferLoad(local, [at])

        if isinstance(node, tirx.Stmt) and not (
                isinstance(node, tirx.BufferStore) and node.buffer in frags) and \
                not any(ld.source in frags for ld in loads(node)):
            return node
        node = map_nodes(node, (tvm.ir.TensorLoad, load))
        if isinstance(node, tirx.BufferStore) and node.buffer in frags:
            local, at = slot(node.buffer, node.indices)
            return tirx.BufferStore(local, node.value, [at])
        return node

    def merge_writers(self, stmts):
        """Consecutive single-writer stores under one `if (tid == 0)`."""
        out = []
        for st in stmts:
            if out and self.is_writer(st) and self.is_writer(out[-1]):
                out[-1] = tirx.IfThenElse(self.writer, seq([out[-1].then_case, st.then_case]),
                                          None)
            else:
                out.append(st)
        return out

    def is_writer(self, st):
        return isinstance(st, tirx.IfThenElse) and st.else_case is None \
            and st.condition.same_as(self.writer)

    # ---- the distribution rule --------------------------------------------------------
    def distribute(self, extents, vec, make_body, layout=None):
        """Per-thread loops covering a tile of `extents` (ints), runs of `vec`; dealt to
        the holders of `layout` when it is replicated (every replica runs its holder's)."""
        holders = layout.threads if layout is not None else self.ctx.threads
        tid = layout.holder_expr(self.ctx.tid) if layout is not None else self.ctx.tid
        runs = -(-prod(extents) // vec)
        rounds = -(-runs // holders)
        r = self.ctx.fresh("r") if rounds > 1 else None
        lane = self.ctx.fresh("l") if vec > 1 else None
        run = tid if r is None else r * holders + tid
        slot = i32(0)
        if r is not None:
            slot = r * vec
        if lane is not None:
            slot = lane if r is None else slot + lane
        if r is not None:
            self.ctx.ranges[r] = (i32(0), i32(rounds))
        if lane is not None:
            self.ctx.ranges[lane] = (i32(0), i32(vec))
        # vec divides the last extent, so a run stays in one row: unravel the run's first
        # element and add the lane to the last index (keeps `base + lane` visible).
        idx = unravel(run if lane is None else run * vec, extents)
        if lane is not None:
            idx[-1] = idx[-1] + lane
        body = make_body(idx, slot)
        if lane is not None:
            body = tirx.For(lane, i32(0), i32(vec), tirx.ForKind.SERIAL, body,
                            annotations={VECTOR_LANES: tirx.IntImm("int32", vec)})
        if runs % holders != 0:
            body = tirx.IfThenElse(run < runs, body, None)
        if r is not None:
            body = tirx.For(r, i32(0), i32(rounds), tirx.ForKind.SERIAL, body)
        return body

    # ---- T.Parallel -------------------------------------------------------------------
    def parallel(self, loop):
        loops = []
        s = loop
        while isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL:
            loops.append(s)
            s = s.body
        extents = [as_int(lp.extent) for lp in loops]
        self.in_parallel += 1
        try:
            inner = self.stmt(s)
        finally:
            self.in_parallel -= 1
        loop_vars = [lp.loop_var for lp in loops]
        layout = self.loop_layout(extents, inner)

        def make_body(idx, slot):
            body = self.fragments_to_slots(inner, slot, loop_vars, layout)
            return substitute(body, dict(zip(loop_vars, idx)))

        return self.distribute(extents, layout.vec, make_body, layout)

    def loop_layout(self, extents, body) -> FragmentLayout:
        """The layout a T.Parallel runs in: that of the fragments it accesses at its own
        extents (layout_inference made them agree), else the default for its extents."""
        squeezed = [e for e in extents if e != 1]
        for ld in _fragment_accesses(body):
            entry = self.ctx.fragments.get(ld)
            if entry is None:
                continue
            if list(entry[1].shape) == list(extents):
                return entry[1]
            if [e for e in entry[1].shape if e != 1] == squeezed:  # acc[j] in (1, D)
                return dataclasses.replace(entry[1], shape=tuple(extents))
        return FragmentLayout.for_tile(extents, self.ctx.threads)

    def fragments_to_slots(self, body, slot, loop_vars, layout):
        """Fragment accesses -> local slots: `slot` for a fragment of the loop's extents,
        the element's slot in a broadcast read (checked local); stores to threadgroup or
        device memory made by the owner replica only when the loop's layout replicates."""
        frags = self.ctx.fragments
        def own(flayout):  # the loop's own elements: same slots, unit dims aside
            return flayout == layout or (
                [e for e in flayout.shape if e != 1] == [e for e in layout.shape if e != 1]
                and _same_slots(flayout, layout))

        for ld in loads(body):  # checked first: errors cannot leave structural_map
            entry = frags.get(ld.source)
            if entry is not None and not own(entry[1]) and entry[1].threads != 1:
                # (one holder: every thread holds every element, any read is local)
                self.check_broadcast(ld, entry[1], loop_vars, layout)
        written = []
        walk(body, lambda s: written.append(s.buffer) if isinstance(s, tirx.BufferStore)
             and s.buffer in frags and not own(frags[s.buffer][1]) else None)
        if written:
            raise LoweringError(
                f"is written in T.Parallel{tuple(layout.shape)}, whose iterations run in "
                f"another layout ({_describe(layout)}) than the fragment's "
                f"({_describe(frags[written[0]][1])}); write it in a T.Parallel of its own",
                kernel=self.ctx.name, construct=f"fragment '{written[0].name}'")

        def load(ld):
            entry = frags.get(ld.source)
            if entry is None:
                return ld
            local, flayout = entry
            if own(flayout):
                return tirx.BufferLoad(local, [slot])
            flat = i32(0)
            for index, extent in zip(ld.indices, flayout.shape):
                flat = flat * extent + index if as_int(flat) != 0 else index
            return tirx.BufferLoad(local, [flayout.slot_expr(flat)])

        def store(st):
            if isinstance(st, tirx.Evaluate) and layout.replicated and any(
                    ops.buffer_scope(a.buffer) in ("global", "shared")
                    for a in atomics_in(st.value)):
                return tirx.IfThenElse(layout.owner_expr(self.ctx.tid), st, None)
            if not isinstance(st, tirx.BufferStore):
                return st
            if st.buffer in frags:
                return tirx.BufferStore(frags[st.buffer][0], st.value, [slot])
            if layout.replicated and (ops.buffer_scope(st.buffer) in ("global", "shared")
                                      or st.buffer in self.reducers):
                return tirx.IfThenElse(layout.owner_expr(self.ctx.tid), st, None)
            return st

        body = map_nodes(body, (tvm.ir.TensorLoad, load))
        return rewrite(body, store)

    def check_broadcast(self, ld, flayout, loop_vars, layout):
        """A fragment read with a subset of the loop variables must be local."""
        extents = tuple(layout.shape)
        dims = broadcast_dims(ld.indices, loop_vars, flayout.shape)
        if dims is None or flayout.shape == extents or not broadcast_ok(layout, flayout, dims):
            raise LoweringError(
                f"is read as {ld.source.name}[{', '.join(map(str, ld.indices))}] in "
                f"T.Parallel{extents}, but the threads running those iterations do not "
                f"hold its elements (its layout: {_describe(flayout)}; the loop's: "
                f"{_describe(layout)}); read a fragment produced for this loop shape (a "
                "reduction of a fragment of these extents) or copy it to shared memory",
                kernel=self.ctx.name, construct=f"fragment '{ld.source.name}'")

    # ---- T.copy / T.fill ----------------------------------------------------------------
    def copy(self, src, dst, atomic=None, when=None):
        """T.copy; with `atomic` ("add"/"max"/"min") T.atomic_*'s tile form: each element
        of dst is updated by one atomic instead of stored; with `when(tile_idx)`, only the
        elements where that condition holds are copied (read and written)."""
        src, dst = _align_origin(src, dst), _align_origin(dst, src)
        tile = _tile(src) or _tile(dst)
        frag = next((r for r in (src, dst) if r.scope == FRAGMENT), None)
        # a finalized reducer is on every thread: copied out by all threads together
        local = any(r.scope == "local" for r in (src, dst)) and not (
            src.buffer in self.reducers and dst.scope in ("global", "shared"))

        def make_store(tile_idx, slot):
            value = self.read(src, tile, tile_idx, slot)
            if ops.buffer_dtype(src.buffer) != ops.buffer_dtype(dst.buffer):
                value = tirx.Cast(ops.buffer_dtype(dst.buffer), value)
            store = self.write(dst, tile, tile_idx, slot, value, atomic)
            if when is None:
                return store
            if isinstance(store, tirx.IfThenElse):  # one condition: vectorizable
                return tirx.IfThenElse(tirx.And(when(tile_idx), store.condition),
                                       store.then_case, None)
            return tirx.IfThenElse(when(tile_idx), store, None)

        if frag is not None:
            layout = self.ctx.fragments[frag.buffer][1]
            other = dst if frag is src else src
            if other.scope == FRAGMENT and not _same_slots(layout,
                                                          self.ctx.fragments[other.buffer][1]):
                raise LoweringError(
                    f"fragments '{src.name}' ({_describe(self.ctx.fragments[src.buffer][1])}) and "
                    f"'{dst.name}' ({_describe(self.ctx.fragments[dst.buffer][1])}) are laid out "
                    "differently; copy through shared memory", kernel=self.ctx.name,
                    construct="T.copy")
            if layout.replicated and dst.scope in ("global", "shared"):
                def owner_store(tile_idx, slot, inner=make_store):
                    store, owner = inner(tile_idx, slot), layout.owner_expr(self.ctx.tid)
                    if isinstance(store, tirx.IfThenElse):  # one condition: vectorizable
                        return tirx.IfThenElse(tirx.And(owner, store.condition),
                                               store.then_case, None)
                    return tirx.IfThenElse(owner, store, None)
                return self.over_fragment(frag, owner_store)
            return self.over_fragment(frag, make_store)
        if local:
            return self.serial_tile(tile, make_store)
        return self.cooperative(tile, make_store, "T.copy", self.wide_lanes((src, dst), tile))

    def fill(self, region, value):
        tile = _tile(region) or tuple(region.buffer.ty.shape)
        value = tirx.Cast(ops.buffer_dtype(region.buffer), value) \
            if str(value.ty.dtype) != ops.buffer_dtype(region.buffer) else value

        def make_store(tile_idx, slot):
            return self.write(region, tile, tile_idx, slot, value)

        if region.scope == FRAGMENT:
            return self.over_fragment(region, make_store)
        if region.scope == "local":
            return self.serial_tile(tile, make_store)
        return self.cooperative(tile, make_store, "T.fill", self.wide_lanes((region,), tile))

    def over_fragment(self, frag, make_store):
        _, layout = self.ctx.fragments[frag.buffer]
        shape = layout.shape
        keep = [d for d, e in enumerate(shape) if e != 1]

        def make_body(idx, slot):
            tile_idx = [idx[d] for d in keep] or [i32(0)]
            return make_store(tile_idx, slot)

        return self.distribute(list(shape), layout.vec, make_body, layout)

    def serial_tile(self, tile, make_store):
        loop_vars = [self.ctx.fresh("i") for _ in tile]
        for v, e in zip(loop_vars, tile):
            self.ctx.ranges[v] = (i32(0), e)
        body = make_store(loop_vars, None)
        for d, (v, e) in reversed(list(enumerate(zip(loop_vars, tile)))):
            # a last dim of 2 or 4 elements is one run: a vector load or store when the
            # vectorize pass proves it (a thread's k-lane of a device row, `half4`)
            ann = {VECTOR_LANES: tirx.IntImm("int32", as_int(e))} \
                if d == len(tile) - 1 and as_int(e) in (2, 4) else None
            body = tirx.For(v, i32(0), i32(e), tirx.ForKind.SERIAL, body, annotations=ann)
        return body

    def wide_lanes(self, regions, tile):
        """The run width of a cooperative copy or fill whose threadgroup operands are all
        `wide` buffers (`_wide_tiles`): as many elements as one 16-byte access of its
        dtypes moves (8 halves, 4 floats: METAL.copy_lanes), at most the narrowest other
        copy of those buffers takes, so every copy of a tile deals its elements to the
        same threads; the vectorize pass makes each run one vector access where it proves
        the alignment and splits it into narrower ones where it does not. None (the
        layout's width) for a copy without such an operand: a device-only copy, one of a
        tile that threads also read or write element-wise in the default layout (a
        T.Parallel, a copy into a fragment), whose runs the copy must keep so that each
        thread reads back what it wrote, without a barrier, or one of a device tensor the
        kernel accesses elsewhere too (the same reason, for device memory)."""
        shared = [r.buffer for r in regions if r.scope == "shared"]
        if not shared or any(b.__chandle__() not in self.wide for b in shared) or any(
                self.device_uses.get(r.buffer.__chandle__(), 0) > 1
                for r in regions if r.scope == "global"):
            return None
        lanes = METAL.copy_lanes([ops.buffer_dtype(r.buffer) for r in regions],
                                 as_int(tile[-1]) or 1)
        return min([lanes] + [self.wide[b.__chandle__()] for b in shared])

    def cooperative(self, tile, make_store, construct, lanes=None):
        """A tile copied or filled by all threads, in runs of `lanes` (`wide_lanes`), else
        of the default layout's width for its extents."""
        extents = [as_int(e) for e in tile]
        if None in extents:
            raise LoweringError(
                f"tile extents {tuple(tile)} are not compile-time constants; a tile copied "
                "or filled by all threads needs constant extents", kernel=self.ctx.name,
                construct=construct)
        return self.distribute(extents, lanes or run_width(extents), make_store)

    # ---- operand access -----------------------------------------------------------------
    def indices(self, region, tile, tile_idx):
        """Full indices into `region.buffer` for the tile position `tile_idx`."""
        rank = len(region.mins)
        if region.extents is not None:
            dims = [d for d, e in enumerate(region.extents) if as_int(e) != 1]
        else:
            dims = list(range(rank - len(tile), rank))
        offsets = [i32(0)] * rank
        if len(tile) == 1 and as_int(tile[0]) == 1 and not dims:
            dims = []
        for d, t in zip(dims, tile_idx):
            offsets[d] = t
        return [m + o if as_int(o) != 0 else m for m, o in zip(region.mins, offsets)], offsets

    def read(self, region, tile, tile_idx, slot):
        if region.scope == FRAGMENT:
            return tirx.BufferLoad(self.ctx.fragments[region.buffer][0], [slot])
        idx, _ = self.indices(region, tile, tile_idx)
        load = tirx.BufferLoad(region.buffer, idx)
        cond = self.bounds(region, idx)
        if cond is None:
            return load
        return tirx.if_then_else(cond, load, tirx.const(0, ops.buffer_dtype(region.buffer)))

    def write(self, region, tile, tile_idx, slot, value, atomic=None):
        if region.scope == FRAGMENT:
            return tirx.BufferStore(self.ctx.fragments[region.buffer][0], value, [slot])
        idx, _ = self.indices(region, tile, tile_idx)
        if atomic is not None:
            store = tirx.Evaluate(ops.atomic_call(atomic, tirx.BufferLoad(region.buffer, idx),
                                                  value))
        else:
            store = tirx.BufferStore(region.buffer, value, idx)
        cond = self.bounds(region, idx)
        return store if cond is None else tirx.IfThenElse(cond, store, None)

    def bounds(self, region, idx):
        """Condition that `idx` is inside a global buffer, or None when proven."""
        if region.scope != "global":
            return None
        analyzer = self.ctx.analyzer()
        conds = []
        for i, dim in zip(idx, region.buffer.ty.shape):
            if not analyzer.can_prove(i < dim):
                conds.append(i < dim)
        if not conds:
            return None
        cond = conds[0]
        for c in conds[1:]:
            cond = tirx.And(cond, c)
        return cond


def _wide_tiles(body, accumulators) -> tuple:
    """({threadgroup buffer handle: lanes}, {device buffer handle: accesses}).

    The first holds the tiles whose cooperative copies and fills may move 16-byte runs
    (`wide_lanes`): every access of the buffer is one (lanes: the narrowest such copy's,
    METAL.copy_lanes) or a simdgroup matrix access (a T.gemm operand or accumulator, a
    copy to or from a gemm accumulator), which reads whole 8x8 tiles across threads
    whatever the copy's runs. A buffer also read or written element-wise elsewhere (a
    T.Parallel, a copy to or from a fragment or thread-local array, a reduction) is left
    out: those accesses run in the default layout, whose runs its copies keep. The second
    counts, for each device buffer the kernel writes, its tile ops and its element-wise
    loads and stores outside them (a buffer only read may be read by any thread)."""
    lanes, narrow, in_calls, device, written = {}, set(), set(), {}, set()

    def use(buf, write=False):
        if ops.buffer_scope(buf) == "global":
            device[buf.__chandle__()] = device.get(buf.__chandle__(), 0) + 1
            if write:
                written.add(buf.__chandle__())

    def visit(s):
        if not (isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value)):
            return
        in_calls.update(ld.__chandle__() for ld in loads(s.value))
        regions = [ops.decode_region(a) for a in s.value.args
                   if ops.is_tile_call(a, "tl.region")]
        name = s.value.op.name
        dst = {"tl.copy": 1, "tl.atomic_tile": 1, "tl.fill": 0, "tl.gemm": 2}.get(name)
        for k, r in enumerate(regions):
            use(r.buffer, dst is None or k == dst)
        shared = [r for r in regions if r.scope == "shared"]
        if name == "tl.gemm" or any(r.buffer in accumulators for r in regions):
            return                        # simdgroup matrix accesses
        cooperative = name in ("tl.copy", "tl.fill") and all(
            r.scope in ("shared", "global") for r in regions)
        tile = _tile(regions[0]) or _tile(regions[-1])
        if not cooperative or tile is None or as_int(tile[-1]) is None:
            narrow.update(r.buffer.__chandle__() for r in shared)
            return
        width = METAL.copy_lanes([ops.buffer_dtype(r.buffer) for r in regions],
                                 as_int(tile[-1]))
        for r in shared:
            key = r.buffer.__chandle__()
            lanes[key] = min(lanes.get(key, width), width)

    walk(body, visit)
    # element-wise accesses outside tile ops (T.Parallel bodies, plain statements)
    stored = []
    walk(body, lambda s: stored.append(s.buffer) if isinstance(s, tirx.BufferStore) else None)
    updated = {a.buffer.__chandle__() for a in atomics_in(body)}
    for buf, write in [(ld.source, ld.source.__chandle__() in updated) for ld in loads(body)
                       if ld.__chandle__() not in in_calls] + [(b, True) for b in stored]:
        use(buf, write)
        if ops.buffer_scope(buf) == "shared":
            narrow.add(buf.__chandle__())
    wide = {k: v for k, v in lanes.items() if k not in narrow and v > 1}
    return wide, {k: n for k, n in device.items() if k in written}


def _fragment_accesses(body) -> list:
    """Buffers loaded or stored in `body` (fragments among them), in order."""
    found = [ld.source for ld in loads(body)]
    walk(body, lambda s: found.append(s.buffer) if isinstance(s, tirx.BufferStore) else None)
    return found


def _same_slots(a: FragmentLayout, b: FragmentLayout) -> bool:
    """Two layouts that put the element of every flat index on the same thread and slot."""
    return (a.size, a.threads, a.vec, a.rep_lo, a.rep_bits) == \
        (b.size, b.threads, b.vec, b.rep_lo, b.rep_bits)


def _describe(layout: FragmentLayout) -> str:
    text = f"shape {layout.shape}, runs of {layout.vec} over {layout.threads} holders"
    if layout.replicated:
        text += f" x {layout.replicas} replicas (thread-id bits {layout.rep_lo}.." \
                f"{layout.rep_lo + layout.rep_bits - 1})"
    return text


def _align_origin(region, other):
    """An operand given by its origin only (`A[by * bM, bx * bN]`) takes the other
    operand's extents, aligned to its last dimensions (TileLang's rule), unit extents
    included: against a (bM, 1) tile it covers A[by*bM : +bM, bx*bN : +1]. Dropping the
    unit extents first would put the bM elements along A's last dimension instead (the
    reduce family's keepdim and N = 1 tiles: suites/regressions/reduce-mismatch-*.json)."""
    if region.extents is not None or other.extents is None:
        return region
    ext = list(other.extents)
    rank = len(region.mins)
    while len(ext) > rank and as_int(ext[0]) == 1:
        ext.pop(0)
    if len(ext) > rank:
        return region  # a tile of higher rank: the non-unit extents fill the last dims
    return dataclasses.replace(region, extents=tuple([i32(1)] * (rank - len(ext)) + ext))


def _tile(region):
    """Non-unit extents of a region that states them (at least one dimension)."""
    if region.extents is None:
        return None
    ext = tuple(e for e in region.extents if as_int(e) != 1)
    return ext or (i32(1),)


def _lower_kernel(nest, name, decided: set):
    lowering = _KernelLowering(nest, name)
    body = lowering.stmt(nest.body)
    decided |= lowering.ctx.decisions
    return nest.wrap(seq(lowering.gemm.allocations + lowering.reduce.allocate() + [body]))


def lower_tile_ops(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Every kernel lowered; the decisions its lowerings took noted on the function
    (core/ir/decisions.py)."""
    name = func_name(func)
    decided = set()
    lowered = map_kernels(func, lambda nest: _lower_kernel(nest, name, decided))
    return decisions.note(lowered, decided)
