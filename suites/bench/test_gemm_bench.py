"""T.gemm on the emulator: time per call and the deterministic cost counters.

Skipped by default (pyproject's addopts has --benchmark-skip); run with
    python -m pytest suites/bench/test_gemm_bench.py --benchmark-only

`benchmark.extra_info` holds, from the emulator's counters (`kernel.last_run.stats`):
device bytes read / written against the minimum (each input read once, each output
written once; a tiled GEMM reads A once per column of blocks and B once per row of
blocks, so the read ratio is that re-read factor), the unique bytes read (every input
byte is needed: ratio 1), the barriers in the MSL and those each threadgroup crosses,
simd collectives (matrix loads and stores) and threadgroup traffic. The wall-clock time
is the emulator's, with every check on; compare it within one run only.
"""

import math

import pytest

import core
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from oracles.gemm import gemm as gemm_oracle
from suites.core.test_gemm import matmul

pytestmark = pytest.mark.bench

CASES = {  # name: (M, N, K, bM, bN, bK, threads, input dtype, output dtype, stages)
    "f16-f32 128^3 64x64x32 t128": (128, 128, 128, 64, 64, 32, 128, "float16", "float32", 2),
    "f32 128x96x64 32x32x16 t64": (128, 96, 64, 32, 32, 16, 64, "float32", "float32", 3),
    "bf16-bf16 ragged 72x136x96 32x64x32 t128": (72, 136, 96, 32, 64, 32, 128, "bfloat16",
                                                 "bfloat16", 2),
    "f16-f16 128x128 tile, chunked epilogue": (128, 128, 64, 128, 128, 32, 256, "float16",
                                               "float16", 2),
}


def _total(per_buffer: dict) -> int:
    return sum(per_buffer.values())


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.benchmark(group="gemm on the emulator")
def test_gemm_counters(benchmark, case):
    M, N, K, bM, bN, bK, threads, dtype, out, stages = CASES[case]
    kernel = core.compile(matmul(M, N, K, bM, bN, bK, threads, dtype, out, stages=stages),
                          out_idx=[2])
    a, b = random_tensor((M, K), dtype, 1), random_tensor((K, N), dtype, 2)
    c = benchmark.pedantic(lambda: kernel(a, b, backend="emu"), rounds=3, iterations=1)
    assert kernel.last_run.findings == []
    assert_close(c, gemm_oracle(a, b), out, reduction_length=K, op_class="accumulation")

    (stats,) = kernel.last_run.stats
    groups = stats["groups"]
    min_read, min_written = a.nbytes + b.nbytes, c.nbytes
    read, written = _total(stats["device_bytes_read"]), _total(stats["device_bytes_written"])
    unique_read = _total(stats["device_unique_bytes_read"])
    info = benchmark.extra_info
    info["device_bytes_read"] = read
    info["device_bytes_read_min"] = min_read
    info["read_ratio"] = round(read / min_read, 3)
    info["unique_read_ratio"] = round(unique_read / min_read, 3)
    info["device_bytes_written"] = written
    info["write_ratio"] = round(written / min_written, 3)
    info["barriers_in_msl"] = kernel.msl.count("threadgroup_barrier")
    info["barriers_per_threadgroup"] = stats["barriers"] / groups
    info["threadgroups"] = groups
    info["simd_ops"] = stats["simd_ops"]
    info["threadgroup_bytes_read"] = stats["threadgroup_bytes_read"]
    info["threadgroup_bytes_written"] = stats["threadgroup_bytes_written"]
    # every output byte written once, every input byte needed; masked edges read nothing
    # outside the tensors, so reads are exactly the tiling's re-read factor
    assert written == min_written and unique_read == min_read
    blocks_m, blocks_n = math.ceil(M / bM), math.ceil(N / bN)
    if M % bM == 0 and N % bN == 0 and K % bK == 0:
        assert read == a.nbytes * blocks_n + b.nbytes * blocks_m
