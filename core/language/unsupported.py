"""TileLang names the DSL does not support: a clear error instead of an AttributeError.

`T.<name>` for a name TileLang's `tilelang.language` exports (core/language/tilelang_names.py,
plus TVMScript's parser names TileLang re-exports) that `core.language` does not define
raises `UnsupportedConstruct`, a `KernelDefinitionError` naming the construct and why
(it is also an AttributeError, so `hasattr(T, name)` stays False). Names TileLang does not
have stay a plain AttributeError. `reason(name)` is the text, also used by the language
table (docs/language.md).
"""

from __future__ import annotations

from core.errors import KernelDefinitionError
from core.language.tilelang_names import GROUPS


class UnsupportedConstruct(KernelDefinitionError, AttributeError):
    """A TileLang construct metaltile rejects; the message says why."""


# (prefix or name, reason), first match wins; the group defaults follow.
_BY_NAME = (
    (("mbarrier_", "barrier_arrive", "barrier_wait", "alloc_barrier"),
     "Metal has no asynchronous (mbarrier-style) barriers; tile ops get their "
     "threadgroup barriers from the compiler"),
    (("WS", "ws_op", "annotate_ws_schedule"), "Metal has no warp specialization"),
    (("sync_warp",), "a warp barrier: simdgroup lanes run in lockstep on Metal and the "
                     "barrier planner orders threadgroup memory; not exposed"),
    (("match_",), "Metal's simdgroup functions have no match (lanes with equal values); "
                  "build it from T.ballot"),
    (("syncthreads_",), "a barrier that also counts or votes has no MSL form; use "
                        "T.sync_threads() and T.atomic_add into threadgroup memory"),
    (("sync_global", "sync_grid"), "Metal has no barrier across threadgroups; split the "
                                   "kernel into two T.Kernel launches"),
    (("tma_", "cp_async", "async_copy", "ptx_", "ldg", "stg", "lds", "sts"),
     "a CUDA memory-copy construct with no Metal equivalent; use T.copy"),
    (("alloc_tmem", "deallocate_tmem", "alloc_descriptor", "alloc_cluster_barrier",
      "increase_descriptor_offset", "create_tma_descriptor"),
     "a Hopper/Blackwell resource with no Metal equivalent"),
    (("Persistent", "PersistentTileScheduler", "BaseTileScheduler"),
     "persistent-kernel scheduling is not implemented"),
    (("im2col", "c2d_im2col"), "im2col tile ops are not implemented"),
    (("gemm_sp",), "sparse GEMM is not implemented"),
    (("inline",), "T.inline is not supported; use T.macro"),
    (("Ref", "JITFunc", "PrimFunc", "annotate_compile_flags", "annotate_pass_configs"),
     "this part of TileLang's JIT internals is not supported; use @core.jit on an eager "
     "function or a @T.prim_func (core.compile takes pass_configs)"),
    (("AnyDType", "get_tvm_dtype", "is_float4", "is_f8f6f4_family",
      "validate_gemm_ab_dtypes"), "a TileLang dtype helper; use T.dtype(x) (.bits, "
                                  ".as_torch()) instead"),
    (("float8", "float6", "float4", "int4", "tfloat32"),
     "Metal has no 8-, 6- or 4-bit float, 4-bit integer or tf32 type"),
)
_MATH = ("acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cosh", "sinh", "tan",
         "erf", "exp10", "expm1", "hypot", "ldexp", "log1p", "nextafter", "copysign",
         "isfinite", "nearbyint", "popcount", "clz", "truncdiv",
         "truncmod", "q_multiply_shift", "fast_")
_BY_GROUP = {
    "cuda": "a CUDA-only construct of TileLang's default dialect; Metal has no equivalent",
    "metal": "cooperative tensors are the M5 tensor-op path, out of scope; simdgroup "
             "matrices are (T.simdgroup_load/store, T.gemm)",
    "dtype": "vector dtypes are not supported (the compiler vectorizes loops itself)",
    "math": "CUDA fast-math/IEEE intrinsics are not exposed; Metal compiles in fast-math "
            "mode (T.exp, T.log, ... )",
    "tir": "this low-level TIR construct is not part of the DSL",
    "tvmscript": "this TVMScript construct is not part of the DSL",
}
_DEFAULT = "not supported by metaltile yet"


def _group_of(name: str) -> str | None:
    for group, names in GROUPS.items():
        if name in names:
            return group
    if name in tvmscript_names():
        return "tvmscript"
    return None


def tvmscript_names() -> tuple:
    """TVMScript's parser names, which TileLang's `T` re-exports too."""
    import tvm.tirx.script.parser as parser
    return tuple(n for n in parser.__all__ if not n.startswith("_"))


def reason(name: str) -> str | None:
    """Why `T.<name>` is rejected; None when TileLang has no such name."""
    group = _group_of(name)
    if group is None:
        return None
    for prefixes, why in _BY_NAME:
        if name.startswith(prefixes):
            return why
    if group in ("tir", "tvmscript") and name.startswith(_MATH):
        return "this math or bit operation has no MSL mapping in metaltile yet"
    return _BY_GROUP.get(group, _DEFAULT)


def module_getattr(name: str):
    """`core.language.__getattr__`: names defined there never reach it."""
    dunder = name.startswith("__") and name.endswith("__")
    why = None if dunder else reason(name)
    if why is None:
        raise AttributeError(f"module 'core.language' has no attribute {name!r}")
    raise UnsupportedConstruct(f"TileLang's construct is not supported by metaltile: {why}",
                               construct=f"T.{name}")
