"""Pass `resolve_views`: every access of a threadgroup or per-thread view (T.view /
T.reshape), and of a device view of another dtype, becomes the access of the viewed buffer
it stands for (row-major position, bits reinterpreted); device views of the same dtype are
kept for flatten_simplify; a kernel without views is returned as it is."""

from tvm import tirx

import core.language as T
from core.transform import pipeline
from core.transform.resolve_views import resolve_views

from .irq import nodes, stores


def _decls(func):
    return [d.buffer.name for d in nodes(func, tirx.DeclBuffer)]


def _views_kernel():
    @T.prim_func
    def views(A: T.Tensor((64,), "float32"), B: T.Tensor((4, 16), "float32"),
              C: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            S = T.alloc_shared((64,), "float32")
            S[tx] = A[tx]
            V = T.reshape(S, (16, 4))
            Ai = T.view(A, dtype="int32")
            A2 = T.view(A, (4, 16))
            for i, j in T.Parallel(4, 16):
                B[i, j] = V[j, i] + A2[i, j]
            C[tx] = Ai[tx]
    return views


def test_on_chip_and_retyped_views_resolve_to_their_source():
    before = pipeline.run(_views_kernel(), stop_after="lower_tile_ops")
    assert set(_decls(before)) == {"V", "Ai", "A2"}
    after = pipeline.run(_views_kernel(), stop_after="resolve_views")
    # the device view of A's own dtype stays (flatten_simplify flattens it onto A)
    assert _decls(after) == ["A2"]
    loaded = {str(s.value) for s in stores(after, "B")}
    assert all("V[" not in v for v in loaded), loaded
    assert any("S[" in v for v in loaded), loaded
    c_store, = stores(after, "C")
    assert "reinterpret" in str(c_store.value) and "A[" in str(c_store.value)


def test_a_kernel_without_views_is_unchanged():
    @T.prim_func
    def plain(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            B[tx] = A[tx] * 2.0

    lowered = pipeline.run(plain, stop_after="lower_tile_ops")
    assert resolve_views(lowered).same_as(lowered)
