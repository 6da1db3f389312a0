"""The one comparison helper: a kernel result against its PyTorch oracle.

`assert_close(actual, expected, dtype=None, reduction_length=1, op_class="elementwise")`
applies the tolerance policy of oracles/tolerance.py for the result dtype and the op class
of the computation (exact, elementwise, transcendental, accumulation; a family's
`Built.op_class`) and fails with the worst element, its index and both values, so a
failure report is useful without a debugger.

`run_case(family, params, seed=...)` is the one way the harness runs a generated kernel
(suites, fuzzing and benchmarks alike): build the family's kernel, run it with every
emulator check, compare each output with the oracle, and return a `CaseResult` whose
status says what happened. A race, uninitialized read or out-of-bounds finding fails the
case even when the numbers match.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field

import torch

from oracles.tolerance import tolerance_for


def assert_close(actual, expected, dtype=None, reduction_length: int = 1, what: str = "",
                 op_class: str = "elementwise"):
    actual = torch.as_tensor(actual).cpu()
    expected = torch.as_tensor(expected).cpu()
    dtype = dtype or actual.dtype
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{what} shape {tuple(actual.shape)} != expected "
                             f"{tuple(expected.shape)}")
    tol = tolerance_for(dtype, reduction_length, op_class)
    if tol.exact:
        same = actual == expected.to(actual.dtype)
        if not bool(same.all()):
            bad = (~same).nonzero()[0].tolist()
            raise AssertionError(f"{what} {int((~same).sum())} element(s) differ; first at "
                                 f"{bad}: {actual[tuple(bad)].item()} != "
                                 f"{expected[tuple(bad)].item()}")
        return
    a, e = actual.double(), expected.double()
    err = (a - e).abs()
    limit = tol.atol + tol.rtol * e.abs()
    bad = ~((err <= limit) | (torch.isnan(a) & torch.isnan(e)) | (a == e))
    if bool(bad.any()):
        idx = tuple((err - limit).nan_to_num(float("inf")).argmax().item()
                    for _ in [0])[0]
        where = list(torch.unravel_index(torch.tensor(idx), a.shape)) if a.dim() else []
        pos = tuple(int(w) for w in where)
        raise AssertionError(
            f"{what} {int(bad.sum())} of {a.numel()} element(s) outside atol={tol.atol} "
            f"rtol={tol.rtol} ({dtype}, {op_class}); worst at {list(pos)}: {a[pos].item()} vs "
            f"{e[pos].item()}")


# ---- one differential case: build, run on a backend with every check, compare ---------------

STATUSES = ("pass", "mismatch", "finding", "rejected", "compile_error", "launch_error",
            "crash", "timeout", "internal_error", "skip")


@dataclass
class CaseResult:
    """What one `(family, params, seed)` case did. `ok` only for "pass" (and "skip")."""
    family: str
    params: dict
    seed: int
    status: str
    message: str = ""
    findings: list = field(default_factory=list)   # emulator Finding objects
    stats: list = field(default_factory=list)      # per-launch emulator counters
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    msl: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "skip")


def run_case(family: str, params: dict, *, seed: int = 0, backend: str = "emu",
             schedule: str = "forward", checks=None, disable=(), replace=None,
             cache: bool = True) -> CaseResult:
    """Build `family` at `params`, run it on `backend` with every check, compare each
    output with the oracle. Never raises for a failing kernel: every failure is a status.

    "rejected" is a clear compile-time error (KernelDefinitionError / LoweringError) for
    params the family generated: a generator bug or a missing feature, reported as such.
    "internal_error" is any other exception (a crash inside a pass is a compiler bug).
    """
    import core
    from core.errors import (KernelCrashError, KernelTimeoutError, LaunchError,
                             MetaltileError, MSLCompileError)
    from core.language.errors import KernelDefinitionError, LoweringError
    from harness.gen import family as families

    fam = families.get(family)
    result = CaseResult(family, dict(params), seed, "pass")
    if fam.skip_reason:
        result.status, result.message = "skip", fam.skip_reason
        return result
    t0 = time.perf_counter()
    try:
        built = fam.build(dict(params))
        kernel = core.compile(built.func, out_idx=built.out_idx, disable=disable,
                              replace=replace, cache=cache)
        result.msl = kernel.msl
    except (KernelDefinitionError, LoweringError) as err:
        return _failed(result, "rejected", err, t0)
    except MetaltileError as err:
        return _failed(result, "compile_error", err, t0)
    except Exception as err:  # noqa: BLE001 - a pass crashing is a finding, not our crash
        return _failed(result, "internal_error", err, t0, trace=True)
    result.compile_seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    try:
        inputs = built.inputs(seed)
        outs = kernel(*inputs, backend=backend, checks=checks, schedule=schedule, seed=seed)
    except MSLCompileError as err:
        return _failed(result, "compile_error", err, t1, run=True)
    except KernelTimeoutError as err:
        return _failed(result, "timeout", err, t1, run=True)
    except KernelCrashError as err:
        return _failed(result, "crash", err, t1, run=True)
    except LaunchError as err:
        return _failed(result, "launch_error", err, t1, run=True)
    except Exception as err:  # noqa: BLE001
        return _failed(result, "internal_error", err, t1, run=True, trace=True)
    result.run_seconds = time.perf_counter() - t1
    record = kernel.last_run
    result.findings = list(record.findings) if record else []
    result.stats = list(record.stats) if record else []
    outs = [outs] if not isinstance(outs, (list, tuple)) else list(outs)
    expected = built.oracle(inputs)
    try:
        for i, (got, want) in enumerate(zip(outs, expected)):
            dtype = built.tolerance_dtypes[i] if i < len(built.tolerance_dtypes) else None
            assert_close(got, want, dtype or None, built.reduction_length,
                         what=f"output {i}:", op_class=built.op_class)
        if len(outs) != len(expected):
            raise AssertionError(f"{len(outs)} outputs, oracle gives {len(expected)}")
    except AssertionError as err:
        result.status, result.message = "mismatch", str(err)
    if result.findings:  # a race is a failure even when the numbers match
        kinds = sorted({f.kind for f in result.findings})
        note = f"{len(result.findings)} finding(s) ({', '.join(kinds)}); first: " \
               f"{result.findings[0]}"
        result.message = f"{note}\n{result.message}" if result.message else note
        result.status = "finding" if result.status == "pass" else result.status
    return result


def _failed(result, status, err, t0, run=False, trace=False):
    elapsed = time.perf_counter() - t0
    if run:
        result.run_seconds = elapsed
    else:
        result.compile_seconds = elapsed
    result.status = status
    result.message = f"{type(err).__name__}: {err}"
    if trace:
        result.message += "\n" + "".join(traceback.format_exception(err)[-6:])
    return result
