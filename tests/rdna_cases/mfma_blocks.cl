// CDNA3 multi-block MFMA: each kernel finds, for each of its registers, the matrix element the calculator's forward
// layout puts there (a search over blocks, rows and k, so no layout is inverted by hand), runs one MFMA and stores D
// the same way. Matrices are row-major per block: A[b][i][k], B[b][k][j], C/D[b][i][j].
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half half4 __attribute__((ext_vector_type(4)));
typedef float float4_ __attribute__((ext_vector_type(4)));
typedef float float16_ __attribute__((ext_vector_type(16)));
typedef float float32_ __attribute__((ext_vector_type(32)));
typedef int int4_ __attribute__((ext_vector_type(4)));
#define LANE ((int)__builtin_amdgcn_workitem_id_x())
// A (rows = M) or B (rows = N) element (b, row, k) sits in element k % E of lane b * rows + (k / E) * rows * NB + row
#define IN_LANE(rows, NB, E, b, row, k) ((b) * (rows) + ((k) / (E)) * (rows) * (NB) + (row))
// C/D element (b, i, j): register b * (M * N / 64) + (i / (4 * MRPR)) * 4 + i % 4 of lane (b % BPR) * N + ((i / 4) % MRPR) * BPR * N + j
#define MRPR(N) (64 / (N))
#define BPR(M, N) ((64 + (M) * (N) / 4 - 1) / ((M) * (N) / 4))
#define OUT_REG(M, N, b, i) ((b) * ((M) * (N) / 64) + ((i) / (4 * MRPR(N))) * 4 + (i) % 4)
#define OUT_LANE(M, N, b, i, j) (((b) % BPR(M, N)) * (N) + (((i) / 4) % MRPR(N)) * BPR(M, N) * (N) + (j))

// (both lane formulas are the row, or the column j, modulo rows / N: the searches fix it and try the rest)
#define GATHER_IN(dst, src, rows, K, NB, E, T, IS_B) \
  for (int t = 0; t < (E); t++) { T v = 0; int r = LANE % (rows); \
    for (int b = 0; b < (NB); b++) for (int k = t; k < (K); k += (E)) \
      if (IN_LANE(rows, NB, E, b, r, k) == LANE) v = (IS_B) ? src[((b) * (K) + k) * (rows) + r] : src[((b) * (rows) + r) * (K) + k]; \
    dst[t] = v; }
#define ACC(M, N, NB, REGS, acc, c, load) \
  for (int reg = 0; reg < (REGS); reg++) { int j = LANE % (N); \
    for (int b = 0; b < (NB); b++) for (int i = 0; i < (M); i++) \
      if (OUT_REG(M, N, b, i) == reg && OUT_LANE(M, N, b, i, j) == LANE) { \
        if (load) acc[reg] = c[((b) * (M) + i) * (N) + j]; else c[((b) * (M) + i) * (N) + j] = acc[reg]; } }

__kernel void mfma_4x4x1_16b_f32(__global const float *a, __global const float *b_, __global float *c) {
  float x[1], y[1]; float4_ acc = 0;
  GATHER_IN(x, a, 4, 1, 16, 1, float, 0) GATHER_IN(y, b_, 4, 1, 16, 1, float, 1)
  ACC(4, 4, 16, 4, acc, c, 1)
  acc = __builtin_amdgcn_mfma_f32_4x4x1f32(x[0], y[0], acc, 0, 0, 0);
  ACC(4, 4, 16, 4, acc, c, 0)
}
__kernel void mfma_16x16x1_4b_f32(__global const float *a, __global const float *b_, __global float *c) {
  float x[1], y[1]; float16_ acc = 0;
  GATHER_IN(x, a, 16, 1, 4, 1, float, 0) GATHER_IN(y, b_, 16, 1, 4, 1, float, 1)
  ACC(16, 16, 4, 16, acc, c, 1)
  acc = __builtin_amdgcn_mfma_f32_16x16x1f32(x[0], y[0], acc, 0, 0, 0);
  ACC(16, 16, 4, 16, acc, c, 0)
}
__kernel void mfma_4x4x4_16b_f16(__global const half *a, __global const half *b_, __global float *c) {
  half4 x, y; float4_ acc = 0;
  GATHER_IN(x, a, 4, 4, 16, 4, half, 0) GATHER_IN(y, b_, 4, 4, 16, 4, half, 1)
  ACC(4, 4, 16, 4, acc, c, 1)
  acc = __builtin_amdgcn_mfma_f32_4x4x4f16(x, y, acc, 0, 0, 0);
  ACC(4, 4, 16, 4, acc, c, 0)
}
__kernel void mfma_32x32x4_2b_f16(__global const half *a, __global const half *b_, __global float *c) {
  half4 x, y; float32_ acc = 0;
  GATHER_IN(x, a, 32, 4, 2, 4, half, 0) GATHER_IN(y, b_, 32, 4, 2, 4, half, 1)
  ACC(32, 32, 2, 32, acc, c, 1)
  acc = __builtin_amdgcn_mfma_f32_32x32x4f16(x, y, acc, 0, 0, 0);
  ACC(32, 32, 2, 32, acc, c, 0)
}
