"""The lowering decisions a compile records (core/ir/decisions.py, `kernel.decisions`):
noted by the pass that decides, every one listed in POINTS, kept through the compile cache,
and the ones the 896-thread streamed softmax takes (issue 25) with its result right."""

import pytest
from hypothesis import HealthCheck, given, settings

import core
from core.errors import MetaltileError
from core.ir import decisions
from core.ir.decisions import POINTS, thread_class
from core.jit import clear_memory_cache
from harness.gen import family as families

SOFTMAX_896 = {"M": 1, "N": 46592, "dtype": "float32", "bM": 1, "threads": 896, "scale": 1.0}


def compiled(name, params, **options):
    built = families.get(name).build(dict(params))
    return core.compile(built.func, out_idx=built.out_idx, **options)


def test_the_896_thread_streamed_softmax_reports_what_it_reached(run_family):
    kernel, _, _ = run_family("softmax", SOFTMAX_896)
    assert {"threads=pipeline_limit", "stream_rows=online_softmax",
            "reduce.online=across_simdgroups",
            "reduce.across_simdgroups=first_simdgroup_combines",
            "reduce.top_range=partial", "reduce.in_simdgroup=simd_reduce",
            "barrier=straight_line", "host=one_launch"} <= set(kernel.decisions)


@pytest.mark.parametrize("threads,expected", [
    (32, "power_of_two"), (1024, "power_of_two"), (16, "partial_simdgroup"),
    (1, "partial_simdgroup"), (96, "whole_simdgroups"), (768, "pipeline_limit"),
    (896, "pipeline_limit"), (48, "not_whole_simdgroups")])
def test_thread_classes(threads, expected):
    assert thread_class(threads) == expected


def test_a_pass_switched_off_changes_what_is_reached():
    params = {"M": 8, "N": 4000, "dtype": "float32", "bM": 1, "threads": 64, "scale": 0.5}
    on, off = compiled("softmax", params, cache=False), \
        compiled("softmax", params, cache=False, disable=("stream_rows", "vectorize"))
    assert {"stream_rows=online_softmax", "vector.lanes=4"} <= set(on.decisions)
    # a pass that does not run decides nothing
    assert not any(d.startswith(("stream_rows=", "vector.lanes=")) for d in off.decisions)


def test_decisions_survive_the_disk_cache():
    params = {"M": 5, "N": 70, "dtype": "float16", "bM": 2, "threads": 96, "scale": 1.0}
    first = compiled("softmax", params).decisions
    clear_memory_cache()
    assert compiled("softmax", params).decisions == first and first


@pytest.mark.parametrize("name", [f.name for f in families.families() if not f.skip_reason])
def test_every_noted_choice_is_listed(name):
    fam = families.get(name)

    @settings(max_examples=3, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(fam.params())
    def check(params):
        try:
            kernel = compiled(name, params, cache=False)
        except MetaltileError:
            return   # a rejection is the fuzz's to report, not this test's
        assert kernel.decisions and any(d.startswith("threads=") for d in kernel.decisions)
        for d in kernel.decisions:
            point, choice = d.split("=")
            assert choice in POINTS[point][1], d

    check()


def test_an_unlisted_choice_is_refused():
    with pytest.raises(ValueError, match="not listed"):
        decisions.choice("threads", "prime")
