"""Only MSL gets in: what the emulator refuses before it builds a kernel, and checks after.

The emulator compiles MSL as C++ and runs it natively, so C++ that is not MSL could reach the
host with the caller's rights. MSL has no includes but Metal's own headers, no inline
assembly, no C linkage and no functions but its own and the source's: Apple's compiler
rejects a kernel that declares `system` and calls it. Two checks keep that so here, each an
`MSLCompileError` naming the construct and its MSL line:

1. before building, on the source text (comments blanked): `#include`/`#import` of anything
   but `<metal_...>`, inline assembly (`asm`, `__asm__`), `extern "C"` declarations, and
   attributes that run or place code outside the kernel (`constructor`, `destructor`,
   `section`, `alias`, `ifunc`, `weakref`, `visibility`);
2. after compiling the kernel's translation unit, on its object: every symbol it leaves
   undefined must be one the emulator provides: defined by the emulator's runtime objects,
   or one of the C and C++ runtime functions the shim headers call (`PROVIDED`: the math
   library, memory copies, the C++ ABI's guards and allocation). Anything else (a `system`,
   `fopen`, `std::system` reached through a header, `syscall`) is refused with the line
   that names it. Text that evades check 1 cannot evade this one. These are the symbols
   the kernel's shared object leaves for the launch host to bind when a launch loads it
   (build.py, src/entry/host.cpp): the check runs on the object before it is linked.

A kernel past both still runs inside the sandbox (src/sandbox.cpp, docs/emulator.md). The
sandbox's tests switch these checks off (`ENFORCE = False`) to show the sandbox alone
stops such a kernel.
"""

from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

from core.errors import MSLCompileError

from .translation import line_of, source_line

ENFORCE = True   # the sandbox's tests turn the checks off to test the sandbox alone

# `#include <metal_stdlib>`, `<metal_simdgroup>`, ...: Metal's own headers, the shim's.
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(include_next|include|import)\b[ \t]*([^\n]*)", re.M)
_METAL_HEADER = re.compile(r"<metal_\w+>\s*$")
_ASM = re.compile(r"\b(asm|__asm__|__asm)\b")
_C_LINKAGE = re.compile(r"\bextern\s+\"C(\+\+)?\"")
_CODE_ATTRIBUTE = re.compile(
    r"__attribute__\s*\(\(\s*(?:[\w\s,()\"]*?,\s*)?(constructor|destructor|section|alias|ifunc|"
    r"weakref|visibility)\b|\[\[\s*(?:gnu::)(constructor|destructor|section|alias|ifunc|"
    r"weakref|visibility)\b")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')

# C and C++ runtime functions the shim headers (include/*.h) may call from a kernel's code:
# the math library (float, double and long double forms), memory copies, the C++ ABI's
# static-local guards, allocation and exception plumbing. None reaches the host.
_MATH = ("acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp "
         "exp10 exp2 expm1 fabs fdim floor fma fmax fmin fmod frexp hypot ilogb ldexp lgamma "
         "llrint llround log log10 log1p log2 logb lrint lround modf nan nearbyint nextafter "
         "pow remainder remquo rint round scalbn sin sincos sinh sinpi cospi tanpi sqrt tan "
         "tanh tgamma trunc").split()
PROVIDED = frozenset(
    {f"{m}{suffix}" for m in _MATH for suffix in ("", "f", "l")}
    | {"__exp10f", "__sincosf", "__sincospif", "__cospif", "__sinpif", "__tanpif",
       "memcpy", "memmove", "memset", "memcmp", "abort", "__stack_chk_fail", "__dso_handle",
       "__cxa_guard_acquire", "__cxa_guard_release", "__cxa_guard_abort", "__cxa_atexit",
       "__cxa_pure_virtual", "__cxa_begin_catch", "__cxa_end_catch", "__gxx_personality_v0",
       "_Unwind_Resume", "__cxa_allocate_exception", "__cxa_throw", "__cxa_free_exception",
       "_ZSt9terminatev", "__clang_call_terminate", "_Znwm", "_Znam", "_ZdlPv", "_ZdaPv",
       "_ZdlPvm", "_ZdaPvm", "_ZnwmSt11align_val_t", "_ZdlPvSt11align_val_t",
       "_ZdlPvmSt11align_val_t"})
# libstdc++'s out-of-line error paths (std::__throw_length_error, ...): an exception, no host.
_PROVIDED_PATTERN = re.compile(r"_ZSt\d+__throw_\w+|__tsan_\w+|__ubsan_handle_\w+|__mt_\w+")


def _refuse(what: str, code: str, pos: int, source: str, kernel: str | None) -> MSLCompileError:
    line = line_of(code, pos)
    return MSLCompileError(f"{what}: the emulator runs MSL and nothing else (docs/emulator.md, "
                           "\"Only MSL gets in\")", kernel=kernel, line=line,
                           source_line=source_line(source, line))


def refuse_host_access(code: str, source: str, kernel: str | None = None) -> None:
    """Check 1, on `code` (the MSL with comments blanked, lines kept): raises an
    MSLCompileError for the first construct that is not MSL and could reach the host."""
    if not ENFORCE:
        return
    for m in _DIRECTIVE.finditer(code):
        if m.group(1) != "include" or not _METAL_HEADER.match(m.group(2).strip()):
            raise _refuse(f"#{m.group(1)} {m.group(2).strip()}: only Metal's own headers "
                          "(<metal_stdlib>, <metal_...>) can be included", code, m.start(),
                          source, kernel)
    bare = _STRING.sub(lambda s: '"' + " " * (len(s.group(0)) - 2) + '"', code)
    checks = ((_ASM, bare, "inline assembly ('{}') does not exist in MSL"),
              (_C_LINKAGE, code, "'extern \"C\"': MSL has no C linkage, so no C function can "
                                 "be declared or called"),
              (_CODE_ATTRIBUTE, bare, "the attribute '{}' places or runs code outside the "
                                      "kernel and does not exist in MSL"))
    for pattern, text, what in checks:
        m = pattern.search(text)
        if m:
            name = next((g for g in m.groups() if g), m.group(0))
            raise _refuse(what.format(name), text, m.start(), source, kernel)


# ---- check 2: the kernel object's undefined symbols ---------------------------------------

def symbols(obj: Path) -> tuple[set[str], set[str]]:
    """(defined, undefined): the global symbols object `obj` defines and those it uses
    without defining. ELF (Linux) is read here; Mach-O (macOS) through the system's nm,
    its leading underscores dropped (untested: no Mac has run it)."""
    data = obj.read_bytes()
    if data[:4] == b"\x7fELF" and data[4] == 2:
        return _elf_symbols(data)
    every = subprocess.run(["nm", "-g", "-j", str(obj)], capture_output=True, text=True,
                           check=True).stdout.split()
    undefined = set(subprocess.run(["nm", "-g", "-u", "-j", str(obj)], capture_output=True,
                                   text=True, check=True).stdout.split())
    strip = lambda names: {n[1:] if n.startswith("_") else n for n in names}  # noqa: E731
    return strip(set(every) - undefined), strip(undefined)


def _elf_symbols(data: bytes) -> tuple[set[str], set[str]]:
    e = "<" if data[5] == 1 else ">"
    shoff, = struct.unpack_from(e + "Q", data, 0x28)
    shentsize, shnum = struct.unpack_from(e + "HH", data, 0x3A)
    sections = [struct.unpack_from(e + "IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]
    defined, undefined = set(), set()
    for _, sh_type, _, _, off, size, link, _, _, entsize in sections:
        if sh_type != 2:   # SHT_SYMTAB
            continue
        str_off = sections[link][4]
        for k in range(size // entsize):
            st_name, st_info, _, st_shndx, _, _ = struct.unpack_from(e + "IBBHQQ", data,
                                                                     off + k * entsize)
            if st_info >> 4 not in (1, 2) or not st_name:   # GLOBAL or WEAK, named
                continue
            end = data.index(b"\0", str_off + st_name)
            name = data[str_off + st_name:end].decode()
            (undefined if st_shndx == 0 else defined).add(name)   # 0: SHN_UNDEF
    return defined, undefined


def runtime_symbols(objects) -> frozenset[str]:
    """The global symbols the runtime objects define (what a kernel may call into)."""
    return frozenset().union(*(symbols(Path(o))[0] for o in objects))


def check_symbols(obj: Path, runtime: frozenset[str], source: str,
                  kernel: str | None = None) -> None:
    """Check 2: every symbol the kernel's object `obj` needs is the runtime's or in
    PROVIDED; else an MSLCompileError naming the first other one and its MSL line."""
    if not ENFORCE:
        return
    foreign = sorted(s for s in symbols(obj)[1]
                     if s not in runtime and s not in PROVIDED
                     and not _PROVIDED_PATTERN.fullmatch(s))
    if not foreign:
        return
    name = _demangle(foreign[0])
    short = re.sub(r"\(.*", "", name).split("::")[-1]
    m = short and (re.search(rf"\b{re.escape(short)}\s*\(", source)
                   or re.search(rf"\b{re.escape(short)}\b", source))
    line = line_of(source, m.start()) if m else None
    more = f" (and {len(foreign) - 1} more: {', '.join(map(_demangle, foreign[1:4]))})" \
        if len(foreign) > 1 else ""
    raise MSLCompileError(
        f"the kernel uses '{name}'{more}, which is neither MSL nor defined in the source: "
        "a kernel cannot call into the host (docs/emulator.md, \"Only MSL gets in\")",
        kernel=kernel, line=line, source_line=source_line(source, line))


def _demangle(symbol: str) -> str:
    if not symbol.startswith("_Z"):
        return symbol
    try:
        out = subprocess.run(["c++filt", symbol], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return symbol
    return out.stdout.strip() or symbol
