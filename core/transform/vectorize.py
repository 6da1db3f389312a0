"""Pass `vectorize`: turn per-thread run loops into vector loads and stores.

Expects: lowered TIR whose candidate loops (from `lower_tile_ops`) carry the annotation
`tl.vector_lanes = v` (a loop `for l in range(v)` over one run of the distribution).
Guarantees: a candidate becomes a `ForKind.VECTORIZED` loop, then TVM's VectorizeLoop
rewrites it into Ramp/Broadcast vector expressions, only when all of these are proven:
  - the body is one store, optionally under a condition that does not depend on l, whose
    last index depends on l (lanes storing into one element are a reduction, `r[i] += x`);
  - every access that depends on l is `buf[..., base + l]` with the other indices free
    of l, `base` a multiple of v (analyzer's modular set) and the buffer's last extent a
    multiple of v (so the flat address is aligned to the vector size);
  - l appears nowhere else, selects (`if_then_else`) do not depend on l;
  - the body makes no atomic update (MSL has no vector atomics);
  - every dtype involved is float32/float16/bfloat16/int32/int8/uint8, and v x bits <= 128
    (bool and int64 stay scalar).
Register vectors follow the target's rules (core/target.py, docs/architecture.md): at most
METAL.bf16_register_lanes (2) bf16 lanes, METAL.register_lanes (4) of the other types. A
candidate wider than that (4 or 8 bfloats, 8 halves, 8 or 16 bytes: a tile copy's 16-byte
run) that only moves bits (the stored value is a load of the stored dtype, or a value
independent of l, i.e. a broadcast) is vectorized whole; the printer moves it as a packed
integer carrier (`uint2` / `uint4`, core/codegen/msl.py), never computing on it; a choice
between such values by a condition independent of l (an edge tile's bounds check) moves
bits too.
A candidate that does not vectorize at v lanes (any other wide one, or one whose alignment
is proven only for fewer lanes: a device row of 70 halves is 2-aligned, not 4-aligned) is
split into `for lo in range(v // w)` (serial) over a w-lane vector loop, l = w * lo + li,
for the widest w in v/2, v/4, ..., 2 at which the proof holds. A store into threadgroup
memory whose value cannot be computed as a vector (strided or unaligned device reads, a
per-element decode) gathers its lanes one by one into a local run (`S_run`), then stores
the run as one vector when that store is proven. Other candidates become plain serial
loops. The loop bodies are simplified with the analyzer under the enclosing loop ranges
either way.

Decisions noted (core/ir/decisions.py): `vector.lanes`, the lanes of each vectorized
loop planned ("none" when there is none).
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.sym import Analyzer

from core.ir import decisions, ops
from core.ir.annotations import VECTOR_LANES
from core.ir.kernel import map_kernels
from core.ir.stmt import (as_int, atomics_in, bind_ranges, children, choice_parts, free_vars, items,
                          loads, map_nodes, rebuild, seq, substitute, visit_nodes, walk)
from core.target import METAL, bits

VECTOR_DTYPES = METAL.vector_dtypes
MAX_VECTOR_BITS = METAL.max_access_bytes * 8


def _simplify(stmt, analyzer):
    def simp_load(ld):
        return tirx.BufferLoad(ld.source, [analyzer.simplify(i) for i in items(ld.indices)])

    def simp(e):
        e = analyzer.simplify(e)
        return map_nodes(e, (tvm.ir.TensorLoad, simp_load))

    if isinstance(stmt, tirx.BufferStore):
        return tirx.BufferStore(stmt.buffer, simp(stmt.value),
                                [simp(i) for i in items(stmt.indices)])
    if isinstance(stmt, tirx.IfThenElse):
        return tirx.IfThenElse(simp(stmt.condition), _simplify(stmt.then_case, analyzer),
                               None if stmt.else_case is None
                               else _simplify(stmt.else_case, analyzer))
    kids = children(stmt)
    return rebuild(stmt, [_simplify(k, analyzer) for k in kids]) if kids else stmt


def _depends(e, var) -> bool:
    return any(v.same_as(var) for v in free_vars(e))


class _Check:
    """Proves a candidate body vectorizable at `lanes`; `carrier`: a copy whose vectors,
    wider than their type's register vector, are packed integer carriers."""

    def __init__(self, lane, lanes, analyzer, carrier=False):
        self.lane, self.lanes, self.analyzer = lane, lanes, analyzer
        self.carrier = carrier

    def access_ok(self, buf, indices) -> bool:
        *outer, last = indices
        if any(_depends(i, self.lane) for i in outer):
            return False
        if not _depends(last, self.lane):
            return True
        base = self.analyzer.simplify(last - self.lane)
        if _depends(base, self.lane):
            return False
        mod = self.analyzer.modular_set(base)
        extent = as_int(buf.ty.shape[-1])
        # the last extent is the stride of the outer indices: it keeps rows aligned
        rows_aligned = not outer or (extent is not None and extent % self.lanes == 0)
        return mod.coeff % self.lanes == 0 and mod.base % self.lanes == 0 and rows_aligned

    def dtype_ok(self, dtype) -> bool:
        dtype = str(dtype)
        if dtype not in VECTOR_DTYPES or bits(dtype) * self.lanes > MAX_VECTOR_BITS:
            return False
        if self.lanes > METAL.vector_lanes(dtype):   # wider than its register vector
            return self.carrier and METAL.carrier_words(dtype, self.lanes) is not None
        return True

    def expr_ok(self, e) -> bool:
        lds = loads(e)
        for ld in lds:
            if not self.dtype_ok(ld.source.ty.dtype) or not self.access_ok(ld.source,
                                                                        ld.indices):
                return False
        # every dependence on the lane must sit in an (already checked) load index
        stripped = map_nodes(
            e, (tvm.ir.TensorLoad, lambda ld: tirx.const(0, str(ld.ty.dtype))))
        if _depends(stripped, self.lane):
            return False
        # every intermediate value must have a vectorizable dtype (conditions are bool)
        bad = []

        def visit(node):
            dt = getattr(getattr(node, "ty", None), "dtype", None)
            if dt is not None and str(dt) not in ("bool", "int32") and not self.dtype_ok(dt):
                bad.append(node)

        visit_nodes(e, (tvm.ir.Expr, visit))
        return not bad

    def body_ok(self, body) -> bool:
        if atomics_in(body):  # MSL has no vector atomics
            return False
        if isinstance(body, tirx.IfThenElse):
            if body.else_case is not None or _depends(body.condition, self.lane):
                return False
            body = body.then_case
        if not isinstance(body, tirx.BufferStore):
            return False
        if not _depends(body.indices[-1], self.lane):  # every lane into one element: a
            return False                              # reduction (r[i] += x), not a store
        return (self.dtype_ok(body.buffer.ty.dtype)
                and self.access_ok(body.buffer, body.indices)
                and self.expr_ok(body.value))


class _Bounds:
    """The analyzer of one kernel's candidates: each variable is bound once, when a
    candidate first needs its range (an analyzer per candidate bound every enclosing range
    again, through the FFI). A variable held with another range (one Var for two loops)
    gets the candidate a fresh analyzer, bound as before."""

    def __init__(self):
        self.analyzer = Analyzer()
        self.held = {}   # Var handle -> (var, min, extent) bound in `analyzer`

    def analyzer_for(self, ranges: dict):
        new = {}
        for var, (lo, ext) in ranges.items():
            held = self.held.get(var.__chandle__())
            if held is None:
                new[var] = (lo, ext)
            elif not (held[1].same_as(lo) and held[2].same_as(ext)):
                return bind_ranges(Analyzer(), ranges)
        bind_ranges(self.analyzer, new)
        for var, (lo, ext) in new.items():
            self.held[var.__chandle__()] = (var, lo, ext)
        return self.analyzer


def _plan(stmt, ranges, bounds):
    if isinstance(stmt, tirx.For):
        ranges = {**ranges, stmt.loop_var: (stmt.min, stmt.extent)}
        if VECTOR_LANES in (stmt.annotations or {}):
            return _plan_candidate(stmt, ranges, bounds)
    if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "thread_extent":
        ranges = {**ranges, stmt.node.var: (tirx.const(0, "int32"), stmt.value)}
    kids = children(stmt)
    if not kids:
        return stmt
    planned = [_plan(k, ranges, bounds) for k in kids]
    if all(a.same_as(b) for a, b in zip(planned, kids)):
        return stmt                   # no candidate below: keep the node
    return rebuild(stmt, planned)


def _store_of(body):
    """The one store of a candidate body (under at most one condition), or None."""
    if isinstance(body, tirx.IfThenElse) and body.else_case is None:
        body = body.then_case
    return body if isinstance(body, tirx.BufferStore) else None


def _is_bit_copy(store, lane) -> bool:
    """The stored value moves bits only: a load of the stored dtype, a value independent of
    the lane (a broadcast of one value), or a choice between two such values by a condition
    independent of the lane (an edge tile's `in bounds ? load : 0`)."""
    return _moves_bits(store.value, str(store.buffer.ty.dtype), lane)


def _moves_bits(value, dtype, lane) -> bool:
    if str(value.ty.dtype) != dtype:
        return False
    if isinstance(value, tvm.ir.TensorLoad):
        return str(value.source.ty.dtype) == dtype
    if not _depends(value, lane):
        return True
    choice = choice_parts(value)
    return choice is not None and not _depends(choice[0], lane) and all(
        _moves_bits(v, dtype, lane) for v in choice[1:])


def _split(loop, body, width, ranges, bounds):
    """`for l in range(v)` -> `for lo in range(v // w): for li in vectorized(w)`,
    l = w * lo + li, when the body, simplified under those ranges (a bound check on l can
    become one on lo), vectorizes at w lanes; else None."""
    lane = loop.loop_var
    lanes = as_int(loop.extent)
    inner = tirx.Var(f"{lane.name}_v", "int32")
    outer = tirx.Var(f"{lane.name}_o", "int32")
    zero = tirx.const(0, "int32")
    analyzer = bounds.analyzer_for({**ranges,
                                    outer: (zero, tirx.const(lanes // width, "int32")),
                                    inner: (zero, tirx.const(width, "int32"))})
    body = _simplify(substitute(body, {lane: outer * width + inner}), analyzer)
    if not _vector_ok(body, _store_of(body), inner, width, analyzer):
        return None
    vector = tirx.For(inner, zero, tirx.const(width, "int32"), tirx.ForKind.VECTORIZED, body,
                      None, {})
    return tirx.For(outer, zero, tirx.const(lanes // width, "int32"), tirx.ForKind.SERIAL,
                    vector, None, {})


def _vector_ok(body, store, lane, lanes, analyzer) -> bool:
    """The body vectorizes at `lanes`: as registers, or as a copy's packed carrier."""
    if _Check(lane, lanes, analyzer).body_ok(body):
        return True
    return (store is not None
            and METAL.carrier_words(str(store.buffer.ty.dtype), lanes) is not None
            and _is_bit_copy(store, lane)
            and _Check(lane, lanes, analyzer, carrier=True).body_ok(body))


def _is_vector(loop) -> bool:
    """A vectorized loop, or a split one (serial over narrower vectorized loops)."""
    return isinstance(loop, tirx.For) and (loop.kind == tirx.ForKind.VECTORIZED or (
        isinstance(loop.body, tirx.For) and loop.body.kind == tirx.ForKind.VECTORIZED))


def _conjuncts(cond):
    if isinstance(cond, tirx.And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _lanes_form_an_interval(cond, lane, analyzer) -> bool:
    """Whether the lanes passing `cond` are one interval: every conjunct depending on the
    lane compares two sides whose difference is linear in it (a ragged-edge guard
    `base + l < n`, never a mask read from memory)."""
    for c in _conjuncts(cond):
        if not _depends(c, lane):
            continue
        if not isinstance(c, (tirx.LT, tirx.LE, tirx.GT, tirx.GE)) or loads(c):
            return False
        diff = c.a - c.b
        step = analyzer.simplify(substitute(diff, {lane: lane + 1}) - diff)
        if as_int(step) is None:
            return False
    return True


def _masked(loop, body, ranges, analyzer, bounds):
    """`for l: if (guard(l)) store` with a per-lane guard: when every lane passes (its
    first and last do, the passing lanes being an interval), the unguarded store runs as
    a vector; otherwise the lanes run one by one, each under its own guard. None when the
    store does not vectorize or the guard is not an interval of lanes."""
    lane, cond = loop.loop_var, body.condition
    if as_int(loop.step) not in (None, 1) or not _lanes_form_an_interval(cond, lane, analyzer):
        return None
    unguarded = tirx.For(lane, loop.min, loop.extent, tirx.ForKind.SERIAL, body.then_case,
                         None, {VECTOR_LANES: loop.annotations[VECTOR_LANES]}, loop.step)
    fast = _plan_candidate(unguarded, ranges, bounds)
    if not _is_vector(fast):
        return None
    last = loop.min + loop.extent - 1
    every_lane = analyzer.simplify(tirx.And(substitute(cond, {lane: loop.min}),
                                            substitute(cond, {lane: last})))
    lane_by_lane = tirx.For(lane, loop.min, loop.extent, tirx.ForKind.SERIAL, body, None, {},
                            loop.step)
    return tirx.IfThenElse(every_lane, fast, lane_by_lane)


def _plan_candidate(loop, ranges, bounds, gather=True):
    lanes = int(loop.annotations[VECTOR_LANES])
    analyzer = bounds.analyzer_for(ranges)
    body = _simplify(loop.body, analyzer)
    lane = loop.loop_var
    if isinstance(body, tirx.IfThenElse) and body.else_case is None \
            and _depends(body.condition, lane):
        masked = _masked(loop, body, ranges, analyzer, bounds)
        if masked is not None:
            return masked
    store = _store_of(body)
    ok = _vector_ok(body, store, lane, lanes, analyzer)
    if not ok and as_int(loop.min) == 0:
        # the widest narrower vector the proof allows (bf16 registers, odd alignment)
        width = lanes // 2
        while width >= 2 and lanes % width == 0:
            split = _split(loop, body, width, ranges, bounds)
            if split is not None:
                return split
            width //= 2
        staged = _through_registers(loop, body, ranges, bounds) if gather else None
        if staged is not None:
            return staged
    kind = tirx.ForKind.VECTORIZED if ok else tirx.ForKind.SERIAL
    return tirx.For(lane, loop.min, loop.extent, kind, body, None, {}, loop.step)


def _through_registers(loop, body, ranges, bounds):
    """`for l: S[b + l] = value(l)` into threadgroup memory whose value cannot be computed
    as a vector (a device row of odd length, strided reads, a per-element decode): the
    lanes' values are gathered one by one into a run of registers, then stored to S as one
    vector. None when even that store is not a vector."""
    if not isinstance(body, tirx.BufferStore) or ops.buffer_scope(body.buffer) != "shared" \
            or atomics_in(body):
        return None
    lane = loop.loop_var
    run = tirx.decl_buffer((as_int(loop.extent),), str(body.buffer.ty.dtype),
                           f"{body.buffer.name}_run", scope="local")
    gather = tirx.For(lane, loop.min, loop.extent, tirx.ForKind.SERIAL,
                      tirx.BufferStore(run, body.value, [lane]), None, {}, loop.step)
    moved = tirx.Var(f"{lane.name}_s", "int32")
    move = tirx.For(moved, loop.min, loop.extent, tirx.ForKind.SERIAL,
                    tirx.BufferStore(body.buffer, tirx.BufferLoad(run, [moved]),
                                     [substitute(i, {lane: moved}) for i in body.indices]),
                    None, {VECTOR_LANES: loop.annotations[VECTOR_LANES]})
    planned = _plan_candidate(move, {**ranges, moved: (loop.min, loop.extent)}, bounds,
                              gather=False)
    if not _is_vector(planned):
        return None
    return seq([tirx.AllocBuffer(run), gather, planned])


def _vector_widths(stmt) -> set:
    """The lanes of the vectorized loops planned in `stmt` (the `vector.lanes` choices)."""
    widths = set()

    def visit(s):
        if isinstance(s, tirx.For) and s.kind == tirx.ForKind.VECTORIZED:
            widths.add(str(as_int(s.extent)))
    walk(stmt, visit)
    return widths


def vectorize(func: tirx.PrimFunc) -> tirx.PrimFunc:
    func = map_kernels(func, lambda nest: _plan(nest.wrap(nest.body), {}, _Bounds()))
    widths = _vector_widths(func.body) or {"none"}
    func = decisions.note(func, {decisions.choice("vector.lanes", w) for w in widths})
    mod = tvm.tirx.transform.VectorizeLoop()(tvm.IRModule({"main": func}))
    return mod["main"]
