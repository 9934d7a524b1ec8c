"""The MODE register's float controls (HW_REG_MODE bits [7:0]) applied to VALU operations.

FP_ROUND [3:0]: [1:0] f32, [3:2] f16/f64; 0 nearest even, 1 +inf, 2 -inf, 3 zero.
FP_DENORM [7:4]: [5:4] f32, [7:6] f16/f64; bit 0 of a pair keeps denormal inputs, bit 1 keeps denormal results
(0 flush both, 1 flush results, 2 flush inputs, 3 keep both). A flushed denormal becomes a zero of its sign.

Every instruction checks the mode at run time: when the bits it depends on hold the default (nearest even, denormals
kept) it runs the plain numpy path; otherwise `slow` flushes the inputs, rounds in the directed mode from an exact
error term, and flushes the result."""
from __future__ import annotations
from fractions import Fraction
from typing import Callable

import numpy as np

from rawgpu.drivers.emu.shader.fpmath import two_sum, two_prod

f16, f32, f64 = np.float16, np.float32, np.float64
MODE_REG = 1           # hwreg id of MODE
DEFAULT = 0xF0         # nearest even, denormals kept for every type: what clang emits by default

def _shift(T) -> int:
  return 0 if T == f32 else 2

def relevant(types) -> tuple[int, int]:
  """(mask, default bits) of the MODE bits an operation on these float types depends on."""
  mask = 0
  for T in types: mask |= (3 | 3 << 4) << _shift(T)
  return mask, DEFAULT & mask

def _flush(x, T, m, keep_bit: int):
  """Denormals of type T to zeros of their sign, for the waves whose mode (m, (W, 1)) clears FP_DENORM bit keep_bit."""
  x = np.asarray(x, T)
  keep = ((m >> (keep_bit + _shift(T))) & 1) == 1
  den = (x != 0) & (np.abs(x) < np.finfo(T).tiny)
  return np.where(den & ~keep, np.copysign(T(0), x), x).astype(T)

def flush_in(x, T, m): return _flush(x, T, m, 4)    # FP_DENORM bit 0 of the pair: keep denormal inputs
def flush_out(x, T, m): return _flush(x, T, m, 5)   # bit 1: keep denormal results

def _exact_err(kind: str, args, T, r0):
  """The sign-carrying error (exact result - r0) for each lane, as float64 (0: r0 is exact)."""
  a = [np.asarray(x).astype(f64) for x in args]
  r = np.asarray(r0).astype(f64)
  if kind == "cvt": return a[0] - r                       # every source (f64, f32, 32-bit int) is exact in f64
  if kind in ("add", "sub", "subrev"):
    x, y = (a[0], a[1]) if kind == "add" else (a[0], -a[1]) if kind == "sub" else (a[1], -a[0])
    s, e = two_sum(x, y)
    return (s - r) + e
  if kind == "mul":
    if T != f64: return a[0] * a[1] - r                 # the product of two f32/f16 values is exact in f64
    p, e = two_prod(a[0], a[1])
    d = (p - r) + e
    tiny = np.broadcast_to(np.abs(p) < 2.0 ** -960, d.shape) & (np.broadcast_to(a[0] * a[1] != 0, d.shape) | (p == 0))
    return _exact_sign(d, tiny, lambda x, y: x * y, a, r)   # the error term underflows there: exact rationals
  if T != f64:                                          # fma: the product is exact, the sum error-free
    s, e = two_sum(a[0] * a[1], a[2])
    return (s - r) + e
  fin = np.ones(np.broadcast(*a, r).shape, bool)
  for x in (*a, r): fin = fin & np.isfinite(x)
  return _exact_sign(np.zeros(fin.shape), fin, lambda x, y, z: x * y + z, a, r)   # f64 fma: exact, lane by lane

def _exact_sign(d: np.ndarray, lanes: np.ndarray, f: Callable, a, r) -> np.ndarray:
  """d with the lanes selected replaced by the sign of f(*a) - r computed in exact rationals."""
  d = np.array(np.broadcast_to(d, lanes.shape), f64)
  A = np.broadcast_arrays(*a, r, d)
  for k in zip(*np.nonzero(lanes)):
    x = f(*[Fraction(float(v[k])) for v in A[:-2]]) - Fraction(float(A[-2][k]))
    d[k] = (x > 0) - (x < 0)
  return d

def directed(kind: str, fn: Callable, args, T, rm):
  """fn(*args) rounded in mode rm ((W, 1) or scalar round field): the nearest-even result moved one step when the
  exact result lies on the other side of it in the mode's direction."""
  r0 = np.asarray(fn(*args), T)
  with np.errstate(all="ignore"):
    d = _exact_err(kind, args, T, r0)
    fin = np.ones(np.shape(d), bool)
    for x in args: fin = fin & np.isfinite(np.asarray(x).astype(f64)) if np.asarray(x).dtype.kind == "f" else fin
    d = np.where(np.isinf(r0) & fin, -r0.astype(f64), d)   # overflowed from finite operands
    d = np.where(np.isnan(d), 0.0, d)
    up = ((rm == 1) & (d > 0)) | ((rm == 3) & (d > 0) & (r0 < 0))
    down = ((rm == 2) & (d < 0)) | ((rm == 3) & (d < 0) & (r0 > 0))
    r = np.where(up, np.nextafter(r0, T(np.inf)), np.where(down, np.nextafter(r0, T(-np.inf)), r0))
    if kind in ("add", "sub", "subrev", "fma"):
      # an exact zero sum is -0 rounding toward -inf unless every addend is +0: the negated sum, negated
      neg = [-np.asarray(x) for x in args]
      if kind == "fma": neg[1] = args[1]
      rz = -np.asarray(fn(*neg), T)
      r = np.where((rm == 2) & (r0 == 0) & (d == 0), rz, r)
  return np.asarray(r, T)

def round_kind(name: str) -> str | None:
  for pre, kind in (("v_add_f", "add"), ("v_sub_f", "sub"), ("v_subrev_f", "subrev"), ("v_mul_f", "mul"),
                    ("v_fma_f", "fma"), ("v_fmac_f", "fma"), ("v_fmamk_f", "fma"), ("v_fmaak_f", "fma")):
    if name.startswith(pre) and name[len(pre) - 1:] in ("f16", "f32", "f64"): return kind
  if name in ("v_cvt_f32_f64", "v_cvt_f16_f32", "v_cvt_f32_i32", "v_cvt_f32_u32", "v_cvt_f16_i16", "v_cvt_f16_u16"):
    return "cvt"
  return None

# bit moves and classifications: the ISA does not flush their operands
NO_FLUSH = ("v_mov_", "v_frexp_", "v_pack_b32_f16", "v_cvt_pk_rtz", "v_cvt_pkrtz", "v_cndmask")

def modal(name: str, dty: str, stys: tuple[str, ...], fn: Callable, types: dict) -> Callable:
  """fn as a function of (state, *sources) that honours the wave's MODE."""
  ft = [t for t in (dty, *stys) if t[0] == "f"]
  if not ft or name.startswith(NO_FLUSH): return lambda st, *a: fn(*a)
  mask, base = relevant([types[t] for t in ft])
  kind = round_kind(name)
  D = types[dty] if dty[0] == "f" else None
  S = [types[t] if t[0] == "f" else None for t in stys]
  def slow(st, a):
    m = (st.hwreg[MODE_REG] & np.uint32(0xff)).astype(np.int64)[:, None]
    a = [flush_in(x, T, m) if T is not None else x for x, T in zip(a, S)]
    if kind is not None and D is not None:
      rm = (m >> _shift(D)) & 3
      r = directed(kind, fn, a, D, rm) if (rm != 0).any() else fn(*a)
    else: r = fn(*a)
    return flush_out(r, D, m) if D is not None else r
  def call(st, *a):
    m = st.fmode
    if m >= 0 and (m & mask) == base: return fn(*a)
    return slow(st, a)
  return call

def flush_cmp(T) -> Callable:
  """Compare inputs: flushed like any arithmetic input (v_cmp_class excepted)."""
  mask, base = relevant([T])
  def rd(st, x):
    m = st.fmode
    if m >= 0 and (m & mask) == base: return x
    return flush_in(x, T, (st.hwreg[MODE_REG] & np.uint32(0xff)).astype(np.int64)[:, None])
  return rd

def flush_io(T) -> tuple[Callable, Callable]:
  """(input flush, result flush) as functions of (state, value), for instructions built outside the VOPS table."""
  mask, base = relevant([T])
  def mode(st):
    m = st.fmode
    return None if m >= 0 and (m & mask) == base else (st.hwreg[MODE_REG] & np.uint32(0xff)).astype(np.int64)[:, None]
  def fin(st, x):
    m = mode(st)
    return x if m is None else flush_in(x, T, m)
  def fout(st, x):
    m = mode(st)
    return x if m is None else flush_out(x, T, m)
  return fin, fout
