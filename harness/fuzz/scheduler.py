"""`harness fuzz`: time-budgeted, seeded, resumable fuzzing of the kernel families.

    summary = run(FuzzOptions(budget=600, seed=1, workers=2), view)

Where cases come from: each family's Hypothesis strategy (`Family.params()`, plus an
input seed and a schedule), drawn inside a `@given` test that a worker process runs
programmatically, one *task* (a time slice of one family) at a time; the parent hands
tasks out so that every family is visited once early (a short first slice) and then gets
a fair share of the time. A case runs through `harness.check.case.run_case` with every check,
and for 1 in `barrier_every` cases with barriers the barrier-necessity check of
harness/check/barriers.py. The worker side (the Hypothesis run of one task) is
harness/fuzz/worker.py; workers (harness/check/workers.py) come from a fork server that has
imported torch, tvm and the families once (spawn off Linux), so a restarted worker is
ready at once; the parent reads the families from a child of that server and imports
neither.
Those are `LocalWorkers`; with `FuzzOptions.ray` the workers are Ray actors on the nodes
of a cluster instead (harness/fuzz/ray_backend.py, `RayWorkers`), and everything below holds
for them alike: a `workers` object spawns and kills them, the loop does not know which.

Where failures go: a failing case raises an exception class of its own per failure
signature (harness.check.case.failure_signature), so Hypothesis shrinks each kind of failure
separately and never towards a different bug. Each failing example -- the first one and
every smaller one the shrinker finds -- is sent to the parent at once, which writes it as
a regression case (`<family>-<status>-<hash>.json`, state "open") in `out`, replacing the
larger one of the same run: a failure is on disk before shrinking starts, so Ctrl-C, a
dying worker or the end of the budget never loses it. Hypothesis's example database
(`db`, a directory per family and disabled passes: worker.example_database) keeps the
failing examples too, and the first task of each family replays them before generating
anything new, so a re-run resumes where the last one stopped.

What a worker cannot report: a worker that dies mid-case (a compiler crashing the
process) is recorded as a "crash" failure of that case, one that runs a case longer than
`case_timeout` is killed and recorded as "timeout"; either way a new worker takes the
slot, and the case's params are not drawn again in this run.

What steers the drawing: each case reports the lowering decisions its compile took
(`kernel.decisions`, core/ir/decisions.py); the parent counts them per family (and every
pair of them, harness/fuzz/steer.py) and hands the counts to each task, whose worker draws
`candidates` params per case and runs the first reaching a decision no case has reached,
else the one reaching the rarest. With
`routes`, a case also draws how its kernel is reached (call path, compile options, math
mode, cache state: harness/check/route.py), so a cache or a path that returns the wrong
kernel fails a case ("stale_kernel"). The summary lists every decision point's choices
and how many cases reached each.

Known bugs are counted, not shrunk or saved again: a failure signature already found in
a family in this run, and one of an "open" regression case (suites/regressions or `out`),
which the summary lists as known and which, like the regression suite's xfails, does not
fail the run. Workers live in their own process groups, so Ctrl-C reaches only the parent,
which kills them (and their emulator processes), keeps what was saved and summarizes.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from pathlib import Path

from harness.check import regressions
from harness.check.case import CASE_TIMEOUT, STAGES as CASE_STAGES, WORKER_CRASH, check_passes
from harness.fuzz import steer
from harness.fuzz.messages import (CaseEnded, CaseStarted, FailingExample, GeneratorError,
                                   Halt, Ready, Stop, Task, TaskDone, WorkerConfig)
from harness.fuzz.worker import canonical, registry_main, worker_main
from harness.check.regressions import RegressionCase
from harness.check.workers import kill_group, start_fork_server, worker_context

DEFAULT_DB = regressions.REPO / "reports" / "out" / "fuzz" / "db"
SLICE_SECONDS = (3.0, 60.0)     # bounds of one task's time slice
# Where a run's time goes (FuzzSummary.stages): a case's stages (harness.check.case.STAGES),
# the steering's compiles of its candidates (harness/fuzz/steer.py), Hypothesis's own time
# between two cases of a task (drawing the data, its database), the cases run while
# Hypothesis shrinks a failure, and the rest of the workers' time between cases.
STAGES = (*CASE_STAGES, "steering", "hypothesis", "shrinking", "between cases")
FIRST_SLICE = 3.0               # a family's first task: every family is visited early
STOP_GRACE = 30.0               # after the budget: how long a running case may finish
MAX_RESTARTS = 50               # per worker slot: a slot that keeps dying gives up
REGISTRY_SECONDS = 300.0        # the fork server's imports and the registry's child


@dataclass
class FuzzOptions:
    budget: float = 600.0                 # seconds
    seed: int | None = None               # None: a random seed (printed in the summary)
    families: tuple = ()                  # names; empty: every registered family
    workers: int = 2
    db: Path = DEFAULT_DB                 # Hypothesis example database
    out: Path = regressions.DEFAULT_DIR   # regression case files
    case_timeout: float = regressions.DEFAULT_CASE_TIMEOUT
    barrier_every: int = 4                # barrier check on 1 of N cases with barriers; 0 off
    disable: tuple = ()                   # pipeline passes switched off (checks the checker)
    imports: tuple = ()                   # modules registering extra families (tests)
    max_cases: int = 0                    # stop after this many cases; 0 = budget only
    candidates: int = 3                   # params drawn per case, steered (fuzz/steer.py)
    batch: int = 4                        # cases per example, built by one clang run
    routes: bool = True                   # draw call path, options, cache state per case
    # Workers as Ray actors (harness/fuzz/ray_backend.py): None = local processes; "" = a
    # local Ray instance; "auto", "HOST:PORT", "ray://HOST:PORT" = join that cluster.
    # With Ray, workers = 0 means one per CPU the cluster offers.
    ray: str | None = None


@dataclass
class FamilyTally:
    name: str
    skip_reason: str | None = None
    cases: int = 0                        # every case run, shrinking included
    kernels: int = 0                      # of them, the new kernels the emulator compiled
    failing_cases: int = 0
    barrier_checks: int = 0
    seconds: float = 0.0                  # time spent in its cases
    stages: dict = field(default_factory=dict)   # stage -> seconds of its cases (STAGES)
    tasks: int = 0
    broken: str = ""                      # the generator itself failed: not scheduled again
    decisions: dict = field(default_factory=dict)   # "point=choice" -> cases reaching it


@dataclass
class Failure:
    family: str
    signature: str
    status: str
    params: dict
    path: Path | None
    message: str
    shrunk: bool = False
    case_number: int = 0                  # the family's case count when first seen


@dataclass
class NodeTally:
    """One machine of a Ray campaign (local runs have none)."""
    name: str
    workers: int = 0                      # worker slots running there now
    cases: int = 0
    failing_cases: int = 0
    failures: int = 0                     # new failures first seen there
    lost: int = 0                         # cases whose worker died or hung there


@dataclass
class FuzzSummary:
    seed: int
    budget: float
    workers: int
    families: dict = field(default_factory=dict)     # name -> FamilyTally
    nodes: dict = field(default_factory=dict)        # node -> NodeTally (Ray runs only)
    failures: list = field(default_factory=list)     # Failure, one per (family, signature)
    known: list = field(default_factory=list)        # Failure: open regression cases seen
    errors: list = field(default_factory=list)       # harness-side problems (text)
    started: float = field(default_factory=time.time)
    elapsed: float = 0.0
    interrupted: bool = False
    worker_restarts: int = 0

    @property
    def cases(self) -> int:
        return sum(t.cases for t in self.families.values())

    @property
    def kernels(self) -> int:
        """New kernels: kernel libraries the emulator compiled for the cases (a case
        whose kernel an earlier case built runs it from the cache)."""
        return sum(t.kernels for t in self.families.values())

    @property
    def decisions(self) -> dict:
        """"point=choice" -> the cases, over every family, whose compile took it."""
        total = {}
        for t in self.families.values():
            for d, n in t.decisions.items():
                total[d] = total.get(d, 0) + n
        return total

    @property
    def rate(self) -> float:
        return self.cases / self.elapsed if self.elapsed else 0.0

    @property
    def stages(self) -> dict:
        """Seconds per stage over every family's cases (worker time, so up to `workers`
        times the elapsed time), in STAGES order, and "between cases": the rest of the
        workers' time (starting, waiting for a task, the messages)."""
        total: dict = {}
        for tally in self.families.values():
            for name, seconds in tally.stages.items():
                total[name] = total.get(name, 0.0) + seconds
        spent = sum(total.values())
        out = {n: total.pop(n) for n in STAGES if n in total}
        out.update(total)
        elapsed = self.elapsed or (time.time() - self.started)
        out["between cases"] = max(0.0, self.workers * elapsed - spent)
        return out

    @property
    def exit_code(self) -> int:
        """1 for a new failure or a harness error; known open bugs (regression cases in
        state "open", xfails of the regression suite) do not count."""
        return 1 if self.failures or self.errors else 0


class FuzzUsageError(ValueError):
    """Options that cannot run (unknown family or pass name, bad numbers)."""


def parse_duration(text: str) -> float:
    """Seconds from "90", "90s", "10m", "1h", "1h30m", "2.5m"."""
    parts = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*"
                         r"(?:(\d+(?:\.\d+)?)s?)?\s*", text or "")
    if not parts or not any(parts.groups()):
        raise FuzzUsageError(f"'{text}' is not a duration (e.g. 90s, 10m, 1h)")
    h, m, s = (float(g) if g else 0.0 for g in parts.groups())
    seconds = h * 3600 + m * 60 + s
    if seconds <= 0:
        raise FuzzUsageError(f"duration '{text}' must be positive")
    return seconds


# ---- the parent: tasks out, events in, files written ----------------------------------------

@dataclass
class _Slot:
    index: int
    process: object = None
    conn: object = None
    restarts: int = 0
    ready: bool = False                   # waiting for a task
    started: bool = False                 # has reported ready once (imports work)
    node: str = ""                        # the machine it runs on (Ray workers)
    task: Task | None = None
    case: CaseStarted | None = None
    case_started: float = 0.0


@dataclass
class _Run:
    """Everything one run knows, every field built by `_Run.build` before the first worker
    starts; the methods below only update it."""

    options: FuzzOptions
    view: object
    summary: FuzzSummary
    workers: object                      # where workers come from: LocalWorkers, RayWorkers
    slots: list                          # _Slot, one per worker
    deadline: float                      # the end of the budget
    slice: float                         # a task's time slice (a family's first: FIRST_SLICE)
    revision: str                        # recorded in every regression case written
    active: list                         # the families scheduled: selected and not skipped
    # Signatures the workers count but do not shrink: open regression cases (known
    # bugs, saved before) and failures found earlier in this run.
    open_cases: dict                     # (family, signature) -> open RegressionCase
    known: dict                          # family -> signatures
    avoid: dict                          # family -> params that killed a worker
    existing: set                        # regression files there before the run: never deleted
    found: dict = field(default_factory=dict)       # (family, signature) -> Failure
    written: set = field(default_factory=set)       # files this run wrote
    seen_open: set = field(default_factory=set)     # open cases seen failing in this run
    stopping: bool = False               # budget spent or Ctrl-C: no new tasks
    reached: dict = field(default_factory=dict)     # family -> steer.keys -> cases

    @classmethod
    def build(cls, options: FuzzOptions, view, summary: FuzzSummary, workers) -> _Run:
        """Resolve the families against the registry; FuzzUsageError for unknown names."""
        existing = set(Path(options.out).glob("*.json"))
        found = getattr(workers, "registry", lambda imports: None)(options.imports) or \
            _registry(options.imports)
        registered = dict(found.families)   # name -> skip reason
        names = list(options.families) or sorted(registered)
        unknown = [n for n in names if n not in registered]
        if unknown:
            raise FuzzUsageError(f"unknown famil{'y' if len(unknown) == 1 else 'ies'} "
                                 f"{', '.join(unknown)}; known: {', '.join(sorted(registered))}")
        check_passes(options.disable, error=FuzzUsageError,
                     passes=(found.passes, found.required))
        for n in names:
            summary.families[n] = FamilyTally(n, registered[n])
        active = [n for n in names if not registered[n]]
        open_cases = _open_cases(options.out)
        per_worker = math.ceil(max(1, len(active)) / options.workers)
        return cls(options, view, summary, workers,
                   slots=[_Slot(i) for i in range(options.workers)],
                   deadline=summary.started + options.budget,
                   slice=min(max(options.budget / (2 * per_worker), SLICE_SECONDS[0]),
                             SLICE_SECONDS[1]),
                   revision=regressions.revision(), active=active, open_cases=open_cases,
                   known={n: {sig for fam, sig in open_cases if fam == n} for n in names},
                   avoid={n: [] for n in names}, existing=existing)

    # -- the loop --

    def loop(self) -> None:
        summary, options = self.summary, self.options
        if not self.active:
            summary.errors.append("no family to fuzz (all selected families are skipped)")
            return
        for slot in self.slots:
            self._spawn(slot)
        self.view.start(summary, options, self.deadline)
        while True:
            now = time.time()
            if not self.stopping and (now >= self.deadline or self._enough_cases()):
                self._wind_down()
            live = [s for s in self.slots if s.process is not None]
            if not live:
                break
            if self.stopping and now >= self.deadline + STOP_GRACE:
                for slot in live:
                    self._kill(slot)
                break
            for conn in wait([s.conn for s in live], timeout=0.2):
                slot = next((s for s in live if s.conn is conn), None)
                if slot is not None:
                    self._receive(slot)
            for slot in live:
                self._watch(slot, time.time())
            self.view.refresh(summary, self._running())

    def interrupt(self) -> None:
        """Ctrl-C: kill every worker, keeping what it sent before it died."""
        self.stopping = True
        for slot in self.slots:
            if slot.process is not None:
                self._kill(slot, drain=True)

    def _enough_cases(self) -> bool:
        return bool(self.options.max_cases) and self.summary.cases >= self.options.max_cases

    def _running(self) -> set:
        return {s.task.family for s in self.slots if s.task}

    def _wind_down(self) -> None:
        """Budget spent: running tasks end after their current case, idle workers exit."""
        self.stopping = True
        for slot in self.slots:
            if slot.process is not None and slot.task is not None:
                _send(slot.conn, Halt())
            elif slot.process is not None and slot.ready:
                _send(slot.conn, Stop())
                slot.ready = False
            elif slot.process is not None and not slot.started:
                self._kill(slot)   # still starting (a Ray actor no node can place yet)

    # -- workers --

    def _spawn(self, slot: _Slot) -> None:
        config = WorkerConfig(db=str(self.options.db), imports=tuple(self.options.imports),
                              disable=tuple(self.options.disable),
                              barrier_every=self.options.barrier_every,
                              timeout=self.options.case_timeout,
                              candidates=self.options.candidates,
                              routes=self.options.routes, batch=self.options.batch)
        process, conn = self.workers.spawn(config, f"harness-fuzz-{slot.index}")
        slot.process, slot.conn, slot.ready, slot.started = process, conn, False, False
        slot.task = slot.case = None

    def _kill(self, slot: _Slot, drain: bool = False) -> None:
        self.workers.kill(slot.process)   # the worker and its emulator processes
        if slot.started and slot.node:
            self.summary.nodes[slot.node].workers -= 1
        if drain:  # what it sent before dying (a failure record) is still in the pipe
            try:
                while slot.conn.poll(0):
                    self._handle(slot, slot.conn.recv())
            except Exception:  # noqa: BLE001 - the end of what it sent
                pass
        slot.conn.close()
        slot.process = slot.conn = slot.task = slot.case = None
        slot.ready = False

    def _receive(self, slot: _Slot) -> None:
        try:
            message = slot.conn.recv()
        except Exception:  # noqa: BLE001 - EOF, or half a message from a dying worker
            self._died(slot)
            return
        self._handle(slot, message)

    def _died(self, slot: _Slot) -> None:
        slot.process.join(5)
        code = slot.process.exitcode
        how = getattr(slot.process, "death", "") or (
            f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}")
        if slot.case is not None:
            self._record_lost_case(slot, "crash", WORKER_CRASH,
                                   f"the fuzzing worker process died ({how}) while running "
                                   "this case")
        elif not slot.started:
            self.summary.errors.append(f"worker {slot.index} failed to start ({how}); "
                                       "see its error output above")
            self._kill(slot)
            return  # an import that fails once fails every time
        elif getattr(slot.process, "lost", False):   # a Ray node lost between cases
            self.view.note(f"worker {slot.index} lost outside a case ({how})", "yellow")
        elif not self.stopping or slot.task is not None:
            self.summary.errors.append(f"worker {slot.index} died outside a case ({how})")
        self._kill(slot)
        self._restart(slot)

    def _watch(self, slot: _Slot, now: float) -> None:
        if slot.process is None:
            return
        if slot.case is not None and now - slot.case_started > self.options.case_timeout:
            self._record_lost_case(slot, "timeout", CASE_TIMEOUT,
                                   f"the case ran longer than the per-case timeout of "
                                   f"{self.options.case_timeout:g} s; its worker was killed")
            self._kill(slot)
            self._restart(slot)
        elif not slot.process.is_alive() and not slot.conn.poll(0):
            self._died(slot)

    def _restart(self, slot: _Slot) -> None:
        if self.stopping or time.time() >= self.deadline - 1:
            return
        if slot.restarts >= MAX_RESTARTS:
            self.summary.errors.append(f"worker {slot.index} died {slot.restarts} times; "
                                       "not restarted")
            return
        slot.restarts += 1
        self.summary.worker_restarts += 1
        self.view.note(f"worker {slot.index} restarted", "yellow")
        self._spawn(slot)

    def _handle(self, slot: _Slot, message) -> None:
        if isinstance(message, Ready):
            slot.ready = slot.started = True
            slot.node = message.node
            if slot.node:
                self.summary.nodes.setdefault(slot.node, NodeTally(slot.node)).workers += 1
        elif isinstance(message, CaseStarted):
            slot.case, slot.case_started = message, time.time()
        elif isinstance(message, CaseEnded):
            tally = self.summary.families[message.family]
            tally.cases += 1
            tally.kernels += message.kernels
            tally.seconds += message.seconds
            tally.failing_cases += bool(message.signature)
            tally.barrier_checks += message.barriers
            for name, seconds in message.stages:
                tally.stages[name] = tally.stages.get(name, 0.0) + seconds
            for d in message.decisions:
                tally.decisions[d] = tally.decisions.get(d, 0) + 1
            reached = self.reached.setdefault(message.family, {})
            for k in steer.keys(message.decisions):
                reached[k] = reached.get(k, 0) + 1
            self._count_on_node(slot, cases=1, failing_cases=bool(message.signature))
            self._note_open_case(message.family, message.signature, slot.case)
            slot.case = None
        elif isinstance(message, FailingExample):
            record = message.record
            new = (record["family"], record["signature"]) not in self.found
            self._record(record, shrunk=message.final, node=slot.node)
            self._count_on_node(slot, failures=int(new))
        elif isinstance(message, GeneratorError):
            family, text = message.family, message.traceback
            self.summary.families[family].broken = text.strip().splitlines()[-1]
            self.summary.errors.append(f"{family}: the generator failed:\n{text}")
            self.view.note(f"{family}: generator error, family dropped: "
                           f"{self.summary.families[family].broken}", "red")
        elif isinstance(message, TaskDone):
            # a task that ends runs no case: one announced and not run (a batch's case
            # steered before the task's time ran out) was not lost
            slot.task = slot.case = None
        if slot.ready and slot.task is None and slot.process is not None:
            if self.stopping:
                _send(slot.conn, Stop())
                slot.ready = False
            elif not self._assign(slot):
                _send(slot.conn, Stop())   # every family's generator is broken
                slot.ready = False

    def _assign(self, slot: _Slot) -> bool:
        usable = [n for n in self.active if not self.summary.families[n].broken]
        if not usable:
            return False
        running = self._running()
        free = [n for n in usable if n not in running] or usable
        name = min(free, key=lambda n: (self.summary.families[n].seconds,
                                        self.summary.families[n].tasks, n))
        tally = self.summary.families[name]
        k = tally.tasks
        tally.tasks += 1
        slot.task = Task(family=name, seed=_derived_seed(self.summary.seed, name, k),
                         reuse=k == 0,
                         slice_end=time.time() + (min(self.slice, FIRST_SLICE) if k == 0
                                                  else self.slice),
                         deadline=self.deadline, known=tuple(sorted(self.known[name])),
                         avoid=tuple(self.avoid[name]),
                         reached=tuple(self.reached.get(name, {}).items()))
        _send(slot.conn, slot.task)
        return True

    # -- failures --

    def _note_open_case(self, family: str, signature: str | None,
                        case: CaseStarted | None) -> None:
        key = (family, signature)
        if key not in self.open_cases or key in self.seen_open or key in self.found:
            return
        self.seen_open.add(key)
        known = self.open_cases[key]
        params = case.params if case else {}
        self.summary.known.append(Failure(key[0], key[1], known.status, params, known.path,
                                          known.message, False,
                                          self.summary.families[key[0]].cases))
        self.view.note(f"known {key[0]} {key[1]} (open: {known.path})", "yellow")

    def _count_on_node(self, slot: _Slot, **counts) -> None:
        if slot.node:
            tally = self.summary.nodes[slot.node]
            for name, n in counts.items():
                setattr(tally, name, getattr(tally, name) + n)

    def _record_lost_case(self, slot: _Slot, status: str, signature: str, message: str):
        case = slot.case
        self.avoid[case.family].append(canonical(case.params))
        self.summary.families[case.family].cases += 1
        self.summary.families[case.family].failing_cases += 1
        new = (case.family, signature) not in self.found
        self._count_on_node(slot, cases=1, failing_cases=1, lost=1)
        if (case.family, signature) in self.open_cases:
            self._note_open_case(case.family, signature, case)
            return
        self._count_on_node(slot, failures=int(new))
        self._record({"family": case.family, "params": case.params, "seed": case.seed,
                      "schedule": case.schedule, "disable": list(self.options.disable),
                      "status": status, "signature": signature, "message": message,
                      "timeout_seconds": self.options.case_timeout,
                      "imports": list(self.options.imports),
                      **({"route": case.route} if case.route is not None else {})},
                     shrunk=False, node=slot.node)

    def _record(self, data: dict, shrunk: bool, node: str = "") -> None:
        family, signature = data["family"], data["signature"]
        tally = self.summary.families[family]
        found_by = {"fuzz_seed": self.summary.seed, "shrunk": shrunk, "case": tally.cases}
        if node:   # a Ray campaign: the machine that ran it
            found_by["node"] = node
        case = RegressionCase(**data, state="open", revision=self.revision,
                              date=regressions.now(), found_by=found_by)
        path = regressions.save(case, self.options.out)
        previous = self.found.get((family, signature))
        if previous and previous.path != path and previous.path in self.written and \
                previous.path not in self.existing:
            previous.path.unlink(missing_ok=True)   # a smaller example replaces it
        self.written.add(path)
        self.known[family].add(signature)
        if previous is None:
            failure = Failure(family, signature, data["status"], data["params"], path,
                              data["message"], shrunk, tally.cases)
            self.found[(family, signature)] = failure
            self.summary.failures.append(failure)
            self.view.note(f"FAIL {family} {signature}: {path}", "red")
        else:
            previous.params, previous.path, previous.message = data["params"], path, \
                data["message"]
            previous.shrunk = previous.shrunk or shrunk


def _open_cases(out) -> dict:
    """(family, signature) -> each open regression case, in suites/regressions and in
    `out`."""
    cases = {}
    for directory in dict.fromkeys([Path(regressions.DEFAULT_DIR), Path(out)]):
        for path in sorted(Path(directory).glob("*.json")):
            try:
                case = regressions.load(path)
            except (ValueError, OSError):
                continue   # not a regression case; the regression suite reports it
            if case.state == "open":
                cases.setdefault((case.family, case.signature), case)
    return cases


def _registry(imports: tuple):
    """The registry read in this process (what a worker reads: worker.registry)."""
    from harness.fuzz.worker import registry

    regressions.import_families(imports)
    return registry()


def _derived_seed(seed: int, family: str, k: int) -> int:
    digest = hashlib.sha256(f"{seed}:{family}:{k}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _send(conn, message) -> None:
    try:
        conn.send(message)
    except (OSError, ValueError):
        pass  # the worker is gone; its death is noticed on the next wait


class LocalWorkers:
    """Worker processes on this machine, from the fork server of harness/check/workers.py
    (harness/fuzz/ray_backend.py's RayWorkers is the other kind)."""

    def __init__(self):
        self.context = worker_context()

    def start(self, options: FuzzOptions) -> int:
        """Get ready to spawn; return the number of worker slots."""
        start_fork_server(self.context)   # its imports overlap ours
        return options.workers

    def registry(self, imports: tuple):
        """The families and passes, read in a child of the fork server (which imported
        them once for every worker): the parent does not import them (torch, tvm: 4-5 s
        of CPU while the server and the emulator's build need it). None where workers
        are spawned (they import everything themselves) or when the child sends nothing
        (a family that does not import: the parent's own import reports it)."""
        if self.context.get_start_method() != "forkserver":
            return None
        parent, child = self.context.Pipe(duplex=False)
        process = self.context.Process(target=registry_main, args=(child, tuple(imports)),
                                       daemon=True, name="harness-fuzz-registry")
        process.start()
        child.close()
        try:
            return parent.recv() if parent.poll(REGISTRY_SECONDS) else None
        except EOFError:
            return None
        finally:
            parent.close()
            process.join(5)
            if process.is_alive():
                kill_group(process)

    def spawn(self, config: WorkerConfig, name: str):
        """A started worker and the parent's end of its pipe."""
        parent, child = self.context.Pipe(duplex=True)
        process = self.context.Process(target=worker_main, args=(child, config), daemon=True,
                                       name=name)
        process.start()
        child.close()
        return process, parent

    def kill(self, process) -> None:
        kill_group(process)

    def close(self) -> None:
        pass


def _workers_for(options: FuzzOptions):
    if options.ray is None:
        return LocalWorkers()
    try:
        from harness.fuzz.ray_backend import RayWorkers
    except ImportError as err:
        raise FuzzUsageError(f"--ray needs Ray ({err}); install it with "
                             "pip install 'metaltile[distributed]'") from None
    return RayWorkers(options.ray)


def run(options: FuzzOptions, view=None) -> FuzzSummary:
    """Fuzz until the budget is spent (or `max_cases`, or Ctrl-C); return the summary.
    Raises FuzzUsageError for options that cannot run."""
    least = 0 if options.ray is not None else 1   # Ray: 0 is one worker per CPU
    if options.workers < least or options.budget <= 0 or options.case_timeout <= 0 or \
            options.candidates < 1 or options.batch < 1:
        raise FuzzUsageError("workers, budget, case timeout, candidates and batch must be "
                             "positive")
    view = view or QuietView()
    seed = options.seed if options.seed is not None else int.from_bytes(os.urandom(4), "big")
    summary = FuzzSummary(seed, options.budget, options.workers)
    workers = _workers_for(options)
    fuzzing = None
    threading.Thread(target=_prepare_emulator, name="emulator-prepare", daemon=True).start()
    try:
        try:
            summary.workers = workers.start(options)   # the budget counts from before this
        except ConnectionError as err:   # no Ray cluster there
            raise FuzzUsageError(str(err)) from None
        options = replace(options, workers=summary.workers)
        fuzzing = _Run.build(options, view, summary, workers)
        fuzzing.loop()
    except KeyboardInterrupt:
        summary.interrupted = True
        if fuzzing is not None:
            fuzzing.interrupt()
    finally:
        workers.close()
        summary.elapsed = time.time() - summary.started
        view.stop(summary)
    return summary


def _prepare_emulator() -> None:
    """Build the emulator's shared artifacts (runtime objects, precompiled headers) while
    the workers import, so that on an empty cache their first cases find them built (or
    wait for this build, build.py's lock) instead of each compiling them itself."""
    try:
        from core.runtime.emu.build import default_builder

        default_builder().prepare()
    except Exception:  # noqa: BLE001 - a worker's own build reports the error with its case
        pass


class QuietView:
    """A view that shows nothing (tests, library use)."""

    def start(self, summary, options, deadline):
        pass

    def refresh(self, summary, busy):
        pass

    def note(self, text, style=""):
        pass

    def stop(self, summary):
        pass
