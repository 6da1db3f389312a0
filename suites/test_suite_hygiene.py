"""The suites keep one way to compare, seeded inputs and shared dtype lists: an AST scan
of every file under suites/ that fails on

  - an ad-hoc tolerance: a call with `rtol=` / `atol=`, `allclose` / `isclose`,
    `torch.testing.assert_close` or any `np.testing` comparison. Results are compared
    with `harness.check.compare.assert_close`, which applies the tolerance policy
    (oracles/tolerance.py, docs/tolerance.md);
  - unseeded randomness: `torch.randn` / `rand` / `randint` / ... without `generator=`,
    `np.random.<f>` other than a seeded `np.random.default_rng(seed)`, the stdlib
    `random` module. Inputs come from `harness.gen.inputs.random_tensor(shape, dtype,
    seed)` (what the families use) or an explicitly seeded generator, so a failure
    reproduces from its test alone, whatever ran before it;
  - a dtype list written out again: a literal tuple/list of dtype names that contains
    all of a shared list of harness/gen/strategies.py (FLOATS, HALVES) instead of naming
    it (rows of a parameter table, e.g. a (src, dst) pair, are not lists of dtypes).

An exception is an entry of ALLOWED: (file, what) -> why, one line each. A stale entry
(nothing left to allow) fails too, so the list only shrinks with the code. (pytest.approx
is not scanned: the suites use it for the bench's cost-model arithmetic on the host, never
for a kernel's result.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core.target import DTYPES
from harness.gen.strategies import FLOATS, HALVES

SUITES = Path(__file__).resolve().parent
SHARED_LISTS = {"FLOATS": set(FLOATS), "HALVES": set(HALVES)}
TORCH_RANDOM = {"randn", "rand", "randint", "randperm", "randn_like", "rand_like",
                "randint_like", "normal", "bernoulli", "multinomial", "poisson"}
NUMPY_SEEDED = {"default_rng", "Generator", "SeedSequence", "PCG64", "Philox"}
CLOSE_NAMES = {"allclose", "isclose", "assert_allclose"}

# (file under suites/, what the scan reports) -> why the file needs it.
ALLOWED = {
    # Raw MSL run on the emulator (no compiled kernel, no oracle): these files test the
    # emulator's own semantics on NumPy buffers, where the result is exact by construction
    # (moved bits, integer arithmetic, sums of small integers, one rounding per op that the
    # test reproduces with NumPy's same-width types). Any difference is the bug.
    ("emu/test_checks.py", "np.testing"): "exact: data movement and small-integer sums",
    ("emu/test_simd.py", "np.testing"): "exact: shuffles move bits; sums of small integers",
    ("emu/test_types_math.py", "np.testing"):
        "exact: the test rounds with NumPy's same-width type, the emulator must agree bitwise",
    ("emu/test_matrix_atomic.py", "np.testing"): "exact: integer atomics and 8x8 products of "
                                                 "small integers",
    ("emu/test_build.py", "np.testing"): "exact: values passed through, bit patterns",
    ("emu/test_stats.py", "np.testing"): "exact: copies and reversals move bits",
    ("emu/test_unroll_hints.py", "np.testing"): "exact: one float32 multiply per element, "
                                                "which NumPy's float32 rounds the same",
    ("emu/test_launch_server.py", "np.testing"): "exact: a reversed copy plus 1 of small "
                                                  "integers",
    ("emu/test_matrix_checks.py", "np.testing"): "exact: matrix loads and stores move bits",
    ("emu/test_signature.py", "np.testing"): "exact: thread-position attributes (integers)",
    ("emu/test_sandbox.py", "np.testing"): "exact: a doubling of float32 values",
    ("emu/test_admission.py", "np.testing"): "exact: a character code plus exp(0) and sqrt(4)",
    ("emu/test_math_mode.py", "np.testing"): "exact: a float64 model that rounds once per "
                                             "fused step; the emulator must agree bitwise",
    ("emu/foreign/test_silent_cases.py", "np.testing"): "exact: small-integer results",
    ("emu/foreign/test_tvm_codegen.py", "np.testing"): "exact: transposes and copies",
    ("emu/foreign/test_tilelang_style.py", "np.testing"): "exact: transposes; a sum of "
                                                          "integers below 2^24",
    ("emu/foreign/test_refusals.py", "np.testing"): "exact: a reversal moves bits",
    ("emu/foreign/test_metal_builtins.py", "np.testing"): "exact: frexp exponents, nextafter "
                                                          "and simd bit/lane results",
    ("emu/foreign/test_mlx_constructs.py", "np.testing"): "exact: small-integer results",
    ("unit/test_cli.py", "np.testing"): "exact: buffers `harness emu` writes back to .npy",
    ("unit/test_bufspec.py", "np.testing"): "exact: buffer specs are filled, not computed",
    ("unit/test_target.py", "np.testing"): "exact: simdgroup indices (integers)",
    # A new, never-built source per benchmark round (the build cache must miss).
    ("bench/test_emu_bench.py", "np.random.rand"): "must differ between runs: a cold build",
}


def _dotted(node) -> str:
    """`np.testing.assert_array_equal` for an attribute chain, '' otherwise."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _call_findings(call: ast.Call, imports_random: bool):
    name = _dotted(call.func)
    keywords = {k.arg for k in call.keywords}
    for kw in ("rtol", "atol"):
        if kw in keywords:
            yield f"{kw}=", "an ad-hoc tolerance"
    head, _, last = name.rpartition(".")
    if last in CLOSE_NAMES or name == "torch.testing.assert_close":
        yield name, "an ad-hoc tolerance"
    elif head in ("np.testing", "numpy.testing"):
        yield "np.testing", "a comparison outside the tolerance policy"
    if head == "torch" and last in TORCH_RANDOM and "generator" not in keywords:
        yield name, "unseeded randomness (no generator=)"
    if head in ("np.random", "numpy.random"):
        if last not in NUMPY_SEEDED:
            yield "np.random." + last, "unseeded randomness (the global NumPy stream)"
        elif not call.args and "seed" not in keywords:
            yield "np.random." + last, "unseeded randomness (no seed)"
    if imports_random and head == "random":
        yield name, "unseeded randomness (the stdlib random module)"


def _dtype_list_findings(tree: ast.AST):
    rows = set()   # literal sequences that are rows of a table: a list of (src, dst) pairs
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            rows.update(id(e) for e in node.elts if isinstance(e, (ast.Tuple, ast.List)))
    for node in ast.walk(tree):
        if not isinstance(node, (ast.List, ast.Tuple, ast.Set)) or id(node) in rows:
            continue
        names = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        if len(names) != len(node.elts) or not all(isinstance(n, str) and n in DTYPES
                                                   for n in names):
            continue
        for shared, members in SHARED_LISTS.items():
            if members <= set(names):
                yield node.lineno, f"dtype list {tuple(names)} spells out {shared}"
                break


def scan(path: Path):
    """[(line, what, why)] for one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    imports_random = any(isinstance(n, ast.Import) and any(a.name == "random" for a in n.names)
                         for n in ast.walk(tree))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            found += [(node.lineno, what, why) for what, why in
                      _call_findings(node, imports_random)]
    found += [(line, "dtype list", why) for line, why in _dtype_list_findings(tree)]
    return sorted(found)


FILES = sorted(p for p in SUITES.rglob("*.py") if p.name != Path(__file__).name)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SUITES)))
def test_no_adhoc_tolerance_unseeded_input_or_repeated_dtype_list(path):
    rel = str(path.relative_to(SUITES))
    bad = [f"{rel}:{line}: {what}: {why}" for line, what, why in scan(path)
           if (rel, what) not in ALLOWED]
    assert not bad, "\n".join(bad) + "\n(compare with harness.check.compare.assert_close; draw " \
        "inputs with harness.gen.inputs.random_tensor; name dtype lists from " \
        "harness.gen.strategies; or add an ALLOWED entry saying why)"


def test_every_allowance_is_still_needed():
    used = {(str(p.relative_to(SUITES)), what) for p in FILES for _, what, _ in scan(p)}
    assert not set(ALLOWED) - used, sorted(set(ALLOWED) - used)


@pytest.mark.parametrize("source,expected", [
    ("torch.testing.assert_close(a, b, rtol=1e-3, atol=0)",
     ["atol=", "rtol=", "torch.testing.assert_close"]),
    ("np.testing.assert_allclose(a, b)", ["np.testing.assert_allclose"]),
    ("torch.allclose(a, b)", ["torch.allclose"]),
    ("np.testing.assert_array_equal(a, b)", ["np.testing"]),
    ("x = torch.randn(4, 4).half()", ["torch.randn"]),
    ("x = torch.randint(0, 9, (4,), dtype=torch.int32)", ["torch.randint"]),
    ("x = np.random.rand(3)", ["np.random.rand"]),
    ("g = np.random.default_rng()", ["np.random.default_rng"]),
    ("import random\nx = random.random()", ["random.random"]),
    ("D = ('float32', 'float16', 'bfloat16')", ["dtype list"]),
    ("ok = dtype in ['bfloat16', 'float16']", ["dtype list"]),
    ("x = torch.randn(4, generator=g)", []),
    ("g = np.random.default_rng(3)", []),
    ("assert_close(out, want, 'float16')", []),
    ("PAIRS = [('float16', 'bfloat16'), ('float32', 'float16')]", []),
    ("D = FLOATS + ('int32',)", []),
])
def test_the_scan_finds_what_it_should(tmp_path, source, expected):
    path = tmp_path / "case.py"
    path.write_text(source + "\n")
    assert [what for _, what, _ in scan(path)] == expected
