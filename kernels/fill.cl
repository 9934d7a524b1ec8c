#include "common.h"
// dst[i] = value for i < n.
__kernel void fill_u32(__global uint* dst, uint value, uint n) {
  uint i = GID();
  if (i < n) dst[i] = value;
}
