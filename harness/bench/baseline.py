"""Bench files: the committed baseline and a run's result documents.

    baseline = load_baseline(DEFAULT_BASELINE)          # reports/baselines/emu.json
    update_baseline(run, path)                          # passing cases in, others kept
    write_results(run, out_dir)                         # reports/out/bench.json
    write_pytest_benchmark_json(run, out_dir)           # pytest-benchmark's format

The baseline ("metaltile-bench-baseline/1") holds per case the family, params, counters,
minimum traffic, flops and modeled seconds per chip, and for a case with a hand-tuned
reference that kernel's counters and the generated / hand-tuned ratios; no wall-clock
time, so it changes only when counters do, and a rewrite of unchanged counters is
byte-identical.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.bench.measure import ROOT, SCHEMA, BenchRun, CaseMeasurement, as_run

BASELINE_SCHEMA = "metaltile-bench-baseline/1"
DEFAULT_BASELINE = ROOT / "reports" / "baselines" / "emu.json"
DEFAULT_OUT = ROOT / "reports" / "out"


def baseline_entry(case: CaseMeasurement) -> dict:
    entry = {"family": case.family, "params": case.params, "counters": case.counters,
             "minimum": case.minimum, "flops": case.flops,
             "modeled_seconds": {k: v["seconds"] for k, v in case.modeled.items()}}
    hand = case.hand_tuned
    if hand and hand.get("counters"):
        entry["hand_tuned"] = {"kernel": f"{hand['file']}:{hand['kernel']}",
                               "threads": hand["threads"], "counters": hand["counters"],
                               "ratios": hand["ratios"],
                               "modeled_ratios": hand["modeled_ratios"]}
    return entry


def update_baseline(results: BenchRun | dict, path: Path) -> tuple[dict, list[str]]:
    """Write the passing cases of `results` into the baseline at `path` (other cases of an
    existing baseline are kept, so `--cases` updates a subset). Returns the baseline and
    the names of cases left out because they did not pass."""
    results = as_run(results)
    if results.options["disable"] or results.options["replace"]:
        raise ValueError("a run with disabled or replaced passes cannot become the baseline")
    old = load_baseline(path) if path.exists() else None
    cases = dict(old["cases"]) if old else {}
    left_out = []
    for case in results.cases:
        if case.status == "pass" and (case.hand_tuned or {}).get("status", "pass") == "pass":
            cases[case.name] = baseline_entry(case)
        elif case.status != "skip":
            left_out.append(case.name)
    baseline = {
        "schema": BASELINE_SCHEMA,
        "about": "Deterministic emulator counters and modeled times per bench case, from "
                 "`harness bench --update-baseline`; compared exactly by `harness bench`. "
                 "No wall-clock times: those are compared A/B (`--against`).",
        "backend": "emu", "toolchain": results.toolchain.split(":")[0],
        "launch_overhead_s": results.launch_overhead_s,
        "chips": {**(old or {}).get("chips", {}), **results.chips},
        "cases": {k: cases[k] for k in sorted(cases)},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n")
    return baseline, left_out


def load_baseline(path: Path) -> dict:
    data = json.loads(Path(path).read_text())
    if data.get("schema") != BASELINE_SCHEMA:
        raise ValueError(f"{path} is not a bench baseline (schema {data.get('schema')!r}, "
                         f"expected {BASELINE_SCHEMA!r})")
    return data


# -- run results ---------------------------------------------------------------------------

def write_results(results: BenchRun | dict, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "bench.json"
    path.write_text(json.dumps(as_run(results).to_dict(), indent=1) + "\n")
    return path


def load_results(path: Path) -> BenchRun:
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a bench result (schema {data.get('schema')!r}, "
                         f"expected {SCHEMA!r})")
    return BenchRun.from_dict(data)


def write_pytest_benchmark_json(results: BenchRun | dict, out_dir: Path) -> Path:
    """The compile timings (and GPU timings, on a Mac) in pytest-benchmark's JSON format,
    so `pytest-benchmark compare` and its tooling read them."""
    from pytest_benchmark import __version__

    results = as_run(results)
    benchmarks = []
    for case in results.cases:
        for group, key in (("compile: DSL -> MSL, no cache", "compile"),
                           ("gpu: MPS, per call", "gpu")):
            timing = getattr(case, key)
            if not timing or "data" not in timing:
                continue
            stats = {k: v for k, v in timing.items() if k not in ("data", "backend")}
            stats["iterations"] = 1                      # one call per round
            benchmarks.append({
                "group": group, "name": f"{key}[{case.name}]",
                "fullname": f"harness/bench.py::{key}[{case.name}]",
                "params": {"case": case.name}, "param": case.name,
                "extra_info": {"family": case.family, "params": case.params,
                               "shape": case.shape},
                "options": {"disable_gc": False, "timer": "perf_counter",
                            "min_rounds": results.options["rounds"], "max_time": 0,
                            "min_time": 0, "warmup": True},
                "stats": {**stats, "data": timing["data"]},
            })
    doc = {"machine_info": results.machine,
           "commit_info": {"id": results.revision["commit"],
                           "dirty": results.revision["dirty"], "project": "metaltile"},
           "benchmarks": benchmarks, "datetime": results.created, "version": __version__}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "bench.pytest-benchmark.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path
