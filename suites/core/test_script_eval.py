"""The direct expression evaluation (core/language/script_eval.py) against TVMScript's own
evaluator: every bench kernel parses to the same PrimFunc with the same source span on every
statement and expression; expressions outside the direct shapes (lambdas, comprehensions,
starred calls, ternaries, boolean operators, slices) parse the same; errors raised inside an
expression carry the same message and source line; assignments bind the same names
(core/language/script_cache.py binds plain ones without compiled code)."""

import pytest
import tvm
import tvm_ffi
from tvm.script.parser.core import evaluator

import core.language as T
from core.ir.stmt import visit_nodes
from core.language import script_cache, script_eval
from harness.bench import cases as benchcases
from harness.gen import family


def _span(span):
    if span is None:
        return None
    if hasattr(span, "spans"):
        return tuple(_span(s) for s in span.spans)
    return (span.source_name.name, span.line, span.column, span.end_line, span.end_column)


def _spans(func) -> list:
    out = []

    def note(node):
        out.append((type(node).__name__, _span(node.span)))

    visit_nodes(func.body, (tvm.tirx.Stmt, note), (tvm.ir.expr.Expr, note))
    return out


def _both(build):
    with script_eval.original():
        tvm_script = build()
    return tvm_script, build()


def _assert_same(tvm_script, direct):
    assert tvm_ffi.structural_equal(tvm_script, direct, map_free_vars=True)
    assert _spans(tvm_script) == _spans(direct)


@pytest.mark.parametrize("case", benchcases.CASES, ids=lambda c: c.name)
def test_bench_kernel_parses_as_with_tvmscripts_evaluator(case):
    fam = family.get(case.family)
    tvm_script, direct = _both(lambda: fam.build(case.params).func)
    _assert_same(tvm_script, direct)


def _uncommon_shapes():
    offsets = (1, 2)
    scale = {"a": 2.0}

    @T.prim_func
    def shapes(A: T.Tensor((8, 64), "float32"), C: T.Tensor((8, 64), "float32"), n: T.int32):
        with T.Kernel(8, threads=64) as row:
            S = T.alloc_shared((64,), "float32")
            T.copy(A[row, 0:64], S)
            for j in T.Parallel(64):
                twice = (lambda v: v * 2.0)(S[j])
                first = [o for o in offsets][0]
                bound = T.max(*offsets) if n > 0 and first == 1 else T.min(*offsets)
                C[row, j] = twice + S[j] * scale["a"] + T.cast(-bound, "float32") \
                    + T.if_then_else(j < n or j > 60, 1.0, 0.0)

    return shapes


def test_uncommon_expression_shapes_parse_as_with_tvmscripts_evaluator():
    tvm_script, direct = _both(_uncommon_shapes)
    _assert_same(tvm_script, direct)
    assert sum(span is not None for _, span in _spans(direct)) > 10   # spans are compared


def _bad_call():
    @T.prim_func
    def bad(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            for j in T.Parallel(64):
                A[j] = T.exp(A[j], A[j], A[j])

    return bad


def _bad_name():
    @T.prim_func
    def bad(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            for j in T.Parallel(64):
                A[j] = A[j] + T.max(undefined_scale, 1.0)  # noqa: F821 - the error under test

    return bad


@pytest.mark.parametrize("build", [_bad_call, _bad_name], ids=["bad-call", "undefined-name"])
def test_errors_in_expressions_read_as_with_tvmscripts_evaluator(build):
    messages = []
    for use in (script_eval.original, _installed):
        with use(), pytest.raises(T.KernelDefinitionError) as err:
            build()
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert "kernel 'bad'" in messages[1] and "test_script_eval.py:" in messages[1]


class _installed:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _bad_unpack():
    @T.prim_func
    def bad(A: T.Tensor((4, 4), "float32")):
        with T.Kernel(1, threads=16):
            for i, j, k in T.Parallel(4, 4):  # noqa: B007 - one name too many, on purpose
                A[i, j] = 0.0

    return bad


def _unpacks():
    @T.prim_func
    def unpacks(A: T.Tensor((4, 4), "float32"), C: T.Tensor((4, 4), "float32")):
        with T.Kernel(1, threads=16):
            for i, j in T.Parallel(4, 4):
                r, c = j, i
                C[i, j] = A[r, c]

    return unpacks


def test_assignments_bind_as_with_tvmscripts_compiled_code(monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(evaluator, "_eval_assign", script_cache._tvm_eval_assign)
        with pytest.raises(T.KernelDefinitionError) as err:
            _bad_unpack()
        tvm_script = _unpacks()
    with pytest.raises(T.KernelDefinitionError) as direct_err:
        _bad_unpack()
    assert str(direct_err.value) == str(err.value)
    assert "not enough values to unpack (expected 3, got 2)" in str(err.value)
    _assert_same(tvm_script, _unpacks())


def test_only_classes_outside_tvms_objects_skip_the_span_annotation():
    with pytest.raises(TypeError, match="is a TVM object class"):
        script_eval.never_tvm_objects(tvm.tirx.Var)
    assert type(T.Tensor) in script_eval._PLAIN and tvm.tirx.Var not in script_eval._PLAIN


def test_the_kept_latest_values_follow_the_variable_table():
    from tvm.script.parser.core.parser import VarTable

    table = VarTable()
    with table.with_frame():
        table.add("a", 1)
        assert table.get() == {"a": 1}
        with table.with_frame():
            table.add("a", 2)
            table.add("b", 3)
            seen = table.get()
            seen["c"] = 4                        # a caller's additions stay its own
            assert table.get() == {"a": 2, "b": 3}
            table.add("b", 5, allow_shadowing=True)
            assert table.get() == {"a": 2, "b": 5}
        assert table.get() == {"a": 1}          # the inner frame's names are popped
        with script_eval.original():
            assert table.get() == {"a": 1}      # what TVMScript's own get builds
    assert table.get() == {}
