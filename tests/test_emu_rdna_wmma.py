"""WMMA (wave32): tests/rdna_cases/wmma.cl multiplies random 16x16 tiles with clang's __builtin_amdgcn_wmma_*
builtins for gfx1100 and (with their _gfx12 forms and half-size fragments) gfx1201; the results must equal numpy's
matmul: exactly for iu8 (signed x unsigned, and signed x signed with clamp), and for f32/f16 accumulation on
operands whose products and sums float64 holds exactly (so any order of summation rounds to the same value)."""
from __future__ import annotations
import os

import numpy as np
import pytest

from test_emu_rdna_common import compile_cl, kernels, launch, need, objdump

SRC = os.path.join(os.path.dirname(__file__), "rdna_cases", "wmma.cl")
TARGETS = [("gfx1100", ()), ("gfx1201", ("-DGFX12",))]

def small_floats(rng, shape, scale_exp: int = 3) -> np.ndarray:
  """Values with few mantissa bits and a narrow exponent range: every product and partial sum is exact in f64."""
  return (rng.integers(-64, 64, shape) * 2.0 ** rng.integers(-scale_exp, scale_exp, shape)) / 8

@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t[0])
def test_wmma(target):
  need("clang-19", "ld.lld-19")
  mcpu, flags = target
  elf = compile_cl(open(SRC).read(), mcpu, flags)
  ks = kernels(elf)
  rng = np.random.default_rng(11)
  run = lambda name, *args: launch(ks[name], mcpu, list(args), (1, 1, 1), (32, 1, 1))
  A, B = small_floats(rng, (16, 16)), small_floats(rng, (16, 16))
  C = small_floats(rng, (16, 16)) * 16
  exact = A @ B + C
  res, outs, _ = run("f32_f16", A.astype(np.float16), B.astype(np.float16), C.astype(np.float32), np.zeros((16, 16), np.float32))
  assert res.ok, res.fault
  np.testing.assert_array_equal(outs[3], exact.astype(np.float32))
  bf = lambda m: (m.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.int16)
  res, outs, _ = run("f32_bf16", bf(A), bf(B), C.astype(np.float32), np.zeros((16, 16), np.float32))
  assert res.ok, res.fault
  np.testing.assert_array_equal(outs[3], exact.astype(np.float32))
  # f16 accumulation: the exact sum rounded once to f16 (C taken as f16 first)
  C16 = C.astype(np.float16)
  res, outs, _ = run("f16_f16", A.astype(np.float16), B.astype(np.float16), C16, np.zeros((16, 16), np.float16))
  assert res.ok, res.fault
  np.testing.assert_array_equal(outs[3], (A @ B + C16.astype(np.float64)).astype(np.float16))
  Ai, Bi = rng.integers(0, 256, (16, 16)).astype(np.uint8), rng.integers(0, 256, (16, 16)).astype(np.uint8)
  Ci = rng.integers(-2**31, 2**31, (16, 16)).astype(np.int32)
  res, outs, _ = run("i32_iu8", Ai, Bi, Ci, np.zeros((16, 16), np.int32), np.zeros((16, 16), np.int32))
  assert res.ok, res.fault
  sA, sB = Ai.view(np.int8).astype(np.int64), Bi.view(np.int8).astype(np.int64)
  np.testing.assert_array_equal(outs[3], ((sA @ Bi.astype(np.int64) + Ci) & 0xffffffff).astype(np.uint32).view(np.int32))
  np.testing.assert_array_equal(outs[4], np.clip(sA @ sB + Ci, -2**31, 2**31 - 1).astype(np.int32))
  names = {t.split()[0] for _, t, _ in objdump(elf, mcpu)}
  assert {"v_wmma_f32_16x16x16_f16", "v_wmma_f32_16x16x16_bf16", "v_wmma_f16_16x16x16_f16", "v_wmma_i32_16x16x16_iu8"} <= names
