"""The emulator's simd counters split by kind, on generated reductions: a whole-simdgroup
combine runs as simd_sum/simd_max (counted as reductions, which the cost model prices at
SUM<F32>'s 14.54 cycles), a part of a simdgroup as a simd_shuffle_xor butterfly (shuffles,
2.04 cycles plus the step's combine each). Each kind's count is what the MSL text executes:
its call sites times the simdgroups and threadgroups that reach them."""

import re

import pytest

import core
from harness.check.compare import assert_close
from oracles import norm
from oracles.reduce import KINDS, op_class
from oracles.reduce import reduce as reduce_oracle
from suites.core.test_reduce import rand, reductions, softmax_kernel

pytestmark = pytest.mark.backend("emu")      # reads the emulator's counters


def _calls(msl: str, names) -> int:
    return sum(len(re.findall(rf"\b{n}\(", msl)) for n in names)


def test_whole_simdgroup_rows_count_reductions_not_shuffles(run):
    M, N, bM, threads = 4, 1024, 2, 256            # 8 simdgroups per row
    a = rand((M, N), "float32", 1)
    kernel = core.compile(softmax_kernel(M, N, bM, threads, "float32"), out_idx=[1])
    assert_close(run(kernel, a), norm.softmax(a), "float32", op_class="transcendental")
    stats = kernel.last_run.stats[0]
    groups, simdgroups = M // bM, threads // 32
    sites = _calls(kernel.msl, ("simd_sum", "simd_max"))
    assert _calls(kernel.msl, ("simd_shuffle_xor",)) == 0
    # per reduction (max, sum) and slot (bM rows), one simd reduction in every simdgroup,
    # then one in the first, which combines the 8 partials for all (kernel.decisions)
    reductions = 2
    assert sites == 2 * reductions
    assert "reduce.across_simdgroups=first_simdgroup_combines" in kernel.decisions
    assert stats["simd_reduce_ops"] == stats["simd_ops"] == \
        groups * reductions * bM * (simdgroups + 1)
    assert stats["simd_shuffle_ops"] == stats["simd_broadcast_ops"] == 0


def test_rows_on_part_of_a_simdgroup_count_butterfly_shuffles(run):
    M, N, bM, threads = 8, 64, 4, 64               # a row on 16 lanes: a 4-step butterfly
    kernel = core.compile(reductions(M, N, bM, threads, "float32", 1), out_idx=[2, 3, 4, 5, 6])
    a, init = rand((M, N), "float32", 2), rand((M,), "float32", 3)
    for kind, got in zip(KINDS, run(kernel, a, init)):
        assert_close(got, reduce_oracle(a, kind, 1, out_dtype="float32"), "float32",
                     reduction_length=N, op_class=op_class(kind), what=f"reduce_{kind}:")
    stats = kernel.last_run.stats[0]
    sites = _calls(kernel.msl, ("simd_shuffle_xor",))
    assert sites == 4 * len(KINDS) and _calls(kernel.msl, ("simd_sum", "simd_max")) == 0
    groups, simdgroups = M // bM, threads // 32
    assert stats["simd_shuffle_ops"] == stats["simd_ops"] == groups * simdgroups * sites
    assert stats["simd_reduce_ops"] == 0
