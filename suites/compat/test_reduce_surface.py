"""The T.reduce surface TileLang kernels use, on the emulator with every check, against
torch: every source dtype (float32, float16, bfloat16, int32, int64, uint32) x source and
destination scope (fragment, shared, local) x dim x clear x batch, one kernel per
combination computing all five reductions of a ragged tile; the generic
`T.reduce(src, dst, reduce_type, dim, clear)`; and the clear errors.
"""

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError, LoweringError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from harness.gen.strategies import FLOATS

KINDS = ("sum", "max", "min", "abssum", "absmax")
DTYPES = FLOATS + ("int32", "int64", "uint32")
SCOPES = [("fragment", "fragment"), ("fragment", "shared"), ("fragment", "local"),
          ("shared", "fragment"), ("shared", "shared"), ("shared", "local"),
          ("local", "local")]
M, N, bM, THREADS = 11, 20, 8, 64        # two threadgroups, the second ragged in rows
ALLOC = {"fragment": T.alloc_fragment, "shared": T.alloc_shared, "local": T.alloc_local}


def rand(shape, dtype, seed):
    if dtype == "int64":       # beyond 32 bits: the butterflies move both halves
        return random_tensor(shape, "int64", seed, low=-(1 << 40), high=1 << 40)
    if dtype == "int32":
        return random_tensor(shape, "int32", seed, low=-1000, high=1000)
    if dtype == "uint32":
        return random_tensor(shape, "uint32", seed, low=0, high=1000)
    return random_tensor(shape, dtype, seed)


def reductions(dtype, src_scope, dst_scope, dim, clear, batch):
    """Each (bM, N) tile of X reduced over `dim` five ways (KINDS order) into Y0..Y4; with
    clear=False each destination starts from Init."""
    G = T.ceildiv(M, bM)
    rows = dim == 1
    yshape, dshape = ((M,), (bM,)) if rows else ((G, N), (N,))
    ops = [getattr(T, f"reduce_{k}") for k in KINDS]

    def out(Y, bx):
        return Y[bx * bM] if rows else Y[bx, 0]

    local = dst_scope == "local"
    ragged = rows

    # TVMScript runs Python calls (reduce_one) at parse time but not Python loops over
    # buffers, so the five reductions are written out.
    def reduce_one(k, x, y, Init, bx):
        if not clear:
            T.copy(out(Init, bx), y)
        ops[k](x, y, dim=dim, clear=clear, batch=batch)

    @T.prim_func
    def reduce_tile(X: T.Tensor((M, N), dtype), Init: T.Tensor(yshape, dtype),
                    Y0: T.Tensor(yshape, dtype), Y1: T.Tensor(yshape, dtype),
                    Y2: T.Tensor(yshape, dtype), Y3: T.Tensor(yshape, dtype),
                    Y4: T.Tensor(yshape, dtype)):
        with T.Kernel(G, threads=THREADS) as bx:
            x = ALLOC[src_scope]((bM, N), dtype)
            y0 = ALLOC[dst_scope](dshape, dtype)
            y1 = ALLOC[dst_scope](dshape, dtype)
            y2 = ALLOC[dst_scope](dshape, dtype)
            y3 = ALLOC[dst_scope](dshape, dtype)
            y4 = ALLOC[dst_scope](dshape, dtype)
            T.copy(X[bx * bM, 0], x)
            reduce_one(0, x, y0, Init, bx)
            reduce_one(1, x, y1, Init, bx)
            reduce_one(2, x, y2, Init, bx)
            reduce_one(3, x, y3, Init, bx)
            reduce_one(4, x, y4, Init, bx)
            if local:       # every thread holds every output: each stores its share
                for i in T.Parallel(dshape[0]):
                    if not ragged or bx * bM + i < M:
                        if ragged:
                            Y0[bx * bM + i] = y0[i]
                            Y1[bx * bM + i] = y1[i]
                            Y2[bx * bM + i] = y2[i]
                            Y3[bx * bM + i] = y3[i]
                            Y4[bx * bM + i] = y4[i]
                        else:
                            Y0[bx, i] = y0[i]
                            Y1[bx, i] = y1[i]
                            Y2[bx, i] = y2[i]
                            Y3[bx, i] = y3[i]
                            Y4[bx, i] = y4[i]
            else:
                T.copy(y0, out(Y0, bx))
                T.copy(y1, out(Y1, bx))
                T.copy(y2, out(Y2, bx))
                T.copy(y3, out(Y3, bx))
                T.copy(y4, out(Y4, bx))

    return reduce_tile


def expected(x, init, kind, dim, clear, dtype):
    """Oracle in float64 / int64 over the tiles as the kernel loads them (rows past M of the
    ragged tile read 0), rounded once to dtype."""
    G = -(-M // bM)
    wide = torch.int64 if not x.dtype.is_floating_point else torch.float64
    padded = torch.zeros(G * bM, N, dtype=wide)
    padded[:M] = x.to(wide)
    tiles = padded.reshape(G, bM, N)
    v = tiles.abs() if kind.startswith("abs") else tiles
    red = {"sum": v.sum, "abssum": v.sum, "max": v.amax, "absmax": v.amax,
           "min": v.amin}[kind](dim=1 + dim)
    red = red.reshape(-1)[:M] if dim == 1 else red
    if not clear:
        i = init.to(wide)
        red = {"sum": i + red, "abssum": i + red, "max": torch.maximum(i, red),
               "absmax": torch.maximum(i, red), "min": torch.minimum(i, red)}[kind]
    return red if dtype == "uint32" else red.to(getattr(torch, dtype))


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("clear", [True, False])
@pytest.mark.parametrize("dim", [1, 0])
@pytest.mark.parametrize("src_scope, dst_scope", SCOPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_grid(run, dtype, src_scope, dst_scope, dim, clear, batch):
    kernel = core.compile(reductions(dtype, src_scope, dst_scope, dim, clear, batch),
                          out_idx=[2, 3, 4, 5, 6])
    G = -(-M // bM)
    x = rand((M, N), dtype, 6)
    init = rand((M,) if dim == 1 else (G, N), dtype, 7)
    outs = run(kernel, x, init)
    length = (N if dim == 1 else bM) + (0 if clear else 1)
    for kind, y in zip(KINDS, outs):
        assert_close(y, expected(x, init, kind, dim, clear, dtype), dtype=y.dtype,
                     reduction_length=length,
                     op_class="accumulation" if kind.endswith("sum") else "exact",
                     what=f"reduce_{kind}")


def test_generic_reduce_matches_the_named_ones(run):
    @T.prim_func
    def generic(X: T.Tensor((8, 24), "float32"), S: T.Tensor((8,), "float32"),
                Mx: T.Tensor((24,), "float32")):
        with T.Kernel(1, threads=32):
            x = T.alloc_fragment((8, 24), "float32")
            s = T.alloc_fragment((8,), "float32")
            mx = T.alloc_shared((24,), "float32")
            T.copy(X, x)
            T.reduce(x, s, "sum", 1, True)
            T.reduce(x, mx, reduce_type="max", dim=0, clear=True)
            T.copy(s, S)
            T.copy(mx, Mx)

    x = random_tensor((8, 24), "float32", 5)
    s, mx = run(core.compile(generic, out_idx=[1, 2]), x)
    assert_close(s, x.double().sum(1), reduction_length=24, op_class="accumulation")
    assert_close(mx, x.amax(0), op_class="exact")


@pytest.mark.parametrize("call, message", [
    (lambda x, y: T.reduce(x, y, "prod", 1, True), "reduce_type 'prod' is not supported"),
    (lambda x, y: T.reduce_sum(x, y, dim=1, batch=0), "batch=0 must be a positive int"),
    (lambda x, y: T.reduce_max(x, y, dim=1, nan_propagate=True),
     "nan_propagate=True is not supported"),
])
def test_reduce_errors(call, message):
    def build():
        @T.prim_func
        def bad(X: T.Tensor((8, 8), "float32"), Y: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                x = T.alloc_fragment((8, 8), "float32")
                y = T.alloc_fragment((8,), "float32")
                T.copy(X, x)
                call(x, y)
                T.copy(y, Y)
        return core.compile(bad, out_idx=[1])

    with pytest.raises(KernelDefinitionError, match=message) as err:
        build()
    assert "kernel 'bad'" in str(err.value)


# ---- T.alloc_reducer / T.finalize_reducer (TileLang's GEMV example, in our words) -------

def gemv_reducer(M, N, bM, bN, threads, dtype="float16", op="sum", dst_form=False):
    @T.prim_func
    def gemv(a: T.Tensor((M, N), dtype), x: T.Tensor((N,), dtype), o: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as i0_m:
            o_reducer = T.alloc_reducer(bM, "float32", op=op, replication="all")
            if op == "sum":
                T.clear(o_reducer)
            else:
                T.fill(o_reducer, -T.infinity("float32"))
            for i0_n in T.Pipelined(T.ceildiv(N, bN), num_stages=2):
                a_smem = T.alloc_shared((bM, bN), dtype)
                T.copy(a[i0_m * bM, i0_n * bN], a_smem)
                a_frag = T.alloc_fragment((bM, bN), dtype)
                T.copy(a_smem, a_frag)
                x_frag = T.alloc_fragment(bN, dtype)
                T.copy(x[i0_n * bN], x_frag)
                for i1_m, i1_n in T.Parallel(bM, bN):
                    if op == "sum":
                        o_reducer[i1_m] += a_frag[i1_m, i1_n] * x_frag[i1_n]
                    else:
                        o_reducer[i1_m] = T.max(o_reducer[i1_m], a_frag[i1_m, i1_n] *
                                                x_frag[i1_n])
            if dst_form:
                o_frag = T.alloc_fragment((bM,), "float32")
                T.finalize_reducer(o_reducer, o_frag)
                T.copy(o_frag, o[i0_m * bM])
            else:
                T.finalize_reducer(o_reducer)
                T.copy(o_reducer, o[i0_m * bM])

    return gemv


@pytest.mark.parametrize("threads", [16, 32, 64, 128])
@pytest.mark.parametrize("op, dst_form", [("sum", False), ("max", False), ("sum", True)])
def test_alloc_reducer_gemv(run, threads, op, dst_form):
    M, N, bM, bN = 37, 96, 16, 32            # ragged rows; N = 3 column blocks
    kernel = core.compile(gemv_reducer(M, N, bM, bN, threads, op=op, dst_form=dst_form),
                          out_idx=[2])
    a, x = rand((M, N), "float16", 8), rand((N,), "float16", 9)
    o = run(kernel, a, x)
    prod_ = a.double() * x.double()
    # rows past M of the ragged block load 0 and are never stored
    expect = prod_.sum(1) if op == "sum" else prod_.amax(1)
    # the products round in float16 (a_frag * x_frag), then accumulate in float32
    assert_close(o, expect, dtype="float16", reduction_length=N,
                 op_class="accumulation" if op == "sum" else "elementwise")


def rowsum_reducer(threads):
    @T.prim_func
    def rowsum(X: T.Tensor((16,), "float32"), Y: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=threads):
            r = T.alloc_reducer(16, "float32")
            T.clear(r)
            for i in T.Parallel(16):
                r[i] += X[i]
            T.finalize_reducer(r)
            T.copy(r, Y)
    return rowsum


@pytest.mark.parametrize("make, error, message", [
    (lambda: rowsum_reducer(48), LoweringError, "has 48 threads"),
    (lambda: gemv_reducer(16, 32, 16, 32, 32, op="prod"), KernelDefinitionError,
     "op='prod' is not supported"),
])
def test_reducer_errors(make, error, message):
    with pytest.raises(error, match=message):
        func = make()
        core.compile(func, out_idx=[len(func.params) - 1])
