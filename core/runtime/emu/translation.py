"""What a translation of MSL is (translate.py makes one): the data the emulator's modules
pass each other, in a module of its own so that each of them imports it without importing
the others.

    Translation       the C++ unit (`cpp`, which starts with PRELUDE), the MSL as given,
                      the kernels' signatures and the threadgroup variables by arena slot
    KernelSignature   one kernel: its parameters, max threads, MSL line, C++ call
    KernelParam       one kernel parameter: buffer index, thread position or threadgroup
                      index
    SOURCE_NAME       the file name the unit's `#line` directives give the user's MSL
    PRELUDE           the unit's first lines (`#line` back to the MSL's line 1);
                      PRELUDE_LINES, their count
    line_of, source_line   an offset's MSL line and a line's text, for the errors every
                      module raises at a line
    POSITION_ATTRIBUTES  thread-position attributes -> the runtime field carrying each

signature.py reads the signatures from clang's AST, launcher.py calls kernels from them,
build.py compiles a translation and run.py launches it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SOURCE_NAME = "input.metal"

# Thread-position attributes and the runtime field that carries each (mt_runtime.h).
POSITION_ATTRIBUTES = {
    "thread_position_in_grid": "thread_position_in_grid",
    "thread_position_in_threadgroup": "thread_position_in_threadgroup",
    "threadgroup_position_in_grid": "threadgroup_position_in_grid",
    "threads_per_threadgroup": "threads_per_threadgroup",
    "threadgroups_per_grid": "threadgroups_per_grid",
    "threads_per_grid": "threads_per_grid",
    "thread_index_in_threadgroup": "thread_index_in_threadgroup",
    "thread_index_in_simdgroup": "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup": "simdgroup_index_in_threadgroup",
    "simdgroups_per_threadgroup": "simdgroups_per_threadgroup",
    "threads_per_simdgroup": "threads_per_simdgroup",
    "thread_execution_width": "threads_per_simdgroup",
}

PRELUDE = f'#line 1 "{SOURCE_NAME}"\nusing namespace metal;\n#line 1 "{SOURCE_NAME}"\n'
PRELUDE_LINES = PRELUDE.count("\n")


@dataclass(frozen=True)
class KernelParam:
    name: str
    type: str                 # clang's spelling of the parameter type, e.g. "const float *"
    buffer_index: int | None  # [[buffer(i)]]
    position: str | None      # thread-position attribute name
    line: int
    is_reference: bool = False
    threadgroup_index: int | None = None  # [[threadgroup(i)]]: memory sized by the host
    array_length: int | None = None       # `device T* xs[N] [[buffer(i)]]`: buffers i..i+N-1
    absent: bool = False      # `[[buffer(i), function_constant(c)]]` with c false: not bound

    @property
    def buffer_indices(self) -> tuple[int, ...]:
        """The buffer indices bound to this parameter (several for an array of buffers)."""
        if self.buffer_index is None:
            return ()
        return tuple(range(self.buffer_index, self.buffer_index + (self.array_length or 1)))

    def buffer_name(self, index: int) -> str:
        return f"{self.name}[{index - self.buffer_index}]" if self.array_length else self.name


@dataclass(frozen=True)
class FunctionConstant:
    """One `constant T name [[function_constant(index)]];` of the source."""
    name: str
    index: int
    defined: bool             # the host gave it a value
    line: int                 # its MSL line


@dataclass(frozen=True)
class KernelSignature:
    name: str                 # the name the host calls it by
    params: tuple[KernelParam, ...]
    max_total_threads: int | None
    line: int
    call: str = ""            # the C++ expression naming the function (qualified)
    # the [[function_constant]] declarations the kernel reads, through the functions it
    # calls, other than behind `is_function_constant_defined` (their names)
    constants_read: tuple[str, ...] = ()

    @property
    def buffers(self) -> dict[int, KernelParam]:
        """Buffer index -> the parameter bound to it (an array of buffers takes several)."""
        return {i: p for p in self.params for i in p.buffer_indices}


@dataclass
class Translation:
    cpp: str                                   # the rewritten source (before the launcher)
    source: str                                # the MSL as given
    kernels: dict[str, KernelSignature]
    threadgroup_vars: dict[int, str] = field(default_factory=dict)  # slot -> variable name
    # array name -> the one typed pointer declared over it (`threadgroup half* S =
    # (threadgroup half*)S_words;`, metaltile's vector-staged arrays): findings name both
    threadgroup_views: dict[str, str] = field(default_factory=dict)
    # [[threadgroup(i)]] parameters: index -> (arena slot, bytes), the host's lengths
    threadgroup_params: dict[int, tuple[int, int]] = field(default_factory=dict)
    # [[function_constant(i)]] declarations: name -> FunctionConstant
    function_constants: dict[str, FunctionConstant] = field(default_factory=dict)


def line_of(src: str, pos: int) -> int:
    """The 1-based line of offset `pos` in `src` (the rewrites keep lines, so it is the
    MSL's)."""
    return src.count("\n", 0, pos) + 1


def source_line(source: str, line: int | None) -> str | None:
    """Line `line` (1-based) of the MSL as given, for an error's quote; None past its end."""
    lines = source.splitlines()
    return lines[line - 1].rstrip() if line and 0 < line <= len(lines) else None
