"""Kernel signatures: both declaration forms, parameter kinds, every position attribute."""

import json

import numpy as np
import pytest

from core.errors import LaunchError, MSLCompileError
from emucase import clean, run
from harness.check.compare import assert_close

POSITIONS = r"""
struct Out { uint v[32]; };
kernel void where(device Out* out [[buffer(0)]],
                  uint3 tpig [[thread_position_in_grid]],
                  ushort3 tpitg [[thread_position_in_threadgroup]],
                  uint3 tgpig [[threadgroup_position_in_grid]],
                  uint3 tptg [[threads_per_threadgroup]],
                  uint3 tgpg [[threadgroups_per_grid]],
                  uint3 tpg [[threads_per_grid]],
                  uint tiitg [[thread_index_in_threadgroup]],
                  ushort lane [[thread_index_in_simdgroup]],
                  uint sg [[simdgroup_index_in_threadgroup]],
                  uint sgs [[simdgroups_per_threadgroup]],
                  uint width [[threads_per_simdgroup]],
                  uint2 tpig2 [[thread_position_in_grid]]) {
  uint linear = (tpig.z * tpg.y + tpig.y) * tpg.x + tpig.x;
  device uint* o = out[linear].v;
  o[0] = tpig.x; o[1] = tpig.y; o[2] = tpig.z;
  o[3] = tpitg.x; o[4] = tpitg.y; o[5] = tpitg.z;
  o[6] = tgpig.x; o[7] = tgpig.y; o[8] = tgpig.z;
  o[9] = tptg.x; o[10] = tptg.y; o[11] = tptg.z;
  o[12] = tgpg.x; o[13] = tgpg.y; o[14] = tgpg.z;
  o[15] = tpg.x; o[16] = tpg.y; o[17] = tpg.z;
  o[18] = tiitg; o[19] = lane; o[20] = sg; o[21] = sgs; o[22] = width;
  o[23] = tpig2.x; o[24] = tpig2.y;
}
"""


def test_every_thread_position_attribute():
    grid, tg = (3, 2, 2), (5, 4, 3)
    tpg = tuple(g * t for g, t in zip(grid, tg))
    out = np.zeros((tpg[2], tpg[1], tpg[0], 32), np.uint32)
    clean(POSITIONS, "where", grid, tg, out)
    z, y, x = np.meshgrid(np.arange(tpg[2]), np.arange(tpg[1]), np.arange(tpg[0]), indexing="ij")
    lx, ly, lz = x % tg[0], y % tg[1], z % tg[2]
    index = (lz * tg[1] + ly) * tg[0] + lx
    expect = {0: x, 1: y, 2: z, 3: lx, 4: ly, 5: lz, 6: x // tg[0], 7: y // tg[1], 8: z // tg[2],
              9: tg[0], 10: tg[1], 11: tg[2], 12: grid[0], 13: grid[1], 14: grid[2],
              15: tpg[0], 16: tpg[1], 17: tpg[2], 18: index, 19: index % 32, 20: index // 32,
              21: 2, 22: 32, 23: x, 24: y}
    for field, value in expect.items():
        np.testing.assert_array_equal(out[..., field], np.broadcast_to(value, out.shape[:3]),
                                      err_msg=f"field {field}")


ARGS = r"""
struct Args { int n; float scale; int offset; };
[[kernel, max_total_threads_per_threadgroup(64)]] void saxpy(
    const device float* x [[buffer(0)]], device float* y [[buffer(2)]],
    constant Args& args [[buffer(1)]], constant float& bias [[buffer(3)]],
    uint i [[thread_position_in_grid]]) {
  if (int(i) < args.n) y[i] = args.scale * x[i] + float(args.offset) + bias;
}
"""


def test_attribute_signature_args_struct_and_constant_scalar(rng):
    n = 100
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(128, np.float32)
    args = np.zeros(3, np.int32)
    args[0] = n
    args[1:2].view(np.float32)[0] = 1.5
    args[2] = -3
    bias = np.array([0.25], np.float32)
    clean(ARGS, "saxpy", (2, 1, 1), (64, 1, 1), x, args, y, bias)
    assert_close(y[:n], 1.5 * x.astype(np.float64) - 3 + 0.25, "float32")
    assert not y[n:].any()


def test_max_total_threads_is_enforced():
    buffers = [np.zeros(4, np.float32), np.zeros(3, np.int32), np.zeros(4, np.float32),
               np.zeros(1, np.float32)]
    with pytest.raises(LaunchError, match=r"max_total_threads_per_threadgroup\(64\)"):
        run(ARGS, "saxpy", (1, 1, 1), (128, 1, 1), *buffers)


def test_threadgroup_over_1024_threads_is_rejected():
    with pytest.raises(LaunchError, match="at most 1024"):
        run(ARGS, "saxpy", (1, 1, 1), (32, 33, 1), np.zeros(4, np.float32))


def test_missing_buffer_is_a_launch_error():
    with pytest.raises(LaunchError, match=r"'y' is bound to \[\[buffer\(2\)\]\] but only 2"):
        run(ARGS, "saxpy", (1, 1, 1), (32, 1, 1), np.zeros(4, np.float32), np.zeros(3, np.int32))


def test_args_struct_smaller_than_its_type_is_a_launch_error():
    with pytest.raises(LaunchError, match=r"'args' \(\[\[buffer\(1\)\]\]\) needs at least 12 bytes"):
        run(ARGS, "saxpy", (1, 1, 1), (32, 1, 1), np.zeros(4, np.float32), np.zeros(2, np.int32),
            np.zeros(4, np.float32), np.zeros(1, np.float32))


def test_unknown_kernel_name_lists_the_kernels():
    with pytest.raises(MSLCompileError, match=r"no kernel function named 'nope'.*saxpy"):
        run(ARGS, "nope", 1, 1, np.zeros(1, np.float32))


def test_scalar_parameter_without_attribute_is_a_clear_error():
    src = "kernel void k(device float* a, float s) { a[0] = s; }"
    with pytest.raises(MSLCompileError, match="'s' has no attribute and is neither a pointer "
                                              "nor a reference") as err:
        run(src, "k", 1, 1, np.zeros(1, np.float32))
    assert err.value.line == 3


def test_buffers_without_attribute_are_numbered_in_order():
    src = """kernel void k(device float* a, constant float& s [[buffer(0)]], device float* b) {
  a[0] = s; b[0] = 2.0f * s; }"""
    a, s, b = np.zeros(1, np.float32), np.array([1.5], np.float32), np.zeros(1, np.float32)
    clean(src, "k", 1, 1, s, a, b)
    assert a[0] == 1.5 and b[0] == 3.0


def test_negative_buffer_index_is_a_clear_error_not_an_unbound_buffer():
    src = "kernel void k(device float* a [[buffer(-1)]], device float* b [[buffer(0)]]) {}"
    with pytest.raises(MSLCompileError, match=r"parameter 'a': \[\[buffer\(...\)\]\] needs a "
                                              r"constant index \(0 or more\)") as err:
        run(src, "k", 1, 1, np.zeros(1, np.float32), np.zeros(1, np.float32))
    assert err.value.line == 3


def test_threadgroup_pointer_casts_and_vector_access():
    src = r"""
kernel void cast(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float tile[64];
  *((threadgroup float4*)(tile) + tid) = ((const device float4*)x)[tid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  threadgroup float2* pairs = (threadgroup float2*)tile;
  ((device float2*)y)[tid] = pairs[31 - tid].yx;
}
"""
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(32, np.float32)
    clean(src, "cast", 1, 16, x, y)
    expect = x.reshape(32, 2)[::-1][:16, ::-1].reshape(-1)
    np.testing.assert_array_equal(y, expect)


BUILTIN_NAMES = r"""
kernel void mix(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  y[i] = metal::mix(1.0f, 3.0f, 0.5f);
}
namespace ops {
kernel void max(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  y[i] = metal::max(y[i], 4.0f);
}
}
template <typename T>
kernel void clamp(device T* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  y[i] = metal::clamp(y[i], T(0), T(1));
}
template [[host_name("clamp")]] [[kernel]] void clamp<float>(device float*, uint);
"""


@pytest.mark.parametrize("kernel,start,want", [("mix", 0.0, 2.0), ("max", 1.0, 4.0),
                                               ("clamp", 5.0, 1.0)])
def test_a_kernel_named_like_an_msl_function_runs(kernel, start, want):
    """`kernel void mix(...)` beside `using namespace metal;` is the source's own kernel (in
    the global namespace, a namespace, or a template instantiated under that host name),
    as Metal takes it; the launcher never names metal::mix instead."""
    y = np.full(8, start, np.float32)
    clean(BUILTIN_NAMES, kernel, 1, 8, y)
    np.testing.assert_array_equal(y, np.full(8, want, np.float32))


TWO_KERNELS = r"""
#include <metal_stdlib>
using namespace metal;
struct Pair { float a; float b; };
inline float twice(float x) { return 2.0f * x; }
kernel void first(device float* out [[buffer(1)]], const device Pair* in [[buffer(0)]],
                  uint i [[thread_position_in_grid]]) {
  if (i < 4) { out[i] = twice(in[i].a) + in[i].b; }   // braces { in a string: "}" }
}

[[kernel, max_total_threads_per_threadgroup(64)]] void second(
    device float* y,
    constant uint& n [[buffer(3)]],
    uint3 tg [[threadgroup_position_in_grid]],
    ushort lane [[thread_index_in_simdgroup]]) {
  const char* s = "{ not a brace }";
  for (uint k = 0; k < n; ++k) { y[k] = float(lane) + float(s[0] == '{'); }
}
"""


def test_signatures_are_read_the_same_without_the_kernel_bodies():
    # The reader's AST is of the source with each kernel body blanked (byte offsets kept):
    # every signature, parameter line and attribute is what the whole source gives.
    from core.runtime.emu import build, signature
    from core.runtime.emu.translate import translate

    t = translate(TWO_KERNELS)
    short = signature.without_kernel_bodies(t.cpp)
    assert short is not None and len(short) == len(t.cpp)
    assert short.count("\n") == t.cpp.count("\n") and "twice(in[i].a)" not in short
    assert "inline float twice(float x) { return 2.0f * x; }" in short   # not a kernel
    builder = build.default_builder()
    trees = []
    for cpp in (t.cpp, short):
        code, out, err = builder.syntax_tree(cpp)
        assert code == 0, err
        trees.append(signature._kernels(json.loads(out), t))
    assert trees[0] == trees[1] == t.kernels
    assert [p.line for p in t.kernels["second"].params] == [12, 13, 14, 15]
    assert t.kernels["first"].buffers[1].name == "out"


def test_kernel_bodies_are_kept_where_blanking_could_change_the_reading():
    from core.runtime.emu import signature
    from core.runtime.emu.translate import translate

    cpp = translate(TWO_KERNELS).cpp
    assert signature.without_kernel_bodies("#define OPEN {\n" + cpp) is None
    # a template kernel's instantiation needs its body; the other kernel's is blanked
    templated = cpp.replace("kernel void first(", "template <typename T> kernel void first(")
    short = signature.without_kernel_bodies(templated)
    assert "twice(in[i].a)" in short and "y[k] = float(lane)" not in short
    assert signature.without_kernel_bodies(cpp + "\n}\n") is None   # unbalanced


def _bench_libraries():
    """(case name, MSL, KernelSpecs) of every bench case, compiled without a cache."""
    import core
    from harness.bench.cases import CASES
    from harness.gen import family as families

    for case in CASES:
        built = families.get(case.family).build(dict(case.params))
        compiled = core.compile(built.func, out_idx=built.out_idx, cache=False).compiled
        yield case.name, compiled.msl, tuple(compiled.specs.values())


def test_the_printers_declarations_are_clangs_signatures_on_every_bench_kernel():
    # A generated library carries its kernels' declarations (core/codegen/msl.py), which the
    # emulator takes instead of clang's AST: on every bench kernel they must give the very
    # signatures clang reads (types as clang spells them, lines, bindings, max threads).
    from core.runtime.emu import signature
    from core.runtime.emu.translate import translate

    seen = 0
    for name, msl, specs in _bench_libraries():
        read = translate(msl)                    # clang's reading
        declared = signature.declared_kernels(specs, read)
        assert declared is not None, name
        assert declared == read.kernels, name
        assert translate(msl, declared=specs).kernels == read.kernels, name
        seen += len(declared)
    assert seen >= 39


def test_declarations_that_do_not_match_the_source_are_not_taken():
    # An edited library (a line added above a kernel, a kernel renamed, a parameter
    # dropped) no longer matches its printer's declarations: clang reads it instead.
    import dataclasses

    from core.runtime.emu import signature
    from core.runtime.emu.translate import translate

    name, msl, specs = next(_bench_libraries())
    kernel = specs[0].name
    for edited in ("// a comment line\n" + msl, msl.replace(f" void {kernel}(", " void other(")):
        assert signature.declared_kernels(specs, translate(edited)) is None
    t = translate(msl)
    first = specs[0]
    for stale in ((dataclasses.replace(first, params=first.params[1:]), *specs[1:]),
                  (dataclasses.replace(first, params=first.params[:-1]), *specs[1:]),
                  (dataclasses.replace(first, line=first.line + 1), *specs[1:]),
                  specs[1:]):
        assert signature.declared_kernels(stale, t) is None
    assert signature.declared_kernels(specs, t) == t.kernels
