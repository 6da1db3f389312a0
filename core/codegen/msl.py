"""MSL printer: LoweredProgram -> one Metal library text + a KernelSpec per kernel.

Input: the device PrimFuncs of `core.ir.program.LoweredProgram` (flat buffers, vector
expressions from VectorizeLoop, `tl.threadgroup_barrier` calls, the simdgroup matrix
intrinsics of core/ir/matrix.py). Output: MSL in the subset the emulator executes and
Apple's compiler accepts: plain C++-like code, explicit
conversions (`float4(h4)`, `half(x)`), vector memory access through typed pointers to
device memory only (threadgroup and thread arrays are accessed element-wise, so no
alignment beyond the element's is assumed there).

bf16 vectors (docs/architecture.md, "Code generation"): `bfloat2` is the widest register
vector. A bf16 vector of 4 or 8 lanes (core/transform/vectorize.py admits one only in a
bit-preserving copy or broadcast) is a packed integer carrier, `uint2` / `uint4`: it is
loaded, stored and broadcast as bits (`as_type`) and never takes part in arithmetic;
anything else raises.

The Metal vocabulary lives in the tables below (types, address spaces, operators,
intrinsics, builtin attributes); `_KernelPrinter` is the one visitor that uses them.

Scalar ABI (docs/architecture.md, "Code generation"): all scalars of a kernel are fields
of one struct `<kernel>_args`, one 8-byte slot each in parameter order, passed as
`constant <kernel>_args& args [[buffer(K)]]` with K = number of buffers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.sym import Analyzer
from tvm.tirx import is_buffer_var

from core.ir import ops
from core.ir.matrix import MATRIX_SCOPE
from core.ir.stmt import as_int
from core.language.errors import LoweringError
from core.target import DTYPES

# ---- Metal vocabulary ---------------------------------------------------------------------

TYPES = {name: d.msl for name, d in DTYPES.items()}          # core/target.py
TYPE_BYTES = {name: d.bytes for name, d in DTYPES.items()}
# Names a kernel variable cannot take: the printer's own and MSL words, the type names.
RESERVED_NAMES = {"args", "tgid", "tpos", "kernel", "device", "thread", "threadgroup",
                  "constant"} | set(TYPES.values())
ADDRESS_SPACES = {"global": "device", "shared": "threadgroup", "local": "thread"}
BUILTINS = {  # launch tag prefix -> (parameter declaration, variable)
    "blockIdx": ("uint3 tgid [[threadgroup_position_in_grid]]", "tgid"),
    "threadIdx": ("uint3 tpos [[thread_position_in_threadgroup]]", "tpos"),
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
    "tirx.exp": "exp", "tirx.exp2": "exp2", "tirx.log": "log", "tirx.log2": "log2",
    "tirx.sqrt": "sqrt", "tirx.rsqrt": "rsqrt", "tirx.fabs": "fabs", "tirx.tanh": "tanh",
    "tirx.sin": "sin", "tirx.cos": "cos", "tirx.floor": "floor", "tirx.ceil": "ceil",
    "tirx.pow": "pow", "tirx.fmod": "fmod", "tirx.round": "rint", "tirx.trunc": "trunc",
    "tirx.isnan": "isnan", "tirx.isinf": "isinf", "tirx.sigmoid": None,
    "tirx.log10": "log10", "prim.log2": "log2", "prim.ceil": "ceil",  # TVM 0.27 names
    "tl.simd_shuffle_xor": "simd_shuffle_xor", "tl.simd_sum": "simd_sum",
    "tl.simd_max": "simd_max", "tl.simd_min": "simd_min",
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
KERNEL_ATTRS = "[[kernel, max_total_threads_per_threadgroup({n})]]"
ARGS_PARAM = "constant {struct}& args [[buffer({index})]]"
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
BF16_REGISTER_LANES = 2
CARRIERS = {4: "uint32x2", 8: "uint32x4"}  # bf16 lanes -> packed integer carrier dtype


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
    """The packed integer carrier dtype of a wide bf16 vector dtype, else None."""
    base, _, lanes = str(dtype).partition("x")
    return CARRIERS.get(int(lanes)) if base == "bfloat16" and lanes else None


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
class KernelSpec:
    name: str
    buffers: tuple             # BufferSpecs in [[buffer(i)]] order
    args: ArgsStruct | None
    threadgroup: tuple         # (x, y, z)
    max_total_threads: int
    grid: tuple = ()           # (x, y, z) HostExprs of the launch (filled by core.jit)

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
        self.name = str(func.attrs["global_symbol"])
        self.readonly = {str(n) for n in func.attrs["tl.readonly"]}
        self.threads = [int(t) for t in func.attrs["tl.threads"]]
        self.names = {}            # Var -> MSL identifier
        self.taken = set()
        self.scope = {}            # buffer Var -> "global" | "shared" | "local"
        self.views = {}            # flat DeclBuffer view -> parameter buffer
        self.analyzer = Analyzer()
        self.lines = []
        self.indent = 1
        self.needs_floor = False
        self.align = {}
        self.builtins = set()

    # names
    def ident(self, var) -> str:
        if var in self.names:
            return self.names[var]
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
            sig.append(f"{qual} {msl_type(p.ty.dtype)}* {self.ident(p)} [[buffer({i})]]")
            specs.append(BufferSpec(p.name, str(p.ty.dtype), i, ro, self.align.get(p, 0)))
        args = None
        if scalars:
            fields = tuple(ScalarField(self.ident(s), str(s.ty.dtype), SLOT_BYTES * k)
                           for k, s in enumerate(scalars))
            args = ArgsStruct(f"{self.name}_args", len(buffers), fields)
            sig.append(ARGS_PARAM.format(struct=args.name, index=args.index))
        for prefix in ("blockIdx", "threadIdx"):
            if prefix in self.builtins:
                sig.append(BUILTINS[prefix][0])
        n = math.prod(self.threads)
        head = [KERNEL_ATTRS.format(n=n) + f" void {self.name}("]
        head += [f"    {s}{',' if i + 1 < len(sig) else ') {'}" for i, s in enumerate(sig)]
        if not sig:
            head[-1] += ") {"
        prologue = [f"  const {msl_type(s.ty.dtype)} {self.ident(s)} = args.{self.ident(s)};"
                    for s in scalars]
        text = "\n".join(head + prologue + body_lines + ["}"])
        spec = KernelSpec(self.name, tuple(specs), args, tuple(self.threads), n)
        return text, spec

    def _body(self):
        self.stmt(self.func.body)
        return self.lines

    # statements
    def stmt(self, s):
        if isinstance(s, tirx.SeqStmt):
            for k in s.seq:
                self.stmt(k)
        elif isinstance(s, tirx.DeclBuffer):
            target = s.data.args[0]
            self.views[s.buffer] = target
            self.scope[s.buffer] = "global"
            self.names[s.buffer] = self.ident(target)
        elif isinstance(s, tirx.AttrStmt) and s.attr_key == "thread_extent":
            self.launch_var(s)
            self.stmt(s.body)
        elif isinstance(s, tirx.AttrStmt):
            self.stmt(s.body)
        elif isinstance(s, tirx.AllocBuffer):
            self.alloc(s.buffer)
        elif isinstance(s, tirx.For):
            self.loop(s)
        elif isinstance(s, tirx.IfThenElse):
            self.emit(f"if ({self.expr(s.condition)}) {{")
            self.block(s.then_case)
            if s.else_case is not None:
                self.emit("} else {")
                self.block(s.else_case)
            self.emit("}")
        elif isinstance(s, tirx.While):
            self.emit(f"while ({self.expr(s.condition)}) {{")
            self.block(s.body)
            self.emit("}")
        elif isinstance(s, tirx.BufferStore):
            self.store(s)
        elif isinstance(s, tirx.Bind):
            self.emit(f"const {msl_type(s.var.ty.dtype)} {self.ident(s.var)} = "
                      f"{self.expr(s.value)};")
        elif isinstance(s, tirx.Evaluate):
            if ops.is_barrier(s):
                self.emit(BARRIER)
            elif as_int(s.value) is None:
                self.emit(self.expr(s.value) + ";")
        else:
            raise LoweringError(f"statement {type(s).__name__} has no MSL form",
                                kernel=self.name, construct="MSL printer")

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

    def alloc(self, buf):
        scope = ops.buffer_scope(buf)
        self.scope[buf] = scope
        size = as_int(buf.ty.shape[0])
        if scope == MATRIX_SCOPE and size is not None:
            self.emit(f"{MATRIX_TYPES[str(buf.ty.dtype)]} {self.ident(buf)}[{size}];")
            return
        space = {"shared": "threadgroup ", "local": ""}.get(scope)
        if space is None or size is None:
            raise LoweringError(f"buffer '{buf.name}' in scope {scope} cannot be allocated",
                                kernel=self.name, construct="MSL printer")
        self.emit(f"{space}{msl_type(buf.ty.dtype)} {self.ident(buf)}[{size}];")

    def loop(self, s):
        v = self.ident(s.loop_var)
        lo, ext = self.expr(s.min), s.extent
        end = self.expr(s.min + ext) if as_int(s.min) != 0 else self.expr(ext)
        try:
            self.analyzer.bind(s.loop_var, tvm.ir.Range.from_min_extent(s.min, ext))
        except Exception:  # noqa: BLE001 - rebinding only loses precision
            pass
        step = getattr(s, "step", None)
        inc = f"++{v}" if step is None or as_int(step) == 1 else f"{v} += {self.expr(step)}"
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
            if self.scope.get(buf) == "global":
                self.note_align(buf, lanes)
                self.emit(f"*{self.pointer(buf, want, True)}({name} + {base}) = "
                          f"{self.expr(value)};")
            else:
                self.emit("{")
                self.emit(f"  const {msl_type(want)} _v = {self.expr(value)};")
                for k in range(lanes):
                    self.emit(f"  {name}[{base} + {k}] = _v[{k}];")
                self.emit("}")
            return
        self.emit(f"{name}[{self.expr(index)}] = {self.expr(value)};")

    def load(self, ld):
        buf = ld.source
        index = ld.indices[0]
        name = self.ident(buf)
        if type(index).__name__ == "Ramp":
            base, lanes = self.ramp_base(index)
            dt = f"{buf.ty.dtype}x{lanes}"
            if self.scope.get(buf) == "global":
                self.note_align(buf, lanes)
                return f"(*{self.pointer(buf, dt, False)}({name} + {base}))"
            elems = ", ".join(f"{name}[{base} + {k}]" for k in range(lanes))
            return f"{msl_type(dt)}({elems})"
        return f"{name}[{self.expr(index)}]"

    # bf16 carriers: 4 or 8 bf16 lanes moved as the bits of a uint2 / uint4
    def carrier_store(self, buf, index, value, carrier):
        if type(index).__name__ != "Ramp":
            raise LoweringError("a bf16 carrier is stored only at a contiguous run",
                                kernel=self.name, construct="MSL printer")
        base, lanes = self.ramp_base(index)
        name = self.ident(buf)
        bits = self.carrier(value, carrier)
        if self.scope.get(buf) == "global":
            self.note_align(buf, lanes)
            self.emit(f"*{self.pointer(buf, carrier, True)}({name} + {base}) = {bits};")
            return
        self.emit("{")
        self.emit(f"  const {msl_type(carrier)} _v = {bits};")
        for w in range(lanes // BF16_REGISTER_LANES):
            self.emit(f"  const bfloat2 _p{w} = as_type<bfloat2>(_v[{w}]);")
            for k in range(BF16_REGISTER_LANES):
                self.emit(f"  {name}[{base} + {BF16_REGISTER_LANES * w + k}] = _p{w}[{k}];")
        self.emit("}")

    def carrier(self, e, carrier) -> str:
        """MSL of type `carrier` holding the bits of the wide bf16 vector `e`: a load or a
        broadcast, the only wide bf16 vectors vectorize.py produces."""
        words = lanes_of(e.ty.dtype) // BF16_REGISTER_LANES
        if isinstance(e, tvm.ir.TensorLoad) and type(e.indices[0]).__name__ == "Ramp":
            buf = e.source
            base, lanes = self.ramp_base(e.indices[0])
            name = self.ident(buf)
            if self.scope.get(buf) == "global":
                self.note_align(buf, lanes)
                return f"(*{self.pointer(buf, carrier, False)}({name} + {base}))"
            pairs = ", ".join(f"as_type<uint>(bfloat2({name}[{base} + {2 * w}], "
                              f"{name}[{base} + {2 * w + 1}]))" for w in range(words))
            return f"{msl_type(carrier)}({pairs})"
        if type(e).__name__ == "Broadcast":
            return f"{msl_type(carrier)}(as_type<uint>(bfloat2({self.expr(e.value)})))"
        raise LoweringError(f"a {e.ty.dtype} value ({type(e).__name__}) is wider than "
                            "bfloat2 and is not a copy or broadcast (docs/architecture.md)",
                            kernel=self.name, construct="MSL printer")

    def ramp_base(self, ramp):
        if as_int(ramp.stride) != 1:
            raise LoweringError("strided vector access has no MSL form", kernel=self.name,
                                construct="MSL printer")
        return self.expr(ramp.base), int(ramp.lanes)

    def note_align(self, buf, lanes):
        target = self.views.get(buf, buf)
        nbytes = TYPE_BYTES[str(buf.ty.dtype)] * lanes
        self.align[target] = max(self.align.get(target, 0), nbytes)

    # expressions
    def expr(self, e) -> str:
        if isinstance(e, int):
            return str(e)
        name = type(e).__name__
        dtype = getattr(getattr(e, "ty", None), "dtype", None)
        if dtype is not None and carrier_of(dtype) is not None:
            raise LoweringError(f"{name} of {dtype}: a bf16 vector wider than bfloat2 exists "
                                "only as a copy's carrier (docs/architecture.md)",
                                kernel=self.name, construct="MSL printer")
        if isinstance(e, tirx.IntImm):
            return self.int_literal(e)
        if isinstance(e, tirx.FloatImm):
            return self.float_literal(e.value, str(e.ty.dtype))
        if name == "Var":
            return self.ident(e)
        if isinstance(e, tvm.ir.TensorLoad):
            return self.load(e)
        if name in BINARY:
            return f"({self.expr(e.a)} {BINARY[name]} {self.expr(e.b)})"
        if name in ("FloorDiv", "FloorMod"):
            return self.floor_op(e, name)
        if name in ("Min", "Max"):
            return f"{name.lower()}({self.expr(e.a)}, {self.expr(e.b)})"
        if name == "Not":
            return f"(!{self.expr(e.a)})"
        if name in SHIFTS:
            return self.shift(e, BITWISE[name])
        if name in BITWISE:
            return self.narrow(e, f"({self.expr(e.a)} {BITWISE[name]} {self.expr(e.b)})")
        if name == "BitwiseNot":
            if scalar_dtype(e.ty.dtype) == "bool":      # ~ of a bool would give an int
                return f"(!{self.expr(e.a)})"
            return self.narrow(e, f"(~{self.expr(e.a)})")
        if name == "Cast":
            value = self.expr(e.value)
            src, dst = _scalar(e.value.ty.dtype), _scalar(e.ty.dtype)
            if {src, dst} == {"float16", "bfloat16"}:  # no direct half <-> bfloat cast:
                value = f"{msl_type(_with_base(e.value.ty.dtype, 'float32'))}({value})"
            return f"{msl_type(e.ty.dtype)}({value})"
        if name == "Select":
            return (f"({self.expr(e.condition)} ? {self.expr(e.true_value)} : "
                    f"{self.expr(e.false_value)})")
        if name == "Broadcast":
            return f"{msl_type(e.ty.dtype)}({self.expr(e.value)})"
        if name == "Ramp":
            lanes = int(e.lanes)
            parts = ", ".join(f"{self.expr(e.base)} + {self.expr(e.stride)} * {k}"
                              for k in range(lanes))
            return f"{msl_type(e.ty.dtype)}({parts})"
        if name == "Call":
            return self.call(e)
        raise LoweringError(f"expression {type(e).__name__} ({e}) has no MSL form",
                            kernel=self.name, construct="MSL printer")

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

    def floor_op(self, e, name):
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
        if op in ("tirx.if_then_else", "prim.if_then_else"):
            return f"({self.expr(args[0])} ? {self.expr(args[1])} : {self.expr(args[2])})"
        if op == "tirx.sigmoid":
            x = self.expr(args[0])
            one = self.float_literal(1.0, scalar_dtype(e.ty.dtype))
            return f"({one} / ({one} + exp(-{x})))"
        if op in MATRIX_CALLS:
            t = msl_type(args[0].source.ty.dtype)
            return MATRIX_CALLS[op].format(*(self.expr(a) for a in args), t=t)
        if op == "tirx.reinterpret":
            return f"as_type<{msl_type(e.ty.dtype)}>({self.expr(args[0])})"
        if op == "tirx.address_of":
            return f"&{self.expr(args[0])}"
        if op == "tirx.likely":
            return self.expr(args[0])
        if op in INTRINSICS and INTRINSICS[op]:
            return f"{INTRINSICS[op]}({', '.join(self.expr(a) for a in args)})"
        raise LoweringError(f"call of {op} has no MSL form", kernel=self.name,
                            construct="MSL printer")


def print_program(program) -> tuple[str, dict]:
    """(MSL library text, {kernel name: KernelSpec}) for a LoweredProgram."""
    kernels, specs, needs_floor = [], {}, False
    for name, func in program.device.items():
        printer = _KernelPrinter(func)
        text, spec = printer.print()
        needs_floor |= printer.needs_floor
        kernels.append((spec, text))
        specs[name] = spec
    parts = [PRELUDE]
    if needs_floor:
        parts.append(FLOOR_HELPERS)
    for spec, text in kernels:
        if spec.args is not None:
            parts.append(_args_struct_decl(spec.args) + "\n")
        parts.append(text + "\n")
    return "\n".join(parts), specs
