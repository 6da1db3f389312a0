"""One case, every check: the one way the harness runs a generated kernel.

    result = run_case("softmax", params, seed=3)            # build, run, compare, check
    result = run_case(..., barriers=True)                   # and every barrier is needed
    result.status, result.signature, result.message

Suites, fuzzing (harness/fuzz/), the regression replay (harness/check/regressions.py) and the
benchmark (harness/bench/) all run cases through `run_case`: build the family's kernel,
run it on a backend with every emulator check (races, uninitialized reads, bounds,
divergent barriers), compare each output with the family's PyTorch oracle through the one
comparison helper (`harness.check.compare.assert_close`, tolerance policy of oracles/tolerance.py),
and, with `barriers`, the barrier-necessity check of harness/check/barriers.py.

One status vocabulary (`Status`, a `str` enum: `Status.PASS == "pass"`, and the value is what
result and regression files hold), for every caller:

    pass, skip                         nothing wrong (skip: the family cannot run here)
    mismatch                           numbers outside the tolerance (findings may come too)
    finding                            numbers right, but a race/uninit/bounds/divergence
    redundant_barrier                  a barrier no schedule or input needs (barriers=True)
    unreached_barrier                  a barrier only in code no thread runs (barriers=True)
    rejected                           KernelDefinitionError/LoweringError for generated params
    stale_kernel                       a cache or call path gave a kernel other than the one
                                       the function and options lower to (route=..., below)
    compile_error, launch_error        MSL compile or launch failures
    crash, timeout                     the kernel crashed or hung (emulator process)
    internal_error                     any other exception: a compiler or harness bug

and one notion of "the same failure": `failure_signature` (the status plus the kind of
failure within it: finding kinds, exception type, the normalized reason of a rejection;
never the numbers that change when a case shrinks). Fuzzing shrinks only towards the
same signature; a regression replay matches only that signature. Two more signatures
belong to the process that runs a case, not to the case: a worker that died
(`WORKER_CRASH`) and a case past its timeout (`CASE_TIMEOUT`).
"""

from __future__ import annotations

import enum
import re
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path


class Status(str, enum.Enum):
    """How one case ended. A `str`, so a status compares equal to its value and is written to
    JSON as it (result files and regression cases keep their plain strings)."""
    PASS = "pass"
    SKIP = "skip"
    MISMATCH = "mismatch"
    FINDING = "finding"
    REDUNDANT_BARRIER = "redundant_barrier"
    UNREACHED_BARRIER = "unreached_barrier"
    REJECTED = "rejected"
    COMPILE_ERROR = "compile_error"
    LAUNCH_ERROR = "launch_error"
    CRASH = "crash"
    TIMEOUT = "timeout"
    STALE_KERNEL = "stale_kernel"
    INTERNAL_ERROR = "internal_error"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def ok(self) -> bool:
        """Nothing wrong: passed, or the family cannot run here."""
        return self in (Status.PASS, Status.SKIP)


# Failures of the barrier check (harness/check/barriers.py), beyond a plain run's statuses.
BARRIER_STATUSES = (Status.REDUNDANT_BARRIER, Status.UNREACHED_BARRIER)
# Failures of the process running a case, seen by its parent (fuzzing, isolated replay).
WORKER_CRASH, CASE_TIMEOUT = "crash:worker", "timeout:case"


@dataclass
class CaseResult:
    """What one `(family, params, seed)` case did. `ok` only for "pass" (and "skip")."""
    family: str
    params: dict
    seed: int
    status: Status
    message: str = ""
    findings: list = field(default_factory=list)   # emulator Finding objects
    stats: list = field(default_factory=list)      # per-launch emulator counters
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    msl: str = ""
    stages: dict = field(default_factory=dict)     # seconds per stage (STAGES)
    decisions: tuple = ()      # the lowering decisions the compile took (kernel.decisions)

    @property
    def ok(self) -> bool:
        return Status(self.status).ok

    @property
    def signature(self) -> str | None:
        """The kind of failure (None when ok): see `failure_signature`."""
        return failure_signature(self.status, self.message, self.findings)


def check_passes(disable=(), replace=(), error: type = ValueError, passes=None) -> None:
    """Raise `error` (a usage error of the caller) unless every pass that `disable` and
    `replace` name is in the pipeline and none that `disable` names is a required one: the
    check `run_case` would otherwise hit only when it compiles. `passes`: the pipeline's
    `(pass names, required passes)` when the caller has them (read in another process:
    the fuzz's parent does not import the compiler)."""
    if passes is None:
        from core.transform import pipeline

        passes = (pipeline.pass_names(), pipeline.REQUIRED)
    names, required = passes
    unknown = sorted((set(disable) | set(replace)) - set(names))
    if unknown:
        raise error(f"unknown pass(es) {', '.join(unknown)}; passes: {', '.join(names)}")
    required = sorted(set(disable) & set(required))
    if required:
        raise error(f"pass(es) {', '.join(required)} cannot be disabled (replace them "
                    "instead)")


def run_case(family: str, params: dict, *, seed: int = 0, backend: str = "emu",
             schedule: str = "forward", checks=None, disable=(), replace=None,
             cache: bool = True, barriers: bool = False, compiled=None,
             route: dict | None = None, reference=None) -> CaseResult:
    """Build `family` at `params`, run it on `backend` with every check, compare each
    output with the oracle, and with `barriers` (for a passing case that has barriers)
    check that each barrier is needed. Never raises for a failing kernel: every failure
    is a status.

    `compiled`: a `(built, kernel)` pair the caller already made of this family, params,
    `disable` and `replace` (the bench times its compile and runs that kernel); the case
    then runs it instead of building and compiling again (`compile_seconds` stays 0).

    `route` (harness/check/route.py): how the kernel is reached -- call path, compile
    options, math mode, cache state -- as drawn by the fuzz; a kernel other than the one
    lowering gives for its options is "stale_kernel". None: core.compile with `cache`.
    `reference`: a `(built, program)` pair the caller already made of this family and
    params, `program` the uncached lowering the route's kernel must be
    (harness.check.route.reference, for `disable`): the case compiles `built` through its
    route and compares with `program` instead of lowering it again.

    With `barriers`, the barrier check runs on the case's own kernel and definition.

    "rejected" is a clear compile-time error (KernelDefinitionError / LoweringError) for
    params the family generated: a generator bug or a missing feature, reported as such.
    "internal_error" is any other exception (a crash inside a pass is a compiler bug).
    """
    import core
    from harness.gen import family as families

    fam = families.get(family)
    result = CaseResult(family, dict(params), seed, Status.PASS)
    if fam.skip_reason:
        result.status, result.message = Status.SKIP, fam.skip_reason
        return result
    made = []   # the (built, kernel) the case ran, for the barrier check
    with _Stages(result):
        _run(result, fam, core, backend, schedule, checks, disable, replace, cache,
             compiled, route, reference, made)
    if barriers and result.status == Status.PASS:
        t0 = time.perf_counter()
        result = _check_barriers(result, made[0])
        result.stages["barriers"] = time.perf_counter() - t0
    return result


def _run(result, fam, core, backend, schedule, checks, disable, replace, cache, compiled,
         route, reference, made):
    """`run_case` without the barrier check, its stages timed by the caller's `_Stages`."""
    from core.errors import (KernelCrashError, KernelDefinitionError, KernelTimeoutError,
                             LaunchError, LoweringError, MetaltileError, MSLCompileError)
    from core.runtime.backends import to_device, to_host
    from harness.check import route as routes
    from harness.check.compare import assert_outputs_close

    params, seed = result.params, result.seed
    t0 = time.perf_counter()
    try:
        if compiled is None:
            built, fresh = reference if reference is not None else \
                (fam.build(dict(params)), None)
            t_trace = time.perf_counter()
            result.stages["trace"] = t_trace - t0
            kernel = core.compile(built.func, out_idx=built.out_idx, disable=disable,
                                  replace=replace, cache=cache) if route is None else \
                routes.compile_routed(fam, built, params, route, disable=disable,
                                      replace=replace, reference=fresh)
            result.stages["compile"] = time.perf_counter() - t_trace
        else:
            built, kernel = compiled
        result.msl, result.decisions = kernel.msl, kernel.decisions
        made.append((built, kernel))
    except routes.StaleKernel as err:
        return _failed(result, Status.STALE_KERNEL, err, t0)
    except (KernelDefinitionError, LoweringError) as err:
        return _failed(result, Status.REJECTED, err, t0)
    except MetaltileError as err:
        return _failed(result, Status.COMPILE_ERROR, err, t0)
    except Exception as err:  # noqa: BLE001 - a pass crashing is a finding, not our crash
        return _failed(result, Status.INTERNAL_ERROR, err, t0, trace=True)
    result.compile_seconds = time.perf_counter() - t0 if compiled is None else 0.0
    t1 = time.perf_counter()
    try:
        inputs = built.inputs(seed)   # on the CPU: the oracle reads them there
        with routes.math_mode(route):
            outs = kernel(*(to_device(a, backend) for a in inputs), backend=backend,
                          checks=checks, schedule=schedule, seed=seed)
        outs = to_host(outs, backend)
    except MSLCompileError as err:
        return _failed(result, Status.COMPILE_ERROR, err, t1, run=True)
    except KernelTimeoutError as err:
        return _failed(result, Status.TIMEOUT, err, t1, run=True)
    except KernelCrashError as err:
        return _failed(result, Status.CRASH, err, t1, run=True)
    except LaunchError as err:
        return _failed(result, Status.LAUNCH_ERROR, err, t1, run=True)
    except Exception as err:  # noqa: BLE001
        return _failed(result, Status.INTERNAL_ERROR, err, t1, run=True, trace=True)
    result.run_seconds = time.perf_counter() - t1
    record = kernel.last_run
    result.findings = list(record.findings) if record else []
    result.stats = list(record.stats) if record else []
    outs = [outs] if not isinstance(outs, (list, tuple)) else list(outs)
    t2 = time.perf_counter()
    expected = built.oracle(inputs)
    try:
        assert_outputs_close(outs, expected, built)
    except AssertionError as err:
        result.status, result.message = Status.MISMATCH, str(err)
    result.stages["oracle"] = time.perf_counter() - t2
    if result.findings:  # a race is a failure even when the numbers match
        kinds = sorted({f.kind for f in result.findings})
        note = f"{len(result.findings)} finding(s) ({', '.join(kinds)}); first: " \
               f"{result.findings[0]}"
        result.message = f"{note}\n{result.message}" if result.message else note
        result.status = Status.FINDING if result.status == Status.PASS else result.status
    return result


# Where a case's time goes (CaseResult.stages, summed by `harness fuzz`): the family's build
# of the kernel's definition, the DSL -> MSL compile, the emulator's stages
# (core/runtime/emu/stages.py, prefixed "emu "), the oracle and its comparison, and the
# barrier check (all of it, its own emulator runs included); "other" is the rest of the
# case (inputs, moving tensors, binding the arguments).
STAGES = ("trace", "compile", "emu toolchain", "emu translate", "emu signatures",
          "emu shared", "emu compile", "emu symbols", "emu link", "emu launch",
          "emu symbolize", "oracle", "barriers", "other")


class _Stages:
    """Times a case's stages into `result.stages`: the emulator's from its counters, the
    rest of the case's time as "other"."""

    def __init__(self, result: CaseResult):
        self.result = result

    def __enter__(self):
        from core.runtime.emu import stages

        self.before = stages.totals()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        from core.runtime.emu import stages

        total = time.perf_counter() - self.t0
        out = self.result.stages
        for name, seconds in stages.since(self.before).items():
            out[f"emu {name}"] = out.get(f"emu {name}", 0.0) + seconds
        out["other"] = max(0.0, total - sum(out.values()))
        return False


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


def _check_barriers(result: CaseResult, compiled) -> CaseResult:
    """A barrier no race needs turns a passing result into "redundant_barrier", or
    "unreached_barrier" when all such barriers sit in code no thread runs. `compiled`:
    the (built, kernel) the case ran: the check removes the barriers of that kernel."""
    from harness.check import barriers as barrier_check

    if not barrier_check.barrier_lines(result.msl):
        return result
    try:
        report = barrier_check.check_case(result.family, result.params, seed=result.seed,
                                          compiled=compiled, baseline=False)
    except Exception as err:  # noqa: BLE001 - a broken check is a finding, not a crash
        result.status = Status.INTERNAL_ERROR
        result.message = f"{type(err).__name__}: {err} (in the barrier check)\n" + \
            "".join(traceback.format_exception(err)[-6:])
    else:  # a barrier that runs for nothing, else one in code that never runs
        if len(report.redundant) > len(report.unreached):
            result.status, result.message = Status.REDUNDANT_BARRIER, report.summary()
        elif report.unreached:
            result.status, result.message = Status.UNREACHED_BARRIER, report.summary()
    return result


# ---- the kind of a failure -----------------------------------------------------------------

_NUMBERS = re.compile(r"-?\d+(?:\.\d+)?(?:\s*[,x]\s*-?\d+(?:\.\d+)?)*")
_FRAME = re.compile(r'File "([^"]+)", line \d+, in (\w+)')
# MetaltileError's "kernel 'k', construct: reason": the reason is the kind, not the place.
_WHERE = re.compile(r"^\s*kernel '[^']*'(?:, [^:]*)?:|^\s*[^:']*(?=: )[:]")
_QUOTED = re.compile(r"'[^']*'")


def failure_signature(status: str, message: str = "", findings=()) -> str | None:
    """The kind of a failure (None for pass/skip): what must stay the same while a case
    shrinks and when a regression is replayed."""
    if status in (Status.PASS, Status.SKIP):
        return None
    kinds = ",".join(sorted({f.kind for f in findings}))
    if status == Status.MISMATCH:  # wrong numbers, and what the checker saw with them
        return f"mismatch+finding:{kinds}" if kinds else "mismatch"
    if status == Status.FINDING:
        return f"finding:{kinds or 'unknown'}"
    if status in (*BARRIER_STATUSES, Status.STALE_KERNEL):
        return str(status)
    if ":" in status:  # already a signature (worker crash, case timeout)
        return status
    first = message.splitlines()[0] if message else ""
    error = first.split(":", 1)[0].strip() or "error"
    if status == Status.INTERNAL_ERROR:
        frames = _FRAME.findall(message)
        where = f"@{Path(frames[-1][0]).name}:{frames[-1][1]}" if frames else ""
        return f"{status}:{error}{where}"
    if status in (Status.REJECTED, Status.COMPILE_ERROR):
        reason = _WHERE.sub("", first.split(":", 1)[1] if ":" in first else "")
        reason = _NUMBERS.sub("#", _QUOTED.sub("'*'", reason)).strip()[:100]
        return f"{status}:{error}: {reason}" if reason else f"{status}:{error}"
    return f"{status}:{error}"
