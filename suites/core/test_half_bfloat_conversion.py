"""half <-> bfloat conversions go through float: MSL has no direct conversion between the two
16-bit float types, while the emulator (clang's _Float16 and __bf16) would accept one, so a
printer that dropped the float step would still pass every run here. The form is pinned on
the MSL text of the cast family's kernels, for every way the family converts, and each
kernel also runs and matches torch's conversion exactly."""

import re

import pytest

from harness.check.case import Status, run_case
from harness.gen import family

# scalar or vector: bfloat(float(x)), bfloat2(float2(v))
PAIRS = [("float16", "bfloat16", r"bfloat(\d?)\(float\1\("),
         ("bfloat16", "float16", r"half(\d?)\(float\1\(")]


@pytest.mark.parametrize("via", ["cast", "shared", "fragment"])
@pytest.mark.parametrize("src,dst,form", PAIRS)
def test_conversion_between_half_and_bfloat_goes_through_float(src, dst, form, via):
    params = {"M": 9, "N": 40, "src": src, "dst": dst, "via": via, "bM": 4, "bN": 16,
              "threads": 64}
    assert family.get("cast").build(dict(params))     # the family builds these params
    result = run_case("cast", params, seed=3)
    assert result.status == Status.PASS, result.message
    direct = r"bfloat\d?\(\(?[^()]*half" if dst == "bfloat16" else r"half\d?\(\(?[^()]*bfloat"
    assert re.search(form, result.msl), result.msl
    assert not re.search(direct, result.msl), result.msl
