"""The RDNA decoder agrees with LLVM: every instruction of real code objects (llvm-objdump-19) and a broad list of
hand-written instructions (assembled by llvm-mc-19 -show-encoding) decode to the same mnemonic and operands."""
from __future__ import annotations
import os, re, subprocess

import pytest

from test_emu_rdna_common import compile_cl, kernels, objdump, need, MC
from rawgpu.drivers.emu.shader.decode import decode_at, DecodeError
from rawgpu.drivers.emu.shader.disasm import disasm

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = [("gfx1100", ()), ("gfx1100", ("-mwavefrontsize64",)), ("gfx1201", ()), ("gfx942", ())]
IDS = ["gfx1100", "gfx1100-w64", "gfx1201", "gfx942"]

def norm(t: str) -> str: return re.sub(r"\s+", " ", t.strip())

def _sources() -> str:
  from test_emu_rdna_random import PRELUDE, kernel_source
  with open(os.path.join(HERE, "rdna_cases", "features.cl")) as f: feat = f.read()
  return feat, PRELUDE + "\n".join(kernel_source(s)[0] for s in range(20))

@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_code_objects_match_objdump(target):
  mcpu, flags = target
  w64 = bool(flags) or mcpu == "gfx942"   # CDNA3 is wave64 only
  bad, total = [], 0
  for src, extra in zip(_sources(), [(), ("-fwrapv", "-cl-fp32-correctly-rounded-divide-sqrt")]):
    for more in ((), ("-mllvm", "-amdgpu-atomic-optimizer-strategy=DPP")):
      elf = compile_cl(src, mcpu, flags + extra + more)
      k = next(iter(kernels(elf).values()))
      for addr, text, words in objdump(elf, mcpu, w64):
        if text.startswith("s_code_end"): continue
        total += 1
        try:
          i = decode_at(mcpu, k.code, addr - k.text_addr)
          mine, size = disasm(mcpu, i, w64), i.size
        except DecodeError as e:
          mine, size = f"<{e}>", 0
        if norm(mine) != norm(text) or size != 4 * len(words): bad.append(f"{addr:#x}: llvm {text!r} mine {mine!r}")
  assert total > 5000
  assert not bad, f"{len(bad)} of {total} differ:\n" + "\n".join(bad[:40])

# Hand-written instructions in every encoding the decoder knows; llvm-mc both assembles them and prints the canonical
# text we must reproduce. Lines one architecture rejects are skipped for it.
ASM = """
s_mov_b32 s5, 0x12345678
s_mov_b64 s[4:5], -1
s_add_u32 s1, s2, 64
s_addc_u32 s1, s2, -16
s_add_co_u32 s1, s2, 64
s_lshl_b64 s[2:3], s[4:5], 3
s_and_saveexec_b32 s0, vcc_lo
s_and_saveexec_b64 s[0:1], vcc
s_or_b32 exec_lo, exec_lo, s3
s_cselect_b32 s0, 1.0, s1
s_bfe_u32 s3, s4, 0x50008
s_cmp_lg_u32 s0, 0
s_cmp_eq_u64 s[0:1], 0
s_bitcmp1_b32 s2, 7
s_movk_i32 s4, 0x1234
s_cmpk_gt_i32 s2, 0x10
s_addk_i32 s2, 0xfff0
s_getpc_b64 s[0:1]
s_setpc_b64 s[2:3]
s_ff1_i32_b32 s0, s1
s_ctz_i32_b32 s0, s1
s_bcnt1_i32_b64 s0, s[2:3]
s_sext_i32_i16 s0, s1
s_branch 5
s_cbranch_vccnz 65530
s_cbranch_execz 2
s_barrier
s_waitcnt vmcnt(0) lgkmcnt(0)
s_waitcnt vmcnt(1)
s_wait_loadcnt 0x2
s_wait_kmcnt 0x0
s_delay_alu instid0(VALU_DEP_1) | instskip(NEXT) | instid1(SALU_CYCLE_1)
s_nop 3
s_clause 0x3
s_sendmsg sendmsg(MSG_DEALLOC_VGPRS)
s_endpgm
s_load_b32 s2, s[0:1], 0x18
s_load_b128 s[4:7], s[0:1], 0x0
s_load_b256 s[8:15], s[2:3], 0x40
s_load_b64 s[0:1], s[2:3], s4 offset:0x10
s_load_b64 s[2:3], s[4:5], s2
s_load_b64 s[2:3], s[4:5], s2 offset:-0x10
v_mov_b32_e32 v1, 0.5
v_mov_b32_e32 v1, 0x3e22f983
v_mov_b32_e32 v1, s3
v_cvt_f32_i32_e32 v2, v3
v_cvt_f64_f32_e32 v[2:3], v4
v_rcp_f32_e32 v0, v1
v_readfirstlane_b32 s0, v1
v_add_f32_e32 v0, v1, v2
v_add_f32_e64 v0, -v1, |v2|
v_add_f32_e64 v0, v1, v2 clamp
v_mul_f32_e64 v0, v1, v2 mul:2
v_fmac_f32_e32 v0, 0x40400000, v2
v_fmamk_f32 v0, v1, 0x41200000, v2
v_fmaak_f32 v0, v1, v2, 0x41200000
v_cndmask_b32_e32 v0, v1, v2, vcc_lo
v_cndmask_b32_e64 v0, 0, 1, s4
v_add_co_u32 v0, vcc_lo, v1, v2
v_add_co_ci_u32_e32 v1, vcc_lo, s3, v2, vcc_lo
v_sub_co_ci_u32_e64 v1, s0, v3, v2, s1
v_cmp_gt_i32_e32 vcc_lo, s2, v0
v_cmp_lt_f32_e64 s2, v1, 1.0
v_cmpx_eq_u32_e32 0, v0
v_cmp_class_f32_e64 s0, v1, 3
v_fma_f32 v0, v1, v2, v3
v_fma_f64 v[0:1], v[2:3], v[4:5], v[6:7]
v_div_scale_f32 v0, vcc_lo, v1, v2, v1
v_div_fmas_f64 v[0:1], v[2:3], v[4:5], v[6:7]
v_div_fixup_f32 v0, v1, v2, v3
v_mad_u64_u32 v[0:1], null, v2, v3, v[4:5]
v_lshlrev_b64 v[0:1], 2, v[0:1]
v_lshl_or_b32 v0, s15, 8, v0
v_bfe_u32 v0, v1, 8, 5
v_perm_b32 v0, v1, v2, 0x5040100
v_readlane_b32 s0, v1, 5
v_writelane_b32 v1, s0, 3
v_mbcnt_lo_u32_b32 v0, -1, 0
v_permlanex16_b32 v0, v1, s0, s1
v_mov_b32_dpp v0, v1 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1
v_add_f32_dpp v0, v1, v2 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
v_add_nc_u32_dpp v0, v1, v2 row_share:3 row_mask:0xf bank_mask:0x5
v_mov_b32_dpp v0, v1 dpp8:[7,6,5,4,3,2,1,0]
v_pk_add_f16 v0, v1, v2
v_pk_fma_f16 v0, v1, v2, v3 op_sel:[1,0,0] op_sel_hi:[0,1,1]
v_fma_mix_f32 v0, v1, v2, v3 op_sel_hi:[1,1,0]
v_dual_add_f32 v0, v1, v2 :: v_dual_mov_b32 v3, v4
v_dual_fmac_f32 v0, v1, v2 :: v_dual_cndmask_b32 v1, v3, v4
v_dual_mul_f32 v4, 0x42000000, v2 :: v_dual_sub_f32 v5, v1, v6
ds_store_b32 v1, v2 offset:16
ds_load_b64 v[0:1], v2 offset:8
ds_load_2addr_b32 v[0:1], v2 offset0:1 offset1:3
ds_load_2addr_stride64_b32 v[0:1], v2 offset1:2
ds_store_2addr_b64 v1, v[2:3], v[4:5] offset0:2 offset1:4
ds_add_u32 v1, v2
ds_add_rtn_u32 v0, v1, v2 offset:4
ds_cmpstore_rtn_b32 v0, v1, v2, v3
ds_bpermute_b32 v0, v1, v2
ds_swizzle_b32 v0, v1 offset:swizzle(BITMASK_PERM,"01pip")
global_load_b32 v2, v[2:3], off
global_load_b128 v[0:3], v4, s[2:3] offset:-16
global_store_b16 v[0:1], v2, off offset:6
global_load_d16_hi_b16 v1, v[2:3], off
global_atomic_add_u32 v0, v1, s[2:3]
global_atomic_add_u32 v5, v0, v1, s[2:3] glc
global_atomic_cmpswap_b64 v[0:1], v2, v[4:7], s[2:3] glc
global_atomic_add_u32 v5, v0, v1, s[2:3] th:TH_ATOMIC_RETURN
global_load_b32 v2, v[2:3], off scope:SCOPE_SYS
flat_load_b32 v0, v[2:3] offset:8
scratch_load_b32 v0, off, s2 offset:16
scratch_store_b64 v1, v[2:3], off
buffer_gl0_inv
global_wb scope:SCOPE_SE
"""

# CDNA3 (gfx942) spellings and forms: GFX9 mnemonics, M0 as operand 124, SMEM with SOE/IMM, sc0/nt/sc1, SDWA, the
# GFX9-only DPP controls
ASM_GFX9 = """
s_load_dword s3, s[0:1], 0x1c
s_load_dwordx4 s[4:7], s[0:1], -0x10 glc
s_load_dwordx2 s[2:3], s[4:5], s2 offset:-0x10
s_load_dwordx2 s[2:3], s[2:3], s4 offset:0x0
s_load_dword s2, s[4:5], s6
s_load_dword s2, s[4:5], m0
s_mov_b32 m0, s2
s_mov_b32 s2, m0
s_waitcnt vmcnt(0) lgkmcnt(0)
s_waitcnt vmcnt(33)
s_waitcnt expcnt(2)
v_add_u32_e32 v1, m0, v2
v_add_co_u32_e32 v1, vcc, s2, v3
v_addc_co_u32_e64 v1, s[4:5], v2, v3, s[6:7]
v_cmpx_le_i32_e32 vcc, v1, v2
v_cmpx_gt_u32_e64 s[4:5], v1, v2
v_cmp_eq_u32_e64 s[2:3], m0, v2
v_readlane_b32 m0, v1, 3
v_mad_u64_u32 v[0:1], s[2:3], v2, v3, v[4:5]
v_lshl_add_u64 v[0:1], v[2:3], 2, v[4:5]
v_pk_fma_f16 v1, v2, v3, v4 op_sel:[1,0,0] neg_lo:[0,1,0]
v_fma_f32 v1, -v2, |v3|, s4 clamp
v_add_f32_sdwa v1, -v2, |v3| clamp dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:BYTE_1 src1_sel:DWORD
v_add_f32_sdwa v1, v2, v3 mul:2 dst_sel:BYTE_0 dst_unused:UNUSED_SEXT src0_sel:WORD_0 src1_sel:DWORD
v_and_b32_sdwa v4, sext(v4), s0 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1 src1_sel:DWORD
v_cmp_le_i32_sdwa s[4:5], v1, sext(v20) src0_sel:DWORD src1_sel:WORD_1
v_cmp_lt_f16_sdwa vcc, v1, v2 src0_sel:WORD_1 src1_sel:WORD_0
v_mov_b32_sdwa v1, s2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:DWORD
v_cvt_f32_f16_sdwa v3, v3 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1
v_mov_b32_dpp v1, v2 wave_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1
v_mov_b32_dpp v1, v2 wave_ror:1 row_mask:0xf bank_mask:0xf
v_mov_b32_dpp v1, v2 wave_shl:1 row_mask:0xf bank_mask:0xf
v_mov_b32_dpp v1, v2 wave_rol:1 row_mask:0xf bank_mask:0xf
v_add_u32_dpp v1, v1, v1 row_bcast:15 row_mask:0xa bank_mask:0xf
v_max_i32_dpp v1, v1, v1 row_bcast:31 row_mask:0xc bank_mask:0xf
v_add_f32_dpp v1, -v2, |v3| quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
ds_read2_b32 v[2:3], v1 offset0:2 offset1:3
ds_write2st64_b32 v1, v2, v3 offset1:4
ds_read_b32 v1, v2 offset:64
ds_add_rtn_u32 v1, v2, v3
ds_bpermute_b32 v1, v2, v3
global_load_dword v1, v[2:3], off
global_load_dword v1, v2, s[4:5] offset:-8 sc0 nt sc1
global_store_dwordx2 v1, v[2:3], s[4:5] offset:16
global_atomic_add v1, v2, v3, s[4:5] sc0
global_atomic_cmpswap_x2 v[0:1], v2, v[4:7], s[2:3] sc0
flat_load_dword v1, v[2:3] offset:8
flat_atomic_add v1, v[2:3], v4 sc0
scratch_store_dword v1, v2, off
scratch_store_dword off, v2, s4 offset:4 sc0 sc1
scratch_load_dword v1, off, off offset:32
buffer_inv sc1
buffer_wbl2 sc0 sc1
v_accvgpr_read_b32 v1, a2
v_accvgpr_write_b32 a1, v2
v_accvgpr_write_b32 a1, 7
v_accvgpr_mov_b32 a1, a2
v_mfma_f32_16x16x16_f16 a[0:3], v[2:3], v[4:5], a[0:3]
v_mfma_f32_16x16x16_f16 v[0:3], a[2:3], a[4:5], 0
v_mfma_f32_32x32x8_f16 a[0:15], v[2:3], v[4:5], a[0:15] cbsz:1 abid:1 blgp:2
v_mfma_f32_16x16x4_f32 a[0:3], v2, v3, a[0:3]
v_mfma_i32_16x16x32_i8 v[0:3], v[4:5], v[6:7], v[0:3]
ds_read_b32 a1, v2
ds_write_b32 v1, a2
global_store_dword v0, a1, s[2:3]
global_load_dwordx4 a[0:3], v0, s[2:3] offset:48
scratch_load_dword a3, off, s0
s_set_gpr_idx_on s36, gpr_idx(DST)
s_set_gpr_idx_on s2, gpr_idx(SRC0,SRC1,SRC2,DST)
s_set_gpr_idx_on 5, gpr_idx(SRC0)
s_set_gpr_idx_on m0, gpr_idx()
s_set_gpr_idx_mode gpr_idx(SRC1)
s_set_gpr_idx_idx s3
s_set_gpr_idx_off
"""
# MUBUF (gfx12: VBUFFER): vaddr forms, soffset kinds, offsets, cache bits and tfe (each target takes its own spellings)
ASM += """
buffer_load_b64 v[1:3], v[2:3], s[4:7], s3 idxen offen offset:12 glc slc dlc tfe
buffer_load_b64 v[1:3], v[2:3], s[4:7], s3 idxen offen offset:12 th:TH_LOAD_NT scope:SCOPE_SYS tfe
buffer_atomic_cmpswap_b32 v[1:2], v2, s[4:7], null offen glc
buffer_atomic_cmpswap_b32 v[1:2], v2, s[4:7], null offen th:TH_ATOMIC_RETURN
buffer_store_b16 v1, off, s[4:7], 0 offset:6
buffer_atomic_add_u32 v1, off, s[4:7], m0
buffer_load_b32 v2, v0, s[0:3], 0 offen
buffer_load_d16_hi_u8 v1, v2, s[8:11], s5 idxen
buffer_store_b128 v[4:7], v1, s[8:11], s2 offen offset:4095
buffer_store_b32 v1, off, s[4:7], m0 offset:8388607
buffer_load_u16 v1, v3, s[96:99], s1 offen
buffer_load_dwordx2 v[2:3], v[2:3], s[4:7], s3 idxen offen offset:12 sc0 sc1 nt
buffer_atomic_cmpswap v[2:3], v2, s[4:7], 0 offen sc0
buffer_load_dword a5, v2, s[4:7], 0 offen
buffer_store_short v1, off, s[4:7], s9 offset:6
buffer_atomic_add_x2 v[2:3], v1, s[8:11], m0 idxen
"""
# MODE and friends, by name and number, on every family
ASM += """
s_getreg_b32 s0, hwreg(HW_REG_MODE)
s_getreg_b32 s0, hwreg(HW_REG_MODE, 2, 1)
s_setreg_b32 hwreg(HW_REG_MODE, 0, 4), s2
s_setreg_imm32_b32 hwreg(HW_REG_MODE, 0, 4), 5
s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 4), 0xff
s_getreg_b32 s0, hwreg(HW_REG_STATUS)
s_getreg_b32 s0, hwreg(50, 3, 5)
"""

def _mc(mcpu: str, lines: list[str], w64: bool) -> list[tuple[str, bytes]]:
  need(MC)
  attr = ["-mattr=+wavefrontsize64"] if w64 else []
  out = []
  for ln in lines:  # one at a time: a line one target rejects must not hide the others
    r = subprocess.run([MC, "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}", *attr, "-show-encoding"], input=ln + "\n",
                       capture_output=True, text=True)
    for o in r.stdout.splitlines():
      m = re.match(r"\s*(.*?)\s*; encoding: \[(.*)\]", o)
      if m: out.append(bytes(int(b, 16) for b in m.group(2).split(",")))
  # the printed form of an assembled instruction echoes its source; LLVM's disassembler gives the canonical text
  text = "\n".join(",".join(f"0x{b:02x}" for b in e) for e in out) + "\n"
  r = subprocess.run([MC, "-disassemble", "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}", *attr], input=text,
                     capture_output=True, text=True, check=True)
  dis = [ln.strip() for ln in r.stdout.splitlines() if ln.strip() and not ln.strip().startswith(".")]
  assert len(dis) == len(out), r.stderr
  return list(zip(dis, out))

@pytest.mark.parametrize("mcpu", ["gfx1100", "gfx1201", "gfx942"])
def test_instruction_list_matches_llvm_mc(mcpu):
  w64 = mcpu == "gfx942"
  lines = [ln for ln in (ASM + (ASM_GFX9 if w64 else "")).strip().splitlines() if ln.strip()]
  got = _mc(mcpu, lines, w64)
  assert len(got) > 80
  bad = []
  for text, enc in got:
    try:
      i = decode_at(mcpu, enc + b"\0" * 16, 0)
      mine, size = disasm(mcpu, i, w64), i.size
    except DecodeError as e:
      mine, size = f"<{e}>", 0
    if norm(mine) != norm(text) or size != len(enc): bad.append(f"llvm {text!r} {enc.hex()} mine {mine!r} ({size} bytes)")
  assert not bad, "\n".join(bad)


# Encodings llvm-mc does not assemble from text: fields its syntax cannot say (global_inv has no offset operand).
RAW = {"gfx1201": ["7cc00aee0000040000000008"]}   # global_inv scope:SCOPE_SE with a nonzero IOFFSET field

@pytest.mark.parametrize("mcpu", sorted(RAW))
def test_raw_encodings_match_llvm_mc(mcpu):
  need(MC)
  for enc in map(bytes.fromhex, RAW[mcpu]):
    r = subprocess.run([MC, "-disassemble", "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}"], input=",".join(f"0x{b:02x}" for b in enc) + "\n",
                       capture_output=True, text=True, check=True)
    text = next(ln.strip() for ln in r.stdout.splitlines() if ln.strip() and not ln.strip().startswith("."))
    assert norm(disasm(mcpu, decode_at(mcpu, enc + bytes(16), 0), False)) == norm(text), enc.hex()


def test_prepare_loads_the_arch_tables_and_refuses_other_archs():
  """A board calls prepare(arch) at power-on: the family's opcode tables are loaded then, not in the first dispatch."""
  from rawgpu.drivers.emu import shader
  from rawgpu.drivers.emu.shader.decode import tables
  tables.cache_clear()
  shader.prepare("gfx1201")
  assert tables.cache_info().currsize == 1 and tables.cache_info().misses == 1
  with pytest.raises(ValueError, match="unsupported architecture 'gfx90a'"): shader.prepare("gfx90a")
