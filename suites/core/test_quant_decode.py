"""fp8 e4m3 and fp4 e2m1 decoding in kernels (T.decode_e4m3 / T.decode_e2m1): every code,
bit-exact, on the emulator; e4m3 against torch.float8_e4m3fn, e2m1 against a table built
here from the format's definition (sign, 2 exponent bits with bias 1, 1 mantissa bit)."""

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close


def _decoder(fn, n, dtype):
    @T.prim_func
    def decode(C: T.Tensor((n,), dtype), V: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(n):
                V[i] = fn(C[i])
    return core.compile(decode, out_idx=[-1])


def e2m1_table() -> torch.Tensor:
    """The 16 e2m1 values from the definition: subnormal (exponent 0): m * 2^(1 - bias - 1);
    normal: 2^(e - bias) * (1 + m / 2)."""
    values = []
    for code in range(16):
        sign, e, m = code >> 3, (code >> 1) & 3, code & 1
        mag = m * 0.5 if e == 0 else 2.0 ** (e - 1) * (1 + m / 2)
        values.append(-mag if sign else mag)
    return torch.tensor(values, dtype=torch.float64)


def _same_bits(got, want):
    """Exact, NaN equal to NaN, and the sign of zero kept."""
    assert_close(got, want, op_class="exact")
    assert torch.equal(torch.signbit(got), torch.signbit(want.float()))


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32"])
def test_every_e4m3_code_matches_torch_float8(dtype, run):
    codes = torch.arange(256, dtype=torch.int64)
    want = codes.to(torch.uint8).view(torch.float8_e4m3fn).float()
    held = codes.to(torch.uint8).view(torch.int8) if dtype == "int8" else codes.to(
        getattr(torch, dtype))
    kernel = _decoder(T.decode_e4m3, 256, dtype)
    assert "as_type<float" in kernel.msl and "float8" not in kernel.msl
    got = run(kernel, held)
    _same_bits(got, want)
    assert int(torch.isnan(got).sum()) == 2 and got[0x7E] == 448 and got[1] == 2.0 ** -9


def test_every_e2m1_code_matches_the_format_table(run):
    table = e2m1_table()
    assert table[:8].tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    kernel = _decoder(T.decode_e2m1, 16, "uint8")
    _same_bits(run(kernel, torch.arange(16, dtype=torch.uint8)), table)


def test_e2m1_reads_only_the_low_nibble(run):
    """The high nibble of a packed byte is ignored: 0xA3 decodes as 0x3 (1.5)."""
    kernel = _decoder(lambda c: T.decode_e2m1(c), 16, "uint8")
    codes = torch.arange(16, dtype=torch.uint8) | 0xA0
    _same_bits(run(kernel, codes), e2m1_table())


def test_a_float_code_is_rejected():
    with pytest.raises(KernelDefinitionError, match="T.decode_e4m3 takes an integer code"):
        _decoder(T.decode_e4m3, 4, "float16")
