"""`core.compile` / `core.jit` / `core.par_compile` and `core.Kernel`: from a T.* prim_func,
or a function in TileLang's eager style (an `EagerFunction`,
core/language/eager_function.py, traced by core/language/eager.py), to a callable.

    kernel = core.compile(func, target="metal", out_idx=[-1])
    kernel.msl        the MSL library (all kernels of the program, declarations once)
    kernel.specs      KernelSpec per device kernel (buffers, args struct, threadgroup)
    kernel.launches   the launch plan (core.ir.program.LaunchSite, in order)
    C = kernel(A, B, n, alpha)          inputs in the user's order; outputs returned
    kernel.last_run.findings            emulator findings of the last call ([] = clean)

    @core.jit                           eager style: traced + compiled per specialization
    def f(A, block_M: int): ...         (T.const dims, T.empty outputs and workspaces)
    f(a, block_M=64); f.compile(M=..., block_M=64) or f.compile(a, 64); f.get_tir(...);
    core.par_compile(f, cfgs)
    @core.jit(out_idx=[-1])             a factory returning a prim_func (JITFactory):
    def g(M, N): ...                    g(M, N) / g.compile(...) the kernel, g.get_tir(...)

Every `@core.jit` option is checked at decoration and honoured (pass_configs, verbose,
debug_root_path, execution_backend) or refused with an error naming the function.

A call runs the program's host steps (core.ir.program.launch_sequence): each launch with
its own grid and scalars, all checked before the first runs; workspaces are allocated
by the binding and stay referenced until the call's launches have completed.

Compile results are cached in memory and on disk (`kernels/` under core.cache's root,
~/.cache/metaltile by default), keyed by the structural hash of the parsed PrimFunc (its
whole content, including the name), the compile options and a fingerprint of the
compiler's source, never by name alone.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import platform
import sys
import time
import types
from dataclasses import dataclass
from dataclasses import replace as replace_fields
from pathlib import Path

import tvm_ffi

from core import options as compile_options
from core.cache import cache_root
from core.codegen.msl import print_program
from core.errors import LaunchError, MetaltileError
from core.ir.capacity import resolve_declared
from core.ir.kernel import func_name
from core.ir.program import evaluate, launch_sequence
from core.language import eager
from core.language.eager_function import EagerFunction, importable
from core.runtime import args as args_struct
from core.runtime.backends import (DEVICES, RunRecord, check_backend, default_backend,
                                   launch)
from core.runtime.binding import bind, output_indices, reported_view
from core.transform import pipeline

CACHE_VERSION = "3"
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
    launches: tuple           # every call site once, in program order
    host: tuple = ()          # the host steps that launch them (core.ir.program)
    workspaces: tuple = ()    # tensor params the runtime allocates and does not return
    capacity: tuple = ()      # (tensor name, capacity per dim) for data-dependent sizes
    lengths: tuple = ()       # (tensor name, tensor reporting its length per capacity dim)
    input_capacity: tuple = ()  # (input tensor name, capacity dim indices): not checked
    decisions: tuple = ()     # "point=choice": the lowering decisions (core/ir/decisions.py)


class Kernel:
    """A compiled program; call it with torch tensors and Python scalars."""

    # TileLang's name for what runs it (core.compile's `execution_backend`, core/options.py):
    # "torch" or "tvm_ffi", both metaltile's backend here (emulator, or MPS on macOS)
    execution_backend = "torch"

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

    @property
    def decisions(self) -> tuple:
        """The lowering decisions the compile took, "point=choice" sorted
        (core/ir/decisions.py: the points and their choices)."""
        return self.compiled.decisions

    def get_kernel_source(self) -> str:  # TileLang's name
        return self.msl

    kernel_source = property(get_kernel_source)  # TileLang's name

    def __call__(self, *args, backend=None, checks=None, schedule="forward", seed=0):
        backend = check_backend(backend or default_backend(), self.name)
        checks = self.checks if checks is None else tuple(checks)
        b = bind(self.compiled, args, self.out_idx, DEVICES[backend])
        record = RunRecord(backend)
        plans = []
        for site, env in launch_sequence(self.compiled.host, dict(b.env)):
            spec = self.compiled.specs[site.kernel]
            grid = tuple(int(evaluate(g, env)) for g in site.grid)
            if min(grid) <= 0:
                continue  # an empty grid launches nothing (e.g. a zero-sized dim)
            buffers = [b.tensors[n] for n in site.buffers]
            for t, bs in zip(buffers, spec.buffers):
                if bs.align and (t.data_ptr() % bs.align):
                    raise LaunchError(f"tensor data is not {bs.align}-byte aligned, which "
                                      "the kernel's vector accesses need", kernel=site.kernel,
                                      construct=f"buffer '{bs.name}'")
            if spec.args is not None:
                values = [evaluate(s.value, env) for s in site.scalars]
                buffers.append(args_struct.pack(spec.args, _by_field(spec, values),
                                                kernel=site.kernel))
            plans.append((site, grid, buffers))
        # Every launch of the call is planned (and checked) before the first one runs. On
        # "mps" the launches are queued, not waited on (core/runtime/mps.py keeps each
        # launch's buffers, workspaces and packed scalars included, alive until it has
        # completed); a host step that reads a device value calls backends.synchronize.
        for site, grid, buffers in plans:
            launch(backend, self.msl, site, grid, buffers, checks=checks, schedule=schedule,
                   seed=seed, record=record, declared=tuple(self.compiled.specs.values()))
        self.last_run = record
        if self.raise_on_findings and record.findings:
            kinds = sorted({f.kind for f in record.findings})
            raise KernelFindingsError(f"the emulator reported {len(record.findings)} "
                                      f"finding(s): {', '.join(kinds)}; first: "
                                      f"{record.findings[0]}", kernel=self.name)
        outputs = [reported_view(self.compiled, b, t) for t in b.outputs]
        if not outputs:
            return None
        return outputs[0] if len(outputs) == 1 else outputs


def _by_field(spec, values):
    """Scalar values keyed by args-struct field name (same order as the site's scalars;
    by position, since two scalars may share a name the printer tells apart)."""
    return {f.name: v for f, v in zip(spec.args.fields, values)}


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


def clear_memory_cache() -> None:
    """Forget the compiled programs kept in memory; the on-disk cache stays (the next
    compile of a function seen before reads it from there)."""
    CACHE.memory.clear()


def _compiler_fingerprint() -> str:
    """Hash of the compiler's own source, so a changed pass never reuses stale entries: the
    DSL, the IR, the passes, the printer and core/'s own modules (the target's facts, the
    options) that they read."""
    root = Path(__file__).parent
    digest = hashlib.sha256(CACHE_VERSION.encode())
    for path in [*sorted(root.glob("*.py")),
                 *(p for sub in ("language", "ir", "transform", "codegen")
                   for p in sorted((root / sub).glob("*.py")))]:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


COMPILER_FINGERPRINT = _compiler_fingerprint()


def cache_key(func, options: tuple) -> str:
    h = tvm_ffi.structural_hash(func, map_free_vars=True)
    text = repr((COMPILER_FINGERPRINT, h, func_name(func), options))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def lower(func, *, disable=(), replace=None, timings: dict | None = None) -> CompiledProgram:
    """Run the pipeline and the printer (no cache). `timings`, a dict, receives the wall
    seconds of each pass by name (core/transform/pipeline.py) and of the printer
    ("print_msl")."""
    return finish_lowering(pipeline.run(func, disable=disable, replace=replace,
                                        timings=timings), timings=timings)


def finish_lowering(program, *, timings: dict | None = None) -> CompiledProgram:
    """The printer's half of `lower`: the CompiledProgram of a program the pipeline
    lowered (`pipeline.run`), for a caller that needed the pipeline's result first (the
    fuzz's steering reads its decisions, and prints only the candidate it runs)."""
    start = time.perf_counter()
    msl, specs = print_program(program)
    if timings is not None:
        timings["print_msl"] = time.perf_counter() - start
    for site in program.launches:
        specs[site.kernel] = replace_fields(specs[site.kernel], grid=site.grid)
    return CompiledProgram(program.name, msl, specs, program.params, program.symbols,
                           program.launches, program.host, program.workspaces,
                           program.capacity, program.lengths, program.input_capacity,
                           program.decisions)


def _check_target(target, where):
    if str(target).split()[0] not in ("metal", "auto"):
        raise MetaltileError(f"target {target!r} is not supported; use 'metal'",
                             construct=where if where != "core.compile" else "target")


def compile(func, target="metal", out_idx=None, *, disable=(), replace=None, cache=True,
            checks=ALL_CHECKS, raise_on_findings=False, pass_configs=None, timings=None,
            verbose=False, **tilelang_options):  # noqa: A001
    """Compile a T.prim_func into a `Kernel`. `pass_configs` and TileLang's other
    keywords are checked by core/options.py: unknown or unsupported ones are errors;
    `execution_backend` ("auto", "torch", "tvm_ffi") is recorded as the kernel's
    `execution_backend` and runs on metaltile's backend either way. `verbose` prints one
    line per compile (lowered or from the cache). `timings`, a dict, receives the seconds of
    each pass and of the printer when the program is lowered (`lower`; a cache hit records
    nothing)."""
    _check_target(target, "core.compile")
    compile_options.check_keywords(tilelang_options)
    backend_name = compile_options.execution_backend(tilelang_options.get("execution_backend"))
    disable, checks = compile_options.resolve(pass_configs, disable, checks)
    func = resolve_declared(func, out_idx, func_name(func))   # capacity dims by role
    use_cache = cache and not replace
    key = cache_key(func, (tuple(disable),)) if use_cache else None
    compiled = CACHE.get(key) if use_cache else None
    start = time.perf_counter()
    hit = compiled is not None
    if compiled is None:
        compiled = lower(func, disable=disable, replace=replace, timings=timings)
        if use_cache:
            CACHE.put(key, compiled)
    if verbose:
        how = "from the compile cache" if hit else \
            f"lowered in {1e3 * (time.perf_counter() - start):.1f} ms"
        print(f"[core.compile] {compiled.name}: {len(compiled.specs)} device kernel(s), "
              f"{how}" + (f"; passes disabled: {', '.join(disable)}" if disable else ""))
    kernel = Kernel(compiled, out_idx, checks=checks, raise_on_findings=raise_on_findings)
    kernel.execution_backend = backend_name
    return kernel


# core.compile's own keywords (the rest of @core.jit's **options go to check_keywords)
_OWN_KEYWORDS = ("disable", "replace", "cache", "checks", "raise_on_findings", "timings")


def _jit_options(name, target, pass_configs, verbose, tilelang, options) -> dict:
    """The keywords `@core.jit` hands core.compile, every one checked now (at decoration),
    so a bad option is an error naming the function before anything is traced."""
    where = "@core.jit"
    try:
        _check_target(target, f"{where}(target=...)")
        compile_options.check_keywords(
            {**{k: v for k, v in options.items() if k not in _OWN_KEYWORDS}, **tilelang},
            where)
        compile_options.resolve(pass_configs, options.get("disable", ()),
                                options.get("checks", ALL_CHECKS))
    except MetaltileError as exc:
        construct = f"{where}(pass_configs=...)" if exc.construct == "pass_configs" else \
            exc.construct
        raise MetaltileError(exc.reason, kernel=name, construct=construct) from None
    kw = dict(options, pass_configs=pass_configs, verbose=verbose)
    kw.update({k: v for k, v in tilelang.items() if v is not None})
    return kw


def _debug_dump(root, name, kernel, func):
    """TileLang's `debug_root_path`: the kernel source and the program's TVMScript."""
    d = Path(root).resolve()
    d.mkdir(parents=True, exist_ok=True)
    (d / f"tilelang_jit_kernel_{name}.metal").write_text(kernel.msl)
    (d / f"tilelang_jit_program_{name}.py").write_text(func.script())


def _compiler(debug_root_path, name):
    """core.compile, and with `debug_root_path` the dump of each compiled kernel."""
    if debug_root_path is None:
        return compile

    def compile_and_dump(func, *args, **kwargs):
        kernel = compile(func, *args, **kwargs)
        _debug_dump(debug_root_path, name, kernel, func)
        return kernel

    return compile_and_dump


class JITFactory:
    """`@core.jit` on a function that returns a prim_func (TileLang's lazy mode): each
    argument signature is compiled once.

        kernel = f(1024, 1024, 64)          # the compiled kernel (cached per arguments)
        kernel = f.compile(1024, 1024, 64)  # the same
        func = f.get_tir(1024, 1024, 64)    # the prim_func the factory returns
        src = f.get_kernel_source(...)      # kernel.msl
        kernels = f.par_compile([(1024, 1024, 64), dict(M=..., ...)])
    """

    def __init__(self, fn, *, target, out_idx, options, debug_root_path):
        self.fn = fn
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.target, self.out_idx, self.options = target, out_idx, options
        self._compile = _compiler(debug_root_path, self.__name__)
        self._kernels = {}

    def __repr__(self):
        return f"<@core.jit prim_func factory {self.__name__}>"

    def get_tir(self, *args, **kwargs):
        """The prim_func the factory returns for these arguments."""
        from tvm.tirx import PrimFunc
        func = self.fn(*args, **kwargs)
        if not isinstance(func, PrimFunc):
            raise MetaltileError(f"returned {type(func).__name__}, not a prim_func: a "
                                 "@core.jit function either returns a T.prim_func or is "
                                 "written in TileLang's eager style (tensors declared in the "
                                 "body)", kernel=self.__name__, construct="@core.jit")
        return func

    def compile(self, *args, **kwargs):
        """The compiled kernel for these arguments (compiled once per signature)."""
        try:
            key = (args, tuple(sorted(kwargs.items())))
            hash(key)
        except TypeError:
            key = None  # unhashable arguments: compiled every time (the disk cache still hits)
        k = self._kernels.get(key) if key is not None else None
        if k is None:
            k = self._compile(self.get_tir(*args, **kwargs), self.target, self.out_idx,
                              **self.options)
            if key is not None:
                self._kernels[key] = k
        return k

    __call__ = compile

    def get_kernel_source(self, *args, **kwargs) -> str:
        return self.compile(*args, **kwargs).msl

    def par_compile(self, configs, num_workers=None):
        return par_compile(self, configs, num_workers=num_workers)


def jit(func=None, *, out_idx=None, target="metal", target_host=None,
        execution_backend=None, verbose=False, pass_configs=None, debug_root_path=None,
        compile_flags=None, **options):
    """Decorator, TileLang's `@tilelang.jit`, with its keywords:
    - on a function in TileLang's eager style (tensors declared in the body, `T.const`,
      `T.empty`; core/language/eager.py): an `EagerFunction`, compiled per specialization
      when called; its outputs are the returned T.empty tensors, so `out_idx` is an error
      (as in TileLang);
    - on a factory returning a prim_func: a `JITFactory`, compiled once per argument
      signature;
    - on a prim_func itself: compiled now.
    Every option is checked here and honoured: `pass_configs` as core.compile takes them,
    `verbose` prints each compile, `debug_root_path` writes each compiled kernel's MSL and
    TVMScript there, `execution_backend` as core.compile (core/options.py); `target_host`
    and `compile_flags` only as None; core.compile's own keywords (`disable`, `checks`,
    ...) pass through, anything else is an error."""
    tilelang = dict(target_host=target_host, execution_backend=execution_backend,
                    compile_flags=compile_flags)

    def decorate(f):
        from tvm.tirx import PrimFunc

        name = func_name(f) if isinstance(f, PrimFunc) else getattr(f, "__name__", None)
        kw = _jit_options(name, target, pass_configs, verbose, tilelang, options)
        if isinstance(f, PrimFunc):
            return _compiler(debug_root_path, name)(f, target, out_idx, **kw)
        if eager.is_eager_function(f):
            if out_idx is not None:
                raise MetaltileError("out_idx is only for a function that returns a "
                                     "prim_func; in TileLang's eager style the outputs are "
                                     "the T.empty tensors the function returns (remove "
                                     "out_idx)", kernel=name, construct="@core.jit(out_idx=...)")
            return EagerFunction(f, compile=_compiler(debug_root_path, name),
                                 par_compile=par_compile, target=target, options=kw,
                                 verbose=verbose)
        return JITFactory(f, target=target, out_idx=out_idx, options=kw,
                          debug_root_path=debug_root_path)

    return decorate(func) if func is not None else decorate


def _compile_in_worker(fn, config: dict):
    """Worker side of par_compile: trace and lower one specialization."""
    return fn.compile(**config).compiled


def par_compile(fn, configs, num_workers=None) -> list:
    """Compile several specializations of an eager function at once: `configs` are the
    keyword dicts `fn.compile` takes. Specializations not in the memory or disk cache are
    traced and lowered in worker processes (default: one per core, at most one per
    config): processes, because TVMScript's IR builder and the passes hold the GIL and
    the builder's state is per thread. A worker finds the function by module and name, so
    a function defined inside another one is compiled here, one after the other. Returns
    the kernels in the configs' order; later calls with those keys hit the memory cache."""
    import concurrent.futures
    import multiprocessing

    if isinstance(fn, JITFactory):  # a prim_func factory: compiled here, one by one
        return [fn.compile(*c) if isinstance(c, tuple) else fn.compile(**c) for c in configs]
    if not isinstance(fn, EagerFunction):
        raise MetaltileError("par_compile takes a @core.jit function (eager style, or a "
                             f"factory returning a prim_func), got {type(fn).__name__}",
                             construct="par_compile")
    configs = [dict(c) for c in configs]
    kernels, todo = [None] * len(configs), []
    for i, cfg in enumerate(configs):
        key, py, consts, dtypes = fn._compile_args(cfg)
        full = (key, tuple(sorted(consts.items())), dtypes)
        if full in fn._kernels:
            kernels[i] = fn._kernels[full]
        else:
            todo.append(i)
    workers = min(num_workers or os.cpu_count() or 1, len(todo))
    if workers > 1 and importable(fn):
        traces, jobs = {}, []
        # the key core.compile computes for these options (pass_configs included)
        disable = (compile_options.resolve(fn.options.get("pass_configs"),
                                           fn.options.get("disable", ()), ALL_CHECKS)[0],)
        for i in todo:
            key, py, consts, dtypes = fn._compile_args(configs[i])
            traces[i] = fn._trace(py, consts)
            ckey = cache_key(traces[i].func, disable)
            if CACHE.get(ckey) is None:
                jobs.append((i, ckey))
        if len(jobs) > 1:
            # fork starts a worker in milliseconds; macOS's frameworks are not fork-safe
            start = "fork" if platform.system() == "Linux" else "spawn"
            ctx = multiprocessing.get_context(start)
            with concurrent.futures.ProcessPoolExecutor(min(workers, len(jobs)),
                                                        mp_context=ctx) as pool:
                futures = [(ckey, pool.submit(_compile_in_worker, fn, configs[i]))
                           for i, ckey in jobs]
                for ckey, fut in futures:
                    CACHE.put(ckey, fut.result())
        for i in todo:
            key, py, consts, dtypes = fn._compile_args(configs[i])
            kernels[i] = fn._specialize(key, py, consts, dtypes, traced=traces[i])
    for i in todo:
        kernels[i] = kernels[i] or fn.compile(**configs[i])
    return kernels


class _CallableModule(types.ModuleType):
    """This module, callable as the decorator: `import core.jit` (a worker unpickling
    something of ours, the harness) binds the package attribute `core.jit` to the module,
    and `@core.jit` must keep working then."""

    def __call__(self, *args, **kwargs):
        return jit(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
