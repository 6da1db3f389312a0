"""How a case reaches its kernel (harness/check/route.py): every call path and cache state
gives the kernel lowering gives, a cache that keys kernels without their options is caught
as "stale_kernel", the math mode is set for the run only, and a route is kept in a
regression case."""

import importlib
import os

import pytest

from harness.check import regressions
from harness.check.case import Status, run_case
from harness.check.route import math_mode
from harness.gen.strategies import CACHE_STATES, CALL_PATHS

# a streamed softmax: switching vectorize or stream_rows off changes its MSL
PARAMS = {"M": 3, "N": 3000, "dtype": "float16", "bM": 1, "threads": 32, "scale": 0.5}


def route(path="compile", cache="cold", disable=(), before=None, **extra):
    r = {"path": path, "cache": cache, "disable": list(disable), "pass_configs": {},
         "math_mode": "safe", **extra}
    if cache != "cold":
        r["before"] = before if before is not None else {"disable": []}
    return r


@pytest.mark.parametrize("path", CALL_PATHS)
@pytest.mark.parametrize("cache", CACHE_STATES)
def test_every_path_and_cache_state_gives_the_right_kernel(path, cache):
    result = run_case("softmax", PARAMS, seed=1, route=route(path, cache, ["vectorize"]))
    assert result.status == Status.PASS, result.message


def test_a_cache_key_without_the_options_is_a_stale_kernel(monkeypatch):
    jit = importlib.import_module("core.jit")   # the module (core.jit is the decorator)
    real = jit.cache_key
    monkeypatch.setattr(jit, "cache_key", lambda func, options: real(func, ()))
    # warm with every pass on, then ask for vectorize off: the cache hands back the
    # vectorized kernel, whose numbers are right
    stale = run_case("softmax", PARAMS, seed=1,
                     route=route("jit_factory", "memory", ["vectorize"]))
    assert stale.status == Status.STALE_KERNEL and stale.signature == "stale_kernel"
    assert "is not the one its options" in stale.message
    monkeypatch.setattr(jit, "cache_key", real)
    assert run_case("softmax", PARAMS, seed=1, route=route("jit_factory", "memory",
                                                          ["vectorize"])).ok


def test_pass_configs_are_options_too():
    r = route("par_compile", "twin", before={"disable": [], "pass_configs": {}},
              pass_configs={"tirx.disable_vectorize": True})
    result = run_case("softmax", PARAMS, seed=2, route=r)
    assert result.status == Status.PASS, result.message
    assert not any(d.startswith("vector.lanes=") for d in result.decisions)


def test_the_math_mode_is_set_for_the_run_only(monkeypatch):
    monkeypatch.delenv("PYTORCH_MPS_FAST_MATH", raising=False)
    with math_mode({"math_mode": "fast"}):
        assert os.environ["PYTORCH_MPS_FAST_MATH"] == "1"
    assert "PYTORCH_MPS_FAST_MATH" not in os.environ
    monkeypatch.setenv("PYTORCH_MPS_FAST_MATH", "1")
    with math_mode(None):   # no route: as the caller set it
        assert os.environ["PYTORCH_MPS_FAST_MATH"] == "1"
    result = run_case("softmax", PARAMS, seed=3, route=route(math_mode="fast"))
    assert result.status == Status.PASS, result.message


def test_a_route_is_kept_in_the_regression_case(tmp_path):
    r = route("jit_prim_func", "disk", ["stream_rows"])
    case = regressions.RegressionCase("softmax", PARAMS, seed=1, status=Status.PASS,
                                      signature="", state="fixed", route=r)
    plain = regressions.RegressionCase("softmax", PARAMS, seed=1, status=Status.PASS,
                                       signature="", state="fixed")
    assert case.key != plain.key and '"route"' not in plain.to_json()
    loaded = regressions.load(regressions.save(case, tmp_path))
    assert loaded.route == r
    regressions.expect(loaded)   # a fixed case: it passes through its route


def test_a_reference_given_is_what_the_kernel_is_compared_with():
    # run_case(reference=...): the case's kernel is compared with the lowering the caller
    # made (the fuzz's steering), not lowered again -- so a reference of other options
    # fails the case, and the right one passes it
    from harness.check import route as routes
    from harness.gen import family as families

    built = families.get("softmax").build(dict(PARAMS))
    r = route("jit_prim_func", "cold", ["vectorize"])
    right = routes.reference(built, r)
    wrong = routes.reference(built, route("jit_prim_func", "cold", []))
    assert right.msl != wrong.msl
    assert run_case("softmax", PARAMS, seed=1, route=r, reference=(built, right)).ok
    stale = run_case("softmax", PARAMS, seed=1, route=r, reference=(built, wrong))
    assert stale.status == Status.STALE_KERNEL, stale.message


def test_the_barrier_check_runs_on_the_cases_kernel(monkeypatch):
    # with barriers, the check removes the barriers of the kernel the case ran (its
    # route's options, pass_configs included), not of a kernel compiled again
    from core.transform import pipeline
    from harness.check import barriers

    seen, runs = [], []
    real = barriers.check_barriers
    monkeypatch.setattr(barriers, "check_barriers",
                        lambda kernel, *a, **k: seen.append(kernel) or real(kernel, *a, **k))
    real_run = pipeline.run
    monkeypatch.setattr(pipeline, "run", lambda *a, **k: runs.append(k) or real_run(*a, **k))
    params = {**PARAMS, "N": 700, "threads": 128}   # across simdgroups: barriers
    r = route("jit_factory", "cold", pass_configs={"tirx.disable_vectorize": True})
    result = run_case("softmax", params, seed=1, route=r, barriers=True)
    assert result.status == Status.PASS, result.message
    assert "threadgroup_barrier" in result.msl and result.stages["barriers"] > 0
    assert len(seen) == 1 and seen[0].msl == result.msl
    assert not any(d.startswith("vector.lanes=") for d in result.decisions)
    assert len(runs) == 2   # the route's compile and its reference; none for the check
