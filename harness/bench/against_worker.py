"""The compile-timing worker of `harness bench --against` (harness/bench/against.py).

It runs in the interpreter of one source tree, this one or the other revision's checkout,
which may be older than this module: `against.Worker` runs this file from this tree by
path (`runpy.run_path`, under `python -c`) with the timed tree as working directory and
PYTHONPATH, so `core` and `harness.gen` are that tree's and nothing here is imported from
harness.bench. What it needs from the tree: `harness.gen.family.get(name).build(params)`
returning `.func` and `.out_idx`, and `core.compile(func, out_idx=..., cache=False)`.

Protocol: one JSON request per line on stdin ({"op": "time", "family", "params"} or
{"op": "quit"}), one JSON reply per line on stdout ({"seconds": s} or {"error": text}).
Only the standard library is imported here, before the tree's modules.
"""

import json
import sys
import time


def main() -> None:
    protocol = sys.stdout
    sys.stdout = sys.stderr      # whatever the other revision prints stays off the protocol
    import core
    from harness.gen import family as families

    def once(request):
        fam = families.get(request["family"])
        if getattr(fam, "skip_reason", None):
            raise RuntimeError("family skipped there: " + fam.skip_reason)
        t0 = time.perf_counter()
        built = fam.build(dict(request["params"]))
        # the MSL text is the compile's product: reading it is part of what is timed
        core.compile(built.func, out_idx=built.out_idx, cache=False).msl  # noqa: B018
        return time.perf_counter() - t0

    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            break
        try:
            reply = {"seconds": once(request)}
        except Exception as err:  # noqa: BLE001 - every failure is a reply, not a crash
            reply = {"error": type(err).__name__ + ": " + str(err).splitlines()[0][:300]}
        protocol.write(json.dumps(reply) + "\n")
        protocol.flush()


if __name__ == "__main__":
    main()
