"""The parse caches (core/language/script_cache.py): a kernel factory built again reuses its
source and AST, yet every build parses its own values; a macro keeps working across uses
and builds; names in string annotations resolve per build; errors keep naming the kernel
and the line; the evaluator's compiled code is
kept per expression shape, with constants of different types kept apart; a source's doc
AST is the one TVMScript's conversion gives, and so are the names in its annotations."""

import ast
import importlib.util
import inspect
import textwrap

import pytest
import torch
import tvm
import tvm_ffi

import core
import core.language as T
from core.language import script_cache
from harness.check.compare import assert_close
from harness.bench import cases as benchcases
from harness.gen import moe
from tvm.script.parser.core import doc, utils
from tvm.tirx.script.parser import parser as tirx_parser


def _scaled_rows(scale, bias):
    @T.macro
    def affine_row(src, dst, row, a, b):
        for j in T.Parallel(64):
            dst[row, j] = src[row, j] * a + b

    @T.prim_func
    def scaled_rows(A: T.Tensor((4, 64), "float32"), C: T.Tensor((4, 64), "float32")):
        with T.Kernel(2, threads=64) as pair:
            affine_row(A, C, pair * 2, scale, bias)          # one macro, two uses
            affine_row(A, C, pair * 2 + 1, bias, scale)

    return scaled_rows, affine_row


def test_factory_rebuilt_reuses_source_and_parses_its_own_values(run):
    a = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    first, macro_1 = _scaled_rows(2.0, 0.5)
    entries = len(script_cache._SOURCES)
    second, macro_2 = _scaled_rows(-3.0, 1.25)
    assert len(script_cache._SOURCES) == entries
    source = script_cache.source_of(macro_1.__wrapped__)
    assert source is script_cache.source_of(macro_2.__wrapped__)
    assert source.as_ast() is source.as_ast()
    for func, (s, b) in ((first, (2.0, 0.5)), (second, (-3.0, 1.25))):
        expected = a.clone()
        expected[0::2] = a[0::2] * s + b
        expected[1::2] = a[1::2] * b + s
        assert_close(run(core.compile(func, out_idx=[1]), a), expected)


def test_same_name_in_two_modules_parses_each_body(tmp_path, run):
    a = torch.randn(64, generator=torch.Generator().manual_seed(1))
    funcs = []
    for i, op in enumerate(("A[j] + 1.0", "A[j] * A[j]")):
        path = tmp_path / f"cached_source_{i}.py"
        path.write_text(textwrap.dedent(f"""
            import core.language as T

            @T.prim_func
            def k(A: T.Tensor((64,), "float32"), C: T.Tensor((64,), "float32")):
                with T.Kernel(1, threads=64):
                    for j in T.Parallel(64):
                        C[j] = {op}
        """))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        funcs.append(module.k)
    assert_close(run(core.compile(funcs[0], out_idx=[1]), a), a + 1.0)
    assert_close(run(core.compile(funcs[1], out_idx=[1]), a), a * a)


def test_string_annotations_resolve_per_build(tmp_path, run):
    # under `from __future__ import annotations` a name used only in an annotation is not in
    # the closure: it is looked up in the factory's frame, on every build
    path = tmp_path / "cached_annotations.py"
    path.write_text(textwrap.dedent("""
        from __future__ import annotations

        import core.language as T

        def make(n):
            @T.prim_func
            def twice(A: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
                with T.Kernel(1, threads=n):
                    for j in T.Parallel(n):
                        C[j] = A[j] * 2.0
            return twice
    """))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for n in (32, 64):
        a = torch.randn(n, generator=torch.Generator().manual_seed(n))
        assert_close(run(core.compile(module.make(n), out_idx=[1]), a), a * 2.0)


def _undefined_in_macro():
    @T.macro
    def scale_row(dst, row):
        for j in T.Parallel(64):
            dst[row, j] = dst[row, j] * missing_factor  # noqa: F821 - the error under test

    @T.prim_func
    def scaled(A: T.Tensor((4, 64), "float32")):
        with T.Kernel(4, threads=64) as row:
            scale_row(A, row)

    return scaled


def test_error_in_cached_macro_names_kernel_and_line_every_time():
    messages = []
    for _ in range(2):      # the second parse reads the cached source and AST
        with pytest.raises(T.KernelDefinitionError) as err:
            _undefined_in_macro()
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert "kernel 'scaled'" in messages[0]
    assert "Undefined variable: missing_factor" in messages[0]
    assert "test_script_cache.py:" in messages[0]


def _constant(value):
    return doc.Constant(value, None, 1, 0, 1, 1)


def _call(*args):
    func = doc.Attribute(doc.Name("T", doc.Load(), 1, 0, 1, 1), "max", doc.Load(), 1, 0, 1, 5)
    return doc.Call(func, list(args), [], 1, 0, 1, 9)


def test_expression_shapes_keep_constants_of_different_types_apart():
    keys = {script_cache._key(_call(_constant(v))) for v in (1, 1.0, True, "1")}
    assert len(keys) == 4
    # the same shape at another source position is the same compiled code
    moved = _call(_constant(2))
    moved.lineno = 40
    assert script_cache._key(moved) == script_cache._key(_call(_constant(2)))


def test_expressions_outside_the_kept_shapes_go_to_tvmscript():
    lam = doc.Lambda(doc.arguments([], [], None, [], [], None, []), _constant(1), 1, 0, 1, 9)
    starred = doc.Starred(doc.Name("xs", doc.Load(), 1, 0, 1, 2), doc.Load(), 1, 0, 1, 3)
    assert script_cache._key(lam) is None
    assert script_cache._key(_call(starred)) is None


def _same_doc(ours, tvm_script) -> bool:
    """Equal doc trees: the same node classes, attributes (in the same order) and values."""
    if type(ours) is not type(tvm_script):
        return False
    if isinstance(ours, (list, tuple)):
        return len(ours) == len(tvm_script) and all(map(_same_doc, ours, tvm_script))
    if isinstance(ours, doc.AST):
        mine, theirs = vars(ours), vars(tvm_script)
        return list(mine) == list(theirs) and all(_same_doc(mine[k], theirs[k]) for k in mine)
    return ours == tvm_script


@pytest.mark.parametrize("module", [moe, script_cache], ids=["harness.gen.moe", "script_cache"])
def test_doc_ast_of_a_source_is_tvmscripts(module):
    source = inspect.getsource(module)
    ours = script_cache._to_doc(ast.parse(source))
    assert _same_doc(ours, doc.parse(source))
    assert type(ours) is doc.Module and len(ours.body) > 5


def _module_functions(module):
    """The functions written in `module` (a macro's or a strategy's own function, not the
    wrapper around it)."""
    functions = [inspect.unwrap(fn) for fn in vars(module).values() if inspect.isfunction(fn)]
    return [fn for fn in functions
            if inspect.isfunction(fn) and fn.__code__.co_filename == module.__file__]


@pytest.mark.parametrize("fn", _module_functions(moe), ids=lambda fn: fn.__name__)
def test_annotation_names_are_tvmscripts(fn):
    tree = script_cache.source_of(fn).as_ast()
    assert script_cache._annotation_names(tree) == utils._collect_annotation_names(fn)


def _symbolic_rows():
    n = T.dynamic("n")

    @T.prim_func
    def symbolic_rows(A: T.Buffer((n, 8), "float32"), C: T.Tensor((n, 8), "float32"),
                      scale: T.float32):
        with T.Kernel(1, threads=8) as _:
            for i in T.serial(n):
                for j in T.Parallel(8):
                    C[i, j] = A[i, j] * scale

    return symbolic_rows


def _moe_multi():
    case = next(c for c in benchcases.CASES if c.name == "moe/qwen3-30b-decode-multi-bf16")
    return moe.build(case.params).func


@pytest.mark.parametrize("build", [_moe_multi, _symbolic_rows],
                         ids=["moe-multi", "buffer-and-dynamic-shape"])
def test_signature_annotations_parse_as_tvmscripts(build, monkeypatch):
    """Annotations without `T.Buffer` are evaluated as written, one with it takes
    TVMScript's rewrite: either way the function is what TVMScript's own signature
    evaluation gives (the same dynamic-shape variables, dtypes and scalar parameters)."""
    ours = build()
    monkeypatch.setattr(tirx_parser, "_eval_signature_annotation",
                        script_cache._TVM_SIGNATURE_ANNOTATION)
    theirs = build()
    assert tvm_ffi.structural_equal(ours, theirs, map_free_vars=True)
    assert ours.script() == theirs.script()


_NESTED_DEFINITIONS = """
def nested(flag):
    if flag:
        def in_then(a: "IfName") -> IfReturn: ...
    else:
        def in_else(a: ElseName): ...
    for _ in range(1):
        def in_loop(a: LoopName): ...
    else:
        def in_loop_else(*, a: KwOnlyName): ...
    with open(__file__) as _:
        def in_with(a: WithName, /): ...
    try:
        def in_try(a: TryName): ...
    except OSError:
        def in_handler(a: HandlerName): ...
    finally:
        def in_finally(a: FinallyName): ...

    class Holder:
        def in_class(self, a: ClassName): ...

    return lambda x: (x, [y for y in (1, Expression)])
"""


def test_annotation_names_of_nested_definitions_are_tvmscripts(tmp_path):
    """Function definitions in every kind of statement list: the names in their annotations
    (not those of strings or of other expressions) are the ones TVMScript collects."""
    path = tmp_path / "nested_definitions.py"
    path.write_text(_NESTED_DEFINITIONS)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tree = script_cache.source_of(module.nested).as_ast()
    ours = script_cache._annotation_names(tree)
    assert ours == utils._collect_annotation_names(module.nested)
    assert ours == {"IfReturn", "ElseName", "LoopName", "KwOnlyName", "WithName", "TryName",
                    "HandlerName", "FinallyName", "ClassName"}


_TRICKY_ENDINGS = '''
import functools


def trailing_pass(x):
    if x:
        return 1
    else:
        pass


def trailing_ellipsis():
    y = 1
    ...


def dedented_paren():
    return (
        1
)


def one_liner(): return 2


@functools.lru_cache
def decorated(a,
              b):
    def inner(c):
        return [c,
                a]
    return inner(b)   # a comment


    # more comments, blank lines


def outer():
    def nested():
        return lambda q: (q,
                          q)
    return nested


class Holder:
    def method(self):
        return {
            "k": 1}

    @staticmethod
    def last():
        z = 3
        return z
'''


def _functions_of(module):
    """The functions written in `module`: its functions, the methods of its classes, and
    the function `outer()` returns."""
    found = []
    for value in vars(module).values():
        if inspect.isclass(value) and value.__module__ == module.__name__:
            found += [inspect.unwrap(getattr(v, "__func__", v)) for v in vars(value).values()]
        elif inspect.isfunction(inspect.unwrap(value)):
            found.append(inspect.unwrap(value))
            if value.__name__ == "outer":
                found.append(value())
    return [fn for fn in found
            if inspect.isfunction(fn) and fn.__code__.co_filename == module.__file__]


def test_source_lines_are_tvmscripts(tmp_path):
    """A function's lines, ended by its compiled code, are the ones TVMScript's tokenizer
    gives: for every function of the kernel families, and for endings the compiled code
    does not show (a trailing `pass` or `...`, a closing parenthesis at the left margin,
    comments after the body)."""
    import harness.gen as gen
    import pkgutil
    from tvm.script.parser.core import diagnostics

    path = tmp_path / "tricky_endings.py"
    path.write_text(_TRICKY_ENDINGS)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    tricky = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tricky)
    modules = [tricky] + [importlib.import_module(f"harness.gen.{m.name}")
                          for m in pkgutil.iter_modules(gen.__path__)]
    checked = 0
    for module in modules:
        for fn in _functions_of(module):
            assert script_cache.source_lines(fn) == script_cache._TVM_SOURCE_LINES(fn), \
                f"{module.__name__}.{fn.__qualname__}"
            checked += 1
    assert checked > 40
    assert diagnostics.getsourcelines is script_cache.source_lines   # what Source reads
    # the cases the compiled code cannot end are left to the tokenizer
    for fn, last in ((tricky.trailing_pass, "pass"), (tricky.dedented_paren, ")"),
                     (tricky.decorated, "# more comments, blank lines")):
        lines, _ = script_cache.source_lines(fn)
        assert lines[-1].strip() == last


def test_spans_made_once_per_source_range_are_tvmscripts(monkeypatch):
    """Every statement and expression of a parse carries the span TVMScript would make,
    though spans of one source range are now one object."""
    from tvm.script.parser.core.diagnostics import Source

    from core.ir.stmt import visit_nodes

    def _spans(func):
        found = []

        def where(span):
            if span is None:
                return None
            if hasattr(span, "spans"):    # a SequentialSpan
                return tuple(where(s) for s in span.spans)
            return (span.source_name.name, span.line, span.column, span.end_line,
                    span.end_column)

        def note(node):
            found.append((type(node).__name__, where(node.span)))

        visit_nodes(func.body, (tvm.tirx.Stmt, note), (tvm.ir.expr.Expr, note))
        return found

    ours = _moe_multi()
    monkeypatch.setattr(script_cache.CachedSource, "to_span", Source.to_span)
    theirs = _moe_multi()
    assert _spans(ours) == _spans(theirs)
    assert len(_spans(ours)) > 500
