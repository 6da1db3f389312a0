"""Parsing T.* functions without re-reading their source: TVMScript's inputs, cached.

TVMScript rebuilds a function's `Source` (its lines, plus `inspect.getsource` of the whole
module) and re-parses its AST every time a `@T.prim_func` is decorated, and again on every
*call* of a `@T.macro`; and a macro call finds the active parser through
`inspect.getouterframes`, which reads the source file of every frame on the stack. The
families build their kernels (and define their macros) inside functions, so a bench case
paid these for every build and every macro use. This module gives TVMScript the same
values from caches:

    source_of(fn)            TVMScript's `Source` of fn, built once per code object; its
                             `as_ast()` parses once and returns the same doc AST after
    resolve_closure_vars     TVMScript's lookup of names used only in string annotations,
                             with those names read from the cached doc AST
    parse(fn, extra_vars)    `tvm.script.parser.core.entry.parse(fn, extra_vars,
                             check_well_formed=False)`, reading `source_of(fn)`
    Macro(fn, hygienic)      TVMScript's TIR macro (`T.macro` in a prim_func) reading
                             `source_of(fn)`, finding the parser by a plain frame walk
    install()                TVMScript's expression evaluator compiles every operation it
                             cannot fold itself (a call, an attribute, a subscript, a tuple of
                             already-evaluated operands) into Python code and evals it; the
                             code of such an expression is kept by its shape (node types,
                             names, constants), so each shape is compiled once per process;
                             so is the code that binds an assignment's targets (plain names
                             are bound without code); a parameter annotation with no
                             `T.Buffer(...)` in it is evaluated as it stands (TVMScript copies
                             it and converts it to a Python AST and back to rewrite the
                             shapes of `T.Buffer` calls, and only those); and a function's
                             source lines end where its compiled code says (`source_lines`)

Contract: the parse result is the one TVMScript's own entry points give (same parser, same
visitors, same variable tables; only where the source text, its AST and the evaluator's
compiled code come from changes).
The cache key is the function's code object itself (identity, held weakly): a function
defined again by running its `def` shares the code object and so the entry; new code (a
reloaded module, `exec`) gets a new entry, and an entry goes when its code object does.
The doc AST is shared between parses. TVMScript's visitors read it; the one write is an
idempotent normalisation (a slice call argument `a[i:j]` gets an explicit step 1 before it
is evaluated, evaluator.py), so every visit after the first sees what the first one saw.
"""

from __future__ import annotations

import ast
import inspect
import sys
import weakref

import tvm_ffi
from tvm.script.ir_builder import IRBuilder
from tvm.script.parser.core import doc
from tvm.script.parser.core import diagnostics
from tvm.script.parser.core import entry as _entry
from tvm.script.parser.core import evaluator, utils
from tvm.script.parser.core.diagnostics import Source
from tvm.script.parser.core.evaluator import ExprEvaluator
from tvm.script.parser.core.evaluator import _eval_assign as _tvm_eval_assign
from tvm.script.parser.core.evaluator import _eval_expr as _tvm_eval_expr
from tvm.script.parser.core.error import ParserError
from tvm.script.parser.core.parser import Parser, ScriptMacro
from tvm.script.parser.tirx.entry import TIRMacro
from tvm.tirx.script.parser import parser as _tirx_parser

from core.errors import KernelDefinitionError


_ATOMIC = frozenset({int, float, str, bool, bytes, complex, type(None), type(Ellipsis)})


def _to_doc(node):
    """`doc.to_doc(node)`: the doc AST of a Python AST, from the same registry entries.
    TVMScript's conversion looks each node's class name up, checks every field value
    against a list and six types through `isinstance` and runs each class's constructor
    chain; this keeps each class's entry and fills the new node's attributes in one step,
    in the order its constructor would."""
    kind = type(node)
    if kind in _ATOMIC:
        return node
    if kind is list:
        return [_to_doc(n) for n in node]
    if kind is tuple:
        return tuple(_to_doc(n) for n in node)
    entry = _TO_DOC.get(kind)
    if entry is None:
        entry = _TO_DOC[kind] = _to_doc_entry(node)
    if type(entry) is tuple:
        doc_cls, fields = entry
        made = object.__new__(doc_cls)
        values = made.__dict__
        for f in fields:
            value = getattr(node, f, None)
            values[f] = value if type(value) in _ATOMIC else _to_doc(value)
        return made
    return entry(node)


def _to_doc_entry(node):
    """(doc class, fields in the order its constructor stores them) where TVMScript's entry
    for `node`'s class is its default field by field copy into a constructor that only
    stores its arguments (checked once per class), else the callable TVMScript uses."""
    if doc._is_atomic_type(node) or isinstance(node, (list, tuple)):
        return doc.to_doc        # a subclass of a value type: TVMScript decides
    convert = doc._get_registry_entry(type(node).__name__, "to_doc")
    if getattr(convert, "func", None) is not doc.to_doc or not hasattr(convert, "doc_cls"):
        return convert or doc.to_doc  # doc.to_doc raises TVMScript's error for no entry
    doc_cls = convert.doc_cls
    probe = {f: object() for f in convert.fields}
    stored = doc_cls(**probe).__dict__
    if (doc_cls.__new__ is not object.__new__ or stored.keys() != probe.keys()
            or any(stored[f] is not probe[f] for f in probe)):
        return convert
    return doc_cls, tuple(stored)


_TO_DOC: dict = {}


class CachedSource(Source):
    """A `Source` whose doc AST is parsed once (TVMScript parses it on every `as_ast`),
    by `doc.parse`'s steps with the conversion of `_to_doc`, and whose IR source spans are
    made once per source range (TVMScript makes a new `Span` and `SourceName` through the
    FFI for every expression it evaluates; spans are immutable, so IR nodes share them)."""

    def to_span(self, node):
        spans = self.__dict__.get("_spans")
        if spans is None:
            spans = self._spans = {}
        where = self.location(node)
        span = spans.get(where)
        if span is None:
            span = spans[where] = super().to_span(node)
        return span

    def as_ast(self):
        tree = self.__dict__.get("_tree")
        if tree is None:
            try:
                program = ast.parse(self.source, filename="<unknown>", mode="exec",
                                    feature_version=(3, 8))
            except Exception:  # noqa: BLE001 - doc.parse retries any failure without a version
                program = ast.parse(self.source, filename="<unknown>", mode="exec")
            tree = self._tree = _to_doc(program)
        return tree


_TVM_SOURCE_LINES = diagnostics.getsourcelines


def _last_line(code) -> int:
    """The last source line any instruction of `code`, or of code nested in it, spans."""
    last = max((end for _, end, _, _ in code.co_positions() if end is not None), default=0)
    for const in code.co_consts:
        if isinstance(const, type(code)):
            last = max(last, _last_line(const))
    return last


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def source_lines(obj):
    """TVMScript's `getsourcelines(obj)`: the lines of obj's definition (decorators
    first) and the number of its first line. TVMScript finds where the definition ends
    with `inspect.getblock`, which runs Python's tokenizer over it (about 30 us a line,
    paid once per function and process); for a function the end is read from its compiled
    code instead: the last line its instructions span, taken when the next line that is
    not blank is code indented no deeper than the `def`. Otherwise the tokenizer decides:
    the body's last statements compiled to nothing (`pass`), or a comment follows (the
    tokenizer keeps those indented like the body)."""
    fn = inspect.unwrap(obj)
    if not inspect.isfunction(fn):
        return _TVM_SOURCE_LINES(obj)
    lines, first = diagnostics.findsource(fn)
    end = _last_line(fn.__code__)
    if end <= first:
        return _TVM_SOURCE_LINES(obj)
    after = next((line for line in lines[end:] if line.strip()), None)
    if after is not None and (after.lstrip().startswith("#")
                              or _indent(after) > _indent(lines[first])):
        return _TVM_SOURCE_LINES(obj)
    return lines[first:end], first + 1


_SOURCES: dict[int, tuple[weakref.ref, dict]] = {}   # id(code) -> (its ref, what is kept)


def _kept(fn) -> dict:
    """What is kept for the code object of `fn` (an empty dict the first time)."""
    return kept_for(fn.__code__)


def kept_for(code) -> dict:
    """What is kept for a code object (an empty dict the first time; it goes with the
    code object): the entries of this module, and the eager rewrite's source text."""
    key = id(code)
    hit = _SOURCES.get(key)
    if hit is not None and hit[0]() is code:
        return hit[1]
    kept: dict = {}
    _SOURCES[key] = (weakref.ref(code, lambda _ref, key=key: _SOURCES.pop(key, None)), kept)
    return kept


def source_of(fn) -> CachedSource:
    """TVMScript's `Source(fn)`, built once per code object of `fn`."""
    kept = _kept(fn)
    if "source" not in kept:
        kept["source"] = CachedSource(fn)
    return kept["source"]


_STATEMENT_LISTS = ("body", "orelse", "finalbody", "handlers", "cases")


def _annotation_names(tree):
    """`utils._collect_annotation_names`: the names in the parameter and return annotations
    of every function defined in `tree` (TVMScript reads and parses the source again).
    A function definition is a statement, and statements sit only in the statement lists
    of their parents (a body, an else branch, a handler, a match case), so only those are
    walked, not the expressions that make up most of the tree."""
    names: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if type(node) is doc.FunctionDef:   # the doc AST has no async functions
            args = node.args
            for annotation in [a.annotation for a in args.args + args.posonlyargs
                               + args.kwonlyargs] + [node.returns]:
                names.update(_names_in(annotation))
        for field in _STATEMENT_LISTS:
            block = getattr(node, field, None)
            if type(block) is list:
                stack.extend(block)
    return names


def _names_in(node):
    if type(node) is doc.Name:
        yield node.id
    elif isinstance(node, (list, tuple)):
        for item in node:
            yield from _names_in(item)
    elif isinstance(node, doc.AST):
        for field in node._FIELDS:
            yield from _names_in(getattr(node, field, None))


def resolve_closure_vars(fn, extra_vars: dict, outer_stack: list) -> None:
    """TVMScript's `utils.resolve_closure_vars(fn, extra_vars, outer_stack)` (names used only
    in string annotations, under `from __future__ import annotations`, looked up in the
    enclosing functions' frames), with the names read from the cached doc AST of fn."""
    if not utils._has_string_annotations(fn):
        return
    kept = _kept(fn)
    if "annotation_names" not in kept:
        try:
            names = _annotation_names(source_of(fn).as_ast())
        except Exception:  # noqa: BLE001 - no source or no doc AST: parse reports it
            names = utils._collect_annotation_names(fn)
        kept["annotation_names"] = frozenset(names)
    enclosing = utils._get_enclosing_scope_names(fn.__qualname__)
    for name in kept["annotation_names"]:
        if name not in extra_vars:
            for frame_info in outer_stack[1:]:
                if frame_info.frame.f_code.co_name in enclosing:
                    if name in frame_info.frame.f_locals:
                        extra_vars[name] = frame_info.frame.f_locals[name]
                        break


def parse(fn, extra_vars: dict):
    """`entry.parse(fn, extra_vars, check_well_formed=False)` on the cached source of fn."""
    parser = Parser(source_of(fn), {fn.__name__: fn.__annotations__})
    with IRBuilder() as builder:
        try:
            parser.parse(extra_vars=extra_vars)
        except ParserError as err:
            parser.report_error(err.node, err.args[0])
    return builder.get()


def _active_parser(skip: int):
    """The parser a macro call runs in: the first frame outward whose globals hold it
    (TVMScript's evaluator puts it there), as `ScriptMacro._find_parser_def` finds it."""
    frame = sys._getframe(skip + 1)
    while frame is not None:
        parser = frame.f_globals.get(ScriptMacro.parser_object_name)
        if parser is not None:
            return parser
        frame = frame.f_back
    raise RuntimeError(f"{ScriptMacro.parser_object_name} not available")


class Macro(TIRMacro):
    """TVMScript's TIR macro of `fn` (what `tvm.script.tirx.macro` builds), on the cached
    source and AST, with the parser found without reading any source file."""

    def __init__(self, fn, hygienic: bool):
        closure_vars = utils.inspect_function_capture(fn) or _entry._default_globals()
        super().__init__(source_of(fn), closure_vars, fn, hygienic)

    def _find_parser_def(self):
        return _active_parser(1)


# -- the evaluator's compiled expressions ------------------------------------------------

def _ctx(node) -> str:
    return type(node.ctx).__name__


def _key(node):
    """The shape of an expression the evaluator compiles, or None for one it is not kept
    for: everything that decides the compiled code except source positions (which only
    number the lines of the `<ast>` frame in a traceback)."""
    kind = type(node)
    if kind is doc.Name:
        return ("Name", node.id, _ctx(node))
    if kind is doc.Constant:
        return ("Constant", type(node.value).__name__, repr(node.value))
    if kind is doc.Attribute:
        inner = _key(node.value)
        return None if inner is None else ("Attribute", inner, node.attr, _ctx(node))
    if kind is doc.Subscript:
        inner, index = _key(node.value), _key(node.slice)
        if inner is None or index is None:
            return None
        return ("Subscript", inner, index, _ctx(node))
    if kind is doc.Tuple or kind is doc.List:
        elts = tuple(_key(e) for e in node.elts)
        return None if None in elts else (kind.__name__, elts, _ctx(node))
    if kind is doc.Slice:
        parts = tuple(None if p is None else _key(p)
                      for p in (node.lower, node.upper, node.step))
        if any(k is None and p is not None
               for k, p in zip(parts, (node.lower, node.upper, node.step))):
            return None
        return ("Slice", parts)
    if kind is doc.Call:
        func = _key(node.func)
        args = tuple(_key(a) for a in node.args)
        if func is None or None in args or any(kw.arg is None for kw in node.keywords):
            return None
        kws = tuple((kw.arg, _key(kw.value)) for kw in node.keywords)
        if any(k is None for _, k in kws):
            return None
        return ("Call", func, args, kws)
    return None


_CODE: dict = {}
_CODE_LIMIT = 8192   # shapes kept; a fuzz run's stream of new constants cannot grow it past


def _eval_expr(self, node):
    """`ExprEvaluator._eval_expr`: TVMScript's compile-and-eval of `node` in the
    evaluator's value table, with the compiled code of a known shape reused."""
    key = _key(node) if isinstance(node, doc.AST) else None
    if key is None or self.value_table is None:
        return _tvm_eval_expr(node, self.value_table)
    code = _CODE.get(key)
    if code is None:
        tree = doc.from_doc(node)
        tree = ast.fix_missing_locations(ast.Expression(body=tree))
        code = compile(tree, filename="<ast>", mode="eval")
        if len(_CODE) >= _CODE_LIMIT:
            _CODE.clear()
        _CODE[key] = code
    return eval(code, self.value_table)  # noqa: S307 - what TVMScript's evaluator does


_RHS = "__tvm_rhs_var__"   # the name TVMScript's assignment binds the value to
# containers whose iteration has no side effect: a wrong count goes to the compiled code,
# which iterates again and raises Python's own error
_UNPACKED = (tuple, list, tvm_ffi.Array)


def _is_var(value) -> bool:
    from tvm.ir import Var
    return isinstance(value, Var)


def _eval_assign(target, source):
    """`evaluator._eval_assign`: TVMScript's compile-and-exec of `target = <source>` (the
    names a statement's left-hand side binds), with the compiled code of a known target
    shape reused; a name, or names unpacking a tuple, list or TVM array of as many values,
    are bound directly."""
    kind = type(target)
    if kind is doc.Name and type(target.ctx) is doc.Store:
        return {target.id: source}
    if (kind is doc.Tuple or kind is doc.List) and type(source) in _UNPACKED \
            and type(target.ctx) is doc.Store \
            and all(type(e) is doc.Name and type(e.ctx) is doc.Store for e in target.elts):
        # `i, j = T.Parallel(...)`: Python's unpacking iterates the container once
        values = tuple(source) if type(source) is tvm_ffi.Array else source
        if len(values) == len(target.elts):
            bound = {}
            for name, value in zip(target.elts, values):
                bound[name.id] = value
            return bound
    if (kind is doc.Tuple or kind is doc.List) and _is_var(source) \
            and all(type(e) is doc.Name for e in target.elts):
        # `with T.Kernel(n) as (bx,)`: TileLang's one block index, unpacked
        if len(target.elts) != 1:
            raise KernelDefinitionError(
                f"names {len(target.elts)} values but gets one TIR variable (T.Kernel gives "
                "one block index per grid dimension)", construct="`... as (...)`")
        return {target.elts[0].id: source}
    key = _key(target) if isinstance(target, doc.AST) else None
    if key is None:
        return _tvm_eval_assign(target, source)
    key = ("Assign", key)
    code = _CODE.get(key)
    if code is None:
        tree = ast.Module(body=[ast.Assign(targets=[doc.from_doc(target)],
                                           value=ast.Name(id=_RHS, ctx=ast.Load()))],
                          type_ignores=[])
        code = compile(ast.fix_missing_locations(tree), filename="<ast>", mode="exec")
        if len(_CODE) >= _CODE_LIMIT:
            _CODE.clear()
        _CODE[key] = code
    bound = {_RHS: source}
    exec(code, {}, bound)  # noqa: S102 - what TVMScript's evaluator does
    del bound[_RHS]
    return bound


_TVM_SIGNATURE_ANNOTATION = _tirx_parser._eval_signature_annotation


def _is_buffer_call(node) -> bool:
    """`T.Buffer(...)`, the one call whose arguments TVMScript's signature rewrite touches."""
    func = node.func
    return (type(func) is doc.Attribute and func.attr == "Buffer"
            and type(func.value) is doc.Name and func.value.id == "T")


def _holds_buffer_call(node) -> bool:
    if isinstance(node, (list, tuple)):
        return any(_holds_buffer_call(n) for n in node)
    if not isinstance(node, doc.AST):
        return False
    if type(node) is doc.Call and _is_buffer_call(node):
        return True
    return any(_holds_buffer_call(getattr(node, f, None)) for f in node._FIELDS)


def _eval_signature_annotation(self, node, signature_dtypes, *, define_missing=True):
    """TVMScript's evaluation of a parameter or return annotation. Its rewrite (match-scope
    variables for the quoted shapes of `T.Buffer`, and a definition-before-use check of
    the names in them) changes only `T.Buffer` calls: an annotation without one (`T.Tensor
    ((M, K), dtype)`, `T.int32`) is evaluated as written, without the copy through a Python
    AST; TVMScript's own function does the rest."""
    if _holds_buffer_call(node):
        return _TVM_SIGNATURE_ANNOTATION(self, node, signature_dtypes,
                                         define_missing=define_missing)
    return self.eval_expr(node)


_installed = False


def install() -> None:
    """Let TVMScript's evaluator reuse compiled expressions and assignments, and evaluate
    plain parameter annotations directly (once per process)."""
    global _installed
    if not _installed:
        ExprEvaluator._eval_expr = _eval_expr
        evaluator._eval_assign = _eval_assign
        _tirx_parser._eval_signature_annotation = _eval_signature_annotation
        diagnostics.getsourcelines = source_lines
        _installed = True
