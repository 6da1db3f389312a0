"""Generate the C++ launcher that calls each MSL kernel from the emulator runtime.

For every kernel signature (translation.KernelSignature) it emits an entry function that
binds `[[buffer(i)]]` parameters to the job's buffer i (a pointer parameter gets the
buffer's address, a reference parameter the object stored there; parameter types are
taken from the function's own type with `decltype`, never re-spelled) and thread-position
parameters to the running fiber's position, converted to the declared type; plus the
`__mt_kernels` table (mt_runtime.h) the runtime looks kernels up in. The text is appended
to the translated source under its own `#line` name, so compiler messages about it are
recognisable as ours rather than the user's.
"""

from __future__ import annotations

import dataclasses

from .translation import POSITION_ATTRIBUTES, KernelSignature

LAUNCHER_NAME = "metaltile-launcher"

def _argument(p, i: int, threadgroup_params: dict[int, tuple[int, int]]) -> str:
    ptype = f"metal::__mt::param_t<__F, {i}>"
    if p.threadgroup_index is not None:   # run.py checked that the host gave a length
        slot, length = threadgroup_params[p.threadgroup_index]
        return f"({ptype})__mt_tg_slot({slot}, {length}, 16)"
    if p.array_length:                     # an array of buffers: see _buffer_arrays
        return f"__a{i}"
    if p.absent:          # gated off by a false function constant: Metal binds nothing
        return f"metal::__mt::bind_buffer<{ptype}>((void*)__mt_absent_buffer)"
    if p.buffer_index is not None:
        return f"metal::__mt::bind_buffer<{ptype}>(__b[{p.buffer_index}])"
    field = POSITION_ATTRIBUTES[p.position]
    return f"metal::__mt::position<std::remove_cv_t<{ptype}>>(__p->{field})"


def _buffer_arrays(k) -> list[str]:
    """An array-of-buffers parameter (adjusted to a pointer to its element) gets a local array
    holding buffers i..i+N-1, passed as the argument."""
    out = []
    for j, p in enumerate(k.params):
        if p.array_length:
            elem = f"std::remove_pointer_t<metal::__mt::param_t<__F, {j}>>"
            items = ", ".join(f"metal::__mt::bind_buffer<{elem}>(__b[{b}])"
                              for b in p.buffer_indices)
            out.append(f"  {elem} __a{j}[{p.array_length}] = {{{items}}};")
    return out


def _min_bytes(k, i: int, p) -> str:
    if p.buffer_index is not None and p.is_reference:
        return (f"uint32_t(sizeof(std::remove_reference_t<"
                f"metal::__mt::param_t<std::remove_cv_t<decltype({k.call})>, {i}>>))")
    return "0"


def table_names(scope: str | None = None) -> tuple[str, str]:
    """The launcher table's symbol and its count's: `__mt_kernels` and `__mt_kernel_count`,
    which the launch host looks up; suffixed by `scope` for a library compiled beside others
    in one unit (build.py `Builder.build_batch`), each link then naming its library's table
    `__mt_kernels`."""
    suffix = f"_{scope}" if scope else ""
    return f"__mt_kernels{suffix}", f"__mt_kernel_count{suffix}"


def _scoped(call: str, scope: str | None) -> str:
    """A kernel's C++ name (`::k`, `&::S::k`) inside namespace `scope` (none: as is)."""
    if not scope:
        return call
    amp = "&" if call.startswith("&") else ""
    return f"{amp}::{scope}::{call[len(amp):].lstrip(':')}"


def generate(kernels: dict[str, KernelSignature],
             threadgroup_params: dict[int, tuple[int, int]] | None = None,
             scope: str | None = None) -> str:
    """The launcher for `kernels`; `threadgroup_params` maps a [[threadgroup(i)]] index to
    its arena slot and the byte length the host set. `scope`: the namespace the library
    and this launcher are compiled in, beside other libraries in one unit (the kernels'
    names qualified by it, the table named by `table_names(scope)`, the `<type_traits>`
    include left to the unit's top)."""
    threadgroup_params = threadgroup_params or {}
    out = [f'\n#line 1 "{LAUNCHER_NAME}"', *(() if scope else ("#include <type_traits>",)),
           # what a parameter gated off by a false function constant is bound to: never
           # read (the kernel's code behind the constant is dead), zeroed all the same
           "alignas(16) static char __mt_absent_buffer[256];"]
    table = []
    for i, k in enumerate(kernels.values()):
        if any(p.threadgroup_index is not None and p.threadgroup_index not in threadgroup_params
               for p in k.params):
            continue          # not launchable without its threadgroup lengths (run.py says so)
        k = dataclasses.replace(k, call=_scoped(k.call, scope))
        args = ", ".join(_argument(p, j, threadgroup_params) for j, p in enumerate(k.params))
        out.append(f"static void __mt_entry_{i}(void* const* __b, const __mt_thread_pos* __p) {{")
        out.append("  (void)__b; (void)__p;")
        out.append(f"  using __F = std::remove_cv_t<decltype({k.call})>;")
        out.extend(_buffer_arrays(k))
        out.append(f"  ({k.call})({args});")
        out.append("}")
        params = ", ".join(
            f'{{"{p.buffer_name(b) if b is not None else p.name}", '
            f'{-1 if b is None or p.absent else b}, {_min_bytes(k, j, p)}}}'
            for j, p in enumerate(k.params) for b in (p.buffer_indices or (None,)))
        rows = params or "{nullptr, -1, 0}"
        out.append(f"static const __mt_param_desc __mt_params_{i}[] = {{{rows}}};")
        rows_count = sum(len(p.buffer_indices) or 1 for p in k.params)
        table.append(f'{{"{k.name}", __mt_entry_{i}, {rows_count}, __mt_params_{i}}}')
    count = len(table)
    if not table:
        table.append('{"", nullptr, 0, nullptr}')
    kernels_name, count_name = table_names(scope)
    if scope:   # the renamed table: declared as mt_runtime.h declares __mt_kernels
        out.append(f'extern "C" __attribute__((visibility("default"))) const __mt_kernel_desc '
                   f'{kernels_name}[];')
        out.append(f'extern "C" __attribute__((visibility("default"))) const uint32_t '
                   f'{count_name};')
    out.append(f'extern "C" const __mt_kernel_desc {kernels_name}[] = {{' + ", ".join(table)
               + "};")
    out.append(f'extern "C" const uint32_t {count_name} = {count};')
    return "\n".join(out) + "\n"
