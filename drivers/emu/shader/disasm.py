"""Inst -> LLVM-style assembly text (the subset of llvm-objdump's syntax our tests compare against)."""
from __future__ import annotations
import functools, re

from rawgpu.drivers.emu.shader.decode import Inst, family, tables
from rawgpu.drivers.emu.shader import sdwa

@functools.cache
def _vop3_names(fam: str) -> set[str]:
  return {n for n, _ in tables(fam)["vop3"].values()}

INLINE_F = {240: "0.5", 241: "-0.5", 242: "1.0", 243: "-1.0", 244: "2.0", 245: "-2.0", 246: "4.0", 247: "-4.0",
            248: "0.15915494"}
SPECIAL = {106: "vcc_lo", 107: "vcc_hi", 124: "null", 125: "m0", 126: "exec_lo", 127: "exec_hi", 235: "src_shared_base",
           236: "src_shared_limit", 237: "src_private_base", 238: "src_private_limit", 239: "src_pops_exiting_wave_id",
           251: "src_vccz", 252: "src_execz", 253: "src_scc", 254: "src_lds_direct"}

def reg(n: int, count: int = 1) -> str:
  """Register operand text for a 9-bit source encoding n covering count registers."""
  if n >= 768:   # CDNA AGPR (decode.AGPR added to a source's 256 + n)
    return f"a{n - 768}" if count == 1 else f"a[{n - 768}:{n - 768 + count - 1}]"
  if n >= 256:
    return f"v{n - 256}" if count == 1 else f"v[{n - 256}:{n - 256 + count - 1}]"
  if n <= 105:
    return f"s{n}" if count == 1 else f"s[{n}:{n + count - 1}]"
  if 108 <= n <= 123:
    return f"ttmp{n - 108}" if count == 1 else f"ttmp[{n - 108}:{n - 108 + count - 1}]"
  if count == 2 and n in (106, 126): return {106: "vcc", 126: "exec"}[n]
  if 128 <= n <= 192: return str(n - 128)
  if 193 <= n <= 208: return str(192 - n)
  if n in INLINE_F: return INLINE_F[n]
  return SPECIAL.get(n, f"<{n}>")

def _src(i: Inst, name: str, count: int, fp16: bool = False) -> str:
  n = i.f[name]
  if n == 255:
    v = i.lit or 0
    sv = v - (1 << 32) if v >> 31 else v
    return str(sv) if -16 <= sv <= 64 else f"0x{v:x}"   # LLVM prints a literal an inline integer could hold as one
  if fp16 and n == 248: return "0.15915494"
  return reg(n, count)

def _mods(i: Inst, k: int, text: str) -> str:
  if i.sdwa is not None:
    _sel, sext, neg, ab = sdwa.src_mods(i.sdwa, k)
    if sext: text = f"sext({text})"
    return ("-" if neg else "") + (f"|{text}|" if ab else text)
  sd = any(o[0] == "sdst" for o in i.ops)  # VOP3SD: the sdst field sits where abs would
  neg, ab = i.f.get("neg", 0) >> k & 1, i.f.get("abs", 0) >> k & 1 if i.fmt == "vop3" and not sd else 0
  if i.fmt == "vop3p":
    if not i.name.startswith("v_fma_mix"): return text  # packed math prints neg_lo/neg_hi lists instead
    ab = i.f.get("neg_hi", 0) >> k & 1
  if i.dpp is not None and k < 2:
    neg, ab = neg or (i.dpp >> (20 + 2 * k)) & 1, ab or (i.dpp >> (21 + 2 * k)) & 1
  if ab: text = f"|{text}|"
  if neg: text = f"-{text}"
  return text

_DPP_GFX9 = {0x130: "wave_shl:1", 0x134: "wave_rol:1", 0x138: "wave_shr:1", 0x13c: "wave_ror:1", 0x142: "row_bcast:15",
             0x143: "row_bcast:31"}

def _dpp16(ctrl: int) -> str:
  if ctrl <= 0xff: return "quad_perm:[" + ",".join(str(ctrl >> (2 * k) & 3) for k in range(4)) + "]"
  for lo, nm in ((0x101, "row_shl"), (0x111, "row_shr"), (0x121, "row_ror")):
    if lo <= ctrl <= lo + 14: return f"{nm}:{ctrl - lo + 1}"
  if ctrl in _DPP_GFX9: return _DPP_GFX9[ctrl]
  if ctrl == 0x140: return "row_mirror"
  if ctrl == 0x141: return "row_half_mirror"
  if 0x150 <= ctrl <= 0x15f: return f"row_share:{ctrl - 0x150}"
  if 0x160 <= ctrl <= 0x16f: return f"row_xmask:{ctrl - 0x160}"
  return f"dpp_ctrl:{ctrl:#x}"

def _waitcnt(v: int, fam: str) -> str:
  if fam == "gfx9": vm, exp, lgkm, vm_max, lgkm_max = (v & 0xf) | (v >> 14 & 3) << 4, v >> 4 & 7, v >> 8 & 0xf, 0x3f, 0xf
  else: vm, exp, lgkm, vm_max, lgkm_max = v >> 10 & 0x3f, v & 7, v >> 4 & 0x3f, 0x3f, 0x3f
  parts = []
  if vm != vm_max: parts.append(f"vmcnt({vm})")
  if exp != 7: parts.append(f"expcnt({exp})")
  if lgkm != lgkm_max: parts.append(f"lgkmcnt({lgkm})")
  return " ".join(parts) if parts else f"vmcnt({vm_max}) expcnt(7) lgkmcnt({lgkm_max})"

_DEP = ["NO_DEP", "VALU_DEP_1", "VALU_DEP_2", "VALU_DEP_3", "VALU_DEP_4", "TRANS32_DEP_1", "TRANS32_DEP_2",
        "TRANS32_DEP_3", "FMA_ACCUM_CYCLE_1", "SALU_CYCLE_1", "SALU_CYCLE_2", "SALU_CYCLE_3"]
_SKIP = ["SAME", "NEXT", "SKIP_1", "SKIP_2", "SKIP_3", "SKIP_4"]

def _delay_alu(v: int) -> str:
  id0, skip, id1 = v & 0xf, v >> 4 & 7, v >> 7 & 0xf
  out = [f"instid0({_DEP[id0] if id0 < len(_DEP) else id0})"] if id0 else []
  if skip: out.append(f"instskip({_SKIP[skip] if skip < len(_SKIP) else skip})")
  if id1: out.append(f"instid1({_DEP[id1] if id1 < len(_DEP) else id1})")
  return " | ".join(out) if out else "0"

def _sopp(i: Inst, fam: str) -> str:
  v, n = i.f["simm16"], i.name
  if n in ("s_endpgm", "s_barrier", "s_code_end", "s_icache_inv", "s_endpgm_saved", "s_wait_idle", "s_set_gpr_idx_off") and v == 0: return n
  if n == "s_waitcnt": return f"{n} {_waitcnt(v, fam)}"
  if n == "s_delay_alu": return f"{n} {_delay_alu(v)}"
  if n.startswith("s_branch") or n.startswith("s_cbranch"): return f"{n} {v}"  # llvm-objdump prints it unsigned
  if n == "s_sendmsg" and v == 3: return f"{n} sendmsg(MSG_DEALLOC_VGPRS)"
  if n in ("s_nop", "s_setprio", "s_sleep"): return f"{n} {v}"
  return f"{n} 0x{v:x}"

def _flat(i: Inst, fam: str) -> str:
  f, n = i.f, i.name
  out = []
  seg = i.fmt
  if "_atomic_" in n and (f["th"] & 1 if fam == "gfx12" else f["glc"]):  # returning atomics name their vdst first
    cnt = next(c for fl, c, _ in i.ops if fl == "data")
    out.append(reg(f["vdst"] + 256, cnt // 2 if "cmpswap" in n else cnt))
  for fld, cnt, _ in i.ops:
    if fld == "addr":
      if seg == "scratch" and not f["sve"]: out.append("off")
      else: out.append(reg(f["addr"] + 256, 1 if (seg == "scratch" or (seg == "global" and f["saddr"] != 124)) else 2))
    elif fld == "vdst": out.append(reg(f["vdst"] + 256, cnt))
    elif fld == "data": out.append(reg(f["data"] + 256, cnt))
  if not any(o[0] == "addr" for o in i.ops) and seg == "scratch": pass
  if seg != "flat" and i.ops:
    out.append("off" if f["saddr"] == 124 else reg(f["saddr"], 1 if seg == "scratch" else 2))
  text = f"{n} " + ", ".join(out) if out else n
  if f["offset"] and i.ops: text += f" offset:{f['offset']}"   # (llvm-mc shows none for global_inv and its kin)
  return text + _cache_bits(i, fam)

def _mubuf(i: Inst, fam: str) -> str:
  """buffer_* as LLVM prints them: vdata (one more register with tfe), vaddr (index, offset; off when neither),
  the resource's four SGPRs, soffset, then idxen/offen, offset, cache bits, tfe."""
  f = i.f
  cnt = next(c for fl, c, _ in i.ops if fl == "data") + f.get("tfe", 0)
  addr = "off" if not (f["offen"] or f["idxen"]) else reg(f["addr"] + 256, 2 if f["offen"] and f["idxen"] else 1)
  text = f"{i.name} {reg(f['data'] + 256, cnt)}, {addr}, {reg(f['srsrc'], 4)}, {reg(f['soffset'])}"
  text += "".join(f" {k}" for k in ("idxen", "offen") if f[k])
  if f["offset"]: text += f" offset:{f['offset']}"
  return text + _cache_bits(i, fam) + (" tfe" if f.get("tfe") else "")

def _cache_bits(i: Inst, fam: str) -> str:
  """The cache-policy bits of a memory instruction as LLVM prints them (gfx940: sc0 nt sc1; gfx12: th/scope)."""
  f = i.f
  if fam == "gfx12": return _th_scope(i.name, f["th"], f["scope"])
  if fam == "gfx9": return "".join(f" {nm}" for k, nm in (("glc", "sc0"), ("slc", "nt"), ("sc1", "sc1")) if f.get(k))
  return "".join(f" {k}" for k in ("glc", "slc", "dlc") if f[k])

_TH = ["RT", "NT", "HT", "LU", "NT_RT", "RT_NT", "NT_HT", "RT_WB"]

def _th_scope(n: str, th: int, scope: int) -> str:
  out = ""
  if th:
    if "atomic" in n: out += " th:" + "|".join(nm for b, nm in ((1, "TH_ATOMIC_RETURN"), (2, "TH_ATOMIC_NT"), (4, "TH_ATOMIC_CASCADE")) if th & b)
    else: out += f" th:TH_{'STORE' if 'store' in n else 'LOAD'}_{_TH[th]}"
  if scope: out += " scope:" + ["SCOPE_CU", "SCOPE_SE", "SCOPE_DEV", "SCOPE_SYS"][scope]
  return out

def _swizzle(off: int) -> str:
  if off & 0x8000: return "swizzle(QUAD_PERM," + ",".join(str(off >> (2 * k) & 3) for k in range(4)) + ")"
  am, om, xm = off & 0x1f, off >> 5 & 0x1f, off >> 10 & 0x1f
  if am == 0x1f and om == 0 and xm and xm & (xm - 1) == 0: return f"swizzle(SWAP,{xm})"
  if am == 0x1f and om == 0 and xm and (xm + 1) & xm == 0: return f"swizzle(REVERSE,{xm + 1})"
  gs = 0x1f - am + 1
  if xm == 0 and gs > 1 and gs & (gs - 1) == 0 and am == (0x1f & ~(gs - 1)) and om < gs: return f"swizzle(BROADCAST,{gs},{om})"
  bits = "".join(("i" if xm >> b & 1 else "p") if am >> b & 1 else ("1" if om >> b & 1 else "0") for b in range(4, -1, -1))
  return f'swizzle(BITMASK_PERM,"{bits}")'

def _ds(i: Inst) -> str:
  f, out = i.f, []
  for fld, cnt, _ in i.ops:
    out.append(reg(f[fld] + 256, cnt))
  text = f"{i.name} " + ", ".join(out) if out else i.name
  if i.name == "ds_swizzle_b32": return text + f" offset:{_swizzle(f['offset0'] | f['offset1'] << 8)}"
  if "2addr" in i.name or i.name.endswith("st64") or re.match(r"ds_(read|write|wrxchg)2(st64)?_", i.name):
    if f["offset0"]: text += f" offset0:{f['offset0']}"
    if f["offset1"]: text += f" offset1:{f['offset1']}"
  else:
    off = f["offset0"] | f["offset1"] << 8
    if off: text += f" offset:{off}"
  if f["gds"]: text += " gds"
  return text

def _smem(i: Inst, fam: str) -> str:
  f = i.f
  out = [reg(f[fld], cnt) for fld, cnt, _ in i.ops]
  signed = lambda v: f"0x{v:x}" if v >= 0 else f"-0x{-v:x}"
  if f["soffset"] != 124:   # gfx9 prints the immediate of SOE+IMM even when it is 0, gfx12 always (both as llvm-mc)
    with_imm = f["offset"] or f.get("imm") or fam == "gfx12"
    out.append(reg(f["soffset"]) + f" offset:{signed(f['offset'])}" if with_imm else reg(f["soffset"]))
  elif fam == "gfx11" and not f["offset"]: out.append("null")
  else: out.append(signed(f["offset"]))
  text = f"{i.name} " + ", ".join(out)
  if fam == "gfx12": return text + _th_scope(i.name, f["th"], f["scope"])
  return text + "".join(f" {k}" for k in ("glc", "dlc") if f[k])

_MASK_SRC2 = ("v_cndmask_b32", "v_cndmask_b16", "v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32")

def _valu(i: Inst, fam: str, w64: bool) -> str:
  f, out = i.f, []
  fp16 = "f16" in i.name
  k = 0
  for fld, cnt, rf in i.ops:
    if fld == "vcc" and i.sdwa is not None and i.fmt == "vopc": out.append(reg(f["sdst"], 2)); continue
    if fld == "vcc": out.append("vcc" if w64 else "vcc_lo"); continue
    if fld in ("vdst", "vdstx", "vdsty"):
      if rf == "s" and i.fmt == "vop3" and i.op < 256: cnt = 2 if w64 else 1  # VOPC e64 writes a lane mask
      out.append(reg(f[fld] + (256 if rf == "v" else 0), cnt)); continue
    if fld == "sdst": out.append(reg(f[fld], 2 if w64 else 1)); continue
    if fld == "src2" and i.name in _MASK_SRC2: cnt = 2 if w64 else 1
    k = int(fld[3]) if fld[3].isdigit() else 0
    out.append(_mods(i, k, _src(i, fld, cnt, fp16)))
  name = i.name
  if "fmamk" in name: out.insert(2, f"0x{i.lit:x}")   # the constant K sits between the sources
  elif "fmaak" in name: out.append(f"0x{i.lit:x}")
  if i.sdwa is not None: name += "_sdwa"
  elif i.dpp is not None or i.dpp8 is not None:
    name += "_dpp" if not i.vop3 else "_e64_dpp"
  elif i.fmt in ("vop1", "vop2", "vopc") and name in _vop3_names(fam) and "fmamk" not in name and "fmaak" not in name:
    name += "_e32"  # LLVM names the encoding only where both exist
  elif i.vop3: name += "_e64"
  text = f"{name} " + ", ".join(out) if out else name
  if i.fmt == "vop3":
    if f["clamp"]: text += " clamp"
    if f["omod"]: text += [" ", " mul:2", " mul:4", " div:2"][f["omod"]]
  if i.fmt == "vop3p": text += _vop3p_mods(i)
  if i.sdwa is not None:
    w = i.sdwa
    if i.fmt != "vopc":   # VOPC keeps its lane-mask destination in these bits
      if w >> 13 & 1: text += " clamp"
      if w >> 14 & 3: text += [" ", " mul:2", " mul:4", " div:2"][w >> 14 & 3]
    text += " " + sdwa.text(w, sum(1 for o in i.ops if o[0] in ("src0", "src1")), i.fmt == "vopc")
  if i.dpp is not None:
    d = i.dpp
    text += f" {_dpp16(d >> 8 & 0x1ff)} row_mask:{d >> 28 & 0xf:#x} bank_mask:{d >> 24 & 0xf:#x}"
    if d >> 19 & 1: text += " bound_ctrl:1"
    if d >> 18 & 1: text += " fi:1"
  if i.dpp8 is not None:
    text += " dpp8:[" + ",".join(str(i.dpp8 >> (8 + 3 * k) & 7) for k in range(8)) + "]"
    if i.f.get("src0_dpp8") == 234: text += " fi:1"
  return text

def _vop3p_mods(i: Inst) -> str:
  f = i.f
  if i.name.startswith(("v_mfma", "v_smfmac")): return "".join(f" {k}:{f[k]}" for k in ("cbsz", "abid", "blgp") if f[k])
  n = sum(1 for o in i.ops if o[0].startswith("src"))
  lst = lambda v: "[" + ",".join(str(v >> k & 1) for k in range(n)) + "]"
  mix = i.name.startswith("v_fma_mix")
  out = ""
  if f["opsel"] & ((1 << n) - 1): out += f" op_sel:{lst(f['opsel'])}"
  hi_default = 0 if mix else (1 << n) - 1
  if (f["opsel_hi"] & ((1 << n) - 1)) != hi_default: out += f" op_sel_hi:{lst(f['opsel_hi'])}"
  if not mix:
    if f["neg"] & ((1 << n) - 1): out += f" neg_lo:{lst(f['neg'])}"
    if f["neg_hi"] & ((1 << n) - 1): out += f" neg_hi:{lst(f['neg_hi'])}"
  if f["clamp"]: out += " clamp"
  return out

_HWREG = {1: "HW_REG_MODE", 2: "HW_REG_STATUS", 3: "HW_REG_TRAPSTS"}   # the names the tests meet; others print as numbers

def _hwreg_op(i: Inst, fam: str) -> str:
  """s_getreg/s_setreg: the SIMM16 is hwreg(id [5:0], offset [10:6], size - 1 [15:11])."""
  v = i.f["simm16"]
  hw_id, off, size = v & 0x3f, v >> 6 & 0x1f, (v >> 11 & 0x1f) + 1
  name = _HWREG.get(hw_id, str(hw_id)) if not (hw_id == 3 and fam == "gfx12") else str(hw_id)   # gfx12 has no TRAPSTS
  hw = f"hwreg({name})" if off == 0 and size == 32 else f"hwreg({name}, {off}, {size})"
  if i.name == "s_getreg_b32": return f"{i.name} {reg(i.f['sdst'])}, {hw}"
  if i.name == "s_setreg_b32": return f"{i.name} {hw}, {reg(i.f['sdst'])}"
  lit = i.lit or 0
  return f"{i.name} {hw}, {lit if lit <= 64 else hex(lit)}"

def disasm(arch: str, i: Inst, wave64: bool = False) -> str:
  """LLVM assembly text of i. Lane-mask operands are SGPR pairs in wave64, so the text depends on the wave size."""
  fam = family(arch)
  if i.name in ("s_set_gpr_idx_on", "s_set_gpr_idx_mode"):   # GFX9 VGPR indexing: the mode bits print as a list
    bits = i.f["src1"] if i.name.endswith("_on") else i.f["simm16"]
    mode = "gpr_idx(" + ",".join(nm for b, nm in enumerate(("SRC0", "SRC1", "SRC2", "DST")) if bits >> b & 1) + ")"
    return f"{i.name} {_src(i, 'src0', 1)}, {mode}" if i.name.endswith("_on") else f"{i.name} {mode}"
  if i.fmt == "sopp": return _sopp(i, fam)
  if i.name in ("s_getreg_b32", "s_setreg_b32", "s_setreg_imm32_b32"): return _hwreg_op(i, fam)
  if i.fmt in ("sop1", "sop2", "sopc", "sopk"):
    out = [_src(i, fld, cnt) if fld.startswith("src") else reg(i.f[fld], cnt) for fld, cnt, _ in i.ops]
    if i.fmt == "sopk" and i.name != "s_version": out.append(f"0x{i.f['simm16']:x}")
    if i.name == "s_fmamk_f32": out.insert(2, f"0x{i.lit:x}")   # the constant K, between the sources as in VOP2
    elif i.name == "s_fmaak_f32": out.append(f"0x{i.lit:x}")
    return f"{i.name} " + ", ".join(out) if out else i.name
  if i.fmt in ("flat", "global", "scratch"): return _flat(i, fam)
  if i.fmt == "ds": return _ds(i)
  if i.fmt == "smem": return _smem(i, fam)
  if i.fmt == "vopdx":
    return _valu(i, fam, wave64) + " :: " + _valu(i.y, fam, wave64)
  if i.fmt == "mubuf": return _mubuf(i, fam) if i.ops else i.name + (_cache_bits(i, fam) if fam == "gfx9" else "")
  return _valu(i, fam, wave64)
