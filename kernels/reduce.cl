#include "common.h"
#define WG 256
// Per-workgroup sum of WG elements through LDS, as a tree: step s adds element i+s into i for s = WG/2 .. 1.
// out[group] = the workgroup's sum; elements at or past n count as 0. Workgroup size must be 256.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void reduce_sum_f32(__global const float* in, __global float* out, uint n) {
  __local float tmp[WG];
  uint lid = LID(), i = GRP() * WG + lid;
  tmp[lid] = i < n ? in[i] : 0.0f;
  LDS_BARRIER();
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (lid < s) tmp[lid] += tmp[lid + s];
    LDS_BARRIER();
  }
  if (lid == 0) out[GRP()] = tmp[0];
}
// The same tree over uint32 (wrapping adds): exact, order does not matter.
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void reduce_sum_u32(__global const uint* in, __global uint* out, uint n) {
  __local uint tmp[WG];
  uint lid = LID(), i = GRP() * WG + lid;
  tmp[lid] = i < n ? in[i] : 0u;
  LDS_BARRIER();
  for (uint s = WG / 2; s > 0; s >>= 1) {
    if (lid < s) tmp[lid] += tmp[lid + s];
    LDS_BARRIER();
  }
  if (lid == 0) out[GRP()] = tmp[0];
}
