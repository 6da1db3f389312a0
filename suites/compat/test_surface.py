"""Every construct TileLang's `T` exports is supported or rejected by name, and
docs/language.md says which (it is the generator's output)."""

from __future__ import annotations

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from core.language.tilelang_names import GROUPS
from core.language.unsupported import UnsupportedConstruct, tvmscript_names
from harness import language_table
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor

TILELANG = sorted({n for names in GROUPS.values() for n in names} | set(tvmscript_names()))


def test_every_tilelang_name_is_defined_or_rejected_by_name():
    for name in TILELANG:
        if name in vars(T):
            continue
        with pytest.raises(KernelDefinitionError) as info:
            getattr(T, name)
        assert f"T.{name}" in str(info.value) and "not supported by metaltile" in str(info.value)
        assert not hasattr(T, name)   # also an AttributeError, for hasattr / getattr(.., d)


def test_other_names_stay_attribute_errors():
    with pytest.raises(AttributeError) as info:
        T.no_such_construct  # noqa: B018 - the attribute access is the test
    assert not isinstance(info.value, UnsupportedConstruct)


def test_unsupported_construct_in_a_kernel_names_it_and_the_line():
    with pytest.raises(KernelDefinitionError,
                       match=r"kernel 'k', T.cumsum \(at .*test_surface.py:\d+"):
        @T.prim_func
        def k(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                S = T.alloc_shared((32,), "float32")
                T.cumsum(A, S)


def test_language_table_is_up_to_date():
    assert language_table.DOC.read_text() == language_table.render(), \
        "docs/language.md is out of date: python -m harness.language_table"


def test_language_table_rows_match_behaviour():
    rows = language_table.rows()
    listed = [n for _, names, _, _ in rows for n in names]
    assert sorted(listed) == sorted(set(listed)) and set(listed) == set(TILELANG)
    for _, names, status, _ in rows:
        for name in names:
            assert (status == "rejected") == (name not in vars(T)), name


def test_elementwise_math_against_torch(run):
    M = 70   # ragged over 32-thread tiles

    @T.prim_func
    def k(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(T.cdiv(M, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if T.likely(bx * 32 + i < M):
                    x = A[bx * 32 + i]
                    B[bx * 32 + i] = T.if_then_else(T.isnan(x) or T.isinf(x), 100.0, T.clamp(
                        T.pow(T.abs(x), 1.5) + T.log10(T.abs(x) + 1.0) + T.round(x * 3.0)
                        + T.trunc(x) + T.fmod(x, 0.75), -2.0, 6.0))

    a = random_tensor((M,), "float32", 1) * 2
    a[5], a[9] = float("nan"), float("-inf")
    x = a.double()
    ref = (x.abs() ** 1.5 + torch.log10(x.abs() + 1) + torch.round(x * 3) + torch.trunc(x)
           + torch.fmod(x, 0.75)).clamp(-2, 6)
    ref[5] = ref[9] = 100.0
    out = run(core.compile(k, out_idx=[1]), a)
    assert_close(out, ref, "float32", op_class="transcendental")


def test_math_on_integers_is_rejected():
    with pytest.raises(KernelDefinitionError, match="T.log10 needs a floating-point argument"):
        T.log10(T.int32(3))
