"""`@core.jit` on a function in TileLang's eager style (core/language/eager.py traces it):
the `EagerFunction`, which keys, traces, compiles and runs its specializations.

    out = f(a, b, block_M=64)          trace + compile once per key, then run
    kernel = f.compile(M=1024, N=1024, block_M=64)
    func = f.get_tir(a, b, block_M=64) (or the same keywords as compile)
    f.par_compile(configs)             core.par_compile(f, configs)

A call binds its arguments to the signature (tensors declared in the body, runtime
scalars, compile-time Python values), learns from a template trace which argument dim
binds each `T.const`, and compiles the specialization trace with `core.compile`. The key
of a specialization is (the Python params, the T.const values, the tensors' dtypes).

core/jit.py makes the object (`core.jit` on an eager function) and hands it
`core.compile` and `core.par_compile`, so this module imports nothing of the compiler
below the DSL. A worker process of par_compile finds the function by module and name
(`load_eager`, `importable`).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

import tvm_ffi

from core.errors import KernelDefinitionError, LaunchError
from core.ir import annotations as keys
from core.language import eager
from core.language.dtypes import dtype_name


def _freeze(value, where):
    """A hashable, type-exact key part for a compile-time Python value."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, value)
    if hasattr(value, "_dtype_str") or type(value).__module__ == "torch" and \
            type(value).__name__ == "dtype":
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


def _singleton_tail(a, dims) -> bool:
    """A tensor that leaves out trailing dims declared as 1 (`(T, 1)` given `(T,)`), which
    the binding accepts (core/runtime/binding.py)."""
    return a.dim() < len(dims) and all(d == ("int", 1) for d in dims[a.dim():])


def _resolved_signature(fn) -> inspect.Signature:
    """`fn`'s signature with string annotations (`from __future__ import annotations`)
    evaluated where the function was defined, as TileLang's get_type_hints does, so
    `n: T.int32` is a runtime scalar and `block: int` is type-checked in such a module
    too. An annotation that does not evaluate stays a string (a compile-time parameter)."""
    sig = inspect.signature(fn)
    if not any(isinstance(p.annotation, str) for p in sig.parameters.values()):
        return sig
    scope = dict(getattr(fn, "__globals__", {}))
    closure = inspect.getclosurevars(fn) if hasattr(fn, "__code__") else None
    if closure is not None:
        scope.update(closure.nonlocals)
    params = []
    for p in sig.parameters.values():
        if isinstance(p.annotation, str):
            try:
                p = p.replace(annotation=eval(p.annotation, scope))  # noqa: S307
            except Exception:  # noqa: BLE001 - any failure: it stays a string, as documented
                pass
        params.append(p)
    return sig.replace(parameters=params)


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

    def __init__(self, fn, *, compile, par_compile, target="metal", options=None,
                 verbose=False):
        self.fn = fn
        self._compile = compile            # core.compile and core.par_compile (core/jit.py)
        self._par_compile = par_compile
        self.__name__ = fn.__name__
        self.__wrapped__ = fn
        self.__doc__ = fn.__doc__
        self.target = target
        self.options = dict(options or {})
        self.verbose = verbose
        self.signature = _resolved_signature(fn)
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

    def _consts_from_args(self, t: _Template, values, extra, *, partial=False,
                          deferred=None):
        """The T.const values: from `extra` (keywords), else from the shape of the tensor
        that binds each; every tensor given is checked against them. `partial` (compile,
        get_tir): tensors may be absent, the keywords then give their T.consts."""
        import torch
        given = [n for n in self.tensor_params if n in values or not partial]
        for name in given:
            a = values[name]
            if not isinstance(a, torch.Tensor):
                self._fail(f"parameter '{name}'", f"expected a torch tensor ({t.decls[name]}), "
                           f"got {type(a).__name__}")
            if a.dim() != len(t.dims[name]) and not _singleton_tail(a, t.dims[name]):
                self._fail(f"parameter '{name}'", f"rank {a.dim()} (shape {tuple(a.shape)}) "
                           f"does not match the declaration {t.decls[name]}")
        consts = {}
        for c in t.consts:
            if c in extra:
                consts[c] = extra[c]
            elif c in t.matcher and t.matcher[c][0] in given:
                p, d = t.matcher[c]
                consts[c] = int(values[p].shape[d])
            elif c in t.matcher:
                self._fail(f"T.const '{c}'", f"has no value: pass {c}=... or a tensor for "
                           f"parameter '{t.matcher[c][0]}'", KernelDefinitionError)
            else:
                self._fail(f"T.const '{c}'", "is not bound by any argument: use it directly "
                           "as a dim of a tensor parameter's declaration, or give it as a "
                           f"keyword ({self.__name__}.compile({c}=...))", KernelDefinitionError)
        consts.update({c: v for c, v in extra.items() if c not in consts})
        for name in given:
            shape = tuple(values[name].shape)
            shape += (1,) * (len(t.dims[name]) - len(shape))  # a left-out trailing 1
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
                    if deferred is None:
                        self._fail(f"parameter '{name}'", reason)
                    # an input's capacity dim (T.annotate_capacity_dims) may differ: known
                    # once the specialization is traced (`_check_deferred`)
                    deferred.append((name, d, reason))
        return consts

    def _check_deferred(self, deferred, capacity):
        """The shape mismatches `_consts_from_args` put off: allowed on an input's
        capacity dims (`capacity`: name -> dim indices), else the error they are."""
        capacity = dict(capacity)
        for name, d, reason in deferred:
            if d not in capacity.get(name, ()):
                self._fail(f"parameter '{name}'", reason)

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
            kernel = self._compile(traced.func, self.target, out_idx, **self.options)
            kernel.inputs = traced.inputs
            self._kernels[full] = kernel
        return kernel

    # -- public API -----------------------------------------------------------------------
    def specialize(self, *args, **kwargs):
        """The compiled kernel a call with these arguments runs (compiled if needed)."""
        kernel, _ = self._dispatch(args, kwargs)
        return kernel

    def _dispatch(self, args, kwargs):
        extra = {k: kwargs.pop(k) for k in list(kwargs) if k not in self.signature.parameters}
        values, py, key = self._bind(args, kwargs)
        t = self._template(key, py)
        deferred = []
        consts = self._consts_from_args(t, values, extra, deferred=deferred)
        dtypes = tuple(str(values[n].dtype).replace("torch.", "") for n in self.tensor_params)
        kernel = self._specialize(key, py, consts, dtypes)
        if deferred:
            self._check_deferred(deferred, kernel.compiled.input_capacity)
        return kernel, [values[n] for n in kernel.inputs]

    def __call__(self, *args, backend=None, **kwargs):
        kernel, inputs = self._dispatch(args, kwargs)
        out = kernel(*inputs, backend=backend)
        self.last_run = kernel.last_run
        return tuple(out) if isinstance(out, list) else out

    def _compile_args(self, kwargs, args=(), deferred=None):
        """-> (python key, python params, T.const values, dtypes) of the specialization
        `compile` and `get_tir` name: a call's arguments (positional or keyword; each
        tensor given binds its T.consts and is checked as a call checks it), the T.const
        values as keywords for tensors not given, and the compile-time parameters. A
        runtime scalar's value is not part of a specialization and is not needed."""
        import torch
        kwargs = dict(kwargs)
        extra = {k: kwargs.pop(k) for k in list(kwargs) if k not in self.signature.parameters}
        for c, v in extra.items():
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                self._fail(f"T.const '{c}'", f"must be a positive int, got {v!r}",
                           KernelDefinitionError)
        values, py, key = self._bind(args, kwargs, partial=True)
        values = {n: v for n, v in values.items() if n not in self.tensor_params or
                  self.signature.parameters[n].default is not v}  # a default is no tensor
        t = self._template(key, py)
        consts = self._consts_from_args(t, values, extra, partial=True, deferred=deferred)
        dtypes = tuple(str(values[n].dtype).replace("torch.", "")
                       if isinstance(values.get(n), torch.Tensor) else t.dtypes[n]
                       for n in self.tensor_params)
        return key, py, consts, dtypes

    def compile(self, *args, **kwargs):
        """The kernel of one specialization, without running it; call it with the tensors.
        `f.compile(M=1024, N=1024, block_M=64)` (T.const values and compile-time
        parameters), or a call's arguments as TileLang allows: `f.compile(a, b, 64)`."""
        deferred = []
        key, py, consts, dtypes = self._compile_args(kwargs, args, deferred)
        kernel = self._specialize(key, py, consts, dtypes)
        self._check_deferred(deferred, kernel.compiled.input_capacity)
        return kernel

    def get_tir(self, *args, **kwargs):
        """The traced PrimFunc of a specialization: the arguments `compile` takes."""
        deferred = []
        key, py, consts, _ = self._compile_args(kwargs, args, deferred)
        func = self._trace(py, consts).func
        cap = (func.attrs or {}).get(keys.TILELANG_CAPACITY_DIMS) or {}
        self._check_deferred(deferred, {str(n): tuple(int(d) for d in ds)
                                        for n, ds in cap.items()})
        return func

    def par_compile(self, configs, num_workers=None):
        return self._par_compile(self, configs, num_workers=num_workers)

    def __reduce__(self):  # workers of par_compile find the function by module and name
        return (load_eager, (self.fn.__module__, self.fn.__qualname__))


def load_eager(module: str, qualname: str):
    import importlib
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def importable(fn) -> bool:
    """Can a worker process find `fn` by module and name (a module-level function)?"""
    try:
        return load_eager(fn.fn.__module__, fn.fn.__qualname__) is fn
    except (ImportError, AttributeError):
        return False
