"""SDWA (sub-dword addressing, GFX9): a VOP1/VOP2/VOPC instruction whose sources are a byte or word of their
registers (zero- or sign-extended) and whose result goes to a byte or word of the destination.

The SDWA word (AMD Vega/CDNA3 ISA guides; LLVM's SDWA encoding): [7:0] src0, [10:8] dst_sel, [12:11] dst_unused,
[13] clamp, [15:14] omod, [18:16] src0_sel, [19] src0_sext, [20] src0_neg, [21] src0_abs, [23] src0 is scalar,
[26:24] src1_sel, [27] src1_sext, [28] src1_neg, [29] src1_abs, [31] src1 is scalar. VOPC puts its lane-mask
destination in [14:8] with [15] enabling it (VCC otherwise).
"""
from __future__ import annotations
import numpy as np

u32 = np.uint32
SEL = ["BYTE_0", "BYTE_1", "BYTE_2", "BYTE_3", "WORD_0", "WORD_1", "DWORD"]
UNUSED = ["UNUSED_PAD", "UNUSED_SEXT", "UNUSED_PRESERVE"]


def _field(sel: int) -> tuple[int, int]:
  """(bit offset, width) a selector names."""
  if sel < 4: return 8 * sel, 8
  if sel < 6: return 16 * (sel - 4), 16
  return 0, 32


def src_mods(word: int, k: int) -> tuple[int, bool, bool, bool]:
  """Source k's (selector, sign-extend, neg, abs)."""
  b = 16 if k == 0 else 24
  return word >> b & 7, bool(word >> (b + 3) & 1), bool(word >> (b + 4) & 1), bool(word >> (b + 5) & 1)


def select(x, sel: int, sext: bool):
  """The selected byte or word of 32-bit values x, extended to 32 bits."""
  off, n = _field(sel)
  if n == 32: return x
  v = (np.asarray(x, u32) >> u32(off)) & u32((1 << n) - 1)
  if sext: v = ((v ^ u32(1 << (n - 1))) - u32(1 << (n - 1))).astype(u32)
  return v


def place(res, old, sel: int, unused: int):
  """A 32-bit result written to the destination byte or word; the other bits are zeros (PAD), the field's sign above
  it and zeros below (SEXT), or the register's old bits (PRESERVE)."""
  off, n = _field(sel)
  if n == 32: return res
  mask = u32(((1 << n) - 1) << off)
  field = (np.asarray(res, u32) << u32(off)) & mask
  if unused == 2: return (np.asarray(old, u32) & ~mask) | field
  if unused == 1 and off + n < 32:
    neg = (field >> u32(off + n - 1)) & u32(1)
    field = field | (neg * u32((0xffffffff << (off + n)) & 0xffffffff))
  return field


def text(word: int, nsrc: int, vopc: bool) -> str:
  """The selectors as LLVM prints them after the operands."""
  out = [] if vopc else [f"dst_sel:{SEL[word >> 8 & 7]}", f"dst_unused:{UNUSED[word >> 11 & 3]}"]
  out += [f"src{k}_sel:{SEL[src_mods(word, k)[0]]}" for k in range(nsrc)]
  return " ".join(out)
