"""The T.reduce family on the emulator: time per call and the deterministic cost counters.

Skipped by default (pyproject's addopts has --benchmark-skip); run with
    python -m pytest suites/bench/test_reduce_bench.py --benchmark-only

`benchmark.extra_info` holds, from the emulator's counters (`kernel.last_run.stats`):
device bytes read / written against the minimum (each input read once, each output
written once), the barriers in the MSL and those each threadgroup crosses, simd
collectives (the XOR butterflies) and threadgroup traffic (the cross-simdgroup stage). A
reduction reads its input once: the read ratio is 1 except for inputs every threadgroup
needs (RMSNorm's weight: one read per threadgroup, reported separately). The wall-clock
time is the emulator's, with every check on; compare it within one run only.
"""

from dataclasses import dataclass

import pytest

import core
from harness.check.compare import assert_close
from oracles import norm
from oracles.reduce import reduce as reduce_oracle
from suites.core.test_reduce import (online_softmax, rand, reductions, rmsnorm_kernel,
                                     softmax_kernel)

pytestmark = pytest.mark.bench


@dataclass(frozen=True)
class Case:
    build: object           # () -> core.Kernel
    inputs: object          # () -> {parameter name: tensor}, in call order
    read: tuple             # inputs the kernel reads (a clear=True Init is never read)
    check: object           # (inputs, outputs) -> None; raises on a wrong result
    passes: int = 1         # times the kernel's own loops go over its first input


def _reductions(M, N, bM, threads, dtype, dim):
    def inputs():
        rows = dim in (1, -1)
        return {"A": rand((M, N), dtype, 1),
                "Init": rand((M,) if rows else (-(-M // bM), N), dtype, 2)}

    def check(args, outs):
        a = args["A"] if dim in (1, -1) else args["A"].reshape(-1, bM, N)
        assert_close(outs[0], reduce_oracle(a, "sum", 1), dtype, reduction_length=a.shape[1],
                     op_class="accumulation")
    return Case(lambda: core.compile(reductions(M, N, bM, threads, dtype, dim),
                                     out_idx=[2, 3, 4, 5, 6]), inputs, ("A",), check)


def _softmax(M, N, bM, threads, dtype):
    def check(args, out):
        assert_close(out, norm.softmax(args["X"]), dtype, op_class="transcendental")
    return Case(lambda: core.compile(softmax_kernel(M, N, bM, threads, dtype), out_idx=[1]),
                lambda: {"X": rand((M, N), dtype, 1)}, ("X",), check)


def _rmsnorm(M, N, bM, threads, dtype):
    def check(args, out):
        assert_close(out, norm.rmsnorm(args["X"], args["W"], 1e-6), dtype,
                     op_class="transcendental")
    return Case(lambda: core.compile(rmsnorm_kernel(M, N, bM, threads, dtype), out_idx=[2]),
                lambda: {"X": rand((M, N), dtype, 1), "W": rand((N,), dtype, 2)}, ("X", "W"), check)


def _online_softmax(M, N, bM, bN, threads, dtype):
    def check(args, outs):
        assert_close(outs[1], norm.softmax(args["A"]), dtype, op_class="transcendental")
    return Case(lambda: core.compile(online_softmax(M, N, bM, bN, threads, dtype),
                                     out_idx=[1, 2]),
                lambda: {"A": rand((M, N), dtype, 1)}, ("A",), check, passes=2)


CASES = {
    "5 row reductions f32 64x1024, 4 rows x 256 threads": _reductions(64, 1024, 4, 256,
                                                                        "float32", 1),
    "5 row reductions bf16 256x128, 16 rows x 128 threads": _reductions(256, 128, 16, 128,
                                                                         "bfloat16", 1),
    "5 column reductions f32 256x128, 64-row tiles x 128 threads": _reductions(
        256, 128, 64, 128, "float32", 0),
    "softmax f16 64x1024, 4 rows x 256 threads": _softmax(64, 1024, 4, 256, "float16"),
    "softmax f32 128x128, 16 rows x 128 threads": _softmax(128, 128, 16, 128, "float32"),
    "rmsnorm bf16 32x2048, 1 row x 256 threads": _rmsnorm(32, 2048, 1, 256, "bfloat16"),
    "online softmax f16 32x1024, 8 rows, 128-wide k tiles": _online_softmax(32, 1024, 8, 128,
                                                                            128, "float16"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.benchmark(group="reductions on the emulator")
def test_reduce_counters(benchmark, case):
    case = CASES[case]
    kernel = case.build()
    args = case.inputs()
    outs = benchmark.pedantic(lambda: kernel(*args.values(), backend="emu"), rounds=3,
                              iterations=1)
    assert kernel.last_run.findings == []
    case.check(args, outs)

    (stats,) = kernel.last_run.stats
    index = {b.name: b.index for b in kernel.specs[0].buffers}
    outputs = outs if isinstance(outs, (tuple, list)) else (outs,)
    read, written = stats["device_bytes_read"], stats["device_bytes_written"]
    min_read = sum(args[n].nbytes for n in case.read)
    min_written = sum(t.nbytes for t in outputs)
    info = benchmark.extra_info
    info["device_bytes_read"] = sum(read.values())
    info["device_bytes_read_min"] = min_read
    info["read_ratio"] = round(sum(read.values()) / min_read, 3)
    for n in case.read:
        info[f"read_ratio[{n}]"] = round(read[index[n]] / args[n].nbytes, 3)
    info["device_bytes_written"] = sum(written.values())
    info["device_bytes_written_min"] = min_written
    info["write_ratio"] = round(sum(written.values()) / min_written, 3)
    info["barriers_in_msl"] = kernel.msl.count("threadgroup_barrier")
    info["barriers_per_threadgroup"] = stats["barriers"] / stats["groups"]
    info["threadgroups"] = stats["groups"]
    info["simd_ops"] = stats["simd_ops"]
    info["threadgroup_bytes_read"] = stats["threadgroup_bytes_read"]
    info["threadgroup_bytes_written"] = stats["threadgroup_bytes_written"]
    # the reduced tiles are read once per pass of the kernel (the two-pass online softmax
    # reads its input twice, RMSNorm's weight is read per threadgroup), and every output
    # element is written once
    assert read[index[case.read[0]]] == case.passes * args[case.read[0]].nbytes
    assert sum(written.values()) == min_written
