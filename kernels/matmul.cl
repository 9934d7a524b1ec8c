#include "common.h"
// C[M,N] = A[M,K] @ B[K,N], row-major float32. x indexes columns (n), y rows (m).
// The k loop runs in order 0..K-1 with separate multiply and add (-ffp-contract=off) in both kernels,
// so a host loop in the same order gives the same bits.
__kernel void matmul_naive_f32(__global const float* A, __global const float* B, __global float* C,
                               uint M, uint N, uint K) {
  uint col = GID(), row = GID_Y();
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (uint k = 0; k < K; k++) acc += A[row * K + k] * B[k * N + col];
  C[row * N + col] = acc;
}

#define T 16
// 16x16 tiles staged through LDS; workgroup size must be 16x16. Any M, N, K (edges are zero-padded).
__kernel __attribute__((reqd_work_group_size(T, T, 1)))
void matmul_tiled_f32(__global const float* A, __global const float* B, __global float* C,
                      uint M, uint N, uint K) {
  __local float As[T][T], Bs[T][T];
  uint tx = LID(), ty = LID_Y();
  uint col = GRP() * T + tx, row = GRP_Y() * T + ty;
  float acc = 0.0f;
  for (uint k0 = 0; k0 < K; k0 += T) {
    As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
    Bs[ty][tx] = (col < N && k0 + ty < K) ? B[(k0 + ty) * N + col] : 0.0f;
    LDS_BARRIER();
    uint kn = K - k0 < T ? K - k0 : T;  // skip padded terms so the sum order matches the naive kernel
    for (uint k = 0; k < kn; k++) acc += As[ty][k] * Bs[k][tx];
    LDS_BARRIER();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}
