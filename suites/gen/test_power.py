"""The oracle's power, tested: for every family at parameters its strategy draws, and for
every bench case at its LLM shape, the correct output passes the comparison and each
doctored output (zeros, a constant, a scaling by 1 + d, one element moved by ten times its
bound, a row shifted by one, a row reversed) fails, unless it is indistinguishable from a
correct result (harness/check/power.py says why). No kernel runs here: the doctorings are
applied to what a perfect kernel stores, so this is the comparison's power alone."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from harness.bench.cases import CASES
from harness.check.compare import assert_close
from harness.check.power import case_power, describe, doctorings, output_power
from harness.gen import family
from harness.gen.inputs import random_tensor
from oracles import bounds

FAMILIES = [f.name for f in family.families() if not f.skip_reason]


def _assert_powerful(built, seed=0):
    powers = case_power(built, seed, scaling=False)
    assert powers, "the oracle gives no Expected outputs"
    weak = [p for p in powers if not p.ok]
    assert not weak, describe(weak)


@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_rejects_doctored_outputs(name):
    fam = family.get(name)

    @settings(max_examples=6, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(fam.params())
    def check(params):
        _assert_powerful(fam.build(dict(params)))

    check()


@pytest.mark.parametrize("case", [c for c in CASES if not family.get(c.family).skip_reason],
                         ids=lambda c: c.name)
def test_every_bench_case_rejects_doctored_outputs(case):
    _assert_powerful(family.get(case.family).build(dict(case.params)))


def _bench_expected(name):
    case = next(c for c in CASES if c.name == name)
    built = family.get(case.family).build(dict(case.params))
    return built.oracle(built.inputs(0))[0]


@pytest.mark.parametrize("name, doctoring", [
    ("softmax/attn-scores-f16", "zeros"), ("softmax/attn-scores-f16", "constant"),
    ("softmax/attn-scores-f16", "reversed"), ("softmax/attn-scores-f16", "x1.5"),
    ("gemm/prefill-bf16", "x1.5"), ("qmm_fp8/decode-m1", "x1.5")])
def test_the_outputs_the_old_policy_passed_now_fail(name, doctoring):
    """Each of these passed under the width grown by sqrt(n)."""
    want = _bench_expected(name)
    bad = want.rounded() * 1.5 if doctoring == "x1.5" else doctorings(want)[doctoring]
    assert_close(want.rounded(), want)
    with pytest.raises(AssertionError, match="outside the bound|normwise error"):
        assert_close(bad, want)


def test_a_scaling_inside_wide_per_element_bounds_fails_normwise():
    """Accumulation bounds near zero are wide; the normwise bound catches what hides there."""
    value = torch.ones(1000, dtype=torch.float64)
    want = bounds.Expected(value, torch.float32, torch.zeros_like(value),
                           torch.full_like(value, 0.01), "synthetic accumulation")
    scaled = (value * 1.05).float()          # 0.05 per element, inside 10 * 0.01
    with pytest.raises(AssertionError, match="normwise error .* exceeds its bound"):
        assert_close(scaled, want)
    assert_close((value + 0.05 * torch.randn(1000, generator=torch.Generator().manual_seed(0))
                  .clamp(-0.05, 0.05) * 0.1).float(), want)


@pytest.mark.parametrize("policy", ["bounds", "class"])
def test_an_infinity_matches_only_the_same_infinity(policy):
    inf, nan = float("inf"), float("nan")
    want_values = torch.tensor([1.0, inf, -inf, nan])
    if policy == "bounds":
        want = bounds.expected(bounds.exact_input(want_values), "float32")
    else:
        want = want_values
    assert_close(torch.tensor([1.0, inf, -inf, nan]), want)
    for wrong in ([1.0, -inf, -inf, nan], [1.0, 3e38, -inf, nan], [1.0, inf, -inf, 0.0],
                  [nan, inf, -inf, nan], [inf, inf, -inf, nan]):
        with pytest.raises(AssertionError, match="outside"):
            assert_close(torch.tensor(wrong), want)


def test_the_failure_names_the_worst_element_both_values_and_the_bound():
    want = _bench_expected("rmsnorm/moe-f16")
    bad = want.rounded().clone()
    bad[3, 7] += 1.0
    with pytest.raises(AssertionError) as err:
        assert_close(bad, want, what="output 0:")
    message = str(err.value)
    assert "output 0: 1 of" in message and "worst at [3, 7]" in message
    assert "> bound" in message and "rmsnorm over N=" in message


def _float32_sum_in_order(x):
    acc = torch.zeros(x.shape[:-1], dtype=torch.float32)
    for j in range(x.shape[-1]):
        acc = acc + x[..., j].float()
    return acc


def test_a_correct_serial_float32_accumulation_is_inside_its_bound():
    """The bounds hold for a computation that really rounds: a serial float32 sum (the
    worst order for rounding) and a float32 GEMM of half inputs, torch on the CPU."""
    x = torch.randn(16, 3000, generator=torch.Generator().manual_seed(3)).half()
    want = bounds.expected(bounds.total(bounds.exact_input(x), -1, "float32"), "float32")
    assert_close(_float32_sum_in_order(x), want)
    a = torch.randn(32, 2048, generator=torch.Generator().manual_seed(4)).half()
    b = torch.randn(2048, 48, generator=torch.Generator().manual_seed(5)).half()
    gemm = bounds.expected(bounds.matmul(bounds.exact_input(a), bounds.exact_input(b),
                                         "float32"), "float16")
    assert_close((a.float() @ b.float()).half(), gemm)


def test_a_correct_softmax_in_float32_is_inside_its_bound():
    from oracles import norm
    x = torch.randn(8, 4096, generator=torch.Generator().manual_seed(6)).half() * 3
    want = bounds.expected(norm.softmax_bounded(x), "float16")
    assert_close(torch.softmax(x.float(), -1).half(), want)


def test_a_float32_output_of_bfloat16_rounded_values_resolves_as_bfloat16():
    """The scaling a check must reject follows the narrowest dtype the result was rounded
    through, and that dtype is recorded, not assumed."""
    h = bounds.round_to(bounds.exact_input(random_tensor((4, 64), "float32", 7)), "bfloat16")
    w = bounds.exact_input(random_tensor((64, 8), "float32", 8))
    out = bounds.expected(bounds.matmul(h, w, "float32"), "float32")
    assert out.precision == "bfloat16"
    assert output_power(out).ok


def test_a_weakened_bound_is_caught_by_the_power_check(monkeypatch):
    """The power check can fail: with the accumulation bounds blown up a thousandfold, a
    GEMM's check accepts a scaled output, and `harness selfcheck`'s power check says so."""
    from harness import selfcheck
    from oracles import bounds as B

    monkeypatch.setattr(B, "LAMBDA", 1e7)
    gemm = family.get("gemm").build({
        "M": 32, "N": 32, "K": 256, "bM": 16, "bN": 16, "bK": 16, "threads": 32,
        "dtype": "float32", "out_dtype": "float32", "trans_A": False, "trans_B": False,
        "num_stages": 0, "init": "clear", "a_operand": "shared", "epilogue": "none",
        "accum": "fragment", "pad": 0, "window": [0, 0, 16, 16], "swizzle": 0,
        "swizzle_order": "row"})
    (power,) = case_power(gemm, 0, scaling=False)
    assert "scaled" in power.accepted
    monkeypatch.setattr(selfcheck, "POWER_EXAMPLES", 2)
    powers = selfcheck._drawn_power(family.get("gemm"), 0)
    result = selfcheck._power_result("power gemm", "doctored outputs rejected", powers, 0.0)
    assert not result.passed and "accepts" in result.detail
