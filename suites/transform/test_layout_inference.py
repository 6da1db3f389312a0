"""Pass `layout_inference`: every fragment's AllocBuffer carries its layout (`tl.layout_vec`,
and `tl.layout_replicate` for a reduction's result), which decides the thread and slot of
each element; a gemm accumulator is marked for simdgroup matrices; a fragment that would
need two layouts is a LoweringError naming it."""

import pytest

import core.language as T
from core.errors import LoweringError
from core.ir.annotations import LAYOUT_REPLICATE, LAYOUT_VEC, SIMDGROUP_ACCUMULATOR
from core.transform import pipeline
from core.transform.layout_inference import fragment_layout

from .irq import allocs, scope

THREADS = 128


@T.prim_func
def row_scale(A: T.Tensor((16, 64), "float32"), W: T.Tensor((8, 6), "float32"),
              V: T.Tensor((8, 7), "float32"), B: T.Tensor((16, 64), "float32"),
              C: T.Tensor((8, 6), "float32"), D: T.Tensor((8, 7), "float32")):
    with T.Kernel(1, threads=THREADS):
        x = T.alloc_fragment((16, 64), "float32")
        y = T.alloc_fragment((16, 64), "float32")
        s = T.alloc_fragment((16,), "float32")
        w = T.alloc_fragment((8, 6), "float32")
        v = T.alloc_fragment((8, 7), "float32")
        T.copy(A, x)
        T.reduce_sum(x, s, dim=1)
        for i, j in T.Parallel(16, 64):
            y[i, j] = x[i, j] / s[i]
        T.copy(y, B)
        T.copy(W, w)
        T.copy(w, C)
        T.copy(V, v)
        T.copy(v, D)


def fragments(func) -> dict:
    return {n: a for n, a in allocs(func).items() if scope(a) == "local.fragment"}


def test_every_fragment_gets_the_run_width_of_its_rows():
    before = fragments(pipeline.run(row_scale, stop_after="stream_rows"))
    assert not any(LAYOUT_VEC in a.annotations for a in before.values())
    after = fragments(pipeline.run(row_scale, stop_after="layout_inference"))
    assert set(after) == {"x", "y", "s", "w", "v"}
    vec = {n: int(a.annotations[LAYOUT_VEC]) for n, a in after.items()}
    # the widest of 4, 2, 1 that divides the last extent: a run never crosses a row
    assert (vec["x"], vec["y"], vec["w"], vec["v"]) == (4, 4, 2, 1)
    assert LAYOUT_REPLICATE not in after["x"].annotations


def test_runs_are_dealt_to_threads_round_robin():
    # element f of x (row-major) is in run f // 4; run r goes to thread r % THREADS, at
    # the slots of its round r // THREADS: what T.Parallel and T.copy lowering also do
    x = fragments(pipeline.run(row_scale, stop_after="layout_inference"))["x"]
    layout = fragment_layout(x, THREADS)
    for f in range(16 * 64):
        run = f // 4
        assert layout.thread_of(f) == run % THREADS
        assert layout.slot_of(f) == (run // THREADS) * 4 + f % 4
    assert layout.slots == 16 * 64 // THREADS


def test_a_reduction_result_is_held_by_every_thread_holding_its_inputs():
    # y[i, j] = x[i, j] / s[i] reads s locally: the thread holding x[i, j] holds s[i]
    frags = fragments(pipeline.run(row_scale, stop_after="layout_inference"))
    assert LAYOUT_REPLICATE in frags["s"].annotations
    x, s = fragment_layout(frags["x"], THREADS), fragment_layout(frags["s"], THREADS)
    assert s.replicated
    for f in range(16 * 64):
        assert s.thread_of(f // 64) == s.holder(x.thread_of(f))


def test_a_gemm_accumulator_is_marked_for_simdgroup_matrices():
    @T.prim_func
    def mm(A: T.Tensor((32, 32), "float16"), B: T.Tensor((32, 32), "float16"),
           C: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=THREADS):
            As = T.alloc_shared((32, 32), "float16")
            Bs = T.alloc_shared((32, 32), "float16")
            acc = T.alloc_fragment((32, 32), "float32")
            out = T.alloc_fragment((32, 32), "float32")
            T.copy(A, As)
            T.copy(B, Bs)
            T.clear(acc)
            T.gemm(As, Bs, acc)
            T.copy(C, out)
            T.copy(out, C)
    frags = fragments(pipeline.run(mm, stop_after="layout_inference"))
    assert int(frags["acc"].annotations[SIMDGROUP_ACCUMULATOR]) == 1
    assert SIMDGROUP_ACCUMULATOR not in frags["out"].annotations


def test_a_fragment_needing_two_layouts_is_an_error_naming_it():
    @T.prim_func
    def two_ways(A: T.Tensor((16, 64), "float32"), C: T.Tensor((64, 16), "float32"),
                 B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=THREADS):
            x = T.alloc_fragment((16, 64), "float32")
            y = T.alloc_fragment((64, 16), "float32")
            s = T.alloc_fragment((16,), "float32")
            T.copy(A, x)
            T.copy(C, y)
            T.reduce_sum(x, s, dim=1)
            T.reduce_sum(y, s, dim=0, clear=False)
            T.copy(s, B)
    pipeline.run(two_ways, stop_after="stream_rows")
    with pytest.raises(LoweringError, match="kernel 'two_ways', T.reduce_sum: fragment 's' "
                                            "would need two layouts"):
        pipeline.run(two_ways, stop_after="layout_inference")
