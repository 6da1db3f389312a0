"""What the passes keep or skip to compile faster must not change what they decide: the
direct structural walks of core/ir/stmt.py (`visit_nodes`, `map_nodes`), the footprints
core/ir/footprint.py enumerates only when a comparison needs them, and the plans
thread_sync keeps per statement and loop/guard context."""

import torch
import tvm
import tvm_ffi
from tvm import tirx

import core
import core.language as T
from core.ir.footprint import Footprint, LoopRange, may_race
from core.ir.stmt import collect, free_vars, map_nodes, substitute, visit_nodes
from harness.check import barriers
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


def _expr():
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    buf = tirx.decl_buffer((64,), "float32", name="S", scope="shared")
    e = tirx.BufferLoad(buf, [i * 8 + j]) + tirx.BufferLoad(buf, [j]) * tirx.Cast("float32", i)
    return e, i, j, buf


def test_visit_nodes_visits_what_structural_walk_visits_in_the_same_order():
    e, i, j, _ = _expr()
    for types in ((tvm.ir.Var,), (tvm.ir.TensorLoad,), (tvm.ir.Var, tvm.ir.TensorLoad),
                  (tvm.ir.Expr,)):
        mine, theirs = [], []
        visit_nodes(e, *((t, lambda n, t=t, out=mine: out.append((t, n))) for t in types))
        tvm_ffi.structural_walk(e, [(t, lambda n, t=t, out=theirs: out.append((t, n)))
                                    for t in types])
        assert len(mine) == len(theirs) > 0
        assert all(a[0] is b[0] and a[1].same_as(b[1]) for a, b in zip(mine, theirs))
    assert [v.name for v in free_vars(e)] == ["S", "i", "j"]  # the buffer is a Var too
    variables, lds = collect(e, tvm.ir.Var, tvm.ir.TensorLoad)
    assert len(lds) == 2 and any(v.same_as(i) for v in variables)


def test_map_nodes_replaces_like_structural_map():
    e, i, j, _ = _expr()
    k = tirx.Var("k", "int32")
    mine = map_nodes(e, (tvm.ir.Var, lambda v: k if v.same_as(i) else v))
    theirs = tvm_ffi.structural_map(e, (tvm.ir.Var, lambda v: k if v.same_as(i) else v))
    assert tvm_ffi.structural_equal(mine, theirs)
    assert not any(v.same_as(i) for v in free_vars(mine))
    assert any(v.same_as(k) for v in free_vars(mine))
    assert tvm_ffi.structural_equal(substitute(e, {i: k}), mine)


def _shared(n, name="S"):
    return tirx.decl_buffer((n,), "float32", name=name, scope="shared")


def test_lazy_footprints_enumerate_only_when_a_comparison_needs_them():
    tx, r, g = tirx.Var("tx", "int32"), tirx.Var("r", "int32"), tirx.Var("g", "int32")
    axes = [(tx, 64, 1)]
    s, other = _shared(1024), _shared(1024, "T")
    loops = [LoopRange(r, 4), LoopRange(g, 16)]
    write = Footprint.of(s, r * 256 + tx * 4, True, axes, loops)
    read = Footprint.of(s, r * 256 + (tx + 1) % 64 * 4, False, axes, loops)
    elsewhere = Footprint.of(other, tx, True, axes, loops)
    # only the loop the index reads is enumerated, known before any point is
    assert write.loop_vars == (r,) and read.loop_vars == (r,)
    assert not may_race(write, elsewhere) and not may_race(read, Footprint.of(
        s, tx, False, axes, loops))
    assert write.points.value is write.points          # nothing enumerated yet
    carried = read.carried_over(set())                 # from the next iteration of r
    assert carried.match == frozenset() and carried.points is read.points
    assert may_race(write, read)                       # another thread's element, same r
    assert write.elements.size == 64 * 4 and list(write.loops) == [r]
    # a thread reading back its own elements: no race, in one iteration or across them
    own = Footprint.of(s, r * 256 + tx * 4, False, axes, loops)
    assert not may_race(write, own)
    shifted = Footprint.of(s, (r + 1) % 4 * 256 + tx * 4, False, axes, loops)
    assert not may_race(write, shifted.carried_over(set()))


def test_nested_loop_plans_place_every_needed_barrier(run):
    # S is written before a two-deep nest whose inner body (planned alone, with what an
    # iteration leaves the next, and with what came before, at both depths) reads it
    # reversed under a uniform if/else and is rewritten at the end of each outer
    # iteration: the barriers before the nest, between read and rewrite, and after the
    # rewrite must all be there, and each must be necessary.
    @T.prim_func
    def k(A: T.Tensor((4, 32), "float32"), B: T.Tensor((4, 4, 32), "float32")):
        with T.Kernel(1, threads=32):
            S = T.alloc_shared((32,), "float32")
            for i in T.Parallel(32):
                S[i] = A[0, i]
            for ko in T.serial(4):
                for ki in T.serial(4):
                    if ki % 2 == 0:
                        for i in T.Parallel(32):
                            B[ko, ki, i] = S[31 - i]
                    else:
                        for i in T.Parallel(32):
                            B[ko, ki, i] = S[i] + 1.0
                for i in T.Parallel(32):
                    S[i] = A[ko, (i + 1) % 32]
    kernel = core.compile(k, out_idx=[1])
    a = random_tensor((4, 32), "float32", 11)
    want = torch.zeros(4, 4, 32, dtype=torch.float64)
    s = a.double()[0]
    for ko in range(4):
        for ki in range(4):
            want[ko, ki] = s.flip(0) if ki % 2 == 0 else s + 1.0
        s = a.double()[ko].roll(-1)
    assert_close(run(kernel, a), want)
    report = barriers.check_barriers(kernel, [a])
    assert report.ok and report.barriers, report.summary()
    assert all(v.necessary for v in report.barriers), report.summary()


def test_reduction_pairs_are_those_of_every_element():
    # reduce_layout decides from the distinct (output, thread) pairs; a long row's are
    # taken without enumerating its elements, and must be exactly those the elements give
    import numpy as np

    from core.ir import layout as L
    cases = [((1, 152064), 256, (1,)), ((4, 1024), 256, (1,)), ((3, 7, 64), 96, (2,)),
             ((2, 8, 48), 64, (1, 2)), ((64, 64), 128, (1,)), ((16, 32), 256, (0,))]
    for shape, threads, dims in cases:
        src = L.FragmentLayout.for_tile(shape, threads)
        kept = [d for d in range(len(shape)) if d not in dims]
        outputs = int(np.prod([shape[d] for d in kept]))
        out, tid, first = L._reduction_pairs(src, dims, outputs)
        flat = np.arange(src.size)
        every = L._out_index(shape, dims)
        assert set(zip(out.tolist(), tid.tolist())) == \
            set(zip(every.tolist(), src.thread_of(flat).tolist())), shape
        want_first = np.full(outputs, src.size)
        np.minimum.at(want_first, every, flat)
        assert first.tolist() == want_first.tolist(), shape
        dst = tuple(shape[d] for d in kept)
        assert L.reduce_layout(src, dims, dst).thread_count == threads


def _flag_gated_copy():
    # thread 0 writes the flag S[0]; every thread then reads it in an `if` condition
    # only (the copy under it touches device memory): the barrier between the two is
    # needed although nothing under the condition names S
    @T.prim_func
    def flag_gated(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as _:
            S = T.alloc_shared((64,), "float32")
            tx = T.get_thread_binding()
            if tx == 0:
                S[0] = A[0]
            for i in T.Parallel(64):
                B[i] = 0.0
            if S[0] > 0.0:
                for i in T.Parallel(64):
                    B[i] = A[i]

    return flag_gated


def test_a_threadgroup_read_in_a_condition_alone_still_gets_its_barrier(run):
    kernel = core.compile(_flag_gated_copy(), out_idx=[1])
    for sign in (1.0, -1.0):
        a = random_tensor((64,), "float32", 5)
        a[0] = sign * a[0].abs().clamp(min=0.5)
        want = a.double() if sign > 0 else torch.zeros(64, dtype=torch.float64)
        assert_close(run(kernel, a), want)
    report = barriers.check_barriers(kernel, [a])
    assert report.ok and report.barriers, report.summary()
    assert all(v.necessary for v in report.barriers), report.summary()


def test_statements_without_threadgroup_memory_are_passed_over_unplanned():
    from core.ir.kernel import kernels
    from core.transform import pipeline, thread_sync

    func = pipeline.run(_flag_gated_copy(), stop_after="flatten_simplify")
    nest = kernels(func)[0]
    inert = thread_sync._inert_statements(nest.body)
    top = list(nest.body.seq) if isinstance(nest.body, tirx.SeqStmt) else [nest.body]
    stores_b = [s for s in top if "S" not in str(s) and "B[" in str(s)]
    gated = [s for s in top if isinstance(s, tirx.IfThenElse) and "< S[0]" in str(s)]
    assert stores_b and all(s.__chandle__() in inert for s in stores_b)
    assert gated and gated[0].__chandle__() not in inert        # its condition reads S
    assert gated[0].then_case.__chandle__() in inert             # its body does not
    assert nest.body.__chandle__() not in inert


def test_passing_over_inert_statements_changes_no_bench_kernel(monkeypatch):
    from harness.bench import cases as benchcases
    from harness.gen import family
    from core.transform import thread_sync

    # Kernels whose barriers sit among statements that touch no threadgroup memory: the
    # MoE block, and GDN decode in its staged form (the bench case now holds k and q per
    # lane, with no threadgroup memory and so no barrier to plan).
    overrides = {"moe/qwen3-30b-decode-fused-bf16": {},
                 "gdn_decode/qwen3next-1tok-bf16": {"kq": "staged"}}
    cases = [c for c in benchcases.CASES if c.name in overrides]
    assert len(cases) == len(overrides)
    for case in cases:
        built = family.get(case.family).build({**case.params, **overrides[case.name]})
        skipping = core.compile(built.func, out_idx=built.out_idx, cache=False).msl
        with monkeypatch.context() as m:
            m.setattr(thread_sync, "_inert_statements", lambda body: set())
            planning_all = core.compile(built.func, out_idx=built.out_idx, cache=False).msl
        assert skipping == planning_all, case.name
        assert "threadgroup_barrier" in skipping, case.name


def test_with_attr_sets_what_tvms_with_attr_sets():
    from core.ir.kernel import with_attr

    func = tirx.PrimFunc([], tirx.Evaluate(tirx.const(0, "int32")))
    for key, value in (("global_symbol", "k"), ("tl.threads", [8, 4, 1]),
                       ("tl.readonly", ["A", "B"]), ("tl.readonly", [])):
        ours, theirs = with_attr(func, key, value), func.with_attr(key, value)
        assert tvm_ffi.structural_equal(ours, theirs), key
        assert str(ours.attrs) == str(theirs.attrs)
    assert not func.attrs or "global_symbol" not in func.attrs   # func itself is unchanged


def test_race_answers_kept_per_pair_tell_matched_from_carried_over_views():
    # thread tx writes block r of S and reads block 1 - r (another thread's element):
    # within one iteration of r the two never meet; carried over to the next iteration
    # (the same points, not matched on r) they do. The planner keeps may_race per pair
    # of points, and must keep the two answers apart.
    from core.transform.thread_sync import _Planner

    tx, r = tirx.Var("tx", "int32"), tirx.Var("r", "int32")
    axes, loops = [(tx, 64, 1)], [LoopRange(r, 2)]
    s = _shared(128)
    write = Footprint.of(s, r * 64 + tx, True, axes, loops)
    read = Footprint.of(s, (1 - r) * 64 + (tx + 1) % 64, False, axes, loops)
    carried = read.carried_over(set())
    assert carried.points is read.points
    planner = object.__new__(_Planner)
    planner.races = {}
    for _ in range(2):   # asked again: the kept answers
        assert not planner.may_race(write, read)
        assert planner.may_race(write, carried)
    assert (not may_race(write, read)) and may_race(write, carried)
    assert len(planner.races) == 2


def test_vectorize_binds_each_range_once_and_never_a_stale_one():
    # the candidates of a kernel share one analyzer; a variable held with another range
    # (one Var for two loops of different extents) must not be proven in the old range
    from core.transform.vectorize import _Bounds

    v, w = tirx.Var("v", "int32"), tirx.Var("w", "int32")
    zero = tirx.const(0, "int32")
    four, eight = tirx.const(4, "int32"), tirx.const(8, "int32")
    bounds = _Bounds()
    first = bounds.analyzer_for({v: (zero, four)})
    assert first.const_int_bound(v).max_value == 3
    assert bounds.analyzer_for({v: (zero, four), w: (zero, eight)}) is first  # same ranges
    assert first.const_int_bound(w).max_value == 7
    other = bounds.analyzer_for({v: (zero, eight)})                 # v, another range
    assert other is not first and other.const_int_bound(v).max_value == 7
    assert first.const_int_bound(v).max_value == 3
