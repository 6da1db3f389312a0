"""The families' strategies are built once and reused (harness/gen/strategies.py): a new
strategy object costs Hypothesis a validation and a computation of its properties on its
first draw, more than the draw itself, and `harness fuzz` draws params for every case.
Reuse must not change what is drawn: `S.sampled_from` keeps choices apart that tuple
equality mixes up, and draws THREADS_ANY's lists as lists."""

from __future__ import annotations

import sys

import pytest
from hypothesis import HealthCheck, Phase, find, given, seed, settings
from hypothesis.internal.conjecture.data import ConjectureData

from harness.gen import family as families
from harness.gen import strategies as S

NAMES = [f.name for f in families.families() if not f.skip_reason]


def test_a_builder_returns_one_object_per_arguments():
    assert S.sampled_from((1, 2)) is S.sampled_from([1, 2])
    assert S.threads(S.THREADS_ANY) is S.threads(S.THREADS_ANY)
    assert S.extent(1, 9) is S.extent(1, 9)
    assert S.multiple_of(8, 8, 96) is S.multiple_of(8, 8, 96)
    assert S.reduce_threads() is S.reduce_threads()
    assert S.row_tiles(long_rows=True) is S.row_tiles(long_rows=True)
    assert S.compile_route() is S.compile_route()


def test_sampled_from_keeps_apart_choices_that_compare_equal():
    assert S.sampled_from((0, 1)) is not S.sampled_from((False, True))
    assert S.sampled_from((1, 2)) is not S.sampled_from((1.0, 2.0))
    assert find(S.sampled_from((False, True)), lambda v: True) is False
    assert find(S.sampled_from((0, 1)), lambda v: True) == 0
    assert type(find(S.sampled_from((0, 1)), lambda v: True)) is int


def test_threads_any_draws_its_lists_as_lists():
    assert find(S.threads(S.THREADS_ANY), lambda t: not isinstance(t, int)) == [32, 4]


@pytest.mark.parametrize("name", NAMES)
def test_drawing_again_builds_no_new_strategy(name, monkeypatch):
    """Two runs with the same seed draw the same params; every strategy a family's code
    passes to `draw` in the second run must be one it passed in the first."""
    drawn: list = []           # kept alive, so no id is reused between the runs
    original = ConjectureData.draw

    def draw(self, strategy, *args, **kwargs):
        if "harness/gen/" in sys._getframe(1).f_code.co_filename.replace("\\", "/"):
            drawn.append(strategy)
        return original(self, strategy, *args, **kwargs)

    def run():
        @seed(3)
        @settings(max_examples=20, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(families.get(name).params(), S.compile_route())
        def case(params, route):
            pass

        case()

    monkeypatch.setattr(ConjectureData, "draw", draw)
    run()
    first, count = {id(s) for s in drawn}, len(drawn)
    run()
    new = [s for s in drawn[count:] if id(s) not in first]
    assert not new, (f"{name}: a strategy built again on every draw ({new[0]!r}); build it "
                     "once (a module constant, functools.cache, S.sampled_from)")
