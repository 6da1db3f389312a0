"""Differential tests of every registered kernel family: Hypothesis draws params from the
family's strategy, `run_case` builds the kernel, runs it on the emulator with every check
and compares it with the oracle; anything but "pass" fails with the case's message.
A family the core cannot compile yet skips with its `skip_reason`.

Examples are derandomized (the same cases every run, so compiled kernels are reused) and
few per family: `harness fuzz` is the place for long runs.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

import core
from harness.check.case import Status, run_case
from harness.gen import family as families

NAMES = [f.name for f in families.families()]
EXAMPLES = {"elementwise": 20, "cast": 20, "copy": 20, "conditional": 20, "multikernel": 15,
            "scalars": 15, "reduce": 20, "softmax": 12, "rmsnorm": 12, "layernorm": 12,
            "gemm": 15, "gemv": 15,
            "qmm_fp8": 15, "qmm_fp4": 12,
            "gdn_decode": 10, "moe": 8, "attention_decode": 10}

# LLM-sized params (Qwen-like rows of 4096): every family must build and compile at these
# sizes, which harness/bench/ relies on; compiling runs no clang, so this is cheap.
LARGE = {
    "elementwise": {"M": 4096, "N": 4096, "dtype": "float16", "out_dtype": "float16",
                    "op": "exp", "bM": 4, "bN": 256, "threads": 256},
    "cast": {"M": 4096, "N": 4096, "src": "float32", "dst": "bfloat16", "via": "shared",
             "bM": 4, "bN": 256, "threads": 256},
    "copy": {"M": 4096, "N": 4096, "dtype": "int8", "mode": "transpose", "bM": 64,
             "bN": 64, "threads": 256},
    "conditional": {"M": 4096, "N": 4096, "dtype": "float32", "mode": "shared",
                    "threshold": "scalar", "t": 0.0, "bM": 8, "bN": 256, "threads": 256},
    "multikernel": {"N": 4096 * 4096, "dtype": "bfloat16", "kernels": 3, "read": "rotate",
                    "shift": 4095, "b1": 256, "b2": 256, "b3": 256, "t1": 256, "t2": 128,
                    "t3": 256},
    "scalars": {"M": 4096, "N": 4096, "dtype": "float16",
                "signature": ["int64", "A", "float32", "B", "bool", "float16", "int32"],
                "symbolic": "both", "bM": 4, "bN": 256, "threads": 256},
    "reduce": {"M": 4096, "N": 4096, "dim": 1, "kind": "sum", "dtype": "bfloat16",
               "out_dtype": "float32", "clear": True, "keepdim": False, "block": 1,
               "threads": 256},
    "softmax": {"M": 4096, "N": 4096, "dtype": "float16", "scale": 0.125, "bM": 1,
                "threads": 256},
    "rmsnorm": {"M": 4096, "N": 4096, "dtype": "bfloat16", "eps": 1e-6, "weight": "shared",
                "bM": 1, "threads": 256},
    "layernorm": {"M": 4096, "N": 4096, "dtype": "float16", "eps": 1e-5, "bM": 1,
                  "threads": 256},
    "gemm": {"M": 4096, "N": 4096, "K": 4096, "bM": 64, "bN": 64, "bK": 32,
             "threads": 256, "dtype": "float16", "out_dtype": "float16", "trans_A": False,
             "trans_B": True, "num_stages": 2, "init": "clear"},
    "gemv": {"M": 8, "N": 18944, "K": 3584, "bM": 8, "bN": 4, "bK": 128, "threads": 128,
             "dtype": "bfloat16", "out_dtype": "bfloat16"},
    "qmm_fp8": {"M": 64, "N": 12288, "K": 4096, "scale": "block", "G": 128, "bM": 8,
                "bN": 16, "bK": 128, "threads": 32, "dtype": "bfloat16",
                "out_dtype": "bfloat16"},
    "qmm_fp4": {"E": 128, "T": 4, "N": 768, "K": 2048, "bM": 4, "bN": 8, "threads": 128,
                "dtype": "bfloat16", "out_dtype": "bfloat16"},
    "gdn_decode": {"tokens": 64, "HK": 16, "groups": 2, "DK": 128, "DV": 128,
                   "dtype": "bfloat16", "bV": 32, "threads": 128},
    "attention_decode": {"HK": 8, "groups": 4, "N": 32768, "D": 128, "dtype": "bfloat16",
                         "splits": 128, "bN": 1, "threads": 64, "combine_threads": 32},
    "moe": {"M": 512, "D": 2048, "I": 768, "E": 128, "topk": 8, "renorm": True,
            "dtype": "bfloat16", "fused": True, "bM": 4, "bE": 32, "rthreads": 256,
            "bN": 64, "bK": 32, "threads": 256},
}


def _family(name):
    fam = families.get(name)
    if fam.skip_reason:
        pytest.skip(fam.skip_reason)
    return fam


@pytest.mark.parametrize("name", NAMES)
def test_generated_cases_pass(name, backend):
    fam = _family(name)

    @settings(max_examples=EXAMPLES.get(name, 6), deadline=None, derandomize=True,
              database=None, suppress_health_check=[HealthCheck.too_slow,
                                                    HealthCheck.filter_too_much])
    @given(fam.params())
    def case(params):
        result = run_case(name, params, seed=0, backend=backend)
        assert result.status == Status.PASS, \
            f"{name} {json.dumps(params)} on {backend}: {result.status}\n{result.message}"

    case()


@pytest.mark.parametrize("name", NAMES)
def test_params_are_json_and_documented(name):
    fam = families.get(name)
    assert fam.doc and fam.build.__module__.startswith("harness.gen.")
    module = __import__(fam.build.__module__, fromlist=["__doc__"])
    assert "Params:" in module.__doc__, f"{fam.build.__module__} documents no params"

    @settings(max_examples=5, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.filter_too_much])
    @given(fam.params())
    def draw(params):
        assert json.loads(json.dumps(params)) == params

    draw()


@pytest.mark.parametrize("name", sorted(LARGE))
def test_llm_sized_params_build_and_compile(name):
    fam = _family(name)
    built = fam.build(dict(LARGE[name]))
    kernel = core.compile(built.func, out_idx=built.out_idx)
    assert kernel.msl and len(kernel.specs) >= 1


def test_every_family_has_large_params():
    assert sorted(LARGE) == sorted(NAMES)
