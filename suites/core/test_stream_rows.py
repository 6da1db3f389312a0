"""Rows longer than the register budget are streamed in chunks (core/transform/stream_rows.py).

Softmax, row sums and row maxima over a 32000-entry row and over awkward lengths whose
last chunk is ragged, against torch through the `run` fixture (every run race-checked);
what the MSL shows of the choice; the barrier-necessity check of the streamed softmax; the
two-read (online) form of softmax; and kernels the pass must leave alone.
"""

import pytest
import torch

import core
import core.language as T
from core.target import METAL
from harness.check.barriers import check_barriers
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from oracles import norm
from oracles.reduce import reduce as reduce_oracle


def rand(shape, dtype, seed=0):
    return random_tensor(shape, dtype, seed, scale=2.0)


def softmax_kernel(M, N, bM, threads, dtype, scale=1.0):
    @T.prim_func
    def softmax(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
            x = T.alloc_fragment((bM, N), "float32")
            mx = T.alloc_fragment((bM,), "float32")
            s = T.alloc_fragment((bM,), "float32")
            T.copy(A[bx * bM, 0], x)
            for i, j in T.Parallel(bM, N):
                x[i, j] = x[i, j] * scale
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(bM, N):
                x[i, j] = T.exp(x[i, j] - mx[i])
            T.reduce_sum(x, s, dim=1)
            for i, j in T.Parallel(bM, N):
                x[i, j] = x[i, j] / s[i]
            T.copy(x, B[bx * bM, 0])
    return softmax


def row_stats_kernel(M, N, bM, threads, dtype, shift):
    """Row sum and row max of x + shift: two reductions of one fragment, after an update
    that makes the zeros a ragged chunk loads count (unless they are left out)."""
    @T.prim_func
    def row_stats(A: T.Tensor((M, N), dtype), S: T.Tensor((M,), "float32"),
                  Mx: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
            x = T.alloc_fragment((bM, N), dtype)
            s = T.alloc_fragment((bM,), "float32")
            mx = T.alloc_fragment((bM,), "float32")
            T.copy(A[bx * bM, 0], x)
            for i, j in T.Parallel(bM, N):
                x[i, j] = x[i, j] + shift
            T.reduce_sum(x, s, dim=1)
            T.reduce_max(x, mx, dim=1)
            T.copy(s, S[bx * bM])
            T.copy(mx, Mx[bx * bM])
    return row_stats


def held_bytes(bM, N, threads, dtype_bytes=4):
    return -(-bM * N // (threads * 4)) * 4 * dtype_bytes


SOFTMAX = [  # M, N, bM, threads, dtype: all over the budget
    (4, 32000, 1, 512, "float32"),      # the vocabulary of the bench's looped case
    (3, 12345, 1, 128, "float32"),      # odd N: the last of 25 chunks holds 57 columns
    (5, 7000, 2, 256, "float16"),       # two rows per threadgroup, ragged in M and N
    (2, 9000, 1, 64, "bfloat16"),       # chunks within two simdgroups
    (9, 2000, 8, 32, "float32"),        # 4 threads per row: the pairs' shuffle butterfly
    # not a power of two: lanes past the simdgroups that exist take the identity pair
    # (the combine read red_buf past its 28 pairs at 896 threads, issue 25)
    (1, 46592, 1, 896, "float32"),
    (1, 4609, 1, 96, "float32"),        # the fuzz's shrunk case: 3 simdgroups
    (3, 40000, 2, 768, "float16"),      # 24 simdgroups, two rows per threadgroup
]


@pytest.mark.parametrize("M,N,bM,threads,dtype", SOFTMAX)
def test_streamed_softmax(M, N, bM, threads, dtype, run):
    assert held_bytes(bM, N, threads) > METAL.fragment_register_budget_bytes
    a = rand((M, N), dtype)
    kernel = core.compile(softmax_kernel(M, N, bM, threads, dtype, scale=0.5), out_idx=[1])
    assert_close(run(kernel, a), norm.softmax(a.double() * 0.5, out_dtype=dtype), dtype,
                 op_class="transcendental")
    # online max and sum in one read of the row, then a second read to normalize
    stats = kernel.last_run.stats[0]
    index = {b.name: b.index for b in kernel.specs[0].buffers}
    nbytes = a.numel() * a.element_size()
    assert stats["device_bytes_read"][index["A"]] == 2 * nbytes
    assert stats["device_bytes_written"][index["B"]] == nbytes


@pytest.mark.parametrize("M,N,bM,threads,dtype", [
    (4, 32000, 1, 512, "float32"),
    (3, 12345, 1, 128, "float32"),
    (6, 7001, 4, 256, "float16"),       # four rows per threadgroup, odd N
])
def test_streamed_row_sum_and_max(M, N, bM, threads, dtype, run):
    a = rand((M, N), dtype)
    kernel = core.compile(row_stats_kernel(M, N, bM, threads, dtype, 1.5), out_idx=[1, 2])
    s, mx = run(kernel, a)
    shifted = a.double() + 1.5
    # x + shift rounds to the fragment's dtype first: its tolerance applies
    assert_close(s, reduce_oracle(shifted, "sum", 1, out_dtype="float32"), dtype,
                 reduction_length=N, op_class="accumulation")
    assert_close(mx, reduce_oracle(shifted, "max", 1, out_dtype="float32"), dtype)
    # one pass per reduction, no output pass
    assert kernel.msl.count("// streamed:") == 2
    index = {b.name: b.index for b in kernel.specs[0].buffers}
    stats = kernel.last_run.stats[0]
    assert stats["device_bytes_read"][index["A"]] == 2 * a.numel() * a.element_size()


def test_the_choice_shows_in_the_msl():
    kernel = core.compile(softmax_kernel(4, 32000, 1, 512, "float32"), out_idx=[1])
    lines = [ln.strip() for ln in kernel.msl.splitlines() if "// streamed:" in ln]
    assert lines == [
        "// streamed: 16 chunks of 2048 over dim 1 of 'x' (1 x 32000: 256 bytes per thread "
        f"held whole, budget {METAL.fragment_register_budget_bytes}); online max into 'mx' "
        "and sum of exp into 's'",
        "// streamed: 16 chunks of 2048 over dim 1 of 'x' (1 x 32000: 256 bytes per thread "
        f"held whole, budget {METAL.fragment_register_budget_bytes}); the updates, then the "
        "store"]
    # the thread holds one 4-run of the chunk, not the row's 64 floats
    assert "float x_chunk[4];" in kernel.msl and "float x[" not in kernel.msl


def test_rows_under_the_budget_are_held_whole():
    assert held_bytes(1, 1024, 256) <= METAL.fragment_register_budget_bytes
    kernel = core.compile(softmax_kernel(4, 1024, 1, 256, "float32"), out_idx=[1])
    assert "streamed" not in kernel.msl and "float x[4];" in kernel.msl


def test_disabling_the_pass_holds_the_row(run):
    a = rand((2, 32000), "float32")
    kernel = core.compile(softmax_kernel(2, 32000, 1, 512, "float32"), out_idx=[1],
                          disable=("stream_rows",))
    assert "streamed" not in kernel.msl and "float x[64];" in kernel.msl
    assert_close(run(kernel, a), norm.softmax(a), "float32", op_class="transcendental")


def test_every_barrier_of_the_streamed_softmax_is_necessary(run):
    a = rand((2, 32000), "float32")
    kernel = core.compile(softmax_kernel(2, 32000, 1, 512, "float32"), out_idx=[1])
    run(kernel, a)
    # (max, sum) pairs combine at once: the partials' barrier and, as the first of the 16
    # simdgroups combines them, the results'
    assert kernel.msl.count("threadgroup_barrier") == 2
    assert "reduce.across_simdgroups=first_simdgroup_combines" in kernel.decisions
    report = check_barriers(kernel, [a])
    assert report.ok, report.summary()


def test_a_fragment_of_another_shape_of_life_is_held(run):
    # the row is read back after the copy out: not the recognized window, so it is held
    # whole (compiled as before the pass existed), and the result is still right
    M, N, threads = 2, 8192, 128

    @T.prim_func
    def softmax_and_sum(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"),
                        S: T.Tensor((M,), "float32")):
        with T.Kernel(M, threads=threads) as bx:
            x = T.alloc_fragment((1, N), "float32")
            mx = T.alloc_fragment((1,), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(A[bx, 0], x)
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(1, N):
                x[i, j] = T.exp(x[i, j] - mx[i])
            T.copy(x, B[bx, 0])
            T.reduce_sum(x, s, dim=1)
            T.copy(s, S[bx])

    a = rand((M, N), "float32")
    kernel = core.compile(softmax_and_sum, out_idx=[1, 2])
    assert "streamed" not in kernel.msl and "float x[64];" in kernel.msl
    b, s = run(kernel, a)
    e = torch.exp(a.double() - a.double().amax(1, keepdim=True))
    assert_close(b, e.float(), "float32", op_class="transcendental")
    assert_close(s, e.sum(1).float(), "float32", reduction_length=N, op_class="accumulation")


@pytest.mark.parametrize("bM,streamed", [(1, True), (2, False)])
def test_a_result_read_outside_the_window_keeps_its_layout(bM, streamed, run):
    # mx is read again after the window, in a T.Parallel over the whole (bM, N) tile. With
    # one row per threadgroup every thread holds the row's maximum either way, so the row
    # is streamed; with two, the chunks would put each row's result on half the threads
    # while that loop needs it on all, so the row stays held (and compiles as before).
    M, N, threads = 4, 14000, 256

    @T.prim_func
    def softmax_and_max(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"),
                        Mx: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
            x = T.alloc_fragment((bM, N), "float32")
            mx = T.alloc_fragment((bM,), "float32")
            s = T.alloc_fragment((bM,), "float32")
            T.copy(A[bx * bM, 0], x)
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(bM, N):
                x[i, j] = T.exp(x[i, j] - mx[i])
            T.reduce_sum(x, s, dim=1)
            for i, j in T.Parallel(bM, N):
                x[i, j] = x[i, j] / s[i]
            T.copy(x, B[bx * bM, 0])
            for i, j in T.Parallel(bM, N):
                Mx[bx * bM + i, j] = mx[i]

    a = rand((M, N), "float32")
    kernel = core.compile(softmax_and_max, out_idx=[1, 2])
    assert ("// streamed:" in kernel.msl) == streamed
    b, mx = run(kernel, a)
    assert_close(b, norm.softmax(a), "float32", op_class="transcendental")
    assert_close(mx, a.amax(1, keepdim=True).expand(M, N), "float32")


def test_rows_streamed_inside_a_serial_loop_over_row_blocks(run):
    # one threadgroup walks several rows: the window is the loop body, and the stage of the
    # pair combine is reused by the next row (thread_sync orders the reuse)
    M, N, threads, per_group = 6, 9000, 128, 3

    @T.prim_func
    def softmax_rows(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(M // per_group, threads=threads) as bx:
            x = T.alloc_fragment((1, N), "float32")
            mx = T.alloc_fragment((1,), "float32")
            s = T.alloc_fragment((1,), "float32")
            for r in T.serial(per_group):
                T.copy(A[bx * per_group + r, 0], x)
                T.reduce_max(x, mx, dim=1)
                for i, j in T.Parallel(1, N):
                    x[i, j] = T.exp(x[i, j] - mx[i])
                T.reduce_sum(x, s, dim=1)
                for i, j in T.Parallel(1, N):
                    x[i, j] = x[i, j] / s[i]
                T.copy(x, B[bx * per_group + r, 0])

    a = rand((M, N), "float32")
    kernel = core.compile(softmax_rows, out_idx=[1])
    assert kernel.msl.count("// streamed:") == 2 and "float x[" not in kernel.msl
    assert_close(run(kernel, a), norm.softmax(a), "float32", op_class="transcendental")
    report = check_barriers(kernel, [a])
    assert report.ok, report.summary()


def test_a_row_used_after_the_loop_that_would_stream_it_is_held(run):
    # the last row block's x is copied out again after the loop: the loop body is not x's
    # whole life, so x stays held
    M, N, threads = 2, 8192, 128

    @T.prim_func
    def row_sums(A: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32"),
                 Last: T.Tensor((1, N), "float32")):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((1, N), "float32")
            s = T.alloc_fragment((1,), "float32")
            for r in T.serial(M):
                T.copy(A[r, 0], x)
                T.reduce_sum(x, s, dim=1)
                T.copy(s, S[r])
            T.copy(x, Last[0, 0])

    a = rand((M, N), "float32")
    kernel = core.compile(row_sums, out_idx=[1, 2])
    assert "streamed" not in kernel.msl
    s, last = run(kernel, a)
    assert_close(s, a.double().sum(1).float(), "float32", reduction_length=N,
                 op_class="accumulation")
    assert_close(last, a[-1:], "float32")
