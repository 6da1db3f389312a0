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


def test_the_first_candidate_reaching_something_new_runs_and_the_rest_are_not_compiled():
    reached = {k: 10 for k in steer.keys(["threads=power_of_two", "barrier=none"])}
    decided = {"seen": ["threads=power_of_two", "barrier=none"],
               "new": ["threads=pipeline_limit", "barrier=none"],
               "newer": ["threads=pipeline_limit", "barrier=in_loop"]}
    compiled = []

    def decisions_of(candidate):
        compiled.append(candidate)
        return decided[candidate]

    assert steer.choose(["seen", "new", "newer"], decisions_of, reached) == 1
    assert compiled == ["seen", "new"]
    # nothing new anywhere: every candidate is compiled, the rarest combination runs
    reached.update({k: 10 for k in steer.keys(decided["new"])})
    reached.update({k: 1 for k in steer.keys(decided["newer"])})
    compiled.clear()
    assert steer.choose(["seen", "new", "newer"], decisions_of, reached) == 2
    assert compiled == ["seen", "new", "newer"]


def test_a_new_pair_of_known_decisions_wins():
    a, b, c = "threads=power_of_two", "barrier=none", "vector.lanes=4"
    reached = {k: 5 for k in steer.keys([a, b]) + steer.keys([b, c])}
    reached.update({a: 5, b: 5, c: 5})
    assert steer.score([a, c], reached) > steer.score([a, b], reached)


def test_a_candidate_that_does_not_compile_is_chosen():
    decided = {"ok": ["threads=power_of_two"], "broken": None}
    assert steer.choose(["ok", "broken"], decided.get, {"threads=power_of_two": 3}) == 1


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


# a streamed softmax: switching vectorize or stream_rows off changes its MSL
STREAMED = {"M": 3, "N": 3000, "dtype": "float16", "bM": 1, "threads": 32, "scale": 0.5}


def _route(path, cache, disable=(), before=None):
    r = {"path": path, "cache": cache, "disable": list(disable), "pass_configs": {},
         "math_mode": "safe"}
    if cache != "cold":
        r["before"] = before or {"disable": []}
    return r


def _counting(monkeypatch):
    """Counts the pipeline's runs (every DSL -> MSL compile, cached or not, runs it)."""
    from core.transform import pipeline

    runs = []
    real = pipeline.run
    monkeypatch.setattr(pipeline, "run", lambda *a, **k: runs.append(k) or real(*a, **k))
    return runs


def test_the_chosen_candidate_is_compiled_once(monkeypatch):
    # a cold core.compile route: the steering's compile of the candidate that runs is the
    # case's own (the same call); the case compiles nothing and passes
    from harness.check.case import Status, run_case

    fam = families.get("softmax")
    route = _route("compile", "cold", ["stream_rows"])
    params = {**STREAMED, "N": 2900}
    runs = _counting(monkeypatch)
    decided = steer.compiled_decisions(fam, params, route=route)
    made = steer.prepared(fam, params, route=route)
    assert made.kernel is not None and made.kernel.decisions == decided
    assert not any(d.startswith("stream_rows=") for d in decided)   # its options
    result = run_case("softmax", params, seed=1, route=route,
                      compiled=(made.built, made.kernel))
    assert result.status == Status.PASS, result.message
    assert len(runs) == 1 and result.decisions == decided


def test_the_chosen_candidate_is_the_reference_of_its_route(monkeypatch, tmp_path):
    # a warm route: the steering lowers the candidate as the reference is lowered (the
    # pipeline for its decisions, the printer only for the one chosen); the case compiles
    # through its route and compares with it, without lowering a third time
    from core.jit import clear_memory_cache
    from harness.check.case import Status, run_case

    monkeypatch.setenv("METALTILE_CACHE", str(tmp_path))   # an empty compile cache
    clear_memory_cache()

    fam = families.get("softmax")
    route = _route("jit_factory", "memory", ["vectorize"])
    params = {**STREAMED, "N": 3100}
    runs = _counting(monkeypatch)
    decided = steer.compiled_decisions(fam, params, route=route)
    made = steer.prepared(fam, params, route=route)
    assert made.kernel is None and made.reference.decisions == decided
    assert not any(d.startswith("vector.lanes=") for d in decided)
    result = run_case("softmax", params, seed=1, route=route,
                      reference=(made.built, made.reference))
    assert result.status == Status.PASS, result.message
    # the steering's pipeline, then the route's two compiles (before, and its own)
    assert len(runs) == 3 and result.decisions == decided


def test_a_candidate_not_compiled_lately_is_not_prepared():
    fam = families.get("softmax")
    assert steer.prepared(fam, {**STREAMED, "N": 1234}, route=_route("compile", "cold")) \
        is None


def test_a_cache_key_without_the_options_is_found_with_the_steerings_reference(monkeypatch):
    # the seeded bug (core's cache key leaves the compile options out), fuzzed the
    # way the worker runs a case: the reference the steering lowered still tells the
    # stale kernel from the right one
    import importlib

    from harness.check.case import Status, run_case

    jit = importlib.import_module("core.jit")   # the module (core.jit is the decorator)
    real = jit.cache_key
    monkeypatch.setattr(jit, "cache_key", lambda func, options: real(func, ()))
    fam = families.get("softmax")
    params = {**STREAMED, "N": 3050}
    for path in ("jit_factory", "compile"):
        route = _route(path, "memory", ["vectorize"])
        steer.compiled_decisions(fam, params, route=route)
        made = steer.prepared(fam, params, route=route)
        stale = run_case("softmax", params, seed=1, route=route,
                         reference=(made.built, made.reference))
        assert stale.status == Status.STALE_KERNEL, (path, stale.message)
        assert "is not the one its options" in stale.message
