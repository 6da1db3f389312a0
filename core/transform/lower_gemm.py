"""T.gemm and every use of a gemm accumulator -> simdgroup 8x8 matrix code.

Part of pass `lower_tile_ops`, which hands this module each statement first
(`GemmLowering.lower`; None means "not mine") and a KernelContext
(core/transform/kernel_context.py) through which it sees the kernel; the threadgroup
buffers it allocates (`allocations`) are placed at the kernel's start.

Expects: the C operand of every T.gemm is a float32 fragment whose AllocBuffer carries
`tl.simdgroup_accumulator` (layout_inference); the verifier has checked the operands
(scopes, one input dtype, agreeing shapes).
Guarantees: no tl.gemm call, and no access to an accumulator fragment, is left. An
accumulator C [M, N] becomes `AccumulatorLayout.count` simdgroup matrices per simdgroup
(core/ir/matrix.py: the warp partition chosen for the thread count), and its uses lower to:

    T.gemm(A, B, C)    per 8-wide k step, each simdgroup simdgroup_loads its sm row tiles
                       of op(A) and sn column tiles of op(B) from threadgroup memory (row
                       stride = the buffer's last extent; transposes through the load's
                       transpose flag) and multiply-accumulates its sm x sn C matrices.
                       A or B in a fragment is first copied into a threadgroup buffer of
                       its own dtype and shape; A or B in device memory is loaded from
                       there directly (only a tile provably inside its tensor: there is no
                       masked simdgroup_load); clear_accum fills C with zeros first.
    T.gemm(A, B, C_s)  C_s a float32 threadgroup tile (T.alloc_shared, TileLang's Metal
                       path): the simdgroups load their matrices of C_s (clear_accum: fill
                       zeros), multiply-accumulate as above, and simdgroup_store them back
                       at C_s's row stride; every other use of C_s is plain memory.
                       In a serial k loop that touches C_s only by that T.gemm, C_s's
                       matrices are loaded once before the loop and stored once after it
                       (`gemm.shared_accumulator=held_across_k`), the loop only
                       multiply-accumulating them.
    T.gemm(A, B, C_g)  C_g a tile of a float32/float16/bfloat16 device tensor: C_g's
                       matrices are brought in (clear_accum: zeros) the way T.copy(C_g, acc)
                       does, multiply-accumulated, and written back as T.copy(acc, C_g)
                       does (below): float32 tiles inside C_g directly, edge tiles and half
                       types through the float32 stage, element-wise and masked.
    T.fill / T.clear   make_filled_simdgroup_matrix.
    T.copy(C, dst)     simdgroup_store straight into dst when dst is float32 threadgroup
                       memory, or float32 device memory that provably holds the whole tile;
                       into float32 device memory that may end inside the tile, each 8x8
                       matrix wholly inside straight there, one wholly outside nowhere, and
                       the ones across the edge through the stage (an element-wise copy of
                       just their elements, masked; no stage when no tile can straddle);
                       otherwise into a float32 threadgroup staging buffer, then an
                       element-wise T.copy of it that converts the dtype and masks the
                       edges. When the whole [M, N] stage does not fit into threadgroup
                       memory beside the kernel's own buffers, a copy to device or
                       threadgroup memory goes through it in chunks of rows.
    T.copy(src, C)     the reverse (simdgroup_load, directly or from the stage).
    T.Parallel over C  C is stored to its stage, the loop runs on the stage, and C is
                       loaded back if the loop wrote it. A T.Parallel at C's shape that
                       touches no other fragment runs in chunks of rows when the whole stage
                       does not fit (a ReLU over a 128x128 accumulator).
A float accumulator is never stored through a pointer of another element type. Barriers
are not placed here: stages are ordinary threadgroup buffers, and the planner
(thread_sync) sees the matrix loads and stores as whole-tile accesses.

Errors (LoweringError, before any code runs): M, N or K not a multiple of 8; a thread
count that is not whole simdgroups or whose simdgroups cannot split the C tile evenly;
a stage chunked by rows that finds too few bytes left beside the rest (stages held whole
past 32 KiB are pass merge_threadgroup's to judge: they may reuse the operands' bytes, dead
by then, and it refuses live bytes past the limit); a tile op other than
T.copy / T.fill / T.gemm on an accumulator; an A or B tile of device memory not provably
inside its tensor.

Decisions noted (core/ir/decisions.py, through the KernelContext): `gemm.accumulator`
(fragment, shared, device), `gemm.store` (direct, edges staged, staged, in chunks) and
`gemm.shared_accumulator` (held across the k loop, or loaded and stored per call).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import tvm
from tvm import tirx

from core.errors import LoweringError
from core.ir import matrix, ops
from core.ir.matrix import TILE, AccumulatorLayout
from core.ir.ops import FRAGMENT
from core.ir.stmt import (as_int, free_vars, i32, loads, map_nodes, once_assigned_scalars,
                          rewrite, seq, substitute, walk)
from core.target import METAL, bits


@dataclass
class _Accumulator:
    fragment: object            # the fragment buffer of the DSL
    layout: AccumulatorLayout
    mats: object                # MATRIX_SCOPE buffer of layout.count matrices
    stage_rows: int             # rows of the float32 staging buffer (M: the whole tile)
    stage: object = None        # the staging buffer, allocated on first use

    @property
    def name(self) -> str:
        return self.fragment.name




def _nbytes(shape, dtype) -> int:
    return prod(int(d) for d in shape) * bits(dtype) // 8


def _for(var, extent, body):
    return tirx.For(var, i32(0), i32(extent), tirx.ForKind.SERIAL, body)


@dataclass
class _KernelUses:
    """What the gemm planning needs to know about a kernel body, in one walk."""
    accumulators: dict          # accumulator fragment -> None (ordered set)
    shared_bytes: int           # the kernel's own threadgroup buffers
    gemms: list                 # tl.gemm calls
    copies: list                # (src, dst) Regions of every tl.copy
    parallel: list              # buffers accessed inside T.Parallel loops that need
                                # their accumulators staged whole
    chunkable: list             # T.Parallel loops over one accumulator alone, at its shape
    parallel_loops: list        # every PARALLEL loop (nests: each level)
    others: list                # other tile-op calls (tl.fill excepted)

    @classmethod
    def of(cls, body) -> "_KernelUses":
        uses = cls({}, 0, [], [], [], [], [], [])

        def visit(s):
            if isinstance(s, tirx.AllocBuffer):
                if matrix.ACCUMULATOR in (s.annotations or {}):
                    uses.accumulators[s.buffer] = None
                elif ops.buffer_scope(s.buffer) == "shared":
                    uses.shared_bytes += _nbytes(s.buffer.ty.shape, ops.buffer_dtype(s.buffer))
            elif isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL:
                uses.parallel_loops.append(s)
            elif isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.gemm"):
                uses.gemms.append(s.value)
            elif isinstance(s, tirx.Evaluate) and (ops.is_tile_call(s.value, "tl.copy") or
                                                   ops.is_tile_call(s.value, "tl.atomic_tile")):
                uses.copies.append(_regions(s.value))
            elif isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value) and \
                    not ops.is_tile_call(s.value, "tl.fill"):
                uses.others.append(s.value)

        walk(body, visit)
        if not uses.accumulators:  # what the loops touch matters for accumulators only
            return uses
        inner = {loop.body.__chandle__() for loop in uses.parallel_loops}  # nests count once
        for loop in uses.parallel_loops:
            if loop.__chandle__() in inner:
                continue
            touched = [ld.source for ld in loads(loop)]
            walk(loop, lambda t, touched=touched: touched.append(t.buffer)
                 if isinstance(t, tirx.BufferStore) else None)
            accs = {b: None for b in touched if b in uses.accumulators}
            frags = {b: None for b in touched if ops.buffer_scope(b) == FRAGMENT}
            if len(accs) == 1 and len(frags) == 1 and \
                    _extents(loop) == tuple(int(d) for d in next(iter(accs)).ty.shape):
                uses.chunkable.append(loop)
            else:
                uses.parallel.extend(accs)
        return uses


def _touched_buffers(loop) -> list:
    """The buffers a loop loads from or stores to."""
    found = [ld.source for ld in loads(loop)]
    walk(loop, lambda s: found.append(s.buffer) if isinstance(s, tirx.BufferStore) else None)
    return found


def _extents(loop) -> tuple:
    """Extents of a T.Parallel nest (PARALLEL loops directly inside each other)."""
    out = []
    while isinstance(loop, tirx.For) and loop.kind == tirx.ForKind.PARALLEL:
        out.append(as_int(loop.extent))
        loop = loop.body
    return tuple(out)


def _regions(call) -> list:
    return [ops.decode_region(a) for a in call.args if ops.is_tile_call(a, "tl.region")]


def _held_across(body) -> dict:
    """{loop handle: its T.gemm} for the loops whose shared accumulator can stay in
    simdgroup matrices from the first iteration to the last: a serial loop with one T.gemm
    among its own statements, into a float32 threadgroup tile C (not clear_accum) at a
    place the loop variable does not move, and no other access to C's buffer anywhere in
    the loop (no read, store, copy, fill or other gemm). Each iteration then loads the
    matrices C's previous one stored, so loading them once before the loop and storing
    them once after it computes the same sums (float32 throughout: nothing is rounded
    that was not before). With zero iterations the store puts back the values loaded."""
    held = {}

    def visit(loop):
        if not isinstance(loop, tirx.For) or loop.kind != tirx.ForKind.SERIAL:
            return
        stmts = list(loop.body.seq) if isinstance(loop.body, tirx.SeqStmt) else [loop.body]
        gemms = [st.value for st in stmts if isinstance(st, tirx.Evaluate)
                 and ops.is_tile_call(st.value, "tl.gemm")]
        if len(gemms) != 1:
            return
        call = gemms[0]
        C = ops.decode_region(call.args[2])
        if C.scope != "shared" or ops.buffer_dtype(C.buffer) != "float32" \
                or as_int(call.args[5]) or any(
                    v.same_as(loop.loop_var) for m in C.mins for v in free_vars(m)):
            return
        in_call = sum(ld.source.same_as(C.buffer) for ld in loads(call))
        in_loop = sum(ld.source.same_as(C.buffer) for ld in loads(loop))
        stored = []
        walk(loop, lambda t: stored.append(t) if isinstance(t, tirx.BufferStore)
             and t.buffer.same_as(C.buffer) else None)
        if in_loop == in_call and not stored:
            held[loop.__chandle__()] = call

    walk(body, visit)
    return held


def _filled_before(body, held) -> dict:
    """{loop handle: value} for the held loops (_held_across) right after a T.fill of their
    accumulator's buffer that covers its C tile: the matrices start as that value, with no
    load of what the fill just stored (and no barrier between the two)."""
    filled = {}

    def visit(s):
        if not isinstance(s, tirx.SeqStmt):
            return
        for before, loop in zip(s.seq[:-1], s.seq[1:]):
            call = held.get(loop.__chandle__())
            if call is None or not (isinstance(before, tirx.Evaluate)
                                    and ops.is_tile_call(before.value, "tl.fill")):
                continue
            fill, C = ops.decode_region(before.value.args[0]), ops.decode_region(call.args[2])
            if fill.buffer.same_as(C.buffer) and _covers(fill, C):
                filled[loop.__chandle__()] = before.value.args[1]

    walk(body, visit)
    return filled


def _covers(outer, inner) -> bool:
    """Region `outer` provably holds region `inner` (constant bounds; no extents: the whole
    buffer from the origin)."""
    def bounds(r):
        shape = r.extents if r.extents is not None else r.buffer.ty.shape
        return [(as_int(m), as_int(m) + as_int(e) if as_int(m) is not None
                 and as_int(e) is not None else None) for m, e in zip(r.mins, shape)]
    o, i = bounds(outer), bounds(inner)
    return len(o) == len(i) and all(
        None not in (a, b, c, d) and a <= c and d <= b for (a, b), (c, d) in zip(o, i))


class GemmLowering:
    """Lowers the gemm-related statements of one kernel, seen through `ctx` (a
    KernelContext: thread count and index, fresh names, loop ranges and guards, and
    lower_tile_ops' element-wise T.copy and T.Parallel, reused for the staged part)."""

    def __init__(self, ctx, body):
        self.ctx = ctx
        self.accumulators = {}      # fragment buffer -> _Accumulator
        self.operand_stages = {}    # fragment buffer -> threadgroup copy (gemm operands)
        self.operand_mats = {}      # (dtype, count, role) -> MATRIX_SCOPE buffer
        self.shared_accumulators = {}  # (threadgroup C buffer, tile) -> _Accumulator
        self.allocations = []       # AllocBuffers to place at the start of the kernel
        self.scalars = once_assigned_scalars(body)  # kernel scalars (`ty = by * p + bx % p`)
        # k loops whose shared accumulator stays in matrices across them (_held_across):
        # loop handle -> its T.gemm; the ones being lowered; their gemms' handles
        self.held_loops = _held_across(body)
        self.held_fills = _filled_before(body, self.held_loops)   # loop handle -> value
        self.holding = set()
        self.held_gemms = set()
        self._plan(body)

    def fail(self, construct, reason):
        raise LoweringError(reason, kernel=self.ctx.name, construct=construct)

    def _allocate(self, buf):
        """Place `buf` at the start of the kernel (merge_threadgroup counts its bytes)."""
        self.allocations.append(tirx.AllocBuffer(buf))

    # ---- planning: layouts and the threadgroup memory budget ----------------------------
    def _plan(self, body):
        uses = _KernelUses.of(body)
        for call in uses.others:
            for r in _regions(call):
                if r.buffer in uses.accumulators:
                    self._unsupported(call.op.name, r.name)
        for call in uses.gemms:
            self._check_shape(call)
        accs = uses.accumulators
        # accumulators whose whole tile must be staged at once (else: chunks of rows)
        need_full = {b: None for b in uses.parallel if b in accs}
        operand_bytes = 0
        for call in uses.gemms:
            for r in _regions(call)[:2]:
                if r.buffer in accs:
                    need_full[r.buffer] = None
                elif r.scope not in ("shared", "global") and \
                        r.buffer not in self.operand_stages:
                    self.operand_stages[r.buffer] = None
                    operand_bytes += _nbytes(r.buffer.ty.shape, ops.buffer_dtype(r.buffer))
        for src, dst in uses.copies:
            if src.buffer in accs and (dst.buffer in accs or dst.scope not in ("global",
                                                                                "shared")):
                need_full[src.buffer] = None
            if dst.buffer in accs and not self._direct_source(src):
                need_full[dst.buffer] = None
        full = {a: _nbytes(a.ty.shape, "float32") for a in accs}
        device_c = self._device_c_stages(uses.gemms)
        fixed = uses.shared_bytes + operand_bytes + sum(full[a] for a in need_full) + \
            sum(device_c.values())
        # accumulators that need no stage at all: only gemm'd, filled and copied straight
        # into float32 tiles (the MoE epilogue's T.copy(Cg, Cg_sh)); they take no bytes
        in_loops = {b for loop in uses.chunkable for b in _touched_buffers(loop)}
        stageless = {a for a in accs if a not in need_full and a not in in_loops and
                     all(self._stageless_copy(a, src, dst) for src, dst in uses.copies)}
        chunked = [a for a in accs if a not in need_full and a not in stageless]
        # Past the limit with every stage whole, pass merge_threadgroup judges: the stages
        # may reuse the operands' bytes, dead by then (as may the kernel's own buffers). A
        # chunked stage is sized from what is left beside the rest, so none may be left over.
        if fixed > METAL.threadgroup_memory_bytes and chunked:
            staged = ", ".join([f"'{a.name}' ({full[a]} bytes)" for a in need_full] +
                               [f"device C '{n}' ({b} bytes)" for n, b in device_c.items()])
            self.fail("T.gemm", f"the float32 staging buffers of accumulators {staged}, "
                                f"the threadgroup copies of fragment operands ({operand_bytes}"
                                f" bytes) and the kernel's threadgroup buffers "
                                f"({uses.shared_bytes} bytes) exceed the "
                                f"{METAL.threadgroup_memory_bytes} bytes of threadgroup memory; "
                                "use smaller tiles")
        share = (METAL.threadgroup_memory_bytes - fixed) // max(len(chunked), 1)
        for a in accs:
            layout = AccumulatorLayout.for_tile(a.ty.shape, self.ctx.threads,
                                                kernel=self.ctx.name, name=a.name)
            rows = self._stage_rows(a, share) if a in chunked else int(a.ty.shape[0])
            mats = matrix.matrices(layout.count, "float32", a.name)
            self.accumulators[a] = _Accumulator(a, layout, mats, rows)

    def _device_c_stages(self, gemms) -> dict:
        """{C name: bytes} of the float32 stages T.gemm into device tiles will need: a
        float16/bfloat16 C always, a float32 C whose tile may cross the tensor's edge
        (judged from the launch ranges alone: conservative)."""
        out = {}
        for call in gemms:
            C = ops.decode_region(call.args[2])
            if C.scope != "global":
                continue
            tile = tuple(int(d) for d in matrix.operand_tile(C))
            rank = len(C.buffer.ty.shape)
            dims = _tile_dims(C)
            if ops.buffer_dtype(C.buffer) == "float32" and dims == (rank - 2, rank - 1) \
                    and self.inside(C, dims, tile):
                continue
            out[C.name] = max(out.get(C.name, 0), _nbytes(tile, "float32"))
        return out

    def _check_shape(self, call):
        (a, b, c) = (matrix.operand_tile(ops.decode_region(x)) for x in call.args[:3])
        m, n = c
        k = a[0] if as_int(call.args[3]) else a[1]
        if m % TILE or n % TILE or k % TILE:
            self.fail("T.gemm", f"M, N, K = {m}, {n}, {k} must all be multiples of 8 "
                                "(simdgroup matrices are 8x8)")

    def _stage_rows(self, acc, budget) -> int:
        M, N = (int(d) for d in acc.ty.shape)
        fits = [r for r in range(TILE, M + 1, TILE) if M % r == 0 and r * N * 4 <= budget]
        if not fits:
            self.fail(f"gemm accumulator '{acc.name}'",
                      f"copying it out needs a float32 staging buffer of at least 8 rows "
                      f"({8 * N * 4} bytes) in threadgroup memory, but only {budget} of "
                      f"{METAL.threadgroup_memory_bytes} bytes are left beside the kernel's "
                      "threadgroup buffers; use smaller tiles")
        return max(fits)

    @staticmethod
    def _direct_source(src) -> bool:
        return (src.scope == "shared" and ops.buffer_dtype(src.buffer) == "float32"
                and matrix.operand_tile(src) is not None)

    # ---- dispatch -----------------------------------------------------------------------
    def lower(self, s):
        """The lowered statement for `s`, or None when `s` does not involve a gemm."""
        if isinstance(s, tirx.AllocBuffer) and s.buffer in self.accumulators:
            return tirx.AllocBuffer(self.accumulators[s.buffer].mats)
        if isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL:
            return self.parallel(s) if self._touched(s)[0] else None
        if isinstance(s, tirx.For) and s.__chandle__() in self.held_loops \
                and s.__chandle__() not in self.holding:
            return self.hold_across(s)
        if not (isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value)):
            return None
        name = s.value.op.name
        if name == "tl.gemm":
            return self.gemm(s.value)
        regions = _regions(s.value)
        accs = [r for r in regions if r.buffer in self.accumulators]
        if not accs:
            return None
        if name == "tl.copy":
            return self.copy(*regions)
        if name == "tl.atomic_tile" and regions[0].buffer in self.accumulators:
            return self.copy_out(self.accumulators[regions[0].buffer], regions[1],
                                 atomic=str(s.value.args[2].value))
        if name == "tl.fill":
            return self.fill(self.accumulators[accs[0].buffer], s.value.args[1])
        self._unsupported(name, accs[0].name)

    def _unsupported(self, op_name, acc_name):
        self.fail(f"T.{op_name[3:]}", f"is not supported on gemm accumulator '{acc_name}' "
                                      "(held as simdgroup matrices); T.copy it into another "
                                      "fragment first")

    # ---- T.gemm -------------------------------------------------------------------------
    def gemm(self, call):
        A, B, C = (ops.decode_region(a) for a in call.args[:3])
        trans_a, trans_b, clear = (bool(as_int(f)) for f in call.args[3:6])
        self.ctx.decide("gemm.accumulator", {"shared": "shared", "global": "device"}.get(
            C.scope, "fragment"))
        if C.scope == "shared" and call.__chandle__() in self.held_gemms:
            return self.mma(A, B, trans_a, trans_b, self.tile_accumulator(C))
        if C.scope == "shared":
            self.ctx.decide("gemm.shared_accumulator", "per_call")
            return self.gemm_shared_c(A, B, C, trans_a, trans_b, clear)
        if C.scope == "global":
            return self.gemm_global_c(A, B, C, trans_a, trans_b, clear)
        acc = self.accumulators[C.buffer]
        fill = self.fill(acc, tirx.const(0.0, "float32")) if clear else None
        return seq([fill, self.mma(A, B, trans_a, trans_b, acc)])

    def mma(self, A, B, trans_a, trans_b, acc):
        """acc's matrices += op(A) @ op(B), over 8-wide k steps."""
        lay = acc.layout
        pre_a, A = self.operand(A)
        pre_b, B = self.operand(B)
        K = matrix.operand_tile(A)[0 if trans_a else 1]
        dtype = ops.buffer_dtype(A.buffer)
        a_mats = self.operand_matrices(dtype, lay.sm, "A")
        b_mats = self.operand_matrices(dtype, lay.sn, "B")
        kk, ia, jb, i, j = (self.ctx.fresh(n) for n in ("kk", "i", "j", "i", "j"))
        k0 = kk * TILE
        row, _ = lay.origin(self.ctx.tid, ia, 0)
        _, col = lay.origin(self.ctx.tid, 0, jb)
        load_a = matrix.load(tirx.BufferLoad(a_mats, [ia]), *self.tile_pointer(A),
                             *((row, k0) if trans_a else (k0, row)), trans_a)
        load_b = matrix.load(tirx.BufferLoad(b_mats, [jb]), *self.tile_pointer(B),
                             *((k0, col) if trans_b else (col, k0)), trans_b)
        c = tirx.BufferLoad(acc.mats, [i * lay.sn + j])
        step = seq([_for(ia, lay.sm, load_a), _for(jb, lay.sn, load_b),
                    _for(i, lay.sm, _for(j, lay.sn, matrix.mma(
                        c, tirx.BufferLoad(a_mats, [i]), tirx.BufferLoad(b_mats, [j]), c)))])
        return seq(pre_a + pre_b + [_for(kk, K // TILE, step)])

    def tile_accumulator(self, C):
        """The simdgroup matrices holding a shared or device C tile while T.gemm runs (one
        set per (buffer, tile shape), made on first use)."""
        tile = tuple(int(d) for d in matrix.operand_tile(C))
        key = (C.buffer, tile)
        acc = self.shared_accumulators.get(key)
        if acc is None:
            layout = AccumulatorLayout.for_tile(tile, self.ctx.threads, kernel=self.ctx.name,
                                                name=C.name)
            mats = matrix.matrices(layout.count, "float32", f"{C.name}_mat")
            self._allocate(mats)
            acc = _Accumulator(C.buffer, layout, mats, tile[0])
            self.shared_accumulators[key] = acc
        return acc

    def hold_across(self, loop):
        """A k loop whose shared accumulator C stays in the simdgroup matrices across it
        (_held_across): C's matrices loaded once before the loop, the loop's T.gemm only
        multiply-accumulating them, stored once after it (rather than a load and a store of
        every matrix in every iteration: 2 x 4 bytes of threadgroup traffic per element of
        C per k step). Right after a T.fill that covers C, the matrices are filled with
        its value instead of loaded (_filled_before)."""
        call = self.held_loops[loop.__chandle__()]
        C = ops.decode_region(call.args[2])
        acc = self.tile_accumulator(C)
        self.holding.add(loop.__chandle__())
        self.held_gemms.add(call.__chandle__())
        body = self.ctx.stmt(loop)
        self.ctx.decide("gemm.shared_accumulator", "held_across_k")
        value = self.held_fills.get(loop.__chandle__())
        first = self.load_all(acc, C) if value is None else self.fill(acc, value)
        return seq([first, body, self.store_all(acc, C)])

    def gemm_shared_c(self, A, B, C, trans_a, trans_b, clear):
        """T.gemm into a float32 threadgroup tile C (TileLang's Metal path,
        `C_local = T.alloc_shared(..., accum_dtype)`): each simdgroup loads its matrices of
        C (or fills them with zeros for clear_accum), multiply-accumulates, and stores them
        back with simdgroup_store at C's row stride (padded rows included). Threads then
        read C element-wise in their own layout; the barrier planner orders those reads
        after the whole 8x8 tiles the simdgroups stored."""
        acc = self.tile_accumulator(C)
        first = self.fill(acc, tirx.const(0.0, "float32")) if clear else self.load_all(acc, C)
        return seq([first, self.mma(A, B, trans_a, trans_b, acc), self.store_all(acc, C)])

    def gemm_global_c(self, A, B, C, trans_a, trans_b, clear):
        """T.gemm into a tile of device memory: C[tile] = op(A) @ op(B), plus C[tile]'s
        previous values unless clear_accum. Each simdgroup brings its matrices of the tile
        in (zeros for clear_accum), multiply-accumulates, and writes them back as
        T.copy(accumulator, C) does: float32 tiles wholly inside C straight from and to
        device memory with simdgroup_load/store; tiles across C's edge, and every tile of
        a float16/bfloat16 C, through the float32 threadgroup stage with an element-wise,
        masked, converting copy (a float matrix never goes through a half pointer)."""
        acc = self.tile_accumulator(C)
        first = self.fill(acc, tirx.const(0.0, "float32")) if clear else self.load_device(acc, C)
        return seq([first, self.mma(A, B, trans_a, trans_b, acc), self.copy_out(acc, C)])

    def load_device(self, acc, src):
        """simdgroup_load the accumulator's matrices from the device tile `src`, the
        reverse of copy_out: directly for a float32 tile provably inside its buffer; tile
        by tile for a float32 buffer that may end inside (the matrices wholly inside
        directly, those across the edge from the stage after an element-wise copy of just
        their elements, zero-padded, those wholly outside as zeros; no stage when no
        matrix can straddle the edge); otherwise the whole tile through the stage
        (converting, zero-padded at the edges)."""
        M, N = acc.layout.shape
        rank = len(src.buffer.ty.shape)
        dims = _tile_dims(src)
        float32 = ops.buffer_dtype(src.buffer) == "float32" and dims == (rank - 2, rank - 1)
        if float32 and self.inside(src, dims, (M, N)):
            return self.load_all(acc, src)
        if not float32:
            stage = self.stage(acc)
            return seq([self.ctx.copy(src, stage), self.load_all(acc, stage)])
        shape = src.buffer.ty.shape
        r0, c0 = src.mins[dims[0]], src.mins[dims[1]]
        d_ptr, d_stride = self.tile_pointer(src)

        def inside(row, col):
            return tirx.And(r0 + row + TILE <= shape[dims[0]], c0 + col + TILE <= shape[dims[1]])

        def touches(row, col):
            return tirx.And(r0 + row < shape[dims[0]], c0 + col < shape[dims[1]])

        zero = tirx.const(0.0, "float32")
        analyzer = self.ctx.analyzer()
        if all(analyzer.can_prove(tirx.floormod(self._known(x), TILE) == 0)
               for x in (r0, c0, shape[dims[0]], shape[dims[1]])):
            # no tile straddles the edge (as in store_edges_staged): no stage, no barrier
            return self._each_matrix(acc, lambda mat, row, col: tirx.IfThenElse(
                inside(row, col), matrix.load(mat, d_ptr, d_stride, col, row),
                matrix.fill(mat, zero)))
        stage = self.stage(acc)
        s_ptr, s_stride = self.tile_pointer(stage)

        def make(mat, row, col):
            return tirx.IfThenElse(inside(row, col),
                                   matrix.load(mat, d_ptr, d_stride, col, row),
                                   tirx.IfThenElse(touches(row, col),
                                                   matrix.load(mat, s_ptr, s_stride, col, row),
                                                   matrix.fill(mat, zero)))

        def edge(tile_idx):
            row, col = (tirx.floordiv(t, TILE) * TILE for t in tile_idx[-2:])
            return tirx.And(tirx.Not(inside(row, col)), touches(row, col))

        return seq([self.ctx.copy(src, stage, when=edge), self._each_matrix(acc, make)])

    def operand(self, region):
        """(statements, threadgroup region) holding a gemm operand for simdgroup_load."""
        if region.scope == "shared":
            return [], region
        if region.scope == "global":
            # simdgroup_load straight from device memory (TileLang's direct global-operand
            # gemm); a tile that may end inside its tensor would read past it
            rank = len(region.buffer.ty.shape)
            dims = _tile_dims(region)
            tile = tuple(int(d) for d in matrix.operand_tile(region))
            if dims != (rank - 2, rank - 1) or not self.inside(region, dims, tile):
                self.fail(f"T.gemm operand '{region.name}'",
                          f"is a tile {tile} of device memory that is not provably inside "
                          "the tensor (its origin's range is not known to end at or before "
                          "the tensor's edge, or it does not span the last two dims); "
                          "simdgroup_load has no masked form: T.copy the tile into "
                          "T.alloc_shared (edges load zeros) and pass that")
            return [], region
        if region.buffer in self.accumulators:
            acc = self.accumulators[region.buffer]
            stage = self.stage(acc)
            return [self.store_all(acc, stage)], stage
        buf = self.operand_stages.get(region.buffer)
        if buf is None:
            buf = tirx.decl_buffer(region.buffer.ty.shape, ops.buffer_dtype(region.buffer),
                                   f"{region.name}_shared", scope="shared")
            self.operand_stages[region.buffer] = buf
            self._allocate(buf)
        stage = _whole(buf)
        return [self.ctx.copy(region, stage)], stage

    def operand_matrices(self, dtype, count, role):
        key = (dtype, count, role)
        if key not in self.operand_mats:
            self.operand_mats[key] = matrix.matrices(count, dtype, f"{role}_mat")
            self._allocate(self.operand_mats[key])
        return self.operand_mats[key]

    @staticmethod
    def tile_pointer(region):
        """(pointer element, elements per row) of a 2-D tile in its buffer's last two dims."""
        return tirx.BufferLoad(region.buffer, list(region.mins)), region.buffer.ty.shape[-1]

    # ---- whole-accumulator moves ----------------------------------------------------------
    def _each_matrix(self, acc, make):
        """`make(matrix, row, col)` for each of the simdgroup's matrices, as a loop nest."""
        lay = acc.layout
        i, j = self.ctx.fresh("i"), self.ctx.fresh("j")
        row, col = lay.origin(self.ctx.tid, i, j)
        body = make(tirx.BufferLoad(acc.mats, [i * lay.sn + j]), row, col)
        return _for(i, lay.sm, _for(j, lay.sn, body))

    def store_all(self, acc, region, chunk=None):
        """simdgroup_store every matrix into the tile `region` (rows of chunk `chunk` of the
        stage only, when given)."""
        pointer, stride = self.tile_pointer(region)

        def make(mat, row, col):
            if chunk is None:
                return matrix.store(mat, pointer, stride, col, row)
            rows = acc.stage_rows
            return tirx.IfThenElse(tirx.floordiv(row, rows) == chunk, matrix.store(
                mat, pointer, stride, col, row - chunk * rows if chunk else row), None)

        return self._each_matrix(acc, make)

    def load_all(self, acc, region, chunk=None):
        """simdgroup_load every matrix from the tile `region` (those of chunk `chunk`, from
        its rows of the stage, when given)."""
        pointer, stride = self.tile_pointer(region)

        def make(mat, row, col):
            if chunk is None:
                return matrix.load(mat, pointer, stride, col, row)
            rows = acc.stage_rows
            return tirx.IfThenElse(tirx.floordiv(row, rows) == chunk, matrix.load(
                mat, pointer, stride, col, row - chunk * rows if chunk else row), None)

        return self._each_matrix(acc, make)

    def fill(self, acc, value):
        if str(value.ty.dtype) != "float32":
            value = tirx.Cast("float32", value)
        i = self.ctx.fresh("i")
        return _for(i, acc.layout.count, matrix.fill(tirx.BufferLoad(acc.mats, [i]), value))

    def stage(self, acc):
        """The accumulator's float32 staging region (stage_rows x N)."""
        if acc.stage is None:
            shape = (acc.stage_rows, acc.layout.shape[1])
            acc.stage = tirx.decl_buffer(shape, "float32", f"{acc.name}_stage", scope="shared")
            self._allocate(acc.stage)
        return _whole(acc.stage)

    # ---- T.copy -----------------------------------------------------------------------------
    def copy(self, src, dst):
        src_acc = self.accumulators.get(src.buffer)
        dst_acc = self.accumulators.get(dst.buffer)
        if src_acc is not None and dst_acc is not None:
            stage = self.stage(src_acc)
            return seq([self.store_all(src_acc, stage), self.load_all(dst_acc, stage)])
        if src_acc is not None:
            return self.copy_out(src_acc, dst)
        if self._direct_source(src):
            return self.load_all(dst_acc, src)
        stage = self.stage(dst_acc)
        return seq([self.ctx.copy(src, stage), self.load_all(dst_acc, stage)])

    def copy_out(self, acc, dst, atomic=None):
        """T.copy(C, dst); with `atomic`, T.atomic_*(dst, C): always through the stage,
        whose element-wise copy makes one atomic per element."""
        M, N = acc.layout.shape
        rank = len(dst.buffer.ty.shape)
        dims = _tile_dims(dst)
        if atomic is None and self._direct_target(dst, (M, N)):
            self.ctx.decide("gemm.store", "direct")
            return self.store_all(acc, dst)
        if (atomic is None and ops.buffer_dtype(dst.buffer) == "float32" and
                dims == (rank - 2, rank - 1) and dst.scope == "global" and acc.stage_rows == M):
            self.ctx.decide("gemm.store", "edges_staged")
            return self.store_edges_staged(acc, dst, dims)
        stage = self.stage(acc)
        if acc.stage_rows == M:
            self.ctx.decide("gemm.store", "staged")
            return seq([self.store_all(acc, stage), self.ctx.copy(stage, dst, atomic)])
        self.ctx.decide("gemm.store", "staged_in_chunks")
        # Chunks of stage_rows rows: store the chunk's matrices, copy the chunk out. The
        # chunks are unrolled: which simdgroup writes which stage element changes from
        # chunk to chunk, and the barrier planner sees a loop's iterations as one access set.
        rows = acc.stage_rows
        out = []
        for c in range(M // rows):
            mins = list(dst.mins)
            mins[dims[0]] = mins[dims[0]] + c * rows if c else mins[dims[0]]
            extents = None if dst.extents is None else tuple(
                i32(rows) if d == dims[0] else e for d, e in enumerate(dst.extents))
            part = ops.Region(dst.buffer, tuple(mins), extents)
            out += [self.store_all(acc, stage, chunk=c), self.ctx.copy(stage, part, atomic)]
        return seq(out)

    def _stageless_copy(self, acc, src, dst) -> bool:
        """Whether T.copy(src, dst) needs no stage of accumulator `acc`: it does not touch
        acc, or stores acc straight into a float32 tile (copy_out's direct case)."""
        if not src.buffer.same_as(acc) and not dst.buffer.same_as(acc):
            return True
        return src.buffer.same_as(acc) and \
            self._direct_target(dst, tuple(int(d) for d in acc.ty.shape))

    def _direct_target(self, dst, shape) -> bool:
        """Whether T.copy(C, dst) of a C of `shape` stores its matrices straight into dst:
        a float32 tile in dst's last two dimensions, in threadgroup memory or wholly
        inside its device tensor."""
        rank = len(dst.buffer.ty.shape)
        dims = _tile_dims(dst)
        return (ops.buffer_dtype(dst.buffer) == "float32" and dims == (rank - 2, rank - 1)
                and (dst.scope == "shared"
                     or (dst.scope == "global" and self.inside(dst, dims, shape))))

    def store_edges_staged(self, acc, dst, dims):
        """T.copy(C, dst) into float32 device memory that may end inside the tile: each 8x8
        matrix wholly inside dst is simdgroup_store'd there directly, the others into the
        stage, from which the threads copy just those tiles' elements, masked at the
        buffer's edge."""
        shape = dst.buffer.ty.shape
        r0, c0 = dst.mins[dims[0]], dst.mins[dims[1]]
        d_ptr, d_stride = self.tile_pointer(dst)

        def inside(row, col):
            return tirx.And(r0 + row + TILE <= shape[dims[0]], c0 + col + TILE <= shape[dims[1]])

        def touches(row, col):
            return tirx.And(r0 + row < shape[dims[0]], c0 + col < shape[dims[1]])

        analyzer = self.ctx.analyzer()
        if all(analyzer.can_prove(tirx.floormod(x, TILE) == 0)
               for x in (r0, c0, shape[dims[0]], shape[dims[1]])):
            # no tile straddles the edge: the ones inside are stored, the others dropped
            return self._each_matrix(acc, lambda mat, row, col: tirx.IfThenElse(
                inside(row, col), matrix.store(mat, d_ptr, d_stride, col, row), None))

        stage = self.stage(acc)
        s_ptr, s_stride = self.tile_pointer(stage)

        def make(mat, row, col):
            return tirx.IfThenElse(inside(row, col),
                                   matrix.store(mat, d_ptr, d_stride, col, row),
                                   tirx.IfThenElse(touches(row, col), matrix.store(
                                       mat, s_ptr, s_stride, col, row), None))

        def edge(tile_idx):
            row, col = (tirx.floordiv(t, TILE) * TILE for t in tile_idx[-2:])
            return tirx.Not(inside(row, col))

        return seq([self._each_matrix(acc, make), self.ctx.copy(stage, dst, when=edge)])

    def inside(self, region, dims, tile) -> bool:
        """Whether the tile provably lies inside its (global) buffer."""
        analyzer = self.ctx.analyzer()
        shape = region.buffer.ty.shape
        claims = [self._known(region.mins[d]) + e <= shape[d] for d, e in zip(dims, tile)]
        guards = [self._known(g) for g in self.ctx.guards]  # `if ty < tiles_m:` around it
        if not guards:
            return all(analyzer.can_prove(c) for c in claims)
        with analyzer.constraint_scope(tirx.all(*guards) if len(guards) > 1 else guards[0]):
            return all(analyzer.can_prove(c) for c in claims)

    def _known(self, expr):
        """`expr` with the kernel's once-assigned scalars replaced by their values."""
        for _ in range(4):  # scalars defined from scalars, a few levels deep
            if not any(ld.source in self.scalars for ld in loads(expr)):
                break
            expr = map_nodes(expr, (tvm.ir.TensorLoad, lambda ld: self.scalars.get(
                ld.source, ld) if ld.source in self.scalars else ld))
        return expr

    # ---- T.Parallel over accumulators -----------------------------------------------------
    def _touched(self, loop):
        read = [ld.source for ld in loads(loop) if ld.source in self.accumulators]
        written = []
        walk(loop, lambda s: written.append(s.buffer) if isinstance(s, tirx.BufferStore)
             and s.buffer in self.accumulators else None)
        touched = []
        for b in read + written:
            if not any(b.same_as(t) for t in touched):
                touched.append(b)
        return touched, written

    def parallel(self, loop):
        touched, written = self._touched(loop)
        accs = [self.accumulators[b] for b in touched]
        if len(accs) == 1 and accs[0].stage_rows < accs[0].layout.shape[0]:
            return self.parallel_chunks(loop, accs[0], bool(written))
        stages = {a.fragment: self.stage(a).buffer for a in accs}
        pre = [self.store_all(a, self.stage(a)) for a in accs]

        def load(ld):
            stage = stages.get(ld.source)
            return ld if stage is None else tirx.BufferLoad(stage, list(ld.indices))

        def store(st):
            if isinstance(st, tirx.BufferStore) and st.buffer in stages:
                return tirx.BufferStore(stages[st.buffer], st.value, list(st.indices))
            return st

        loop = rewrite(map_nodes(loop, (tvm.ir.TensorLoad, load)), store)
        post = [self.load_all(a, self.stage(a)) for a in accs
                if any(a.fragment.same_as(w) for w in written)]
        return seq(pre + [self.ctx.parallel(loop)] + post)


    def parallel_chunks(self, loop, acc, written):
        """A T.Parallel(M, N) over an accumulator whose whole float32 stage does not fit
        (a ReLU over a 128x128 tile): for each chunk of stage_rows rows, store the chunk's
        matrices, run the loop's rows of the chunk on the stage, load them back if written.
        Unrolled, as in copy_out: each chunk is its own set of accesses for the planner."""
        rows, stage = acc.stage_rows, self.stage(acc)
        row_var = loop.loop_var
        out = []
        for c in range(acc.layout.shape[0] // rows):
            shift = c * rows
            body = substitute(loop.body, {row_var: row_var + shift}) if shift else loop.body

            def load(ld, shift=shift):
                if not ld.source.same_as(acc.fragment):
                    return ld
                return tirx.BufferLoad(stage.buffer, [ld.indices[0] - shift, *ld.indices[1:]])

            def store(st, shift=shift):
                if isinstance(st, tirx.BufferStore) and st.buffer.same_as(acc.fragment):
                    return tirx.BufferStore(stage.buffer, st.value,
                                            [st.indices[0] - shift, *st.indices[1:]])
                return st

            body = rewrite(map_nodes(body, (tvm.ir.TensorLoad, load)), store)
            part = tirx.For(row_var, i32(0), i32(rows), tirx.ForKind.PARALLEL, body,
                            loop.thread_binding, loop.annotations)
            out += [self.store_all(acc, stage, chunk=c), self.ctx.parallel(part)]
            if written:
                out.append(self.load_all(acc, stage, chunk=c))
        return seq(out)


def _whole(buf):
    shape = tuple(buf.ty.shape)
    return ops.Region(buf, tuple(i32(0) for _ in shape), shape)


def _tile_dims(region) -> tuple:
    """The buffer dimensions a 2-D tile of `region` spans (as in lower_tile_ops' copies)."""
    rank = len(region.mins)
    if region.extents is None:
        return (rank - 2, rank - 1)
    return tuple(d for d, e in enumerate(region.extents) if as_int(e) != 1)

