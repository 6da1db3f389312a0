"""Kernels in TileLang's eager style (`@core.jit` on a plain function): elementwise with a
T.empty output, GEMM with T.const("M N K") and T.Pipelined, RMSNorm in one kernel,
T.macro reuse, f.compile, f.get_tir and the specialization cache. Each runs on the
emulator with every check on and is compared with a torch oracle."""

import torch

import core
import core.language as T
from core.language.eager_function import EagerFunction
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from oracles.norm import rmsnorm
from suites.eager.conftest import run_eager


@core.jit
def scaled_add(A, B, block_M: int, block_N: int, dtype=T.float16, threads=128):
    M, N = T.const("M, N")
    A: T.Tensor((M, N), dtype)
    B: T.Tensor[[M, N], dtype]
    C = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        a = T.alloc_shared((block_M, block_N), dtype)
        b = T.alloc_fragment((block_M, block_N), dtype)
        c = T.alloc_fragment((block_M, block_N), "float32")
        T.copy(A[by * block_M, bx * block_N], a)
        T.copy(B[by * block_M, bx * block_N], b)
        for i, j in T.Parallel(block_M, block_N):
            c[i, j] = T.cast(a[i, j], "float32") * 2.0 + T.cast(b[i, j], "float32")
        T.copy(c, C[by * block_M, bx * block_N])
    return C


def _oracle_scaled_add(a, b):
    return (a.double() * 2 + b.double()).to(a.dtype)


def test_elementwise_empty_output_ragged():
    a, b = random_tensor((40, 72), "float16", 1), random_tensor((40, 72), "float16", 2)
    out = run_eager(scaled_add, a, b, block_M=16, block_N=32)
    assert_close(out, _oracle_scaled_add(a, b))


def test_elementwise_float32_by_python_param():
    a, b = random_tensor((32, 64), "float32", 3), random_tensor((32, 64), "float32", 4)
    out = run_eager(scaled_add, a, b, 16, 32, dtype=T.float32, threads=64)
    assert_close(out, _oracle_scaled_add(a, b))


def test_one_specialization_per_key(monkeypatch):
    traces = []
    real = EagerFunction._trace

    def counting(self, py, consts):
        traces.append(consts)
        return real(self, py, consts)

    monkeypatch.setattr(EagerFunction, "_trace", counting)

    @core.jit
    def double(A, block: int):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        B = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    B[bx * block + i] = A[bx * block + i] * 2.0
        return B

    a = random_tensor((100,), "float32", 5)
    assert_close(run_eager(double, a, 64), a * 2)
    assert_close(run_eager(double, a + 1, 64), (a + 1) * 2)      # same key: no new trace
    assert traces == [None, {"N": 100}]
    k1 = double.specialize(a, 64)
    b = random_tensor((70,), "float32", 6)
    assert_close(run_eager(double, b, 64), b * 2)
    assert traces == [None, {"N": 100}, {"N": 70}]                # new N: one more trace
    assert double.specialize(a, block=64) is k1
    run_eager(double, a, 32)                                      # new python param
    assert traces[-2:] == [None, {"N": 100}]


@core.jit
def matmul(A, B, block_M, block_N, block_K, dtype=T.float16, accum_dtype=T.float32):
    M, N, K = T.const("M N K")
    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
        T.clear(C_local)
        for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[by * block_M, ko * block_K], A_shared)
            T.copy(B[ko * block_K, bx * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[by * block_M, bx * block_N])
    return C


def test_gemm_compile_then_call(run):
    kernel = matmul.compile(M=64, N=48, K=96, block_M=32, block_N=16, block_K=32)
    a, b = random_tensor((64, 96), "float16", 7), random_tensor((96, 48), "float16", 8)
    c = run(kernel, a, b)
    assert_close(c, (a.double() @ b.double()).half(), "float16", reduction_length=96,
                 op_class="accumulation")
    # the call path binds M, N, K from the shapes and finds the same specialization
    assert matmul.specialize(a, b, 32, 16, 32) is kernel


def test_gemm_bf16_called():
    a, b = random_tensor((40, 64), "bfloat16", 9), random_tensor((64, 32), "bfloat16", 10)
    c = run_eager(matmul, a, b, 32, 32, 32, dtype=T.bfloat16)
    assert_close(c, (a.double() @ b.double()).bfloat16(), "bfloat16", reduction_length=64,
                 op_class="accumulation")


def test_get_tir_is_the_specialization():
    func = matmul.get_tir(M=64, N=64, K=64, block_M=32, block_N=32, block_K=32)
    assert [p.name for p in func.params] == ["A", "B", "C"]
    assert [int(d) for d in func.params[0].ty.shape] == [64, 64]
    a = torch.zeros(64, 32).half()
    func2 = matmul.get_tir(a, torch.zeros(32, 16).half(), 32, 16, 32)
    assert [int(d) for d in func2.params[2].ty.shape] == [64, 16]


@core.jit
def rms_norm(X, W, blk_m: int, eps: float = 1e-6):
    M, N = T.const("M, N")
    X: T.Tensor((M, N), T.float16)
    W: T.Tensor((N,), T.float16)
    Y = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(M, blk_m), threads=128) as bx:
        x = T.alloc_fragment((blk_m, N), T.float32)
        sq = T.alloc_fragment((blk_m, N), T.float32)
        ss = T.alloc_fragment((blk_m,), T.float32)
        T.copy(X[bx * blk_m: (bx + 1) * blk_m, :], x)
        for i, j in T.Parallel(blk_m, N):
            sq[i, j] = x[i, j] * x[i, j]
        T.reduce_sum(sq, ss, dim=1)
        for i in T.Parallel(blk_m):
            ss[i] = T.rsqrt(ss[i] / N + eps)
        for i, j in T.Parallel(blk_m, N):
            x[i, j] = x[i, j] * ss[i] * T.cast(W[j], T.float32)
        T.copy(x, Y[bx * blk_m: (bx + 1) * blk_m, :])
    return Y


def test_rmsnorm_single_kernel():
    x, w = random_tensor((6, 256), "float16", 11), random_tensor((256,), "float16", 12)
    y = run_eager(rms_norm, x, w, blk_m=2)
    assert_close(y, rmsnorm(x, w, 1e-6), "float16", reduction_length=256,
                 op_class="accumulation")


@T.macro
def load_scaled(src, dst, row, scale):
    T.copy(src[row, 0], dst)
    for i, j in T.Parallel(1, 64):
        dst[i, j] = dst[i, j] * scale


@T.macro
def load_scaled_plus_one(src, dst, row, scale):
    load_scaled(src, dst, row, scale)          # a macro calling a macro
    for i, j in T.Parallel(1, 64):
        dst[i, j] = dst[i, j] + 1.0


@core.jit
def two_uses(A, B):
    M = T.const("M")
    A: T.Tensor((M, 64), T.float32)
    B: T.Tensor((M, 64), T.float32)
    C = T.empty((M, 64), T.float32)
    with T.Kernel(M, threads=64) as row:
        a = T.alloc_fragment((1, 64), T.float32)
        b = T.alloc_fragment((1, 64), T.float32)
        load_scaled(A, a, row, 3.0)
        load_scaled_plus_one(B, b, row, 0.5)
        for i, j in T.Parallel(1, 64):
            a[i, j] = a[i, j] + b[i, j]
        T.copy(a, C[row, 0])
    return C


def test_macro_reuse_eager():
    a, b = random_tensor((5, 64), "float32", 13), random_tensor((5, 64), "float32", 14)
    assert_close(run_eager(two_uses, a, b), a * 3 + (b * 0.5 + 1))


def test_macro_in_prim_func(run):
    @T.prim_func
    def k(A: T.Tensor((4, 64), "float32"), C: T.Tensor((4, 64), "float32")):
        with T.Kernel(4, threads=64) as row:
            a = T.alloc_fragment((1, 64), "float32")
            load_scaled_plus_one(A, a, row, 2.0)
            T.copy(a, C[row, 0])
    a = random_tensor((4, 64), "float32", 15)
    assert_close(run(core.compile(k, out_idx=[1]), a), a * 2 + 1)


@core.jit
def clamp_or_copy(A, clamp: bool, lo: float = -0.5, hi: float = 0.5):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
        for i in T.Parallel(32):
            g = bx * 32 + i
            if g < N and clamp:                 # a TIR condition and a Python one
                B[g] = T.min(T.max(A[g], lo), hi)
            elif g < N:
                B[g] = A[g]
    return B


def test_python_control_flow_at_trace_time():
    a = random_tensor((50,), "float32", 16)
    assert_close(run_eager(clamp_or_copy, a, True), a.clamp(-0.5, 0.5))
    assert_close(run_eager(clamp_or_copy, a, False), a)
    assert "min" not in clamp_or_copy.specialize(a, False).msl


def test_par_compile_two_specializations(run):
    configs = [dict(M=32, N=64, block_M=16, block_N=32),
               dict(M=16, N=32, block_M=16, block_N=32, dtype=T.float32)]
    k16, k32 = core.par_compile(scaled_add, configs, num_workers=2)
    a, b = random_tensor((32, 64), "float16", 17), random_tensor((32, 64), "float16", 18)
    assert_close(run_eager(scaled_add, a, b, 16, 32), _oracle_scaled_add(a, b))
    assert scaled_add.specialize(a, b, 16, 32) is k16
    a, b = random_tensor((16, 32), "float32", 19), random_tensor((16, 32), "float32", 20)
    assert scaled_add.specialize(a, b, 16, 32, dtype=T.float32) is k32
    assert_close(run(k32, a, b), _oracle_scaled_add(a, b))


@core.jit(pass_configs={"tl.disable_tma_lower": True}, verbose=True)
def scale_dynamic(A, factor: float):
    N = T.dynamic("N")
    A: T.Tensor((N,), T.float32)
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
        for i in T.Parallel(64):
            if bx * 64 + i < N:
                B[bx * 64 + i] = A[bx * 64 + i] * factor
    return B


def test_dynamic_dim_one_kernel_for_every_size(capsys):
    a, b = random_tensor((100,), "float32", 21), random_tensor((37,), "float32", 22)
    assert_close(run_eager(scale_dynamic, a, 1.5), a * 1.5)
    assert_close(run_eager(scale_dynamic, b, 1.5), b * 1.5)
    assert scale_dynamic.specialize(a, 1.5) is scale_dynamic.specialize(b, 1.5)
    assert capsys.readouterr().out.count("[core.jit] compiling scale_dynamic") == 1


@core.jit
def shifted(A, shift: T.int32, alpha: T.float32, block: int = 32):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
        for i in T.Parallel(block):
            g = bx * block + i
            if g < N:
                B[g] = A[(g + shift) % N] * alpha
    return B


def test_runtime_scalar_parameters_do_not_specialize():
    a = random_tensor((50,), "float32", 23)
    assert_close(run_eager(shifted, a, 3, 2.0), a.roll(-3) * 2)
    assert_close(run_eager(shifted, a, 7, -1.0), a.roll(-7) * -1)
    assert shifted.specialize(a, 3, 2.0) is shifted.specialize(a, 7, -1.0)
    assert [s.name for s in shifted.specialize(a, 3, 2.0).specs[0].args.fields] == \
        ["shift", "alpha"]
