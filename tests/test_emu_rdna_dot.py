"""Dot-product instructions from clang's __builtin_amdgcn_*dot* (tests/rdna_cases/dot.cl: v_dot2_f32_f16,
v_dot2_f32_bf16, v_dot4_i32_iu8 / v_dot4_u32_u8 and v_dot8_i32_iu4 / v_dot8_u32_u4 with and without clamp,
v_dot2_f16_f16, v_dot2_bf16_bf16; gfx11 also v_dot2acc_f32_f16) on random operands against numpy."""
from __future__ import annotations
import os

import numpy as np
import pytest

from test_emu_rdna_common import compile_cl, kernels, launch, need, objdump

SRC = os.path.join(os.path.dirname(__file__), "rdna_cases", "dot.cl")
N = 256

def ints(x: np.ndarray, bits: int, signed: bool) -> np.ndarray:
  """(n, 32 // bits) packed elements."""
  e = np.stack([(x.astype(np.int64) >> (bits * k)) & ((1 << bits) - 1) for k in range(32 // bits)], 1)
  return np.where(e >= 1 << (bits - 1), e - (1 << bits), e) if signed else e

def idot(a, b, c, bits, sa, sb, clamp):
  s = (ints(a, bits, sa) * ints(b, bits, sb)).sum(1) + (c.view(np.int32) if sa or sb else c).astype(np.int64)
  if clamp: s = np.clip(s, -2**31, 2**31 - 1) if sa or sb else np.clip(s, 0, 2**32 - 1)
  return (s & 0xffffffff).astype(np.uint32)

def f16s(x):
  return np.stack([(x & 0xffff).astype(np.uint16), (x >> 16).astype(np.uint16)], 1).view(np.float16).astype(np.float64)

def bf16s(x):
  return np.stack([(x << 16).astype(np.uint32), (x & 0xffff0000).astype(np.uint32)], 1).view(np.float32).astype(np.float64)

def bf16_nearest(v: np.ndarray) -> np.ndarray:
  """float64 -> bf16 bits by choosing between the two neighbours (ties to the even one)."""
  lo = (np.abs(v).astype(np.float32).view(np.uint32) >> 16).astype(np.uint32)
  lo = np.where(((lo.astype(np.uint32) << 16).view(np.float32).astype(np.float64)) > np.abs(v), lo - 1, lo)
  hi = lo + 1
  dl = np.abs(v) - (lo << 16).view(np.float32).astype(np.float64)
  dh = (hi << 16).view(np.float32).astype(np.float64) - np.abs(v)
  pick = np.where((dh < dl) | ((dh == dl) & (hi % 2 == 0)), hi, lo)
  return (pick | np.where(np.signbit(v), 0x8000, 0)).astype(np.uint32)

def packed_floats(rng, kind: str) -> np.ndarray:
  """Two moderate-magnitude f16 or bf16 values per word (products and their sums stay exact in float64)."""
  v = (rng.standard_normal((N, 2)) * 2.0 ** rng.integers(-6, 6, (N, 2)))
  h = v.astype(np.float16).view(np.uint16).astype(np.uint32) if kind == "f16" else \
      (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint32)
  return h[:, 0] | (h[:, 1] << 16)

@pytest.mark.parametrize("mcpu", ["gfx1100", "gfx1201"])
def test_dot_builtins(mcpu):
  need("clang-19", "ld.lld-19")
  elf = compile_cl(open(SRC).read(), mcpu)
  rng = np.random.default_rng(3)
  ints_ = lambda: rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
  res_all = {}
  for kind in ("f16", "bf16", "int"):
    if kind == "int": a, b, c = ints_(), ints_(), ints_()
    else:
      a, b = packed_floats(rng, kind), packed_floats(rng, kind)
      # the accumulator: an f32 for the f32-result forms whose low half is a f16/bf16 for the 16-bit-result ones
      c = ((rng.standard_normal(N).astype(np.float32).view(np.uint32) & 0xffff0000) | (packed_floats(rng, kind) & 0xffff)).astype(np.uint32)
    res, outs, _ = launch(kernels(elf)["k"], mcpu, [a, b, c, np.zeros(12 * N, np.uint32)], (1, 1, 1), (N, 1, 1))
    assert res.ok, res.fault
    res_all[kind] = (a, b, c, outs[3].reshape(N, 12))
  a, b, c, o = res_all["int"]
  want = {2: idot(a, b, c, 8, True, False, False), 3: idot(a, b, c, 8, True, True, True), 4: idot(a, b, c, 8, False, False, False),
          5: idot(a, b, c, 8, False, False, True), 6: idot(a, b, c, 4, False, True, False), 7: idot(a, b, c, 4, True, True, True),
          8: idot(a, b, c, 4, False, False, False), 9: idot(a, b, c, 4, False, False, True)}
  for col, w in want.items(): np.testing.assert_array_equal(o[:, col], w, err_msg=f"output {col}")
  a, b, c, o = res_all["f16"]
  exact = (f16s(a) * f16s(b)).sum(1)
  np.testing.assert_array_equal(o[:, 0], (exact + c.view(np.float32).astype(np.float64)).astype(np.float32).view(np.uint32))
  h = (exact + (c & 0xffff).astype(np.uint16).view(np.float16).astype(np.float64)).astype(np.float16).view(np.uint16)
  np.testing.assert_array_equal(o[:, 10] & 0xffff, h)
  a, b, c, o = res_all["bf16"]
  exact = (bf16s(a) * bf16s(b)).sum(1)
  np.testing.assert_array_equal(o[:, 1], (exact + c.view(np.float32).astype(np.float64)).astype(np.float32).view(np.uint32))
  acc = ((c & 0xffff) << 16).astype(np.uint32).view(np.float32).astype(np.float64)
  np.testing.assert_array_equal(o[:, 11] & 0xffff, bf16_nearest(exact + acc))
  # the instructions the test means to cover are really there
  names = {t.split()[0] for _, t, _ in objdump(elf, mcpu)}
  assert {"v_dot2_f32_bf16", "v_dot4_i32_iu8", "v_dot8_u32_u4", "v_dot2_bf16_bf16"} <= names
  assert ("v_dot2acc_f32_f16" if mcpu == "gfx1100" else "v_dot2_f32_f16") in names


def test_dot_builtins_cdna3():
  """gfx942 (tests/rdna_cases/dot_gfx9.cl): the accumulate-into-vdst VOP2 forms and the VOP3P ones with clamp."""
  need("clang-19", "ld.lld-19")
  elf = compile_cl(open(os.path.join(os.path.dirname(SRC), "dot_gfx9.cl")).read(), "gfx942")
  rng = np.random.default_rng(4)
  ints_ = lambda: rng.integers(0, 2**32, N, dtype=np.uint64).astype(np.uint32)
  a, b, c = ints_(), ints_(), ints_()
  a[:8], b[:8] = 0x7f7f7f7f, 0x7f7f7f7f   # sums that saturate under clamp
  c[:8] = [0x7fffff00, 0x7fffffff, 0xffffff00, 0x80000000, 0x7ffffff0, 0xfffffff0, 0, 1]
  o = launch(kernels(elf)["k"], "gfx942", [a, b, c, np.zeros(12 * N, np.uint32)], (1, 1, 1), (N, 1, 1))[1][3].reshape(N, 12)
  want = {2: idot(a, b, c, 8, True, True, False), 3: idot(a, b, c, 8, True, True, True), 4: idot(a, b, c, 8, False, False, False),
          5: idot(a, b, c, 8, False, False, True), 6: idot(a, b, c, 4, True, True, False), 7: idot(a, b, c, 4, True, True, True),
          8: idot(a, b, c, 4, False, False, False), 9: idot(a, b, c, 16, True, True, False), 10: idot(a, b, c, 16, True, True, True),
          11: idot(a, b, c, 16, False, False, True)}
  for col, w in want.items(): np.testing.assert_array_equal(o[:, col], w, err_msg=f"output {col}")
  fa, fb = packed_floats(rng, "f16"), packed_floats(rng, "f16")
  fc = rng.standard_normal(N).astype(np.float32).view(np.uint32)
  o = launch(kernels(elf)["k"], "gfx942", [fa, fb, fc, np.zeros(12 * N, np.uint32)], (1, 1, 1), (N, 1, 1))[1][3].reshape(N, 12)
  s = ((f16s(fa) * f16s(fb)).sum(1) + fc.view(np.float32).astype(np.float64)).astype(np.float32)
  np.testing.assert_array_equal(o[:, 0], s.view(np.uint32))
  np.testing.assert_array_equal(o[:, 1], np.clip(s, 0, 1).view(np.uint32))
  names = {t.split()[0] for _, t, _ in objdump(elf, "gfx942", True)}
  assert {"v_dot2c_f32_f16_e32", "v_dot4c_i32_i8_e32", "v_dot8c_i32_i4_e32", "v_dot2c_i32_i16_e32", "v_dot4_i32_i8",
          "v_dot4_u32_u8", "v_dot2_u32_u16", "v_dot2_f32_f16"} <= names, names
