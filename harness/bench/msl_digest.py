"""The MSL of every bench case, pinned by digest: a pass change that alters generated code
shows up as a named, deliberate change.

    python -m harness.bench.msl_digest           compare with reports/baselines/msl.json
                                                 (exit 1 and the changed cases when they
                                                 differ)
    python -m harness.bench.msl_digest --update  record the current digests (commit the file)

The digest is SHA-256 of the MSL library `core.compile` prints for the case's kernel (no
cache, default pipeline). `suites/harness/test_msl_digest.py` runs the comparison, so a
refactoring of a pass that is meant to keep the output (e.g. a faster barrier planner) is
checked byte for byte; a change meant to alter code updates the file in the same commit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from harness.bench.cases import CASES
from harness.gen import family as families

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "reports" / "baselines" / "msl.json"
SCHEMA = "metaltile-msl-digests/1"


def digest(msl: str) -> str:
    return hashlib.sha256(msl.encode()).hexdigest()


def case_msl(case) -> str:
    """The MSL of one bench case, compiled without any cache."""
    import core
    fam = families.get(case.family)
    built = fam.build(dict(case.params))
    return core.compile(built.func, out_idx=built.out_idx, cache=False).msl


def current(cases=CASES) -> dict[str, str]:
    return {case.name: digest(case_msl(case)) for case in cases}


def load(path: Path = DEFAULT_PATH) -> dict[str, str]:
    data = json.loads(path.read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {data.get('schema')!r}, expected {SCHEMA!r}")
    return data["digests"]


def differences(recorded: dict, now: dict) -> list[str]:
    """One line per case whose MSL changed, appeared or disappeared."""
    out = []
    for name in sorted(set(recorded) | set(now)):
        if name not in now:
            out.append(f"{name}: recorded, but no longer a bench case")
        elif name not in recorded:
            out.append(f"{name}: new bench case, no recorded digest")
        elif recorded[name] != now[name]:
            out.append(f"{name}: MSL changed ({recorded[name][:12]} -> {now[name][:12]})")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.bench.msl_digest", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--update", action="store_true", help="record the current digests")
    ap.add_argument("--path", type=Path, default=DEFAULT_PATH)
    args = ap.parse_args(argv)
    now = current()
    if args.update:
        args.path.write_text(json.dumps({"schema": SCHEMA, "digests": now}, indent=1,
                                        sort_keys=True) + "\n")
        print(f"recorded {len(now)} digests in {args.path}")
        return 0
    changed = differences(load(args.path), now)
    for line in changed:
        print(line)
    print(f"{len(now) - len(changed)} of {len(now)} bench cases print the recorded MSL")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
