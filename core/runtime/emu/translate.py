"""MSL source -> C++ translation unit for the emulator (the documented source rewrite).

clang compiles restricted MSL as C++17 once the shim header (include/metal_stdlib.h)
supplies MSL's names. A few MSL-only constructs need a rewrite first; each one below keeps
the meaning MSL gives the text, and keeps every line on its line so compiler messages and
findings point at the user's MSL line:

1. comments are blanked (newlines kept), so the rewrites below never look inside them;
2. `#include <metal_...>` and `#pragma METAL` lines are emptied (the shim is precompiled),
   and so are loop-unroll hints (`#pragma unroll [N]`, `#pragma clang loop unroll(...)`,
   `_Pragma("clang loop unroll(...)")`): they ask Apple's compiler to unroll and mean
   nothing else, while clang's CPU build would follow them and then keep or drop other
   loads than it does for the rolled loop (the fp8 decode QMM bench case: 1.05M
   threadgroup loads rolled, 4.19M unrolled), so the counters would measure clang's CPU
   schedule, not the kernel's work; the emulator counts the rolled loop's accesses,
   hinted or not;
3. floating literals: MSL has no double, so an unsuffixed literal is a float (`1.5` ->
   `1.5f`), and the half suffix becomes a conversion (`1.5h` -> `half(1.5f)`);
4. vector constructors (`float4(h4)`, `float4(a.xy, b, c)`, `half2(x)`) become calls of the
   shim's `__mt_make_vec<float, 4>(...)`: in C++ a cast between vector types is a bitcast
   and a multi-argument vector constructor does not exist;
5. `threadgroup T name[N]...;` declarations become pointers (a scalar: a reference) into
   the threadgroup's shared storage (`__mt_tg_slot`), since every emulated thread runs on
   its own stack; one with an initializer keeps it as stores every thread makes after the
   declaration (C++'s block-scope rule: each thread that reaches it initializes the one
   shared object, a race the checker reports);
6. every attribute in `[[...]]` that is not C++'s own becomes
   `clang::annotate("metal", "name", args...)`, which clang keeps in its AST: kernel
   signatures are read from that AST (signature.py), not from the text; an array of
   buffers (`device T* xs[N] [[buffer(i)]]`) gets its attributes before its bounds, and
   its length;
7. address spaces are types (include/metal_stdlib.h); where clang's C++ cannot say what
   MSL says, the text is adjusted: a member function's address-space qualifier is dropped
   (overloads for several spaces with one body merged, different bodies refused), an array
   parameter in an address space becomes the pointer C++ adjusts it to, `constant char*`
   becomes `const char*` (string literals);
8. `static_cast<T>(x)` to a value type becomes `metal::__mt::value_cast<T>(x)`, which
   converts between half and bfloat and lane by lane between vectors as MSL does;
9. a `__metal_*` builtin the shim does not provide (include/mt_builtins.h) is refused.

Kernel signatures are read into `KernelSignature`s (buffer bindings, thread-position
parameters, `max_total_threads_per_threadgroup`); the launcher (launcher.py) calls the
kernels from them. Anything outside the supported subset is an `MSLCompileError` naming
the MSL line.
"""

from __future__ import annotations

import math
import numbers
import re
from pathlib import Path

import numpy as np

from core.errors import LaunchError, MSLCompileError
from core.target import DTYPES

from .admission import refuse_host_access
from .signature import read_kernels
from .translation import (PRELUDE, FunctionConstant, KernelSignature, Translation, line_of,
                          source_line)

VECTOR_ELEMENTS = tuple(d.msl for d in DTYPES.values())   # MSL scalar names, core/target.py


def _blank(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


def strip_comments(src: str) -> str:
    """Blank comments (keeping newlines); string and char literals are left alone."""
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    return pattern.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else _blank(m.group(0)), src)


_INCLUDE = re.compile(r"^[ \t]*#[ \t]*(include[ \t]*<metal_\w*>|pragma[ \t]+METAL\b)[^\n]*", re.M)
_UNROLL_HINT = re.compile(
    r"^[ \t]*#[ \t]*pragma[ \t]+(?:unroll\b|nounroll\b|clang[ \t]+loop[ \t]+unroll)[^\n]*"
    r"|\b_Pragma[ \t]*\([ \t]*\"[ \t]*(?:unroll|nounroll|clang[ \t]+loop[ \t]+unroll)"
    r"[^\"\n]*\"[ \t]*\)",
    re.M)
_FLOAT_LITERAL = re.compile(
    r"(?<![\w.])((?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)([fFhH]?)(?![\w.])")
_VECTOR_CTOR = re.compile(r"(?<![\w.])(?:metal::)?(" + "|".join(VECTOR_ELEMENTS) + r")([234])\s*\(")
# `vec<float, 4>(h4)` and, in templates, `vec<AccT, 4>(w4[i])` or `vec<T, N>(x)`: the element
# type and the lane count may be template parameters (MLX's gemv_wide, steel's loaders).
_VEC_TEMPLATE_CTOR = re.compile(
    r"(?<![\w.])(?:metal::)?vec\s*<\s*([A-Za-z_][\w:]*)\s*,\s*([1-9]\d*|[A-Za-z_]\w*)\s*>\s*\(")
_THREADGROUP_DECL = re.compile(
    r"\bthreadgroup\s+((?:[A-Za-z_][\w:]*(?:\s*<[^;*&{}()]*?>)?\s+)+?)([A-Za-z_]\w*)\s*"
    r"((?:\[[^\]\n]+\]\s*)*);")
# `threadgroup T* view = (threadgroup T*)array;`: a typed pointer over a threadgroup array.
_POINTEE = r"(?:[A-Za-z_][\w:]*\s+)*[A-Za-z_][\w:]*\s*\*"   # `volatile float*`, `half*`
_THREADGROUP_VIEW = re.compile(
    r"\bthreadgroup\s+" + _POINTEE + r"\s*([A-Za-z_]\w*)\s*=\s*"
    r"\(\s*threadgroup\s+" + _POINTEE + r"\s*\)\s*([A-Za-z_]\w*)\s*;")
_VECTOR_CAST = re.compile(
    r"\(\s*(?:metal::)?((?:" + "|".join(VECTOR_ELEMENTS) + r")[234])\s*\)\s*(?=[\w(])")
_ATTRIBUTE_LIST = re.compile(r"\[\[(?!\s*\[)(.*?)\]\]", re.S)
_ATTRIBUTE = re.compile(r"\s*([A-Za-z_]\w*)\s*(?:\((.*)\))?\s*$", re.S)
# C++'s own attributes keep their meaning; every other unscoped attribute in `[[...]]` is
# MSL's and becomes an annotation clang keeps in its AST (the signature reader's input).
CXX_ATTRIBUTES = frozenset({
    "noreturn", "carries_dependency", "deprecated", "fallthrough", "nodiscard",
    "maybe_unused", "likely", "unlikely", "no_unique_address", "assume"})
# `threadgroup T name[...] = ...;` or `{...}`: a threadgroup variable with an initializer.
_THREADGROUP_INIT = re.compile(
    r"\bthreadgroup\s+((?:[A-Za-z_][\w:]*(?:\s*<[^;*&{}()]*?>)?\s+)+?)([A-Za-z_]\w*)\s*"
    r"((?:\[[^\]\n]+\]\s*)*)(=|\{)")


def rewrite_threadgroup_initializers(code: str) -> str:
    """`threadgroup float buf[32] = {0};` -> the declaration without its initializer, then
    every thread storing the initial values (one statement on the same line). A kernel-scope
    declaration is C++'s block-scope one: each thread that reaches it performs the
    initialization, and all of a threadgroup's threads share the one object, so they all
    store the same values into it: a race under Metal's memory model, which the checker
    reports, never a build error (docs/emulator.md)."""
    out, last = [], 0
    for m in _THREADGROUP_INIT.finditer(code):
        if m.start() < last:
            continue
        ctype, name, dims = " ".join(m.group(1).split()), m.group(2), "".join(m.group(3).split())
        end, depth = m.end() - (1 if m.group(4) == "{" else 0), 0
        while end < len(code):             # the declaration's `;`, outside braces and parens
            c = code[end]
            depth += c in "{(["
            depth -= c in "})]"
            if c == ";" and depth == 0:
                break
            end += 1
        init = code[m.end() - 1:end] if m.group(4) == "{" else "= " + code[m.end():end].strip()
        init = " ".join(init.split())      # on the declaration's line; its breaks come after
        local = f"__mt_init_{name}"
        if dims:
            store = (f"for (unsigned __mt_i = 0; __mt_i < sizeof({local}) / sizeof({ctype}); "
                     f"++__mt_i) ((threadgroup {ctype}*){name})[__mt_i] = "
                     f"((const {ctype}*){local})[__mt_i];")
        else:
            store = f"{name} = {local};"
        out.append(code[last:m.start()])
        out.append(f"threadgroup {ctype} {name}{dims}; {{ {ctype} {local}{dims} {init}; "
                   f"{store} }}" + "\n" * code.count("\n", m.start(), end + 1))
        last = end + 1
    out.append(code[last:])
    return "".join(out)


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


def _rewrite_attribute(item: str) -> str:
    m = _ATTRIBUTE.match(item)
    if not m or m.group(1) in CXX_ATTRIBUTES:
        return item                        # scoped (clang::...) or C++'s own: unchanged
    name, args = m.group(1), m.group(2)
    extra = f", {args.strip()}" if args and args.strip() else ""
    return (f'clang::annotate("metal", "{name}"{extra})'
            + "\n" * (item.count("\n") - extra.count("\n")))


def rewrite_attributes(code: str) -> str:
    """`[[buffer(0)]]` -> `[[clang::annotate("metal", "buffer", 0)]]`, for every MSL
    attribute in every attribute list (several per list, anywhere, also inside macros).
    The arguments stay expressions, so macros and constants in them are evaluated by clang."""
    def one_list(m: re.Match) -> str:
        items = [piece for _, piece in _split_top_level(m.group(1))]
        return "[[" + ",".join(_rewrite_attribute(i) for i in items) + "]]"
    return _ATTRIBUTE_LIST.sub(one_list, code)


# `device float* xs[4] [[clang::annotate(...)]]`: an array of buffers as a kernel parameter.
_ARRAY_OF_BUFFERS = re.compile(
    r"\b([A-Za-z_]\w*)\s*\[([^\[\]]+)\]\s*\[\[(clang::annotate\(\"metal\"[^\n]*?\))\]\]"
    r"(?=\s*[,)])")


def rewrite_buffer_arrays(code: str) -> str:
    """`device float* xs[4] [[buffer(1)]]` (after rewrite_attributes) -> the attributes moved
    before the bounds, where they belong to the parameter (after them C++ gives them to the
    array type), plus the length, which the signature reader needs: the parameter's type is
    the adjusted pointer. The launcher binds buffers i..i+N-1 to the elements, as Metal does."""
    return _ARRAY_OF_BUFFERS.sub(
        lambda m: f'{m.group(1)} [[{m.group(3)}, clang::annotate("metal", "array_length", '
                  f'{m.group(2)})]] [{m.group(2)}]', code)


_INSTANTIATION = re.compile(r"\btemplate(?=(?:\s|\\\n)*\[\[)")
_SPACE = re.compile(r"(?:\s|\\\n)*")


def _balanced(code: str, pos: int, open_: str, close: str) -> int:
    """Index just past the bracket group starting at code[pos] == open_ (-1 if unbalanced)."""
    depth = 0
    for i in range(pos, len(code)):
        if code.startswith(open_, i):
            depth += 1
        elif code.startswith(close, i):
            depth -= 1
            if depth == 0:
                return i + len(close)
    return -1


def rewrite_instantiations(code: str) -> str:
    """`template [[host_name("n")]] [[kernel]] decltype(f<T>) f<T>;` (MLX's instantiation
    macros; also with a full function type) -> the explicit instantiation, and a constexpr
    pointer to it carrying the attributes, which the signature reader finds kernels by (C++
    allows no attributes on an explicit instantiation). Line breaks (also macro line
    continuations) are kept, so the text stays on its lines."""
    out, last = [], 0
    for m in _INSTANTIATION.finditer(code):
        if m.start() < last:
            continue
        pos = m.end()
        attrs = []
        while True:
            pos = _SPACE.match(code, pos).end()
            if not code.startswith("[[", pos):
                break
            end = _balanced(code, pos, "[[", "]]")
            if end < 0:
                break
            attrs.append(code[pos:end])
            pos = end
        semi = code.find(";", pos)
        if not attrs or semi < 0:
            continue
        decl = code[pos:semi]
        flat = re.sub(r"\\\n", " ", decl).strip()
        if flat.startswith("decltype"):
            close = _balanced(flat, flat.index("("), "(", ")")
            name = flat[close:].strip()
        else:                                   # `void f<T>(params...)`
            head = flat[: flat.index("(")] if "(" in flat else flat
            found = re.search(r"[A-Za-z_][\w:]*\s*(?:<.*>)?\s*$", head)
            name = found.group(0).strip() if found else ""
        if not name:
            continue
        breaks = code[m.start():semi].count("\n")
        cont = code[m.start():semi].count("\\\n")
        out.append(code[last:m.start()])
        out.append(f"template {flat}; {' '.join(attrs)} constexpr auto "
                   f"__MT_CAT(__mt_host_, __COUNTER__) = &{name}"
                   + " \\\n" * cont + "\n" * (breaks - cont))
        last = semi
    out.append(code[last:])
    return "".join(out)


_FUNCTION_CONSTANT = re.compile(
    r"\bconstant\s+([A-Za-z_][\w:]*(?:\s*<[^;]*?>)?)\s+([A-Za-z_]\w*)\s*"
    r"\[\[\s*function_constant\s*\(\s*(\d+)\s*\)\s*\]\]\s*;")


def _constant_literal(value, name: str, index: int, kernel: str | None) -> str:
    """A C++ literal for a function constant's value: bools, integers and reals, NumPy
    scalars included; infinities and NaN as the builtins that make them (`repr` gives
    `inf`/`nan`, which are not C++)."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        real = float(value)
        if math.isnan(real):
            return '__builtin_nan("")'
        if math.isinf(real):
            return "__builtin_huge_val()" if real > 0 else "-__builtin_huge_val()"
        return repr(real)
    raise LaunchError(f"value {value!r} ({type(value).__name__}) for function constant "
                      f"'{name}' is not a bool, int or float", kernel=kernel,
                      construct=f"function_constants[{index}]")


def rewrite_function_constants(code: str, source: str, values: dict,
                               kernel: str | None = None,
                               found: dict | None = None) -> str:
    """`constant T name [[function_constant(i)]];` -> a constexpr holding the value given
    for index i (Metal sets them when it builds the pipeline; here when the MSL is
    compiled), and `is_function_constant_defined(name)` knows whether one was given. A
    constant without a value becomes `T()`, never read: as in Metal, only a kernel that
    reads it needs a value (run.py refuses that kernel, from its signature's
    `constants_read`), and `is_function_constant_defined` is false for it. Each
    declaration is recorded in `found` (name -> FunctionConstant)."""
    def one(m: re.Match) -> str:
        ctype, name, index = m.group(1), m.group(2), int(m.group(3))
        defined = index in values
        if found is not None:
            found[name] = FunctionConstant(name, index, defined, line_of(code, m.start()))
        value = (f"{ctype}({_constant_literal(values[index], name, index, kernel)})"
                 if defined else f"{ctype}()")
        return (f"constexpr {ctype} {name} = {value}; constexpr bool __mt_fc_defined_{name} = "
                f"{'true' if defined else 'false'};" + "\n" * m.group(0).count("\n"))
    return _FUNCTION_CONSTANT.sub(one, code)


# The simd and barrier functions whose calls carry a meeting site (include/mt_sites.h).
SITE_FUNCTIONS = tuple(re.findall(r"^#define (\w+)\(", (Path(__file__).parent / "include" /
                                                     "mt_sites.h").read_text(), re.M))
_SITE_NAME = re.compile(r"\b(" + "|".join(SITE_FUNCTIONS) + r")\s*\(")
_NOT_A_TYPE = frozenset({"return", "case", "else", "do", "throw", "sizeof", "co_return",
                         "co_yield", "decltype", "alignof", "new", "delete", "typeid"})


def _in_expression(before: str) -> bool:
    """Whether text ending in `>`, `*` or `&` is inside an expression (an operator before a
    call) rather than a declaration's return type (`T& name(`, `vec<T, 2> name(`): the
    statement so far, template argument lists taken out, holds an `=`, a `(`, a `?` or a
    `return`."""
    start = max(before.rfind(c) for c in ";{}") + 1
    stmt = before[start:]
    while True:
        inner = re.sub(r"<[^<>;(){}]*>", "", stmt)
        if inner == stmt:
            break
        stmt = inner
    return bool(re.search(r"[=(?]|\breturn\b", stmt))


def rewrite_site_overloads(code: str) -> str:
    """A user's own overload of a simd function (MLX defines `simd_shuffle_down` for its
    complex type) is declared as `(simd_shuffle_down)(__mt_site, params...)`: the
    parentheses keep the call-site macro out of the declaration, and the site parameter
    lets the macro's calls reach it by overload resolution (named `__mt_at`: the
    `__metal_*` simd builtins inside meet at the caller's site, include/mt_builtins.h)."""
    out, last = [], 0
    for m in _SITE_NAME.finditer(code):
        before = code[:m.start()].rstrip()
        token = re.search(r"([A-Za-z_]\w*|[>*&])$", before)
        if not token or token.group(1) in _NOT_A_TYPE or before.endswith("::"):
            continue
        if token.group(1) in (">", "*", "&") and _in_expression(before):
            continue                            # `a & simd_sum(v)`, `x * simd_sum(v)`
        if re.search(r"^[ \t]*#[ \t]*define[ \t]+\w+$", before[before.rfind("\n") + 1:]):
            continue                            # `#define R simd_sum(v)`: a call in a macro
        out.append(code[last:m.start()])
        empty = code[m.end():].lstrip().startswith(")")
        # named, so the `__metal_*` simd builtins called inside meet at the caller's site
        out.append(f"({m.group(1)})(__mt_site __mt_at{'' if empty else ', '}")
        last = m.end()
    out.append(code[last:])
    return "".join(out)


_ADDRESS_SPACES = ("thread", "device", "threadgroup", "constant")
# `) const device {`: the address-space qualifier of a member function (the space of the
# object it is called on), after its parameter list.
_MEMBER_SPACE = re.compile(
    r"\)((?:\s*\b(?:const|volatile|thread|device|threadgroup|constant)\b)+)"
    r"(?=\s*(?:\{|;|:(?!:)|=|->|noexcept|&))")


def _declaration_start(code: str, close: int) -> int:
    """Where the declaration whose parameter list ends at code[close] == ')' begins: after
    the previous `;`, `{`, `}` or access label outside brackets."""
    depth = 0
    i = close + 1
    while i > 0:
        i -= 1
        c = code[i]
        if c in ")]":
            depth += 1
        elif c in "([":
            depth -= 1
        elif depth == 0 and (c in ";{}" or (c == ":" and code[i - 1] != ":"
                                              and code[i + 1] != ":")):
            return i + 1
    return 0


def _member_end(code: str, pos: int) -> int:
    """Index just past a member function's body (or its `;`) that starts at or after pos."""
    depth = 0
    for i in range(pos, len(code)):
        c = code[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0 and c == ";":
            return i + 1
        elif depth == 0 and c == "{":
            end = _balanced(code, i, "{", "}")
            return end if end > 0 else len(code)
    return len(code)


def _enclosing_braces(code: str, positions: list[int]) -> dict[int, int]:
    """For each position, the offset of the innermost `{` around it (-1: file scope)."""
    out, stack, wanted = {}, [], sorted(positions)
    k = 0
    for m in re.finditer(r"[{}]", code):
        while k < len(wanted) and wanted[k] < m.start():
            out[wanted[k]] = stack[-1] if stack else -1
            k += 1
        if m.group(0) == "{":
            stack.append(m.start())
        elif stack:
            stack.pop()
    for pos in wanted[k:]:
        out[pos] = stack[-1] if stack else -1
    return out


def rewrite_member_address_spaces(code: str, source: str) -> str:
    """`float get() const device { ... }`: member functions qualified by the address space
    of their object. clang gives such qualifiers to member functions only in OpenCL's C++,
    so here every member function takes its object in the default space, which holds
    objects of every space (metal_stdlib.h): the qualifier is dropped. Overloads of one
    member for several spaces (MLX writes one per space, with the same body) become one
    function when their bodies are the same text; bodies that differ are refused, since
    the emulator could not choose between them by the object's space."""
    found = list(_MEMBER_SPACE.finditer(code))
    found = [m for m in found if re.search(r"\b(?:" + "|".join(_ADDRESS_SPACES) + r")\b",
                                           m.group(1))]
    if not found:
        return code
    enclosing = _enclosing_braces(code, [m.start() for m in found])
    groups: dict[tuple[int, str], list[tuple[re.Match, int, int]]] = {}
    for m in found:
        start = _declaration_start(code, m.start())
        end = _member_end(code, m.end())
        header = " ".join(code[start:m.start() + 1].split())
        quals = " ".join(q for q in m.group(1).split() if q not in _ADDRESS_SPACES)
        groups.setdefault((enclosing[m.start()], header + " " + quals), []).append(
            (m, start, end))
    edits: list[tuple[int, int, str]] = []
    for (_, header), members in groups.items():
        bodies = {" ".join(code[m.end():end].split()) for m, _, end in members}
        if len(bodies) > 1:
            lines = [line_of(code, m.start()) for m, _, _ in members]
            name = re.search(r"(operator\b.*|[~\w:]+)\s*$", header[: header.find("(")])
            raise MSLCompileError(
                f"member function '{name.group(1) if name else header}' is overloaded on "
                f"the address space of its object (MSL lines {', '.join(map(str, lines))}) "
                "with different bodies; the emulator gives every member function its object "
                "in one address space, so it cannot choose between them",
                kernel=None, line=lines[1],
                source_line=source_line(source, lines[1]))
        for i, (m, start, end) in enumerate(members):
            if i == 0:   # the one kept: its qualifier dropped, const kept
                kept = re.sub(r"\b(?:" + "|".join(_ADDRESS_SPACES) + r")\b",
                              lambda q: " " * len(q.group(0)), m.group(1))
                edits.append((m.start() + 1, m.end(), kept))
            else:        # the same body again: blanked, lines kept
                edits.append((start, end, _blank(code[start:end])))
    out, last = [], 0
    for a, b, text in sorted(edits):
        out.append(code[last:a])
        out.append(text)
        last = b
    out.append(code[last:])
    return "".join(out)


# The `__metal_*` builtins the shim provides (include/mt_builtins.h); any other is refused.
_BUILTINS_HEADER = strip_comments(
    (Path(__file__).parent / "include" / "mt_builtins.h").read_text())
METAL_BUILTINS = frozenset(
    {f"__metal_{n}" for n in re.findall(r"(?<!define )__MT_METAL_MATH\d\((\w+)\)",
                                        _BUILTINS_HEADER)}
    | set(re.findall(r"\b(__metal_\w+)\s*\(", _BUILTINS_HEADER)))
_METAL_BUILTIN = re.compile(r"\b__metal_\w+")


def refuse_unknown_builtins(code: str, source: str) -> None:
    """An Apple-internal `__metal_*` builtin the shim does not provide is an MSLCompileError
    naming it and its MSL line."""
    for m in _METAL_BUILTIN.finditer(code):
        if m.group(0) not in METAL_BUILTINS:
            line = line_of(code, m.start())
            raise MSLCompileError(
                f"'{m.group(0)}' is an Apple-internal builtin of <metal_stdlib> that the "
                "emulator does not provide (it provides the __metal_* math and simd builtins "
                "that have an MSL function of the same name: docs/emulator.md)",
                kernel=None, line=line, source_line=source_line(source, line))


# `constant const int64_t strides[2]` as a function parameter: an array parameter in an
# address space (MLX's elem_to_loc helpers).
_ARRAY_PARAMETER = re.compile(
    r"([(,]\s*)((?:const\s+)?\b(?:constant|device|threadgroup|thread)\b[^,()\[\];{}=*]*?)"
    r"\b([A-Za-z_]\w*)\s*\[[^\[\]]*\]\s*(?=[,)]|\[\[)")


def rewrite_array_parameters(code: str) -> str:
    """`f(constant const int64_t strides[2])` -> `f(constant const int64_t* strides)`: C++
    adjusts an array parameter to a pointer, as MSL does, but clang refuses the address
    space on the array type before adjusting it (outside OpenCL), so the rewrite writes the
    adjusted type. Also for a kernel's `constant float v[2] [[buffer(1)]]` (a pointer to
    buffer 1); an array of pointers is an array of buffers (rewrite_buffer_arrays)."""
    return _ARRAY_PARAMETER.sub(lambda m: f"{m.group(1)}{m.group(2)}* {m.group(3)}", code)


# MSL string literals are `constant char[N]`; C++'s are in the default address space.
_CONSTANT_CHARS = re.compile(r"\bconstant\s+(?:const\s+)?char\s*\*")


def rewrite_string_pointers(code: str) -> str:
    """`constant char*` -> `const char*`, so that string literals (MSL: in the constant
    address space; C++: in the default one) bind to it, as they do in MSL."""
    return _CONSTANT_CHARS.sub("const char*", code)


_STATIC_CAST = re.compile(r"\bstatic_cast\s*<")


def rewrite_value_casts(code: str) -> str:
    """`static_cast<T>(x)` with a value type T -> `metal::__mt::value_cast<T>(x)` (mt_types.h):
    MSL's explicit conversions between half and bfloat, and lane by lane between vectors,
    which C++ refuses or bit-casts. Casts to pointers and references are left alone."""
    out, last = [], 0
    for m in _STATIC_CAST.finditer(code):
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"<": 1, ">": -1}.get(code[i], 0)
            i += 1
        target = code[m.end():i - 1].strip()
        if depth or target.endswith(("*", "&")):
            continue
        out.append(code[last:m.start()])
        out.append("metal::__mt::value_cast<")
        last = m.end()
    out.append(code[last:])
    return "".join(out)


_CONTINUED_LINE = re.compile(r"[^\n]*\\\n(?:[^\n]*\\\n)*[^\n]*")


def join_continuations(code: str) -> str:
    """Backslash-continued lines (macro definitions) joined into one line, the line breaks
    moved after it: later rewrites see a macro body as one line, and every line after it
    keeps its number."""
    def one(m: re.Match) -> str:
        n = m.group(0).count("\\\n")
        return m.group(0).replace("\\\n", " ") + "\n" * n
    return _CONTINUED_LINE.sub(one, code)


def _kernel_before(kernels: dict[str, KernelSignature], line: int) -> str | None:
    best = [k for k in kernels.values() if k.line <= line]
    return max(best, key=lambda k: k.line).name if best else None


def _refuse(source: str, line: int, reason: str, kernels: dict[str, KernelSignature],
            kernel: str | None = None) -> MSLCompileError:
    return MSLCompileError(reason, kernel=_kernel_before(kernels, line) or kernel, line=line,
                           source_line=source_line(source, line))


def translate(source: str, kernel_hint: str | None = None,
              function_constants: dict | None = None,
              threadgroup_memory: dict | None = None, declared=None) -> Translation:
    """Rewrite MSL `source` into the C++ the emulator compiles (see the module docstring)
    and read its kernel signatures from clang's AST (signature.py). `kernel_hint` names
    the kernel in a compile error when the source has no readable signatures;
    `function_constants` gives the values of `[[function_constant(i)]]` by index and
    `threadgroup_memory` the byte lengths of `[[threadgroup(i)]]` parameters by index;
    `declared`, the kernels' declarations as the MSL's printer states them, replaces
    clang's reading of them where they check out (signature.declared_kernels)."""
    code = strip_comments(source)
    refuse_host_access(code, source, kernel_hint)
    cast = _VECTOR_CAST.search(code)
    cast_line = line_of(code, cast.start()) if cast else 0
    code = _INCLUDE.sub(lambda m: "", code)
    code = _UNROLL_HINT.sub(lambda m: "", code)
    refuse_unknown_builtins(code, source)
    code = join_continuations(code)
    constants: dict = {}
    code = rewrite_function_constants(code, source, dict(function_constants or {}),
                                      kernel_hint, constants)
    code = rewrite_member_address_spaces(code, source)
    code = rewrite_array_parameters(code)
    code = rewrite_value_casts(code)
    code = rewrite_string_pointers(code)
    code = _FLOAT_LITERAL.sub(_rewrite_literal, code)
    def make_vec(m: re.Match) -> str:
        if m.string[max(0, m.start() - 40):m.start()].rstrip().endswith("operator"):
            return m.group(0)          # `operator vec<T, 2>()`: a conversion, not a call
        return f"metal::__mt_make_vec<{m.group(1)}, {m.group(2)}>("

    code = _VECTOR_CTOR.sub(make_vec, code)
    code = _VEC_TEMPLATE_CTOR.sub(make_vec, code)
    code = rewrite_attributes(code)
    code = rewrite_buffer_arrays(code)
    code = rewrite_instantiations(code)
    code = rewrite_site_overloads(code)
    code = rewrite_threadgroup_initializers(code)

    tg_vars: dict[int, str] = {}

    def threadgroup_decl(m: re.Match) -> str:
        slot = len(tg_vars)
        ctype, name, dims = " ".join(m.group(1).split()), m.group(2), "".join(m.group(3).split())
        tg_vars[slot] = name
        t = f"__mt_tg_type_{slot}"
        # the type keeps its address space, so overloads on `threadgroup` pick it; a
        # C-style cast is the only one that may give the arena's storage that space
        if not dims:   # a scalar or struct: a reference to the shared object
            return (f"using {t} = threadgroup {ctype}; {t}& {name} = *({t}*)("
                    f"__mt_tg_slot({slot}, sizeof({t}), alignof({t})));"
                    + "\n" * m.group(0).count("\n"))
        # an array: a pointer to its first element (row), so the checker's red zones, not
        # the thread-array bounds checks, judge its outermost index
        return (f"using {t} = threadgroup {ctype} {dims}; std::decay_t<{t}> const {name} = "
                f"*({t}*)(__mt_tg_slot({slot}, sizeof({t}), alignof({t})));"
                + "\n" * m.group(0).count("\n"))

    views: dict[str, list[str]] = {}
    for m in _THREADGROUP_VIEW.finditer(code):
        views.setdefault(m.group(2), []).append(m.group(1))
    code = _THREADGROUP_DECL.sub(threadgroup_decl, code)
    cpp = PRELUDE + code
    translation = Translation(
        cpp=cpp, source=source, kernels={}, threadgroup_vars=tg_vars,
        threadgroup_views={array: names[0] for array, names in views.items()
                           if len(names) == 1 and array in tg_vars.values()},
        function_constants=constants)
    try:
        translation.kernels = read_kernels(translation, kernel_hint, declared)
    except MSLCompileError as unreadable:
        if not cast:
            raise
        # clang's own complaint about a construct refused below is less precise than ours
        translation.kernels, failed_kernel = {}, unreadable.kernel
    else:
        failed_kernel = None
    for i, length in sorted((threadgroup_memory or {}).items()):
        slot = len(tg_vars) + len(translation.threadgroup_params)
        translation.threadgroup_params[int(i)] = (slot, int(length))
        names = sorted({p.name for k in translation.kernels.values() for p in k.params
                        if p.threadgroup_index == int(i)})
        tg_vars[slot] = "/".join(names) or f"[[threadgroup({i})]]"
    if cast:
        raise _refuse(
            source, cast_line,
            f"C-style cast to {cast.group(1)}: the emulator rejects C-style casts between vector "
            f"types (C++ would reinterpret the bits); write the constructor {cast.group(1)}(x)",
            translation.kernels, failed_kernel)
    return translation
