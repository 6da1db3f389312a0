"""Steering (harness/fuzz/steer.py): the candidate reaching the rarest decisions runs."""

from harness.fuzz import steer
from harness.gen import family as families


def test_a_new_decision_wins_and_ties_go_to_the_first():
    reached = {k: 10 for k in steer.keys(["threads=power_of_two", "barrier=none"])}
    seen = ["threads=power_of_two", "barrier=none"]
    new = ["threads=pipeline_limit", "barrier=none"]
    decided = {"a": seen, "b": new, "c": new}
    assert steer.choose(["a", "b", "c"], decided.get, reached) == 1
    assert steer.choose(["a", "a"], decided.get, reached) == 0


def test_a_new_pair_of_known_decisions_wins():
    a, b, c = "threads=power_of_two", "barrier=none", "vector.lanes=4"
    reached = {k: 5 for k in steer.keys([a, b]) + steer.keys([b, c])}
    reached.update({a: 5, b: 5, c: 5})
    assert steer.score([a, c], reached) > steer.score([a, b], reached)


def test_a_candidate_that_does_not_compile_is_chosen():
    decided = {"ok": ["threads=power_of_two"], "broken": None}
    assert steer.choose(["ok", "broken"], decided.get, {}) == 1


def test_decisions_come_from_the_compiler():
    fam = families.get("softmax")
    params = {"M": 2, "N": 5000, "dtype": "float32", "bM": 1, "threads": 96, "scale": 1.0}
    decided = steer.compiled_decisions(fam, params)
    assert "threads=whole_simdgroups" in decided and "stream_rows=online_softmax" in decided
    assert steer.compiled_decisions(fam, {**params, "threads": 0}) is None


def test_a_candidate_drawn_again_is_not_compiled_again(monkeypatch):
    # Hypothesis draws the same candidate again often; its decisions are a pure function
    # of the family, params and options, so the worker compiles it once.
    import core

    fam = families.get("softmax")
    params = {"M": 2, "N": 700, "dtype": "float16", "bM": 1, "threads": 64, "scale": 1.0}
    compiles = []
    real = core.compile
    monkeypatch.setattr(core, "compile", lambda *a, **k: compiles.append(k) or real(*a, **k))
    first = steer.compiled_decisions(fam, params)
    again = steer.compiled_decisions(fam, dict(reversed(list(params.items()))))
    assert first == again and "threads=power_of_two" in first and len(compiles) == 1
    other = steer.compiled_decisions(fam, params, disable=("vectorize",))
    assert len(compiles) == 2 and compiles[1]["disable"] == ("vectorize",) and other
