"""harness.autotune: TileLang's `@autotune(configs=...)` over a `@core.jit` prim_func factory.
Off macOS each configuration is timed by the roofline model from one checked emulator run;
the winner is compiled, returned with its config and time, and cached on disk."""

from __future__ import annotations

import pytest
import torch

import core
import core.language as T
from core.errors import MetaltileError
from harness.autotune import Autotuner, autotune
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor

M, N, K = 64, 64, 32


def matmul_factory():
    @core.jit(out_idx=[-1])
    def matmul(M, N, K, block_M=32, block_N=32, block_K=16, threads=128):
        @T.prim_func
        def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
                 C: T.Tensor((M, N), "float32")):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M),
                          threads=threads) as (bx, by):
                A_s = T.alloc_shared((block_M, block_K), "float16")
                B_s = T.alloc_shared((block_K, block_N), "float16")
                C_l = T.alloc_fragment((block_M, block_N), "float32")
                T.clear(C_l)
                for k in T.Pipelined(T.ceildiv(K, block_K)):
                    T.copy(A[by * block_M, k * block_K], A_s)
                    T.copy(B[k * block_K, bx * block_N], B_s)
                    T.gemm(A_s, B_s, C_l)
                T.copy(C_l, C[by * block_M, bx * block_N])
        return gemm
    return matmul


CONFIGS = [{"block_M": 32, "block_N": 32, "threads": 128},
           {"block_M": 64, "block_N": 64, "threads": 128},
           {"block_M": 16, "block_N": 16, "threads": 64},
           {"block_M": 24, "block_N": 32, "threads": 128}]   # 24 rows: 3 x 4 tiles, 4 groups


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("METALTILE_CACHE", str(tmp_path))
    return tmp_path


def _ref(a, b):
    return a.double() @ b.double()


def test_the_winner_is_the_fastest_kept_config_and_is_right(cache_dir):
    tuned = autotune(configs=CONFIGS, timing="model",
                     ref_prog=lambda a, b: _ref(a, b).float())(matmul_factory())
    kernel = tuned(M, N, K)
    result = tuned.last_result
    kept = [t for t in result.trials if t.seconds is not None]
    assert len(result.trials) == 4 and len(kept) >= 3
    assert kernel.config == min(kept, key=lambda t: t.seconds).config
    assert kernel.latency == min(t.seconds for t in kept) > 0
    a, b = random_tensor((M, K), "float16", 1), random_tensor((K, N), "float16", 2)
    assert_close(kernel(a, b, backend="emu"), _ref(a, b), "float16", reduction_length=K,
                 op_class="accumulation")
    table = result.table()
    assert "modeled on M2" in table and f"winner {kernel.config}" in table
    assert table.count("\n") == len(CONFIGS) + 1


def test_a_config_that_cannot_compile_is_dropped_with_its_reason(cache_dir):
    configs = CONFIGS[:1] + [{"block_M": 20, "block_N": 32, "threads": 128}]  # not 8-aligned
    tuned = autotune(configs=configs, timing="model")(matmul_factory())
    kernel = tuned(M, N, K)
    dropped = [t for t in tuned.last_result.trials if t.seconds is None]
    assert kernel.config == CONFIGS[0]
    assert len(dropped) == 1 and "multiples of 8" in dropped[0].note
    assert "dropped" in tuned.last_result.table()


def test_results_are_cached_on_disk(cache_dir):
    first = autotune(configs=CONFIGS[:2], timing="model")(matmul_factory())
    k1 = first(M, N, K)
    assert not first.last_result.from_cache
    assert len(list((cache_dir / "autotune").glob("*.json"))) == 1
    second = autotune(configs=CONFIGS[:2], timing="model")(matmul_factory())
    k2 = second(M, N, K)
    assert second.last_result.from_cache
    assert k2.config == k1.config and k2.latency == k1.latency
    other = autotune(configs=CONFIGS[1:3], timing="model")(matmul_factory())
    other(M, N, K)
    assert not other.last_result.from_cache     # other configs: another key


def test_configs_may_be_a_function_of_the_call(cache_dir):
    tuned = autotune(configs=lambda M, N, K: [{"block_M": M // 2, "block_N": N // 2}],
                     timing="model")(matmul_factory())
    assert tuned(M, N, K).config == {"block_M": 32, "block_N": 32}


def test_a_wrong_result_drops_the_config(cache_dir):
    tuned = autotune(configs=CONFIGS[:1], timing="model",
                     ref_prog=lambda a, b: torch.zeros(M, N))(matmul_factory())
    with pytest.raises(MetaltileError, match="no configuration compiled, ran and passed"):
        tuned(M, N, K)


@pytest.mark.parametrize("make,text", [
    (lambda: autotune(configs=CONFIGS, timing="wall")(matmul_factory()),
     "timing='wall'; allowed: model, gpu"),
    (lambda: Autotuner(lambda: None, CONFIGS), "takes a @core.jit function"),
    (lambda: autotune(configs=CONFIGS, warmups=3)(matmul_factory()),
     "unknown keyword(s) ['warmups']"),
])
def test_bad_use_is_a_clear_error(make, text):
    with pytest.raises(MetaltileError) as info:
        make()
    assert text in str(info.value)
