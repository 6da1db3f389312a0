"""Build an MSL library into what the emulator runs, with a content-hash cache.

Artifacts, each cached under the user cache directory by the hash of everything that goes
into it (toolchain, flags, shim headers, runtime sources, translated MSL):

- the runtime objects (src/*.cpp: job loading, scheduler, checker, hooks, results; one
  object per file, and one per program entry in src/entry/), built once per toolchain;
- the launch host (Linux, host CPU): the runtime objects and src/entry/host.cpp linked
  once into the program that runs every kernel (src/launch.cpp), exporting the runtime's
  symbols;
- the precompiled shim header (include/metal_stdlib.h), built once per flavour; it is what
  brings a kernel build to about half a second;
- the kernel: the translated MSL plus its launcher, compiled against the PCH, its object
  checked (admission.py), then linked on its own into a shared object the host loads
  (`kernel-KEY.so`: no library on its link line, its undefined symbols are the host's),
  or, where the host is not used (`Builder.loads_libraries`: another CPU under qemu-user,
  macOS), with the runtime objects into an executable (`kernel-KEY.bin`).

Flavours: "checked" builds add clang's thread-sanitizer instrumentation (no sanitizer
runtime: src/hooks.cpp defines the hooks) and line tables for mapping findings to MSL
lines; "plain" builds have neither and serve runs without checks or counters.

Every artifact is written to a temporary name and renamed into place, so concurrent
builds of the same kernel (two processes, two pytest workers) both succeed. Compiler
errors become `MSLCompileError`s with the MSL line.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from core.cache import cache_root
from core.errors import MSLCompileError, ToolchainError
from core.target import METAL

from . import admission, clang_server, cross, launcher, stages
from .toolchain import Toolchain, find_toolchain
from .translation import SOURCE_NAME, Translation

HERE = Path(__file__).resolve().parent
INCLUDE_DIR = HERE / "include"
RUNTIME_DIR = HERE / "src"
RUNTIME_UNITS = tuple(sorted(RUNTIME_DIR.glob("*.cpp")))  # one object each
# The `main` of each program made of the runtime objects (src/launch.cpp).
HOST_ENTRY = RUNTIME_DIR / "entry" / "host.cpp"
EXECUTABLE_ENTRY = RUNTIME_DIR / "entry" / "executable.cpp"
RUNTIME_SOURCES = (*RUNTIME_UNITS, HOST_ENTRY, EXECUTABLE_ENTRY,
                   *sorted(RUNTIME_DIR.glob("*.h")),
                   INCLUDE_DIR / "mt_runtime.h", INCLUDE_DIR / "mt_target.h")
# Kernels are shared objects loaded by the launch host where it runs (Linux, this CPU);
# tests switch it off to run the executable path (cross targets, macOS) here.
LAUNCH_HOST = True

# MSL semantics the flags implement: no double (literals are rewritten to float), 32-bit
# integer wraparound (-fwrapv), half and bfloat rounding after every operation (excess
# precision off), a*b+c contracted into a fused multiply-add as Metal's compiler contracts
# it in the math mode (-ffp-contract, core/target.py), hardware half conversions on x86
# (-mf16c), and thread variables that start
# as a poison pattern (-ftrivial-auto-var-init=pattern: float and half NaN, integers 0xAA
# bytes): in MSL an uninitialized variable only holds an unspecified value, while in C++
# reading it is undefined behaviour the optimizer exploits (TVM's all-reduce reads one on
# inactive lanes, and -O1 then deletes the branch guarding a threadgroup load); the pattern
# makes the read defined, and a result built from it visible (NaN), where zero hid it
# (docs/emulator.md: why it is not a finding); and pointer casts between element types
# that read the same bytes as another type (-fno-strict-aliasing), which MSL allows and
# TileLang's half/bfloat `uint4` carriers rely on; and a signed `char`, as MSL's (arm64
# Linux makes a plain char unsigned, x86-64 and Apple's arm64 ABI signed).
COMMON_FLAGS = [
    "-std=c++17", "-O1", "-fwrapv", "-fno-exceptions", "-fno-rtti",
    "-fexcess-precision=16", "-fno-pie", "-pthread", "-ftrivial-auto-var-init=pattern",
    "-fno-strict-aliasing", "-fsigned-char",
    "-Wno-unknown-attributes", "-Wno-duplicate-decl-specifier", "-Wno-ignored-attributes",
    "-Werror=vector-conversion",  # MSL has no implicit conversion between vector types
]
# Checked builds: thread-sanitizer instrumentation (the checker's hooks) and array-bounds
# checks on every index into an array of known size (thread arrays, struct members), which
# stop the run with a bounds report (src/crash.cpp) before the access.
CHECKED_FLAGS = [
    "-fsanitize=thread,array-bounds", "-fno-sanitize-recover=array-bounds",
    "-mllvm", "-tsan-instrument-atomics=0",
    "-mllvm", "-tsan-instrument-func-entry-exit=0", "-gline-tables-only",
]
RUNTIME_FLAGS = ["-std=c++17", "-O2", "-fno-pie", "-Wall", "-Wno-unused-function"]


def _arch_flags() -> list[str]:
    if cross.target():  # another CPU (cross.py): its own defaults, no x86 extensions
        return cross.compile_flags()
    if platform.machine() not in ("x86_64", "AMD64"):
        return []   # arm64 has fused multiply-add in its base instruction set
    # -mfma: without the instruction clang splits a contracted a*b+c into two roundings
    return ["-mf16c", "-mfma"] if _x86_has_fma() else ["-mf16c"]


@functools.lru_cache(maxsize=1)
def _x86_has_fma() -> bool:
    """Whether this x86-64 CPU has FMA3 (Linux: /proc/cpuinfo; elsewhere assumed, as every
    x86 Mac since 2013 has it). Without it a*b+c rounds twice (docs/emulator.md)."""
    try:
        return " fma " in f" {Path('/proc/cpuinfo').read_text()} ".replace("\n", " ")
    except OSError:
        return True


def _arm64() -> bool:
    t = cross.target()
    return t.startswith("aarch64") if t else platform.machine() in ("arm64", "aarch64")


def _address_space_flags(toolchain: Toolchain) -> list[str]:
    """MSL's address spaces are type qualifiers (include/metal_stdlib.h) under SYCL's
    conversion rules, which clang applies with -fsycl-is-device; that mode mangles some
    types (bfloat) for its "host" target, which must then be named (the same target)."""
    triple = cross.target() or _default_triple(toolchain.cxx)
    return ["-Xclang", "-fsycl-is-device", "-Xclang", "-aux-triple", "-Xclang", triple]


@functools.lru_cache(maxsize=None)
def _default_triple(cxx: str) -> str:
    res = subprocess.run([cxx, "-print-target-triple"], capture_output=True, text=True,
                         timeout=60, check=False)
    triple = res.stdout.strip()
    if res.returncode != 0 or not triple:
        raise ToolchainError(f"{cxx} -print-target-triple failed: {res.stderr.strip()}",
                             construct="emulator toolchain")
    return triple


def _link_flags() -> list[str]:
    return ["-no-pie", "-pthread"] if sys.platform.startswith("linux") else ["-pthread"]


# A kernel's shared object: no C or C++ library (-nodefaultlibs: the host has them, and
# its symbols are what the kernel's undefined ones bind to), every reference the kernel's
# code makes to a function it defines itself bound to its own (-Bsymbolic: an inline
# function of the C++ headers, exported with default visibility, would otherwise bind to
# the host's uninstrumented copy), and every binding made when it is loaded (-z now).
_LIBRARY_LINK_FLAGS = ["-shared", "-nodefaultlibs", "-Wl,-Bsymbolic", "-Wl,-z,now"]
# The launch host: the runtime's symbols exported for the kernels (-rdynamic), the math
# library kept even though the runtime calls little of it (a kernel's sinf binds to it).
_HOST_LINK_FLAGS = ["-rdynamic", "-Wl,--no-as-needed", "-lm", "-ldl"]


@functools.lru_cache(maxsize=None)
def _fast_linker() -> list[str]:
    """The driver flag choosing a faster linker than GNU ld where one is installed (Linux,
    host builds): lld, else gold. A kernel's link reads the runtime objects and the C++
    library again for every kernel; measured on a fuzz kernel on the 2-core machine under
    load, GNU ld 181-269 ms, gold 66-86 ms (docs/emulator.md). The executable does the
    same: the linker only places the same objects."""
    if not sys.platform.startswith("linux") or cross.target():
        return []
    for name, flag in (("ld.lld", "-fuse-ld=lld"), ("ld.gold", "-fuse-ld=gold")):
        if shutil.which(name):
            return [flag]
    return []


def cache_dir() -> Path:
    path = cache_root() / "emu"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class Executable:
    """A built kernel library: `path` is the kernel's shared object, which the launch host
    `host` loads, or (host None) an executable holding the kernels and the runtime."""

    path: Path
    translation: Translation
    checked: bool
    host: Path | None = None


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:24]


def _files_digest(paths) -> str:
    return _digest(*(p.read_bytes() for p in sorted(paths)))


COMPILE_TIMEOUT = 300.0   # seconds one clang invocation may take


def _run_compiler(cmd: list[str], what: str, kernel: str | None = None,
                  stdin: str | None = None, server=None) -> subprocess.CompletedProcess:
    """Run clang (through `server`, a clang_server.ClangServer, where it serves); a clang
    that cannot start is a ToolchainError, one past COMPILE_TIMEOUT an MSLCompileError
    naming the kernel (for a kernel's build) or a ToolchainError (for the shared
    artifacts)."""
    try:
        served = server.run(cmd, stdin, COMPILE_TIMEOUT) if server is not None else None
        if served is not None:
            return served
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                              timeout=COMPILE_TIMEOUT, check=False)
    except OSError as e:
        raise ToolchainError(f"cannot run {cmd[0]}: {e}", construct=what) from e
    except subprocess.TimeoutExpired:
        message = (f"clang did not finish the {what} within {COMPILE_TIMEOUT:g} s (a very "
                   "large source or a runaway template or constexpr evaluation?)")
        if what.startswith("MSL"):
            raise MSLCompileError(message, kernel=kernel) from None
        raise ToolchainError(message, construct=what) from None


@contextlib.contextmanager
def _build_lock(target: Path):
    """An exclusive lock on `target`'s build, across processes (a lock file beside it;
    without fcntl, no lock: both build, and the atomic rename keeps that correct)."""
    try:
        import fcntl
    except ImportError:   # pragma: no cover - not POSIX
        yield
        return
    with open(target.with_name(target.name + ".lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _atomic_target(target: Path) -> Path:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".tmp")
    os.close(fd)
    return Path(tmp)


class Builder:
    """Builds and caches emulator executables for one toolchain."""

    def __init__(self, toolchain: Toolchain | None = None):
        self.toolchain = toolchain or find_toolchain()
        tc = self.toolchain
        # The PCH records the headers' absolute paths, so a checkout elsewhere (CI's clone)
        # gets its own artifacts.
        self._tool_tag = _digest(tc.cxx, ".".join(map(str, tc.version)), platform.machine(),
                                 str(INCLUDE_DIR), cross.target() or "host")
        self._headers = _files_digest(INCLUDE_DIR.glob("*.h"))
        # Read once, as the headers: hashing the runtime's sources on every launch cost
        # more than the rest of a launch's Python side.
        self._runtime = _files_digest((*RUNTIME_SOURCES, Path(admission.__file__)))
        self._runtime_symbols: frozenset[str] | None = None   # what the runtime defines
        self._host: Path | None = None                         # see launch_host
        self._linkers: dict[tuple, list[str] | None] = {}      # see _link_command
        self._server_library: Path | bool | None = None        # see clang_server

    # -- shared artifacts ---------------------------------------------------------------

    @staticmethod
    def loads_libraries() -> bool:
        """Whether kernels are shared objects the launch host loads (Linux, this CPU), not
        executables of their own (another CPU under qemu-user, whose launches are
        processes of their own; macOS, whose loading the host does not know)."""
        return LAUNCH_HOST and sys.platform.startswith("linux") and not cross.target()

    def _flags(self, checked: bool, math_mode: str = METAL.math_mode) -> list[str]:
        # a*b + c fused as Metal's compiler fuses it in that math mode (core/target.py)
        common = [*COMMON_FLAGS, f"-ffp-contract={METAL.contraction(math_mode)}"]
        if self.loads_libraries():
            # A shared object's code is position-independent; hidden by default, the
            # kernel's own functions and data are reached directly, as in an executable
            # (the launcher's table is exported by name: launcher.py). Only the addressing
            # changes: the outputs, findings and counters are the executable's
            # (`harness emu-against`).
            common = [f for f in common if f != "-fno-pie"] + ["-fPIC", "-fvisibility=hidden"]
        if _arm64():
            # clang's driver takes -fexcess-precision=16 only for x86; the cc1 options
            # behind it say the same (every half and bfloat operation rounded) on arm64.
            common = [f for f in common if f != "-fexcess-precision=16"] + [
                "-Xclang", "-ffloat16-excess-precision=none",
                "-Xclang", "-fbfloat16-excess-precision=none"]
        return (common + _address_space_flags(self.toolchain) + _arch_flags()
                + (CHECKED_FLAGS if checked else []))

    def _shared_artifact(self, target: Path, what: str, command) -> Path:
        """Build `target` with `command(tmp_path)` unless cached; atomic. Processes that
        need it at once (two fuzzing workers on an empty cache) build it once: the others
        wait on its lock file and take the result."""
        if target.exists():  # under the current cache root (it may change between calls)
            return target
        with _build_lock(target):
            if target.exists():   # built by another process while this one waited
                return target
            tmp = _atomic_target(target)
            res = _run_compiler(command(tmp), what)
            if res.returncode != 0:
                tmp.unlink(missing_ok=True)
                raise ToolchainError(f"building the {what} failed:\n{res.stderr[-4000:]}",
                                     construct=what)
            os.replace(tmp, target)
        return target

    def runtime_objects(self, entry: Path | None = None) -> list[Path]:
        """One object per runtime source file, and with `entry` (HOST_ENTRY or
        EXECUTABLE_ENTRY) that program's `main` last; every one is keyed by all the sources
        (they share runtime.h). Missing ones are compiled in parallel, one clang per core,
        each with runtime.h precompiled (`_runtime_header`)."""
        sources = self._runtime
        jobs = []
        for unit in (*RUNTIME_UNITS, *([entry] if entry else [])):
            # the arch flags too: -mfma follows the CPU, and the objects are built with it
            key = _digest("rt", self._tool_tag, sources, unit.name, *RUNTIME_FLAGS,
                          *_arch_flags())
            stem = f"entry-{unit.stem}" if unit.parent != RUNTIME_DIR else unit.stem
            jobs.append((cache_dir() / f"runtime-{stem}-{key}.o",
                         f"emulator runtime ({unit.name})",
                         lambda tmp, unit=unit: [self.toolchain.cxx, *RUNTIME_FLAGS,
                                                 *_arch_flags(), "-include-pch",
                                                 str(self._runtime_header()), "-c",
                                                 str(unit), "-o", str(tmp)]))
        if all(target.exists() for target, _, _ in jobs):
            return [target for target, _, _ in jobs]
        with stages.stage("shared"), \
                concurrent.futures.ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
            self._runtime_header()   # before the pool: every unit needs it
            return list(pool.map(lambda job: self._shared_artifact(*job), jobs))

    def _runtime_header(self) -> Path:
        """src/runtime.h precompiled with the runtime's flags. Every runtime source includes
        it (the C and C++ headers the runtime uses, <thread>, <string>, <vector> among them),
        and parsing those was about 0.6 of the 0.7-1.5 s of CPU each of the 11 objects took
        to compile on the 2-core machine: 10.4 s of CPU for all of them on an empty cache,
        4.2 s with the header precompiled once (docs/emulator.md). `-include-pch` reads it
        before a unit's own includes (poll.h, dlfcn.h, ...), which define nothing it depends
        on; the unit's own `#include "runtime.h"` is then skipped (`#pragma once`)."""
        key = _digest("rt-pch", self._tool_tag, self._runtime, *RUNTIME_FLAGS,
                      *_arch_flags())
        return self._shared_artifact(
            cache_dir() / f"runtime-{key}.pch", "emulator runtime header",
            lambda tmp: [self.toolchain.cxx, *RUNTIME_FLAGS, *_arch_flags(), "-Xclang",
                         "-fno-pch-timestamp", "-x", "c++-header",
                         str(RUNTIME_DIR / "runtime.h"), "-o", str(tmp)])

    def prepare(self) -> None:
        """Build what every kernel build shares (the runtime objects, both flavours'
        precompiled headers, the clang server's library) now: `harness fuzz` calls it while
        its workers start, so their first cases on an empty cache do not wait for it one
        after the other."""
        self.runtime_objects()
        if self.loads_libraries():
            self.launch_host()
        for checked in (True, False):
            self.precompiled_header(checked)
        self.clang_server()

    def launch_host(self) -> Path:
        """The launch host program (src/entry/host.cpp), linked once from the runtime
        objects (the runtime's key covers them)."""
        if self._host is not None and self._host.exists():
            return self._host
        objects = self.runtime_objects(HOST_ENTRY)
        key = _digest("host", self._tool_tag, self._runtime, *RUNTIME_FLAGS, *_arch_flags(),
                      *_HOST_LINK_FLAGS)
        target = cache_dir() / f"launch-host-{key}"
        if not target.exists():
            with stages.stage("shared"):
                self._shared_artifact(
                    target, "emulator launch host",
                    lambda tmp: [self.toolchain.cxx, *map(str, objects), *_link_flags(),
                                 *_fast_linker(), *_arch_flags(), *_HOST_LINK_FLAGS, "-o",
                                 str(tmp)])
        self._host = target
        return target

    def clang_server(self):
        """This process's clang server (clang_server.py), None where compiles are not
        served (not Linux with glibc, switched off, or its library does not build)."""
        if self._server_library is False or not clang_server.supported():
            return None
        if self._server_library is None:
            key = _digest("clang-server", self._tool_tag, clang_server.SOURCE.read_bytes())
            target = cache_dir() / f"clang-server-{key}.so"
            try:
                with stages.stage("shared"):
                    self._server_library = self._shared_artifact(
                        target, "clang server library",
                        lambda tmp: clang_server.build_command(self.toolchain.cxx, str(tmp)))
            except ToolchainError:
                self._server_library = False   # clang runs on its own, as before
                return None
        return clang_server.for_compiler(self.toolchain.cxx, self._server_library)

    def precompiled_header(self, checked: bool, math_mode: str = METAL.math_mode) -> Path:
        flags = self._flags(checked, math_mode)
        key = _digest("pch", self._tool_tag, self._headers, *flags)
        # No timestamps: the cache key already covers the headers' content, and a header
        # touched without change (git checkout) must not invalidate the PCH.
        target = cache_dir() / f"metal_stdlib-{key}.pch"
        if target.exists():
            return target
        with stages.stage("shared"):
            return self._shared_artifact(
                target, "MSL shim header",
                lambda tmp: [self.toolchain.cxx, *flags, "-Xclang", "-fno-pch-timestamp", "-x",
                             "c++-header", str(INCLUDE_DIR / "metal_stdlib.h"), "-o",
                             str(tmp)])

    def syntax_tree(self, cpp: str, kernel: str | None = None) -> tuple[int, str, str]:
        """clang's AST of the translated source as JSON (returncode, stdout, stderr); only
        the source's own declarations are dumped (the shim's stay in the precompiled
        header)."""
        pch = self.precompiled_header(False)
        cmd = [self.toolchain.cxx, *self._flags(False), "-I", str(INCLUDE_DIR),
               "-include-pch", str(pch), "-fsyntax-only", "-Xclang", "-ast-dump=json",
               "-x", "c++", "-"]
        with stages.stage("signatures"):
            res = _run_compiler(cmd, "MSL signatures", kernel, stdin=cpp,
                                server=self.clang_server())
        return res.returncode, res.stdout, res.stderr

    def cache_key(self, *parts: str) -> str:
        """A cache key covering this toolchain, the shim headers and `parts`."""
        return _digest(self._tool_tag, self._headers, *parts)

    # -- kernels ------------------------------------------------------------------------

    def build(self, translation: Translation, checked: bool = True,
              kernel_hint: str | None = None,
              math_mode: str = METAL.math_mode) -> Executable:
        """The kernel library for a translated MSL library (every kernel in it), compiled
        as Metal compiles it in `math_mode` (its contraction of a*b + c): a shared object
        for the launch host, or an executable (see `loads_libraries`)."""
        flags, unit, target = self._kernel_target(translation, checked, math_mode)
        host = self.launch_host() if self.loads_libraries() else None
        if not target.exists():  # under the current cache root, as for shared artifacts
            self._compile(unit, target, flags, checked, translation, kernel_hint, math_mode)
        return Executable(target, translation, checked, host)

    def _kernel_target(self, translation: Translation, checked: bool,
                       math_mode: str) -> tuple[list[str], str, Path]:
        """A library's compile flags, its unit (translation and launcher) and the cache
        entry they key: a shared object for the launch host, else an executable."""
        flags = self._flags(checked, math_mode)
        unit = translation.cpp + launcher.generate(translation.kernels,
                                                     translation.threadgroup_params)
        key = _digest("kernel", self._tool_tag, self._headers, self._runtime, *flags, unit)
        suffix = "so" if self.loads_libraries() else "bin"
        return flags, unit, cache_dir() / f"kernel-{key}.{suffix}"

    def build_batch(self, items) -> int:
        """Compile several translated libraries at once, into the cache entries `build`
        finds: `items` are `(translation, checked, math_mode)` as `build` takes them. The
        libraries not cached yet that share flags are compiled in one clang invocation
        (one load of the precompiled header, the shim's templates instantiated once), each
        in a namespace of its own with its own launcher table, and the one object is
        linked once per library, that library's table named `__mt_kernels`
        (`--defsym`), into the shared object `build` would have made. For the fuzz, whose
        kernels are tiny: a kernel's compile is mostly that shared work (docs/fuzzing.md).

        A batch only saves time: nothing is reported. A library the batch cannot take
        (preprocessor directives other than `#line`, which one namespace would leak into
        the next; no launch host) is left out, and a batch that does not compile or link
        leaves its libraries to `build`, which then compiles each alone and reports its
        errors as always. Returns how many libraries the batch put in the cache."""
        if not self.loads_libraries() or not _fast_linker():
            return 0
        groups: dict[tuple, list] = {}
        for translation, checked, math_mode in items:
            if not _batchable(translation):
                continue
            flags, _, target = self._kernel_target(translation, checked, math_mode)
            group = groups.setdefault((tuple(flags), checked, math_mode), [])
            if not target.exists() and all(t != target for _, t in group):
                group.append((translation, target))
        built = 0
        for (flags, checked, math_mode), group in groups.items():
            if len(group) > 1:
                built += self._compile_batch(list(flags), checked, math_mode, group)
        return built

    def _compile_batch(self, flags: list[str], checked: bool, math_mode: str,
                       group: list) -> int:
        pch = self.precompiled_header(checked, math_mode)
        scopes = [f"__mt_lib{i}" for i in range(len(group))]
        parts = ["#include <type_traits>"]
        for scope, (translation, _) in zip(scopes, group):
            parts += [f"namespace {scope} {{", translation.cpp,
                      launcher.generate(translation.kernels, translation.threadgroup_params,
                                        scope=scope), f"}}  // namespace {scope}"]
        first = group[0][1]
        tmp = _atomic_target(first.with_name("batch-" + first.name))
        src, obj = tmp.with_suffix(".cpp"), tmp.with_suffix(".o")
        src.write_text("\n".join(parts) + "\n")
        compile_cmd = [self.toolchain.cxx, *flags, "-I", str(INCLUDE_DIR), "-include-pch",
                       str(pch), "-x", "c++", str(src), "-c", "-o", str(obj)]
        built = 0
        try:
            with stages.stage("compile"):
                res = _run_compiler(compile_cmd, "MSL compile", server=self.clang_server())
            if res.returncode != 0:
                return 0
            with stages.stage("symbols"):
                if self._runtime_symbols is None:
                    self._runtime_symbols = admission.runtime_symbols(self.runtime_objects())
                try:   # what the libraries call must be the runtime's, as for one library
                    admission.check_symbols(obj, self._runtime_symbols, "", None)
                except MSLCompileError:
                    return 0
            for scope, (_, target) in zip(scopes, group):
                out = _atomic_target(target)
                try:
                    kernels, count = launcher.table_names(scope)
                    with stages.stage("link"):
                        res = _run_compiler(
                            self._link_command(flags, checked, [], obj, out,
                                               aliases={"__mt_kernels": kernels,
                                                        "__mt_kernel_count": count}),
                            "MSL link")
                    if res.returncode == 0:
                        os.replace(out, target)
                        stages.kernel_built()
                        built += 1
                finally:
                    out.unlink(missing_ok=True)
            return built
        except (MSLCompileError, ToolchainError):
            return built
        finally:
            for path in (tmp, src, obj):
                path.unlink(missing_ok=True)

    def _link_command(self, flags: list[str], checked: bool, runtime: list[Path], obj: Path,
                      exe: Path, aliases: dict[str, str] | None = None) -> list[str]:
        """The command linking kernel object `obj` into `exe`: on its own into a shared
        object (`runtime` empty), or with the runtime objects into an executable. It is the
        linker the clang driver would run (asked once per flags and runtime with `-###`),
        called directly, since a driver process per kernel costs a third of the link; the
        driver itself where its plan cannot be read. Called once `obj` exists (the driver
        checks its inputs). `aliases`: symbol -> the symbol it names (the linker's
        `--defsym`: one library's launcher table out of a batch's object)."""
        defsyms = [f"--defsym={name}={target}" for name, target in (aliases or {}).items()]
        driver = [self.toolchain.cxx, *flags, str(obj), *map(str, runtime),
                  *(_link_flags() if runtime else _LIBRARY_LINK_FLAGS), *_fast_linker(),
                  *_arch_flags(), *(["-fno-sanitize-link-runtime"] if checked else []),
                  "-o", str(exe)]
        key = (tuple(flags), checked, tuple(map(str, runtime)))
        if key not in self._linkers:
            self._linkers[key] = _linker_plan(driver, str(obj), str(exe))
        plan = self._linkers[key]
        if plan is None:
            return [*driver[:-2], *(f"-Wl,{d}" for d in defsyms), *driver[-2:]]
        return [str(obj) if a == _OBJ else str(exe) if a == _EXE else a
                for a in plan] + defsyms

    def _compile(self, unit: str, target: Path, flags: list[str], checked: bool,
                 translation: Translation, kernel_hint: str | None, math_mode: str) -> None:
        pch = self.precompiled_header(checked, math_mode)
        runtime = self.runtime_objects()
        linked = [] if target.suffix == ".so" else self.runtime_objects(EXECUTABLE_ENTRY)
        tmp = _atomic_target(target)
        src, obj = tmp.with_suffix(".cpp"), tmp.with_suffix(".o")
        src.write_text(unit)
        # Compiled and linked apart: the kernel's own object is what the symbol check
        # reads (admission.py), before anything of it is linked.
        compile_cmd = [self.toolchain.cxx, *flags, "-I", str(INCLUDE_DIR), "-include-pch",
                       str(pch), "-x", "c++", str(src), "-c", "-o", str(obj)]
        try:
            with stages.stage("compile"):
                res = _run_compiler(compile_cmd, "MSL compile", kernel_hint,
                                    server=self.clang_server())
            if res.returncode != 0:
                raise compile_error(res.stderr, unit, translation, kernel_hint)
            with stages.stage("symbols"):
                if self._runtime_symbols is None:
                    self._runtime_symbols = admission.runtime_symbols(runtime)
                admission.check_symbols(obj, self._runtime_symbols, translation.source,
                                        kernel_hint)
            with stages.stage("link"):
                res = _run_compiler(self._link_command(flags, checked, linked, obj, tmp),
                                    "MSL link", kernel_hint)
            if res.returncode != 0:
                raise compile_error(res.stderr, unit, translation, kernel_hint)
            os.replace(tmp, target)
            stages.kernel_built()
        finally:
            src.unlink(missing_ok=True)
            obj.unlink(missing_ok=True)
            tmp.unlink(missing_ok=True)


_OBJ, _EXE = "\0kernel-object", "\0kernel-executable"   # placeholders in a linker plan
_DIRECTIVE = re.compile(r"^[ \t]*#(?![ \t]*line\b)", re.M)


def _batchable(translation: Translation) -> bool:
    """Whether a library can share a unit with others (`Builder.build_batch`): no
    preprocessor directive but `#line` (a macro defined in one library would change the
    next; the translation empties the `#include`s of the shim's headers)."""
    return _DIRECTIVE.search(translation.cpp) is None


def _linker_plan(driver: list[str], obj: str, exe: str) -> list[str] | None:
    """The linker command the clang driver `driver` would run, with `obj` and `exe` as
    placeholders; None when the driver's `-###` plan is not one linker call naming each
    exactly once."""
    try:
        res = subprocess.run([*driver, "-###"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    jobs = [ln for ln in res.stderr.splitlines() if ln.startswith(' "')]
    if res.returncode != 0 or len(jobs) != 1:
        return None
    argv = shlex.split(jobs[0])
    if argv.count(obj) != 1 or argv.count(exe) != 1:
        return None
    return [_OBJ if a == obj else _EXE if a == exe else a for a in argv]


# clang messages that come from MSL outside the emulator's subset, and what they mean there:
# (message pattern, pattern the MSL line must match or None, explanation).
_EXPLANATIONS = (
    (re.compile(r"'annotate' attribute cannot be applied to types"), None,
     "an MSL attribute after an array declarator: array-typed kernel parameters (arrays of "
     "buffers) are not supported by the emulator"),
    (re.compile(r"(unknown type name|no template named) "
                r"'(texture\w*|sampler|depth\w*|imageblock\w*)'"), None,
     "textures, samplers and imageblocks are not supported by the emulator"),
)


def _explained(message: str, source_line: str | None) -> str:
    for pattern, line_pattern, meaning in _EXPLANATIONS:
        if pattern.search(message) and (
                line_pattern is None or line_pattern.search(source_line or "")):
            return f"{message} ({meaning})"
    return message


_DIAG = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): "
                   r"(?P<sev>error|fatal error|note): (?P<msg>.*)$", re.M)


def compile_error(stderr: str, unit: str, translation: Translation,
                  kernel_hint: str | None) -> MSLCompileError:
    """The first compiler error as an MSLCompileError located on its MSL line.

    An error inside a shim header (a static_assert, no matching overload) is located at the
    first MSL line in its chain of notes ("in instantiation of ... requested here")."""
    diags = list(_DIAG.finditer(stderr))
    first = next((d for d in diags if d["sev"] != "note"), None)
    if first is None:
        return MSLCompileError(f"the emulator could not compile the MSL:\n{stderr[-3000:]}",
                               kernel=kernel_hint)
    message = first["msg"].strip()
    located = first if first["file"].endswith(SOURCE_NAME) else None
    if located is None:
        start = diags.index(first)
        for d in diags[start + 1:]:
            if d["sev"] != "note" and d is not first:
                break
            if d["file"].endswith(SOURCE_NAME):
                located = d
                break
        if located is None:
            for d in diags[:diags.index(first)]:
                if d["file"].endswith(SOURCE_NAME):
                    located = d
    if located is None:
        return MSLCompileError(f"{message} (in {Path(first['file']).name}:{first['line']})",
                               kernel=kernel_hint)
    line = int(located["line"])
    source_lines = _original_lines(translation)
    text = source_lines[line - 1].rstrip() if 0 < line <= len(source_lines) else None
    message = _explained(message, text)
    return MSLCompileError(message, kernel=_kernel_at(translation, line) or kernel_hint,
                           line=line, column=int(located["col"]), source_line=text)


def _original_lines(translation: Translation) -> list[str]:
    return translation.source.splitlines() if translation.source else []


def _kernel_at(translation: Translation, line: int) -> str | None:
    best = None
    for k in translation.kernels.values():
        if k.line <= line and (best is None or k.line > best.line):
            best = k
    return best.name if best else None


_default: Builder | None = None
_default_lock = threading.Lock()


def default_builder() -> Builder:
    global _default
    with _default_lock:
        if _default is None:
            with stages.stage("toolchain"):
                _default = Builder()
        return _default
