"""`core.compile` / `core.jit` and `core.Kernel`: from a T.* prim_func, or a function in
TileLang's eager style (`EagerFunction`, core/language/eager.py), to a callable.

    kernel = core.compile(func, target="metal", out_idx=[-1])
    kernel.msl        the MSL library (all kernels of the program, declarations once)
    kernel.specs      KernelSpec per device kernel (buffers, args struct, threadgroup)
    kernel.launches   the launch plan (core.ir.program.LaunchSite, in order)
    C = kernel(A, B, n, alpha)          inputs in the user's order; outputs returned
    kernel.last_run.findings            emulator findings of the last call ([] = clean)

    @core.jit                           eager style: traced + compiled per specialization
    def f(A, block_M: int): ...         (T.const dims, T.empty outputs and workspaces)
    f(a, block_M=64); f.compile(M=..., block_M=64); f.get_tir(...); core.par_compile(f, cfgs)

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
import inspect
import os
import pickle
import platform
import re
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
from core.errors import KernelDefinitionError, LaunchError, MetaltileError
from core.language.dtypes import dtype_name
from core.ir.kernel import func_name
from core.ir.program import evaluate, launch_sequence
from core.runtime import args as args_struct
from core.runtime.backends import (DEVICES, RunRecord, check_backend, default_backend,
                                   launch)
from core.runtime.binding import bind, output_indices, reported_view
from core.transform import pipeline

CACHE_VERSION = "2"
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
                values = {s.name: evaluate(s.value, env) for s in site.scalars}
                buffers.append(args_struct.pack(spec.args, _by_field(spec, values),
                                                kernel=site.kernel))
            plans.append((site, grid, buffers))
        # Every launch of the call is planned (and checked) before the first one runs. On
        # "mps" the launches are queued, not waited on (core/runtime/mps.py keeps each
        # launch's buffers, workspaces and packed scalars included, alive until it has
        # completed); a host step that reads a device value calls backends.synchronize.
        for site, grid, buffers in plans:
            launch(backend, self.msl, site, grid, buffers, checks=checks, schedule=schedule,
                   seed=seed, record=record)
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
    text = repr((COMPILER_FINGERPRINT, h, func_name(func), options))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def lower(func, *, disable=(), replace=None, timings: dict | None = None) -> CompiledProgram:
    """Run the pipeline and the printer (no cache). `timings`, a dict, receives the wall
    seconds of each pass by name (core/transform/pipeline.py) and of the printer
    ("print_msl")."""
    program = pipeline.run(func, disable=disable, replace=replace, timings=timings)
    start = time.perf_counter()
    msl, specs = print_program(program)
    if timings is not None:
        timings["print_msl"] = time.perf_counter() - start
    for site in program.launches:
        specs[site.kernel] = replace_fields(specs[site.kernel], grid=site.grid)
    return CompiledProgram(program.name, msl, specs, program.params, program.symbols,
                           program.launches, program.host, program.workspaces,
                           program.capacity, program.lengths)


def compile(func, target="metal", out_idx=None, *, disable=(), replace=None, cache=True,
            checks=ALL_CHECKS, raise_on_findings=False, pass_configs=None, timings=None,
            **tilelang_options):  # noqa: A001
    """Compile a T.prim_func into a `Kernel`. `pass_configs` and TileLang's other
    keywords are checked by core/options.py: unknown or unsupported ones are errors.
    `timings`, a dict, receives the seconds of each pass and of the printer when the
    program is lowered (`lower`; a cache hit records nothing)."""
    if str(target).split()[0] not in ("metal", "auto"):
        raise MetaltileError(f"target {target!r} is not supported; use 'metal'",
                             construct="target")
    compile_options.check_keywords(tilelang_options)
    disable, checks = compile_options.resolve(pass_configs, disable, checks)
    use_cache = cache and not replace
    key = cache_key(func, (tuple(disable),)) if use_cache else None
    compiled = CACHE.get(key) if use_cache else None
    if compiled is None:
        compiled = lower(func, disable=disable, replace=replace, timings=timings)
        if use_cache:
            CACHE.put(key, compiled)
    return Kernel(compiled, out_idx, checks=checks, raise_on_findings=raise_on_findings)


def jit(func=None, *, out_idx=None, target="metal", pass_configs=None, verbose=False,
        **options):
    """Decorator, TileLang's `@tilelang.jit`:
    - on a function in TileLang's eager style (tensors declared in the body, `T.const`,
      `T.empty`; core/language/eager.py): an `EagerFunction`, compiled per specialization
      when called (outputs are the returned T.empty tensors; `out_idx` is not needed);
    - on a factory returning a prim_func: compiled once per argument signature;
    - on a prim_func itself: compiled now.
    `pass_configs` (TileLang's CUDA pass options) are accepted and have no effect here."""

    def decorate(f):
        from tvm.tirx import PrimFunc

        from core.language import eager
        if isinstance(f, PrimFunc):
            return compile(f, target, out_idx, **options)
        if eager.is_eager_function(f):
            return EagerFunction(f, target=target, options=options, verbose=verbose)
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


# ---- the eager JIT (TileLang's eager style, core/language/eager.py) -------------------------

def _freeze(value, where):
    """A hashable, type-exact key part for a compile-time Python value."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, value)
    if hasattr(value, "_dtype_str") or type(value).__module__ == "torch" and \
            type(value).__name__ == "dtype":
        from core.language.dtypes import dtype_name
        return ("dtype", dtype_name(value, construct=where))
    if isinstance(value, (tuple, list)):
        return ("seq", tuple(_freeze(v, where) for v in value))
    try:
        hash(value)
    except TypeError:
        raise KernelDefinitionError(f"a {type(value).__name__} cannot be a compile-time "
                                    "parameter (it is not hashable; pass a tuple or a number)",
                                    construct=where) from None
    return (type(value).__qualname__, value)


@dataclass(frozen=True)
class _Template:
    """What the template trace of one set of Python params learned."""
    consts: tuple            # const names, in first-declaration order
    matcher: dict            # const name -> (tensor param, dim) that binds it
    dims: dict               # tensor param -> tuple of ("const", name) | ("int", n) | None
    dtypes: dict             # tensor param -> declared dtype
    decls: dict              # tensor param -> declaration text, for messages


_PY_TYPES = {int: "an int", float: "a float", bool: "a bool", str: "a str"}


class EagerFunction:
    """`@core.jit` on a function in TileLang's eager style.

        out = f(a, b, block_M=64)          trace + compile once per key, then run
        kernel = f.compile(M=1024, N=1024, block_M=64)
        func = f.get_tir(a, b, block_M=64) (or the same keywords as compile)

    The key of a specialization is (the Python params, the T.const values, the tensors'
    dtypes); each compiled specialization is kept in memory here and in the disk cache
    (keyed by the traced PrimFunc's structure, as `core.compile`).
    """

    def __init__(self, fn, *, target="metal", options=None, verbose=False):
        from core.language import eager
        self.fn = fn
        self.__name__ = fn.__name__
        self.__wrapped__ = fn
        self.__doc__ = fn.__doc__
        self.target = target
        self.options = dict(options or {})
        self.verbose = verbose
        self.signature = inspect.signature(fn)
        self.tensor_params = tuple(eager.declared_tensors(fn))
        self.scalar_params = {}
        for n, p in self.signature.parameters.items():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise KernelDefinitionError(f"*{n}/**{n} parameters are not supported in an "
                                            "eager kernel function", kernel=self.__name__,
                                            construct=f"parameter '{n}'")
            if n not in self.tensor_params and eager.is_scalar_type(p.annotation):
                self.scalar_params[n] = dtype_name(p.annotation,
                                                   construct=f"parameter '{n}'")
        self.python_params = tuple(n for n in self.signature.parameters
                                   if n not in self.tensor_params
                                   and n not in self.scalar_params)
        self._rewritten = None
        self._templates = {}     # python key -> _Template
        self._kernels = {}       # full key -> Kernel

    def __repr__(self):
        return f"<eager kernel function {self.__name__}>"

    # -- binding a call ------------------------------------------------------------------
    def _fail(self, construct, reason, cls=None):
        raise (cls or LaunchError)(reason, kernel=self.__name__, construct=construct)

    def _bind(self, args, kwargs, *, partial=False):
        """-> (runtime values by name, python values by name, python key)."""
        try:
            bound = (self.signature.bind_partial if partial else self.signature.bind)(
                *args, **kwargs)
        except TypeError as exc:
            missing = re.search(r"missing a required argument: '(\w+)'", str(exc))
            if missing:
                p = missing.group(1)
                role = "tensor" if p in self.tensor_params else \
                    "scalar" if p in self.scalar_params else "compile-time parameter"
                self._fail(f"parameter '{p}'", f"is missing: the call gives no {role} for it")
            self._fail("arguments", str(exc))
        bound.apply_defaults()
        values = bound.arguments
        py = {}
        for n in self.python_params:
            if n not in values:
                if partial:
                    self._fail(f"parameter '{n}'", "is missing: give this compile-time "
                               "parameter a value", KernelDefinitionError)
                continue
            py[n] = self._check_python(n, values[n])
        try:
            key = tuple(_freeze(py[n], f"parameter '{n}'") for n in self.python_params)
        except KernelDefinitionError as exc:
            raise KernelDefinitionError(exc.reason, kernel=self.__name__,
                                        construct=exc.construct) from None
        return values, py, key

    def _check_python(self, n, v):
        ann = self.signature.parameters[n].annotation
        if type(v).__module__ == "torch" and type(v).__name__ == "Tensor":
            self._fail(f"parameter '{n}'", "is a compile-time parameter but got a torch "
                       f"tensor; declare it in the body (`{n}: T.Tensor(shape, dtype)`) to make "
                       "it a tensor parameter", KernelDefinitionError)
        if ann in _PY_TYPES and not (isinstance(v, ann) and not (ann is int and
                                                                 isinstance(v, bool))):
            if not (ann is float and isinstance(v, int) and not isinstance(v, bool)):
                self._fail(f"parameter '{n}'", f"expected {_PY_TYPES[ann]} (annotated "
                           f"{ann.__name__}), got {type(v).__name__} {v!r}",
                           KernelDefinitionError)
        return v

    # -- tracing ---------------------------------------------------------------------------
    def _trace(self, py, consts):
        from core.language import eager
        if self._rewritten is None:
            self._rewritten = eager.rewrite_function(self.fn)
        return eager.trace(self._rewritten, self.__name__, self.signature, self.tensor_params,
                           self.scalar_params, py, consts)

    def _template(self, key, py) -> _Template:
        t = self._templates.get(key)
        if t is not None:
            return t
        traced = self._trace(py, None)
        params = traced.tensors
        matcher, dims, dtypes, decls = {}, {}, {}, {}
        for name in self.tensor_params:
            buf = params[name]
            row = []
            for d, extent in enumerate(buf.ty.shape):
                const = next((c for c, v in traced.const_vars.items() if extent.same_as(v)),
                             None)
                if const is not None:
                    matcher.setdefault(const, (name, d))
                    row.append(("const", const))
                elif isinstance(extent, tvm_ffi.Object) and hasattr(extent, "value"):
                    row.append(("int", int(extent.value)))
                else:
                    row.append(None)  # symbolic (T.dynamic): checked when the kernel binds
            dims[name] = tuple(row)
            dtypes[name] = str(buf.ty.dtype)
            decls[name] = f"T.Tensor(({', '.join(map(str, buf.ty.shape))}), {buf.ty.dtype})"
        t = _Template(tuple(traced.const_vars), matcher, dims, dtypes, decls)
        self._templates[key] = t
        return t

    def _consts_from_args(self, t: _Template, values, extra):
        import torch
        for name in self.tensor_params:
            a = values[name]
            if not isinstance(a, torch.Tensor):
                self._fail(f"parameter '{name}'", f"expected a torch tensor ({t.decls[name]}), "
                           f"got {type(a).__name__}")
            if a.dim() != len(t.dims[name]):
                self._fail(f"parameter '{name}'", f"rank {a.dim()} (shape {tuple(a.shape)}) "
                           f"does not match the declaration {t.decls[name]}")
        consts = {}
        for c in t.consts:
            if c in extra:
                consts[c] = extra[c]
            elif c in t.matcher:
                p, d = t.matcher[c]
                consts[c] = int(values[p].shape[d])
            else:
                self._fail(f"T.const '{c}'", "is not bound by any argument: use it directly "
                           "as a dim of a tensor parameter's declaration, or give it as a "
                           f"keyword ({self.__name__}.compile({c}=...))", KernelDefinitionError)
        consts.update({c: v for c, v in extra.items() if c not in consts})
        for name in self.tensor_params:
            shape = values[name].shape
            for d, dim in enumerate(t.dims[name]):
                if dim is None:
                    continue
                want = consts[dim[1]] if dim[0] == "const" else dim[1]
                if int(shape[d]) != want:
                    if dim[0] == "const":
                        src = t.matcher.get(dim[1])
                        whence = f"from parameter '{src[0]}' dim {src[1]}" if src else \
                            "given as a keyword"
                        reason = (f"dim {d} is {int(shape[d])}, but T.const '{dim[1]}' is "
                                  f"{want} {whence} (declared {t.decls[name]})")
                    else:
                        reason = f"dim {d} is {int(shape[d])}, declared {t.decls[name]}"
                    self._fail(f"parameter '{name}'", reason)
        return consts

    def _specialize(self, key, py, consts, dtypes=(), traced=None):
        full = (key, tuple(sorted(consts.items())), dtypes)
        kernel = self._kernels.get(full)
        if kernel is None:
            traced = traced or self._trace(py, consts)
            n_in = len(traced.inputs)
            out_idx = list(range(n_in, n_in + len(traced.outputs))) or None
            if self.verbose:
                print(f"[core.jit] compiling {self.__name__} for "
                      f"{dict(py, **consts)}")
            kernel = compile(traced.func, self.target, out_idx, **self.options)
            kernel.inputs = traced.inputs
            self._kernels[full] = kernel
        return kernel

    # -- public API -----------------------------------------------------------------------
    def specialize(self, *args, **kwargs) -> Kernel:
        """The compiled kernel a call with these arguments runs (compiled if needed)."""
        kernel, _ = self._dispatch(args, kwargs)
        return kernel

    def _dispatch(self, args, kwargs):
        extra = {k: kwargs.pop(k) for k in list(kwargs) if k not in self.signature.parameters}
        values, py, key = self._bind(args, kwargs)
        t = self._template(key, py)
        consts = self._consts_from_args(t, values, extra)
        dtypes = tuple(str(values[n].dtype).replace("torch.", "") for n in self.tensor_params)
        kernel = self._specialize(key, py, consts, dtypes)
        return kernel, [values[n] for n in kernel.inputs]

    def __call__(self, *args, backend=None, **kwargs):
        kernel, inputs = self._dispatch(args, kwargs)
        out = kernel(*inputs, backend=backend)
        self.last_run = kernel.last_run
        return tuple(out) if isinstance(out, list) else out

    def _compile_args(self, kwargs):
        kwargs = dict(kwargs)
        extra = {k: kwargs.pop(k) for k in list(kwargs) if k not in self.signature.parameters}
        runtime = [k for k in kwargs if k not in self.python_params]
        if runtime:
            self._fail(f"parameter '{runtime[0]}'", "is a tensor or runtime scalar; compile() "
                       "takes the T.const values and the compile-time parameters",
                       KernelDefinitionError)
        _, py, key = self._bind((), kwargs, partial=True)
        t = self._template(key, py)
        missing = [c for c in t.consts if c not in extra]
        if missing:
            self._fail(f"T.const '{missing[0]}'", f"has no value: pass {missing[0]}=... "
                       "to compile()", KernelDefinitionError)
        for c, v in extra.items():
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                self._fail(f"T.const '{c}'", f"must be a positive int, got {v!r}",
                           KernelDefinitionError)
        return key, py, extra, tuple(t.dtypes[n] for n in self.tensor_params)

    def compile(self, **kwargs) -> Kernel:
        """`f.compile(M=1024, N=1024, block_M=64)`: the kernel for these T.const values
        and compile-time parameters, without running it; call it with the tensors."""
        key, py, consts, dtypes = self._compile_args(kwargs)
        return self._specialize(key, py, consts, dtypes)

    def get_tir(self, *args, **kwargs):
        """The traced PrimFunc of a specialization: from a call's arguments, or from the
        keywords `compile` takes."""
        if args or any(k in self.tensor_params for k in kwargs):
            extra = {k: kwargs.pop(k) for k in list(kwargs)
                     if k not in self.signature.parameters}
            values, py, key = self._bind(args, kwargs)
            consts = self._consts_from_args(self._template(key, py), values, extra)
        else:
            key, py, consts, _ = self._compile_args(kwargs)
        return self._trace(py, consts).func

    def par_compile(self, configs, num_workers=None):
        return par_compile(self, configs, num_workers=num_workers)

    def __reduce__(self):  # workers of par_compile find the function by module and name
        return (_load_eager, (self.fn.__module__, self.fn.__qualname__))


def _load_eager(module: str, qualname: str):
    import importlib
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _compile_in_worker(fn, config: dict):
    """Worker side of par_compile: trace and lower one specialization."""
    return fn.compile(**config).compiled


def _importable(fn) -> bool:
    """Can a worker process find `fn` by module and name (a module-level function)?"""
    try:
        return _load_eager(fn.fn.__module__, fn.fn.__qualname__) is fn
    except (ImportError, AttributeError):
        return False


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

    if not isinstance(fn, EagerFunction):
        raise MetaltileError("par_compile takes a @core.jit eager kernel function",
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
    if workers > 1 and _importable(fn):
        traces, jobs = {}, []
        disable = (tuple(fn.options.get("disable", ())),)
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
