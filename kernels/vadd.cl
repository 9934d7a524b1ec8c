#include "common.h"
// c[i] = a[i] + b[i] for i < n.
__kernel void vadd_f32(__global const float* a, __global const float* b, __global float* c, uint n) {
  uint i = GID();
  if (i < n) c[i] = a[i] + b[i];
}
