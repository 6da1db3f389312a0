"""Pass `lower_tile_ops`: no tile op, PARALLEL loop or fragment is left; each fragment is a
per-thread `local` array of its layout's slots; run loops carry `tl.vector_lanes`; copies
mask edge tiles only where the bound is not proven; a replicated result is stored by one
replica only."""

import pytest
from tvm import tirx

import core.language as T
from core.ir.annotations import VECTOR_LANES
from core.ir.layout import FragmentLayout
from core.transform import pipeline

from .irq import allocs, call_names, loops, nodes, parallel_loops, scope, shape, stores
from .irq import tile_ops

THREADS = 128


@T.prim_func
def row_norm(A: T.Tensor((16, 64), "float32"), W: T.Tensor((16, 6), "float32"),
             B: T.Tensor((16, 64), "float32"), C: T.Tensor((16, 6), "float32"),
             S: T.Tensor((16,), "float32")):
    with T.Kernel(1, threads=THREADS):
        x = T.alloc_fragment((16, 64), "float32")
        s = T.alloc_fragment((16,), "float32")
        w = T.alloc_fragment((16, 6), "float32")
        T.copy(A, x)
        T.reduce_sum(x, s, dim=1)
        for i, j in T.Parallel(16, 64):
            x[i, j] = x[i, j] / s[i]
        T.copy(x, B)
        T.copy(s, S)
        T.fill(w, 1.0)
        T.copy(w, C)


def test_tile_ops_parallel_loops_and_fragments_are_gone():
    before = pipeline.run(row_norm, stop_after="layout_inference")
    assert {"tl.copy", "tl.fill", "tl.reduce"} <= set(tile_ops(before))
    assert parallel_loops(before)
    assert {n for n, a in allocs(before).items() if scope(a) == "local.fragment"} == \
        {"x", "s", "w"}
    after = pipeline.run(row_norm, stop_after="lower_tile_ops")
    assert not tile_ops(after)
    assert not parallel_loops(after)
    assert not [n for n, a in allocs(after).items() if scope(a) == "local.fragment"]


def test_a_fragment_becomes_a_local_array_of_its_slots():
    after = allocs(pipeline.run(row_norm, stop_after="lower_tile_ops"))
    for name, frag_shape in (("x", (16, 64)), ("w", (16, 6))):
        assert scope(after[name]) == "local"
        assert shape(after[name]) == (FragmentLayout.for_tile(frag_shape, THREADS).slots,)


def test_run_loops_carry_their_lanes():
    after = pipeline.run(row_norm, stop_after="lower_tile_ops")
    runs = [f for f in loops(after) if VECTOR_LANES in f.annotations]
    assert runs and all(int(f.extent) == int(f.annotations[VECTOR_LANES]) for f in runs)
    # x's runs are 4 wide, w's (rows of 6) 2 wide
    assert {int(f.annotations[VECTOR_LANES]) for f in runs} == {4, 2}
    by_store = {s.buffer.name: f for f in runs for s in stores(f.body)}
    assert int(by_store["w"].annotations[VECTOR_LANES]) == 2
    assert int(by_store["B"].annotations[VECTOR_LANES]) == 4


def tile_copy(M):
    @T.prim_func
    def tile_copy(A: T.Tensor((M, 64), "float32"), B: T.Tensor((M, 64), "float32")):
        with T.Kernel(4, threads=64) as bx:
            x = T.alloc_fragment((4, 64), "float32")
            T.copy(A[bx * 4, 0], x)
            T.copy(x, B[bx * 4, 0])
    return tile_copy


@pytest.mark.parametrize("M,masked", [(10, True), (16, False)])
def test_edge_tiles_are_masked_only_where_the_bound_is_not_proven(M, masked):
    # 4 blocks of 4 rows: with 10 rows the last tiles run past A and B; with 16 they fit
    after = pipeline.run(tile_copy(M), stop_after="lower_tile_ops")
    load_masked = "prim.if_then_else" in call_names(after)      # out of bounds reads 0
    (store,) = stores(after, "B")
    guarded_stores = [g for g in nodes(after, tirx.IfThenElse)
                      if any(s.same_as(store) for s in stores(g.then_case, "B"))]
    assert load_masked == masked
    assert bool(guarded_stores) == masked


def test_a_replicated_result_is_stored_by_one_replica():
    # s (a reduction's result) is held by every thread of its row's group; S[i] is
    # stored under a condition that only the owner replica meets
    after = pipeline.run(row_norm, stop_after="lower_tile_ops")
    (store,) = stores(after, "S")
    guards = [g for g in nodes(after, tirx.IfThenElse)
              if any(s.same_as(store) for s in stores(g.then_case, "S"))]
    assert guards
    (x_store,) = stores(after, "B")
    x_guards = [g for g in nodes(after, tirx.IfThenElse)
                if any(s.same_as(x_store) for s in stores(g.then_case, "B"))]
    assert not x_guards               # x is not replicated: every thread stores its own


@T.prim_func
def invariant_stores(A: T.Tensor((4, 32), "float32"), OUT: T.Tensor((4,), "float32"),
                     P: T.Tensor((4, THREADS), "float32")):
    with T.Kernel(4, threads=THREADS) as bx:
        tx = T.get_thread_binding()
        s = T.alloc_local((1,), "float32")
        s[0] = 0.0
        for j in T.serial(32):
            s[0] = s[0] + A[bx, j]
        OUT[bx] = s[0]              # every thread alike
        P[bx, tx] = s[0]            # a different element per thread


def test_a_thread_invariant_store_outside_parallel_has_one_writer():
    before = pipeline.run(invariant_stores, stop_after="layout_inference")
    assert not nodes(before, tirx.IfThenElse)
    after = pipeline.run(invariant_stores, stop_after="lower_tile_ops")
    (guard,) = nodes(after, tirx.IfThenElse)     # thread 0 stores OUT[bx]; P stays per thread
    assert isinstance(guard.condition, tirx.EQ) and guard.condition.b.value == 0
    assert guard.condition.a.name == "tx"
    assert [s.buffer.name for s in stores(guard.then_case)] == ["OUT"]
    assert len(stores(after, "P")) == 1 and len(stores(after, "s")) == 2


@T.prim_func
def replicated_element(A: T.Tensor((4, 32), "float32"), B: T.Tensor((4, 32), "float32")):
    with T.Kernel(4, threads=64) as bx:
        r = T.alloc_fragment((2,), "float32")
        t = T.alloc_fragment((1,), "float32")
        r[0] = 0.0
        for j in T.serial(32):
            r[0] = r[0] + A[bx, j]
        r[1] = r[0] * 2.0
        t[0] = r[1] - r[0]
        for i in T.Parallel(32):
            B[bx, i] = A[bx, i] - t[0] + r[1]     # any element of r: every thread holds it


def test_a_fragment_element_outside_parallel_is_held_whole_by_every_thread():
    # layout_inference: one holder, every thread a replica; lower_tile_ops: element f is
    # slot f of every thread's local copy, outside and inside T.Parallel alike
    before = allocs(pipeline.run(replicated_element, stop_after="layout_inference"))
    assert [int(v) for v in before["r"].annotations["tl.layout_replicate"]] == [1, 0, 6]
    after = pipeline.run(replicated_element, stop_after="lower_tile_ops")
    assert scope(allocs(after)["r"]) == "local" and shape(allocs(after)["r"]) == (2,)
    assert [[int(i) for i in s.indices] for s in stores(after, "r")] == [[0], [0], [1]]
    assert not nodes(after, tirx.IfThenElse) or all(
        not stores(g.then_case, "r") for g in nodes(after, tirx.IfThenElse))
