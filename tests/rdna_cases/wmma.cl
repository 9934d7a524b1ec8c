/* One wave32 multiplies 16x16 tiles with the WMMA builtins. Matrices are row-major in memory; each lane gathers its
   fragment as the layouts in drivers/emu/shader/wmma.py (from AMD's WMMA guide and ISA docs) say.
   GFX12 (-DGFX12): the gfx12 builtins and their half-size fragments. */
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half h16 __attribute__((ext_vector_type(16)));
typedef half h8 __attribute__((ext_vector_type(8)));
typedef short s16 __attribute__((ext_vector_type(16)));
typedef short s8 __attribute__((ext_vector_type(8)));
typedef float f8 __attribute__((ext_vector_type(8)));
typedef int i8 __attribute__((ext_vector_type(8)));
typedef int i4 __attribute__((ext_vector_type(4)));
typedef int i2 __attribute__((ext_vector_type(2)));
#define LANE ((int)__builtin_amdgcn_workitem_id_x())
#ifdef GFX12
#define NK 8
#define KOF (8 * (LANE / 16))
#define ROW(v) ((v) + 8 * (LANE / 16))
#define HALF_ACC(v) (v)
typedef h8 HV; typedef s8 SV; typedef i2 IV; typedef h8 HACC;
#define WMMA_F32_F16(a, b, c) __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(a, b, c)
#define WMMA_F32_BF16(a, b, c) __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(a, b, c)
#define WMMA_F16_F16(a, b, c) __builtin_amdgcn_wmma_f16_16x16x16_f16_w32_gfx12(a, b, c)
#define WMMA_IU8(sa, a, sb, b, c, cl) __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12(sa, a, sb, b, c, cl)
#else
#define NK 16
#define KOF 0
#define ROW(v) (2 * (v) + LANE / 16)
#define HALF_ACC(v) (2 * (v))
typedef h16 HV; typedef s16 SV; typedef i4 IV; typedef h16 HACC;
#define WMMA_F32_F16(a, b, c) __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, c)
#define WMMA_F32_BF16(a, b, c) __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(a, b, c)
#define WMMA_F16_F16(a, b, c) __builtin_amdgcn_wmma_f16_16x16x16_f16_w32(a, b, c, false)
#define WMMA_IU8(sa, a, sb, b, c, cl) __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32(sa, a, sb, b, c, cl)
#endif
#define COL (LANE % 16)

#define F32_KERNEL(name, T, V, WMMA) \
__kernel void name(__global const T *A, __global const T *B, __global const float *C, __global float *D) { \
  V a, b; f8 c; \
  for (int k = 0; k < NK; k++) { a[k] = A[COL * 16 + KOF + k]; b[k] = B[(KOF + k) * 16 + COL]; } \
  for (int v = 0; v < 8; v++) c[v] = C[ROW(v) * 16 + COL]; \
  f8 d = WMMA(a, b, c); \
  for (int v = 0; v < 8; v++) D[ROW(v) * 16 + COL] = d[v]; \
}
F32_KERNEL(f32_f16, half, HV, WMMA_F32_F16)
F32_KERNEL(f32_bf16, short, SV, WMMA_F32_BF16)
__kernel void f16_f16(__global const half *A, __global const half *B, __global const half *C, __global half *D) {
  HV a, b; HACC c = 0;
  for (int k = 0; k < NK; k++) { a[k] = A[COL * 16 + KOF + k]; b[k] = B[(KOF + k) * 16 + COL]; }
  for (int v = 0; v < 8; v++) c[HALF_ACC(v)] = C[ROW(v) * 16 + COL];
  HACC d = WMMA_F16_F16(a, b, c);
  for (int v = 0; v < 8; v++) D[ROW(v) * 16 + COL] = d[HALF_ACC(v)];
}
__kernel void i32_iu8(__global const uchar *A, __global const uchar *B, __global const int *C, __global int *D,
                      __global int *E) {
  IV a = 0, b = 0; i8 c;
  for (int k = 0; k < NK; k++) {
    a[k / 4] |= (int)A[COL * 16 + KOF + k] << (8 * (k % 4));
    b[k / 4] |= (int)B[(KOF + k) * 16 + COL] << (8 * (k % 4));
  }
  for (int v = 0; v < 8; v++) c[v] = C[ROW(v) * 16 + COL];
  i8 d = WMMA_IU8(true, a, false, b, c, false);
  i8 e = WMMA_IU8(true, a, true, b, c, true);
  for (int v = 0; v < 8; v++) { D[ROW(v) * 16 + COL] = d[v]; E[ROW(v) * 16 + COL] = e[v]; }
}
