"""The T.reduce family end to end on the emulator (docs/architecture.md, "The DSL"), against the oracles
of oracles/reduce.py and oracles/norm.py, every run race-checked (`run` fixture).

Grids: every op (one kernel computes all five) x dtype; rows spread over 1..32 lanes of a
simdgroup and over 2..32 simdgroups (1024 threads); ragged row counts (masked edge tiles);
dim 1, 0 and negative; clear=False; other result dtypes; local sources and destinations;
reductions in serial loops; the TileLang softmax and RMSNorm kernels (the harness
families' own) and an online softmax; the identities and T.infinity; barrier necessity;
and each clear error, matched by message.
"""

import pytest
import torch

import core
from core.errors import KernelDefinitionError, LoweringError, MetaltileError
import core.language as T
from core.codegen import msl
from core.ir import ops
from harness.check.barriers import check_barriers
from harness.check.compare import assert_close
from harness.gen import reduce as reduce_family
from harness.gen import rmsnorm as rmsnorm_family
from harness.gen import softmax as softmax_family
from harness.gen.inputs import random_tensor
from harness.gen.strategies import FLOATS, HALVES
from oracles import norm
from oracles.reduce import KINDS, op_class
from oracles.reduce import reduce as reduce_oracle

DTYPES = list(reduce_family.DTYPES)   # the reduce family's dtypes
ROW_DIMS = (1, -1)


def rand(shape, dtype, seed):
    if dtype == "int32":
        return random_tensor(shape, "int32", seed, low=-1000, high=1000)
    return random_tensor(shape, dtype, seed)


# ---- all five reductions of one tile ------------------------------------------------------

def reductions(M, N, bM, threads, dtype, dim, clear=True, out_dtype=None):
    """A kernel reducing each (bM, N) tile of A over `dim` five ways (KINDS order) into
    S, Mx, Mn, AS, AM; with clear=False each destination starts from Init."""
    out_dtype = out_dtype or dtype
    G = T.ceildiv(M, bM)
    rows = dim in ROW_DIMS
    oshape, dshape = ((M,), (bM,)) if rows else ((G, N), (N,))

    @T.prim_func
    def reduce_tile(A: T.Tensor((M, N), dtype), Init: T.Tensor(oshape, out_dtype),
                    S: T.Tensor(oshape, out_dtype), Mx: T.Tensor(oshape, out_dtype),
                    Mn: T.Tensor(oshape, out_dtype), AS: T.Tensor(oshape, out_dtype),
                    AM: T.Tensor(oshape, out_dtype)):
        with T.Kernel(G, threads=threads) as bx:
            x = T.alloc_fragment((bM, N), dtype)
            s = T.alloc_fragment(dshape, out_dtype)
            mx = T.alloc_fragment(dshape, out_dtype)
            mn = T.alloc_fragment(dshape, out_dtype)
            a_s = T.alloc_fragment(dshape, out_dtype)
            a_m = T.alloc_fragment(dshape, out_dtype)
            T.copy(A[bx * bM, 0], x)
            if not clear:
                if rows:
                    T.copy(Init[bx * bM], s)
                    T.copy(Init[bx * bM], mx)
                    T.copy(Init[bx * bM], mn)
                    T.copy(Init[bx * bM], a_s)
                    T.copy(Init[bx * bM], a_m)
                else:
                    T.copy(Init[bx, 0], s)
                    T.copy(Init[bx, 0], mx)
                    T.copy(Init[bx, 0], mn)
                    T.copy(Init[bx, 0], a_s)
                    T.copy(Init[bx, 0], a_m)
            T.reduce_sum(x, s, dim=dim, clear=clear)
            T.reduce_max(x, mx, dim=dim, clear=clear)
            T.reduce_min(x, mn, dim=dim, clear=clear)
            T.reduce_abssum(x, a_s, dim=dim, clear=clear)
            T.reduce_absmax(x, a_m, dim=dim, clear=clear)
            if rows:
                T.copy(s, S[bx * bM])
                T.copy(mx, Mx[bx * bM])
                T.copy(mn, Mn[bx * bM])
                T.copy(a_s, AS[bx * bM])
                T.copy(a_m, AM[bx * bM])
            else:
                T.copy(s, S[bx, 0])
                T.copy(mx, Mx[bx, 0])
                T.copy(mn, Mn[bx, 0])
                T.copy(a_s, AS[bx, 0])
                T.copy(a_m, AM[bx, 0])
    return reduce_tile


def check_reductions(run, M, N, bM, threads, dtype, dim, clear=True, out_dtype=None):
    out_dtype = out_dtype or dtype
    kernel = core.compile(reductions(M, N, bM, threads, dtype, dim, clear, out_dtype),
                          out_idx=[2, 3, 4, 5, 6])
    G = -(-M // bM)
    rows = dim in ROW_DIMS
    a = rand((M, N), dtype, 3)
    init = rand((M,) if rows else (G, N), out_dtype, 4)
    outs = run(kernel, a, init)
    if rows:
        tiles, axis = a, 1
    else:  # a ragged last tile is read as zeros (masked copy), as the kernel sees it
        padded = torch.zeros(G * bM, N, dtype=a.dtype)
        padded[:M] = a
        tiles, axis = padded.reshape(G, bM, N), 1
    for kind, got in zip(KINDS, outs):
        want = reduce_oracle(tiles, kind, axis, out=None if clear else init,
                             out_dtype=out_dtype)
        assert_close(got, want, out_dtype, reduction_length=tiles.shape[axis],
                     op_class=op_class(kind), what=f"reduce_{kind}:")
    return kernel


# (M, N, bM, threads): with float32's runs of 4, a row of N elements spreads over N/4
# threads (N/2 or N for 16-bit and odd widths); M not a multiple of bM leaves a ragged tile.
ROW_SPREADS = {
    "1-thread": (40, 4, 32, 32),
    "2-lanes": (16, 8, 16, 32),
    "4-lanes-ragged": (37, 16, 8, 32),
    "8-lanes": (16, 32, 8, 64),
    "16-lanes": (8, 64, 4, 64),
    "32-lanes-ragged": (9, 128, 4, 128),
    "2-simdgroups": (4, 256, 2, 128),
    "8-simdgroups": (4, 1024, 2, 256),
    "32-simdgroups": (2, 4096, 1, 1024),
    "rows-in-rounds": (8, 512, 4, 64),
    "12-runs-widened": (6, 48, 3, 32),
}
NARROW = ["1-thread", "4-lanes-ragged", "32-lanes-ragged", "8-simdgroups", "rows-in-rounds"]
ROW_CASES = [("float32", s) for s in ROW_SPREADS] + \
    [(d, s) for d in (*HALVES, "int32") for s in NARROW]


@pytest.mark.parametrize("dtype,spread", ROW_CASES)
def test_row_reductions(dtype, spread, run):
    M, N, bM, threads = ROW_SPREADS[spread]
    check_reductions(run, M, N, bM, threads, dtype, dim=1 if spread != "1-thread" else -1)


# Columns (dim 0 / -2): the threads sharing a column chunk differ in high thread-id bits.
COL_SPREADS = {
    "strided-in-and-across-simdgroups": (37, 64, 16, 128),   # bits 4..6
    "across-simdgroups-only": (64, 128, 64, 128),            # bits 5..6
    "strided-in-simdgroup": (32, 16, 32, 32),                # bits 2..4
    "one-thread-per-column": (8, 512, 8, 64),
}
COL_CASES = [("float32", s) for s in COL_SPREADS] + \
    [("float16", "strided-in-and-across-simdgroups"), ("bfloat16", "across-simdgroups-only"),
     ("int32", "strided-in-and-across-simdgroups")]


@pytest.mark.parametrize("dtype,spread", COL_CASES)
def test_column_reductions(dtype, spread, run):
    M, N, bM, threads = COL_SPREADS[spread]
    check_reductions(run, M, N, bM, threads, dtype, dim=0 if dtype != "float16" else -2)


@pytest.mark.parametrize("dtype,dim,shape", [
    ("float32", 1, (37, 64, 16, 128)), ("bfloat16", 1, (4, 1024, 2, 256)),
    ("int32", 0, (37, 64, 16, 128)), ("float16", -2, (64, 128, 64, 128))])
def test_clear_false_accumulates_into_the_destination(dtype, dim, shape, run):
    check_reductions(run, *shape, dtype, dim, clear=False)


@pytest.mark.parametrize("dtype,out_dtype", [("float16", "float32"), ("float32", "bfloat16"),
                                             ("int32", "float32")])
def test_result_dtype_rounds_once(dtype, out_dtype, run):
    check_reductions(run, 9, 128, 4, 128, dtype, 1, out_dtype=out_dtype)


def test_bf16_and_f16_combine_a_float32_accumulator(run):
    kernel = check_reductions(run, 4, 256, 2, 128, "bfloat16", 1)
    assert {"tl.simd_sum", "tl.simd_max", "tl.simd_min"} <= set(ops.INTRINSICS)
    assert msl.INTRINSICS["tl.simd_sum"] + "(red_acc" in kernel.msl   # whole simdgroups
    assert "bfloat red_acc" not in kernel.msl and "float red_acc" in kernel.msl


def test_a_group_smaller_than_a_simdgroup_keeps_the_butterfly(run):
    kernel = check_reductions(run, *ROW_SPREADS["16-lanes"], "float32", 1)
    assert msl.INTRINSICS["tl.simd_shuffle_xor"] == "simd_shuffle_xor" in kernel.msl
    assert "simd_sum" not in kernel.msl and "simd_max" not in kernel.msl


@pytest.mark.parametrize("threads,combine", [(256, "first_simdgroup_combines"),
                                             (64, "lanes_read_partials")])
def test_the_cross_simdgroup_step_combines_once_when_the_cost_says_so(threads, combine,
                                                                     run_family):
    # `threads` threads hold 2 rows (a slot each); a row's partials are the simdgroups'.
    # 8 simdgroups: the first one's lanes c < 8 read partial c, one simd reduction
    # combines them and every thread reads the result back behind a 2nd barrier (7 fewer
    # simd reductions per slot than every simdgroup combining, worth the barrier). 2
    # simdgroups: each combines the 2 partials itself, one barrier per reduction (the
    # barrier and the read-back cost more than the one reduction they save).
    M, N, bM = 4, 1024, 2
    kernel, _, _ = run_family("softmax", softmax_params(M, N, bM, threads, "float32"))
    assert f"reduce.across_simdgroups={combine}" in kernel.decisions
    once = combine == "first_simdgroup_combines"
    assert kernel.msl.count("threadgroup_barrier") == (4 if once else 2)  # per reduction
    stats = kernel.last_run.stats[0]
    groups, reductions, simdgroups = M // bM, 2, threads // 32
    # the first simdgroup's lanes read the partials of each slot, then every thread reads
    # its bM results back in one vector load (they are consecutive in red_buf)
    loads = bM * simdgroups + threads if once else bM * simdgroups * simdgroups
    assert stats["threadgroup_load_ops"] == groups * reductions * loads
    assert stats["simd_ops"] == groups * reductions * bM * (
        simdgroups + (1 if once else simdgroups))


@pytest.mark.backend("emu")
@pytest.mark.parametrize("threads,combine", [(128, "first_simdgroup_folds"),
                                             (64, "every_thread_reads_partials")])
def test_column_partials_are_folded_once_when_the_cost_says_so(threads, combine, run):
    # a 64 x 16 tile reduced over its rows (dim 0): 4 threads a row, so a column's partials
    # sit in thread bits [2, 5) of each simdgroup (a butterfly) and above them across
    # simdgroups. 4 simdgroups: only the first simdgroup's threads fold the 4 partials of
    # each of their 4 columns, its lanes 0-3 write the 16 results, every thread reads its
    # 4 back behind a 2nd barrier. 2 simdgroups: each thread folds its 2 partials itself.
    M, N = 64, 16
    kernel = check_reductions(run, M, N, M, threads, "float32", 0)
    assert f"reduce.across_simdgroups={combine}" in kernel.decisions
    once = combine == "first_simdgroup_folds"
    reductions, slots, partials = 5, 4, threads // 32
    assert kernel.msl.count("threadgroup_barrier") == reductions * (2 if once else 1)
    stats = kernel.last_run.stats[0]
    every_thread = reductions * threads * slots * partials * 4
    read = stats["threadgroup_bytes_read"]
    assert (read < every_thread) if once else (read == every_thread)
    report = check_barriers(kernel, [rand((M, N), "float32", 3), rand((1, N), "float32", 4)])
    assert report.ok, report.summary()


# ---- where the operands live ----------------------------------------------------------------

def test_local_source_and_destination(run):
    M, N = 8, 16

    @T.prim_func
    def local(A: T.Tensor((M, N), "float16"), Out: T.Tensor((M,), "float32"),
              P: T.Tensor((N,), "float16")):
        with T.Kernel(1, threads=64):
            loc = T.alloc_local((M, N), "float16")
            r = T.alloc_local((M,), "float32")
            c = T.alloc_local((1, N), "float16")
            T.copy(A, loc)
            T.reduce_absmax(loc, r, dim=1)
            T.fill(c, 1.0)
            T.reduce_sum(loc, c, dim=-2, clear=False)
            for i in T.Parallel(M):
                Out[i] = r[i]
            for j in T.Parallel(N):
                P[j] = c[0, j]

    a = rand((M, N), "float16", 6)
    o, p = run(core.compile(local, out_idx=[1, 2]), a)
    assert_close(o, reduce_oracle(a, "absmax", 1, out_dtype="float32"), op_class="exact")
    assert_close(p, reduce_oracle(a, "sum", 0, out=torch.ones(N)), "float16",
                 reduction_length=M, op_class="accumulation")


@pytest.mark.parametrize("M,N,threads,dim,barriers", [
    (4, 256, 64, 1, 1),      # rows over all 64 threads: every thread holds every output
    (16, 64, 64, 1, 1),      # 4 holders: outputs published through threadgroup memory
    (64, 16, 128, 0, 2),     # columns across simdgroups, then published
])
def test_fragment_source_into_local_destination(M, N, threads, dim, barriers, run):
    D = (M,) if dim == 1 else (N,)

    @T.prim_func
    def to_local(A: T.Tensor((M, N), "float32"), Out: T.Tensor((threads,) + D, "float32")):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((M, N), "float32")
            r = T.alloc_local(D, "float32")
            T.copy(A, x)
            T.reduce_sum(x, r, dim=dim)
            for t in T.Parallel(threads):
                for j in T.serial(D[0]):
                    Out[t, j] = r[j]

    a = rand((M, N), "float32", 7)
    kernel = core.compile(to_local, out_idx=[1])
    assert_close(run(kernel, a), a.sum(dim).expand(threads, -1), reduction_length=a.shape[dim])
    assert kernel.msl.count("threadgroup_barrier") == barriers


def test_replicated_result_written_once_and_updated_by_every_replica(run):
    # s and kd are held by 16 threads each: the T.Parallel over s runs on every replica,
    # its global stores (and T.copy's) on one, so the race checker sees each element
    # stored once; a destination with the reduced dim kept (bM, 1) works the same way.
    M, N, bM = 37, 64, 16

    @T.prim_func
    def rep(A: T.Tensor((M, N), "float32"), Out: T.Tensor((M,), "float32"),
            P: T.Tensor((M, 1), "float32"), Q: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bM), threads=128) as bx:
            x = T.alloc_fragment((bM, N), "float32")
            s = T.alloc_fragment((bM,), "float32")
            kd = T.alloc_fragment((bM, 1), "float32")
            T.copy(A[bx * bM, 0], x)
            T.fill(s, 1.0)
            T.reduce_sum(x, s, dim=1, clear=False)
            T.reduce_max(x, kd, dim=-1)
            for i in T.Parallel(bM):
                s[i] = s[i] * 2.0
            for i in T.Parallel(bM):
                if bx * bM + i < M:
                    Out[bx * bM + i] = s[i] + 1.0
            for i, j in T.Parallel(bM, 1):
                if bx * bM + i < M:
                    P[bx * bM + i, j] = kd[i, j]
            T.copy(s, Q[bx * bM])

    a = rand((M, N), "float32", 8)
    o, p, q = run(core.compile(rep, out_idx=[1, 2, 3]), a)
    assert_close(o, (a.double().sum(1) + 1) * 2 + 1, "float32", reduction_length=N)
    assert_close(p, a.amax(1, keepdim=True), op_class="exact")
    assert_close(q, (a.double().sum(1) + 1) * 2, "float32", reduction_length=N)


def test_broadcast_of_a_loaded_fragment_and_three_dims(run):
    # b[j] in T.Parallel(bM, N) gets the layout that makes the read local; a 3-D reduce
    # over the middle dim is read back as r[i, l] in a 3-D T.Parallel.
    A_, B_, C_ = 2, 8, 16

    @T.prim_func
    def three(X: T.Tensor((A_, B_, C_), "float32"), Bias: T.Tensor((C_,), "float32"),
              R: T.Tensor((A_, C_), "float32"), Y: T.Tensor((A_, B_, C_), "float32")):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((A_, B_, C_), "float32")
            b = T.alloc_fragment((C_,), "float32")
            r = T.alloc_fragment((A_, C_), "float32")
            T.copy(X, x)
            T.copy(Bias, b)
            T.reduce_max(x, r, dim=1)
            for i, j, k in T.Parallel(A_, B_, C_):
                x[i, j, k] = x[i, j, k] - r[i, k] + b[k]
            T.copy(r, R)
            T.copy(x, Y)

    x, bias = rand((A_, B_, C_), "float32", 9), rand((C_,), "float32", 10)
    r, y = run(core.compile(three, out_idx=[2, 3]), x, bias)
    assert_close(r, x.amax(1), op_class="exact")
    assert_close(y, x - x.amax(1, keepdim=True) + bias)


# ---- reductions in loops --------------------------------------------------------------------

def running_sum(M, N, bM, bN, threads, dtype):
    @T.prim_func
    def running(A: T.Tensor((M, N), dtype), S: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
            x = T.alloc_fragment((bM, bN), dtype)
            s = T.alloc_fragment((bM,), dtype)
            T.clear(s)
            for ko in T.Pipelined(T.ceildiv(N, bN), num_stages=2):
                T.copy(A[bx * bM, ko * bN], x)
                T.reduce_sum(x, s, dim=1, clear=False)
            T.copy(s, S[bx * bM])
    return running


@pytest.mark.parametrize("dtype,shape", [("float32", (37, 200, 8, 64, 128)),
                                         ("int32", (4, 1000, 1, 512, 256))])
def test_sum_accumulated_over_k_tiles(dtype, shape, run):
    M, N = shape[:2]
    a = rand((M, N), dtype, 11)
    out = run(core.compile(running_sum(*shape, dtype), out_idx=[1]), a)
    assert_close(out, reduce_oracle(a, "sum", 1), dtype, reduction_length=N,
                 op_class="accumulation")


def online_softmax(M, N, bM, bN, threads, dtype):
    """Row logsumexp in one pass over K tiles (running max and rescaled sum), then the
    softmax in a second pass: the pattern of flash attention without the matmuls."""
    @T.prim_func
    def online(A: T.Tensor((M, N), dtype), LSE: T.Tensor((M,), "float32"),
               B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
            x = T.alloc_fragment((bM, bN), "float32")
            m = T.alloc_fragment((bM,), "float32")
            m_prev = T.alloc_fragment((bM,), "float32")
            lsum = T.alloc_fragment((bM,), "float32")
            rsum = T.alloc_fragment((bM,), "float32")
            T.fill(m, -1e30)   # finite: exp(-inf) is not guaranteed 0 under fast math
            T.fill(lsum, 0.0)
            for ko in T.serial(N // bN):
                T.copy(A[bx * bM, ko * bN], x)
                T.copy(m, m_prev)
                T.reduce_max(x, m, dim=1, clear=False)
                for i, j in T.Parallel(bM, bN):
                    x[i, j] = T.exp(x[i, j] - m[i])
                T.reduce_sum(x, rsum, dim=1)
                for i in T.Parallel(bM):
                    lsum[i] = lsum[i] * T.exp(m_prev[i] - m[i]) + rsum[i]
            for i in T.Parallel(bM):
                if bx * bM + i < M:
                    LSE[bx * bM + i] = m[i] + T.log(lsum[i])
            for ko in T.serial(N // bN):
                T.copy(A[bx * bM, ko * bN], x)
                for i, j in T.Parallel(bM, bN):
                    x[i, j] = T.exp(x[i, j] - m[i]) / lsum[i]
                T.copy(x, B[bx * bM, ko * bN])
    return online


@pytest.mark.parametrize("dtype,shape", [("float32", (37, 256, 8, 64, 128)),
                                         ("bfloat16", (8, 1024, 2, 256, 256))])
def test_online_softmax_over_k_tiles(dtype, shape, run):
    M, N = shape[:2]
    a = rand((M, N), dtype, 12)
    kernel = core.compile(online_softmax(*shape, dtype), out_idx=[1, 2])
    lse, b = run(kernel, a)
    assert_close(lse, torch.logsumexp(a.double(), 1), "float32", reduction_length=N,
                 op_class="transcendental")
    assert_close(b, norm.softmax(a), dtype, op_class="transcendental")


# ---- the TileLang kernels -------------------------------------------------------------------

def softmax_kernel(M, N, bM, threads, dtype):
    """TileLang's row softmax: the softmax family's kernel (harness/gen/softmax.py), unscaled."""
    return softmax_family.build(softmax_params(M, N, bM, threads, dtype)).func


def softmax_params(M, N, bM, threads, dtype):
    return {"M": M, "N": N, "bM": bM, "threads": threads, "dtype": dtype, "scale": 1.0}


def rmsnorm_kernel(M, N, bM, threads, dtype):
    """TileLang's RMSNorm: the rmsnorm family's kernel (harness/gen/rmsnorm.py), W read from
    device memory, eps 1e-6."""
    return rmsnorm_family.build(rmsnorm_params(M, N, bM, threads, dtype)).func


def rmsnorm_params(M, N, bM, threads, dtype):
    return {"M": M, "N": N, "bM": bM, "threads": threads, "dtype": dtype, "eps": 1e-6,
            "weight": "global"}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(37, 128, 16, 128), (8, 1024, 4, 256)],
                         ids=["in-simdgroup", "across-simdgroups"])
def test_softmax(dtype, shape, run_family):
    kernel, (x,), _ = run_family("softmax", softmax_params(*shape, dtype))
    # the input is read once, the output written once
    stats = kernel.last_run.stats[0]
    index = {b.name: b.index for b in kernel.specs[0].buffers}
    nbytes = x.numel() * x.element_size()
    assert stats["device_bytes_read"][index["X"]] == nbytes
    assert stats["device_bytes_written"][index["Y"]] == nbytes


@pytest.mark.parametrize("dtype,shape", [("float32", (33, 256, 4, 128)),
                                         ("float16", (8, 2048, 1, 256)),
                                         ("bfloat16", (8, 2048, 1, 256))])
def test_rmsnorm(dtype, shape, run_family):
    run_family("rmsnorm", rmsnorm_params(*shape, dtype))


# ---- identities and T.infinity ---------------------------------------------------------------

def test_infinity_and_the_identities_of_max_and_min(run):
    N = 64

    @T.prim_func
    def limits(F: T.Tensor((2,), "float32"), H: T.Tensor((2,), "float16"),
               B: T.Tensor((2,), "bfloat16"), Imax: T.Tensor((2,), "int32"),
               X: T.Tensor((2, N), "int32"), E: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=32):
            x = T.alloc_fragment((2, N), "int32")
            mx = T.alloc_fragment((2,), "int32")
            mn = T.alloc_fragment((2,), "int32")
            T.copy(X, x)
            T.reduce_max(x, mx, dim=1)
            T.reduce_min(x, mn, dim=1)
            for i in T.Parallel(1):
                F[i] = T.infinity("float32")
                F[i + 1] = -T.infinity("float32")
                H[i] = T.infinity("float16")
                H[i + 1] = -T.infinity("float16")
                B[i] = T.infinity("bfloat16")
                B[i + 1] = -T.infinity("bfloat16")
                Imax[i] = T.infinity("int32")
                Imax[i + 1] = T.min_value("int32")
            for i in T.Parallel(2):
                E[i] = mx[i]
                E[i + 2] = mn[i]

    lo, hi = torch.iinfo(torch.int32).min, torch.iinfo(torch.int32).max
    x = torch.full((2, N), lo, dtype=torch.int32)
    x[1] = hi
    kernel = core.compile(limits, out_idx=[0, 1, 2, 3, 5])
    f, h, b, i, e = run(kernel, x)
    inf = float("inf")
    for got in (f, h, b):
        assert got.tolist() == [inf, -inf]
    assert i.tolist() == [hi, lo]
    assert e.tolist() == [lo, hi, lo, hi]
    assert "(-2147483647 - 1)" in kernel.msl and "2147483647" in kernel.msl


# ---- barriers -------------------------------------------------------------------------------

@pytest.mark.parametrize("build,args,count", [
    (lambda: softmax_kernel(8, 1024, 4, 256, "float32"), lambda: [rand((8, 1024), "float32", 16)],
     4),
    (lambda: running_sum(4, 1000, 1, 512, 256, "float32"),
     lambda: [rand((4, 1000), "float32", 17)], 2),
], ids=["softmax-across-simdgroups", "running-sum-in-a-loop"])
def test_every_reduction_barrier_is_necessary(build, args, count, run):
    # Across 8 simdgroups, two barriers per reduction: the partials' and the first
    # simdgroup's result's (core/transform/lower_reduce.py `_plan_once`); each reduction has
    # its own region of the stage, so the next one needs no barrier before writing; a lone
    # reduction in a loop also needs one before its next iteration overwrites the partials
    # just read. Removing any one lets the race checker find a race.
    func, inputs = build(), args()
    kernel = core.compile(func, out_idx=[1])
    run(kernel, *inputs)
    assert kernel.msl.count("threadgroup_barrier") == count
    report = check_barriers(kernel, inputs)
    assert report.ok, report.summary()


def test_no_barrier_or_threadgroup_memory_inside_one_simdgroup():
    kernel = core.compile(softmax_kernel(37, 128, 16, 128, "float32"), out_idx=[1])
    assert "threadgroup_barrier" not in kernel.msl and "red_buf" not in kernel.msl
    assert kernel.msl.count("simd_max(") == 1 and kernel.msl.count("simd_sum(") == 1
    assert "simd_shuffle_xor" not in kernel.msl        # a whole simdgroup: one simd reduction


# ---- clear errors ---------------------------------------------------------------------------

def _compile(build):
    return core.compile(build(), out_idx=[-1])


def bad_dim():
    @T.prim_func
    def k(A: T.Tensor((8, 16), "float32"), Out: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32):
            x = T.alloc_fragment((8, 16), "float32")
            s = T.alloc_fragment((8,), "float32")
            T.copy(A, x)
            T.reduce_sum(x, s, dim=2)
            T.copy(s, Out)
    return k


def bad_shape():
    @T.prim_func
    def k(A: T.Tensor((8, 16), "float32"), Out: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32):
            x = T.alloc_fragment((8, 16), "float32")
            s = T.alloc_fragment((16,), "float32")
            T.copy(A, x)
            T.reduce_max(x, s, dim=1)
            T.copy(s, Out)
    return k


def global_source():
    @T.prim_func
    def k(A: T.Tensor((8, 16), "float32"), Out: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_fragment((8,), "float32")
            T.reduce_sum(A, s, dim=1)
            T.copy(s, Out)
    return k


def int8_source():
    @T.prim_func
    def k(A: T.Tensor((8, 16), "int8"), Out: T.Tensor((8,), "int32")):
        with T.Kernel(1, threads=32):
            x = T.alloc_fragment((8, 16), "int8")
            s = T.alloc_fragment((8,), "int32")
            T.copy(A, x)
            T.reduce_sum(x, s, dim=1)
            T.copy(s, Out)
    return k


def local_into_fragment():
    @T.prim_func
    def k(A: T.Tensor((8, 16), "float32"), Out: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32):
            x = T.alloc_local((8, 16), "float32")
            s = T.alloc_fragment((8,), "float32")
            T.copy(A, x)
            T.reduce_sum(x, s, dim=1)
            T.copy(s, Out)
    return k


def partial_source():
    @T.prim_func
    def k(A: T.Tensor((8, 16), "float32"), Out: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32):
            x = T.alloc_fragment((8, 16), "float32")
            s = T.alloc_fragment((4,), "float32")
            T.copy(A, x)
            T.reduce_sum(x[0:4, 0:16], s, dim=1)
            T.copy(s, Out)
    return k


def misaligned_threads():
    # a row of 128 floats is 32 runs dealt over 48 threads: the second row's threads
    # (32..47, 0..15) differ in thread-id bits 0..5, which needs groups of 64 threads, and
    # 48 threads are not whole simdgroups (96 threads work: suites/core/test_thread_counts)
    @T.prim_func
    def k(A: T.Tensor((4, 128), "float32"), Out: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=48):
            x = T.alloc_fragment((4, 128), "float32")
            s = T.alloc_fragment((4,), "float32")
            T.copy(A, x)
            T.reduce_sum(x, s, dim=1)
            T.copy(s, Out)
    return k


def no_layout_for_odd_threads():
    @T.prim_func
    def k(A: T.Tensor((2, 6), "float32"), Out: T.Tensor((6,), "float32")):
        with T.Kernel(1, threads=48):
            x = T.alloc_fragment((2, 6), "float32")
            s = T.alloc_fragment((6,), "float32")
            T.copy(A, x)
            T.reduce_sum(x, s, dim=0)
            T.copy(s, Out)
    return k


def broadcast_not_local():
    # mx is laid out for T.Parallel(16, 128); in T.Parallel(16, 64) row i runs elsewhere
    @T.prim_func
    def k(A: T.Tensor((16, 128), "float32"), Out: T.Tensor((16, 64), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((16, 128), "float32")
            y = T.alloc_fragment((16, 64), "float32")
            mx = T.alloc_fragment((16,), "float32")
            T.copy(A, x)
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(16, 64):
                y[i, j] = mx[i]
            T.copy(y, Out)
    return k


def two_layouts():
    @T.prim_func
    def k(A: T.Tensor((16, 128), "float32"), Out: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((16, 128), "float32")
            y = T.alloc_fragment((16, 4), "float32")
            s = T.alloc_fragment((16,), "float32")
            T.copy(A, x)
            T.copy(A[0:16, 0:4], y)
            T.reduce_sum(x, s, dim=1)
            T.reduce_sum(y, s, dim=1, clear=False)
            T.copy(s, Out)
    return k


def replicated_source():
    @T.prim_func
    def k(A: T.Tensor((4, 8, 16), "float32"), Out: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((4, 8, 16), "float32")
            r = T.alloc_fragment((4, 16), "float32")
            s = T.alloc_fragment((16,), "float32")
            T.copy(A, x)
            T.reduce_sum(x, r, dim=1)
            T.reduce_sum(r, s, dim=0)
            T.copy(s, Out)
    return k


def stage_too_large():
    @T.prim_func
    def k(A: T.Tensor((64, 256), "float32"), Out: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=1024):
            big = T.alloc_shared((8100,), "float32")
            x = T.alloc_fragment((64, 256), "float32")
            s = T.alloc_fragment((64,), "float32")
            T.fill(big, 0.0)
            T.copy(A, x)
            T.reduce_sum(x, s, dim=1)
            for i in T.Parallel(64):
                Out[i] = s[i] + big[i]
    return k


ERRORS = {
    "dim out of range": (bad_dim, KernelDefinitionError,
                         r"T.reduce_sum.*dim=2 is not a dimension of source 'x'.*\[-2, 2\)"),
    "wrong destination shape": (bad_shape, KernelDefinitionError,
                                r"T.reduce_max.*'s' has shape \(16,\).*gives \(8,\)"),
    "global source": (global_source, KernelDefinitionError,
                      r"source 'A' is in global memory; allowed: T.alloc_fragment or "
                      r"T.alloc_local or T.alloc_shared"),
    "int8 source": (int8_source, KernelDefinitionError,
                    r"has dtype int8; allowed: float32, float16, bfloat16, int32"),
    "local into fragment": (local_into_fragment, KernelDefinitionError,
                            r"per-thread.*destination must be per-thread too"),
    "part of a buffer": (partial_source, KernelDefinitionError,
                         r"source 'x' is a part of a buffer; pass the whole buffer"),
    "misaligned threadgroup": (misaligned_threads, LoweringError,
                               r"kernel 'k'.*T.reduce_sum.*48 threads, not a multiple of 64 "
                               r"nor of the simdgroup width 32"),
    "no layout for odd threads": (no_layout_for_odd_threads, LoweringError,
                                  r"T.reduce_sum.*no replicated layout.*power-of-two"),
    "broadcast read not local": (broadcast_not_local, LoweringError,
                                 r"fragment 'mx'.*read as mx\[i\] in T.Parallel\(16, 64\).*"
                                 r"do not hold its elements"),
    "one fragment, two layouts": (two_layouts, LoweringError,
                                  r"fragment 's' would need two layouts"),
    "replicated source": (replicated_source, LoweringError,
                          r"T.reduce_sum.*'r'.*itself replicated"),
    # `big` is read after the reduction: live beside its stage (pass merge_threadgroup)
    "stage beyond 32 KiB": (stage_too_large, LoweringError,
                            r"threadgroup memory: the threadgroup buffers live at once, 'big' "
                            r"\(32400 bytes\), 'red_buf' \(512 bytes\).*32768"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_clear_errors(name):
    build, cls, pattern = ERRORS[name]
    with pytest.raises(cls, match=pattern) as info:
        _compile(build)
    assert isinstance(info.value, MetaltileError)
