"""The T.* DSL: a TileLang-compatible subset (docs/architecture.md, "The DSL").

Usage: `import core.language as T`, then write kernels as for TileLang's Metal backend.
Parsing goes through TVMScript (frontend.py); tile ops are TIR ops (core/ir/ops.py).
"""

from tvm.script import tirx as _tvm_script

from core.language.allreduce import attr, comm_reducer, evaluate, tvm_thread_allreduce
from core.language.atomic import (atomic_add, atomic_addx2, atomic_addx4, atomic_load,
                                  atomic_max, atomic_min, atomic_or, atomic_store)
from core.language.buffers import (Buffer, Tensor, alloc_fragment, alloc_global, alloc_local,
                                   alloc_shared, alloc_var, dynamic, symbolic)
from core.language.control import loop_break
from core.language.eager import StridedTensorType as _StridedTensorType
from core.language.eager import annotate_capacity_dims, const, empty, macro
# the compile-time errors (core/errors.py), named by the DSL too: T.KernelDefinitionError
from core.errors import KernelDefinitionError, LoweringError
from core.language.extern import call_extern, import_source
from core.language.frontend import prim_func
from core.language.gemm import GemmWarpPolicy, gemm
from core.language.kernel import (Kernel, get_block_binding, get_block_bindings,
                                  get_block_extent, get_block_extents, get_thread_binding,
                                  get_thread_bindings, get_thread_extent, get_thread_extents)
from core.language.layout import Fragment, Layout, annotate_layout, make_swizzled_layout
from core.language.loops import (Parallel, Pipelined, Serial, Unroll, Vectorized, serial,
                                 unroll, vectorized)
from core.language.math import (abs, bitwise_and, bitwise_not, bitwise_or, bitwise_xor, cast,
                                cdiv, ceil, ceildiv, clamp, cos, exp, exp2, floor, floordiv,
                                floormod, fmod, if_then_else, infinity, isinf, isnan, likely,
                                log, log2, log10, max, max_value, min, min_value, pow,
                                reinterpret, round, rsqrt, shift_left, shift_right, sigmoid,
                                sin, sqrt, tanh, trunc)
from core.language.quant import decode_e2m1, decode_e4m3
from core.language.reduce import (alloc_reducer, finalize_reducer, reduce, reduce_absmax,
                                  reduce_abssum, reduce_bitand, reduce_bitor, reduce_bitxor,
                                  reduce_max, reduce_min, reduce_sum, reducer_init,
                                  reducer_update)
from core.language.scan import cummax, cumsum
from core.language.swizzle import use_swizzle
from core.language.simdgroup import (access_ptr, address_of, make_filled_simdgroup_matrix,
                                     simdgroup_load, simdgroup_multiply_accumulate,
                                     simdgroup_store)
from core.language.sync import sync_threads
from core.language.tileops import clear, copy, fill, transpose
from core.language.view import reshape, view
from core.language.warp import (activemask, all_sync, any_sync, ballot, ballot_sync,
                                get_lane_idx, get_warp_idx, get_warp_idx_sync, shfl_down,
                                shfl_sync, shfl_up, shfl_xor, warp_reduce_bitand,
                                warp_reduce_bitor, warp_reduce_max, warp_reduce_min,
                                warp_reduce_sum)

# dtypes: TileLang's dtype objects (core/language/dtypes.py): annotations for scalar
# parameters (`n: T.int32`), literal constructors (`T.float32(0)`), strings everywhere else
from core.language.dtypes import dtype  # noqa: E402
from core.language.dtypes import NAMES as _DTYPE_NAMES  # noqa: E402

globals().update({_n: dtype(_v) for _n, _v in _DTYPE_NAMES.items()})
Cast = _tvm_script.Cast
Select = _tvm_script.Select
grid = _tvm_script.grid

# T.Tensor[[M, N], dtype] is T.Tensor's own subscript form (core/language/buffers.py)
StridedTensor = _StridedTensorType(Tensor)

__all__ = [n for n in dir() if not n.startswith("_")]

# Any other name TileLang exports: a KernelDefinitionError naming it (core/language/unsupported.py)
from core.language.unsupported import module_getattr as __getattr__  # noqa: E402
