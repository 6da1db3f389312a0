"""The decode attention family (harness/gen/attention.py) beyond its drawn oracle runs: both
forms at GQA shapes with ragged splits against the float64 oracle, the oracle's exact value
against plain softmax attention for every way of dealing keys to splits, the bound catching
a kernel that drops a key or skips the rescale, the code the register form compiles to,
partials stored in the input dtype, and the error for splits that leave a split empty."""

import pytest
import torch

import core
from harness.check.case import Status, run_case
from harness.check.compare import assert_close
from harness.check.power import case_power, describe
from harness.gen import attention
from harness.gen.inputs import random_tensor
from harness.gen.strategies import HALVES
from oracles import attention as oracle
from oracles import bounds


def _params(**kw):
    base = {"HK": 2, "groups": 4, "N": 45, "D": 32, "dtype": "float16", "splits": 4,
            "bN": 1, "threads": 64, "combine_threads": 32}
    return {**base, **kw}


@pytest.mark.parametrize("params", [
    _params(),                                                       # register form, GQA 4
    _params(bN=8, dtype="bfloat16", N=50, splits=3, threads=128),    # blocked, ragged chunk
    _params(groups=3, D=24, dtype="float32", splits=5, N=33, threads=32),
    _params(groups=1, HK=3, N=7, splits=1, bN=4, threads=32, combine_threads=64),
], ids=["register-f16", "blocked-bf16", "register-f32-g3", "blocked-one-split"])
def test_decode_attention_matches_the_oracle_with_every_check(params):
    result = run_case("attention_decode", params)
    assert result.status == Status.PASS, result.message
    assert not result.findings


@pytest.mark.parametrize("order", ["contiguous", "strided"])
@pytest.mark.parametrize("step, held", [(1, None), (4, None), (1, "float16")])
def test_the_oracle_value_is_softmax_attention_for_any_split(order, step, held):
    q = random_tensor((6, 16), "float32", 1)
    k = random_tensor((2, 41, 16), "float32", 2)
    v = random_tensor((2, 41, 16), "float32", 3)
    splits = oracle.contiguous_splits(41, 5) if order == "contiguous" else \
        oracle.strided_splits(41, 5)
    (want,) = oracle.attention_decode_expected(q, k, v, order=splits, step=step,
                                               out_dtype="float32", held=held)
    exact = oracle.attention_decode(q.double(), k.double(), v.double())
    # the recurrence's float64 value is the exact one, to within one float32 rounding
    assert_close(want.value.float(), bounds.expected(bounds.exact_input(exact), "float32"))
    assert_close(exact.float(), want)
    if held:                                 # the partials' rounding widens the bound
        (wide,) = oracle.attention_decode_expected(q, k, v, order=splits, step=step,
                                                   out_dtype="float32")
        assert bool((want.bound() > wide.bound()).all())


def _wrong(q, k, v, drop_last=False, no_rescale=False):
    """float64 attention done wrong: the last key left out, or the splits' outputs added
    without their exp(m_s - M) weights (a kernel that forgot the rescale)."""
    if drop_last:
        return oracle.attention_decode(q, k[:, :-1], v[:, :-1], q.shape[1] ** -0.5,
                                       torch.float64)
    halves = [oracle.attention_decode(q, k[:, s], v[:, s], q.shape[1] ** -0.5,
                                      torch.float64) for s in (slice(0, 32), slice(32, 64))]
    return (halves[0] + halves[1]) / 2


@pytest.mark.parametrize("how", ["drop_last", "no_rescale"])
def test_the_bound_catches_a_dropped_key_and_a_missing_rescale(how):
    p = _params(N=64, splits=2, D=64, dtype="float16")
    built = attention.build(p)
    q, k, v = built.inputs(0)
    (want,) = built.oracle([q, k, v])
    assert_close(want.rounded(), want)
    bad = _wrong(q.double(), k.double(), v.double(), **{how: True}).half()
    with pytest.raises(AssertionError, match="outside the bound|normwise error"):
        assert_close(bad, want)


def test_the_bench_shape_oracle_rejects_doctored_outputs():
    p = _params(HK=8, groups=4, N=4096, D=128, splits=64)
    weak = [x for x in case_power(attention.build(p), 0, scaling=True) if not x.ok]
    assert not weak, describe(weak)


def test_the_register_form_has_no_threadgroup_memory_in_its_split_launch():
    built = attention.build(_params(HK=8, groups=4, N=256, D=128, splits=8))
    msl = core.compile(built.func, out_idx=built.out_idx).msl
    split = msl.split("attention_decode_kernel1")[0]
    assert "threadgroup_barrier" not in split and "threadgroup " not in split
    assert "simd_shuffle_xor" in split or "simd_sum" in split     # q k over D in a simdgroup
    assert "(const device half4*)(K" in split                    # key rows in vector loads


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("bN", [1, 8])
def test_partials_in_the_input_dtype_halve_the_workspace_and_pass_the_oracle(dtype, bN):
    # partials="input" stores the splits' unnormalized outputs in the input dtype (MLX's
    # 2-pass form): half the workspace bytes written, the combine reading them back as
    # float32; the oracle's bound takes the extra rounding (held=dtype)
    written = {}
    for partials in ("float32", "input"):
        p = _params(dtype=dtype, bN=bN, partials=partials)
        result = run_case("attention_decode", p)
        assert result.status == Status.PASS and not result.findings, result.message
        written[partials] = result.stats[0]["device_bytes_written"]
        msl = core.compile(attention.build(p).func, out_idx=[3]).msl
        held = {"float16": "half", "bfloat16": "bfloat"}[dtype] if partials == "input" \
            else "float"
        assert f"device {held}* Acc [[buffer(3)]]" in msl
    HQ, D, splits = 8, 32, 4
    assert sum(written["float32"].values()) - sum(written["input"].values()) == \
        splits * HQ * D * 2


def test_splits_that_leave_a_split_empty_are_refused():
    with pytest.raises(ValueError, match=r"attention_decode: splits=4 leaves a split with no "
                                         r"key at N=5"):
        attention.build(_params(N=5, splits=4))
