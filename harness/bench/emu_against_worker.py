"""The emulator-timing worker of `harness emu-against` (harness/bench/emu_against.py).

It runs in the interpreter of one source tree, this one or the other revision's checkout,
which may be older than this module: `emu_against.Worker` runs this file from this tree by
path (`runpy.run_path`, under `python -c`) with the timed tree as working directory and
PYTHONPATH, so `core.runtime.emu` is that tree's and nothing here is imported from
harness.bench. What it needs from the tree: `core.runtime.emu.run_msl(source, kernel,
grid=, threadgroup=, buffers=, checks=)` and `core.runtime.emu.ALL_CHECKS`.

Protocol: one JSON request per line on stdin ({"op": "time", "job": path, "checks": bool}
or {"op": "quit"}), one JSON reply per line on stdout ({"seconds", "stats", "outputs" (a
digest of the buffers after the run), "findings"} or {"error": text}). A job is the launch
`emu_against.write_job` wrote: path.json (MSL, kernel, grid, threadgroup) and path.npz
(the buffers), loaded once per job.
"""

import hashlib
import json
import sys
import time


def main() -> None:
    protocol = sys.stdout
    sys.stdout = sys.stderr      # whatever the other revision prints stays off the protocol
    import numpy as np

    from core.runtime import emu

    jobs = {}

    def once(request):
        path = request["job"]
        if path not in jobs:
            with np.load(path + ".npz") as z:
                arrays = [z[f"b{i}"] for i in range(len(z.files))]
            with open(path + ".json") as f:
                jobs[path] = (json.load(f), arrays)
        meta, arrays = jobs[path]
        buffers = [a.copy() for a in arrays]
        checks = emu.ALL_CHECKS if request["checks"] else ()
        t0 = time.perf_counter()
        res = emu.run_msl(meta["msl"], meta["kernel"], grid=tuple(meta["grid"]),
                          threadgroup=tuple(meta["threadgroup"]), buffers=buffers,
                          checks=checks)
        seconds = time.perf_counter() - t0
        digest = hashlib.sha256(b"".join(b.tobytes() for b in buffers)).hexdigest()
        return {"seconds": seconds, "stats": res.stats, "outputs": digest,
                "findings": [str(f) for f in res.findings]}

    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            break
        try:
            reply = once(request)
        except Exception as err:  # noqa: BLE001 - every failure is a reply, not a crash
            reply = {"error": type(err).__name__ + ": " + str(err).splitlines()[0][:300]}
        protocol.write(json.dumps(reply, default=str) + "\n")
        protocol.flush()


if __name__ == "__main__":
    main()
