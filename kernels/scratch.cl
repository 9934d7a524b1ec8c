#include "common.h"
// A private array indexed at run time lives in scratch memory: exercises the private segment setup.
// out[i] = j * j + k with j = (i * 7 + k) % 64, read back through scratch, for i < n.
__kernel void scratch_u32(__global uint* out, uint k, uint n) {
  volatile uint buf[64];
  uint i = GID();
  for (uint j = 0; j < 64; j++) buf[j] = j * j + k;
  if (i < n) out[i] = buf[(i * 7 + k) & 63];
}

// The same over 4 KiB of private memory per work-item: a scratch slot larger than scratch_u32's.
__kernel void scratch_big_u32(__global uint* out, uint k, uint n) {
  volatile uint buf[1024];
  uint i = GID();
  for (uint j = 0; j < 1024; j++) buf[j] = j * j + k;
  if (i < n) out[i] = buf[(i * 7 + k) & 1023];
}
