"""Host programs: several kernels, host loops around them (one kernel launched once per
iteration with that iteration's scalars), host scalar arithmetic between launches,
workspaces (T.empty not returned) and capacity dims. Eager style and prim_func."""

import torch

import core
import core.language as T
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from oracles.norm import rmsnorm
from suites.eager.conftest import run_eager


@core.jit
def rmsnorm_splitk(X, W, splits: int, block_k: int, eps: float = 1e-6):
    M, N = T.const("M N")
    X: T.Tensor((M, N), T.float16)
    W: T.Tensor((N,), T.float16)
    Y = T.empty((M, N), T.float16)
    partial = T.empty((M, splits), T.float32)      # not returned: a workspace
    chunk = N // splits
    with T.Kernel(splits, M, threads=64) as (s, m):  # sums of squares of one N-chunk
        acc = T.alloc_fragment((1, block_k), T.float32)
        ss = T.alloc_fragment((1,), T.float32)
        T.clear(acc)
        for k in T.serial(chunk // block_k):
            for i, j in T.Parallel(1, block_k):
                v = T.cast(X[m, s * chunk + k * block_k + j], T.float32)
                acc[i, j] += v * v
        T.reduce_sum(acc, ss, dim=1)
        for i in T.Parallel(1):
            partial[m, s + i] = ss[i]
    with T.Kernel(M, threads=64) as m:               # combine the chunks, scale the row
        p = T.alloc_fragment((1, splits), T.float32)
        tot = T.alloc_fragment((1,), T.float32)
        shared_tot = T.alloc_shared((1,), T.float32)
        T.copy(partial[m, 0], p)
        T.reduce_sum(p, tot, dim=1)
        T.copy(tot, shared_tot)                      # every thread reads the row's total
        for k in T.serial(N // block_k):
            for i, j in T.Parallel(1, block_k):
                Y[m, k * block_k + j] = T.cast(
                    T.cast(X[m, k * block_k + j], T.float32)
                    * T.rsqrt(shared_tot[i] / N + eps)
                    * T.cast(W[k * block_k + j], T.float32), T.float16)
    return Y


def test_rmsnorm_splitk_workspace():
    x, w = random_tensor((5, 512), "float16", 1), random_tensor((512,), "float16", 2)
    y = run_eager(rmsnorm_splitk, x, w, splits=4, block_k=64)
    assert_close(y, rmsnorm(x, w, 1e-6), "float16", reduction_length=512,
                 op_class="accumulation")
    kernel = rmsnorm_splitk.specialize(x, w, 4, 64)
    assert kernel.compiled.workspaces == ("partial",)
    assert len(kernel.launches) == 2


@core.jit
def chunked_scale(A, n_chunks: int = 4, block: int = 32):
    """Three kernels; the middle one runs in a host loop, once per chunk, with the
    chunk's offset and scale computed on the host."""
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    Tmp = T.empty((N,), T.float32)                  # workspace
    Out = T.empty((N,), T.float32)
    Sums = T.empty((n_chunks,), T.float32)
    chunk = N // n_chunks
    with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Tmp[bx * block + i] = A[bx * block + i] * 2.0 + 1.0
    for c in range(n_chunks):                       # a host loop: 4 launches
        offset = c * chunk                          # host scalars, per launch
        scale = T.cast(c + 1, T.float32)
        with T.Kernel(T.ceildiv(chunk, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < chunk:
                    Out[offset + bx * block + i] = Tmp[offset + bx * block + i] * scale
    with T.Kernel(n_chunks, threads=32) as c:
        acc = T.alloc_fragment((1, chunk), T.float32)
        s = T.alloc_fragment((1,), T.float32)
        T.copy(Out[c * chunk], acc)
        T.reduce_sum(acc, s, dim=1)
        for i in T.Parallel(1):
            Sums[c + i] = s[i]
    return Out, Sums


def test_host_loop_launches_one_kernel_per_iteration():
    a = random_tensor((256,), "float32", 3)
    out, sums = run_eager(chunked_scale, a)
    scale = torch.arange(1, 5, dtype=torch.float64).repeat_interleave(64)
    want = (a.double() * 2 + 1) * scale
    assert_close(out, want.float())
    assert_close(sums, want.view(4, 64).sum(1).float(), "float32", reduction_length=64,
                 op_class="accumulation")
    kernel = chunked_scale.specialize(a)
    assert len(kernel.launches) == 3                         # three kernels
    assert len(chunked_scale.last_run.stats) == 6            # six launches
    middle = kernel.launches[1]
    assert [s.name for s in middle.scalars] == ["c"]         # the loop variable, per launch


def test_prim_func_host_loop_and_scalars(run):
    @T.prim_func
    def steps(A: T.Tensor((4, 64), "float32"), B: T.Tensor((4, 64), "float32"),
              step: T.int32):
        for it in T.serial(4):
            s = it * step + 1
            with T.Kernel(1, threads=64):
                for i in T.Parallel(64):
                    B[it, i] = A[it, i] * T.cast(s, "float32")

    kernel = core.compile(steps, out_idx=[1])
    a = random_tensor((4, 64), "float32", 4)
    b = run(kernel, a, 3)
    assert_close(b, a * (torch.arange(4) * 3 + 1)[:, None].float())
    assert len(kernel.last_run.stats) == 4


@core.jit
def first_rows(A, cap: int):
    """An output whose row count is data-dependent (K): allocated at the capacity; the
    kernel copies A's rows and zero-fills the rest of the allocation."""
    M, K = T.const("M"), T.dynamic("K")
    A: T.Tensor((M, 32), T.float32)
    Out = T.empty((K, 32), T.float32)
    T.annotate_capacity_dims({"Out": (cap, None)})
    with T.Kernel(K, threads=32) as r:
        for j in T.Parallel(32):
            Out[r, j] = T.if_then_else(r < M, A[T.min(r, M - 1), j], 0.0)
    return Out


def test_capacity_dims_allocate_the_capacity():
    a = random_tensor((5, 32), "float32", 5)
    out = run_eager(first_rows, a, 8)
    assert out.shape == (8, 32)                              # the whole capacity
    assert_close(out, torch.cat([a, torch.zeros(3, 32)]))


@core.jit
def positives(A, cap: int):
    """Stream compaction: the positive elements of A, in order; a kernel reports how many
    it wrote, and the call returns that many."""
    N, K = T.const("N"), T.dynamic("K")
    A: T.Tensor((N,), T.float32)
    Out = T.empty((K,), T.float32)
    count = T.empty((1,), T.int32)                   # a workspace the kernel writes
    T.annotate_capacity_dims({"Out": (cap,)}, lengths={"Out": count})
    with T.Kernel(1, threads=1):
        n = T.alloc_var(T.int32, init=0)
        for i in T.serial(N):
            if A[i] > 0.0 and n < K:
                Out[n] = A[i]
                n = n + 1
        count[0] = n
    return Out


def test_capacity_dims_return_the_reported_view():
    a = random_tensor((40,), "float32", 6)
    out = run_eager(positives, a, 64)
    assert_close(out, a[a > 0])                      # the reported length, not 64
    out = run_eager(positives, a.abs() + 1, 16)       # more than the capacity: cut at it
    assert_close(out, (a.abs() + 1)[:16])


@core.jit
def pick_path(A, threshold: T.int32):
    """A host `if` on a runtime scalar chooses which kernel runs."""
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    B = T.empty((N,), T.float32)
    if threshold > 10:
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    B[bx * 32 + i] = A[bx * 32 + i] + 1.0
    else:
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    B[bx * 32 + i] = A[bx * 32 + i] - 1.0
    return B


def test_host_if_on_a_runtime_scalar():
    a = random_tensor((40,), "float32", 7)
    assert_close(run_eager(pick_path, a, 11), a + 1)
    assert len(pick_path.last_run.stats) == 1
    assert_close(run_eager(pick_path, a, 10), a - 1)
    assert pick_path.specialize(a, 11) is pick_path.specialize(a, 10)
