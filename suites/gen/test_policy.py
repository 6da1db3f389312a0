"""The tolerance policy (oracles/tolerance.py) per dtype and op class, as assert_close
applies it."""

from __future__ import annotations

import math

import pytest
import torch

from harness.check.compare import assert_close
from harness.gen.strategies import HALVES
from oracles.tolerance import OP_CLASSES, POLICY, tolerance_for


@pytest.mark.parametrize("op_class", OP_CLASSES)
@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8", "int64", "bool"])
def test_integers_are_exact_in_every_class(dtype, op_class):
    assert tolerance_for(dtype, 1000, op_class).exact


def test_existing_callers_keep_their_tolerance():
    assert tolerance_for("float16") == POLICY["elementwise"]["float16"]
    assert tolerance_for(torch.bfloat16, 16) == tolerance_for("bfloat16", 16, "accumulation")
    assert tolerance_for("float32", 100).rtol == 1e-5 * math.sqrt(100)   # the same float ops


def test_exact_class_ignores_reduction_length_and_allows_only_flushed_subnormals():
    tol = tolerance_for("float16", 4096, "exact")
    assert tol.rtol == 0 and tol.atol == pytest.approx(6.1035e-05, rel=1e-3)
    with pytest.raises(AssertionError, match="exact"):
        assert_close(torch.tensor([1.0], dtype=torch.float16),
                     torch.tensor([1.0009765625], dtype=torch.float16), op_class="exact")
    assert_close(torch.tensor([0.0], dtype=torch.float16),
                 torch.tensor([3e-5], dtype=torch.float16), op_class="exact")


def test_transcendental_is_wider_than_elementwise_for_narrow_floats():
    for dtype in HALVES:
        assert tolerance_for(dtype, op_class="transcendental").rtol > \
            tolerance_for(dtype).rtol
    assert tolerance_for("float32", op_class="transcendental").rtol >= \
        tolerance_for("float32").rtol


def test_unknown_op_class_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown op class 'fuzzy'"):
        tolerance_for("float32", op_class="fuzzy")
