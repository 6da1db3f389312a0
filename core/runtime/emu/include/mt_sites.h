// mt_sites.h — tells every meeting point which call in the MSL source it is.
//
// Threads meet at the same barrier or simd collective when they reach it through the same
// call in the source text. A return address would not do: the optimizer may duplicate a
// call (e.g. into both arms of a preceding `if`), and threads that took different arms
// would then seem to wait at different barriers. A line alone would not do either: two
// collectives on one line (`c ? simd_sum(x) : simd_max(x)`) are different calls. Each
// macro adds a site {MSL line, __COUNTER__ (unique per call in the text)} as a leading
// argument; a macro does not expand inside itself, so the inner name is the function, and
// `metal::simd_sum(x)` keeps working. Included last.
#pragma once

#define threadgroup_barrier(...) threadgroup_barrier(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simdgroup_barrier(...) simdgroup_barrier(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_shuffle(...) simd_shuffle(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_shuffle_xor(...) simd_shuffle_xor(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_shuffle_up(...) simd_shuffle_up(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_shuffle_down(...) simd_shuffle_down(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_shuffle_rotate_up(...) simd_shuffle_rotate_up(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_shuffle_rotate_down(...) simd_shuffle_rotate_down(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_shuffle_and_fill_up(...) simd_shuffle_and_fill_up(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_shuffle_and_fill_down(...) simd_shuffle_and_fill_down(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_broadcast(...) simd_broadcast(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_broadcast_first(...) simd_broadcast_first(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_sum(...) simd_sum(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_product(...) simd_product(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_min(...) simd_min(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_max(...) simd_max(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_and(...) simd_and(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_or(...) simd_or(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_xor(...) simd_xor(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_prefix_inclusive_sum(...) simd_prefix_inclusive_sum(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_prefix_exclusive_sum(...) simd_prefix_exclusive_sum(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_prefix_inclusive_product(...) simd_prefix_inclusive_product(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_prefix_exclusive_product(...) simd_prefix_exclusive_product(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_ballot(...) simd_ballot(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_all(...) simd_all(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_any(...) simd_any(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define quad_sum(...) quad_sum(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define quad_product(...) quad_product(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define quad_min(...) quad_min(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define quad_max(...) quad_max(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define quad_and(...) quad_and(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define quad_or(...) quad_or(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define quad_xor(...) quad_xor(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define quad_prefix_inclusive_sum(...) quad_prefix_inclusive_sum(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define quad_prefix_exclusive_sum(...) quad_prefix_exclusive_sum(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define quad_shuffle(...) quad_shuffle(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define quad_shuffle_xor(...) quad_shuffle_xor(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define quad_shuffle_up(...) quad_shuffle_up(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define quad_shuffle_down(...) quad_shuffle_down(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define quad_broadcast(...) quad_broadcast(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simdgroup_load(...) simdgroup_load(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simdgroup_store(...) simdgroup_store(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simdgroup_multiply_accumulate(...) simdgroup_multiply_accumulate(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simdgroup_multiply(...) simdgroup_multiply(__mt_site{__LINE__, __COUNTER__}, __VA_ARGS__)
#define simd_is_first() simd_is_first(__mt_site{__LINE__, __COUNTER__})
#define simd_active_threads_mask() simd_active_threads_mask(__mt_site{__LINE__, __COUNTER__})
