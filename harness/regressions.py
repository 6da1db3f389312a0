"""Regression cases: a failure the harness found, saved as one JSON file, and its replay.

A file under suites/regressions/ (written by `harness fuzz`, read by
suites/regressions/test_regressions.py) holds everything needed to rebuild and rerun the
case and to tell whether it still fails the same way:

    family, params, seed, schedule     the case (params rebuild the DSL kernel)
    disable                            pipeline passes switched off (usually [])
    imports                            modules that register the family (test-only ones)
    status, signature, message         how it failed; `signature` is the failure's kind
    state                              "open" (still fails) or "fixed" (must pass)
    msl, dsl                           the generated MSL and the kernel's TVMScript
    revision, date, found_by           where and when it was found

`failure_signature` defines "the same failure": the status plus what kind of failure
within it (the finding kinds, the exception type, the normalized first line of a
rejection), never the numbers that change when the case shrinks. Fuzzing shrinks only
towards examples with the same signature, and a replay matches only that signature.
`replay` runs a case the way fuzzing ran it: `diff.run_case`, then the barrier check for
a redundant- or unreached-barrier case; a crash or hang of the harness process itself (a
compiler that dies, a case past its timeout) is replayed in a child process.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import subprocess
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # harness.diff imports torch: only where a case runs
    from harness.diff import CaseResult

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DIR = REPO / "suites" / "regressions"
STATES = ("open", "fixed")
# Failures of the harness process itself, seen by the fuzzing parent, not by run_case.
WORKER_CRASH, CASE_TIMEOUT = "crash:worker", "timeout:case"
ISOLATED_SIGNATURES = (WORKER_CRASH, CASE_TIMEOUT)
DEFAULT_CASE_TIMEOUT = 150.0
# Failures of the barrier check (harness/barriers.py), beyond diff.run_case's statuses.
BARRIER_STATUSES = ("redundant_barrier", "unreached_barrier")
STARTUP_SECONDS = 300.0   # a replay child's imports (tvm, torch), before its case starts


@dataclass
class RegressionCase:
    family: str
    params: dict
    seed: int = 0
    schedule: str = "forward"
    disable: list = field(default_factory=list)
    imports: list = field(default_factory=list)   # modules registering the family (tests)
    status: str = ""
    signature: str = ""
    state: str = "open"
    message: str = ""
    timeout_seconds: float = DEFAULT_CASE_TIMEOUT
    revision: str = ""
    date: str = ""
    found_by: dict = field(default_factory=dict)
    dsl: str = ""
    msl: str = ""
    path: Path | None = field(default=None, compare=False)

    @property
    def key(self) -> str:
        """Short hash of what makes the case: the file name's last part."""
        text = json.dumps([self.family, self.params, self.seed, self.schedule,
                           sorted(self.disable)], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    @property
    def file_name(self) -> str:
        return f"{self.family}-{self.status}-{self.key}.json"

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("path")
        return json.dumps(data, indent=2, sort_keys=False) + "\n"


# ---- the kind of a failure -----------------------------------------------------------------

_NUMBERS = re.compile(r"-?\d+(?:\.\d+)?(?:\s*[,x]\s*-?\d+(?:\.\d+)?)*")
_FRAME = re.compile(r'File "([^"]+)", line \d+, in (\w+)')
# MetaltileError's "kernel 'k', construct: reason": the reason is the kind, not the place.
_WHERE = re.compile(r"^\s*kernel '[^']*'(?:, [^:]*)?:|^\s*[^:']*(?=: )[:]")
_QUOTED = re.compile(r"'[^']*'")


def failure_signature(status: str, message: str = "", findings=()) -> str | None:
    """The kind of a failure (None for pass/skip): what must stay the same while a case
    shrinks and when a regression is replayed."""
    if status in ("pass", "skip"):
        return None
    kinds = ",".join(sorted({f.kind for f in findings}))
    if status == "mismatch":  # wrong numbers, and what the checker saw with them
        return f"mismatch+finding:{kinds}" if kinds else "mismatch"
    if status == "finding":
        return f"finding:{kinds or 'unknown'}"
    if status in BARRIER_STATUSES:
        return status
    if ":" in status:  # already a signature (worker crash, case timeout)
        return status
    first = message.splitlines()[0] if message else ""
    error = first.split(":", 1)[0].strip() or "error"
    if status == "internal_error":
        frames = _FRAME.findall(message)
        where = f"@{Path(frames[-1][0]).name}:{frames[-1][1]}" if frames else ""
        return f"{status}:{error}{where}"
    if status in ("rejected", "compile_error"):
        reason = _WHERE.sub("", first.split(":", 1)[1] if ":" in first else "")
        reason = _NUMBERS.sub("#", _QUOTED.sub("'*'", reason)).strip()[:100]
        return f"{status}:{error}: {reason}" if reason else f"{status}:{error}"
    return f"{status}:{error}"


def result_signature(result: CaseResult) -> str | None:
    return failure_signature(result.status, result.message, result.findings)


# ---- files -----------------------------------------------------------------------------------

def load(path) -> RegressionCase:
    path = Path(path)
    data = json.loads(path.read_text())
    known = {f for f in RegressionCase.__dataclass_fields__ if f != "path"}
    unknown = set(data) - known
    missing = {"family", "params", "status", "signature"} - set(data)
    if unknown or missing:
        raise ValueError(f"{path}: not a regression case (unknown fields {sorted(unknown)}, "
                         f"missing {sorted(missing)})")
    case = RegressionCase(**data, path=path)
    if case.state not in STATES:
        raise ValueError(f"{path}: state must be one of {STATES}, got {case.state!r}")
    return case


def load_all(directory=DEFAULT_DIR) -> list[RegressionCase]:
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return [load(p) for p in sorted(directory.glob("*.json"))]


def save(case: RegressionCase, directory=DEFAULT_DIR) -> Path:
    """Write `case` atomically (a reader never sees half a file); returns its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / case.file_name
    tmp = directory / f".{case.file_name}.{os.getpid()}.tmp"
    tmp.write_text(case.to_json())
    tmp.replace(path)
    case.path = path
    return path


def revision() -> str:
    """The metaltile git revision (with "-dirty" for uncommitted changes), or ""."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"{head}-dirty" if head and dirty.strip() else head


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def dsl_text(family: str, params: dict) -> str:
    """The kernel's TVMScript (the DSL-level description), or "" when it cannot be built."""
    from harness.gen import family as families

    try:
        return str(families.get(family).build(dict(params)).func.script())
    except Exception:  # noqa: BLE001 - a description is best effort; params rebuild it
        return ""


def import_families(modules) -> None:
    """Import the modules that register families outside harness/gen (test families)."""
    import importlib

    for name in modules:
        importlib.import_module(name)


# ---- replay ----------------------------------------------------------------------------------

@dataclass
class Replay:
    status: str
    signature: str | None
    message: str = ""

    def same_failure(self, case: RegressionCase) -> bool:
        return self.signature == case.signature


def run_checked(family: str, params: dict, *, seed=0, schedule="forward", disable=(),
                barriers=False) -> tuple[CaseResult, str | None]:
    """`diff.run_case`, then (with `barriers`, for a passing case that has barriers) the
    barrier check: a barrier no race needs turns the result into "redundant_barrier", or
    "unreached_barrier" when all such barriers sit in code no thread runs. Returns the
    result and its failure signature."""
    from harness import barriers as barrier_check
    from harness.diff import run_case

    result = run_case(family, params, seed=seed, schedule=schedule, disable=tuple(disable))
    if barriers and result.status == "pass" and barrier_check.barrier_lines(result.msl):
        try:
            report = barrier_check.check_case(family, params, seed=seed,
                                              disable=tuple(disable), baseline=False)
        except Exception as err:  # noqa: BLE001 - a broken check is a finding, not a crash
            result.status = "internal_error"
            result.message = f"{type(err).__name__}: {err} (in the barrier check)\n" + \
                "".join(traceback.format_exception(err)[-6:])
        else:  # a barrier that runs for nothing, else one in code that never runs
            if len(report.redundant) > len(report.unreached):
                result.status, result.message = "redundant_barrier", report.summary()
            elif report.unreached:
                result.status, result.message = "unreached_barrier", report.summary()
    return result, result_signature(result)


def replay(case: RegressionCase) -> Replay:
    """Run `case` again as it was found; the outcome's signature says whether it still
    fails the same way."""
    if case.signature in ISOLATED_SIGNATURES:
        return _replay_isolated(case)
    import_families(case.imports)
    result, signature = run_checked(case.family, case.params, seed=case.seed,
                                    schedule=case.schedule, disable=case.disable,
                                    barriers=case.status in BARRIER_STATUSES)
    return Replay(result.status, signature, result.message)


class StillFailing(Exception):
    """An open regression case fails the way it was recorded: the expected outcome."""


def expect(case: RegressionCase) -> None:
    """The rule of the regression suite for one case. An "open" case must fail with its
    recorded signature (raises StillFailing: the suite marks it xfail(strict=True,
    raises=StillFailing)); when it passes this returns, the xfail turns into XPASS(strict)
    and the developer flips the file to "fixed". A "fixed" case must pass. Anything else
    (an open case failing differently, a fixed case failing) raises AssertionError."""
    outcome = replay(case)
    name = case.path.name if case.path else case.file_name
    first = outcome.message.splitlines()[0] if outcome.message else ""
    if case.state == "open":
        if outcome.same_failure(case):
            raise StillFailing(f"{name} still fails: {outcome.signature}: {first}")
        if outcome.status == "pass":
            return
        raise AssertionError(f"{name}: the open case fails differently now: recorded "
                             f"{case.signature}, got {outcome.signature}: {outcome.message}")
    if outcome.status != "pass":
        raise AssertionError(f"{name}: the fixed case fails again ({outcome.signature}): "
                             f"{outcome.message}")


def _replay_isolated(case: RegressionCase) -> Replay:
    """Replay in a child process: a dying or hanging child is the recorded failure. The
    case timeout counts from when the child has imported everything and starts the case."""
    from harness import workers

    outcome = workers.run_in_child(_replay_child, case.to_json(),
                                   startup_seconds=STARTUP_SECONDS,
                                   timeout_seconds=case.timeout_seconds)
    if outcome[0] == "timeout":
        return Replay("timeout", CASE_TIMEOUT,
                      f"the replay did not {outcome[1]} within {outcome[2]:g} s")
    if outcome[0] == "died":
        return Replay("crash", WORKER_CRASH, f"the replay process died (exit code "
                      f"{outcome[1]})")
    return Replay(*outcome[1])


def _replay_child(text: str, send) -> None:
    data = json.loads(text)
    import_families(data["imports"])
    from harness.diff import run_case  # noqa: F401 - imported before the clock starts

    send.send("started")
    result, signature = run_checked(data["family"], data["params"], seed=data["seed"],
                                    schedule=data["schedule"], disable=data["disable"])
    send.send((result.status, signature, result.message))
    send.close()
