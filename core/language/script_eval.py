"""TVMScript's expression evaluator, with the common expression shapes evaluated directly.

TVMScript evaluates an expression of a kernel (`T.copy(A[i, 0:4], S)`, `k * 4 + j`) node by
node: each node's operands are evaluated first and stored under a temporary name
(`__tvm_tmp_value_3`) in a copy of the variable table, then the node itself is rebuilt as a
Python AST over those names, compiled and `eval`ed (`ExprEvaluator._visit_node`), every
step inside a `contextmanager` that makes the node's source span current in the IR builder.
A bench kernel's parse spends most of its time there, and the first build in a process
compiles a few hundred such one-operation expressions.

`install()` gives `ExprEvaluator` a `_visit` and an `eval` (and `Parser` an `eval_expr`)
that compute the value of these node kinds directly from their operands' values, with no
temporary names, doc nodes, `compile` or `eval`:

    Name, Constant                     the value table, then builtins; the literal
    Attribute, Subscript (loads)       getattr / getitem
    Tuple, List (loads), Slice         tuple / list / slice of the operands
    Call (no *args, no **kwargs)       the call
    BinOp, UnaryOp, Compare            TVMScript's operator dispatch (`_eval_op`)
    BoolOp, IfExp                      TVMScript's own methods (they short-circuit)

Every other node kind (lambdas, comprehensions, starred, dicts, f-strings, stores) goes to
TVMScript's own `_visit`, whose operands come back through this one.

Each evaluation starts from the parser's variable table as a dict of the latest value of
every name in scope (`VarTable.get`), which TVMScript builds from every name the parse has
seen (the kernel function's globals and closure included: hundreds) for every expression.
`install()` keeps that dict up to date as names are added and frames left (the only two
ways the table changes) and hands out copies of it.

Contract: the value of every expression, every exception (raised through the parser's
`report_error` at the same node), every IR-builder call that can reach the IR (the same
source spans pushed and popped around the same nodes, `annotate_current_source_span` on
each operation's result) and the one write to the doc AST (a slice argument's explicit
step 1, evaluator.py) are those of TVMScript's evaluator, in the same order. What is left
out cannot reach the IR: the span of a name or a constant leaf (nothing is built while it
is current), and the temporary names, which live in a per-expression copy of the table.
`original()` restores TVMScript's evaluator for a block (the tests compare both).
"""

from __future__ import annotations

import builtins
import contextlib
import operator
import types

import tvm_ffi
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import _ffi_api as _builder_api
from tvm.script.parser.core import doc
from tvm.script.parser.core.error import ParserError
from tvm.script.parser.core.evaluator import ExprEvaluator, _eval_op
from tvm.script.parser.core.parser import Parser, ScriptMacro, VarTable

_TVM_VISIT = ExprEvaluator._visit
_TVM_EVAL = ExprEvaluator.eval
_TVM_PARSER_EVAL = Parser.eval_expr
_TVM_TABLE = (VarTable.add, VarTable.with_frame, VarTable.get)

# Values that are never TVM objects: `annotate_current_source_span` returns them unchanged,
# and skipping its `isinstance(value, Object)` spares the walk of Object's subclass tree
# that an ABC check of a new type costs (about 1 ms per class, once per process). The DSL
# adds the classes of its own values (`never_tvm_objects`).
_PLAIN = {int, float, bool, str, bytes, complex, type(None), tuple, list, dict,
          type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
          types.ModuleType, slice, range, type(Ellipsis)}


def never_tvm_objects(*classes) -> None:
    """Declare classes whose instances the evaluator returns without the span annotation
    (which only TVM objects take): the DSL's own values (`T.Kernel(...)`, `T.Tensor`, a
    dtype). Exact classes only: a subclass is checked as TVMScript checks it."""
    for cls in classes:
        if tvm_ffi.Object in cls.__mro__:
            raise TypeError(f"{cls.__name__} is a TVM object class")
        _PLAIN.add(cls)


_NO_SLICE_STEP = ("reads", "writes", "match_buffer")
_MISSING = object()


def _builtin(name: str, table: dict):
    """What a name missing from the table is in a compiled expression: a builtin."""
    found = table.get("__builtins__", builtins)
    found = found.__dict__ if isinstance(found, types.ModuleType) else found
    return found.get(name) if isinstance(found, dict) else None


def _name(ev, node):
    value = ev.value_table.get(node.id, _MISSING)
    if value is _MISSING and node.id not in ev.value_table:
        # TVMScript: an unknown name, or a builtin that is falsy, is undefined
        if not (builtin := _builtin(node.id, ev.value_table)):
            raise ParserError(node, f"Undefined variable: {node.id}")
        value = builtin
    return value


def _add_slice_steps(args) -> None:
    """TVMScript's normalisation of an operand `a[i:j]` to `a[i:j:1]` (evaluator.py)."""
    for arg in args:
        if type(arg) is not doc.Subscript:
            continue
        index = arg.slice
        if type(index) is doc.Slice:
            slices = (index,)
        elif type(index) is doc.Tuple:
            slices = [p for p in index.elts if type(p) is doc.Slice]
        else:
            continue
        for s in slices:
            if not s.step and s.upper and s.lower:
                s.step = doc.Constant(1, None, s.upper.lineno, s.upper.end_col_offset + 1,
                                      s.upper.lineno, s.upper.end_col_offset + 2)


def _reported(ev, node, compute, *args):
    """`compute(*args)`; an exception is reported at `node`, as TVMScript's evaluator does."""
    try:
        return compute(*args)
    except Exception as err:  # noqa: BLE001 - report_error raises the project's error
        ev.parser.report_error(node, err)


def _attribute(ev, node):
    return _reported(ev, node, getattr, _value(ev, node.value), node.attr)


def _subscript(ev, node):
    base = _value(ev, node.value)
    return _reported(ev, node, operator.getitem, base, _value(ev, node.slice))


def _tuple(ev, node):
    values = tuple(_value(ev, e) for e in node.elts)
    return values if type(node) is doc.Tuple else list(values)


def _slice(ev, node):
    lower = None if node.lower is None else _value(ev, node.lower)
    upper = None if node.upper is None else _value(ev, node.upper)
    step = None if node.step is None else _value(ev, node.step)
    return slice(lower, upper, step)


def _call_in_table(target, args, kwargs):
    return target(*args, **kwargs)


# A call runs in a frame whose globals are the value table, as in TVMScript's `eval`: a
# macro finds the parser that expands it there (`__current_script_parser__`)
_CALL = _call_in_table.__code__


def _call(ev, node):
    func = node.func
    if hasattr(func, "attr") and func.attr not in _NO_SLICE_STEP:
        _add_slice_steps(node.args)
    target = _value(ev, func)
    args = [_value(ev, a) for a in node.args]
    kwargs = {kw.arg: _spanned(ev, kw, _value, kw.value) for kw in node.keywords}
    return _reported(ev, node, types.FunctionType(_CALL, ev.value_table), target, args, kwargs)


def _bin_op(ev, node):
    _add_slice_steps((node.left, node.right))
    left, right = _value(ev, node.left), _value(ev, node.right)
    return _reported(ev, node, _eval_op, node.op, [left, right])


def _unary_op(ev, node):
    _add_slice_steps((node.operand,))
    return _reported(ev, node, _eval_op, node.op, [_value(ev, node.operand)])


def _chained(ops, values):
    """`a < b < c` as `(a < b) and (b < c)`, through TVMScript's operator table."""
    result = None
    for i, op in enumerate(ops):
        part = _eval_op(op, [values[i], values[i + 1]])
        result = part if result is None else _eval_op(doc.And(), [result, part])
    return result


def _compare(ev, node):
    _add_slice_steps((node.left, *node.comparators))
    values = [_value(ev, node.left)] + [_value(ev, c) for c in node.comparators]
    return _reported(ev, node, _chained, node.ops, values)


def _bool_op(ev, node):
    return _reported(ev, node, ev._eval_bool_op, node)


def _if_exp(ev, node):
    return _reported(ev, node, ev._eval_if_exp, node)


_LOADS = {doc.Attribute: _attribute, doc.Subscript: _subscript, doc.Tuple: _tuple,
          doc.List: _tuple}
_OPERATIONS = {doc.Slice: _slice, doc.BinOp: _bin_op, doc.UnaryOp: _unary_op,
               doc.Compare: _compare, doc.BoolOp: _bool_op, doc.IfExp: _if_exp}


def _handler(node):
    """This module's evaluation of `node`, or None where TVMScript's own is used."""
    kind = type(node)
    if kind in _OPERATIONS:
        return _OPERATIONS[kind]
    if kind in _LOADS:
        if type(node.ctx) is not doc.Load:
            return None
        if kind is doc.Tuple or kind is doc.List:
            return None if any(type(e) is doc.Starred for e in node.elts) else _tuple
        return _LOADS[kind]
    if kind is doc.Call:
        if any(type(a) is doc.Starred for a in node.args) or any(
                kw.arg is None for kw in node.keywords):
            return None
        return _call
    return None


def _spanned(ev, node, fn, arg):
    """`fn(ev, arg)` with `node`'s source span current in the IR builder, as
    `Parser.with_source_span(node)` makes it."""
    if (getattr(node, "lineno", None) is None or getattr(node, "col_offset", None) is None
            or not IRBuilder.is_in_scope()):
        return fn(ev, arg)
    builder = IRBuilder.current()
    _builder_api.IRBuilderPushSourceSpan(builder, ev.parser.diag.source.to_span(node))
    try:
        return fn(ev, arg)
    finally:
        _builder_api.IRBuilderPopSourceSpan(builder)


def _operation(ev, node):
    """An operation node's value, computed and annotated under its span (TVMScript's
    `_visit` -> `_visit_node` -> `_add_intermediate_result`)."""
    value = _handler(node)(ev, node)
    if type(value) in _PLAIN:
        return value
    return ev.parser.annotate_current_source_span(value)


def _value(ev, node):
    """The value TVMScript's evaluator gives `node` as an operand."""
    kind = type(node)
    if kind is doc.Name:
        return _name(ev, node)
    if kind is doc.Constant:
        return node.value
    if _handler(node) is not None:
        return _spanned(ev, node, _operation, node)
    result = _TVM_VISIT(ev, node)
    if type(result) is doc.Name:
        return _name(ev, result)
    if type(result) is doc.Constant:
        return result.value
    raise TypeError(f"Unexpected result type: {type(result)}")   # TVMScript's message


def _visit(self, node):
    """`ExprEvaluator._visit`: a doc node standing for the value of `node`."""
    if self.parser is None or type(node) in (list, tuple) or _handler(node) is None:
        return _TVM_VISIT(self, node)
    value = _spanned(self, node, _operation, node)
    name = f"__tvm_tmp_value_{self.new_value_count}"
    self.new_value_count += 1
    self.value_table[name] = value
    return doc.Name(id=name, ctx=doc.Load(), lineno=0, col_offset=0, end_lineno=None,
                    end_col_offset=None)


def _eval(parser, value_table, node):
    """`ExprEvaluator.eval`: the value of the expression `node`."""
    if parser is None or type(node) in (list, tuple):
        return _TVM_EVAL(parser, value_table, node)
    kind = type(node)
    if kind is not doc.Name and kind is not doc.Constant and _handler(node) is None:
        return _TVM_EVAL(parser, value_table, node)
    return _value(ExprEvaluator(parser, value_table), node)


def _parser_eval_expr(self, node, extra_vars=None):
    """`Parser.eval_expr`: the value of an expression of the function being parsed, in a
    table of the variables in scope (and `extra_vars`). TVMScript copies that fresh table
    once more before evaluating in it; the copy is left out, as is the `Object` check of
    the final span annotation for a plain Python value."""
    var_values = self.var_table.get()
    if extra_vars is not None:
        var_values.update(extra_vars)
    var_values[ScriptMacro.parser_object_name] = self
    value = ExprEvaluator.eval(self, var_values, node)
    return value if type(value) in _PLAIN else self.annotate_current_source_span(value)


# -- the variable table's latest values, kept up to date ------------------------------------

def _latest(table) -> dict:
    """{name: latest value} of `table`, built by TVMScript's `get` the first time."""
    latest = table.__dict__.get("_latest")
    if latest is None:
        latest = table._latest = _TVM_TABLE[2](table)
    return latest


def _sync(table, names) -> None:
    """Bring the kept latest values of `names` in line with the table's stacks."""
    latest = table.__dict__.get("_latest")
    if latest is None:
        return
    stacks = table.name2value
    for name in names:
        values = stacks.get(name)
        if values:
            latest[name] = values[-1]
        else:
            latest.pop(name, None)


def _table_add(self, var, value, allow_shadowing=False):
    """`VarTable.add`, keeping the latest values up to date."""
    _TVM_TABLE[0](self, var, value, allow_shadowing)
    _sync(self, (var,))


class _Frame:
    """TVMScript's frame context (`VarTable.with_frame`): leaving it pops the frame's names,
    whose latest values are brought up to date then."""

    __slots__ = ("table", "inner", "frame")

    def __init__(self, table, inner):
        self.table, self.inner, self.frame = table, inner, table.frames[-1]

    def __enter__(self):
        return self.inner.__enter__()

    def __exit__(self, *exc):
        names = tuple(self.frame.vars)
        try:
            return self.inner.__exit__(*exc)
        finally:
            _sync(self.table, names)


def _table_with_frame(self):
    return _Frame(self, _TVM_TABLE[1](self))


def _table_get(self):
    """`VarTable.get`: a new dict of the latest value of each name (callers add to it)."""
    return _latest(self).copy()


def install() -> None:
    """Use this evaluation in TVMScript's evaluator (idempotent)."""
    ExprEvaluator._visit = _visit
    ExprEvaluator.eval = staticmethod(_eval)
    Parser.eval_expr = _parser_eval_expr
    VarTable.add, VarTable.with_frame, VarTable.get = _table_add, _table_with_frame, _table_get


@contextlib.contextmanager
def original():
    """TVMScript's own evaluator (and variable table) for the duration of the block."""
    kept = (ExprEvaluator.__dict__["_visit"], ExprEvaluator.__dict__["eval"],
            Parser.__dict__["eval_expr"])
    kept_table = (VarTable.add, VarTable.with_frame, VarTable.get)
    ExprEvaluator._visit, ExprEvaluator.eval = _TVM_VISIT, staticmethod(_TVM_EVAL)
    Parser.eval_expr = _TVM_PARSER_EVAL
    VarTable.add, VarTable.with_frame, VarTable.get = _TVM_TABLE
    try:
        yield
    finally:
        ExprEvaluator._visit, ExprEvaluator.eval, Parser.eval_expr = kept
        VarTable.add, VarTable.with_frame, VarTable.get = kept_table
