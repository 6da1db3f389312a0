"""The T.reduce family -> per-thread loops, simd butterflies and a threadgroup stage.

Part of pass `lower_tile_ops`, which hands this module every `tl.reduce` call
(`ReduceLowering.lower`) and every `tl.reduce_online` (`ReduceLowering.online`: a streamed
softmax's running (max, sum) pairs, combined through the same stages with one barrier for
both statistics; core/transform/stream_rows.py emits it).
It sees the kernel through a KernelContext (core/transform/kernel_context.py); its stage
buffers are placed at the kernel's start (`ReduceLowering.allocate`, after lowering).

Expects: `tl.reduce(src, dst, kind, dim, clear)` over whole fragment or local buffers
(checked by core/language/reduce.py); fragments carry their layouts (layout_inference): a
fragment destination has `reduce_layout(source layout, dim)` (core/ir/layout.py), whose
replicated thread-id bits [lo, hi) are the threads that combine one output element.
Guarantees: no tl.reduce is left. Accumulation is in float32 for float sources, in the
source's own type for integers (wrapping; int64 butterflies shuffle the two 32-bit halves,
as MSL's simd functions take 32-bit types), rounded once on the store to dst;
abssum/absmax take |x| per element (x itself for unsigned types); bitand/bitor/bitxor
(integers) combine with & | ^ and simd_and/simd_or/simd_xor.
For a fragment source, every thread runs the same statements (no barrier or simd function
under thread-dependent control flow):

    acc[k] = identity                         k < dst slots (the dst layout's, per thread)
    for each source element x the thread holds (the source layout's rounds and runs):
        acc[dst slot of x's output] = op(acc[...], x)
    for k: when lo == 0 and hi >= 5 (the group holds the whole simdgroup):
        acc[k] = simd_sum / simd_max / simd_min(acc[k])   the hardware's reduction
    else for m in 2**lo .. 2**(min(hi, 5) - 1):         XOR butterfly inside the simdgroup
        acc[k] = op(acc[k], simd_shuffle_xor(acc[k], m))  (f32 for f16/bf16 sources)
    when hi > 5 (the group spans simdgroups), through threadgroup buffer `red_buf`:
        for k: if lane is its in-simd group's first: red_buf[k * W + w(tid)] = acc[k]
        for k: acc[k] = combination of the 2**(hi - max(lo, 5)) partials of the thread's
                        group (fewer for the partial top range of a thread count that is
                        not a power of two: 28 at 896 threads; every replica gets the same
                        bits): when lo == 0 and the partials sit in bits [5, hi), lane c
                        reads partial c if c is below their count, else the identity, and
                        one simd reduction combines them, either in every simdgroup, or
                        (`_plan_once`: when the cost of on-chip work, core.target.COSTS,
                        says so) only in the first simdgroup of each group, whose lane 0
                        writes the result to red_buf for every thread to read behind one
                        more barrier (MLX's combine: 1 simd reduction per group, not one
                        per simdgroup);
                        else every thread reads them all, in a fixed order, or (by the
                        same cost) only the threads of the group's first simdgroup do,
                        and every thread reads the result back behind one more barrier
    for k (existing slots only): dst[k] = cast(acc[k])   or   cast(op(dst[k], acc[k]))

Each choice above (simd reduction or butterfly, lanes reading partials in every simdgroup
or in the first one only, every thread or the first simdgroup's threads folding them, a
whole or partial top range, the online pairs, serial) is noted as a
lowering decision (`reduce.*`, core/ir/decisions.py) through the KernelContext.

`red_buf` is an ordinary "shared" buffer: thread_sync places the barrier between its
writes and reads, and between one use and the next (across loop iterations too). Each
reduction gets its own region of it when they all fit beside the kernel's threadgroup
buffers (then consecutive reductions need no barrier between them), else all share one.
A local destination of a fragment source needs every output on every thread: when the
destination layout has one holder, acc is the result; else the owners write the outputs
to `red_buf` and every thread reads them all. A local source reduces per thread in
serial loops, and so does a fragment every thread holds whole (one holder, all threads its
replicas: TileLang's replicated value), into a destination held whole the same way.

Errors (LoweringError, before any code runs): a destination layout that does not match
the source's (set elsewhere), a source replicated over part of the threads or held as simdgroup
matrices, a thread count the combining groups do not fit evenly (a group over a thread
count that is not a power of two needs whole simdgroups). Stages beyond the 32 KiB of
threadgroup memory are pass merge_threadgroup's to judge: it lets the stage reuse the bytes
of buffers dead by then and refuses a kernel whose live bytes exceed the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from tvm import tirx

from core.errors import LoweringError
from core.ir import matrix, ops
from core.ir.layout import FragmentLayout, NoLayout, reduce_layout
from core.ir.ops import FRAGMENT
from core.ir.stmt import i32, seq, walk
from core.transform.layout_inference import fragment_layout
from core.target import COSTS, DTYPES, METAL, bits

SIMD_BITS = METAL.simd_width.bit_length() - 1   # thread-id bits below it select the lane
# The hardware's reduction over a whole simdgroup, per kind (|x| is taken per element before)
SIMD_REDUCE = {"sum": "tl.simd_sum", "abssum": "tl.simd_sum", "max": "tl.simd_max",
               "absmax": "tl.simd_max", "min": "tl.simd_min", "bitand": "tl.simd_and",
               "bitor": "tl.simd_or", "bitxor": "tl.simd_xor"}
# the bitwise kinds (integers only, core/language/reduce.py): TIR node, identity
BITWISE = {"bitand": (tirx.bitwise_and, -1), "bitor": (tirx.bitwise_or, 0),
           "bitxor": (tirx.bitwise_xor, 0)}
STAGE = "red_buf"


def identity(kind: str, dtype: str):
    """The element `op(identity, x) == x` of a reduction kind in its accumulator dtype."""
    if kind in ("sum", "abssum"):
        return tirx.const(0, dtype)
    if kind in BITWISE:     # all ones for and (-1: every bit of a signed or unsigned word)
        ones = BITWISE[kind][1]
        return tirx.const(ones if ones == 0 or DTYPES[dtype].kind != "uint"
                          else (1 << DTYPES[dtype].bits) - 1, dtype)
    low = kind in ("max", "absmax")
    if DTYPES[dtype].is_integer:
        return tirx.min_value(dtype) if low else tirx.max_value(dtype)
    return tirx.const(float("-inf") if low else float("inf"), dtype)


def combine(kind: str, a, b):
    if kind in ("sum", "abssum"):
        return a + b
    if kind in BITWISE:
        return BITWISE[kind][0](a, b)
    return tirx.Max(a, b) if kind in ("max", "absmax") else tirx.Min(a, b)


def accumulator_dtype(src_dtype: str) -> str:
    """Integers accumulate in their own type (wrapping), floats in float32."""
    return src_dtype if DTYPES[src_dtype].is_integer else "float32"


def shuffle_xor(value, mask: int, dtype: str):
    """simd_shuffle_xor of `value`; a 64-bit value (which MSL's simd functions do not take)
    moves as the two 32-bit halves of a uint2."""
    if DTYPES[dtype].bits <= 32:
        return ops.call("tl.simd_shuffle_xor", value, tirx.IntImm("int32", mask), dtype=dtype)
    halves = tirx.reinterpret("uint32x2", value)
    moved = ops.call("tl.simd_shuffle_xor", halves, tirx.IntImm("int32", mask),
                     dtype="uint32x2")
    return tirx.reinterpret(dtype, moved)


def _compress(tid, lo: int, nbits: int):
    """`tid` with its bits [lo, lo + nbits) removed."""
    if nbits == 0:
        return tid
    high = tirx.floordiv(tid, 1 << (lo + nbits))
    return high if lo == 0 else high * (1 << lo) + tirx.floormod(tid, 1 << lo)


def _bits_of(x, lo: int, nbits: int):
    """Bits [lo, lo + nbits) of `x` as a number."""
    shifted = x if lo == 0 else tirx.floordiv(x, 1 << lo)
    return tirx.floormod(shifted, 1 << nbits)


def _unravel(flat, shape):
    """Row-major indices of `flat` (< prod(shape)) in a tile of `shape` (ints)."""
    idx, stride, total = [], 1, prod(shape)
    for e in reversed(shape):
        if e == 1:
            idx.append(i32(0))
        else:
            q = flat if stride == 1 else tirx.floordiv(flat, stride)
            idx.append(q if stride * e == total else tirx.floormod(q, e))
        stride *= e
    return list(reversed(idx))


def _row_major(indices, shape):
    flat = None
    for i, e in zip(indices, shape):
        flat = i if flat is None else flat * e + i
    return flat if flat is not None else i32(0)


@dataclass
class _Plan:
    call: object
    kind: str
    dim: int
    clear: bool
    src: object                     # buffers
    dst: object
    src_layout: FragmentLayout | None
    dst_layout: FragmentLayout | None    # for a local dst of a fragment src: the replicated one
    acc_dtype: str
    stage_elems: int = 0            # red_buf elements this reduction needs
    stage_offset: int = 0
    broadcast_offset: int = 0       # of the outputs a local dst reads, within the region
    once: bool = False              # the first simdgroup of each group combines (broadcast)
    result_offset: int = 0          # of its combined results, within the region

    @property
    def construct(self) -> str:
        return f"T.reduce_{self.kind}"

    # replicated bits of the destination layout: in-simdgroup part and cross-simdgroup part
    @property
    def simd_bits(self) -> tuple:
        lo, hi = self.dst_layout.rep_lo, self.dst_layout.rep_lo + self.dst_layout.rep_bits
        return (lo, max(min(hi, SIMD_BITS) - lo, 0))

    @property
    def cross_bits(self) -> tuple:
        lo, hi = self.dst_layout.rep_lo, self.dst_layout.rep_lo + self.dst_layout.rep_bits
        c_lo = max(lo, SIMD_BITS)
        return (c_lo, max(hi - c_lo, 0))

    @property
    def partials(self) -> int:
        """Partials per group in the cross-simdgroup step: 2 ** cross bits, or fewer when
        the group is the partial top range of a thread count that is not a power of two
        (896 threads: 28 simdgroups)."""
        c_lo, _ = self.cross_bits
        return self.dst_layout.replicas >> (c_lo - self.dst_layout.rep_lo)

    @property
    def by_lanes(self) -> bool:
        """Whole simdgroups combine whole simdgroups: lane c can read partial c and one
        simd reduction combine them (MSL's simd reductions take 32-bit types)."""
        lo, ibits = self.simd_bits
        return (lo, ibits, self.cross_bits[0]) == (0, SIMD_BITS, SIMD_BITS) and \
            DTYPES[self.acc_dtype].bits <= 32

    @property
    def broadcast_to_local(self) -> bool:
        return ops.buffer_scope(self.dst) == "local" and self.dst_layout.threads > 1


class ReduceLowering:
    """Lowers the tl.reduce calls of one kernel, seen through `ctx` (a KernelContext:
    thread count and index, fragment table, fresh names)."""

    def __init__(self, ctx, body):
        self.ctx = ctx
        self.plans = []
        self.stages = {}            # accumulator dtype -> red_buf buffer
        self.extra = []             # T.finalize_reducer stages
        self._plan(body)

    def fail(self, construct, reason):
        raise LoweringError(reason, kernel=self.ctx.name, construct=construct)

    # ---- planning: layouts and the threadgroup stage --------------------------------------
    def _plan(self, body):
        layouts, calls, shared_bytes = {}, [], 0

        def visit(s):
            nonlocal shared_bytes
            if isinstance(s, tirx.AllocBuffer) and ops.buffer_scope(s.buffer) == FRAGMENT \
                    and matrix.ACCUMULATOR not in (s.annotations or {}):
                layouts[s.buffer] = fragment_layout(s, self.ctx.threads)
            elif isinstance(s, tirx.AllocBuffer) and ops.buffer_scope(s.buffer) == "shared":
                shared_bytes += prod(int(d) for d in s.buffer.ty.shape) * \
                    bits(ops.buffer_dtype(s.buffer)) // 8
            elif isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.reduce"):
                calls.append(s.value)
            elif isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.reduce_online"):
                calls.append(s.value)

        walk(body, visit)
        self.shared_bytes = shared_bytes
        for call in calls:
            if ops.is_tile_call(call, "tl.reduce"):
                src, dst = (ops.decode_region(a).buffer for a in call.args[:2])
                self.plans.append(self._plan_one(call, src, dst, str(call.args[2].value),
                                                 int(call.args[3]), bool(int(call.args[4])),
                                                 layouts))
                continue
            run_max, run_sum, mx, sm = (ops.decode_region(a).buffer for a in call.args)
            pm = self._plan_one(call, run_max, mx, "max", 1, True, layouts, online=True)
            ps = self._plan_one(call, run_sum, sm, "sum", 1, True, layouts, online=True)
            if pm.dst_layout != ps.dst_layout:
                self.fail("T.reduce_online", f"'{run_max.name}' and '{run_sum.name}' are laid "
                                             "out differently; they must share one layout")
            pm.stage_elems += ps.stage_elems    # one region: the maxima, then the sums
            ps.stage_elems = 0
            if pm.cross_bits[1]:
                self._plan_once(pm, pairs=2)
            self.plans += [pm, ps]
        need = {}
        for p in self.plans:
            if p.stage_elems:
                need.setdefault(p.acc_dtype, []).append(p)
        packed = sum(p.stage_elems * DTYPES[p.acc_dtype].bytes for ps in need.values()
                     for p in ps)
        overlap = shared_bytes + packed > METAL.threadgroup_memory_bytes
        for dtype, ps in need.items():
            offset = 0
            for p in ps:
                p.stage_offset = 0 if overlap else offset
                offset += p.stage_elems
            size = max(p.stage_elems for p in ps) if overlap else offset
            self.stages[dtype] = tirx.decl_buffer((size,), dtype, STAGE, scope="shared")

    def _plan_one(self, call, src, dst, kind, dim, clear, layouts, online=False) -> _Plan:
        plan = _Plan(call, kind, dim, clear, src, dst, None, None,
                     accumulator_dtype(ops.buffer_dtype(src)))
        if ops.buffer_scope(src) == "local":
            return plan
        construct = plan.construct
        if src not in layouts:
            self.fail(construct, f"source '{src.name}' is not laid out as a fragment over the "
                                 "threads (a gemm accumulator is held as simdgroup matrices); "
                                 "T.copy it into a fragment first")
        plan.src_layout = layouts[src]
        threads = self.ctx.threads
        if threads <= 0:
            self.fail(construct, f"the kernel has {threads} threads; it needs at least one")
        try:
            expected = reduce_layout(plan.src_layout, dim, dst.ty.shape)
        except NoLayout as err:
            self.fail(construct, f"cannot reduce fragment '{src.name}' (shape "
                                 f"{plan.src_layout.shape}, {threads} threads) over dim {dim}: "
                                 f"{err}")
        if ops.buffer_scope(dst) == FRAGMENT:
            plan.dst_layout = layouts.get(dst)
            if plan.dst_layout != expected:
                self.fail(construct, f"destination '{dst.name}' is laid out as "
                                     f"{plan.dst_layout}, but reducing '{src.name}' over dim "
                                     f"{dim} puts its elements as {expected}; use a separate "
                                     "destination fragment")
        else:
            plan.dst_layout = expected
        # reduce_layout made the thread count a multiple of 2**(rep_lo + rep_bits), or of the
        # simdgroup width for a partial top range: a group that spans simdgroups spans
        # whole ones
        _, cbits = plan.cross_bits
        if cbits:
            _, ibits = plan.simd_bits
            plan.stage_elems = expected.slots * (threads >> ibits)
            if not online:
                self._plan_once(plan, pairs=1)
        if plan.broadcast_to_local:     # its own region: no barrier after the cross stage
            plan.broadcast_offset = plan.stage_elems
            plan.stage_elems += expected.size
        return plan

    def groups(self, plan) -> int:
        """Results per slot of the cross-simdgroup step: the combining groups (of whole
        simdgroups for `by_lanes`), the partials' index w with the group's bits removed."""
        _, ibits = plan.simd_bits
        c_lo, cbits = plan.cross_bits
        c_at = c_lo - ibits
        return -(-(self.ctx.threads >> ibits) // (1 << (c_at + cbits))) * (1 << c_at)

    def _plan_once(self, plan, pairs):
        """Whether the first simdgroup of each group combines its group's partials and
        broadcasts the result through red_buf (one more barrier), or every simdgroup
        combines them itself (no broadcast): the cheaper by the cost of on-chip work
        (core.target.COSTS, the bench roofline's figures), in core cycles per threadgroup.
        Every simdgroup: (simdgroups x slots) simd reductions, each simdgroup's lanes below
        the partial count reading one partial. The first simdgroup: (groups x slots)
        reductions, its lanes reading the partials, its lane 0 writing the result, every
        thread reading it back, and a barrier, hidden in part by the other threadgroups
        the core holds (by threads and threadgroup memory). `pairs` = 2 for a softmax's
        (max, sum) pairs, which share the barrier. Groups that are not whole simdgroups
        (a column reduction: the partials in bits above the lane's) have no simd
        reduction to save but reads: every thread folding its group's n partials, or only
        the threads of the group's first simdgroup (its cross-simdgroup bits 0) folding
        them, one per in-simdgroup group writing the result and every thread reading it
        back behind a barrier. The choice is noted at lowering
        (`reduce.across_simdgroups`). A local destination that every thread reads whole
        from red_buf anyway (`broadcast_to_local`) keeps every thread combining: its
        outputs' own publication is the broadcast."""
        if plan.broadcast_to_local:
            return
        threads, slots = self.ctx.threads, plan.dst_layout.slots
        simdgroups, groups, n = threads >> SIMD_BITS, self.groups(plan), plan.partials
        size = DTYPES[plan.acc_dtype].bytes
        results = pairs * slots * groups
        resident = COSTS.resident_groups(
            threads, self.shared_bytes + (plan.stage_elems + results) * size)
        if plan.by_lanes:
            every = COSTS.simd(pairs * slots * simdgroups) + \
                COSTS.threadgroup(pairs * slots * simdgroups * n * size)
            first = COSTS.simd(pairs * slots * groups) + COSTS.threadgroup(
                pairs * slots * (groups * n + groups + threads) * size)
        else:
            every = COSTS.threadgroup(pairs * slots * threads * n * size)
            first = COSTS.threadgroup(pairs * slots * (threads // n * n + groups + threads)
                                      * size)
        first += COSTS.barriers(1, resident)
        if first < every:
            plan.once = True
            plan.result_offset = plan.stage_elems
            plan.stage_elems += results

    def finalize(self, buf, kind):
        """T.finalize_reducer: every element of the reducer `buf` (a local array on every
        thread) := the combination of all threads' copies, on every thread. A butterfly over
        the lanes, then (more than one simdgroup) lane 0 of each publishes its partials to a
        threadgroup stage of its own and every thread folds them in simdgroup order."""
        threads, n = self.ctx.threads, prod(int(d) for d in buf.ty.shape)
        dtype = ops.buffer_dtype(buf)
        simd = min(threads, 1 << SIMD_BITS)
        if threads & (threads - 1) and threads % (1 << SIMD_BITS):
            self.fail("T.finalize_reducer", f"the kernel has {threads} threads; combining a "
                      f"reducer needs a power of two below {METAL.simd_width} or whole "
                      "simdgroups")
        shape = [int(d) for d in buf.ty.shape]

        def at(k):
            return tirx.BufferLoad(buf, _unravel(k, shape))

        def put(k, value):
            return tirx.BufferStore(buf, value, _unravel(k, shape))

        def butterfly(k):
            return seq([put(k, combine(kind, at(k), shuffle_xor(at(k), 1 << b, dtype)))
                        for b in range(simd.bit_length() - 1)])

        stmts = [self.loop(n, butterfly)]
        groups = threads // simd
        if groups > 1:
            stage = tirx.decl_buffer((n * groups,), dtype, "reducer_buf", scope="shared")
            self.extra.append(stage)
            sg = tirx.floordiv(self.ctx.tid, simd)
            lane0 = tirx.floormod(self.ctx.tid, simd) == 0
            stmts.append(self.loop(n, lambda k: tirx.IfThenElse(
                lane0, tirx.BufferStore(stage, at(k), [k * groups + sg]), None)))

            def fold(k):
                first = put(k, tirx.BufferLoad(stage, [k * groups]))
                rest = self.loop(groups, lambda g: put(k, combine(
                    kind, at(k), tirx.BufferLoad(stage, [k * groups + g]))), start=1)
                return seq([first, rest])
            stmts.append(self.loop(n, fold))
        return seq(stmts)

    def allreduce(self, call):
        """TileLang's thread all-reduce (`T.tvm_thread_allreduce` under a `T.comm_reducer`
        scope): `tl.thread_allreduce(kind, value, dst, lo, nbits)` makes dst (a local
        scalar) on every thread := the combination of `value` over the threads whose
        linear ids differ only in bits [lo, lo + nbits). The same stages as a fragment
        reduction: the bits inside the simdgroup by simd_sum/max/min (the whole
        simdgroup) or a shuffle butterfly; the bits across simdgroups through a
        threadgroup stage, where each group's first lane publishes its partial and every
        thread folds its group's partials in a fixed order (replicas agree exactly)."""
        kind = str(call.args[0].value)
        value, dst = call.args[1], ops.decode_region(call.args[2])
        lo, nbits = int(call.args[3]), int(call.args[4])
        acc_dtype = accumulator_dtype(str(value.ty.dtype))
        acc = tirx.decl_buffer((1,), acc_dtype, "red_acc", scope="local")
        at = tirx.BufferLoad(acc, [0])

        def put(v):
            return tirx.BufferStore(acc, v, [0])

        if str(value.ty.dtype) != acc_dtype:
            value = tirx.Cast(acc_dtype, value)
        stmts = [tirx.AllocBuffer(acc), put(value)]
        hi = lo + nbits
        in_simd = (lo, max(0, min(hi, SIMD_BITS) - lo))
        if in_simd[1]:
            self.ctx.decide("reduce.allreduce", "in_simdgroup")
            if in_simd == (0, SIMD_BITS) and DTYPES[acc_dtype].bits <= 32:
                stmts.append(put(ops.call(SIMD_REDUCE[kind], at, dtype=acc_dtype)))
            else:
                stmts += [put(combine(kind, at, shuffle_xor(at, 1 << b, acc_dtype)))
                          for b in range(lo, lo + in_simd[1])]
        c_lo = max(lo, SIMD_BITS)
        if hi > c_lo:
            self.ctx.decide("reduce.allreduce", "across_simdgroups")
            tid, threads = self.ctx.tid, self.ctx.threads
            stage = tirx.decl_buffer((threads,), acc_dtype, "allreduce_buf", scope="shared")
            self.extra.append(stage)
            publish = tirx.BufferStore(stage, at, [tid])
            if in_simd[1]:   # the group's first lane inside the simdgroup holds its partial
                publish = tirx.IfThenElse(_bits_of(tid, lo, in_simd[1]) == 0, publish, None)
            # the thread's group with the reduced bits cleared (no `x - x % c`: see above)
            base = tirx.floordiv(tid, 1 << hi) * (1 << hi)
            if lo:
                base = base + tirx.floormod(tid, 1 << lo)

            def part(c):
                return tirx.BufferLoad(stage, [base + c * (1 << c_lo)])

            stmts += [publish, put(part(i32(0))),
                      self.loop(1 << (hi - c_lo), lambda c: put(combine(kind, at, part(c))),
                                start=1)]
        out = at if ops.buffer_dtype(dst.buffer) == acc_dtype else tirx.Cast(
            ops.buffer_dtype(dst.buffer), at)
        stmts.append(tirx.BufferStore(dst.buffer, out, list(dst.mins)))
        return seq(stmts)

    def allocate(self) -> list:
        """The stage buffers, to place at the start of the kernel; called once, after
        lowering. Their total with the kernel's other threadgroup buffers is not checked
        here: pass merge_threadgroup lets buffers whose lives do not overlap share bytes
        and refuses a kernel whose live bytes exceed the limit."""
        return [tirx.AllocBuffer(b) for b in [*self.stages.values(), *self.extra]]

    # ---- lowering -----------------------------------------------------------------------
    def lower(self, call):
        plan = next(p for p in self.plans if p.call.same_as(call))
        if plan.src_layout is None:
            return self.serial(plan)
        if plan.src_layout.replicated and plan.src_layout.threads == 1:
            return self.serial(plan, whole=True)
        return self.distributed(plan)

    def loop(self, extent, make_body, start=0):
        """`for v in range(start, extent): make_body(v)` with a fresh v (no loop for one).
        The loop itself counts from 0, so the barrier planner enumerates its footprints."""
        if extent - start == 1:
            return make_body(i32(start))
        v = self.ctx.fresh("k")
        body = make_body(v + start if start else v)
        return tirx.For(v, i32(0), i32(extent - start), tirx.ForKind.SERIAL, body)

    def value(self, plan, x):
        if str(x.ty.dtype) != plan.acc_dtype:
            x = tirx.Cast(plan.acc_dtype, x)
        unsigned = DTYPES[plan.acc_dtype].kind == "uint"
        return tirx.abs(x) if plan.kind.startswith("abs") and not unsigned else x

    def finish(self, plan, current, result):
        """The value stored into dst: the reduction, or op(dst, reduction) for clear=False."""
        if not plan.clear:
            old = current if str(current.ty.dtype) == plan.acc_dtype else \
                tirx.Cast(plan.acc_dtype, current)
            result = combine(plan.kind, old, result)
        dtype = ops.buffer_dtype(plan.dst)
        return result if dtype == plan.acc_dtype else tirx.Cast(dtype, result)

    def serial(self, plan, whole=False):
        """Local source: each thread reduces its own array into its own destination. With
        `whole`, a fragment source every thread holds whole (one holder, every thread a
        replica: element f at slot f of its local array) into a destination held so too."""
        self.ctx.decide("reduce.serial", "replicated_source" if whole else "local_source")
        shape = [int(d) for d in plan.src.ty.shape]
        src, src_at = plan.src, list
        dst, dst_at = plan.dst, list
        if whole:
            src, src_at = self.ctx.fragments[plan.src][0], _flat_at(shape)
            if plan.dst in self.ctx.fragments:
                dst = self.ctx.fragments[plan.dst][0]
                dst_at = _flat_at([int(d) for d in plan.dst.ty.shape])
        acc = tirx.decl_buffer((1,), plan.acc_dtype, "red_acc", scope="local")
        zero = [i32(0)]
        idx = [self.ctx.fresh("i") for _ in shape]
        if len(plan.dst.ty.shape) == len(shape):
            out = [v if d != plan.dim else i32(0) for d, v in enumerate(idx)]
        else:
            out = [v for d, v in enumerate(idx) if d != plan.dim] or zero
        step = tirx.BufferStore(acc, combine(plan.kind, tirx.BufferLoad(acc, zero), self.value(
            plan, tirx.BufferLoad(src, src_at(idx)))), zero)
        result = self.finish(plan, tirx.BufferLoad(dst, dst_at(out)), tirx.BufferLoad(acc, zero))
        body = seq([tirx.BufferStore(acc, identity(plan.kind, plan.acc_dtype), zero),
                    _serial(idx[plan.dim], shape[plan.dim], step),
                    tirx.BufferStore(dst, result, dst_at(out))])
        for d in reversed(range(len(shape))):
            if d != plan.dim:
                body = _serial(idx[d], shape[d], body)
        return seq([tirx.AllocBuffer(acc), body])

    def distributed(self, plan):  # noqa: D401
        """Fragment source: partials, butterfly, cross-simdgroup stage, store (docstring)."""
        src_local, src_layout = self.ctx.fragments[plan.src]
        slots = plan.dst_layout.slots
        acc = tirx.decl_buffer((slots,), plan.acc_dtype, "red_acc", scope="local")

        def at(k):
            return tirx.BufferLoad(acc, [k])

        stmts = [tirx.AllocBuffer(acc),
                 self.loop(slots, lambda k: tirx.BufferStore(
                     acc, identity(plan.kind, plan.acc_dtype), [k])),
                 self.partials(plan, src_local, src_layout, acc)]
        lo, ibits = plan.simd_bits
        if ibits:
            whole = (lo, ibits) == (0, SIMD_BITS) and DTYPES[plan.acc_dtype].bits <= 32
            self.ctx.decide("reduce.in_simdgroup", "simd_reduce" if whole else "butterfly")

            def within(k):
                if whole:   # the whole simdgroup: the hardware's reduction (32-bit types only)
                    return tirx.BufferStore(acc, ops.call(SIMD_REDUCE[plan.kind], at(k),
                                                          dtype=plan.acc_dtype), [k])
                return seq([tirx.BufferStore(acc, combine(plan.kind, at(k), shuffle_xor(
                    at(k), 1 << b, plan.acc_dtype)), [k]) for b in range(lo, lo + ibits)])
            stmts.append(self.loop(slots, within))
        if plan.cross_bits[1]:
            stmts += self.across_simdgroups(plan, acc)
        stmts.append(self.store(plan, acc))
        return seq(stmts)

    def partials(self, plan, src_local, layout, acc, term=None):
        """acc[dst slot of each held element's output] op= the element (or
        `term(element's local index, slot)`)."""
        threads = layout.threads

        def element(r, lane):
            run = r * threads + self.ctx.tid
            idx = _unravel(run * layout.vec + lane, layout.shape)
            out = _row_major([i for d, i in enumerate(idx) if d != plan.dim],
                             [e for d, e in enumerate(layout.shape) if d != plan.dim])
            slot = plan.dst_layout.slot_expr(out)
            x = tirx.BufferLoad(src_local, [r * layout.vec + lane])
            x = self.value(plan, x) if term is None else term(r * layout.vec + lane, slot)
            return tirx.BufferStore(acc, combine(plan.kind, tirx.BufferLoad(acc, [slot]), x),
                                    [slot])

        def round_(r):
            body = self.loop(layout.vec, lambda lane: element(r, lane))
            if layout.runs % threads:
                body = tirx.IfThenElse(r * threads + self.ctx.tid < layout.runs, body, None)
            return body

        return self.loop(layout.rounds, round_)

    def across_simdgroups(self, plan, acc):
        """Combine the per-simdgroup partials of each group through red_buf."""
        stage = self.stages[plan.acc_dtype]
        tid, slots = self.ctx.tid, plan.dst_layout.slots
        lo, ibits = plan.simd_bits
        c_lo, cbits = plan.cross_bits
        width, w, group, c_at = self._stage_slots(plan)

        def publish(k):
            write = tirx.BufferStore(stage, tirx.BufferLoad(acc, [k]),
                                     [plan.stage_offset + k * width + w])
            if ibits:   # one lane per in-simdgroup group writes
                write = tirx.IfThenElse(_bits_of(tid, lo, ibits) == 0, write, None)
            return write

        def part(k, c):
            return tirx.BufferLoad(stage, [plan.stage_offset + k * width + group +
                                           c * (1 << c_at)])

        def gather_by_lanes(k):
            # whole-simdgroup groups over whole simdgroups: lane c reads partial c, and one
            # simd reduction combines them in every simdgroup (no broadcast, no 2nd barrier)
            lane = tirx.floormod(tid, 1 << SIMD_BITS)
            return seq([tirx.BufferStore(acc, identity(plan.kind, plan.acc_dtype), [k]),
                        tirx.IfThenElse(lane < plan.partials,
                                        tirx.BufferStore(acc, part(k, lane), [k]), None),
                        tirx.BufferStore(acc, ops.call(SIMD_REDUCE[plan.kind],
                                                       tirx.BufferLoad(acc, [k]),
                                                       dtype=plan.acc_dtype), [k])])

        def gather(k):
            first = tirx.BufferStore(acc, part(k, i32(0)), [k])
            rest = self.loop(plan.partials, lambda c: tirx.BufferStore(
                acc, combine(plan.kind, tirx.BufferLoad(acc, [k]), part(k, c)), [k]), start=1)
            return seq([first, rest])

        by_lanes = plan.by_lanes
        self.ctx.decide("reduce.across_simdgroups",
                        ("first_simdgroup_combines" if by_lanes else "first_simdgroup_folds")
                        if plan.once else "lanes_read_partials" if by_lanes
                        else "every_thread_reads_partials")
        self.ctx.decide("reduce.top_range", "partial" if plan.partials < 1 << cbits
                        else "whole")
        stmts = [self.loop(slots, publish)]
        if plan.once:
            result = self._once(plan, [(stage, acc, plan.result_offset)],
                                gather_by_lanes if by_lanes else gather)
            return stmts + result
        return stmts + [self.loop(slots, gather_by_lanes if by_lanes else gather)]

    def _once(self, plan, values, combine_slot):
        """The threads of each group's first simdgroup (their cross-simdgroup bits 0) run
        `combine_slot(k)` for every slot k (which leaves the group's result in each
        (stage, acc, offset) of `values`, acc[k]), the first of each in-simdgroup group
        writes the results to red_buf at offset + k * groups + (the group's index: w
        without the group's bits), and every thread reads its group's back (thread_sync
        puts the barrier between). The condition is uniform over each simdgroup, so the
        simd reductions inside it run on whole simdgroups."""
        tid, slots, groups = self.ctx.tid, plan.dst_layout.slots, self.groups(plan)
        lo, ibits = plan.simd_bits
        c_lo, cbits = plan.cross_bits
        _, w, _, c_at = self._stage_slots(plan)
        group = _compress(w, c_at, cbits) if groups > 1 else i32(0)
        first = tirx.floordiv(tid, 1 << c_lo) == 0 if self.ctx.threads <= 1 << (c_lo + cbits) \
            else _bits_of(tid, c_lo, cbits) == 0
        lane0 = _bits_of(tid, lo, ibits) == 0 if ibits else tirx.const(True, "bool")

        def slot_at(offset, k):
            return plan.stage_offset + offset + k * groups + group

        def combine_and_write(k):
            writes = seq([tirx.BufferStore(stage, tirx.BufferLoad(acc, [k]),
                                           [slot_at(offset, k)])
                          for stage, acc, offset in values])
            return seq([combine_slot(k), tirx.IfThenElse(lane0, writes, None)])

        def read_back(k):
            return seq([tirx.BufferStore(acc, tirx.BufferLoad(stage, [slot_at(offset, k)]),
                                         [k]) for stage, acc, offset in values])

        return [tirx.IfThenElse(first, self.loop(slots, combine_and_write), None),
                self.loop(slots, read_back)]

    def _stage_slots(self, plan):
        """(partials per slot, this thread's partial w, w with its simdgroup bits cleared,
        where those bits sit in w) of a reduction's cross-simdgroup stage."""
        lo, ibits = plan.simd_bits
        c_lo, cbits = plan.cross_bits
        width = self.ctx.threads >> ibits          # partials per slot
        w = _compress(self.ctx.tid, lo, ibits)     # this thread's partial
        c_at = c_lo - ibits                      # where the simdgroup bits of a group sit in w
        # w with its simdgroup bits cleared (written without `x - x % c`, which trips a
        # division by zero in TVM's FlattenBuffer simplifier)
        group = tirx.floordiv(w, 1 << (c_at + cbits)) * (1 << (c_at + cbits))
        if c_at:
            group = group + tirx.floormod(w, 1 << c_at)
        return width, w, group, c_at

    # ---- softmax statistics: running (max, sum) pairs combined at once -------------------
    def online(self, call):
        """tl.reduce_online(run_max, run_sum, mx, sm): mx = max of run_max over dim 1 and
        sm = sum of run_sum * exp(run_max - mx), every (max, sum) pair combined as
        (max(m1, m2), s1 exp(m1 - max) + s2 exp(m2 - max)). The same stages as a reduction,
        on pairs: per thread, the maximum of its elements, then their sums rescaled to it;
        inside the simdgroup one simd_max and one simd_sum of the rescaled sums (or a
        butterfly of pairs); across simdgroups (whole ones) one region of red_buf holding
        every simdgroup's maximum and then its sum, so one barrier for both, after which
        lane c reads pair c if c is below the number of simdgroups (28 at 896 threads, not
        the 32 their bits span), else the identity pair, and one simd_max and one simd_sum
        combine them: in every simdgroup, or in the first only, which writes the pair to
        red_buf for every thread behind one more barrier (`_plan_once`, pairs = 2). The
        maximum's identity
        is the lowest finite float, not -inf: exp(-inf) need not be 0 under fast math."""
        pm, ps = [p for p in self.plans if p.call.same_as(call)]
        max_local, layout = self.ctx.fragments[pm.src]
        sum_local = self.ctx.fragments[ps.src][0]
        slots, f32 = pm.dst_layout.slots, "float32"
        lowest = tirx.min_value(f32)
        acc_m, acc_s, t_m, t_s = (tirx.decl_buffer((slots,), f32, name, scope="local")
                                  for name in ("red_max", "red_sum", "red_max_in", "red_sum_in"))

        def at(b, k):
            return tirx.BufferLoad(b, [k])

        def put(b, k, v):
            return tirx.BufferStore(b, v, [k])

        def merge(k, om, os):
            """(acc_m, acc_s)[k] := the pair combined with (om, os)."""
            g = tirx.Max(at(acc_m, k), om)
            return seq([put(acc_s, k, at(acc_s, k) * tirx.exp(at(acc_m, k) - g) +
                            os * tirx.exp(om - g)),
                        put(acc_m, k, g)])

        def by_simd(k, m, s, g):
            """(acc_m, acc_s)[k] := the whole simdgroup's combination of the pairs
            (m[k], s[k]); the maximum goes through g (not m, which the sum still reads)."""
            return seq([put(g, k, ops.call("tl.simd_max", at(m, k), dtype=f32)),
                        put(acc_s, k, ops.call("tl.simd_sum", at(s, k) * tirx.exp(
                            at(m, k) - at(g, k)), dtype=f32)),
                        None if g is acc_m else put(acc_m, k, at(g, k))])

        stmts = [*(tirx.AllocBuffer(b) for b in (acc_m, acc_s, t_m, t_s)),
                 self.loop(slots, lambda k: seq([put(acc_m, k, lowest),
                                                 put(acc_s, k, tirx.const(0.0, f32))])),
                 self.partials(pm, max_local, layout, acc_m),
                 self.partials(ps, sum_local, layout, acc_s, term=lambda e, slot: at(
                     sum_local, e) * tirx.exp(at(max_local, e) - at(acc_m, slot)))]
        lo, ibits = pm.simd_bits
        whole = (lo, ibits) == (0, SIMD_BITS)
        if ibits:
            self.ctx.decide("reduce.online", "in_simdgroup")
            self.ctx.decide("reduce.in_simdgroup", "simd_reduce" if whole else "butterfly")
        if ibits and whole:
            stmts.append(self.loop(slots, lambda k: by_simd(k, acc_m, acc_s, t_m)))
        elif ibits:
            stmts.append(self.loop(slots, lambda k: seq([seq([
                put(t_m, k, shuffle_xor(at(acc_m, k), 1 << b, f32)),
                put(t_s, k, shuffle_xor(at(acc_s, k), 1 << b, f32)),
                merge(k, at(t_m, k), at(t_s, k))]) for b in range(lo, lo + ibits)])))
        c_lo, cbits = pm.cross_bits
        if cbits:
            stage, base = self.stages[f32], pm.stage_offset
            width, w, group, c_at = self._stage_slots(pm)
            sums = slots * width                 # the sums follow the maxima in the region

            def publish(k):
                writes = seq([tirx.BufferStore(stage, at(acc_m, k), [base + k * width + w]),
                              tirx.BufferStore(stage, at(acc_s, k),
                                               [base + sums + k * width + w])])
                return writes if not ibits else tirx.IfThenElse(
                    _bits_of(self.ctx.tid, lo, ibits) == 0, writes, None)

            def part(k, c, offset):
                return tirx.BufferLoad(stage, [base + offset + k * width + group +
                                               c * (1 << c_at)])

            def gather_by_lanes(k):
                lane = tirx.floormod(self.ctx.tid, 1 << SIMD_BITS)
                return seq([put(t_m, k, lowest), put(t_s, k, tirx.const(0.0, f32)),
                            # the simdgroups that exist (28 at 896 threads), not the
                            # power of two their bits span: red_buf holds no more
                            tirx.IfThenElse(lane < pm.partials, seq([
                                put(t_m, k, part(k, lane, 0)), put(t_s, k, part(k, lane, sums))]),
                                None),
                            by_simd(k, t_m, t_s, acc_m)])

            if not (whole and c_lo == SIMD_BITS):
                self.fail("T.reduce_online", "pairs spread over part of each of several "
                                             "simdgroups are not combined; the groups must "
                                             "be whole simdgroups")
            self.ctx.decide("reduce.online", "across_simdgroups")
            self.ctx.decide("reduce.across_simdgroups", "first_simdgroup_combines" if pm.once
                            else "lanes_read_partials")
            self.ctx.decide("reduce.top_range", "partial" if pm.partials < 1 << cbits
                            else "whole")
            stmts.append(self.loop(slots, publish))
            if pm.once:    # the maxima's results, then the sums'
                stmts += self._once(pm, [(stage, acc_m, pm.result_offset),
                                         (stage, acc_s, pm.result_offset +
                                          slots * self.groups(pm))], gather_by_lanes)
            else:
                stmts.append(self.loop(slots, gather_by_lanes))
        stmts += [self.store(pm, acc_m), self.store(ps, acc_s)]
        return seq(stmts)

    def store(self, plan, acc):
        """dst := the reduction (or op(dst, reduction)) for every slot the thread holds."""
        if ops.buffer_scope(plan.dst) == "local":
            return self.store_local(plan, acc)
        layout = plan.dst_layout
        dst_local = self.ctx.fragments[plan.dst][0]
        holder = layout.holder_expr(self.ctx.tid)

        def slot(k):
            value = self.finish(plan, tirx.BufferLoad(dst_local, [k]), tirx.BufferLoad(acc, [k]))
            body = tirx.BufferStore(dst_local, value, [k])
            if layout.runs % layout.threads:     # the last round leaves some holders idle
                run = tirx.floordiv(k, layout.vec) * layout.threads + holder
                body = tirx.IfThenElse(run < layout.runs, body, None)
            return body

        return self.loop(layout.slots, slot)

    def store_local(self, plan, acc):
        """Local dst of a fragment source: every thread gets every output."""
        layout = plan.dst_layout
        shape = [int(d) for d in plan.dst.ty.shape]

        def store(o, value_at):
            idx = _unravel(o, shape)
            value = self.finish(plan, tirx.BufferLoad(plan.dst, idx), value_at(o))
            return tirx.BufferStore(plan.dst, value, idx)

        if not plan.broadcast_to_local:       # one holder: every thread has every output
            return self.loop(layout.size, lambda o: store(o, lambda f: tirx.BufferLoad(
                acc, [f])))
        self.ctx.decide("reduce.across_simdgroups", "broadcast_to_local")
        stage = self.stages[plan.acc_dtype]
        holder = layout.holder_expr(self.ctx.tid)

        def publish(j):
            run = tirx.floordiv(j, layout.vec) * layout.threads + holder
            flat = run * layout.vec + tirx.floormod(j, layout.vec)
            cond = layout.owner_expr(self.ctx.tid) if layout.replicated else None
            if layout.size % (layout.vec * layout.threads):
                inside = flat < layout.size
                cond = inside if cond is None else tirx.And(cond, inside)
            write = tirx.BufferStore(stage, tirx.BufferLoad(acc, [j]),
                                     [plan.stage_offset + plan.broadcast_offset + flat])
            return write if cond is None else tirx.IfThenElse(cond, write, None)

        return seq([self.loop(layout.slots, publish),
                    self.loop(layout.size, lambda o: store(o, lambda f: tirx.BufferLoad(
                        stage, [plan.stage_offset + plan.broadcast_offset + f])))])


def _flat_at(shape):
    """Indices of a row-major element of `shape` -> its one index in a flat array."""
    def at(idx):
        flat = i32(0)
        for d, v in zip(shape, idx):
            flat = flat * d + v
        return [flat]
    return at


def _serial(var, extent, body):
    return tirx.For(var, i32(0), i32(extent), tirx.ForKind.SERIAL, body)
