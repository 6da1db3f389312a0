"""Kernel families: the unit the harness generates, checks, fuzzes and benchmarks.

A family turns plain parameters (a JSON-able dict: shapes, dtypes, threads, tiles) into a
real DSL kernel, the inputs for one seed, and the expected outputs from its oracle
(oracles/<family>.py). Everything downstream works on `(family name, params)` pairs:

    Hypothesis strategies draw params     family.params()          (harness/gen/<family>.py)
    the bench registry fixes params       at LLM shapes            (harness/bench/cases.py)
    regression files store params         + seed + the failure     (suites/regressions/)
    case.run_case(name, params, seed)     builds, runs, compares   (harness/check/case.py)

A family the core cannot compile yet is registered with `skip_reason`, so the harness
lists it and skips it with that reason, and it switches on when the core grows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

REGISTRY: dict[str, Family] = {}


@dataclass(frozen=True)
class Built:
    """One concrete kernel instance, ready to run and compare."""
    func: object                           # the T.prim_func (tvm PrimFunc)
    out_idx: list                          # outputs allocated by the runtime (core.compile)
    inputs: Callable[[int], list]          # seed -> arguments in the user's order, outputs
                                           # left out (CPU torch tensors, Python scalars)
    oracle: Callable[[list], list]         # inputs -> expected outputs, in out_idx order:
                                           # oracles.bounds.Expected (exact value and
                                           # forward error bounds, docs/tolerance.md)
    flops: int = 0                         # arithmetic operations (roofline model); 0 = none
    # Only for an oracle that returns plain tensors (hand-written test families): the class
    # policy of oracles/tolerance.py. Families' Expected outputs carry their own bounds.
    reduction_length: int = 1              # terms accumulated per output
    tolerance_dtypes: tuple = ()           # per output: the dtype whose tolerance applies
    op_class: str = "elementwise"          # exact, elementwise, transcendental, accumulation


@dataclass(frozen=True)
class Family:
    name: str
    doc: str                                # one line: what the kernels look like
    params: Callable[[], object]            # () -> Hypothesis strategy of params dicts
    build: Callable[[dict], Built]
    skip_reason: str | None = None          # set while the core cannot compile the family
    tags: tuple = field(default=())         # e.g. ("reduce",) for --families selection


def register(family: Family) -> Family:
    if family.name in REGISTRY:
        raise ValueError(f"kernel family '{family.name}' is registered twice")
    REGISTRY[family.name] = family
    return family


def get(name: str) -> Family:
    _load_all()
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown kernel family '{name}'; known: {sorted(REGISTRY)}") from None


def families() -> list[Family]:
    _load_all()
    return [REGISTRY[k] for k in sorted(REGISTRY)]


def _load_all():
    """Import every family module of harness/gen (each registers itself)."""
    import importlib
    import pkgutil

    import harness.gen as package

    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in ("family", "inputs", "strategies"):
            importlib.import_module(f"harness.gen.{info.name}")
