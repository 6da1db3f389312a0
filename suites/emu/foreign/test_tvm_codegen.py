"""MSL from apache-tvm's own Metal code generator, generated at test time from TIR written
here, runs unchanged on the emulator: clean under every check and equal to numpy.

`tvm.compile(mod, target="metal")` works on Linux (no Metal runtime is needed to generate
code); the MSL text is the source of the compiled module's Metal import."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from core.target import METAL
from foreigncase import close, run_clean
from harness.cli import main

TARGET = {"kind": "metal", "thread_warp_size": METAL.simd_width}


@T.prim_func
def add(A: T.Buffer((1000,), "float32"), B: T.Buffer((1000,), "float32"),
        C: T.Buffer((1000,), "float32")):
    T.func_attr({"global_symbol": "add", "tir.noalias": True})
    for bx in T.thread_binding(8, thread="blockIdx.x"):
        for tx in T.thread_binding(128, thread="threadIdx.x"):
            if bx * 128 + tx < 1000:
                C[bx * 128 + tx] = A[bx * 128 + tx] + B[bx * 128 + tx]


@T.prim_func
def transpose(A: T.Buffer((64, 48), "float32"), B: T.Buffer((48, 64), "float32")):
    T.func_attr({"global_symbol": "transpose", "tir.noalias": True})
    for by in T.thread_binding(4, thread="blockIdx.y"):
        for bx in T.thread_binding(3, thread="blockIdx.x"):
            S = T.alloc_buffer((16, 16), "float32", scope="shared")
            for ty in T.thread_binding(16, thread="threadIdx.y"):
                for tx in T.thread_binding(16, thread="threadIdx.x"):
                    S[ty, tx] = A[by * 16 + ty, bx * 16 + tx]
            for ty in T.thread_binding(16, thread="threadIdx.y"):
                for tx in T.thread_binding(16, thread="threadIdx.x"):
                    B[bx * 16 + ty, by * 16 + tx] = S[tx, ty]


@T.prim_func
def rowsum(A: T.Buffer((8, 128), "float32"), B: T.Buffer((8,), "float32")):
    T.func_attr({"global_symbol": "rowsum", "tir.noalias": True})
    for i in T.thread_binding(8, thread="blockIdx.x"):
        for k in T.thread_binding(128, thread="threadIdx.x"):
            red = T.alloc_buffer((1,), "float32", scope="local")
            with T.attr(T.comm_reducer(lambda x, y: x + y, [T.float32(0)]), "reduce_scope",
                        T.reinterpret("handle", T.uint64(0))):
                T.tvm_thread_allreduce(T.uint32(1), A[i, k], T.bool(True), red[0], k)
            if k == 0:
                B[i] = red[0]


@T.prim_func
def scale_dyn(a: T.handle, b: T.handle, n: T.int32, alpha: T.float32):
    T.func_attr({"global_symbol": "scale_dyn", "tir.noalias": True})
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (n,), "float32")
    for bx in T.thread_binding((n + 63) // 64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            if bx * 64 + tx < n:
                B[bx * 64 + tx] = A[bx * 64 + tx] * alpha


def tvm_msl(func) -> str:
    name = func.attrs["global_symbol"]
    lib = tvm.compile(tvm.IRModule({name: func}), target=tvm.target.Target(TARGET))
    (metal,) = [m for m in lib.mod.imports if m.kind == "metal"]
    return metal.inspect_source()


# The tests reading `sources` stay on one xdist worker: TVM's compile runs once.
SOURCES = pytest.mark.xdist_group("tvm-codegen-sources")


@pytest.fixture(scope="module")
def sources():
    return {f.attrs["global_symbol"]: tvm_msl(f) for f in (add, transpose, rowsum, scale_dyn)}


@SOURCES
def test_elementwise(sources):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 1000)).astype(np.float32)
    c = np.zeros(1000, np.float32)
    run_clean(sources["add"], "add_kernel", 8, 128, [a, b, c])
    close(c, a + b)


@SOURCES
def test_shared_memory_transpose(sources):
    assert "threadgroup float S[" in sources["transpose"]
    assert "threadgroup_barrier" in sources["transpose"]
    a = np.random.default_rng(2).standard_normal((64, 48)).astype(np.float32)
    b = np.zeros((48, 64), np.float32)
    run_clean(sources["transpose"], "transpose_kernel", (3, 4), (16, 16), [a, b])
    np.testing.assert_array_equal(b, a.T)


@SOURCES
def test_thread_allreduce_with_simd_shuffles(sources):
    assert "simd_shuffle_down" in sources["rowsum"]
    a = np.random.default_rng(3).standard_normal((8, 128)).astype(np.float32)
    b = np.zeros(8, np.float32)
    run_clean(sources["rowsum"], "rowsum_kernel", 8, 128, [a, b], schedule="random", seed=5)
    close(b, a.astype(np.float64).sum(1), reduction_length=128, op_class="accumulation")


@SOURCES
def test_dynamic_shape_with_the_scalar_arguments_struct(sources):
    src = sources["scale_dyn"]
    # TVM passes scalars in one struct of 8-byte slots, in this order (checked, not assumed)
    assert "union __TVMArgUnion" in src
    assert "float alpha[2];\n  int n[2];" in src
    n = 777
    args = np.zeros(4, np.int32)
    args.view(np.float32)[0] = 2.5
    args[2] = n
    a = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    b = np.zeros(n, np.float32)
    run_clean(src, "scale_dyn_kernel", (n + 63) // 64, 64, [a, b, args])
    close(b, a * np.float32(2.5))


def test_harness_emu_reads_tvm_output(sources, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    path = tmp_path / "add.metal"
    path.write_text(sources["add"])
    args = ["emu", str(path), "--grid", "8", "--threadgroup", "128", "--buffer",
            "f32:1000:arange", "--buffer", "f32:1000:value=1", "--buffer", "f32:1000",
            "--save", str(tmp_path / "out")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "kernel add_kernel" in out and "buffer(2) C_ptr" in out
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "buffer2.npy"),
                                  np.arange(1000, dtype=np.float32) + 1)
