"""Threadgroup memory reuse end to end (pass merge_threadgroup): TileLang's alloc_reducer
GEMV with a 32 KiB tile, whose reduction stage made it 36 KiB and was refused, compiles
into one 32 KiB arena, runs clean on the emulator, matches torch, and every barrier of it
is necessary (the one the reuse needs included); a kernel whose buffers are live at once
past 32 KiB is still refused, naming them."""

import pytest

import core
from core.errors import LoweringError
from harness.check.barriers import check_barriers
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from suites.core.test_gemm import _gemm_stage_and_reduction
from suites.transform.test_merge_threadgroup import (gemv_reducer, stage_beside_live_tile,
                                                      two_tiles_in_turn)

M, N = 256, 256


def inputs(seed=0):
    return random_tensor((M, N), "float16", seed), random_tensor((N,), "float16", seed + 1)


def test_the_refused_gemv_now_fits_and_matches_torch(run):
    kernel = core.compile(gemv_reducer(128, 128), out_idx=[2])
    a, x = inputs()
    o = run(kernel, a, x)
    # the products round in float16 (a_frag * x_frag), then accumulate in float32
    assert_close(o, (a.double() * x.double()).sum(1), dtype="float16", reduction_length=N,
                 op_class="accumulation")


def test_the_msl_shows_one_arena_and_the_views_into_it():
    msl = core.compile(gemv_reducer(128, 128), out_idx=[2]).msl
    assert "threadgroup uint4 tg_arena[2048];" in msl            # 32768 bytes, not 36864
    assert "threadgroup float* reducer_buf = (threadgroup float*)((threadgroup uchar*)" \
           "tg_arena + 0);" in msl
    assert "threadgroup half* a_smem = (threadgroup half*)((threadgroup uchar*)" \
           "tg_arena + 0);" in msl
    assert "threadgroup half a_smem[" not in msl


@pytest.mark.backend("emu")
def test_every_barrier_of_the_merged_gemv_is_necessary():
    # two barriers: the one the reuse needs (the tile's last reads before the stage's first
    # writes by other threads) and the stage's own (its writes before its reads)
    kernel = core.compile(gemv_reducer(128, 128), out_idx=[2])
    report = check_barriers(kernel, list(inputs(2)))
    assert report.ok, report.summary()
    assert len(report.barriers) == 2 and all(v.necessary for v in report.barriers)


def test_a_kernel_whose_live_bytes_exceed_32_kib_is_still_refused():
    with pytest.raises(LoweringError, match=r"threadgroup memory: the threadgroup buffers live "
                                            r"at once, 'A_s' \(32768 bytes\), 'red_buf' \(64 "
                                            r"bytes\), total 32832 bytes and exceed the 32768"):
        core.compile(stage_beside_live_tile, out_idx=[2, 3])


@pytest.mark.backend("emu")
def test_every_barrier_of_a_gemm_whose_stages_reuse_its_operands_is_necessary():
    # A_s, B_s (16 KiB) die after T.gemm; its accumulator's 16 KiB stage and the
    # reduction's stage then take their bytes: one 16 KiB arena instead of 33 KiB
    kernel = core.compile(_gemm_stage_and_reduction(64), out_idx=[3, 4])
    assert "threadgroup uint4 tg_arena[1024];" in kernel.msl
    args = [random_tensor(shape, dt, seed) for seed, (shape, dt) in
            enumerate((((64, 64), "float16"), ((64, 64), "float16"), ((64, 64), "float32")))]
    report = check_barriers(kernel, args)
    assert report.ok, report.summary()
    assert report.barriers and all(v.necessary for v in report.barriers)


def test_two_user_tiles_in_turn_share_one_arena(run):
    kernel = core.compile(two_tiles_in_turn, out_idx=[2, 3])
    assert "threadgroup uint4 tg_arena[1536];" in kernel.msl          # 24 KiB, not 48
    a, b = (random_tensor((64, 96), "float32", seed) for seed in (3, 4))
    c, d = run(kernel, a, b)
    assert_close(c, a.double().flip(0), dtype="float32", op_class="elementwise")
    assert_close(d, b.double().flip(0) * 2, dtype="float32", op_class="elementwise")
    report = check_barriers(kernel, [a, b])
    assert report.ok, report.summary()
    assert len(report.barriers) == 3 and all(v.necessary for v in report.barriers)
