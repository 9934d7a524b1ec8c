// Hand-written RDNA3 kernel: dst[wg_x * stride + tid_x] = value + tid_x. Kernargs: dst (u64), stride, value (u32).
// SGPRs: s[0:1] kernarg pointer (the only user SGPR), s2 workgroup id x (system SGPR). v0: packed work-item ids.
  .text
  .globl store_ids
  .p2align 8
  .type store_ids,@function
store_ids:
  s_load_b128 s[4:7], s[0:1], 0x0
  v_and_b32 v0, 0x3ff, v0
  s_waitcnt lgkmcnt(0)
  s_mul_i32 s3, s2, s6
  v_add_nc_u32 v1, s3, v0
  v_lshlrev_b32 v1, 2, v1
  v_add_nc_u32 v2, s7, v0
  global_store_b32 v1, v2, s[4:5]
  s_endpgm
.Lstore_ids_end:
  .size store_ids, .Lstore_ids_end-store_ids

  .rodata
  .p2align 6
  .amdhsa_kernel store_ids
    .amdhsa_kernarg_size 16
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
    .amdhsa_system_sgpr_workgroup_id_x 1
    .amdhsa_system_vgpr_workitem_id 0
    .amdhsa_next_free_vgpr 3
    .amdhsa_next_free_sgpr 8
    .amdhsa_wavefront_size32 1
  .end_amdhsa_kernel

  .amdgpu_metadata
---
amdhsa.version: [1, 2]
amdhsa.kernels:
  - .name: store_ids
    .symbol: store_ids.kd
    .kernarg_segment_size: 16
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 32
    .sgpr_count: 8
    .vgpr_count: 3
    .max_flat_workgroup_size: 1024
    .args:
      - {.name: dst, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global}
      - {.name: stride, .offset: 8, .size: 4, .value_kind: by_value}
      - {.name: value, .offset: 12, .size: 4, .value_kind: by_value}
...
  .end_amdgpu_metadata
