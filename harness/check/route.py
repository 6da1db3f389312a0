"""How a case reaches its kernel: the call path, compile options, math mode and cache state
a user picks, as one JSON-able `route` dict (drawn by harness.gen.strategies.compile_route,
stored in regression cases, replayed by run_case(..., route=...)).

    path        "compile"        core.compile(func, ...)
                "jit_prim_func"  @core.jit(...) on the prim_func itself (compiled at once)
                "jit_factory"    @core.jit(...) on a function returning it, then called
                "par_compile"    core.par_compile of that factory
    disable, pass_configs        the options of the case's compile (passes whose absence
                                 must not change any result: strategies.NEUTRAL_PASSES)
    math_mode   "safe" | "fast"  the math mode the kernel runs in (the MPS backend's
                                 PYTORCH_MPS_FAST_MATH; the emulator builds with its
                                 contraction rule)
    cache       "cold"           compiled with cache=False
                "memory"         the same function compiled before with the options
                                 `before`, then the case's compile (an in-memory lookup)
                "disk"           as "memory", with the in-memory cache cleared in between
                                 (an on-disk lookup)
                "twin"           a structurally equal function, built separately, compiled
                                 before with `before`

What it checks, beyond the case's usual checks: a kernel that came through a warm cache
or a call path other than a cold core.compile is the kernel lowering gives for the
function and the case's options (its MSL and its decisions, compared with an uncached
`core.jit.lower`); anything else raises `StaleKernel`, which run_case reports as status
"stale_kernel". So a compile cache that keys a kernel without its options, or a path that
drops them, fails a case instead of passing with the wrong kernel's (right) numbers.
"""

from __future__ import annotations

import os
from contextlib import contextmanager


class StaleKernel(Exception):
    """The kernel a call path or a cache returned is not the one its options lower to."""


DEFAULT = {"path": "compile", "cache": "cold", "disable": [], "pass_configs": {},
           "math_mode": "safe"}


def compile_routed(fam, built, params: dict, route: dict, *, disable=(), replace=None,
                   reference=None):
    """The case's kernel, reached the way `route` says (module docstring); `disable` (the
    fuzz run's own, checking the checker) is added to the route's. `fam.build(params)`
    makes the twin. Raises StaleKernel for a kernel other than lowering gives.

    `reference`: the CompiledProgram `reference(built, route, disable)` gives, when the
    caller has lowered it already (the fuzz's steering lowers the candidate it runs with
    the case's options): compared with instead of lowering again."""
    import core
    from core.jit import clear_memory_cache

    route = {**DEFAULT, **route}
    options = _options(route, disable)
    cache = route["cache"]
    if cache != "cold":
        before = _options(route.get("before") or {}, disable)
        first = fam.build(dict(params)).func if cache == "twin" else built.func
        core.compile(first, out_idx=built.out_idx, replace=replace, **before)
        if cache == "disk":
            clear_memory_cache()
    kernel = _by_path(route["path"], built, options, replace, cache=cache != "cold")
    if checks_nothing(route):
        return kernel   # nothing between the compile and its options to go wrong
    fresh = reference if reference is not None else \
        _lower(built, reference_disable(route, disable), replace)
    if kernel.msl != fresh.msl or tuple(kernel.decisions) != tuple(fresh.decisions):
        raise StaleKernel(
            f"the kernel from path {route['path']!r} with cache {cache!r} (compiled before "
            f"with {route.get('before')}) is not the one its options {options} lower to: "
            f"{_first_difference(kernel.msl, fresh.msl)}")
    return kernel


def checks_nothing(route: dict | None) -> bool:
    """A route whose kernel is a cold core.compile's (or no route: the run's own
    core.compile): there is no reference to compare it with."""
    route = {**DEFAULT, **(route or {})}
    return route["cache"] == "cold" and route["path"] == "compile"


def compile_options_of(route: dict | None, disable=()) -> dict:
    """The options the route's kernel is compiled with (its own and the run's `disable`):
    core.compile's `disable` and `pass_configs` keywords."""
    return _options({**DEFAULT, **(route or {})}, disable)


def reference_disable(route: dict, disable=()) -> tuple:
    """The passes the reference lowering switches off: the route's options resolved as
    core/options.py resolves them (pass_configs that switch a pass off included)."""
    from core import options as compile_options

    options = compile_options_of(route, disable)
    return compile_options.resolve(options["pass_configs"], options["disable"], ())[0]


def reference(built, route: dict, disable=(), replace=None):
    """The kernel (CompiledProgram) a routed kernel must be: an uncached `core.jit.lower`
    of the function with the route's options."""
    return _lower(built, reference_disable(route, disable), replace)


def _lower(built, resolved: tuple, replace):
    from core.jit import lower

    return lower(built.func, disable=resolved, replace=replace)


def _options(part: dict, disable) -> dict:
    return {"disable": tuple(dict.fromkeys([*part.get("disable", ()), *disable])),
            "pass_configs": dict(part.get("pass_configs") or {})}


def _by_path(path: str, built, options: dict, replace, cache: bool):
    import core

    kw = dict(options, cache=cache, **({"replace": replace} if replace else {}))
    if path == "compile":
        return core.compile(built.func, out_idx=built.out_idx, **kw)
    if path == "jit_prim_func":
        return core.jit(built.func, out_idx=built.out_idx, **kw)
    factory = core.jit(out_idx=built.out_idx, **kw)(lambda: built.func)
    if path == "jit_factory":
        return factory()
    if path == "par_compile":
        return core.par_compile(factory, [()])[0]
    raise ValueError(f"unknown call path {path!r}; paths: compile, jit_prim_func, "
                     "jit_factory, par_compile")


def _first_difference(a: str, b: str) -> str:
    for n, (x, y) in enumerate(zip(a.splitlines(), b.splitlines()), 1):
        if x != y:
            return f"MSL line {n}: {x.strip()!r} instead of {y.strip()!r}"
    return "the MSL differs in length" if a != b else "the decisions differ"


@contextmanager
def math_mode(route: dict | None):
    """Run in the route's math mode (PYTORCH_MPS_FAST_MATH, what METAL.math_mode_in_effect
    reads), restoring the environment after."""
    if not route or "math_mode" not in route:
        yield     # no route: the environment as the caller set it
        return
    mode = route["math_mode"]
    saved = os.environ.get("PYTORCH_MPS_FAST_MATH")
    if mode == "fast":
        os.environ["PYTORCH_MPS_FAST_MATH"] = "1"
    else:
        os.environ.pop("PYTORCH_MPS_FAST_MATH", None)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTORCH_MPS_FAST_MATH", None)
        else:
            os.environ["PYTORCH_MPS_FAST_MATH"] = saved
