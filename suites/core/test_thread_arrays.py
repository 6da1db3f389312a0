"""Per-thread arrays of generated kernels (issue 13): a fragment that one element-wise
T.Parallel fills and only one T.reduce_* reads is not materialized (pass
`fold_temporaries`: `sq = x * x; reduce_sum(sq)` accumulates `x * x` directly), and a
one-element thread array (an accumulator, a row statistic) is printed as a scalar.

Every kernel runs through the `run` fixture (all emulator checks) against the torch
oracles with the tolerance policy; the emulator does not contract a * b + c, so folding
is checked bit for bit against the pipeline without the pass.
"""

import re

import pytest
import torch

import core
import core.language as T
from harness.check.barriers import check_barriers
from harness.check.compare import assert_close
from harness.check.case import Status, run_case
from harness.gen.inputs import random_tensor
from harness.gen.strategies import FLOATS
from harness.bench.roofline import local_array_bytes
from suites.core.test_reduce import rmsnorm_kernel, rmsnorm_params


def _arrays(msl) -> set:
    """Names of the thread arrays a kernel declares (`float x[4];`)."""
    return set(re.findall(r"^\s+(?:float|half|bfloat|int)\d?\s+(\w+)\[\d+\];$", msl, re.M))


@pytest.mark.parametrize("dtype", FLOATS)
def test_squares_fold_into_the_sum(dtype, run_family):
    kernel, _, _ = run_family("rmsnorm", rmsnorm_params(8, 1024, 1, 128, dtype))
    assert _arrays(kernel.msl) == {"x"}                 # no sq[8]
    assert "(x[" in kernel.msl and "] * x[" in kernel.msl
    # x: 8 floats per thread; the row statistic and the accumulator are scalars
    assert local_array_bytes(kernel.msl) == 8 * 4
    assert re.search(r"^\s+float inv;$", kernel.msl, re.M)


def test_folding_is_bit_identical_on_the_emulator(run):
    M, N, dtype = 6, 512, "float16"
    x, w = random_tensor((M, N), dtype, 0), random_tensor((N,), dtype, 1)
    func = rmsnorm_kernel(M, N, 2, 128, dtype)
    folded = core.compile(func, out_idx=[2])
    kept = core.compile(func, out_idx=[2], disable=("fold_temporaries",))
    assert "sq" in _arrays(kept.msl) and "sq" not in _arrays(folded.msl)
    assert torch.equal(run(folded, x, w), run(kept, x, w))


def test_896_threads_keep_one_float4_per_thread(run_family):
    # MLX's exact fit for hidden size 3584: 896 threads x 4 elements, one round
    kernel, inputs, _ = run_family("rmsnorm", rmsnorm_params(3, 3584, 1, 896, "float16"))
    assert _arrays(kernel.msl) == {"x"}
    assert local_array_bytes(kernel.msl) == 4 * 4
    report = check_barriers(kernel, inputs)
    assert report.ok, report.summary()


def _squares_read_twice(M, N, threads, dtype):
    """Y = x^2 / sum(x^2): `sq` is read by the reduction and by the division."""
    @T.prim_func
    def share(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(M, threads=threads) as bx:
            x = T.alloc_fragment((1, N), "float32")
            sq = T.alloc_fragment((1, N), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(X[bx, 0], x)
            for i, j in T.Parallel(1, N):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, s, dim=1)
            for i, j in T.Parallel(1, N):
                x[i, j] = sq[i, j] / s[i]
            T.copy(x, Y[bx, 0])
    return share


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fragment_read_twice_stays_materialized(dtype, run):
    M, N = 4, 768
    x = random_tensor((M, N), dtype, 0)
    kernel = core.compile(_squares_read_twice(M, N, 96, dtype), out_idx=[1])
    assert "sq" in _arrays(kernel.msl)
    sq = x.double() ** 2
    assert_close(run(kernel, x), sq / sq.sum(-1, keepdim=True), dtype, reduction_length=N)


def test_inputs_overwritten_before_the_reduction_stay_materialized(run):
    # x changes between the squares and their sum: computing x * x at the sum would read
    # the new x, so sq is kept
    M, N, threads, dtype = 4, 256, 64, "float32"

    @T.prim_func
    def overwrite(X: T.Tensor((M, N), dtype), S: T.Tensor((M,), dtype),
                  Y: T.Tensor((M, N), dtype)):
        with T.Kernel(M, threads=threads) as bx:
            x = T.alloc_fragment((1, N), "float32")
            sq = T.alloc_fragment((1, N), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(X[bx, 0], x)
            for i, j in T.Parallel(1, N):
                sq[i, j] = x[i, j] * x[i, j]
            for i, j in T.Parallel(1, N):
                x[i, j] = x[i, j] + 1.0
            T.reduce_sum(sq, s, dim=1)
            T.copy(s, S[bx:bx + 1])
            T.copy(x, Y[bx, 0])

    x = random_tensor((M, N), dtype, 0)
    kernel = core.compile(overwrite, out_idx=[1, 2])
    assert "sq" in _arrays(kernel.msl)
    s, y = run(kernel, x)
    assert_close(s, (x.double() ** 2).sum(-1), dtype, reduction_length=N)
    assert_close(y, x.double() + 1.0, dtype)


@pytest.mark.backend("emu")
@pytest.mark.parametrize("family,params", [
    ("layernorm", {"M": 5, "N": 3584, "dtype": "float16", "eps": 1e-5, "bM": 1,
                   "threads": 896}),
    ("rmsnorm", {"M": 9, "N": 150, "dtype": "bfloat16", "eps": 1e-5, "weight": "global",
                 "bM": 4, "threads": 96}),
    ("rmsnorm", {"M": 7, "N": 1000, "dtype": "float32", "eps": 1e-6, "weight": "shared",
                 "bM": 2, "threads": 384}),
], ids=["layernorm-896", "rmsnorm-ragged-rows-96", "rmsnorm-masked-round-384"])
def test_families_with_folded_squares(family, params, backend):
    # the harness's own path: oracle, every emulator check, barrier necessity
    result = run_case(family, params, backend=backend, barriers=True)
    assert result.status == Status.PASS, f"{family} {params}: {result.status}\n{result.message}"
    assert "sq" not in _arrays(result.msl)


def test_fragments_copied_from_memory_keep_their_vector_loads(run):
    # x is filled by a T.copy from device memory and read only by the sum: folding it
    # would turn one half4 load per run into four scalar loads, so it stays
    M, N, threads, dtype = 4, 512, 64, "float16"

    @T.prim_func
    def row_sum(X: T.Tensor((M, N), dtype), S: T.Tensor((M,), "float32")):
        with T.Kernel(M, threads=threads) as bx:
            x = T.alloc_fragment((1, N), dtype)
            s = T.alloc_fragment((1,), "float32")
            T.copy(X[bx, 0], x)
            T.reduce_sum(x, s, dim=1)
            T.copy(s, S[bx:bx + 1])

    x = random_tensor((M, N), dtype, 0)
    kernel = core.compile(row_sum, out_idx=[1])
    assert "x" in _arrays(kernel.msl) and "device half4*" in kernel.msl
    assert_close(run(kernel, x), x.double().sum(-1), "float32", reduction_length=N,
                 op_class="accumulation")


# ---- the pass's own guards, on hand-built per-thread TIR ---------------------------------

def _nest(index):
    """A one-thread kernel: b[index(r, l)] = x[r * 4 + l] * 2 over r < 2, l < 4, then
    acc[0] += b[index(k, m)] over k < 2, m < 4, then Out[0] = acc[0]."""
    from tvm import tirx
    from tvm.tirx import IterVar

    X = tirx.decl_buffer((8,), "float32", "X")
    Out = tirx.decl_buffer((1,), "float32", "Out")
    x = tirx.decl_buffer((8,), "float32", "x", scope="local")
    b = tirx.decl_buffer((8,), "float32", "b", scope="local")
    acc = tirx.decl_buffer((1,), "float32", "acc", scope="local")
    r, l, k, m, i = (tirx.Var(n, "int32") for n in "rlkmi")

    def loop(v, n, body):
        return tirx.For(v, 0, n, tirx.ForKind.SERIAL, body)

    zero = tirx.IntImm("int32", 0)
    body = tirx.SeqStmt([
        tirx.AllocBuffer(x), tirx.AllocBuffer(b), tirx.AllocBuffer(acc),
        loop(i, 8, tirx.BufferStore(x, tirx.BufferLoad(X, [i]), [i])),
        loop(r, 2, loop(l, 4, tirx.BufferStore(
            b, tirx.BufferLoad(x, [r * 4 + l]) * 2.0, [index(r, l)]))),
        tirx.BufferStore(acc, tirx.const(0.0, "float32"), [zero]),
        loop(k, 2, loop(m, 4, tirx.BufferStore(
            acc, tirx.BufferLoad(acc, [zero]) + tirx.BufferLoad(b, [index(k, m)]), [zero]))),
        tirx.BufferStore(Out, tirx.BufferLoad(acc, [zero]), [zero]),
    ])
    tx = IterVar(None, tirx.Var("tx", "int32"), IterVar.ThreadIndex, "threadIdx.x")
    kernel = tirx.AttrStmt(tx, "thread_extent", 1, body)
    return tirx.PrimFunc([X, Out], kernel)


def _local_arrays(func) -> set:
    from tvm import tirx

    from core.ir.stmt import walk
    found = set()
    walk(func.body, lambda s: found.add(s.buffer.name) if isinstance(s, tirx.AllocBuffer)
         else None)
    return found


def test_the_pass_folds_a_one_to_one_writer():
    from core.transform.fold_temporaries import fold_temporaries
    folded = fold_temporaries(_nest(lambda r, l: r * 4 + l))
    assert _local_arrays(folded) == {"x", "acc"}
    assert "x[k * 4 + m] * T.float32(2.0)" in str(folded)


def test_the_pass_keeps_an_array_whose_elements_are_written_twice():
    # b[l] is written at r = 0 and again at r = 1: the sum reads the r = 1 values twice,
    # so x[k * 4 + m] * 2 at the read would be wrong
    from core.transform.fold_temporaries import fold_temporaries
    func = _nest(lambda r, l: l)
    assert _local_arrays(fold_temporaries(func)) == {"x", "b", "acc"}
