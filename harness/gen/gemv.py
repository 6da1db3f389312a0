"""Family `gemv`: Y = X W^T for decode shapes (a few rows of X), written as a GEMV: the
threads of a row split K, the weight rows come straight from device memory in vector
loads into fragments, and T.reduce_sum combines the partial dot products (simd_sum over a
whole simdgroup, simd_shuffle_xor butterflies over part of one; through `red_buf` only
when a row spans simdgroups). No simdgroup matrices,
no threadgroup staging of the operands.

Params:
    M, N, K     X is M x K, W is N x K (rows of the weight matrix, as stored by LLM
                checkpoints), Y is M x N; any sizes >= 1 (ragged tiles are masked)
    bM          rows of X per threadgroup (1, 2, 4, 8): each weight element loaded is used
                for bM rows
    bN          weight rows per threadgroup (1, 2, 4, 8, 16)
    bK          K elements per step of the serial k loop (32..256); the threads holding
                one row's bK elements (bK / 4 of them) combine its dot product: within a
                simdgroup when bK <= 128, across simdgroups (red_buf, barriers) above
    threads     32, 64, 128, 256
    dtype       X and W: float32, float16, bfloat16 (float32 accumulation)
    out_dtype   Y: float32 or `dtype`
    form        "reduce" (default): the fragment kernel below; "allreduce": TileLang's
                thread all-reduce form (examples/gemv): threads=(bN, threads / bN), each
                thread a float32 partial per row of X over its strided slices of K (4
                elements per step), combined over threadIdx.y by T.tvm_thread_allreduce
                under a T.comm_reducer scope (one per row, in a serial loop: the stage
                is reused), stored by threadIdx.y == 0 (bK unused);
                "lanes": the register form of hand-written GEMVs (MLX's gemv): each
                simdgroup owns bN / groups weight rows (groups = min(threads / simd
                width, bN) simdgroups; extra threads are not launched), each lane 4
                contiguous K elements per step (128 per simdgroup, bK unused), and a
                thread keeps only its rows' float32 partials (bM x rows) and one 4-element
                lane of X and of each weight row: bM * rows floats, not bM * bN * 4. The
                X tile of a step (bM x 128) is shared by the simdgroups: staged once in
                threadgroup memory (2 barriers a step) or read by each simdgroup from
                device memory, as `stage_x` says; T.reduce_sum over a tile of the lanes'
                partials combines them with simd_sum. Draws threads up to 512 (16
                simdgroups for bN 16: one row per simdgroup)
    stage_x     lanes form: True stages the X tile, False reads it from device memory in
                every simdgroup (as MLX's gemv does), None (default) lets the cost of a step
                decide (`stages_vector`); one simdgroup always reads it from device memory

Signature: (X, W, Y).

The reduce kernel: acc[bM, bN, bK] (float32 fragment) += X tile[m, k] * W tile[n, k] for each k
step (per-thread partial sums), then one T.reduce_sum over k and a masked T.copy to Y.
"""

from __future__ import annotations

from hypothesis import strategies as st

import core.language as T
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor
from core.target import METAL
from oracles import bounds
from oracles import gemm as oracle

DTYPES = S.FLOATS
ROWS = (1, 2, 4, 8)
COLS = (1, 2, 4, 8, 16)
STEPS = (32, 64, 128, 256)
THREADS = (32, 64, 128, 256)
LANES_THREADS = THREADS + (512,)
FORMS = ("reduce", "allreduce", "lanes")


def kernel(M, N, K, bM, bN, bK, threads, dtype, out_dtype):
    @T.prim_func
    def gemv(X: T.Tensor((M, K), dtype), W: T.Tensor((N, K), dtype),
             Y: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            x = T.alloc_fragment((bM, bK), dtype)
            w = T.alloc_fragment((bN, bK), dtype)
            acc = T.alloc_fragment((bM, bN, bK), "float32")
            y = T.alloc_fragment((bM, bN), "float32")
            T.clear(acc)
            for ko in T.serial(T.ceildiv(K, bK)):
                T.copy(X[by * bM, ko * bK], x)
                T.copy(W[bx * bN, ko * bK], w)
                for m, n, k in T.Parallel(bM, bN, bK):
                    acc[m, n, k] += T.cast(x[m, k], "float32") * T.cast(w[n, k], "float32")
            T.reduce_sum(acc, y, dim=2)
            T.copy(y, Y[by * bM, bx * bN])
    return gemv


def allreduce_kernel(M, N, K, bM, bN, threads, dtype, out_dtype):
    reduce_threads = threads // bN
    tile_k = 4
    step = reduce_threads * tile_k

    @T.prim_func
    def gemv(X: T.Tensor((M, K), dtype), W: T.Tensor((N, K), dtype),
             Y: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=(bN, reduce_threads)) \
                as (bx, by):
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            acc = T.alloc_local((bM,), "float32")
            out = T.alloc_local((bM,), "float32")
            T.clear(acc)
            for ko in T.serial(T.ceildiv(K, step)):
                for m in T.serial(bM):
                    for k in T.serial(tile_k):
                        kk = ko * step + tk * tile_k + k
                        if by * bM + m < M and bx * bN + tn < N and kk < K:
                            acc[m] += (T.cast(X[by * bM + m, kk], "float32") *
                                       T.cast(W[bx * bN + tn, kk], "float32"))
            for m in T.serial(bM):
                with T.attr(T.comm_reducer(lambda a, b: a + b, [T.cast(0, "float32")]),
                            "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                    T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[m], True, out[m], tk,
                                                      dtype="handle"))
                if tk == 0 and by * bM + m < M and bx * bN + tn < N:
                    Y[by * bM + m, bx * bN + tn] = T.cast(out[m], out_dtype)
    return gemv


def lanes_geometry(bN, threads):
    """(simdgroups, weight rows per simdgroup, K elements per step) of the lanes form."""
    lanes = METAL.simd_width
    groups = max(1, min(threads // lanes, bN))     # simdgroups; each owns bN / groups rows
    return groups, bN // groups, 4 * lanes


def stages_vector(bM, bN, threads, dtype) -> bool:
    """Whether the lanes form stages the X tile of a step in threadgroup memory: the cheaper
    by the bench roofline's reckoning of one step of one threadgroup, in core cycles
    (core.target.COSTS, its figures): the weight tile streams from DRAM; every device byte
    crosses the L2 (X's repeats are served there: the activation rows are small); the
    throughput terms overlap (max), and a barrier adds its latency, hidden by the other
    resident threadgroups. Staged: X read once, written to and read from threadgroup
    memory by every simdgroup, 2 barriers (after the copy, and before the next one).
    From device: every simdgroup reads X, no threadgroup traffic, no barrier. So
    staging pays where many simdgroups would re-read a wide X tile (16 simdgroups, 8
    rows), not at 4 simdgroups or one row of X."""
    from core.target import COSTS, DTYPES

    groups, rows, step = lanes_geometry(bN, threads)
    if groups == 1:
        return False
    size = DTYPES[dtype].bytes
    x, w = bM * step * size, bN * step * size
    staged = max(COSTS.dram(w), COSTS.l2(w + x), COSTS.threadgroup(x + groups * x)) + \
        COSTS.barriers(2, COSTS.resident_groups(groups * METAL.simd_width, x))
    direct = max(COSTS.dram(w), COSTS.l2(w + groups * x))
    return staged < direct


def lanes_kernel(M, N, K, bM, bN, threads, dtype, out_dtype, stage_x=None):
    lanes = METAL.simd_width
    groups, rows, step = lanes_geometry(bN, threads)
    staged = groups > 1 and (stages_vector(bM, bN, threads, dtype) if stage_x is None
                             else bool(stage_x))

    @T.prim_func
    def gemv(X: T.Tensor((M, K), dtype), W: T.Tensor((N, K), dtype),
             Y: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=groups * lanes) as (bx, by):
            tx = T.get_thread_binding(0)
            lane = tx % lanes
            g = tx // lanes
            x = T.alloc_local((1, 4), dtype)
            w = T.alloc_local((rows, 4), dtype)
            acc = T.alloc_local((bM, rows), "float32")
            # the lanes' partial sums as one tile: element [m, i, g, l] is thread g * lanes
            # + l's acc[m, i] (a fragment is dealt to the threads row-major), so filling it
            # reads local slots and T.reduce_sum over l is one simd_sum per (m, i)
            part = T.alloc_fragment((bM, rows, groups, lanes, 1), "float32")
            y = T.alloc_fragment((bM, rows, groups, 1), "float32")
            T.clear(acc)
            if staged:
                xs = T.alloc_shared((bM, step), dtype)
            for ko in T.serial(T.ceildiv(K, step)):
                if staged:
                    T.copy(X[by * bM, ko * step], xs)
                T.copy(W[bx * bN + g * rows, ko * step + lane * 4], w)
                for m in T.serial(bM):
                    if staged:
                        T.copy(xs[m, lane * 4], x)
                    else:
                        T.copy(X[by * bM + m, ko * step + lane * 4], x)
                    for i, j in T.grid(rows, 4):
                        acc[m, i] += T.cast(x[0, j], "float32") * T.cast(w[i, j], "float32")
            for m, i, gg, l, u in T.Parallel(bM, rows, groups, lanes, 1):
                part[m, i, gg, l, u] = acc[m, i]
            T.reduce_sum(part, y, dim=3)
            for m, i, gg, u in T.Parallel(bM, rows, groups, 1):
                if by * bM + m < M and bx * bN + gg * rows + i < N:
                    Y[by * bM + m, bx * bN + gg * rows + i] = T.cast(y[m, i, gg, u], out_dtype)
    return gemv


def build(p: dict) -> Built:
    M, N, K, dtype, out_dtype = p["M"], p["N"], p["K"], p["dtype"], p["out_dtype"]
    form = p.get("form", "reduce")
    if form == "allreduce":
        func = allreduce_kernel(M, N, K, p["bM"], p["bN"], p["threads"], dtype, out_dtype)
    elif form == "lanes":
        func = lanes_kernel(M, N, K, p["bM"], p["bN"], p["threads"], dtype, out_dtype,
                            p.get("stage_x"))
    else:
        func = kernel(M, N, K, p["bM"], p["bN"], p["bK"], p["threads"], dtype, out_dtype)

    def inputs(seed):
        return [random_tensor((M, K), dtype, seed), random_tensor((N, K), dtype, seed + 1)]

    def expected(args):
        y = oracle.gemm_bounded(args[0], args[1], transpose_b=True, acc="float32",
                                products=oracle.product_rounding(dtype))
        return [bounds.expected(y, out_dtype, f"dot over K={K}, float32 accumulation")]

    return Built(func, [2], inputs, expected, flops=2 * M * N * K)


@st.composite
def _drawn(draw):
    dtype = draw(S.dtype(DTYPES))
    form = draw(S.sampled_from(FORMS))
    return {
        "M": draw(S.extent(1, 12)), "N": draw(S.extent(1, 40)), "K": draw(S.extent(1, 300)),
        "bM": draw(S.tile(ROWS)), "bN": draw(S.tile(COLS)), "bK": draw(S.tile(STEPS)),
        "threads": draw(S.threads(LANES_THREADS if form == "lanes" else THREADS)),
        "dtype": dtype, "out_dtype": draw(S.sampled_from(("float32", dtype))),
        "form": form, "stage_x": draw(S.sampled_from((None, True, False))),
    }


def params():
    return _drawn()


FAMILY = register(Family("gemv", __doc__.splitlines()[0], params, build, tags=("gemm",)))
