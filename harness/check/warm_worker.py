"""Imported last by the workers' fork server (harness/check/workers.py, PRELOAD) for what it
does on import: make the server's state what every worker forked from it would otherwise
build on its own, before its first case.

- The kernel families (harness/gen/*, their oracles, Hypothesis's strategies) are
  imported: 1-2 s of CPU per worker on the 2-core machine before. A family module that
  fails to import is not imported here (what it registered before failing is forgotten):
  the worker imports it again and reports the error, with its traceback, as before.
- Hypothesis's first test of a thread registers the thread's random generator, which runs
  a full garbage collection over torch's and tvm's objects (0.1-1.5 s); one tiny test
  here does it once for every worker (the forked main thread keeps it).
- `gc.freeze()`: the objects of all these imports are moved out of the collector's sight
  (they live as long as the process), so a worker's full collections do not walk them
  again and again (0.1 s each), and do not touch (copy) the pages they share with the
  server.
"""

from __future__ import annotations

import gc
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

try:
    from hypothesis import given, settings
    from hypothesis import strategies as _st

    @settings(database=None, max_examples=1, deadline=None)
    @given(_st.integers(0, 1))
    def _first_test(_n):
        pass

    _first_test()
except Exception:  # noqa: BLE001 - the worker's own first test does it then
    pass

gc.collect()
gc.freeze()
