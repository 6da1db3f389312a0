"""Kernel signatures read from clang's AST of the translated MSL.

Contract: `read_kernels(translation, kernel_hint)` returns the `KernelSignature` of every
kernel of the translated source (translate.py; the types are in translation.py), by the
name the host calls it by. It runs clang on the translated source (`-ast-dump=json`, the
same flags and precompiled shim as a plain build),
so qualifiers, attributes, macros, typedefs and line breaks are read the way the compiler
reads them. MSL attributes reach the AST as `clang::annotate("metal", name, args...)`
(translate.rewrite_attributes); the `kernel` keyword is one of them (metal_stdlib.h).

A kernel parameter is bound by `[[buffer(i)]]`, `[[threadgroup(i)]]` or a thread-position
attribute (a pointer without one is a buffer, numbered in order); anything
else on a kernel parameter is an `MSLCompileError` naming the parameter, the attribute and
the MSL line, as is MSL that does not compile. Results are cached on disk by the hash of
the translated source.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

from core.errors import MSLCompileError

from .build import cache_dir, compile_error, default_builder
from .translation import (POSITION_ATTRIBUTES, PRELUDE_LINES, KernelParam, KernelSignature,
                          Translation)

# The cache key covers this reader's own code: a changed reader never reads old results.
_READER_VERSION = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
# Declarations whose children can hold kernels.
_SCOPES = {"NamespaceDecl", "LinkageSpecDecl"}


def read_kernels(translation: Translation, kernel_hint: str | None = None,
                 declared=None) -> dict[str, KernelSignature]:
    """`declared`: the kernels' declarations as the program that printed the MSL states
    them (see declared_kernels); taken instead of clang's AST when they check out."""
    if declared:
        kernels = declared_kernels(declared, translation)
        if kernels is not None:
            return kernels
    builder = default_builder()
    key = builder.cache_key(_READER_VERSION, translation.cpp)
    path = cache_dir() / f"signature-{key}.json"
    cached = _load(path)
    if cached is not None:
        return cached
    short = None if translation.function_constants else without_kernel_bodies(translation.cpp)
    code, out, err = builder.syntax_tree(short, kernel_hint) if short else (1, "", "")
    if code != 0:   # not shortened, or clang refused it: the source as it is says why
        code, out, err = builder.syntax_tree(translation.cpp, kernel_hint)
    if code != 0:
        raise compile_error(err, translation.cpp, translation, kernel_hint)
    kernels = _kernels(json.loads(out), translation)
    _store(path, kernels)
    return kernels


# -- declarations stated by the MSL's printer ----------------------------------------------

# MSL's address spaces as clang spells them in a parameter's type (include/metal_stdlib.h:
# `device` is opencl_global, `threadgroup` opencl_local, `constant` const opencl_private,
# `thread` nothing).
_SPELLED_SPACES = {"device": ("__global",), "threadgroup": ("__local",),
                   "constant": ("const", "__private"), "thread": ()}
_DECLARED_TYPE = re.compile(r"(const\s+)?(?:(device|threadgroup|constant|thread)\s+)?"
                            r"(const\s+)?([A-Za-z_]\w*)\s*([*&]?)")


def _clang_spelling(msl_type: str) -> tuple[str, bool] | None:
    """(clang's spelling of an MSL parameter type, whether it is a reference) for the
    forms `[const] [space] [const] T[*|&]`; None for any other."""
    m = _DECLARED_TYPE.fullmatch(msl_type.strip())
    if m is None:
        return None
    const, space, const_after, base, declarator = m.groups()
    words = ["const"] if const or const_after else []
    for w in _SPELLED_SPACES.get(space, ()):
        if w not in words:
            words.append(w)
    words.append(base)
    return " ".join(words) + (f" {declarator}" if declarator else ""), declarator == "&"


def declared_kernels(declared, translation: Translation) -> dict[str, KernelSignature] | None:
    """The signatures of kernels whose declarations the program that printed the MSL
    states (metaltile's printer, core/codegen/msl.py: `KernelSpec.line` and `.params`),
    without running clang: `declared` is a sequence of objects with `name`,
    `max_total_threads`, `line` (the MSL line of the kernel's name) and `params`, each
    with `name`, `type` (as written in MSL), `attribute` ("buffer" or a thread-position
    attribute), `index` and `line`. They give the same signatures as clang's AST
    (suites/emu/test_signature.py checks every bench kernel). None -- read them with
    clang -- unless every kernel of the source is declared and each declaration is where
    it says in the source (a kernel's name on its line, each parameter's name and
    attribute on the following lines, one each, the last one closing the list), in a
    source without function constants or macros, and every
    type is of a form spelled here; so a declaration that does not belong to the source
    (the MSL was edited after printing) is never taken."""
    source = translation.source
    if translation.function_constants or "#define" in source:
        return None
    lines = source.splitlines()
    kernels: dict[str, KernelSignature] = {}
    for k in declared:
        n = len(k.params)
        if not 0 < k.line <= len(lines) - n or f" void {k.name}(" not in lines[k.line - 1] \
                or (n == 0 and not lines[k.line - 1].rstrip().endswith("() {")):
            return None
        params = []
        for j, p in enumerate(k.params):
            spelled = _clang_spelling(p.type)
            index = "" if p.index is None else f"({p.index})"
            # the printer's layout: one parameter per line after the kernel's name, the
            # last one closing the list, so a parameter left out is noticed too
            text = lines[k.line + j].rstrip()
            if spelled is None or p.line != k.line + 1 + j or \
                    f" {p.name} [[{p.attribute}{index}]]" not in text or \
                    not text.endswith("," if j + 1 < n else ") {"):
                return None
            ctype, reference = spelled
            if p.attribute == "buffer" and p.index is not None:
                params.append(KernelParam(p.name, ctype, p.index, None, p.line, reference))
            elif p.attribute in POSITION_ATTRIBUTES and p.index is None and not reference:
                params.append(KernelParam(p.name, ctype, None, p.attribute, p.line))
            else:
                return None
        kernels[k.name] = KernelSignature(k.name, tuple(params), k.max_total_threads,
                                          k.line, "&::" + k.name)
    if len(kernels) != len(_KERNEL_HEAD.findall(translation.cpp)):
        return None   # a kernel the declarations leave out (or name twice)
    return kernels


# A kernel's head: the `kernel` keyword (a macro of the shim) or the [[kernel]] attribute as
# translate.rewrite_attributes writes it.
_KERNEL_HEAD = re.compile(r'(?<![\w"])kernel(?![\w"])|"metal", "kernel"\)')
_BLANK = re.compile(r"[^\n]")


def without_kernel_bodies(cpp: str) -> str | None:
    """The translated source with the body of every kernel function blanked, for the AST
    the signatures are read from: a kernel's signature is its declaration, and its body was
    most of clang's JSON (a 3 KB softmax kernel: 1.25 MB with it, 27 KB without, and the
    read about a third faster, docs/emulator.md). None when that is not
    certain to read the same: a source with macros (`#define` could hide braces or
    declarations), a kernel that is a template (its instantiation needs the body), a
    body whose braces do not balance. Bodies are needed for the function constants a
    kernel reads, so read_kernels keeps them when the source has any. The body is
    blanked, not removed: every other byte keeps its offset, which the reader maps to
    MSL lines."""
    if "#define" in cpp or not _KERNEL_HEAD.search(cpp):
        return None
    out, at, depth, head = [], 0, 0, 0   # head: where the current top-level declaration began
    i, n = 0, len(cpp)
    while i < n:
        c = cpp[i]
        if c in "\"'":   # a string or character literal (comments are already blanked)
            j = i + 1
            while j < n and cpp[j] != c:
                j += 2 if cpp[j] == "\\" else 1
            i = j + 1
            continue
        if c == "#" and (i == 0 or cpp[i - 1] == "\n"):   # a directive line: not code
            end = cpp.find("\n", i)
            i = n if end < 0 else end
            continue
        if c == "{" and depth == 0:
            decl = cpp[head:i]
            if _KERNEL_HEAD.search(decl) and "template" not in decl:
                close = _matching_brace(cpp, i)
                if close is None:
                    return None
                body = cpp[i + 1:close]
                out += [cpp[at:i + 1], _BLANK.sub(" ", body)]
                at = close                   # the closing brace is kept
                i = head = close + 1
                continue
            depth = 1
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                return None
            if depth == 0:
                head = i + 1
        elif c == ";" and depth == 0:
            head = i + 1
        i += 1
    if depth != 0 or not out:
        return None
    return "".join(out) + cpp[at:]


def _matching_brace(cpp: str, start: int) -> int | None:
    """The index of the `}` closing the `{` at `start` (literals skipped), else None."""
    depth, i, n = 0, start, len(cpp)
    while i < n:
        c = cpp[i]
        if c in "\"'":
            j = i + 1
            while j < n and cpp[j] != c:
                j += 2 if cpp[j] == "\\" else 1
            i = j + 1
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _load(path: Path) -> dict[str, KernelSignature] | None:
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return {k["name"]: KernelSignature(
        k["name"], tuple(KernelParam(**p) for p in k["params"]), k["max_total_threads"],
        k["line"], k["call"], tuple(k["constants_read"])) for k in rows}


def _store(path: Path, kernels: dict[str, KernelSignature]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps([asdict(k) for k in kernels.values()]))
    os.replace(tmp, path)   # atomic: concurrent readers see the old file or the new one


# -- reading the AST ------------------------------------------------------------------------

def _offset(loc: dict) -> int | None:
    """Byte offset of a location in the translated source (a macro's: where it expands)."""
    if "expansionLoc" in loc:
        loc = loc["expansionLoc"]
    return loc.get("offset")


def _value(node: dict):
    """The constant an annotation argument evaluates to (int or str)."""
    if node.get("kind") == "StringLiteral":
        return json.loads(node["value"])
    if node.get("kind") == "ConstantExpr" and node.get("value", "").lstrip("-").isdigit():
        return int(node["value"])
    if node.get("kind") == "ConstantExpr" and node.get("value") in ("true", "false"):
        return node["value"] == "true"
    for child in node.get("inner", []):
        return _value(child)
    return None


def _attributes(node: dict) -> list[tuple[str, list]]:
    """The MSL attributes on a declaration: [(name, [argument values])]. The annotation's
    own string ("metal") is not in clang's JSON; its first argument is the attribute name."""
    found = []
    for child in node.get("inner", []):
        if child.get("kind") != "AnnotateAttr":
            continue
        args = [_value(a) for a in child.get("inner", [])]
        if args and isinstance(args[0], str):
            found.append((args[0], args[1:]))
    return found


def _declarations(node: dict, scope: str = ""):
    """(scope, declaration) for the functions and variables of the source, in namespaces."""
    for child in node.get("inner", []):
        kind = child.get("kind")
        if kind in _SCOPES:
            inner = f"{scope}{child['name']}::" if child.get("name") else scope
            yield from _declarations(child, inner)
        elif kind in ("FunctionDecl", "VarDecl") and not child.get("isImplicit"):
            yield scope, child


def _functions_by_id(node: dict, found: dict) -> dict:
    """Every function declaration (template specializations too), by AST id."""
    if node.get("kind") == "FunctionDecl" and "id" in node:
        if "inner" in node or node["id"] not in found:
            found[node["id"]] = node
    for child in node.get("inner", []):
        if child.get("kind") in _SCOPES or child.get("kind") in (
                "FunctionTemplateDecl", "FunctionDecl", "TranslationUnitDecl"):
            _functions_by_id(child, found)
    return found


_CALLABLES = ("FunctionDecl", "CXXMethodDecl", "CXXConstructorDecl", "CXXConversionDecl",
              "CXXDestructorDecl")
_HOLDERS = (*_SCOPES, "TranslationUnitDecl", "FunctionTemplateDecl", "CXXRecordDecl",
            "ClassTemplateDecl", "ClassTemplateSpecializationDecl",
            "ClassTemplatePartialSpecializationDecl")


def _callables_by_id(node: dict, found: dict) -> dict:
    """Every function and member function with a body (template specializations too), by
    AST id."""
    if node.get("kind") in _CALLABLES and "id" in node and "inner" in node:
        found[node["id"]] = node
    for child in node.get("inner", []):
        if child.get("kind") in _HOLDERS or child.get("kind") in _CALLABLES:
            _callables_by_id(child, found)
    return found


def _constants_read(fn: dict, callables: dict, constants) -> tuple[str, ...]:
    """The function constants `fn` reads, itself or through what it calls (by AST id), less
    those whose definedness the code asks about (`is_function_constant_defined(c)` becomes
    a read of `__mt_fc_defined_c`: such a read is guarded, as MSL's idiom
    `is_function_constant_defined(c) ? c : fallback` is)."""
    read, asked, seen, todo = set(), set(), {fn.get("id")}, [fn]
    while todo:
        stack = [todo.pop()]
        while stack:
            node = stack.pop()
            ref = node.get("referencedDecl") if node.get("kind") == "DeclRefExpr" else None
            target = ref.get("id") if ref else node.get("referencedMemberDecl")
            if ref and ref.get("kind") == "VarDecl":
                name = ref.get("name", "")
                if name in constants:
                    read.add(name)
                elif name.startswith("__mt_fc_defined_"):
                    asked.add(name[len("__mt_fc_defined_"):])
            elif target in callables and target not in seen:
                seen.add(target)
                todo.append(callables[target])
            stack.extend(node.get("inner", []))
    return tuple(sorted(read - asked))


def _referenced_function(node: dict) -> str | None:
    """The id of the function a variable's initializer (`&f<T>`) names."""
    ref = node.get("referencedDecl")
    if node.get("kind") == "DeclRefExpr" and ref and ref.get("kind") == "FunctionDecl":
        return ref["id"]
    for child in node.get("inner", []):
        found = _referenced_function(child)
        if found:
            return found
    return None


class _Lines:
    def __init__(self, translation: Translation):
        self.cpp = translation.cpp
        self.source_lines = translation.source.splitlines()

    def line(self, node: dict) -> int:
        offset = _offset(node.get("loc", {})) or 0
        return max(1, self.cpp.count("\n", 0, offset) + 1 - PRELUDE_LINES)

    def text(self, line: int) -> str | None:
        return self.source_lines[line - 1].rstrip() if 0 < line <= len(self.source_lines) else None


def _kernels(tree: dict, translation: Translation) -> dict[str, KernelSignature]:
    lines = _Lines(translation)
    functions = callables = None
    kernels: dict[str, KernelSignature] = {}
    for scope, decl in _declarations(tree):
        attrs = dict(_attributes(decl))
        if "kernel" not in attrs:
            continue
        line = lines.line(decl)
        if decl["kind"] == "VarDecl":            # a host_name instantiation (translate.py)
            functions = functions if functions is not None else _functions_by_id(tree, {})
            fn = functions.get(_referenced_function(decl) or "")
            if fn is None:
                raise MSLCompileError("cannot find the function this [[kernel]] "
                                      "instantiation names", kernel=None, line=line,
                                      source_line=lines.text(line))
            call = "::" + scope + decl["name"]
            attrs = {**dict(_attributes(fn)), **attrs}   # the template's own, e.g. max threads
        else:   # qualified from the global namespace: a kernel named `mix` beside
            # `using namespace metal;` is the source's own, not metal::mix
            fn, call = decl, "&::" + scope + decl["name"]
        name = attrs["host_name"][0] if attrs.get("host_name") else decl["name"]
        params = tuple(_param(p, i, name, lines) for i, p in enumerate(
            c for c in fn.get("inner", []) if c.get("kind") == "ParmVarDecl"))
        params = _number_unbound_buffers(params)
        seen: dict[int, str] = {}
        for p in params:
            for index in p.buffer_indices:
                if index in seen:
                    raise MSLCompileError(
                        f"parameters '{seen[index]}' and '{p.buffer_name(index)}' are both "
                        f"bound to [[buffer({index})]]", kernel=name, line=p.line,
                        source_line=lines.text(p.line))
                seen[index] = p.buffer_name(index)
        if name in kernels:
            raise MSLCompileError(f"two kernels are named '{name}'", kernel=name, line=line,
                                  source_line=lines.text(line))
        limit = attrs.get("max_total_threads_per_threadgroup")
        if translation.function_constants and callables is None:
            callables = _callables_by_id(tree, {})
        read = (_constants_read(fn, callables, translation.function_constants)
                if translation.function_constants else ())
        kernels[name] = KernelSignature(name, params, limit[0] if limit else None, line, call,
                                        read)
    return kernels


def _number_unbound_buffers(params: tuple[KernelParam, ...]) -> tuple[KernelParam, ...]:
    """Buffer parameters written without [[buffer(i)]] take, in order, the lowest indices
    no [[buffer(i)]] of the kernel names."""
    taken = {p.buffer_index for p in params if p.buffer_index is not None
             and p.buffer_index != _UNBOUND}
    free = (i for i in itertools.count() if i not in taken)
    return tuple(replace(p, buffer_index=next(free)) if p.buffer_index == _UNBOUND else p
                 for p in params)


_UNBOUND = -1   # a buffer parameter without [[buffer(i)]], numbered after reading them all
_TRAILING_QUALIFIERS = ("const", "volatile", "__restrict", "restrict", "__restrict__")


def _strip_qualifiers(ctype: str) -> str:
    """`const float *__restrict const` -> `const float *`: what the declarator ends in."""
    words = ctype.replace("*", " * ").replace("&", " & ").split()
    while words and words[-1] in _TRAILING_QUALIFIERS:
        words.pop()
    return " ".join(words)


def _param(node: dict, index: int, kernel: str, lines: _Lines) -> KernelParam:
    name = node.get("name") or f"#{index}"
    ctype = node["type"].get("desugaredQualType", node["type"]["qualType"])
    spelled = node["type"]["qualType"]
    line = lines.line(node)
    attrs = _attributes(node)
    where = dict(kernel=kernel, line=line, source_line=lines.text(line))
    if not attrs:
        core = _strip_qualifiers(ctype)
        if core.endswith("*") or core.endswith("&"):
            return KernelParam(name, spelled, _UNBOUND, None, line, core.endswith("&"))
        raise MSLCompileError(
            f"kernel parameter '{name}' has no attribute and is neither a pointer nor a "
            "reference; the emulator binds a parameter by [[buffer(i)]] (or, without one, in "
            "order as a buffer) or by its thread-position attribute", **where)
    length = dict(attrs).get("array_length")
    # `[[buffer(i), function_constant(c)]]`: the binding exists only when c is true (Metal
    # leaves it out of the pipeline otherwise, and the host need not set it)
    gate = dict(attrs).get("function_constant")
    absent = bool(gate) and gate[0] is False
    attrs = [(a, v) for a, v in attrs if a not in ("array_length", "function_constant")]
    attr, args = attrs[0]
    if length is not None:
        if attr != "buffer" or not length or not isinstance(length[0], int) or length[0] < 1:
            raise MSLCompileError(
                f"parameter '{name}': an array kernel parameter must be an array of buffers "
                "with a constant length and [[buffer(i)]]", **where)
        if not _strip_qualifiers(ctype).endswith("* *"):
            raise MSLCompileError(
                f"parameter '{name}': an array of buffers must hold pointers "
                f"(e.g. device float* {name}[N] [[buffer(i)]])", **where)
        if not args or not isinstance(args[0], int) or args[0] < 0:
            raise MSLCompileError(f"parameter '{name}': [[buffer(...)]] needs a constant index "
                                  "(0 or more)", **where)
        return KernelParam(name, spelled, args[0], None, line, False, None, length[0])
    if attr == "buffer":
        if len(args) != 1 or not isinstance(args[0], int) or args[0] < 0:
            raise MSLCompileError(f"parameter '{name}': [[buffer(...)]] needs a constant index "
                                  "(0 or more)", **where)
        core = _strip_qualifiers(ctype)
        reference = core.endswith("&")
        if not (reference or core.endswith("*")):
            raise MSLCompileError(
                f"parameter '{name}' is bound to [[buffer({args[0]})]] but is neither a pointer "
                "nor a reference (MSL requires one of them)", **where)
        return KernelParam(name, spelled, args[0], None, line, reference, absent=absent)
    if attr in POSITION_ATTRIBUTES:
        return KernelParam(name, spelled, None, attr, line)
    if attr == "threadgroup":
        if len(args) != 1 or not isinstance(args[0], int) or not _strip_qualifiers(
                ctype).endswith("*"):
            raise MSLCompileError(
                f"parameter '{name}': [[threadgroup(i)]] needs a constant index on a pointer",
                **where)
        return KernelParam(name, spelled, None, None, line, False, args[0])
    shown = f"{attr}({', '.join(map(str, args))})" if args else attr
    raise MSLCompileError(
        f"parameter '{name}': the attribute [[{shown}]] is not supported by the emulator "
        "(supported: buffer(i), threadgroup(i) and the thread-position attributes "
        + ", ".join(sorted(POSITION_ATTRIBUTES)) + ")", **where)
