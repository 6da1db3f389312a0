"""The kernel model: one `T.Kernel` block as seen by the passes.

In TIR a kernel is a nest of `thread_extent` AttrStmts (blockIdx.* then threadIdx.*)
around its body. `KernelNest` is its plain view: the grid and threadgroup variables with
their extents, and the body; `wrap` rebuilds the nest around a new body.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import tvm
from tvm import tirx

from core.ir.stmt import as_int, children, is_kernel_attr, rebuild, thread_tag


@dataclass(frozen=True)
class KernelNest:
    attrs: tuple            # the thread_extent AttrStmts, outermost first
    body: object

    @property
    def block_vars(self) -> tuple:
        return tuple(a.node.var for a in self.attrs if thread_tag(a).startswith("blockIdx"))

    @property
    def grid(self) -> tuple:
        """Grid extents (expressions) for x, y, z; missing dims are 1."""
        ext = {thread_tag(a): a.value for a in self.attrs}
        return tuple(ext.get(f"blockIdx.{d}", tirx.const(1, "int32")) for d in "xyz")

    @property
    def thread_vars(self) -> tuple:
        return tuple(a.node.var for a in self.attrs if thread_tag(a).startswith("threadIdx"))

    @property
    def threads(self) -> tuple:
        """Threadgroup extents (ints) for x, y, z."""
        ext = {thread_tag(a): as_int(a.value) for a in self.attrs}
        return tuple(ext.get(f"threadIdx.{d}", 1) for d in "xyz")

    @property
    def num_threads(self) -> int:
        return prod(self.threads)

    def linear_thread_index(self):
        """tx + ty * X + tz * X * Y over the thread variables (as an expression)."""
        ext = {thread_tag(a): a for a in self.attrs}
        x, y, _ = self.threads
        terms, stride = [], 1
        for d, size in zip("xyz", (x, y, 1)):
            attr = ext.get(f"threadIdx.{d}")
            if attr is not None:
                terms.append(attr.node.var * stride if stride != 1 else attr.node.var)
            stride *= size
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return total

    def wrap(self, body):
        # The nest around its own body is the nest as it stands: kept, so that a pass
        # that changes nothing in a kernel leaves the function unchanged (map_kernels).
        if self.attrs and body.same_as(self.attrs[-1].body) and all(
                outer.body.same_as(inner) for outer, inner in zip(self.attrs, self.attrs[1:])):
            return self.attrs[0]
        for attr in reversed(self.attrs):
            body = tirx.AttrStmt(attr.node, attr.attr_key, attr.value, body)
        return body


def unwrap(stmt) -> KernelNest:
    attrs = []
    while is_kernel_attr(stmt):
        attrs.append(stmt)
        stmt = stmt.body
    return KernelNest(tuple(attrs), stmt)


def top_level(func_body) -> list:
    """The function body's top-level statements (kernel nests and anything else)."""
    if isinstance(func_body, tirx.SeqStmt):
        return list(func_body.seq)
    return [func_body]


def map_host(stmt, fn):
    """`stmt` (host level) with each kernel nest replaced by `fn(KernelNest)`; host
    statements around the nests (sequences, host loops) are rebuilt around them."""
    if is_kernel_attr(stmt):
        return fn(unwrap(stmt))
    kids = children(stmt)
    if not kids:
        return stmt
    new = [map_host(k, fn) for k in kids]
    if all(a.same_as(b) for a, b in zip(new, kids)):
        return stmt
    return rebuild(stmt, new)


def map_kernels(func, fn):
    """`func` with each kernel nest (at the top level or inside host loops) replaced by
    `fn(KernelNest)` (a Stmt); `func` itself when no nest changed (a PrimFunc's
    constructor walks the whole body)."""
    body = map_host(func.body, fn)
    return func if body.same_as(func.body) else func.with_body(body)


def kernels(func) -> list:
    """Every kernel nest of the host program, in program order."""
    found = []
    map_host(func.body, lambda nest: found.append(nest) or nest.wrap(nest.body))
    return found


def func_name(func, default: str | None = "kernel"):
    """The PrimFunc's `global_symbol` (the DSL function's name, used in errors), or
    `default` when it has none (a hand-built PrimFunc)."""
    if func.attrs and "global_symbol" in func.attrs:
        return str(func.attrs["global_symbol"])
    return default


_FUNC_COPY = tvm.ir._ffi_api.BaseFuncCopy
_FUNC_WITH_ATTR = tvm.ir._ffi_api.BaseFuncWithAttr


def with_attr(func, key: str, value):
    """`func.with_attr(key, value)` with `value` (a str, a list of ints or strs) handed to
    the FFI call as it is, which converts it. TVM's wrapper first passes it through
    `tvm.runtime.convert`, whose `isinstance(value, Object)` on a str or a list walks the
    tree of every TVM class the first time in a process (about 1 ms each)."""
    return _FUNC_WITH_ATTR(_FUNC_COPY(func), key, value)
