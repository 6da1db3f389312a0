"""What every suite shares: the backends a kernel runs on, and one way to run it.

    def test_x(run):                          # runs once per backend (see `backend`)
        kernel = core.compile(func, out_idx=[-1])
        a = random_tensor((M, N), "float16", seed=1)   # harness.gen.inputs: seeded inputs
        out = run(kernel, a, b)               # CPU tensors in, CPU tensors out
        assert_close(out, oracle(a, b))       # harness.check.compare, the tolerance policy

    def test_y(run_family):                   # a kernel a harness family builds: built,
        run_family("softmax", params)         # run and compared with the family's oracle

`backend`: every test that uses it (directly or through `run`) runs on the emulator
everywhere and also on "mps" where `torch.backends.mps.is_available()`. A test whose
assertions hold on one backend only says so with `@pytest.mark.backend("emu")`
(e.g. the emulator's findings or counters). Modules that need MPS set
`pytestmark = pytest.mark.mps` and are skipped where MPS is unavailable. Inputs are drawn
with an explicit seed (suites/test_suite_hygiene.py keeps it so); every test also starts
from `torch.manual_seed(0)`, for the library code a test calls.

The "mps" runs have not been executed anywhere yet (no Mac has run this project's suites).
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch

from core.runtime.backends import available_backends, mps_available, to_device, to_host


@pytest.fixture(autouse=True)
def _seeded():
    """Every test draws its inputs from the same seeded stream: a failure reproduces
    (tests that need several streams pass explicit torch.Generator seeds)."""
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def session_compile_cache(tmp_path_factory):
    """A compile-cache folder for this test session (suites that must not reuse compiled
    programs of earlier runs point core.jit's disk cache here). It is shared by the
    session's pytest-xdist workers, whose own folders sit under the session's: what one
    worker compiled is a disk hit for the other. The cache writes a temporary file and
    renames it into place, so both may fill it at once."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    return base / "kcache"


@pytest.fixture
def isolated_compile_cache(session_compile_cache, monkeypatch):
    """core.jit's disk cache pointed at `session_compile_cache` for one test: compiled
    programs of earlier runs are not reused; the emulator's builds stay shared. The suites
    that compile through core.jit use it for every test (their conftest's autouse fixture)."""
    jit_module = importlib.import_module("core.jit")  # `core.jit` is the decorator
    monkeypatch.setattr(jit_module._Cache, "directory",
                        staticmethod(lambda: session_compile_cache))
    return session_compile_cache


@pytest.fixture
def emulator_cache_of_its_own(tmp_path, monkeypatch):
    """An emulator cache for one test: the shared artifacts of the current one (runtime
    objects, precompiled headers, linked to) and no kernel, for a test that counts the
    kernels built (the default cache is shared with the session's other workers, which
    build kernels into it at the same time). Returns its `emu` folder."""
    from core.runtime.emu import build

    builder = build.default_builder()
    shared = [*builder.runtime_objects(build.HOST_ENTRY),
              *builder.runtime_objects(build.EXECUTABLE_ENTRY)[-1:],
              builder.precompiled_header(True), builder.precompiled_header(False)]
    builder.launch_host()
    monkeypatch.setenv("METALTILE_CACHE", str(tmp_path / "emulator-cache"))
    for path in shared:
        (build.cache_dir() / path.name).symlink_to(path)
    return build.cache_dir()


def pytest_generate_tests(metafunc):
    if "backend" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("backend")
    allowed = marker.args if marker else available_backends()
    names = [b for b in available_backends() if b in allowed]
    params = [pytest.param(b, marks=[pytest.mark.mps] if b == "mps" else []) for b in names]
    if not params:  # e.g. an mps-only test here: shown as skipped, not silently dropped
        params = [pytest.param("mps", marks=pytest.mark.skip(
            reason=f"needs backend(s) {allowed}; available here: {available_backends()}"))]
    metafunc.parametrize("backend", params)


def pytest_collection_modifyitems(config, items):
    if mps_available():
        return
    skip = pytest.mark.skip(reason="needs macOS with MPS (torch.backends.mps.is_available() "
                            "is false here)")
    for item in items:
        if item.get_closest_marker("mps"):
            item.add_marker(skip)


def run_checked(kernel, *args, backend="emu", **kwargs):
    """Call `kernel` on `backend`: CPU tensors are moved to the backend's device, and the
    results, and tensors the kernel wrote in place, come back to the CPU. On the emulator
    every check is on and any finding fails the test."""
    moved = [to_device(a, backend) for a in args]
    out = to_host(kernel(*moved, backend=backend, **kwargs), backend)
    for given, used in zip(args, moved):   # outputs passed in (TileLang's style) come back
        if used is not given:
            given.copy_(used.cpu())
    findings = kernel.last_run.findings
    assert findings == [], f"emulator findings: {findings[:3]}"
    return out


@pytest.fixture
def run(backend):
    def run_on_backend(kernel, *args, **kwargs):
        return run_checked(kernel, *args, backend=backend, **kwargs)
    return run_on_backend


@pytest.fixture
def run_family(run):
    """A kernel the harness families already build, at explicit params: build it
    (harness/gen/<family>.py), draw its inputs for `seed`, `run` it and compare every output
    with the family's oracle within its error bounds (docs/tolerance.md), as
    harness.check.case.run_case does. Returns (kernel, inputs, outputs) for further assertions.

        kernel, (x,), (y,) = run_family("softmax", {"M": 37, "N": 128, ...})
    """
    def build_run_compare(name, params, seed=0):
        import core
        from harness.check.compare import assert_outputs_close
        from harness.gen import family

        built = family.get(name).build(dict(params))
        kernel = core.compile(built.func, out_idx=built.out_idx)
        inputs = built.inputs(seed)
        outs = run(kernel, *inputs)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        assert_outputs_close(outs, built.oracle(inputs), built, what=f"{name} ")
        return kernel, inputs, outs
    return build_run_compare
