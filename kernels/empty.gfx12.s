// Hand-written RDNA4 kernel that only ends: the smallest dispatch (no kernargs, no user SGPRs).
  .text
  .globl empty
  .p2align 8
  .type empty,@function
empty:
  s_endpgm
.Lempty_end:
  .size empty, .Lempty_end-empty

  .rodata
  .p2align 6
  .amdhsa_kernel empty
    .amdhsa_next_free_vgpr 1
    .amdhsa_next_free_sgpr 1
    .amdhsa_wavefront_size32 1
  .end_amdhsa_kernel

  .amdgpu_metadata
---
amdhsa.version: [1, 2]
amdhsa.kernels:
  - .name: empty
    .symbol: empty.kd
    .kernarg_segment_size: 0
    .kernarg_segment_align: 4
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 32
    .sgpr_count: 1
    .vgpr_count: 1
    .max_flat_workgroup_size: 1024
    .args: []
...
  .end_amdgpu_metadata
