"""`harness bench`: latency tracking, and the gate every compiler change passes.

Input: the registry `CASES` below, one `BenchCase` = (kernel family, params) at a shape
taken from LLM inference (Qwen2.5-7B dense, Qwen3 MoE). Output: a results
document (JSON, schema below) that `harness.report` renders and `compare` checks against a
committed baseline (reports/baselines/emu.json).

Per case, `measure_case` records
  status     one checked run through `harness.diff.run_case` (the one way to run a case):
             oracle comparison and every emulator check; anything but "pass" fails the gate
  counters   the emulator's deterministic counters of that run, summed over the program's
             launches (`aggregate`): bytes and load/store operations on device and
             threadgroup memory, barriers, simd operations, ... The forward schedule, seed
             and inputs are fixed, so two runs of one compiler give identical counters.
  minimum    the traffic no kernel can avoid: every input read once, every output written
             once (the ratio counted/minimum shows re-reads and spills)
  modeled    `harness.roofline` time per chip from those counters
  compile    DSL -> MSL wall time (build the family's kernel, which parses the DSL, then
             `core.compile(..., cache=False)`), `rounds` rounds after one warm-up, summarized
             by pytest-benchmark's own `Stats`
  gpu        on macOS with MPS only: measured GPU time of the compiled kernel (UNTESTED:
             no Mac has run it; elsewhere it is skipped with the reason)

The gate (`compare`): counters gate exactly (any increase is a regression, a decrease an
improvement to note); modeled times gate past `MODELED_THRESHOLD` (they derive from the
counters, so this only absorbs float rounding); compile wall times are never compared with
a baseline recorded on another machine (SPEC 8: 26% noise between machines): they are
compared A/B within one run by `harness bench --against GITREF` (harness/against.py).

Shapes are scaled for the emulator, which runs ~10-50M simple thread operations per
second on this project's 2-core machines: row counts (tokens) are cut, row lengths and
reduction lengths stay real. Each case says what it represents and how it was scaled;
`full_scale` is the factor of work between the real shape and the one that ran, which the
report uses to extrapolate modeled time (linear in rows: exact for row-wise kernels).

Results schema ("metaltile-bench/1"): {schema, created, revision, machine, toolchain,
options, chips, cases: [{name, family, params, shape, scaling, full_scale, status, message,
findings, counters, minimum, modeled: {chip: {...}}, compile: {Stats fields, data}, gpu,
msl}], against: {...} | null}.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import json
import platform
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness import roofline

SCHEMA = "metaltile-bench/1"
BASELINE_SCHEMA = "metaltile-bench-baseline/1"
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BASELINE = ROOT / "reports" / "baselines" / "emu.json"
DEFAULT_OUT = ROOT / "reports" / "out"
SEED = 0
DEFAULT_ROUNDS = 5
MODELED_THRESHOLD = 0.01      # relative; modeled time derives from exact counters

# Counters summed over launches; all but the informational ones gate exactly.
SUMMED = ("groups", "threads", "simdgroups", "barriers", "simd_ops", "atomic_ops",
          "threadgroup_bytes_read", "threadgroup_bytes_written", "device_load_ops",
          "device_store_ops", "threadgroup_load_ops", "threadgroup_store_ops")
PER_BUFFER = ("device_bytes_read", "device_bytes_written", "device_unique_bytes_read",
              "device_unique_bytes_written")
GATED = ("launches", "device_bytes_read", "device_bytes_written", "device_load_ops",
         "device_store_ops", "threadgroup_bytes_read", "threadgroup_bytes_written",
         "threadgroup_load_ops", "threadgroup_store_ops", "threadgroup_memory_bytes",
         "barriers", "simd_ops", "atomic_ops")
INFORMATIONAL = ("groups", "threads", "simdgroups", "device_unique_bytes_read",
                 "device_unique_bytes_written")


@dataclass(frozen=True)
class BenchCase:
    name: str             # "family/what", unique; the key in baselines and reports
    family: str           # harness/gen family name
    params: dict          # that family's params
    shape: str            # the LLM shape it stands for
    scaling: str          # what was scaled down for the emulator, honestly
    full_scale: float = 1.0   # work at the real shape / work at this one


# Qwen2.5-7B: hidden 3584, intermediate 18944, vocab 152064, 28 heads x 128.
# Qwen3-30B-A3B (MoE): hidden 2048, expert intermediate 768. A 4096-token prefill is the
# real row count of the row-wise cases below.
PREFILL_TOKENS = 4096
CASES = (
    BenchCase("elementwise/residual-add-f16", "elementwise",
              {"M": 64, "N": 3584, "dtype": "float16", "out_dtype": "float16", "op": "add",
               "bM": 4, "bN": 256, "threads": 256},
              "residual add, Qwen2.5-7B hidden 3584, f16",
              f"rows 64 of {PREFILL_TOKENS} prefill tokens; row length real",
              PREFILL_TOKENS / 64),
    BenchCase("elementwise/gate-mul-bf16", "elementwise",
              {"M": 16, "N": 18944, "dtype": "bfloat16", "out_dtype": "bfloat16",
               "op": "mul", "bM": 2, "bN": 512, "threads": 256},
              "SwiGLU gate * up, Qwen2.5-7B intermediate 18944, bf16",
              f"rows 16 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 16),
    BenchCase("elementwise/silu-f32", "elementwise",
              {"M": 32, "N": 2048, "dtype": "float32", "out_dtype": "float32",
               "op": "sigmoid", "bM": 4, "bN": 256, "threads": 256},
              "activation (sigmoid), Qwen3-MoE hidden 2048, f32",
              f"rows 32 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 32),
    BenchCase("copy/k-transpose-f16", "copy",
              {"M": 256, "N": 128, "dtype": "float16", "mode": "transpose", "bM": 32,
               "bN": 32, "threads": 256},
              "K -> K^T for attention scores, head_dim 128, one KV head, f16",
              f"rows (tokens) 256 of {PREFILL_TOKENS}; head_dim real", PREFILL_TOKENS / 256),
    BenchCase("copy/hidden-shared-bf16", "copy",
              {"M": 32, "N": 3584, "dtype": "bfloat16", "mode": "shared", "bM": 4,
               "bN": 256, "threads": 256},
              "hidden-state tiles staged through threadgroup memory, Qwen2.5-7B 3584, bf16",
              f"rows 32 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 32),
    BenchCase("cast/f32-to-bf16", "cast",
              {"M": 32, "N": 3584, "src": "float32", "dst": "bfloat16", "via": "cast",
               "bM": 4, "bN": 256, "threads": 256},
              "f32 activations -> bf16 before a bf16 GEMM, Qwen2.5-7B hidden 3584",
              f"rows 32 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 32),
    BenchCase("cast/f16-to-f32-shared", "cast",
              {"M": 32, "N": 3584, "src": "float16", "dst": "float32", "via": "shared",
               "bM": 4, "bN": 256, "threads": 256},
              "f16 -> f32 widening through a threadgroup tile (T.copy converts), hidden 3584",
              f"rows 32 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 32),
    BenchCase("conditional/attn-mask-f32", "conditional",
              {"M": 16, "N": 4096, "dtype": "float32", "mode": "mask", "threshold": "scalar",
               "t": 0.0, "bM": 2, "bN": 512, "threads": 256},
              "attention-score mask select (bool mask), key length 4096, f32",
              f"rows (heads x queries) 16 of 28 x {PREFILL_TOKENS}; key length real",
              28 * PREFILL_TOKENS / 16),
    BenchCase("conditional/relu-f16", "conditional",
              {"M": 32, "N": 3584, "dtype": "float16", "mode": "relu", "threshold": "literal",
               "t": 0.0, "bM": 4, "bN": 256, "threads": 256},
              "ReLU-style select in a fragment, hidden 3584, f16",
              f"rows 32 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 32),
    BenchCase("multikernel/chain3-f16", "multikernel",
              {"N": 57344, "dtype": "float16", "kernels": 3, "read": "tile_reverse",
               "shift": 0, "b1": 256, "b2": 256, "b3": 256, "t1": 256, "t2": 128,
               "t3": 256},
              "three dependent launches over 16 x 3584 f16 elements (launch overhead and "
              "intermediate round trips through device memory)",
              f"16 of {PREFILL_TOKENS} rows of 3584", PREFILL_TOKENS / 16),
    BenchCase("scalars/dynamic-f16", "scalars",
              {"M": 32, "N": 3584, "dtype": "float16",
               "signature": ["int32", "A", "float32", "B", "bool"], "symbolic": "both",
               "bM": 4, "bN": 256, "threads": 256},
              "runtime scalars (args struct) and symbolic dims, as a decode step passes "
              "positions and scales; hidden 3584, f16",
              f"rows 32 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 32),
    BenchCase("reduce/row-sum-f16", "reduce",
              {"M": 64, "N": 3584, "dim": 1, "kind": "sum", "dtype": "float16",
               "out_dtype": "float32", "clear": True, "keepdim": False, "block": 2,
               "threads": 256},
              "row sums (norm statistics), Qwen2.5-7B hidden 3584, f16 -> f32",
              f"rows 64 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 64),
    BenchCase("reduce/row-sum-splitk-atomic-f32", "reduce",
              {"M": 64, "N": 3584, "dim": 1, "kind": "sum", "dtype": "float32",
               "out_dtype": "float32", "clear": True, "keepdim": False, "block": 2,
               "threads": 256, "combine": "atomic", "splits": 4},
              "row sums split 4 ways over the row, partials combined with T.atomic_add "
              "(split-K), Qwen2.5-7B hidden 3584, f32",
              f"rows 64 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 64),
    BenchCase("reduce/row-absmax-bf16", "reduce",
              {"M": 64, "N": 3584, "dim": 1, "kind": "absmax", "dtype": "bfloat16",
               "out_dtype": "float32", "clear": True, "keepdim": False, "block": 4,
               "threads": 128},
              "per-row absmax for fp8 (e4m3) activation scales, hidden 3584, bf16",
              f"rows 64 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 64),
    BenchCase("softmax/attn-scores-f16", "softmax",
              {"M": 64, "N": 4096, "dtype": "float16", "scale": 0.125, "bM": 2,
               "threads": 256},
              "attention-score softmax, key length 4096, scale 1/8, f16",
              f"rows (heads x queries) 64 of 28 x {PREFILL_TOKENS}; key length real",
              28 * PREFILL_TOKENS / 64),
    BenchCase("softmax/vocab-f32", "softmax",
              {"M": 2, "N": 152064, "dtype": "float32", "scale": 1.0, "bM": 1,
               "threads": 256},
              "decode logits softmax over the Qwen2.5 vocabulary (152064), batch 2, f32",
              "real shape", 1.0),
    BenchCase("rmsnorm/qwen7b-bf16", "rmsnorm",
              {"M": 64, "N": 3584, "dtype": "bfloat16", "eps": 1e-6, "weight": "shared",
               "bM": 2, "threads": 256},
              "RMSNorm, Qwen2.5-7B hidden 3584, weight staged in threadgroup memory, bf16",
              f"rows 64 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 64),
    BenchCase("rmsnorm/moe-f16", "rmsnorm",
              {"M": 64, "N": 2048, "dtype": "float16", "eps": 1e-6, "weight": "global",
               "bM": 2, "threads": 256},
              "RMSNorm, Qwen3-MoE hidden 2048, weight read from device memory, f16",
              f"rows 64 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 64),
    BenchCase("gemm/decode-f16", "gemm",
              {"M": 8, "N": 2048, "K": 3584, "bM": 16, "bN": 64, "bK": 32, "threads": 128,
               "dtype": "float16", "out_dtype": "float16", "trans_A": False, "trans_B": True,
               "num_stages": 2, "init": "clear"},
              "decode GEMV-like up-projection (8 tokens), Qwen2.5-7B 3584 -> 18944, "
              "weights N x K, f16",
              "N 2048 of 18944; tokens and K real", 18944 / 2048),
    BenchCase("gemm/moe-expert-bf16", "gemm",
              {"M": 8, "N": 768, "K": 2048, "bM": 16, "bN": 64, "bK": 32, "threads": 128,
               "dtype": "bfloat16", "out_dtype": "bfloat16", "trans_A": False,
               "trans_B": True, "num_stages": 2, "init": "clear"},
              "one MoE expert's gate projection for 8 routed tokens, Qwen3-MoE "
              "2048 -> 768, bf16",
              "real shape", 1.0),
    BenchCase("gemm/prefill-shared-acc-f16", "gemm",
              {"M": 64, "N": 128, "K": 3584, "bM": 32, "bN": 32, "bK": 32, "threads": 128,
               "dtype": "float16", "out_dtype": "float16", "trans_A": False,
               "trans_B": True, "num_stages": 0, "init": "clear", "accum": "shared",
               "pad": 4},
              "prefill projection with the accumulator in threadgroup memory (TileLang's "
              "Metal GEMM path, padded rows), Qwen2.5-7B 3584 -> 3584, f16",
              f"M 64 of {PREFILL_TOKENS} tokens, N 128 of 3584; K real",
              PREFILL_TOKENS / 64 * 3584 / 128),
    BenchCase("gemm/shared-acc-window-f16", "gemm",
              {"M": 64, "N": 64, "K": 512, "bM": 32, "bN": 32, "bK": 32, "threads": 128,
               "dtype": "float16", "out_dtype": "float32", "trans_A": False,
               "trans_B": True, "num_stages": 0, "init": "clear", "accum": "shared",
               "pad": 4, "epilogue": "window", "window": [2, 3, 5, 4]},
              "shared accumulator whose simdgroup-stored 8x8 tiles are read in part by other "
              "threads (a window of each tile): the barrier planner's tile footprints",
              "synthetic shape", 1.0),
    BenchCase("gemm/prefill-bf16", "gemm",
              {"M": 128, "N": 256, "K": 3584, "bM": 64, "bN": 64, "bK": 32, "threads": 256,
               "dtype": "bfloat16", "out_dtype": "bfloat16", "trans_A": False,
               "trans_B": True, "num_stages": 2, "init": "clear"},
              "prefill projection, Qwen2.5-7B 3584 -> 3584, bf16",
              f"M 128 of {PREFILL_TOKENS} tokens, N 256 of 3584; K real",
              PREFILL_TOKENS / 128 * 3584 / 256),
)


# -- selection -----------------------------------------------------------------------------

def select(patterns: str | None, cases=CASES) -> list[BenchCase]:
    """Cases whose name or family matches any comma-separated pattern (fnmatch, or a plain
    substring of the name); all cases when `patterns` is empty."""
    if not patterns:
        return list(cases)
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    chosen = [c for c in cases
              if any(fnmatch.fnmatchcase(c.name, p) or fnmatch.fnmatchcase(c.family, p)
                     or p in c.name for p in pats)]
    if not chosen:
        raise KeyError(f"no bench case matches {patterns!r}; cases: "
                       f"{', '.join(c.name for c in cases)}")
    return chosen


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
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def _minimum(built) -> dict:
    """Every input read once, every output written once (oracle outputs carry the output
    dtypes); Python scalars (the args struct) are left out."""
    inputs = built.inputs(SEED)
    outputs = built.oracle(inputs)
    return {"read": _nbytes(inputs), "written": _nbytes(outputs)}


def _half_only(built) -> bool:
    dtypes = [d for d in built.tolerance_dtypes if d]
    return bool(dtypes) and all(d in ("float16", "bfloat16") for d in dtypes)


def modeled(counters: dict, minimum: dict, flops: int, chip_names, half=False) -> dict:
    out = {}
    for chip in roofline.chips(chip_names):
        m = roofline.model(chip, device_bytes=counters["device_bytes_read"]
                           + counters["device_bytes_written"], flops=flops,
                           launches=counters["launches"],
                           minimum_bytes=minimum["read"] + minimum["written"], half=half)
        out[chip.name] = {"seconds": m.seconds, "memory_seconds": m.memory_seconds,
                          "compute_seconds": m.compute_seconds,
                          "launch_seconds": m.launch_seconds, "bound": m.bound,
                          "ideal_seconds": m.ideal_seconds, "efficiency": m.efficiency}
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


def time_compile(fam, params: dict, rounds: int, disable=(), replace=None):
    """DSL -> MSL wall time: the family's build (which parses the T.* kernel) and
    core.compile without any cache; one warm-up round, then `rounds` rounds."""
    import core
    from pytest_benchmark.stats import Stats

    def once():
        t0 = time.perf_counter()
        built = fam.build(dict(params))
        msl = core.compile(built.func, out_idx=built.out_idx, disable=disable,
                           replace=replace, cache=False).msl
        assert msl
        return time.perf_counter() - t0

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
    has not run it on a Mac yet. Each call synchronizes (core/runtime/mps.py), so the
    time includes one command-buffer round trip per launch."""
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


def measure_case(case: BenchCase, *, rounds: int = DEFAULT_ROUNDS, disable=(),
                 replace=None, chip_names=roofline.DEFAULT_CHIPS, gpu: bool = False,
                 gpu_rounds: int = 20) -> dict:
    """Everything `harness bench` records for one case (a JSON-able dict). Never raises
    for a failing kernel: the status says what happened."""
    from harness.diff import run_case

    out = {"name": case.name, "family": case.family, "params": dict(case.params),
           "shape": case.shape, "scaling": case.scaling, "full_scale": case.full_scale,
           "status": "skip", "message": "", "findings": [], "counters": None,
           "minimum": None, "flops": 0, "modeled": None, "compile": None, "gpu": None,
           "msl": ""}
    try:
        fam = _family(case.family)
    except Exception as err:  # noqa: BLE001 - a broken family module fails its cases
        out.update(status="internal_error",
                   message=f"cannot load the kernel families: {type(err).__name__}: {err}")
        return out
    if fam is None:  # a registry entry naming no family is a bug of the registry
        out.update(status="internal_error",
                   message=f"bench case '{case.name}' names the unknown family "
                           f"'{case.family}'")
        return out
    if fam.skip_reason:
        out["message"] = fam.skip_reason
        return out
    result = run_case(case.family, case.params, seed=SEED, disable=disable, replace=replace,
                      cache=False)
    out.update(status=result.status, message=result.message, msl=result.msl,
               findings=[str(f) for f in result.findings[:20]])
    try:
        if result.stats:
            out["counters"] = aggregate(result.stats)
            built = fam.build(dict(case.params))
            out["minimum"] = _minimum(built)
            out["flops"] = int(built.flops)
            out["modeled"] = modeled(out["counters"], out["minimum"], out["flops"],
                                     chip_names, half=_half_only(built))
        if result.status in ("pass", "mismatch", "finding", "timeout", "crash",
                             "launch_error"):
            out["compile"] = timing_summary(time_compile(fam, case.params, rounds, disable,
                                                         replace))
    except Exception as err:  # noqa: BLE001 - a case that breaks here fails, the run goes on
        out["status"] = "internal_error" if out["status"] == "pass" else out["status"]
        note = f"while measuring: {type(err).__name__}: {str(err).splitlines()[0]}"
        out["message"] = f"{out['message']}\n{note}" if out["message"] else note
    if gpu and out["status"] == "pass":
        try:
            out["gpu"] = {"backend": "mps", **timing_summary(time_gpu(fam, case.params,
                                                                    gpu_rounds))}
        except Exception as err:  # noqa: BLE001 - untested path: report, do not crash
            out["gpu"] = {"backend": "mps", "error": f"{type(err).__name__}: {err}"}
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


def run(cases, *, rounds: int = DEFAULT_ROUNDS, disable=(), replace=None,
        chip_names=roofline.DEFAULT_CHIPS, gpu: bool = False, selection: str | None = None,
        progress=None) -> dict:
    """Measure `cases` in order; `progress(case, index, total)` is called before each.
    `selection` is the --cases filter they came from (None: the whole registry)."""
    results = {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "revision": git_revision(), "machine": machine_info(), "toolchain": toolchain_info(),
        "options": {"rounds": rounds, "disable": list(disable),
                    "replace": sorted(replace or {}), "gpu": gpu, "seed": SEED,
                    "cases": selection},
        "chips": {n: roofline.CHIPS[n].describe() for n in chip_names},
        "launch_overhead_s": roofline.LAUNCH_OVERHEAD_S,
        "cases": [], "against": None,
    }
    t0 = time.perf_counter()
    for i, case in enumerate(cases):
        if progress:
            progress(case, i, len(cases))
        results["cases"].append(measure_case(case, rounds=rounds, disable=disable,
                                             replace=replace, chip_names=chip_names, gpu=gpu))
    results["seconds"] = time.perf_counter() - t0
    return results


# -- baseline and comparison ---------------------------------------------------------------

@dataclass(frozen=True)
class Change:
    """One difference between a run and its baseline (or within an A/B run)."""
    case: str
    metric: str
    kind: str          # failure | regression | improvement | new | missing | note
    baseline: object = None
    current: object = None
    detail: str = ""

    @property
    def gates(self) -> bool:
        return self.kind in ("failure", "regression")

    @property
    def relative(self) -> float | None:
        try:
            return float(self.current) / float(self.baseline) - 1.0
        except (TypeError, ValueError, ZeroDivisionError):
            return None


def baseline_entry(case: dict) -> dict:
    return {"family": case["family"], "params": case["params"], "counters": case["counters"],
            "minimum": case["minimum"], "flops": case["flops"],
            "modeled_seconds": {k: v["seconds"] for k, v in case["modeled"].items()}}


def update_baseline(results: dict, path: Path) -> tuple[dict, list[str]]:
    """Write the passing cases of `results` into the baseline at `path` (other cases of an
    existing baseline are kept, so `--cases` updates a subset). Returns the baseline and
    the names of cases left out because they did not pass."""
    if results["options"]["disable"] or results["options"]["replace"]:
        raise ValueError("a run with disabled or replaced passes cannot become the baseline")
    old = load_baseline(path) if path.exists() else None
    cases = dict(old["cases"]) if old else {}
    left_out = []
    for case in results["cases"]:
        if case["status"] == "pass":
            cases[case["name"]] = baseline_entry(case)
        elif case["status"] != "skip":
            left_out.append(case["name"])
    baseline = {
        "schema": BASELINE_SCHEMA,
        "about": "Deterministic emulator counters and modeled times per bench case, from "
                 "`harness bench --update-baseline`; compared exactly by `harness bench`. "
                 "No wall-clock times: those are compared A/B (`--against`).",
        "backend": "emu", "toolchain": results["toolchain"].split(":")[0],
        "launch_overhead_s": results["launch_overhead_s"],
        "chips": {**(old or {}).get("chips", {}), **results["chips"]},
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


def compare(results: dict, baseline: dict | None) -> list[Change]:
    """Every change of `results` against `baseline` that the report shows; the gate fails
    when any `Change.gates`."""
    changes: list[Change] = []
    if baseline is None:
        changes.append(Change("-", "baseline", "note", detail="no baseline: counters not "
                              "compared (harness bench --update-baseline records one)"))
    base_cases = (baseline or {}).get("cases", {})
    theirs, ours = _clang_major((baseline or {}).get("toolchain")), _clang_major(
        results.get("toolchain"))
    if baseline is not None and theirs != ours:
        changes.append(Change("-", "toolchain", "note", theirs, ours, "the emulator's clang "
                              "differs from the baseline's: counters of code clang optimizes "
                              "differently may move"))
    for case in results["cases"]:
        name, status = case["name"], case["status"]
        if status == "skip":
            if name in base_cases:
                changes.append(Change(name, "status", "note", "pass", "skip", case["message"]))
            continue
        if status != "pass":
            changes.append(Change(name, "status", "failure", None, status,
                                  case["message"].splitlines()[0] if case["message"] else ""))
        base = base_cases.get(name)
        if base is None:
            if status == "pass" and baseline is not None:
                changes.append(Change(name, "baseline", "new", detail="no baseline yet "
                                      "(harness bench --update-baseline records it)"))
            continue
        if base["params"] != case["params"]:
            changes.append(Change(name, "params", "note", detail="params changed since the "
                                  "baseline: counters not compared (update the baseline)"))
            continue
        if case["counters"] is None:
            continue
        for key in GATED:
            b, c = base["counters"].get(key), case["counters"].get(key)
            if b is None or c is None or b == c:
                continue
            changes.append(Change(name, key, "regression" if c > b else "improvement", b, c))
        for chip, m in (case["modeled"] or {}).items():
            b = base["modeled_seconds"].get(chip)
            if b is None:
                continue
            rel = m["seconds"] / b - 1.0 if b else 0.0
            if rel > MODELED_THRESHOLD:
                changes.append(Change(name, f"modeled {chip}", "regression", b, m["seconds"],
                                      f"> {MODELED_THRESHOLD:.0%} threshold"))
            elif rel < -MODELED_THRESHOLD:
                changes.append(Change(name, f"modeled {chip}", "improvement", b,
                                      m["seconds"]))
    ran = {c["name"] for c in results["cases"]}
    selected = results["options"].get("cases")
    for name in sorted(set(base_cases) - ran):
        if not selected:
            changes.append(Change(name, "case", "missing", detail="in the baseline, not in "
                                  "the registry any more"))
    changes.extend(_ab_changes(results.get("against")))
    return changes


def _clang_major(toolchain: str | None) -> str | None:
    found = re.search(r"clang (\d+)", toolchain or "")
    return f"clang {found.group(1)}" if found else toolchain


def _ab_changes(against: dict | None) -> list[Change]:
    if not against:
        return []
    if against.get("error"):
        return [Change("-", f"compile A/B vs {against.get('ref')}", "failure",
                       detail=against["error"])]
    out = []
    for row in against.get("cases", []):
        if row.get("error"):
            out.append(Change(row["name"], "compile A/B", "note", detail=row["error"]))
        elif row["verdict"] in ("regression", "improvement"):
            out.append(Change(row["name"], f"compile A/B vs {against['ref']}", row["verdict"],
                              row["ref_median"], row["this_median"],
                              f"{row['change']:+.1%} (threshold ±{row['threshold']:.1%})"))
    return out


def gate_failed(changes: list[Change]) -> bool:
    return any(c.gates for c in changes)


# -- files ---------------------------------------------------------------------------------

def write_results(results: dict, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "bench.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    return path


def load_results(path: Path) -> dict:
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a bench result (schema {data.get('schema')!r}, "
                         f"expected {SCHEMA!r})")
    return data


def write_pytest_benchmark_json(results: dict, out_dir: Path) -> Path:
    """The compile timings (and GPU timings, on a Mac) in pytest-benchmark's JSON format,
    so `pytest-benchmark compare` and its tooling read them."""
    from pytest_benchmark import __version__

    benchmarks = []
    for case in results["cases"]:
        for group, key in (("compile: DSL -> MSL, no cache", "compile"),
                           ("gpu: MPS, per call", "gpu")):
            timing = case.get(key)
            if not timing or "data" not in timing:
                continue
            stats = {k: v for k, v in timing.items() if k not in ("data", "backend")}
            stats["iterations"] = 1                      # one call per round
            benchmarks.append({
                "group": group, "name": f"{key}[{case['name']}]",
                "fullname": f"harness/bench.py::{key}[{case['name']}]",
                "params": {"case": case["name"]}, "param": case["name"],
                "extra_info": {"family": case["family"], "params": case["params"],
                               "shape": case["shape"]},
                "options": {"disable_gc": False, "timer": "perf_counter",
                            "min_rounds": results["options"]["rounds"], "max_time": 0,
                            "min_time": 0, "warmup": True},
                "stats": {**stats, "data": timing["data"]},
            })
    doc = {"machine_info": results["machine"],
           "commit_info": {"id": results["revision"]["commit"],
                           "dirty": results["revision"]["dirty"], "project": "metaltile"},
           "benchmarks": benchmarks, "datetime": results["created"], "version": __version__}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "bench.pytest-benchmark.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path
