"""TileLang's testing/python/metal/test_metal_bf16_codegen.py (seed PR #2971), ported in our
own words with the kernels as written. TileLang pins its printer's spellings (a
`(bfloat)(1.5)` cast, `uint4` carriers); metaltile's printer spells them its own way, so
here the kernels run against torch on every backend (the emulator compiles the MSL text
with clang and checks it; MPS compiles it with Apple's compiler), and the MSL facts kept
are those both printers share: bf16 register vectors of two lanes, packed integer carriers
for bit-preserving bf16 copies. The gemm case of the same file is test_tilelang_ports.py's
test_gemm_jit_with_target_options.
"""

from __future__ import annotations

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


@T.prim_func
def bf16_numeric_vector(A: T.Tensor((8,), "bfloat16"), B: T.Tensor((8,), "bfloat16"),
                        C: T.Tensor((8,), "bfloat16")):
    with T.Kernel(1, threads=1):
        for i in T.vectorized(8):
            C[i] = T.max(A[i] + B[i], T.bfloat16(0))


@T.prim_func
def bf16_fp16_literals(A: T.Tensor((4,), "bfloat16"), B: T.Tensor((4,), "bfloat16"),
                       C: T.Tensor((4,), "float16"), D: T.Tensor((4,), "bfloat16"),
                       E: T.Tensor((4,), "float16")):
    with T.Kernel(1, threads=4):
        for i in T.Parallel(4):
            B[i] = A[i] + T.bfloat16(1.5)
            C[i] = T.float16(2.5)
            D[i] = T.bfloat16(float("inf"))
            E[i] = T.float16(float("inf"))


def test_bf16_numeric_vector(run):
    kernel = core.compile(bf16_numeric_vector, target="metal", execution_backend="torch")
    assert "bfloat2" in kernel.msl and "bfloat4" not in kernel.msl   # 2-lane registers
    a = torch.linspace(-2.0, 1.5, 8).to(torch.bfloat16)
    b = torch.linspace(0.5, 2.0, 8).to(torch.bfloat16)
    c = torch.empty_like(a)
    run(kernel, a, b, c)
    want = torch.maximum(a + b, torch.zeros(8, dtype=torch.bfloat16))   # bf16 arithmetic
    assert_close(c, want, "bfloat16", op_class="exact")


def test_fp16_bf16_literals(run):
    kernel = core.compile(bf16_fp16_literals, out_idx=[1, 2, 3, 4])
    a = random_tensor((4,), "bfloat16", 1)
    b, c, d, e = run(kernel, a)
    assert_close(b, (a.float() + 1.5).to(torch.bfloat16), "bfloat16", op_class="exact")
    assert_close(c, torch.full((4,), 2.5, dtype=torch.float16), "float16", op_class="exact")
    inf = float("inf")
    assert_close(d, torch.full((4,), inf, dtype=torch.bfloat16), "bfloat16", op_class="exact")
    assert_close(e, torch.full((4,), inf, dtype=torch.float16), "float16", op_class="exact")


def test_bf16_copy_moves_packed_carriers():
    """A staged bf16 tile copy moves 8 lanes as a uint4 (bits kept), never as bfloat8."""
    @T.prim_func
    def stage(A: T.Tensor((32, 16), "bfloat16"), B: T.Tensor((32, 16), "bfloat16")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((32, 16), "bfloat16")
            T.copy(A, S)
            T.copy(S, B)

    src = core.compile(stage).msl
    assert "uint4" in src or "uint2" in src
    assert "bfloat8" not in src and "bfloat4" not in src


def test_six_lane_bf16_vector_type_is_rejected():
    with pytest.raises(KernelDefinitionError) as info:
        @T.prim_func
        def bf16_six_lane_copy(A: T.Tensor((1,), "bfloat16x6"),
                               B: T.Tensor((1,), "bfloat16x6")):
            with T.Kernel(1, threads=1):
                B[0] = A[0]
    assert "bfloat16x6" in str(info.value)
