"""The fuzzing worker: one Hypothesis run per task, inside a worker process
(harness/check/workers.py).

The parent (harness/fuzz/scheduler.py) sends tasks -- a time slice of one family, with a seed, the
signatures already known and the params that killed a worker -- and receives events, the
messages of harness/fuzz/messages.py:

    Ready(pid)                         imports done, waiting for a task
    CaseStarted(family, params, ...)   a case begins (the parent times it out)
    CaseEnded(family, signature, ...)  a case ended: family, signature, seconds, barriers,
                                       the lowering decisions its compile took
    FailingExample(record)             a failing example (first, and every smaller one)
    FailingExample(record, final=True) the minimal example Hypothesis settled on
    GeneratorError(family, traceback)  the family's generator itself failed
    TaskDone(family)                   the task is over

A failing case raises an exception class of its own per failure signature, so Hypothesis
shrinks each kind of failure separately and never towards a different bug.

What a case is: the family's params (with steering, `candidates` of them, of which the
first reaching a decision no case has, else the one reaching the rarest, runs:
harness/fuzz/steer.py), an input seed, a schedule, and with `routes` how the kernel is
reached (call path, compile options, math mode, cache state:
harness.gen.strategies.compile_route, run by harness/check/route.py).
A Hypothesis example is `batch` such cases: all are steered and compiled to MSL first,
their kernels built for the emulator in one clang run (`emu.build_ahead`: a fuzz kernel's
build is mostly work kernels share), then they run one by one, and the first that fails
fails the example, whose shrinking then builds each case alone as it runs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import signal
import time
import traceback
from pathlib import Path

from harness.check import regressions
from harness.check.case import BARRIER_STATUSES, run_case
from harness.fuzz import steer
from harness.fuzz.messages import (CaseEnded, CaseStarted, FailingExample, GeneratorError,
                                   Halt, Ready, Registry, Stop, Task, TaskDone,
                                   WorkerConfig)

SCHEDULES = ("forward", "reverse", "random")
INPUT_SEEDS = 1 << 16


def canonical(params: dict) -> str:
    return json.dumps(params, sort_keys=True)


class _TaskOver(BaseException):
    """Ends a task's Hypothesis run at once (not a test failure: nothing is shrunk)."""


class CaseFailure(Exception):
    """A failing case; one subclass per failure signature (what Hypothesis tells apart)."""

    def __init__(self, record: dict):
        super().__init__(f"{record['family']} {record['signature']}")
        self.record = record


_FAILURE_CLASSES: dict = {}


def _failure_class(signature: str) -> type:
    if signature not in _FAILURE_CLASSES:
        name = "Failed_" + re.sub(r"\W+", "_", signature)[:60]
        _FAILURE_CLASSES[signature] = type(name, (CaseFailure,), {})
    return _FAILURE_CLASSES[signature]


def worker_main(conn, config: WorkerConfig) -> None:
    if hasattr(os, "setpgrp"):
        os.setpgrp()   # Ctrl-C goes to the parent only; the parent kills the whole group
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch

    # one worker per core: torch's own thread pool (the oracles' float64 matmuls, the
    # inputs) only contends with the other workers and the emulator's kernels
    torch.set_num_threads(1)
    regressions.import_families(config.imports)
    from harness.gen import family as families

    families.families()
    conn.send(Ready(os.getpid()))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if isinstance(message, Task):
            _run_task(conn, config, message)
            conn.send(TaskDone(message.family))
        elif isinstance(message, Stop):
            return


def registry() -> Registry:
    """The registered families (after the `--import` modules) and the pipeline's passes."""
    from core.transform import pipeline
    from harness.gen import family as families

    return Registry(tuple((f.name, f.skip_reason) for f in families.families()),
                    tuple(pipeline.pass_names()), tuple(pipeline.REQUIRED))


def registry_main(conn, imports: tuple) -> None:
    """A child of the fork server that sends the parent the `registry()` and exits (the
    server has imported the families: a fork, not seconds of imports in the parent). A
    family that fails to import sends nothing: the parent imports them itself then, and
    reports the error as it would."""
    try:
        regressions.import_families(imports)
        conn.send(registry())
    except BaseException:  # noqa: BLE001 - the parent's own import reports it
        pass
    conn.close()


def _run_task(conn, config: WorkerConfig, task: Task, database=None) -> None:
    """One task's Hypothesis run; `database`: its example database (default: the family's
    directory under `config.db`; a Ray worker passes one that forwards to the driver)."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
    from hypothesis import strategies as st

    from core.runtime.emu import stages as emu_stages
    from harness.gen import family as families
    from harness.gen import strategies as S

    name = task.family
    fam = families.get(name)
    known, avoid = set(task.known), set(task.avoid)
    found = {}   # signature -> latest failing record of this task
    disable = tuple(config.disable)

    reached = dict(task.reached)

    def decided(params, input_seed, schedule, route):
        """A candidate's decisions. Its build runs in this process, so it is announced as
        the running case first: one that kills or hangs the worker is that case's crash
        or timeout, as when it runs."""
        if canonical(params) in avoid:
            return ()
        conn.send(CaseStarted(name, params, input_seed, schedule, route))
        return steer.compiled_decisions(fam, params, disable, route=route)

    # Hypothesis's own time (drawing the data, its database) is what passes between one
    # call of `cases` and the next: measured, not left to "between cases".
    last = [time.perf_counter()]

    def cases(drawn):
        entered = time.perf_counter()
        try:
            return _cases(drawn, entered - last[0])
        finally:
            last[0] = time.perf_counter()

    def _due(starting: bool) -> None:
        """Ends the task when the parent halts it, the budget is spent, or (`starting` an
        example) its time slice is over: an example under way runs to its end past the
        slice, since what its cases' steering and build cost would be lost otherwise."""
        now = time.time()
        if conn.poll(0) and isinstance(conn.recv(), Halt):
            raise _TaskOver
        if now >= task.deadline or (starting and not found and now >= task.slice_end):
            raise _TaskOver

    def _cases(drawn, drawing):
        """One Hypothesis example: `config.batch` cases, each steered, their kernels built
        for the emulator together (`emu.build_ahead`), then run one by one; the first
        that fails ends the example. While Hypothesis shrinks a failure, each case is
        built as it runs: the example stops at its first failing case, so the rest need
        no build."""
        _due(starting=True)
        counts = dict(reached)   # the example's earlier cases count as reached
        ready = []
        for params, input_seed, schedule, route in drawn:
            t_steer = time.perf_counter()
            made = None
            # steering (harness/fuzz/steer.py): the first candidate reaching a decision no
            # case has, else the rarest; in a batch one candidate is compiled first all the
            # same, to be built with the others (alone, the case compiles it as it runs)
            if config.candidates > 1 or config.batch > 1:
                candidates = params if config.candidates > 1 else [params]
                params = candidates[steer.choose(
                    candidates, functools.partial(decided, input_seed=input_seed,
                                                  schedule=schedule, route=route), counts)]
                if canonical(params) not in avoid:
                    made = steer.prepared(fam, params, disable, route)
                    for key in steer.keys(steer.compiled_decisions(fam, params, disable,
                                                                   route=route) or ()):
                        counts[key] = counts.get(key, 0) + 1
            if canonical(params) in avoid:
                continue
            ready.append((params, input_seed, schedule, route, made,
                          time.perf_counter() - t_steer))
        shared = {"hypothesis": drawing}
        built = emu_stages.built()
        if not found and len(ready) > 1:
            shared.update(_build_ahead(ready, config.barrier_every))
        built = emu_stages.built() - built
        shares = {name: seconds / max(1, len(ready)) for name, seconds in shared.items()}
        for n, (params, input_seed, schedule, route, made, steering) in enumerate(ready):
            _due(starting=False)
            _case(params, input_seed, schedule, route, made, steering, shares,
                  built if n == 0 else 0)

    def _case(params, input_seed, schedule, route, made, steering, shares, built):
        conn.send(CaseStarted(name, params, input_seed, schedule, route))
        barriers = _barrier_due(params, input_seed, config.barrier_every) or \
            any(s in found for s in BARRIER_STATUSES)
        t0 = time.perf_counter()
        built -= emu_stages.built()
        # the chosen candidate's compile is the case's (a cold core.compile), or the
        # reference its route's kernel is compared with: not compiled a second time
        result = run_case(name, params, seed=input_seed, schedule=schedule, disable=disable,
                          barriers=barriers, route=route,
                          compiled=(made.built, made.kernel) if made and made.kernel
                          else None,
                          reference=(made.built, made.reference) if made and made.reference
                          else None)
        signature = result.signature
        built += emu_stages.built()
        checked = barriers and result.status in ("pass", *BARRIER_STATUSES) \
            and "threadgroup_barrier" in result.msl
        # the case's time includes its share of the example's build (`_build_ahead`)
        seconds = time.perf_counter() - t0 + sum(
            share for stage, share in shares.items() if stage.startswith("emu "))
        # after a failure, Hypothesis is shrinking it: the case's time is the shrinker's
        if found:
            stages = (("shrinking", seconds + steering + sum(shares.values())),)
        else:
            merged = dict(result.stages)
            for stage, share in shares.items():
                merged[stage] = merged.get(stage, 0.0) + share
            stages = (*merged.items(), ("steering", steering))
        conn.send(CaseEnded(name, signature, seconds, int(checked), stages,
                            tuple(result.decisions), built))
        if signature is None or signature in known:
            return
        record = {"family": name, "params": params, "seed": input_seed, "schedule": schedule,
                  "disable": list(disable), "status": result.status, "signature": signature,
                  "message": result.message, "msl": result.msl,
                  "dsl": regressions.dsl_text(name, params),
                  "timeout_seconds": config.timeout, "imports": list(config.imports)}
        if route is not None:
            record["route"] = route
        found[signature] = record
        conn.send(FailingExample(record))
        raise _failure_class(signature)(record)

    one = st.tuples(fam.params() if config.candidates <= 1 else
                    st.lists(fam.params(), min_size=config.candidates,
                             max_size=config.candidates),
                    st.integers(0, INPUT_SEEDS - 1), st.sampled_from(SCHEDULES),
                    S.compile_route() if config.routes else st.none())
    test = given(drawn=st.lists(one, min_size=config.batch, max_size=config.batch))(cases)
    phases = [Phase.explicit, Phase.generate, Phase.shrink]
    if task.reuse:
        phases.insert(1, Phase.reuse)
    # @seed alone would switch the database off; the settings applied after it keep it.
    if database is None:
        database = example_database(config.db, name, disable)
    test = settings(database=database,
                    max_examples=10 ** 9, deadline=None, phases=phases,
                    suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
                    report_multiple_bugs=True, print_blob=False)(seed(task.seed)(test))
    try:
        last[0] = time.perf_counter()
        test()
    except _TaskOver:
        pass
    except BaseException as err:  # noqa: BLE001 - minimal failures, or the generator broke
        failures = _case_failures(err)
        for failure in failures:
            conn.send(FailingExample(failure.record, final=True))
        if not failures:
            conn.send(GeneratorError(name, "".join(traceback.format_exception(err))))


def _build_ahead(ready: list, barrier_every: int) -> dict:
    """Build the emulator libraries of an example's steered cases together
    (`emu.build_ahead`), each in the math mode its route runs it in, and for a case due a
    barrier check the MSL that check runs (`barriers.observable`, outside the route's
    math mode, as run_case runs the check); the seconds this took per emulator stage,
    named as a case's stages are."""
    from core.runtime import emu
    from core.runtime.emu import stages
    from core.target import METAL
    from harness.check import barriers
    from harness.check import route as routes

    libraries = []
    for params, input_seed, _, route, made, _ in ready:
        program = made.kernel.compiled if made and made.kernel is not None else \
            made.reference if made else None
        if program is None:
            continue
        declared = tuple(program.specs.values())
        with routes.math_mode(route):
            mode = METAL.math_mode_in_effect()
        libraries.append((program.msl, declared, mode))
        if _barrier_due(params, input_seed, barrier_every) and \
                barriers.barrier_lines(program.msl):
            variant = barriers.observable(program.msl)
            if variant != program.msl:
                libraries.append((variant, declared, METAL.math_mode_in_effect()))
    before = stages.totals()
    emu.build_ahead(libraries)
    return {f"emu {stage}": seconds for stage, seconds in stages.since(before).items()}


def example_database(db: str, family: str, disable: tuple):
    """The example database of one family fuzzed with the passes `disable` switched off: a
    directory of its own under `db`, so a task replays only its family's failing examples
    found under the same pipeline.

    Hypothesis keys a test's examples by its function (the source of `case`, the same for
    every task), and offers no public way to choose the key, so one database shared by the
    families would replay each family's examples in every other. An edit of `case` changes
    the key and starts the databases afresh, as for any Hypothesis test that changes; the
    regression files are the record that lasts."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    name = f"{family}--disable-{'+'.join(sorted(disable))}" if disable else family
    return DirectoryBasedExampleDatabase(Path(db) / name)


def _case_failures(err: BaseException) -> list:
    """The CaseFailures in what a Hypothesis run raised (one, or a group of them)."""
    if isinstance(err, CaseFailure):
        return [err]
    out = []
    for inner in getattr(err, "exceptions", ()) or ():
        out += _case_failures(inner)
    return out


def _barrier_due(params: dict, input_seed: int, every: int) -> bool:
    """1 of `every` cases, chosen by the case itself, so a replayed case is checked the
    same way as when it was found."""
    if every <= 0:
        return False
    digest = hashlib.sha256(f"{canonical(params)}:{input_seed}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % every == 0
