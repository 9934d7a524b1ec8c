"""Instruction -> closure over State. Each closure runs one instruction for all selected waves at once.

Control flow instructions return the next PC per wave (an array for the selected waves, or an int); everything else
returns None and falls through. Blocks of closures are built once per code object and PC (see program.py)."""
from __future__ import annotations
from typing import Callable

import numpy as np

from rawgpu.drivers.emu.shader.decode import Inst
from rawgpu.drivers.emu.shader.state import State, EmuFault
from rawgpu.drivers.emu.shader.valu import VOPS, CMP, TYPES, WIDTH, BITS
from rawgpu.drivers.emu.shader import dot, fpmath, fpmode, gfx9, mem_ops, mfma, salu, sdwa, wmma

f16, f32, f64 = np.float16, np.float32, np.float64
u16, u32, u64, i32, i64 = np.uint16, np.uint32, np.uint64, np.int32, np.int64
Fn = Callable[[State], object]

INLINE_F32 = {240: 0x3f000000, 241: 0xbf000000, 242: 0x3f800000, 243: 0xbf800000, 244: 0x40000000, 245: 0xc0000000,
              246: 0x40800000, 247: 0xc0800000, 248: 0x3e22f983}
INLINE_F16 = {240: 0x3800, 241: 0xb800, 242: 0x3c00, 243: 0xbc00, 244: 0x4000, 245: 0xc000, 246: 0x4400, 247: 0xc400,
              248: 0x3118}
INLINE_F64 = {240: 0x3fe0000000000000, 241: 0xbfe0000000000000, 242: 0x3ff0000000000000, 243: 0xbff0000000000000,
              244: 0x4000000000000000, 245: 0xc000000000000000, 246: 0x4010000000000000, 247: 0xc010000000000000,
              248: 0x3fc45f306dc9c882}

def const_value(n: int, lit: int | None, width: int, ftype: bool) -> int | None:
  """The bits an inline constant or literal source supplies to an operand of this width (None: not a constant)."""
  if 128 <= n <= 192: v = n - 128
  elif 193 <= n <= 208: v = 192 - n
  elif n in INLINE_F32: v = {16: INLINE_F16, 32: INLINE_F32, 64: INLINE_F64}[width][n]
  elif n == 255:
    lit = lit or 0
    if width == 64: return (lit << 32) if ftype else lit  # f64 literals are the high half; integer ones zero-extend
    return lit & ((1 << width) - 1)
  elif n == 124: v = 0
  else: return None
  return v & ((1 << width) - 1)

def raw_src(i: Inst, n: int, width: int, vec: bool, ftype: bool = False, hi: bool = False) -> Fn:
  """Reader of a source operand's raw bits: uint16/32/64, shaped (waves, lanes|1) for vector ops, (waves,) for scalar."""
  c = const_value(n, i.lit, width, ftype)   # a 16-bit operand takes the literal's low half (LLVM prints it so)
  if width == 16 and n in INLINE_F32: c = INLINE_F16[n] if ftype else INLINE_F32[n] & 0xffff
  if c is not None:
    k = BITS[width](c)
    return lambda st: k
  if n >= 256:
    r = n - 256
    if width == 64: return lambda st: st.v[r].astype(u64) | (st.v[r + 1].astype(u64) << u64(32))
    if width == 16: return (lambda st: (st.v[r] >> u32(16)).astype(u16)) if hi else (lambda st: st.v[r].astype(u16))
    return lambda st: st.v[r]
  if n == 253: get = lambda st: st.scc.astype(u32)
  elif n == 251: get = lambda st: ((st.s[106] == 0) & ((st.s[107] == 0) | (st.L == 32))).astype(u32)
  elif n == 252: get = lambda st: ((st.s[126] == 0) & ((st.s[127] == 0) | (st.L == 32))).astype(u32)
  elif n in (235, 236, 237, 238):  # src_{shared,private}_{base,limit}: the aperture SH_MEM_BASES places (st.apertures)
    which, limit = int(n in (237, 238)), u64(0xffffffff if n in (236, 238) else 0)
    get64 = lambda st: np.full(st.W, (u64(st.apertures[which]) << u64(32)) | limit, u64)
    if width == 64: return (lambda st: get64(st)[:, None]) if vec else get64
    # as a 32-bit operand a base reads 0 (LLVM's getSegmentAperture: "it returns a wrong value"; it reads 64 bits)
    get = lambda st: np.full(st.W, u32(limit), u32)
  elif n < 128:
    r = n
    if width == 64: get = lambda st: st.s64(r)
    elif width == 16: get = (lambda st: (st.s[r] >> u32(16)).astype(u16)) if hi else (lambda st: st.s[r].astype(u16))
    else: get = lambda st: st.s[r]
  else:
    raise EmuFault(f"illegal operand {n} at {i.addr:#x}", i.addr)
  if vec: return lambda st: get(st)[:, None]
  return get

def typed_src(i: Inst, n: int, ty: str, k: int, vec: bool = True, mods: bool = True, hi: bool = False) -> Fn:
  """Source with the type's view and the VOP3/VOPD input modifiers (abs, neg) applied."""
  w = WIDTH[ty]
  T = TYPES[ty]
  raw = raw_src(i, n, w, vec, ty[0] == "f", hi)
  sd = any(o[0] == "sdst" for o in i.ops)
  ab = mods and i.fmt == "vop3" and not sd and (i.f.get("abs", 0) >> k) & 1
  ng = mods and i.fmt in ("vop3", "vop3p") and (i.f.get("neg", 0) >> k) & 1
  if i.dpp is not None and k == 0:
    ab = ab or (i.dpp >> 21) & 1
    ng = ng or (i.dpp >> 20) & 1
  if i.dpp is not None and k == 1:
    ab = ab or (i.dpp >> 23) & 1
    ng = ng or (i.dpp >> 22) & 1
  if ty[0] != "f":
    return (lambda st: raw(st).view(T)) if w != 32 or T != u32 else raw
  if ab and ng: return lambda st: -np.abs(raw(st).view(T))
  if ab: return lambda st: np.abs(raw(st).view(T))
  if ng: return lambda st: -(raw(st).view(T))
  return lambda st: raw(st).view(T)

def _dst_bits(val, ty: str):
  T = TYPES[ty]
  a = np.asarray(val)
  if a.dtype != T: a = a.astype(T)
  return a.view(BITS[WIDTH[ty]]) if WIDTH[ty] > 1 else a

def vdst(i: Inst, r: int, ty: str, hi: bool = False, zero_hi: bool = False) -> Callable[[State, object], None]:
  """Writer of a VALU result of type ty into VGPR r (16-bit results go to the low or high half; zero_hi: the low
  half, with the high half cleared, as most GFX9 16-bit operations do)."""
  w = WIDTH[ty]
  clamp = i.fmt == "vop3" and i.f.get("clamp") and ty[0] == "f"
  omod = i.f.get("omod", 0) if i.fmt == "vop3" and ty[0] == "f" else 0
  def post(val):
    if omod: val = val * TYPES[ty]([1, 2, 4, 0.5][omod])
    if clamp: val = np.where(np.isnan(val), TYPES[ty](0), np.clip(val, 0, 1))
    return val
  if w == 64:
    def wr(st, val):
      b = _dst_bits(post(val), ty)
      st.wv(r, (b & u64(0xffffffff)).astype(u32)); st.wv(r + 1, (b >> u64(32)).astype(u32))
    return wr
  if w == 16 and zero_hi: return lambda st, val: st.wv(r, _dst_bits(post(val), ty).astype(u32))
  if w == 16:
    def wr(st, val):
      b = _dst_bits(post(val), ty).astype(u32)
      old = st.v[r]
      st.wv(r, (old & u32(0xffff)) | (b << u32(16)) if hi else (old & u32(0xffff0000)) | b)
    return wr
  return lambda st, val: st.wv(r, _dst_bits(post(val), ty))

def _split(name: str) -> str:
  for suf in ("_e32", "_e64", "_dpp", "_sdwa"):
    if name.endswith(suf): name = name[: -len(suf)]
  return name

# ---- DPP ------------------------------------------------------------------------------------------------------------
def _dpp_index(ctrl: int, L: int) -> tuple[np.ndarray, np.ndarray]:
  """(source lane, valid) for every lane under a DPP16 control."""
  lane = np.arange(L)
  row, rl = lane // 16, lane % 16
  valid = np.ones(L, bool)
  if ctrl <= 0xff: src = (lane & ~3) | ((ctrl >> (2 * (lane & 3))) & 3)
  elif 0x101 <= ctrl <= 0x10f: s = ctrl - 0x100; src = lane + s; valid = rl + s < 16
  elif 0x111 <= ctrl <= 0x11f: s = ctrl - 0x110; src = lane - s; valid = rl - s >= 0
  elif 0x121 <= ctrl <= 0x12f: s = ctrl - 0x120; src = row * 16 + (rl - s) % 16
  elif ctrl in (0x130, 0x134, 0x138, 0x13c):   # GFX9 whole-wave shifts (shl/rol read lane + 1) and rotates
    step = 1 if ctrl in (0x130, 0x134) else -1
    src = lane + step
    valid = (src >= 0) & (src < L) if ctrl in (0x130, 0x138) else valid
  elif ctrl == 0x142: src = row * 16 - 1; valid = row >= 1                 # GFX9 row_bcast:15: the previous row's lane 15
  elif ctrl == 0x143: src = np.full(L, 31); valid = row >= 2               # GFX9 row_bcast:31: lane 31 to rows 2 and 3
  elif ctrl == 0x140: src = row * 16 + 15 - rl
  elif ctrl == 0x141: src = (lane & ~7) | (7 - (lane & 7))
  elif 0x150 <= ctrl <= 0x15f: src = row * 16 + (ctrl - 0x150)
  elif 0x160 <= ctrl <= 0x16f: src = row * 16 + (rl ^ (ctrl - 0x160))
  else: raise EmuFault(f"unsupported DPP control {ctrl:#x}")
  return np.where(valid, src, 0) % L, valid

def dpp_wrap(i: Inst, fn: Fn, L: int) -> tuple[Fn, np.ndarray | None]:
  """src0 read through the DPP lane permutation; also the per-lane write enable it implies."""
  if i.dpp8 is not None:
    sel = np.array([(i.dpp8 >> (8 + 3 * k)) & 7 for k in range(8)])
    src = (np.arange(L) & ~7) | sel[np.arange(L) & 7]
    return (lambda st: np.broadcast_to(fn(st), (st.W, st.L))[:, src]), None
  ctrl, fi = (i.dpp >> 8) & 0x1ff, (i.dpp >> 18) & 1
  bank_mask, row_mask = (i.dpp >> 24) & 0xf, (i.dpp >> 28) & 0xf
  src, valid = _dpp_index(ctrl, L)
  lane = np.arange(L)
  enable = (((row_mask >> (lane // 16)) & 1) & ((bank_mask >> ((lane % 16) // 4)) & 1)).astype(bool)
  def rd(st):
    v = np.broadcast_to(fn(st), (st.W, st.L))[:, src]
    ok = valid[None, :] & (st.exec_lanes()[:, src] if not fi else True)
    return np.where(ok, v, v.dtype.type(0)), ok
  return rd, enable

# ---- VALU -----------------------------------------------------------------------------------------------------------
def compile_valu(i: Inst, L: int, fam: str) -> Fn:
  name = _split(i.name)
  f = i.f
  if i.fmt == "vopdx": return _vopd(i, L, fam)
  if i.sdwa is not None: return _sdwa(i, name, L)
  if name in CMP: return _vopc(i, name, L, fam)
  special = _SPECIAL_VALU.get(name)
  if special: return special(i, L, fam)
  if name.startswith("v_pk_") or name.startswith("v_fma_mix"): return _vop3p(i, name, L)
  if name not in VOPS: raise EmuFault(f"illegal instruction at {i.addr:#x}: {i.name} is not modelled", i.addr)
  dty, stys, fn = VOPS[name]
  fn = fpmode.modal(name, dty, stys, fn, TYPES)
  opsel = f.get("opsel", 0) if i.fmt == "vop3" else 0
  if opsel & 7 and name.startswith(("v_cvt_f32_fp8", "v_cvt_f32_bf8", "v_cvt_pk_f32_fp8", "v_cvt_pk_f32_bf8")):
    raise EmuFault(f"illegal instruction at {i.addr:#x}: {i.name} with op_sel (a byte or word select) is not modelled", i.addr)
  fields = ["src0", "src1", "src2"][: len(stys)]
  if name.startswith(("v_fmac_", "v_dot2acc_")):
    srcs = [typed_src(i, f["src0"], stys[0], 0, hi=bool(opsel & 1)), typed_src(i, f["src1"], stys[1], 1, hi=bool(opsel & 2)),
            typed_src(i, f["vdst"] + 256, stys[2], 2, mods=False)]
  elif name.startswith("v_fmamk_"):
    srcs = [typed_src(i, f["src0"], stys[0], 0), typed_src(i, 255, stys[1], 1), typed_src(i, f["src1"], stys[2], 2)]
  elif name.startswith("v_fmaak_"):
    srcs = [typed_src(i, f["src0"], stys[0], 0), typed_src(i, f["src1"], stys[1], 1), typed_src(i, 255, stys[2], 2)]
  else:
    srcs = [typed_src(i, f[fl], t, k, hi=bool(opsel >> k & 1) and WIDTH[t] == 16) for k, (fl, t) in enumerate(zip(fields, stys))]
  enable = None
  if i.dpp is not None or i.dpp8 is not None:
    rd, enable = dpp_wrap(i, srcs[0], L)
    if i.dpp8 is not None: srcs[0] = rd
    else:
      holder = {}
      def s0(st, rd=rd):
        v, ok = rd(st); holder["ok"] = ok
        return v
      srcs[0] = s0
  hi = bool(opsel & 8) and WIDTH[dty] == 16
  wr = vdst(i, f["vdst"], dty, hi=hi, zero_hi=fam == "gfx9" and not hi and name not in gfx9.KEEPS_HIGH_HALF)
  if i.dpp is not None:
    bc = (i.dpp >> 19) & 1
    def run_dpp(st):
      with np.errstate(all="ignore"): val = fn(st, *[s(st) for s in srcs])
      ok = holder["ok"] | bool(bc)
      em = st.emask & ok & enable[None, :]
      st._em, st._full = em, bool(em.all())
      wr(st, val)
      st._em = None
    return run_dpp
  if len(srcs) == 1:
    s0 = srcs[0]
    def run1(st):
      with np.errstate(all="ignore"): wr(st, fn(st, s0(st)))
    return run1
  if len(srcs) == 2:
    s0, s1 = srcs
    def run2(st):
      with np.errstate(all="ignore"): wr(st, fn(st, s0(st), s1(st)))
    return run2
  s0, s1, s2 = srcs
  def run3(st):
    with np.errstate(all="ignore"): wr(st, fn(st, s0(st), s1(st), s2(st)))
  return run3

def _vopc(i: Inst, name: str, L: int, fam: str, srcs: tuple[Fn, Fn] | None = None) -> Fn:
  """srcs: the two operand readers when the encoding selects parts of them (GFX9 SDWA, whose mask goes to SDST)."""
  ty, fn = CMP[name]
  cls = "class" in name
  if srcs: a, b = srcs
  else:
    a = typed_src(i, i.f["src0"], ty, 0)
    b = typed_src(i, i.f["src1"], "u32" if cls else ty, 1)
  if i.dpp is not None or i.dpp8 is not None:
    rd, _ = dpp_wrap(i, a, L)
    a = (lambda st, rd=rd: rd(st)[0]) if i.dpp is not None else rd
  mask = i.f["sdst"] if i.sdwa is not None else i.f["vdst"] if i.fmt == "vop3" else 106
  # a v_cmpx writes EXEC; on GFX9 also the lane mask it names (VCC for e32), before EXEC changes
  dsts = ((mask, 126) if fam == "gfx9" else (126,)) if name.startswith("v_cmpx") else (mask,)
  fl = fpmode.flush_cmp(TYPES[ty]) if ty[0] == "f" else (lambda st, x: x)
  fb = fl if not cls else (lambda st, x: x)
  if cls: fl = lambda st, x: x                           # v_cmp_class sees denormals as they are
  def run(st):
    with np.errstate(all="ignore"): r = np.broadcast_to(fn(fl(st, a(st)), fb(st, b(st))), (st.W, st.L))
    for d in dsts: st.wmask(d, r)
  return run

def _sdwa(i: Inst, name: str, L: int) -> Fn:
  """GFX9 SDWA: each source is the selected byte/word of its register (zero- or sign-extended, float neg/abs after),
  the result goes to the selected part of the destination (sdwa.place); VOPC writes its mask to SDST or VCC."""
  w, f = i.sdwa, i.f
  if i.fmt == "vopc":
    if name not in CMP: raise EmuFault(f"illegal instruction at {i.addr:#x}: {i.name} is not modelled in SDWA", i.addr)
    ty = CMP[name][0]
    stys = (ty, "u32" if "class" in name else ty)
  elif name in CARRY_OPS:   # VOP2 SDWA: the carry in and out is VCC
    dty, stys = "u32", ("u32", "u32")
    cin = "_ci_" in name
    def fn(st, x, y):
      d, carry = carry_math(name, x, y, st.unpack(106) if cin else None)
      st.wmask(106, np.broadcast_to(carry, (st.W, st.L)))
      return d
  else:
    if name not in VOPS or len(VOPS[name][1]) > 2 or name.startswith(("v_fmac", "v_mac")):
      raise EmuFault(f"illegal instruction at {i.addr:#x}: {i.name} is not modelled in SDWA", i.addr)
    dty, stys, fn = VOPS[name]
    fn = fpmode.modal(name, dty, stys, fn, TYPES)
  def source(k: int, ty: str) -> Fn:
    raw = raw_src(i, f[f"src{k}"], 32, True)
    sel, sext, neg, ab = sdwa.src_mods(w, k)
    T, width = TYPES[ty], WIDTH[ty]
    if width == 64: raise EmuFault(f"illegal instruction at {i.addr:#x}: a 64-bit operand in SDWA", i.addr)
    def rd(st):
      x = np.asarray(sdwa.select(raw(st), sel, sext), u32)
      x = x.astype(u16).view(T) if width == 16 else x.view(T)
      if ty[0] == "f":
        if ab: x = np.abs(x)
        if neg: x = -x
      return x
    return rd
  srcs = [source(k, t) for k, t in enumerate(stys)]
  if i.fmt == "vopc": return _vopc(i, name, L, "gfx9", tuple(srcs))
  d, dsel, unused = f["vdst"], w >> 8 & 7, w >> 11 & 3
  clamp, omod = bool(w >> 13 & 1) and dty[0] == "f", w >> 14 & 3 if dty[0] == "f" else 0
  if WIDTH[dty] == 64:   # a register pair (v_cvt_pk_f32_fp8): written whole
    if dsel != 6 or clamp or omod: raise EmuFault(f"illegal instruction at {i.addr:#x}: {i.name} with a 64-bit result selects no part", i.addr)
    wr = vdst(i, d, dty)
    def run64(st):
      with np.errstate(all="ignore"): wr(st, fn(st, *[s(st) for s in srcs]))
    return run64
  def run(st):
    with np.errstate(all="ignore"):
      val = fn(st, *[s(st) for s in srcs])
      if omod: val = val * TYPES[dty]([1, 2, 4, 0.5][omod])
      if clamp: val = np.where(np.isnan(val), TYPES[dty](0), np.clip(val, 0, 1))
    bits = np.broadcast_to(_dst_bits(val, dty), (st.W, st.L)).astype(u32)
    st.wv(d, sdwa.place(bits, st.v[d], dsel, unused))
  return run

def _mask_src(i: Inst, n: int) -> Callable[[State], np.ndarray]:
  """A lane-mask operand (VCC or an SGPR pair) as (waves, lanes) bools."""
  if n < 128: return lambda st: st.unpack(n)
  c = const_value(n, i.lit, 64, False)
  if c is None: raise EmuFault(f"illegal mask operand at {i.addr:#x}", i.addr)
  return lambda st: ((np.uint64(c) >> np.arange(st.L, dtype=u64)) & u64(1)).astype(bool)[None, :]

def _cndmask(i: Inst, L: int, fam: str) -> Fn:
  f = i.f
  vop3 = i.fmt == "vop3"
  sel = _mask_src(i, f["src2"] if vop3 else 106)
  ty = "f32" if vop3 and (f.get("abs") or f.get("neg")) else "u32"
  a, b = typed_src(i, f["src0"], ty, 0), typed_src(i, f["src1"], ty, 1)
  if i.dpp is not None or i.dpp8 is not None:
    rd, _ = dpp_wrap(i, a, L)
    a = (lambda st, rd=rd: rd(st)[0]) if i.dpp is not None else rd
  wr = vdst(i, f["vdst"], ty)
  return lambda st: wr(st, np.where(sel(st), b(st), a(st)))

def _carry_op(i: Inst, L: int, fam: str) -> Fn:
  name = _split(i.name)
  f = i.f
  vop3 = i.fmt == "vop3"
  a, b = raw_src(i, f["src0"], 32, True), raw_src(i, f["src1"], 32, True)
  if i.dpp is not None or i.dpp8 is not None:
    rd, _ = dpp_wrap(i, a, L)
    a = (lambda st, rd=rd: rd(st)[0]) if i.dpp is not None else rd
  cin = None
  if "_ci_" in name: cin = _mask_src(i, f["src2"] if vop3 else 106)
  cout = f["sdst"] if vop3 else 106
  r = f["vdst"]
  def run(st):
    d, carry = carry_math(name, a(st), b(st), cin(st) if cin else None)
    st.wmask(cout, np.broadcast_to(carry, (st.W, st.L)))
    st.wv(r, d)
  return run

CARRY_OPS = ("v_add_co_u32", "v_sub_co_u32", "v_subrev_co_u32", "v_add_co_ci_u32", "v_sub_co_ci_u32", "v_subrev_co_ci_u32")

def carry_math(name: str, x, y, c):
  """(result, carry or borrow out) of a 32-bit add/sub with an optional carry/borrow in c (lane bools)."""
  if "subrev" in name: x, y = y, x
  if "sub" in name:
    d, carry = x - y, y > x
    if c is not None: carry, d = carry | (d < c), d - c
    return d, carry
  d = x + y
  carry = d < x
  if c is not None:
    d2 = d + c
    carry, d = carry | (d2 < d), d2
  return d, carry

def _mad64(i: Inst, L: int, fam: str) -> Fn:
  f = i.f
  signed = "i64" in i.name
  a, b, c = raw_src(i, f["src0"], 32, True), raw_src(i, f["src1"], 32, True), raw_src(i, f["src2"], 64, True)
  r = f["vdst"]
  def run(st):
    x, y, z = np.asarray(a(st)), np.asarray(b(st)), np.asarray(c(st), u64)
    if signed:
      p = x.view(i32).astype(i64) * y.view(i32).astype(i64)
      res = p.view(u64) + z
      # overflow of the signed 64-bit sum
      zs, rs = z.view(i64), res.view(i64)
      carry = ((p >= 0) == (zs >= 0)) & ((rs >= 0) != (p >= 0))
    else:
      p = x.astype(u64) * y.astype(u64)
      res = p + z
      carry = res < p
    st.wmask(f["sdst"], np.broadcast_to(carry, (st.W, st.L)))
    st.wv(r, (res & u64(0xffffffff)).astype(u32)); st.wv(r + 1, (res >> u64(32)).astype(u32))
  return run

def _div_scale(i: Inst, L: int, fam: str) -> Fn:
  t = "f64" if i.name.endswith("f64") else "f32"
  f = i.f
  s = [typed_src(i, f[k], t, n) for n, k in enumerate(("src0", "src1", "src2"))]
  wr = vdst(i, f["vdst"], t)
  fin, fout = fpmode.flush_io(TYPES[t])
  def run(st):
    d, vcc = fpmath.div_scale(*[fin(st, x(st)) for x in s], TYPES[t])
    st.wmask(f["sdst"], np.broadcast_to(vcc, (st.W, st.L)))
    wr(st, d)
  return run

def _div_fmas(i: Inst, L: int, fam: str) -> Fn:
  t = "f64" if i.name.endswith("f64") else "f32"
  f = i.f
  s = [typed_src(i, f[k], t, n) for n, k in enumerate(("src0", "src1", "src2"))]
  wr = vdst(i, f["vdst"], t)
  fin, fout = fpmode.flush_io(TYPES[t])
  return lambda st: wr(st, fout(st, fpmath.div_fmas(*[fin(st, x(st)) for x in s], st.unpack(106), TYPES[t])))

def _div_fixup(i: Inst, L: int, fam: str) -> Fn:
  t = {"f64": "f64", "f32": "f32", "f16": "f16"}[i.name[-3:]]
  f = i.f
  s = [typed_src(i, f[k], t, n) for n, k in enumerate(("src0", "src1", "src2"))]
  wr = vdst(i, f["vdst"], t)
  if t == "f16": return lambda st: wr(st, fpmath.div_fixup(s[0](st).astype(f32), s[1](st).astype(f32), s[2](st).astype(f32), f32).astype(f16))
  fin, fout = fpmode.flush_io(TYPES[t])
  return lambda st: wr(st, fout(st, fpmath.div_fixup(*[fin(st, x(st)) for x in s], TYPES[t])))

def _readlane(i: Inst, L: int, fam: str) -> Fn:
  f = i.f
  src = f["src0"] - 256
  lane = raw_src(i, f["src1"], 32, False)
  d = f["vdst"]
  def run(st):
    ln = (np.broadcast_to(lane(st), (st.W,)) % u32(st.L)).astype(np.int64)
    st.ws(d, st.v[src][np.arange(st.W), ln])
  return run

def _readfirstlane(i: Inst, L: int, fam: str) -> Fn:
  f = i.f
  src = raw_src(i, f["src0"], 32, True)
  d = f["vdst"]
  def run(st):
    ex = st.exec_lanes()
    first = np.where(ex.any(1), ex.argmax(1), 0)
    v = np.broadcast_to(src(st), (st.W, st.L))
    st.ws(d, v[np.arange(st.W), first])
  return run

def _writelane(i: Inst, L: int, fam: str) -> Fn:
  f = i.f
  val, lane = raw_src(i, f["src0"], 32, False), raw_src(i, f["src1"], 32, False)
  d = f["vdst"]
  def run(st):
    w = np.nonzero(st.selected())[0]
    ln = (np.broadcast_to(lane(st), (st.W,)) % u32(st.L)).astype(np.int64)
    st.v[d][w, ln[w]] = np.broadcast_to(val(st), (st.W,))[w]
  return run

def _mbcnt(i: Inst, L: int, fam: str) -> Fn:
  f = i.f
  hi = "hi" in i.name
  a, b = raw_src(i, f["src0"], 32, True), raw_src(i, f["src1"], 32, True)
  r = f["vdst"]
  lane = np.arange(L)
  # ThreadMask = (1 << lane) - 1; mbcnt_lo counts its low word, mbcnt_hi its high word
  if hi: m = np.where(lane >= 32, (np.uint64(1) << np.clip(lane - 32, 0, 63).astype(u64)) - u64(1), u64(0)).astype(u64)
  else: m = np.where(lane >= 32, u64(0xffffffff), (np.uint64(1) << np.clip(lane, 0, 63).astype(u64)) - u64(1)).astype(u64)
  from rawgpu.drivers.emu.shader.valu import _popc32
  mask = (m & u64(0xffffffff)).astype(u32)
  return lambda st: st.wv(r, _popc32(a(st) & mask) + b(st))

def _permlane(i: Inst, L: int, fam: str) -> Fn:
  f = i.f
  x = "x16" in i.name
  src = f["src0"] - 256
  s1, s2 = raw_src(i, f["src1"], 32, False), raw_src(i, f["src2"], 32, False)
  r = f["vdst"]
  fi, bc = (f.get("opsel", 0) & 1), (f.get("opsel", 0) >> 1) & 1
  lane = np.arange(L)
  def run(st):
    sel = (np.broadcast_to(s1(st), (st.W,)).astype(u64) | (np.broadcast_to(s2(st), (st.W,)).astype(u64) << u64(32)))
    nib = ((sel[:, None] >> (u64(4) * (lane % 16).astype(u64))[None, :]) & u64(0xf)).astype(np.int64)
    base = (lane // 16) * 16
    if x: base = base ^ 16
    srcl = (base[None, :] + nib) % st.L
    v = np.take_along_axis(st.v[src], srcl, 1)
    if not fi:
      ok = np.take_along_axis(st.exec_lanes(), srcl, 1)
      if bc: v = np.where(ok, v, u32(0)); st.wv(r, v)
      else:
        em = st.emask & ok
        st._em, st._full = em, bool(em.all()); st.wv(r, v); st._em = None
      return
    st.wv(r, v)
  return run

def _permlane64(i: Inst, L: int, fam: str) -> Fn:
  """Lane i takes lane i ^ 32 (wave64: the two halves trade places)."""
  src, r = i.f["src0"] - 256, i.f["vdst"]
  perm = np.arange(L) ^ 32 if L == 64 else np.arange(L)
  return lambda st: st.wv(r, st.v[src][:, perm])

def _swap(i: Inst, L: int, fam: str) -> Fn:
  a, b = i.f["vdst"], i.f["src0"] - 256
  def run(st):
    x, y = st.v[a].copy(), st.v[b].copy()
    st.wv(a, y); st.wv(b, x)
  return run

GFX9_INT_DOTS = {"v_dot4_i32_i8": (8, True), "v_dot8_i32_i4": (4, True), "v_dot2_i32_i16": (16, True), "v_dot2_u32_u16": (16, False),
                 "v_dot4c_i32_i8": (8, True), "v_dot8c_i32_i4": (4, True), "v_dot2c_i32_i16": (16, True)}

def _dot(i: Inst, L: int, fam: str) -> Fn:
  """v_dot*: see dot.py. VOP3P carries neg_lo/neg_hi (signedness for the integer forms); the VOP3 f16/bf16-result
  forms carry op_sel (the halves of src2 and of the destination) and neg."""
  name, f = _split(i.name), i.f
  # (CDNA3's VOP2 "c" forms have no src2: they accumulate into vdst)
  a, b, c = (raw_src(i, f.get(k, f["vdst"] + 256), 32, True, name[7] == "f") for k in ("src0", "src1", "src2"))
  r, clamp = f["vdst"], bool(f.get("clamp", 0))
  nlo, nhi = f.get("neg", 0), f.get("neg_hi", 0)
  if name in ("v_dot4_i32_iu8", "v_dot4_u32_u8", "v_dot8_i32_iu4", "v_dot8_u32_u4"):
    bits, signed = (8 if "dot4" in name else 4), name.endswith(("iu8", "iu4"))
    sa, sb = signed and bool(nlo & 1), signed and bool(nlo & 2)
    return lambda st: st.wv(r, dot.int_dot(a(st), b(st), c(st), bits, sa, sb, clamp))
  if name in GFX9_INT_DOTS:   # CDNA3: the signedness is the instruction's; the "c" forms accumulate into vdst
    bits, signed = GFX9_INT_DOTS[name]
    return lambda st: st.wv(r, dot.int_dot(a(st), b(st), c(st), bits, signed, signed, clamp))
  kind = "bf16" if "bf16" in name[9:] else "f16"
  if name.startswith("v_dot2_f32_"):
    def run(st):
      x, y = dot.halves(a(st), kind, nlo & 1, nhi & 1), dot.halves(b(st), kind, nlo & 2, nhi & 2)
      acc = np.asarray(c(st), u32).view(f32).astype(f64)
      if nhi & 4: acc = np.abs(acc)
      if nlo & 4: acc = -acc
      with np.errstate(all="ignore"): s = dot.float_dot(zip(x, y), acc).astype(f32)
      if clamp: s = np.where(np.isnan(s), f32(0), np.clip(s, f32(0), f32(1)))
      st.wv(r, s.view(u32))
    return run
  opsel = f.get("opsel", 0)                                     # VOP3: v_dot2_f16_f16, v_dot2_bf16_bf16
  def run(st):
    x, y = dot.halves(a(st), kind, nlo & 1, nlo & 1), dot.halves(b(st), kind, nlo & 2, nlo & 2)
    hz = np.asarray(c(st), u32)
    acc = dot.halves(hz, kind, nlo & 4, nlo & 4, opsel >> 2 & 1)[0]
    with np.errstate(all="ignore"): s = dot.float_dot(zip(x, y), acc)
    bits = dot.to_bf16(s) if kind == "bf16" else s.astype(f16).view(u16).astype(u32)
    old = st.v[r]
    st.wv(r, (old & u32(0xffff)) | (bits << u32(16)) if opsel & 8 else (old & u32(0xffff0000)) | bits)
  return run

def _wmma(i: Inst, L: int, fam: str) -> Fn:
  """v_wmma_*_16x16x16_*: see wmma.py for the lane layouts."""
  name, f = _split(i.name), i.f
  if L != 32: raise EmuFault(f"illegal instruction at {i.addr:#x}: {i.name} in wave64 is not modelled", i.addr)
  out, kind = name.split("_")[2], name.split("_")[-1]
  gfx12, integer, wide = fam == "gfx12", out == "i32", out in ("f32", "i32")
  nab = (16 if not gfx12 else 8) * wmma.ELEM_BITS[kind] // 32          # registers per A/B operand
  sa, sb = bool(f.get("neg", 0) & 1) and integer, bool(f.get("neg", 0) & 2) and integer
  clamp, hi = bool(f.get("clamp", 0)), bool(f.get("opsel", 0) & 4) and not gfx12
  reg, half, row, col = wmma.acc_index(gfx12, wide)
  nacc = 8 if wide or not gfx12 else 4
  a0, b0, d0, cn = f["src0"] - 256, f["src1"] - 256, f["vdst"], f["src2"]
  cconst = const_value(cn, i.lit, 32, not integer) if cn < 256 else None
  if cn < 256 and cconst is None: raise EmuFault(f"illegal operand {cn} at {i.addr:#x}", i.addr)
  lane = np.broadcast_to(np.arange(32), reg.shape)
  def run(st):
    regs = lambda base, n: np.stack([st.v[base + k] for k in range(n)], -1)
    A = wmma.operand(regs(a0, nab), kind, sa, gfx12, False)
    B = wmma.operand(regs(b0, nab), kind, sb, gfx12, True)
    cw = regs(cn - 256, nacc) if cconst is None else np.full((st.W, 32, nacc), u32(cconst), u32)
    slot = cw[:, lane, reg]                                             # (W, 8, 32) words per C/D place
    if wide: cval = slot.view(np.int32).astype(i64) if integer else slot.view(f32).astype(f64)
    else: cval = wmma.half_value(slot >> u32(16 * (half + hi)), kind)
    C = np.zeros((st.W, 16, 16), i64 if integer else f64)
    C[:, row, col] = cval
    D = wmma.matmul(A, B, C, integer)[:, row, col]                      # (W, 8, 32)
    if integer:
      D = np.clip(D, -2**31, 2**31 - 1) if clamp else D
      bits = (D & 0xffffffff).astype(u32)
    elif wide: bits = D.astype(f32).view(u32)
    else: bits = wmma.to_half(D, kind)
    new = [st.v[d0 + k].copy() for k in range(nacc)]
    for j in range(8):
      r = int(reg[j, 0])
      if wide: new[r] = bits[:, j]
      else:
        sh = u32(16 * (int(half[j, 0]) + hi))
        new[r] = (new[r] & ~(u32(0xffff) << sh)) | (bits[:, j] << sh)
    for k in range(nacc): st.wv(d0 + k, new[k])
  return run

def _mfma(i: Inst, L: int, fam: str) -> Fn:
  """CDNA3 v_mfma_*: see mfma.py for the layouts. A and B come from VGPRs or AGPRs, C from them or a constant."""
  name, f = _split(i.name), i.f
  if any(f.get(k) for k in ("cbsz", "abid", "blgp")):
    raise EmuFault(f"illegal instruction at {i.addr:#x}: {i.name} with cbsz/abid/blgp is not modelled", i.addr)
  if f["src0"] < 256 or f["src1"] < 256: raise EmuFault(f"illegal operand at {i.addr:#x}: MFMA A and B are vector registers", i.addr)
  nab, nc = mfma.operand_registers(name)
  a0, b0, c0, d0 = f["src0"] - 256, f["src1"] - 256, f["src2"] - 256, f["vdst"]
  cconst = const_value(f["src2"], i.lit, 32, "i32" not in name) if f["src2"] < 256 else None
  if f["src2"] < 256 and (cconst is None or "f64" in name and cconst):   # a 64-bit C constant other than 0: not modelled
    raise EmuFault(f"illegal operand {f['src2']} at {i.addr:#x}", i.addr)
  def run(st):
    regs = lambda base, n: np.stack([st.v[base + k] for k in range(n)], -1)
    cw = regs(c0, nc) if cconst is None else np.full((st.W, st.L, nc), u32(cconst), u32)
    d = mfma.mfma(name, regs(a0, nab), regs(b0, nab), cw)
    for k in range(nc): st.wv(d0 + k, d[:, :, k])
  return run

def move_indexed(i: Inst, src_index, dst_index) -> Fn:
  """A 32-bit move whose VGPR source and/or destination register is the named one plus a per-wave index
  (src_index/dst_index: st -> int64 per wave, or None): RDNA's v_movrel*, GFX9's VGPR indexing mode."""
  s0, d = i.f["src0"], i.f["vdst"]
  const = None if s0 >= 256 and src_index else raw_src(i, s0, 32, True)
  def run(st):
    waves = np.nonzero(st.selected())[0]   # the others' M0 may hold anything: they are not running this
    src = s0 - 256 + src_index(st)[waves] if const is None else None
    dst = d + dst_index(st)[waves] if dst_index else np.full(len(waves), d)
    if (dst >= st.nvgpr).any() or (src is not None and (src >= st.nvgpr).any()):
      raise EmuFault(f"illegal instruction at {i.addr:#x}: an indexed VGPR beyond the {st.nvgpr} the kernel was given", i.addr)
    val = st.v[src, waves] if const is None else np.broadcast_to(const(st), (st.W, st.L))[waves]
    st.v[dst, waves] = np.where(st.emask[waves], val, st.v[dst, waves])
  return run

def _movrel(i: Inst, L: int, fam: str) -> Fn:
  """v_movrels (source VGPR + M0), v_movreld (destination + M0), v_movrelsd (both), v_movrelsd_2 (source + M0[9:0],
  destination + M0[25:16]); M0 is SGPR 125."""
  m0 = lambda st: st.s[125].astype(np.int64)
  name = _split(i.name)
  if name == "v_movrelsd_2_b32": return move_indexed(i, lambda st: m0(st) & 0x3ff, lambda st: m0(st) >> 16 & 0x3ff)
  return move_indexed(i, m0 if name in ("v_movrels_b32", "v_movrelsd_b32") else None,
                      m0 if name in ("v_movreld_b32", "v_movrelsd_b32") else None)

def _nop(i: Inst, L: int, fam: str) -> Fn:
  return lambda st: None

def wave_result_to_sgpr(st: State, d: int, val, dty: str) -> None:
  """One value per wave (an operation on scalar operands, shaped (waves, 1) or a constant) into SGPR d; a 16-bit
  value is zero-extended."""
  st.ws(d, _dst_bits(np.broadcast_to(val, (st.W, 1))[:, 0], dty).astype(u32))

def _scalar_trans(i: Inst, L: int, fam: str) -> Fn:
  """v_s_{exp,log,rcp,rsq,sqrt}_{f32,f16} (gfx12): the VALU transcendental of a scalar operand into the SGPR vdst
  names, one value per wave whatever EXEC holds (as SALU float writes its results)."""
  name = "v_" + i.name[len("v_s_"):]
  dty, stys, fn = VOPS[name]
  fn = fpmode.modal(name, dty, stys, fn, TYPES)
  src, d = typed_src(i, i.f["src0"], stys[0], 0), i.f["vdst"]
  def run(st):
    with np.errstate(all="ignore"): wave_result_to_sgpr(st, d, fn(st, src(st)), dty)
  return run

_SPECIAL_VALU = {
  "v_cndmask_b32": _cndmask, **{n: _carry_op for n in CARRY_OPS},
  "v_mad_u64_u32": _mad64, "v_mad_i64_i32": _mad64, "v_mad_co_u64_u32": _mad64, "v_mad_co_i64_i32": _mad64, "v_div_scale_f32": _div_scale, "v_div_scale_f64": _div_scale,
  "v_div_fmas_f32": _div_fmas, "v_div_fmas_f64": _div_fmas, "v_div_fixup_f32": _div_fixup, "v_div_fixup_f64": _div_fixup,
  "v_div_fixup_f16": _div_fixup, "v_readlane_b32": _readlane, "v_readfirstlane_b32": _readfirstlane,
  "v_writelane_b32": _writelane, "v_mbcnt_lo_u32_b32": _mbcnt, "v_mbcnt_hi_u32_b32": _mbcnt,
  "v_permlane16_b32": _permlane, "v_permlanex16_b32": _permlane, "v_swap_b32": _swap, "v_nop": _nop,
  "v_pipeflush": _nop, "v_cndmask_b16": _cndmask, "v_permlane64_b32": _permlane64,
  **{f"v_s_{o}_{t}": _scalar_trans for o in ("exp", "log", "rcp", "rsq", "sqrt") for t in ("f32", "f16")},
  **{n: _mfma for n in mfma.SHAPES},
  **{n: _movrel for n in ("v_movrels_b32", "v_movreld_b32", "v_movrelsd_b32", "v_movrelsd_2_b32")},
  **{n: _dot for n in ("v_dot2_f32_f16", "v_dot2_f32_bf16", "v_dot4_i32_iu8", "v_dot4_u32_u8", "v_dot8_i32_iu4",
                       "v_dot8_u32_u4", "v_dot2_f16_f16", "v_dot2_bf16_bf16", *GFX9_INT_DOTS)},
  **{f"v_wmma_{o}_16x16x16_{k}": _wmma for o, k in (("f32", "f16"), ("f32", "bf16"), ("f16", "f16"), ("bf16", "bf16"),
                                                     ("i32", "iu8"), ("i32", "iu4"))},
}

def _vopd(i: Inst, L: int, fam: str) -> Fn:
  """Dual issue: both halves read their sources before either writes."""
  halves = []
  for h, sfx in ((i, "x"), (i.y, "y")):
    name = h.name.replace("v_dual_", "v_")
    f = h.f
    s0 = f"src0{sfx}"; s1 = f"src1{sfx}"; d = f[f"vdst{sfx}"]
    if name == "v_cndmask_b32":
      a, b = raw_src(h, f[s0], 32, True), raw_src(h, f[s1], 32, True)
      fn = (lambda a, b: lambda st: np.where(st.unpack(106), b(st), a(st)))(a, b)
      halves.append((fn, d, "u32")); continue
    dty, stys, op = VOPS[name]
    op = fpmode.modal(name, dty, stys, op, TYPES)
    if name.startswith(("v_fmac", "v_dot2acc")): srcs = [typed_src(h, f[s0], stys[0], 0), typed_src(h, f[s1], stys[1], 1), typed_src(h, d + 256, "f32", 2)]
    elif name.startswith("v_fmamk"): srcs = [typed_src(h, f[s0], "f32", 0), typed_src(h, 255, "f32", 1), typed_src(h, f[s1], "f32", 2)]
    elif name.startswith("v_fmaak"): srcs = [typed_src(h, f[s0], "f32", 0), typed_src(h, f[s1], "f32", 1), typed_src(h, 255, "f32", 2)]
    elif len(stys) == 1: srcs = [typed_src(h, f[s0], stys[0], 0)]
    else: srcs = [typed_src(h, f[s0], stys[0], 0), typed_src(h, f[s1], stys[1], 1)]
    fn = (lambda op, srcs: lambda st: op(st, *[s(st) for s in srcs]))(op, srcs)
    halves.append((fn, d, dty))
  (fx, dx, tx), (fy, dy, ty) = halves
  def run(st):
    with np.errstate(all="ignore"):
      vx, vy = fx(st), fy(st)
    st.wv(dx, _dst_bits(vx, tx)); st.wv(dy, _dst_bits(vy, ty))
  return run

# ---- VOP3P: packed 16-bit math ------------------------------------------------------------------------------------
_PK = {
  "v_pk_add_f16": ("f16", 2, lambda a, b: a + b), "v_pk_mul_f16": ("f16", 2, lambda a, b: a * b),
  "v_pk_fma_f16": ("f16", 3, lambda a, b, c: fpmath.fma_narrow(a, b, c, f16)),
  "v_pk_max_f16": ("f16", 2, np.fmax), "v_pk_min_f16": ("f16", 2, np.fmin),
  "v_pk_max_num_f16": ("f16", 2, np.fmax), "v_pk_min_num_f16": ("f16", 2, np.fmin),
  "v_pk_add_u16": ("u16", 2, lambda a, b: a + b), "v_pk_sub_u16": ("u16", 2, lambda a, b: a - b),
  "v_pk_add_i16": ("i16", 2, lambda a, b: a + b), "v_pk_sub_i16": ("i16", 2, lambda a, b: a - b),
  "v_pk_mul_lo_u16": ("u16", 2, lambda a, b: a * b), "v_pk_mad_u16": ("u16", 3, lambda a, b, c: a * b + c),
  "v_pk_mad_i16": ("i16", 3, lambda a, b, c: a * b + c),
  "v_pk_max_u16": ("u16", 2, np.maximum), "v_pk_min_u16": ("u16", 2, np.minimum),
  "v_pk_max_i16": ("i16", 2, np.maximum), "v_pk_min_i16": ("i16", 2, np.minimum),
  "v_pk_lshlrev_b16": ("u16", 2, lambda s, x: x << (s & u16(15))), "v_pk_lshrrev_b16": ("u16", 2, lambda s, x: x >> (s & u16(15))),
  "v_pk_ashrrev_i16": ("i16", 2, lambda s, x: x >> (s & np.int16(15))),
}

def _fma_mix(i: Inst, name: str, L: int) -> Fn:
  """v_fma_mix*: each source is f32, or (op_sel_hi) an f16 half picked by op_sel; one f32 fma; f32 or f16 result
  (the f32 result rounded again)."""
  f = i.f
  raws = [raw_src(i, f[k], 32, True, True) for k in ("src0", "src1", "src2")]
  for k, fl in enumerate(("src0", "src1", "src2")):
    if f[fl] in INLINE_F16 and (f["opsel_hi"] >> k) & 1: raws[k] = (lambda c: lambda st: u32(c))(INLINE_F16[f[fl]])
  r = f["vdst"]
  def src(st, k):
    v = np.asarray(raws[k](st), u32)
    if (f["opsel_hi"] >> k) & 1:
      x = (((v >> u32(16)) if (f["opsel"] >> k) & 1 else v).astype(u16)).view(f16).astype(f32)
    else: x = v.view(f32)
    if (f["neg_hi"] >> k) & 1: x = np.abs(x)
    if (f["neg"] >> k) & 1: x = -x
    return x
  def run(st):
    with np.errstate(all="ignore"):
      a, b, c = src(st, 0), src(st, 1), src(st, 2)
      if name == "v_fma_mix_f32": st.wv(r, fpmath.fma_narrow(a, b, c, f32).view(u32)); return
      h = fpmath.fma_narrow(a, b, c, f32).astype(f16)   # the ISA: f32_to_f16(fma(...)) of an f32 fma: two roundings
      if f["clamp"]: h = np.clip(h, f16(0), f16(1))
      bits = np.asarray(h, f16).view(u16).astype(u32)
      old = st.v[r]
      st.wv(r, (old & u32(0xffff)) | (bits << u32(16)) if name == "v_fma_mixhi_f16" else (old & u32(0xffff0000)) | bits)
  return run

def _pk32_src(i: Inst, n: int) -> Callable[[State], tuple]:
  """A 64-bit packed-f32 operand as its (low, high) dwords: a VGPR or SGPR pair; an inline constant or literal
  gives its 32-bit value to both halves."""
  if n >= 256: return lambda st: (st.v[n - 256], st.v[n - 255])
  if n < 128: return lambda st: (st.s[n][:, None], st.s[n + 1][:, None])
  c = const_value(n, i.lit, 32, True)
  if c is None: raise EmuFault(f"illegal operand {n} at {i.addr:#x}", i.addr)
  k = u32(c)
  return lambda st: (k, k)

_PK32 = {"v_pk_add_f32": "v_add_f32", "v_pk_mul_f32": "v_mul_f32", "v_pk_fma_f32": "v_fma_f32"}

def _pk32(i: Inst, name: str, L: int) -> Fn:
  """gfx90a/gfx940 packed f32 and v_pk_mov_b32 on register pairs: op_sel[k] picks the dword of source k for the low
  result, op_sel_hi[k] for the high one; neg_lo/neg_hi negate them. Each half is the f32 operation under MODE."""
  f, d = i.f, i.f["vdst"]
  if name == "v_pk_mov_b32":
    a, b = _pk32_src(i, f["src0"]), _pk32_src(i, f["src1"])
    lo_sel, hi_sel = f["opsel"] & 1, f["opsel"] >> 1 & 1
    def mov(st):
      lo, hi = a(st)[lo_sel], b(st)[hi_sel]
      st.wv(d, np.broadcast_to(lo, (st.W, st.L))); st.wv(d + 1, np.broadcast_to(hi, (st.W, st.L)))
    return mov
  scalar = _PK32[name]
  dty, stys, fn = VOPS[scalar]
  fn = fpmode.modal(scalar, dty, stys, fn, TYPES)
  srcs = [_pk32_src(i, f[k]) for k in ("src0", "src1", "src2")[:len(stys)]]
  def half(st, vals, sel: int, neg: int):
    out = []
    for k, v in enumerate(vals):
      x = np.asarray(v[sel >> k & 1], u32).view(f32)
      out.append(-x if neg >> k & 1 else x)
    return out
  def run(st):
    vals = [s(st) for s in srcs]
    with np.errstate(all="ignore"):
      lo = fn(st, *half(st, vals, f["opsel"], f["neg"]))
      hi = fn(st, *half(st, vals, f["opsel_hi"], f["neg_hi"]))
    st.wv(d, np.broadcast_to(np.asarray(lo, f32).view(u32), (st.W, st.L)))
    st.wv(d + 1, np.broadcast_to(np.asarray(hi, f32).view(u32), (st.W, st.L)))
  return run

def _vop3p(i: Inst, name: str, L: int) -> Fn:
  if name.startswith("v_fma_mix"): return _fma_mix(i, name, L)
  if name in _PK32 or name == "v_pk_mov_b32": return _pk32(i, name, L)
  if name not in _PK: raise EmuFault(f"illegal instruction at {i.addr:#x}: {i.name} is not modelled", i.addr)
  ty, n, fn = _PK[name]
  fn = fpmode.modal(name, ty, (ty,) * n, fn, TYPES)
  f = i.f
  T = TYPES[ty]
  raws = [raw_src(i, f[k], 32, True, ty[0] == "f") for k in ("src0", "src1", "src2")[:n]]
  # an inline float constant feeds both halves as f16 in packed math
  for k, fl in enumerate(("src0", "src1", "src2")[:n]):
    if f[fl] in INLINE_F16 and ty == "f16": raws[k] = (lambda c: lambda st: u32(c))(INLINE_F16[f[fl]])
  r = f["vdst"]
  def half(st, k, hi):
    v = np.asarray(raws[k](st), u32)
    sel = (f["opsel_hi"] if hi else f["opsel"]) >> k & 1
    h = ((v >> u32(16)) if sel else v).astype(u16).view(T)
    if ty[0] == "f" and ((f["neg_hi"] if hi else f["neg"]) >> k) & 1: h = -h
    return h
  def run(st):
    with np.errstate(all="ignore"):
      lo = np.asarray(fn(st, *[half(st, k, False) for k in range(n)])).astype(T).view(u16).astype(u32)
      hi = np.asarray(fn(st, *[half(st, k, True) for k in range(n)])).astype(T).view(u16).astype(u32)
    st.wv(r, lo | (hi << u32(16)))
  return run

# ---- everything else --------------------------------------------------------------------------------------------
def compile_inst(i: Inst, L: int, fam: str, acc: int = 0, gpr_idx: int | None = None) -> Fn:
  """gpr_idx: the GFX9 VGPR indexing mode in force at i (see gfx9.gpr_idx_mode), None when off."""
  if fam == "gfx9":
    i = gfx9.as_gfx11(i, acc)
    if i.name.startswith("s_set_gpr_idx"): return gfx9.gpr_idx_salu(i, lambda i, n: raw_src(i, n, 32, False))
    if gpr_idx and i.fmt.startswith("vop"): return gfx9.indexed_mov(i, gpr_idx, move_indexed)
  if i.fmt in ("vop1", "vop2", "vopc", "vop3", "vop3p", "vopdx"): return compile_valu(i, L, fam)
  if i.fmt in ("sop1", "sop2", "sopc", "sopk", "sopp"): return salu.compile_salu(i, L, fam)
  if i.fmt in ("smem", "ds", "flat", "global", "scratch", "mubuf"): return mem_ops.compile_mem(i, L, fam)
  raise EmuFault(f"illegal instruction at {i.addr:#x}", i.addr)
