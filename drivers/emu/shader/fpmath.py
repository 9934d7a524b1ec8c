"""Floating-point helpers the hardware has and numpy lacks: fused multiply-add with one rounding, and the
division helpers (div_scale / div_fmas / div_fixup) LLVM's correctly rounded division is built from."""
from __future__ import annotations
from fractions import Fraction

import numpy as np

f16, f32, f64 = np.float16, np.float32, np.float64
u32, u64, i64 = np.uint32, np.uint64, np.int64

def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  s = a + b
  bb = s - a
  return s, (a - (s - bb)) + (b - bb)

def round_odd_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """a + b in float64, rounded to odd: exact results stay, inexact ones get an odd last mantissa bit. Rounding that
  to any precision of at most 51 bits gives the correctly rounded a + b."""
  s, e = two_sum(a, b)
  fix = np.isfinite(s) & (e != 0) & ((s.view(u64) & u64(1)) == 0)
  if fix.any():
    s = np.where(fix, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
  return s

def fma_narrow(a, b, c, out_type, scale=None) -> np.ndarray:
  """fma for f32/f16 operands: the product is exact in float64, the sum is rounded to odd, then (optionally scaled
  by a power of two, exactly) rounded once to out_type."""
  a, b, c = (np.asarray(x, f64) for x in (a, b, c))
  with np.errstate(all="ignore"):
    if scale is None and out_type == f32:
      # fast path: one float64 rounding can only mislead the float32 one when it lands exactly on a float32
      # rounding midpoint (or in the subnormal range); only those lanes take the round-to-odd path
      s = a * b + c
      r = s.astype(f32)
      bits = s.view(u64) if s.ndim else np.asarray(s).view(u64)
      odd = ((bits & u64(0x1fffffff)) == u64(0x10000000)) | (np.abs(s) < 2.0 ** -125)
      if odd.any():
        ab = np.broadcast_arrays(a, b, c)
        slow = round_odd_sum(ab[0][odd] * ab[1][odd], ab[2][odd]).astype(f32)
        r = np.array(r, copy=True)
        r[odd] = slow
      return r
    s = round_odd_sum(a * b, np.broadcast_to(c, np.broadcast(a, b, c).shape))
    if scale is not None: s = np.ldexp(s, scale)
    return s.astype(out_type)

_SPLIT = f64(134217729.0)  # 2^27 + 1 (Veltkamp)

def two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  p = a * b
  t = _SPLIT * a; ah = t - (t - a); al = a - ah
  t = _SPLIT * b; bh = t - (t - b); bl = b - bh
  return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl

def _exact_fma(a: float, b: float, c: float) -> float:
  return float(Fraction(a) * Fraction(b) + Fraction(c))  # Fraction -> float rounds to nearest even

def fma64(a, b, c) -> np.ndarray:
  """Correctly rounded float64 fma (Boldo & Melquiond's emulation with rounding to odd); operands whose exponent
  range the error-free transforms cannot cover take an exact rational path."""
  a, b, c = np.broadcast_arrays(*(np.asarray(x, f64) for x in (a, b, c)))
  with np.errstate(all="ignore"):
    uh, ul = two_prod(a, b)
    th, tl = two_sum(c, uh)
    z = th + round_odd_sum(tl, ul)
    plain = a * b + c
    fin = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    ok = fin & (np.abs(a) < 2.0 ** 500) & (np.abs(b) < 2.0 ** 500) & (np.abs(c) < 2.0 ** 1000) & \
         ((np.abs(uh) > 2.0 ** -900) | (uh == 0) & (a == 0) | (uh == 0) & (b == 0))
    z = np.where(ok, z, plain)
    # a finite product is exact inside a fused op, so it cannot overflow to an infinity that meets c's: an infinite c
    # is the result (a * b + c in float64 gave NaN where the rounded product overflowed against c's sign)
    z = np.where(np.isinf(c) & np.isfinite(a) & np.isfinite(b), c, z)
    z = np.where(ok & (z == 0), plain, z)  # sign of an exact zero follows IEEE's rule, as plain arithmetic does
    slow = fin & ~ok
  if slow.any():
    z = np.array(z, copy=True)
    for k in zip(*np.nonzero(slow)):
      try: z[k] = _exact_fma(float(a[k]), float(b[k]), float(c[k]))
      except OverflowError: z[k] = np.copysign(np.inf, float(a[k]) * float(b[k]) + float(c[k]))
      if z[k] == 0: z[k] = plain[k]
  return z

# ---- division helpers (RDNA ISA pseudocode) -------------------------------------------------------------------
def _exp(x: np.ndarray, bits: int, mant: int) -> np.ndarray:
  raw = x.view(u32 if bits == 32 else u64)
  return ((raw >> (u32(mant) if bits == 32 else u64(mant))) & ((1 << (bits - mant - 1)) - 1)).astype(np.int64)

def _denorm(x, ftype) -> np.ndarray:
  return (x != 0) & (np.abs(x) < np.finfo(ftype).tiny)

def div_scale(s0, s1, s2, ftype) -> tuple[np.ndarray, np.ndarray]:
  """(scaled value, vcc) for v_div_scale_f32/f64: s1 denominator, s2 numerator, s0 one of them (ISA pseudocode)."""
  bits, mant = (32, 23) if ftype == f32 else (64, 52)
  big, tiny, sc = (96, 23, 64) if bits == 32 else (768, 53, 128)
  s0, s1, s2 = np.broadcast_arrays(*(np.asarray(x, ftype) for x in (s0, s1, s2)))
  U = u32 if bits == 32 else u64
  with np.errstate(all="ignore"):
    e1, e2 = _exp(s1, bits, mant), _exp(s2, bits, mant)
    rden = _denorm(f64(1.0) / s1.astype(f64), ftype)   # computed in double, checked against the type's denormal range
    qden = _denorm(s2 / s1, ftype)
    up, down = np.ldexp(s0, sc).astype(ftype), np.ldexp(s0, -sc).astype(ftype)
    is_s1, is_s2 = s0.view(U) == s1.view(U), s0.view(U) == s2.view(U)
    zero = (s2 == 0) | (s1 == 0)
    c1 = ~zero & (e2 - e1 >= big)
    rest = ~zero & ~c1
    c2 = rest & _denorm(s1, ftype); rest &= ~c2
    c3 = rest & rden & qden; rest &= ~c3
    c4 = rest & rden; rest &= ~c4
    c5 = rest & qden; rest &= ~c5
    c6 = rest & (e2 <= tiny)
    d = np.where(zero, ftype(np.nan), s0)
    # a quotient near the largest value: the denominator up; a denormal reciprocal and quotient: the denominator down,
    # so its reciprocal is normal and the quotient 2^sc times too large (div_fmas scales it back, VCC set)
    d = np.where((c1 & is_s1) | c2 | c6 | (c5 & is_s2), up, d)
    d = np.where(c4 | (c3 & is_s1), down, d)
  return d.astype(ftype), c1 | c3 | c5

def div_fmas(s0, s1, s2, vcc, ftype) -> np.ndarray:
  """fma, then when VCC undo div_scale's scaling: up if the quotient estimate s2 is >= 1, else down."""
  bits, mant = (32, 23) if ftype == f32 else (64, 52)
  bias, sc = (127, 64) if bits == 32 else (1023, 128)
  e = _exp(np.asarray(s2, ftype), bits, mant)
  k = np.where(np.asarray(vcc), np.where(e >= bias, sc, -sc), 0)
  if ftype == f32: return fma_narrow(s0, s1, s2, f32, k)  # one rounding, after the scaling
  with np.errstate(all="ignore"):
    r = np.ldexp(fma64(s0, s1, s2), k).astype(ftype)
  # scaled down into the subnormal range, the rounded fma would round a second time: those lanes, exactly, once
  tiny = np.isfinite(r) & (r != 0) & (np.abs(r) < 2.0 ** -1022) & (k < 0)
  return np.where(tiny, _scaled_fma_exact(s0, s1, s2, k, tiny, r), r) if tiny.any() else r

def _scaled_fma_exact(a, b, c, k, where, like) -> np.ndarray:
  """(a * b + c) * 2**k rounded once to float64 (a subnormal result) where `where` is set; int / int is correctly
  rounded in Python, so float() of the exact rational is."""
  from fractions import Fraction
  import math
  a, b, c, k, like = np.broadcast_arrays(*(np.asarray(x, f64) for x in (a, b, c)), np.asarray(k), np.asarray(like, f64))
  out = np.zeros(a.shape, f64)
  for idx in zip(*np.nonzero(np.broadcast_to(where, a.shape))):
    exact = (Fraction(float(a[idx])) * Fraction(float(b[idx])) + Fraction(float(c[idx]))) * Fraction(2) ** int(k[idx])
    out[idx] = math.copysign(float(exact), float(like[idx]))
  return out

def div_fixup(s0, s1, s2, ftype) -> np.ndarray:
  """s0 quotient estimate, s1 denominator, s2 numerator: the IEEE special cases of s2 / s1 (ISA pseudocode)."""
  bits, mant = (32, 23) if ftype == f32 else (64, 52)
  U = u32 if bits == 32 else u64
  s0, s1, s2 = np.broadcast_arrays(*(np.asarray(x, ftype) for x in (s0, s1, s2)))
  quiet = U(1 << (mant - 1))
  with np.errstate(all="ignore"):
    neg = np.signbit(s1) ^ np.signbit(s2)
    inf = np.where(neg, -np.inf, np.inf).astype(ftype)
    zero = np.where(neg, ftype(-0.0), ftype(0.0))
    e1, e2 = _exp(s1, bits, mant), _exp(s2, bits, mant)
    d = np.where(neg, -np.abs(s0), np.abs(s0)).astype(ftype)
    d = np.where(np.isnan(s0), inf, d)                                  # the iteration overflowed
    d = np.where(e1 == (1 << (bits - mant - 1)) - 1, inf, d)
    d = np.where(e2 - e1 < -(150 if bits == 32 else 1075), zero, d)
    d = np.where((np.abs(s1) == np.inf) | (s2 == 0), zero, d)
    d = np.where((s1 == 0) | (np.abs(s2) == np.inf), inf, d)
    dnan = np.array(0xffc00000 if bits == 32 else 0xfff8000000000000, U).view(ftype)
    d = np.where(((s1 == 0) & (s2 == 0)) | ((np.abs(s1) == np.inf) & (np.abs(s2) == np.inf)), dnan, d)
    d = np.where(np.isnan(s1), (s1.view(U) | quiet).view(ftype), d)
    d = np.where(np.isnan(s2), (s2.view(U) | quiet).view(ftype), d)
  return d.astype(ftype)
