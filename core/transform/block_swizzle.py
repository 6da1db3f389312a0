"""Pass `block_swizzle`: apply `T.use_swizzle` by remapping the block indices.

Expects: a legalized PrimFunc whose kernels may contain `threadblock_swizzle_pattern`
AttrStmts (core/ir/swizzle.py: node = order, value = panel size).
Guarantees: each such AttrStmt is replaced by its body with blockIdx.x / blockIdx.y
substituted by the remapped indices of `block_order` (expressions of the launch
variables and the grid extents, so symbolic grids work); no swizzle AttrStmt remains.
Order "mlx": blockIdx.x -> bx // panel and blockIdx.y -> by * panel + bx % panel (MLX's
rasterization of a grid launched in its shape, `mlx_order`), except in the forms
`bx // panel`, `bx % panel` and `by * panel` the kernel writes itself, which keep their
meaning (TileLang's Metal generator prints those as its remapped indices, so a kernel
that computes its logical tile from them gets the rasterization once, not twice).
Rejects (KernelDefinitionError) a swizzle outside a kernel or two swizzles in one kernel.
"""

from __future__ import annotations

from tvm import tirx

from core.errors import KernelDefinitionError
from core.ir.kernel import func_name, map_kernels
from core.ir.stmt import as_int, map_nodes, rewrite, substitute, walk
from core.ir.swizzle import MLX, attr_params, block_order, dtype_of, is_swizzle_attr, mlx_order


def _count(stmt) -> int:
    found = []
    walk(stmt, lambda s: found.append(s) if is_swizzle_attr(s) else None)
    return len(found)


def _mlx(body, panel, bx, by):
    """`body` with MLX's rasterization applied to the bare block indices, the kernel's own
    `bx // panel`, `bx % panel`, `by * panel` left as they are."""
    placeholders, held = {}, {}   # form -> its placeholder var -> the kernel's expression

    def hold(node, form):
        var = placeholders.setdefault(form, tirx.Var(f"mlx_{form}", dtype_of(node)))
        held[var] = node
        return var

    def is_(e, v):
        return v is not None and e.same_as(v)

    def div(n):
        return hold(n, "div") if is_(n.a, bx) and as_int(n.b) == panel else n

    def mod(n):
        return hold(n, "mod") if is_(n.a, bx) and as_int(n.b) == panel else n

    def mul(n):
        if (is_(n.a, by) and as_int(n.b) == panel) or (is_(n.b, by) and as_int(n.a) == panel):
            return hold(n, "mul")
        return n

    body = map_nodes(body, (tirx.FloorDiv, div), (tirx.FloorMod, mod), (tirx.Mul, mul))
    zero = tirx.const(0, dtype_of(bx))
    new_x, new_y = mlx_order(panel, bx, by if by is not None else zero)
    vmap = {bx: new_x}
    if by is not None:
        vmap[by] = new_y
    body = substitute(body, vmap)
    return substitute(body, held)


def _apply(name):
    def per_kernel(nest):
        if _count(nest.body) > 1:
            raise KernelDefinitionError("is called twice in one kernel; allowed: once",
                                        kernel=name, construct="T.use_swizzle")
        bvars = dict(zip(("x", "y"), nest.block_vars))
        gx, gy, _ = nest.grid

        def remap(stmt):
            if not is_swizzle_attr(stmt):
                return stmt
            order, panel = attr_params(stmt)
            if order == MLX:
                if "x" not in bvars:
                    return stmt.body
                return _mlx(stmt.body, panel, bvars["x"], bvars.get("y"))
            zero = tirx.const(0, "int32")
            bx, by = bvars.get("x", zero), bvars.get("y", zero)
            new_x, new_y = block_order(order, panel, gx, gy, bx, by)
            vmap = {v: e if dtype_of(e) == dtype_of(v) else tirx.Cast(dtype_of(v), e)
                    for v, e in ((bvars.get("x"), new_x), (bvars.get("y"), new_y))
                    if v is not None}
            return substitute(stmt.body, vmap)

        return nest.wrap(rewrite(nest.body, remap))
    return per_kernel


def block_swizzle(func: tirx.PrimFunc) -> tirx.PrimFunc:
    name = func_name(func)
    if not _count(func.body):  # no T.use_swizzle: nothing to remap (most kernels)
        return func
    out = map_kernels(func, _apply(name))
    if _count(out.body):
        raise KernelDefinitionError("is only allowed inside a `with T.Kernel(...)` block",
                                    kernel=name, construct="T.use_swizzle")
    return out
