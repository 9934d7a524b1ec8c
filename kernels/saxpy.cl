#include "common.h"
// y[i] = a * x[i] + y[i] for i < n; built with -ffp-contract=off, so a multiply and an add (no fma).
__kernel void saxpy_f32(float a, __global const float* x, __global float* y, uint n) {
  uint i = GID();
  if (i < n) y[i] = a * x[i] + y[i];
}
