/* CDNA3's dot-product builtins (gfx942): the VOP2 accumulate forms v_dot2c_f32_f16, v_dot4c_i32_i8, v_dot8c_i32_i4,
   v_dot2c_i32_i16 (no clamp) and the VOP3P forms (with clamp, and the unsigned ones) on packed operands a, b and c. */
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half half2_ __attribute__((ext_vector_type(2)));
typedef short short2_ __attribute__((ext_vector_type(2)));
typedef ushort ushort2_ __attribute__((ext_vector_type(2)));

__kernel void k(__global const uint *a, __global const uint *b, __global const uint *c, __global uint *o) {
  int i = __builtin_amdgcn_workitem_id_x();
  uint x = a[i], y = b[i], z = c[i];
  o[12*i+0] = as_uint(__builtin_amdgcn_fdot2(as_half2(x), as_half2(y), as_float(z), false));
  o[12*i+1] = as_uint(__builtin_amdgcn_fdot2(as_half2(x), as_half2(y), as_float(z), true));
  o[12*i+2] = __builtin_amdgcn_sdot4(as_int(x), as_int(y), as_int(z), false);
  o[12*i+3] = __builtin_amdgcn_sdot4(as_int(x), as_int(y), as_int(z), true);
  o[12*i+4] = __builtin_amdgcn_udot4(x, y, z, false);
  o[12*i+5] = __builtin_amdgcn_udot4(x, y, z, true);
  o[12*i+6] = __builtin_amdgcn_sdot8(as_int(x), as_int(y), as_int(z), false);
  o[12*i+7] = __builtin_amdgcn_sdot8(as_int(x), as_int(y), as_int(z), true);
  o[12*i+8] = __builtin_amdgcn_udot8(x, y, z, false);
  o[12*i+9] = __builtin_amdgcn_sdot2(__builtin_bit_cast(short2_, x), __builtin_bit_cast(short2_, y), as_int(z), false);
  o[12*i+10] = __builtin_amdgcn_sdot2(__builtin_bit_cast(short2_, x), __builtin_bit_cast(short2_, y), as_int(z), true);
  o[12*i+11] = __builtin_amdgcn_udot2(__builtin_bit_cast(ushort2_, x), __builtin_bit_cast(ushort2_, y), z, true);
}
