"""Pass `lower_tile_ops`: tile ops and T.Parallel loops -> per-thread loops.

Expects: a PrimFunc after `layout_inference` (fragments carry `tl.layout_vec`).
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

Copies convert the dtype (a Cast when the dtypes differ) and mask edge tiles of global
buffers: an out-of-bounds load reads 0, an out-of-bounds store is skipped. A bound is
checked only where the analyzer cannot prove it. Copies and fills involving a `local`
buffer run per thread over the whole tile.
"""

from __future__ import annotations

from math import prod

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer

from core.ir import ops
from core.ir.kernel import map_kernels
from core.ir.layout import run_width
from core.ir.stmt import as_int, children, rebuild, rewrite, seq, substitute
from core.language.buffers import FRAGMENT
from core.language.errors import LoweringError
from core.transform.layout_inference import fragment_layout

VECTOR_LANES = "tl.vector_lanes"


def _i32(x):
    return tirx.const(x, "int32") if isinstance(x, int) else x


def unravel(flat, extents):
    """Row-major indices of flat index `flat` in a tile of `extents` (ints)."""
    idx = []
    stride = 1
    for e in reversed(extents):
        if e == 1:
            idx.append(_i32(0))
        elif stride == 1:
            idx.append(tirx.floormod(flat, e) if e != prod(extents) else flat)
        else:
            q = tirx.floordiv(flat, stride)
            idx.append(q if stride * e == prod(extents) else tirx.floormod(q, e))
        stride *= e
    return list(reversed(idx))


class _KernelLowering:
    def __init__(self, nest, kernel_name):
        self.nest = nest
        self.name = kernel_name
        self.threads = nest.num_threads
        self.tid = nest.linear_thread_index()
        self.fragments = {}          # fragment buffer -> (local buffer, FragmentLayout)
        self.ranges = {}             # var -> (min, extent) of enclosing loops / launches
        for attr in nest.attrs:
            self.ranges[attr.node.var] = (_i32(0), attr.value)
        self.counter = 0

    def fresh(self, name):
        self.counter += 1
        return tirx.Var(f"{name}{self.counter}" if self.counter > 1 else name, "int32")

    # ---- statements -----------------------------------------------------------------
    def stmt(self, s):
        if isinstance(s, tirx.AllocBuffer) and ops.buffer_scope(s.buffer) == FRAGMENT:
            layout = fragment_layout(s, self.threads)
            local = tirx.decl_buffer((layout.slots,), ops.buffer_dtype(s.buffer),
                                     s.buffer.name, scope="local")
            self.fragments[s.buffer] = (local, layout)
            return tirx.AllocBuffer(local)
        if isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL:
            return self.parallel(s)
        if isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.copy"):
            return self.copy(*(ops.decode_region(a) for a in s.value.args))
        if isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.fill"):
            return self.fill(ops.decode_region(s.value.args[0]), s.value.args[1])
        kids = children(s)
        if not kids:
            return s
        if isinstance(s, tirx.For):
            self.ranges[s.loop_var] = (s.min, s.extent)
        return rebuild(s, [self.stmt(k) for k in kids])

    # ---- the distribution rule --------------------------------------------------------
    def distribute(self, extents, vec, make_body):
        """Per-thread loops covering a tile of `extents` (ints), runs of `vec`."""
        runs = -(-prod(extents) // vec)
        rounds = -(-runs // self.threads)
        r = self.fresh("r") if rounds > 1 else None
        lane = self.fresh("l") if vec > 1 else None
        run = self.tid if r is None else r * self.threads + self.tid
        slot = _i32(0)
        if r is not None:
            slot = r * vec
        if lane is not None:
            slot = lane if r is None else slot + lane
        if r is not None:
            self.ranges[r] = (_i32(0), _i32(rounds))
        if lane is not None:
            self.ranges[lane] = (_i32(0), _i32(vec))
        # vec divides the last extent, so a run stays in one row: unravel the run's first
        # element and add the lane to the last index (keeps `base + lane` visible).
        idx = unravel(run if lane is None else run * vec, extents)
        if lane is not None:
            idx[-1] = idx[-1] + lane
        body = make_body(idx, slot)
        if lane is not None:
            body = tirx.For(lane, _i32(0), _i32(vec), tirx.ForKind.SERIAL, body,
                            annotations={VECTOR_LANES: tirx.IntImm("int32", vec)})
        if runs % self.threads != 0:
            body = tirx.IfThenElse(run < runs, body, None)
        if r is not None:
            body = tirx.For(r, _i32(0), _i32(rounds), tirx.ForKind.SERIAL, body)
        return body

    # ---- T.Parallel -------------------------------------------------------------------
    def parallel(self, loop):
        loops = []
        s = loop
        while isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL:
            loops.append(s)
            s = s.body
        extents = [as_int(lp.extent) for lp in loops]
        inner = self.stmt(s)
        loop_vars = [lp.loop_var for lp in loops]

        def make_body(idx, slot):
            body = self.fragments_to_slots(inner, slot)
            return substitute(body, dict(zip(loop_vars, idx)))

        return self.distribute(extents, run_width(extents), make_body)

    def fragments_to_slots(self, body, slot):
        frags = self.fragments

        def load(ld):
            entry = frags.get(ld.source)
            return tirx.BufferLoad(entry[0], [slot]) if entry else ld

        def store(st):
            if isinstance(st, tirx.BufferStore) and st.buffer in frags:
                return tirx.BufferStore(frags[st.buffer][0], st.value, [slot])
            return st

        body = tvm_ffi.structural_map(body, (tvm.ir.TensorLoad, load))
        return rewrite(body, store)

    # ---- T.copy / T.fill ----------------------------------------------------------------
    def copy(self, src, dst):
        tile = _tile(src) or _tile(dst)
        frag = next((r for r in (src, dst) if r.scope == FRAGMENT), None)
        local = any(r.scope == "local" for r in (src, dst))

        def make_store(tile_idx, slot):
            value = self.read(src, tile, tile_idx, slot)
            if ops.buffer_dtype(src.buffer) != ops.buffer_dtype(dst.buffer):
                value = tirx.Cast(ops.buffer_dtype(dst.buffer), value)
            return self.write(dst, tile, tile_idx, slot, value)

        if frag is not None:
            return self.over_fragment(frag, make_store)
        if local:
            return self.serial_tile(tile, make_store)
        return self.cooperative(tile, make_store, "T.copy")

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
        return self.cooperative(tile, make_store, "T.fill")

    def over_fragment(self, frag, make_store):
        _, layout = self.fragments[frag.buffer]
        shape = layout.shape
        keep = [d for d, e in enumerate(shape) if e != 1]

        def make_body(idx, slot):
            tile_idx = [idx[d] for d in keep] or [_i32(0)]
            return make_store(tile_idx, slot)

        return self.distribute(list(shape), layout.vec, make_body)

    def serial_tile(self, tile, make_store):
        loop_vars = [self.fresh("i") for _ in tile]
        for v, e in zip(loop_vars, tile):
            self.ranges[v] = (_i32(0), e)
        body = make_store(loop_vars, None)
        for v, e in reversed(list(zip(loop_vars, tile))):
            body = tirx.For(v, _i32(0), _i32(e), tirx.ForKind.SERIAL, body)
        return body

    def cooperative(self, tile, make_store, construct):
        extents = [as_int(e) for e in tile]
        if None in extents:
            raise LoweringError(
                f"tile extents {tuple(tile)} are not compile-time constants; a tile copied "
                "or filled by all threads needs constant extents", kernel=self.name,
                construct=construct)
        return self.distribute(extents, run_width(extents), make_store)

    # ---- operand access -----------------------------------------------------------------
    def indices(self, region, tile, tile_idx):
        """Full indices into `region.buffer` for the tile position `tile_idx`."""
        rank = len(region.mins)
        if region.extents is not None:
            dims = [d for d, e in enumerate(region.extents) if as_int(e) != 1]
        else:
            dims = list(range(rank - len(tile), rank))
        offsets = [_i32(0)] * rank
        if len(tile) == 1 and as_int(tile[0]) == 1 and not dims:
            dims = []
        for d, t in zip(dims, tile_idx):
            offsets[d] = t
        return [m + o if as_int(o) != 0 else m for m, o in zip(region.mins, offsets)], offsets

    def read(self, region, tile, tile_idx, slot):
        if region.scope == FRAGMENT:
            return tirx.BufferLoad(self.fragments[region.buffer][0], [slot])
        idx, _ = self.indices(region, tile, tile_idx)
        load = tirx.BufferLoad(region.buffer, idx)
        cond = self.bounds(region, idx)
        if cond is None:
            return load
        return tirx.if_then_else(cond, load, tirx.const(0, ops.buffer_dtype(region.buffer)))

    def write(self, region, tile, tile_idx, slot, value):
        if region.scope == FRAGMENT:
            return tirx.BufferStore(self.fragments[region.buffer][0], value, [slot])
        idx, _ = self.indices(region, tile, tile_idx)
        store = tirx.BufferStore(region.buffer, value, idx)
        cond = self.bounds(region, idx)
        return store if cond is None else tirx.IfThenElse(cond, store, None)

    def bounds(self, region, idx):
        """Condition that `idx` is inside a global buffer, or None when proven."""
        if region.scope != "global":
            return None
        analyzer = Analyzer()
        for v, (lo, ext) in self.ranges.items():
            try:
                analyzer.bind(v, tvm.ir.Range.from_min_extent(lo, ext))
            except Exception:  # noqa: BLE001 - an unbindable range just proves less
                pass
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


def _tile(region):
    """Non-unit extents of a region that states them (at least one dimension)."""
    if region.extents is None:
        return None
    ext = tuple(e for e in region.extents if as_int(e) != 1)
    return ext or (_i32(1),)


def lower_tile_ops(func: tirx.PrimFunc) -> tirx.PrimFunc:
    name = str(func.attrs["global_symbol"])
    return map_kernels(func, lambda nest: nest.wrap(
        seq([_KernelLowering(nest, name).stmt(nest.body)])))
