"""Family `gemm`: C = op(A) @ op(B), TileLang's tiled GEMM: shared A/B tiles per k step,
T.gemm into a float32 fragment, a shared accumulator or C's device tile, T.Pipelined k
loop, ragged M/N/K tiles.

Params:
    M, N, K     multiples of 8 (simdgroup matrices are 8x8); not multiples of the block:
                edge tiles are masked (4096 x 4096 x 4096 builds too)
    bM, bN, bK  block sizes (bM, bN: 16, 32, 64; bK: 16, 32), the A and B tiles within
                24 KiB (room for the accumulator's float32 staging); threads: 32..256,
                whole simdgroups that split the (bM/8) x (bN/8) accumulator tiles evenly
                (`supported`, the core's rule)
    dtype       A and B: float32, float16, bfloat16 (float32 accumulation)
    out_dtype   C: float32 or `dtype`
    trans_A     A is stored K x M (A_shared bK x bM) and T.gemm(transpose_A=True)
    trans_B     B is stored N x K (B_shared bN x bK) and T.gemm(transpose_B=True)
    num_stages  T.Pipelined(..., num_stages) (0-3; a hint on Metal)
    init        "clear": T.clear(C_local) before the k loop;
                "clear_accum": the first k step peeled, T.gemm(..., clear_accum=True)
    a_operand   "shared" (default): A staged in threadgroup memory; "fragment": T.copy
                of the A tile into a fragment, T.gemm(A_local, B_shared, C_local)
    epilogue    "none" (default): T.copy(C_local -> C); "relu_scale": a T.Parallel over
                C_local (C = max(0.5 C, 0)) first; "shared": C_local -> C_shared -> C;
                "window" (accum "shared" only): the output is W, the window
                C_local[r0:r0+h, c0:c0+w] of every block, read element-wise by the
                threads: a read of part of the 8x8 tiles the simdgroups stored, in
                another layout (the pattern a barrier planner with wrong tile footprints
                misses)
    accum       "fragment" (default): C_local = T.alloc_fragment, held as simdgroup
                matrices; "shared": C_local = T.alloc_shared((bM, bN + pad), "float32")
                (TileLang's Metal path), T.gemm into C_local[0:bM, 0:bN]: every T.gemm
                loads and simdgroup_stores its tiles, at the padded row stride;
                "global": no accumulator buffer, every T.gemm reads and writes the
                block's tile of C in device memory (float32 tiles inside C directly,
                edge tiles and float16/bfloat16 C through a float32 stage); needs init
                "clear_accum" and epilogue "none"
    pad         extra float32 elements per row of a shared accumulator (0, 4, 8)
    window      (r0, c0, h, w) of the "window" epilogue, inside (bM, bN)
    swizzle     0 (default): none; a panel size: T.use_swizzle(swizzle, order=swizzle_order)
                after the allocations (block rasterization: which tiles run together)
    swizzle_order  "row" or "column"

Signature: (A, B, C); (A, B, W) for the "window" epilogue, W (ceil(M/bM) * h,
ceil(N/bN) * w) with W[by * h + i, bx * w + j] = C_block(by, bx)[r0 + i, c0 + j] (rows and
columns past M, N are 0: edge tiles load zeros).
"""

from __future__ import annotations

import functools

import torch
from hypothesis import strategies as st

import core.language as T
from core import cdiv
from core.target import METAL
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor
from oracles import bounds
from oracles import gemm as oracle

DTYPES = S.FLOATS
BLOCKS = (16, 32, 64)
THREADS = (32, 64, 128, 256)
INITS = ("clear", "clear_accum")
A_OPERANDS = ("shared", "fragment")
EPILOGUES = ("none", "relu_scale", "shared")
SWIZZLE_ORDERS = ("row", "column")
ACCUMS = ("fragment", "shared", "global")
PADS = (0, 4, 8)


def build(p: dict) -> Built:
    M, N, K = p["M"], p["N"], p["K"]
    bM, bN, bK, threads = p["bM"], p["bN"], p["bK"], p["threads"]
    dtype, out_dtype, stages = p["dtype"], p["out_dtype"], p["num_stages"]
    ta, tb = p["trans_A"], p["trans_B"]
    a_shape, a_tile = ((K, M), (bK, bM)) if ta else ((M, K), (bM, bK))
    b_shape, b_tile = ((N, K), (bN, bK)) if tb else ((K, N), (bK, bN))

    def a_origin(A, by, ko):
        return A[ko * bK, by * bM] if ta else A[by * bM, ko * bK]

    def b_origin(B, bx, ko):
        return B[bx * bN, ko * bK] if tb else B[ko * bK, bx * bN]

    clear_accum = p["init"] == "clear_accum"
    a_fragment = p.get("a_operand", "shared") == "fragment"
    epilogue = p.get("epilogue", "none")
    swizzle, swizzle_order = p.get("swizzle", 0), p.get("swizzle_order", "row")
    swizzled = swizzle > 0  # a Python bool: TVMScript decides `if` on bools only
    shared_acc = p.get("accum", "fragment") == "shared"
    global_acc = p.get("accum", "fragment") == "global"
    pad = p.get("pad", 0) if shared_acc else 0
    r0, c0, h, w = p.get("window", (0, 0, bM, bN))
    gm, gn = cdiv(M, bM), cdiv(N, bN)
    window = epilogue == "window"
    out_shape = (gm * h, gn * w) if window else (M, N)
    first_k = 1 if clear_accum else 0

    def acc_tile(C_local, C, bx, by):
        if global_acc:
            return C[by * bM:by * bM + bM, bx * bN:bx * bN + bN]
        return C_local[0:bM, 0:bN] if shared_acc else C_local

    # Python conditions (`if clear_accum:`) are decided while TVMScript parses the kernel:
    # each params dict gives one straight-line kernel.
    @T.prim_func
    def gemm(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
             C: T.Tensor(out_shape, out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            if a_fragment:
                A_tile = T.alloc_fragment(a_tile, dtype)
            else:
                A_tile = T.alloc_shared(a_tile, dtype)
            B_shared = T.alloc_shared(b_tile, dtype)
            if shared_acc:
                C_local = T.alloc_shared((bM, bN + pad), "float32")
            elif global_acc:
                C_local = C              # unused: T.gemm writes C's tiles
            else:
                C_local = T.alloc_fragment((bM, bN), "float32")
            if swizzled:
                T.use_swizzle(swizzle, order=swizzle_order)
            if clear_accum:
                T.copy(a_origin(A, by, 0), A_tile)
                T.copy(b_origin(B, bx, 0), B_shared)
                T.gemm(A_tile, B_shared, acc_tile(C_local, C, bx, by), transpose_A=ta,
                       transpose_B=tb, clear_accum=True)
            else:
                T.clear(acc_tile(C_local, C, bx, by))
            for ko in T.Pipelined(first_k, T.ceildiv(K, bK), num_stages=stages):
                T.copy(a_origin(A, by, ko), A_tile)
                T.copy(b_origin(B, bx, ko), B_shared)
                T.gemm(A_tile, B_shared, acc_tile(C_local, C, bx, by), transpose_A=ta,
                       transpose_B=tb)
            if epilogue == "relu_scale":
                for i, j in T.Parallel(bM, bN):
                    C_local[i, j] = T.max(C_local[i, j] * 0.5, 0.0)
            if window:
                for i, j in T.Parallel(h, w):
                    C[by * h + i, bx * w + j] = C_local[r0 + i, c0 + j]
            elif epilogue == "shared" and not shared_acc:
                C_shared = T.alloc_shared((bM, bN), "float32")
                T.copy(C_local, C_shared)
                T.copy(C_shared, C[by * bM, bx * bN])
            elif not global_acc:
                T.copy(acc_tile(C_local, C, bx, by), C[by * bM, bx * bN])

    def inputs(seed):
        return [random_tensor(a_shape, dtype, seed), random_tensor(b_shape, dtype, seed + 1)]

    # float32 accumulators over K (products of half/bfloat operands are exact in float32),
    # the epilogue in float32, one rounding on the store; a "global" accumulator is C's own
    # tile, which stores the running sum in C's dtype after every k step
    steps = -(-K // bK)
    partials = (out_dtype, bK) if global_acc else None
    how = f"dot over K={K}, float32 accumulation" + \
        (f", {steps} partial sum(s) stored in {out_dtype}" if global_acc else "")

    def expected(args):
        c = oracle.gemm_bounded(args[0], args[1], ta, tb, acc="float32", partials=partials,
                                products=oracle.product_rounding(dtype))
        if epilogue == "relu_scale":
            c = bounds.maximum(bounds.mul(c, 0.5, "float32"), 0.0)
        if window:
            def cut(t):
                padded = torch.zeros(gm * bM, gn * bN, dtype=t.dtype)
                padded[:M, :N] = t
                blocks = padded.reshape(gm, bM, gn, bN)[:, r0:r0 + h, :, c0:c0 + w]
                return blocks.reshape(gm * h, gn * w)
            c = c.map(cut)
        return [bounds.expected(c, out_dtype, how)]

    return Built(gemm, [2], inputs, expected, flops=2 * M * N * K)


def supported(p: dict) -> bool:
    """Whole simdgroups that split the accumulator's 8x8 tiles evenly (the core's rule,
    core/ir/matrix.py), and threadgroup tiles (A, B, the "shared" epilogue's C) that
    leave 8 KiB of the 32 KiB for the accumulator's float32 staging."""
    groups = p["threads"] // METAL.simd_width
    tm, tn = p["bM"] // METAL.matrix_tile, p["bN"] // METAL.matrix_tile
    even = any(groups % wm == 0 and tm % wm == 0 and tn % (groups // wm) == 0
               for wm in range(1, groups + 1))
    global_acc = p.get("accum", "fragment") == "global"
    # the accumulator's staging: 8 KiB, or the whole tile for C in device memory
    stage = p["bM"] * p["bN"] if global_acc else 2048
    tiles = [(p["bM"] * p["bK"], p["dtype"]), (p["bK"] * p["bN"], p["dtype"]),
             (stage, "float32")]
    shared_acc = p.get("accum", "fragment") == "shared"
    if p.get("epilogue") == "shared" and not shared_acc:
        tiles.append((p["bM"] * p["bN"], "float32"))
    if shared_acc:
        tiles.append((p["bM"] * (p["bN"] + p.get("pad", 0)), "float32"))
    r0, c0, h, w = p.get("window", (0, 0, p["bM"], p["bN"]))
    window_ok = (p.get("epilogue") != "window" or
                 (shared_acc and h >= 1 and w >= 1 and r0 + h <= p["bM"] and c0 + w <= p["bN"]))
    global_ok = not global_acc or (p["init"] == "clear_accum"
                                   and p.get("epilogue", "none") == "none")
    return even and window_ok and global_ok and S.fits_threadgroup(*tiles)


@functools.lru_cache(maxsize=None, typed=True)     # one strategy per tile shape, reused
@st.composite
def _window(draw, bM, bN):
    """(r0, c0, h, w): often inside one 8x8 tile, off its first row and column."""
    edge = METAL.matrix_tile
    if draw(st.booleans()):
        r0, c0 = draw(st.integers(1, edge - 1)), draw(st.integers(1, edge - 1))
        return [r0, c0, draw(st.integers(1, edge - r0)), draw(st.integers(1, edge - c0))]
    r0, c0 = draw(st.integers(0, bM - 1)), draw(st.integers(0, bN - 1))
    return [r0, c0, draw(st.integers(1, bM - r0)), draw(st.integers(1, bN - c0))]


@st.composite
def _drawn(draw):
    dtype = draw(S.dtype(DTYPES))
    bM, bN = draw(S.tile(BLOCKS)), draw(S.tile(BLOCKS))
    accum = draw(S.sampled_from(ACCUMS))
    epilogues = EPILOGUES + (("window",) if accum == "shared" else ())
    if accum == "global":   # C in device memory: T.gemm writes C itself
        epilogues = ("none",)
    return {
        "M": draw(S.multiple_of(8, 8, 96)), "N": draw(S.multiple_of(8, 8, 96)),
        "K": draw(S.multiple_of(8, 8, 128)),
        "bM": bM, "bN": bN, "bK": draw(S.tile((16, 32))),
        "threads": draw(S.threads(THREADS)), "dtype": dtype,
        "out_dtype": draw(S.sampled_from(("float32", dtype))),
        "trans_A": draw(st.booleans()), "trans_B": draw(st.booleans()),
        "num_stages": draw(st.integers(0, 3)),
        "init": draw(S.sampled_from(("clear_accum",) if accum == "global" else INITS)),
        "a_operand": draw(S.sampled_from(A_OPERANDS)),
        "epilogue": draw(S.sampled_from(epilogues)),
        "accum": accum, "pad": draw(S.sampled_from(PADS)) if accum == "shared" else 0,
        "window": draw(_window(bM, bN)),
        "swizzle": draw(S.sampled_from((0, 0, 1, 2, 3, 8))),
        "swizzle_order": draw(S.sampled_from(SWIZZLE_ORDERS)),
    }


def params():
    return _drawn().filter(supported)


FAMILY = register(Family("gemm", __doc__.splitlines()[0], params, build,
                         tags=("gemm",)))
