"""The `__metal_*` builtins MSL libraries call directly (include/mt_builtins.h): every one the
emulator provides, against numpy in float64, through the project's tolerance policy; the
math mode argument; the simd builtins inside a user's overload of a simd function (MLX's
bfloat style); and the refusal of the others, with the builtin and its MSL line. MSL
written for these tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.runtime import emu
from core.runtime.emu.translate import METAL_BUILTINS
from foreigncase import close, msl_line, run_clean

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"
N = 64
rng = np.random.default_rng(7)


def _u(lo, hi):
    return rng.uniform(lo, hi, N)


def _round_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


# name: (argument ranges, float64 oracle); the last argument of each call is a math mode.
MATH = {
    "fabs": ([(-4, 4)], np.abs), "acos": ([(-1, 1)], np.arccos),
    "acosh": ([(1, 8)], np.arccosh), "asin": ([(-1, 1)], np.arcsin),
    "asinh": ([(-8, 8)], np.arcsinh), "atan": ([(-8, 8)], np.arctan),
    "atanh": ([(-0.95, 0.95)], np.arctanh), "ceil": ([(-6, 6)], np.ceil),
    "cos": ([(-6, 6)], np.cos), "cosh": ([(-4, 4)], np.cosh),
    "cospi": ([(-3, 3)], lambda x: np.cos(np.pi * x)), "exp": ([(-6, 6)], np.exp),
    "exp10": ([(-3, 3)], lambda x: 10.0 ** x), "exp2": ([(-8, 8)], np.exp2),
    "floor": ([(-6, 6)], np.floor), "fract": ([(-6, 6)], lambda x: x - np.floor(x)),
    "log": ([(0.01, 50)], np.log), "log10": ([(0.01, 50)], np.log10),
    "log2": ([(0.01, 50)], np.log2), "rint": ([(-6, 6)], np.rint),
    "round": ([(-6, 6)], _round_away), "rsqrt": ([(0.01, 50)], lambda x: 1 / np.sqrt(x)),
    "sin": ([(-6, 6)], np.sin), "sinh": ([(-4, 4)], np.sinh),
    "sinpi": ([(-3, 3)], lambda x: np.sin(np.pi * x)), "sqrt": ([(0, 50)], np.sqrt),
    "tan": ([(-1.2, 1.2)], np.tan), "tanh": ([(-5, 5)], np.tanh),
    "tanpi": ([(-0.4, 0.4)], lambda x: np.tan(np.pi * x)), "trunc": ([(-6, 6)], np.trunc),
    "atan2": ([(-4, 4), (-4, 4)], np.arctan2), "divide": ([(-8, 8), (0.5, 4)], np.divide),
    "fmax": ([(-4, 4), (-4, 4)], np.fmax), "fmin": ([(-4, 4), (-4, 4)], np.fmin),
    "fmod": ([(-10, 10), (0.5, 3)], np.fmod), "pow": ([(0.1, 3), (-2, 2)], np.power),
    "powr": ([(0.1, 3), (-2, 2)], np.power),
    "fma": ([(-4, 4)] * 3, lambda x, y, z: x * y + z),
    "fmax3": ([(-4, 4)] * 3, lambda x, y, z: np.maximum(np.maximum(x, y), z)),
    "fmin3": ([(-4, 4)] * 3, lambda x, y, z: np.minimum(np.minimum(x, y), z)),
    "fmedian3": ([(-4, 4)] * 3, lambda x, y, z: np.median(np.stack([x, y, z]), 0)),
}
MODES = ("__METAL_MAYBE_FAST_MATH__", "__METAL_FAST_MATH__", "__METAL_PRECISE_MATH__")


def test_math_builtins_match_numpy():
    names = sorted(MATH)
    inputs = {n: [_u(*r).astype(np.float32) for r in MATH[n][0]] for n in names}
    arity = max(len(v) for v in inputs.values())
    x = np.zeros((arity, len(names), N), np.float32)
    for f, n in enumerate(names):
        for a, arg in enumerate(inputs[n]):
            x[a, f] = arg
    lines = []
    for f, n in enumerate(names):
        args = ", ".join(f"x[{a * len(names) * N} + {f * N} + i]"
                         for a in range(len(inputs[n])))
        lines.append(f"  y[{f * N} + i] = __metal_{n}({args}, {MODES[f % 3]});")
    src = (HEAD + "kernel void k(device const float* x [[buffer(0)]], device float* y "
           "[[buffer(1)]],\n              uint i [[thread_position_in_grid]]) {\n"
           + "\n".join(lines) + "\n}\n")
    y = np.zeros(len(names) * N, np.float32)
    run_clean(src, "k", 1, N, [x.reshape(-1), y])
    for f, n in enumerate(names):
        want = MATH[n][1](*(a.astype(np.float64) for a in inputs[n]))
        close(y[f * N:(f + 1) * N], want, op_class="transcendental", what=f"__metal_{n}")


def test_ldexp_frexp_nextafter_builtins():
    src = HEAD + """\
kernel void k(device const float* x [[buffer(0)]], device const int* e [[buffer(1)]],
              device float* y [[buffer(2)]], device int* ey [[buffer(3)]],
              uint i [[thread_position_in_grid]]) {
  y[3 * i + 0] = __metal_ldexp(x[i], e[i], __METAL_PRECISE_MATH__);
  int exponent;
  y[3 * i + 1] = __metal_frexp(x[i], &exponent);
  ey[i] = exponent;
  y[3 * i + 2] = __metal_nextafter(x[i], 0.0f);
}
"""
    x = _u(-100, 100).astype(np.float32)
    e = rng.integers(-10, 10, N).astype(np.int32)
    y = np.zeros(3 * N, np.float32)
    ey = np.zeros(N, np.int32)
    run_clean(src, "k", 1, N, [x, e, y, ey])
    mantissa, exponent = np.frexp(x)
    out = y.reshape(N, 3)
    close(out[:, 0], np.ldexp(x.astype(np.float64), e), op_class="exact")
    close(out[:, 1], mantissa, op_class="exact")
    np.testing.assert_array_equal(ey, exponent)
    np.testing.assert_array_equal(out[:, 2], np.nextafter(x, np.float32(0)))


SIMD = HEAD + """\
kernel void k(device const float* x [[buffer(0)]], device const int* w [[buffer(1)]],
              device float* y [[buffer(2)]], device int* z [[buffer(3)]],
              uint i [[thread_position_in_grid]]) {
  const float v = x[i];
  device float* row = y + 17 * i;
  row[0] = __metal_simd_sum(v);
  row[1] = __metal_simd_product(v);
  row[2] = __metal_simd_min(v);
  row[3] = __metal_simd_max(v);
  row[4] = __metal_simd_prefix_inclusive_sum(v);
  row[5] = __metal_simd_prefix_exclusive_sum(v);
  row[6] = __metal_simd_prefix_inclusive_product(v);
  row[7] = __metal_simd_prefix_exclusive_product(v);
  row[8] = __metal_simd_shuffle(v, ushort((i * 7) % 32));
  row[9] = __metal_simd_shuffle_xor(v, ushort(5));
  row[10] = __metal_simd_shuffle_up(v, ushort(3));
  row[11] = __metal_simd_shuffle_down(v, ushort(3));
  row[12] = __metal_simd_shuffle_rotate_up(v, ushort(3));
  row[13] = __metal_simd_shuffle_rotate_down(v, ushort(3));
  row[14] = __metal_simd_broadcast(v, ushort(9));
  row[15] = __metal_simd_shuffle_and_fill_up(v, -v, ushort(2), ushort(8));
  row[16] = __metal_simd_shuffle_and_fill_down(v, -v, ushort(3), ushort(16));
  device int* out = z + 6 * i;
  out[0] = __metal_simd_xor(w[i]);
  out[1] = __metal_simd_and(w[i] | 0x100);
  out[2] = __metal_simd_or(w[i]);
  out[3] = __metal_get_simdgroup_size(ushort());
  out[4] = __metal_get_thread_index_in_simdgroup(ushort());
  out[5] = int(__metal_simd_shuffle_and_fill_down(float(w[i]), 0.5f * float(w[i]),
                                                   ushort(5)) * 2.0f);
}
"""


def _lanes(v):
    return v.reshape(-1, 32).astype(np.float64)


def test_simd_builtins_match_numpy():
    x = rng.uniform(0.9, 1.1, N).astype(np.float32)
    w = rng.integers(0, 1 << 20, N).astype(np.int32)
    y = np.zeros(17 * N, np.float32)
    z = np.zeros(6 * N, np.int32)
    run_clean(SIMD, "k", 1, N, [x, w, y, z])
    got = y.reshape(2, 32, 17)
    v = _lanes(x)
    lane = np.arange(32)
    rep = lambda r: np.repeat(r[:, None], 32, 1)  # noqa: E731
    acc = dict(op_class="accumulation", reduction_length=32)
    close(got[..., 0], rep(v.sum(1)), what="simd_sum", **acc)
    close(got[..., 1], rep(v.prod(1)), what="simd_product", **acc)
    close(got[..., 2], rep(v.min(1)), op_class="exact", what="simd_min")
    close(got[..., 3], rep(v.max(1)), op_class="exact", what="simd_max")
    close(got[..., 4], np.cumsum(v, 1), what="prefix_inclusive_sum", **acc)
    close(got[..., 5], np.cumsum(v, 1) - v, what="prefix_exclusive_sum", **acc)
    close(got[..., 6], np.cumprod(v, 1), what="prefix_inclusive_product", **acc)
    close(got[..., 7], np.cumprod(v, 1) / v, what="prefix_exclusive_product", **acc)
    exact = dict(op_class="exact")
    close(got[..., 8], v[:, lane * 7 % 32], what="simd_shuffle", **exact)
    close(got[..., 9], v[:, lane ^ 5], what="simd_shuffle_xor", **exact)
    close(got[..., 10], np.where(lane < 3, v, v[:, (lane - 3) % 32]), what="up", **exact)
    close(got[..., 11], np.where(lane >= 29, v, v[:, (lane + 3) % 32]), what="down", **exact)
    close(got[..., 12], v[:, (lane - 3) % 32], what="rotate_up", **exact)
    close(got[..., 13], v[:, (lane + 3) % 32], what="rotate_down", **exact)
    close(got[..., 14], rep(v[:, 9]), what="simd_broadcast", **exact)
    # fill: lanes shifted in take `filling` (-v) of the lanes at the other end of their vector
    j8, j16 = lane % 8, lane % 16
    up = np.where(j8 >= 2, v[:, lane - 2], -v[:, (lane - 2 + 8) % 32])
    down = np.where(j16 + 3 < 16, v[:, (lane + 3) % 32], -v[:, lane + 3 - 16])
    close(got[..., 15], up, what="shuffle_and_fill_up, modulo 8", **exact)
    close(got[..., 16], down, what="shuffle_and_fill_down, modulo 16", **exact)
    zz = z.reshape(2, 32, 6)
    ww = w.reshape(2, 32).astype(np.int64)
    np.testing.assert_array_equal(zz[..., 0], rep(np.bitwise_xor.reduce(ww, 1)))
    np.testing.assert_array_equal(zz[..., 1], rep(np.bitwise_and.reduce(ww | 0x100, 1)))
    np.testing.assert_array_equal(zz[..., 2], rep(np.bitwise_or.reduce(ww, 1)))
    np.testing.assert_array_equal(zz[..., 3], 32)
    np.testing.assert_array_equal(zz[..., 4], np.tile(lane, (2, 1)))
    fill32 = np.where(lane + 5 < 32, 2 * ww[:, np.minimum(lane + 5, 31)],
                      ww[:, (lane + 5) % 32])
    np.testing.assert_array_equal(zz[..., 5], fill32)


def test_simd_builtin_inside_a_user_overload_in_mlx_style():
    src = HEAD + """\
#define define_simd_sum(itype, ctype) \\
  METAL_FUNC itype simd_sum(itype data) { \\
    return static_cast<itype>(__metal_simd_sum(static_cast<ctype>(data))); \\
  }
namespace metal {
define_simd_sum(bfloat, float)
}
kernel void k(device const bfloat* x [[buffer(0)]], device bfloat* y [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
  y[i] = i % 2 == 0 ? simd_sum(x[i]) : simd_sum(x[i] * bfloat(2.0f));
}
"""
    x = torch.linspace(-2, 3, 32).to(torch.bfloat16)
    y = torch.zeros(32, dtype=torch.bfloat16)
    run_clean(src, "k", 1, 32, [x, y])
    # the two calls of the overload are two meetings (each at its caller's site): the even
    # lanes sum among themselves, the odd lanes among themselves
    want = torch.where(torch.arange(32) % 2 == 0, x[0::2].double().sum(),
                       2 * x[1::2].double().sum())
    close(y, want, reduction_length=32, op_class="accumulation")


def test_a_builtin_the_emulator_lacks_is_refused_with_its_line():
    src = HEAD + """\
kernel void k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  y[i] = __metal_fmax(1.0f, 2.0f, __METAL_FAST_MATH__);
  y[i] += __metal_unpack_unorm4x8_to_float(uint(i)).x;
}
"""
    with pytest.raises(emu.MSLCompileError,
                       match=r"'__metal_unpack_unorm4x8_to_float' is an Apple-internal builtin "
                             r"of <metal_stdlib> that the emulator does not provide") as err:
        emu.run_msl(src, "k", grid=1, threadgroup=1, buffers=[np.zeros(1, np.float32)])
    assert err.value.line == msl_line(src, "__metal_unpack")


def test_every_provided_builtin_is_tested_here():
    names = {f"__metal_{n}" for n in MATH} | {
        "__metal_ldexp", "__metal_frexp", "__metal_nextafter"}
    tested_in_simd = {w for w in METAL_BUILTINS if w in SIMD}
    assert METAL_BUILTINS - names - tested_in_simd == set()


def test_half_math_builtins_round_to_half():
    src = HEAD + """\
kernel void k(device const half* x [[buffer(0)]], device half* y [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
  y[2 * i] = __metal_exp(x[i], __METAL_FAST_MATH__);
  y[2 * i + 1] = __metal_fmedian3(x[i], half(0.25f), half(-0.5f), __METAL_FAST_MATH__);
}
"""
    x = _u(-3, 3).astype(np.float16)
    y = np.zeros(2 * N, np.float16)
    run_clean(src, "k", 1, N, [x, y])
    x64 = x.astype(np.float64)
    close(y[0::2], np.exp(x64), op_class="transcendental")
    close(y[1::2], np.median(np.stack([x64, np.full(N, 0.25), np.full(N, -0.5)]), 0),
          op_class="exact")
