"""CDNA3 matrix fused multiply-add (v_mfma_*): D = A x B + C for each of `blocks` M x N x K tiles held across the 64
lanes of a wave.

Layouts (AMD's matrix instruction calculator, CBSZ = ABID = BLGP = 0), with e = K * M * blocks / 64 elements of A
per lane (and of B with N for M):
- A: element A[b][i][k] is element k % e of lane b * M + (k // e) * M * blocks + i; B[b][k][j] likewise with N, j.
  f16/bf16 pack two elements in a register (low half first), i8 four (low byte first), f32 one.
- C/D (f32 or i32), in registers 4 tall and N lanes wide: D[b][i][j] is register b * (M * N // 64) + (i // (4 * 64 // N)) * 4
  + i % 4 of lane (b % bpr) * N + ((i // 4) % (64 // N)) * bpr * N + j, where bpr = ceil(64 / (M * N / 4)) blocks share
  a register row (the 4x4 shapes: 16 blocks side by side). f64 (register pairs, 1 row tall): pair
  b * (M * N // 64) + i // (64 // N) of lane (b % bpr) * N + (i % (64 // N)) * bpr * N + j, bpr = ceil(64 / (M * N)).
  f64 accumulates one fused multiply-add per k, in ascending k from C (an assumption: the ISA's order was not at hand;
  exact sums agree with any order).
Float products are exact and each output's K products and C are summed in float64 with round-to-odd steps, rounded
once to f32 (as wmma.py: the hardware's internal order is not documented, so cancelling sums may differ from silicon
in the last bit); i8 products and sums are exact (wrapping to 32 bits). Denormals are kept. The broadcast and lane
controls (CBSZ, ABID, BLGP) are not modelled.
"""
from __future__ import annotations
import functools

import numpy as np

from rawgpu.drivers.emu.shader.fp8 import decode as decode_fp8
from rawgpu.drivers.emu.shader.fpmath import fma64
from rawgpu.drivers.emu.shader.wmma import elements, matmul

u32, i64, f32, f64 = np.uint32, np.int64, np.float32, np.float64

# name -> (M, N, K, blocks, element kind of A and B); D is f32, or i32 for i8
SHAPES = {"v_mfma_f32_16x16x16_f16": (16, 16, 16, 1, "f16"), "v_mfma_f32_32x32x8_f16": (32, 32, 8, 1, "f16"),
          "v_mfma_f32_16x16x16_bf16": (16, 16, 16, 1, "bf16"), "v_mfma_f32_32x32x8_bf16": (32, 32, 8, 1, "bf16"),
          "v_mfma_f32_16x16x4_f32": (16, 16, 4, 1, "f32"), "v_mfma_f32_32x32x2_f32": (32, 32, 2, 1, "f32"),
          "v_mfma_i32_16x16x32_i8": (16, 16, 32, 1, "i8"), "v_mfma_i32_32x32x16_i8": (32, 32, 16, 1, "i8"),
          "v_mfma_f32_4x4x1_16b_f32": (4, 4, 1, 16, "f32"), "v_mfma_f32_16x16x1_4b_f32": (16, 16, 1, 4, "f32"),
          "v_mfma_f32_32x32x1_2b_f32": (32, 32, 1, 2, "f32"), "v_mfma_f32_4x4x4_16b_f16": (4, 4, 4, 16, "f16"),
          "v_mfma_f32_16x16x4_4b_f16": (16, 16, 4, 4, "f16"), "v_mfma_f32_32x32x4_2b_f16": (32, 32, 4, 2, "f16"),
          "v_mfma_i32_4x4x4_16b_i8": (4, 4, 4, 16, "i8"),
          **{f"v_mfma_f32_{m}x{m}x{k}_{a}_{b}": (m, m, k, 1, f"{a}_{b}") for m, k in ((16, 32), (32, 16))
             for a in ("fp8", "bf8") for b in ("fp8", "bf8")},   # CDNA3 8-bit floats: A's kind, then B's (fp8.py)
          "v_mfma_f64_16x16x4_f64": (16, 16, 4, 1, "f64"), "v_mfma_f64_4x4x4_4b_f64": (4, 4, 4, 4, "f64")}
_BITS = {"f16": 16, "bf16": 16, "f32": 32, "i8": 8, "fp8": 8, "bf8": 8, "f64": 64}


def operand_registers(name: str) -> tuple[int, int]:
  """(registers per lane of A or B, of C or D)."""
  M, N, K, nb, kind = SHAPES[name]
  return max(1, K * M * nb // 64 * _BITS[kind.split("_")[0]] // 32), M * N * nb // 64 * (2 if kind == "f64" else 1)


def _elements(words: np.ndarray, kind: str) -> np.ndarray:
  """(W, 64, nregs) uint32 -> (W, 64, n) values (float64, or int64 for i8), low bits first."""
  if kind == "f64": return (words[..., 0::2].astype(np.uint64) | words[..., 1::2].astype(np.uint64) << np.uint64(32)).view(f64)
  if kind in ("fp8", "bf8"):
    byte = np.stack([(words >> u32(8 * k)) & u32(0xff) for k in range(4)], -1).reshape(*words.shape[:2], -1)
    return decode_fp8(byte, kind).astype(f64)
  return elements(words, "iu8" if kind == "i8" else kind, True)   # i8 is signed


@functools.cache   # per shape: the index arrays every MFMA of that shape uses
def input_place(rows: int, K: int, nb: int) -> tuple[np.ndarray, ...]:
  """(block, row, k, lane, element) of every A (rows = M) or B (rows = N) element."""
  e = K * rows * nb // 64
  b, i, k = (x.ravel() for x in np.meshgrid(np.arange(nb), np.arange(rows), np.arange(K), indexing="ij"))
  return b, i, k, b * rows + (k // e) * rows * nb + i, k % e


@functools.cache
def acc_place(M: int, N: int, nb: int, h: int = 4) -> tuple[np.ndarray, ...]:
  """(block, row, column, register, lane) of every C/D element; h: the rows one lane holds in a run (4; f64: 1, and
  the register is then a 64-bit pair's index)."""
  b, i, j = (x.ravel() for x in np.meshgrid(np.arange(nb), np.arange(M), np.arange(N), indexing="ij"))
  mrpr, bpr = 64 // N, -(-64 * h // (M * N))   # blocks side by side in a register: 4x4 shapes (16 rows of 4 lanes; f64: 4)
  return b, i, j, b * (M * N // 64) + (i // (h * mrpr)) * h + i % h, (b % bpr) * N + ((i // h) % mrpr) * bpr * N + j


def mfma(name: str, a_words: np.ndarray, b_words: np.ndarray, c_words: np.ndarray) -> np.ndarray:
  """D's registers (W, 64, M * N * blocks // 64) uint32 from A's, B's and C's (W, 64, n) uint32."""
  M, N, K, nb, kind = SHAPES[name]
  integer = kind == "i8"
  ka, _, kb = kind.partition("_")
  ea, eb = _elements(a_words, ka), _elements(b_words, kb or ka)   # (W, 64, e)
  W, T = ea.shape[0], i64 if integer else f64
  A, B, C = np.zeros((W, nb, M, K), T), np.zeros((W, nb, K, N), T), np.zeros((W, nb, M, N), T)
  b, i, k, lane, el = input_place(M, K, nb)
  A[:, b, i, k] = ea[:, lane, el]
  b, j, k, lane, el = input_place(N, K, nb)
  B[:, b, k, j] = eb[:, lane, el]
  if kind == "f64":
    b, i, j, reg, lane = acc_place(M, N, nb, h=1)
    C[:, b, i, j] = _elements(c_words, "f64")[:, lane, reg]
    D = C
    for k in range(K): D = fma64(A[:, :, :, k, None], B[:, :, None, k, :], D)   # one fused step per k, in order
    out = np.zeros(c_words.shape, u32)
    bits = D[:, b, i, j].view(np.uint64)
    out[:, lane, 2 * reg], out[:, lane, 2 * reg + 1] = (bits & np.uint64(0xffffffff)).astype(u32), (bits >> np.uint64(32)).astype(u32)
    return out
  b, i, j, reg, lane = acc_place(M, N, nb)
  C[:, b, i, j] = c_words[:, lane, reg].view(np.int32).astype(i64) if integer else c_words[:, lane, reg].view(f32).astype(f64)
  D = matmul(A.reshape(W * nb, M, K), B.reshape(W * nb, K, N), C.reshape(W * nb, M, N), integer).reshape(W, nb, M, N)
  out = np.zeros(c_words.shape, u32)
  d = D[:, b, i, j]
  out[:, lane, reg] = (d & 0xffffffff).astype(u32) if integer else d.astype(f32).view(u32)
  return out
