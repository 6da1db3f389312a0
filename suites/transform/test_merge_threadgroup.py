"""Pass `merge_threadgroup`: a kernel whose threadgroup buffers total more than 32 KiB gets
one arena in which buffers whose lives do not overlap share bytes, with a barrier between
an old buffer's last statement and the first of a buffer reusing its bytes; lives are
counted inside a top-level loop's body too, for buffers whose values never cross an
iteration; a kernel within the limit is left as it was; live bytes past the limit are
refused, naming the buffers."""

import pytest
from tvm import tirx

import core
import core.language as T
from core.errors import LoweringError
from core.ir import annotations as keys
from core.ir import ops
from core.ir.kernel import kernels
from core.ir.stmt import items
from core.transform import pipeline
from harness.check import barriers
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor

from .irq import allocs


def gemv_reducer(bM, bN, threads=256, M=256, N=256):
    """TileLang's alloc_reducer GEMV (examples/gemv): a (bM, bN) float16 tile of `a` in
    threadgroup memory per column block, a reducer combined across simdgroups after the
    loop; at bM = bN = 128 the tile is 32 KiB and the reducer's stage 4 KiB more."""
    @T.prim_func
    def gemv(a: T.Tensor((M, N), "float16"), x: T.Tensor((N,), "float16"),
             o: T.Tensor((M,), "float16")):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as i0_m:
            o_reducer = T.alloc_reducer(bM, "float32", replication="all")
            T.clear(o_reducer)
            for i0_n in T.Pipelined(T.ceildiv(N, bN), num_stages=2):
                a_smem = T.alloc_shared((bM, bN), "float16")
                T.copy(a[i0_m * bM, i0_n * bN], a_smem)
                a_frag = T.alloc_fragment((bM, bN), "float16")
                T.copy(a_smem, a_frag)
                x_frag = T.alloc_fragment(bN, "float16")
                T.copy(x[i0_n * bN], x_frag)
                for i1_m, i1_n in T.Parallel(bM, bN):
                    o_reducer[i1_m] += a_frag[i1_m, i1_n] * x_frag[i1_n]
            T.finalize_reducer(o_reducer)
            T.copy(o_reducer, o[i0_m * bM])
    return gemv


@T.prim_func
def stage_beside_live_tile(A: T.Tensor((128, 128), "float16"), X: T.Tensor((8, 256), "float32"),
                           B: T.Tensor((128, 128), "float16"), S: T.Tensor((8,), "float32")):
    # the 32 KiB tile is read again after the reduction: it is live beside the stage
    with T.Kernel(1, threads=256):
        A_s = T.alloc_shared((128, 128), "float16")
        x = T.alloc_fragment((8, 256), "float32")
        s = T.alloc_fragment((8,), "float32")
        T.copy(A, A_s)
        T.copy(X, x)
        T.reduce_sum(x, s, dim=1)
        T.copy(s, S)
        T.copy(A_s, B)


@T.prim_func
def two_tiles_in_turn(A: T.Tensor((64, 96), "float32"), B: T.Tensor((64, 96), "float32"),
                      C: T.Tensor((64, 96), "float32"), D: T.Tensor((64, 96), "float32")):
    # two 24 KiB tiles (48 KiB in all), each read by other threads than wrote it, the
    # second only after the last read of the first
    with T.Kernel(1, threads=256):
        S1 = T.alloc_shared((64, 96), "float32")
        S2 = T.alloc_shared((64, 96), "float32")
        T.copy(A, S1)
        for i, j in T.Parallel(64, 96):
            C[i, j] = S1[63 - i, j]
        T.copy(B, S2)
        for i, j in T.Parallel(64, 96):
            D[i, j] = S2[63 - i, j] * 2.0


def top_level(func) -> list:
    """The statements of the (only) kernel's body, below its launch attributes."""
    [nest] = kernels(func)
    return items(nest.body.seq)


def names_buffer(stmt, name) -> bool:
    return name in stmt.script() and not isinstance(stmt, tirx.AllocBuffer)


def test_a_stage_reuses_the_bytes_of_a_tile_dead_by_then():
    before = pipeline.run(gemv_reducer(128, 128), stop_after="thread_sync")
    shared = {n: a for n, a in allocs(before).items() if ops.buffer_scope(a.buffer) == "shared"}
    assert sorted(shared) == ["a_smem", "reducer_buf"]    # 32768 + 4096 bytes
    after = pipeline.run(gemv_reducer(128, 128), stop_after="merge_threadgroup")
    found = allocs(after)
    arena = found["tg_arena"]
    assert int(arena.annotations[keys.THREADGROUP_ARENA]) == 32768
    assert ops.buffer_scope(arena.buffer) == "shared"
    assert {n: int(found[n].annotations[keys.ARENA_OFFSET]) for n in shared} == \
        {"a_smem": 0, "reducer_buf": 0}
    # one barrier between the loop's last read of a_smem and the first write of the stage,
    # where thread_sync had none
    stmts = top_level(after)
    last = max(i for i, s in enumerate(stmts) if names_buffer(s, "a_smem"))
    first = min(i for i, s in enumerate(stmts) if names_buffer(s, "reducer_buf"))
    assert [ops.is_barrier(s) for s in stmts[last + 1:first]].count(True) == 1
    old = top_level(before)
    old_last = max(i for i, s in enumerate(old) if names_buffer(s, "a_smem"))
    old_first = min(i for i, s in enumerate(old) if names_buffer(s, "reducer_buf"))
    assert not any(ops.is_barrier(s) for s in old[old_last + 1:old_first])


def test_a_kernel_within_the_limit_is_left_as_it_was():
    before = pipeline.run(gemv_reducer(64, 128), stop_after="thread_sync")   # 16 + 2 KiB
    after = pipeline.run(gemv_reducer(64, 128), stop_after="merge_threadgroup")
    assert after.script() == before.script()
    assert "tg_arena" not in allocs(after)


def test_live_bytes_past_the_limit_are_refused_naming_the_buffers():
    with pytest.raises(LoweringError) as info:
        pipeline.run(stage_beside_live_tile, stop_after="merge_threadgroup")
    message = str(info.value)
    assert "kernel 'stage_beside_live_tile'" in message
    assert "'A_s' (32768 bytes)" in message and "'red_buf' (" in message
    assert "exceed the 32768 bytes of threadgroup memory" in message


def test_user_tiles_never_live_together_share_bytes():
    # verify counts the bytes live at once (24 KiB), not the 48 KiB declared
    after = pipeline.run(two_tiles_in_turn, stop_after="merge_threadgroup")
    found = allocs(after)
    assert int(found["tg_arena"].annotations[keys.THREADGROUP_ARENA]) == 24576
    assert [int(found[n].annotations[keys.ARENA_OFFSET]) for n in ("S1", "S2")] == [0, 0]
    stmts = top_level(after)
    last = max(i for i, s in enumerate(stmts) if names_buffer(s, "S1"))
    first = min(i for i, s in enumerate(stmts) if names_buffer(s, "S2"))
    assert first == last + 2 and ops.is_barrier(stmts[last + 1])


def chunked(carry=False):
    """Per chunk c: a 32 KiB tile A_s filled and read (rows reversed, by other threads than
    wrote them), then a row sum whose cross-simdgroup stage red_buf (64 bytes) is written
    after A_s's last read in the iteration. With `carry` the tile is filled in the first
    iteration only and read in every one: its values cross iterations."""
    @T.prim_func
    def chunks(A: T.Tensor((256, 256), "float16"), X: T.Tensor((32, 256), "float32"),
               B: T.Tensor((256, 256), "float16"), S: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=256):
            A_s = T.alloc_shared((64, 256), "float16")
            x = T.alloc_fragment((8, 256), "float32")
            s = T.alloc_fragment((8,), "float32")
            for c in T.serial(4):
                if carry:
                    if c == 0:
                        T.copy(A[0, 0], A_s)
                else:
                    T.copy(A[c * 64, 0], A_s)
                for i, j in T.Parallel(64, 256):
                    B[c * 64 + i, j] = A_s[63 - i, j]
                T.copy(X[c * 8, 0], x)
                T.reduce_sum(x, s, dim=1)
                T.copy(s, S[c * 8])
    return chunks


def test_buffers_dead_within_one_loop_iteration_share_bytes(run):
    """Over whole top-level statements the loop holds A_s and red_buf at once (32832 bytes,
    refused before); inside one iteration A_s is dead before the stage is first written,
    and neither carries a value to the next iteration, so they share bytes. Two barriers
    are added in the body: before the stage's first write (A_s's last reads) and at the
    iteration's start (the stage's last reads of the previous iteration); every barrier of
    the kernel is necessary (removing one makes the emulator report a race) and the
    results are right."""
    after = pipeline.run(chunked(), stop_after="merge_threadgroup")
    found = allocs(after)
    assert int(found["tg_arena"].annotations[keys.THREADGROUP_ARENA]) == 32768
    assert {n: int(found[n].annotations[keys.ARENA_OFFSET]) for n in ("A_s", "red_buf")} == \
        {"A_s": 0, "red_buf": 0}
    [loop] = [s for s in top_level(after) if isinstance(s, tirx.For)]
    body = items(loop.body.seq)
    assert ops.is_barrier(body[0]) and names_buffer(body[1], "A_s")
    stage = min(j for j, s in enumerate(body) if names_buffer(s, "red_buf"))
    last_tile = max(j for j, s in enumerate(body) if names_buffer(s, "A_s"))
    assert [ops.is_barrier(s) for s in body[last_tile + 1:stage]].count(True) == 1

    kernel = core.compile(chunked(), out_idx=[2, 3])
    a, x = random_tensor((256, 256), "float16", 41), random_tensor((32, 256), "float32", 42)
    b, s = run(kernel, a, x)
    assert_close(b, a.reshape(4, 64, 256).flip(1).reshape(256, 256), "float16",
                 op_class="exact")
    assert_close(s, x.double().sum(1), "float32", reduction_length=256,
                 op_class="accumulation")
    report = barriers.check_barriers(kernel, [a, x])
    assert not report.missing and not report.redundant and len(report.barriers) == 4


def test_a_buffer_whose_values_cross_iterations_keeps_its_bytes_for_the_loop():
    """The tile filled only when c == 0 is read in every iteration: the stage may not
    reuse its bytes, so the kernel is refused as before, naming both."""
    with pytest.raises(LoweringError, match=r"'A_s' \(32768 bytes\), 'red_buf' \(64 bytes\), "
                                            r"total 32832 bytes"):
        pipeline.run(chunked(carry=True), stop_after="merge_threadgroup")
