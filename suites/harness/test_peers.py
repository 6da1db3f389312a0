"""MLX's kernels as peers of the bench (harness/bench/peers/): each peer runs on the emulator
at a small shape of its family with every check and matches the case's oracle; a wrong
launch is caught as a mismatch; the generated / MLX ratios go into the baseline and a
worse one is a regression of the gate; offline without the wheel, the peer is skipped with
a reason that says how to provide it; the report's tables fit 100 columns.

The first test to need MLX's headers fetches the mlx-metal wheel with pip into the
metaltile cache (harness/bench/peers/mlx_wheel.py); without network and cache they skip
with that reason."""

from __future__ import annotations

import copy

import pytest
from rich.console import Console

from harness.bench import measure, report
from harness.bench.baseline import load_baseline, update_baseline
from harness.bench.cases import BenchCase
from harness.bench.gate import compare, gate_failed
from harness.bench.peers import mlx_wheel
from harness.bench.peers.run import runners

pytestmark = pytest.mark.xdist_group("mlx-peers")

GEMM = {"bM": 16, "bN": 64, "bK": 32, "threads": 128, "trans_A": False, "trans_B": True,
        "num_stages": 2, "init": "clear"}
PEER_CASES = [
    ("gemv", {"M": 1, "N": 96, "K": 256, "bM": 1, "bN": 16, "bK": 128, "threads": 512,
              "dtype": "float16", "out_dtype": "float16", "form": "lanes"}, "gemv_float16"),
    ("gemv", {"M": 6, "N": 64, "K": 128, "bM": 8, "bN": 16, "bK": 128, "threads": 512,
              "dtype": "bfloat16", "out_dtype": "bfloat16", "form": "lanes"},
     "gemv_wide_bfloat16_nv3_kl32"),   # 2 passes of 3 vectors; N <= 64: 32 lanes
    ("softmax", {"M": 3, "N": 1000, "dtype": "float16", "scale": 1.0, "bM": 1,
                 "threads": 256}, "block_softmax_precise_float16"),
    ("softmax", {"M": 2, "N": 4200, "dtype": "float32", "scale": 1.0, "bM": 1,
                 "threads": 256}, "looped_softmax_float32"),
    ("gdn_decode", {"tokens": 3, "HK": 1, "groups": 2, "DK": 32, "DV": 8,
                    "dtype": "bfloat16", "bV": 8, "threads": 64}, "gated_delta_seq"),
    ("attention_decode", {"HK": 1, "groups": 2, "N": 100, "D": 64, "dtype": "float16",
                          "splits": 4, "bN": 1, "threads": 64, "combine_threads": 32},
     "sdpa_vector_float16_64_64"),      # N < 4096: one pass
    ("attention_decode", {"HK": 1, "groups": 4, "N": 4096, "D": 64, "dtype": "bfloat16",
                          "splits": 32, "bN": 1, "threads": 64, "combine_threads": 32},
     "sdpa_vector_2pass_1_bfloat16_64_64"),   # GQA, N >= 4096: two passes, 64 blocks
    ("qmm_fp8", {"M": 1, "N": 40, "K": 512, "scale": "block", "G": 128, "bM": 1, "bN": 16,
                 "bK": 128, "threads": 32, "dtype": "bfloat16", "out_dtype": "bfloat16"},
     "mxfp8_qmv_fast_bfloat16"),        # N % 8 == 0, K % 256 == 0: the fast kernel
    ("qmm_fp8", {"M": 1, "N": 36, "K": 288, "scale": "row", "bM": 1, "bN": 8, "bK": 64,
                 "threads": 64, "dtype": "float16", "out_dtype": "float16"},
     "mxfp8_qmv_float16"),
    ("qmm_fp8", {"M": 64, "N": 64, "K": 256, "scale": "row", "path": "gemm", "bM": 32,
                 "bN": 32, "bK": 32, "threads": 128, "dtype": "bfloat16",
                 "out_dtype": "bfloat16"},
     "mxfp8_qmm_t_splitk_bfloat16_t"),   # 4 tiles: 8 K partitions of 32, then summed
    ("qmm_fp8", {"M": 40, "N": 72, "K": 32, "scale": "block", "G": 32, "path": "gemm",
                 "bM": 16, "bN": 16, "bK": 32, "threads": 64, "dtype": "float16",
                 "out_dtype": "float16"},
     "mxfp8_qmm_t_float16_t_gs_32_b_8_alN_false"),   # K = 32: no split; ragged M and N
    ("qmm_fp8", {"M": 40, "N": 72, "K": 128, "scale": "row", "path": "gemm", "bM": 16,
                 "bN": 16, "bK": 32, "threads": 64, "dtype": "bfloat16",
                 "out_dtype": "bfloat16"},
     "mxfp8_qmm_t_splitk_bfloat16_t_gs_32_b_8_alN_false"),   # 4 partitions, then summed
    # by threads (72, 40) in groups of (32, 32): partial threadgroups (dispatch_threads)
    ("qmm_fp4", {"E": 2, "T": 2, "N": 16, "K": 512, "bM": 2, "bN": 8, "threads": 64,
                 "dtype": "bfloat16", "out_dtype": "bfloat16", "x": "shared"},
     "mxfp4_gather_qmv_fast_bfloat16"),  # N % 8 == 0, K % 512 == 0: the fast kernel
    ("qmm_fp4", {"E": 2, "T": 3, "N": 12, "K": 96, "bM": 2, "bN": 8, "threads": 64,
                 "dtype": "float16", "out_dtype": "float16", "x": "fragment"},
     "mxfp4_gather_qmv_float16"),       # N = 12: a partial threadgroup of rows
    ("gemm", {**GEMM, "M": 8, "N": 64, "K": 512, "dtype": "float16",
              "out_dtype": "float16"}, "steel_gemm_splitk_nt"),
    ("gemm", {**GEMM, "M": 72, "N": 96, "K": 64, "dtype": "bfloat16",
              "out_dtype": "bfloat16"}, "steel_gemm_fused_nt_bfloat16"),
]


def _headers_or_skip():
    try:
        mlx_wheel.headers()
    except mlx_wheel.PeerUnavailable as err:
        pytest.skip(f"MLX's kernel headers are not available here: {err}")


def _measured(family, params, peers=("mlx",)):
    case = BenchCase(f"{family}/peer-test", family, params, "test shape", "small")
    return case, measure.measure_case(case, rounds=1, peers=runners(peers))


@pytest.mark.parametrize("family, params, kernel", PEER_CASES,
                         ids=[k for _, _, k in PEER_CASES])
def test_mlx_peer_matches_the_oracle_with_every_check(family, params, kernel):
    _headers_or_skip()
    _, m = _measured(family, params)
    assert m.status == "pass", m.message
    peer = m.peers["mlx"]
    # "pass": the outputs are within the case's tolerance of its oracle, and no findings
    assert peer["status"] == "pass", peer["message"]
    assert peer["kernel"].startswith(kernel) and peer["findings"] == []
    assert peer["counters"]["launches"] >= 1 and peer["modeled"].keys() == m.modeled.keys()
    assert set(peer["ratios"]) == set(measure.RATIO_COUNTERS)
    want = m.counters["device_bytes_read"] / peer["counters"]["device_bytes_read"]
    assert peer["ratios"]["device_bytes_read"] == pytest.approx(want)


def test_a_wrong_launch_is_a_mismatch(monkeypatch):
    # softmax over half of each row: the peer's comparison with the oracle must catch it
    _headers_or_skip()
    from harness.bench.peers import mlx_softmax
    params = {"M": 2, "N": 512, "dtype": "float32", "scale": 1.0, "bM": 1, "threads": 128}

    def half_rows(p, inputs, outputs):
        launch = mlx_softmax.launch(p, inputs, outputs)
        launch.buffers[2][0] //= 2
        return launch

    monkeypatch.setattr("harness.bench.peers.run.mlx_families",
                        lambda: {"softmax": half_rows})
    _, m = _measured("softmax", params)
    assert m.peers["mlx"]["status"] == "mismatch"
    assert "output 0" in m.peers["mlx"]["message"]


def test_a_wrong_attention_launch_is_a_mismatch(monkeypatch):
    # the 2-pass kernel told the key length is one key short: the oracle must catch it
    _headers_or_skip()
    from harness.bench.peers import mlx_sdpa
    params = {"HK": 1, "groups": 4, "N": 4096, "D": 64, "dtype": "float16", "splits": 32,
              "bN": 1, "threads": 64, "combine_threads": 32}

    def short(p, inputs, outputs):
        first, second = mlx_sdpa.launch(p, inputs, outputs)
        first.buffers[7][0] -= 1
        return [first, second]

    monkeypatch.setattr("harness.bench.peers.run.mlx_families",
                        lambda: {"attention_decode": short})
    _, m = _measured("attention_decode", params)
    assert m.peers["mlx"]["status"] == "mismatch", m.peers["mlx"]["message"]


def test_params_mlx_has_no_kernel_for_are_not_applicable():
    _headers_or_skip()
    _, m = _measured("softmax", {"M": 2, "N": 256, "dtype": "float32", "scale": 0.5,
                                 "bM": 1, "threads": 64})
    peer = m.peers["mlx"]
    assert peer["status"] == "not_applicable" and "no input scale" in peer["message"]
    assert not gate_failed(compare(measure.BenchRun("t", {}, {}, "", {"cases": None},
                                                    {}, 0.0, [m]), None))


def test_mxfp8_requantization_keeps_the_weights_within_e4m3s_rounding():
    """The qmv peer's weights: e8m0 scales (powers of two) per 32, codes that fit e4m3; the
    re-quantized weights decode to within e4m3's rounding of the case's."""
    import torch

    from harness.bench.peers.mlx_qmv import E4M3_MAX, requantize_mxfp8
    from harness.check.compare import assert_close
    from harness.gen.inputs import random_tensor
    from oracles import bounds

    w = random_tensor((8, 96), "float32", 5).double() * 3.0
    codes, scales, wq = requantize_mxfp8(w)
    assert codes.shape == (8, 96) and scales.shape == (8, 3)
    decoded = codes.view(torch.float8_e4m3fn).double().reshape(8, 3, 32)
    assert bool((decoded.abs() <= E4M3_MAX).all())
    step = torch.exp2(scales.double() - 127)
    assert torch.equal((decoded * step[..., None]).reshape(8, 96), wq)
    # e4m3 keeps 3 mantissa bits: within 2^-4 of each weight, relative
    within = bounds.Expected(w, torch.float64, w.abs() * 2.0 ** -4, torch.zeros_like(w))
    assert_close(wq, within)


FP4 = {"E": 2, "T": 2, "N": 16, "K": 512, "bM": 2, "bN": 8, "threads": 64,
       "dtype": "bfloat16", "out_dtype": "bfloat16", "x": "shared"}


def test_mxfp4_requantization_keeps_the_weights_within_e2m1s_rounding():
    """The gather_qmv peer's weights: e8m0 scales, the smallest power of two per 32 that
    fits the group into e2m1; codes packed as MLX reads them (element 2j low nibble); the
    re-quantized weights within half an e2m1 step of the case's."""
    import torch

    from harness.bench.peers.mlx_gather_qmv import E2M1_MAX, requantize_mxfp4
    from harness.check.compare import assert_close
    from harness.gen.inputs import random_tensor
    from oracles import bounds
    from oracles import qmm as oracle

    packed, scales = oracle.quantize_e2m1(random_tensor((2, 8, 96), "float32", 7), 32)
    w = oracle.dequant_e2m1(packed, scales, 32)          # the case's weights
    mx, e8m0, wq = requantize_mxfp4(w)
    assert mx.shape == (2, 8, 48) and e8m0.shape == (2, 8, 3)
    step = torch.exp2(e8m0.double() - 127)
    # decoded as MLX decodes: the e2m1 nibbles times the e8m0 power of two
    assert torch.equal(oracle.dequant_e2m1(mx, step, 32), wq)
    amax = w.reshape(2, 8, 3, 32).abs().amax(-1)
    assert bool((amax <= E2M1_MAX * step).all()) and bool((amax > E2M1_MAX * step / 2).all())
    # the case's float16 scales are not powers of two: the weights do change
    assert not torch.equal(wq, w)
    # e2m1 has one mantissa bit: within a quarter of the weight, or a quarter of the scale
    # below 1 (the 0 / 0.5 step)
    err = torch.maximum(w.abs() / 4, step.repeat_interleave(32, -1) / 4)
    assert_close(wq, bounds.Expected(w, torch.float64, err, torch.zeros_like(w)))


def test_mxfp4_requantization_is_mlxs_own_quantizer():
    """MLX's fp_quantize<float, 32, 4> (its `mx.quantize(mode="mxfp4")` kernel) run on the
    emulator gives the very codes and e8m0 bytes the peer feeds gather_qmv, for the case's
    weights and for e2m1's ties (MLX rounds them to the even code)."""
    import numpy as np
    import torch

    from core.runtime.emu import run_msl
    from harness.bench.peers.mlx_gather_qmv import requantize_mxfp4
    from harness.gen.inputs import random_tensor
    from oracles import qmm as oracle

    _headers_or_skip()
    packed, scales = oracle.quantize_e2m1(random_tensor((2, 16, 128), "float32", 7), 32)
    w = oracle.dequant_e2m1(packed, scales, 32)
    ties = torch.tensor([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.1, 5.5] * 3 + [0, 0],
                        dtype=torch.float64)
    w[0, 0, :32], w[1, 3, 32:64] = ties, -ties * 2.0 ** -3
    name = "mxfp4_quantize_float_gs_32_b_4_hgs_false"
    inst = (f'template [[host_name("{name}")]] [[kernel]] decltype(fp_quantize<float, 32, 4, '
            'false>) fp_quantize<float, 32, 4, false>;\n')
    msl = mlx_wheel.source(("utils.h", "steel/gemm/gemm.h", "quantized_utils.h",
                            "fp_quantized.h"), inst)
    codes = torch.zeros(w.numel() // 2, dtype=torch.uint8)
    e8m0 = torch.zeros(w.numel() // 32, dtype=torch.uint8)
    # quantized.cpp quantize_impl: one thread a weight, buffers w, codes, scales, the
    # global scale (unset); threadgroups of 256 here (any multiple of 32 quantizes alike)
    res = run_msl(msl, name, grid=(w.numel() // 256, 1, 1), threadgroup=(256, 1, 1),
                  buffers=[w.float().flatten(), codes, e8m0, np.zeros(1, np.float32)])
    assert res.findings == []
    ours_codes, ours_e8m0, _ = requantize_mxfp4(w)
    assert torch.equal(codes, ours_codes.flatten())
    assert torch.equal(e8m0, ours_e8m0.flatten())


def test_a_doctored_mxfp4_requantization_is_a_mismatch(monkeypatch):
    # the kernel gets one group's e8m0 scale one step too large (twice the weights) while
    # the oracle is evaluated on the right re-quantization: the comparison must catch it
    _headers_or_skip()
    from harness.bench.peers import mlx_gather_qmv

    real = mlx_gather_qmv.requantize_mxfp4

    def doctored(w):
        packed, e8m0, wq = real(w)
        e8m0 = e8m0.clone()
        e8m0[1, 5, 7] += 1
        return packed, e8m0, wq

    monkeypatch.setattr(mlx_gather_qmv, "requantize_mxfp4", doctored)
    _, m = _measured("qmm_fp4", FP4)
    peer = m.peers["mlx"]
    assert m.status == "pass" and peer["status"] == "mismatch", peer["message"]
    assert "output 0" in peer["message"]


def test_ragged_fp4_experts_have_no_gather_qmv_peer():
    from harness.bench.peers import NotApplicable, mlx_gather_qmv
    with pytest.raises(NotApplicable, match="ragged"):
        mlx_gather_qmv.launch({**FP4, "counts": "ragged"}, [None] * 4, [None])
    with pytest.raises(NotApplicable, match="activation type"):
        mlx_gather_qmv.launch({**FP4, "out_dtype": "float32"}, [None] * 4, [None])
    with pytest.raises(NotApplicable, match="gather_qmm"):
        mlx_gather_qmv.launch({**FP4, "T": 8}, [None] * 4, [None])


def test_mlx_qmm_dispatch_is_mlxs():
    """quantized.cpp qmm_splitk's partition count: about 512 threadgroups, whole groups
    of 32 per partition, none below 2 (qmm instead); qmv below the batch limit."""
    from harness.bench.peers import NotApplicable, mlx_qmm
    assert mlx_qmm.split_k(64, 256, 4096) == 32        # the bench case: 16 tiles
    assert mlx_qmm.split_k(64, 12288, 4096) == 1       # its real N: 768 tiles, no split
    assert mlx_qmm.split_k(64, 64, 256) == 8           # K / 32 bounds it
    assert mlx_qmm.split_k(64, 64, 96 * 32) == 96 and mlx_qmm.split_k(64, 64, 3 * 32) == 3
    assert mlx_qmm.split_k(64, 64, 32 * 131) == 1      # no partition count divides K
    with pytest.raises(NotApplicable, match="qmv kernel"):
        mlx_qmm.launch({**PREFILL, "M": 32}, [None] * 3, [None])
    with pytest.raises(NotApplicable, match="activation type"):
        mlx_qmm.launch({**PREFILL, "out_dtype": "float32"}, [None] * 3, [None])


def test_a_doctored_mxfp8_requantization_is_a_mismatch(monkeypatch):
    # the qmm kernel gets one group's e8m0 scale one step too large while the oracle is
    # evaluated on the right re-quantization: the comparison must catch it
    _headers_or_skip()
    from harness.bench.peers import mlx_qmm

    real = mlx_qmm.requantize_mxfp8

    def doctored(w):
        codes, e8m0, wq = real(w)
        e8m0 = e8m0.clone()
        e8m0[9, 3] += 1
        return codes, e8m0, wq

    monkeypatch.setattr(mlx_qmm, "requantize_mxfp8", doctored)
    _, m = _measured("qmm_fp8", PREFILL)
    peer = m.peers["mlx"]
    assert m.status == "pass" and peer["status"] == "mismatch", peer["message"]
    assert "output 0" in peer["message"]


def test_a_wrong_split_k_launch_is_a_mismatch(monkeypatch):
    # the accumulation told one partition fewer: the oracle must catch the missing part
    _headers_or_skip()
    from harness.bench.peers import mlx_qmm

    def short(p, inputs, outputs):
        split, total = mlx_qmm.launch(p, inputs, outputs)
        total.buffers[2][0] -= 1
        return [split, total]

    monkeypatch.setattr("harness.bench.peers.run.mlx_families", lambda: {"qmm_fp8": short})
    _, m = _measured("qmm_fp8", PREFILL)
    assert m.peers["mlx"]["status"] == "mismatch", m.peers["mlx"]["message"]


def test_the_prefill_fp8_case_has_no_qmv_peer():
    from harness.bench.peers import NotApplicable, mlx_qmv
    with pytest.raises(NotApplicable, match="decode"):
        mlx_qmv.launch({"M": 64, "N": 64, "K": 256, "scale": "row", "path": "gemm",
                        "dtype": "bfloat16", "out_dtype": "bfloat16"}, [None] * 3, [None])


PREFILL = {"M": 64, "N": 64, "K": 256, "scale": "row", "path": "gemm", "bM": 32, "bN": 32,
           "bK": 32, "threads": 128, "dtype": "bfloat16", "out_dtype": "bfloat16"}


AFFINE_CASES = [
    ({"M": 1, "N": 40, "K": 512, "scale": "block", "G": 128, "bM": 1, "bN": 16, "bK": 128,
      "threads": 32, "dtype": "bfloat16", "out_dtype": "bfloat16"},
     "affine_qmv_fast_bfloat16_t_gs_64_b_8"),        # N % 8 == 0, K % 256 == 0
    ({"M": 1, "N": 36, "K": 320, "scale": "row", "bM": 1, "bN": 8, "bK": 64, "threads": 64,
      "dtype": "float16", "out_dtype": "float16"},
     "affine_qmv_float16_t_gs_64_b_8"),               # a partial threadgroup of rows
    (PREFILL, "affine_qmm_t_splitk_bfloat16_t_gs_64_b_8"),   # 4 partitions of 64
    ({"M": 40, "N": 72, "K": 64, "scale": "block", "G": 32, "path": "gemm", "bM": 16,
      "bN": 16, "bK": 32, "threads": 64, "dtype": "float16", "out_dtype": "float16"},
     "affine_qmm_t_float16_t_gs_64_b_8_alN_false"),  # one group of K: no split
]


@pytest.mark.parametrize("params, kernel", AFFINE_CASES, ids=[k for _, k in AFFINE_CASES])
def test_mlx_affine_peer_matches_the_oracle_beside_the_mxfp8_one(params, kernel):
    _headers_or_skip()
    _, m = _measured("qmm_fp8", params, peers=("mlx", "mlx-affine"))
    assert m.status == "pass", m.message
    assert set(m.peers) == {"mlx", "mlx-affine"}
    peer = m.peers["mlx-affine"]
    assert peer["status"] == "pass", peer["message"]
    assert peer["kernel"].startswith(kernel) and peer["findings"] == []
    assert m.peers["mlx"]["status"] == "pass", m.peers["mlx"]["message"]
    assert m.peers["mlx"]["kernel"].startswith("mxfp8_")
    assert "affine 8-bit" in peer["formats"]
    want = m.counters["device_bytes_read"] / peer["counters"]["device_bytes_read"]
    assert peer["ratios"]["device_bytes_read"] == pytest.approx(want)


def test_affine8_requantization_is_mlxs_own_quantizer():
    """MLX's affine_quantize<T, 64, 8> (`mx.quantize(w, 64, 8)`'s kernel) run on the
    emulator gives the very codes, scales and biases the affine peer feeds qmv: for the
    case's weights and for a zero group, an all-positive and an all-negative one (the
    quantizer's maximum starts at 0) and one whose codes land on halves."""
    import numpy as np
    import torch

    from core.runtime.emu import run_msl
    from harness.bench.peers.mlx_affine_qmv import TORCH_TYPES, requantize_affine8
    from harness.gen.inputs import random_tensor
    from oracles import qmm as oracle

    _headers_or_skip()
    codes = oracle.quantize_e4m3(random_tensor((16, 256), "float32", 3),
                                 torch.full((16, 1), 0.01))
    w = oracle.dequant_e4m3(codes, torch.full((16,), 0.01))
    w[0, :64] = 0.0
    w[1, :64] = torch.linspace(0.1, 2.0, 64, dtype=torch.float64)
    w[2, 64:128] = -torch.linspace(0.1, 2.0, 64, dtype=torch.float64)
    w[3, :64] = torch.arange(64, dtype=torch.float64) * 0.5 - 8.0
    for dtype, msl_type in (("bfloat16", "bfloat16_t"), ("float16", "half")):
        name = f"affine_quantize_{msl_type}_gs_64_b_8"
        targs = f"{msl_type}, 64, 8"
        msl = mlx_wheel.source(("utils.h", "steel/gemm/gemm.h", "quantized_utils.h",
                                "quantized.h"),
                               f'template [[host_name("{name}")]] [[kernel]] decltype('
                               f"affine_quantize<{targs}>) affine_quantize<{targs}>;\n")
        q = torch.zeros(w.numel(), dtype=torch.uint8)
        s = torch.zeros(w.numel() // 64, dtype=TORCH_TYPES[dtype])
        b = torch.zeros_like(s)
        # quantized.cpp quantize_impl: a thread per 2 weights (a simdgroup per group of
        # 64), buffers w, codes, scales, biases; threadgroups of 256 here
        res = run_msl(msl, name, grid=(w.numel() // 512, 1, 1), threadgroup=(256, 1, 1),
                      buffers=[w.to(TORCH_TYPES[dtype]).flatten(), q, s, b])
        assert res.findings == []
        ours_q, ours_s, ours_b, wq = requantize_affine8(w, dtype)
        assert torch.equal(q, ours_q.flatten()), dtype
        assert torch.equal(s, ours_s.flatten()) and torch.equal(b, ours_b.flatten()), dtype
        assert torch.equal(wq[0, :64], torch.zeros(64, dtype=torch.float64))
        assert bool(np.isfinite(wq.numpy()).all())


def test_a_doctored_affine_requantization_is_a_mismatch(monkeypatch):
    # one group's bias shifted by a step of its scale in the kernel's inputs only
    _headers_or_skip()
    from harness.bench.peers import mlx_affine_qmv

    real = mlx_affine_qmv.requantize_affine8

    def doctored(w, dtype, group=mlx_affine_qmv.GROUP):
        q, s, b, wq = real(w, dtype, group)
        b = b.clone()
        b[7, 2] += s[7, 2].abs() * 4
        return q, s, b, wq

    monkeypatch.setattr(mlx_affine_qmv, "requantize_affine8", doctored)
    _, m = _measured("qmm_fp8", AFFINE_CASES[0][0], peers=("mlx-affine",))
    peer = m.peers["mlx-affine"]
    assert m.status == "pass" and peer["status"] == "mismatch", peer["message"]


def test_offline_without_the_wheel_the_peer_is_skipped_with_the_reason(tmp_path, monkeypatch):
    # an empty cache of the headers (the emulator's own cache stays where it is)
    monkeypatch.setattr(mlx_wheel, "cache_dir", lambda version=None: tmp_path / "mlx")
    monkeypatch.delenv("METALTILE_MLX_WHEEL", raising=False)
    monkeypatch.setenv("PIP_NO_INDEX", "1")          # pip finds nothing, asks no index
    with pytest.raises(mlx_wheel.PeerUnavailable) as err:
        mlx_wheel.headers()
    text = str(err.value)
    assert "mlx-metal==0.32.4 is not cached" in text and "METALTILE_MLX_WHEEL" in text
    case, m = _measured("softmax", {"M": 2, "N": 256, "dtype": "float32", "scale": 1.0,
                                    "bM": 1, "threads": 64})
    assert m.status == "pass" and m.peers["mlx"]["status"] == "unavailable"
    run = measure.BenchRun("t", {}, {}, "clang 19", {"cases": None}, {}, 0.0, [m])
    changes = compare(run, None)
    assert [(c.metric, c.kind) for c in changes if c.case == case.name] == [
        ("mlx peer", "note")]
    assert not gate_failed(changes)


def test_a_file_that_is_no_wheel_is_refused_clearly(tmp_path, monkeypatch):
    monkeypatch.setattr(mlx_wheel, "cache_dir", lambda version=None: tmp_path / "mlx")
    bogus = tmp_path / "mlx_metal-0.32.4-py3-none-macosx_14_0_arm64.whl"
    bogus.write_text("not a zip")
    monkeypatch.setenv("METALTILE_MLX_WHEEL", str(bogus))
    with pytest.raises(mlx_wheel.PeerUnavailable, match="cannot read the wheel"):
        mlx_wheel.headers()


# -- baseline, gate and report, on records as bench.json holds them -------------------------

def _peer_record(case, status="pass", **peer_counters):
    """A peer record for the generated measurement `case` whose counters are the case's,
    changed by `peer_counters`, with the ratios run.py would set."""
    ref = {**case.counters, **peer_counters}
    return {"peer": "mlx", "version": mlx_wheel.MLX_VERSION, "kernel": "k_mlx",
            "headers": ["k.h"], "host_code": "x.cpp", "grid": [1, 1, 1],
            "threadgroup": [32, 1, 1], "geometry": "one simdgroup", "formats": "",
            "status": status, "message": "" if status == "pass" else "output 0: off",
            "findings": [], "counters": ref, "modeled": case.modeled,
            "ratios": {k: measure.generated_over_reference(case.counters.get(k, 0),
                                                           ref.get(k, 0))
                       for k in measure.RATIO_COUNTERS},
            "modeled_ratios": {chip: 1.0 for chip in case.modeled}}


def _fake(name="fam/a", **counters):
    base = {k: 0 for k in measure.RATIO_COUNTERS}
    base.update(launches=1, device_bytes_read=1 << 20, device_bytes_written=1 << 20,
                device_load_ops=1 << 16, device_store_ops=1 << 16, simd_ops=64, barriers=2)
    base.update(counters)
    minimum = {"read": 1 << 20, "written": 1 << 20}
    m = measure.CaseMeasurement(name, "fam", {"n": 1}, "s", "x", status="pass",
                                counters=base, minimum=minimum, flops=10)
    m.modeled = measure.modeled(base, minimum, 10, ("M1", "M2"))
    return m


def _run(*cases):
    from harness.bench import roofline
    return measure.BenchRun("2026-01-01", {"commit": "0" * 40, "dirty": False},
                            {"node": "test", "cpus": 2}, "clang 19",
                            {"rounds": 1, "disable": [], "replace": [], "cases": None},
                            {n: roofline.CHIPS[n].describe() for n in ("M1", "M2")},
                            roofline.LAUNCH_OVERHEAD_S, list(cases))


def test_generated_over_mlx_ratios_are_recorded_and_a_worse_one_regresses(tmp_path):
    path = tmp_path / "baseline.json"
    case = _fake()
    case.peers = {"mlx": _peer_record(case, simd_ops=64)}
    update_baseline(_run(case), path)
    entry = load_baseline(path).cases["fam/a"].peers["mlx"]
    assert entry.kernel == "k_mlx" and entry.ratios["simd_ops"] == 1.0
    # MLX's kernel does half the simd operations now (another MLX, or the generated kernel
    # doubled them): the ratio 2.0 regresses, and fails the gate
    worse = _fake()
    worse.peers = {"mlx": _peer_record(worse, simd_ops=32)}
    changes = compare(_run(worse), load_baseline(path))
    assert [(c.metric, c.kind, c.baseline, c.current) for c in changes] == [
        ("generated/mlx simd_ops", "regression", 1.0, 2.0)]
    assert gate_failed(changes)
    better = _fake(simd_ops=32)
    better.peers = {"mlx": _peer_record(better, simd_ops=64)}
    kinds = {(c.metric, c.kind) for c in compare(_run(better), load_baseline(path))}
    assert ("generated/mlx simd_ops", "improvement") in kinds


def test_a_failing_peer_fails_the_gate_and_stays_out_of_the_baseline(tmp_path):
    case = _fake()
    case.peers = {"mlx": _peer_record(case, status="mismatch")}
    changes = compare(_run(case), None)
    assert ("mlx peer status", "failure", "mismatch") in {
        (c.metric, c.kind, c.current) for c in changes}
    assert gate_failed(changes)
    _, left_out = update_baseline(_run(case), tmp_path / "b.json")
    assert left_out == ["fam/a"]


def test_an_update_without_peers_keeps_the_peer_and_rebases_its_ratios(tmp_path):
    path = tmp_path / "baseline.json"
    case = _fake()
    case.peers = {"mlx": _peer_record(case)}
    update_baseline(_run(case), path)
    fewer = _fake(barriers=1)                       # the generated kernel lost a barrier
    update_baseline(_run(fewer), path)              # a run without --peers
    entry = load_baseline(path).cases["fam/a"].peers["mlx"]
    assert entry.counters["barriers"] == 2 and entry.ratios["barriers"] == 0.5
    assert entry.modeled_ratios["M2"] == pytest.approx(
        fewer.modeled["M2"]["seconds"] / case.modeled["M2"]["seconds"])


def test_peer_tables_fit_100_columns_and_bench_md_has_every_column():
    case = _fake(threadgroup_bytes_read=300, threadgroup_bytes_written=20)
    case.name = "softmax/vs-hand-tuned-looped-32000-f32"          # the longest case name
    case.peers = {"mlx": _peer_record(case, threadgroup_bytes_read=10,
                                      threadgroup_bytes_written=0, barriers=0)}
    run = _run(case)
    console = Console(width=100, record=True, force_terminal=False)
    for table in report.peer_tables(run):
        console.print(table)
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 100
    assert "32.00x" in text and "peer 0" in text      # tg bytes 320 / 10; barriers 2 / 0
    row = dict(zip(report.peer_header(["M1", "M2"]), report.peer_rows(run)[0]))
    assert row["generated does more"] == "tg B, barriers"
    assert "Generated against MLX's kernels (peers)" in report.markdown(run, [])


def test_a_second_peer_of_a_case_is_named_in_the_console_tables():
    case = _fake()
    case.peers = {"mlx": _peer_record(case), "mlx-affine": _peer_record(case)}
    console = Console(width=100, record=True, force_terminal=False)
    for table in report.peer_tables(_run(case)):
        console.print(table)
    text = console.export_text()
    assert "fam/a (mlx-affine)" in text and "fam/a " in text


def test_peer_records_survive_bench_json():
    from harness.bench.baseline import run_from_dict, run_to_dict
    case = _fake()
    case.peers = {"mlx": _peer_record(case)}
    back = run_from_dict(copy.deepcopy(run_to_dict(_run(case))))
    assert back.cases[0].peers == case.peers


def test_an_unknown_peer_is_a_usage_error(capsys):
    from harness.cli import main
    assert main(["bench", "--peers", "tvm", "--list"]) == 2
    assert "unknown peer(s) ['tvm']; known: mlx" in capsys.readouterr().err


def test_headers_are_extracted_once_from_a_wheel_on_disk(tmp_path, monkeypatch):
    # METALTILE_MLX_WHEEL: the wheel already downloaded (offline machines); the cache
    # holds only the kernel headers, and a second call reads the cache
    _headers_or_skip()
    import zipfile
    wheel = tmp_path / "mlx_metal-0.32.4-py3-none-macosx_14_0_arm64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path in sorted(mlx_wheel.headers().rglob("*.h")):
            rel = path.relative_to(mlx_wheel.headers())
            z.write(path, f"mlx/include/{rel}")
        z.writestr("mlx/lib/libmlx.dylib", b"not extracted")
    monkeypatch.setattr(mlx_wheel, "cache_dir", lambda version=None: tmp_path / "mlx")
    monkeypatch.setenv("METALTILE_MLX_WHEEL", str(wheel))
    root = mlx_wheel.headers()
    assert (root / mlx_wheel.KERNELS / "gemv.h").is_file()
    assert not list((tmp_path / "mlx").rglob("*.dylib"))
    wheel.unlink()                                   # cached: the wheel is not read again
    assert mlx_wheel.headers() == root
    text = mlx_wheel.source(("softmax.h",), "")
    assert '#include "' not in text and "softmax_looped" in text
