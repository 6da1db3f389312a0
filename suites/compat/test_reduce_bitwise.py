"""T.reduce_bitand / reduce_bitor / reduce_bitxor (and T.reduce with those names) on the
emulator, against torch.

Fragment rows reduced by a whole simdgroup (simd_and / simd_or / simd_xor), by part of one
(a simd_shuffle_xor butterfly) and across simdgroups (the threadgroup stage), a local
source, clear=False, int32 / uint32 / int64, and the refusal of float buffers.
"""

import functools

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor

OPS = {"bitand": (T.reduce_bitand, torch.bitwise_and),
       "bitor": (T.reduce_bitor, torch.bitwise_or),
       "bitxor": (T.reduce_bitxor, torch.bitwise_xor)}


def reduced(op, x, init=None):
    f = OPS[op][1]
    cols = [x[:, j] for j in range(x.shape[1])]
    out = functools.reduce(f, cols)
    return out if init is None else f(init, out)


def bits(shape, dtype, seed):
    # bit patterns dense enough that and/or/xor all keep some bits
    hi = 2 ** 40 if dtype == "int64" else 2 ** 16
    return random_tensor(shape, dtype, seed, low=-hi if dtype != "uint32" else 0, high=hi) \
        | random_tensor(shape, dtype, seed + 1, low=0, high=8)


def row_kernel(op, M, N, dtype, threads, clear=True, generic=False):
    fn = OPS[op][0]

    @T.prim_func
    def rows(A: T.Tensor((M, N), dtype), C: T.Tensor((M,), dtype), B: T.Tensor((M,), dtype)):
        with T.Kernel(1, threads=threads):
            x = T.alloc_fragment((M, N), dtype)
            r = T.alloc_fragment((M,), dtype)
            T.copy(A, x)
            if not clear:
                T.copy(C, r)
            if generic:
                T.reduce(x, r, op, dim=1, clear=clear)
            else:
                fn(x, r, dim=1, clear=clear)
            T.copy(r, B)

    return rows


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("M,N,threads,form", [
    (4, 128, 128, "simd_"),                # a row per simdgroup
    (8, 64, 64, "simd_shuffle_xor("),      # rows of 8 threads: a butterfly
    (2, 1024, 256, "red_buf"),             # a row over 4 simdgroups: the threadgroup stage
])
@pytest.mark.parametrize("dtype", ["int32", "uint32", "int64"])
def test_row_reductions(run, op, M, N, threads, form, dtype):
    kernel = core.compile(row_kernel(op, M, N, dtype, threads), out_idx=[2])
    if form == "simd_" and dtype != "int64":
        form = {"bitand": "simd_and(", "bitor": "simd_or(", "bitxor": "simd_xor("}[op]
    assert form in kernel.msl
    a = bits((M, N), dtype, 3)
    c = torch.zeros(M, dtype=a.dtype)
    assert_close(run(kernel, a, c), reduced(op, a), what=f"reduce_{op} {dtype}")


@pytest.mark.parametrize("op", sorted(OPS))
def test_clear_false_and_the_generic_form(run, op):
    # (the initial values come from their own tensor: copying B into the replicated r
    # and back would read B while one replica writes it, a device race)
    kernel = core.compile(row_kernel(op, 4, 128, "int32", 128, clear=False, generic=True),
                          out_idx=[2])
    a, c = bits((4, 128), "int32", 5), bits((4,), "int32", 7)
    assert_close(run(kernel, a, c), reduced(op, a, c), what=f"reduce {op} clear=False")


def test_local_source_per_thread(run):
    @T.prim_func
    def local(A: T.Tensor((64, 16), "int32"), B: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            x = T.alloc_local((16,), "int32")
            r = T.alloc_local((1,), "int32")
            for j in T.serial(16):
                x[j] = A[tx, j]
            T.reduce_bitxor(x, r, dim=0)
            B[tx] = r[0]

    a = bits((64, 16), "int32", 9)
    assert_close(run(core.compile(local, out_idx=[1]), a), reduced("bitxor", a),
                 what="local bitxor")


def test_float_buffers_are_refused():
    with pytest.raises(KernelDefinitionError,
                       match=r"T.reduce_bitor.*dtype float32; a bitwise reduction takes "
                             r"integers"):
        row_kernel("bitor", 4, 32, "float32", 32)
