"""MSL in TileLang's style (msl/tilelang_*.metal, written for these tests) runs unchanged:
`__restrict`, attribute lists, the argument union, `uint4` carriers of half/bfloat data,
`#define`/`_Pragma`, `(int)` casts of built-in vector components, `constant` arguments and
threadgroup arrays declared in nested blocks; each clean under every check and equal to
numpy. Also what the signature reader gets from clang's AST."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from core.runtime import emu
from foreigncase import close, run_clean
from harness.cli import main
from harness.gen.inputs import random_tensor

MSL = Path(__file__).parent / "msl"


def source(name: str) -> str:
    return (MSL / name).read_text()


def test_elementwise_with_restrict_attribute_list_and_args_struct():
    n = 1000
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 1024)).astype(np.float32)
    c = np.zeros(1024, np.float32)
    args = np.zeros(4, np.int32)
    args.view(np.float32)[0] = -1.5
    args[2] = n // 4                       # float4 elements
    run_clean(source("tilelang_elementwise.metal"), "main_kernel", 2, 128, [a, b, c, args])
    close(c[:n], a[:n] * np.float32(-1.5) + b[:n])
    assert not c[n:].any()


def test_elementwise_signature_from_the_ast():
    sig = emu.kernel_signatures(source("tilelang_elementwise.metal"))["main_kernel"]
    assert sig.max_total_threads == 128
    assert [(p.name, p.buffer_index, p.position) for p in sig.params] == [
        ("A", 0, None), ("B", 1, None), ("C", 2, None), ("arg", 3, None),
        ("blockIdx", None, "threadgroup_position_in_grid"),
        ("__gridDim", None, "threadgroups_per_grid"),
        ("threadIdx", None, "thread_position_in_threadgroup"),
        ("__simd_group_id", None, "simdgroup_index_in_threadgroup")]
    assert sig.buffers[3].is_reference and not sig.buffers[0].is_reference
    assert "__restrict" in sig.params[0].type


def test_launch_beyond_max_total_threads_is_refused():
    with pytest.raises(emu.LaunchError, match=r"max_total_threads_per_threadgroup\(128\)"):
        emu.run_msl(source("tilelang_elementwise.metal"), "main_kernel", grid=1,
                    threadgroup=256, buffers=[np.zeros(4, np.float32)] * 4)


def test_half_and_bfloat_through_uint4_carriers():
    n = 2 * 64 * 8
    rng = np.random.default_rng(1)
    x = rng.standard_normal(n).astype(np.float16)
    p = random_tensor((n,), "bfloat16", 3)
    y = np.zeros(n, np.float16)
    q = torch.zeros(n, dtype=torch.bfloat16)
    scale = np.array([0.75], np.float32)
    run_clean(source("tilelang_half_carrier.metal"), "scale_half8", 2, 64, [x, y, p, q, scale])
    close(y, (x.astype(np.float32) * np.float32(0.75)).astype(np.float16))
    expect = (p.float() * 0.75).to(torch.bfloat16)
    assert torch.equal(q, expect)


def test_threadgroup_arrays_in_nested_blocks_and_a_shadowed_blockidx():
    a = np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32)
    b = np.zeros((64, 64), np.float32)
    res = run_clean(source("tilelang_shared_tiles.metal"), "transpose_tiles", (4, 4), (16, 16),
                    [a, b], schedule="random", seed=3)
    np.testing.assert_array_equal(b, a.T)
    assert res.stats["threadgroup_memory_bytes"] >= 2 * (16 * 16 + 4) * 4


def test_a_macro_buffer_index_is_evaluated_by_clang():
    sig = emu.kernel_signatures(source("tilelang_shared_tiles.metal"))["transpose_tiles"]
    assert sorted(sig.buffers) == [0, 1] and sig.buffers[1].name == "B"


LAUNCHES = {
    "tilelang_elementwise.metal": ["--grid", "2", "--threadgroup", "128",
                                   "--buffer", "f32:1024", "--buffer", "f32:1024",
                                   "--buffer", "f32:1024", "--buffer", "i32:4:value=0"],
    "tilelang_half_carrier.metal": ["--grid", "2", "--threadgroup", "64",
                                    "--buffer", "f16:1024", "--buffer", "f16:1024",
                                    "--buffer", "bf16:1024", "--buffer", "bf16:1024",
                                    "--buffer", "f32:1:value=2"],
    "tilelang_shared_tiles.metal": ["--grid", "4,4", "--threadgroup", "16,16",
                                    "--buffer", "f32:4096", "--buffer", "f32:4096"],
}


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_harness_emu_runs_every_file_without_naming_the_kernel(name, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["emu", str(MSL / name), *LAUNCHES[name]]) == 0
    assert "no findings" in capsys.readouterr().out


def test_kernels_in_namespaces_and_simd_calls_in_macros():
    src = """\
#include <metal_stdlib>
using namespace metal;
#define LANE_TOTAL simd_sum(v)
namespace ops {
kernel void lane_total(device float* y [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  float v = float(lane);
  y[lane] = LANE_TOTAL;
}
}  // namespace ops
"""
    y = np.zeros(32, np.float32)
    sig = emu.kernel_signatures(src)["lane_total"]
    assert sig.call == "&::ops::lane_total"   # qualified from the global namespace
    run_clean(src, "lane_total", 1, 32, [y])
    np.testing.assert_array_equal(y, np.full(32, 31 * 32 / 2, np.float32))
