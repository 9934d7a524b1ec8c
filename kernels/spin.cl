#include "common.h"
// Work-item 0 polls *flag (system-scope atomic loads, so host writes become visible) until it equals expected,
// then writes expected + 1 to *done. Never finishes if nobody writes the flag: for timeout and hang tests.
__kernel void spin_until(__global uint* flag, uint expected, __global uint* done) {
  if (GID() != 0) return;
  while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != expected) __builtin_amdgcn_s_sleep(2);
  *done = expected + 1;
}
