"""CDNA3 matrix fused multiply-add (v_mfma_*): D = A x B + C on one M x N x K tile held across the 64 lanes of a wave.

Layouts (AMD's matrix instruction calculator, CBSZ = ABID = BLGP = 0), with e = K * M / 64 elements of A per lane:
- A (M x K): lane l, element j holds A[l % M][(l // M) * e + j]; B (K x N): B[(l // N) * e + j][l % N]. f16/bf16
  pack two elements in a register (low half first), i8 four (low byte first), f32 one.
- C/D (M x N, f32 or i32): M * N / 64 registers; register r of lane l holds element
  row (r // 4) * (4 * 64 // N) + 4 * (l // N) + r % 4, column l % N.
Float products are exact and each output's K products and C are summed in float64 with round-to-odd steps, rounded
once to f32 (as wmma.py: the hardware's internal order is not documented, so cancelling sums may differ from silicon
in the last bit); i8 products and sums are exact (wrapping to 32 bits). Denormals are kept. The broadcast controls
(CBSZ, ABID, BLGP) and the multi-block shapes are not modelled.
"""
from __future__ import annotations
import numpy as np

from rawgpu.drivers.emu.rdna.wmma import elements, matmul

u32, i64, f32, f64 = np.uint32, np.int64, np.float32, np.float64

# name -> (M, N, K, element kind of A and B); D is f32, or i32 for i8
SHAPES = {"v_mfma_f32_16x16x16_f16": (16, 16, 16, "f16"), "v_mfma_f32_32x32x8_f16": (32, 32, 8, "f16"),
          "v_mfma_f32_16x16x16_bf16": (16, 16, 16, "bf16"), "v_mfma_f32_32x32x8_bf16": (32, 32, 8, "bf16"),
          "v_mfma_f32_16x16x4_f32": (16, 16, 4, "f32"), "v_mfma_f32_32x32x2_f32": (32, 32, 2, "f32"),
          "v_mfma_i32_16x16x32_i8": (16, 16, 32, "i8"), "v_mfma_i32_32x32x16_i8": (32, 32, 16, "i8")}
_BITS = {"f16": 16, "bf16": 16, "f32": 32, "i8": 8}


def operand_registers(name: str) -> tuple[int, int]:
  """(registers per lane of A or B, of C or D)."""
  M, N, K, kind = SHAPES[name]
  return K * M // 64 * _BITS[kind] // 32, M * N // 64


def acc_place(M: int, N: int) -> tuple[np.ndarray, np.ndarray]:
  """(row, column) of C/D element held by register r of lane l, each shaped (M * N // 64, 64)."""
  r, lane = np.arange(M * N // 64)[:, None], np.arange(64)[None, :]
  return (r // 4) * (4 * 64 // N) + 4 * (lane // N) + r % 4, np.broadcast_to(lane % N, (M * N // 64, 64))


def mfma(name: str, a_words: np.ndarray, b_words: np.ndarray, c_words: np.ndarray) -> np.ndarray:
  """D's registers (W, 64, M * N // 64) uint32 from A's, B's and C's (W, 64, n) uint32."""
  M, N, K, kind = SHAPES[name]
  e, lane = K * M // 64, np.arange(64)
  integer = kind == "i8"
  ea, eb = (elements(w, "iu8" if integer else kind, True) for w in (a_words, b_words))   # (W, 64, e); i8 is signed
  W = ea.shape[0]
  A = np.zeros((W, M, K), i64 if integer else f64)
  B = np.zeros((W, K, N), i64 if integer else f64)
  for j in range(e):
    A[:, lane % M, (lane // M) * e + j] = ea[:, :, j]
    B[:, (lane // N) * e + j, lane % N] = eb[:, :, j]
  row, col = acc_place(M, N)
  C = np.zeros((W, M, N), i64 if integer else f64)
  cw = np.swapaxes(c_words, 1, 2)                                     # (W, regs, 64)
  C[:, row, col] = cw.view(np.int32).astype(i64) if integer else cw.view(f32).astype(f64)
  D = matmul(A, B, C, integer)[:, row, col]                           # (W, regs, 64)
  bits = (D & 0xffffffff).astype(u32) if integer else D.astype(f32).view(u32)
  return np.swapaxes(bits, 1, 2)
