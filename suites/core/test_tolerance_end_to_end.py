"""The tolerance policy end to end: a float32 kernel whose result is off by 1e-3 relative is
rejected, through `run_case` (status "mismatch", naming the tolerance) and through the suites'
`run` fixture + `assert_close`; the same kernel off by 1e-6 relative (inside float32's
elementwise tolerance of oracles/tolerance.py) passes both ways."""

import pytest

import core
import core.language as T
from harness.check.case import Status, run_case
from harness.check.compare import assert_close
from harness.gen import family
from harness.gen.family import Built, Family
from harness.gen.inputs import random_tensor
from oracles.tolerance import tolerance_for

N = 256


def scaled_copy(factor: float):
    """B = A * factor, a float32 kernel that is wrong by (factor - 1) relative."""
    @T.prim_func
    def scaled(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(N // 64, threads=64) as bx:
            for i in T.Parallel(64):
                B[bx * 64 + i] = A[bx * 64 + i] * T.float32(factor)
    return scaled


def _build(p: dict) -> Built:
    # The oracle is the identity: the kernel's factor is its error.
    return Built(scaled_copy(p["factor"]), [1],
                 lambda seed: [random_tensor((N,), "float32", seed)],
                 lambda args: [args[0].clone()], tolerance_dtypes=("float32",),
                 op_class="elementwise")


@pytest.fixture
def off_family(monkeypatch):
    family.families()
    monkeypatch.setattr(family, "REGISTRY", dict(family.REGISTRY))
    family.REGISTRY["scaled_copy"] = Family("scaled_copy", "B = A * factor (test only)",
                                            lambda: None, _build)
    return "scaled_copy"


def test_the_policy_puts_1e_3_outside_and_1e_6_inside_float32():
    tol = tolerance_for("float32")
    assert 1e-6 < tol.rtol < 1e-3


def test_run_case_rejects_a_float32_result_off_by_1e_3(off_family, backend):
    result = run_case(off_family, {"factor": 1.001}, seed=1, backend=backend)
    assert result.status == Status.MISMATCH, result.message
    assert "outside atol=1e-05 rtol=1e-05 (float32, elementwise)" in result.message
    assert result.findings == []


def test_run_case_accepts_a_float32_result_off_by_1e_6(off_family, backend):
    result = run_case(off_family, {"factor": 1.000001}, seed=1, backend=backend)
    assert result.status == Status.PASS, result.message


def test_run_fixture_and_assert_close_reject_1e_3(run):
    a = random_tensor((N,), "float32", 1)
    wrong = core.compile(scaled_copy(1.001), out_idx=[1])
    with pytest.raises(AssertionError, match=r"outside atol=1e-05 rtol=1e-05"):
        assert_close(run(wrong, a), a)
    right = core.compile(scaled_copy(1.000001), out_idx=[1])
    assert_close(run(right, a), a)
