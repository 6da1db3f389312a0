"""Only MSL gets in (core/runtime/emu/admission.py): C++ that is not MSL and could reach
the host is refused before it runs, as an MSLCompileError naming the construct and its MSL
line; MSL itself, whatever it calls of Metal's library, still builds."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import MSLCompileError
from core.runtime import emu
from emucase import HEADER, line_of

KERNEL = """\
kernel void k(device float* a [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  BODY
}
"""

# (what the file holds before the kernel, the kernel's body, the line's needle, the message)
CASES = {
    "a C library header": (
        "#include <cstdlib>\n", 'a[0] = float(std::system("true"));', "#include <cstdlib>",
        r"#include <cstdlib>: only Metal's own headers .* can be included"),
    "a quoted include": (
        '#include "kernels/utils.h"\n', "a[i] = 1.0f;", '#include "kernels/utils.h"',
        r'#include "kernels/utils.h": only Metal\'s own headers'),
    "a C declaration of system": (
        'extern "C" int system(const char*);\n', 'a[0] = float(system("true"));',
        'extern "C"', r"'extern \"C\"': MSL has no C linkage"),
    "inline assembly": (
        "", '__asm__ volatile("nop");', "__asm__", r"inline assembly \('__asm__'\)"),
    "an asm label naming a host function": (
        'int run(const char*) asm("system");\n', 'a[0] = float(run("true"));', "asm(",
        r"inline assembly \('asm'\)"),
    "a constructor": (
        "[[gnu::constructor]] void early() {}\n", "a[i] = 1.0f;", "gnu::constructor",
        r"the attribute 'constructor' places or runs code outside the kernel"),
    "a C++ declaration of a host function": (
        "int system(const char*);\n", 'a[0] = float(system("true"));', "int system(",
        r"the kernel uses 'system\(char const\*\)', which is neither MSL nor defined in the "
        r"source"),
    "a host variable": (
        "extern char** environ;\n", "a[0] = environ ? 1.0f : 0.0f;", "environ",
        r"the kernel uses 'environ'"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_what_is_not_msl_is_refused_on_its_line(name):
    before, body, needle, message = CASES[name]
    source = before + KERNEL.replace("BODY", body)
    with pytest.raises(MSLCompileError, match=message) as err:
        emu.run_msl(HEADER + source, "k", grid=(1, 1, 1), threadgroup=(32, 1, 1),
                    buffers=[np.zeros(32, np.float32)])
    assert err.value.line == line_of(source, needle), str(err.value)
    assert "the emulator runs MSL and nothing else" in str(err.value) or \
        "cannot call into the host" in str(err.value)


def test_strings_and_comments_that_mention_asm_are_msl():
    source = KERNEL.replace("BODY", '// asm("nop") in a comment\n  constant char* s = "asm";\n'
                                    "  a[i] = float(s[0]) + fast::exp(0.0f) + precise::sqrt(4.0f);")
    a = np.zeros(32, np.float32)
    emu.run_msl(HEADER + source, "k", grid=(1, 1, 1), threadgroup=(32, 1, 1), buffers=[a])
    np.testing.assert_array_equal(a, np.full(32, ord("a") + 3.0, np.float32))
