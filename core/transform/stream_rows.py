"""Pass `stream_rows`: rows too long for registers are streamed in chunks, not held.

A fragment is held in thread-private registers (core/ir/layout.py: each thread keeps its
`slots` elements). When one row-tile fragment needs more bytes per thread than
`METAL.fragment_register_budget_bytes` (core/target.py, docs/architecture.md "Streamed
rows"), this pass rewrites its life into loops over chunks of its last dimension that
re-read the rows from device memory, so the thread holds one chunk at a time.

Expects: a verified PrimFunc (T.Parallel loops are PARALLEL For nests), before
`layout_inference`. Recognizes, for a fragment F of shape (R, N) over the budget, a window
of consecutive statements of one block (the kernel's, or a serial loop's body while F is
allocated outside it) that are F's only uses in the kernel:

    T.copy(G[r0:r0+R, c0:c0+N], F)               G a device tensor; first
    for i, j in T.Parallel(R, N): F[i, j] = f    f pure: reads F[i, j], (R,) fragments
                                                 at [i], and no other buffer; any number
    T.reduce_<kind>(F, dst, dim=1, clear)        dst an (R,) fragment no earlier update
                                                 reads; any number
    T.copy(F, G2[r0':r0'+R, c0':c0'+N])          optional, last; the region ends where G2
                                                 does (the last chunk's store is masked)

Guarantees: the window is replaced, with the same results, by one pass per reduction
and a final pass for the copy out. Each pass is a serial loop over ceil(N / C) chunks:
it loads the chunk into an (R, C) fragment, re-applies the updates before that point
(with j shifted to the chunk), and folds the chunk into a per-thread partial fragment of
the chunk's shape (same layout, so no thread exchanges anything in the loop); after the
loop one T.reduce of the partials combines the threads, so each reduction still costs one
cross-thread combine. Columns past N in a ragged last chunk are left out of the partials
(their update is guarded). `reduce_sum` of exp(F - m), where m = `reduce_max` of the same
F and that exp update is the only statement between them, is one online pass (a running
maximum per partial and a sum rescaled when the maximum grows), whose pairs one
`tl.reduce_online` combines (core/transform/lower_reduce.py: one barrier for both
statistics), so softmax reads a row twice. C gives each thread 4 elements of every chunk
(the smallest chunk whose (R, C) tile deals every thread whole 4-runs): the fewest
registers and the most threads resident. Each chunk loop carries the
annotation `tl.streamed` (its description), which the MSL printer emits as a comment
(`// streamed: ...`).

Anything else is left as it is, including fragments over the budget that do not have this
shape (they compile as before, held whole), windows whose partials the reduction layout
cannot combine, and windows whose reduction results a T.Parallel outside the window reads
in a layout the chunked reduction would not give them (core/transform/layout_inference.py).

Decisions noted (core/ir/decisions.py): `stream_rows`, for each window streamed (an
online softmax pass, plain reductions, a ragged last chunk).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import gcd

import tvm
from tvm import tirx

from core.ir import decisions, ops
from core.ir.annotations import STREAMED
from core.ir.kernel import map_kernels
from core.ir.layout import FragmentLayout, NoLayout, reduce_layout
from core.ir.ops import FRAGMENT
from core.ir.stmt import (as_int, children, free_vars, i32, loads, map_nodes, rebuild,
                          rewrite, seq, substitute, visit_nodes)
from core.target import DTYPES, METAL
from core.transform.lower_reduce import accumulator_dtype, combine, identity

CHUNK_RUN = 4          # elements per thread run in a chunk: one 4-wide load per run


# ---- the recognized window ---------------------------------------------------------------

@dataclass(frozen=True)
class _Update:
    """`F[i, j] = value` over T.Parallel(R, N)."""
    i: object
    j: object
    value: object


@dataclass(frozen=True)
class _Reduce:
    kind: str
    dst: object
    clear: bool


@dataclass(frozen=True)
class _Window:
    frag: object            # F
    start: int              # index of the copy in, in the block's statements
    stop: int               # one past the last statement of the window
    source: ops.Region      # G tile
    steps: tuple            # _Update | _Reduce, in order
    sink: ops.Region | None  # G2 tile of the copy out


def _shape(buf) -> tuple:
    return tuple(as_int(d) for d in buf.ty.shape)


def _uses(stmt, buf) -> bool:
    return any(v.same_as(buf) for v in free_vars(stmt))


def _fragment_bytes(buf, threads) -> int:
    return FragmentLayout.for_tile(_shape(buf), threads).slots * \
        DTYPES[ops.buffer_dtype(buf)].bytes


def _tile_call(s, name):
    return isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, name)


def _device_tile(region, shape) -> bool:
    """A 2-D device tile of exactly `shape` (or of the other operand's)."""
    if region.scope != "global" or len(_shape(region.buffer)) != 2:
        return False
    return region.extents is None or tuple(as_int(e) for e in region.extents) == shape


def _update(s, frag, R, N, per_row):
    """The _Update of a T.Parallel(R, N) statement `F[i, j] = f`, or None."""
    loops = []
    while isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL:
        loops.append(s)
        s = s.body
    if len(loops) != 2 or tuple(as_int(lp.extent) for lp in loops) != (R, N):
        return None
    i, j = (lp.loop_var for lp in loops)
    if not (isinstance(s, tirx.BufferStore) and s.buffer.same_as(frag)
            and len(s.indices) == 2 and s.indices[0].same_as(i) and s.indices[1].same_as(j)):
        return None
    for ld in loads(s.value):
        if ld.source.same_as(frag):
            ok = ld.indices[0].same_as(i) and ld.indices[1].same_as(j)
        else:
            ok = (ops.buffer_scope(ld.source) == FRAGMENT and _shape(ld.source) == (R,)
                  and ld.indices[0].same_as(i))
            per_row.append(ld.source)
        if not ok:
            return None
    calls = []
    visit_nodes(s.value, (tvm.ir.Call, calls.append))
    if any(isinstance(c.op, tvm.ir.Op) and c.op.name.startswith("tl.") for c in calls):
        return None
    return _Update(i, j, s.value)


def _window(stmts, at, frag):
    """The _Window of F starting with its copy in at `stmts[at]`, or None."""
    R, N = _shape(frag)
    first = stmts[at]
    if not _tile_call(first, "tl.copy"):
        return None
    src, dst = (ops.decode_region(a) for a in first.value.args)
    if not (dst.buffer.same_as(frag) and _device_tile(src, (R, N))):
        return None
    steps, sink, read = [], None, []
    k = at + 1
    while k < len(stmts) and _uses(stmts[k], frag):
        s = stmts[k]
        if _tile_call(s, "tl.reduce"):
            rsrc, rdst = (ops.decode_region(a).buffer for a in s.value.args[:2])
            if not rsrc.same_as(frag) or int(s.value.args[3]) != 1 or \
                    ops.buffer_scope(rdst) != FRAGMENT or _shape(rdst) != (R,) or \
                    rdst.same_as(frag) or any(b.same_as(rdst) for b in read):
                return None
            steps.append(_Reduce(str(s.value.args[2].value), rdst, bool(int(s.value.args[4]))))
        elif _tile_call(s, "tl.copy"):
            csrc, cdst = (ops.decode_region(a) for a in s.value.args)
            G2 = cdst.buffer
            if not (csrc.buffer.same_as(frag) and _device_tile(cdst, (R, N))):
                return None
            end = tvm.sym.Analyzer().simplify(cdst.mins[1] + N - _shape(G2)[1])
            if as_int(end) != 0:
                return None
            sink = cdst
            k += 1
            break
        else:
            per_row = []
            u = _update(s, frag, R, N, per_row)
            if u is None:
                return None
            read += per_row
            steps.append(u)
        k += 1
    if not any(isinstance(s, _Reduce) for s in steps):
        return None
    return _Window(frag, at, k, src, tuple(steps), sink)


# ---- the streamed form -------------------------------------------------------------------

def _chunk(R, N, threads):
    """Columns per chunk: the smallest C, a multiple of CHUNK_RUN, whose (R, C) tile deals
    every thread whole runs (R * C a multiple of threads * CHUNK_RUN)."""
    unit = threads * CHUNK_RUN // gcd(threads * CHUNK_RUN, R)
    return unit * CHUNK_RUN // gcd(unit, CHUNK_RUN)


def _parallel(R, C, make_body):
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    body = make_body(i, j)
    inner = tirx.For(j, i32(0), i32(C), tirx.ForKind.PARALLEL, body)
    return tirx.For(i, i32(0), i32(R), tirx.ForKind.PARALLEL, inner)


def _fragment(name, shape, dtype):
    return tirx.decl_buffer(shape, dtype, name, scope=FRAGMENT)


def _whole(buf):
    return ops.encode_region(buf, [i32(0)] * len(buf.ty.shape))


def _reduce(src, dst, kind, clear):
    return tirx.Evaluate(ops.call("tl.reduce", _whole(src), _whole(dst), tvm.ir.StringImm(kind),
                                  i32(1), i32(int(clear))))


def _fill(buf, value):
    return tirx.Evaluate(ops.call("tl.fill", ops.encode_region(
        buf, [i32(0)] * len(buf.ty.shape), [i32(d) for d in _shape(buf)]), value))


class _Streamer:
    """Builds the passes of one window (see the module docstring)."""

    def __init__(self, w: _Window, threads: int, readers: list):
        self.w, self.threads, self.readers = w, threads, readers
        self.R, self.N = _shape(w.frag)
        self.C = _chunk(self.R, self.N, threads)
        self.chunks = -(-self.N // self.C)
        self.dtype = ops.buffer_dtype(w.frag)
        self.chunk_frag = _fragment(f"{w.frag.name}_chunk", (self.R, self.C), self.dtype)
        self.allocs = [self.chunk_frag]
        self.loops = 0
        # the `stream_rows` decisions this window takes (core/ir/decisions.py)
        self.kinds = {"ragged_chunk"} if self.N % self.C else set()

    def feasible(self, window_stmts) -> bool:
        """At least two chunks, a chunk layout the reductions can combine, and results laid
        out as before wherever a T.Parallel outside the window reads them."""
        if self.chunks < 2:
            return False
        try:
            chunked = reduce_layout(FragmentLayout.for_tile((self.R, self.C), self.threads), 1,
                                    (self.R,))
            held = reduce_layout(FragmentLayout.for_tile((self.R, self.N), self.threads), 1,
                                 (self.R,))
        except NoLayout:
            return False
        if chunked == held:
            return True
        dsts = [s.dst for s in self.w.steps if isinstance(s, _Reduce)]
        return not any(b.same_as(d) and not any(loop.same_as(x) for x in window_stmts)
                       for loop, b in self.readers for d in dsts)

    def partial(self, name, dtype):
        buf = _fragment(f"{self.w.frag.name}_{name}", (self.R, self.C), dtype)
        self.allocs.append(buf)
        return buf

    def note(self, what) -> str:
        held = _fragment_bytes(self.w.frag, self.threads)
        return (f"streamed: {self.chunks} chunks of {self.C} over dim 1 of '{self.w.frag.name}' "
                f"({self.R} x {self.N}: {held} bytes per thread held whole, budget "
                f"{METAL.fragment_register_budget_bytes}); {what}")

    def valid(self, k, j):
        """Whether column j of chunk k is inside the row (None: always)."""
        return None if self.N % self.C == 0 else k * self.C + j < self.N

    def chunk_loop(self, updates, tail, what):
        """for k in chunks: load the chunk, apply `updates`, then `tail(k)` (statements)."""
        self.loops += 1
        k = tirx.Var("k" if self.loops == 1 else f"k{self.loops}", "int32")
        src = self.w.source
        load = tirx.Evaluate(ops.call("tl.copy", ops.encode_region(
            src.buffer, [src.mins[0], src.mins[1] + k * self.C], [i32(self.R), i32(self.C)]),
            _whole(self.chunk_frag)))
        body = [load] + [self.update(u, k) for u in updates] + tail(k)
        return tirx.For(k, i32(0), i32(self.chunks), tirx.ForKind.SERIAL, seq(body),
                        annotations={STREAMED: tvm.ir.StringImm(self.note(what))})

    def update(self, u: _Update, k):
        frag, chunk = self.w.frag, self.chunk_frag

        def body(i, j):
            value = substitute(u.value, {u.i: i, u.j: j + k * self.C})

            def relocate(ld):
                if ld.source.same_as(frag):
                    return tirx.BufferLoad(chunk, [i, j])
                return ld
            value = map_nodes(value, (tvm.ir.TensorLoad, relocate))
            return tirx.BufferStore(chunk, value, [i, j])
        return _parallel(self.R, self.C, body)

    def fold(self, partial, kind, k):
        """partial op= the chunk element (valid columns only)."""
        acc = ops.buffer_dtype(partial)
        unsigned = DTYPES[acc].kind == "uint"

        def body(i, j):
            x = tirx.BufferLoad(self.chunk_frag, [i, j])
            if self.dtype != acc:
                x = tirx.Cast(acc, x)
            if kind.startswith("abs") and not unsigned:
                x = tirx.abs(x)
            store = tirx.BufferStore(partial, combine(kind, tirx.BufferLoad(partial, [i, j]),
                                                      x), [i, j])
            valid = self.valid(k, j)
            return store if valid is None else tirx.IfThenElse(valid, store, None)
        return _parallel(self.R, self.C, body)

    def reduction(self, updates, r: _Reduce):
        """Pass for one reduction: per-thread partials over the chunks, one T.reduce."""
        acc = accumulator_dtype(self.dtype)
        partial = self.partial(f"{r.kind}", acc)
        plain = {"abssum": "sum", "absmax": "max"}.get(r.kind, r.kind)
        return [_fill(partial, identity(r.kind, acc)),
                self.chunk_loop(updates, lambda k: [self.fold(partial, r.kind, k)],
                                f"per-thread partial {r.kind} into '{r.dst.name}'"),
                _reduce(partial, r.dst, plain, r.clear)]

    def online(self, updates, mx: _Reduce, sm: _Reduce):
        """One pass for m = max(F), s = sum(exp(F - m)): running (max, rescaled sum)."""
        run_max, run_sum = self.partial("max", "float32"), self.partial("sum", "float32")
        lowest = tirx.min_value("float32")   # not -inf: exp(-inf) is not 0 under fast math

        def step(k):
            def body(i, j):
                x, m = tirx.BufferLoad(self.chunk_frag, [i, j]), tirx.BufferLoad(run_max, [i, j])
                s = tirx.BufferLoad(run_sum, [i, j])
                e = tirx.exp(-tirx.abs(x - m))          # exp(m - x) or exp(x - m), <= 1
                new_sum = tirx.Select(m < x, s * e + tirx.const(1.0, "float32"), s + e)
                stores = seq([tirx.BufferStore(run_sum, new_sum, [i, j]),
                              tirx.BufferStore(run_max, tirx.Max(m, x), [i, j])])
                valid = self.valid(k, j)
                return stores if valid is None else tirx.IfThenElse(valid, stores, None)
            return [_parallel(self.R, self.C, body)]

        return [_fill(run_max, lowest), _fill(run_sum, tirx.const(0.0, "float32")),
                self.chunk_loop(updates, step, f"online max into '{mx.dst.name}' and "
                                               f"sum of exp into '{sm.dst.name}'"),
                tirx.Evaluate(ops.call("tl.reduce_online", *(_whole(b) for b in (
                    run_max, run_sum, mx.dst, sm.dst))))]

    def store(self, updates):
        sink = self.w.sink

        def tail(k):
            return [tirx.Evaluate(ops.call("tl.copy", _whole(self.chunk_frag), ops.encode_region(
                sink.buffer, [sink.mins[0], sink.mins[1] + k * self.C],
                [i32(self.R), i32(self.C)])))]
        return [self.chunk_loop(updates, tail, "the updates, then the store")]

    def build(self) -> list:
        steps, body, done, at = self.w.steps, [], [], 0
        while at < len(steps):
            s = steps[at]
            if isinstance(s, _Update):
                done.append(s)
                at += 1
            elif self._online_pair(at):
                self.kinds.add("online_softmax")
                body += self.online(list(done), s, steps[at + 2])
                done.append(steps[at + 1])
                at += 3
            else:
                self.kinds.add("reductions")
                body += self.reduction(list(done), s)
                at += 1
        if self.w.sink is not None:
            body += self.store(done)
        return [tirx.AllocBuffer(b) for b in self.allocs] + body

    def _online_pair(self, at) -> bool:
        """steps[at:at+3] are reduce_max -> F = exp(F - m) -> reduce_sum (float32, clear)."""
        steps = self.w.steps
        if at + 2 >= len(steps) or self.dtype != "float32":
            return False
        mx, up, sm = steps[at:at + 3]
        if not (isinstance(mx, _Reduce) and isinstance(up, _Update) and isinstance(sm, _Reduce)
                and (mx.kind, sm.kind) == ("max", "sum") and mx.clear and sm.clear):
            return False
        v = up.value
        if not (isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op)
                and v.op.same_as(tvm.ir.Op.get("tirx.exp")) and isinstance(v.args[0], tirx.Sub)):
            return False
        a, b = v.args[0].a, v.args[0].b
        return (isinstance(a, tvm.ir.TensorLoad) and a.source.same_as(self.w.frag)
                and isinstance(b, tvm.ir.TensorLoad) and b.source.same_as(mx.dst))


# ---- the pass ------------------------------------------------------------------------------

@dataclass
class _Kernel:
    """What the pass needs to know of one kernel body beyond the block it rewrites."""
    threads: int
    readers: list           # (outermost T.Parallel loop, buffer it reads)
    users: list             # (statement, buffers it references): every statement that is no
                            # block, serial loop, `if` or attribute (those are `headers`)
    headers: list           # buffers referenced by the loop bounds, conditions, attributes
    streamed: list          # fragments whose window was rewritten (their AllocBuffer goes)
    decided: set = field(default_factory=set)   # "stream_rows=..." decisions taken

    @classmethod
    def of(cls, body, threads):
        readers, users, headers = [], [], []

        def visit(s):
            if isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL:
                readers.extend((s, ld.source) for ld in loads(s))
            if isinstance(s, tirx.SeqStmt):
                pass
            elif isinstance(s, tirx.For) and s.kind != tirx.ForKind.PARALLEL:
                headers.extend(free_vars(s.min) + free_vars(s.extent))
            elif isinstance(s, tirx.IfThenElse):
                headers.extend(free_vars(s.condition))
            elif isinstance(s, tirx.AttrStmt):
                headers.extend(free_vars(s.value))
            elif not isinstance(s, tirx.AllocBuffer):
                users.append((s, free_vars(s)))
                return
            for k in children(s):
                visit(k)

        visit(body)
        return cls(threads, readers, users, headers, [])

    def only_used_in(self, frag, window_stmts) -> bool:
        """Every statement referencing `frag` (its allocation aside) is in the window."""
        if any(v.same_as(frag) for v in self.headers):
            return False
        return all(any(s.same_as(w) for w in window_stmts)
                   for s, refs in self.users if any(v.same_as(frag) for v in refs))


def _stream_block(stmts, kernel: _Kernel):
    """The block's statements with every recognized window over the budget streamed."""
    out, at = [], 0
    while at < len(stmts):
        s = stmts[at]
        w = None
        if _tile_call(s, "tl.copy"):
            dst = ops.decode_region(s.value.args[1]).buffer
            if ops.buffer_scope(dst) == FRAGMENT and len(_shape(dst)) == 2 and \
                    _fragment_bytes(dst, kernel.threads) > METAL.fragment_register_budget_bytes:
                w = _window(stmts, at, dst)
        streamer = None
        if w is not None and kernel.only_used_in(w.frag, stmts[w.start:w.stop]):
            streamer = _Streamer(w, kernel.threads, kernel.readers)
        if streamer is None or not streamer.feasible(stmts[w.start:w.stop]):
            out.append(_stream(s, kernel))
            at += 1
            continue
        kernel.streamed.append(w.frag)
        out += streamer.build()
        kernel.decided |= {decisions.choice("stream_rows", k) for k in streamer.kinds}
        at = w.stop
    return out


def _stream(stmt, kernel: _Kernel):
    if isinstance(stmt, tirx.SeqStmt):
        return seq(_stream_block(list(stmt.seq), kernel))
    kids = children(stmt)
    if not kids or (isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.PARALLEL):
        return stmt
    new = [_stream(k, kernel) for k in kids]
    return rebuild(stmt, new) if any(not a.same_as(b) for a, b in zip(new, kids)) else stmt


def _per_kernel(nest, decided: set):
    kernel = _Kernel.of(nest.body, nest.num_threads)
    body = _stream(nest.body, kernel)
    def held(s):
        return isinstance(s, tirx.AllocBuffer) and any(s.buffer.same_as(f)
                                                       for f in kernel.streamed)

    decided |= kernel.decided
    if kernel.streamed:     # the whole-row fragments are no longer used: drop them
        body = rewrite(body, lambda s: seq([x for x in s.seq if not held(x)])
                       if isinstance(s, tirx.SeqStmt) else s)
    return nest.wrap(body)


def stream_rows(func: tirx.PrimFunc) -> tirx.PrimFunc:
    decided = set()
    streamed = map_kernels(func, lambda nest: _per_kernel(nest, decided))
    return decisions.note(streamed, decided)
