// bfloat.cpp: the float -> bfloat conversion clang calls for __bf16.
//
// MSL converts float to bfloat rounding to nearest even, and NaN stays a (quiet) NaN;
// libgcc 12 lacks the routine clang's code calls for it.

#include "runtime.h"

using namespace mt;

extern "C" {

// float -> bfloat with round-to-nearest-even; libgcc 12 lacks it, clang emits calls to it.
uint16_t __truncsfbf2_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
__bf16 __truncsfbf2(float f) {
  uint16_t b = __truncsfbf2_bits(f);
  __bf16 r;
  memcpy(&r, &b, 2);
  return r;
}
__bf16 __truncdfbf2(double d) {
  // Double rounding through float is exact enough for MSL, which has no double.
  return __truncsfbf2(float(d));
}

}  // extern "C"
