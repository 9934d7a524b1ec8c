#include "common.h"
// Every work-item i < n adds 1 to *counter and stores the value it saw in old[i]:
// afterwards *counter grew by n and old[] holds each of the n previous values exactly once.
__kernel void atomic_counter(__global uint* counter, __global uint* old, uint n) {
  uint i = GID();
  if (i < n) old[i] = __atomic_fetch_add(counter, 1u, __ATOMIC_RELAXED);
}
