"""Conditions in kernels: Python values decide at trace time, TIR values at run time.

TVMScript's tirx parser takes `if c:` and `x if c else y` at trace time only when `c` is a
Python `bool`, and fails on any other Python value (`if use_bias:` with an int, `None`, a
list) with a message naming internal classes; a TIR ternary over non-scalar branches fails
inside an FFI call. `install()` wraps both rules:
    c a Python value (not a TIR expression)   decided by Python truthiness, as in Python
    c a TIR boolean                           `if` -> TIR If (unchanged); ternary -> a select
                                              (T.if_then_else) of two scalar values
    c a TIR integer or float                  Python truthiness too: `c != 0` (a Python value
                                              assigned to a name in a kernel, `use = panel and
                                              order == "mlx"` with panel = 0, is a TIR scalar)
and anything else is a KernelDefinitionError saying what the condition or branch was.
"""

from __future__ import annotations

import tvm
from tvm.script.parser.core import dispatch
from tvm.script.parser.core.evaluator import ExprEvaluator
from tvm.tirx.script import builder as T

from core.errors import KernelDefinitionError
from core.language.buffers import var_value

_installed = False


def _is_tir(value) -> bool:
    return tvm.ir.is_prim_expr(value) or isinstance(value, tvm.tirx.expr.ExprOp) or \
        var_value(value) is not value


def _describe(value) -> str:
    if tvm.tirx.is_buffer_var(value):
        return f"the buffer '{value.name}'"
    return f"a {type(value).__name__}"


def python_truth(value, construct: str) -> bool:
    """bool(value) for a trace-time Python value; a clear error where Python has none."""
    if isinstance(value, tvm.runtime.Object):
        raise KernelDefinitionError(
            f"the condition is {_describe(value)}, neither a Python value nor a TIR "
            "boolean expression", construct=construct)
    try:
        return bool(value)
    except Exception as exc:  # noqa: BLE001 - e.g. an array's ambiguous truth value
        raise KernelDefinitionError(f"the condition {value!r} has no truth value: {exc}",
                                    construct=construct) from None


def tir_truth(value, construct: str):
    """A TIR condition from TIR `value`: a boolean unchanged, a number `value != 0`."""
    value = var_value(value)
    if tvm.ir.is_prim_expr(value):
        dtype = str(value.ty.dtype)
        if dtype == "bool":
            return value
        if dtype.startswith(("int", "uint", "float", "bfloat")):
            return value != tvm.tirx.const(0, dtype)
    raise KernelDefinitionError(f"the condition {value} is not a boolean or a number",
                                construct=construct)


def _scalar_branch(value, which: str):
    if _is_tir(value) or isinstance(value, (int, float)):
        return var_value(value)
    raise KernelDefinitionError(
        f"the {which} branch is {_describe(value)}; a ternary on a kernel value selects "
        "between two scalar values (use an `if` statement to choose between statements or "
        "buffers)", construct="x if cond else y")


def _install_if_exp():
    original = ExprEvaluator._eval_if_exp

    def eval_if_exp(self, node):
        test = self._eval_expr(self._visit(node.test))
        if not isinstance(test, bool) and not _is_tir(test):
            chosen = node.body if python_truth(test, "x if cond else y") else node.orelse
            return self._eval_expr(self._visit(chosen))
        if isinstance(test, bool):
            return original(self, node)
        test = tir_truth(test, "x if cond else y")
        body = _scalar_branch(self._eval_expr(self._visit(node.body)), "first")
        orelse = _scalar_branch(self._eval_expr(self._visit(node.orelse)), "second")
        return tvm.tirx.op.if_then_else(test, body, orelse)

    ExprEvaluator._eval_if_exp = eval_if_exp


def _install_if_stmt():
    original = dispatch.get(token="tirx", type_name="If")

    def visit_if(self, node):
        predicate = self.eval_expr(node.test)
        if isinstance(predicate, bool):
            return original(self, node)
        if _is_tir(predicate):
            with T.If(tir_truth(predicate, "if statement")):
                with T.Then():
                    with self.var_table.with_frame():
                        self.visit_body(node.body)
                if node.orelse:
                    with T.Else():
                        with self.var_table.with_frame():
                            self.visit_body(node.orelse)
            return None
        if python_truth(predicate, "if statement"):
            self.visit_body(node.body)
        elif node.orelse:
            self.visit_body(node.orelse)
        return None

    dispatch.register(token="tirx", type_name="If")(visit_if)


def install() -> None:
    """Wrap TVMScript's `if` and ternary rules (once per process)."""
    global _installed
    if not _installed:
        _install_if_exp()
        _install_if_stmt()
        _installed = True
