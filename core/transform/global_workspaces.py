"""Pass `global_workspaces`: `T.alloc_global` buffers -> workspace parameters.

Expects: a PrimFunc after host_program whose body may allocate buffers in scope "global"
(T.alloc_global, core/language/buffers.py), inside a kernel or at the host level.
Guarantees: each such allocation is gone and its buffer is a parameter after the
kernel's own, named in the function attribute `tl.workspaces` (after any workspaces
already there), which the runtime allocates per call and does not return, as an eager
kernel's T.empty workspaces; the accesses are unchanged. A workspace whose name is
already a parameter's is a KernelDefinitionError. A function without one is unchanged.
"""

from __future__ import annotations

from tvm import tirx

from core.errors import KernelDefinitionError
from core.ir import annotations as keys
from core.ir.kernel import func_name, with_attr
from core.ir.stmt import collect, items, rewrite, seq


def _is_global_alloc(s) -> bool:
    return isinstance(s, tirx.AllocBuffer) and s.buffer.ty.storage_scope == "global"


def global_workspaces(func: tirx.PrimFunc) -> tirx.PrimFunc:
    allocs = [a for a in collect(func.body, tirx.AllocBuffer)[0] if _is_global_alloc(a)]
    if not allocs:
        return func
    names = {p.name for p in func.params}
    for a in allocs:
        if a.buffer.name in names:
            raise KernelDefinitionError(
                f"workspace '{a.buffer.name}' has the name of another parameter or "
                "workspace; give each T.alloc_global buffer its own name",
                kernel=func_name(func), construct="T.alloc_global")
        names.add(a.buffer.name)

    def drop(s):
        if isinstance(s, tirx.SeqStmt):
            kept = [k for k in items(s.seq) if not _is_global_alloc(k)]
            if len(kept) != len(items(s.seq)):
                return seq(kept)
        return s

    body = rewrite(func.body, drop)
    out = tirx.PrimFunc([*func.params, *(a.buffer for a in allocs)], body,
                        func.ret_type, func.attrs, func.span)
    before = [str(n) for n in (func.attrs or {}).get(keys.WORKSPACES, ())]
    return with_attr(out, keys.WORKSPACES, before + [a.buffer.name for a in allocs])
