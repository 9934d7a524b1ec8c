"""Dot products (VOP3P v_dot2/4/8_*, VOP3 v_dot2_f16_f16 / v_dot2_bf16_bf16): packed elements of src0 and src1
multiplied pairwise and summed with src2.

Integer forms: neg_lo bit 0/1 makes src0/src1 elements signed (iu8/iu4); the sum is exact and clamp saturates it to
the result type. Float forms: the products are exact, the sum is formed in float64 with round-to-odd steps and
rounded once to the result type (the ISA does not document intermediate roundings; see README). bf16 elements are
the high half of an f32, so widening them is exact; a bf16 result is rounded to nearest even (NaN -> 0x7fc0)."""
from __future__ import annotations

import numpy as np

from rawgpu.drivers.emu.shader.fpmath import round_odd_sum

f16, f32, f64 = np.float16, np.float32, np.float64
u16, u32, u64, i64 = np.uint16, np.uint32, np.uint64, np.int64

def elements(x, bits: int, signed: bool) -> list[np.ndarray]:
  """The 32 // bits packed integer elements of x, low first, as int64."""
  x = np.asarray(x, u32).astype(i64)
  out = []
  for k in range(32 // bits):
    e = (x >> (bits * k)) & ((1 << bits) - 1)
    if signed: e = np.where(e >= 1 << (bits - 1), e - (1 << bits), e)
    out.append(e)
  return out

def int_dot(a, b, c, bits: int, sa: bool, sb: bool, clamp: bool) -> np.ndarray:
  s = sum(x * y for x, y in zip(elements(a, bits, sa), elements(b, bits, sb)))
  signed = sa or sb
  acc = np.asarray(c, u32).view(np.int32).astype(i64) if signed else np.asarray(c, u32).astype(i64)
  s = s + acc
  if clamp: s = np.clip(s, -2**31, 2**31 - 1) if signed else np.clip(s, 0, 2**32 - 1)
  return (s & 0xffffffff).astype(u32)

def halves(x, kind: str, neg_lo: int, neg_hi: int, sel_lo: int = 0, sel_hi: int = 1) -> tuple[np.ndarray, np.ndarray]:
  """The two 16-bit float elements of x (f16 or bf16) as float64, picked by op_sel and negated by neg_lo/neg_hi."""
  x = np.asarray(x, u32)
  def one(sel, neg):
    h = ((x >> u32(16)) if sel else x) & u32(0xffff)
    v = (h << u32(16)).view(f32).astype(f64) if kind == "bf16" else h.astype(u16).view(f16).astype(f64)
    return -v if neg else v
  return one(sel_lo, neg_lo), one(sel_hi, neg_hi)

def float_dot(pairs, c: np.ndarray) -> np.ndarray:
  """sum of products + c in float64, each addition rounded to odd: exact for the usual spans of magnitudes, and
  rounding the result once to f32/f16/bf16 gives the nearest value of the exact sum there."""
  with np.errstate(all="ignore"):
    s = np.asarray(c, f64)
    for x, y in pairs: s = round_odd_sum(s, x * y)
  return s

def to_bf16(x) -> np.ndarray:
  """float64 -> bf16 bits, nearest even (through f32: 53 -> 24 -> 8 bits, the double rounding is innocuous)."""
  b = np.asarray(x, f64).astype(f32).view(u32)
  r = (b + u32(0x7fff) + ((b >> u32(16)) & u32(1))) >> u32(16)
  return np.where(np.isnan(np.asarray(x, f64)), u32(0x7fc0), r & u32(0xffff)).astype(u32)
