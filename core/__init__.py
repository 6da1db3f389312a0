"""metaltile compiler core.

    import core
    import core.language as T
    kernel = core.compile(func, target="metal", out_idx=[-1])
    core.cdiv, core.next_power_of_2, core.PassConfigKey   TileLang's module helpers
"""

from core.options import PassConfigKey, cdiv, next_power_of_2  # noqa: E402,F401 - no tvm

__all__ = ["Kernel", "KernelFindingsError", "compile", "jit", "par_compile"]


def __getattr__(name):
    # Lazy: `import core.runtime.emu` (the emulator, the harness CLI) must not pay for
    # importing tvm and torch, which core.jit needs.
    if name in __all__:
        import importlib
        module = importlib.import_module("core.jit")
        # Bind all public names, so `core.jit` is the decorator, not the submodule.
        globals().update({n: getattr(module, n) for n in __all__})
        return globals()[name]
    raise AttributeError(f"module 'core' has no attribute {name!r}")
