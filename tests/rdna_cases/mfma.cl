// CDNA3 matrix cores: one MFMA per kernel, its operands loaded from row-major matrices in the layouts of AMD's matrix
// instruction calculator (CBSZ = ABID = BLGP = 0), so the result is A x B + C whatever registers LLVM picks (AGPRs here).
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half half4 __attribute__((ext_vector_type(4)));
typedef short short4 __attribute__((ext_vector_type(4)));
typedef float float4_ __attribute__((ext_vector_type(4)));
typedef float float16_ __attribute__((ext_vector_type(16)));
typedef int int4_ __attribute__((ext_vector_type(4)));
typedef int int16_ __attribute__((ext_vector_type(16)));
#define LANE ((int)__builtin_amdgcn_workitem_id_x())
// A is M x K, B is K x N, C and D are M x N, all row-major; lane l holds A[l % M][(l / M) * E + j], B[(l / N) * E + j][l % N]
// and D register r at row (r / 4) * (256 / N) + 4 * (l / N) + r % 4, column l % N (AMD's matrix instruction calculator)
#define AIDX(M, K, E, j) ((LANE % (M)) * (K) + (LANE / (M)) * (E) + (j))
#define BIDX(N, E, j) ((((LANE / (N)) * (E) + (j)) * (N)) + LANE % (N))
#define DIDX(N, r) ((((r) / 4) * (256 / (N)) + 4 * (LANE / (N)) + (r) % 4) * (N) + LANE % (N))
__kernel void mfma_16x16x16_f16(__global const half *a, __global const half *b, __global float *c) {
  half4 x, y; float4_ acc;
  for (int j = 0; j < 4; j++) { x[j] = a[AIDX(16, 16, 4, j)]; y[j] = b[BIDX(16, 4, j)]; }
  for (int r = 0; r < 4; r++) acc[r] = c[DIDX(16, r)];
  acc = __builtin_amdgcn_mfma_f32_16x16x16f16(x, y, acc, 0, 0, 0);
  for (int r = 0; r < 4; r++) c[DIDX(16, r)] = acc[r];
}
__kernel void mfma_32x32x8_f16(__global const half *a, __global const half *b, __global float *c) {
  half4 x, y; float16_ acc;
  for (int j = 0; j < 4; j++) { x[j] = a[AIDX(32, 8, 4, j)]; y[j] = b[BIDX(32, 4, j)]; }
  for (int r = 0; r < 16; r++) acc[r] = c[DIDX(32, r)];
  acc = __builtin_amdgcn_mfma_f32_32x32x8f16(x, y, acc, 0, 0, 0);
  for (int r = 0; r < 16; r++) c[DIDX(32, r)] = acc[r];
}
__kernel void mfma_16x16x4_f32(__global const float *a, __global const float *b, __global float *c) {
  float4_ acc;
  for (int r = 0; r < 4; r++) acc[r] = c[DIDX(16, r)];
  acc = __builtin_amdgcn_mfma_f32_16x16x4f32(a[AIDX(16, 4, 1, 0)], b[BIDX(16, 1, 0)], acc, 0, 0, 0);
  for (int r = 0; r < 4; r++) c[DIDX(16, r)] = acc[r];
}
__kernel void mfma_32x32x2_f32(__global const float *a, __global const float *b, __global float *c) {
  float16_ acc;
  for (int r = 0; r < 16; r++) acc[r] = c[DIDX(32, r)];
  acc = __builtin_amdgcn_mfma_f32_32x32x2f32(a[AIDX(32, 2, 1, 0)], b[BIDX(32, 1, 0)], acc, 0, 0, 0);
  for (int r = 0; r < 16; r++) c[DIDX(32, r)] = acc[r];
}
__kernel void mfma_16x16x16_bf16(__global const ushort *a, __global const ushort *b, __global float *c) {
  short4 x, y; float4_ acc;
  for (int j = 0; j < 4; j++) { x[j] = a[AIDX(16, 16, 4, j)]; y[j] = b[BIDX(16, 4, j)]; }
  for (int r = 0; r < 4; r++) acc[r] = c[DIDX(16, r)];
  acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(x, y, acc, 0, 0, 0);
  for (int r = 0; r < 4; r++) c[DIDX(16, r)] = acc[r];
}
__kernel void mfma_16x16x32_i8(__global const char *a, __global const char *b, __global int *c) {
  long x = 0, y = 0; int4_ acc;
  for (int j = 0; j < 8; j++) { x |= (long)(uchar)a[AIDX(16, 32, 8, j)] << (8 * j); y |= (long)(uchar)b[BIDX(16, 8, j)] << (8 * j); }
  for (int r = 0; r < 4; r++) acc[r] = c[DIDX(16, r)];
  acc = __builtin_amdgcn_mfma_i32_16x16x32_i8(x, y, acc, 0, 0, 0);
  for (int r = 0; r < 4; r++) c[DIDX(16, r)] = acc[r];
}
__kernel void mfma_32x32x8_bf16(__global const ushort *a, __global const ushort *b, __global float *c) {
  short4 x, y; float16_ acc;
  for (int j = 0; j < 4; j++) { x[j] = a[AIDX(32, 8, 4, j)]; y[j] = b[BIDX(32, 4, j)]; }
  for (int r = 0; r < 16; r++) acc[r] = c[DIDX(32, r)];
  acc = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(x, y, acc, 0, 0, 0);
  for (int r = 0; r < 16; r++) c[DIDX(32, r)] = acc[r];
}
__kernel void mfma_32x32x16_i8(__global const char *a, __global const char *b, __global int *c) {
  long x = 0, y = 0; int16_ acc;
  for (int j = 0; j < 8; j++) { x |= (long)(uchar)a[AIDX(32, 16, 8, j)] << (8 * j); y |= (long)(uchar)b[BIDX(32, 8, j)] << (8 * j); }
  for (int r = 0; r < 16; r++) acc[r] = c[DIDX(32, r)];
  acc = __builtin_amdgcn_mfma_i32_32x32x16_i8(x, y, acc, 0, 0, 0);
  for (int r = 0; r < 16; r++) c[DIDX(32, r)] = acc[r];
}
// 8-bit floats (gfx942: FP8 = E4M3FNUZ, BF8 = E5M2FNUZ), given as their bytes: A in one format, B in the other
__kernel void mfma_16x16x32_fp8_bf8(__global const uchar *a, __global const uchar *b, __global float *c) {
  long x = 0, y = 0; float4_ acc;
  for (int j = 0; j < 8; j++) { x |= (long)a[AIDX(16, 32, 8, j)] << (8 * j); y |= (long)b[BIDX(16, 8, j)] << (8 * j); }
  for (int r = 0; r < 4; r++) acc[r] = c[DIDX(16, r)];
  acc = __builtin_amdgcn_mfma_f32_16x16x32_fp8_bf8(x, y, acc, 0, 0, 0);
  for (int r = 0; r < 4; r++) c[DIDX(16, r)] = acc[r];
}
__kernel void mfma_32x32x16_bf8_fp8(__global const uchar *a, __global const uchar *b, __global float *c) {
  long x = 0, y = 0; float16_ acc;
  for (int j = 0; j < 8; j++) { x |= (long)a[AIDX(32, 16, 8, j)] << (8 * j); y |= (long)b[BIDX(32, 8, j)] << (8 * j); }
  for (int r = 0; r < 16; r++) acc[r] = c[DIDX(32, r)];
  acc = __builtin_amdgcn_mfma_f32_32x32x16_bf8_fp8(x, y, acc, 0, 0, 0);
  for (int r = 0; r < 16; r++) c[DIDX(32, r)] = acc[r];
}
// the conversions: every byte of w as FP8 and BF8 (SDWA byte selects), two at a time, and f32 back to both formats
typedef float float2_ __attribute__((ext_vector_type(2)));
__kernel void cvt_8bit_floats(__global const uint *w, __global const float *x, __global float *dec, __global uint *enc) {
  int l = (int)__builtin_amdgcn_workgroup_id_x() * 64 + LANE;
  uint v = w[l];
  dec[8 * l + 0] = __builtin_amdgcn_cvt_f32_fp8(v, 0); dec[8 * l + 1] = __builtin_amdgcn_cvt_f32_fp8(v, 3);
  dec[8 * l + 2] = __builtin_amdgcn_cvt_f32_bf8(v, 1); dec[8 * l + 3] = __builtin_amdgcn_cvt_f32_bf8(v, 2);
  float2_ p = __builtin_amdgcn_cvt_pk_f32_fp8(v, true), q = __builtin_amdgcn_cvt_pk_f32_bf8(v, false);
  dec[8 * l + 4] = p.x; dec[8 * l + 5] = p.y; dec[8 * l + 6] = q.x; dec[8 * l + 7] = q.y;
  int e = __builtin_amdgcn_cvt_pk_fp8_f32(x[2 * l], x[2 * l + 1], 0x55555555, false);
  enc[l] = __builtin_amdgcn_cvt_pk_bf8_f32(x[2 * l + 1], x[2 * l], e, true);
}
// f64: A[i][k] in lane 16k + i (one register pair), D[i][j] in pair i / 4 of lane 16 (i % 4) + j (4x4x4_4b: lane
// 4b + 16i + j, one pair), per the calculator's 64-bit rule (one row per register pair)
typedef double double4_ __attribute__((ext_vector_type(4)));
__kernel void mfma_16x16x4_f64(__global const double *a, __global const double *b, __global double *c) {
  double4_ acc;
  for (int r = 0; r < 4; r++) acc[r] = c[(4 * r + LANE / 16) * 16 + LANE % 16];
  acc = __builtin_amdgcn_mfma_f64_16x16x4f64(a[(LANE % 16) * 4 + LANE / 16], b[(LANE / 16) * 16 + LANE % 16], acc, 0, 0, 0);
  for (int r = 0; r < 4; r++) c[(4 * r + LANE / 16) * 16 + LANE % 16] = acc[r];
}
__kernel void mfma_4x4x4_4b_f64(__global const double *a, __global const double *b, __global double *c) {
  int blk = (LANE / 4) % 4, row = LANE / 16, col = LANE % 4, k = LANE / 16;   // A[blk][i][k] and B[blk][k][j] by lane
  double acc = c[(blk * 4 + row) * 4 + col];
  acc = __builtin_amdgcn_mfma_f64_4x4x4f64(a[(blk * 4 + LANE % 4) * 4 + k], b[(blk * 4 + k) * 4 + LANE % 4], acc, 0, 0, 0);
  c[(blk * 4 + row) * 4 + col] = acc;
}
// the same MFMA with C and D in VGPRs (LLVM picks AGPRs; the "v" constraints force VGPRs) and with C the constant 0
__kernel void mfma_16x16x16_f16_vgpr(__global const half *a, __global const half *b, __global float *c, __global float *d) {
  half4 x, y; float4_ acc, zero;
  for (int j = 0; j < 4; j++) { x[j] = a[AIDX(16, 16, 4, j)]; y[j] = b[BIDX(16, 4, j)]; }
  for (int r = 0; r < 4; r++) acc[r] = c[DIDX(16, r)];
  __asm__ volatile("v_mfma_f32_16x16x16_f16 %0, %1, %2, %0" : "+v"(acc) : "v"(x), "v"(y));
  __asm__ volatile("v_mfma_f32_16x16x16_f16 %0, %1, %2, 0" : "=v"(zero) : "v"(x), "v"(y));
  for (int r = 0; r < 4; r++) { c[DIDX(16, r)] = acc[r]; d[DIDX(16, r)] = zero[r]; }
}
