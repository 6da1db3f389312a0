"""The GDN decode and MoE bench cases stand for the seed's measured execution patterns: the
GDN pair differs only in tokens per launch (1 and 64, so their per-token ratio compares
with the seed's), the MoE cases cover 64 and 128 experts, top-2 and top-8, the 9-launch
program and the fused one, and the seed's M2 figures ride on the matching cases."""

import core
from harness.bench.cases import CASES
from harness.gen import family as families


def _cases(family):
    return {c.name: c for c in CASES if c.family == family}


def test_gdn_cases_differ_only_in_tokens_per_launch():
    cases = _cases("gdn_decode")
    by_tokens = {c.params["tokens"]: c for c in cases.values()}
    assert sorted(by_tokens) == [1, 64]
    one, many = by_tokens[1], by_tokens[64]
    rest = {k: v for k, v in one.params.items() if k != "tokens"}
    assert rest == {k: v for k, v in many.params.items() if k != "tokens"}
    assert (one.params["DK"], one.params["DV"]) == (128, 128)        # Qwen3-Next head dims
    ref = many.reference
    assert (ref.value, ref.unit, ref.per, ref.chip) == (28.9, "us/token", 64, "M2")


def test_moe_cases_cover_the_routing_shapes_and_launch_counts():
    cases = _cases("moe").values()
    assert {c.params["E"] for c in cases} == {64, 128}
    assert {c.params["topk"] for c in cases} == {2, 8}
    launches = {}
    for c in cases:
        built = families.get("moe").build(dict(c.params))
        launches[c.params["fused"]] = len(core.compile(built.func,
                                                       out_idx=built.out_idx).specs)
    assert launches == {False: 9, True: 4}
    [ref] = [c.reference for c in cases if c.reference]
    assert (ref.value, ref.unit, ref.chip) == (17.4, "ms", "M2")
