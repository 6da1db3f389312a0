"""MSL types and math in the emulator (mt_types.h, mt_math.h), run through `emu.run_msl` and
compared with numpy / ml_dtypes oracles: half and bfloat rounding after every operation,
vector constructors and swizzles, as_type, bool vectors with select/all/any, the math
functions on float and half, 32-bit integer wraparound and the integer functions, bit
operations on narrow types (promotion, arithmetic right shifts), INFINITY, NAN and
numeric_limits."""

import math

import ml_dtypes
import numpy as np
import pytest

from emucase import clean

BF16 = ml_dtypes.bfloat16
F32 = np.float32
MSL_TYPE = {np.float32: "float", np.float16: "half", BF16: "bfloat"}


def run(src: str, threads: int, *buffers) -> None:
    """Run kernel `k` of `src` on one threadgroup of `threads` threads; no findings allowed."""
    clean(src, "k", 1, threads, *buffers)


def ulps(got, want, dtype) -> np.ndarray:
    """Distance in units in the last place of `dtype`; NaN against NaN is 0."""
    bits = {1: np.int8, 2: np.int16, 4: np.int32}[np.dtype(dtype).itemsize]
    g = np.asarray(got, dtype).view(bits).astype(np.int64)
    w = np.asarray(want, dtype).view(bits).astype(np.int64)
    sign = np.int64(1) << (8 * np.dtype(dtype).itemsize - 1)
    g = np.where(g < 0, -(g & (sign - 1)), g)
    w = np.where(w < 0, -(w & (sign - 1)), w)
    both_nan = np.isnan(np.asarray(got, dtype).astype(np.float64)) & np.isnan(
        np.asarray(want, dtype).astype(np.float64))
    return np.where(both_nan, 0, np.abs(g - w))


# ---- half and bfloat: every operation rounds to the type --------------------------------

ARITH = """
kernel void k(device const TYPE* a [[buffer(0)]], device const TYPE* b [[buffer(1)]],
              device TYPE* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  TYPE x = a[i], y = b[i];
  out[4 * i + 0] = x * y + x;
  out[4 * i + 1] = x / y - y;
  out[4 * i + 2] = (x - y) * (x + y);
  vec<TYPE, 2> v = TYPE2(x, y);
  out[4 * i + 3] = (v * v.yx + v).x;
}
"""


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["half", "bfloat"])
def test_half_and_bfloat_round_after_every_operation(dtype, rng):
    n = 256
    a = rng.uniform(-12, 12, n).astype(dtype)
    b = rng.uniform(0.1, 12, n).astype(dtype) * np.where(rng.random(n) < 0.5, -1, 1).astype(dtype)
    out = np.zeros(4 * n, dtype)
    run(ARITH.replace("TYPE", MSL_TYPE[dtype]), n, a, b, out)
    want = np.stack([a * b + a, a / b - b, (a - b) * (a + b), a * b + a], axis=1).reshape(-1)
    np.testing.assert_array_equal(out.view(np.uint16), want.astype(dtype).view(np.uint16))


# ---- vector constructors, swizzles, as_type ----------------------------------------------

VECTORS = """
kernel void k(device float4* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  float4 a = float4(1.0, 2.0, 3.0, 4.0);
  half2 h = half2(a.zw);
  out[0] = float4(a.xy, h);                                // concatenation, half converted
  out[1] = a.wzyx;                                         // swizzle
  out[2] = float4(2);                                      // splat
  out[3] = float4(int4(float4(1.7, -1.7, 2.5, -0.5)));     // numeric conversion, not bits
  out[4] = float4(float3(a.w, a.xy), 9.0);
  out[5] = float4(bool4(a > 2.5));
  float4 b = a;
  b.xy = b.yx;
  b.w = a.r + a.a;
  out[6] = b;
  out[7] = float4(half4(float4(0.1, 0.2, 65519.0, 65520.0)));  // rounds to half
  out[8] = float4(uint4(int4(-1, 2, 3, 4)));
  out[9] = float4(a.zz, a.g, a[0]);
  out[10] = float4();
}
"""


def test_vector_constructors_and_swizzles():
    out = np.zeros((11, 4), np.float32)
    run(VECTORS, 1, out)
    want = [[1, 2, 3, 4], [4, 3, 2, 1], [2, 2, 2, 2], [1, -1, 2, 0], [4, 1, 2, 9], [0, 0, 1, 1],
            [2, 1, 3, 5], [np.float16(0.1), np.float16(0.2), 65504.0, np.inf],
            [4294967295.0, 2, 3, 4], [3, 3, 2, 1], [0, 0, 0, 0]]
    np.testing.assert_array_equal(out, np.array([np.asarray(w, np.float32) for w in want]))


AS_TYPE = """
kernel void k(device uint* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  out[0] = as_type<uint>(1.0f);
  out[1] = as_type<uint>(-2.5f);
  uint2 u = as_type<uint2>(half4(1.0h, 2.0h, -3.0h, 0.5h));
  out[2] = u.x;
  out[3] = u.y;
  half2 h = as_type<half2>(0x40003c00u);
  out[4] = uint(h.x) + 10 * uint(h.y);
  out[5] = as_type<ushort>(bfloat(1.0f));
  out[6] = as_type<uint>(as_type<float>(0x40490fdbu) * 2.0f);
  out[7] = as_type<ushort2>(as_type<uint>(3.0f)).y;
  out[8] = as_type<uint>(int(-1));
}
"""


def test_as_type_reinterprets_bits():
    out = np.zeros(9, np.uint32)
    run(AS_TYPE, 1, out)
    f = lambda v: int(np.float32(v).view(np.uint32))  # noqa: E731
    halves = np.array([1, 2, -3, 0.5], np.float16).view(np.uint32)
    want = [f(1.0), f(-2.5), halves[0], halves[1], 1 + 10 * 2, 0x3F80, f(np.float32(math.pi) * 2),
            f(3.0) >> 16, 0xFFFFFFFF]
    np.testing.assert_array_equal(out, np.array(want, np.uint32))


# ---- bool vectors, select, all, any -------------------------------------------------------

SELECT = """
kernel void k(device const float4* x [[buffer(0)]], device const float4* y [[buffer(1)]],
              device float4* picked [[buffer(2)]], device int* flags [[buffer(3)]],
              uint i [[thread_position_in_grid]]) {
  float4 a = x[i], b = y[i];
  bool4 m = a < b;
  picked[2 * i] = select(a, b, m);               // m ? b : a, lane by lane
  picked[2 * i + 1] = select(a, b, a >= b);      // a comparison result used directly
  flags[i] = int(all(m)) | int(any(m)) << 1 | int(m.x) << 2 | int(m[3]) << 3
           | int(any(isnan(a))) << 4 | int(all(!m || a == b)) << 5
           | int(select(0, 1, m.y)) << 6;
}
"""


def test_select_all_any_and_bool_vectors(rng):
    n = 128
    x = rng.integers(-2, 3, (n, 4)).astype(np.float32)
    y = rng.integers(-2, 3, (n, 4)).astype(np.float32)
    x[::7, 2] = np.nan
    picked = np.zeros((2 * n, 4), np.float32)
    flags = np.zeros(n, np.int32)
    run(SELECT, n, x, y, picked, flags)
    m = x < y
    np.testing.assert_array_equal(picked[0::2], np.where(m, y, x))
    np.testing.assert_array_equal(picked[1::2], np.where(x >= y, y, x))
    want = (m.all(1) | m.any(1) << 1 | m[:, 0] << 2 | m[:, 3] << 3 | np.isnan(x).any(1) << 4
            | (~m | (x == y)).all(1) << 5 | m[:, 1] << 6)
    np.testing.assert_array_equal(flags, want.astype(np.int32))


# ---- math functions on float and half ------------------------------------------------------

# name: (MSL expression in x, y, z; float64 oracle; range of x; range of y)
MATH = {
    "abs": ("abs(x)", np.abs, (-10, 10), None),
    "ceil": ("ceil(x)", np.ceil, (-10, 10), None),
    "floor": ("floor(x)", np.floor, (-10, 10), None),
    "trunc": ("trunc(x)", np.trunc, (-10, 10), None),
    "round": ("round(x)", lambda v: np.copysign(np.floor(np.abs(v) + 0.5), v), (-10, 10), None),
    "rint": ("rint(x)", np.rint, (-10, 10), None),
    "fract": ("fract(x)", lambda v: v - np.floor(v), (-10, 10), None),
    "sqrt": ("sqrt(x)", np.sqrt, (0, 100), None),
    "rsqrt": ("rsqrt(x)", lambda v: 1 / np.sqrt(v), (0.01, 100), None),
    "exp": ("exp(x)", np.exp, (-10, 10), None),
    "exp2": ("exp2(x)", np.exp2, (-10, 10), None),
    "exp10": ("exp10(x)", lambda v: 10.0**v, (-4, 4), None),
    "log": ("log(x)", np.log, (0.01, 100), None),
    "log2": ("log2(x)", np.log2, (0.01, 100), None),
    "log10": ("log10(x)", np.log10, (0.01, 100), None),
    "sin": ("sin(x)", np.sin, (-6, 6), None),
    "cos": ("cos(x)", np.cos, (-6, 6), None),
    "tan": ("tan(x)", np.tan, (-1.4, 1.4), None),
    "asin": ("asin(x)", np.arcsin, (-1, 1), None),
    "acos": ("acos(x)", np.arccos, (-1, 1), None),
    "atan": ("atan(x)", np.arctan, (-10, 10), None),
    "sinh": ("sinh(x)", np.sinh, (-5, 5), None),
    "cosh": ("cosh(x)", np.cosh, (-5, 5), None),
    "tanh": ("tanh(x)", np.tanh, (-5, 5), None),
    "sign": ("sign(x)", np.sign, (-3, 3), None),
    "saturate": ("saturate(x)", lambda v: np.clip(v, 0, 1), (-2, 2), None),
    "fast_exp": ("fast::exp(x)", np.exp, (-10, 10), None),
    "precise_tanh": ("precise::tanh(x)", np.tanh, (-5, 5), None),
    "pow": ("pow(x, y)", np.power, (0.1, 4), (-3, 3)),
    "powr": ("powr(x, y)", np.power, (0.1, 4), (-3, 3)),
    "atan2": ("atan2(x, y)", np.arctan2, (-5, 5), (-5, 5)),
    "fmax": ("fmax(x, y)", np.fmax, (-5, 5), (-5, 5)),
    "fmin": ("fmin(x, y)", np.fmin, (-5, 5), (-5, 5)),
    "max": ("max(x, y)", np.maximum, (-5, 5), (-5, 5)),
    "min": ("min(x, y)", np.minimum, (-5, 5), (-5, 5)),
    "fmod": ("fmod(x, y)", np.fmod, (-20, 20), (1, 5)),
    "copysign": ("copysign(x, y)", np.copysign, (-5, 5), (-5, 5)),
    "step": ("step(x, y)", lambda e, v: np.where(v < e, 0.0, 1.0), (-2, 2), (-2, 2)),
    "fma": ("fma(x, y, z)", lambda a, b, c: a * b + c, (-4, 4), (-4, 4)),
    "clamp": ("clamp(x, y, y + abs(z))", lambda a, b, c: np.clip(a, b, b + np.abs(c)), (-4, 4),
              (-4, 4)),
    # MSL defines mix as x + (y - x) * a, one expression, whose multiply-add Metal fuses
    # (docs/emulator.md): the oracle rounds the difference in float, then the fused step once,
    # else cancellation makes the exact value differ by many ulps
    "mix": ("mix(x, y, z)",
            lambda a, b, c: (F32(b) - F32(a)).astype(np.float64) * c + a, (-4, 4), (-4, 4)),
}
TERNARY = ("fma", "clamp", "mix")
TOLERANCE_ULPS = {np.float32: 2, np.float16: 1}
N_MATH = 64

MATH_KERNEL = """
kernel void k(device const TYPE* xs [[buffer(0)]], device const TYPE* ys [[buffer(1)]],
              device const TYPE* zs [[buffer(2)]], device TYPE* out [[buffer(3)]],
              uint i [[thread_position_in_grid]]) {
BODY
}
"""


@pytest.fixture(scope="module")
def math_results():
    """Every MATH function on N_MATH points (halfway cases first, then random), in one kernel
    per float type (one build each): {dtype: {name: (x, y, z, result)}}."""
    rng = np.random.default_rng(1)
    results = {}
    for dtype in (np.float32, np.float16):
        x, y, z, lines = [], [], [], []
        for f, (_name, (call, _, x_range, y_range)) in enumerate(MATH.items()):
            ties = [v for v in (-2.5, -1.5, -0.5, 0.5, 1.5, 2.5) if x_range[0] <= v <= x_range[1]]
            x.append(np.concatenate([ties, rng.uniform(*x_range, N_MATH - len(ties))]))
            y.append(rng.uniform(*(y_range or (-3, 3)), N_MATH))
            z.append(rng.uniform(0, 1, N_MATH))
            at = f"[{f * N_MATH} + i]"
            lines.append(f"  {{ TYPE x = xs{at}, y = ys{at}, z = zs{at}; out{at} = {call};"
                         " (void)y; (void)z; }")
        x, y, z = (np.array(v).astype(dtype) for v in (x, y, z))
        out = np.zeros_like(x)
        src = MATH_KERNEL.replace("BODY", "\n".join(lines)).replace("TYPE", MSL_TYPE[dtype])
        run(src, N_MATH, x, y, z, out)
        results[dtype] = {name: (x[f], y[f], z[f], out[f]) for f, name in enumerate(MATH)}
    return results


@pytest.mark.xdist_group("math-results")  # one worker builds and runs the kernels once
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float", "half"])
@pytest.mark.parametrize("name", list(MATH))
def test_math_function(name, dtype, math_results):
    x, y, z, got = math_results[dtype][name]
    oracle, y_range = MATH[name][1], MATH[name][3]
    args = [v.astype(np.float64) for v in (x, y, z)]
    args = args if name in TERNARY else args[:2] if y_range else args[:1]
    with np.errstate(all="ignore"):
        want = np.asarray(oracle(*args)).astype(dtype)
    worst = ulps(got, want, dtype).max()
    assert worst <= TOLERANCE_ULPS[dtype], f"{name}: {worst} ulp off"


# ---- integers ----------------------------------------------------------------------------

WRAP = """
kernel void k(device const int* a [[buffer(0)]], device const int* b [[buffer(1)]],
              device int* out [[buffer(2)]], device uint* uout [[buffer(3)]],
              uint i [[thread_position_in_grid]]) {
  int x = a[i], y = b[i];
  out[3 * i] = x * y + 2147483647;           // wraps modulo 2^32
  out[3 * i + 1] = x + INT_MAX;
  out[3 * i + 2] = int(short(x * 3));        // narrowing keeps the low 16 bits
  uout[i] = uint(x) - uint(y) * 3u;
}
"""


def test_int32_arithmetic_wraps_around(rng):
    n = 256
    a = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    out = np.zeros(3 * n, np.int32)
    uout = np.zeros(n, np.uint32)
    run(WRAP, n, a, b, out, uout)
    with np.errstate(over="ignore"):
        want = np.stack([a * b + np.int32(2**31 - 1), a + np.int32(2**31 - 1),
                         (a * np.int32(3)).astype(np.int16).astype(np.int32)], axis=1).reshape(-1)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(uout, a.view(np.uint32) - b.view(np.uint32) * np.uint32(3))


INTEGER_FUNCTIONS = """
kernel void k(device const int* a [[buffer(0)]], device const int* b [[buffer(1)]],
              device int* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  int x = a[i], y = b[i];
  uint ux = uint(x), uy = uint(y);
  device int* o = out + 10 * i;
  o[0] = clz(x);
  o[1] = ctz(ux);
  o[2] = popcount(x);
  o[3] = mulhi(x, y);
  o[4] = int(mulhi(ux, uy));
  o[5] = abs(x);
  o[6] = int(absdiff(x, y));
  o[7] = max(x, y);
  o[8] = int(min(ux, uy));
  o[9] = clamp(x, -1000, 1000);
}
"""


def test_integer_functions(rng):
    n = 128
    a = rng.integers(-2**31, 2**31, n, dtype=np.int64)
    b = rng.integers(-2**31, 2**31, n, dtype=np.int64)
    a[:4] = [0, -1, 2**31 - 1, -2**31]
    out = np.zeros((n, 10), np.int32)
    run(INTEGER_FUNCTIONS, n, a.astype(np.int32), b.astype(np.int32), out)
    ua, ub = a & 0xFFFFFFFF, b & 0xFFFFFFFF
    def wrap(v):  # to int32, modulo 2^32
        return ((np.asarray(v, dtype=object) + 2**31) % 2**32 - 2**31).astype(np.int64)

    want = np.stack([
        [32 - int(u).bit_length() for u in ua],
        [32 if u == 0 else (int(u) & -int(u)).bit_length() - 1 for u in ua],
        [bin(int(u)).count("1") for u in ua],
        [(int(x) * int(y)) >> 32 for x, y in zip(a, b)],
        wrap([(int(x) * int(y)) >> 32 for x, y in zip(ua, ub)]),
        wrap(np.abs(a)),
        wrap(np.abs(a - b)),
        np.maximum(a, b),
        wrap(np.minimum(ua, ub)),
        np.clip(a, -1000, 1000),
    ], axis=1)
    np.testing.assert_array_equal(out, want.astype(np.int64).astype(np.int32))


# ---- constants and limits ----------------------------------------------------------------

CONSTANTS = """
kernel void k(device float* f [[buffer(0)]], device int* n [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
  float values[] = {INFINITY, -INFINITY, NAN, HUGE_VALF, MAXFLOAT, FLT_MAX, FLT_MIN, FLT_EPSILON,
                    numeric_limits<float>::max(), float(numeric_limits<half>::max()),
                    float(numeric_limits<half>::min()), float(numeric_limits<half>::epsilon()),
                    float(numeric_limits<half>::lowest()), float(numeric_limits<bfloat>::max()),
                    float(numeric_limits<bfloat>::epsilon()), float(HALF_MAX), float(HALF_EPSILON),
                    M_PI_F, float(M_PI_H), exp(-INFINITY), 1.0f / INFINITY,
                    float(numeric_limits<half>::infinity()),
                    float(numeric_limits<bfloat>::quiet_NaN())};
  for (int j = 0; j < 23; ++j) f[j] = values[j];
  n[0] = numeric_limits<int>::max();
  n[1] = numeric_limits<int>::min();
  n[2] = int(numeric_limits<ushort>::max());
  n[3] = isinf(INFINITY) + 2 * isnan(NAN) + 4 * isfinite(FLT_MAX) + 8 * signbit(-0.0f);
}
"""


def test_infinity_nan_and_numeric_limits():
    f = np.zeros(23, np.float32)
    n = np.zeros(4, np.int32)
    run(CONSTANTS, 1, f, n)
    fl, hl, bl = np.finfo(np.float32), np.finfo(np.float16), ml_dtypes.finfo(BF16)
    want = [np.inf, -np.inf, np.nan, np.inf, fl.max, fl.max, fl.tiny, fl.eps, fl.max,
            hl.max, hl.tiny, hl.eps, -hl.max, float(bl.max), float(bl.eps), hl.max, hl.eps,
            np.float32(math.pi), np.float16(math.pi), 0.0, 0.0, np.inf, np.nan]
    np.testing.assert_array_equal(f, np.array(want, np.float32))
    np.testing.assert_array_equal(n, [2**31 - 1, -2**31, 65535, 15])


BIT_OPERATIONS = """
kernel void k(device const char* a [[buffer(0)]], device const uchar* s [[buffer(1)]],
              device int* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  char c = a[i];
  uchar u = uchar(c);
  int n = int(s[i]);
  device int* o = out + 6 * i;
  o[0] = c >> n;                 // promoted to int, arithmetic: the sign fills in
  o[1] = u >> n;                 // zero-extended: a logical shift
  o[2] = char(c << n);           // wraps back to char
  o[3] = ~u;                     // promoted: ~ of an int
  o[4] = int(uchar(~u));
  char4 v = char4(c) >> char4(n & 7);   // vectors: element-wise, no promotion
  o[5] = v.w;
}
"""


def test_bit_operations_follow_msl_promotion_and_sign(rng):
    """MSL's integer operators as C++ (the printer's narrow-type and shift rules rely on
    them): char/uchar promote to int, signed right shifts are arithmetic."""
    n = 64
    a = rng.integers(-128, 128, n).astype(np.int8)
    s = rng.integers(0, 8, n).astype(np.uint8)
    out = np.zeros(6 * n, np.int32)
    run(BIT_OPERATIONS, n, a, s, out)
    c, k, u = a.astype(np.int32), s.astype(np.int32), a.view(np.uint8).astype(np.int32)
    want = np.stack([c >> k, u >> k, (c << k).astype(np.int8).astype(np.int32), ~u,
                     (~u) & 0xFF, c >> (k & 7)], axis=1).reshape(-1)
    np.testing.assert_array_equal(out, want)
