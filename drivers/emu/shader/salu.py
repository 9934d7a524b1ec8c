"""Scalar ALU and program control (SOP1/SOP2/SOPC/SOPK/SOPP). Values are (waves,) vectors.

Terminators return the next PC (int, or a (waves,) array); s_endpgm returns END, s_barrier returns BARRIER."""
from __future__ import annotations
import numpy as np

from rawgpu.drivers.emu.shader.decode import Inst
from rawgpu.drivers.emu.shader.state import State, EmuFault
from rawgpu.drivers.emu.shader import compile as C
from rawgpu.drivers.emu.shader.valu import _popc32, _clz32, _ctz32, _brev32, _cls, _bfe

u32, u64, i32, i64, f32 = np.uint32, np.uint64, np.int32, np.int64, np.float32
END, BARRIER = "end", "barrier"

def _popc64(x): return _popc32((x & u64(0xffffffff)).astype(u32)) + _popc32((x >> u64(32)).astype(u32))

def _ctz64(x):
  lo, hi = (x & u64(0xffffffff)).astype(u32), (x >> u64(32)).astype(u32)
  return np.where(lo != 0, _ctz32(lo), np.where(hi != 0, _ctz32(hi) + u32(32), u32(0xffffffff)))

def _clz64(x):
  lo, hi = (x & u64(0xffffffff)).astype(u32), (x >> u64(32)).astype(u32)
  return np.where(hi != 0, _clz32(hi), np.where(lo != 0, _clz32(lo) + u32(32), u32(0xffffffff)))

def _sx(v, bits): return v.view(i32 if bits == 32 else i64)

# name -> (width, fn(a, b) -> (result, scc or None))
def _logic(f): return lambda a, b: (f(a, b), None)
SOP2: dict[str, tuple[int, callable]] = {}
for w in (32, 64):
  T = u32 if w == 32 else u64
  M = (1 << w) - 1
  for nm, fn in (("and", lambda a, b: a & b), ("or", lambda a, b: a | b), ("xor", lambda a, b: a ^ b),
                 ("nand", lambda a, b: ~(a & b)), ("nor", lambda a, b: ~(a | b)), ("xnor", lambda a, b: ~(a ^ b)),
                 ("andn2", lambda a, b: a & ~b), ("orn2", lambda a, b: a | ~b), ("and_not1", lambda a, b: a & ~b),
                 ("or_not1", lambda a, b: a | ~b)):
    SOP2[f"s_{nm}_b{w}"] = (w, lambda a, b, fn=fn: (lambda r: (r, r != 0))(fn(a, b)))
  sh = 31 if w == 32 else 63
  SOP2[f"s_lshl_b{w}"] = (w, lambda a, b, T=T, sh=sh: (lambda r: (r, r != 0))(a << (np.asarray(b).astype(T) & T(sh))))
  SOP2[f"s_lshr_b{w}"] = (w, lambda a, b, T=T, sh=sh: (lambda r: (r, r != 0))(a >> (np.asarray(b).astype(T) & T(sh))))
  SOP2[f"s_ashr_i{w}"] = (w, lambda a, b, T=T, sh=sh, w=w: (lambda r: (r, r != 0))((_sx(a, w) >> (np.asarray(b).astype(T) & T(sh)).astype(_sx(a, w).dtype)).view(T)))
  SOP2[f"s_cselect_b{w}"] = (w, None)
  SOP2[f"s_bfm_b{w}"] = (w, lambda a, b, T=T, sh=sh: (((T(1) << (a & T(sh))) - T(1)) << (np.asarray(b).astype(T) & T(sh)), None))
SOP2["s_add_u32"] = (32, lambda a, b: (lambda r: ((r & u64(M32)).astype(u32), (r >> u64(32)) != 0))(a.astype(u64) + b.astype(u64)))
SOP2["s_sub_u32"] = (32, lambda a, b: (a - b, b > a))
SOP2["s_add_i32"] = (32, lambda a, b: (lambda r: (r, ((a.view(i32) >= 0) == (b.view(i32) >= 0)) & ((r.view(i32) >= 0) != (a.view(i32) >= 0))))(a + b))
SOP2["s_sub_i32"] = (32, lambda a, b: (lambda r: (r, ((a.view(i32) >= 0) != (b.view(i32) >= 0)) & ((r.view(i32) >= 0) != (a.view(i32) >= 0))))(a - b))
SOP2["s_min_i32"] = (32, lambda a, b: (np.where(a.view(i32) < b.view(i32), a, b), a.view(i32) < b.view(i32)))
SOP2["s_min_u32"] = (32, lambda a, b: (np.where(a < b, a, b), a < b))
SOP2["s_max_i32"] = (32, lambda a, b: (np.where(a.view(i32) > b.view(i32), a, b), a.view(i32) > b.view(i32)))
SOP2["s_max_u32"] = (32, lambda a, b: (np.where(a > b, a, b), a > b))
SOP2["s_mul_i32"] = (32, lambda a, b: (a * b, None))
SOP2["s_mul_hi_u32"] = (32, lambda a, b: (((a.astype(u64) * b.astype(u64)) >> u64(32)).astype(u32), None))
SOP2["s_mul_hi_i32"] = (32, lambda a, b: (((a.view(i32).astype(i64) * b.view(i32).astype(i64)) >> 32).astype(i32).view(u32), None))
SOP2["s_absdiff_i32"] = (32, lambda a, b: (lambda r: (r, r != 0))(np.abs(a.view(i32).astype(i64) - b.view(i32).astype(i64)).astype(u32)))
SOP2["s_bfe_u32"] = (32, lambda a, b: (lambda r: (r, r != 0))(_bfe(a, b & u32(31), (b >> u32(16)) & u32(0x7f), False)))
SOP2["s_bfe_i32"] = (32, lambda a, b: (lambda r: (r, r != 0))(_bfe(a, b & u32(31), (b >> u32(16)) & u32(0x7f), True)))
for k in range(1, 5):
  SOP2[f"s_lshl{k}_add_u32"] = (32, lambda a, b, k=k: (lambda r: ((r & u64(M32)).astype(u32), (r >> u64(32)) != 0))((a.astype(u64) << u64(k)) + b.astype(u64)))
SOP2["s_pack_ll_b32_b16"] = (32, lambda a, b: ((a & u32(0xffff)) | (b << u32(16)), None))
SOP2["s_pack_lh_b32_b16"] = (32, lambda a, b: ((a & u32(0xffff)) | (b & u32(0xffff0000)), None))
SOP2["s_pack_hh_b32_b16"] = (32, lambda a, b: ((a >> u32(16)) | (b & u32(0xffff0000)), None))
SOP2["s_pack_hl_b32_b16"] = (32, lambda a, b: ((a >> u32(16)) | (b << u32(16)), None))
M32 = 0xffffffff

def _bfe64(a, b, signed):
  off, w = (b & u64(63)).astype(i64), ((b >> u64(16)) & u64(0x7f)).astype(i64)
  w = np.minimum(w, 64 - off)
  v = a >> off.astype(u64)
  mask = np.where(w >= 64, u64(0xffffffffffffffff), (u64(1) << np.minimum(w, 63).astype(u64)) - u64(1))
  v = v & mask
  if signed:
    sb = (v >> np.maximum(w - 1, 0).astype(u64)) & u64(1)
    v = np.where((w > 0) & (w < 64) & (sb == 1), v | ~mask, v)
  return np.where(w == 0, u64(0), v)
SOP2["s_bfe_u64"] = (64, lambda a, b: (lambda r: (r, r != 0))(_bfe64(a, np.asarray(b, u64), False)))
SOP2["s_bfe_i64"] = (64, lambda a, b: (lambda r: (r, r != 0))(_bfe64(a, np.asarray(b, u64), True)))

SOP1: dict[str, tuple[int, callable]] = {
  "s_mov_b32": (32, lambda a: (a, None)), "s_mov_b64": (64, lambda a: (a, None)),
  "s_not_b32": (32, lambda a: (~a, ~a != 0)), "s_not_b64": (64, lambda a: (~a, ~a != 0)),
  "s_brev_b32": (32, lambda a: (_brev32(a), None)),
  "s_bcnt1_i32_b32": (32, lambda a: (lambda r: (r, r != 0))(_popc32(a))),
  "s_bcnt0_i32_b32": (32, lambda a: (lambda r: (r, r != 0))(u32(32) - _popc32(a))),
  "s_bcnt1_i32_b64": (64, lambda a: (lambda r: (r, r != 0))(_popc64(a))),
  "s_bcnt0_i32_b64": (64, lambda a: (lambda r: (r, r != 0))(u32(64) - _popc64(a))),
  "s_ff1_i32_b32": (32, lambda a: (_ctz32(a), None)), "s_ctz_i32_b32": (32, lambda a: (_ctz32(a), None)),
  "s_ff1_i32_b64": (64, lambda a: (_ctz64(a), None)), "s_ctz_i32_b64": (64, lambda a: (_ctz64(a), None)),
  "s_ff0_i32_b32": (32, lambda a: (_ctz32(~a), None)),
  "s_flbit_i32_b32": (32, lambda a: (_clz32(a), None)), "s_clz_i32_u32": (32, lambda a: (_clz32(a), None)),
  "s_flbit_i32_b64": (64, lambda a: (_clz64(a), None)), "s_clz_i32_u64": (64, lambda a: (_clz64(a), None)),
  "s_flbit_i32": (32, lambda a: (_cls(a), None)), "s_cls_i32": (32, lambda a: (_cls(a), None)),
  "s_sext_i32_i8": (32, lambda a: ((a & u32(0xff)).astype(np.uint8).view(np.int8).astype(i32).view(u32), None)),
  "s_sext_i32_i16": (32, lambda a: ((a & u32(0xffff)).astype(np.uint16).view(np.int16).astype(i32).view(u32), None)),
  "s_abs_i32": (32, lambda a: (lambda r: (r, r != 0))(np.abs(a.view(i32).astype(i64)).astype(u32))),
}

SAVEEXEC = {  # name -> new EXEC from (s0, exec)
  "and": lambda s, e: s & e, "or": lambda s, e: s | e, "xor": lambda s, e: s ^ e, "nand": lambda s, e: ~(s & e),
  "nor": lambda s, e: ~(s | e), "xnor": lambda s, e: ~(s ^ e), "andn1": lambda s, e: ~s & e, "andn2": lambda s, e: s & ~e,
  "orn1": lambda s, e: ~s | e, "orn2": lambda s, e: s | ~e, "and_not0": lambda s, e: ~s & e, "and_not1": lambda s, e: s & ~e,
  "or_not0": lambda s, e: ~s | e, "or_not1": lambda s, e: s | ~e,
}

def _cmp_table():
  t = {}
  for nm, f in (("eq", np.equal), ("lg", np.not_equal), ("gt", np.greater), ("ge", np.greater_equal), ("lt", np.less),
                ("le", np.less_equal)):
    t[f"s_cmp_{nm}_i32"] = (32, lambda a, b, f=f: f(a.view(i32), b.view(i32)))
    t[f"s_cmp_{nm}_u32"] = (32, lambda a, b, f=f: f(a, b))
    t[f"s_cmpk_{nm}_i32"] = t[f"s_cmp_{nm}_i32"]
    t[f"s_cmpk_{nm}_u32"] = t[f"s_cmp_{nm}_u32"]
  t["s_cmp_eq_u64"] = (64, lambda a, b: a == b)
  t["s_cmp_lg_u64"] = (64, lambda a, b: a != b)
  t["s_cmp_ne_u64"] = t["s_cmp_lg_u64"]
  t["s_bitcmp0_b32"] = (32, lambda a, b: ((a >> (b & u32(31))) & u32(1)) == 0)
  t["s_bitcmp1_b32"] = (32, lambda a, b: ((a >> (b & u32(31))) & u32(1)) == 1)
  t["s_bitcmp0_b64"] = (64, lambda a, b: ((a >> (np.asarray(b, u64) & u64(63))) & u64(1)) == 0)
  t["s_bitcmp1_b64"] = (64, lambda a, b: ((a >> (np.asarray(b, u64) & u64(63))) & u64(1)) == 1)
  return t
SOPC = _cmp_table()

def _src(i: Inst, k: str, w: int):
  return C.raw_src(i, i.f[k], w, False, False)

def _write(st: State, d: int, w: int, val) -> None:
  if w == 64: st.ws64(d, val)
  else: st.ws(d, np.asarray(val).astype(u32, copy=False))

def _bcast(st: State, v):
  return np.broadcast_to(v, (st.W,))

def _salu_float(i: Inst, n: str):
  """gfx12 scalar float: the VALU operation of the same name on the scalar operands, under the wave's MODE (its round
  and denormal controls govern SALU float as they do VALU float: LLVM moves uniform float math, denormal-flushing
  or not, to the SALU); compares set SCC; a 16-bit result is zero-extended in the SGPR. Operands are read as their
  type, as VALU operands are: an inline constant of a 16-bit operand is the f16 value."""
  f = i.f
  if n.startswith("s_cmp_"):
    ty, fn = C.CMP["v_" + n[2:]]
    fl = C.fpmode.flush_cmp(C.TYPES[ty])
    a, b = C.typed_src(i, f["src0"], ty, 0), C.typed_src(i, f["src1"], ty, 1)
    return lambda st: st.wscc(np.broadcast_to(fn(fl(st, a(st)), fl(st, b(st))), (st.W, 1))[:, 0])
  if n == "s_cvt_hi_f32_f16":   # the f16 in the high half of all 32 bits of the operand (a literal's too)
    vname, hi = "v_cvt_f32_f16", C.raw_src(i, f["src0"], 32, True, True)
    srcs = [lambda st: (np.asarray(hi(st)) >> u32(16)).astype(np.uint16).view(np.float16)]
  else:
    vname = "v_" + n[2:]
    stys = C.VOPS[vname][1]
    if n.startswith("s_fmac_"): regs = [f["src0"], f["src1"], f["sdst"]]   # the destination is the addend
    elif n == "s_fmamk_f32": regs = [f["src0"], 255, f["src1"]]          # 255: the literal K
    elif n == "s_fmaak_f32": regs = [f["src0"], f["src1"], 255]
    else: regs = [f[k] for k in ("src0", "src1")[:len(stys)]]
    srcs = [C.typed_src(i, r, t, k) for k, (r, t) in enumerate(zip(regs, stys))]
  dty, stys, fn = C.VOPS[vname]
  fn, d = C.fpmode.modal(vname, dty, stys, fn, C.TYPES), f["sdst"]
  def run(st):
    with np.errstate(all="ignore"): C.wave_result_to_sgpr(st, d, fn(st, *[s(st) for s in srcs]), dty)
  return run

def compile_salu(i: Inst, L: int, fam: str):
  n, f = i.name, i.f
  nxt = i.addr + i.size
  if i.fmt == "sopp": return _sopp(i, L, fam)
  if ("_f32" in n or "_f16" in n) and i.fmt in ("sop1", "sop2", "sopc"): return _salu_float(i, n)
  if i.fmt == "sop2":
    if n in ("s_cselect_b32", "s_cselect_b64"):
      w = 64 if n.endswith("64") else 32
      a, b = _src(i, "src0", w), _src(i, "src1", w)
      return lambda st: _write(st, f["sdst"], w, np.where(st.scc, a(st), b(st)))
    if n in ("s_addc_u32", "s_subb_u32", "s_add_co_ci_u32", "s_sub_co_ci_u32"):
      a, b = _src(i, "src0", 32), _src(i, "src1", 32)
      def run(st):
        x, y, c = _bcast(st, a(st)).astype(u64), _bcast(st, b(st)).astype(u64), st.scc.astype(u64)
        if n in ("s_addc_u32", "s_add_co_ci_u32"): r = x + y + c; carry = r >> u64(32) != 0
        else: r = x - y - c; carry = (y + c) > x
        _write(st, f["sdst"], 32, (r & u64(M32)).astype(u32)); st.wscc(carry)
      return run
    if n not in SOP2: raise EmuFault(f"illegal instruction at {i.addr:#x}: {n} is not modelled", i.addr)
    w, fn = SOP2[n]
    w1 = 32 if n.startswith(("s_lshl_b64", "s_lshr_b64", "s_ashr_i64", "s_bfm_b64")) else w
    wa = 32 if n == "s_bfm_b64" else w
    a, b = _src(i, "src0", wa), _src(i, "src1", w1 if n != "s_bfe_u64" and n != "s_bfe_i64" else 32)
    d = f["sdst"]
    def run(st):
      r, scc = fn(_bcast(st, a(st)), _bcast(st, b(st)))
      _write(st, d, w, r)
      if scc is not None: st.wscc(scc)
    return run
  if i.fmt == "sopc":
    if n not in SOPC: raise EmuFault(f"illegal instruction at {i.addr:#x}: {n} is not modelled", i.addr)
    w, fn = SOPC[n]
    a, b = _src(i, "src0", w), _src(i, "src1", 32 if "bitcmp" in n else w)
    return lambda st: st.wscc(fn(_bcast(st, a(st)), _bcast(st, b(st))))
  if i.fmt == "sopk":
    d, imm = f["sdst"], f["simm16"]
    simm = imm - 0x10000 if imm & 0x8000 else imm
    if n == "s_movk_i32": return lambda st: st.ws(d, u32(simm & M32))
    if n == "s_cmovk_i32": return lambda st: st.ws(d, np.where(st.scc, u32(simm & M32), st.s[d]))
    if n in SOPC:
      w, fn = SOPC[n]
      k = u32((simm if n.endswith("i32") else imm) & M32)
      return lambda st: st.wscc(fn(st.s[d], np.broadcast_to(k, (st.W,))))
    if n in ("s_addk_i32", "s_addk_co_i32"): return _sopk_arith(d, simm, True)
    if n == "s_mulk_i32": return lambda st: st.ws(d, st.s[d] * u32(simm & M32))
    if n == "s_getreg_b32":
      hw, off, sz = imm & 0x3f, (imm >> 6) & 0x1f, ((imm >> 11) & 0x1f) + 1
      return lambda st: st.ws(d, (st.hwreg[hw] >> u32(off)) & u32((1 << sz) - 1 if sz < 32 else M32))
    if n in ("s_setreg_b32", "s_setreg_imm32_b32"):
      hw, off, sz = imm & 0x3f, (imm >> 6) & 0x1f, ((imm >> 11) & 0x1f) + 1
      m = u32((((1 << sz) - 1) << off) & M32)
      lit = i.lit
      def run(st):
        v = u32(lit) if n == "s_setreg_imm32_b32" else st.s[d]
        st.set_hwreg(hw, (st.hwreg[hw] & ~m) | ((v << u32(off)) & m))
      return run
    if n == "s_call_b64":
      tgt = i.addr + 4 + simm * 4
      def run(st):
        st.ws64(d, np.full(st.W, u64(st.pc_base + nxt)))
        return tgt
      run.terminator = True
      return run
    if n.startswith("s_waitcnt") or n == "s_version": return lambda st: None
    raise EmuFault(f"illegal instruction at {i.addr:#x}: {n} is not modelled", i.addr)
  # SOP1
  d = f["sdst"]
  if n.endswith("_saveexec_b32") or n.endswith("_saveexec_b64") or n.endswith("_wrexec_b32") or n.endswith("_wrexec_b64"):
    w = 64 if n.endswith("64") else 32
    kind = n[2:].rsplit("_", 2)[0]
    fn = SAVEEXEC[kind]
    a = _src(i, "src0", w)
    wr = n.endswith(("_wrexec_b32", "_wrexec_b64"))
    def run(st):
      old = st.s64(126) if w == 64 else st.s[126].copy()
      new = fn(_bcast(st, a(st)), old)
      if w == 64: st.ws64(126, new)
      else: st.ws(126, new)
      _write(st, d, w, new if wr else old)
      st.wscc(new != 0)
    return run
  # PCs inside the emulator count from the program start; the program sees GPU virtual addresses
  if n == "s_getpc_b64": return lambda st: st.ws64(d, np.full(st.W, u64(st.pc_base + nxt)))
  if n in ("s_setpc_b64", "s_swappc_b64"):
    a = _src(i, "src0", 64)
    def run(st):
      tgt = _bcast(st, a(st)).astype(np.int64) - np.int64(st.pc_base)
      if n == "s_swappc_b64": st.ws64(d, np.full(st.W, u64(st.pc_base + nxt)))
      return tgt
    run.terminator = True
    return run
  if n in ("s_cmov_b32", "s_cmov_b64"):
    w = 64 if n.endswith("64") else 32
    a = _src(i, "src0", w)
    old = (lambda st: st.s64(d)) if w == 64 else (lambda st: st.s[d])
    return lambda st: _write(st, d, w, np.where(st.scc, a(st), old(st)))
  if n in ("s_bitset0_b32", "s_bitset1_b32", "s_bitset0_b64", "s_bitset1_b64"):
    w = 64 if n.endswith("64") else 32
    a = _src(i, "src0", 32)
    T = u64 if w == 64 else u32
    one = n.startswith("s_bitset1")
    def run(st):
      old = st.s64(d) if w == 64 else st.s[d]
      bit = T(1) << (_bcast(st, a(st)).astype(T) & T(w - 1))
      _write(st, d, w, (old | bit) if one else (old & ~bit))
    return run
  if n in ("s_movrels_b32", "s_movreld_b32", "s_movrels_b64", "s_movreld_b64"):
    w = 64 if n.endswith("64") else 32
    src = f["src0"]
    def run(st):
      st.masks.clear()
      m0 = st.s[125].astype(np.int64)
      ws = np.nonzero(st.selected())[0]
      for k in range(w // 32):
        if n.startswith("s_movrels"): st.s[d + k][ws] = st.s[(src + m0[ws] + k) % 106, ws]
        else: st.s[(d + m0[ws] + k) % 106, ws] = st.s[src + k][ws]
    return run
  if n == "s_barrier_signal" or n == "s_barrier_signal_isfirst":
    def run(st): return BARRIER
    run.terminator = True
    return run
  if n in ("s_sendmsg_rtn_b32", "s_sendmsg_rtn_b64"):
    w = 64 if n.endswith("64") else 32
    return lambda st: _write(st, d, w, np.zeros(st.W, u64 if w == 64 else u32))
  if n not in SOP1: raise EmuFault(f"illegal instruction at {i.addr:#x}: {n} is not modelled", i.addr)
  w, fn = SOP1[n]
  wa = 64 if n in ("s_bcnt1_i32_b64", "s_bcnt0_i32_b64", "s_ff1_i32_b64", "s_ctz_i32_b64", "s_flbit_i32_b64", "s_clz_i32_u64") else w
  wd = 32 if wa == 64 and w == 64 and n not in ("s_mov_b64", "s_not_b64") else w
  a = _src(i, "src0", wa)
  def run(st):
    r, scc = fn(_bcast(st, a(st)))
    _write(st, d, wd, r)
    if scc is not None: st.wscc(scc)
  return run

def _sopk_arith(d: int, simm: int, add: bool):
  k = u32(simm & M32)
  def run(st):
    a = st.s[d]
    r = a + k
    ovf = ((a.view(i32) >= 0) == (simm >= 0)) & ((r.view(i32) >= 0) != (a.view(i32) >= 0))
    st.ws(d, r); st.wscc(ovf)
  return run

NOP_SOPP = {"s_nop", "s_waitcnt", "s_delay_alu", "s_clause", "s_set_inst_prefetch_distance", "s_setprio", "s_sleep",
            "s_icache_inv", "s_waitcnt_depctr", "s_wait_idle", "s_wait_event", "s_wait_alu", "s_wait_loadcnt",
            "s_wait_storecnt", "s_wait_samplecnt", "s_wait_bvhcnt", "s_wait_expcnt", "s_wait_dscnt", "s_wait_kmcnt",
            "s_wait_loadcnt_dscnt", "s_wait_storecnt_dscnt", "s_barrier_wait", "s_singleuse_vdst", "s_sendmsg",
            "s_ttracedata", "s_ttracedata_imm", "s_incperflevel", "s_decperflevel", "s_wakeup", "s_version", "s_setkill"}

def _sopp(i: Inst, L: int, fam: str):
  n, imm = i.name, i.f["simm16"]
  simm = imm - 0x10000 if imm & 0x8000 else imm
  nxt, tgt = i.addr + 4, i.addr + 4 + 4 * simm
  def term(fn):
    fn.terminator = True
    return fn
  if n == "s_endpgm" or n == "s_endpgm_saved": return term(lambda st: END)
  if n == "s_barrier": return term(lambda st: BARRIER)
  if n == "s_branch": return term(lambda st: tgt)
  conds = {"s_cbranch_scc0": lambda st: ~st.scc, "s_cbranch_scc1": lambda st: st.scc,
           "s_cbranch_vccz": lambda st: (st.s[106] == 0) & ((st.s[107] == 0) | (L == 32)),
           "s_cbranch_vccnz": lambda st: ~((st.s[106] == 0) & ((st.s[107] == 0) | (L == 32))),
           "s_cbranch_execz": lambda st: (st.s[126] == 0) & ((st.s[127] == 0) | (L == 32)),
           "s_cbranch_execnz": lambda st: ~((st.s[126] == 0) & ((st.s[127] == 0) | (L == 32)))}
  if n in conds:
    c = conds[n]
    return term(lambda st: np.where(c(st), tgt, nxt))
  if n in ("s_cbranch_cdbgsys", "s_cbranch_cdbguser", "s_cbranch_cdbgsys_or_user", "s_cbranch_cdbgsys_and_user"):
    return lambda st: None  # no debugger attached: never taken
  if n in ("s_trap", "s_sendmsghalt"):
    def trap(st): raise EmuFault(f"{n} {imm} at {i.addr:#x}: no trap handler is installed, the wave halts", i.addr)
    return term(trap)
  if n in ("s_round_mode", "s_denorm_mode"):  # MODE[3:0] rounding, MODE[7:4] denormals (same bits as s_setreg)
    sh = 0 if n == "s_round_mode" else 4
    keep, new = u32(~(0xf << sh) & M32), u32((imm & 0xf) << sh)
    return lambda st: st.set_hwreg(1, (st.hwreg[1] & keep) | new)
  if n in NOP_SOPP: return lambda st: None
  raise EmuFault(f"illegal instruction at {i.addr:#x}: {n}", i.addr)

# gfx12 names of the same operations, and the 64-bit integer ALU it added
for _new, _old in (("s_add_co_u32", "s_add_u32"), ("s_add_co_i32", "s_add_i32"), ("s_sub_co_u32", "s_sub_u32"),
                   ("s_sub_co_i32", "s_sub_i32")):
  SOP2[_new] = SOP2[_old]
SOP2["s_add_nc_u64"] = (64, lambda a, b: (a + b, None))
SOP2["s_sub_nc_u64"] = (64, lambda a, b: (a - b, None))
SOP2["s_mul_u64"] = (64, lambda a, b: (a * b, None))
SOP1["s_brev_b64"] = (64, lambda a: ((_brev32((a >> u64(32)).astype(u32)).astype(u64)) | (_brev32((a & u64(M32)).astype(u32)).astype(u64) << u64(32)), None))
