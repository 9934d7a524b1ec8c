#include "common.h"
// dst[i] = src[i] for i < n.
__kernel void copy_u32(__global const uint* src, __global uint* dst, uint n) {
  uint i = GID();
  if (i < n) dst[i] = src[i];
}
