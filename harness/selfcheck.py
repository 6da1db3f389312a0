"""The emulator's self-check: a handful of MSL kernels run through `emu.run_msl`, each
compared with a NumPy reference by the project's comparison helper (harness.check.compare), so that
one command tells whether the emulator works on this machine.

Each `Check` is an MSL source, a launch, a buffer factory and a verdict function; the verdict
sees the buffers after the run and the findings, and returns None (passed) or the reason it
failed. One kernel is racy on purpose (a missing barrier): it passes only when the race
checker reports it. `run_selfcheck()` returns one `CheckResult` per check and never raises
for a failing kernel: an emulator error is that check's failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.errors import MetaltileError
from core.runtime import emu
from harness.check.compare import assert_close

HEADER = "#include <metal_stdlib>\nusing namespace metal;\n\n"

ADD_GUARDED = HEADER + """\
kernel void add_guarded(device const float* a [[buffer(0)]],
                        device const float* b [[buffer(1)]],
                        device float* c [[buffer(2)]],
                        constant uint& n [[buffer(3)]],
                        uint gid [[thread_position_in_grid]]) {
    if (gid < n) {
        c[gid] = a[gid] + b[gid];
    }
}
"""

BLOCK_SUM = HEADER + """\
kernel void block_sum(device const float* x [[buffer(0)]],
                      device float* out [[buffer(1)]],
                      uint tid [[thread_position_in_threadgroup]],
                      uint group [[threadgroup_position_in_grid]]) {
    threadgroup float partial[256];
    partial[tid] = x[group * 256 + tid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint stride = 128; stride > 0; stride >>= 1) {
        if (tid < stride) {
            partial[tid] += partial[tid + stride];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (tid == 0) {
        out[group] = partial[0];
    }
}
"""

SIMD_SUM = HEADER + """\
kernel void simd_block_sum(device const float* x [[buffer(0)]],
                           device float* out [[buffer(1)]],
                           uint gid [[thread_position_in_grid]],
                           uint group [[threadgroup_position_in_grid]],
                           uint lane [[thread_index_in_simdgroup]],
                           uint simd [[simdgroup_index_in_threadgroup]]) {
    threadgroup float sums[4];
    float s = simd_sum(x[gid]);
    if (lane == 0) {
        sums[simd] = s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (simd == 0) {
        float t = lane < 4 ? sums[lane] : 0.0f;
        t = simd_sum(t);
        if (lane == 0) {
            out[group] = t;
        }
    }
}
"""

# (a * b) * c rounds to half after each multiply; in float it would round once, and the
# results differ for some inputs. c * 0.5h is exact, so contraction cannot change `sum`.
HALF_CHAIN = HEADER + """\
kernel void half_chain(device const half* a [[buffer(0)]],
                       device const half* b [[buffer(1)]],
                       device const half* c [[buffer(2)]],
                       device half* prod [[buffer(3)]],
                       device half* sum [[buffer(4)]],
                       device float* wide [[buffer(5)]],
                       uint gid [[thread_position_in_grid]]) {
    half x = a[gid];
    prod[gid] = x * b[gid] * c[gid];
    sum[gid] = x + b[gid] - c[gid] * 0.5h;
    wide[gid] = float(x) * 3.0f;
}
"""

# Missing threadgroup_barrier between the store to `tile` and the neighbour's load.
SHIFT_RACY = HEADER + """\
kernel void shift_racy(device const float* x [[buffer(0)]],
                       device float* y [[buffer(1)]],
                       uint tid [[thread_position_in_threadgroup]],
                       uint gid [[thread_position_in_grid]]) {
    threadgroup float tile[256];
    tile[tid] = x[gid];
    y[gid] = tile[(tid + 1) % 256];
}
"""


@dataclass(frozen=True)
class Check:
    name: str
    what: str  # one line for the results table
    source: str
    kernel: str
    grid: tuple[int, int, int]  # threadgroups per dimension
    threadgroup: tuple[int, int, int]
    make_buffers: Callable[[np.random.Generator], list[np.ndarray]]
    verdict: Callable[[list[np.ndarray], list], str | None]  # (buffers after, findings)


@dataclass(frozen=True)
class CheckResult:
    name: str
    what: str
    passed: bool
    seconds: float
    findings: int
    detail: str


def _differs(what: str, got: np.ndarray, want: np.ndarray, **policy) -> str | None:
    """None when `got` passes the project's comparison (harness.check.compare.assert_close with the
    tolerance policy; `policy` as there), else its message."""
    try:
        assert_close(got, want, what=what, **policy)
    except AssertionError as failure:
        return str(failure).strip()
    return None


def _bits(array: np.ndarray) -> np.ndarray:
    """The bit patterns of a float16 array: compared exactly, whatever the float policy."""
    return array.view(np.int16)


def _no_findings(findings: list) -> str | None:
    if findings:
        kinds = sorted({f.kind for f in findings})
        return f"{len(findings)} unexpected findings ({', '.join(kinds)}): {findings[0].detail}"
    return None


def _first(*reasons: str | None) -> str | None:
    return next((r for r in reasons if r), None)


def _add_buffers(rng: np.random.Generator) -> list[np.ndarray]:
    n = 1000  # 4 groups of 256 threads: the last 24 threads must not touch memory
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    return [a, b, np.zeros(n, np.float32), np.array([n], np.uint32)]


def _add_verdict(bufs: list[np.ndarray], findings: list) -> str | None:
    a, b, c, _ = bufs
    return _first(_no_findings(findings), _differs("c", c, a + b))


def _sum_buffers(groups: int, per_group: int) -> Callable[[np.random.Generator], list]:
    def make(rng: np.random.Generator) -> list[np.ndarray]:
        return [rng.standard_normal(groups * per_group, dtype=np.float32),
                np.full(groups, np.nan, np.float32)]
    return make


def _sum_verdict(per_group: int) -> Callable[[list[np.ndarray], list], str | None]:
    def verdict(bufs: list[np.ndarray], findings: list) -> str | None:
        x, out = bufs
        want = x.astype(np.float64).reshape(-1, per_group).sum(axis=1).astype(np.float32)
        return _first(_no_findings(findings),
                      _differs("out", out, want, reduction_length=per_group))
    return verdict


def _half_buffers(rng: np.random.Generator) -> list[np.ndarray]:
    n = 1024
    def operand() -> np.ndarray:  # magnitudes in [0.5, 2): no subnormals, no overflow
        signs = rng.choice(np.array([-1.0, 1.0]), n)
        return (signs * rng.uniform(0.5, 2.0, n)).astype(np.float16)
    return [operand(), operand(), operand(), np.zeros(n, np.float16), np.zeros(n, np.float16),
            np.zeros(n, np.float32)]


def _half_verdict(bufs: list[np.ndarray], findings: list) -> str | None:
    a, b, c, prod, total, wide = bufs
    return _first(_no_findings(findings),
                  _differs("prod bits", _bits(prod), _bits((a * b) * c)),
                  _differs("sum bits", _bits(total), _bits((a + b) - c * np.float16(0.5))),
                  _differs("wide", wide, a.astype(np.float32) * np.float32(3)))


def _shift_buffers(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal(512, dtype=np.float32), np.zeros(512, np.float32)]


def _racy_verdict(bufs: list[np.ndarray], findings: list) -> str | None:
    races = [f for f in findings if f.kind == "race"]
    if not races:
        return "the missing barrier was not reported as a race"
    if not any("threadgroup" in str(f.address_space) for f in races):
        return f"races reported, but none in threadgroup memory: {races[0]}"
    return None


CHECKS = (
    Check("add_guarded", "elementwise add, bounds guard (n=1000, 4x256 threads)", ADD_GUARDED,
          "add_guarded", (4, 1, 1), (256, 1, 1), _add_buffers, _add_verdict),
    Check("block_sum", "threadgroup tree reduction with barriers (8x256 threads)", BLOCK_SUM,
          "block_sum", (8, 1, 1), (256, 1, 1), _sum_buffers(8, 256), _sum_verdict(256)),
    Check("simd_block_sum", "simd_sum over 4 simdgroups, then over their sums", SIMD_SUM,
          "simd_block_sum", (4, 1, 1), (128, 1, 1), _sum_buffers(4, 128), _sum_verdict(128)),
    Check("half_chain", "half arithmetic rounds per operation; 0.5h; float(half)", HALF_CHAIN,
          "half_chain", (4, 1, 1), (256, 1, 1), _half_buffers, _half_verdict),
    Check("shift_racy", "missing barrier: the race checker must report it", SHIFT_RACY,
          "shift_racy", (2, 1, 1), (256, 1, 1), _shift_buffers, _racy_verdict),
)


def run_check(check: Check, seed: int = 0) -> CheckResult:
    buffers = check.make_buffers(np.random.default_rng(seed))
    start = time.perf_counter()
    try:
        result = emu.run_msl(check.source, check.kernel, grid=check.grid,
                             threadgroup=check.threadgroup, buffers=buffers, seed=seed)
    except MetaltileError as err:
        return CheckResult(check.name, check.what, False, time.perf_counter() - start, 0,
                           f"{type(err).__name__}: {err}")
    seconds = time.perf_counter() - start
    reason = check.verdict(buffers, result.findings)
    return CheckResult(check.name, check.what, reason is None, seconds, len(result.findings),
                       reason or "ok")


def run_selfcheck(seed: int = 0) -> list[CheckResult]:
    """Every check, in order."""
    return [run_check(check, seed) for check in CHECKS]


# -- the oracle's power ----------------------------------------------------------------------

POWER_EXAMPLES = 3      # drawn params per family


def _power_result(name: str, what: str, powers, seconds: float) -> CheckResult:
    from harness.check.power import describe
    weak = [p for p in powers if not p.ok]
    found = [p.smallest_scaling for p in powers if p.smallest_scaling is not None]
    note = f"; rejects x(1+{max(found):.2g})" if found else ""
    return CheckResult(name, what + note, not weak, seconds, 0,
                       describe(weak) if weak else "")


def _drawn_power(fam, seed: int) -> list:
    from hypothesis import HealthCheck, given, settings

    from harness.check.power import case_power
    powers = []

    @settings(max_examples=POWER_EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(fam.params())
    def draw(params):
        powers.extend(case_power(fam.build(dict(params)), seed))

    draw()
    return powers


def run_power_checks(seed: int = 0, bench: bool = True) -> list[CheckResult]:
    """The oracle's power (harness/check/power.py): per family, at POWER_EXAMPLES params its
    strategy draws (derandomized from `seed`), and per bench case at its shape, the correct
    output passes and every doctored output fails (or is indistinguishable, with the
    reason). No kernel runs: this checks the comparison, not the compiler."""
    from harness.bench.cases import CASES
    from harness.check.power import case_power
    from harness.gen import family

    checks = [(f"power {fam.name}", f"doctored outputs rejected at {POWER_EXAMPLES} drawn "
               "params", lambda fam=fam: _drawn_power(fam, seed))
              for fam in family.families() if not fam.skip_reason]
    checks += [(f"power {case.name}", "doctored outputs rejected at the bench shape",
                lambda case=case: case_power(family.get(case.family).build(dict(case.params)),
                                             seed))
               for case in (CASES if bench else ())
               if not family.get(case.family).skip_reason]
    results = []
    for name, what, powers_of in checks:
        start = time.perf_counter()
        try:
            powers = powers_of()
        except Exception as err:  # noqa: BLE001 - a family that breaks is this check's failure
            results.append(CheckResult(name, what, False, time.perf_counter() - start, 0,
                                       f"{type(err).__name__}: {err}"))
            continue
        results.append(_power_result(name, what, powers, time.perf_counter() - start))
    return results
