"""Batched fuzz cases (harness/fuzz/worker.py, `WorkerConfig.batch`): an example's cases
have their kernels (and the MSL of their barrier checks) built for the emulator in one
clang run before they run, each case is charged its share of that build, and a failing
case among them is shrunk alone, as without batches.

The tasks run in this process, on a stand-in for the connection to the parent."""

from core.runtime import emu
from core.runtime.emu import build
from harness.fuzz import worker
from harness.fuzz.messages import CaseEnded, FailingExample, Task, WorkerConfig
from suites.fuzz.standin import Parent

FAR = 10 ** 10


def _task(family, seed=1):
    return Task(family=family, seed=seed, reuse=False, slice_end=FAR, deadline=FAR,
                known=(), avoid=())


def test_an_examples_kernels_are_built_together_and_charged_to_its_cases(
        tmp_path, test_families, monkeypatch, emulator_cache_of_its_own):
    batches = []
    build_ahead = emu.build_ahead

    def recording(libraries, instrument=True):
        libraries = list(libraries)
        batches.append([source for source, _, _ in libraries])
        return build_ahead(libraries, instrument)

    alone = []
    compile_alone = build.Builder._compile

    def counting(self, *args, **kwargs):
        alone.append(args[0])
        return compile_alone(self, *args, **kwargs)

    batched = []
    compile_batch = build.Builder._compile_batch

    def counting_batch(self, *args, **kwargs):
        batched.append(compile_batch(self, *args, **kwargs))
        return batched[-1]

    monkeypatch.setattr(emu, "build_ahead", recording)
    monkeypatch.setattr(build.Builder, "_compile", counting)
    monkeypatch.setattr(build.Builder, "_compile_batch", counting_batch)
    # every case due a barrier check: the MSL that check runs is built with the rest
    config = WorkerConfig(db=str(tmp_path / "db"), imports=(test_families.__name__,),
                          disable=(), barrier_every=1, timeout=60.0, batch=3)
    parent = Parent(halt_after=6, counting=CaseEnded)
    worker._run_task(parent, config, _task("staged_transpose"))
    ended = [m for m in parent.sent if isinstance(m, CaseEnded)]
    # the new kernels the cases report are the libraries the emulator compiled (not the
    # cache directory's new files: other test processes share it)
    assert sum(m.kernels for m in ended) == sum(batched) + len(alone) > 0
    assert len(ended) == 6 and all(m.signature is None for m in ended)
    # two examples of three cases: each example's kernels and their barrier checks' handed
    # over at once, before its cases ran
    assert len(batches) == 2 and all(2 <= len(b) <= 6 for b in batches)
    assert all("[[buffer(0)]]" in source for batch in batches for source in batch), batches
    assert all(any("volatile" in source for source in batch) for batch in batches)
    assert sum(m.barriers for m in ended) == 6
    assert not alone, "a kernel or its barrier check was compiled on its own"
    # the build's time is in the cases' stages, as "emu" stages, and in their seconds
    for message in ended:
        stages = dict(message.stages)
        assert stages.get("hypothesis", 0) > 0 and "steering" in stages
        assert message.seconds >= sum(v for k, v in stages.items() if k.startswith("emu "))


def test_a_failing_case_in_a_batch_is_shrunk_as_alone(tmp_path, test_families):
    minimal = {}
    for batch in (1, 4):
        config = WorkerConfig(db=str(tmp_path / f"db{batch}"),
                              imports=(test_families.__name__,), disable=(),
                              barrier_every=0, timeout=60.0, batch=batch)
        parent = Parent()
        worker._run_task(parent, config, _task("two_bugs"))
        minimal[batch] = sorted(
            (m.record["signature"].split("@")[0], m.record["params"]["n"])
            for m in parent.sent if isinstance(m, FailingExample) and m.final)
    assert minimal[4] == minimal[1] == [("internal_error:KeyError", 10),
                                        ("internal_error:ValueError", 50)]


class _Exited:
    """A worker process that has exited normally."""
    exitcode = 0

    def join(self, timeout=None):
        pass


class _Pipe:
    def close(self):
        pass


class _NoWorkers:
    def kill(self, process):
        pass


def test_a_case_announced_and_not_run_before_its_task_ended_is_not_lost(tmp_path,
                                                                        test_families):
    # A batch steers its cases (each announced as it compiles) before running them; when
    # the task's time runs out between them, the worker ends the task with a case
    # announced and never run. Its exit after that is no crash of that case.
    from harness.fuzz import scheduler
    from harness.fuzz.messages import CaseStarted, TaskDone

    options = scheduler.FuzzOptions(db=tmp_path / "db", out=tmp_path / "out", seed=1,
                                    workers=1, families=("staged_transpose",),
                                    imports=(test_families.__name__,))
    summary = scheduler.FuzzSummary(seed=1, budget=1.0, workers=1)
    run = scheduler._Run.build(options, scheduler.QuietView(), summary, _NoWorkers())
    run.stopping = True
    slot = run.slots[0]
    slot.process, slot.conn, slot.started = _Exited(), _Pipe(), True
    slot.task = "a task"
    run._handle(slot, CaseStarted("staged_transpose", {"n": 8}, 0, "forward"))
    run._handle(slot, TaskDone("staged_transpose"))
    run._died(slot)
    assert not summary.failures and not summary.errors, summary.errors
