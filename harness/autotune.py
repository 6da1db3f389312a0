"""`autotune`: TileLang's `tilelang.autotune` for metaltile — pick the fastest of several
configurations of a `@core.jit` prim_func factory.

    from harness.autotune import autotune

    @autotune(configs=[{"block_M": 32, "block_N": 32}, {"block_M": 64, "block_N": 32}])
    @core.jit(out_idx=[-1])
    def matmul(M, N, K, block_M=64, block_N=64, block_K=32): ...   # returns a T.prim_func

    kernel = matmul(512, 512, 256)      # the winner, compiled; kernel.config, kernel.latency
    print(matmul.last_result.table())   # every config, its time, the winner's margin

For each configuration (a dict of the factory's keywords; `configs` may also be a callable
taking the call's arguments) the factory is compiled with the call's arguments plus the
configuration, and run once on inputs from `supply_prog(params)` (else random tensors of
the declared shapes, harness.gen.inputs); with `ref_prog`, its outputs must match
`ref_prog(*inputs)` (harness.check.compare) or the configuration is dropped. A
configuration that fails to compile or run is dropped with its error in the table.

How a configuration is timed (`timing`):
  "model"  (the default off macOS) the emulator runs it once with every check on (a
           finding drops it) and the roofline model of harness/bench/roofline.py turns the
           run's counters into seconds on `chip` (default M2). Arithmetic the counters do
           not see (scalar ALU work) is left out unless `flops=` is given: the model ranks
           by device traffic, threadgroup and simd work, barriers and occupancy.
  "gpu"    (the default on macOS with MPS) `warmup` then `rep` timed launches on the GPU,
           the median. Not tested here: this project's machines have no Apple GPU.

Results are cached: in memory per (factory, arguments, configurations, timing, chip), and
on disk (core.cache's root, `autotune/`, one JSON file per key, keyed also by the
compiler's fingerprint) holding every configuration's time and the winner, so a later
process compiles only the winner.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from dataclasses import asdict, dataclass, field

from core.cache import cache_root
from core.errors import MetaltileError
from core.jit import COMPILER_FINGERPRINT, JITFactory
from core.runtime.backends import default_backend
from harness.bench import roofline
from harness.bench.measure import aggregate
from harness.gen.inputs import random_tensor

TIMINGS = ("model", "gpu")


@dataclass
class Trial:
    """One configuration: its keywords, its time in seconds (None: dropped) and why."""
    config: dict
    seconds: float | None
    note: str = ""


@dataclass
class AutotuneResult:
    """Every trial of one tuned call and the winner (the fastest kept trial)."""
    name: str
    timing: str
    chip: str
    trials: list = field(default_factory=list)
    from_cache: bool = False

    @property
    def best(self) -> Trial:
        kept = [t for t in self.trials if t.seconds is not None]
        if not kept:
            raise MetaltileError("no configuration compiled, ran and passed its checks: " +
                                 "; ".join(f"{t.config}: {t.note}" for t in self.trials),
                                 kernel=self.name, construct="autotune")
        return min(kept, key=lambda t: t.seconds)

    def margin(self) -> float | None:
        """How many times faster the winner is than the runner-up (None with one)."""
        kept = sorted(t.seconds for t in self.trials if t.seconds is not None)
        return kept[1] / kept[0] if len(kept) > 1 and kept[0] > 0 else None

    def table(self) -> str:
        best = self.best
        unit = f"modeled on {self.chip}" if self.timing == "model" else "GPU, median"
        lines = [f"autotune {self.name}: {len(self.trials)} configs, {unit}"
                 + (" (from the cache)" if self.from_cache else "")]
        for t in self.trials:
            mark = "*" if t is best else " "
            time_text = f"{t.seconds * 1e6:10.2f} us" if t.seconds is not None else \
                f"{'dropped':>13}"
            lines.append(f" {mark} {time_text}  {t.config}" + (f"  ({t.note})" if t.note
                                                                else ""))
        m = self.margin()
        lines.append(f"winner {best.config}" + (f", {m:.2f}x faster than the next" if m
                                                 else ""))
        return "\n".join(lines)


def _default_timing() -> str:
    return "gpu" if default_backend() == "mps" else "model"


def _inputs(kernel, supply_prog):
    """The kernel's inputs (not its out_idx outputs): supply_prog's, or random tensors."""
    from core.runtime.binding import output_indices
    outs = set(output_indices(kernel.compiled, kernel.out_idx))
    params = [p for i, p in enumerate(kernel.compiled.params) if i not in outs]
    if supply_prog is not None:
        return list(supply_prog(params))
    values = []
    for i, p in enumerate(params):
        if p.kind != "buffer":
            raise MetaltileError(f"scalar parameter '{p.name}' needs a value: pass "
                                 "supply_prog=lambda params: [...]", kernel=kernel.name,
                                 construct="autotune")
        shape = []
        for d in p.shape:
            if not (isinstance(d, tuple) and len(d) == 2 and d[0] == "const"):
                raise MetaltileError(f"parameter '{p.name}' has a symbolic shape; pass "
                                     "supply_prog=lambda params: [...]", kernel=kernel.name,
                                     construct="autotune")
            shape.append(int(d[1]))
        values.append(random_tensor(tuple(shape), p.dtype, 1000 + i))
    return values


def _modeled_seconds(kernel, inputs, chip, flops) -> tuple:
    out = kernel(*inputs, backend="emu")
    findings = kernel.last_run.findings
    if findings:
        return None, f"emulator: {findings[0]}", out
    counters = aggregate(kernel.last_run.stats)
    work = roofline.OnChipWork.of(counters)
    (the_chip,) = roofline.chips((chip,))
    m = roofline.model(the_chip, device_bytes=counters["device_bytes_read"]
                       + counters["device_bytes_written"], flops=flops,
                       launches=counters["launches"], minimum_bytes=0, work=work,
                       buffers=roofline.buffer_traffic(kernel.last_run.stats))
    return m.seconds, f"{m.bound}-bound", out


def _gpu_seconds(kernel, inputs, warmup, rep) -> tuple:
    import torch
    moved = [x.to("mps") if isinstance(x, torch.Tensor) else x for x in inputs]
    out = None
    for _ in range(warmup):
        out = kernel(*moved, backend="mps")
    torch.mps.synchronize()
    times = []
    for _ in range(rep):
        start = time.perf_counter()
        out = kernel(*moved, backend="mps")
        torch.mps.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), "", out


def _check(out, ref):
    from harness.check.compare import assert_close
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    refs = list(ref) if isinstance(ref, (list, tuple)) else [ref]
    if len(outs) != len(refs):
        raise AssertionError(f"{len(outs)} outputs, ref_prog gives {len(refs)}")
    for o, r in zip(outs, refs):
        assert_close(o, r, o.dtype, op_class="accumulation")


class Autotuner:
    """A tuned `@core.jit` prim_func factory: calling it tunes (or reads the cache) and
    returns the winner's compiled kernel."""

    def __init__(self, factory, configs, *, timing=None, chip="M2", warmup=3, rep=10,
                 supply_prog=None, ref_prog=None, skip_check=False, flops=0, cache=True,
                 **tilelang_options):
        if not isinstance(factory, JITFactory):
            raise MetaltileError("autotune takes a @core.jit function that returns a "
                                 "T.prim_func (stack @autotune above @core.jit)",
                                 kernel=getattr(factory, "__name__", None),
                                 construct="autotune")
        timing = timing or _default_timing()
        if timing not in TIMINGS:
            raise MetaltileError(f"timing={timing!r}; allowed: {', '.join(TIMINGS)}",
                                 kernel=factory.__name__, construct="autotune")
        unknown = sorted(k for k in tilelang_options if k not in ("timeout", "supply_type",
                                                                   "rtol", "atol",
                                                                   "max_mismatched_ratio",
                                                                   "cache_input_tensors"))
        if unknown:
            raise MetaltileError(f"unknown keyword(s) {unknown}", kernel=factory.__name__,
                                 construct="autotune")
        self.factory, self.configs, self.timing, self.chip = factory, configs, timing, chip
        self.warmup, self.rep, self.flops = warmup, rep, flops
        self.supply_prog, self.ref_prog, self.skip_check = supply_prog, ref_prog, skip_check
        self.cache = cache
        self.__name__ = factory.__name__
        self._memory = {}
        self.last_result: AutotuneResult | None = None

    def _configs(self, args, kwargs) -> list:
        configs = self.configs(*args, **kwargs) if callable(self.configs) else self.configs
        configs = [dict(c) for c in configs]
        if not configs:
            raise MetaltileError("configs is empty", kernel=self.__name__,
                                 construct="autotune")
        return configs

    def _key(self, args, kwargs, configs) -> str:
        import inspect
        try:
            source = inspect.getsource(self.factory.fn)
        except (OSError, TypeError):
            source = self.__name__
        text = repr((COMPILER_FINGERPRINT, source, args, sorted(kwargs.items()), configs,
                     self.timing, self.chip, self.flops))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def _path(self, key):
        return cache_root() / "autotune" / f"{key}.json"

    def __call__(self, *args, **kwargs):
        configs = self._configs(args, kwargs)
        key = self._key(args, kwargs, configs)
        result = self._memory.get(key) or (self._load(key) if self.cache else None)
        if result is None:
            result = self.tune(args, kwargs, configs)
            if self.cache:
                self._store(key, result)
        self._memory[key] = result
        self.last_result = result
        best = result.best
        kernel = self.factory.compile(*args, **{**kwargs, **best.config})
        kernel.config, kernel.latency, kernel.autotune = dict(best.config), best.seconds, result
        return kernel

    def tune(self, args, kwargs, configs) -> AutotuneResult:
        result = AutotuneResult(self.__name__, self.timing, self.chip)
        for config in configs:
            try:
                kernel = self.factory.compile(*args, **{**kwargs, **config})
                inputs = _inputs(kernel, self.supply_prog)
                if self.timing == "model":
                    seconds, note, out = _modeled_seconds(kernel, inputs, self.chip, self.flops)
                else:
                    seconds, note, out = _gpu_seconds(kernel, inputs, self.warmup, self.rep)
                if seconds is not None and self.ref_prog is not None and not self.skip_check:
                    _check(out, self.ref_prog(*inputs))
            except (MetaltileError, AssertionError) as exc:
                seconds, note = None, f"{type(exc).__name__}: {exc}"
            result.trials.append(Trial(config, seconds, note))
        return result

    def _load(self, key) -> AutotuneResult | None:
        path = self._path(key)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        trials = [Trial(t["config"], t["seconds"], t.get("note", "")) for t in data["trials"]]
        return AutotuneResult(data["name"], data["timing"], data["chip"], trials,
                              from_cache=True)

    def _store(self, key, result):
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"name": result.name, "timing": result.timing, "chip": result.chip,
                "trials": [asdict(t) for t in result.trials]}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, default=str))
        tmp.replace(path)


def autotune(func=None, *, configs, **options):
    """`@autotune(configs=[...])` above `@core.jit(...)`: see the module docstring."""
    if func is not None:
        return Autotuner(func, configs, **options)
    return lambda f: Autotuner(f, configs, **options)
