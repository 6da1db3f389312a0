"""`harness fuzz` (harness/fuzz/) end to end: real worker processes, real kernels.

The smoke run is the CI-sized fuzzing of every registered family on the current compiler;
the others fuzz the test-only families of fuzzfamilies.py: a pipeline with thread_sync
switched off must be caught, shrunk, saved and replayed (and resumed from the example
database), shrinking must keep the kind of failure, a worker that dies or hangs must be
recorded while the run goes on, and Ctrl-C must keep what was found.
"""

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.fuzz import scheduler
from harness.check import regressions
from harness.check.case import CASE_TIMEOUT, WORKER_CRASH
from harness.cli import main
from harness.gen import family

REPO = Path(__file__).resolve().parents[2]
MINIMAL_STAGED = {"n": 8, "threads": 32, "dtype": "float32"}


def _options(tmp_path, **kwargs):
    kwargs.setdefault("seed", 1)
    return scheduler.FuzzOptions(db=tmp_path / "db", out=tmp_path / "out", **kwargs)


def _describe(summary):
    lines = [f"{f.family} {f.signature}: {f.path}\n{f.message}" for f in summary.failures]
    return "\n".join(lines + summary.errors)


@pytest.mark.slow
def test_smoke_every_family_no_failures(tmp_path):
    before = sorted(regressions.DEFAULT_DIR.glob("*.json"))
    fuzzed = [f.name for f in family.families() if not f.skip_reason]
    summary = scheduler.run(_options(tmp_path, budget=45, workers=2, seed=0))
    print({n: (t.cases, t.failing_cases, t.barrier_checks, round(t.seconds, 1))
           for n, t in summary.families.items()}, f"{summary.rate:.2f} cases/s",
          "known:", [(f.family, f.signature) for f in summary.known])
    assert fuzzed and set(fuzzed) <= set(summary.families)
    idle = [n for n in fuzzed if summary.families[n].cases == 0]
    assert not idle, f"families that ran no case: {idle}"
    assert not summary.failures and not summary.errors, _describe(summary)
    assert summary.exit_code == 0
    assert not list((tmp_path / "out").glob("*.json"))
    assert sorted(regressions.DEFAULT_DIR.glob("*.json")) == before


@pytest.mark.slow
def test_broken_pipeline_is_caught_shrunk_saved_and_resumed(tmp_path, test_families):
    # Every case fails without thread_sync; max_cases ends the run once it has shrunk.
    options = _options(tmp_path, budget=60, max_cases=30, workers=1,
                       families=("staged_transpose",), disable=("thread_sync",),
                       imports=(test_families.__name__,))
    first = scheduler.run(options)
    assert first.exit_code == 1 and not first.errors, _describe(first)
    [failure] = first.failures
    assert failure.shrunk and failure.params == MINIMAL_STAGED
    assert failure.signature.startswith(("mismatch+finding:race", "finding:race"))
    [path] = (tmp_path / "out").glob("*.json")
    assert path == failure.path and path.name.startswith("staged_transpose-")
    case = regressions.load(path)
    assert (case.state, case.disable, case.params) == ("open", ["thread_sync"], MINIMAL_STAGED)
    assert "threadgroup float" in case.msl and "threadgroup_barrier" not in case.msl
    assert "staged_transpose" in case.dsl and case.found_by["shrunk"]
    outcome = regressions.replay(case)
    assert outcome.same_failure(case), outcome.message
    with pytest.raises(regressions.StillFailing):
        regressions.expect(case)

    # The database resumes the run: the saved failure is the first case of the next one,
    # and as an open regression case it is a known bug, not a new failure.
    again = scheduler.run(_options(tmp_path, budget=60, max_cases=3, workers=1, seed=2,
                              families=("staged_transpose",), disable=("thread_sync",),
                              imports=(test_families.__name__,)))
    assert again.exit_code == 0 and not again.failures, _describe(again)
    [replayed] = again.known
    assert replayed.case_number == 1 and replayed.params == MINIMAL_STAGED
    assert replayed.path == path and replayed.signature == failure.signature
    assert [p.name for p in (tmp_path / "out").glob("*.json")] == [path.name]


def test_shrinking_keeps_the_kind_of_failure(tmp_path, test_families):
    summary = scheduler.run(_options(tmp_path, budget=60, max_cases=300, workers=1,
                                families=("two_bugs",), imports=(test_families.__name__,)))
    minimal = {f.signature.split("@")[0]: (f.params, f.shrunk) for f in summary.failures}
    # n = 10 is simpler than any n >= 50, but it is the other bug
    assert minimal == {"internal_error:ValueError": ({"n": 50}, True),
                       "internal_error:KeyError": ({"n": 10}, True)}, _describe(summary)
    assert summary.stages["shrinking"] > 0   # the shrinker's cases, in the breakdown


def test_the_summary_says_where_the_time_went(tmp_path, test_families):
    # Every case's stages reach the summary: DSL -> MSL, the emulator's translation and
    # launch (its build only when the cache does not hold the kernel yet), the oracle, the
    # barrier check (1 of 1 cases here), the steering's compiles of the candidates,
    # Hypothesis's own time between cases and the rest of the workers' time; the table
    # prints each with its share and its milliseconds per case.
    from rich.console import Console

    from harness.fuzz import view

    summary = scheduler.run(_options(tmp_path, budget=60, max_cases=4, workers=1,
                                     barrier_every=1, families=("staged_transpose",),
                                     imports=(test_families.__name__,)))
    assert summary.cases >= 4 and not summary.failures, _describe(summary)
    stages = summary.stages
    for name in ("emu translate", "emu launch", "oracle", "barriers", "steering",
                 "hypothesis", "between cases"):
        assert stages.get(name, 0) > 0, (name, stages)
    assert stages.get("compile", 0) + stages["steering"] > 0   # DSL -> MSL, once per case
    assert list(stages) == [n for n in scheduler.STAGES if n in stages]
    spent = sum(t.seconds for t in summary.families.values())   # the cases' own time
    own = sum(v for k, v in stages.items() if k not in ("steering", "hypothesis",
                                                         "between cases"))
    assert abs(own - spent) < 0.05 * spent
    console = Console(record=True, width=120)
    view.print_summary(console, summary)
    text = console.export_text()
    assert "where the time went" in text and "emu launch" in text and "barriers" in text


def test_dead_and_hung_workers_are_failures_and_the_run_goes_on(tmp_path, test_families):
    # n = 3 kills the worker, n = 4 hangs it; after both, only passing cases are left.
    summary = scheduler.run(_options(tmp_path, budget=90, max_cases=40, workers=1,
                                families=("crashy",), case_timeout=3,
                                imports=(test_families.__name__,)))
    by_signature = {f.signature: f for f in summary.failures}
    assert set(by_signature) == {WORKER_CRASH, CASE_TIMEOUT}, \
        _describe(summary)
    assert by_signature[WORKER_CRASH].params == {"n": 3}
    assert by_signature[CASE_TIMEOUT].params == {"n": 4}
    assert summary.worker_restarts >= 2 and not summary.errors
    assert summary.families["crashy"].cases > summary.families["crashy"].failing_cases
    crash = regressions.load(by_signature[WORKER_CRASH].path)
    hang = regressions.load(by_signature[CASE_TIMEOUT].path)
    assert crash.status == "crash" and crash.imports == [test_families.__name__]
    assert hang.status == "timeout" and hang.timeout_seconds == 3
    with ThreadPoolExecutor(2) as pool:  # each replay runs in a child process of its own
        outcomes = list(pool.map(regressions.replay, [crash, hang]))
    assert outcomes[0].same_failure(crash) and outcomes[1].same_failure(hang), outcomes


def _take_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_keeps_the_failures_and_prints_the_summary(tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "harness.cli", "fuzz", "--budget", "2m", "--seed", "5",
               "--workers", "1", "--families", "staged_transpose", "--disable", "thread_sync",
               "--import", "suites.fuzz.fuzzfamilies", "--db", str(tmp_path / "db"),
               "--out", str(out)]
    # The child must take Ctrl-C whatever this process inherited: a suite started in the
    # background by a non-interactive shell (nohup, a CI script's `&`) ignores SIGINT, and
    # that disposition is inherited through exec, so the fuzz run never saw the signal.
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                            preexec_fn=_take_sigint)
    try:
        give_up = time.time() + 90
        while not list(out.glob("*.json")) and time.time() < give_up:
            assert proc.poll() is None, proc.communicate()[0]
            time.sleep(0.2)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, output
    assert "fuzz interrupted" in output and "FAIL staged_transpose" in output, output
    assert output.startswith("fuzz: seed 5"), output  # plain progress: stdout is a pipe
    [path] = out.glob("*.json")
    assert json.loads(path.read_text())["state"] == "open"


@pytest.mark.parametrize("text,seconds", [("90", 90), ("90s", 90), ("10m", 600), ("1h", 3600),
                                          ("1h30m", 5400), ("2.5m", 150)])
def test_budgets(text, seconds):
    assert scheduler.parse_duration(text) == seconds


@pytest.mark.parametrize("args,message", [
    (["--budget", "soon"], "not a duration"),
    (["--workers", "0"], "not a positive integer"),
    (["--families", "no_such_family", "--budget", "5s"], "unknown family"),
    (["--disable", "legalize", "--budget", "5s"], "cannot be disabled"),
    (["--disable", "no_such_pass", "--budget", "5s"], "unknown pass"),
])
def test_usage_errors_exit_2(args, message, tmp_path, capsys):
    code = main(["fuzz", "--db", str(tmp_path / "db"), "--out", str(tmp_path / "out"), *args])
    captured = capsys.readouterr()
    assert code == 2 and message in captured.out + captured.err
    assert not (tmp_path / "out").exists()


def test_the_summary_fits_a_ci_logs_80_columns_uncut():
    # what `harness fuzz` prints when stdout is not a terminal (rich's 80 columns): every
    # family's row and header whole, a long run's numbers included
    from rich.console import Console

    from harness.fuzz import view

    summary = scheduler.FuzzSummary(seed=11, budget=600.0, workers=2, elapsed=600.0)
    for name in [f.name for f in family.families()]:
        summary.families[name] = scheduler.FamilyTally(
            name, cases=12345, kernels=6789, failing_cases=12, barrier_checks=3456,
            seconds=1234.5, stages={"emu compile": 100.0, "steering": 50.0},
            decisions={"threads=power_of_two": 12345})
    console = Console(record=True, width=80)
    view.print_summary(console, summary)
    text = console.export_text()
    assert "…" not in text, text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "new" in text and "kernels" in text and "12345" in text
