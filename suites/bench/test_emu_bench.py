"""Emulator benchmarks (pytest-benchmark; skipped in the default run).

    pytest suites/bench/test_emu_bench.py --benchmark-only --benchmark-group-by=group

Targets from the foundation issue, measured side by side in one run: cold kernel build with
the precompiled header (<= 0.6 s), cached build (<= 10 ms), fiber context switch (<= 20 ns),
a 64x256-thread block reduction (<= 25 ms on one core; scaling on two), race-check
overhead (<= 3x). Wall-clock figures are noisy on a shared machine: compare ratios within
one run, never single timings across runs. Issue 11's goals (GEMM 512^3 >= 10x, softmax
256x1024 >= 4x against an older emulator) are measured by the group "emulator against a
reference revision" (METALTILE_EMU_AGAINST=GITREF; `harness emu-against GITREF` prints it).
"""

import itertools
import subprocess

import numpy as np
import pytest

from core.runtime import emu
from core.runtime.emu import build, translate
from harness.check.compare import assert_close

HEADER = "#include <metal_stdlib>\nusing namespace metal;\n"
REDUCE = HEADER + r"""
kernel void block_sum(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                      uint tid [[thread_index_in_threadgroup]], uint g [[threadgroup_position_in_grid]],
                      uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float partial[8];
  float v = simd_sum(x[g * 256 + tid]);
  if (lane == 0) partial[sg] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (sg == 0) {
    float s = simd_sum(lane < 8 ? partial[lane] : 0.0f);
    if (lane == 0) out[g] = s;
  }
}
"""
_counter = itertools.count()


@pytest.mark.benchmark(group="build")
def test_cold_build_with_pch(benchmark):
    builder = build.default_builder()
    builder.precompiled_header(True)
    builder.runtime_objects()

    def fresh():
        # A kernel never built before: its source differs in a constant.
        src = REDUCE.replace("0.0f", f"{next(_counter) + 1e-9 * np.random.rand():.12f}f")
        return (translate.translate(src),), {}

    benchmark.pedantic(lambda tr: builder.build(tr), setup=fresh, rounds=5, iterations=1)


@pytest.mark.benchmark(group="build")
def test_cached_build_new_process(benchmark):
    tr = translate.translate(REDUCE)
    build.default_builder().build(tr)
    # A new Builder has an empty memo: this is the cost a new process pays for a cached kernel.
    benchmark(lambda: build.Builder(build.default_builder().toolchain).build(tr))


@pytest.mark.benchmark(group="build")
def test_cached_build_same_process(benchmark):
    tr = translate.translate(REDUCE)
    builder = build.default_builder()
    builder.build(tr)
    benchmark(lambda: builder.build(tr))


SWITCH = r"""
#include <chrono>
#include <cstdio>
#include "fiber.h"
static void* main_sp; static void* fib_sp; static long n = 0;
static void body(void*) { for (;;) { ++n; mt_fiber_switch(&fib_sp, main_sp); } }
int main() {
  static unsigned char stack[1 << 16];
  fib_sp = mt_fiber_prepare(stack + sizeof stack, body, nullptr);
  const long N = 20000000;
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < N; ++i) mt_fiber_switch(&main_sp, fib_sp);
  auto t1 = std::chrono::steady_clock::now();
  double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / (2.0 * N);
  std::printf("%.3f\n", ns);
  return n == N ? 0 : 1;
}
"""


@pytest.mark.benchmark(group="context switch")
def test_context_switch(benchmark, tmp_path):
    src = tmp_path / "switch.cpp"
    src.write_text(SWITCH)
    exe = tmp_path / "switch"
    cxx = build.default_builder().toolchain.cxx
    subprocess.run([cxx, "-O2", "-std=c++17", "-I", str(build.HERE / "src"), str(src), "-o", str(exe)],
                   check=True)
    ns = []
    benchmark.pedantic(lambda: ns.append(float(subprocess.run([str(exe)], capture_output=True,
                                                               text=True, check=True).stdout)),
                       rounds=5, iterations=1)
    benchmark.extra_info["ns_per_switch_min"] = min(ns)
    benchmark.extra_info["ns_per_switch_median"] = sorted(ns)[len(ns) // 2]
    assert min(ns) > 0


@pytest.mark.parametrize("groups", [64, 1024])
@pytest.mark.parametrize("mode", ["plain", "checked-1core", "checked-2cores", "plain-2cores"])
@pytest.mark.benchmark(group="block reduction, 256 threads per group")
def test_block_reduction(benchmark, mode, groups):
    x = np.random.default_rng(0).standard_normal(groups * 256).astype(np.float32)
    out = np.zeros(groups, np.float32)
    plain = mode.startswith("plain")
    kw = dict(grid=groups, threadgroup=256, buffers=[x, out], workers=2 if "2cores" in mode else 1,
              checks=() if plain else emu.ALL_CHECKS, instrument=not plain)
    emu.run_msl(REDUCE, "block_sum", **kw)  # build outside the timing
    benchmark(lambda: emu.run_msl(REDUCE, "block_sum", **kw))
    assert_close(out, x.reshape(groups, 256).sum(1, dtype=np.float64), "float32",
                 reduction_length=256, op_class="accumulation")


# -- kernel shapes that matter: tiled GEMM and row softmax, against a plain C++ anchor ------
#
# The emulator's own cost on real kernels, with and without checks (cached build, process
# warm: the timed call is `kernel(...)` as a user makes it). The anchor is the same 256^3
# GEMM as one plain C++ loop (f16 converted to f32 first, i-k-j order, -O2, one thread)
# built by the emulator's clang: the emulator's time over the anchor's is the overhead of
# emulating 128 threads per group with checks. To see the effect of an emulator change, run
# this group from a checkout of the old code and of the new one, alternating, and compare
# ratios measured in one session.

@pytest.mark.parametrize("checks", ["checks", "no-checks"])
@pytest.mark.parametrize("n", [256, 512])
@pytest.mark.benchmark(group="kernel shapes: gemm f16->f32 64x64x32 t128 stages=2")
def test_gemm_shape(benchmark, n, checks):
    import torch

    import core
    from harness.check.compare import assert_close
    from oracles.gemm import gemm as gemm_oracle
    from suites.core.test_gemm import matmul

    kernel = core.compile(matmul(n, n, n, 64, 64, 32, 128, "float16", "float32", stages=2),
                          out_idx=[2])
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).half()
    b = torch.randn(n, n, generator=gen).half()
    ck = emu.ALL_CHECKS if checks == "checks" else ()
    kernel(a, b, backend="emu", checks=ck)  # build outside the timing
    c = benchmark.pedantic(lambda: kernel(a, b, backend="emu", checks=ck), rounds=3,
                           iterations=1)
    assert kernel.last_run.findings == []
    assert_close(c, gemm_oracle(a, b), reduction_length=n, what="gemm", op_class="accumulation")
    benchmark.extra_info["threadgroups"] = (n // 64) ** 2


@pytest.mark.parametrize("checks", ["checks", "no-checks"])
@pytest.mark.benchmark(group="kernel shapes: softmax f16 256x1024, 64 groups of 256")
def test_softmax_shape(benchmark, checks):
    import torch

    import core
    from harness.check.compare import assert_close
    from oracles.norm import softmax as softmax_oracle
    from suites.core.test_reduce import softmax_kernel

    kernel = core.compile(softmax_kernel(256, 1024, 4, 256, "float16"), out_idx=[1])
    x = torch.randn(256, 1024, generator=torch.Generator().manual_seed(0)).half()
    ck = emu.ALL_CHECKS if checks == "checks" else ()
    kernel(x, backend="emu", checks=ck)
    y = benchmark.pedantic(lambda: kernel(x, backend="emu", checks=ck), rounds=10, iterations=1)
    assert kernel.last_run.findings == []
    assert_close(y, softmax_oracle(x, dim=-1, out_dtype=torch.float16), reduction_length=1024,
                 what="softmax", op_class="transcendental")


ANCHOR = r"""
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
// The physical anchor: C = A @ B, 256^3, f16 inputs converted to f32 first, i-k-j order.
int main() {
  const int n = 256;
  std::vector<_Float16> ah(n * n), bh(n * n);
  for (int i = 0; i < n * n; ++i) {
    ah[i] = _Float16((i * 7919 % 2003) / 1001.0f - 1.0f);
    bh[i] = _Float16((i * 104729 % 1999) / 999.0f - 1.0f);
  }
  double best = 1e30, check = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<float> a(ah.begin(), ah.end()), b(bh.begin(), bh.end()), c(n * n, 0.0f);
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < n; ++k) {
        const float aik = a[i * n + k];
        for (int j = 0; j < n; ++j) c[i * n + j] += aik * b[k * n + j];
      }
    auto t1 = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    if (ms < best) best = ms;
    check = c[n * n / 2 + 3];
  }
  double ref = 0;  // one element recomputed in double: the loop really ran
  for (int k = 0; k < n; ++k) ref += double(float(ah[(n / 2) * n + k])) * float(bh[k * n + 3]);
  std::printf("%.4f %.6f %.6f\n", best, check, ref);
  return 0;
}
"""


@pytest.mark.benchmark(group="kernel shapes: gemm f16->f32 64x64x32 t128 stages=2")
def test_gemm_plain_cpp_anchor(benchmark, tmp_path):
    src = tmp_path / "anchor.cpp"
    src.write_text(ANCHOR)
    exe = tmp_path / "anchor"
    cxx = build.default_builder().toolchain.cxx
    subprocess.run([cxx, "-O2", "-std=c++17", *build._arch_flags(), str(src), "-o", str(exe)],
                   check=True)
    runs = []
    benchmark.pedantic(lambda: runs.append(subprocess.run([str(exe)], capture_output=True,
                                                          text=True, check=True).stdout.split()),
                       rounds=3, iterations=1)
    ms, got, ref = (float(v) for v in runs[-1])
    assert abs(got - ref) <= 1e-3 * (1 + abs(ref))
    benchmark.extra_info["anchor_ms_min"] = min(float(r[0]) for r in runs)


# -- the emulator against another revision's, on this tree's MSL -----------------------------
#
# METALTILE_EMU_AGAINST=GITREF runs `harness emu-against`'s interleaved A/B (the other
# revision checked out under reports/out/against/) and records, per shape and checks
# setting, both sides' medians and the speed-up; the two emulators must agree on every
# output byte and counter. Without the variable it is skipped (it builds another tree).

@pytest.mark.benchmark(group="emulator against a reference revision")
def test_emulator_against_reference(benchmark):
    import os
    from pathlib import Path

    from harness.bench import emu_against

    ref = os.environ.get("METALTILE_EMU_AGAINST")
    if not ref:
        pytest.skip("opt-in: set METALTILE_EMU_AGAINST=GITREF (a git revision) to time this "
                    "tree's emulator against GITREF's; it checks out and builds GITREF")
    root = Path(__file__).resolve().parents[2]
    rounds = int(os.environ.get("METALTILE_EMU_AGAINST_ROUNDS", emu_against.DEFAULT_ROUNDS))
    result = benchmark.pedantic(
        lambda: emu_against.run(ref, root=root, out_dir=root / "reports" / "out",
                                rounds=rounds), rounds=1, iterations=1)
    assert "error" not in result, result.get("error")
    for row in result["rows"]:
        key = f"{row['shape']} checks {'on' if row['checks'] else 'off'}"
        assert "error" not in row, f"{key}: {row.get('error')}"
        assert row["same_outputs"] and row["same_counters"], (key, row["counter_differences"])
        assert row["oracle"] == "pass", (key, row["oracle"])
        benchmark.extra_info[key] = {"this_median_s": row["this_median"],
                                     "ref_median_s": row["ref_median"],
                                     "speedup": row["speedup"]}
