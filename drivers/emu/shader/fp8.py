"""CDNA3's 8-bit floats: FP8 = E4M3FNUZ (exponent bias 8) and BF8 = E5M2FNUZ (bias 16), the formats gfx940-942 use
(gfx950 and RDNA4 use the OCP formats instead). "FNUZ": no infinities, no negative zero; 0x80 is the only NaN.
Finite values: sign bit 7, then the exponent, then the mantissa; exponent 0 encodes subnormals.

decode: a table of the 256 values; encode: round to nearest even. An f32 beyond the largest finite value by half an
ulp or more, infinities and NaN become 0x80 (NaN); the ISA's clamp would saturate instead (not modelled); a value that
rounds to zero is +0 (0x00), whatever its sign.
"""
from __future__ import annotations
import functools
import numpy as np

FORMATS = {"fp8": (4, 3, 8), "bf8": (5, 2, 16)}   # exponent bits, mantissa bits, bias
NAN = 0x80


@functools.cache
def table(kind: str) -> np.ndarray:
  """float64 value of each of the 256 codes (NaN at 0x80)."""
  e_bits, m_bits, bias = FORMATS[kind]
  code = np.arange(256)
  e, m = (code >> m_bits) & ((1 << e_bits) - 1), code & ((1 << m_bits) - 1)
  mag = np.where(e == 0, m / (1 << m_bits) * 2.0 ** (1 - bias), (1 + m / (1 << m_bits)) * 2.0 ** (e - bias))
  out = np.where(code >= 128, -mag, mag)
  out[NAN] = np.nan
  return out


def decode(codes, kind: str) -> np.ndarray:
  """float32 values of uint8-range codes."""
  return table(kind)[np.asarray(codes, np.int64) & 0xff].astype(np.float32)


def encode(x, kind: str) -> np.ndarray:
  """Codes (uint32, 0-255) of float32 values, rounded to nearest even."""
  pos = table(kind)[:128]                                  # codes 0-127: 0 and the positive values, increasing
  a = np.abs(np.asarray(x, np.float64))
  hi = np.clip(np.searchsorted(pos, a), 1, 127)
  lo = hi - 1
  dl, dh = a - pos[lo], pos[hi] - a
  code = np.where((dh < dl) | ((dh == dl) & (hi % 2 == 0)), hi, lo)
  top = pos[127] + (pos[127] - pos[126]) / 2               # half an ulp above the largest: rounds up, past it
  code = np.where(a >= top, NAN, code)
  code = np.where((np.signbit(x) & (code != 0) & (code != NAN)), code | 0x80, code)
  return np.where(np.isnan(a), NAN, code).astype(np.uint32)
