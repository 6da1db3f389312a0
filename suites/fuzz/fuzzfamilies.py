"""Kernel families that exist only for the fuzzing tests.

`harness fuzz --import suites.fuzz.fuzzfamilies` registers them in every worker:
  staged_transpose  B = A^T through threadgroup memory: needs exactly one barrier, so
                    fuzzing with `--disable thread_sync` must find a race
  crashy            a tiny copy, except n == 3 kills the process (os._exit) and n == 4
                    hangs: what the fuzzer must survive and record
  two_bugs          no kernel at all: n >= 50 is one bug, 10 <= n < 50 another, so a
                    shrinker that ignores the kind of failure turns the first into the
                    second
  marked_node       a copy that takes a second a case and fails (ValueError) on a machine
                    whose environment has METALTILE_TEST_MARKED_NODE=1: the Ray cluster
                    test marks the node it kills (suites/fuzz/test_ray.py)
Tests that run cases in-process use the `test_families` fixture (suites/fuzz/conftest.py),
which registers them in a copy of the registry so other suites never see them.
"""

from __future__ import annotations

import os
import time

from hypothesis import strategies as st

import core.language as T
from harness.gen import family
from harness.gen.family import Built, Family
from harness.gen.inputs import random_tensor

MODULE = __name__


def _staged_params():
    return st.fixed_dictionaries({
        "n": st.sampled_from((8, 16, 24, 32)),
        "threads": st.sampled_from((32, 64, 128)),
        "dtype": st.sampled_from(("float32", "float16")),
    })


def _staged_build(p: dict) -> Built:
    n, threads, dtype = p["n"], p["threads"], p["dtype"]

    @T.prim_func
    def staged_transpose(A: T.Tensor((n, n), dtype), B: T.Tensor((n, n), dtype)):
        with T.Kernel(1, threads=threads):
            S = T.alloc_shared((n, n), dtype)
            T.copy(A, S)
            for i, j in T.Parallel(n, n):
                B[i, j] = S[j, i]

    return Built(staged_transpose, [1], lambda seed: [random_tensor((n, n), dtype, seed)],
                 lambda args: [args[0].T.contiguous()], tolerance_dtypes=(dtype,))


def _crashy_params():
    return st.fixed_dictionaries({"n": st.integers(0, 4)})


def _crashy_build(p: dict) -> Built:
    if p["n"] == 3:
        os._exit(3)
    if p["n"] == 4:
        time.sleep(3600)
    size = 32 + p["n"]

    @T.prim_func
    def crashy(A: T.Tensor((size,), "float32"), B: T.Tensor((size,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(size):
                B[i] = A[i] + 1.0

    return Built(crashy, [1], lambda seed: [random_tensor((size,), "float32", seed)],
                 lambda args: [args[0] + 1.0])


def _two_bugs_params():
    return st.fixed_dictionaries({"n": st.integers(0, 100)})


def _two_bugs_build(p: dict) -> Built:
    if p["n"] >= 50:
        raise ValueError(f"n = {p['n']} is too big")
    if p["n"] >= 10:
        raise KeyError(p["n"])
    return _crashy_build({"n": 0})


MARKED_NODE = "METALTILE_TEST_MARKED_NODE"


def _marked_params():
    return st.fixed_dictionaries({"n": st.integers(0, 20)})


def _marked_build(p: dict) -> Built:
    time.sleep(1.0)   # a case always in flight when the test kills the node
    if os.environ.get(MARKED_NODE) == "1":
        raise ValueError(f"n = {p['n']} on a marked node")
    return _crashy_build({"n": 0})


FAMILIES = (
    Family("staged_transpose", "B = A^T through threadgroup memory (one barrier)",
           _staged_params, _staged_build),
    Family("crashy", "a copy whose n == 3 kills the process and n == 4 hangs",
           _crashy_params, _crashy_build),
    Family("two_bugs", "n >= 50 raises ValueError, 10 <= n < 50 KeyError",
           _two_bugs_params, _two_bugs_build),
    Family("marked_node", f"a copy (1 s a case) that fails where ${MARKED_NODE} is 1",
           _marked_params, _marked_build),
)

for _family in FAMILIES:
    if _family.name not in family.REGISTRY:
        family.register(_family)
