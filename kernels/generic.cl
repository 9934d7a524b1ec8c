#include "common.h"
// Generic (flat) pointers into LDS and private memory (OpenCL C 2.0): the compute units tell them apart by the
// apertures the driver placed in SH_MEM_BASES.
// generic_u32: out[i] = from_lds ? i * 3 + 1 (read from LDS) : i + 5 + (n & 3) (read from private memory), through one
// pointer that may point at either, for i < n. Workgroups of at most 256.
__kernel void generic_u32(__global uint* out, uint from_lds, uint n) {
  __local uint lds[256];
  volatile uint priv[4];
  uint i = GID(), l = LID();
  lds[l] = i * 3 + 1;
  for (uint j = 0; j < 4; j++) priv[j] = i + 5 + j;
  LDS_BARRIER();
  volatile uint* p = from_lds ? (volatile uint*)&lds[l] : &priv[n & 3];
  if (i < n) out[i] = *p;
}

// apertures: out[0], out[1] = the generic addresses of an LDS word and of a private word (work-item 0).
__kernel void apertures(__global ulong* out) {
  __local uint word;
  volatile uint priv[2];
  priv[0] = 0;
  word = 0;
  if (GID() == 0) { out[0] = (ulong)(void*)&word; out[1] = (ulong)(void*)&priv[0]; }
}
