"""Every call the MSL printer can emit runs on the emulator and matches torch.

One case per entry of the printer's call tables (core/codegen/msl.py: INTRINSICS, CALLS,
MATRIX_CALLS): the kernel is compiled, its MSL must contain the call's printed form (so
the case really exercises that entry), and it runs on every backend (the `backend`
fixture) against a float64 torch oracle with the tolerance policy. A table entry without
a case here fails `test_every_call_has_a_case`.
"""

import functools
import math

import pytest
import torch
import tvm

import core
import core.language as T
from core.codegen import msl
from core.ir import ops
from core.language import warp
from harness.check.case import Status, run_case
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor

N = 256


def _inputs(domain, seed):
    """Two seeded float32 vectors: "pos" in [0.25, 4), "any" with both signs and some
    halfway values, "special" with nan and +-inf among them."""
    g = torch.Generator().manual_seed(seed)
    if domain == "pos":
        return [0.25 + 3.75 * torch.rand(N, generator=g) for _ in range(2)]
    a, b = (3 * torch.randn(N, generator=g) for _ in range(2))
    ties = torch.arange(-4, 4) + 0.5        # halfway values: rint rounds them to even
    a[::N // len(ties)] = ties
    if domain == "special":
        a[::7], a[3::11], a[5::13] = float("nan"), float("inf"), float("-inf")
    return [a, b]


def _one(f):
    return lambda x, y: f(x)


# op -> (the DSL expression of x, y; domain; oracle on float64 x, y; output dtype;
#        tolerance op class; the printed form the MSL must contain)
ELEMENTWISE = {
    "tirx.exp": (lambda x, y: T.exp(x), "any", _one(torch.exp), "float32", "transcendental",
                 "exp("),
    "tirx.exp2": (lambda x, y: T.exp2(x), "any", _one(torch.exp2), "float32", "transcendental",
                  "exp2("),
    "tirx.log": (lambda x, y: T.log(x), "pos", _one(torch.log), "float32", "transcendental",
                 "log("),
    "prim.log2": (lambda x, y: T.log2(x), "pos", _one(torch.log2), "float32", "transcendental",
                  "log2("),
    "tirx.log10": (lambda x, y: T.log10(x), "pos", _one(torch.log10), "float32",
                   "transcendental", "log10("),
    "tirx.sqrt": (lambda x, y: T.sqrt(x), "pos", _one(torch.sqrt), "float32", "transcendental",
                  "sqrt("),
    "tirx.rsqrt": (lambda x, y: T.rsqrt(x), "pos", _one(torch.rsqrt), "float32",
                   "transcendental", "rsqrt("),
    "tirx.tanh": (lambda x, y: T.tanh(x), "any", _one(torch.tanh), "float32", "transcendental",
                  "tanh("),
    "tirx.sigmoid": (lambda x, y: T.sigmoid(x), "any", _one(torch.sigmoid), "float32",
                     "transcendental", "(1.0f / (1.0f + exp(-"),
    "tirx.sin": (lambda x, y: T.sin(x), "any", _one(torch.sin), "float32", "transcendental",
                 "sin("),
    "tirx.cos": (lambda x, y: T.cos(x), "any", _one(torch.cos), "float32", "transcendental",
                 "cos("),
    "tirx.pow": (lambda x, y: T.pow(x, y), "pos", torch.pow, "float32", "transcendental",
                 "pow("),
    "tirx.fabs": (lambda x, y: T.abs(x), "any", _one(torch.abs), "float32", "elementwise",
                  "fabs("),
    "tirx.floor": (lambda x, y: T.floor(x), "any", _one(torch.floor), "float32", "exact",
                   "floor("),
    "prim.ceil": (lambda x, y: T.ceil(x), "any", _one(torch.ceil), "float32", "exact", "ceil("),
    "tirx.round": (lambda x, y: T.round(x), "any", _one(torch.round), "float32", "exact",
                   "rint("),
    "tirx.trunc": (lambda x, y: T.trunc(x), "any", _one(torch.trunc), "float32", "exact",
                   "trunc("),
    "tirx.fmod": (lambda x, y: T.fmod(x, y), "any", torch.fmod, "float32", "elementwise",
                  "fmod("),
    "tirx.isnan": (lambda x, y: T.isnan(x), "special", _one(torch.isnan), "bool", "exact",
                   "isnan("),
    "prim.if_then_else": (lambda x, y: T.if_then_else(x > y, x, y), "any", torch.maximum,
                          "float32", "exact", " ? "),
    "prim.likely": (lambda x, y: T.if_then_else(tvm.tirx.likely(x > y), x, y), "any",
                    torch.maximum, "float32", "exact", " ? "),
    "tirx.reinterpret": (lambda x, y: T.reinterpret(x, "int32"), "any",
                         lambda x, y: x.float().view(torch.int32), "int32", "exact",
                         "as_type<int"),
}

# calls only the tile lowerings emit: a harness family's kernel that prints them
GEMM = {"M": 32, "N": 32, "K": 64, "bM": 32, "bN": 32, "bK": 16, "threads": 64,
        "dtype": "float16", "out_dtype": "float32", "trans_A": False, "trans_B": False,
        "num_stages": 2, "init": "clear"}
REDUCE = {"M": 3, "N": 256, "dim": 1, "kind": "sum", "dtype": "float32",
          "out_dtype": "float32", "clear": True, "keepdim": False, "block": 1,
          "threads": 128}
REDUCE_ATOMIC = {**REDUCE, "combine": "atomic", "splits": 4}
# rows of 16 over 4 threads: groups smaller than a simdgroup combine with a butterfly
REDUCE_PARTIAL = {**REDUCE, "M": 32, "N": 16, "block": 8}
FAMILY_CALLS = {
    "tl.simdgroup_fill": ("gemm", GEMM, "make_filled_simdgroup_matrix<float, 8, 8>("),
    "tl.simdgroup_load": ("gemm", GEMM, "simdgroup_load("),
    "tl.simdgroup_store": ("gemm", GEMM, "simdgroup_store("),
    "tl.simdgroup_mma": ("gemm", GEMM, "simdgroup_multiply_accumulate("),
    "tirx.address_of": ("gemm", GEMM, ", &"),
    "tl.simd_shuffle_xor": ("reduce", REDUCE_PARTIAL, "simd_shuffle_xor("),
    "tl.simd_sum": ("reduce", REDUCE, "simd_sum("),
    "tl.simd_max": ("reduce", {**REDUCE, "kind": "max"}, "simd_max("),
    "tl.simd_min": ("reduce", {**REDUCE, "kind": "min"}, "simd_min("),
    "tl.atomic": ("reduce", REDUCE_ATOMIC, "atomic_fetch_add_explicit("),
}




def _per_simdgroup(f):
    """An oracle applying f to each simdgroup's 32 values of a 64-thread vector."""
    return lambda x: torch.cat([f(g) for g in x.view(2, 32)])


def _all_lanes(f):
    return _per_simdgroup(lambda g: torch.full((32,), int(f(g)), dtype=torch.int64))


def _bits(g):
    return sum(1 << i for i in range(32) if g[i] > 0)


# the warp-level constructs (core/language/warp.py): op -> (the DSL expression of a
# thread's int32 value v and its index tx, the oracle over all 64 values, printed form)
WARP_CALLS = {
    "tl.simd_shuffle": (lambda v, tx: T.shfl_sync(v, 5), _per_simdgroup(
        lambda g: g[5].expand(32)), "simd_shuffle("),
    "tl.simd_shuffle_up": (lambda v, tx: T.shfl_up(v, 3), _per_simdgroup(
        lambda g: torch.cat([g[:3], g[:-3]])), "simd_shuffle_up("),
    "tl.simd_shuffle_down": (lambda v, tx: T.shfl_down(v, 3), _per_simdgroup(
        lambda g: torch.cat([g[3:], g[-3:]])), "simd_shuffle_down("),
    "tl.simd_and": (lambda v, tx: T.warp_reduce_bitand(v), _all_lanes(
        lambda g: functools.reduce(lambda a, b: a & b, g.tolist())), "simd_and("),
    "tl.simd_or": (lambda v, tx: T.warp_reduce_bitor(v), _all_lanes(
        lambda g: functools.reduce(lambda a, b: a | b, g.tolist())), "simd_or("),
    # (T.reduce_bitxor's whole-simdgroup form; TileLang has no warp_reduce_bitxor)
    "tl.simd_xor": (lambda v, tx: warp.warp_reduce("bitxor", v, "T.reduce_bitxor"),
                    _all_lanes(lambda g: functools.reduce(lambda a, b: a ^ b, g.tolist())),
                    "simd_xor("),
    "tl.simd_any": (lambda v, tx: T.any_sync(v > 45), _all_lanes(
        lambda g: bool((g > 45).any())), "simd_any("),
    "tl.simd_all": (lambda v, tx: T.all_sync(v > -45), _all_lanes(
        lambda g: bool((g > -45).all())), "simd_all("),
    "tl.simd_ballot": (lambda v, tx: T.cast(T.ballot(v > 0), "int32"), _all_lanes(
        lambda g: _bits(g) - (1 << 32 if _bits(g) >> 31 else 0)), "ulong(simd_ballot("),
    "tl.simd_active_threads_mask": (lambda v, tx: T.cast(T.activemask() >> T.uint64(16),
                                                         "int32"),
                                    _all_lanes(lambda g: 0xFFFF),
                                    "ulong(simd_active_threads_mask())"),
    # (T.cumsum's per-segment scan, core/language/scan.py; no T.* name of its own)
    "tl.simd_prefix_inclusive_sum": (
        lambda v, tx: ops.call("tl.simd_prefix_inclusive_sum", v, dtype="int32"),
        _per_simdgroup(lambda g: g.cumsum(0)), "simd_prefix_inclusive_sum("),
}


def _loop_break_kernel():
    @T.prim_func
    def loop_break(A: T.Tensor((64,), "int32"), B: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            count = T.alloc_var("int32", 0)
            for k in T.serial(64):
                if (A[tx] + k) % 7 == 0:
                    T.loop_break()
                count = count + 1
            B[tx] = count
    return loop_break


def _extern_kernel():
    @T.prim_func
    def user_msl(A: T.Tensor((64,), "int32"), B: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64):
            T.import_source("inline int twice_plus(int x, int y) { return 2 * x + y; }")
            tx = T.get_thread_binding()
            B[tx] = T.call_extern("int32", "twice_plus", A[tx], tx)
    return user_msl


def _access_ptr_kernel():
    @T.prim_func
    def through_pointer(A: T.Tensor((64,), "int32"), B: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64):
            T.import_source("inline int twice_at(const device int* p, int y) "
                            "{ return 2 * p[0] + y; }")
            tx = T.get_thread_binding()
            B[tx] = T.call_extern("int32", "twice_at", T.access_ptr(A[tx], "r"), tx)
    return through_pointer


def _twice_plus(x):
    return 2 * x + torch.arange(64)


# calls printed as statements or taken from user MSL: op -> (the kernel: int32 A -> int32
# B over 64 threads, the oracle, printed form)
STATEMENT_CALLS = {
    "tirx.call_extern": (_extern_kernel, _twice_plus, "twice_plus(A[tx], tx)"),
    "tl.import_source": (_extern_kernel, _twice_plus,
                         "inline int twice_plus(int x, int y)"),
    "tl.access_ptr": (_access_ptr_kernel, _twice_plus, "twice_at(&A[tx], tx)"),
    "tl.loop_break": (_loop_break_kernel, lambda x: torch.tensor(
        [next(k for k in range(64) if (int(v) + k) % 7 == 0) for v in x]), "break;"),
}


def test_every_call_has_a_case():
    printable = set(msl.INTRINSICS) | set(msl.CALLS) | set(msl.MATRIX_CALLS)
    assert printable == set(ELEMENTWISE) | set(FAMILY_CALLS) | set(WARP_CALLS) | \
        set(STATEMENT_CALLS)


@pytest.mark.parametrize("op", sorted(STATEMENT_CALLS))
def test_statement_call_runs(op, run):
    build, oracle, form = STATEMENT_CALLS[op]
    kernel = core.compile(build(), out_idx=[-1])
    assert form in kernel.msl, kernel.msl
    a = random_tensor((64,), "int32", sum(map(ord, op))).abs() % 1000
    assert_close(run(kernel, a), oracle(a).to(torch.int32), what=op)


@pytest.mark.parametrize("op", sorted(WARP_CALLS))
def test_warp_call_runs(op, run):
    fn, oracle, form = WARP_CALLS[op]

    @T.prim_func
    def warp(A: T.Tensor((64,), "int32"), B: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            B[tx] = fn(A[tx], tx)

    kernel = core.compile(warp, out_idx=[-1])
    assert form in kernel.msl, kernel.msl
    a = random_tensor((64,), "int32", sum(map(ord, op)))
    assert_close(run(kernel, a), oracle(a.long()).to(torch.int32), what=op)


def _elementwise_kernel(fn, out_dtype):
    @T.prim_func
    def call(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"),
             C: T.Tensor((N,), out_dtype)):
        with T.Kernel(2, threads=64) as bx:
            for i in T.Parallel(N // 2):
                C[bx * (N // 2) + i] = fn(A[bx * (N // 2) + i], B[bx * (N // 2) + i])
    return core.compile(call, out_idx=[-1])


@pytest.mark.parametrize("op", sorted(ELEMENTWISE))
def test_elementwise_call_runs(op, run):
    fn, domain, oracle, out_dtype, op_class, form = ELEMENTWISE[op]
    kernel = _elementwise_kernel(fn, out_dtype)
    assert form in kernel.msl, kernel.msl
    a, b = _inputs(domain, seed=sum(map(ord, op)))
    want = oracle(a.double(), b.double())
    got = run(kernel, a, b)
    if op == "tirx.reinterpret":
        want = oracle(a, b)
    assert_close(got, want, out_dtype, op_class=op_class, what=op)


@pytest.mark.parametrize("op", sorted(FAMILY_CALLS))
def test_lowered_call_runs(op, backend):
    family, params, form = FAMILY_CALLS[op]
    result = run_case(family, params, seed=5, backend=backend)
    assert form in result.msl, result.msl
    assert result.status == Status.PASS, f"{op} ({family}): {result.status}\n{result.message}"


def test_sigmoid_form_is_exact_at_zero(run):
    """The printed sigmoid is 1 / (1 + exp(-x)): 0.5 at 0 and saturating, no nan."""
    kernel = _elementwise_kernel(lambda x, y: T.sigmoid(x), "float32")
    a = torch.tensor([0.0, 100.0, -100.0, 1.0] * (N // 4))
    got = run(kernel, a, a)
    assert got[0].item() == 0.5 and got[1].item() == 1.0 and got[2].item() == 0.0
    assert not math.isnan(got.sum().item())
