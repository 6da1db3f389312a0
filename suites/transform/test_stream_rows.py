"""Pass `stream_rows`: a row fragment over the per-thread register budget whose life is a
copy in, element-wise updates, row reductions and a copy out becomes serial loops over
chunks of the row (annotated `tl.streamed`); a row under the budget, or one used any
other way, is left as it is."""

from math import ceil

import pytest
import tvm_ffi
from tvm import tirx

import core.language as T
from core.ir.annotations import STREAMED
from core.ir.layout import FragmentLayout
from core.target import METAL
from core.transform import pipeline

from .irq import allocs, loops, nodes, scope, shape, tile_ops

THREADS = 128


def softmax(N, read_after=False):
    @T.prim_func
    def softmax(A: T.Tensor((4, N), "float32"), B: T.Tensor((4, N), "float32")):
        with T.Kernel(4, threads=THREADS) as bx:
            x = T.alloc_fragment((1, N), "float32")
            mx = T.alloc_fragment((1,), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(A[bx, 0], x)
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(1, N):
                x[i, j] = T.exp(x[i, j] - mx[i])
            T.reduce_sum(x, s, dim=1)
            for i, j in T.Parallel(1, N):
                x[i, j] = x[i, j] / s[i]
            T.copy(x, B[bx, 0])
            if read_after:                       # x read after its copy out: not streamable
                for i, j in T.Parallel(1, N):
                    x[i, j] = x[i, j] * 2.0
                T.copy(x, B[bx, 0])
    return softmax


def held_bytes(alloc) -> int:
    return FragmentLayout.for_tile(shape(alloc), THREADS).slots * 4


def fragments(func) -> dict:
    return {name: a for name, a in allocs(func).items() if scope(a) == "local.fragment"}


def streamed_loops(func) -> list:
    return [f for f in loops(func) if STREAMED in f.annotations]


@pytest.mark.parametrize("N", [8192, 8000])        # 8000: the last of 16 chunks is ragged
def test_a_row_over_the_budget_becomes_chunk_loops(N):
    before = pipeline.run(softmax(N), stop_after="verify")
    assert held_bytes(fragments(before)["x"]) > METAL.fragment_register_budget_bytes
    assert not streamed_loops(before)
    after = pipeline.run(softmax(N), stop_after="stream_rows")
    held = fragments(after)
    assert "x" not in held
    assert all(held_bytes(a) <= METAL.fragment_register_budget_bytes for a in held.values())
    chunk = THREADS * 4                              # 4 elements of a chunk per thread
    assert shape(held["x_chunk"]) == (1, chunk)
    chunk_loops = streamed_loops(after)
    # max and sum of exp are one online pass, then the pass that stores: the row is read
    # twice, each time chunk by chunk
    assert [int(f.extent) for f in chunk_loops] == [ceil(N / chunk)] * 2
    assert tile_ops(after).count("tl.reduce_online") == 1
    assert "tl.reduce_online" not in tile_ops(before)


def test_a_ragged_last_chunk_leaves_the_columns_past_the_row_out():
    after = pipeline.run(softmax(8000), stop_after="stream_rows")
    fold = streamed_loops(after)[0]
    guards = nodes(fold.body, tirx.IfThenElse)
    assert guards and "8000" in str(guards[0].condition)
    even = pipeline.run(softmax(8192), stop_after="stream_rows")
    assert not nodes(streamed_loops(even)[0].body, tirx.IfThenElse)


@pytest.mark.parametrize("N,read_after", [(4096, False), (8192, True)],
                         ids=["under-the-budget", "read-after-its-copy-out"])
def test_other_rows_are_left_as_they_are(N, read_after):
    before = pipeline.run(softmax(N, read_after), stop_after="verify")
    after = pipeline.run(softmax(N, read_after), stop_after="stream_rows")
    assert tvm_ffi.structural_equal(after, before)
    assert not streamed_loops(after)
