"""The annotation and attribute keys the passes hand each other, with who writes and who
reads each. A key is written by exactly one module; a module that reads one imports it
from here (or through the writer's helper named below), never spells the string again.

    tl.layout_vec, tl.layout_replicate      on a fragment's AllocBuffer
        written by layout_inference; read through layout_inference.fragment_layout
        (lower_tile_ops, lower_reduce)
    tl.simdgroup_accumulator                on a fragment's AllocBuffer
        written by layout_inference; read by lower_gemm and lower_reduce
        (as core.ir.matrix.ACCUMULATOR)
    tl.vector_lanes                         on a For (the lanes of a T.Parallel run)
        written by lower_tile_ops; read by vectorize
    tl.streamed                             on a For (a streamed row's chunk loop: its
                                            description)
        written by stream_rows; read by the MSL printer (core/codegen/msl.py)
    tl.reducer                              on a reducer's AllocBuffer (its combining op)
        written by T.alloc_reducer (core/language/reduce.py); read by lower_tile_ops
    tl.threadgroup_arena, tl.arena_offset   on a threadgroup AllocBuffer: the kernel's
                                            shared arena (its bytes), a buffer's byte
                                            offset into it
        written by merge_threadgroup; read by the MSL printer (core/codegen/msl.py)
    threadblock_swizzle_pattern             an AttrStmt key
        written by T.use_swizzle (core/language/swizzle.py); read by block_swizzle
        (through core/ir/swizzle.py, which defines the attribute)
    tl.readonly, tl.threads                 on a device PrimFunc
        written by split_host_device; read by the MSL printer (core/codegen/msl.py)
    tl.workspaces, tl.capacity_dims,        on the traced PrimFunc (function attributes)
    tl.capacity_lengths
        written by the eager frontend and T.annotate_capacity_dims
        (core/language/eager.py); the capacity keys checked by core/ir/capacity.py (for
        the frontend and verify); read by split_host_device (into the launch plan)
    tl.decisions                            on the PrimFunc (a function attribute): the
                                            lowering decisions taken so far, "point=choice"
        written through core/ir/decisions.note by the passes that decide (stream_rows,
        lower_tile_ops, vectorize, thread_sync); read by split_host_device (into the
        LoweredProgram, then `kernel.decisions`)
    tilelang_capacity_dims                  on a PrimFunc (TileLang's function attribute)
        written by T.annotate_capacity_dims for an input (core/language/eager.py) or by
        the user; checked by core/ir/capacity.py; read by core.jit
        (core/language/eager_function.py) for the launch's shape checks; also by
        core/ir/capacity.py's resolve_declared (below)
    tl.capacity_declared                    on a parsed prim_func (function attribute):
                                            T.annotate_capacity_dims in its body
        written by T.annotate_capacity_dims (core/language/eager.py); names checked by
        core/ir/capacity.py when parsed; read by core.compile through
        core/ir/capacity.py's resolve_declared, which replaces it by tl.capacity_dims
        (outputs of out_idx) and tilelang_capacity_dims (the rest)

The `tl.*` pass-config keys a user passes to `core.compile(pass_configs=...)` are options,
not annotations: core/options.py lists them.
"""

LAYOUT_VEC = "tl.layout_vec"                        # int: elements per thread run
LAYOUT_REPLICATE = "tl.layout_replicate"            # [holders, lo, bits] of a replicated layout
SIMDGROUP_ACCUMULATOR = "tl.simdgroup_accumulator"  # 1: a gemm accumulator in 8x8 matrices
VECTOR_LANES = "tl.vector_lanes"                    # int: lanes the loop may vectorize to
THREADGROUP_ARENA = "tl.threadgroup_arena"          # int: bytes of the kernel's shared arena
ARENA_OFFSET = "tl.arena_offset"                    # int: a buffer's byte offset in the arena
STREAMED = "tl.streamed"                            # str: what a streamed row's chunk loop does
REDUCER = "tl.reducer"                              # str: a reducer's op ("sum", "max", "min")
SWIZZLE_PATTERN = "threadblock_swizzle_pattern"     # node: the order, value: the panel size
READONLY = "tl.readonly"                            # names of buffers the kernel never writes
THREADS = "tl.threads"                              # the threadgroup size (x, y, z)
WORKSPACES = "tl.workspaces"                        # names of T.empty tensors not returned
DECISIONS = "tl.decisions"                          # "point=choice" lowering decisions taken
CAPACITY_DIMS = "tl.capacity_dims"                  # tensor name -> allocation dims (-1: none)
CAPACITY_LENGTHS = "tl.capacity_lengths"            # tensor name -> the tensor reporting its length
# TileLang's (PR #2969): input tensor name -> its capacity dims (indices), which a tensor
# may be smaller or larger along; written by T.annotate_capacity_dims for an input or by
# the user (func.with_attr); read by core.jit (core/ir/capacity.py checks it)
TILELANG_CAPACITY_DIMS = "tilelang_capacity_dims"
# T.annotate_capacity_dims in a prim_func body (tensor name -> entries, -1 for None): which
# meaning an entry has depends on the tensor's role, known once core.compile has out_idx
# (core/ir/capacity.py: resolve_declared)
CAPACITY_DECLARED = "tl.capacity_declared"
