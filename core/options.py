"""Compile options: TileLang's `PassConfigKey` names and `core.compile`'s keywords.

`PassConfigKey` has TileLang's names and values, so `pass_configs={PassConfigKey.X: v}` (or
the key strings) written for TileLang works with `core.compile(..., pass_configs=...)`.
Each key is one of three kinds, in `METAL_MEANING`:
    acts      it changes what metaltile does (which pass runs, which emulator checks)
    nothing   it switches off a feature Metal does not have (TMA, WGMMA, warp
              specialization, ...): accepted, nothing to do
    rejected  it asks for something with no Metal equivalent: a clear error
A key TileLang does not have is an error naming the key and the accepted ones. Plain data,
no TVM import: `core.PassConfigKey` is cheap.
"""

from __future__ import annotations

from enum import Enum

from core.errors import MetaltileError


class PassConfigKey(str, Enum):
    """TileLang's pass-configuration keys (tilelang.transform.PassConfigKey)."""

    TL_SIMPLIFY = "tl.Simplify"
    TL_SIMPLIFY_TRANSITIVELY_PROVE_INEQUALITIES = "transitively_prove_inequalities"
    TL_SIMPLIFY_CONVERT_BOOLEAN_TO_AND_OF_ORS = "convert_boolean_to_and_of_ors"
    TL_SIMPLIFY_APPLY_CONSTRAINTS_TO_BOOLEAN_BRANCHES = "apply_constraints_to_boolean_branches"
    TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_PROVE_CONDITIONAL = "propagate_knowns_to_prove_conditional"
    TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_SIMPLIFY_EXPRESSIONS = "propagate_knowns_to_simplify_expressions"  # noqa: E501
    TL_SIMPLIFY_ENABLE_LET_INLINE = "enable_simplify_let_inline"
    TL_DISABLE_BUFFER_INIT_CHECK = "tl.disable_buffer_init_check"
    TL_DISABLE_DATA_RACE_CHECK = "tl.disable_data_race_check"
    TL_DISABLE_PRELOWER_SEMANTIC_CHECK = "tl.disable_prelower_semantic_check"
    TL_DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"
    TL_ENABLE_FAST_MATH = "tl.enable_fast_math"
    TL_PTXAS_REGISTER_USAGE_LEVEL = "tl.ptxas_register_usage_level"
    TL_DEVICE_COMPILE_FLAGS = "tl.device_compile_flags"
    TL_EMIT_LINE_DIRECTIVES = "tl.emit_line_directives"
    TL_CONFIG_INDEX_BITWIDTH = "tl.config_index_bitwidth"
    TL_ENABLE_REDUCER_PLAN_VERBOSE = "tl.enable_reducer_plan_verbose"
    TL_LAYOUT_COST_MODEL = "tl.layout_cost_model"
    TL_REDUCER_FORCE_BASELINE = "tl.reducer_force_baseline"
    TL_DISABLE_TMA_LOWER = "tl.disable_tma_lower"
    TL_DISABLE_SAFE_MEMORY_ACCESS = "tl.disable_safe_memory_legalize"
    TL_DISABLE_VECTORIZE_256 = "tl.disable_vectorize_256"
    TL_ENABLE_ASYNC_COPY = "tl.enable_async_copy"
    TL_ENABLE_LOWER_LDGSTG = "tl.enable_lower_ldgstg"
    TL_ENABLE_LOWER_LDGSTG_PREDICATED = "tl.enable_lower_ldgstg_predicated"
    TL_ENABLE_VECTORIZE_PLANNER_VERBOSE = "tl.enable_vectorize_planner_verbose"
    TL_DISABLE_WGMMA = "tl.disable_wgmma"
    TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS = "tl.debug_merge_shared_memory_allocations"
    TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE = "tl.enable_aggressive_shared_memory_merge"
    TL_DISABLE_SHARED_MEMORY_REUSE = "tl.disable_shared_memory_reuse"
    TL_DISABLE_SHUFFLE_ELECT = "tl.disable_shuffle_elect"
    TL_DISABLE_LOOP_UNSWITCHING = "tl.disable_loop_unswitching"
    TL_LOOP_UNSWITCHING_ALLOW_NON_TRIVIAL_ELSE = "tl.loop_unswitching_allow_non_trivial_else"
    TL_IF_STMT_BINDING_INLINE_REPLAYABLE_BINDS = "tl.if_stmt_binding_inline_replayable_binds"
    TL_DISABLE_THREAD_STORAGE_SYNC = "tl.disable_thread_storage_sync"
    TL_FORCE_LET_INLINE = "tl.force_let_inline"
    TL_AST_PRINT_ENABLE = "tl.ast_print_enable"
    TL_LAYOUT_VISUALIZATION_ENABLE = "tl.layout_visualization_enable"
    TL_LAYOUT_VISUALIZATION_FORMATS = "tl.layout_visualization_formats"
    TL_STORAGE_REWRITE_DETECT_INPLACE = "tl.storage_rewrite_detect_inplace"
    TIR_ENABLE_EQUIV_TERMS_IN_CSE = "tir.enable_equiv_terms_in_cse_tir"
    TIR_DISABLE_CSE = "tirx.disable_cse_tir"
    TIR_SIMPLIFY = "tirx.Simplify"
    TIR_DISABLE_STORAGE_REWRITE = "tirx.disable_storage_rewrite"
    TIR_DISABLE_VECTORIZE = "tirx.disable_vectorize"
    TIR_USE_ASYNC_COPY = "tirx.use_async_copy"
    TIR_ENABLE_DEBUG = "tirx.enable_debug"
    TIR_MERGE_STATIC_SMEM = "tirx.merge_static_smem"
    TIR_ADD_LOWER_PASS = "tirx.add_lower_pass"
    TIR_NOALIAS = "tirx.noalias"
    CUDA_KERNELS_OUTPUT_DIR = "cuda.kernels_output_dir"
    TL_DISABLE_OUT_OF_BOUND_WARNING = "tl.disable_out_of_bound_warning"
    TL_ENABLE_DUMP_IR = "tl.enable_dump_ir"
    TL_DUMP_IR_DIR = "tl.dump_ir_path"
    TL_PASS_PROFILE = "tl.pass_profile"
    TL_PASS_PROFILE_THRESHOLD_MS = "tl.pass_profile_threshold_ms"


K = PassConfigKey

# key -> (kind, what it means on Metal). `acts` entries are applied by `resolve` below.
METAL_MEANING = {
    K.TL_DISABLE_THREAD_STORAGE_SYNC: ("acts", "True: the thread_sync pass does not run "
                                               "(no barriers are planned)"),
    K.TIR_DISABLE_VECTORIZE: ("acts", "True: the vectorize pass does not run"),
    K.TL_DISABLE_DATA_RACE_CHECK: ("acts", "True: the emulator does not check for races"),
    K.TL_DISABLE_BUFFER_INIT_CHECK: ("acts", "True: the emulator does not check for "
                                             "uninitialized reads"),
    K.TL_ENABLE_FAST_MATH: ("acts", "True: Metal's default (fast math); False is rejected: "
                                    "the MSL is compiled in fast-math mode"),
    K.TL_DISABLE_TMA_LOWER: ("nothing", "Metal has no TMA"),
    K.TL_DISABLE_WARP_SPECIALIZED: ("nothing", "Metal has no warp specialization"),
    K.TL_DISABLE_WGMMA: ("nothing", "Metal has no WGMMA"),
    K.TL_DISABLE_VECTORIZE_256: ("nothing", "Metal vectors are at most 128 bits here"),
    K.TL_DISABLE_SHUFFLE_ELECT: ("nothing", "Metal has no shuffle-elect"),
    K.TL_ENABLE_ASYNC_COPY: ("nothing", "Metal has no async copies (False is the only "
                                        "behaviour)"),
    K.TIR_USE_ASYNC_COPY: ("nothing", "Metal has no async copies"),
    K.TL_ENABLE_LOWER_LDGSTG: ("nothing", "no PTX ld.global/st.global lowering on Metal"),
    K.TL_ENABLE_LOWER_LDGSTG_PREDICATED: ("nothing", "no PTX ld/st lowering on Metal"),
    K.TL_DISABLE_SAFE_MEMORY_ACCESS: ("nothing", "edge tiles are always masked"),
    K.TL_DISABLE_OUT_OF_BOUND_WARNING: ("nothing", "metaltile emits no such warning"),
    K.TL_PTXAS_REGISTER_USAGE_LEVEL: ("nothing", "no ptxas on Metal"),
    K.TL_DISABLE_PRELOWER_SEMANTIC_CHECK: ("nothing", "metaltile's verify pass always runs"),
}
# Keys whose value True is required (a False asks for something metaltile cannot do).
_TRUE_ONLY = {K.TL_ENABLE_FAST_MATH}
_FALSE_ONLY = {K.TL_ENABLE_ASYNC_COPY, K.TIR_USE_ASYNC_COPY, K.TL_ENABLE_LOWER_LDGSTG,
               K.TL_ENABLE_LOWER_LDGSTG_PREDICATED}
_DISABLES_PASS = {K.TL_DISABLE_THREAD_STORAGE_SYNC: "thread_sync",
                  K.TIR_DISABLE_VECTORIZE: "vectorize"}
_DISABLES_CHECK = {K.TL_DISABLE_DATA_RACE_CHECK: "races",
                   K.TL_DISABLE_BUFFER_INIT_CHECK: "uninit"}

# TileLang's `execution_backend` values (tilelang/jit: "auto", "tvm_ffi", "cython", "nvrtc",
# "torch", "cutedsl"). TileLang's Metal backend declares "torch" (torch.mps.compile_shader,
# what "auto" resolves to) and "tvm_ffi" (TVM's Metal runtime): both mean "compile the
# kernel and run it", which here is metaltile's MSL on metaltile's backend (the emulator, or
# MPS on macOS where torch has it; `kernel(..., backend=...)` chooses per call). The CUDA
# ones (cython, nvrtc, cutedsl) have nothing to run on Metal and are errors.
EXECUTION_BACKENDS = ("auto", "torch", "tvm_ffi")

# core.compile's other TileLang keywords, and the only values they may take on Metal.
TILELANG_KEYWORDS = {
    "execution_backend": (None, *EXECUTION_BACKENDS),
    "target_host": (None,),
    "compile_flags": (None, (), []),
}


def meaning(key) -> tuple:
    """(kind, explanation) of a pass-config key; kind 'rejected' for a known key without
    a Metal meaning; MetaltileError for a key TileLang does not have."""
    k = _key(key)
    return METAL_MEANING.get(k, ("rejected", "it has no Metal equivalent"))


def _key(key) -> PassConfigKey:
    try:
        return PassConfigKey(key.value if isinstance(key, PassConfigKey) else key)
    except ValueError:
        accepted = ", ".join(sorted(k.value for k in METAL_MEANING))
        raise MetaltileError(f"unknown pass-config key {key!r}; accepted on Metal: "
                             f"{accepted}", construct="pass_configs") from None


def resolve(pass_configs, disable, checks) -> tuple:
    """(disable, checks) after applying `pass_configs` (a dict key -> value)."""
    disable, checks = tuple(disable), tuple(checks)
    for key, value in dict(pass_configs or {}).items():
        k = _key(key)
        kind, why = meaning(k)
        if kind == "rejected":
            raise MetaltileError(f"pass-config key {k.value!r} ({k.name}) is not supported "
                                 f"on Metal: {why}", construct="pass_configs")
        if (k in _TRUE_ONLY and not value) or (k in _FALSE_ONLY and value):
            raise MetaltileError(f"pass-config key {k.value!r} = {value!r} cannot be "
                                 f"honoured on Metal: {why}", construct="pass_configs")
        if value and k in _DISABLES_PASS and _DISABLES_PASS[k] not in disable:
            disable += (_DISABLES_PASS[k],)
        if value and k in _DISABLES_CHECK:
            checks = tuple(c for c in checks if c != _DISABLES_CHECK[k])
    return disable, checks


def execution_backend(value, where="core.compile") -> str:
    """TileLang's `execution_backend` name resolved for Metal: None and "auto" are "torch"
    (as TileLang's Metal backend resolves them), "torch" and "tvm_ffi" stay; every one of
    them compiles with metaltile and runs on metaltile's backend. Anything else is an
    error listing the accepted names."""
    name = value.lower() if isinstance(value, str) else value
    if name is None or name == "auto":
        return "torch"
    if name in EXECUTION_BACKENDS:
        return name
    accepted = ", ".join(repr(b) for b in (None, *EXECUTION_BACKENDS))
    raise MetaltileError(f"execution_backend={value!r} is not supported on Metal (TileLang's "
                         "Metal backends are 'torch' and 'tvm_ffi'; 'cython', 'nvrtc' and "
                         f"'cutedsl' are CUDA's); accepted: {accepted}, each of which compiles "
                         "the MSL with metaltile and runs it on metaltile's backend (the "
                         "emulator, or MPS on macOS)", construct=where)


def check_keywords(options: dict, where="core.compile") -> None:
    """TileLang's compile keywords with a value metaltile honours; else a clear error."""
    for name, value in options.items():
        if name == "verbose":
            continue  # honoured by the caller (a line per compile)
        if name not in TILELANG_KEYWORDS:
            allowed = ", ".join(["target", "out_idx", "pass_configs", "verbose", "disable",
                                 "replace", "cache", "checks", "raise_on_findings",
                                 *(["debug_root_path"] if where != "core.compile" else []),
                                 *TILELANG_KEYWORDS])
            raise MetaltileError(f"unknown keyword {name!r}; allowed: {allowed}",
                                 construct=where)
        if name == "execution_backend":
            execution_backend(value, where)
        elif value not in TILELANG_KEYWORDS[name]:
            raise MetaltileError(f"{name}={value!r} is not supported on Metal; allowed: "
                                 f"{TILELANG_KEYWORDS[name]}", construct=where)


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for integers (TileLang's `tilelang.cdiv`)."""
    return -(-a // b)


def next_power_of_2(x: int) -> int:
    """The smallest power of two >= x (1 for x <= 1), TileLang's `next_power_of_2`."""
    return 1 << (int(x) - 1).bit_length() if x > 1 else 1
