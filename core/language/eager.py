"""TileLang's eager style: trace a plain Python kernel function into a PrimFunc.

    @core.jit
    def add(A, B, block_N: int, dtype=T.float16):
        M, N = T.const("M, N")             # compile-time dims, bound from argument shapes
        A: T.Tensor((M, N), dtype)         # declares parameter A as a tensor
        B: T.Tensor[[M, N], dtype]
        C = T.empty((M, N), dtype)         # returned: an output; not returned: a workspace
        with T.Kernel(T.ceildiv(N, block_N), M, threads=128) as (bx, by):
            ...
        return C

Tracing (`trace`) runs the function body as Python under TVMScript's IR builder, so every
`T.*` call emits TIR exactly as in a `@T.prim_func`. The body is first rewritten
(`rewrite_function`, Python's `ast`) where Python semantics differ from TVMScript's:
`for` over a TIR loop (`T.Parallel`, `T.serial`, `T.Pipelined`, `range`) enters the loop's
frame once, `if` on a TIR condition emits an IfThenElse (a Python condition runs as
Python, so control flow on compile-time parameters is evaluated at trace time),
`a[i, j] = v` / `a[i] += v` emit buffer stores (`B[0:N] = A[0:N] * 2`, an expression
over slices, and `B[0:N] += ...` a T.Parallel over B's slice: slice_store.expression_store),
an assignment to a `T.alloc_var` stores,
`and`/`or`/`not`/`x if c else y` on TIR values build TIR, and a body annotation
`A: T.Tensor(...)` of a parameter declares that parameter a tensor.

Parameters: those declared as tensors in the body, those annotated with a T scalar type
(`n: T.int32`, a runtime scalar), and every other one a compile-time Python value.
`T.const` dims are Vars in the *template* trace, which only learns which argument dim binds
each (it stops once every tensor parameter is declared, or at the first `with` block, so
code that needs the values, like a fragment of N columns, never sees a Var), and Python
ints in a *specialization* trace. The function's PrimFunc parameters are the
tensors and scalars in signature order, then the returned outputs, then the workspaces
(attribute `tl.workspaces`); `T.annotate_capacity_dims` sets `tl.capacity_dims`.
core/language/eager_function.py (the object `@core.jit` makes of such a function) keys,
caches and runs the specializations.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import textwrap
from pathlib import Path
from dataclasses import dataclass, field
from numbers import Integral

import tvm
import tvm_ffi
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError, MetaltileError
from core.ir import annotations as keys
from core.language import script_cache, slice_store
from core.language.buffers import var_value
from core.language.dtypes import dtype_name

# ---- trace state ---------------------------------------------------------------------------


@dataclass
class Trace:
    """State of one trace of an eager function."""
    name: str
    consts: dict | None                 # None: template trace (consts are Vars); else ints
    const_vars: dict = field(default_factory=dict)   # const name -> Var (template)
    tensors: dict = field(default_factory=dict)      # parameter name -> declared buffer
    empties: list = field(default_factory=list)      # T.empty buffers, in creation order
    capacity: dict = field(default_factory=dict)     # tensor name -> [cap or -1 per dim]
    lengths: dict = field(default_factory=dict)      # tensor name -> reporting tensor name
    input_capacity: dict = field(default_factory=dict)  # input tensor -> capacity dim indices
    expected: set = field(default_factory=set)       # tensor parameter names
    next_name: str | None = None

    def fail(self, construct, reason):
        raise KernelDefinitionError(reason, kernel=self.name, construct=construct)


_STACK: list = []
_LOOPS: list = []   # kinds of the loops being traced, innermost last: "tir" | "python"


def current(construct: str) -> Trace:
    if not _STACK:
        raise KernelDefinitionError(
            "is only available in the body of a @core.jit function written in TileLang's "
            "eager style", construct=construct)
    return _STACK[-1]


def tracing() -> bool:
    return bool(_STACK)


# ---- the eager-only T.* functions ----------------------------------------------------------

def const(names: str, dtype="int32"):
    """`M, N = T.const("M, N")` (or "M N"): compile-time dims bound from argument shapes
    (or given to `f.compile(M=...)`)."""
    tr = current("T.const")
    parts = [p for p in re.split(r"[\s,]+", names.strip()) if p]
    if not parts or not all(p.isidentifier() for p in parts):
        tr.fail("T.const", f"{names!r} is not a list of names like 'M, N' or 'M N'")
    values = []
    for p in parts:
        if tr.consts is not None:
            if p not in tr.consts:
                tr.fail(f"T.const '{p}'", "is not bound by any argument: use it directly as "
                        "a dim of a tensor parameter's declaration (declared before the first "
                        f"kernel), or give it as a keyword ({tr.name}.compile({p}=...))")
            values.append(tr.consts[p])
        else:
            var = tr.const_vars.get(p)
            if var is None:
                var = tirx.Var(p, dtype_name(dtype, construct="T.const"))
                tr.const_vars[p] = var
            values.append(var)
    return values[0] if len(values) == 1 else tuple(values)


def empty(shape, dtype="float32"):
    """A device tensor the program creates: an output when returned, else a workspace
    (allocated by the runtime, alive until the last launch using it has completed)."""
    from core.language.buffers import _shape
    tr = current("T.empty")
    name = tr.next_name or f"tmp{len(tr.empties)}"
    tr.next_name = None
    buf = tirx.decl_buffer(_shape(shape, "T.empty"), dtype_name(dtype, construct="T.empty"),
                           name=name)
    tr.empties.append(buf)
    return buf


def annotate_capacity_dims(capacities: dict, lengths: dict | None = None):
    """Two meanings, told apart by the tensor's role:
    - an input tensor (a parameter declared in the body), TileLang's (PR #2969):
      `T.annotate_capacity_dims({"a": (0,)})` says dim 0 of `a` is a capacity dimension:
      the kernel masks its accesses along it, so the tensor given may be smaller (or
      larger) than declared there; the entries are dim indices (function attribute
      `tilelang_capacity_dims`). Before or after the declaration.
    - an output or workspace (T.empty), metaltile's: `{"out": (cap_m, None)}` allocates
      `out` with `cap_m` rows when its logical size depends on data; None keeps a dim as
      declared. The runtime binds a symbolic dim standing alone to its capacity. It returns
      the whole allocation, or, with `lengths={"out": n}` where `n` is an int32/int64
      tensor of the function with one element per capacity dim that a kernel writes, the
      view `out[:n[0], ...]` the kernel reports."""
    construct = "T.annotate_capacity_dims"
    name = _STACK[-1].name if _STACK else None
    if not isinstance(capacities, dict):
        raise KernelDefinitionError(f"takes a dict tensor name -> capacity per dim, got "
                                    f"{type(capacities).__name__}", kernel=name,
                                    construct=construct)
    if _STACK:
        inputs = {t: d for t, d in capacities.items() if t in _STACK[-1].expected}
        capacities = {t: d for t, d in capacities.items() if t not in inputs}
        for tensor, dims in inputs.items():
            where = f"{construct}('{tensor}')"
            if not isinstance(dims, (tuple, list)) or not all(
                    isinstance(d, Integral) and not isinstance(d, bool) and d >= 0
                    for d in dims):
                raise KernelDefinitionError(
                    f"'{tensor}' is an input tensor: its entry lists dim indices (TileLang's "
                    f"capacity dims, e.g. (0,)), got {dims!r}", kernel=name, construct=where)
            _STACK[-1].input_capacity[tensor] = tuple(int(d) for d in dims)
    attr = {}
    for tensor, dims in capacities.items():
        where = f"{construct}('{tensor}')"
        if not isinstance(tensor, str):
            raise KernelDefinitionError(f"key {tensor!r} is not a tensor name", kernel=name,
                                        construct=construct)
        if not isinstance(dims, (tuple, list)):
            raise KernelDefinitionError(f"capacity {dims!r} is not a tuple with one entry "
                                        "per dim (an int or None)", kernel=name,
                                        construct=where)
        out = []
        for d in dims:
            if d is None:
                out.append(-1)
            elif isinstance(d, Integral) and not isinstance(d, bool) and d >= 0:
                out.append(int(d))
            else:
                raise KernelDefinitionError(
                    f"capacity {d!r} is not allowed; each entry is a non-negative int or "
                    "None", kernel=name, construct=where)
        attr[tensor] = out
    named = {}
    for tensor, counter in (lengths or {}).items():
        where = f"{construct}(lengths='{tensor}')"
        if tensor not in attr:
            raise KernelDefinitionError(f"'{tensor}' has a length tensor but no capacity "
                                        "dims", kernel=name, construct=where)
        named[tensor] = counter if isinstance(counter, str) else _tensor_name(counter, where,
                                                                              name)
        ncap = sum(1 for d in attr[tensor] if d >= 0)
        if not isinstance(counter, str):
            shape, dtype = list(counter.ty.shape), str(counter.ty.dtype)
            if dtype not in ("int32", "int64") or len(shape) != 1 or \
                    not isinstance(shape[0], tirx.IntImm) or int(shape[0].value) != ncap:
                raise KernelDefinitionError(
                    f"length tensor '{named[tensor]}' is {dtype}{[str(d) for d in shape]}; "
                    f"it must be int32 or int64 of shape ({ncap},), one length per capacity "
                    "dim", kernel=name, construct=where)
    if _STACK:
        _STACK[-1].lengths.update(named)
        known = {**_STACK[-1].tensors, **{b.name: b for b in _STACK[-1].empties}}
        for tensor, dims in attr.items():
            where = f"{construct}('{tensor}')"
            if tensor not in known:
                raise KernelDefinitionError(
                    f"'{tensor}' is not a tensor of the function; tensors so far: "
                    f"{', '.join(sorted(known)) or 'none'}", kernel=name, construct=where)
            rank = len(known[tensor].ty.shape)
            if len(dims) != rank:
                raise KernelDefinitionError(
                    f"gives {len(dims)} capacity dims for a tensor of rank {rank}",
                    kernel=name, construct=where)
        _STACK[-1].capacity.update(attr)
    else:  # in a prim_func: an entry's meaning follows the tensor's role, known at
        # core.compile (core/ir/capacity.py: resolve_declared); names checked at parse
        _ir.func_attr({keys.CAPACITY_DECLARED: attr})
        if named:
            _ir.func_attr({keys.CAPACITY_LENGTHS: named})


def _tensor_name(buf, where, kernel) -> str:
    """The name of a tensor of the function being traced (declared or T.empty)."""
    if _STACK:
        tr = _STACK[-1]
        for n, b in tr.tensors.items():
            if b is buf:
                return n
        for b in tr.empties:
            if b is buf:
                return b.name
    if isinstance(buf, tvm.ir.Var) and buf.name:
        return buf.name
    raise KernelDefinitionError(f"{buf!r} is not a tensor of the function", kernel=kernel,
                                construct=where)


def _traced_name(buf) -> str:
    """A buffer's name in errors: a tensor parameter's or T.empty's, else its own."""
    try:
        return _tensor_name(buf, "", None)
    except KernelDefinitionError:
        return buf.name


def macro(func=None, *, hygienic=True):
    """`@T.macro`: a function inlined where it is called, from an eager function, a
    prim_func or another macro (TVMScript's macro in a prim_func)."""

    def decorate(fn):
        from core.language.script_cache import Macro
        script = Macro(fn, hygienic)
        traced = None

        @functools.wraps(fn)
        def call(*args, **kwargs):
            nonlocal traced
            if not tracing():
                return script(*args, **kwargs)
            if traced is None:
                traced = rewrite_function(fn)
            return traced(*args, **kwargs)

        call.__tl_macro__ = True
        return call

    return decorate(func) if func is not None else decorate


class StridedTensorType:
    """`T.StridedTensor(shape, dtype, strides=...)` and `T.StridedTensor[[shape], [strides],
    dtype]` over `make` (T.Tensor, which spells its own subscript form)."""

    def __init__(self, make):
        self._make = make

    def __call__(self, *args, **kwargs):
        return self._make(*args, **kwargs)

    def __getitem__(self, item):
        item = item if isinstance(item, tuple) else (item,)
        if len(item) != 3:
            raise KernelDefinitionError("write T.StridedTensor[[shape], [strides], dtype]",
                                        construct="T.StridedTensor")
        return self._make(item[0], item[2], strides=item[1])


# ---- runtime helpers the rewritten body calls (`__mt__.<name>`) ----------------------------

class _Unset:
    def __repr__(self):
        return "<unset>"


UNSET = _Unset()


class _TemplateDone(Exception):
    """Ends a template trace: every tensor parameter is declared."""


class TensorParam:
    """What a tensor parameter holds until its `A: T.Tensor(...)` declaration."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"<tensor parameter {self.name} (not declared yet)>"


def _as_list(v) -> list:
    """The vars a frame bound: one, or a sequence (a Python or FFI array)."""
    if isinstance(v, tvm.ir.Var) or not hasattr(v, "__len__"):
        return [v]
    return list(v)


def _is_tir(v) -> bool:
    return isinstance(var_value(v), tvm.ir.Expr)


def _expr(v):
    return var_value(v)


class Helpers:
    """The functions the rewritten body calls; one instance per process (`HELPERS`)."""

    UNSET = UNSET

    @staticmethod
    def loop(it, names):
        """`for names in it`: a TIR loop frame is entered once (its body emits the loop
        body); any other iterable runs as Python."""
        from tvm.script.ir_builder.base import IRBuilderFrame
        if not isinstance(it, IRBuilderFrame):
            _LOOPS.append("python")
            try:
                yield from it
            finally:
                _LOOPS.pop()
            return
        v = it.__enter__()
        vs = _as_list(v)
        for n, var in zip(names, vs):
            if n and isinstance(var, tvm.ir.Var):
                IRBuilder.name(n, var)
        _LOOPS.append("tir")
        try:
            yield v
        finally:
            _LOOPS.pop()
        it.__exit__(None, None, None)  # not reached when the body raised

    @staticmethod
    def while_cond(cond):
        if _is_tir(cond):
            tr = _STACK[-1] if _STACK else None
            raise KernelDefinitionError(
                f"`while {cond}` loops on a TIR condition, which is not supported; write a "
                "T.serial loop with an `if` guard", kernel=tr.name if tr else None,
                construct="while loop")
        return cond

    @staticmethod
    def jump(kind):
        """Before a `break`/`continue`: allowed in a Python loop, not in a TIR loop."""
        if _LOOPS and _LOOPS[-1] == "tir":
            tr = _STACK[-1] if _STACK else None
            raise KernelDefinitionError(
                f"`{kind}` inside a TIR loop (T.serial, T.Parallel, range, ...) is not "
                "supported; guard the body with `if` instead", kernel=tr.name if tr else None,
                construct="for loop")

    @staticmethod
    def name_vars(names, values):
        """Give the user's names to the vars a `with ... as names` bound."""
        if _STACK and _STACK[-1].consts is None:
            raise _TemplateDone  # a kernel begins: the declarations are behind us
        vs = _as_list(values)
        for n, v in zip(names, vs):
            if n and isinstance(v, tvm.ir.Var) and _DEFAULT_NAME.fullmatch(v.name):
                IRBuilder.name(n, v)

    @staticmethod
    def unpack_with(value, count):
        """The values `with ... as (a, b)` unpacks: a single TIR var (T.Kernel's one block
        index) is one value, as TileLang's `as (bx,)` reads it."""
        if isinstance(value, tvm.ir.Var):
            value = (value,)
        if isinstance(value, (tuple, list, tvm_ffi.Array)) and len(value) != count:
            current("with ... as").fail(
                "`with ... as (...)`", f"names {count} values but the context gives "
                f"{len(value)} (T.Kernel gives one block index per grid dimension)")
        return value

    @staticmethod
    def range(*args):
        """`range(...)` in a kernel function is a serial TIR loop, as in TVMScript."""
        step = args[2] if len(args) == 3 else 1
        start, stop = (0, args[0]) if len(args) == 1 else (args[0], args[1])
        if isinstance(step, Integral) and step == 1:
            return _ir.serial(start, stop)
        return _ir.serial(start, stop, step=step)

    @staticmethod
    def static(cond) -> bool:
        return not _is_tir(cond)

    @staticmethod
    def if_frame(cond):
        return _ir.If(_expr(cond))

    @staticmethod
    def then():
        return _ir.Then()

    @staticmethod
    def else_():
        return _ir.Else()

    @staticmethod
    def name_next(name):
        if _STACK:
            _STACK[-1].next_name = name

    @staticmethod
    def assign(name, prev, value):
        if _STACK:
            _STACK[-1].next_name = None
        if var_value(prev) is not prev and value is not prev:  # `x = ...` on a T.alloc_var
            _ir.buffer_store(var_value(prev).source, _expr(value), [0])
            return prev
        if isinstance(value, tvm.ir.Var) and _DEFAULT_NAME.fullmatch(value.name):
            IRBuilder.name(name, value)  # on-chip buffers and vars get the user's names
        return value

    @staticmethod
    def store(buf, index, value):
        if isinstance(buf, TensorParam):
            current("store").fail(f"tensor '{buf.name}'", "is stored to before its "
                                  f"`{buf.name}: T.Tensor(...)` declaration")
        idx = list(index) if isinstance(index, tuple) else [index]
        if slice_store.has_slice(idx):
            return slice_store.store(buf, idx, value)
        _ir.buffer_store(buf, _expr(value), [_expr(i) for i in idx])

    @staticmethod
    def expression_store(buf, index, value_of, where):
        if isinstance(buf, TensorParam):
            current("store").fail(f"tensor '{buf.name}'", "is stored to before its "
                                  f"`{buf.name}: T.Tensor(...)` declaration")
        slice_store.expression_store(buf, index, value_of, where, name_of=_traced_name)

    @staticmethod
    def aug_store(op, buf, index, value):
        idx = index if isinstance(index, tuple) else (index,)
        Helpers.store(buf, index, _BINOPS[op](buf[idx], _expr(value)))

    @staticmethod
    def declare(name, prev, ann):
        tr = current(f"tensor declaration '{name}'")
        if not isinstance(prev, TensorParam):
            tr.fail(f"tensor declaration '{name}: T.Tensor(...)'",
                    f"'{name}' is not a parameter of the function (or is declared twice); "
                    "only parameters are declared this way (make new tensors with T.empty)")
        if not (isinstance(ann, tvm.ir.Var) and hasattr(ann.ty, "shape")):
            tr.fail(f"parameter '{name}'", f"is annotated with {ann!r}; a tensor parameter "
                    "is declared with T.Tensor(shape, dtype) or T.Tensor[[shape], dtype]")
        tr.tensors[name] = ann
        if tr.consts is None and set(tr.tensors) >= tr.expected:
            raise _TemplateDone
        return ann

    @staticmethod
    def and_(left, right):
        if not _is_tir(left):
            return left and right()
        r = right()
        return tirx.And(_expr(left), _expr(r)) if _is_tir(r) else (left if r else False)

    @staticmethod
    def or_(left, right):
        if not _is_tir(left):
            return left or right()
        r = right()
        return tirx.Or(_expr(left), _expr(r)) if _is_tir(r) else (True if r else left)

    @staticmethod
    def not_(v):
        return tirx.Not(_expr(v)) if _is_tir(v) else not v

    @staticmethod
    def ifexp(cond, then, otherwise):
        if not _is_tir(cond):
            return then() if cond else otherwise()
        return tirx.if_then_else(_expr(cond), _expr(then()), _expr(otherwise()))


_BINOPS = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mult": lambda a, b: a * b,
           "Div": lambda a, b: a / b, "FloorDiv": lambda a, b: a // b,
           "Mod": lambda a, b: a % b, "BitAnd": lambda a, b: a & b,
           "BitOr": lambda a, b: a | b, "BitXor": lambda a, b: a ^ b,
           "LShift": lambda a, b: a << b, "RShift": lambda a, b: a >> b}

HELPERS = Helpers()
_DEFAULT_NAME = re.compile(r"(v|buffer)?(_\d+)?")
_H = "__mt__"


# ---- the AST rewrite -----------------------------------------------------------------------

def _h(attr):
    return ast.Attribute(value=ast.Name(_H, ast.Load()), attr=attr, ctx=ast.Load())


def _call(attr, *args):
    return ast.Call(func=_h(attr), args=list(args), keywords=[])


def _lambda(body):
    return ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[],
                                         kw_defaults=[], kwarg=None, defaults=[]), body=body)


def _target_names(t):
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [e.id if isinstance(e, ast.Name) else "" for e in t.elts]
    return [""]


def _sliced(sub) -> bool:
    """A subscript whose index has a slice (`A[0:N]`, `A[k, 0:N]`)."""
    s = sub.slice
    return isinstance(s, ast.Slice) or (
        isinstance(s, ast.Tuple) and any(isinstance(e, ast.Slice) for e in s.elts))


def _reads_slices(node) -> bool:
    return any(isinstance(n, ast.Subscript) and _sliced(n) for n in ast.walk(node))


_READER = "__mt_slice_reader__"


class _ThroughReader(ast.NodeTransformer):
    """`A[0:N]` -> `__mt_slice_reader__(A)[0:N]`: the value of an expression store reads
    each slice at the T.Parallel's element (slice_store.SliceReader)."""

    def visit_Subscript(self, sub):
        sub = self.generic_visit(sub)
        if not _sliced(sub):
            return sub
        return ast.Subscript(value=ast.Call(func=ast.Name(_READER, ast.Load()),
                                            args=[sub.value], keywords=[]),
                             slice=sub.slice, ctx=ast.Load())


class _Rewriter(ast.NodeTransformer):
    def __init__(self, params, line_offset=0):
        self.params = set(params)
        self.line_offset = line_offset

    def _expression_store(self, node, target, value):
        """`B[0:N] = A[0:N] * 2` -> slice_store.expression_store(B, index, value_of,
        where): a T.Parallel over B's slice, `value_of(reader)` the value at one element."""
        where = f"line {node.lineno + self.line_offset}: {ast.unparse(node)}"
        value_of = ast.Lambda(args=ast.arguments(posonlyargs=[], args=[ast.arg(_READER)],
                                                 vararg=None, kwonlyargs=[], kw_defaults=[],
                                                 kwarg=None, defaults=[]),
                              body=_ThroughReader().visit(value))
        return ast.Expr(_call("expression_store", target.value, target.slice, value_of,
                              ast.Constant(where)))

    def visit_FunctionDef(self, node):  # nested defs (macros) are rewritten when called
        return node

    def visit_For(self, node):
        self.generic_visit(node)
        if node.orelse:
            raise SyntaxError("for ... else is not supported in a kernel function")
        it = node.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
            it = ast.Call(func=_h("range"), args=it.args, keywords=it.keywords)
        names = ast.Tuple([ast.Constant(n) for n in _target_names(node.target)], ast.Load())
        node.iter = _call("loop", it, names)
        return node

    def visit_While(self, node):
        self.generic_visit(node)
        node.test = _call("while_cond", node.test)
        return node

    def visit_Break(self, node):
        return [ast.Expr(_call("jump", ast.Constant("break"))), node]

    def visit_Continue(self, node):
        return [ast.Expr(_call("jump", ast.Constant("continue"))), node]

    def visit_With(self, node):
        self.generic_visit(node)
        named = []
        for n, item in enumerate(node.items):
            targets = item.optional_vars
            if isinstance(targets, (ast.Tuple, ast.List)):
                # `as (bx,)`: the values are unpacked by `unpack_with` (one block index)
                tmp = f"__mt_with_{n}__"
                item.optional_vars = ast.Name(tmp, ast.Store())
                named.append(ast.Assign(targets=[targets], value=_call(
                    "unpack_with", ast.Name(tmp, ast.Load()), ast.Constant(len(targets.elts)))))
            if item.optional_vars is not None:
                names = ast.Tuple([ast.Constant(n) for n in _target_names(item.optional_vars)],
                                  ast.Load())
                value = ast.parse(ast.unparse(targets), mode="eval").body
                named.append(ast.Expr(_call("name_vars", names, value)))
        node.body = named + node.body
        return node

    def visit_If(self, node):
        self.generic_visit(node)
        cond = ast.Name("__mt_cond__", ast.Store())
        py_if = ast.If(test=ast.Name("__mt_cond__", ast.Load()), body=node.body,
                       orelse=node.orelse)
        tir = [ast.With(items=[ast.withitem(_call("then"))], body=node.body)]
        if node.orelse:
            tir.append(ast.With(items=[ast.withitem(_call("else_"))], body=node.orelse))
        tir_if = ast.With(items=[ast.withitem(_call("if_frame",
                                                    ast.Name("__mt_cond__", ast.Load())))],
                          body=tir)
        return [ast.Assign(targets=[cond], value=node.test),
                ast.If(test=_call("static", ast.Name("__mt_cond__", ast.Load())),
                       body=[py_if], orelse=[tir_if])]

    def visit_Assign(self, node):
        t = node.targets[0] if len(node.targets) == 1 else None
        if isinstance(t, ast.Subscript) and _sliced(t) and _reads_slices(node.value) and \
                not (isinstance(node.value, ast.Subscript) and _sliced(node.value)):
            self.generic_visit(node)
            return self._expression_store(node, t, node.value)
        self.generic_visit(node)
        if len(node.targets) != 1:
            return node
        if isinstance(t, ast.Subscript):
            return ast.Expr(_call("store", t.value, t.slice, node.value))
        if isinstance(t, ast.Name):
            prev = ast.Call(func=ast.Attribute(ast.Call(ast.Name("locals", ast.Load()), [], []),
                                               "get", ast.Load()),
                            args=[ast.Constant(t.id), _h("UNSET")], keywords=[])
            return [ast.Expr(_call("name_next", ast.Constant(t.id))),
                    ast.Assign(targets=[t], value=_call("assign", ast.Constant(t.id), prev,
                                                        node.value))]
        return node

    def visit_AugAssign(self, node):
        t = node.target
        if isinstance(t, ast.Subscript) and _sliced(t):   # `B[0:N] += A[0:N]`
            self.generic_visit(node)
            read = ast.Subscript(value=t.value, slice=t.slice, ctx=ast.Load())
            return self._expression_store(node, t, ast.BinOp(left=read, op=node.op,
                                                             right=node.value))
        self.generic_visit(node)
        op = type(node.op).__name__
        if isinstance(t, ast.Subscript):
            return ast.Expr(_call("aug_store", ast.Constant(op), t.value, t.slice, node.value))
        if isinstance(t, ast.Name):
            value = ast.BinOp(left=ast.Name(t.id, ast.Load()), op=node.op, right=node.value)
            return ast.Assign(targets=[ast.Name(t.id, ast.Store())],
                              value=_call("assign", ast.Constant(t.id),
                                          ast.Name(t.id, ast.Load()), value))
        return node

    def visit_AnnAssign(self, node):
        self.generic_visit(node)
        if not isinstance(node.target, ast.Name):
            return node
        name = node.target.id
        if node.value is None:
            if name not in self.params:
                return ast.Expr(_call("declare", ast.Constant(name), _h("UNSET"),
                                      node.annotation))
            return ast.Assign(targets=[ast.Name(name, ast.Store())],
                              value=_call("declare", ast.Constant(name),
                                          ast.Name(name, ast.Load()), node.annotation))
        return ast.Assign(targets=[ast.Name(name, ast.Store())], value=node.value)

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        fn = "and_" if isinstance(node.op, ast.And) else "or_"
        expr = node.values[-1]
        for v in reversed(node.values[:-1]):
            expr = _call(fn, v, _lambda(expr))
        return expr

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return _call("not_", node.operand)
        return node

    def visit_IfExp(self, node):
        self.generic_visit(node)
        return _call("ifexp", node.test, _lambda(node.body), _lambda(node.orelse))


def rewrite_function(fn):
    """`fn` with its body rewritten for tracing (see the module docstring); same name,
    parameters, globals and closure values, line numbers of the original source."""
    try:
        source = _read_source(fn)
        filename = inspect.getsourcefile(fn) or "<kernel>"
        first = fn.__code__.co_firstlineno
    except (OSError, TypeError) as exc:
        raise KernelDefinitionError(f"cannot read the function's source ({exc}); an eager "
                                    "kernel function must be defined in a file",
                                    kernel=getattr(fn, "__name__", None)) from None
    tree = ast.parse(source)
    node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    node.decorator_list = []
    params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
    # Every argument is passed by name (core/jit.py binds defaults from `fn` itself), so
    # the rewritten function needs neither defaults nor annotations.
    node.args.defaults = []
    node.args.kw_defaults = [None] * len(node.args.kwonlyargs)
    for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
        a.annotation = None
    try:
        node.body = [_Rewriter(params, first - 1).visit(s) for s in node.body]
        flat = []
        for s in node.body:
            flat.extend(s if isinstance(s, list) else [s])
        node.body = flat
    except SyntaxError as exc:
        raise KernelDefinitionError(str(exc), kernel=fn.__name__) from None
    freevars = fn.__code__.co_freevars
    factory = ast.FunctionDef(
        name="__mt_factory__",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(_H)] + [ast.arg(v) for v in freevars],
                           vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                           defaults=[]),
        body=[node, ast.Return(ast.Name(node.name, ast.Load()))], decorator_list=[],
        returns=None, type_params=[])
    module = ast.Module(body=[factory], type_ignores=[])
    _fix_nested(module)
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, first - 1)
    code = compile(module, filename, "exec")
    scope: dict = {}
    exec(code, fn.__globals__, scope)  # noqa: S102 - the user's own function, rewritten
    cells = [c.cell_contents for c in (fn.__closure__ or ())]
    return scope["__mt_factory__"](HELPERS, *cells)


def _fix_nested(module):
    """Nested `__mt_cond__` / rewritten lists: flatten statement lists everywhere."""
    for n in ast.walk(module):
        for attr in ("body", "orelse"):
            stmts = getattr(n, attr, None)
            if isinstance(stmts, list) and any(isinstance(s, list) for s in stmts):
                flat = []
                for s in stmts:
                    flat.extend(s if isinstance(s, list) else [s])
                setattr(n, attr, flat)


# ---- the signature of an eager function ----------------------------------------------------

def is_scalar_type(ann) -> bool:
    """A T scalar type used as a parameter annotation (`n: T.int32`): a runtime scalar."""
    from core.language.dtypes import dtype
    return isinstance(ann, dtype) or hasattr(ann, "_dtype_str")


def _read_source(fn) -> str:
    """The dedented source of `fn` (`inspect.getsource`, which tokenizes the function's
    block), read once per code object: `core.jit`, `is_eager_function` and the rewrite
    each need it. Raises OSError/TypeError when `fn` has none."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    kept = script_cache.kept_for(code) if code is not None else {}
    if "dedented source" not in kept:
        kept["dedented source"] = textwrap.dedent(inspect.getsource(fn))
    return kept["dedented source"]


def _source(fn) -> str | None:
    """The dedented source of `fn`; None when it has none (a builtin, a REPL definition)."""
    try:
        return _read_source(fn)
    except (OSError, TypeError):
        return None


def declared_tensors(fn, source: str | None = None) -> list:
    """Parameters declared as tensors in the body (`A: T.Tensor(...)`), from the source."""
    source = source if source is not None else _source(fn)
    if source is None:
        return []
    return list(_declared_in(source))


@functools.lru_cache(maxsize=256)
def _declared_in(source: str) -> tuple:
    tree = ast.parse(source)
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
                None)
    if node is None:   # a lambda (its source is the lines around it): no statements
        return ()
    params = {a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs}
    found = []
    for s in ast.walk(node):
        if isinstance(s, ast.AnnAssign) and s.value is None and isinstance(s.target, ast.Name) \
                and s.target.id in params and s.target.id not in found:
            found.append(s.target.id)
    return tuple(found)


def is_eager_function(fn) -> bool:
    """Does `fn` look like an eager kernel function (declares tensors or uses T.const /
    T.empty / T.Kernel in its body) rather than a factory returning a prim_func?"""
    src = _source(fn)
    if src is None:
        return False
    if declared_tensors(fn, src):
        return True
    return bool(re.search(r"\bT\.(const|empty|Kernel)\s*\(", src)) and "@T.prim_func" not in src


# ---- tracing ---------------------------------------------------------------------------------

@dataclass
class Traced:
    func: object                 # tvm PrimFunc (None for a template trace)
    tensors: dict                # tensor parameter name -> declared buffer
    inputs: tuple                # names of the input parameters (tensors, scalars), in order
    outputs: tuple               # names of the returned tensors, in return order
    single_output: bool          # `return C` (not a tuple)
    const_vars: dict             # template trace: const name -> Var


def trace(rewritten, name: str, signature: inspect.Signature, tensor_params, scalar_params,
          python_values: dict, consts: dict | None) -> Traced:
    """Run the rewritten function under the IR builder; returns the PrimFunc and its
    parameter roles. `consts` None is the template trace."""
    tr = Trace(name, consts, expected=set(tensor_params))
    args = dict(python_values)
    scalars = {}
    for p in tensor_params:
        args[p] = TensorParam(p)
    for p, dtype in scalar_params.items():
        scalars[p] = tirx.Var(p, dtype)
        args[p] = scalars[p]
    _STACK.append(tr)
    try:
        with IRBuilder() as ib:
            with _ir.prim_func():
                _ir.func_name(name)
                try:
                    ret = rewritten(**args)
                except _TemplateDone:
                    if consts is not None:
                        raise
                    return Traced(None, dict(tr.tensors), (), (), False, dict(tr.const_vars))
                except TypeError as err:
                    if "TensorRegion" not in str(err):
                        raise
                    _slice_arithmetic(tr, err)
                outputs, single = _outputs(tr, ret)
                missing = [p for p in tensor_params if p not in tr.tensors]
                if missing:
                    tr.fail(f"parameter '{missing[0]}'", "is never declared; write "
                            f"`{missing[0]}: T.Tensor(shape, dtype)` in the body")
                inputs = []
                for p in signature.parameters:
                    if p in tr.tensors:
                        _ir.arg(p, tr.tensors[p])
                        inputs.append(p)
                    elif p in scalars:
                        _ir.arg(p, scalars[p])
                        inputs.append(p)
                out_ids = {id(b) for b in outputs}
                workspaces = [b for b in tr.empties if id(b) not in out_ids]
                for b in outputs + workspaces:
                    _ir.arg(b.name, b)
                if workspaces:
                    _ir.func_attr({keys.WORKSPACES: [b.name for b in workspaces]})
                if tr.capacity:
                    _ir.func_attr({keys.CAPACITY_DIMS: tr.capacity})
                if tr.input_capacity:  # checked by core.jit (core/ir/capacity.py)
                    _ir.func_attr({keys.TILELANG_CAPACITY_DIMS: tr.input_capacity})
                if tr.lengths:
                    _ir.func_attr({keys.CAPACITY_LENGTHS: tr.lengths})
        func = ib.get()
    except MetaltileError as exc:
        if exc.kernel is None:
            exc.kernel = name
            exc.args = (exc._format(),)
        raise
    finally:
        _STACK.pop()
    if consts is None:
        return Traced(None, dict(tr.tensors), (), (), False, dict(tr.const_vars))
    return Traced(func, dict(tr.tensors), tuple(inputs), tuple(b.name for b in outputs),
                  single, dict(tr.const_vars))


def _slice_arithmetic(tr: Trace, err: TypeError):
    """Arithmetic on a buffer slice (`A[0:N] * 2`): Python evaluates it before the store
    sees it, and a slice is a region, not a value. Named with the user's line."""
    import traceback

    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if not f.filename.startswith(_PACKAGE_DIR)]
    where = f"line {frames[-1].lineno}: {frames[-1].line}" if frames else "a slice expression"
    tr.fail(where, f"computes with a buffer slice ({err}) outside a store to a slice; a "
            "slice is a region: store an expression over slices directly "
            "(`B[a:b] = A[a:b] * 2`, an element-wise T.Parallel) or write the loop")


_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])


def _outputs(tr: Trace, ret):
    if ret is None:
        return [], False
    single = not isinstance(ret, (tuple, list))
    values = [ret] if single else list(ret)
    made = {id(b) for b in tr.empties}
    out = []
    for i, v in enumerate(values):
        if id(v) not in made:
            param = next((n for n, b in tr.tensors.items() if b is v), None)
            what = f"parameter '{param}'" if param else f"{type(v).__name__} {v!r}"[:80]
            tr.fail("return", f"returns {what} at position {i}; an eager function returns "
                    "tensors made with T.empty(shape, dtype) (one or a tuple)")
        if any(v is o for o in out):
            tr.fail("return", f"returns T.empty tensor '{v.name}' twice")
        out.append(v)
    names = [b.name for b in tr.empties]
    for b in tr.empties:  # unique parameter names (two `C = T.empty` in a loop, ...)
        if names.count(b.name) > 1:
            tr.fail(f"T.empty '{b.name}'", "two tensors made with T.empty share this name; "
                    "assign them to different variables")
    return out, single
