"""The T.* DSL: a TileLang-compatible subset (docs/architecture.md, "The DSL").

Usage: `import core.language as T`, then write kernels as for TileLang's Metal backend.
Parsing goes through TVMScript (frontend.py); tile ops are TIR ops (core/ir/ops.py).
"""

from tvm.script import tirx as _tvm_script

from core.language.buffers import (Buffer, Tensor, alloc_fragment, alloc_local, alloc_shared,
                                   alloc_var, dynamic, symbolic)
from core.language.errors import KernelDefinitionError, LoweringError
from core.language.frontend import prim_func
from core.language.gemm import GemmWarpPolicy, gemm
from core.language.kernel import Kernel
from core.language.loops import Parallel, Pipelined, Serial, Unroll, serial, unroll
from core.language.math import (abs, bitwise_and, bitwise_not, bitwise_or, bitwise_xor, cast,
                                ceil, ceildiv, cos, exp, exp2, floor, floordiv, floormod,
                                if_then_else, infinity, log, log2, max, max_value, min,
                                min_value, reinterpret, rsqrt, shift_left, shift_right,
                                sigmoid, sin, sqrt, tanh)
from core.language.quant import decode_e2m1, decode_e4m3
from core.language.reduce import (reduce_absmax, reduce_abssum, reduce_max, reduce_min,
                                  reduce_sum)
from core.language.tileops import clear, copy, fill

# dtypes: annotations for scalar parameters (`n: T.int32`) and literal constructors
float32 = _tvm_script.float32
float16 = _tvm_script.float16
bfloat16 = _tvm_script.bfloat16
int32 = _tvm_script.int32
int64 = _tvm_script.int64
int8 = _tvm_script.int8
int16 = _tvm_script.int16
uint8 = _tvm_script.uint8
uint16 = _tvm_script.uint16
uint32 = _tvm_script.uint32
uint64 = _tvm_script.uint64
bool = _tvm_script.bool  # noqa: A001 - TileLang's name
Cast = _tvm_script.Cast
Select = _tvm_script.Select
grid = _tvm_script.grid

__all__ = [n for n in dir() if not n.startswith("_")]
