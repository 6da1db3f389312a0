// Generated from core/target.py by core.target.c_header(); do not edit.
// A test compares this file with the generator (suites/unit/test_target.py);
// regenerate with: python -m core.target > core/runtime/emu/include/mt_target.h
#pragma once
#define MT_SIMD_WIDTH 32
#define MT_MAX_THREADS_PER_GROUP 1024
#define MT_THREADGROUP_MEMORY_BYTES 32768
#define MT_MATRIX_TILE 8
#define MT_MSL_VERSION_MAJOR 3
#define MT_MSL_VERSION_MINOR 1
#define MT_SIZEOF_float 4
#define MT_SIZEOF_half 2
#define MT_SIZEOF_bfloat 2
#define MT_SIZEOF_long 8
#define MT_SIZEOF_int 4
#define MT_SIZEOF_short 2
#define MT_SIZEOF_char 1
#define MT_SIZEOF_ulong 8
#define MT_SIZEOF_uint 4
#define MT_SIZEOF_ushort 2
#define MT_SIZEOF_uchar 1
#define MT_SIZEOF_bool 1
