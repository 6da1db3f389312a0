"""Pass `legalize`: each `tl.parallel_scope` marker is gone and the loops it marked (as
many as the T.Parallel has extents) are PARALLEL; every other loop keeps its kind."""

import tvm_ffi
from tvm import tirx

import core.language as T
from core.ir import ops
from core.ir.stmt import rewrite, seq
from core.transform import pipeline

from .irq import call_names, loops, parallel_loops


@T.prim_func
def scaled_rows(A: T.Tensor((4, 16, 8), "float32"), B: T.Tensor((4, 16, 8), "float32")):
    with T.Kernel(1, threads=128):
        for t in T.serial(4):
            for i, j in T.Parallel(16, 8):
                acc = T.alloc_var("float32")
                acc = 0.0
                for k in T.serial(3):
                    acc = acc + A[t, i, j] * T.cast(k, "float32")
                B[t, i, j] = acc
        for i in T.Parallel(8):
            B[0, 0, i] = A[0, 0, i]


def _kinds(func) -> dict:
    return {f.loop_var.name: f.kind for f in loops(func)}


def test_markers_become_parallel_loops():
    parsed = scaled_rows
    assert call_names(parsed).count("tl.parallel_scope") == 2
    assert not parallel_loops(parsed)                       # the parser leaves them serial
    out = pipeline.run(parsed, stop_after="legalize")
    assert "tl.parallel_scope" not in call_names(out)
    assert sorted(f.loop_var.name for f in parallel_loops(out)) == ["i", "i", "j"]


def test_only_the_marked_depth_becomes_parallel():
    # T.Parallel(16, 8) marks its two loops; the serial loop inside its body and the
    # serial loop around it are not the marker's
    out = pipeline.run(scaled_rows, stop_after="legalize")
    kinds = _kinds(out)
    assert kinds["t"] == kinds["k"] == tirx.ForKind.SERIAL
    assert kinds["j"] == tirx.ForKind.PARALLEL


def _serial(stmt):
    if isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.PARALLEL:
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, tirx.ForKind.SERIAL, stmt.body,
                        stmt.thread_binding, stmt.annotations, stmt.step)
    return stmt


def _without_markers(stmt):
    if isinstance(stmt, tirx.SeqStmt):
        return seq([s for s in stmt.seq if not (
            isinstance(s, tirx.Evaluate) and ops.is_tile_call(s.value, "tl.parallel_scope"))])
    return stmt


def test_nothing_else_changes():
    # undo the two changes the pass may make (loop kinds, markers): what is left is the
    # parsed function, node for node
    parsed = scaled_rows
    out = pipeline.run(parsed, stop_after="legalize")
    assert not tvm_ffi.structural_equal(out.body, parsed.body)
    assert tvm_ffi.structural_equal(rewrite(out.body, _serial),
                                    rewrite(parsed.body, _without_markers))
