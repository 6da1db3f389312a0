"""core/target.py is the one home of the Metal facts: the emulator's generated header matches
it, and the layers that use a fact (printer, frontend, emulator launcher and C++ runtime)
agree with it."""

from pathlib import Path

import numpy as np
import pytest

import core
import core.language as T
from core.codegen import msl
from core.errors import KernelDefinitionError, LaunchError
from core.runtime import emu
from core.target import DTYPES, METAL, SUPPORTED, bits, c_header

HEADER = Path(__file__).resolve().parents[2] / "core/runtime/emu/include/mt_target.h"
MSL_HEADER = "#include <metal_stdlib>\nusing namespace metal;\n"


def test_generated_header_matches_the_generator():
    # Regenerate with: python -m core.target > core/runtime/emu/include/mt_target.h
    assert HEADER.read_text() == c_header()


def test_printer_and_frontend_read_the_dtype_table():
    for name in SUPPORTED:
        assert msl.TYPES[name] == DTYPES[name].msl
        assert msl.TYPE_BYTES[name] * 8 == bits(name) == DTYPES[name].bits


def test_emulator_simdgroups_have_the_target_width():
    src = MSL_HEADER + r"""
kernel void lanes(device uint* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]],
                  uint lane [[thread_index_in_simdgroup]],
                  uint sg [[simdgroup_index_in_threadgroup]],
                  uint width [[threads_per_simdgroup]]) {
  out[3 * tid] = lane;
  out[3 * tid + 1] = sg;
  out[3 * tid + 2] = width;
}
"""
    threads = 2 * METAL.simd_width + 3          # a partial last simdgroup too
    out = np.zeros(3 * threads, np.uint32)
    res = emu.run_msl(src, "lanes", grid=1, threadgroup=threads, buffers=[out])
    assert res.findings == []
    tid = np.arange(threads)
    got = out.reshape(threads, 3)
    np.testing.assert_array_equal(got[:, 0], tid % METAL.simd_width)
    np.testing.assert_array_equal(got[:, 1], tid // METAL.simd_width)
    np.testing.assert_array_equal(got[:, 2], np.full(threads, METAL.simd_width))


def test_emulator_rejects_threadgroup_memory_past_the_target_limit():
    floats = METAL.threadgroup_memory_bytes // 4 + 1
    src = MSL_HEADER + f"""
kernel void big(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {{
  threadgroup float t[{floats}];
  t[tid] = 0.0f;
  y[tid] = t[tid];
}}
"""
    with pytest.raises(LaunchError, match=f"{4 * floats} bytes.*at most "
                                          f"{METAL.threadgroup_memory_bytes}"):
        emu.run_msl(src, "big", grid=1, threadgroup=1, buffers=[np.zeros(1, np.float32)])


def test_launcher_rejects_threadgroups_past_the_target_limit():
    src = MSL_HEADER + "kernel void k(device float* y [[buffer(0)]]) { }\n"
    with pytest.raises(LaunchError, match=str(METAL.max_threads_per_group)):
        emu.run_msl(src, "k", grid=1, threadgroup=METAL.max_threads_per_group + 1,
                    buffers=[np.zeros(1, np.float32)])


def test_frontend_rejects_threads_past_the_target_limit():
    with pytest.raises(KernelDefinitionError, match=f"at most {METAL.max_threads_per_group}"):
        @T.prim_func
        def too_many(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=METAL.max_threads_per_group + 32) as bx:
                A[bx] = T.float32(0)
        core.compile(too_many)


def test_the_compilers_costs_are_the_bench_models_figures():
    # the lowering decisions weigh on-chip work with core.target.COSTS; the bench's roofline
    # model (harness/bench/roofline.py) prices the same work with its apple7/8 figures
    from harness.bench import roofline
    from core.target import COSTS

    chip = roofline._APPLE7
    assert COSTS.schedulers == chip.schedulers
    assert COSTS.simd_reduce_cycles == chip.simd_cost("reduce")
    assert COSTS.threadgroup_bytes_per_cycle == chip.threadgroup_bytes_per_cycle
    assert COSTS.l2_bytes_per_cycle == chip.l2_bytes_per_cycle
    assert COSTS.barrier_cycles == chip.barrier_cycles
    assert COSTS.max_threads == chip.max_threads
    assert COSTS.threadgroup_memory_bytes == chip.threadgroup_memory_bytes
    m2 = roofline.CHIPS["M2"]
    assert COSTS.dram_bytes_per_cycle == pytest.approx(m2.bandwidth / m2.cycles_per_second)
    # a core holds the threadgroups its threads and its threadgroup memory allow
    assert COSTS.resident_groups(1024, 0) == 3
    assert COSTS.resident_groups(64, 30 * 1024) == 2
