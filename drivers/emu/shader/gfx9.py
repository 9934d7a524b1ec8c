"""CDNA3 (gfx940-942) on the RDNA execution model.

The decoder already gives CDNA3 instructions gfx11's field names and register numbering; here their GFX9 mnemonics
become the gfx11 operation of the same meaning (s_load_dwordx2 -> s_load_b64, v_add_u32 -> v_add_nc_u32,
ds_read2_b32 -> ds_load_2addr_b32, ...). What GFX9 does differently is modelled where the operation is compiled,
keyed on the family: v_cmpx also writes its lane mask to VCC/SDST, 16-bit VALU results zero the register's high half,
SDWA operands and results (sdwa.py), the GFX9-only DPP controls, MFMA (mfma.py). Here: DS_CMPST's operand order, AGPR
operands placed in the unified register file (as_gfx11), and the VGPR indexing mode (s_set_gpr_idx_*).
"""
from __future__ import annotations
import dataclasses, re

import numpy as np

from rawgpu.drivers.emu.shader.decode import AGPR, Inst
from rawgpu.drivers.emu.shader.state import EmuFault

_NAMES = {
  "v_add_u32": "v_add_nc_u32", "v_sub_u32": "v_sub_nc_u32", "v_subrev_u32": "v_subrev_nc_u32",
  "v_add_i32": "v_add_nc_i32", "v_sub_i32": "v_sub_nc_i32", "v_add_u16": "v_add_nc_u16", "v_sub_u16": "v_sub_nc_u16",
  "v_add_i16": "v_add_nc_i16", "v_sub_i16": "v_sub_nc_i16", "v_addc_co_u32": "v_add_co_ci_u32",
  "v_subb_co_u32": "v_sub_co_ci_u32", "v_subbrev_co_u32": "v_subrev_co_ci_u32",
  "v_cvt_pkrtz_f16_f32": "v_cvt_pk_rtz_f16_f32", "v_mul_lo_i32": "v_mul_lo_u32", "v_ffbh_u32": "v_clz_i32_u32",
  "v_ffbl_b32": "v_ctz_i32_b32", "v_ffbh_i32": "v_cls_i32",
  "s_ff1_i32_b32": "s_ctz_i32_b32", "s_ff1_i32_b64": "s_ctz_i32_b64", "s_flbit_i32_b32": "s_clz_i32_u32",
  "s_flbit_i32_b64": "s_clz_i32_u64", "s_flbit_i32": "s_cls_i32", "s_flbit_i32_i64": "s_cls_i32_i64",
  "buffer_inv": "buffer_gl0_inv", "buffer_wbl2": "buffer_gl0_inv", "buffer_wbinvl1": "buffer_gl0_inv",
  "buffer_wbinvl1_vol": "buffer_gl0_inv", "s_dcache_inv_vol": "s_dcache_inv", "s_dcache_wb_vol": "s_dcache_wb",
  "ds_cmpst_b32": "ds_cmpstore_b32", "ds_cmpst_b64": "ds_cmpstore_b64", "ds_cmpst_rtn_b32": "ds_cmpstore_rtn_b32",
  "ds_cmpst_rtn_b64": "ds_cmpstore_rtn_b64", "ds_wrxchg_rtn_b32": "ds_storexchg_rtn_b32",
  "ds_wrxchg_rtn_b64": "ds_storexchg_rtn_b64",
  "v_accvgpr_read_b32": "v_mov_b32", "v_accvgpr_write_b32": "v_mov_b32", "v_accvgpr_mov_b32": "v_mov_b32",
  "v_dot2c_f32_f16": "v_dot2acc_f32_f16",
}
# FLAT/GLOBAL/SCRATCH/MUBUF and SMEM element names
_MEM = {"dword": "b32", "dwordx2": "b64", "dwordx3": "b96", "dwordx4": "b128", "dwordx8": "b256", "dwordx16": "b512",
        "ubyte": "u8", "sbyte": "i8", "ushort": "u16", "sshort": "i16", "byte": "b8", "short": "b16",
        "ubyte_d16": "d16_u8", "ubyte_d16_hi": "d16_hi_u8", "sbyte_d16": "d16_i8", "sbyte_d16_hi": "d16_hi_i8",
        "short_d16": "d16_b16", "short_d16_hi": "d16_hi_b16", "byte_d16_hi": "d16_hi_b8"}
# FLAT/GLOBAL/MUBUF atomics: GFX9 name -> (gfx11 name, with _x2 for 64 bits)
_ATOMIC = {"add": "add_u", "sub": "sub_u", "swap": "swap_b", "cmpswap": "cmpswap_b", "smin": "min_i", "umin": "min_u",
           "smax": "max_i", "umax": "max_u", "and": "and_b", "or": "or_b", "xor": "xor_b", "inc": "inc_u", "dec": "dec_u"}
# 16-bit operations that keep the register's high half on GFX9 (the ones with op_sel); the others zero it
KEEPS_HIGH_HALF = {"v_fma_f16", "v_mad_f16", "v_mad_u16", "v_mad_i16", "v_div_fixup_f16", "v_fma_mixlo_f16",
                   "v_fma_mixhi_f16", "v_mad_mixlo_f16", "v_mad_mixhi_f16", "v_cvt_pk_fp8_f32", "v_cvt_pk_bf8_f32"}


def canonical(name: str) -> str:
  """The gfx11 mnemonic of the same operation (unchanged where GFX9 spells it alike)."""
  if name in _NAMES: return _NAMES[name]
  if m := re.match(r"(global|flat|scratch|buffer)_(load|store)_(\w+)$", name):
    return f"{m.group(1)}_{m.group(2)}_{_MEM.get(m.group(3), m.group(3))}"
  if m := re.match(r"s_(buffer_)?load_(dword\w*)$", name): return f"s_{m.group(1) or ''}load_{_MEM.get(m.group(2), m.group(2))}"
  if m := re.match(r"(global|flat|buffer)_atomic_(\w+?)(_x2)?$", name):
    op = m.group(2)
    if op in _ATOMIC: return f"{m.group(1)}_atomic_{_ATOMIC[op]}{64 if m.group(3) else 32}"
    return name
  if m := re.match(r"ds_(read|write)(2st64|2)?_(\w+)$", name):
    kind = "load" if m.group(1) == "read" else "store"
    two = {"2": "_2addr", "2st64": "_2addr_stride64"}.get(m.group(2) or "", "")
    return f"ds_{kind}{two}_{m.group(3)}"
  if m := re.match(r"s_(and|or)n([12])_(\w+)$", name): return f"s_{m.group(1)}_not{int(m.group(2)) - 1}_{m.group(3)}"
  return name


def as_gfx11(i: Inst, acc: int = 0) -> Inst:
  """The instruction under its gfx11 name, with its AGPR operands (decode.AGPR + n) made the unified register file's
  acc + n (acc: the kernel's ACCUM_OFFSET). DS_CMPST takes the comparand in DATA0 and the new value in DATA1, the
  reverse of gfx11's DS_CMPSTORE."""
  name, f = canonical(i.name), i.f
  if any(v >= AGPR and (k in _VGPR_FIELDS or k in _SRC_FIELDS and v >= 256 + AGPR) for k, v in f.items()):
    f = {k: v - AGPR + acc if (k in _VGPR_FIELDS and v >= AGPR) or (k in _SRC_FIELDS and v >= 256 + AGPR) else v for k, v in f.items()}
  if i.name.startswith("ds_cmpst"): f = {**f, "data0": f["data1"], "data1": f["data0"]}
  return i if name == i.name and f is i.f else dataclasses.replace(i, name=name, f=f)

_VGPR_FIELDS, _SRC_FIELDS = ("vdst", "data", "data0", "data1"), ("src0", "src1", "src2")


# ---- VGPR indexing mode (s_set_gpr_idx_*): LLVM's dynamic indexing of a vector held in VGPRs
M0 = 125   # gfx11 numbering (decode moves GFX9's 124 here)
GPR_IDX_SRC0, GPR_IDX_DST = 1, 8   # M0[15:12] / the instruction's mode bits: SRC0, SRC1, SRC2, DST


def gpr_idx_mode(i: Inst, mode: int | None) -> int | None:
  """The indexing mode after instruction i (None: off), as far as the code says it: s_set_gpr_idx_on and
  s_set_gpr_idx_mode name their bits, s_set_gpr_idx_off ends it. The block compiler follows it through straight-line
  code (LLVM emits on, one v_mov_b32, off) and never cuts a long block inside such a region; a block that starts
  inside one (a branch into it) is compiled as not indexed."""
  if i.name == "s_set_gpr_idx_on": return i.f["src1"] & 0xf
  if i.name == "s_set_gpr_idx_mode": return i.f["simm16"] & 0xf
  if i.name == "s_set_gpr_idx_off": return None
  return mode


def gpr_idx_salu(i: Inst, read_src):
  """s_set_gpr_idx_on (M0[7:0] = the index, M0[15:12] = the mode), _idx (the index), _mode (the mode), _off (the
  MODE bit it clears is not modelled; the compiled code follows the region instead)."""
  n = i.name
  if n == "s_set_gpr_idx_off": return lambda st: None
  if n == "s_set_gpr_idx_mode":
    bits = np.uint32((i.f["simm16"] & 0xf) << 12)
    return lambda st: st.ws(M0, (st.s[M0] & np.uint32(~0xf000 & 0xffffffff)) | bits)
  src = read_src(i, i.f["src0"])
  keep = np.uint32(~0xff & 0xffffffff) if n == "s_set_gpr_idx_idx" else np.uint32(~0xf0ff & 0xffffffff)
  bits = np.uint32(0) if n == "s_set_gpr_idx_idx" else np.uint32((i.f["src1"] & 0xf) << 12)
  return lambda st: st.ws(M0, (st.s[M0] & keep) | (np.asarray(src(st), np.uint32) & np.uint32(0xff)) | bits)


def indexed_mov(i: Inst, mode: int, move):
  """v_mov_b32 with VGPR indexing on: the VGPR source (SRC0 bit) and/or the destination (DST bit) is the named VGPR
  plus M0[7:0], per wave (move: compile.move_indexed); other VALU operations under indexing are not modelled."""
  if i.name not in ("v_mov_b32", "v_mov_b32_e32") or mode & 0b0110:
    raise EmuFault(f"illegal instruction at {i.addr:#x}: {i.name} under VGPR indexing (mode {mode:#x}) is not modelled", i.addr)
  index = lambda st: (st.s[M0] & np.uint32(0xff)).astype(np.int64)
  return move(i, index if mode & GPR_IDX_SRC0 else None, index if mode & GPR_IDX_DST else None)
