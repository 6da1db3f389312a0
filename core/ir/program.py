"""The lowered-program model: what the compiler hands to codegen and the runtime.

`LoweredProgram` = device PrimFuncs (one per T.Kernel) + the host program: `launches`,
every call site (`LaunchSite`) in program order, and `host`, the steps that run them:
a `LaunchSite`, a `HostLoop` (a serial host loop whose body is steps, so one site is
launched once per iteration with that iteration's scalars), a `HostIf` (steps run when a
host condition holds) or a `HostLet` (a host scalar computed between launches).
`launch_sequence(host, env)` unrolls the steps into the concrete launches of one call,
each with its own variable values (bindings are captured per launch).

Everything the runtime needs is plain Python data (picklable, no TVM objects): host-side
expressions (grid sizes, scalar values, output shapes) are `HostExpr` trees over the host
variables (scalar parameters, symbolic dims, host loop variables and host scalars),
evaluated with Python numbers at launch time.

HostExpr tree: ("const", v) | ("var", name) | (op, a, b) for op in add, sub, mul,
floordiv, floormod, div, mod, min, max, lt, le, gt, ge, eq, ne, and, or | ("not", a) |
("cast", dtype, a).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from core.errors import LoweringError

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "FloorDiv": "floordiv",
           "FloorMod": "floormod", "Div": "div", "Mod": "mod", "Min": "min", "Max": "max",
           "LT": "lt", "LE": "le", "GT": "gt", "GE": "ge", "EQ": "eq", "NE": "ne",
           "And": "and", "Or": "or"}
_EVAL = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b,
         "div": lambda a, b: int(a / b) if isinstance(a, int) and isinstance(b, int)
         else a / b,
         "mod": lambda a, b: a - int(a / b) * b, "min": min, "max": max,
         "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
         "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
         "and": lambda a, b: bool(a) and bool(b), "or": lambda a, b: bool(a) or bool(b)}


def host_expr(e, names: dict | None = None) -> tuple:
    """Serialize a TIR integer/float expression over host variables (`names` gives a
    variable's host name where it differs from its own, e.g. two loops named `i`)."""
    if isinstance(e, int):
        return ("const", e)
    if isinstance(e, (tirx.IntImm, tirx.FloatImm)):
        return ("const", e.value)
    name = type(e).__name__
    if name == "Var":
        return ("var", names.get(e, e.name) if names else e.name)
    if name in _BINARY:
        return (_BINARY[name], host_expr(e.a, names), host_expr(e.b, names))
    if name == "Cast":
        return ("cast", str(e.ty.dtype), host_expr(e.value, names))
    if name == "Not":
        return ("not", host_expr(e.a, names))
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
    if kind == "not":
        return not evaluate(tree[1], env)
    fn = _EVAL.get(kind)
    if fn is None:
        raise ValueError(kind)
    return fn(evaluate(tree[1], env), evaluate(tree[2], env))


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
    strides: tuple | None = None  # HostExpr per dim (in elements) when declared, else dense


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
class HostLoop:
    """`for var in range(start, start + extent)` on the host around launch steps."""
    var: str
    start: tuple               # HostExpr
    extent: tuple              # HostExpr
    body: tuple                # steps


@dataclass(frozen=True)
class HostIf:
    """`if cond:` on the host around launch steps (cond over host scalars and dims)."""
    cond: tuple                # HostExpr
    then: tuple                # steps
    otherwise: tuple = ()      # steps


@dataclass(frozen=True)
class HostLet:
    """A host scalar assigned between launches (`s = i * step`)."""
    var: str
    dtype: str
    value: tuple               # HostExpr


@dataclass(frozen=True)
class LoweredProgram:
    name: str
    params: tuple              # ParamSpecs
    symbols: tuple             # (name, dtype) of symbolic dims
    device: dict               # kernel name -> device PrimFunc
    launches: tuple            # LaunchSites, in program order (each call site once)
    host: tuple = ()           # steps (LaunchSite | HostLoop | HostLet), see launch_sequence
    workspaces: tuple = ()     # names of tensor params the runtime allocates and never returns
    capacity: tuple = ()       # (tensor name, (capacity int or None per dim)), allocation sizes
    lengths: tuple = ()        # (tensor name, tensor whose values are its reported lengths)
    decisions: tuple = ()      # "point=choice": the lowering decisions (core/ir/decisions.py)
    # (tensor name, (dim, ...)): TileLang's capacity dims, not checked against the declaration
    input_capacity: tuple = ()


def launch_sequence(host: tuple, env: dict):
    """Yield (LaunchSite, env) for every launch of one call, in order. Each yielded env is
    that launch's own copy (a host loop's variable has the iteration's value)."""
    for step in host:
        if isinstance(step, LaunchSite):
            yield step, dict(env)
        elif isinstance(step, HostLet):
            v = evaluate(step.value, env)
            env[step.var] = float(v) if step.dtype.startswith(("float", "bfloat")) else int(v)
        elif isinstance(step, HostIf):
            branch = step.then if evaluate(step.cond, env) else step.otherwise
            yield from launch_sequence(branch, env)
        else:
            start = int(evaluate(step.start, env))
            for i in range(start, start + int(evaluate(step.extent, env))):
                env[step.var] = i
                yield from launch_sequence(step.body, env)
