"""What the fuzzing parent (scheduler.py) and its workers (worker.py) send each other.

Before any worker, the parent reads the registry in a child of the fork server
(`Registry`: the families and the pipeline's passes, worker.registry_main), so it never
imports the families, torch or tvm itself. A worker starts with a `WorkerConfig` and sends
`Ready`; the parent answers with a `Task`
(a time slice of one family). During the task the worker sends `CaseStarted` and
`CaseEnded` around every case, a `FailingExample` for each failing example (the first one
and every smaller one, then the minimal one with `final`), a `GeneratorError` if the
family's generator itself broke, and `TaskDone` at the end; the parent may send `Halt`
(the budget is spent: end the task after this case). The parent sends `Stop` to a worker
without a task to let it exit.
"""

from __future__ import annotations

from dataclasses import dataclass


# ---- parent -> worker ----------------------------------------------------------------------

@dataclass(frozen=True)
class WorkerConfig:
    """How every task of a worker runs (the worker process's argument, not a message)."""
    db: str                    # the Hypothesis example database's directory
    imports: tuple             # modules registering extra families
    disable: tuple             # pipeline passes switched off
    barrier_every: int         # barrier check on 1 of N cases with barriers; 0 off
    timeout: float             # the per-case timeout, recorded in failures
    candidates: int = 1        # params drawn per case; the first reaching a new decision,
                               # else the rarest, runs (1: no steering)
    routes: bool = False       # draw the call path, options and cache state of each case
    batch: int = 1             # cases per Hypothesis example, their kernels built together


@dataclass(frozen=True)
class Task:
    """Fuzz one family until `slice_end` (or `deadline`, the end of the budget)."""
    family: str
    seed: int                  # the seed of this task's Hypothesis run
    reuse: bool                # replay the example database first (a family's first task)
    slice_end: float           # no new case after this, unless the task found a failure
    deadline: float            # no new case after this in any case
    known: tuple               # signatures counted but not shrunk (known bugs)
    avoid: tuple               # canonical params that killed a worker: not run again
    reached: tuple = ()        # (decision or pair of decisions, cases that reached it) of
                               # the family so far: what steering scores candidates with


@dataclass(frozen=True)
class Registry:
    """worker -> parent, once, from a child of the fork server: what the parent needs to
    plan a run."""
    families: tuple            # (name, skip reason or None) of every registered family
    passes: tuple              # the pipeline's pass names
    required: tuple            # the passes that cannot be disabled


@dataclass(frozen=True)
class Halt:
    """The budget is spent: end the running task after its current case."""


@dataclass(frozen=True)
class Stop:
    """No more tasks: exit."""


# ---- worker -> parent ----------------------------------------------------------------------

@dataclass(frozen=True)
class Ready:
    """Imports done, waiting for a task."""
    pid: int
    node: str = ""             # the machine, for Ray workers (harness/fuzz/ray_backend.py)


@dataclass(frozen=True)
class CaseStarted:
    """A case begins (the parent times it out, and records it if the worker dies)."""
    family: str
    params: dict
    seed: int                  # the input seed
    schedule: str
    route: dict | None = None  # how the kernel is reached (harness/check/route.py)


@dataclass(frozen=True)
class CaseEnded:
    """A case ended; `signature` is None when it passed."""
    family: str
    signature: str | None
    seconds: float             # the case's own time (run_case's)
    barriers: int              # 1 if its barriers were checked
    stages: tuple = ()         # (stage, seconds) pairs: harness.check.case.STAGES, and the
                               # worker's "steering" and "hypothesis" before it; all of
                               # it "shrinking" while a failure is shrunk
    decisions: tuple = ()      # the lowering decisions its compile took (kernel.decisions)
    kernels: int = 0           # kernel libraries the emulator compiled for it: new kernels,
                               # not in the cache (its example's batch: on its first case)


@dataclass(frozen=True)
class FailingExample:
    """A failing example, as a regression case's fields (harness.check.regressions.
    RegressionCase, without what the parent adds); `final`: the minimal one Hypothesis
    settled on."""
    record: dict
    final: bool = False


@dataclass(frozen=True)
class GeneratorError:
    """The family's generator itself failed (not a case): the family is dropped."""
    family: str
    traceback: str


@dataclass(frozen=True)
class TaskDone:
    """The task is over; the worker waits for the next one."""
    family: str
