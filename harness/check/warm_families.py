"""Imported by the workers' fork server (harness/check/workers.py, PRELOAD) for what it does
on import: import the kernel families (harness/gen/*, their oracles, Hypothesis's
strategies), once, so every worker forked from the server starts with them imported.
Each worker imported them itself before, after its fork: 1-2 s of CPU per worker on the
2-core machine, before its first case, paid again by a restarted worker.

A family module that fails to import is not imported here (and what it registered before
failing is forgotten): the worker imports it again and reports the error, with its
traceback, as before."""

from __future__ import annotations

import importlib
import pkgutil

try:
    import harness.gen as _package
    from harness.gen import family as _family

    for _info in pkgutil.iter_modules(_package.__path__):
        if _info.name in ("family", "inputs", "strategies"):
            continue
        _registered = dict(_family.REGISTRY)
        try:
            importlib.import_module(f"harness.gen.{_info.name}")
        except Exception:  # noqa: BLE001 - the worker imports it again and reports it
            _family.REGISTRY.clear()
            _family.REGISTRY.update(_registered)
except Exception:  # noqa: BLE001 - the worker finds (and reports) it again
    pass
