"""The lowered-program model: what the compiler hands to codegen and the runtime.

`LoweredProgram` = device PrimFuncs (one per T.Kernel) + the host program, a list of
`LaunchSite`s in launch order. Everything the runtime needs is plain Python data
(picklable, no TVM objects): host-side expressions (grid sizes, scalar values, output
shapes) are `HostExpr` trees over the host variables (scalar parameters and symbolic
dims), evaluated with Python integers at launch time.

HostExpr tree: ("const", v) | ("var", name) | (op, a, b) for op in add, sub, mul,
floordiv, floormod, div, mod, min, max | ("cast", dtype, a).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from core.language.errors import LoweringError

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "FloorDiv": "floordiv",
           "FloorMod": "floormod", "Div": "div", "Mod": "mod", "Min": "min", "Max": "max"}


def host_expr(e) -> tuple:
    """Serialize a TIR integer/float expression over host variables."""
    if isinstance(e, int):
        return ("const", e)
    if isinstance(e, (tirx.IntImm, tirx.FloatImm)):
        return ("const", e.value)
    name = type(e).__name__
    if name == "Var":
        return ("var", e.name)
    if name in _BINARY:
        return (_BINARY[name], host_expr(e.a), host_expr(e.b))
    if name == "Cast":
        return ("cast", str(e.ty.dtype), host_expr(e.value))
    raise LoweringError(f"expression {e} cannot be evaluated on the host",
                        construct="launch plan")


def evaluate(tree, env: dict):
    """Value of a HostExpr tree given host variable values (Python numbers)."""
    kind = tree[0]
    if kind == "const":
        return tree[1]
    if kind == "var":
        return env[tree[1]]
    if kind == "cast":
        v = evaluate(tree[2], env)
        return float(v) if tree[1].startswith(("float", "bfloat")) else int(v)
    a, b = evaluate(tree[1], env), evaluate(tree[2], env)
    if kind == "add":
        return a + b
    if kind == "sub":
        return a - b
    if kind == "mul":
        return a * b
    if kind == "floordiv":
        return a // b
    if kind == "floormod":
        return a % b
    if kind == "div":
        return int(a / b) if isinstance(a, int) and isinstance(b, int) else a / b
    if kind == "mod":
        return a - int(a / b) * b
    if kind == "min":
        return min(a, b)
    if kind == "max":
        return max(a, b)
    raise ValueError(kind)


def free_host_vars(tree) -> set:
    if tree[0] == "var":
        return {tree[1]}
    if tree[0] == "const":
        return set()
    return set().union(*(free_host_vars(t) for t in tree[1:] if isinstance(t, tuple)))


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of the user's prim_func, in the user's order."""
    name: str
    kind: str                  # "buffer" | "scalar"
    dtype: str
    shape: tuple | None = None  # HostExpr per dim, for buffers


@dataclass(frozen=True)
class ScalarBinding:
    name: str                  # args-struct field name
    dtype: str
    value: tuple               # HostExpr


@dataclass(frozen=True)
class LaunchSite:
    """One kernel launch of the host program, with its own bindings."""
    kernel: str
    grid: tuple                # 3 HostExprs
    threadgroup: tuple         # 3 ints
    buffers: tuple             # host buffer parameter names, bound to [[buffer(i)]] in order
    scalars: tuple             # ScalarBindings, packed into the args struct at index len(buffers)


@dataclass(frozen=True)
class LoweredProgram:
    name: str
    params: tuple              # ParamSpecs
    symbols: tuple             # (name, dtype) of symbolic dims
    device: dict               # kernel name -> device PrimFunc
    launches: tuple            # LaunchSites, in launch order
