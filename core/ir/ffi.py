"""Reading TVM nodes without the Python-side costs of TVM's generic wrappers.

Every pass asks the same two things of thousands of nodes per kernel, and TVM's generic
answers cost more in Python than the work they wrap:

    items(array)         the elements of an FFI Array as a list: what `list(array)`
                         gives, without the container's per-element Python iterator and
                         index checks
    instance_test(cls)   a predicate equal to `isinstance(node, cls)`, remembering the
                         answer per `type(node)`: TVM's node classes are ABCs, so an
                         isinstance that is not an exact type match runs the ABC machinery
                         (about half a microsecond)
"""

from __future__ import annotations

import tvm_ffi

_ARRAY_SIZE = tvm_ffi.container._ffi_api.ArraySize
_ARRAY_ITEM = tvm_ffi.container._ffi_api.ArrayGetItem


def items(array) -> list:
    """The elements of an FFI Array (a SeqStmt's `seq`, a load's `indices`) as a list."""
    return [_ARRAY_ITEM(array, i) for i in range(_ARRAY_SIZE(array))]


def instance_test(cls):
    """`node -> isinstance(node, cls)`, answered from a per-type table after the first
    node of each type (a type's base classes do not change)."""
    known: dict = {}

    def test(node) -> bool:
        node_type = type(node)
        answer = known.get(node_type)
        if answer is None:
            answer = known[node_type] = issubclass(node_type, cls)
        return answer

    return test
