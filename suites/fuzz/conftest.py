"""Fixtures of the fuzzing suites.

`test_families`: the test-only families of suites/fuzz/fuzzfamilies.py registered in a
copy of the family registry for one test, so in-process replays find them and no other
suite (the fuzz smoke run lists every registered family) ever sees them.
"""

import importlib

import pytest

from harness.gen import family

FAMILY_MODULE = "suites.fuzz.fuzzfamilies"


@pytest.fixture
def test_families(monkeypatch):
    family.families()  # the real families first, into the real registry
    monkeypatch.setattr(family, "REGISTRY", dict(family.REGISTRY))
    module = importlib.import_module(FAMILY_MODULE)
    for fam in module.FAMILIES:
        family.REGISTRY[fam.name] = fam
    return module
