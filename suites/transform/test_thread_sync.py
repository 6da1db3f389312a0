"""Pass `thread_sync`: a threadgroup barrier stands between a threadgroup write and a read
of it by another thread, including across iterations of a loop; none where each thread
reads only its own write; never inside control flow that depends on the thread."""

import tvm
from tvm import tirx

import core.language as T
from core.ir import ops
from core.transform import pipeline

from .irq import call_names, loops, nodes, statements


def staged(read):
    @T.prim_func
    def staged(A: T.Tensor((32, 32), "float32"), B: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((32, 32), "float32")
            T.copy(A, S)
            for i, j in T.Parallel(32, 32):
                if read == "transposed":       # element (j, i): another thread wrote it
                    B[i, j] = S[j, i]
                else:                          # element (i, j): the same thread wrote it
                    B[i, j] = S[i, j] * 2.0
    return staged


def events(node, buffer="S") -> list:
    """'write' / 'read' of `buffer` and 'barrier', in program order."""
    out = []
    for s in statements(node):
        if ops.is_barrier(s):
            out.append("barrier")
        elif isinstance(s, tirx.BufferStore):
            if any(ld.source.name == buffer for ld in nodes(s.value, tvm.ir.TensorLoad)):
                out.append("read")
            if s.buffer.name == buffer:
                out.append("write")
    return out


def barriers(func) -> int:
    return call_names(func).count("tl.threadgroup_barrier")


def test_a_barrier_separates_a_write_from_another_threads_read():
    before = pipeline.run(staged("transposed"), stop_after="flatten_simplify")
    assert events(before) == ["write", "read"]
    after = pipeline.run(staged("transposed"), stop_after="thread_sync")
    assert events(after) == ["write", "barrier", "read"]


def test_no_barrier_where_each_thread_reads_its_own_write():
    after = pipeline.run(staged("own"), stop_after="thread_sync")
    assert events(after) == ["write", "read"]
    assert barriers(after) == 0


def test_a_loop_that_rewrites_the_buffer_orders_its_iterations():
    # iteration t + 1 overwrites S while other threads may still read iteration t's
    # values: a barrier before the write, one between the write and the read
    @T.prim_func
    def looped(A: T.Tensor((4, 32, 32), "float32"), B: T.Tensor((4, 32, 32), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((32, 32), "float32")
            for t in T.serial(4):
                T.copy(A[t, 0, 0], S)
                for i, j in T.Parallel(32, 32):
                    B[t, i, j] = S[j, i]
    after = pipeline.run(looped, stop_after="thread_sync")
    (loop,) = [f for f in loops(after) if f.loop_var.name == "t"]
    body = events(loop.body)
    assert body.count("barrier") == 2
    # read in iteration t, then write in iteration t + 1: the body as a cycle
    cycle = body + body
    for a, b in (("write", "read"), ("read", "write")):
        start = cycle.index(a)
        assert "barrier" in cycle[start:cycle.index(b, start)]


def test_a_barrier_needed_inside_thread_dependent_control_flow_goes_before_it():
    # only threads 0..63 read, under `if tx < 64`: a barrier in the branch would not be
    # reached by every thread, so it stands before the `if`
    @T.prim_func
    def half_read(A: T.Tensor((128,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128) as _:
            S = T.alloc_shared((128,), "float32")
            tx = T.get_thread_binding()
            S[tx] = A[tx]
            if tx < 64:
                B[tx] = S[127 - tx]
    after = pipeline.run(half_read, stop_after="thread_sync")
    assert events(after) == ["write", "barrier", "read"]
    (branch,) = [s for s in nodes(after, tirx.IfThenElse) if events(s.then_case)]
    assert "barrier" not in events(branch)


def test_a_section_one_thread_runs_needs_no_barrier_inside_and_is_no_refusal():
    # `for z in T.Parallel(1)` runs under `if (tx < 1)`: the reads of `idx[p]` (a loop of
    # symbolic extent: elements unknown) and the writes `idx[kk]` are all thread 0's, so
    # nothing inside can race; the writes still need a barrier before the other threads
    # read them, and that barrier stands after the branch
    @T.prim_func
    def one_thread(A: T.Tensor((64,), "int32"), B: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64):
            idx = T.alloc_shared((8,), "int32")
            for _z in T.Parallel(1):
                for kk in T.serial(8):
                    acc = T.alloc_var("int32")
                    acc = A[kk]
                    for p in T.serial(kk):
                        acc = acc + idx[p]
                    idx[kk] = acc
            for i in T.Parallel(64):
                B[i] = idx[i % 8]
    after = pipeline.run(one_thread, stop_after="thread_sync")
    assert events(after, "idx") == ["read", "write", "barrier", "read"]
    (branch,) = [s for s in nodes(after, tirx.IfThenElse) if "write" in events(s, "idx")]
    assert "barrier" not in events(branch, "idx")
