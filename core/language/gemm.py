"""`T.gemm`: C (+)= op(A) @ op(B) on simdgroup 8x8 matrices (TileLang's signature).

    T.gemm(A, B, C, transpose_A=False, transpose_B=False, clear_accum=False)

A is [M, K] ([K, M] when transpose_A), B is [K, N] ([N, K] when transpose_B), C is a
float32 `T.alloc_fragment` [M, N] accumulator; A and B are threadgroup (`T.alloc_shared`)
or fragment buffers of one dtype (float32, float16, bfloat16). `clear_accum=True` zeroes C
first. Emits one `tl.gemm` tile op (core/ir/ops.py), checked by the verifier and lowered by
core/transform/lower_gemm.py. TileLang's tuning keywords (`policy`, `k_pack`, `wg_wait`,
...) are accepted and have no effect on Metal.
"""

from __future__ import annotations

import enum

import tvm
from tvm import tirx
from tvm.tirx.script.builder import ir as _ir

from core.errors import KernelDefinitionError
from core.ir import ops
from core.language.tileops import _region


class GemmWarpPolicy(enum.IntEnum):
    """TileLang's warp-partition policies; accepted, the lowering picks the partition."""
    Square = 0
    FullRow = 1
    FullCol = 2


def gemm(A, B, C, transpose_A=False, transpose_B=False, policy=GemmWarpPolicy.Square,  # noqa: N803
         clear_accum=False, k_pack=1, wg_wait=0, **_tilelang_options):
    """C[M, N] (+)= op(A) @ op(B) with float32 accumulation."""
    flags = []
    for name, f in (("transpose_A", transpose_A), ("transpose_B", transpose_B),
                    ("clear_accum", clear_accum)):
        if isinstance(f, tvm.ir.Expr) and not isinstance(f, tirx.IntImm):
            raise KernelDefinitionError(
                f"{name}={f} is not a compile-time constant; pass True or False",
                construct="T.gemm")
        flags.append(tirx.const(int(bool(f.value if isinstance(f, tirx.IntImm) else f)),
                                "int32"))
    _ir.evaluate(ops.call("tl.gemm", _region(A, "T.gemm operand A"),
                          _region(B, "T.gemm operand B"), _region(C, "T.gemm operand C"),
                          *flags))
