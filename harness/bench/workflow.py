"""`harness bench`: latency tracking, and the gate every compiler change passes.

The workflow of one `harness bench` run, from options to a verdict; the command line
(harness/cli.py) only parses options into `BenchOptions` and prints what comes back:

    plan = prepare(BenchOptions(cases="copy", rounds=3))   # BenchUsageError if they cannot run
    outcome = execute(plan, progress=...)                  # -> BenchOutcome
    outcome.changes, outcome.failed, outcome.reports["html"]

The parts live apart (harness/bench/__init__.py has the map and the data flow of one bench
number); this module only ties them together. docs/bench.md explains the counters, the
roofline model and the gate. Names are imported from the module that defines them; this
one defines only the workflow's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.bench import roofline
from harness.bench.baseline import (DEFAULT_BASELINE, DEFAULT_OUT, Baseline, load_baseline,
                                    load_results, update_baseline,
                                    write_pytest_benchmark_json, write_results)
from harness.bench.cases import select
from harness.bench.gate import compare, gate_failed
from harness.bench.measure import DEFAULT_ROUNDS, ROOT, BenchRun, measure_all, mps_available
from harness.check.case import check_passes


class BenchUsageError(ValueError):
    """Options that cannot run: unknown cases or passes, MPS missing, a bad baseline."""


@dataclass
class BenchOptions:
    cases: str | None = None             # --cases patterns; None: the whole registry
    rounds: int = DEFAULT_ROUNDS         # compile-time rounds per case
    disable: tuple = ()                  # pipeline passes switched off
    replace: dict = field(default_factory=dict)   # pass name -> replacement function
    chips: tuple = roofline.DEFAULT_CHIPS
    backend: str = "auto"                # emu | mps | auto (GPU time where MPS exists)
    baseline: Path = DEFAULT_BASELINE
    out: Path = DEFAULT_OUT
    update_baseline: bool = False
    against: str | None = None           # GITREF for the compile-time A/B
    ab_rounds: int | None = None
    peers: tuple = ()                    # peers run beside the cases ("mlx"; peers/)


@dataclass
class BenchPlan:
    """What `execute` will do: checked options, the cases, whether GPU time is measured."""
    options: BenchOptions
    cases: list
    gpu: bool
    gpu_reason: str                      # why GPU time is not measured ("" when it is)
    baseline: Baseline | None            # None: no baseline, or it is being rewritten


@dataclass
class BenchOutcome:
    results: BenchRun
    changes: list                        # gate.Change
    baseline: Baseline | None
    written: list                        # result files (bench.json, pytest-benchmark json)
    reports: dict                        # {"markdown": path, "html": path}
    left_out: list = field(default_factory=list)   # not written into the baseline

    @property
    def failed(self) -> bool:
        return gate_failed(self.changes)


def prepare(options: BenchOptions) -> BenchPlan:
    """Check `options` and resolve them; BenchUsageError says what cannot run."""
    try:
        cases = select(options.cases)
    except KeyError as error:
        raise BenchUsageError(error.args[0]) from None
    gpu, reason = mps_available()
    if options.backend == "mps" and not gpu:
        raise BenchUsageError(f"--backend mps: {reason}")
    gpu = gpu and options.backend != "emu"
    if options.update_baseline and (options.disable or options.replace):
        raise BenchUsageError("--update-baseline with --disable/--replace: a perturbed "
                              "pipeline never becomes the baseline")
    check_passes(options.disable, options.replace, BenchUsageError)
    from harness.bench.peers import PEERS
    unknown = [n for n in options.peers if n not in PEERS]
    if unknown:
        raise BenchUsageError(f"--peers: unknown peer(s) {unknown}; known: {', '.join(PEERS)}")
    baseline = None
    if not options.update_baseline and Path(options.baseline).exists():
        try:
            baseline = load_baseline(options.baseline)
        except (ValueError, OSError) as error:
            raise BenchUsageError(f"baseline {options.baseline}: {error}") from None
    return BenchPlan(options, cases, gpu, "" if gpu else (reason or "emu"), baseline)


def execute(plan: BenchPlan, *, progress=None, ab_progress=None) -> BenchOutcome:
    """Measure the plan's cases, time them A/B if asked, update the baseline if asked,
    compare with the baseline and write the result files and reports.
    `progress(case, index, total)` before each case; `ab_progress(round, rounds)` per A/B
    round (round 0: the warm-up)."""
    from harness.bench import against, report

    from harness.bench.peers.run import runners

    options = plan.options
    results = measure_all(plan.cases, rounds=options.rounds, disable=options.disable,
                          replace=options.replace, chip_names=options.chips, gpu=plan.gpu,
                          selection=options.cases, progress=progress,
                          peers=runners(options.peers))
    if options.against:
        timed = [c for c, r in zip(plan.cases, results.cases) if r.status != "skip"]
        results.against = against.run(options.against, timed, root=ROOT,
                                      out_dir=Path(options.out).resolve(),
                                      rounds=options.ab_rounds or against.DEFAULT_ROUNDS,
                                      progress=ab_progress)
    baseline, left_out = plan.baseline, []
    if options.update_baseline:
        baseline, left_out = update_baseline(results, Path(options.baseline))
    changes = compare(results, baseline)
    written = [write_results(results, Path(options.out)),
               write_pytest_benchmark_json(results, Path(options.out))]
    reports = report.write_reports(results, changes, baseline, Path(options.out),
                                   str(options.baseline) if baseline else None)
    return BenchOutcome(results, changes, baseline, written, reports, left_out)


def rerender(result_path: Path, baseline_path: Path, out_dir: Path | None = None
             ) -> BenchOutcome:
    """`harness report`: a saved result against a baseline, reports written again."""
    from harness.bench import report

    try:
        results = load_results(result_path)
    except (OSError, ValueError) as error:
        raise BenchUsageError(f"cannot read the result {result_path}: {error}") from None
    baseline = None
    if Path(baseline_path).exists():
        try:
            baseline = load_baseline(baseline_path)
        except (ValueError, OSError) as error:
            raise BenchUsageError(f"baseline {baseline_path}: {error}") from None
    changes = compare(results, baseline)
    reports = report.write_reports(results, changes, baseline,
                                   Path(out_dir or Path(result_path).parent),
                                   str(baseline_path) if baseline else None)
    return BenchOutcome(results, changes, baseline, [Path(result_path)], reports)
