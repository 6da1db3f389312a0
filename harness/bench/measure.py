"""Measuring bench cases: one checked run, its counters, the roofline model, compile times.

    run = measure_all(select("copy"), rounds=5)     # -> BenchRun
    run.cases[0].status, run.cases[0].counters["device_load_ops"]

Per case (`measure_case` -> `CaseMeasurement`):
  status     one checked run through `harness.check.case.run_case` (the one way to run a case)
             of the kernel `first_compile` compiled (the case compiles cold once): oracle
             comparison and every emulator check; anything but "pass" fails the gate
  counters   the emulator's deterministic counters of that run, summed over the program's
             launches (`aggregate`): bytes and load/store operations on device and
             threadgroup memory, barriers, simd operations, ... The forward schedule, seed
             and inputs are fixed, so two runs of one compiler give identical counters.
  minimum    the traffic no kernel can avoid: every input read once, every output written
             once (the ratio counted/minimum shows re-reads and spills)
  power      what the case's oracle check rejects: the smallest output scaling 1 + d, and
             any doctored output it accepts (harness/check/power.py)
  modeled    `harness.bench.roofline` time per chip and its terms (device memory, ALU,
             threadgroup memory, simd operations, barriers, launches, occupancy, register
             spills) from those counters and two figures read from the MSL text:
             `local_array_bytes`, the thread-local array bytes it declares (the register
             estimate), and `local_array_profile`, each array's bytes and how often a
             thread touches each of its bytes (what a spilled byte costs; docs/bench.md)
  first_compile  the case's first DSL -> MSL compile in the bench process, timed before
             anything else compiles it (no cache of this kernel, imports already paid): its
             wall seconds, the program's device kernels, and each stage's ("parse", every
             pass by name, "print_msl"; the pipeline's `timings`). The goal
             `COMPILE_GOAL_S` is about this one, per device kernel (`over_goal`); it is a
             single wall-clock sample, shown, never gated
  compile    DSL -> MSL wall time (build the family's kernel, which parses the DSL, then
             `core.compile(..., cache=False)`), `rounds` warm rounds after one warm-up,
             summarized by pytest-benchmark's own `Stats`
  gpu        on macOS with MPS only: measured GPU time of the compiled kernel (UNTESTED:
             no Mac has run it; elsewhere it is skipped with the reason)

Nothing here reads or writes files or decides pass/fail: harness/bench/baseline.py stores,
harness/bench/gate.py compares. A `BenchRun` turns into the results document (JSON, schema
"metaltile-bench/1") and back in harness/bench/baseline.py (`run_to_dict`, `run_from_dict`):
{schema, created, revision, machine, toolchain, options, chips, launch_overhead_s,
cases: [{name, family, params, shape, scaling, full_scale, status, message, findings,
counters, minimum, flops, modeled: {chip: {...}}, first_compile: {seconds, kernels, stages},
compile: {Stats fields, data}, gpu, msl, hand_tuned, peers: {name: {...}} | null}],
against: {...} | null, seconds}.
"""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.bench import roofline
from harness.bench.cases import BenchCase, HandTuned

SCHEMA = "metaltile-bench/1"
ROOT = Path(__file__).resolve().parents[2]
SEED = 0
DEFAULT_ROUNDS = 5
# Every bench case compiles DSL -> MSL in under 30 ms cold per device kernel of its program
# (docs/bench.md: a program of nine kernels is not held to one kernel's budget).
COMPILE_GOAL_S = 0.030

# Counters summed over launches; all but the informational ones gate (harness/bench/gate.py).
SUMMED = ("groups", "threads", "simdgroups", "barriers", "simd_ops", "atomic_ops",
          "threadgroup_bytes_read", "threadgroup_bytes_written", "device_load_ops",
          "device_store_ops", "threadgroup_load_ops", "threadgroup_store_ops",
          *(f"simd_{kind}_ops" for kind in roofline.SIMD_KINDS))
REFERENCE_KERNELS = Path(__file__).resolve().parent / "reference_kernels"
# Counters set as generated / hand-tuned (all gated counters that either side can have).
RATIO_COUNTERS = ("device_bytes_read", "device_bytes_written", "device_load_ops",
                  "device_store_ops", "threadgroup_bytes_read", "threadgroup_bytes_written",
                  "threadgroup_load_ops", "threadgroup_store_ops", "threadgroup_memory_bytes",
                  "barriers", "simd_ops", "local_array_bytes")
PER_BUFFER = ("device_bytes_read", "device_bytes_written", "device_unique_bytes_read",
              "device_unique_bytes_written")


@dataclass
class CaseMeasurement:
    """What `harness bench` records for one case. `counters` maps counter name -> count,
    `modeled` chip name -> roofline figures, `compile`/`gpu` pytest-benchmark summaries."""
    name: str
    family: str
    params: dict
    shape: str
    scaling: str
    full_scale: float = 1.0
    status: str = "skip"
    message: str = ""
    findings: list = field(default_factory=list)      # text of the first 20 findings
    counters: dict | None = None
    minimum: dict | None = None                       # {"read": bytes, "written": bytes}
    flops: int = 0
    modeled: dict | None = None
    first_compile: dict | None = None               # {"seconds", "kernels", "stages": {...}}
    compile: dict | None = None
    gpu: dict | None = None
    msl: str = ""
    reference: dict | None = None     # cases.Reference.as_dict(): informational
    hand_tuned: dict | None = None    # `measure_hand_tuned`: the reference run and the ratios
    power: dict | None = None         # harness/check/power.py `summary`: what the check rejects
    peers: dict | None = None         # peer name -> harness/bench/peers/run.py's record

    @classmethod
    def of(cls, case: BenchCase) -> "CaseMeasurement":
        return cls(case.name, case.family, dict(case.params), case.shape, case.scaling,
                   case.full_scale,
                   reference=case.reference.as_dict() if case.reference else None)


@dataclass
class BenchRun:
    """One `harness bench` run: its metadata and a CaseMeasurement per case."""
    created: str
    revision: dict                     # {"commit": sha, "dirty": bool}
    machine: dict
    toolchain: str
    options: dict                      # rounds, disable, replace, gpu, seed, cases
    chips: dict                        # chip name -> description
    launch_overhead_s: float
    cases: list = field(default_factory=list)      # CaseMeasurement
    against: dict | None = None        # harness/bench/against.py's A/B result
    seconds: float = 0.0
    schema: str = SCHEMA


# -- counters ------------------------------------------------------------------------------

def aggregate(stats: list[dict]) -> dict:
    """One program's counters: per-launch emulator stats summed (per-buffer byte counts
    summed over buffers too); threadgroup memory is the largest launch's."""
    total = {"launches": len(stats)}
    for key in SUMMED:
        total[key] = sum(int(s.get(key, 0)) for s in stats)
    for key in PER_BUFFER:
        total[key] = sum(int(v) for s in stats for v in s.get(key, {}).values())
    total["threadgroup_memory_bytes"] = max((int(s.get("threadgroup_memory_bytes", 0))
                                             for s in stats), default=0)
    return total


def _nbytes(values) -> int:
    import torch

    from oracles.bounds import Expected
    total = 0
    for v in values:
        if isinstance(v, Expected):          # the output as the kernel stores it
            total += v.value.numel() * v.dtype.itemsize
        elif isinstance(v, torch.Tensor):
            total += v.numel() * v.element_size()
    return total


def _oracle_facts(built) -> tuple[dict, bool, dict]:
    """From the oracle's outputs on the case's inputs: the minimum traffic (every input read
    once, every output written once; Python scalars, the args struct, left out), whether the
    kernel computes in half precision only (`_half_only`), and the power of the case's
    check (harness/check/power.py `summary`: the smallest scaling it rejects)."""
    from harness.check import power
    inputs = built.inputs(SEED)
    outputs = built.oracle(inputs)
    return ({"read": _nbytes(inputs), "written": _nbytes(outputs)},
            _half_only(built, outputs), power.summary(outputs))


def _half_only(built, outputs) -> bool:
    """Every output is float16/bfloat16 (an oracle's `Expected` dtypes, or a plain-tensor
    family's `tolerance_dtypes`): the roofline's half-rate arithmetic applies."""
    from oracles.bounds import Expected
    dtypes = [d for d in built.tolerance_dtypes if d] or \
        [str(o.dtype).replace("torch.", "") for o in outputs if isinstance(o, Expected)]
    return bool(dtypes) and all(d in ("float16", "bfloat16") for d in dtypes)


def modeled(counters: dict, minimum: dict, flops: int, chip_names, half=False,
            buffers=(), full_scale: float = 1.0) -> dict:
    """The roofline model (harness/bench/roofline.py) per chip from one program's counters (and
    its per-buffer traffic, `roofline.buffer_traffic`, for the cache term, which decides
    hits for footprints `full_scale` times those that ran: the real shape): the modeled
    seconds, each term, the occupancy, which throughput term binds, the ideal."""
    out = {}
    work = roofline.OnChipWork.of(counters)
    for chip in roofline.chips(chip_names):
        m = roofline.model(chip, device_bytes=counters["device_bytes_read"]
                           + counters["device_bytes_written"], flops=flops,
                           launches=counters["launches"],
                           minimum_bytes=minimum["read"] + minimum["written"], half=half,
                           work=work, buffers=buffers, footprint_scale=full_scale)
        out[chip.name] = {"seconds": m.seconds, "memory_seconds": m.memory_seconds,
                          "compute_seconds": m.compute_seconds,
                          "threadgroup_seconds": m.threadgroup_seconds,
                          "simd_seconds": m.simd_seconds,
                          "barrier_seconds": m.barrier_seconds,
                          "launch_seconds": m.launch_seconds, "occupancy": m.occupancy,
                          "groups_per_core": m.groups_per_core,
                          "occupancy_limit": m.occupancy_limit, "bound": m.bound,
                          "ideal_seconds": m.ideal_seconds, "efficiency": m.efficiency,
                          "dram_bytes": m.dram_bytes, "cached_bytes": m.cached_bytes,
                          "memory_level": m.memory_level, "spill_seconds": m.spill_seconds,
                          "spill_bytes": m.spill_bytes, "spill_level": m.spill_level,
                          "spilled_bytes_per_thread": m.spilled_bytes_per_thread}
    return out


# -- one case ------------------------------------------------------------------------------

def _family(name):
    from harness.gen import family as families
    try:
        return families.get(name)
    except KeyError:
        return None


def timing_summary(stats) -> dict:
    """pytest-benchmark's summary of the rounds (min, median, mean, stddev, rounds, iqr,
    outliers, ...) and the rounds themselves."""
    return {**stats.as_dict(), "data": list(stats.data)}


def over_goal(compile_summary: dict | None) -> bool:
    """Whether a case misses the compile-time goal: its first compile (`first_compile`)
    or, in a document without one, the median of its warm rounds (`timing_summary` of
    `time_compile`), per device kernel of the program, is over `COMPILE_GOAL_S`."""
    if not compile_summary:
        return False
    seconds = compile_summary.get("seconds", compile_summary.get("median"))
    return seconds is not None and seconds / compile_summary.get("kernels", 1) > COMPILE_GOAL_S


def _compile_once(fam, params: dict, disable=(), replace=None, stages=None):
    """One DSL -> MSL compile: the family's build (which parses the T.* kernel) and
    core.compile without any cache. Returns its wall seconds and the `(built, kernel)` it
    made; `stages` receives "parse" and the pipeline's per-pass and printer timings."""
    import core
    t0 = time.perf_counter()
    built = fam.build(dict(params))
    parsed = time.perf_counter()
    kernel = core.compile(built.func, out_idx=built.out_idx, disable=disable,
                          replace=replace, cache=False, timings=stages)
    msl = kernel.msl
    end = time.perf_counter()
    assert msl
    if stages is not None:
        stages["parse"] = parsed - t0
    return end - t0, (built, kernel)


def first_compile(fam, params: dict, disable=(), replace=None) -> dict | None:
    """The case's first compile in this process (call it before anything else compiles
    the case): {"seconds": wall seconds, "kernels": device kernels of the program,
    "stages": {"parse", pass names..., "print_msl"}}; None when the compile raises (the
    checked run reports why)."""
    return _first_compile(fam, params, disable, replace)[0]


def _first_compile(fam, params: dict, disable=(), replace=None):
    """`first_compile`'s summary and the `(built, kernel)` that compile made (None, None
    when it raised): the kernel `measure_case` runs, so a case compiles cold once."""
    stages = {}
    try:
        seconds, compiled = _compile_once(fam, params, disable, replace, stages)
    except Exception:  # noqa: BLE001 - run_case turns the same error into the case status
        return None, None
    return {"seconds": seconds, "kernels": len(compiled[1].specs),
            "stages": {"parse": stages.pop("parse"), **stages}}, compiled


def time_compile(fam, params: dict, rounds: int, disable=(), replace=None):
    """DSL -> MSL wall time: the family's build (which parses the T.* kernel) and
    core.compile without any cache; one warm-up round, then `rounds` rounds."""
    from pytest_benchmark.stats import Stats

    def once():
        return _compile_once(fam, params, disable, replace)[0]

    once()
    stats = Stats()
    for _ in range(rounds):
        stats.update(once())
    return stats


def mps_available() -> tuple[bool, str]:
    if platform.system() != "Darwin":
        return False, f"no Metal on {platform.system()}: GPU time is measured on macOS only"
    try:
        import torch
        if torch.backends.mps.is_available():
            return True, ""
        return False, "torch reports MPS unavailable"
    except ImportError:
        return False, "torch is not installed"


def time_gpu(fam, params: dict, rounds: int):
    """Measured GPU time on the MPS backend, per call of the program (all its launches).

    UNTESTED: written against PyTorch's documented API (torch.mps.Event); this project
    has not run it on a Mac yet. A call's launches are queued without waiting
    (core/runtime/mps.py); the events around the call time them on the GPU's stream."""
    import torch
    from pytest_benchmark.stats import Stats

    import core
    built = fam.build(dict(params))
    kernel = core.compile(built.func, out_idx=built.out_idx)
    args = [a.to("mps") if isinstance(a, torch.Tensor) else a for a in built.inputs(SEED)]
    for _ in range(3):
        kernel(*args, backend="mps")
    torch.mps.synchronize()
    stats = Stats()
    for _ in range(rounds):
        start, end = torch.mps.Event(enable_timing=True), torch.mps.Event(enable_timing=True)
        start.record()
        kernel(*args, backend="mps")
        end.record()
        end.synchronize()
        stats.update(start.elapsed_time(end) / 1e3)
    return stats


def hand_tuned_source(hand: HandTuned, params: dict) -> str:
    """The reference kernel's MSL as it runs: the element type (typedefs T and T4, and
    to_T4, a float4 converted to T4), the #defines (row length, threads, simdgroup width,
    the case's float constants), then the file."""
    from core.target import DTYPES, METAL
    msl = DTYPES[params["dtype"]].msl
    defines = {"N": params["N"], "THREADS": hand.threads, "SIMD_WIDTH": METAL.simd_width}
    defines.update({name.upper(): f"{float(params[name])!r}f" for name in hand.constants})
    head = ["#include <metal_stdlib>", "using namespace metal;", f"typedef {msl} T;",
            f"typedef {msl}4 T4;", f"inline T4 to_T4(float4 v) {{ return {msl}4(v); }}",
            *(f"#define {k} {v}" for k, v in defines.items())]
    return "\n".join(head) + "\n" + (REFERENCE_KERNELS / hand.file).read_text()


def generated_over_reference(generated, reference):
    """generated / reference; 1.0 when both are 0, None when only the reference is 0."""
    if not reference:
        return 1.0 if not generated else None
    return generated / reference


def measure_hand_tuned(case: BenchCase, built, generated: "CaseMeasurement",
                       chip_names, half: bool) -> dict:
    """Run the case's hand-written kernel (`BenchCase.hand_tuned`) on the emulator with
    every check, on the inputs the generated kernel ran on, compare with the same oracle
    and tolerance, and set generated / hand-tuned per counter and per modeled time.
    Never raises: the status says what happened."""
    import torch

    from core.errors import MetaltileError
    from core.runtime.emu import run_msl
    from harness.check.compare import assert_outputs_close

    hand = case.hand_tuned
    p = case.params
    out = {"file": hand.file, "kernel": hand.kernel, "threads": hand.threads,
           "grid": p["M"], "geometry": hand.geometry, "status": "pass", "message": "",
           "findings": [], "counters": None, "modeled": None, "ratios": {},
           "modeled_ratios": {}}
    if p["N"] % 4:
        out["status"] = "launch_error"
        out["message"] = (f"hand-tuned kernel '{hand.kernel}' of case '{case.name}' reads "
                          f"rows as 4-vectors: N={p['N']} is not a multiple of 4")
        return out
    inputs = built.inputs(SEED)
    expected = built.oracle(inputs)
    outputs = [torch.full(tuple(e.shape), float("nan"), dtype=e.dtype) for e in expected]
    try:
        res = run_msl(hand_tuned_source(hand, p), hand.kernel, grid=(p["M"], 1, 1),
                      threadgroup=(hand.threads, 1, 1), buffers=[*inputs, *outputs],
                      seed=SEED)
    except MetaltileError as err:
        out["status"], out["message"] = "launch_error", f"{type(err).__name__}: {err}"
        return out
    out["findings"] = [str(f) for f in res.findings[:20]]
    try:
        assert_outputs_close(outputs, expected, built, what="hand-tuned ")
    except AssertionError as err:
        out["status"], out["message"] = "mismatch", str(err)
    if res.findings and out["status"] == "pass":
        out["status"] = "finding"
        out["message"] = f"{len(res.findings)} finding(s); first: {res.findings[0]}"
    counters = aggregate([res.stats])
    source = hand_tuned_source(hand, p)
    counters["local_array_bytes"] = roofline.local_array_bytes(source, hand.kernel)
    counters["local_array_profile"] = roofline.local_array_profile(source, hand.kernel)
    out["counters"] = counters
    out["modeled"] = modeled(counters, generated.minimum, generated.flops, chip_names, half,
                             roofline.buffer_traffic([res.stats]), case.full_scale)
    set_reference_ratios(out, generated)
    return out


def set_reference_ratios(out: dict, generated: "CaseMeasurement") -> None:
    """generated / reference per counter (RATIO_COUNTERS) and per chip's modeled time, into
    a reference record (`out`: a hand-tuned kernel's or a peer's) that has its counters and
    modeled times."""
    if generated.counters:
        out["ratios"] = {k: generated_over_reference(generated.counters.get(k, 0),
                                                     out["counters"].get(k, 0))
                         for k in RATIO_COUNTERS}
    if generated.modeled:
        out["modeled_ratios"] = {chip: generated.modeled[chip]["seconds"] / m["seconds"]
                                 for chip, m in out["modeled"].items()}


def _measure_peers(case: BenchCase, built, out: CaseMeasurement, chip_names, peers,
                   half: bool) -> dict:
    """Each peer's record for the case (None: it has no kernel for the case's family):
    `peers` maps a name to harness/bench/peers/run.py's runner, which the caller passes
    (this module does not import the peers, which build on it)."""
    records = {name: run(case, built, out, chip_names, half)
               for name, run in dict(peers).items()}
    return {name: rec for name, rec in records.items() if rec is not None}


def measure_case(case: BenchCase, *, rounds: int = DEFAULT_ROUNDS, disable=(),
                 replace=None, chip_names=roofline.DEFAULT_CHIPS, gpu: bool = False,
                 gpu_rounds: int = 20, peers=()) -> CaseMeasurement:
    """Everything `harness bench` records for one case; `peers` (name -> runner,
    harness/bench/peers/run.py `runners`) also runs each peer's kernel for the case beside
    it. Never raises
    for a failing kernel: the status says what happened."""
    from harness.check.case import run_case

    out = CaseMeasurement.of(case)
    if case.reference and case.reference.chip not in chip_names:
        chip_names = (*chip_names, case.reference.chip)   # model the chip it was measured on
    try:
        fam = _family(case.family)
    except Exception as err:  # noqa: BLE001 - a broken family module fails its cases
        out.status = "internal_error"
        out.message = f"cannot load the kernel families: {type(err).__name__}: {err}"
        return out
    if fam is None:  # a registry entry naming no family is a bug of the registry
        out.status = "internal_error"
        out.message = f"bench case '{case.name}' names the unknown family '{case.family}'"
        return out
    if fam.skip_reason:
        out.message = fam.skip_reason
        return out
    # The timed first compile's kernel is the one the checked run runs; only when that
    # compile raised does run_case compile again, to turn the error into the status.
    out.first_compile, compiled = _first_compile(fam, case.params, disable, replace)
    result = run_case(case.family, case.params, seed=SEED, disable=disable, replace=replace,
                      cache=False, compiled=compiled)
    out.status, out.message, out.msl = result.status, result.message, result.msl
    out.findings = [str(f) for f in result.findings[:20]]
    try:
        if result.stats:
            out.counters = aggregate(result.stats)
            out.counters["local_array_bytes"] = roofline.local_array_bytes(result.msl)
            out.counters["local_array_profile"] = roofline.local_array_profile(result.msl)
            built = fam.build(dict(case.params))
            out.minimum, half, out.power = _oracle_facts(built)
            out.flops = int(built.flops)
            out.modeled = modeled(out.counters, out.minimum, out.flops, chip_names,
                                  half=half,
                                  buffers=roofline.buffer_traffic(result.stats),
                                  full_scale=case.full_scale)
            if case.hand_tuned:
                out.hand_tuned = measure_hand_tuned(case, built, out, chip_names, half)
            out.peers = _measure_peers(case, built, out, chip_names, peers, half) or None
        if result.status in ("pass", "mismatch", "finding", "timeout", "crash",
                             "launch_error"):
            out.compile = timing_summary(time_compile(fam, case.params, rounds, disable,
                                                      replace))
    except Exception as err:  # noqa: BLE001 - a case that breaks here fails, the run goes on
        out.status = "internal_error" if out.status == "pass" else out.status
        note = f"while measuring: {type(err).__name__}: {str(err).splitlines()[0]}"
        out.message = f"{out.message}\n{note}" if out.message else note
    if gpu and out.status == "pass":
        try:
            out.gpu = {"backend": "mps", **timing_summary(time_gpu(fam, case.params,
                                                                 gpu_rounds))}
        except Exception as err:  # noqa: BLE001 - untested path: report, do not crash
            out.gpu = {"backend": "mps", "error": f"{type(err).__name__}: {err}"}
    return out


# -- the whole run -------------------------------------------------------------------------

def git_revision(root: Path = ROOT) -> dict:
    def git(*args):
        try:
            return subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                                  text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain",
                                                                     "--untracked-files=no"))}


def machine_info() -> dict:
    import os
    return {"node": platform.node(), "system": platform.system(), "release": platform.release(),
            "machine": platform.machine(), "processor": platform.processor(),
            "cpus": os.cpu_count(), "python": platform.python_version()}


def toolchain_info() -> str:
    try:
        from core.runtime.emu.toolchain import find_toolchain
        return find_toolchain().describe().splitlines()[0]
    except Exception as err:  # noqa: BLE001 - reported, the checked runs will fail anyway
        return f"unavailable: {err}"


def measure_all(cases, *, rounds: int = DEFAULT_ROUNDS, disable=(), replace=None,
                chip_names=roofline.DEFAULT_CHIPS, gpu: bool = False,
                selection: str | None = None, progress=None, peers=()) -> BenchRun:
    """Measure `cases` in order; `progress(case, index, total)` is called before each.
    `selection` is the --cases filter they came from (None: the whole registry);
    `peers` the peers run beside them (name -> runner, harness/bench/peers/run.py)."""
    results = BenchRun(
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        revision=git_revision(), machine=machine_info(), toolchain=toolchain_info(),
        options={"rounds": rounds, "disable": list(disable), "replace": sorted(replace or {}),
                 "gpu": gpu, "seed": SEED, "cases": selection, "peers": sorted(dict(peers))},
        chips={n: roofline.CHIPS[n].describe() for n in chip_names},
        launch_overhead_s=roofline.LAUNCH_OVERHEAD_S)
    t0 = time.perf_counter()
    for i, case in enumerate(cases):
        if progress:
            progress(case, i, len(cases))
        results.cases.append(measure_case(case, rounds=rounds, disable=disable,
                                          replace=replace, chip_names=chip_names, gpu=gpu,
                                          peers=peers))
    results.seconds = time.perf_counter() - t0
    return results
