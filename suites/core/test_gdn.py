"""Gated DeltaNet decode (harness/gen/gdn.py) against its float64 oracle (oracles/gdn.py) on
the emulator with every check: Qwen3-Next head dims (128 x 128), one token per launch and
several tokens per launch with the state kept on chip, q/k heads shared by value heads."""

import pytest
import torch

import core
from harness.check.compare import assert_close
from harness.gen import gdn
from harness.gen.inputs import random_tensor
from oracles import gdn as oracle


def _params(**kw):
    p = {"tokens": 1, "HK": 1, "groups": 2, "DK": 128, "DV": 128, "dtype": "bfloat16",
         "bV": 32, "threads": 128}
    return {**p, **kw}


def _check(run, p, seed=0):
    built = gdn.build(p)
    kernel = core.compile(built.func, out_idx=built.out_idx)
    args = built.inputs(seed)
    o, s1 = run(kernel, *args)
    want_o, want_s = built.oracle(args)
    assert_close(o, want_o, what="o")
    assert_close(s1, want_s, what="state")
    return kernel, args, o, s1


@pytest.mark.parametrize("tokens,dtype", [(1, "bfloat16"), (4, "float16"), (3, "float32")])
def test_qwen3_next_head_dims(run, tokens, dtype):
    _check(run, _params(tokens=tokens, dtype=dtype))


def test_ragged_value_blocks_and_odd_key_dim(run):
    # DV = 40 over blocks of 16 (the last block is half empty), DK odd, 2 q/k heads
    _check(run, _params(tokens=2, HK=2, groups=1, DK=37, DV=40, bV=16, threads=64,
                        dtype="float16"))


@pytest.mark.parametrize("p", [
    _params(tokens=4, dtype="float16", bV=16, state="rows"),
    _params(tokens=2, HK=2, groups=1, DK=37, DV=40, bV=16, threads=64, dtype="bfloat16",
            state="rows"),
], ids=["qwen3-next-dims", "ragged-odd-key-dim"])
def test_the_state_held_transposed(run, p):
    # bV x d_k: a row of 128 d_k is one simdgroup's 32 lanes x 4, so each reduction over
    # d_k is a simd_sum per row the thread holds, no threadgroup stage (only the staged
    # k/q, v and gates need barriers); the state is read down S0's columns
    kernel, *_ = _check(run, p)
    if p["DK"] == 128:
        assert "red_buf" not in kernel.msl
        assert "simd_sum" in kernel.msl and "simd_shuffle_xor" not in kernel.msl


@pytest.mark.parametrize("p", [
    _params(tokens=4, dtype="float16", bV=16),
    _params(tokens=64, HK=2, bV=16),
    _params(tokens=3, dtype="float32", DV=40, bV=8, threads=64),
    _params(tokens=2, HK=2, groups=1, DK=37, DV=40, bV=16, threads=64, dtype="bfloat16"),
    _params(tokens=2, groups=1, DK=200, DV=20, bV=4, threads=32, dtype="float32"),
], ids=["qwen3-next-dims", "64-tokens", "ragged-f32", "ragged-odd-key-dim", "key-dim-200"])
def test_k_and_q_per_lane(run, p):
    # kq="per_lane": every simdgroup loads and normalizes the k and q elements its lanes
    # hold, each lane loads its rows' v and the gates: no threadgroup memory or barrier
    kernel, *_ = _check(run, {**p, "state": "rows", "kq": "per_lane"})
    if p["DK"] <= 128:
        assert "threadgroup_barrier" not in kernel.msl and "threadgroup " not in kernel.msl
        assert "simd_shuffle_xor" not in kernel.msl


@pytest.mark.parametrize("p,what", [
    (_params(kq="per_lane"), "state='rows'"),
    (_params(state="columns", kq="per_lane"), "state='rows'"),
    (_params(state="rows", kq="per_lane", bV=4, threads=256), "bV a multiple"),
    (_params(state="rows", kq="lanes"), "kq must be one of"),
])
def test_k_and_q_per_lane_rejected(p, what):
    with pytest.raises(ValueError, match=what):
        gdn.build(p)


def test_one_token_launches_chain_to_the_multi_token_launch(run):
    # The state written by a one-token launch, fed to the next, gives what one launch over
    # all the tokens keeps on chip.
    p = _params(tokens=3, DK=64, DV=64, dtype="float32")
    kernel, args, o_all, s_all = _check(run, p)
    one = core.compile(gdn.build({**p, "tokens": 1}).func, out_idx=[6, 7])
    q, k, v, g, beta, state = args
    outs = []
    for t in range(3):
        o_t, state = run(one, q[t:t + 1], k[t:t + 1], v[t:t + 1], g[t:t + 1],
                         beta[t:t + 1], state)
        outs.append(o_t)
    for got, want in ((torch.cat(outs), o_all), (state, s_all)):
        assert_close(got, want, "float32", reduction_length=64, op_class="transcendental")


def test_oracle_delta_rule_stores_and_retrieves_a_value():
    # With no decay (g = 0) and beta = 1, writing v under a unit key k makes k S = v, and
    # a query along k reads v back scaled by 1/sqrt(d_k) (the attention scale).
    dk, dv = 8, 5
    k = torch.zeros(1, 1, dk, dtype=torch.float64)
    k[0, 0, 3] = 2.0                                      # L2-normalized to e_3
    v = random_tensor((1, 1, dv), "float32", 1).double()
    state = random_tensor((1, dk, dv), "float32", 2)
    o, s = oracle.gdn_decode(k, k, v, torch.zeros(1, 1), torch.ones(1, 1), state,
                             "float64")
    # float64 algebra from a float32 state: well inside float32's elementwise width (k and
    # q are e_3 up to the norm's eps: agreement to ~1e-7)
    assert_close(s[0, 3], v[0, 0], "float32")
    assert_close(o[0, 0], v[0, 0] * dk ** -0.5, "float32")
