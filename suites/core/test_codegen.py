"""Properties of the generated MSL and the kernel specs (not text snapshots)."""

import re

import pytest
import torch

import core
import core.language as T
from core.errors import LoweringError
from core.transform import pipeline
from harness.check import barriers
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


def _scalar_kernel(order):
    N = 64
    if order == "two_int_leading_and_middle":
        @T.prim_func
        def k(n: T.int32, A: T.Tensor((N,), "float32"), m: T.int32,
              B: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=64):
                for i in T.Parallel(N):
                    B[i] = A[i] + T.cast(n * 10 + m, "float32")
        return k, (3, torch.arange(N, dtype=torch.float32), 4), torch.arange(N) + 34.0, [3]
    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), n: T.int32, alpha: T.float32,
          B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(N):
                B[i] = A[i] * alpha + T.cast(n, "float32")
    return k, (torch.arange(N, dtype=torch.float32), 5, 0.5), torch.arange(N) * 0.5 + 5, [3]


@pytest.mark.parametrize("order", ["two_int_leading_and_middle", "int_and_float"])
def test_args_struct_layout(order, run):
    func, args, ref, out_idx = _scalar_kernel(order)
    kernel = core.compile(func, out_idx=out_idx)
    spec = kernel.specs[0]
    assert [f.offset for f in spec.scalars] == [0, 8]
    assert spec.args.index == len(spec.buffers) == 2
    assert f"constant {spec.args.name}& args [[buffer(2)]]" in kernel.msl
    struct = re.search(r"struct alignas\(8\) (\w+) \{(.*?)\};", kernel.msl, re.S)
    assert struct and struct.group(1) == spec.args.name
    fields = [line.strip() for line in struct.group(2).strip().splitlines()]
    ctype = {"int32": "int", "float32": "float"}
    expected = []
    for i, f in enumerate(spec.scalars):
        expected += [f"{ctype[f.dtype]} {f.name};", f"char _pad{i}[4];"]
    assert fields == expected
    assert_close(run(kernel, *args), ref)


def test_const_device_only_for_read_only_buffers():
    @T.prim_func
    def k(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32"),
          C: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                B[i] = A[i] + C[i]
                C[i] = A[i]
    kernel = core.compile(k)
    assert re.search(r"const device float\* A \[\[buffer", kernel.msl)
    assert re.search(r"(?<!const )device float\* B \[\[buffer", kernel.msl)
    assert re.search(r"(?<!const )device float\* C \[\[buffer", kernel.msl)
    ro = {b.name: b.readonly for b in kernel.specs[0].buffers}
    assert ro == {"A": True, "B": False, "C": False}
    assert "max_total_threads_per_threadgroup(64)" in kernel.msl


def _barrier_contexts(msl):
    """For each barrier line, the kinds of the blocks enclosing it ('if', 'for', ...)."""
    stack, out = [], []
    for line in msl.splitlines():
        s = line.strip()
        if s.startswith("threadgroup_barrier"):
            out.append(list(stack))
        if s.endswith("{"):
            stack.append(s.split("(")[0].split()[0] if "(" in s else s)
        elif s.startswith("}"):
            stack.pop()
            if s.endswith("{"):
                stack.append("else")
    return out


def test_no_barrier_inside_divergent_code(run):
    # 24 x 24 tile over 128 threads: runs % threads != 0, so the distribution has a
    # thread-dependent guard; the transposed read needs a barrier that must sit outside.
    b = 24

    @T.prim_func
    def k(A: T.Tensor((b, b), "float32"), B: T.Tensor((b, b), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((b, b), "float32")
            T.copy(A, S)
            for i, j in T.Parallel(b, b):
                B[i, j] = S[j, i] * 2.0
    kernel = core.compile(k, out_idx=[1])
    contexts = _barrier_contexts(kernel.msl)
    assert len(contexts) == 1 and all("if" not in c for c in contexts), contexts
    a = random_tensor((b, b), "float32", 1)
    assert_close(run(kernel, a), a.T * 2)


def test_barrier_under_an_if_on_a_block_scalar(run):
    # `t = bx * 2 + 1` is assigned once from block indices: every thread of the group
    # takes the branch alike, so the transposed read's barrier goes inside it; a scalar
    # computed from the thread index keeps its `if` opaque (the barrier goes before it)
    b = 16

    @T.prim_func
    def k(A: T.Tensor((4 * b, b), "float32"), B: T.Tensor((4 * b, b), "float32")):
        with T.Kernel(4, threads=64) as bx:
            t = bx * 2 + 1
            S = T.alloc_shared((b, b), "float32")
            if t < 6:
                T.copy(A[bx * b, 0], S)
                for i, j in T.Parallel(b, b):
                    B[bx * b + i, j] = S[j, i]
    kernel = core.compile(k)
    contexts = _barrier_contexts(kernel.msl)
    assert len(contexts) == 1 and any("if" in c for c in contexts), contexts
    a = random_tensor((4 * b, b), "float32", 2)
    out = torch.zeros(4 * b, b)
    run(kernel, a, out)
    want = torch.zeros(4 * b, b)
    for blk in range(3):               # blocks with bx * 2 + 1 < 6
        want[blk * b:(blk + 1) * b] = a[blk * b:(blk + 1) * b].T
    assert_close(out, want)


def test_every_barrier_is_necessary():
    M, K, bK = 32, 128, 32

    @T.prim_func
    def k(A: T.Tensor((M, K), "float32"), B: T.Tensor((M, bK), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((M, bK), "float32")
            acc = T.alloc_fragment((M, bK), "float32")
            T.clear(acc)
            for ko in T.Pipelined(K // bK, num_stages=2):
                T.copy(A[0, ko * bK], S)
                for i, j in T.Parallel(M, bK):
                    acc[i, j] = acc[i, j] + S[j, i]
            T.copy(acc, B)
    kernel = core.compile(k, out_idx=[1])
    count = kernel.msl.count("threadgroup_barrier")
    assert count == 2
    report = barriers.check_barriers(kernel, [random_tensor((M, K), "float32", 3)])
    assert not report.missing and len(report.barriers) == count
    for verdict in report.barriers:
        assert verdict.race is not None and verdict.race.kind == "race", \
            f"barrier {verdict.index} is not necessary"


def test_same_thread_reuse_needs_no_barrier(run):
    @T.prim_func
    def k(A: T.Tensor((32, 32), "float32"), B: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((32, 32), "float32")
            T.copy(A, S)
            for i, j in T.Parallel(32, 32):
                B[i, j] = S[i, j] + 1.0
    kernel = core.compile(k, out_idx=[1])
    assert "threadgroup_barrier" not in kernel.msl
    a = random_tensor((32, 32), "float32", 4)
    assert_close(run(kernel, a), a + 1)


@pytest.mark.parametrize("dtype,vector", [("float32", "float4"), ("float16", "half4"),
                                          ("int32", "int4"), ("bfloat16", "uint2")])
def test_vectorized_copies(dtype, vector, run):
    @T.prim_func
    def k(A: T.Tensor((64, 64), dtype), B: T.Tensor((64, 64), dtype)):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            F = T.alloc_fragment((32, 32), dtype)
            T.copy(A[by * 32, bx * 32], F)
            T.copy(F, B[by * 32, bx * 32])
    kernel = core.compile(k, out_idx=[1])
    assert f"(const device {vector}*)" in kernel.msl and f"(device {vector}*)" in kernel.msl
    assert max(b.align for b in kernel.specs[0].buffers) == \
        {"float4": 16, "half4": 8, "int4": 16, "uint2": 8}[vector]
    assert not re.search(r"bfloat[348]", kernel.msl)  # bf16 runs of 4 move as uint2 carriers
    a = (random_tensor((64, 64), "float32", 5) * 4).to(getattr(torch, dtype))
    assert_close(run(kernel, a), a, dtype)
    scalar = core.compile(k, out_idx=[1], disable=("vectorize",))
    assert not re.search(r"(float|half|int)4\*|uint2\*", scalar.msl)


def test_half_stores_are_explicit_conversions(run):
    @T.prim_func
    def k(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float16")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                B[i] = T.cast(A[i] * 2.0, "float16") + T.cast(1.0, "float16")
    kernel = core.compile(k, out_idx=[1])
    stores = [line for line in kernel.msl.splitlines() if re.match(r"\s*(\*\(device half|B\[)",
                                                                   line)]
    assert stores and all("half" in s.split("=", 1)[1] for s in stores)
    a = random_tensor((64,), "float32", 6)
    assert_close(run(kernel, a), (a * 2).half() + 1, "float16")


def test_pipeline_is_named_and_replaceable(run):
    assert pipeline.pass_names() == ("legalize", "block_swizzle", "host_program",
                                     "global_workspaces", "verify",
                                     "stream_rows", "layout_inference",
                                     "lower_tile_ops", "resolve_views", "fold_temporaries",
                                     "vectorize", "flatten_simplify",
                                     "thread_sync", "merge_threadgroup", "split_host_device")

    @T.prim_func
    def k(A: T.Tensor((32, 32), "float32"), B: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((32, 32), "float32")
            T.copy(A, S)
            for i, j in T.Parallel(32, 32):
                B[i, j] = S[j, i]
    lowered = pipeline.run(k, stop_after="lower_tile_ops")
    assert "tl.copy" not in str(lowered) and "local.fragment" not in str(lowered)
    broken = core.compile(k, out_idx=[1], replace={"thread_sync": lambda f: f})
    a = random_tensor((32, 32), "float32", 7)
    broken(a, backend="emu")
    assert broken.last_run.findings and broken.last_run.findings[0].kind == "race"
    with pytest.raises(ValueError, match="unknown pass"):
        pipeline.run(k, disable=("no_such_pass",))


def test_compile_records_the_time_of_each_pass_it_runs():
    @T.prim_func
    def k(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                B[i] = A[i] + 1.0
    timings = {}
    core.compile(k, out_idx=[1], cache=False, disable=("vectorize",), timings=timings)
    ran = [name for name in pipeline.pass_names() if name != "vectorize"]
    assert list(timings) == [*ran, "print_msl"]
    assert all(isinstance(s, float) and s >= 0 for s in timings.values())
    stopped = {}
    pipeline.run(k, stop_after="verify", timings=stopped)
    assert list(stopped) == ["legalize", "block_swizzle", "host_program", "global_workspaces",
                             "verify"]


def test_compile_cache_is_structural_not_by_name(tmp_path, monkeypatch):
    import importlib
    jit = importlib.import_module("core.jit")
    monkeypatch.setattr(jit._Cache, "directory", staticmethod(lambda: tmp_path))

    def make(scale):
        @T.prim_func
        def same_name(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                for i in T.Parallel(64):
                    B[i] = A[i] * scale
        return same_name
    k2, k3 = core.compile(make(2.0)), core.compile(make(3.0))
    assert k2.msl != k3.msl
    assert core.compile(make(2.0)).compiled is k2.compiled
    fresh = jit._Cache()
    key = jit.cache_key(make(3.0), ((),))
    assert fresh.get(key).msl == k3.msl  # from disk


@pytest.mark.parametrize("start", [0, 1])
def test_same_iteration_accesses_are_matched_per_iteration(start, run):
    # Each thread reads back only what it wrote in the same iteration, at an element that
    # moves with ko: no barrier between the write and the read; one at the top of the loop
    # (the next iteration's write hits what another thread read). Loops starting at 1 are
    # enumerated too.
    @T.prim_func
    def k(A: T.Tensor((4, 128), "float32"), B: T.Tensor((4, 128), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((128,), "float32")
            for ko in T.serial(start, 4):
                for i in T.Parallel(128):
                    S[(i + ko * 32) % 128] = A[ko, i] * 2.0
                for i in T.Parallel(128):
                    B[ko, i] = S[(i + ko * 32) % 128] + 1.0
    kernel = core.compile(k, out_idx=[1])
    a = random_tensor((4, 128), "float32", 8)
    out = run(kernel, a)
    assert_close(out[start:], a[start:] * 2 + 1)
    report = barriers.check_barriers(kernel, [a])
    assert report.ok and len(report.barriers) == 1, report.summary()


def _counted_transpose(writes_counts):
    """Per group g, Counts[g] tiles of A are transposed through threadgroup memory: the
    loop's extent is loaded from device memory (a MoE routing table's count)."""
    b, G, tiles = 8, 3, 4

    @T.prim_func
    def k(Counts: T.Tensor((G,), "int32"), A: T.Tensor((G, tiles, b, b), "float32"),
          B: T.Tensor((G, tiles, b, b), "float32")):
        with T.Kernel(G, threads=32) as g:
            S = T.alloc_shared((b, b), "float32")
            if writes_counts:
                for i in T.Parallel(1):
                    Counts[g] = Counts[g] + 1 + i
            for t in T.serial(Counts[g]):
                for i, j in T.Parallel(b, b):
                    S[i, j] = A[g, t, i, j]
                for i, j in T.Parallel(b, b):
                    B[g, t, i, j] = S[j, i]
    return k, G, tiles, b


def test_loop_bound_from_a_read_only_device_buffer_is_uniform(run):
    # Every thread of a group reads the same count: barriers go inside the loop (the
    # transposed read, and the next iteration's overwrite of S), each one necessary.
    k, G, tiles, b = _counted_transpose(writes_counts=False)
    kernel = core.compile(k, out_idx=[2])
    contexts = _barrier_contexts(kernel.msl)
    assert len(contexts) == 2 and all(c[-1] == "for" for c in contexts), contexts
    counts = torch.tensor([2, 0, 4], dtype=torch.int32)
    a = random_tensor((G, tiles, b, b), "float32", 9)
    out = run(kernel, counts, a)
    for g, n in enumerate(counts.tolist()):
        assert_close(out[g, :n], a[g, :n].transpose(-1, -2))
    report = barriers.check_barriers(kernel, [counts, a])
    assert not report.missing and all(v.necessary for v in report.barriers)


def test_loop_bound_from_a_buffer_the_kernel_writes_is_not_uniform():
    # The kernel stores to Counts, so a thread may read another's update: the loop stays
    # opaque to the planner and no barrier is placed inside it.
    k, *_ = _counted_transpose(writes_counts=True)
    kernel = core.compile(k, out_idx=[2])
    assert all("for" not in c for c in _barrier_contexts(kernel.msl))


def test_loop_extent_loaded_from_memory_is_read_once(run):
    # TIR evaluates an extent once: growing Cnt[0] inside the loop must not extend it.
    @T.prim_func
    def k(Cnt: T.Tensor((1,), "int32"), B: T.Tensor((8,), "int32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(8):
                B[i] = -1
            for i in T.serial(Cnt[0]):
                Cnt[0] = Cnt[0] + 1
                B[i] = i
    kernel = core.compile(k, out_idx=[1])
    cnt = torch.tensor([3], dtype=torch.int32)
    out = run(kernel, cnt)
    assert out.tolist() == [0, 1, 2, -1, -1, -1, -1, -1] and cnt.tolist() == [6]


def _guarded_scale(dtype, N=1024, bN=256, threads=64, mask=False):
    """B[i] = A[i] * 2 for i < n (a runtime scalar), or where Mask[i] != 0."""
    if mask:
        @T.prim_func
        def k(A: T.Tensor((N,), dtype), Mask: T.Tensor((N,), "int32"),
              B: T.Tensor((N,), dtype)):
            with T.Kernel(T.ceildiv(N, bN), threads=threads) as bx:
                for j in T.Parallel(bN):
                    if Mask[bx * bN + j] != 0:
                        B[bx * bN + j] = A[bx * bN + j] * T.cast(2, dtype)
        return k

    @T.prim_func
    def k(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), n: T.int32):
        with T.Kernel(T.ceildiv(N, bN), threads=threads) as bx:
            for j in T.Parallel(bN):
                if bx * bN + j < n:
                    B[bx * bN + j] = A[bx * bN + j] * T.cast(2, dtype)
    return k


@pytest.mark.parametrize("dtype,vector", [("float32", "float4"), ("float16", "half4"),
                                          ("int32", "int4"), ("int8", "char4"),
                                          ("bfloat16", "bfloat2")])
def test_masked_store_is_vectorized_and_masked_lanes_are_not_written(dtype, vector):
    # The guard i < n cuts a vector at 1001: lanes past n keep B's sentinel.
    kernel = core.compile(_guarded_scale(dtype))
    store = [line for line in kernel.msl.splitlines() if "= (" in line and "B +" in line]
    assert store and all(f"*(device {vector}*)(B +" in line for line in store), store
    a = torch.arange(1024).to(getattr(torch, dtype))
    for n in (1001, 1024, 3):
        b = torch.full((1024,), 7, dtype=getattr(torch, dtype))
        kernel(a, b, n, backend="emu")
        assert kernel.last_run.findings == []
        assert_close(b[:n], (a[:n].double() * 2).to(b.dtype), op_class="exact")
        assert bool((b[n:] == 7).all()), f"n={n}: a masked lane was written"


def test_mask_read_from_memory_stays_lane_by_lane():
    # Lanes passing Mask[i] != 0 are no interval: no full-vector path is assumed.
    kernel = core.compile(_guarded_scale("float32", mask=True))
    assert "*(device float4*)(B" not in kernel.msl
    a = random_tensor((1024,), "float32", 10)
    mask = (torch.arange(1024) % 3 == 0).int()
    b = torch.full((1024,), 7.0)
    kernel(a, mask, b, backend="emu")
    assert kernel.last_run.findings == []
    assert_close(b, torch.where(mask.bool(), a * 2, torch.full((), 7.0)))


def test_a_race_inside_a_thread_dependent_if_is_an_error_not_a_silent_race():
    """A barrier cannot go inside an `if` on the thread index (not every thread would
    reach it), so a threadgroup exchange inside one branch is a LoweringError naming the
    kernel; the same exchange where every thread runs it gets its barrier."""
    @T.prim_func
    def divergent(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((64,), "float32")
            tx = T.get_thread_binding(0)
            if tx < 32:
                S[tx] = A[tx]
                B[tx] = S[31 - tx]

    with pytest.raises(LoweringError, match=r"divergent.*inside an `if` whose condition "
                                            r"depends on the thread"):
        core.compile(divergent, out_idx=[1], cache=False)

    @T.prim_func
    def uniform(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((64,), "float32")
            tx = T.get_thread_binding(0)
            S[tx] = A[tx]
            B[tx] = S[63 - tx]

    assert core.compile(uniform, out_idx=[1], cache=False).msl.count("threadgroup_barrier") == 1

    @T.prim_func
    def own_elements(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((64,), "float32")
            tx = T.get_thread_binding(0)
            if tx < 32:           # each thread reads back only its own element: no race
                S[tx] = A[tx]
                B[tx] = S[tx]

    assert "threadgroup_barrier" not in core.compile(own_elements, out_idx=[1], cache=False).msl
