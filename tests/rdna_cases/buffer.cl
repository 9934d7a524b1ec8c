/* Buffer loads, stores and atomics (MUBUF; gfx12: VBUFFER) through descriptors built with
   __builtin_amdgcn_make_buffer_rsrc; the host gives num_records, the descriptor's word3 flags (the target's format
   and range-check mode) and the SGPR offset, and per-lane byte offsets or record indices that run past the end.
   `raw`: loads of 1, 2, 4, 8 and 16 bytes (VGPR offset + instruction offset + SGPR offset) and stores of 2, 4 and 8.
   `structured`: index * stride addressing (IDXEN) and a non-returning atomic add, in inline assembly (clang 19 has
   no builtin for the structured forms). */
typedef uint uint2_ __attribute__((ext_vector_type(2)));
typedef uint uint4_ __attribute__((ext_vector_type(4)));

__kernel void raw(__global uint *src, __global const uint *offs, __global uint *out, __global uint *dst,
                  uint nrec, uint flags, uint soff, uint dnrec) {
  int i = __builtin_amdgcn_workitem_id_x();
  __amdgpu_buffer_rsrc_t r = __builtin_amdgcn_make_buffer_rsrc(src, (short)0, nrec, flags);
  uint o = offs[i];
  out[16*i+0] = __builtin_amdgcn_raw_buffer_load_b32(r, o, soff, 0);
  uint2_ v2 = __builtin_amdgcn_raw_buffer_load_b64(r, o, soff, 0);
  out[16*i+1] = v2.x; out[16*i+2] = v2.y;
  uint4_ v4 = __builtin_amdgcn_raw_buffer_load_b128(r, o, soff, 0);
  out[16*i+3] = v4.x; out[16*i+4] = v4.y; out[16*i+5] = v4.z; out[16*i+6] = v4.w;
  out[16*i+7] = __builtin_amdgcn_raw_buffer_load_b8(r, o + 1, soff, 0);
  out[16*i+8] = __builtin_amdgcn_raw_buffer_load_b16(r, o + 2, soff, 0);
  __amdgpu_buffer_rsrc_t d = __builtin_amdgcn_make_buffer_rsrc(dst, (short)0, dnrec, flags);
  __builtin_amdgcn_raw_buffer_store_b32(0xa0000000u | i, d, 4 * i, 0, 0);
  __builtin_amdgcn_raw_buffer_store_b64((uint2_)(0xb0000000u | i, 0xc0000000u | i), d, 256 + 8 * i, 0, 0);
  __builtin_amdgcn_raw_buffer_store_b16((ushort)(0x5500 | i), d, 512 + 2 * i, 0, 0);
}

#if defined(__gfx942__)
#define LOAD "buffer_load_dword %0, %1, %2, 0 idxen offset:4\n s_waitcnt vmcnt(0)"
#define ADD "buffer_atomic_add %0, %1, %2, 0 idxen\n s_waitcnt vmcnt(0)"
#elif defined(__gfx1201__)
#define LOAD "buffer_load_b32 %0, %1, %2, null idxen offset:4\n s_wait_loadcnt 0x0"
#define ADD "buffer_atomic_add_u32 %0, %1, %2, null idxen\n s_wait_storecnt 0x0"
#else
#define LOAD "buffer_load_b32 %0, %1, %2, 0 idxen offset:4\n s_waitcnt vmcnt(0)"
#define ADD "buffer_atomic_add_u32 %0, %1, %2, 0 idxen\n s_waitcnt_vscnt null, 0x0"
#endif

__kernel void structured(__global uint *src, __global const uint *idx, __global uint *out, uint nrec, uint flags, uint stride) {
  int i = __builtin_amdgcn_workitem_id_x();
  __amdgpu_buffer_rsrc_t r = __builtin_amdgcn_make_buffer_rsrc(src, (short)stride, nrec, flags);
  uint x, k = idx[i];
  __asm volatile(LOAD : "=v"(x) : "v"(k), "s"(r) : "memory");
  __asm volatile(ADD : : "v"(1u), "v"(k), "s"(r) : "memory");
  out[i] = x;
}
