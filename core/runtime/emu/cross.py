"""Running the emulator for another CPU: arm64 Linux under qemu-user, from an x86-64 host.

Contract: with `METALTILE_EMU_TARGET=aarch64-linux-gnu` every emulator artifact (runtime
object, precompiled header, kernel executables) is built by the host's clang with
`--target=aarch64-linux-gnu` against Debian's arm64 cross libraries, and every kernel
executable runs under `qemu-aarch64`. This is how the arm64 context switch in
`src/fiber.h` (what a developer on Apple silicon runs) is tested on this project's x86-64
machines: `python3 -m tox -e arm64` runs the emulator's suite this way. Unset (the
default), artifacts are built for and run on the host. `target()` names the target (None:
the host), `compile_flags()` are the flags it adds to every compile and link, and
`run_prefix()` the command that runs a target executable.

`ensure_target()` checks that the pieces are there (qemu-aarch64, the arm64 C and C++
libraries, the cross linker) and, on Debian/Ubuntu as root, installs the missing ones with
apt (`qemu-user`, `libc6-dev-arm64-cross`, `libstdc++-12-dev-arm64-cross`,
`libgcc-12-dev-arm64-cross`, `binutils-aarch64-linux-gnu`); otherwise it raises a
`ToolchainError` with the command to run. `python -m core.runtime.emu.cross --ensure` does
it from the command line (tox's arm64 environment calls it first).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from core.errors import ToolchainError

ENV = "METALTILE_EMU_TARGET"
SUPPORTED = {
    # target triple: (qemu binary, sysroot of Debian's cross libraries, apt packages)
    "aarch64-linux-gnu": ("qemu-aarch64", "/usr/aarch64-linux-gnu",
                          ("qemu-user", "libc6-dev-arm64-cross", "libstdc++-12-dev-arm64-cross",
                           "libgcc-12-dev-arm64-cross", "binutils-aarch64-linux-gnu")),
}


def target() -> str | None:
    """The cross target named by $METALTILE_EMU_TARGET, or None for the host."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return None
    if value not in SUPPORTED:
        raise ToolchainError(f"{ENV}={value!r} is not a supported emulator target; supported: "
                             f"{', '.join(sorted(SUPPORTED))}", construct="emulator target")
    return value


def compile_flags() -> list[str]:
    """Flags every compile and link of an emulator artifact adds for the target."""
    t = target()
    return [f"--target={t}"] if t else []


def run_prefix() -> list[str]:
    """The command prefix that runs a target executable ([] for the host)."""
    t = target()
    if not t:
        return []
    qemu, sysroot, _ = SUPPORTED[t]
    return [shutil.which(qemu) or qemu, "-L", sysroot]


def _missing(t: str) -> list[str]:
    qemu, sysroot, _ = SUPPORTED[t]
    root = Path(sysroot)
    missing = []
    if not shutil.which(qemu):
        missing.append(qemu)
    if not (root / "lib" / "libc.so.6").exists():
        missing.append(f"{t} C library ({sysroot}/lib/libc.so.6)")
    if not list(root.glob("include/c++/*/vector")):
        missing.append(f"{t} C++ library headers ({sysroot}/include/c++)")
    if not shutil.which(f"{t}-ld"):
        missing.append(f"{t}-ld")
    return missing


def _apt_command(t: str) -> str:
    sudo = "" if os.geteuid() == 0 else "sudo "
    return (f"{sudo}apt-get update && {sudo}apt-get install -y --no-install-recommends "
            f"{' '.join(SUPPORTED[t][2])}")


def ensure_target(install: bool = True) -> str | None:
    """Check (and with apt as root, install) what the target needs; returns the target."""
    t = target()
    if not t:
        return None
    missing = _missing(t)
    if not missing:
        return t
    can_apt = (install and sys.platform.startswith("linux") and shutil.which("apt-get")
               and os.geteuid() == 0)
    if not can_apt:
        raise ToolchainError(f"the {t} emulator target needs {', '.join(missing)}; install "
                             f"with `{_apt_command(t)}`", construct="emulator target")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *SUPPORTED[t][2]]):
        print(f"[metaltile] running `{' '.join(cmd)}` ...", file=sys.stderr, flush=True)
        done = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr, stdin=subprocess.DEVNULL,
                              env=env, check=False)
        if done.returncode != 0:
            raise ToolchainError(f"`{' '.join(cmd)}` failed (exit {done.returncode})",
                                 construct="emulator target")
    missing = _missing(t)
    if missing:
        raise ToolchainError(f"still missing after apt: {', '.join(missing)}",
                             construct="emulator target")
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core.runtime.emu.cross",
                                     description=f"Check the emulator target named by ${ENV}.")
    parser.add_argument("--ensure", action="store_true",
                        help="install what the target needs with apt if missing (root)")
    args = parser.parse_args(argv)
    try:
        t = ensure_target(install=args.ensure)
    except ToolchainError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    runs = f" (runs under {' '.join(run_prefix())})" if t else ""
    print(f"emulator target: {t or 'host'}{runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
