"""MSL printer: LoweredProgram -> one Metal library text + a KernelSpec per kernel.

Input: the device PrimFuncs of `core.ir.program.LoweredProgram` (flat buffers, vector
expressions from VectorizeLoop, `tl.threadgroup_barrier` calls, the simdgroup matrix
intrinsics of core/ir/matrix.py). Output: MSL in the subset the emulator executes and
Apple's compiler accepts: plain C++-like code, explicit
conversions (`float4(h4)`, `half(x)`), vector memory access through typed pointers.

Vector access (docs/architecture.md, "Code generation"): a vector load or store of device
memory goes through a typed pointer (`*(device half4*)(A + i)`; the runtime binds buffers at
the alignment the kernel spec states). One of threadgroup memory does too when the analyzer
proves its element offset a multiple of its lanes (vectorize.py proved it before
flattening; the printer checks it again on the flat index); such an array is declared as an
array of the unsigned integer vector its widest access needs (`threadgroup uint2
w_words[896]`) with a typed pointer to it (`threadgroup bfloat* w`), since Metal aligns a
threadgroup array only to its element type. Thread (register) arrays are accessed
element-wise: registers have no vector width on Apple GPUs.

Carriers (docs/architecture.md, "Code generation"): `bfloat2` is the widest bf16 register
vector, 4 lanes the others'. A wider vector (4 or 8 bfloats, 8 halves, 8 or 16 bytes;
core/transform/vectorize.py admits one only in a bit-preserving copy or broadcast) is a
packed integer carrier, `uint2` / `uint4`: it is loaded, stored and broadcast as bits
(`as_type`, one 32-bit word at a time) and never takes part in arithmetic; anything else
raises.

The Metal vocabulary lives in the tables below (types, address spaces, operators,
intrinsics, builtin attributes); `_KernelPrinter` is the one visitor that uses them.

Scalar ABI (docs/architecture.md, "Code generation"): all scalars of a kernel are fields
of one struct `<kernel>_args`, one 8-byte slot each in parameter order, passed as
`constant <kernel>_args& args [[buffer(K)]]` with K = number of buffers.

Thread scalars: a one-element thread array accessed only at index 0 (an accumulator, a
row statistic) is printed as a scalar variable, `float inv;` and `inv`, as hand-written
kernels declare it; anything else local is an array.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import tvm
from tvm import tirx
from tvm.sym import Analyzer
from tvm.tirx import is_buffer_var

from core.errors import LoweringError
from core.ir import annotations as keys
from core.ir import ops
from core.ir.kernel import func_name
from core.ir.matrix import MATRIX_SCOPE
from core.ir.stmt import (ByHandle, as_int, atomics_in, bind_ranges, children, choice_parts,
                           collect, items, loads, visit_nodes, walk)
from core.target import DTYPES, METAL, MSL_KEYWORDS

# ---- Metal vocabulary ---------------------------------------------------------------------

TYPES = {name: d.msl for name, d in DTYPES.items()}          # core/target.py
TYPE_BYTES = {name: d.bytes for name, d in DTYPES.items()}
# Names a kernel variable cannot take: the printer's own and MSL words, the type names.
RESERVED_NAMES = {"args", "tgid", "tpos"} | MSL_KEYWORDS | set(TYPES.values())
ADDRESS_SPACES = {"global": "device", "shared": "threadgroup", "local": "thread"}
BUILTINS = {  # launch tag prefix -> (parameter type, variable, attribute)
    "blockIdx": ("uint3", "tgid", "threadgroup_position_in_grid"),
    "threadIdx": ("uint3", "tpos", "thread_position_in_threadgroup"),
}
BINARY = {
    "Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Mod": "%",
    "EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">=",
    "And": "&&", "Or": "||",
}
# Integer bit operations. MSL (C++14 rules) promotes char and short scalars to int before
# operating, so a narrow result is converted back to its type; a shift count is taken
# modulo the width of the (promoted) left operand, as MSL defines it, and the printer
# writes that masking where the count is not provably in range so the same text is also
# well-defined C++ (the emulator).
BITWISE = {"BitwiseAnd": "&", "BitwiseOr": "|", "BitwiseXor": "^", "LShift": "<<",
           "RShift": ">>"}
SHIFTS = ("LShift", "RShift")
INT_BITS = DTYPES["int32"].bits     # what char and short scalars are promoted to
INTRINSICS = {  # TIR op -> MSL function
    "tirx.exp": "exp", "tirx.exp2": "exp2", "tirx.log": "log",
    "tirx.sqrt": "sqrt", "tirx.rsqrt": "rsqrt", "tirx.fabs": "fabs", "tirx.tanh": "tanh",
    "tirx.sin": "sin", "tirx.cos": "cos", "tirx.floor": "floor",
    "tirx.pow": "pow", "tirx.fmod": "fmod", "tirx.round": "rint", "tirx.trunc": "trunc",
    "tirx.isnan": "isnan",      # T.isinf is fabs(x) == inf: TIR has no isinf call
    "tirx.log10": "log10", "prim.log2": "log2", "prim.ceil": "ceil",  # TVM 0.27's names
    "tl.simd_shuffle_xor": "simd_shuffle_xor", "tl.simd_sum": "simd_sum",
    "tl.simd_max": "simd_max", "tl.simd_min": "simd_min",
    # warp-level constructs (core/language/warp.py)
    "tl.simd_and": "simd_and", "tl.simd_or": "simd_or", "tl.simd_xor": "simd_xor",
    "tl.simd_shuffle": "simd_shuffle", "tl.simd_shuffle_up": "simd_shuffle_up",
    "tl.simd_shuffle_down": "simd_shuffle_down", "tl.simd_any": "simd_any",
    "tl.simd_all": "simd_all",
    "tl.simd_prefix_inclusive_sum": "simd_prefix_inclusive_sum",   # T.cumsum
}
BARRIER = "threadgroup_barrier(mem_flags::mem_threadgroup);"
# simdgroup 8x8 matrices (core/ir/matrix.py; buffers of scope MATRIX_SCOPE): types, intrinsics
MATRIX_TYPES = {"float32": "simdgroup_float8x8", "float16": "simdgroup_half8x8",
                "bfloat16": "simdgroup_bfloat8x8"}
MATRIX_CALLS = {  # TIR op -> MSL, formatted with the printed arguments ({t}: element type)
    "tl.simdgroup_fill": "{0} = make_filled_simdgroup_matrix<{t}, 8, 8>({1})",
    "tl.simdgroup_load": "simdgroup_load({0}, {1}, {2}, ulong2({3}, {4}), {5})",
    "tl.simdgroup_store": "simdgroup_store({0}, {1}, {2}, ulong2({3}, {4}), {5})",
    "tl.simdgroup_mma": "simdgroup_multiply_accumulate({0}, {1}, {2}, {3})",
}
# Atomics (core/language/atomic.py, METAL.atomic_*): native ones are one call on the MSL
# atomic type; the others a compare-exchange helper on the 32-bit word holding the element.
ATOMIC_TYPES = {"int32": "atomic_int", "uint32": "atomic_uint", "float32": "atomic_float"}
ATOMIC_NATIVE = ("atomic_fetch_{kind}_explicit(({space} {atype}*)&{elem}, {value}, "
                 "memory_order_relaxed)")
ATOMIC_COMBINE = {"add": "{a} + {b}", "max": "max({a}, {b})", "min": "min({a}, {b})"}
ATOMIC_WORD_HELPER = """
// Atomic {kind} on a {t} in {space} memory: compare-exchange on the 32-bit word that holds it
// (MSL has no atomic of this type); returns the element's value before the update.
inline {t} {name}({space} atomic_uint* word, uint shift, {t} v) {{
  uint old = atomic_load_explicit(word, memory_order_relaxed);
  while (true) {{
    const {t} cur = {unpack};
    const {t} next = {t}({combined});
    const uint repl = {pack};
    if (atomic_compare_exchange_weak_explicit(word, &old, repl, memory_order_relaxed,
                                              memory_order_relaxed))
      return cur;
  }}
}}
"""
ATOMIC_PACKING = {  # element bits -> (unpack the element from `old`, pack `next` into it)
    32: ("as_type<{t}>(old)", "as_type<uint>(next)"),
    16: ("as_type<{t}>(ushort(old >> shift))",
         "(old & ~(0xFFFFu << shift)) | (uint(as_type<ushort>(next)) << shift)"),
}
KERNEL_ATTRS = "[[kernel, max_total_threads_per_threadgroup({n})]]"
ARGS_TYPE = "constant {struct}&"     # the scalars' parameter, `args [[buffer(K)]]`
PRELUDE = """#include <metal_stdlib>
using namespace metal;
"""
FLOOR_HELPERS = """
// Floor division and modulo on integers (TIR semantics), for operands of unknown sign.
template <typename I> inline I tl_floordiv(I a, I b) {
  I q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <typename I> inline I tl_floormod(I a, I b) {
  I r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
"""
SLOT_BYTES = 8
# alignment in bytes -> the element type of a threadgroup array declared at that alignment
ALIGNED_WORDS = {2: "ushort", 4: "uint", 8: "uint2", 16: "uint4"}


def _scalar(dtype) -> str:
    """The element dtype of a (vector) dtype: "float16x4" -> "float16"."""
    return str(dtype).partition("x")[0]


def _with_base(dtype, base: str) -> str:
    """`dtype` with its element type replaced, lanes kept: ("float16x4", "float32")."""
    _, x, lanes = str(dtype).partition("x")
    return base + x + lanes


def msl_type(dtype) -> str:
    dtype = str(dtype)
    base, _, lanes = dtype.partition("x")
    if base not in TYPES:
        raise LoweringError(f"dtype {dtype} has no Metal type", construct="MSL printer")
    return TYPES[base] + (lanes if lanes else "")


def scalar_dtype(dtype) -> str:
    return str(dtype).partition("x")[0]


def lanes_of(dtype) -> int:
    return int(getattr(dtype, "lanes", 1) or 1)


def carrier_of(dtype) -> str | None:
    """The packed integer carrier dtype ("uint32x2", "uint32x4") of a vector dtype wider
    than its type's register vector ("bfloat16x4", "float16x8"), else None."""
    base, _, lanes = str(dtype).partition("x")
    words = METAL.carrier_words(base, int(lanes)) if lanes and base in DTYPES else None
    return None if words is None else f"uint32x{words}"


def _word_lanes(dtype) -> tuple:
    """(lanes, MSL vector type) of the elements of `dtype`'s scalar type that one 32-bit
    carrier word holds: (2, "bfloat2"), (4, "uchar4")."""
    base = _scalar(dtype)
    lanes = 32 // DTYPES[base].bits
    return lanes, msl_type(f"{base}x{lanes}")


def _unroll_pragma(loop) -> str | None:
    """The clang loop pragma Apple's compiler takes for a loop's unroll request (TVMScript's
    `serial(unroll=...)` annotations, which T.unroll and T.serial(unroll=) set): full unroll
    for `True` (MLX's STEEL_PRAGMA_UNROLL spelling), a count for an int, disable for False.
    A loop without a request gets `#pragma unroll` when it is short (_short_nest_steps)."""
    ann = loop.annotations or {}
    if "disable_unroll" in ann:
        return "#pragma clang loop unroll(disable)"
    if "pragma_unroll" not in ann:
        short = _short_nest_steps(loop) is not None and _trips(loop) >= 2
        return "#pragma unroll" if short else None
    value = ann["pragma_unroll"]
    if isinstance(value, bool) or str(getattr(value, "dtype", "")) == "bool":
        return "#pragma clang loop unroll(full)" if bool(as_int(value)) else None
    count = as_int(value)
    return f"#pragma clang loop unroll_count({count})" if count and count > 1 else \
        "#pragma clang loop unroll(full)"


def _short_nest_steps(loop) -> int | None:
    """The innermost bodies a loop nest runs when it is short enough to unroll without being
    asked (at most METAL.auto_unroll_trips trips per loop, METAL.auto_unroll_steps bodies in
    all, every loop of the nest of a constant trip count), else None. Clang (Apple's compiler
    is clang) reads `#pragma unroll` before a loop of constant trip count as "unroll it
    whole"; an inner loop of the nest gets its own pragma."""
    trips = _trips(loop)
    if trips is None or trips > METAL.auto_unroll_trips:
        return None
    inner = 0
    for sub in _outermost_loops(loop.body):
        steps = _short_nest_steps(sub)
        if steps is None:
            return None
        inner += steps
    steps = trips * max(inner, 1)
    return steps if steps <= METAL.auto_unroll_steps else None


def _outermost_loops(stmt) -> list:
    """The loops in `stmt` not inside another loop of it."""
    if isinstance(stmt, tirx.For):
        return [stmt]
    return [f for k in children(stmt) for f in _outermost_loops(k)]


def _trips(loop) -> int | None:
    """A loop's constant trip count, else None."""
    extent, step = as_int(loop.extent), getattr(loop, "step", None)
    step = 1 if step is None else as_int(step)
    if extent is None or step is None or step <= 0:
        return None
    return -(-extent // step)


# ---- kernel spec ----------------------------------------------------------------------------

@dataclass(frozen=True)
class BufferSpec:
    name: str
    dtype: str
    index: int                 # [[buffer(index)]]
    readonly: bool
    align: int                 # bytes the kernel's vector accesses assume


@dataclass(frozen=True)
class ScalarField:
    name: str
    dtype: str
    offset: int                # byte offset in the args struct (8-byte slots)


@dataclass(frozen=True)
class ArgsStruct:
    name: str
    index: int                 # [[buffer(index)]], right after the last buffer
    fields: tuple

    @property
    def size(self) -> int:
        return SLOT_BYTES * len(self.fields)


@dataclass(frozen=True)
class ParamDeclaration:
    """One kernel parameter as printed: `{type} {name} [[{attribute}({index})]]` on MSL
    line `line` of the library (`index` None for a thread-position attribute)."""
    name: str
    type: str                  # MSL, e.g. "const device half*", "constant k_args&", "uint3"
    attribute: str             # "buffer" or a thread-position attribute
    index: int | None
    line: int


@dataclass(frozen=True)
class KernelSpec:
    name: str
    buffers: tuple             # BufferSpecs in [[buffer(i)]] order
    args: ArgsStruct | None
    threadgroup: tuple         # (x, y, z)
    max_total_threads: int
    grid: tuple = ()           # (x, y, z) HostExprs of the launch (filled by core.jit)
    # The kernel's declaration as printed: its MSL line in the library (that of its name)
    # and its parameters; the emulator takes them instead of reading the source's
    # declarations with clang (core/runtime/emu/signature.py, `declared`).
    line: int = 0
    params: tuple = ()         # ParamDeclarations in order

    @property
    def scalars(self) -> tuple:
        return self.args.fields if self.args else ()


def _args_struct_decl(args: ArgsStruct) -> str:
    lines = [f"struct alignas({SLOT_BYTES}) {args.name} {{"]
    for i, f in enumerate(args.fields):
        size = TYPE_BYTES[f.dtype]
        lines.append(f"  {msl_type(f.dtype)} {f.name};")
        if size < SLOT_BYTES:
            lines.append(f"  char _pad{i}[{SLOT_BYTES - size}];")
    lines.append("};")
    return "\n".join(lines)


# ---- the visitor ----------------------------------------------------------------------------

class _KernelPrinter:
    def __init__(self, func):
        self.func = func
        self.name = func_name(func)
        self.readonly = {str(n) for n in func.attrs[keys.READONLY]}
        self.threads = [int(t) for t in func.attrs[keys.THREADS]]
        # Var/buffer-keyed tables by handle (ByHandle): `==` on Vars builds EQ nodes
        self.names = ByHandle()    # Var -> MSL identifier
        self.taken = set()
        self.scope = ByHandle()    # buffer Var -> "global" | "shared" | "local"
        self.views = ByHandle()    # flat DeclBuffer view -> parameter buffer
        self.analyzer = Analyzer()
        self.lines = []
        self.indent = 1
        self.needs_floor = False
        self.align = ByHandle()
        self.builtins = set()
        self.helpers = {}          # helper function name -> MSL text (atomics)
        # threadgroup arrays that need more alignment than their element's (buffer ->
        # bytes): 16-bit elements updated by atomics (the compare-exchange works on the
        # 32-bit word) and arrays read or written as vectors; declared as words of that
        # size and used through a pointer (`alloc`)
        self.word_aligned = {}
        for a in atomics_in(func.body):
            if DTYPES[str(a.buffer.ty.dtype)].bits < METAL.atomic_word_bits:
                self.need_alignment(a.buffer, METAL.atomic_word_bits // 8)
        for buf, index in _vector_accesses(func.body):
            if ops.buffer_scope(buf) == "shared" and _aligned_vector(index):
                self.need_alignment(buf, TYPE_BYTES[str(buf.ty.dtype)] * int(index.lanes))
        self.thread_scalars = _thread_scalars(func.body)

    def need_alignment(self, buf, nbytes):
        key = next((b for b in self.word_aligned if b.same_as(buf)), buf)
        self.word_aligned[key] = max(self.word_aligned.get(key, 0), nbytes)

    # names
    def ident(self, var) -> str:
        name = self.names.get(var)
        if name is not None:
            return name
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in var.name) or "v"
        if base[0].isdigit() or base in RESERVED_NAMES:
            base = "v_" + base
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        self.names[var] = name
        return name

    def emit(self, line):
        self.lines.append("  " * self.indent + line)

    # entry
    def print(self):
        sig = []
        buffers = [p for p in self.func.params if is_buffer_var(p)]
        scalars = [p for p in self.func.params if not is_buffer_var(p)]
        for p in buffers:
            self.scope[p] = "global"
        body_lines = self._body()
        specs = []
        for i, p in enumerate(buffers):
            ro = p.name in self.readonly
            qual = "const device" if ro else "device"
            sig.append((f"{qual} {msl_type(p.ty.dtype)}*", self.ident(p), "buffer", i))
            specs.append(BufferSpec(p.name, str(p.ty.dtype), i, ro, self.align.get(p, 0)))
        args = None
        if scalars:
            fields = tuple(ScalarField(self.ident(s), str(s.ty.dtype), SLOT_BYTES * k)
                           for k, s in enumerate(scalars))
            args = ArgsStruct(f"{self.name}_args", len(buffers), fields)
            sig.append((ARGS_TYPE.format(struct=args.name), "args", "buffer", args.index))
        for prefix in ("blockIdx", "threadIdx"):
            if prefix in self.builtins:
                ptype, var, attribute = BUILTINS[prefix]
                sig.append((ptype, var, attribute, None))
        n = math.prod(self.threads)
        head = [KERNEL_ATTRS.format(n=n) + f" void {self.name}("]
        head += [f"    {t} {name} [[{a}{'' if i is None else f'({i})'}]]"
                 f"{',' if k + 1 < len(sig) else ') {'}" for k, (t, name, a, i) in enumerate(sig)]
        if not sig:
            head[-1] += ") {"
        prologue = [f"  const {msl_type(s.ty.dtype)} {self.ident(s)} = args.{self.ident(s)};"
                    for s in scalars]
        text = "\n".join(head + prologue + body_lines + ["}"])
        # lines counted from the kernel's first line (print_program adds where it starts)
        params = tuple(ParamDeclaration(name, t, a, i, k + 2)
                       for k, (t, name, a, i) in enumerate(sig))
        spec = KernelSpec(self.name, tuple(specs), args, tuple(self.threads), n, line=1,
                          params=params)
        return text, spec

    def _body(self):
        self.stmt(self.func.body)
        return self.lines

    # statements: STATEMENTS (after the class) maps each TIR statement class to its form
    def stmt(self, s):
        form = STATEMENTS.get(type(s).__name__)
        if form is None:
            raise LoweringError(f"statement {type(s).__name__} has no MSL form",
                                kernel=self.name, construct="MSL printer")
        form(self, s)

    def seq(self, s):
        for k in items(s.seq):
            self.stmt(k)

    def decl_buffer(self, s):
        target = s.data.args[0]
        self.views[s.buffer] = target
        self.scope[s.buffer] = "global"
        self.names[s.buffer] = self.ident(target)

    def attr(self, s):
        if s.attr_key == "thread_extent":
            self.launch_var(s)
        self.stmt(s.body)

    def if_then_else(self, s):
        self.emit(f"if ({self.expr(s.condition)}) {{")
        self.block(s.then_case)
        if s.else_case is not None:
            self.emit("} else {")
            self.block(s.else_case)
        self.emit("}")

    def while_loop(self, s):
        _check_break(s)
        self.emit(f"while ({self.expr(s.condition)}) {{")
        self.block(s.body)
        self.emit("}")

    def bind(self, s):
        self.emit(f"const {msl_type(s.var.ty.dtype)} {self.ident(s.var)} = "
                  f"{self.expr(s.value)};")

    def evaluate(self, s):
        if ops.is_barrier(s):
            self.emit(BARRIER)
        elif ops.is_tile_call_any(s.value, "tl.import_source"):
            self.expr(s.value)
        elif as_int(s.value) is None:
            self.emit(self.expr(s.value) + ";")

    def import_source(self, source):
        # sorted after metaltile's helpers (keys of their own), one per distinct source
        self.helpers["~import " + source] = "// T.import_source\n" + source.strip("\n") + "\n"
        return ""

    def block(self, s):
        self.indent += 1
        self.stmt(s)
        self.indent -= 1

    def launch_var(self, attr):
        tag = str(attr.node.thread_tag)
        prefix, _, axis = tag.partition(".")
        self.builtins.add(prefix)
        var = attr.node.var
        self.emit(f"const int {self.ident(var)} = int({BUILTINS[prefix][1]}.{axis});")
        self.analyzer.bind(var, tvm.ir.Range.from_min_extent(0, attr.value))

    def alloc(self, buf, annotations=None):
        scope = ops.buffer_scope(buf)
        self.scope[buf] = scope
        size = as_int(buf.ty.shape[0])
        annotations = annotations or {}
        if keys.THREADGROUP_ARENA in annotations:   # merge_threadgroup's arena: 16-byte words
            self.arena = self.ident(buf)
            words = -(-int(annotations[keys.THREADGROUP_ARENA]) // 16)
            self.emit(f"threadgroup {ALIGNED_WORDS[16]} {self.arena}[{words}];")
            return
        if keys.ARENA_OFFSET in annotations:      # a view of the arena at a byte offset
            t, name = msl_type(buf.ty.dtype), self.ident(buf)
            self.emit(f"threadgroup {t}* {name} = (threadgroup {t}*)((threadgroup uchar*)"
                      f"{self.arena} + {int(annotations[keys.ARENA_OFFSET])});")
            return
        if scope == MATRIX_SCOPE and size is not None:
            self.emit(f"{MATRIX_TYPES[str(buf.ty.dtype)]} {self.ident(buf)}[{size}];")
            return
        space = {"shared": "threadgroup ", "local": ""}.get(scope)
        if space is None or size is None:
            raise LoweringError(f"buffer '{buf.name}' in scope {scope} cannot be allocated",
                                kernel=self.name, construct="MSL printer")
        align = next((n for b, n in self.word_aligned.items() if b.same_as(buf)), 0)
        if scope == "shared" and align > TYPE_BYTES[str(buf.ty.dtype)]:
            t, name = msl_type(buf.ty.dtype), self.ident(buf)
            words = -(-size * TYPE_BYTES[str(buf.ty.dtype)] // align)
            self.emit(f"threadgroup {ALIGNED_WORDS[align]} {name}_words[{words}];")
            self.emit(f"threadgroup {t}* {name} = (threadgroup {t}*){name}_words;")
            return
        if scope == "local" and buf in self.thread_scalars:
            self.emit(f"{msl_type(buf.ty.dtype)} {self.ident(buf)};")
            return
        self.emit(f"{space}{msl_type(buf.ty.dtype)} {self.ident(buf)}[{size}];")

    def loop(self, s):
        v = self.ident(s.loop_var)
        lo, ext = self.expr(s.min), s.extent
        end = self.expr(s.min + ext) if as_int(s.min) != 0 else self.expr(ext)
        bind_ranges(self.analyzer, {s.loop_var: (s.min, ext)})
        step = getattr(s, "step", None)
        inc = f"++{v}" if step is None or as_int(step) == 1 else f"{v} += {self.expr(step)}"
        if loads(s.min + ext):
            # TIR evaluates a loop's extent once; a bound read from memory (a routing
            # table's count) would be re-read by every thread on every iteration.
            self.emit(f"const int {v}_end = {end};")
            end = f"{v}_end"
        if keys.STREAMED in (s.annotations or {}):
            self.emit(f"// {s.annotations[keys.STREAMED].value}")
        _check_break(s)
        pragma = _unroll_pragma(s)
        if pragma:
            self.emit(pragma)
        self.emit(f"for (int {v} = {lo}; {v} < {end}; {inc}) {{")
        self.block(s.body)
        self.emit("}")

    # memory
    def pointer(self, buf, dtype, write):
        scope = self.scope.get(buf, "global")
        target = self.views.get(buf, buf)
        const = "const " if scope == "global" and target.name in self.readonly and not write \
            else ""
        return f"({const}{ADDRESS_SPACES[scope]} {msl_type(dtype)}*)"

    def store(self, s):
        buf = s.buffer
        index = s.indices[0]
        value = s.value
        elem = str(buf.ty.dtype)
        vdt = str(value.ty.dtype)
        lanes = lanes_of(value.ty.dtype)
        want = elem if lanes == 1 else f"{elem}x{lanes}"
        if vdt != want:
            value = tirx.Cast(want, value)
        name = self.ident(buf)
        carrier = carrier_of(want)
        if carrier is not None:
            self.carrier_store(buf, index, value, carrier)
            return
        if type(index).__name__ == "Ramp":
            base, lanes = self.ramp_base(index)
            if self.through_pointer(buf, index):
                self.emit(f"*{self.pointer(buf, want, True)}({name} + {base}) = "
                          f"{self.expr(value)};")
            else:
                self.emit("{")
                self.emit(f"  const {msl_type(want)} _v = {self.expr(value)};")
                for k in range(lanes):
                    self.emit(f"  {name}[{base} + {k}] = _v[{k}];")
                self.emit("}")
            return
        if buf in self.thread_scalars:
            self.emit(f"{name} = {self.expr(value)};")
            return
        self.emit(f"{name}[{self.expr(index)}] = {self.expr(value)};")

    def load(self, ld):
        buf = ld.source
        index = ld.indices[0]
        name = self.ident(buf)
        if type(index).__name__ == "Ramp":
            base, lanes = self.ramp_base(index)
            dt = f"{buf.ty.dtype}x{lanes}"
            if self.through_pointer(buf, index):
                return f"(*{self.pointer(buf, dt, False)}({name} + {base}))"
            elems = ", ".join(f"{name}[{base} + {k}]" for k in range(lanes))
            return f"{msl_type(dt)}({elems})"
        if buf in self.thread_scalars:
            return name
        return f"{name}[{self.expr(index)}]"

    # carriers: a run wider than its type's register vector (4 or 8 bfloats, 8 halves,
    # 8 or 16 bytes) moved as the bits of a uint2 / uint4
    def carrier_store(self, buf, index, value, carrier):
        if type(index).__name__ != "Ramp":
            raise LoweringError("a carrier is stored only at a contiguous run",
                                kernel=self.name, construct="MSL printer")
        base, lanes = self.ramp_base(index)
        name = self.ident(buf)
        bits = self.carrier(value, carrier)
        if self.through_pointer(buf, index):
            self.emit(f"*{self.pointer(buf, carrier, True)}({name} + {base}) = {bits};")
            return
        per_word, word_t = _word_lanes(buf.ty.dtype)
        self.emit("{")
        self.emit(f"  const {msl_type(carrier)} _v = {bits};")
        for w in range(lanes // per_word):
            self.emit(f"  const {word_t} _p{w} = as_type<{word_t}>(_v[{w}]);")
            for k in range(per_word):
                self.emit(f"  {name}[{base} + {per_word * w + k}] = _p{w}[{k}];")
        self.emit("}")

    def carrier(self, e, carrier) -> str:
        """MSL of type `carrier` holding the bits of the wide vector `e` (wider than its
        type's register vector): a load, a broadcast or a choice between them by a scalar
        condition, the only wide vectors vectorize.py produces."""
        per_word, word_t = _word_lanes(e.ty.dtype)
        words = lanes_of(e.ty.dtype) // per_word
        if isinstance(e, tvm.ir.TensorLoad) and type(e.indices[0]).__name__ == "Ramp":
            buf = e.source
            base, lanes = self.ramp_base(e.indices[0])
            name = self.ident(buf)
            if self.through_pointer(buf, e.indices[0]):
                return f"(*{self.pointer(buf, carrier, False)}({name} + {base}))"
            packed = ", ".join(
                f"as_type<uint>({word_t}("
                + ", ".join(f"{name}[{base} + {per_word * w + k}]" for k in range(per_word))
                + "))" for w in range(words))
            return f"{msl_type(carrier)}({packed})"
        if type(e).__name__ == "Broadcast":
            return f"{msl_type(carrier)}(as_type<uint>({word_t}({self.expr(e.value)})))"
        choice = choice_parts(e)
        if choice is not None and lanes_of(choice[0].ty.dtype) == 1:
            cond, a, b = choice
            return (f"({self.expr(cond)} ? {self.carrier(a, carrier)} : "
                    f"{self.carrier(b, carrier)})")
        raise LoweringError(f"a {e.ty.dtype} value ({type(e).__name__}) is wider than "
                            f"{msl_type(_scalar(e.ty.dtype))}'s register vector and is not a "
                            "copy, broadcast or choice between them (docs/architecture.md)",
                            kernel=self.name, construct="MSL printer")

    def ramp_base(self, ramp):
        if as_int(ramp.stride) != 1:
            raise LoweringError("strided vector access has no MSL form", kernel=self.name,
                                construct="MSL printer")
        return self.expr(ramp.base), int(ramp.lanes)

    def through_pointer(self, buf, ramp) -> bool:
        """Whether the vector access of `buf` at `ramp` goes through a typed pointer: every
        device access (noting the alignment the buffer's binding must give), a threadgroup
        access whose offset is proven a multiple of its lanes (its array declared aligned)."""
        scope = self.scope.get(buf)
        if scope == "global":
            self.note_align(buf, int(ramp.lanes))
            return True
        return scope == "shared" and _aligned_vector(ramp)

    def note_align(self, buf, lanes):
        target = self.views.get(buf, buf)
        nbytes = TYPE_BYTES[str(buf.ty.dtype)] * lanes
        self.align[target] = max(self.align.get(target, 0), nbytes)

    # expressions: EXPRESSIONS (after the class) maps each TIR expression class to its form
    def expr(self, e) -> str:
        if isinstance(e, int):
            return str(e)
        dtype = getattr(getattr(e, "ty", None), "dtype", None)
        if dtype is not None and carrier_of(dtype) is not None:
            raise LoweringError(f"{type(e).__name__} of {dtype}: a vector wider than its "
                                "type's register vector exists only as a copy's carrier "
                                "(docs/architecture.md)", kernel=self.name,
                                construct="MSL printer")
        form = _expression_form(type(e))
        if form is None:
            raise LoweringError(f"expression {type(e).__name__} ({e}) has no MSL form",
                                kernel=self.name, construct="MSL printer")
        return form(self, e)

    def binary(self, e):
        return f"({self.expr(e.a)} {BINARY[type(e).__name__]} {self.expr(e.b)})"

    def min_max(self, e):
        return f"{type(e).__name__.lower()}({self.expr(e.a)}, {self.expr(e.b)})"

    def logical_not(self, e):
        return f"(!{self.expr(e.a)})"

    def bitwise(self, e):
        name = type(e).__name__
        if name in SHIFTS:
            return self.shift(e, BITWISE[name])
        return self.narrow(e, f"({self.expr(e.a)} {BITWISE[name]} {self.expr(e.b)})")

    def bitwise_not(self, e):
        if scalar_dtype(e.ty.dtype) == "bool":      # ~ of a bool would give an int
            return f"(!{self.expr(e.a)})"
        return self.narrow(e, f"(~{self.expr(e.a)})")

    def cast(self, e):
        value = self.expr(e.value)
        src, dst = _scalar(e.value.ty.dtype), _scalar(e.ty.dtype)
        if {src, dst} == {"float16", "bfloat16"}:  # no direct half <-> bfloat cast:
            value = f"{msl_type(_with_base(e.value.ty.dtype, 'float32'))}({value})"
        return f"{msl_type(e.ty.dtype)}({value})"

    def select(self, e):
        return (f"({self.expr(e.condition)} ? {self.expr(e.true_value)} : "
                f"{self.expr(e.false_value)})")

    def broadcast(self, e):
        return f"{msl_type(e.ty.dtype)}({self.expr(e.value)})"

    def ramp(self, e):
        lanes = int(e.lanes)
        parts = ", ".join(f"{self.expr(e.base)} + {self.expr(e.stride)} * {k}"
                          for k in range(lanes))
        return f"{msl_type(e.ty.dtype)}({parts})"

    def narrow(self, e, text):
        """`text` converted back to `e`'s integer type when MSL's integer promotion widened
        it (scalar char/short operands are computed as int)."""
        dt = DTYPES.get(scalar_dtype(e.ty.dtype))
        if dt is None or not (dt.is_integer or dt.kind == "bool"):
            raise LoweringError(f"{type(e).__name__} on {e.ty.dtype}: bit operations need "
                                "integer (or, for & | ^, bool) operands", kernel=self.name,
                                construct="MSL printer")
        promoted = dt.bits < INT_BITS and lanes_of(e.ty.dtype) == 1
        return f"{msl_type(e.ty.dtype)}{text}" if promoted else text

    def shift(self, e, op) -> str:
        """A shift with MSL's scalar rule whatever the lanes: the count is read modulo the
        promoted width N (32 bits, 64 for 64-bit types) and written masked unless provably
        in range. A vector of narrow elements shifts modulo its element width in MSL, so
        one whose count may reach that width is shifted as int lanes and converted back:
        vectorizing a loop never changes what it computes."""
        dt = DTYPES.get(scalar_dtype(e.ty.dtype))
        if dt is None or not dt.is_integer:
            raise LoweringError(f"{type(e).__name__} on {e.ty.dtype}: shifts need integer "
                                "operands", kernel=self.name, construct="MSL printer")
        width = max(dt.bits, INT_BITS)
        lanes = lanes_of(e.ty.dtype)
        count = e.b.value if type(e.b).__name__ == "Broadcast" else e.b
        bound = self.analyzer.const_int_bound(count)
        a, b = self.expr(e.a), self.expr(e.b)
        if bound.min_value >= 0 and bound.max_value < (dt.bits if lanes > 1 else width):
            return self.narrow(e, f"({a} {op} {b})")
        if lanes > 1 and dt.bits < INT_BITS:
            wide = msl_type(_with_base(e.ty.dtype, "int32"))
            return (f"{msl_type(e.ty.dtype)}({wide}({a}) {op} ({wide}({b}) & "
                    f"{wide}({INT_BITS - 1})))")
        return self.narrow(e, f"({a} {op} ({b} & {msl_type(e.b.ty.dtype)}({width - 1})))")

    def int_literal(self, e):
        dt = str(e.ty.dtype)
        v = int(e.value)
        if dt == "bool":
            return "true" if v else "false"
        # the most negative value is written as (-max - 1): `-2147483648` is the negation of
        # a literal that does not fit an int (a long in C++ and MSL)
        lowest = dt in TYPE_BYTES and dt.startswith("int") and v == -(1 << (8 * TYPE_BYTES[dt] - 1))
        text = f"{v + 1} - 1" if lowest else str(v)
        if dt == "int32":
            return text if v >= 0 else f"({text})"
        return f"{msl_type(dt)}({text})"

    @staticmethod
    def float_literal(v, dtype):
        if math.isnan(v):
            text = "NAN"
        elif math.isinf(v):
            text = "INFINITY" if v > 0 else "(-INFINITY)"
        else:
            text = repr(float(v))
            if "e" not in text and "." not in text:
                text += ".0"
            text += "f"
            if v < 0:
                text = f"({text})"
        return text if dtype == "float32" else f"{msl_type(dtype)}({text})"

    def floor_op(self, e):
        name = type(e).__name__
        a, b = self.expr(e.a), self.expr(e.b)
        dt = scalar_dtype(e.ty.dtype)
        if dt.startswith("float"):
            quotient = f"floor({a} / {b})"
            return quotient if name == "FloorDiv" else f"({a} - {b} * {quotient})"
        bound_a = self.analyzer.const_int_bound(e.a)
        bound_b = self.analyzer.const_int_bound(e.b)
        if bound_a.min_value >= 0 and bound_b.min_value > 0:
            return f"({a} {'/' if name == 'FloorDiv' else '%'} {b})"
        self.needs_floor = True
        ctype = msl_type(e.ty.dtype)
        return f"tl_{name.lower()}({ctype}({a}), {ctype}({b}))"

    def call(self, e):
        op = e.op.name if isinstance(e.op, tvm.ir.Op) else str(e.op)
        args = list(e.args)
        if op in CALLS:
            return CALLS[op](self, e, args)
        if op in MATRIX_CALLS:
            t = msl_type(args[0].source.ty.dtype)
            return MATRIX_CALLS[op].format(*(self.expr(a) for a in args), t=t)
        if op in INTRINSICS:
            return f"{INTRINSICS[op]}({', '.join(self.expr(a) for a in args)})"
        raise LoweringError(f"call of {op} has no MSL form", kernel=self.name,
                            construct="MSL printer")

    def atomic(self, a):
        buf = a.buffer
        dtype = str(buf.ty.dtype)
        space = ADDRESS_SPACES[self.scope.get(buf, "global")]
        index = self.expr(a.element.indices[0])
        name = self.ident(buf)
        value = self.expr(a.value)
        if a.kind in ("load", "store"):
            # 32-bit types only (METAL.atomic_load_store_dtypes); a float32 outside
            # atomic_float's spaces moves as the bits of an atomic_uint
            as_bits = DTYPES[dtype].is_float and space not in METAL.atomic_float_native_spaces
            atype = "atomic_uint" if as_bits else ATOMIC_TYPES[dtype]
            elem = f"({space} {atype}*)&{name}[{index}]"
            if a.kind == "load":
                loaded = f"atomic_load_explicit({elem}, memory_order_relaxed)"
                return f"as_type<{msl_type(dtype)}>({loaded})" if as_bits else loaded
            stored = f"as_type<uint>({value})" if as_bits else value
            return f"atomic_store_explicit({elem}, {stored}, memory_order_relaxed)"
        if METAL.atomic_is_native(dtype, a.kind, space):
            return ATOMIC_NATIVE.format(kind=a.kind, space=space, atype=ATOMIC_TYPES[dtype],
                                        elem=f"{name}[{index}]", value=value)
        t = msl_type(dtype)
        nbits = DTYPES[dtype].bits
        per_word = METAL.atomic_word_bits // nbits
        helper = f"tl_atomic_{a.kind}_{space}_{t}"
        if helper not in self.helpers:
            unpack, pack = ATOMIC_PACKING[nbits]
            wide = "float" if nbits < 32 else t
            combined = ATOMIC_COMBINE[a.kind].format(a=f"{wide}(cur)", b=f"{wide}(v)")
            self.helpers[helper] = ATOMIC_WORD_HELPER.format(
                kind=a.kind, t=t, space=space, name=helper, unpack=unpack.format(t=t),
                pack=pack, combined=combined)
        if per_word == 1:
            return f"{helper}(({space} atomic_uint*)&{name}[{index}], 0u, {value})"
        return (f"{helper}(({space} atomic_uint*){name} + ({index}) / {per_word}, "
                f"uint(({index}) % {per_word}) * {nbits}u, {value})")

    def sigmoid(self, e, args):
        x = self.expr(args[0])
        one = self.float_literal(1.0, scalar_dtype(e.ty.dtype))
        return f"({one} / ({one} + exp(-{x})))"


def _thread_scalars(body) -> ByHandle:
    """The one-element local buffers of `body` whose every load and store is at the
    constant index 0 (as a ByHandle of buffer -> True): the printer declares them as
    scalars."""
    allocated, accesses = [], []
    walk(body, lambda s: allocated.append(s.buffer) if isinstance(s, tirx.AllocBuffer) and
         ops.buffer_scope(s.buffer) == "local" and
         [as_int(d) for d in s.buffer.ty.shape] == [1] else None)
    walk(body, lambda s: accesses.append((s.buffer, s.indices))
         if isinstance(s, tirx.BufferStore) else None)
    accesses += [(ld.source, ld.indices) for ld in collect(body, tvm.ir.TensorLoad)[0]]
    scalars = ByHandle((buf, True) for buf in allocated)
    for buf, indices in accesses:
        if buf in scalars and [as_int(i) for i in indices] != [0]:
            scalars.pop(buf)
    return scalars


def _breaks(body) -> bool:
    """Whether `body` holds a T.loop_break of its own loop (not of a loop inside it)."""
    if isinstance(body, (tirx.For, tirx.While)):
        return False
    if isinstance(body, tirx.Evaluate):
        return ops.is_tile_call_any(body.value, "tl.loop_break")
    return any(_breaks(k) for k in children(body))


def _check_break(loop):
    evals = collect(loop.body, tirx.Evaluate)[0]
    if not any(ops.is_tile_call_any(e.value, "tl.loop_break") for e in evals):
        return
    if _breaks(loop.body) and any(ops.is_barrier(e) for e in evals):
        raise LoweringError(
            "a loop left with T.loop_break() needs a threadgroup barrier inside it; threads "
            "may leave it at different iterations and a barrier not every thread reaches "
            "is undefined in Metal: exchange threadgroup data before or after the loop",
            construct="T.loop_break")


# TIR call op -> its form, for the calls that are not a plain MSL function (INTRINSICS) or
# a simdgroup matrix call (MATRIX_CALLS). Every entry of the three tables is run on the
# emulator by suites/core/test_printer_calls.py.
CALLS = {
    "prim.if_then_else": lambda p, e, a: (f"({p.expr(a[0])} ? {p.expr(a[1])} : "
                                          f"{p.expr(a[2])})"),
    "tirx.sigmoid": _KernelPrinter.sigmoid,
    "tirx.reinterpret": lambda p, e, a: f"as_type<{msl_type(e.ty.dtype)}>({p.expr(a[0])})",
    "tirx.address_of": lambda p, e, a: f"&{p.expr(a[0])}",
    "tl.access_ptr": lambda p, e, a: p.expr(a[0]),   # the address; mask, extent: planner's
    "prim.likely": lambda p, e, a: p.expr(a[0]),    # a branch hint: the condition itself
    "tl.atomic": lambda p, e, a: p.atomic(ops.decode_atomic(e)),
    # a simd_vote as its 64-bit lane mask (vote_t is ulong)
    "tl.simd_ballot": lambda p, e, a: f"ulong(simd_ballot({p.expr(a[0])}))",
    "tl.simd_active_threads_mask": lambda p, e, a: "ulong(simd_active_threads_mask())",
    "tl.loop_break": lambda p, e, a: "break",     # T.loop_break, a statement: `break;`
    # T.call_extern: the named function of the library; T.import_source: user MSL placed
    # once before the kernels (an empty statement where it stood)
    "tirx.call_extern": lambda p, e, a: f"{a[0].value}({', '.join(p.expr(x) for x in a[1:])})",
    "tl.import_source": lambda p, e, a: p.import_source(a[0].value),
}


# TIR statement class name -> the printer's form for it (a method of _KernelPrinter)
STATEMENTS = {
    "SeqStmt": _KernelPrinter.seq,
    "DeclBuffer": _KernelPrinter.decl_buffer,
    "AttrStmt": _KernelPrinter.attr,
    "AllocBuffer": lambda p, s: p.alloc(s.buffer, s.annotations),
    "For": _KernelPrinter.loop,
    "IfThenElse": _KernelPrinter.if_then_else,
    "While": _KernelPrinter.while_loop,
    "BufferStore": _KernelPrinter.store,
    "Bind": _KernelPrinter.bind,
    "Evaluate": _KernelPrinter.evaluate,
}

# TIR expression class name -> the printer's form for it (a method of _KernelPrinter)
EXPRESSIONS = {
    "IntImm": _KernelPrinter.int_literal,
    "FloatImm": lambda p, e: p.float_literal(e.value, str(e.ty.dtype)),
    "Var": _KernelPrinter.ident,
    "TensorLoad": _KernelPrinter.load,
    **dict.fromkeys(BINARY, _KernelPrinter.binary),
    "FloorDiv": _KernelPrinter.floor_op, "FloorMod": _KernelPrinter.floor_op,
    "Min": _KernelPrinter.min_max, "Max": _KernelPrinter.min_max,
    "Not": _KernelPrinter.logical_not,
    **dict.fromkeys(BITWISE, _KernelPrinter.bitwise),
    "BitwiseNot": _KernelPrinter.bitwise_not,
    "Cast": _KernelPrinter.cast,
    "Select": _KernelPrinter.select,
    "Broadcast": _KernelPrinter.broadcast,
    "Ramp": _KernelPrinter.ramp,
    "Call": _KernelPrinter.call,
}


def _vector_accesses(body) -> list:
    """(buffer, Ramp index) of every vector load and store in `body`."""
    found = [(ld.source, ld.indices[0]) for ld in loads(body)
             if type(ld.indices[0]).__name__ == "Ramp"]
    visit_nodes(body, (tirx.BufferStore, lambda st: found.append(
        (st.buffer, st.indices[0])) if type(st.indices[0]).__name__ == "Ramp" else None))
    return found


def _aligned_vector(ramp) -> bool:
    """A contiguous vector access whose first element's offset is proven a multiple of its
    lanes (so, in an array aligned to the vector's size, its address is aligned)."""
    if as_int(ramp.stride) != 1:
        return False
    mod = Analyzer().modular_set(ramp.base)
    lanes = int(ramp.lanes)
    return mod.coeff % lanes == 0 and mod.base % lanes == 0


@functools.cache
def _expression_form(cls):
    """The EXPRESSIONS entry of `cls` or of its nearest base class listed there."""
    return next((EXPRESSIONS[k.__name__] for k in cls.__mro__ if k.__name__ in EXPRESSIONS),
                None)


def print_program(program) -> tuple[str, dict]:
    """(MSL library text, {kernel name: KernelSpec}) for a LoweredProgram."""
    kernels, specs, needs_floor, helpers = [], {}, False, {}
    for name, func in program.device.items():
        printer = _KernelPrinter(func)
        text, spec = printer.print()
        needs_floor |= printer.needs_floor
        helpers.update(printer.helpers)
        kernels.append((name, spec, text))
    parts = [PRELUDE]
    if needs_floor:
        parts.append(FLOOR_HELPERS)
    parts.extend(helpers[k] for k in sorted(helpers))
    for name, spec, text in kernels:
        if spec.args is not None:
            parts.append(_args_struct_decl(spec.args) + "\n")
        # the library is the parts joined by newlines: this one starts on the line after
        # the ones so far
        start = sum(part.count("\n") for part in parts) + len(parts) + 1
        specs[name] = replace(spec, line=start, params=tuple(
            replace(p, line=p.line + start - 1) for p in spec.params))
        parts.append(text + "\n")
    return "\n".join(parts), specs
