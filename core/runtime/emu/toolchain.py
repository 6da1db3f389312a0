"""The emulator's C++ toolchain: find it, check it, install it where that is possible.

Contract: `find_toolchain()` returns a `Toolchain` whose `cxx` is a clang++ that compiles
C++17 with arithmetic on `__bf16` and `_Float16`, rounded after every operation under
`-fexcess-precision=16` (the driver flag behind clang's internal
`-ffloat16-excess-precision=none` / `-fbfloat16-excess-precision=none`): LLVM 17 or newer,
Apple clang 16 or newer. Otherwise it raises `ToolchainError` naming what is missing and the
exact command that installs it. `ensure_toolchain()` does the same but first installs
Debian's `clang-19` and `llvm-19` when it can (Debian/Ubuntu with apt, running as root).

Search order: `$METALTILE_CXX` if set (then nothing else is tried), then clang++-19, -20,
-18, -17 and plain clang++ on PATH; on macOS `xcrun --find clang++` (Apple clang, untested
here). The symbolizer (llvm-symbolizer, else llvm-addr2line) must come from the same LLVM
as the compiler, so that PCs of an instrumented build map back to MSL lines; it is optional.

`python -m core.runtime.emu.toolchain [--ensure]` prints what was found.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

from core.errors import ToolchainError

MIN_LLVM = 17  # __bf16 arithmetic and bf16 excess-precision control arrived in LLVM 17
MIN_APPLE = 16  # Apple clang 16 (Xcode 16) is the first built on LLVM 17
CANDIDATES = ("clang++-19", "clang++-20", "clang++-18", "clang++-17", "clang++")
APT_LLVM_VERSIONS = (19, 20, 18, 17)  # Debian/Ubuntu package sets to try, in order

# Compiled with -fsyntax-only to prove the compiler does what the emulator relies on:
# a C++17 standard library, clang vector extensions and arithmetic on __bf16 and _Float16.
_PROBE = """\
#include <cstdint>
#include <cmath>
typedef float float4_t __attribute__((ext_vector_type(4)));
__bf16 bf_mul(__bf16 a, __bf16 b) { return a * b; }
_Float16 h_add(_Float16 a, _Float16 b) { return a + b; }
float4_t swz(float4_t v) { return v.wzyx; }
"""
_PROBE_FLAGS = ("-x", "c++", "-std=c++17", "-fsyntax-only", "-fexcess-precision=16")


@dataclass(frozen=True)
class Toolchain:
    cxx: str  # path to clang++
    version: tuple[int, int, int]
    symbolizer: str | None  # llvm-symbolizer or llvm-addr2line of the same LLVM
    apple: bool  # Apple clang (macOS)

    def describe(self) -> str:
        kind = "Apple clang" if self.apple else "clang"
        version = ".".join(map(str, self.version))
        symbolizer = self.symbolizer or "none (findings show addresses, not MSL lines)"
        return f"{kind} {version}: {self.cxx}\nsymbolizer: {symbolizer}"


def find_toolchain() -> Toolchain:
    """The toolchain to use, found once per process (per value of `$METALTILE_CXX`)."""
    return _find(os.environ.get("METALTILE_CXX") or None)


def ensure_toolchain(install: bool = True) -> Toolchain:
    """`find_toolchain()`, installing clang and llvm with apt first when they are missing
    and this process may do so (Debian/Ubuntu, root, `install=True`)."""
    try:
        return find_toolchain()
    except ToolchainError as missing:
        if not install or os.environ.get("METALTILE_CXX") or not _can_apt_install():
            raise
        problem = missing.reason
    packages = _apt_install(problem)
    _find.cache_clear()
    try:
        return find_toolchain()
    except ToolchainError as still:
        raise ToolchainError(f"installed {' '.join(packages)}, but still: {still.reason}",
                             construct="emulator toolchain") from None


# -- finding -------------------------------------------------------------------------------

@functools.cache
def _find(override: str | None) -> Toolchain:
    if override:
        path = shutil.which(override)
        if path is None:
            raise ToolchainError(f"METALTILE_CXX={override!r} is not an executable",
                                 construct="emulator toolchain")
        return _check(path)
    rejected = []
    for path in _candidate_paths():
        try:
            return _check(path)
        except ToolchainError as err:
            rejected.append(err.reason)
    found = ("; ".join(rejected)) if rejected else "no clang++ on PATH"
    raise ToolchainError(f"{found}. {_install_advice()}", construct="emulator toolchain")


def _candidate_paths() -> list[str]:
    paths = []
    if sys.platform == "darwin":
        xcrun = _run(["xcrun", "--find", "clang++"])
        if xcrun and xcrun.returncode == 0 and xcrun.stdout.strip():
            paths.append(xcrun.stdout.strip())
    for name in CANDIDATES:
        path = shutil.which(name)
        if path and os.path.realpath(path) not in {os.path.realpath(p) for p in paths}:
            paths.append(path)
    return paths


def _check(path: str) -> Toolchain:
    """A `Toolchain` for the compiler at `path`, or ToolchainError saying what is wrong."""
    out = _run([path, "--version"])
    if out is None or out.returncode != 0:
        raise ToolchainError(f"{path} --version failed", construct="emulator toolchain")
    text = out.stdout
    match = re.search(r"clang version (\d+)\.(\d+)(?:\.(\d+))?", text)
    if match is None:
        raise ToolchainError(f"{path} is not clang ({text.splitlines()[0] if text else '?'})",
                             construct="emulator toolchain")
    version = (int(match[1]), int(match[2]), int(match[3] or 0))
    apple = "Apple clang" in text
    needed = MIN_APPLE if apple else MIN_LLVM
    if version[0] < needed:
        kind = "Apple clang" if apple else "clang"
        raise ToolchainError(f"{path} is {kind} {version[0]}.{version[1]}, older than the "
                             f"{needed} the emulator needs (for __bf16 arithmetic)",
                             construct="emulator toolchain")
    probe = _run([path, *_PROBE_FLAGS, "-"], stdin=_PROBE)
    if probe is None or probe.returncode != 0:
        detail = (probe.stderr.strip().splitlines() or ["?"])[0] if probe else "did not run"
        raise ToolchainError(f"{path} cannot compile the emulator's C++17 probe ({detail}); "
                             f"is the C++ standard library (libstdc++-dev) installed?",
                             construct="emulator toolchain")
    installed_dir = re.search(r"^InstalledDir: (.+)$", text, re.MULTILINE)
    return Toolchain(cxx=path, version=version, apple=apple,
                     symbolizer=_find_symbolizer(path, version[0], apple,
                                                 installed_dir[1].strip() if installed_dir
                                                 else None))


def _find_symbolizer(cxx: str, major: int, apple: bool, installed_dir: str | None) -> str | None:
    """llvm-symbolizer (else llvm-addr2line) beside the compiler or versioned like it."""
    dirs = [d for d in (installed_dir, os.path.dirname(os.path.realpath(cxx))) if d]
    for tool in ("llvm-symbolizer", "llvm-addr2line"):
        for d in dirs:
            candidate = os.path.join(d, tool)
            if os.access(candidate, os.X_OK):
                return candidate
        versioned = shutil.which(f"{tool}-{major}")
        if versioned:
            return versioned
        if apple:
            found = _run(["xcrun", "--find", tool])
            if found and found.returncode == 0 and found.stdout.strip():
                return found.stdout.strip()
    return None


def _run(cmd: list[str], stdin: str | None = None) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


# -- installing ----------------------------------------------------------------------------

def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _has_apt() -> bool:
    return sys.platform.startswith("linux") and shutil.which("apt-get") is not None


def _can_apt_install() -> bool:
    return _has_apt() and _is_root()


def _apt_command(version: int = APT_LLVM_VERSIONS[0]) -> str:
    sudo = "" if _is_root() else "sudo "
    return (f"{sudo}apt-get update && {sudo}apt-get install -y --no-install-recommends "
            f"clang-{version} llvm-{version}")


def _install_advice() -> str:
    if sys.platform == "darwin":
        return ("Install Apple's command line tools with `xcode-select --install` "
                f"(Apple clang {MIN_APPLE} or newer), or set METALTILE_CXX to a clang++ "
                f"of LLVM {MIN_LLVM} or newer.")
    if _has_apt():
        return (f"Install it with `{_apt_command()}` (or run "
                "`python -m core.runtime.emu.toolchain --ensure` as root), "
                f"or set METALTILE_CXX to a clang++ of LLVM {MIN_LLVM} or newer.")
    return (f"Install clang++ of LLVM {MIN_LLVM} or newer with your system's package manager "
            "and put it on PATH or set METALTILE_CXX to it.")


def _progress(message: str) -> None:
    print(f"[metaltile] {message}", file=sys.stderr, flush=True)


def _apt_install(problem: str) -> list[str]:
    """apt-get update once, then install the first clang/llvm pair apt knows; returns the
    packages. Raises ToolchainError if no such pair exists or apt fails."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    _progress(f"emulator toolchain missing ({problem.split('. ')[0]})")
    _progress("running `apt-get update` ...")
    update = subprocess.run(["apt-get", "update", "-q"], stdout=sys.stderr, stderr=sys.stderr,
                            stdin=subprocess.DEVNULL, env=env, check=False)
    if update.returncode != 0:
        raise ToolchainError(f"`apt-get update` failed (exit {update.returncode}); "
                             f"install by hand: `{_apt_command()}`",
                             construct="emulator toolchain")
    version = next((v for v in APT_LLVM_VERSIONS if _apt_knows(f"clang-{v}")), None)
    if version is None:
        wanted = ", ".join(f"clang-{v}" for v in APT_LLVM_VERSIONS)
        raise ToolchainError(f"apt knows none of {wanted}; install clang++ of LLVM {MIN_LLVM} "
                             "or newer another way and set METALTILE_CXX to it",
                             construct="emulator toolchain")
    packages = [f"clang-{version}", f"llvm-{version}"]
    _progress(f"running `apt-get install -y --no-install-recommends {' '.join(packages)}` "
              "(once per machine) ...")
    install = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends",
                              *packages], stdout=sys.stderr, stderr=sys.stderr,
                             stdin=subprocess.DEVNULL, env=env, check=False)
    if install.returncode != 0:
        raise ToolchainError(f"`apt-get install {' '.join(packages)}` failed "
                             f"(exit {install.returncode})", construct="emulator toolchain")
    _progress(f"installed {' '.join(packages)}")
    return packages


def _apt_knows(package: str) -> bool:
    shown = _run(["apt-cache", "show", "--no-all-versions", package])
    return bool(shown and shown.returncode == 0 and shown.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core.runtime.emu.toolchain",
                                     description="Show the emulator's C++ toolchain.")
    parser.add_argument("--ensure", action="store_true",
                        help="install clang/llvm with apt if missing (Debian/Ubuntu, root)")
    args = parser.parse_args(argv)
    try:
        toolchain = ensure_toolchain() if args.ensure else find_toolchain()
    except ToolchainError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(toolchain.describe())
    if toolchain.apple:
        print(f"note: macOS ({platform.mac_ver()[0]}) support is untested")
    return 0


if __name__ == "__main__":
    sys.exit(main())
