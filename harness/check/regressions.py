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

"The same failure" is `harness.check.case.failure_signature`. `replay` runs a case the way
fuzzing ran it: `harness.check.case.run_case`, with the barrier check for a redundant- or
unreached-barrier case; a crash or hang of the harness process itself (a compiler that
dies, a case past its timeout) is replayed in a child process (harness/check/workers.py). This
module does not import the fuzzer.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

# The one way to run a case and its failure kinds (harness/check/case.py imports no torch at
# module level).
from harness.check.case import BARRIER_STATUSES, CASE_TIMEOUT, WORKER_CRASH, Status, run_case

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DIR = REPO / "suites" / "regressions"
STATES = ("open", "fixed")
ISOLATED_SIGNATURES = (WORKER_CRASH, CASE_TIMEOUT)
DEFAULT_CASE_TIMEOUT = 150.0
STARTUP_SECONDS = 300.0   # a replay child's imports (tvm, torch), before its case starts


@dataclass
class RegressionCase:
    family: str
    params: dict
    seed: int = 0
    schedule: str = "forward"
    disable: list = field(default_factory=list)
    imports: list = field(default_factory=list)   # modules registering the family (tests)
    status: Status | str = ""   # how it failed (load() accepts only a Status value)
    signature: str = ""
    state: str = "open"
    message: str = ""
    timeout_seconds: float = DEFAULT_CASE_TIMEOUT
    revision: str = ""
    date: str = ""
    found_by: dict = field(default_factory=dict)
    dsl: str = ""
    msl: str = ""
    # how the kernel was reached (harness/check/route.py); None: a cold core.compile
    route: dict | None = None
    path: Path | None = field(default=None, compare=False)

    @property
    def key(self) -> str:
        """Short hash of what makes the case: the file name's last part."""
        made = [self.family, self.params, self.seed, self.schedule, sorted(self.disable)]
        text = json.dumps(made + ([self.route] if self.route else []), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    @property
    def file_name(self) -> str:
        return f"{self.family}-{self.status}-{self.key}.json"

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("path")
        if data["route"] is None:   # files of cases without a route stay as they were
            data.pop("route")
        return json.dumps(data, indent=2, sort_keys=False) + "\n"


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
    try:
        data["status"] = Status(data["status"])
    except ValueError:
        raise ValueError(f"{path}: status must be one of {[s.value for s in Status]}, got "
                         f"{data['status']!r}") from None
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
    status: Status
    signature: str | None
    message: str = ""

    def same_failure(self, case: RegressionCase) -> bool:
        return self.signature == case.signature


def replay(case: RegressionCase) -> Replay:
    """Run `case` again as it was found; the outcome's signature says whether it still
    fails the same way."""
    if case.signature in ISOLATED_SIGNATURES:
        return _replay_isolated(case)
    import_families(case.imports)
    result = run_case(case.family, case.params, seed=case.seed, schedule=case.schedule,
                      disable=tuple(case.disable), barriers=case.status in BARRIER_STATUSES,
                      route=case.route)
    return Replay(result.status, result.signature, result.message)


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
        if outcome.status == Status.PASS:
            return
        raise AssertionError(f"{name}: the open case fails differently now: recorded "
                             f"{case.signature}, got {outcome.signature}: {outcome.message}")
    if outcome.status != Status.PASS:
        raise AssertionError(f"{name}: the fixed case fails again ({outcome.signature}): "
                             f"{outcome.message}")


def _replay_isolated(case: RegressionCase) -> Replay:
    """Replay in a child process: a dying or hanging child is the recorded failure. The
    case timeout counts from when the child has imported everything and starts the case."""
    from harness.check import workers

    outcome = workers.run_in_child(_replay_child, case.to_json(),
                                   startup_seconds=STARTUP_SECONDS,
                                   timeout_seconds=case.timeout_seconds)
    if outcome[0] == "timeout":
        return Replay(Status.TIMEOUT, CASE_TIMEOUT,
                      f"the replay did not {outcome[1]} within {outcome[2]:g} s")
    if outcome[0] == "died":
        return Replay(Status.CRASH, WORKER_CRASH, f"the replay process died (exit code "
                      f"{outcome[1]})")
    return Replay(*outcome[1])


def _replay_child(text: str, send) -> None:
    data = json.loads(text)
    import_families(data["imports"])
    import harness.check.compare  # noqa: F401 - torch and the compiler, imported before the clock starts

    send.send("started")
    result = run_case(data["family"], data["params"], seed=data["seed"],
                      schedule=data["schedule"], disable=tuple(data["disable"]),
                      route=data.get("route"))
    send.send((result.status, result.signature, result.message))
    send.close()
