"""MLX's Metal kernel headers, from the `mlx-metal` wheel, fetched by pip on first use.

    root = headers()                       # <cache>/peers/mlx-metal-0.32.4/include
    text = source(("gemv.h",), "template [[host_name(...)]] ...")   # one MSL translation unit

The macOS wheel of `mlx-metal` (a registry package; pip fetches it on any platform with
`--platform macosx_14_0_arm64 --only-binary=:all:`) carries MLX's kernel headers under
`mlx/include/mlx/backend/metal/kernels/`. They are extracted once into metaltile's cache
(core.cache: `$METALTILE_CACHE`, else `~/.cache/metaltile`) and never into this repository.
`METALTILE_MLX_WHEEL=/path/to/mlx_metal-<version>-...whl` uses a wheel already on disk
instead of pip. Offline with nothing cached, `headers()` raises `PeerUnavailable`, whose
message says why and how to provide the wheel; the bench then skips the peer with it.

`source` inlines the headers' `#include "mlx/..."` lines (each file once, as their
`#pragma once` says) so the emulator gets one MSL text; `#include <metal_*>` lines stay
(the emulator's shim provides them).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MLX_VERSION = "0.32.4"
PACKAGE = "mlx-metal"
KERNELS = "mlx/backend/metal/kernels"          # under the wheel's mlx/include/
_IN_WHEEL = f"mlx/include/{KERNELS}/"
_DONE = ".complete"                             # written last: the extraction finished
_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[^\n]*$', re.M)
_PRAGMA_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once\b[^\n]*$", re.M)
PIP_TIMEOUT_S = 600


class PeerUnavailable(RuntimeError):
    """MLX's headers cannot be had here (offline and not cached, a broken wheel)."""


def cache_dir(version: str = MLX_VERSION) -> Path:
    from core.cache import cache_root
    return cache_root() / "peers" / f"{PACKAGE}-{version}"


def headers(version: str = MLX_VERSION) -> Path:
    """The include root holding `mlx/backend/metal/kernels/*.h`: cached, or fetched now
    (pip download of the macOS wheel, or $METALTILE_MLX_WHEEL), extracted, cached."""
    root = cache_dir(version)
    include = root / "include"
    if (root / _DONE).exists():
        return include
    wheel = os.environ.get("METALTILE_MLX_WHEEL")
    with tempfile.TemporaryDirectory(prefix="mlx-wheel-") as tmp:
        path = Path(wheel) if wheel else _pip_download(version, Path(tmp))
        _extract(path, root, version)
    return include


def _pip_download(version: str, into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--platform", "macosx_14_0_arm64", "--disable-pip-version-check",
           f"{PACKAGE}=={version}", "-d", str(into)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise PeerUnavailable(_unavailable(version, f"pip did not run: {err}")) from None
    wheels = sorted(into.glob("mlx_metal-*.whl"))
    if proc.returncode != 0 or not wheels:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        why = lines[-1].strip() if lines else f"pip exited {proc.returncode}"
        raise PeerUnavailable(_unavailable(version, f"pip could not fetch it: {why}"))
    return wheels[0]


def _unavailable(version: str, why: str) -> str:
    return (f"MLX peer unavailable: {PACKAGE}=={version} is not cached under "
            f"{cache_dir(version)} and {why} (offline? set METALTILE_MLX_WHEEL to a "
            f"downloaded mlx_metal-{version} wheel)")


def _extract(wheel: Path, root: Path, version: str) -> None:
    """The kernel headers of `wheel` into `root`/include, atomically: a temporary folder,
    completion mark included, renamed into place (a process that finds another's finished
    extraction there drops its own)."""
    try:
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if n.startswith(_IN_WHEEL) and not n.endswith("/")]
            if not names:
                raise PeerUnavailable(f"{wheel} holds no {_IN_WHEEL} headers: not an "
                                      f"{PACKAGE} wheel?")
            root.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=root.name + ".", dir=root.parent))
            staging.chmod(0o755)             # mkdtemp makes it private; a cache is shared
            for name in names:
                target = staging / "include" / name[len("mlx/include/"):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(name))
    except (OSError, zipfile.BadZipFile) as err:
        raise PeerUnavailable(f"MLX peer unavailable: cannot read the wheel {wheel}: "
                              f"{err}") from None
    (staging / "VERSION").write_text(f"{PACKAGE}=={version} from {wheel.name}\n")
    (staging / _DONE).write_text("")
    if (root / _DONE).exists():             # another process finished first
        shutil.rmtree(staging, ignore_errors=True)
        return
    if root.exists():                       # an extraction that did not finish
        shutil.rmtree(root, ignore_errors=True)
    try:
        staging.rename(root)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (root / _DONE).exists():
            raise PeerUnavailable(f"MLX peer unavailable: cannot put the headers in "
                                  f"{root}") from None


def source(headers_: tuple, instantiation: str, version: str = MLX_VERSION) -> str:
    """One MSL text: MLX's `kernels/<header>`s in order (as the MLX .metal file that
    instantiates them includes them) with their quoted includes inlined, then our
    `instantiation` lines (the `template [[host_name(...)]] [[kernel]] ...` that MLX's
    .metal files and host code would produce)."""
    include = headers(version)
    seen: set[str] = set()

    def inline(rel: str) -> str:
        if rel in seen:
            return ""
        seen.add(rel)
        path = include / rel
        if not path.is_file():
            raise PeerUnavailable(f"MLX header {rel} is not in {PACKAGE}=={version} "
                                  f"({include})")
        text = _PRAGMA_ONCE.sub("", path.read_text())
        return _QUOTED_INCLUDE.sub(lambda m: inline(m.group(1)), text)

    return "".join(inline(f"{KERNELS}/{h}") for h in headers_) + "\n" + instantiation
