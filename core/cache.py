"""Where metaltile keeps its on-disk caches (compiled programs, emulator builds).

One root for all of them: `$METALTILE_CACHE` if set, else `$XDG_CACHE_HOME/metaltile`, else
`~/.cache/metaltile`. Each cache lives in its own subfolder (`kernels/`, `emu/`).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    root = os.environ.get("METALTILE_CACHE")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "metaltile"
