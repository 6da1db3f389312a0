"""`core.compile` / `core.jit` and `core.Kernel`: from a T.* prim_func to a callable.

    kernel = core.compile(func, target="metal", out_idx=[-1])
    kernel.msl        the MSL library (all kernels of the program, declarations once)
    kernel.specs      KernelSpec per device kernel (buffers, args struct, threadgroup)
    kernel.launches   the launch plan (core.ir.program.LaunchSite, in order)
    C = kernel(A, B, n, alpha)          inputs in the user's order; outputs returned
    kernel.last_run.findings            emulator findings of the last call ([] = clean)

Compile results are cached in memory and on disk (`kernels/` under core.cache's root,
~/.cache/metaltile by default), keyed by the structural hash of the parsed PrimFunc (its
whole content, including the name), the compile options and a fingerprint of the
compiler's source, never by name alone.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from dataclasses import dataclass
from dataclasses import replace as replace_fields
from pathlib import Path

import tvm_ffi

from core import options as compile_options
from core.cache import cache_root
from core.codegen.msl import print_program
from core.errors import LaunchError, MetaltileError
from core.ir.program import evaluate
from core.runtime import args as args_struct
from core.runtime.backends import DEVICES, RunRecord, check_backend, default_backend, launch
from core.runtime.binding import bind, output_indices
from core.transform import pipeline

CACHE_VERSION = "1"
ALL_CHECKS = ("races", "uninit", "bounds")


class KernelFindingsError(MetaltileError):
    """The emulator's checker found races, uninitialized reads or out-of-bounds accesses."""


@dataclass(frozen=True)
class CompiledProgram:
    """Everything needed to run a program; plain data (picklable, no TVM objects)."""
    name: str
    msl: str
    specs: dict               # kernel name -> KernelSpec
    params: tuple
    symbols: tuple
    launches: tuple


class Kernel:
    """A compiled program; call it with torch tensors and Python scalars."""

    def __init__(self, compiled: CompiledProgram, out_idx=None, *, checks=ALL_CHECKS,
                 raise_on_findings=False):
        self.compiled = compiled
        self.out_idx = out_idx
        self.checks = tuple(checks)
        self.raise_on_findings = raise_on_findings
        self.last_run: RunRecord | None = None
        output_indices(compiled, out_idx)  # validates out_idx now, not at the first call

    @property
    def name(self) -> str:
        return self.compiled.name

    @property
    def msl(self) -> str:
        return self.compiled.msl

    @property
    def specs(self) -> list:
        return [self.compiled.specs[k] for k in self.compiled.specs]

    @property
    def launches(self) -> tuple:
        return self.compiled.launches

    def get_kernel_source(self) -> str:  # TileLang's name
        return self.msl

    kernel_source = property(get_kernel_source)  # TileLang's name

    def __call__(self, *args, backend=None, checks=None, schedule="forward", seed=0):
        backend = check_backend(backend or default_backend(), self.name)
        checks = self.checks if checks is None else tuple(checks)
        b = bind(self.compiled, args, self.out_idx, DEVICES[backend])
        record = RunRecord(backend)
        plans = []
        for site in self.compiled.launches:
            spec = self.compiled.specs[site.kernel]
            grid = tuple(int(evaluate(g, b.env)) for g in site.grid)
            if min(grid) <= 0:
                continue  # an empty grid launches nothing (e.g. a zero-sized dim)
            buffers = [b.tensors[n] for n in site.buffers]
            for t, bs in zip(buffers, spec.buffers):
                if bs.align and (t.data_ptr() % bs.align):
                    raise LaunchError(f"tensor data is not {bs.align}-byte aligned, which "
                                      "the kernel's vector accesses need", kernel=site.kernel,
                                      construct=f"buffer '{bs.name}'")
            if spec.args is not None:
                values = {s.name: evaluate(s.value, b.env) for s in site.scalars}
                buffers.append(args_struct.pack(spec.args, _by_field(spec, values),
                                                kernel=site.kernel))
            plans.append((site, grid, buffers))
        # On "mps" the launches are queued, not waited on (core/runtime/mps.py keeps their
        # buffers alive); a host step that reads a device value calls backends.synchronize.
        for site, grid, buffers in plans:
            launch(backend, self.msl, site, grid, buffers, checks=checks, schedule=schedule,
                   seed=seed, record=record)
        self.last_run = record
        if self.raise_on_findings and record.findings:
            kinds = sorted({f.kind for f in record.findings})
            raise KernelFindingsError(f"the emulator reported {len(record.findings)} "
                                      f"finding(s): {', '.join(kinds)}; first: "
                                      f"{record.findings[0]}", kernel=self.name)
        if not b.outputs:
            return None
        return b.outputs[0] if len(b.outputs) == 1 else b.outputs


def _by_field(spec, values):
    """Scalar values keyed by args-struct field name (same order as the site's scalars)."""
    return {f.name: v for f, v in zip(spec.args.fields, values.values())}


# ---- compile + cache -----------------------------------------------------------------------

class _Cache:
    def __init__(self):
        self.memory = {}

    @staticmethod
    def directory() -> Path:
        return cache_root() / "kernels"

    def get(self, key):
        hit = self.memory.get(key)
        if hit is not None:
            return hit
        path = self.directory() / f"{key}.pkl"
        if path.exists():
            try:
                hit = pickle.loads(path.read_bytes())
            except Exception:  # noqa: BLE001 - a corrupt entry is recompiled
                return None
            self.memory[key] = hit
        return hit

    def put(self, key, value):
        self.memory[key] = value
        try:
            d = self.directory()
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / f"{key}.{os.getpid()}.tmp"
            tmp.write_bytes(pickle.dumps(value))
            tmp.replace(d / f"{key}.pkl")
        except OSError:
            pass  # the disk cache is an optimization


CACHE = _Cache()


def _compiler_fingerprint() -> str:
    """Hash of the compiler's own source, so a changed pass never reuses stale entries."""
    root = Path(__file__).parent
    digest = hashlib.sha256(CACHE_VERSION.encode())
    for sub in ("language", "ir", "transform", "codegen"):
        for path in sorted((root / sub).glob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


COMPILER_FINGERPRINT = _compiler_fingerprint()


def cache_key(func, options: tuple) -> str:
    h = tvm_ffi.structural_hash(func, map_free_vars=True)
    text = repr((COMPILER_FINGERPRINT, h, str(func.attrs["global_symbol"]), options))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def lower(func, *, disable=(), replace=None) -> CompiledProgram:
    """Run the pipeline and the printer (no cache)."""
    program = pipeline.run(func, disable=disable, replace=replace)
    msl, specs = print_program(program)
    for site in program.launches:
        specs[site.kernel] = replace_fields(specs[site.kernel], grid=site.grid)
    return CompiledProgram(program.name, msl, specs, program.params, program.symbols,
                           program.launches)


def compile(func, target="metal", out_idx=None, *, disable=(), replace=None, cache=True,
            checks=ALL_CHECKS, raise_on_findings=False, pass_configs=None,
            **tilelang_options):  # noqa: A001
    """Compile a T.prim_func into a `Kernel`. `pass_configs` and TileLang's other
    keywords are checked by core/options.py: unknown or unsupported ones are errors."""
    if str(target).split()[0] not in ("metal", "auto"):
        raise MetaltileError(f"target {target!r} is not supported; use 'metal'",
                             construct="target")
    compile_options.check_keywords(tilelang_options)
    disable, checks = compile_options.resolve(pass_configs, disable, checks)
    use_cache = cache and not replace
    key = cache_key(func, (tuple(disable),)) if use_cache else None
    compiled = CACHE.get(key) if use_cache else None
    if compiled is None:
        compiled = lower(func, disable=disable, replace=replace)
        if use_cache:
            CACHE.put(key, compiled)
    return Kernel(compiled, out_idx, checks=checks, raise_on_findings=raise_on_findings)


def jit(func=None, *, out_idx=None, target="metal", **options):
    """Decorator: `@core.jit(out_idx=[-1])` on a factory returning a prim_func (compiled
    once per argument signature), or on a prim_func itself."""

    def decorate(f):
        from tvm.tirx import PrimFunc
        if isinstance(f, PrimFunc):
            return compile(f, target, out_idx, **options)
        kernels = {}

        def wrapper(*args, **kwargs):
            key = (args, tuple(sorted(kwargs.items())))
            k = kernels.get(key)
            if k is None:
                k = compile(f(*args, **kwargs), target, out_idx, **options)
                kernels[key] = k
            return k

        wrapper.__wrapped__ = f
        wrapper.__name__ = getattr(f, "__name__", "kernel")
        return wrapper

    return decorate(func) if func is not None else decorate
