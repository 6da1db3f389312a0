"""Decoding of packed low-precision floats in kernels: fp8 e4m3 and fp4 e2m1 codes ->
float32, with integer bit operations only (no lookup table, no transcendental), exact.

    T.decode_e4m3(code)   code: an integer expression holding one e4m3 byte (its low 8
                          bits are used); the float32 value, NaN for 0x7F / 0xFF
    T.decode_e2m1(code)   code: an integer expression whose low 4 bits are one e2m1 value

The formats (OCP 8-bit floating point / microscaling specifications): e4m3 ("fn", as
torch.float8_e4m3fn) is sign | 4 exponent bits, bias 7 | 3 mantissa bits, with no
infinities and S.1111.111 the only NaN; e2m1 is sign | 2 exponent bits, bias 1 | 1
mantissa bit, no NaN or infinity (values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives).
A normal code becomes a float32 by moving its exponent and mantissa fields into
float32's (exponent rebiased by adding 127 - bias), read with `as_type`; a subnormal
code (exponent field 0) is its mantissa times its fixed scale (2^-9 for e4m3, 2^-1 for
e2m1), so no float32 subnormal, which an Apple GPU may flush, is ever formed. The sign
bit is ORed in last, so -0 and the negative codes keep their sign.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from core.errors import KernelDefinitionError
from core.language.math import _expr


def _code(code, bits: int, name: str):
    code = _expr(code)
    if not str(code.ty.dtype).startswith(("int", "uint")):
        raise KernelDefinitionError(f"T.{name} takes an integer code, got {code.ty.dtype}",
                                    construct=f"T.{name}")
    return tirx.Cast("uint32", code) & tirx.const((1 << bits) - 1, "uint32")


def _decode(code, *, exp_bits: int, man_bits: int, bias: int, name: str, nan=None):
    u32 = lambda v: tirx.const(v, "uint32")  # noqa: E731
    c = _code(code, 1 + exp_bits + man_bits, name)
    mag_bits = exp_bits + man_bits
    mag = c & u32((1 << mag_bits) - 1)
    # (exponent + 127 - bias) << 23 | mantissa << (23 - man_bits), as one shifted sum
    normal = tvm.tirx.reinterpret("float32", (mag + u32((127 - bias) << man_bits))
                                  << u32(23 - man_bits))
    mantissa = tirx.Cast("float32", mag & u32((1 << man_bits) - 1))
    subnormal = mantissa * tirx.const(2.0 ** (1 - bias - man_bits), "float32")
    value = tirx.Select(mag < u32(1 << man_bits), subnormal, normal)
    if nan is not None:
        # the quiet-NaN bits, not a NaN literal fast math may assume away
        value = tirx.Select(mag == u32(nan), tvm.tirx.reinterpret("float32", u32(0x7FC00000)),
                            value)
    sign = (c >> u32(mag_bits)) << u32(31)              # the code's sign bit, float32's
    return tvm.tirx.reinterpret("float32", tvm.tirx.reinterpret("uint32", value) | sign)


def decode_e4m3(code):
    """float32 value of the fp8 e4m3 (fn) code in the low 8 bits of `code`."""
    return _decode(code, exp_bits=4, man_bits=3, bias=7, name="decode_e4m3", nan=0x7F)


def decode_e2m1(code):
    """float32 value of the fp4 e2m1 code in the low 4 bits of `code`."""
    return _decode(code, exp_bits=2, man_bits=1, bias=1, name="decode_e2m1")
