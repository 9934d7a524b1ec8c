"""WMMA: D = A x B + C on 16x16x16 tiles held across the 32 lanes of a wave (wave32 only).

Layouts (AMD's RDNA3 WMMA guide on GPUOpen, LLVM AMDGPUUsage, RDNA3/RDNA4 ISA guides):
- gfx11: lane l holds row l % 16 of A and column l % 16 of B, all 16 K values (f16/bf16: 8 VGPRs, 2 per VGPR;
  iu8: 4 VGPRs; iu4: 2 VGPRs); lanes 16-31 repeat lanes 0-15. f32/i32 C/D: 8 VGPRs, VGPR v of lane l is element
  (2v + l // 16, l % 16); f16/bf16 C/D use the same places in the low half (op_sel[2] = 0) or the high half.
- gfx12: no repeat: lanes 0-15 hold K 0-7 and lanes 16-31 K 8-15 (half the registers). f32/i32 C/D: VGPR v of
  lane l is element (v + 8 * (l // 16), l % 16); f16/bf16 C/D: 4 VGPRs, element j = VGPR j // 2, half j % 2 at
  row j + 8 * (l // 16).
Float products are exact; each output's 16 products and C are summed in float64 with round-to-odd steps and rounded
once (the hardware's internal order and precision are not documented). iu8/iu4: neg_lo bit 0/1 makes A/B signed,
the sum is exact, clamp saturates."""
from __future__ import annotations

import numpy as np

from rawgpu.drivers.emu.shader.fpmath import round_odd_sum
from rawgpu.drivers.emu.shader.dot import to_bf16

f16, f32, f64 = np.float16, np.float32, np.float64
u16, u32, i64 = np.uint16, np.uint32, np.int64
ELEM_BITS = {"f16": 16, "bf16": 16, "iu8": 8, "iu4": 4, "f32": 32}

def elements(words: np.ndarray, kind: str, signed: bool) -> np.ndarray:
  """(W, L, nregs) uint32 -> (W, L, n) element values (float64 or int64), low bits first (also CDNA's MFMA)."""
  bits = ELEM_BITS[kind]
  per = 32 // bits
  e = np.stack([(words >> u32(bits * k)) & u32((1 << bits) - 1) for k in range(per)], -1)
  e = e.reshape(*words.shape[:2], -1)
  if kind == "f16": return e.astype(u16).view(f16).astype(f64)
  if kind == "bf16": return (e << u32(16)).view(f32).astype(f64)
  if kind == "f32": return e.view(f32).astype(f64)
  e = e.astype(i64)
  return np.where(e >= 1 << (bits - 1), e - (1 << bits), e) if signed else e

def operand(words: np.ndarray, kind: str, signed: bool, gfx12: bool, is_b: bool) -> np.ndarray:
  """A as (W, M, K) or B as (W, K, N) from the lanes' registers."""
  e = elements(words, kind, signed)                       # (W, 32, n)
  m = e[:, :16, :] if not gfx12 else np.concatenate([e[:, :16, :], e[:, 16:, :]], 2)   # (W, 16 rows/cols, 16 K)
  return np.swapaxes(m, 1, 2) if is_b else m

def acc_index(gfx12: bool, wide: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """(vgpr, half, row, col) for every (register slot, lane) of C/D, flattened."""
  lane = np.arange(32)
  out = []
  nslot = 8
  for j in range(nslot):
    if gfx12: row, reg, half = (j + 8 * (lane // 16), np.full(32, j), 0) if wide else (j + 8 * (lane // 16), np.full(32, j // 2), j % 2)
    else: row, reg, half = 2 * j + lane // 16, np.full(32, j), 0
    out.append((reg, np.broadcast_to(half, (32,)), row, lane % 16))
  return tuple(np.stack([o[k] for o in out]) for k in range(4))   # each (8, 32)

def matmul(a: np.ndarray, b: np.ndarray, c: np.ndarray, integer: bool) -> np.ndarray:
  if integer: return np.einsum("wmk,wkn->wmn", a, b) + c
  s = np.asarray(c, f64)
  with np.errstate(all="ignore"):
    for k in range(a.shape[2]): s = round_odd_sum(s, a[:, :, k, None] * b[:, None, k, :])
  return s

def to_half(x: np.ndarray, kind: str) -> np.ndarray:
  return to_bf16(x) if kind == "bf16" else np.asarray(x, f64).astype(f16).view(u16).astype(u32)

def half_value(h: np.ndarray, kind: str) -> np.ndarray:
  h = h & u32(0xffff)
  return (h << u32(16)).view(f32).astype(f64) if kind == "bf16" else h.astype(u16).view(f16).astype(f64)
