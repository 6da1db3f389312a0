"""metaltile compiler core.

    import core
    import core.language as T
    kernel = core.compile(func, target="metal", out_idx=[-1])
"""

from core.jit import Kernel, KernelFindingsError, compile, jit  # noqa: A004

__all__ = ["Kernel", "KernelFindingsError", "compile", "jit"]
