"""Instruction decoder for RDNA3 (gfx11), RDNA4 (gfx12) and CDNA3 (gfx940-942, family "gfx9"): bytes -> Inst.

Encodings (field positions) follow AMD's ISA guides; opcode numbers and mnemonics come from the generated
optables_<family>.py (LLVM's disassembler). disasm.py prints an Inst as llvm-objdump does, so tests compare the two.

CDNA3 instructions are decoded into the gfx11 field names and register numbering, so one execution model serves all:
its M0 (scalar operand 124) becomes 125 as on gfx11, an unused SADDR/SOFFSET (0x7f, or SMEM without SOE) becomes 124
(gfx11's NULL), and the cache bits sc0/nt land in glc/slc.
"""
from __future__ import annotations
from dataclasses import dataclass, field
import struct

import functools, importlib

@functools.cache
def tables(fam: str) -> dict:
  """The generated opcode tables of a family, imported on first use (they are large)."""
  return importlib.import_module(f"rawgpu.drivers.emu.shader.optables_{fam}").TABLES

def family(arch: str) -> str:
  if arch.startswith("gfx11"): return "gfx11"
  if arch.startswith("gfx12"): return "gfx12"
  if arch in ("gfx940", "gfx941", "gfx942"): return "gfx9"
  raise ValueError(f"unsupported architecture {arch!r}: the emulator models gfx11xx, gfx12xx and gfx940-gfx942")

@dataclass
class Inst:
  addr: int                      # byte offset in the code
  size: int                      # bytes, literal and DPP words included
  fmt: str                       # table format name: sop1, vop3, ds, global, ...
  op: int
  name: str                      # LLVM mnemonic without _e32/_e64
  f: dict[str, int] = field(default_factory=dict)   # raw fields
  lit: int | None = None         # 32-bit literal, if any
  dpp: int | None = None         # DPP16 word, if any
  dpp8: int | None = None        # DPP8 word, if any
  sdwa: int | None = None        # SDWA word (gfx9), if any
  ops: tuple = ()                # (field, register count, register file) in printed order, from the table
  vop3: bool = False             # VOP1/2/C opcode in the VOP3 encoding
  y: "Inst | None" = None        # VOPD: the Y half (this Inst is the X half)

class DecodeError(Exception):
  pass

class CodeEnds(DecodeError):
  """The instruction needs bytes past the end of the code given (more code may be fetched; it is not illegal)."""

def _bits(w: int, lo: int, n: int) -> int: return (w >> lo) & ((1 << n) - 1)

def _sext(v: int, n: int) -> int: return v - (1 << n) if v >> (n - 1) & 1 else v

def _vop_short(w0: int) -> tuple[str, int, dict[str, int]]:
  """VOP1 / VOPC / VOP2 (the same on all three families)."""
  top = w0 >> 25
  if top == 0x3f: return "vop1", _bits(w0, 9, 8), {"vdst": _bits(w0, 17, 8), "src0": _bits(w0, 0, 9)}
  if top == 0x3e: return "vopc", _bits(w0, 17, 8), {"src1": _bits(w0, 9, 8) + 256, "src0": _bits(w0, 0, 9)}
  return "vop2", top, {"vdst": _bits(w0, 17, 8), "src1": _bits(w0, 9, 8) + 256, "src0": _bits(w0, 0, 9)}

def _scalar(w0: int) -> tuple[str, int, dict[str, int]]:
  """Scalar ALU and program control: SOP1 / SOPC / SOPP / SOPK / SOP2 (the same on all three families)."""
  top9 = w0 >> 23
  if top9 == 0x17d: return "sop1", _bits(w0, 8, 8), {"sdst": _bits(w0, 16, 7), "src0": _bits(w0, 0, 8)}
  if top9 == 0x17e: return "sopc", _bits(w0, 16, 7), {"src1": _bits(w0, 8, 8), "src0": _bits(w0, 0, 8)}
  if top9 == 0x17f: return "sopp", _bits(w0, 16, 7), {"simm16": _bits(w0, 0, 16)}
  if w0 >> 28 == 0xb: return "sopk", _bits(w0, 23, 5), {"sdst": _bits(w0, 16, 7), "simm16": _bits(w0, 0, 16)}
  return "sop2", _bits(w0, 23, 7), {"sdst": _bits(w0, 16, 7), "src1": _bits(w0, 8, 8), "src0": _bits(w0, 0, 8)}

def decode_at(arch: str, code: bytes, pc: int) -> Inst:
  """Decode the instruction at byte offset pc of code. Raises DecodeError for an encoding LLVM does not know."""
  fam = family(arch)
  tabs = tables(fam)
  if pc % 4: raise DecodeError("misaligned program counter")
  if pc + 4 > len(code): raise CodeEnds("fetch outside code")
  def dw(i: int) -> int:
    if pc + 4 * i + 4 > len(code): raise CodeEnds("instruction runs past the end of the code")
    return struct.unpack_from("<I", code, pc + 4 * i)[0]
  if fam == "gfx9": return _decode_gfx9(tabs, dw, pc)
  w0 = dw(0)
  f: dict[str, int] = {}
  srcs: list[str] = []
  if w0 >> 31 == 0: (fmt, op, f), srcs, size = _vop_short(w0), ["src0"], 4
  elif w0 >> 30 == 0b10:
    fmt, op, f = _scalar(w0)
    srcs, size = [s for s in ("src0", "src1") if s in f], 4
  else:
    enc = w0 >> 26
    if enc == 0x35:  # VOP3 / VOP3SD
      w1 = dw(1)
      fmt, op = "vop3", _bits(w0, 16, 10)
      f = {"vdst": _bits(w0, 0, 8), "abs": _bits(w0, 8, 3), "opsel": _bits(w0, 11, 4), "clamp": _bits(w0, 15, 1),
           "sdst": _bits(w0, 8, 7), "src0": _bits(w1, 0, 9), "src1": _bits(w1, 9, 9), "src2": _bits(w1, 18, 9),
           "omod": _bits(w1, 27, 2), "neg": _bits(w1, 29, 3)}
      srcs, size = ["src0", "src1", "src2"], 8
    elif w0 >> 24 == 0xcc:  # VOP3P
      w1 = dw(1)
      fmt, op = "vop3p", _bits(w0, 16, 7)
      f = {"vdst": _bits(w0, 0, 8), "neg_hi": _bits(w0, 8, 3), "opsel": _bits(w0, 11, 3),
           "opsel_hi": _bits(w1, 27, 2) | _bits(w0, 14, 1) << 2, "clamp": _bits(w0, 15, 1),
           "src0": _bits(w1, 0, 9), "src1": _bits(w1, 9, 9), "src2": _bits(w1, 18, 9), "neg": _bits(w1, 29, 3)}
      srcs, size = ["src0", "src1", "src2"], 8
    elif enc == 0x32:  # VOPD dual issue
      w1 = dw(1)
      opx, opy = _bits(w0, 22, 4), _bits(w0, 17, 5)
      vdstx = _bits(w1, 24, 8)
      f = {"src0x": _bits(w0, 0, 9), "src1x": _bits(w0, 9, 8) + 256, "vdstx": vdstx, "src0y": _bits(w1, 0, 9),
           "src1y": _bits(w1, 9, 8) + 256, "vdsty": (_bits(w1, 17, 7) << 1) | ((vdstx & 1) ^ 1)}
      if opx not in tabs["vopdx"] or opy not in tabs["vopdy"]: raise DecodeError(f"unknown VOPD opcodes {opx}/{opy}")
      size, lit = 8, None
      nx, ny = tabs["vopdx"][opx][0], tabs["vopdy"][opy][0]
      if f["src0x"] == 255 or f["src0y"] == 255 or "fmaak" in nx + ny or "fmamk" in nx + ny:
        lit, size = dw(2), 12
      x = Inst(pc, size, "vopdx", opx, nx, f, lit, ops=tabs["vopdx"][opx][1])
      x.y = Inst(pc, size, "vopdy", opy, ny, f, lit, ops=tabs["vopdy"][opy][1])
      return x
    elif enc == 0x36:  # DS
      w1 = dw(1)
      fmt, op = "ds", _bits(w0, 18, 8)
      f = {"offset0": _bits(w0, 0, 8), "offset1": _bits(w0, 8, 8), "gds": _bits(w0, 17, 1),
           "addr": _bits(w1, 0, 8), "data0": _bits(w1, 8, 8), "data1": _bits(w1, 16, 8), "vdst": _bits(w1, 24, 8)}
      size = 8
    elif enc == 0x3d:  # SMEM
      w1 = dw(1)
      fmt = "smem"
      if fam == "gfx11":
        op = _bits(w0, 18, 8)
        f = {"sbase": _bits(w0, 0, 6) << 1, "sdata": _bits(w0, 6, 7), "glc": _bits(w0, 14, 1), "dlc": _bits(w0, 13, 1),
             "offset": _sext(_bits(w1, 0, 21), 21), "soffset": _bits(w1, 25, 7)}
      else:
        op = _bits(w0, 13, 8)
        f = {"sbase": _bits(w0, 0, 6) << 1, "sdata": _bits(w0, 6, 7), "scope": _bits(w0, 21, 2), "th": _bits(w0, 23, 3),
             "offset": _sext(_bits(w1, 0, 24), 24), "soffset": _bits(w1, 25, 7)}
      size = 8
    elif enc == 0x37 and fam == "gfx11":  # FLAT / GLOBAL / SCRATCH
      w1 = dw(1)
      seg = _bits(w0, 16, 2)
      if seg == 3: raise DecodeError("reserved flat segment")
      fmt, op = ("flat", "scratch", "global")[seg], _bits(w0, 18, 7)
      f = {"offset": _sext(_bits(w0, 0, 13), 13) if seg else _bits(w0, 0, 12), "dlc": _bits(w0, 13, 1),
           "glc": _bits(w0, 14, 1), "slc": _bits(w0, 15, 1), "addr": _bits(w1, 0, 8), "data": _bits(w1, 8, 8),
           "saddr": _bits(w1, 16, 7), "sve": _bits(w1, 23, 1), "vdst": _bits(w1, 24, 8)}
      size = 8
    elif enc == 0x3b and fam == "gfx12":  # VFLAT / VSCRATCH / VGLOBAL
      w1, w2 = dw(1), dw(2)
      seg = _bits(w0, 24, 2)
      if seg == 3: raise DecodeError("reserved flat segment")
      fmt, op = ("flat", "scratch", "global")[seg], _bits(w0, 14, 7)
      f = {"saddr": _bits(w0, 0, 7), "vdst": _bits(w1, 0, 8), "sve": _bits(w1, 17, 1), "scope": _bits(w1, 18, 2),
           "th": _bits(w1, 20, 3), "data": _bits(w1, 23, 8), "addr": _bits(w2, 0, 8), "offset": _sext(_bits(w2, 8, 24), 24)}
      size = 12
    elif enc == 0x38 and fam == "gfx11":  # MUBUF
      w1 = dw(1)
      fmt, op = "mubuf", _bits(w0, 18, 8)
      f = {"offset": _bits(w0, 0, 12), "slc": _bits(w0, 12, 1), "dlc": _bits(w0, 13, 1), "glc": _bits(w0, 14, 1),
           "addr": _bits(w1, 0, 8), "data": _bits(w1, 8, 8), "srsrc": _bits(w1, 16, 5) << 2, "tfe": _bits(w1, 21, 1),
           "offen": _bits(w1, 22, 1), "idxen": _bits(w1, 23, 1), "soffset": _bits(w1, 24, 8)}
      size = 8
    elif enc == 0x31 and fam == "gfx12":  # VBUFFER (MUBUF)
      w1, w2 = dw(1), dw(2)
      fmt, op = "mubuf", _bits(w0, 14, 8)
      f = {"soffset": _bits(w0, 0, 7), "tfe": _bits(w0, 22, 1), "data": _bits(w1, 0, 8), "srsrc": _bits(w1, 9, 7),
           "scope": _bits(w1, 18, 2), "th": _bits(w1, 20, 3), "offen": _bits(w1, 30, 1), "idxen": _bits(w1, 31, 1),
           "addr": _bits(w2, 0, 8), "offset": _bits(w2, 8, 24)}
      size = 12
    else:
      raise DecodeError(f"unknown encoding {w0:#010x}")
  ent = tabs.get(fmt, {}).get(op)
  vop3 = False
  if fmt == "vop3" and op < 512: vop3 = True
  if ent is None: raise DecodeError(f"unknown {fmt} opcode {op}")
  name, ops = ent
  inst = Inst(pc, size, fmt, op, name, f, ops=ops, vop3=vop3)
  # a literal constant follows when any source selects it (and always for the madak/madmk forms)
  need_lit = any(f.get(s) == 255 for s in srcs) or name in ("v_fmamk_f32", "v_fmaak_f32", "v_fmamk_f16", "v_fmaak_f16",
                                                             "s_setreg_imm32_b32", "v_madmk_f32", "v_madak_f32",
                                                             "s_fmaak_f32", "s_fmamk_f32")
  if fmt in ("vop1", "vop2", "vopc", "vop3") and f.get("src0") in (250, 233, 234):
    extra = dw(size // 4)
    if f["src0"] == 250: inst.dpp = extra
    else: inst.dpp8, f["src0_dpp8"] = extra, f["src0"]
    f["src0"] = (extra & 0xff) + 256
    inst.size = size = size + 4
  if need_lit:
    inst.lit = dw(size // 4)
    inst.size = size + 4
  return inst

M0_GFX9, OFF_GFX9 = 124, 0x7f

def _sgpr_gfx9(n: int) -> int:
  """A CDNA3 scalar operand number in gfx11's numbering (only M0 moves; 125 is reserved there)."""
  if n == 125: raise DecodeError("reserved scalar operand 125")
  return 125 if n == M0_GFX9 else n

AGPR = 512   # added to a VGPR number (vdst, data: 0-255; sources: 256-511) that names an AGPR

def _mark_agprs(name: str, fmt: str, f: dict[str, int], w0: int) -> None:
  """CDNA's accumulation registers: an operand that names AGPR n gets n + AGPR (a source 256 + AGPR + n). FLAT and DS
  say so with their ACC bit (the data and destination registers), MFMA with ACC_CD (C and D: w0 bit 15, where VOP3P
  has clamp) and ACC (A, B: where op_sel_hi[1:0] is); v_accvgpr_* name them by definition."""
  def agpr(k: str) -> None:
    if k in f and (f[k] >= 256 or k not in ("src0", "src1", "src2")): f[k] += AGPR
  if fmt in ("flat", "global", "scratch", "ds", "mubuf") and f.pop("acc"):
    for k in ("vdst", "data", "data0", "data1"): agpr(k)
  elif name.startswith(("v_mfma", "v_smfmac")):
    f["cbsz"], f["abid"], f["blgp"] = f.pop("neg_hi"), f.pop("opsel") | f["opsel_hi"] >> 2 << 3, f.pop("neg")
    acc_ab, acc_cd = f.pop("opsel_hi") & 3, f.pop("clamp")
    if acc_cd: agpr("vdst"); agpr("src2")
    if acc_ab & 1: agpr("src0")
    if acc_ab & 2: agpr("src1")
  elif name == "v_accvgpr_read_b32": agpr("src0")
  elif name == "v_accvgpr_write_b32": agpr("vdst")
  elif name == "v_accvgpr_mov_b32": agpr("vdst"); agpr("src0")

def _decode_gfx9(tabs: dict, dw, pc: int) -> Inst:
  """decode_at for CDNA3: dw(i) is the instruction's i-th dword."""
  w0 = dw(0)
  f: dict[str, int] = {}
  srcs: list[str] = []
  size, enc = 4, w0 >> 26
  if w0 >> 31 == 0: (fmt, op, f), srcs = _vop_short(w0), ["src0"]   # the 32-bit encodings are gfx11's
  elif w0 >> 30 == 0b10:
    fmt, op, f = _scalar(w0)
    srcs = [s for s in ("src0", "src1") if s in f]
  elif w0 >> 23 == 0x1a7:  # VOP3P
    w1 = dw(1)
    fmt, op, size = "vop3p", _bits(w0, 16, 7), 8
    f = {"vdst": _bits(w0, 0, 8), "neg_hi": _bits(w0, 8, 3), "opsel": _bits(w0, 11, 3),
         "opsel_hi": _bits(w1, 27, 2) | _bits(w0, 14, 1) << 2, "clamp": _bits(w0, 15, 1),
         "src0": _bits(w1, 0, 9), "src1": _bits(w1, 9, 9), "src2": _bits(w1, 18, 9), "neg": _bits(w1, 29, 3)}
  elif enc == 0x34:  # VOP3 / VOP3B
    w1 = dw(1)
    fmt, op, size = "vop3", _bits(w0, 16, 10), 8
    f = {"vdst": _bits(w0, 0, 8), "abs": _bits(w0, 8, 3), "opsel": _bits(w0, 11, 4), "clamp": _bits(w0, 15, 1),
         "sdst": _bits(w0, 8, 7), "src0": _bits(w1, 0, 9), "src1": _bits(w1, 9, 9), "src2": _bits(w1, 18, 9),
         "omod": _bits(w1, 27, 2), "neg": _bits(w1, 29, 3)}
  elif enc == 0x36:  # DS: the opcode sits one bit lower than on gfx11
    w1 = dw(1)
    fmt, op, size = "ds", _bits(w0, 17, 8), 8
    f = {"offset0": _bits(w0, 0, 8), "offset1": _bits(w0, 8, 8), "gds": _bits(w0, 16, 1), "acc": _bits(w0, 25, 1),
         "addr": _bits(w1, 0, 8), "data0": _bits(w1, 8, 8), "data1": _bits(w1, 16, 8), "vdst": _bits(w1, 24, 8)}
  elif enc == 0x30:  # SMEM: IMM selects an immediate offset, SOE adds the SGPR in SOFFSET
    w1 = dw(1)
    fmt, op, size = "smem", _bits(w0, 18, 8), 8
    imm, soe = _bits(w0, 17, 1), _bits(w0, 14, 1)
    f = {"sbase": _bits(w0, 0, 6) << 1, "sdata": _bits(w0, 6, 7), "glc": _bits(w0, 16, 1), "dlc": 0, "imm": imm & soe,
         "offset": _sext(_bits(w1, 0, 21), 21) if imm else 0,
         "soffset": _sgpr_gfx9(_bits(w1, 25, 7)) if soe else (124 if imm else _sgpr_gfx9(_bits(w1, 0, 7)))}
  elif enc == 0x37:  # FLAT / SCRATCH / GLOBAL
    w1 = dw(1)
    seg = _bits(w0, 14, 2)
    if seg == 3: raise DecodeError("reserved flat segment")
    fmt, op, size = ("flat", "scratch", "global")[seg], _bits(w0, 18, 7), 8
    saddr = _bits(w1, 16, 7)
    f = {"offset": _sext(_bits(w0, 0, 13), 13) if seg else _bits(w0, 0, 12), "dlc": 0, "glc": _bits(w0, 16, 1),
         "slc": _bits(w0, 17, 1), "sc1": _bits(w0, 25, 1), "addr": _bits(w1, 0, 8), "data": _bits(w1, 8, 8),
         "saddr": 124 if saddr == OFF_GFX9 or seg == 0 else _sgpr_gfx9(saddr), "vdst": _bits(w1, 24, 8),
         "sve": _bits(w0, 13, 1) if seg == 1 else 0, "lds": _bits(w0, 13, 1) if seg != 1 else 0, "acc": _bits(w1, 23, 1)}
  elif enc == 0x38:  # MUBUF
    w1 = dw(1)
    fmt, op, size = "mubuf", _bits(w0, 18, 7), 8
    f = {"offset": _bits(w0, 0, 12), "offen": _bits(w0, 12, 1), "idxen": _bits(w0, 13, 1), "glc": _bits(w0, 14, 1),
         "sc1": _bits(w0, 15, 1), "lds": _bits(w0, 16, 1), "slc": _bits(w0, 17, 1), "addr": _bits(w1, 0, 8),
         "data": _bits(w1, 8, 8), "srsrc": _bits(w1, 16, 5) << 2, "acc": _bits(w1, 23, 1), "soffset": _sgpr_gfx9(_bits(w1, 24, 8))}
  else:
    raise DecodeError(f"unknown encoding {w0:#010x}")
  ent = tabs.get(fmt, {}).get(op)
  if ent is None: raise DecodeError(f"unknown {fmt} opcode {op}")
  name, ops = ent
  for k in ("src0", "src1", "src2"):   # 9-bit operands below 128 name scalar registers
    if k in f and f[k] < 128: f[k] = _sgpr_gfx9(f[k])
  if fmt in ("sop1", "sop2", "sopk"): f["sdst"] = _sgpr_gfx9(f["sdst"])
  if fmt == "smem": f["sdata"] = _sgpr_gfx9(f["sdata"])
  if fmt == "vop3":
    f["sdst"] = _sgpr_gfx9(f["sdst"])
    if any(fl == "vdst" and rf == "s" for fl, _, rf in ops): f["vdst"] = _sgpr_gfx9(f["vdst"])
  _mark_agprs(name, fmt, f, w0)
  inst = Inst(pc, size, fmt, op, name, f, ops=ops, vop3=fmt == "vop3" and op < 448)   # VOPC/VOP2/VOP1 in VOP3 form
  if fmt in ("vop3", "vop3p") and any(f[s] == 255 for s in ("src0", "src1", "src2")):
    raise DecodeError(f"{name}: a literal constant in a VOP3 encoding (GFX9 has none)")
  if fmt in ("vop1", "vop2", "vopc") and f["src0"] in (249, 250):   # SDWA / DPP: a second word with the real src0
    extra = dw(1)
    if f["src0"] == 250: inst.dpp = extra
    else:
      inst.sdwa = extra
      sels = {"vop1": (8, 16), "vop2": (8, 16, 24), "vopc": (16, 24)}[fmt]   # VOPC keeps SDST where dst_sel/unused are
      if any((extra >> b & 7) == 7 for b in sels) or (fmt != "vopc" and extra >> 11 & 3 == 3):
        raise DecodeError("reserved SDWA selector")
    f["src0"] = (extra & 0xff) + (256 if f["src0"] == 250 or not extra >> 23 & 1 else 0)   # SDWA S0 selects an SGPR
    if f["src0"] < 128: f["src0"] = _sgpr_gfx9(f["src0"])
    if inst.sdwa is not None and fmt != "vop1" and extra >> 31 & 1: f["src1"] = _sgpr_gfx9(f["src1"] - 256)   # S1
    if inst.sdwa is not None and fmt == "vopc":   # SD: the lane mask goes to SDST, else to VCC
      f["sdst"] = _sgpr_gfx9(_bits(extra, 8, 7)) if extra >> 15 & 1 else 106
    inst.size = size = size + 4
  if any(f.get(s) == 255 for s in srcs) or name in ("v_madmk_f32", "v_madak_f32", "v_fmamk_f32", "v_fmaak_f32", "s_setreg_imm32_b32"):
    inst.lit = dw(size // 4)
    inst.size = size + 4
  return inst

def decode_sweep(arch: str, code: bytes, start: int = 0, end: int | None = None) -> tuple[list[Inst], tuple[int, str] | None]:
  """Linear sweep from start to end: the instructions, and where and why it stopped before end (None: it got there)."""
  out, pc, end = [], start, len(code) if end is None else end
  while pc < end:
    try: i = decode_at(arch, code, pc)
    except DecodeError as e: return out, (pc, str(e))
    out.append(i)
    pc += i.size
  return out, None

def decode_all(arch: str, code: bytes, start: int = 0, end: int | None = None) -> list[Inst]:
  """Linear sweep from start to end (stops at the first undecodable word, as the padding after s_endpgm may be)."""
  return decode_sweep(arch, code, start, end)[0]
