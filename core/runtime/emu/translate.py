"""MSL source -> C++ translation unit for the emulator (the documented source rewrite).

clang compiles restricted MSL as C++17 once the shim header (include/metal_stdlib.h)
supplies MSL's names. A few MSL-only constructs need a rewrite first; each one below keeps
the meaning MSL gives the text, and keeps every line on its line so compiler messages and
findings point at the user's MSL line:

1. comments are blanked (newlines kept), so the rewrites below never look inside them;
2. `#include <metal_...>` and `#pragma METAL` lines are emptied (the shim is precompiled);
3. floating literals: MSL has no double, so an unsuffixed literal is a float (`1.5` ->
   `1.5f`), and the half suffix becomes a conversion (`1.5h` -> `half(1.5f)`);
4. vector constructors (`float4(h4)`, `float4(a.xy, b, c)`, `half2(x)`) become calls of the
   shim's `__mt_make_vec<float, 4>(...)`: in C++ a cast between vector types is a bitcast
   and a multi-argument vector constructor does not exist;
5. `threadgroup T name[N]...;` declarations become references into the threadgroup's
   shared storage (`__mt_tg_slot`), since every emulated thread runs on its own stack.

Kernel signatures are parsed into `KernelSignature`s (buffer bindings, thread-position
parameters, `max_total_threads_per_threadgroup`); the launcher (launcher.py) calls the
kernels from them. Anything outside the supported subset is an `MSLCompileError` naming
the MSL line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core.errors import MSLCompileError
from core.target import DTYPES

SOURCE_NAME = "input.metal"

# Thread-position attributes and the runtime field that carries each (mt_runtime.h).
POSITION_ATTRIBUTES = {
    "thread_position_in_grid": "thread_position_in_grid",
    "thread_position_in_threadgroup": "thread_position_in_threadgroup",
    "threadgroup_position_in_grid": "threadgroup_position_in_grid",
    "threads_per_threadgroup": "threads_per_threadgroup",
    "threadgroups_per_grid": "threadgroups_per_grid",
    "threads_per_grid": "threads_per_grid",
    "thread_index_in_threadgroup": "thread_index_in_threadgroup",
    "thread_index_in_simdgroup": "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup": "simdgroup_index_in_threadgroup",
    "simdgroups_per_threadgroup": "simdgroups_per_threadgroup",
    "threads_per_simdgroup": "threads_per_simdgroup",
    "thread_execution_width": "threads_per_simdgroup",
}

VECTOR_ELEMENTS = tuple(d.msl for d in DTYPES.values())   # MSL scalar names, core/target.py


@dataclass(frozen=True)
class KernelParam:
    name: str
    type: str                 # as written in MSL, e.g. "const device float*"
    buffer_index: int | None  # [[buffer(i)]]
    position: str | None      # thread-position attribute name
    line: int

    @property
    def is_reference(self) -> bool:
        return self.type.rstrip().endswith("&")


@dataclass(frozen=True)
class KernelSignature:
    name: str
    params: tuple[KernelParam, ...]
    max_total_threads: int | None
    line: int

    @property
    def buffers(self) -> dict[int, KernelParam]:
        return {p.buffer_index: p for p in self.params if p.buffer_index is not None}


@dataclass
class Translation:
    cpp: str                                   # the rewritten source (before the launcher)
    source: str                                # the MSL as given
    kernels: dict[str, KernelSignature]
    threadgroup_vars: dict[int, str] = field(default_factory=dict)  # slot -> variable name


def _blank(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


def strip_comments(src: str) -> str:
    """Blank comments (keeping newlines); string and char literals are left alone."""
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    return pattern.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else _blank(m.group(0)), src)


def line_of(src: str, pos: int) -> int:
    return src.count("\n", 0, pos) + 1


_INCLUDE = re.compile(r"^[ \t]*#[ \t]*(include[ \t]*<metal_\w*>|pragma[ \t]+METAL\b)[^\n]*", re.M)
_FLOAT_LITERAL = re.compile(
    r"(?<![\w.])((?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)([fFhH]?)(?![\w.])")
_VECTOR_CTOR = re.compile(r"(?<![\w.])(?:metal::)?(" + "|".join(VECTOR_ELEMENTS) + r")([234])\s*\(")
_VEC_TEMPLATE_CTOR = re.compile(
    r"(?<![\w.])(?:metal::)?vec\s*<\s*(" + "|".join(VECTOR_ELEMENTS) + r")\s*,\s*([234])\s*>\s*\(")
_THREADGROUP_DECL = re.compile(
    r"\bthreadgroup\s+((?:[A-Za-z_][\w:]*(?:\s*<[^;*&{}()]*?>)?\s+)+?)([A-Za-z_]\w*)\s*"
    r"((?:\[[^\]\n]+\]\s*)*);")
_VECTOR_CAST = re.compile(
    r"\(\s*(?:metal::)?((?:" + "|".join(VECTOR_ELEMENTS) + r")[234])\s*\)\s*(?=[\w(])")
_KERNEL_HEAD = re.compile(
    r"(?:\bkernel\s+|\[\[\s*kernel\b([^\]]*)\]\]\s*)void\s+([A-Za-z_]\w*)\s*\(")
_PARAM_ATTR = re.compile(r"\[\[\s*([A-Za-z_]\w*)\s*(?:\(\s*([^)]*?)\s*\))?\s*\]\]\s*$")
_MAX_THREADS = re.compile(r"max_total_threads_per_threadgroup\s*\(\s*(\d+)\s*\)")


def _rewrite_literal(m: re.Match) -> str:
    number, suffix = m.group(1), m.group(2)
    if suffix in ("h", "H"):
        return f"half({number}f)"
    return number + (suffix or "f")


def _matching_paren(src: str, open_pos: int) -> int:
    depth = 0
    for i in range(open_pos, len(src)):
        c = src[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _split_top_level(text: str) -> list[tuple[int, str]]:
    """Split a parameter list on commas outside (), <>, [] -> [(offset, piece)]."""
    pieces, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([<":
            depth += 1
        elif c in ")]>":
            depth -= 1
        elif c == "," and depth == 0:
            pieces.append((start, text[start:i]))
            start = i + 1
    pieces.append((start, text[start:]))
    return [(off, p) for off, p in pieces if p.strip()]


def _parse_param(piece: str, kernel: str, line: int) -> KernelParam:
    text = " ".join(piece.split())
    m = _PARAM_ATTR.search(text)
    if not m:
        raise MSLCompileError(
            f"kernel parameter '{text}' has no attribute; the emulator binds every parameter by "
            "its [[buffer(i)]] or thread-position attribute", kernel=kernel, line=line)
    decl = text[: m.start()].strip()
    name_m = re.search(r"([A-Za-z_]\w*)\s*$", decl)
    if not name_m:
        raise MSLCompileError(f"cannot read the parameter name in '{text}'", kernel=kernel,
                              line=line)
    name, ptype = name_m.group(1), decl[: name_m.start()].strip()
    attr, arg = m.group(1), m.group(2)
    if attr == "buffer":
        if arg is None or not arg.isdigit():
            raise MSLCompileError(f"parameter '{name}': [[buffer(...)]] needs a literal index",
                                  kernel=kernel, line=line)
        if not (ptype.endswith("*") or ptype.endswith("&")):
            raise MSLCompileError(
                f"parameter '{name}' is bound to [[buffer({arg})]] but is neither a pointer nor a "
                "reference (MSL requires one of them)", kernel=kernel, line=line)
        return KernelParam(name, ptype, int(arg), None, line)
    if attr in POSITION_ATTRIBUTES:
        return KernelParam(name, ptype, None, attr, line)
    raise MSLCompileError(
        f"parameter '{name}': the attribute [[{attr}{'(' + arg + ')' if arg else ''}]] is not "
        "supported by the emulator (supported: buffer(i) and the thread-position attributes "
        + ", ".join(sorted(POSITION_ATTRIBUTES)) + ")", kernel=kernel, line=line)


def parse_kernels(code: str) -> dict[str, KernelSignature]:
    """Kernel signatures of comment-free MSL `code`, by function name."""
    kernels: dict[str, KernelSignature] = {}
    for m in _KERNEL_HEAD.finditer(code):
        name = m.group(2)
        open_pos = m.end() - 1
        close = _matching_paren(code, open_pos)
        line = line_of(code, m.start())
        if close < 0:
            raise MSLCompileError("unbalanced parentheses in the kernel signature",
                                  kernel=name, line=line)
        params = tuple(
            _parse_param(piece, name, line_of(code, open_pos + 1 + off))
            for off, piece in _split_top_level(code[open_pos + 1: close]))
        seen: dict[int, str] = {}
        for p in params:
            if p.buffer_index is not None:
                if p.buffer_index in seen:
                    raise MSLCompileError(
                        f"parameters '{seen[p.buffer_index]}' and '{p.name}' are both bound to "
                        f"[[buffer({p.buffer_index})]]", kernel=name, line=p.line)
                seen[p.buffer_index] = p.name
        max_threads = None
        if m.group(1):
            mt = _MAX_THREADS.search(m.group(1))
            max_threads = int(mt.group(1)) if mt else None
        kernels[name] = KernelSignature(name, params, max_threads, line)
    return kernels


def _kernel_before(kernels: dict[str, KernelSignature], line: int) -> str | None:
    best = [k for k in kernels.values() if k.line <= line]
    return max(best, key=lambda k: k.line).name if best else None


def translate(source: str) -> Translation:
    """Rewrite MSL `source` into the C++ the emulator compiles (see the module docstring)."""
    code = strip_comments(source)
    kernels = parse_kernels(code)
    cast = _VECTOR_CAST.search(code)
    if cast:
        line = line_of(code, cast.start())
        raise MSLCompileError(
            f"C-style cast to {cast.group(1)}: the emulator rejects C-style casts between vector "
            f"types (C++ would reinterpret the bits); write the constructor {cast.group(1)}(x)",
            kernel=_kernel_before(kernels, line), line=line,
            source_line=source.splitlines()[line - 1].rstrip())
    code = _INCLUDE.sub(lambda m: "", code)
    code = _FLOAT_LITERAL.sub(_rewrite_literal, code)
    def make_vec(m: re.Match) -> str:
        return f"metal::__mt_make_vec<{m.group(1)}, {m.group(2)}>("

    code = _VECTOR_CTOR.sub(make_vec, code)
    code = _VEC_TEMPLATE_CTOR.sub(make_vec, code)

    tg_vars: dict[int, str] = {}

    def threadgroup_decl(m: re.Match) -> str:
        slot = len(tg_vars)
        ctype, name, dims = " ".join(m.group(1).split()), m.group(2), "".join(m.group(3).split())
        tg_vars[slot] = name
        t = f"__mt_tg_type_{slot}"
        return (f"using {t} = {ctype} {dims}; {t}& {name} = *static_cast<{t}*>("
                f"__mt_tg_slot({slot}, sizeof({t}), alignof({t})));"
                + "\n" * m.group(0).count("\n"))

    code = _THREADGROUP_DECL.sub(threadgroup_decl, code)
    cpp = f'#line 1 "{SOURCE_NAME}"\nusing namespace metal;\n#line 1 "{SOURCE_NAME}"\n' + code
    return Translation(cpp=cpp, source=source, kernels=kernels, threadgroup_vars=tg_vars)
