"""Bench files: the one place a run becomes JSON and back, and the committed baseline.

    baseline = load_baseline(DEFAULT_BASELINE)          # reports/baselines/emu.json -> Baseline
    update_baseline(run, path)                          # passing cases in, others kept
    write_results(run, out_dir)                         # reports/out/bench.json
    load_results(path)                                  # bench.json -> BenchRun
    write_pytest_benchmark_json(run, out_dir)           # pytest-benchmark's format

A run (`measure.BenchRun` of `measure.CaseMeasurement`s) turns into its results document
(schema "metaltile-bench/1", what bench.json holds; `run_to_dict`) and back
(`run_from_dict`, `as_run`) here and nowhere else: the gate and the report read the typed
records' fields.

The baseline ("metaltile-bench-baseline/1") holds per case the family, params, counters,
minimum traffic, flops and modeled seconds per chip, for a case with a hand-tuned
reference that kernel's counters and the generated / hand-tuned ratios, and for a case
run with `--peers` each peer's counters, modeled seconds and generated / peer ratios
(`PeerEntry`; kept, ratios recomputed, by an update without --peers); no wall-clock
time, so it changes only when counters do, and a rewrite of unchanged counters is
byte-identical. In memory it is a `Baseline` of `BaselineEntry`s (`HandTunedEntry` for the
reference); `baseline_to_dict` / `baseline_from_dict` are its file form.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.bench.measure import ROOT, SCHEMA, BenchRun, CaseMeasurement

BASELINE_SCHEMA = "metaltile-bench-baseline/1"
DEFAULT_BASELINE = ROOT / "reports" / "baselines" / "emu.json"
DEFAULT_OUT = ROOT / "reports" / "out"
ABOUT = ("Deterministic emulator counters and modeled times per bench case, from "
         "`harness bench --update-baseline`; compared exactly by `harness bench`. "
         "No wall-clock times: those are compared A/B (`--against`).")


# -- a run as JSON -------------------------------------------------------------------------

def case_to_dict(case: CaseMeasurement) -> dict:
    return dataclasses.asdict(case)


def case_from_dict(data: dict) -> CaseMeasurement:
    """A CaseMeasurement from its document; keys it does not know are left out."""
    known = {f.name for f in dataclasses.fields(CaseMeasurement)}
    return CaseMeasurement(**{k: v for k, v in data.items() if k in known})


def run_to_dict(run: BenchRun) -> dict:
    """The results document (what bench.json holds) of a run."""
    return {**{f.name: getattr(run, f.name) for f in dataclasses.fields(run)},
            "cases": [case_to_dict(c) for c in run.cases]}


def run_from_dict(data: dict) -> BenchRun:
    if data.get("schema") != SCHEMA:
        raise ValueError(f"not a bench result (schema {data.get('schema')!r}, expected "
                         f"{SCHEMA!r})")
    known = {f.name for f in dataclasses.fields(BenchRun)}
    run = BenchRun(**{k: v for k, v in data.items() if k in known and k != "cases"})
    run.cases = [case_from_dict(c) for c in data["cases"]]
    return run


def as_run(results) -> BenchRun:
    """A BenchRun from itself or from its results document (a saved bench.json)."""
    return results if isinstance(results, BenchRun) else run_from_dict(results)


# -- the baseline --------------------------------------------------------------------------

@dataclass
class HandTunedEntry:
    """A baseline case's hand-tuned reference: its counters and generated / hand-tuned."""
    kernel: str                        # "file:kernel"
    threads: int
    counters: dict
    ratios: dict                       # counter -> generated / hand-tuned (None: ref 0)
    modeled_ratios: dict               # chip -> generated / hand-tuned modeled seconds


@dataclass
class PeerEntry:
    """A baseline case's peer kernel (harness/bench/peers/): its counters, modeled seconds
    and generated / peer ratios. The peer's counters depend only on its source and the
    emulator, so a baseline update without --peers keeps them and recomputes the ratios
    from the new generated counters (`rebase_peer`)."""
    kernel: str                        # the MLX host name launched
    version: str                       # mlx-metal version of the headers
    counters: dict
    modeled_seconds: dict              # chip -> the peer's modeled seconds
    ratios: dict                       # counter -> generated / peer (None: peer 0)
    modeled_ratios: dict               # chip -> generated / peer modeled seconds


@dataclass
class BaselineEntry:
    """What the baseline holds of one passing case."""
    family: str
    params: dict
    counters: dict
    minimum: dict                      # {"read": bytes, "written": bytes}
    flops: int
    modeled_seconds: dict              # chip -> modeled seconds
    hand_tuned: HandTunedEntry | None = None
    peers: dict = field(default_factory=dict)      # peer name ("mlx") -> PeerEntry

    def to_dict(self) -> dict:
        entry = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                 if f.name not in ("hand_tuned", "peers")}
        if self.hand_tuned is not None:
            entry["hand_tuned"] = dataclasses.asdict(self.hand_tuned)
        if self.peers:
            entry["peers"] = {k: dataclasses.asdict(v) for k, v in sorted(self.peers.items())}
        return entry

    @classmethod
    def from_dict(cls, data: dict) -> "BaselineEntry":
        hand = data.get("hand_tuned")
        return cls(data["family"], data["params"], data["counters"], data["minimum"],
                   data["flops"], data["modeled_seconds"],
                   HandTunedEntry(**hand) if hand is not None else None,
                   {k: PeerEntry(**v) for k, v in data.get("peers", {}).items()})


@dataclass
class Baseline:
    """The committed baseline: per case name a BaselineEntry, and what it was made with."""
    toolchain: str | None              # "clang 19.1.7" of the run that wrote it
    launch_overhead_s: float | None
    chips: dict = field(default_factory=dict)      # chip name -> description
    cases: dict = field(default_factory=dict)      # case name -> BaselineEntry
    backend: str = "emu"
    about: str = ABOUT
    schema: str = BASELINE_SCHEMA


def baseline_to_dict(baseline: Baseline) -> dict:
    return {"schema": baseline.schema, "about": baseline.about, "backend": baseline.backend,
            "toolchain": baseline.toolchain, "launch_overhead_s": baseline.launch_overhead_s,
            "chips": baseline.chips,
            "cases": {k: baseline.cases[k].to_dict() for k in sorted(baseline.cases)}}


def baseline_from_dict(data: dict, where="the document") -> Baseline:
    if data.get("schema") != BASELINE_SCHEMA:
        raise ValueError(f"{where} is not a bench baseline (schema {data.get('schema')!r}, "
                         f"expected {BASELINE_SCHEMA!r})")
    return Baseline(toolchain=data.get("toolchain"),
                    launch_overhead_s=data.get("launch_overhead_s"),
                    chips=data.get("chips", {}),
                    cases={k: BaselineEntry.from_dict(v)
                           for k, v in data.get("cases", {}).items()},
                    backend=data.get("backend", "emu"), about=data.get("about", ABOUT))


def baseline_entry(case: CaseMeasurement, old: BaselineEntry | None = None) -> BaselineEntry:
    """The baseline entry of a passing case; the peers it ran are recorded, and the peers
    of the `old` entry it did not run are kept, their ratios recomputed against this
    case's counters (`rebase_peer`)."""
    hand = case.hand_tuned
    modeled_seconds = {k: v["seconds"] for k, v in case.modeled.items()}
    peers = {}
    if old is not None and old.params == case.params:
        peers = {k: rebase_peer(v, case.counters, modeled_seconds)
                 for k, v in old.peers.items()}
    for name, peer in (case.peers or {}).items():
        if peer["status"] == "pass" and peer.get("counters"):
            peers[name] = PeerEntry(peer["kernel"], peer["version"], peer["counters"],
                                    {k: v["seconds"] for k, v in peer["modeled"].items()},
                                    peer["ratios"], peer["modeled_ratios"])
    return BaselineEntry(
        case.family, case.params, case.counters, case.minimum, case.flops, modeled_seconds,
        HandTunedEntry(f"{hand['file']}:{hand['kernel']}", hand["threads"], hand["counters"],
                       hand["ratios"], hand["modeled_ratios"])
        if hand and hand.get("counters") else None, peers)


def rebase_peer(peer: PeerEntry, counters: dict, modeled_seconds: dict) -> PeerEntry:
    """`peer`'s ratios against new generated `counters` and modeled seconds (its own
    counters unchanged)."""
    from harness.bench.measure import generated_over_reference
    ratios = {k: generated_over_reference(counters.get(k, 0), peer.counters.get(k, 0))
              for k in peer.ratios}
    modeled = {chip: modeled_seconds[chip] / s for chip, s in peer.modeled_seconds.items()
               if chip in modeled_seconds and s}
    return dataclasses.replace(peer, ratios=ratios, modeled_ratios=modeled)


def _peers_pass(case: CaseMeasurement) -> bool:
    """No peer that ran failed (not run, not applicable and unavailable are no failure)."""
    return all(p["status"] in PEER_OK for p in (case.peers or {}).values())


PEER_OK = ("pass", "not_applicable", "unavailable")


def update_baseline(results: BenchRun | dict, path: Path) -> tuple[Baseline, list[str]]:
    """Write the passing cases of `results` into the baseline at `path` (other cases of an
    existing baseline are kept, so `--cases` updates a subset). Returns the baseline and
    the names of cases left out because they did not pass."""
    results = as_run(results)
    if results.options["disable"] or results.options["replace"]:
        raise ValueError("a run with disabled or replaced passes cannot become the baseline")
    old = load_baseline(path) if path.exists() else None
    cases = dict(old.cases) if old else {}
    left_out = []
    for case in results.cases:
        if (case.status == "pass" and (case.hand_tuned or {}).get("status", "pass") == "pass"
                and _peers_pass(case)):
            cases[case.name] = baseline_entry(case, cases.get(case.name))
        elif case.status != "skip":
            left_out.append(case.name)
    baseline = Baseline(toolchain=results.toolchain.split(":")[0],
                        launch_overhead_s=results.launch_overhead_s,
                        chips={**(old.chips if old else {}), **results.chips},
                        cases={k: cases[k] for k in sorted(cases)})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(baseline_to_dict(baseline), indent=1, sort_keys=True) + "\n")
    return baseline, left_out


def load_baseline(path: Path) -> Baseline:
    return baseline_from_dict(json.loads(Path(path).read_text()), where=path)


# -- run results ---------------------------------------------------------------------------

def write_results(results: BenchRun | dict, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "bench.json"
    path.write_text(json.dumps(run_to_dict(as_run(results)), indent=1) + "\n")
    return path


def load_results(path: Path) -> BenchRun:
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a bench result (schema {data.get('schema')!r}, "
                         f"expected {SCHEMA!r})")
    return run_from_dict(data)


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
                # the id pytest-benchmark compare matches runs by: kept from before the
                # move into harness/bench/, so older saved runs still compare
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
