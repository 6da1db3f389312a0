"""`@T.prim_func`: parse a TileLang-style Python function into a TIR PrimFunc.

TVMScript's tirx parser does the parsing, on a source and AST read once per function
(script_cache.py); every `T.*` name the function uses resolves to this package, whose
functions emit TIR through TVMScript's IR builder (loops, buffers, thread launches) or
tile-op calls (`core.ir.ops`). Errors raised while parsing come back as
`KernelDefinitionError` naming the kernel and the source line.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from types import SimpleNamespace

from tvm.script.parser._core import utils
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError, MetaltileError
from core.ir.capacity import check_capacity_dims
from core.ir.kernel import with_attr
from core.language import compare, conditions, script_cache, script_eval, slice_store
from core.language.buffers import Buffer
from core.language.dtypes import dtype
from core.language.kernel import Kernel

compare.install()     # int32 < int64 promotes inside kernels too (core/language/compare.py)
conditions.install()  # Python values decide `if` and ternaries at trace time (conditions.py)
slice_store.install()  # `B[a:b] = A[a:b]` is a T.copy, `B[a:b] = x` a T.fill (slice_store.py)
script_cache.install()  # the evaluator's compiled expressions are reused (script_cache.py)
script_eval.install()   # common expression shapes are evaluated directly (script_eval.py)
# the DSL's own values (T.Tensor/T.Buffer, T.Kernel(...), dtypes), and TVMScript's wrapper of
# a scalar load bound to a name
script_eval.never_tvm_objects(type(Buffer), Kernel, dtype,
                              *filter(None, [getattr(_ir, "scalar_wrapper", None)]))


def _project_error_in_chain(exc: BaseException) -> MetaltileError | None:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, MetaltileError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _located(err: MetaltileError, kernel: str, diag: str) -> MetaltileError:
    where = _first_source_line(diag)
    construct = err.construct or where
    if where and err.construct and where not in err.construct:
        construct = f"{err.construct} ({where})"
    new = type(err).__new__(type(err))
    MetaltileError.__init__(new, err.reason, kernel=err.kernel or kernel, construct=construct)
    return new


def _first_source_line(diag: str) -> str | None:
    for line in diag.splitlines():
        line = line.strip()
        if line.startswith("-->"):
            return "at " + line[3:].strip()
    return None


def _caller_frames() -> list:
    """The call stack as TVMScript's closure resolution reads it (`.frame` per entry);
    `inspect.stack()` gives the same but reads every frame's source file (~25 ms)."""
    frames, f = [], sys._getframe(1)
    while f is not None:
        frames.append(SimpleNamespace(frame=f))
        f = f.f_back
    return frames


def _annotation_error(fn) -> KernelDefinitionError | None:
    """A clear error for a parameter annotated with a string (`t: "float32"`), which
    TVMScript rejects with an FFI type mismatch. Read from the source (under
    `from __future__ import annotations` every __annotations__ value is a string)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)), None)
    for arg in node.args.args if node else ():
        ann = arg.annotation
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            return KernelDefinitionError(
                f"is annotated with the string {ann.value!r}; write a T type: T.float32, "
                "T.int32, ... for scalars, T.Tensor(shape, dtype) for buffers",
                kernel=fn.__name__, construct=f"parameter '{arg.arg}'")
    return None


def prim_func(func=None, **_options):
    """Decorator: parse `func` into a `tvm.tirx.PrimFunc` (TileLang's `@T.prim_func`)."""
    outer_stack = _caller_frames()

    def parse_func(fn):
        extra_vars = utils.inspect_function_capture(fn)
        script_cache.resolve_closure_vars(fn, extra_vars, outer_stack)
        try:
            parsed = script_cache.parse(fn, extra_vars)
        except MetaltileError as exc:
            raise _located(exc, fn.__name__, "") from None
        except Exception as exc:  # noqa: BLE001 - every parser failure becomes a project error
            project = _project_error_in_chain(exc)
            if project is not None:
                raise _located(project, fn.__name__, str(exc)) from None
            annotation = _annotation_error(fn)
            if annotation is not None:
                raise annotation from None
            raise KernelDefinitionError(
                f"cannot parse the kernel: {exc}", kernel=fn.__name__) from None
        parsed = with_attr(parsed, "global_symbol", fn.__name__)
        check_capacity_dims(parsed, fn.__name__)  # T.annotate_capacity_dims names tensors
        return parsed

    if func is not None:
        return parse_func(func)
    return parse_func


# TVMScript picks the dialect of a decorated function from its decorator's token.
prim_func.dispatch_token = "tirx"
