"""The T.* DSL: a TileLang-compatible subset (SPEC.md section 1).

Usage: `import core.language as T`, then write kernels as for TileLang's Metal backend.
Parsing goes through TVMScript (frontend.py); tile ops are TIR ops (core/ir/ops.py).
"""

from tvm.script import tirx as _tvm_script

from core.language.atomic import (atomic_add, atomic_addx2, atomic_addx4, atomic_max,
                                  atomic_min)
from core.language.buffers import (Buffer, Tensor, alloc_fragment, alloc_local, alloc_shared,
                                   alloc_var, dynamic, symbolic)
from core.language.errors import KernelDefinitionError, LoweringError
from core.language.frontend import prim_func
from core.language.gemm import GemmWarpPolicy, gemm
from core.language.kernel import Kernel
from core.language.layout import Fragment, Layout, annotate_layout, make_swizzled_layout
from core.language.loops import Parallel, Pipelined, Serial, Unroll, serial, unroll
from core.language.math import (abs, cast, ceil, ceildiv, cos, exp, exp2, floor, floordiv,
                                floormod, if_then_else, infinity, log, log2, max, max_value,
                                min, min_value, rsqrt, sigmoid, sin, sqrt, tanh)
from core.language.reduce import (alloc_reducer, finalize_reducer, reduce, reduce_absmax,
                                  reduce_abssum, reduce_max, reduce_min, reduce_sum)
from core.language.tileops import clear, copy, fill

# dtypes: annotations for scalar parameters (`n: T.int32`) and literal constructors
float32 = _tvm_script.float32
float16 = _tvm_script.float16
bfloat16 = _tvm_script.bfloat16
int32 = _tvm_script.int32
int64 = _tvm_script.int64
int8 = _tvm_script.int8
uint8 = _tvm_script.uint8
bool = _tvm_script.bool  # noqa: A001 - TileLang's name
Cast = _tvm_script.Cast
Select = _tvm_script.Select
grid = _tvm_script.grid

__all__ = [n for n in dir() if not n.startswith("_")]
