"""The sparse MoE block (harness/gen/moe.py) against its float64 oracle (oracles/moe.py) on
the emulator with every check: the 9-launch program and the 4-launch one with the routing
fused, every intermediate table and activation compared (routing tables exactly), at
Qwen3-MoE's hidden size, 64 and 128 experts, top-2 and top-8, and the tie-breaking rule."""

import pytest
import torch

import core
from harness.check.compare import assert_close, assert_outputs_close
from harness.gen import moe
from oracles import moe as oracle


def _params(**kw):
    p = {"M": 3, "D": 48, "I": 40, "E": 8, "topk": 2, "renorm": True, "dtype": "float16",
         "fused": False, "bM": 2, "bE": 16, "rthreads": 64, "bN": 32, "bK": 16,
         "threads": 128}
    return {**p, **kw}


def _check(run, p, args=None):
    built = moe.build(p)
    kernel = core.compile(built.func, out_idx=built.out_idx)
    args = built.inputs(0) if args is None else args
    outs = run(kernel, *args)
    want = built.oracle(args)
    assert len(outs) == len(want) == len(built.out_idx)
    assert_outputs_close(outs, want, built)
    return kernel, outs, want


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("E,topk,dtype", [(64, 2, "bfloat16"), (128, 8, "float16")])
def test_qwen3_moe_hidden_size(run, fused, E, topk, dtype):
    # hidden 2048 (real), expert intermediate cut to 24, 4 tokens
    kernel, outs, _ = _check(run, _params(M=4, D=2048, I=24, E=E, topk=topk, dtype=dtype,
                                          fused=fused, bM=4, bE=32, rthreads=128,
                                          bK=64))
    assert len(kernel.specs) == (4 if fused else 9)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("renorm", [False, True])
def test_ties_go_to_the_lower_expert(run, fused, renorm):
    # Token 0 is all zeros (every logit 0: experts 0..k-1 win, with equal weights); token
    # 1 makes experts 5 and 2 tie for first and 6, 1 and 3 tie for third.
    p = _params(M=2, D=8, I=16, E=8, topk=3, renorm=renorm, fused=fused, dtype="float32")
    args = moe.make_inputs(p, 0)
    x, wr = torch.zeros(2, 8), torch.zeros(8, 8)
    x[1, 0] = 1.0
    wr[:, 0] = torch.tensor([0, 1, 2, 1, 0, 2, 1, 0]) / 64
    args[0], args[1] = x, wr
    _, outs, _ = _check(run, p, args)
    first_table = 0 if fused else 2            # multi: Logits and Probs come first
    top_idx, top_w = outs[first_table], outs[first_table + 1]
    assert top_idx.tolist() == [[0, 1, 2], [2, 5, 1]]
    first = torch.full((3,), 1 / 3 if renorm else 1 / 8)
    assert_close(top_w[0], first, "float32")


def test_ragged_tiles_and_idle_experts(run):
    # 1 token to 2 of 16 experts: 14 experts get no rows (their Slots all -1); the expert
    # launches run over the 2 listed experts only
    _, outs, _ = _check(run, _params(M=1, D=37, I=29, E=16, topk=2, bN=16, threads=64,
                                     bK=8, fused=True, dtype="bfloat16"))
    counts, slots, experts, rows = outs[2:6]
    assert int(counts.sum()) == 2 and int((counts == 0).sum()) == 14
    assert bool((slots[counts == 0] == -1).all())
    assert rows.tolist() == [1, 1] and counts[experts.long()].tolist() == [1, 1]


def test_oracle_gather_lists_each_slot_once_in_order():
    top_idx = torch.tensor([[3, 1], [1, 0], [3, 2]], dtype=torch.int32)
    counts, slots = oracle.gather(top_idx, 5)
    assert counts.tolist() == [1, 2, 1, 2, 0]
    assert slots.tolist() == [[3, -1, -1], [1, 2, -1], [5, -1, -1], [0, 4, -1],
                              [-1, -1, -1]]
