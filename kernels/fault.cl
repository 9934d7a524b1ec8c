#include "common.h"
// Stores value to the raw 64-bit address addr from work-item 0: given an unmapped address, it faults on purpose.
__kernel void fault_store(ulong addr, uint value) {
  if (GID() == 0) *(__global volatile uint*)addr = value;
}
