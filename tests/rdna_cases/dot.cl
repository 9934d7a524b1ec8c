/* Every dot-product builtin LLVM lowers to v_dot* on gfx11/gfx12, on packed operands a, b and accumulator c. */
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half half2_ __attribute__((ext_vector_type(2)));
typedef short short2_ __attribute__((ext_vector_type(2)));

__kernel void k(__global const uint *a, __global const uint *b, __global const uint *c, __global uint *o) {
  int i = __builtin_amdgcn_workitem_id_x();
  uint x = a[i], y = b[i], z = c[i];
  o[12*i+0] = as_uint(__builtin_amdgcn_fdot2(as_half2(x), as_half2(y), as_float(z), false));
  o[12*i+1] = as_uint(__builtin_amdgcn_fdot2_f32_bf16(__builtin_bit_cast(short2_, x), __builtin_bit_cast(short2_, y), as_float(z), false));
  o[12*i+2] = __builtin_amdgcn_sudot4(true, x, false, y, z, false);
  o[12*i+3] = __builtin_amdgcn_sudot4(true, x, true, y, z, true);
  o[12*i+4] = __builtin_amdgcn_udot4(x, y, z, false);
  o[12*i+5] = __builtin_amdgcn_udot4(x, y, z, true);
  o[12*i+6] = __builtin_amdgcn_sudot8(false, x, true, y, z, false);
  o[12*i+7] = __builtin_amdgcn_sudot8(true, x, true, y, z, true);
  o[12*i+8] = __builtin_amdgcn_udot8(x, y, z, false);
  o[12*i+9] = __builtin_amdgcn_udot8(x, y, z, true);
  o[12*i+10] = as_ushort(__builtin_amdgcn_fdot2_f16_f16(as_half2(x), as_half2(y), as_half((ushort)z)));
  o[12*i+11] = __builtin_bit_cast(ushort, __builtin_amdgcn_fdot2_bf16_bf16(__builtin_bit_cast(short2_, x), __builtin_bit_cast(short2_, y), (short)z));
}
