"""Vector ALU semantics: mnemonic -> (result type, source types, function over typed numpy arrays).

Functions see whole (waves, lanes) arrays; the executor handles operand fetch, modifiers, EXEC and write-back.
Transcendentals (rcp, rsq, sqrt, exp, log, sin, cos) are computed to the nearest representable result; the
hardware's are approximations within about 1 ulp (documented in README.md)."""
from __future__ import annotations
import numpy as np

from rawgpu.drivers.emu.shader import fp8 as _fp8
from rawgpu.drivers.emu.shader.fpmath import fma_narrow, fma64

f16, f32, f64 = np.float16, np.float32, np.float64
u16, u32, u64, i16, i32, i64 = np.uint16, np.uint32, np.uint64, np.int16, np.int32, np.int64
TYPES = {"f16": f16, "f32": f32, "f64": f64, "u16": u16, "u32": u32, "u64": u64, "i16": i16, "i32": i32, "i64": i64,
         "b16": u16, "b32": u32, "b64": u64, "u8": u32, "i8": u32, "bool": bool}
WIDTH = {"f16": 16, "f32": 32, "f64": 64, "u16": 16, "u32": 32, "u64": 64, "i16": 16, "i32": 32, "i64": 64, "b16": 16,
         "b32": 32, "b64": 64, "bool": 1}
BITS = {16: u16, 32: u32, 64: u64}

VOPS: dict[str, tuple[str, tuple[str, ...], callable]] = {}

def op(name: str, dst: str, srcs: str, fn) -> None:
  VOPS[name] = (dst, tuple(srcs.split()), fn)

def _fmin(a, b):
  """v_min: a quiet NaN loses, and -0 is below +0 (the ISA's rule, IEEE 754-2019 minimumNumber)."""
  z = (a == 0) & (b == 0)
  return np.where(z, -((-a) + (-b)), np.fmin(a, b))

def _fmax(a, b):
  z = (a == 0) & (b == 0)
  return np.where(z, a + b, np.fmax(a, b))

def _sh(t):
  return {u16: 15, u32: 31, u64: 63}[t]

def _to_int(x, lo, hi, t):
  """float -> int the hardware way: truncate, NaN -> 0, saturate."""
  x = np.asarray(x, f64)
  return np.where(np.isnan(x), 0, np.clip(np.trunc(np.nan_to_num(x)), lo, hi)).astype(t)

def _fract(x):
  t = type(x.flat[0]) if hasattr(x, "flat") else type(x)
  r = x - np.floor(x)
  return np.where(np.isinf(x), t(np.nan), np.minimum(r, np.nextafter(t(1), t(0)))).astype(t)

def _frexp_mant(x):
  m, _ = np.frexp(x)
  return np.where(np.isfinite(x), m, x)

def _frexp_exp(x):
  _, e = np.frexp(x)
  return np.where(np.isfinite(x), e, 0).astype(i32)

def _med3(a, b, c):
  return np.fmax(np.fmin(a, b), np.fmin(np.fmax(a, b), c))

def _imed3(a, b, c):
  return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))

def _bfe(x, off, w, signed):
  off, w = (np.asarray(off, u32) & u32(31)).astype(i64), (np.asarray(w, u32) & u32(31)).astype(i64)
  v = (np.asarray(x, u32).astype(i64) >> off) & ((np.int64(1) << w) - 1)
  if signed: v = np.where((w > 0) & (((v >> np.maximum(w - 1, 0)) & 1) == 1), v - (np.int64(1) << w), v)
  return np.where(w == 0, 0, v).astype(i64).astype(u32)

def _popc32(x):
  x = np.asarray(x, u32)
  x = x - ((x >> u32(1)) & u32(0x55555555))
  x = (x & u32(0x33333333)) + ((x >> u32(2)) & u32(0x33333333))
  x = (x + (x >> u32(4))) & u32(0x0F0F0F0F)
  return (x * u32(0x01010101)) >> u32(24)

def _clz32(x):
  x = np.asarray(x, u32)
  y = x.astype(u64)
  pos = np.where(x == 0, 0, np.floor(np.log2(np.maximum(y, 1).astype(f64))).astype(i64))
  # log2 of a float64 is exact for powers of two and never crosses an integer for 32-bit inputs
  return np.where(x == 0, u32(0xffffffff), (31 - pos).astype(u32))

def _ctz32(x):
  x = np.asarray(x, u32)
  low = x & (~x + u32(1))
  return np.where(x == 0, u32(0xffffffff), (31 - _clz32(low).astype(i64)).astype(u32))

def _brev32(x):
  x = np.asarray(x, u32)
  x = ((x >> u32(1)) & u32(0x55555555)) | ((x & u32(0x55555555)) << u32(1))
  x = ((x >> u32(2)) & u32(0x33333333)) | ((x & u32(0x33333333)) << u32(2))
  x = ((x >> u32(4)) & u32(0x0F0F0F0F)) | ((x & u32(0x0F0F0F0F)) << u32(4))
  x = ((x >> u32(8)) & u32(0x00FF00FF)) | ((x & u32(0x00FF00FF)) << u32(8))
  return (x >> u32(16)) | (x << u32(16))

def _perm(s0, s1, sel):
  """v_perm_b32: bytes of {s0, s1} picked by each selector byte."""
  data = (np.asarray(s0, u64) << u64(32)) | np.asarray(s1, u64)
  out = np.zeros(np.broadcast(s0, s1, sel).shape, u32)
  for k in range(4):
    s = (np.asarray(sel, u32) >> u32(8 * k)) & u32(0xff)
    byte = ((data >> (np.minimum(s, 7).astype(u64) * u64(8))) & u64(0xff)).astype(u32)
    sign = lambda b: np.where((data >> u64(b)) & u64(1), u32(0xff), u32(0))
    byte = np.where(s == 8, sign(15), byte); byte = np.where(s == 9, sign(31), byte)
    byte = np.where(s == 10, sign(47), byte); byte = np.where(s == 11, sign(63), byte)
    byte = np.where(s == 12, u32(0), byte); byte = np.where(s > 12, u32(0xff), byte)
    out |= byte << u32(8 * k)
  return out

def _mul_hi(a, b, signed):
  if signed: return ((a.astype(i64) * b.astype(i64)) >> 32).astype(i32)
  return ((a.astype(u64) * b.astype(u64)) >> u64(32)).astype(u32)

def _cls(x):
  x = np.asarray(x, u32)
  # leading bits equal to the sign bit, the sign bit included; -1 when all 32 are
  return _clz32(np.where(x >> u32(31), ~x, x))

def _sad(a, b):
  return np.where(a > b, a - b, b - a)

# ---- float arithmetic ---------------------------------------------------------------------------------------------
for t in ("f16", "f32", "f64"):
  T = TYPES[t]
  fma = (lambda a, b, c: fma64(a, b, c)) if t == "f64" else (lambda a, b, c, T=T: fma_narrow(a, b, c, T))
  op(f"v_add_{t}", t, f"{t} {t}", lambda a, b: a + b)
  op(f"v_sub_{t}", t, f"{t} {t}", lambda a, b: a - b)
  op(f"v_subrev_{t}", t, f"{t} {t}", lambda a, b: b - a)
  op(f"v_mul_{t}", t, f"{t} {t}", lambda a, b: a * b)
  op(f"v_fma_{t}", t, f"{t} {t} {t}", fma)
  op(f"v_fmac_{t}", t, f"{t} {t} {t}", fma)  # the executor passes vdst as the third source
  op(f"v_fmamk_{t}", t, f"{t} {t} {t}", lambda a, k, b, fma=fma: fma(a, k, b))
  op(f"v_fmaak_{t}", t, f"{t} {t} {t}", fma)
  for nm, f in (("max", _fmax), ("min", _fmin)):
    op(f"v_{nm}_{t}", t, f"{t} {t}", f)
    op(f"v_{nm}_num_{t}", t, f"{t} {t}", f)
  op(f"v_ldexp_{t}", t, f"{t} i32", lambda a, e, T=T: np.ldexp(a, np.clip(e, -10000, 10000).astype(np.int32)).astype(T))
  op(f"v_trunc_{t}", t, t, np.trunc)
  op(f"v_ceil_{t}", t, t, np.ceil)
  op(f"v_floor_{t}", t, t, np.floor)
  op(f"v_rndne_{t}", t, t, np.rint)
  op(f"v_fract_{t}", t, t, _fract)
  op(f"v_sqrt_{t}", t, t, np.sqrt)
  op(f"v_rcp_{t}", t, t, lambda a, T=T: (T(1) / a))
  op(f"v_rsq_{t}", t, t, lambda a, T=T: (1.0 / np.sqrt(a.astype(f64))).astype(T))
  op(f"v_frexp_mant_{t}", t, t, _frexp_mant)
  op(f"v_frexp_exp_i32_{t}", "i32", t, _frexp_exp)
  op(f"v_frexp_exp_i16_{t}", "i16", t, lambda a: _frexp_exp(a).astype(i16))
  op(f"v_med3_{t}", t, f"{t} {t} {t}", _med3)
  op(f"v_med3_num_{t}", t, f"{t} {t} {t}", _med3)
  op(f"v_min3_{t}", t, f"{t} {t} {t}", lambda a, b, c: _fmin(_fmin(a, b), c))
  op(f"v_max3_{t}", t, f"{t} {t} {t}", lambda a, b, c: _fmax(_fmax(a, b), c))
  op(f"v_min3_num_{t}", t, f"{t} {t} {t}", lambda a, b, c: _fmin(_fmin(a, b), c))
  op(f"v_max3_num_{t}", t, f"{t} {t} {t}", lambda a, b, c: _fmax(_fmax(a, b), c))
op("v_rcp_iflag_f32", "f32", "f32", lambda a: f32(1) / a)
op("v_exp_f32", "f32", "f32", lambda a: np.exp2(a.astype(f64)).astype(f32))
op("v_log_f32", "f32", "f32", lambda a: np.log2(a.astype(f64)).astype(f32))
op("v_exp_f16", "f16", "f16", lambda a: np.exp2(a.astype(f64)).astype(f16))
op("v_log_f16", "f16", "f16", lambda a: np.log2(a.astype(f64)).astype(f16))
op("v_sin_f32", "f32", "f32", lambda a: np.sin(2 * np.pi * a.astype(f64)).astype(f32))
op("v_cos_f32", "f32", "f32", lambda a: np.cos(2 * np.pi * a.astype(f64)).astype(f32))
op("v_mul_legacy_f32", "f32", "f32 f32", lambda a, b: np.where((a == 0) | (b == 0), f32(0), a * b))
op("v_mul_dx9_zero_f32", "f32", "f32 f32", lambda a, b: np.where((a == 0) | (b == 0), f32(0), a * b))
op("v_fma_dx9_zero_f32", "f32", "f32 f32 f32", lambda a, b, c: np.where((a == 0) | (b == 0), c, fma_narrow(a, b, c, f32)))
op("v_fmac_dx9_zero_f32", "f32", "f32 f32 f32", lambda a, b, c: np.where((a == 0) | (b == 0), c, fma_narrow(a, b, c, f32)))

# ---- conversions --------------------------------------------------------------------------------------------------
op("v_cvt_f32_i32", "f32", "i32", lambda a: a.astype(f32))
op("v_cvt_f32_u32", "f32", "u32", lambda a: a.astype(f32))
op("v_cvt_i32_f32", "i32", "f32", lambda a: _to_int(a, -2**31, 2**31 - 1, i32))
op("v_cvt_u32_f32", "u32", "f32", lambda a: _to_int(a, 0, 2**32 - 1, u32))
op("v_cvt_f64_i32", "f64", "i32", lambda a: a.astype(f64))
op("v_cvt_f64_u32", "f64", "u32", lambda a: a.astype(f64))
op("v_cvt_i32_f64", "i32", "f64", lambda a: _to_int(a, -2**31, 2**31 - 1, i32))
op("v_cvt_u32_f64", "u32", "f64", lambda a: _to_int(a, 0, 2**32 - 1, u32))
op("v_cvt_f32_f64", "f32", "f64", lambda a: a.astype(f32))
op("v_cvt_f64_f32", "f64", "f32", lambda a: a.astype(f64))
op("v_cvt_f16_f32", "f16", "f32", lambda a: a.astype(f16))
op("v_cvt_f32_f16", "f32", "f16", lambda a: a.astype(f32))
op("v_cvt_f16_i16", "f16", "i16", lambda a: a.astype(f16))
op("v_cvt_f16_u16", "f16", "u16", lambda a: a.astype(f16))
op("v_cvt_i16_f16", "i16", "f16", lambda a: _to_int(a, -2**15, 2**15 - 1, i16))
op("v_cvt_u16_f16", "u16", "f16", lambda a: _to_int(a, 0, 2**16 - 1, u16))
op("v_cvt_i32_i16", "i32", "i16", lambda a: a.astype(i32))
op("v_cvt_u32_u16", "u32", "u16", lambda a: a.astype(u32))
op("v_cvt_floor_i32_f32", "i32", "f32", lambda a: _to_int(np.floor(a), -2**31, 2**31 - 1, i32))
op("v_cvt_nearest_i32_f32", "i32", "f32", lambda a: _to_int(np.floor(a.astype(f64) + 0.5), -2**31, 2**31 - 1, i32))
op("v_cvt_rpi_i32_f32", "i32", "f32", lambda a: _to_int(np.floor(a.astype(f64) + 0.5), -2**31, 2**31 - 1, i32))
op("v_cvt_flr_i32_f32", "i32", "f32", lambda a: _to_int(np.floor(a), -2**31, 2**31 - 1, i32))
for k in range(4):
  op(f"v_cvt_f32_ubyte{k}", "f32", "u32", lambda a, k=k: ((a >> u32(8 * k)) & u32(0xff)).astype(f32))
op("v_cvt_pk_rtz_f16_f32", "u32", "f32 f32", lambda a, b: _pk16(_rtz16(a), _rtz16(b)))

# CDNA3 8-bit floats (fp8.py): byte 0 (the SDWA/VOP1 forms select the byte) to f32; two bytes to an f32 pair; two f32 to
# two bytes, the 16-bit result going to the word op_sel[3] picks
for _k in ("fp8", "bf8"):
  op(f"v_cvt_f32_{_k}", "f32", "u32", lambda x, k=_k: _fp8.decode(x, k))
  op(f"v_cvt_pk_f32_{_k}", "u64", "u32", lambda x, k=_k: _fp8.decode(x, k).view(u32).astype(u64)
     | (_fp8.decode(np.asarray(x, u32) >> u32(8), k).view(u32).astype(u64) << u64(32)))
  op(f"v_cvt_pk_{_k}_f32", "u16", "f32 f32", lambda a, b, k=_k: (_fp8.encode(a, k) | (_fp8.encode(b, k) << u32(8))).astype(np.uint16))
op("v_cvt_pkrtz_f16_f32", "u32", "f32 f32", lambda a, b: _pk16(_rtz16(a), _rtz16(b)))
op("v_cvt_pk_i16_i32", "u32", "i32 i32", lambda a, b: _pk16(np.clip(a, -32768, 32767).astype(i16).view(u16), np.clip(b, -32768, 32767).astype(i16).view(u16)))
op("v_cvt_pk_u16_u32", "u32", "u32 u32", lambda a, b: _pk16(np.minimum(a, 65535).astype(u16), np.minimum(b, 65535).astype(u16)))
op("v_pack_b32_f16", "u32", "f16 f16", lambda a, b: _pk16(np.asarray(a, f16).view(u16), np.asarray(b, f16).view(u16)))

def _pk16(lo, hi):
  return np.asarray(lo).astype(u32) | (np.asarray(hi).astype(u32) << u32(16))

def _rtz16(a):
  h = np.asarray(a, f32).astype(f16)
  back = h.astype(f32)
  away = np.isfinite(a) & (np.abs(back) > np.abs(a))
  h = np.where(away, np.nextafter(h, f16(0)), h)
  return np.where(np.isinf(h) & np.isfinite(a), np.copysign(f16(65504), a).astype(f16), h).astype(f16).view(u16)

# ---- integer ------------------------------------------------------------------------------------------------------
for t in ("u16", "u32", "i16", "i32"):
  T = TYPES[t]
  op(f"v_add_{t}", t, f"{t} {t}", lambda a, b: a + b)
  op(f"v_sub_{t}", t, f"{t} {t}", lambda a, b: a - b)
  op(f"v_max_{t}", t, f"{t} {t}", np.maximum)
  op(f"v_min_{t}", t, f"{t} {t}", np.minimum)
  op(f"v_max3_{t}", t, f"{t} {t} {t}", lambda a, b, c: np.maximum(np.maximum(a, b), c))
  op(f"v_min3_{t}", t, f"{t} {t} {t}", lambda a, b, c: np.minimum(np.minimum(a, b), c))
  op(f"v_med3_{t}", t, f"{t} {t} {t}", _imed3)
for t in ("u16", "u32", "u64"):
  T = TYPES[t]
  b = {"u16": "b16", "u32": "b32", "u64": "b64"}[t]
  op(f"v_lshlrev_{b}", t, f"u32 {t}", lambda s, x, T=T: x << (np.asarray(s, u32) & u32(_sh(T))).astype(T))
  op(f"v_lshrrev_{b}", t, f"u32 {t}", lambda s, x, T=T: x >> (np.asarray(s, u32) & u32(_sh(T))).astype(T))
op("v_ashrrev_i16", "i16", "u32 i16", lambda s, x: x >> (np.asarray(s, u32) & u32(15)).astype(i16))
op("v_ashrrev_i32", "i32", "u32 i32", lambda s, x: x >> (np.asarray(s, u32) & u32(31)).astype(i32))
op("v_ashrrev_i64", "i64", "u32 i64", lambda s, x: x >> (np.asarray(s, u32) & u32(63)).astype(i64))
op("v_lshl_b64", "u64", "u64 u32", lambda x, s: x << (np.asarray(s, u32) & u32(63)).astype(u64))
op("v_add_nc_u32", "u32", "u32 u32", lambda a, b: a + b)
op("v_sub_nc_u32", "u32", "u32 u32", lambda a, b: a - b)
op("v_subrev_nc_u32", "u32", "u32 u32", lambda a, b: b - a)
op("v_add_nc_i32", "i32", "i32 i32", lambda a, b: a + b)
op("v_sub_nc_i32", "i32", "i32 i32", lambda a, b: a - b)
op("v_add_nc_u16", "u16", "u16 u16", lambda a, b: a + b)
op("v_subrev_u16", "u16", "u16 u16", lambda a, b: b - a)   # GFX9 (gfx11 has no reversed 16-bit subtract)
op("v_sub_nc_u16", "u16", "u16 u16", lambda a, b: a - b)
op("v_add_nc_i16", "i16", "i16 i16", lambda a, b: a + b)
op("v_sub_nc_i16", "i16", "i16 i16", lambda a, b: a - b)
op("v_mul_lo_u16", "u16", "u16 u16", lambda a, b: a * b)
op("v_mul_lo_u32", "u32", "u32 u32", lambda a, b: a * b)
op("v_mul_hi_u32", "u32", "u32 u32", lambda a, b: _mul_hi(a, b, False))
op("v_mul_hi_i32", "i32", "i32 i32", lambda a, b: _mul_hi(a, b, True))
op("v_mul_u32_u24", "u32", "u32 u32", lambda a, b: (a & u32(0xffffff)) * (b & u32(0xffffff)))
op("v_mul_i32_i24", "i32", "u32 u32", lambda a, b: (_s24(a) * _s24(b)).astype(i32))
op("v_mul_hi_u32_u24", "u32", "u32 u32", lambda a, b: (((a & u32(0xffffff)).astype(u64) * (b & u32(0xffffff)).astype(u64)) >> u64(32)).astype(u32))
op("v_mul_hi_i32_i24", "i32", "u32 u32", lambda a, b: ((_s24(a) * _s24(b)) >> 32).astype(i32))
op("v_mad_u32_u24", "u32", "u32 u32 u32", lambda a, b, c: (a & u32(0xffffff)) * (b & u32(0xffffff)) + c)
op("v_mad_i32_i24", "i32", "u32 u32 i32", lambda a, b, c: (_s24(a) * _s24(b) + c).astype(i32))
op("v_mad_u16", "u16", "u16 u16 u16", lambda a, b, c: a * b + c)
op("v_mad_i16", "i16", "i16 i16 i16", lambda a, b, c: a * b + c)
op("v_mad_u32_u16", "u32", "u16 u16 u32", lambda a, b, c: a.astype(u32) * b.astype(u32) + c)
op("v_mad_i32_i16", "i32", "i16 i16 i32", lambda a, b, c: a.astype(i32) * b.astype(i32) + c)
op("v_and_b32", "u32", "u32 u32", lambda a, b: a & b)
op("v_or_b32", "u32", "u32 u32", lambda a, b: a | b)
op("v_xor_b32", "u32", "u32 u32", lambda a, b: a ^ b)
op("v_xnor_b32", "u32", "u32 u32", lambda a, b: ~(a ^ b))
op("v_and_b16", "u16", "u16 u16", lambda a, b: a & b)
op("v_or_b16", "u16", "u16 u16", lambda a, b: a | b)
op("v_xor_b16", "u16", "u16 u16", lambda a, b: a ^ b)
op("v_not_b16", "u16", "u16", lambda a: ~a)
op("v_not_b32", "u32", "u32", lambda a: ~a)
op("v_mov_b32", "u32", "u32", lambda a: a)
op("v_mov_b16", "u16", "u16", lambda a: a)
op("v_mov_b64", "u64", "u64", lambda a: a)
op("v_bfrev_b32", "u32", "u32", _brev32)
op("v_clz_i32_u32", "u32", "u32", _clz32)
op("v_ctz_i32_b32", "u32", "u32", _ctz32)
op("v_cls_i32", "u32", "u32", _cls)
op("v_bcnt_u32_b32", "u32", "u32 u32", lambda a, b: _popc32(a) + b)
op("v_bfe_u32", "u32", "u32 u32 u32", lambda x, o, w: _bfe(x, o, w, False))
op("v_bfe_i32", "u32", "u32 u32 u32", lambda x, o, w: _bfe(x, o, w, True))
op("v_bfi_b32", "u32", "u32 u32 u32", lambda m, a, b: (m & a) | (~m & b))
op("v_bfm_b32", "u32", "u32 u32", lambda w, o: ((u32(1) << (w & u32(31))) - u32(1)) << (o & u32(31)))
op("v_alignbit_b32", "u32", "u32 u32 u32", lambda a, b, s: (((a.astype(u64) << u64(32)) | b.astype(u64)) >> (np.asarray(s, u32) & u32(31)).astype(u64)).astype(u32))
op("v_alignbyte_b32", "u32", "u32 u32 u32", lambda a, b, s: (((a.astype(u64) << u64(32)) | b.astype(u64)) >> ((np.asarray(s, u32) & u32(3)) * u32(8)).astype(u64)).astype(u32))
op("v_perm_b32", "u32", "u32 u32 u32", _perm)
op("v_lshl_or_b32", "u32", "u32 u32 u32", lambda a, s, c: (a << (s & u32(31))) | c)
op("v_lshl_add_u32", "u32", "u32 u32 u32", lambda a, s, c: (a << (s & u32(31))) + c)
op("v_add_lshl_u32", "u32", "u32 u32 u32", lambda a, b, s: (a + b) << (s & u32(31)))
op("v_and_or_b32", "u32", "u32 u32 u32", lambda a, b, c: (a & b) | c)
op("v_or3_b32", "u32", "u32 u32 u32", lambda a, b, c: a | b | c)
op("v_xor3_b32", "u32", "u32 u32 u32", lambda a, b, c: a ^ b ^ c)
op("v_add3_u32", "u32", "u32 u32 u32", lambda a, b, c: a + b + c)
op("v_xad_u32", "u32", "u32 u32 u32", lambda a, b, c: (a ^ b) + c)
op("v_sad_u32", "u32", "u32 u32 u32", lambda a, b, c: _sad(a, b) + c)
op("v_lshlrev_b64", "u64", "u32 u64", lambda s, x: x << (np.asarray(s, u32) & u32(63)).astype(u64))
op("v_lshl_add_u64", "u64", "u64 u32 u64", lambda x, s, c: (x << (np.asarray(s, u32) & u32(7)).astype(u64)) + c)   # gfx940/gfx12
op("v_lshrrev_b64", "u64", "u32 u64", lambda s, x: x >> (np.asarray(s, u32) & u32(63)).astype(u64))
op("v_add_f64", "f64", "f64 f64", lambda a, b: a + b)
op("v_sub_nc_u64", "u64", "u64 u64", lambda a, b: a - b)
op("v_add_nc_u64", "u64", "u64 u64", lambda a, b: a + b)
op("v_mul_u64", "u64", "u64 u64", lambda a, b: a * b)
op("v_sext_i32_i16", "i32", "i16", lambda a: a.astype(i32))

def _s24(a):
  a = np.asarray(a, u32).astype(i64) & 0xffffff
  return np.where(a >= 0x800000, a - 0x1000000, a)

# ---- compares (VOPC), each producing a lane mask ------------------------------------------------------------------
def _cmps(t: str, fl: bool):
  un = lambda a, b: np.isnan(a) | np.isnan(b)
  base = {"f": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool), "lt": np.less, "eq": np.equal, "le": np.less_equal,
          "gt": np.greater, "ge": np.greater_equal, "t": lambda a, b: np.ones(np.broadcast(a, b).shape, bool)}
  if fl:
    base.update({"lg": lambda a, b: (a != b) & ~un(a, b), "o": lambda a, b: ~un(a, b), "u": un,
                 "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a != b) & ~un(a, b)), "ngt": lambda a, b: ~(a > b),
                 "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b)})
  else:
    base["ne"] = np.not_equal
  return base

CMP: dict[str, tuple[str, callable]] = {}
for t in ("f16", "f32", "f64", "i16", "i32", "i64", "u16", "u32", "u64"):
  for c, f in _cmps(t, t[0] == "f").items():
    CMP[f"v_cmp_{c}_{t}"] = (t, f)
    CMP[f"v_cmpx_{c}_{t}"] = (t, f)

def _class(x, mask):
  """v_cmp_class: bit tests of the value's IEEE class (0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denorm, 5 -0, 6 +0,
  7 +denorm, 8 +normal, 9 +inf)."""
  x = np.asarray(x)
  m = np.asarray(mask).astype(u32)
  bits = x.view(BITS[x.dtype.itemsize * 8])
  quiet_bit = {2: 0x200, 4: 0x400000, 8: 0x8000000000000}[x.dtype.itemsize]
  nan = np.isnan(x)
  q = nan & ((bits & bits.dtype.type(quiet_bit)) != 0)
  tiny = np.finfo(x.dtype).tiny
  neg = np.signbit(x)
  fin = np.isfinite(x)
  den = fin & (x != 0) & (np.abs(x) < tiny)
  nor = fin & (np.abs(x) >= tiny)
  cls = [nan & ~q, q, np.isinf(x) & neg, nor & neg, den & neg, (x == 0) & neg, (x == 0) & ~neg, den & ~neg, nor & ~neg,
         np.isinf(x) & ~neg]
  r = np.zeros(np.broadcast(x, m).shape, bool)
  for k, c in enumerate(cls): r |= c & ((m >> u32(k)) & u32(1)).astype(bool)
  return r

for t in ("f16", "f32", "f64"):
  CMP[f"v_cmp_class_{t}"] = (t, _class)
  CMP[f"v_cmpx_class_{t}"] = (t, _class)

# min/max combinations, and gfx12's NaN-propagating IEEE 754-2019 minimum/maximum
def _nanprop(f):
  return lambda a, b: np.where(np.isnan(a) | np.isnan(b), a + b, f(a, b))
for t in ("f16", "f32", "f64"):
  op(f"v_maximum_{t}", t, f"{t} {t}", _nanprop(np.maximum))
  op(f"v_minimum_{t}", t, f"{t} {t}", _nanprop(np.minimum))
  op(f"v_maximum3_{t}", t, f"{t} {t} {t}", lambda a, b, c: _nanprop(np.maximum)(_nanprop(np.maximum)(a, b), c))
  op(f"v_minimum3_{t}", t, f"{t} {t} {t}", lambda a, b, c: _nanprop(np.minimum)(_nanprop(np.minimum)(a, b), c))
for t in ("f16", "f32"):
  for pre in ("", "_num"):
    op(f"v_maxmin{pre}_{t}", t, f"{t} {t} {t}", lambda a, b, c: _fmin(_fmax(a, b), c))
    op(f"v_minmax{pre}_{t}", t, f"{t} {t} {t}", lambda a, b, c: _fmax(_fmin(a, b), c))
for t in ("i32", "u32"):
  op(f"v_maxmin_{t}", t, f"{t} {t} {t}", lambda a, b, c: np.minimum(np.maximum(a, b), c))
  op(f"v_minmax_{t}", t, f"{t} {t} {t}", lambda a, b, c: np.maximum(np.minimum(a, b), c))

op("v_sin_f16", "f16", "f16", lambda a: np.sin(2 * np.pi * a.astype(f64)).astype(f16))
op("v_cos_f16", "f16", "f16", lambda a: np.cos(2 * np.pi * a.astype(f64)).astype(f16))
op("v_cvt_pk_u8_f32", "u32", "f32 u32 u32", lambda a, s, c: (c & ~(u32(0xff) << ((s & u32(3)) * u32(8)))) |
   (np.clip(np.rint(np.nan_to_num(a.astype(f64))), 0, 255).astype(u32) << ((s & u32(3)) * u32(8))))
op("v_sad_u8", "u32", "u32 u32 u32", lambda a, b, c: c + sum(_sad((a >> u32(8 * k)) & u32(0xff), (b >> u32(8 * k)) & u32(0xff)) for k in range(4)))
op("v_sad_u16", "u32", "u32 u32 u32", lambda a, b, c: c + sum(_sad((a >> u32(16 * k)) & u32(0xffff), (b >> u32(16 * k)) & u32(0xffff)) for k in range(2)))
def _dot2acc(a, b, c):
  from rawgpu.drivers.emu.shader.dot import halves, float_dot
  return float_dot(zip(halves(a, "f16", 0, 0), halves(b, "f16", 0, 0)), np.asarray(c, f32).astype(f64)).astype(f32)
op("v_dot2acc_f32_f16", "f32", "u32 u32 f32", _dot2acc)  # gfx11 VOP2 (and VOPD): vdst accumulates

# GFX9's "legacy" 16-bit forms are GFX8's encodings of the same operations (without op_sel): the result zeroes the
# register's high half, which compile.py does for every 16-bit GFX9 result outside gfx9.KEEPS_HIGH_HALF
for _legacy, _op in (("v_mad_legacy_u16", "v_mad_u16"), ("v_mad_legacy_i16", "v_mad_i16"), ("v_fma_legacy_f16", "v_fma_f16")):
  VOPS[_legacy] = VOPS[_op]
