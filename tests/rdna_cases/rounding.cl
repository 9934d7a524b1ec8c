/* Directed rounding: each kernel sets MODE.FP_ROUND for f32 and f16/f64 (s_round_mode, through s_setreg of
   hwreg(MODE, 0, 4)), then runs basic arithmetic and conversions. The host runs the same C under fesetround. */
#ifdef __OPENCL_C_VERSION__
#define KDEF(name, mode) __kernel void name(__global const float *f, __global const double *d, __global const int *n, \
  __global float *of, __global double *od) { int i = __builtin_amdgcn_workitem_id_x() + __builtin_amdgcn_workgroup_id_x() * 64; \
  __builtin_amdgcn_s_setreg(0x1801, (mode) | (mode) << 2); BODY }
#define FMAF __builtin_fmaf
#define FMA __builtin_fma
#else
#include <math.h>
#define KDEF(name, mode) void name(const float *f, const double *d, const int *n, float *of, double *od, int i) { BODY }
#define FMAF fmaf
#define FMA fma
#endif
#define NF 8
#define BODY \
  float a = f[3 * i], b = f[3 * i + 1], c = f[3 * i + 2]; double p = d[3 * i], q = d[3 * i + 1], r = d[3 * i + 2]; \
  of[NF * i + 0] = a + b; of[NF * i + 1] = a - b; of[NF * i + 2] = a * b; of[NF * i + 3] = FMAF(a, b, c); \
  of[NF * i + 4] = (float)p; of[NF * i + 5] = (float)n[i]; of[NF * i + 6] = (float)(unsigned)n[i]; \
  of[NF * i + 7] = a * c + b; \
  od[4 * i + 0] = p + q; od[4 * i + 1] = p - q; od[4 * i + 2] = p * q; od[4 * i + 3] = FMA(p, q, r);
KDEF(round_nearest, 0)
KDEF(round_up, 1)
KDEF(round_down, 2)
KDEF(round_zero, 3)
