"""Pass `layout_inference`: choose the thread layout of every fragment.

Expects: a verified PrimFunc (fragments are accessed whole by tile ops, exactly by
T.Parallel loop variables over their full shape, or read with a subset of them).
Guarantees: each fragment's AllocBuffer carries the annotation `tl.layout_vec` (an int),
the run width of its `FragmentLayout` (core/ir/layout.py) for the kernel's thread count.
The lowering of tile ops and T.Parallel loops reads only this annotation, so every
access to a fragment agrees on which thread and slot holds each element. The C operand of
a T.gemm also carries `tl.simdgroup_accumulator` (core/ir/matrix.py): it is held as
simdgroup 8x8 matrices instead, and core/transform/lower_gemm.py lowers all its uses.

Replicated layouts (core/ir/layout.py). A fragment's layout is the blocked-cyclic layout
of its own shape unless its *class* gets another: fragments read and written together in
one T.Parallel at their full shape, or copied into one another at the same shape, form a
class (they must agree slot by slot). The destination of a reduction (each of the two of
a `tl.reduce_online`) gets `reduce_layout(source layout, dim)`, recorded as
`tl.layout_replicate` = [holders, rep_lo, rep_bits]; a fragment otherwise unconstrained
that is read as a broadcast (`b[j]` in T.Parallel(bM, N)) gets the reduced layout of that
loop's layout, so the read is local.
A fragment accessed element-wise outside T.Parallel (TileLang's `lse[0] = ...`, every
thread computing the replicated value) gets `everywhere`: one holder, every thread a
replica, so each thread keeps the whole fragment (a reduction result that is not already
so, because its source does not span every thread, is then two requirements).
Two different requirements on one class are a LoweringError naming the fragment.
"""

from __future__ import annotations

from tvm import tirx

from core.errors import LoweringError
from core.ir import matrix, ops
from core.ir.kernel import func_name, map_kernels
from core.ir.annotations import LAYOUT_REPLICATE, LAYOUT_VEC
from core.ir.layout import (FragmentLayout, NoLayout, broadcast_dims, reduce_layout,
                             run_width)
from core.ir.ops import FRAGMENT
from core.ir.stmt import as_int, children, loads, rewrite, walk


def _annotate(nest, kernel="kernel"):
    threads = nest.num_threads
    accumulators = matrix.gemm_accumulators(nest.body)
    inferred = _infer_layouts(nest.body, threads, accumulators, kernel)

    def visit(s):
        if isinstance(s, tirx.AllocBuffer) and ops.buffer_scope(s.buffer) == FRAGMENT:
            layout = inferred.get(s.buffer) or FragmentLayout.for_tile(s.buffer.ty.shape,
                                                                       threads)
            ann = dict(s.annotations or {})
            ann[LAYOUT_VEC] = tirx.IntImm("int32", layout.vec)
            if layout.replicated:
                ann[LAYOUT_REPLICATE] = [tirx.IntImm("int32", v) for v in
                                         (layout.threads, layout.rep_lo, layout.rep_bits)]
            if any(s.buffer.same_as(c) for c in accumulators):
                ann[matrix.ACCUMULATOR] = tirx.IntImm("int32", 1)
            return tirx.AllocBuffer(s.buffer, ann)
        return s

    return nest.wrap(rewrite(nest.body, visit))


def layout_inference(func: tirx.PrimFunc) -> tirx.PrimFunc:
    name = func_name(func)
    return map_kernels(func, lambda nest: _annotate(nest, name))


def fragment_layout(alloc: tirx.AllocBuffer, threads: int) -> FragmentLayout:
    """The layout recorded on a fragment's AllocBuffer by this pass."""
    vec = int(alloc.annotations[LAYOUT_VEC])
    shape = tuple(int(d) for d in alloc.buffer.ty.shape)
    rep = alloc.annotations.get(LAYOUT_REPLICATE)
    if rep is not None:
        holders, lo, bits = (int(v) for v in rep)
        return FragmentLayout.replicate(shape, holders, vec, lo, bits, threads)
    return FragmentLayout(shape, threads, vec)


# ---- replicated layouts: reductions and broadcast reads ---------------------------------

def _parallel_nest(loop):
    loops = []
    while isinstance(loop, tirx.For) and loop.kind == tirx.ForKind.PARALLEL:
        loops.append(loop)
        loop = loop.body
    return loops, loop


def everywhere(shape, threads) -> FragmentLayout:
    """The layout in which every thread holds every element (one holder, every thread a
    replica of it): that of a fragment accessed element-wise outside T.Parallel, which
    every thread runs (TileLang's rule: each thread computes the replicated value)."""
    shape = tuple(int(d) for d in shape)
    if threads == 1:
        return FragmentLayout.for_tile(shape, 1)
    return FragmentLayout.replicate(shape, 1, run_width(shape), 0,
                                    (threads - 1).bit_length(), threads)


def _element_uses(s):
    """Fragments a statement outside T.Parallel stores to or loads an element of, in its
    own expressions (a store's value and indices, a loop's bounds, a condition; a tile op
    names whole regions, not elements)."""
    if isinstance(s, tirx.BufferStore):
        exprs, out = [s.value, *s.indices], [s.buffer]
    elif isinstance(s, tirx.For):
        exprs, out = [s.min, s.extent], []
    elif isinstance(s, tirx.IfThenElse):
        exprs, out = [s.condition], []
    elif isinstance(s, tirx.Evaluate) and not ops.is_tile_call(s.value):
        exprs, out = [s.value], []
    else:
        return []
    out += [ld.source for e in exprs for ld in loads(e)]
    return [b for b in out if ops.buffer_scope(b) == FRAGMENT]


def _fragment_uses(body):
    """(exact, broadcast) fragment accesses of a T.Parallel body: buffers indexed by all
    loop variables, and (buffer, dims) of lower-rank reads."""
    accesses = [(ld.source, ld.indices) for ld in loads(body)]
    walk(body, lambda s: accesses.append((s.buffer, s.indices))
         if isinstance(s, tirx.BufferStore) else None)
    return [(b, idx) for b, idx in accesses if ops.buffer_scope(b) == FRAGMENT]


class _Classes:
    """Union-find over fragment buffers, with the layout required of each class."""

    def __init__(self, threads, kernel):
        self.parent, self.layout = {}, {}
        self.threads, self.kernel = threads, kernel

    def find(self, b):
        self.parent.setdefault(b, b)
        while not self.parent[b].same_as(b):
            b = self.parent[b]
        return b

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if not ra.same_as(rb):
            self.parent[rb] = ra

    def current(self, b) -> FragmentLayout:
        entry = self.layout.get(self.find(b))
        return entry[0] if entry else FragmentLayout.for_tile(b.ty.shape, self.threads)

    def require(self, b, layout, why, construct):
        root = self.find(b)
        old = self.layout.get(root)
        if old is not None and old[0] != layout:
            raise LoweringError(
                f"fragment '{b.name}' would need two layouts: as {old[1]} and as {why}; "
                "use a separate fragment for each use", kernel=self.kernel,
                construct=construct)
        if old is None:
            self.layout[root] = (layout, why)


def _infer_layouts(body, threads, accumulators, kernel) -> dict:
    """{fragment: FragmentLayout} for the fragments whose class needs a layout other than
    the default of its shape (reduction results, broadcast reads, what they share with)."""
    classes = _Classes(threads, kernel)
    parallels, reduces, fragments = [], [], []

    def accumulator(b):  # held as simdgroup matrices: lower_gemm's, no layout of ours
        return any(b.same_as(c) for c in accumulators)

    def visit(s):
        if isinstance(s, tirx.AllocBuffer) and ops.buffer_scope(s.buffer) == FRAGMENT:
            fragments.append(s.buffer)
        if isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL:
            loops, inner = _parallel_nest(s)
            parallels.append((loops, _fragment_uses(inner)))
            return
        for b in _element_uses(s):   # outside T.Parallel: every thread holds the element
            if not accumulator(b):
                classes.require(b, everywhere(b.ty.shape, threads),
                                "an element accessed outside T.Parallel", f"fragment '{b.name}'")
        if isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.copy"):
            a, b = (ops.decode_region(r).buffer for r in s.value.args)
            if ops.buffer_scope(a) == ops.buffer_scope(b) == FRAGMENT and \
                    tuple(a.ty.shape) == tuple(b.ty.shape) and not accumulator(a) and \
                    not accumulator(b):
                classes.union(a, b)
        if isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.reduce"):
            src, dst = (ops.decode_region(r).buffer for r in s.value.args[:2])
            reduces.append((src, dst, str(s.value.args[2].value), int(s.value.args[3])))
        if isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.reduce_online"):
            run_max, run_sum, mx, sm = (ops.decode_region(r).buffer for r in s.value.args)
            reduces.extend([(run_max, mx, "max", 1), (run_sum, sm, "sum", 1)])
        for k in children(s):
            visit(k)

    visit(body)
    exact_uses = []
    for loops, uses in parallels:
        extents = tuple(as_int(lp.extent) for lp in loops)
        exact = [b for b, _ in uses if tuple(as_int(d) for d in b.ty.shape) == extents
                 and not accumulator(b)]
        for b in exact[1:]:
            classes.union(exact[0], b)
        exact_uses.append((loops, extents, exact, uses))
    for src, dst, kind, dim in reduces:
        construct = f"T.reduce_{kind}"
        if ops.buffer_scope(src) != FRAGMENT or accumulator(src):
            continue
        layout = classes.current(src)
        classes.require(src, layout, f"the source of {construct}", construct)
        if ops.buffer_scope(dst) != FRAGMENT:
            continue
        try:
            dst_layout = reduce_layout(layout, dim, dst.ty.shape)
        except NoLayout as err:
            raise LoweringError(f"cannot reduce fragment '{src.name}' (shape "
                                f"{layout.shape}, {threads} threads) over dim {dim}: {err}",
                                kernel=kernel, construct=construct) from None
        classes.require(dst, dst_layout, f"the result of {construct} over dim {dim} of "
                                         f"'{src.name}'", construct)
    for loops, extents, exact, uses in exact_uses:
        driving = classes.current(exact[0]) if exact else FragmentLayout.for_tile(extents,
                                                                                  threads)
        loop_vars = [lp.loop_var for lp in loops]
        for b, idx in uses:
            dims = broadcast_dims(idx, loop_vars, b.ty.shape)
            if any(b.same_as(e) for e in exact) or dims is None or \
                    classes.find(b) in classes.layout:
                continue
            dropped = tuple(d for d in range(len(extents)) if d not in dims)
            try:
                layout = reduce_layout(driving, dropped, b.ty.shape)
            except NoLayout:
                continue  # lower_tile_ops reports the read it cannot make local
            classes.require(b, layout, f"a broadcast read in T.Parallel{extents}",
                            "T.Parallel")
    out = {}
    for b in fragments:
        entry = classes.layout.get(classes.find(b))
        if entry is not None:
            out[b] = entry[0]
    return out
