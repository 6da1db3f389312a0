"""The bench registry: which kernels `harness bench` measures, at which LLM shapes (data only).

A new bench case goes into `CASES` below: one `BenchCase` = (kernel family of harness/gen,
that family's params) at a shape taken from LLM inference (Qwen2.5-7B dense, Qwen3 MoE),
with what it stands for and how it was scaled for the emulator. Measuring them is
harness/bench/measure.py; the baseline and the gate are harness/bench/baseline.py and
harness/bench/gate.py; the workflow that ties them together is harness/bench/workflow.py.

Shapes are scaled for the emulator, which runs ~10-50M simple thread operations per
second on this project's 2-core machines: row counts (tokens) are cut, row lengths and
reduction lengths stay real. Each case says what it represents and how it was scaled;
`full_scale` is the factor of work between the real shape and the one that ran, which the
report uses to extrapolate modeled time (linear in rows: exact for row-wise kernels).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from harness.bench import roofline


UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class Reference:
    """A time measured outside this project for the workload a case stands for (the seed
    implementation's figure on a real Mac), which the report sets beside the case's modeled
    time at the real shape, with the ratio. Never gated: it calibrates the model.

    value, unit  the figure as measured; unit "s", "ms", "us" or "ns", optionally per
                 something ("us/token"), and then `per` is how many of those one real-shape
                 run of the case does (the modeled time is divided by it)
    source       where the figure comes from, in words
    chip         the roofline chip it was measured on
    omits        what the model leaves out that the measurement includes (or the reverse)
    """
    value: float
    unit: str
    source: str
    chip: str = "M2"
    per: float = 1.0
    omits: str = ""

    def __post_init__(self):
        if self.unit.split("/")[0] not in UNIT_SECONDS:
            raise ValueError(f"reference unit {self.unit!r}: expected one of "
                             f"{sorted(UNIT_SECONDS)}, optionally '/<what>'")
        if self.chip not in roofline.CHIPS:
            raise ValueError(f"reference chip {self.chip!r} is not a roofline chip")
        if not (self.value > 0 and self.per > 0):
            raise ValueError("a reference needs a positive value and per")

    @property
    def seconds(self) -> float:
        """The figure in seconds (per `unit`'s something, if it has one)."""
        return self.value * UNIT_SECONDS[self.unit.split("/")[0]]

    def as_dict(self) -> dict:
        return {"value": self.value, "unit": self.unit, "source": self.source,
                "chip": self.chip, "per": self.per, "omits": self.omits,
                "seconds": self.seconds}


@dataclass(frozen=True)
class HandTuned:
    """Our best hand-written MSL for what a case's generated kernel computes, run beside it
    on the emulator at the same shape with the same inputs, oracle and checks; the bench
    reports generated / hand-tuned per counter and per modeled time, and the gate tracks
    those ratios (harness/bench/gate.py). The kernels are in harness/bench/reference_kernels/.

    file, kernel    harness/bench/reference_kernels/<file>, the kernel function in it
    threads         threadgroup size (any multiple of the simdgroup width); the grid is one
                    threadgroup per row (the case's param M), rows of length N (a multiple
                    of 4): the case's params give T/T4 (dtype), N and these #defines
    constants       case params passed as float #defines of the same name in capitals
                    (("eps",) -> EPS)
    geometry        the launch in words, for the report
    """
    file: str
    kernel: str
    threads: int
    constants: tuple = ()
    geometry: str = ""


@dataclass(frozen=True)
class BenchCase:
    name: str             # "family/what", unique; the key in baselines and reports
    family: str           # harness/gen family name
    params: dict          # that family's params
    shape: str            # the LLM shape it stands for
    scaling: str          # what was scaled down for the emulator, honestly
    full_scale: float = 1.0   # work at the real shape / work at this one
    reference: Reference | None = None   # a measured figure to set beside the model
    hand_tuned: HandTuned | None = None  # hand-written MSL run beside the generated kernel


# The seed implementation's measured M2 figures (issue 9), set beside the QMM cases' models.
_SEED_SHAPE = ("the seed's shape (not recorded with its figure; the model runs at the real "
               "shape the case names)")
_GEMV_OMITS = (f"{_SEED_SHAPE}, the achieved fraction of DRAM bandwidth, the integer decode "
               "work (not counted as flops); the per-lane partial sums' register spills are "
               "charged, as often as the MSL touches them (an estimate)")
_GEMM_OMITS = (f"{_SEED_SHAPE}; compute-bound here, at the FP32 FMA peak: the simdgroup-matrix "
               "rate, the decode into threadgroup memory and its barriers are not modeled")
FP8_SOURCE = "seed: fp8 (e4m3) dense QMM measured on an M2 (issue 9)"
FP8_DECODE_REFERENCE = Reference(695, "us", FP8_SOURCE, omits=_GEMV_OMITS)
FP8_PREFILL_REFERENCE = Reference(695, "us", FP8_SOURCE, omits=_GEMM_OMITS)
FP4_REFERENCE = Reference(702, "us", "seed: fp4 (e2m1) expert QMM measured on an M2 (issue 9); "
                          "870/870 numerical checks across its QMM paths",
                          omits=_GEMV_OMITS)

# Qwen2.5-7B: hidden 3584, intermediate 18944, vocab 152064, 28 heads x 128.
# Qwen3-30B-A3B (MoE): hidden 2048, expert intermediate 768. A 4096-token prefill is the
# real row count of the row-wise cases below.
PREFILL_TOKENS = 4096


def _qwen3_moe_decode(fused: bool) -> dict:
    """The moe family's params for one Qwen3-30B-A3B decode token (expert intermediate cut
    to 64), as 9 launches or with the routing fused: the two decode cases differ only there."""
    return {"M": 1, "D": 2048, "I": 64, "E": 128, "topk": 8, "renorm": True,
            "dtype": "bfloat16", "fused": fused, "bM": 1, "bE": 64, "rthreads": 256,
            "bN": 32, "bK": 64, "threads": 128}


CASES = (
    BenchCase("elementwise/residual-add-f16", "elementwise",
              {"M": 64, "N": 3584, "dtype": "float16", "out_dtype": "float16", "op": "add",
               "bM": 4, "bN": 256, "threads": 256},
              "residual add, Qwen2.5-7B hidden 3584, f16",
              f"rows 64 of {PREFILL_TOKENS} prefill tokens; row length real",
              PREFILL_TOKENS / 64),
    BenchCase("elementwise/gate-mul-bf16", "elementwise",
              {"M": 16, "N": 18944, "dtype": "bfloat16", "out_dtype": "bfloat16",
               "op": "mul", "bM": 2, "bN": 512, "threads": 256},
              "SwiGLU gate * up, Qwen2.5-7B intermediate 18944, bf16",
              f"rows 16 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 16),
    BenchCase("elementwise/silu-f32", "elementwise",
              {"M": 32, "N": 2048, "dtype": "float32", "out_dtype": "float32",
               "op": "sigmoid", "bM": 4, "bN": 256, "threads": 256},
              "activation (sigmoid), Qwen3-MoE hidden 2048, f32",
              f"rows 32 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 32),
    BenchCase("copy/k-transpose-f16", "copy",
              {"M": 256, "N": 128, "dtype": "float16", "mode": "transpose", "bM": 32,
               "bN": 32, "threads": 256},
              "K -> K^T for attention scores, head_dim 128, one KV head, f16",
              f"rows (tokens) 256 of {PREFILL_TOKENS}; head_dim real", PREFILL_TOKENS / 256),
    BenchCase("copy/hidden-shared-bf16", "copy",
              {"M": 32, "N": 3584, "dtype": "bfloat16", "mode": "shared", "bM": 4,
               "bN": 256, "threads": 256},
              "hidden-state tiles staged through threadgroup memory, Qwen2.5-7B 3584, bf16",
              f"rows 32 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 32),
    BenchCase("cast/f32-to-bf16", "cast",
              {"M": 32, "N": 3584, "src": "float32", "dst": "bfloat16", "via": "cast",
               "bM": 4, "bN": 256, "threads": 256},
              "f32 activations -> bf16 before a bf16 GEMM, Qwen2.5-7B hidden 3584",
              f"rows 32 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 32),
    BenchCase("cast/f16-to-f32-shared", "cast",
              {"M": 32, "N": 3584, "src": "float16", "dst": "float32", "via": "shared",
               "bM": 4, "bN": 256, "threads": 256},
              "f16 -> f32 widening through a threadgroup tile (T.copy converts), hidden 3584",
              f"rows 32 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 32),
    BenchCase("conditional/attn-mask-f32", "conditional",
              {"M": 16, "N": 4096, "dtype": "float32", "mode": "mask", "threshold": "scalar",
               "t": 0.0, "bM": 2, "bN": 512, "threads": 256},
              "attention-score mask select (bool mask), key length 4096, f32",
              f"rows (heads x queries) 16 of 28 x {PREFILL_TOKENS}; key length real",
              28 * PREFILL_TOKENS / 16),
    BenchCase("conditional/relu-f16", "conditional",
              {"M": 32, "N": 3584, "dtype": "float16", "mode": "relu", "threshold": "literal",
               "t": 0.0, "bM": 4, "bN": 256, "threads": 256},
              "ReLU-style select in a fragment, hidden 3584, f16",
              f"rows 32 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 32),
    BenchCase("multikernel/chain3-f16", "multikernel",
              {"N": 57344, "dtype": "float16", "kernels": 3, "read": "tile_reverse",
               "shift": 0, "b1": 256, "b2": 256, "b3": 256, "t1": 256, "t2": 128,
               "t3": 256},
              "three dependent launches over 16 x 3584 f16 elements (launch overhead and "
              "intermediate round trips through device memory)",
              f"16 of {PREFILL_TOKENS} rows of 3584", PREFILL_TOKENS / 16),
    BenchCase("multikernel/eager-host-loop-f16", "multikernel",
              {"style": "eager", "workspace": True, "loop": 4, "N": 57344,
               "dtype": "float16", "kernels": 3, "read": "reverse", "shift": 0,
               "b1": 256, "b2": 256, "b3": 256, "t1": 256, "t2": 128, "t3": 256},
              "an eager-style host program: three kernels, the middle one launched 4 times "
              "from a host loop (one chunk each), the intermediate a runtime workspace; its "
              "compile time is the trace plus the compile",
              f"16 of {PREFILL_TOKENS} rows of 3584", PREFILL_TOKENS / 16),
    BenchCase("scalars/dynamic-f16", "scalars",
              {"M": 32, "N": 3584, "dtype": "float16",
               "signature": ["int32", "A", "float32", "B", "bool"], "symbolic": "both",
               "bM": 4, "bN": 256, "threads": 256},
              "runtime scalars (args struct) and symbolic dims, as a decode step passes "
              "positions and scales; hidden 3584, f16",
              f"rows 32 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 32),
    BenchCase("reduce/row-sum-f16", "reduce",
              {"M": 64, "N": 3584, "dim": 1, "kind": "sum", "dtype": "float16",
               "out_dtype": "float32", "clear": True, "keepdim": False, "block": 2,
               "threads": 256},
              "row sums (norm statistics), Qwen2.5-7B hidden 3584, f16 -> f32",
              f"rows 64 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 64),
    BenchCase("reduce/row-absmax-bf16", "reduce",
              {"M": 64, "N": 3584, "dim": 1, "kind": "absmax", "dtype": "bfloat16",
               "out_dtype": "float32", "clear": True, "keepdim": False, "block": 4,
               "threads": 128},
              "per-row absmax for fp8 (e4m3) activation scales, hidden 3584, bf16",
              f"rows 64 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 64),
    BenchCase("softmax/attn-scores-f16", "softmax",
              {"M": 64, "N": 4096, "dtype": "float16", "scale": 0.125, "bM": 2,
               "threads": 256},
              "attention-score softmax, key length 4096, scale 1/8, f16",
              f"rows (heads x queries) 64 of 28 x {PREFILL_TOKENS}; key length real",
              28 * PREFILL_TOKENS / 64),
    BenchCase("softmax/vocab-f32", "softmax",
              {"M": 2, "N": 152064, "dtype": "float32", "scale": 1.0, "bM": 1,
               "threads": 256},
              "decode logits softmax over the Qwen2.5 vocabulary (152064), batch 2, f32",
              "real shape", 1.0),
    BenchCase("rmsnorm/qwen7b-bf16", "rmsnorm",
              {"M": 64, "N": 3584, "dtype": "bfloat16", "eps": 1e-6, "weight": "shared",
               "bM": 2, "threads": 256},
              "RMSNorm, Qwen2.5-7B hidden 3584, weight staged in threadgroup memory, bf16",
              f"rows 64 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 64),
    BenchCase("rmsnorm/moe-f16", "rmsnorm",
              {"M": 64, "N": 2048, "dtype": "float16", "eps": 1e-6, "weight": "global",
               "bM": 2, "threads": 256},
              "RMSNorm, Qwen3-MoE hidden 2048, weight read from device memory, f16",
              f"rows 64 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 64),
    BenchCase("gemm/decode-f16", "gemm",
              {"M": 8, "N": 18944, "K": 3584, "bM": 16, "bN": 64, "bK": 32, "threads": 128,
               "dtype": "float16", "out_dtype": "float16", "trans_A": False, "trans_B": True,
               "num_stages": 2, "init": "clear"},
              "decode GEMV-like up-projection (8 tokens), Qwen2.5-7B 3584 -> 18944, "
              "weights N x K, f16",
              "real shape", 1.0),
    BenchCase("gemm/moe-expert-bf16", "gemm",
              {"M": 8, "N": 768, "K": 2048, "bM": 16, "bN": 64, "bK": 32, "threads": 128,
               "dtype": "bfloat16", "out_dtype": "bfloat16", "trans_A": False,
               "trans_B": True, "num_stages": 2, "init": "clear"},
              "one MoE expert's gate projection for 8 routed tokens, Qwen3-MoE "
              "2048 -> 768, bf16",
              "real shape", 1.0),
    BenchCase("gemm/prefill-bf16", "gemm",
              {"M": 128, "N": 3584, "K": 3584, "bM": 64, "bN": 64, "bK": 32, "threads": 256,
               "dtype": "bfloat16", "out_dtype": "bfloat16", "trans_A": False,
               "trans_B": True, "num_stages": 2, "init": "clear"},
              "prefill projection, Qwen2.5-7B 3584 -> 3584, bf16",
              f"M 128 of {PREFILL_TOKENS} tokens; N and K real", PREFILL_TOKENS / 128),
    BenchCase("reduce/row-sum-splitk-atomic-f32", "reduce",
              {"M": 64, "N": 3584, "dim": 1, "kind": "sum", "dtype": "float32",
               "out_dtype": "float32", "clear": True, "keepdim": False, "block": 2,
               "threads": 256, "combine": "atomic", "splits": 4},
              "row sums split 4 ways over the row, partials combined with T.atomic_add "
              "(split-K), Qwen2.5-7B hidden 3584, f32",
              f"rows 64 of {PREFILL_TOKENS}; row length real", PREFILL_TOKENS / 64),
    BenchCase("gemm/prefill-shared-acc-f16", "gemm",
              {"M": 64, "N": 128, "K": 3584, "bM": 32, "bN": 32, "bK": 32, "threads": 128,
               "dtype": "float16", "out_dtype": "float16", "trans_A": False,
               "trans_B": True, "num_stages": 0, "init": "clear", "accum": "shared",
               "pad": 4},
              "prefill projection with the accumulator in threadgroup memory (TileLang's "
              "Metal GEMM path, padded rows), Qwen2.5-7B 3584 -> 3584, f16",
              f"M 64 of {PREFILL_TOKENS} tokens, N 128 of 3584; K real",
              PREFILL_TOKENS / 64 * 3584 / 128),
    BenchCase("gemm/shared-acc-window-f16", "gemm",
              {"M": 64, "N": 64, "K": 512, "bM": 32, "bN": 32, "bK": 32, "threads": 128,
               "dtype": "float16", "out_dtype": "float32", "trans_A": False,
               "trans_B": True, "num_stages": 0, "init": "clear", "accum": "shared",
               "pad": 4, "epilogue": "window", "window": [2, 3, 5, 4]},
              "shared accumulator whose simdgroup-stored 8x8 tiles are read in part by other "
              "threads (a window of each tile): the barrier planner's tile footprints",
              "synthetic shape", 1.0),
    # The decode GEMM above, written as a GEMV (harness/gen/gemv.py): the same shape.
    BenchCase("gemv/decode-f16", "gemv",
              {"M": 8, "N": 18944, "K": 3584, "bM": 8, "bN": 16, "bK": 128, "threads": 512,
               "dtype": "float16", "out_dtype": "float16", "form": "lanes"},
              "decode up-projection (8 tokens) as a GEMV: a simdgroup per weight row, its "
              "lanes split K into 4-element runs and keep 8 float partials each, simd_sum "
              "combines, no simdgroup matrices; Qwen2.5-7B 3584 -> 18944, weights N x K, "
              "f16", "real shape", 1.0),
    # A few-row f16 GEMV at a shape MLX measured on an M1 Pro (its gemv_wide kernel, not
    # this one): the absolute scale of the memory and cache terms against a real GPU.
    BenchCase("gemv/mlx-measured-m8-f16", "gemv",
              {"M": 8, "N": 2048, "K": 2048, "bM": 8, "bN": 16, "bK": 128, "threads": 512,
               "dtype": "float16", "out_dtype": "float16", "form": "lanes"},
              "x[8, 2048] @ w[32000, 2048]^T in f16 (8 decode rows against a vocabulary-sized "
              "weight), as a GEMV", "N 2048 of 32000; rows and K real", 32000 / 2048,
              Reference(1.181, "ms", "ml-explore/mlx issue #3967: MLX's gemv_wide kernel, "
                        "x[8,2048] @ w[32000,2048]^T f16 on an M1 Pro (14-core GPU, 200 GB/s), "
                        "ms per dispatch, best of 5x20, inputs preallocated; the same issue "
                        "gives 0.0825 ms at N=2048 and MLX's tiled GEMM at 1.295 / 0.1225 ms",
                        chip="M1 Pro",
                        omits="another kernel (MLX's gemv_wide); the achieved fraction of "
                              "DRAM bandwidth (the model takes the peak); the measuring "
                              "chip's 14 GPU cores against the model's 16")),
    # Quantized matmuls at the seed's execution patterns (issue 9). The seed's M2 figures
    # come without their shapes; the real shapes below are Qwen3's, stated as such.
    BenchCase("qmm_fp8/decode-m1", "qmm_fp8",
              # bN 8: 16 weight rows a simdgroup held 472 bytes of thread arrays, which the
              # model spills (113 us on an M2 against 47 us, its memory bound, at 8 rows).
              # stage_scales False: each thread loads its rows' block scale per step, as
              # MLX's qmv does; staging the 1 KiB of them behind a barrier modeled no faster
              # (47.068 against 47.056 us on an M2) and was threadgroup work and a barrier
              # MLX does not do (docs/bench.md)
              {"M": 1, "N": 1024, "K": 4096, "scale": "block", "G": 128, "bM": 1, "bN": 8,
               "bK": 128, "threads": 32, "dtype": "bfloat16", "out_dtype": "bfloat16",
               "stage_scales": False},
              "fp8 e4m3 dense QMM, decode (1 token), Qwen3-8B MLP 4096 -> 12288, 128 x 128 "
              "block scales, bf16 activations", "N 1024 of 12288; token and K real",
              12288 / 1024, FP8_DECODE_REFERENCE),
    BenchCase("qmm_fp8/prefill-m64", "qmm_fp8",
              {"M": 64, "N": 256, "K": 4096, "scale": "row", "path": "gemm", "bM": 64,
               "bN": 64, "bK": 32, "threads": 128, "dtype": "bfloat16",
               "out_dtype": "bfloat16"},
              "fp8 e4m3 dense QMM, prefill (64 tokens): weight tiles decoded into threadgroup "
              "memory, simdgroup-matrix GEMM; Qwen3-8B MLP 4096 -> 12288, per-row scales, "
              "bf16 activations", "N 256 of 12288; tokens and K real", 12288 / 256,
              FP8_PREFILL_REFERENCE),
    BenchCase("qmm_fp4/experts-bf16", "qmm_fp4",
              {"E": 4, "T": 4, "N": 768, "K": 2048, "bM": 4, "bN": 64, "threads": 256,
               "dtype": "bfloat16", "out_dtype": "bfloat16", "x": "shared"},
              "fp4 e2m1 expert QMM (group-32 float16 scales), one grid slice per expert, "
              "its tokens and scales staged in threadgroup memory: Qwen3-30B-A3B gate "
              "projection 2048 -> 768 for 128 experts x 4 routed tokens (a 64-token prefill, "
              "top-8), bf16 activations", "experts 4 of 128; tokens, N and K real",
              128 / 4, FP4_REFERENCE),
    # Qwen3-Next (80B-A3B) Gated DeltaNet layers: 16 q/k heads, 32 value heads, head dims
    # 128 x 128, bf16 activations, float32 state (64 KiB per value head).
    # k and q loaded and normalized per simdgroup, as MLX's gated_delta keeps them per lane
    # (kq "per_lane", both GDN cases): no threadgroup stage or barrier; modeled no slower on
    # M1-M4 than staging them (64 tokens: 29.8 against 66.8 us on an M2; docs/bench.md)
    BenchCase("gdn_decode/qwen3next-1tok-bf16", "gdn_decode",
              {"tokens": 1, "HK": 2, "groups": 2, "DK": 128, "DV": 128, "dtype": "bfloat16",
               "bV": 16, "threads": 128, "state": "rows", "kq": "per_lane"},
              "GDN decode, one token per launch (state read from and written to device "
              "memory every token), Qwen3-Next 16 q/k x 32 v heads of 128 x 128, bf16",
              "value heads 4 of 32; head dims real", 32 / 4),
    # 16 value columns on 128 threads (both GDN cases, which differ only in tokens per
    # launch): 16 state floats a thread (and 16 of products), in the register file; 64
    # columns on 256 threads held 32 + 32 and spilled at 64 tokens (the model put it at
    # 134 us against 67 us at 16, staged; docs/bench.md)
    BenchCase("gdn_decode/qwen3next-64tok-bf16", "gdn_decode",
              {"tokens": 64, "HK": 2, "groups": 2, "DK": 128, "DV": 128, "dtype": "bfloat16",
               "bV": 16, "threads": 128, "state": "rows", "kq": "per_lane"},
              "GDN decode, 64 tokens per launch with the state on chip across tokens, "
              "Qwen3-Next 16 q/k x 32 v heads of 128 x 128, bf16",
              "value heads 4 of 32; head dims and tokens real", 32 / 4,
              Reference(28.9, "us/token", "seed PR, 64-token GDN decode kernel on an M2",
                        per=64, omits="the latency of the token loop's reductions and "
                        "barriers (their throughput is charged, and the state's register "
                        "spills, as often as the MSL touches them: an estimate)")),
    # Decode attention: one query token over a 4096-token KV cache, 32 query heads sharing
    # 8 KV heads of 128 (Llama-3-8B / Qwen3-8B), split-K over the keys, then a combine.
    # The splits' partial outputs are stored in the input dtype, as MLX's 2-pass kernel
    # keeps them (half the workspace traffic; docs/bench.md says what it costs in accuracy).
    BenchCase("attention_decode/gqa-4096-f16", "attention_decode",
              {"HK": 8, "groups": 4, "N": 4096, "D": 128, "dtype": "float16",
               "splits": 64, "bN": 1, "threads": 64, "combine_threads": 32,
               "partials": "input"},
              "decode attention, one query token, key length 4096, 32 query heads over 8 "
              "KV heads of 128 (GQA 4), f16", "the real shape, one layer", 1.0),
    BenchCase("attention_decode/gqa-4096-bf16", "attention_decode",
              {"HK": 8, "groups": 4, "N": 4096, "D": 128, "dtype": "bfloat16",
               "splits": 64, "bN": 1, "threads": 64, "combine_threads": 32,
               "partials": "input"},
              "decode attention, one query token, key length 4096, 32 query heads over 8 "
              "KV heads of 128 (GQA 4), bf16", "the real shape, one layer", 1.0),
    # Qwen3-30B-A3B MoE block: hidden 2048, 128 experts of intermediate 768, top-8 with
    # renormalized weights, bf16. Expert weight traffic and FLOPs scale with the expert
    # intermediate size; the router's (E x hidden) do not, so the linear extrapolation
    # overstates them (under 2% of the real shape's bytes).
    BenchCase("moe/qwen3-30b-decode-multi-bf16", "moe", _qwen3_moe_decode(fused=False),
              "MoE block for one decode token as 9 launches (router, softmax, top-k, gather, "
              "gate, up, SiLU*up, down, combine), Qwen3-30B-A3B 128 experts top-8, bf16",
              "expert intermediate 64 of 768; token, hidden, experts and top-k real", 768 / 64,
              Reference(17.4, "ms", "seed PR, production MoE block (9 launches) on an M2",
                        omits="the token count of the seed's measurement is not recorded "
                        "with the figure (this case models one decode token); no cache, "
                        "5 us per launch")),
    BenchCase("moe/qwen3-30b-decode-fused-bf16", "moe", _qwen3_moe_decode(fused=True),
              "MoE block for one decode token, routing fused (router, softmax, top-k and "
              "gather in one launch; gate+up+SiLU in one): 4 launches, Qwen3-30B-A3B, bf16",
              "expert intermediate 64 of 768; token, hidden, experts and top-k real", 768 / 64),
    BenchCase("moe/e64-top2-prefill-multi-f16", "moe",
              {"M": 8, "D": 2048, "I": 64, "E": 64, "topk": 2, "renorm": False,
               "dtype": "float16", "fused": False, "bM": 4, "bE": 64, "rthreads": 256,
               "bN": 32, "bK": 64, "threads": 128},
              "MoE block over 8 prefill tokens, 64 experts top-2 (softmax weights), hidden "
              "2048, expert intermediate 768, f16, 9 launches",
              "tokens 8 of a prefill; expert intermediate 64 of 768; hidden real", 768 / 64),
)


# Generated kernels against our hand-tuned MSL (issue 13), at the shapes the issue names:
# Qwen2.5/Qwen3 hidden sizes 4096 and 3584, attention rows of 1024 keys, a 32000-entry
# vocabulary (the looped softmax). The generated side uses metaltile's best tiling for each
# (one row per threadgroup, the most threads that leave no lane idle: 896 = 3584 / 4 for
# hidden size 3584); the hand-tuned side its own geometry, stated per case.
_VS = "generated vs hand-tuned"
HAND_TUNED_CASES = (
    BenchCase("rmsnorm/vs-hand-tuned-4096-f32", "rmsnorm",
              {"M": 32, "N": 4096, "dtype": "float32", "eps": 1e-6, "weight": "global",
               "bM": 1, "threads": 512},
              f"RMSNorm 32 x 4096 (Qwen3-8B hidden), f32, {_VS}", "the issue's shape, real",
              1.0, hand_tuned=HandTuned("rmsnorm.metal", "rmsnorm_row", 512, ("eps",),
                                        "one row per threadgroup, 512 threads x 2 float4")),
    BenchCase("rmsnorm/vs-hand-tuned-3584-f16", "rmsnorm",
              {"M": 8, "N": 3584, "dtype": "float16", "eps": 1e-6, "weight": "global",
               "bM": 1, "threads": 896},
              f"RMSNorm 8 x 3584 (Qwen2.5-7B hidden), f16, {_VS}", "the issue's shape, real",
              1.0, hand_tuned=HandTuned("rmsnorm.metal", "rmsnorm_row", 896, ("eps",),
                                        "one row per threadgroup, 896 threads x 1 half4 "
                                        "(MLX's exact fit for 3584)")),
    BenchCase("softmax/vs-hand-tuned-1024-f16", "softmax",
              {"M": 64, "N": 1024, "dtype": "float16", "scale": 1.0, "bM": 1,
               "threads": 256},
              f"softmax 64 x 1024 (attention rows), f16, {_VS}", "the issue's shape, real",
              1.0, hand_tuned=HandTuned("softmax.metal", "softmax_row", 256, ("scale",),
                                        "one row per threadgroup, 256 threads x 1 half4")),
    BenchCase("softmax/vs-hand-tuned-looped-32000-f32", "softmax",
              {"M": 4, "N": 32000, "dtype": "float32", "scale": 1.0, "bM": 1,
               "threads": 512},
              f"softmax over a 32000-entry vocabulary, f32, {_VS} (looped: online "
              "max/sum pass, then a normalizing pass)",
              "rows 4 of the issue's 16; row length real", 16 / 4,
              hand_tuned=HandTuned("softmax.metal", "softmax_looped", 1024, ("scale",),
                                   "one row per threadgroup, 1024 threads streaming float4, "
                                   "the row read twice")),
    BenchCase("layernorm/vs-hand-tuned-4096-f16", "layernorm",
              {"M": 32, "N": 4096, "dtype": "float16", "eps": 1e-5, "bM": 1,
               "threads": 512},
              f"layer_norm 32 x 4096, f16, {_VS}", "the issue's shape, real", 1.0,
              hand_tuned=HandTuned("layernorm.metal", "layernorm_row", 512, ("eps",),
                                   "one row per threadgroup, 512 threads x 2 half4")),
)
CASES = CASES + HAND_TUNED_CASES


# -- selection -----------------------------------------------------------------------------

def select(patterns: str | None, cases=CASES) -> list[BenchCase]:
    """Cases whose name or family matches any comma-separated pattern (fnmatch, or a plain
    substring of the name); all cases when `patterns` is empty."""
    if not patterns:
        return list(cases)
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    chosen = [c for c in cases
              if any(fnmatch.fnmatchcase(c.name, p) or fnmatch.fnmatchcase(c.family, p)
                     or p in c.name for p in pats)]
    if not chosen:
        raise KeyError(f"no bench case matches {patterns!r}; cases: "
                       f"{', '.join(c.name for c in cases)}")
    return chosen
