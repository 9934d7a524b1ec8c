// Kernels exercising one feature each; tests/test_emu_rdna_exec.py checks their results against numpy.
#define TID ((int)__builtin_amdgcn_workitem_id_x())
#define GID ((int)(__builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + __builtin_amdgcn_workitem_id_x()))
#define BARRIER() do { __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); \
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup"); } while (0)

__kernel void vadd(__global const float *a, __global const float *b, __global float *c, int n) {
  int i = GID;
  if (i < n) c[i] = a[i] + b[i];
}

__kernel void saxpy(float alpha, __global const float *x, __global float *y, int n) {
  int i = GID;
  if (i < n) y[i] = alpha * x[i] + y[i];
}

// tree reduction in LDS, one partial sum per workgroup
__kernel void reduce(__global const float *a, __global float *part) {
  __local float s[256];
  int t = TID;
  s[t] = a[GID];
  BARRIER();
  for (int k = 128; k > 0; k >>= 1) {
    if (t < k) s[t] += s[t + k];
    BARRIER();
  }
  if (t == 0) part[__builtin_amdgcn_workgroup_id_x()] = s[0];
}

// integer atomics on global and local memory; uniform addresses go through LLVM's atomic optimizer
__kernel void atomics(__global const int *a, __global int *g, __global unsigned *h) {
  __local int l[4];
  int t = TID, v = a[GID];
  if (t < 4) l[t] = 0;
  BARRIER();
  __atomic_fetch_add(&l[t & 3], v, __ATOMIC_RELAXED);
  __atomic_fetch_max(&l[2], v, __ATOMIC_RELAXED);
  __atomic_fetch_add(&g[0], v, __ATOMIC_RELAXED);
  __atomic_fetch_min(&g[1], v, __ATOMIC_RELAXED);
  __atomic_fetch_max(&g[2], v, __ATOMIC_RELAXED);
  __atomic_fetch_xor(&g[3], v, __ATOMIC_RELAXED);
  __atomic_fetch_or(&h[0], 1u << (t & 31), __ATOMIC_RELAXED);
  __atomic_fetch_add(&g[8 + (v & 7)], 1, __ATOMIC_RELAXED);
  BARRIER();
  if (t < 4) __atomic_fetch_add(&g[4 + t], l[t], __ATOMIC_RELAXED);
}

// the value each lane gets back from an atomic: a permutation of the prefix sums
__kernel void atomic_ret(__global int *counter, __global int *out) {
  out[GID] = __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

// compare-and-swap loop: float max through integer CAS
__kernel void cas_fmax(__global const float *a, __global float *m) {
  float v = a[GID];
  __global int *p = (__global int *)m;
  int old = *p;
  while (v > __builtin_bit_cast(float, old)) {
    int seen = old;
    if (__atomic_compare_exchange_n(p, &seen, __builtin_bit_cast(int, v), 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) break;
    old = seen;
  }
}

// float atomic add of small integers (exact in any order)
__kernel void fatomic(__global const float *a, __global float *s) {
  __atomic_fetch_add(s, a[GID], __ATOMIC_RELAXED);
}

// float atomics at workgroup scope on LDS (ds_add_rtn_f32 everywhere) and at device scope on global memory (gfx942:
// global_atomic_add_f32; RDNA: a cmpswap loop); each work-item also keeps the LDS value its add returned
__kernel void fatomic_scoped(__global const float *a, __global float *s) {
  __local float acc;
  if (TID == 0) acc = 0.0f;
  BARRIER();
  float old = __scoped_atomic_fetch_add(&acc, a[GID], __ATOMIC_RELAXED, __MEMORY_SCOPE_WRKGRP);
  BARRIER();
  if (TID == 0) __scoped_atomic_fetch_add(s, acc, __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE);
  s[1 + GID] = old;
}

// naive matmul, one output per work-item, 2D workgroups
__kernel void matmul(__global const float *A, __global const float *B, __global float *C, int n) {
  int col = __builtin_amdgcn_workgroup_id_x() * 16 + __builtin_amdgcn_workitem_id_x();
  int row = __builtin_amdgcn_workgroup_id_y() * 16 + __builtin_amdgcn_workitem_id_y();
  float acc = 0.0f;
  for (int k = 0; k < n; k++) acc += A[row * n + k] * B[k * n + col];
  C[row * n + col] = acc;
}

// work-item and workgroup ids in three dimensions
__kernel void ids3(__global int *out) {
  int x = __builtin_amdgcn_workitem_id_x(), y = __builtin_amdgcn_workitem_id_y(), z = __builtin_amdgcn_workitem_id_z();
  int gx = __builtin_amdgcn_workgroup_id_x(), gy = __builtin_amdgcn_workgroup_id_y(), gz = __builtin_amdgcn_workgroup_id_z();
  int sx = __builtin_amdgcn_workgroup_size_x(), sy = __builtin_amdgcn_workgroup_size_y(), sz = __builtin_amdgcn_workgroup_size_z();
  int lin = ((gz * 2 + gy) * 3 + gx) * (sx * sy * sz) + (z * sy + y) * sx + x;
  out[4 * lin + 0] = x | (y << 8) | (z << 16);
  out[4 * lin + 1] = gx | (gy << 8) | (gz << 16);
  out[4 * lin + 2] = sx | (sy << 8) | (sz << 16);
  out[4 * lin + 3] = 1;
}

// cross-lane builtins: wave-relative values
__kernel void lanes(__global const int *a, __global int *out) {
  int v = a[GID];
  int t = TID;
  out[8 * GID + 0] = __builtin_amdgcn_readfirstlane(v);
  out[8 * GID + 1] = __builtin_amdgcn_readlane(v, 5);
  out[8 * GID + 2] = __builtin_amdgcn_ds_bpermute((t ^ 3) << 2, v);
  out[8 * GID + 3] = __builtin_amdgcn_ds_swizzle(v, 0x041f);        // xor lane with 1 (bitmask mode)
  out[8 * GID + 4] = __builtin_amdgcn_mov_dpp(v, 0x111, 0xf, 0xf, 1); // row_shr:1, bound_ctrl
  out[8 * GID + 5] = __builtin_amdgcn_update_dpp(-7, v, 0x1b, 0xf, 0xf, 0); // quad_perm [3,2,1,0]
  out[8 * GID + 6] = __builtin_amdgcn_mbcnt_lo(0xffffffffu, 0u);
  out[8 * GID + 7] = (v & 1) ? __builtin_amdgcn_readfirstlane(t) : -1;
}

// private array with a dynamic index: scratch memory
__kernel void scratch(__global const int *a, __global int *out) {
  int buf[48];
  int v = a[GID];
  for (int k = 0; k < 48; k++) buf[k] = v * k + (k ^ v);
  int s = 0;
  for (int k = 0; k < 12; k++) s += buf[(v + 7 * k) & 47];
  out[GID] = s;
}

// fp16, fp64 and 64-bit integer arithmetic
__kernel void mixed(__global const float *x, __global const double *d, __global const long *l,
                    __global float *of, __global double *od, __global long *ol) {
  int i = GID;
  _Float16 h = (_Float16)x[i], k = (_Float16)0.75f;
  of[2 * i + 0] = (float)(h * k + h);
  of[2 * i + 1] = (float)(h / (k + h));
  od[3 * i + 0] = d[i] / (d[i] + 3.0);
  od[3 * i + 1] = __builtin_sqrt(__builtin_fabs(d[i]));
  od[3 * i + 2] = __builtin_fma(d[i], d[i], -1.0);
  ol[3 * i + 0] = l[i] * (l[i] >> 7);
  ol[3 * i + 1] = l[i] / ((l[i] & 0xfff) | 1);
  ol[3 * i + 2] = (long)((unsigned long)l[i] % 1000003ul);
}

// one value per workgroup: gfx12 computes it with SALU f16 arithmetic (s_mul_f16, s_add_f16, s_cmp_*_f16, ...)
__kernel void uniform_half(__global const float *x, __global float *of) {
  int g = __builtin_amdgcn_workgroup_id_x();
  _Float16 h = (_Float16)x[g], k = (_Float16)0.75f;
  of[4 * GID + 0] = (float)(h * k + h);
  of[4 * GID + 1] = (float)(h - k * k);
  of[4 * GID + 2] = (float)(h < k ? h : k);
  of[4 * GID + 3] = (float)(_Float16)((float)h * 3.0f);
}

// IEEE division over every pair of a list of values (huge, tiny, denormal, infinite, zero, NaN): LLVM's
// div_scale / rcp / fma / div_fmas / div_fixup sequences, f64 and correctly rounded f32
__kernel void divide_pairs(__global const double *n, __global const double *d, __global double *q, __global float *qf) {
  int i = GID;
  q[i] = n[i] / d[i];
  qf[i] = (float)n[i] / (float)d[i];
}

__kernel void fma_triples(__global const double *a, __global const double *b, __global const double *c, __global double *o) {
  int i = GID;
  o[i] = __builtin_fma(a[i], b[i], c[i]);
}

// more cross-lane moves: v_writelane, DPP8, v_permlanex16; and the LDS/private aperture tests on generic pointers
__kernel void lanes2(__global const int *a, __global int *out) {
  __local int shared_word;
  int priv[2] = {1, 2};
  int v = a[GID];
  int w = v, s = __builtin_amdgcn_readlane(v, 3);
  __asm__ volatile("v_writelane_b32 %0, %1, 7" : "+v"(w) : "s"(s));   // lane 7 takes lane 3's value (no clang-19 builtin)
  out[6 * GID + 0] = w;
#ifdef __gfx942__   // CDNA3 has neither DPP8 nor v_permlanex16: the same permutations through ds_bpermute
  uint lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
  out[6 * GID + 1] = __builtin_amdgcn_ds_bpermute(4 * ((lane & ~7u) | (7 - (lane & 7))), v);
  out[6 * GID + 2] = __builtin_amdgcn_ds_bpermute(4 * (lane ^ 16), v);
#else
  out[6 * GID + 1] = __builtin_amdgcn_mov_dpp8(v, 0x053977);   // reverse each group of 8 lanes: 7,6,5,4,3,2,1,0
  out[6 * GID + 2] = __builtin_amdgcn_permlanex16(0, v, 0x76543210u, 0xfedcba98u, false, false);   // the other row
#endif
  out[6 * GID + 3] = __builtin_amdgcn_is_shared((__generic void *)&shared_word);
  out[6 * GID + 4] = __builtin_amdgcn_is_private((__generic void *)(priv + (v & 1)));
  out[6 * GID + 5] = __builtin_amdgcn_is_shared((__generic void *)(a + GID)) | __builtin_amdgcn_is_private((__generic void *)(a + GID));
}

// halves taken from the two halves of a uniform word (s_cvt_hi_f32_f16 on gfx12), compared with f16 literals and
// added to an inline constant (gfx12: s_cmp_*_f16, s_add_f16 with -1.0 encoded as an f16 inline constant)
__kernel void uniform_half_bits(__global const uint *w, __global float *o, __global uint *c) {
  uint g = __builtin_amdgcn_workgroup_id_x(), v = w[g];
  o[g] = (float)__builtin_bit_cast(_Float16, (ushort)(v >> 16));
  _Float16 lo = __builtin_bit_cast(_Float16, (ushort)v);
  c[g] = (lo < (_Float16)-1.0f) + 2 * (lo == (_Float16)0.5f) + 4 * ((lo + (_Float16)-1.0f) == (_Float16)-0.5f);
}

// calls: LLVM places non-inlined functions before the kernel in .text, so s_swappc_b64 jumps below the entry point;
// the callee keeps an array on the stack (scratch) and returns with s_setpc_b64
__attribute__((noinline)) int mix(int a, int b, __global int *side) {
  int t[4] = {a, b, a ^ b, a + b};
  side[__builtin_amdgcn_workitem_id_x()] = t[a & 3];
  return a * 3 + b;
}
__attribute__((noinline)) int twice(int a, __global int *side) { return mix(a, a + 1, side) + mix(a + 2, a, side); }
__kernel void calls(__global const int *in, __global int *out, __global int *side) {
  int i = GID;
  out[i] = twice(in[i], side) + (in[i] & 1 ? mix(in[i], 7, side) : 0);
}

// a 32-element vector indexed at run time (a uniform loop counter, then a per-lane index): LLVM keeps it in VGPRs and
// indexes them (gfx942: s_set_gpr_idx_on around v_mov_b32, CDNA's VGPR indexing mode; RDNA: v_movrels/v_movreld)
typedef int int32v __attribute__((ext_vector_type(32)));
__kernel void dyn_index(__global const int *sel, __global int *out) {
  int32v v = GID;
  int n = sel[0] & 31, i = sel[GID] & 31;
  for (int k = 0; k < n; k++) v[k] = v[(k * 7) & 31] + k;
  v[i] += 1000;
  for (int k = 0; k < 32; k++) out[32 * GID + k] = v[k];
}

// two halves, two shorts and four bytes per work-item, mixed across lanes of the vector: packed 16-bit math (v_pk_*
// with op_sel/neg), v_perm_b32, and on gfx942 SDWA writing a byte or a word of the destination
typedef _Float16 f16x2 __attribute__((ext_vector_type(2)));
__kernel void packed_small(__global const f16x2 *a, __global const f16x2 *b, __global f16x2 *c, __global const short2 *s,
                           __global short2 *t, __global const uchar4 *u, __global uchar4 *v) {
  int l = GID;
  f16x2 x = a[l], y = b[l];
  f16x2 r; r.x = x.x * y.y + x.y; r.y = x.y - y.x * x.x;
  c[l] = r;
  short2 p = s[l], q; q.x = p.y >> 3; q.y = p.x + p.y; t[l] = q;
  uchar4 w = u[l], z; z.x = w.y + 1; z.y = w.x * 3; z.z = w.w >> 1; z.w = w.z ^ w.x; v[l] = z;
}

// the MODE register read back: each workgroup sets a rounding mode for f32 and f64 (s_setreg_b32 from an SGPR), then
// reads it with s_getreg_b32 and through C's __builtin_flt_rounds (LLVM: s_getreg and a lookup table)
__kernel void mode_regs(__global int *out) {
  int g = __builtin_amdgcn_workgroup_id_x() & 3;
  __builtin_amdgcn_s_setreg(0x1801, g | g << 2);   // hwreg(MODE, 0, 4)
  out[2 * GID] = __builtin_flt_rounds();
  out[2 * GID + 1] = __builtin_amdgcn_s_getreg(0x1801);
}
