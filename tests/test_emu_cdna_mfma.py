"""CDNA3 matrix cores on the emulator: clang-19's __builtin_amdgcn_mfma_* for gfx942 (tests/rdna_cases/mfma.cl), each
kernel gathering its operands in the layouts of AMD's matrix instruction calculator and scattering D back, against
numpy's A @ B + C. LLVM keeps C/D in AGPRs, so the AGPR loads, stores and moves run too. Inputs are small integers
(and halves): every sum is exact, whatever order the hardware adds in."""
from __future__ import annotations
import os
import numpy as np
import pytest

from test_emu_rdna_common import compile_cl, kernels, launch

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def ks():
  with open(os.path.join(HERE, "rdna_cases", "mfma.cl")) as f: return kernels(compile_cl(f.read(), "gfx942"))


def bf16(x: np.ndarray) -> np.ndarray:
  return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)   # exact for these values


CASES = [("mfma_16x16x16_f16", 16, 16, 16, np.float16), ("mfma_32x32x8_f16", 32, 32, 8, np.float16),
         ("mfma_16x16x4_f32", 16, 16, 4, np.float32), ("mfma_32x32x2_f32", 32, 32, 2, np.float32),
         ("mfma_16x16x16_bf16", 16, 16, 16, "bf16"), ("mfma_32x32x8_bf16", 32, 32, 8, "bf16"),
         ("mfma_16x16x32_i8", 16, 16, 32, np.int8), ("mfma_32x32x16_i8", 32, 32, 16, np.int8)]


@pytest.mark.parametrize("name,M,N,K,ty", CASES, ids=[c[0] for c in CASES])
def test_mfma_is_a_times_b_plus_c(ks, name, M, N, K, ty):
  rng = np.random.default_rng(hash(name) & 0xffff)
  integer = ty is np.int8
  A, B = rng.integers(-8, 8, (M, K)), rng.integers(-8, 8, (K, N))
  if not integer: A, B = A / 2, B / 4                                   # halves and quarters: still exact
  C = rng.integers(-100, 100, (M, N)).astype(np.int32 if integer else np.float32)
  enc = (lambda x: bf16(x)) if ty == "bf16" else (lambda x: x.astype(ty))
  res, outs, _ = launch(ks[name], "gfx942", [enc(A).ravel(), enc(B).ravel(), C.ravel()], (1, 1, 1), (64, 1, 1))
  assert res.ok, res.fault
  want = (A.astype(np.int64) @ B.astype(np.int64) + C) if integer else (A @ B + C).astype(np.float32)
  assert (outs[2].reshape(M, N) == want).all()


@pytest.fixture(scope="module")
def ks_blocks():
  with open(os.path.join(HERE, "rdna_cases", "mfma_blocks.cl")) as f: return kernels(compile_cl(f.read(), "gfx942"))


BLOCK_CASES = [("mfma_4x4x1_16b_f32", 4, 4, 1, 16, np.float32), ("mfma_16x16x1_4b_f32", 16, 16, 1, 4, np.float32),
               ("mfma_4x4x4_16b_f16", 4, 4, 4, 16, np.float16), ("mfma_32x32x4_2b_f16", 32, 32, 4, 2, np.float16)]


@pytest.mark.parametrize("name,M,N,K,nb,ty", BLOCK_CASES, ids=[c[0] for c in BLOCK_CASES])
def test_multi_block_mfma(ks_blocks, name, M, N, K, nb, ty):
  """Each block is its own A x B + C. The kernels search the calculator's forward layout (the general rule, with
  blocks) for their elements, so no layout is inverted by hand."""
  rng = np.random.default_rng(nb * 100 + M)
  A, B = rng.integers(-8, 8, (nb, M, K)) / 2, rng.integers(-8, 8, (nb, K, N)) / 4
  C = rng.integers(-100, 100, (nb, M, N)).astype(np.float32)
  res, outs, _ = launch(ks_blocks[name], "gfx942", [A.astype(ty).ravel(), B.astype(ty).ravel(), C.ravel()], (1, 1, 1), (64, 1, 1),
                        max_instructions=20_000_000)
  assert res.ok, res.fault
  assert (outs[2].reshape(nb, M, N) == (A @ B + C).astype(np.float32)).all()


def _ml_dtypes():
  return pytest.importorskip("ml_dtypes", reason="ml_dtypes (pip install ml_dtypes) is the FP8/BF8 reference")


@pytest.mark.parametrize("name,M,N,K,fa,fb", [("mfma_16x16x32_fp8_bf8", 16, 16, 32, "float8_e4m3fnuz", "float8_e5m2fnuz"),
                                             ("mfma_32x32x16_bf8_fp8", 32, 32, 16, "float8_e5m2fnuz", "float8_e4m3fnuz")])
def test_mfma_8bit_floats(ks, name, M, N, K, fa, fb):
  """A and B as bytes of CDNA3's FNUZ formats, encoded by ml_dtypes; small values with exact sums."""
  md = _ml_dtypes()
  rng = np.random.default_rng(K)
  A, B = rng.integers(-8, 9, (M, K)) / 4, rng.integers(-6, 7, (K, N)) / 2   # exact in both formats
  C = rng.integers(-100, 100, (M, N)).astype(np.float32)
  a8, b8 = A.astype(getattr(md, fa)), B.astype(getattr(md, fb))
  assert (a8.astype(np.float64) == A).all() and (b8.astype(np.float64) == B).all()
  res, outs, _ = launch(ks[name], "gfx942", [a8.view(np.uint8).ravel(), b8.view(np.uint8).ravel(), C.ravel()], (1, 1, 1), (64, 1, 1))
  assert res.ok, res.fault
  assert (outs[2].reshape(M, N) == (A @ B + C).astype(np.float32)).all()


def test_8bit_float_conversions_match_ml_dtypes(ks):
  """v_cvt_f32_fp8/bf8 (every byte value, by SDWA byte select), v_cvt_pk_f32_*, and v_cvt_pk_fp8/bf8_f32 (round to
  nearest even; values within range: what an overflow gives on silicon is not settled here) against ml_dtypes."""
  md = _ml_dtypes()
  n = 128
  w = np.arange(4 * n, dtype=np.uint8).view(np.uint32) ^ np.uint32(0x5a3c1e00)   # every byte value in every position
  rng = np.random.default_rng(9)
  x = (rng.standard_normal(2 * n) * rng.choice([1e-3, 0.1, 10.0, 100.0], 2 * n)).astype(np.float32)
  x[:8] = [0.0, -0.0, 1.0625, 1.1875, -0.0009765625, 240.0, 2e-3, -57344.0 / 1000]   # ties, the smallest, the largest
  res, outs, _ = launch(ks["cvt_8bit_floats"], "gfx942", [w, x, np.zeros(8 * n, np.float32), np.zeros(n, np.uint32)], (2, 1, 1), (64, 1, 1))
  assert res.ok, res.fault
  dec, enc = outs[2].reshape(n, 8), outs[3]
  by = w.view(np.uint8).reshape(n, 4)
  f8, b8 = (lambda b: b.view(md.float8_e4m3fnuz).astype(np.float32)), (lambda b: b.view(md.float8_e5m2fnuz).astype(np.float32))
  want = np.stack([f8(by[:, 0]), f8(by[:, 3]), b8(by[:, 1]), b8(by[:, 2]), f8(by[:, 2]), f8(by[:, 3]), b8(by[:, 0]), b8(by[:, 1])], 1)
  assert ((dec == want) | (np.isnan(dec) & np.isnan(want))).all()
  xs = x.reshape(n, 2)
  lo = xs[:, 0].astype(md.float8_e4m3fnuz).view(np.uint8).astype(np.uint32) | xs[:, 1].astype(md.float8_e4m3fnuz).view(np.uint8).astype(np.uint32) << 8
  hi = xs[:, 1].astype(md.float8_e5m2fnuz).view(np.uint8).astype(np.uint32) | xs[:, 0].astype(md.float8_e5m2fnuz).view(np.uint8).astype(np.uint32) << 8
  assert (enc == (lo | hi << 16)).all()


@pytest.mark.parametrize("name,M,N,K,nb", [("mfma_16x16x4_f64", 16, 16, 4, 1), ("mfma_4x4x4_4b_f64", 4, 4, 4, 4)])
def test_mfma_f64(ks, name, M, N, K, nb):
  rng = np.random.default_rng(M * nb)
  A, B = rng.integers(-1000, 1000, (nb, M, K)) / 8, rng.integers(-1000, 1000, (nb, K, N)) / 16
  C = rng.integers(-10**6, 10**6, (nb, M, N)).astype(np.float64)
  res, outs, _ = launch(ks[name], "gfx942", [A.ravel(), B.ravel(), C.ravel()], (1, 1, 1), (64, 1, 1))
  assert res.ok, res.fault
  assert (outs[2].reshape(nb, M, N) == A @ B + C).all()


def test_mfma_with_c_and_d_in_vgprs_and_a_constant_c(ks):
  rng = np.random.default_rng(21)
  A, B = rng.integers(-8, 8, (16, 16)) / 2, rng.integers(-8, 8, (16, 16)) / 4
  C = rng.integers(-100, 100, (16, 16)).astype(np.float32)
  res, outs, _ = launch(ks["mfma_16x16x16_f16_vgpr"], "gfx942", [A.astype(np.float16).ravel(), B.astype(np.float16).ravel(), C.ravel(),
                        np.zeros(256, np.float32)], (1, 1, 1), (64, 1, 1))
  assert res.ok, res.fault
  assert (outs[2].reshape(16, 16) == (A @ B + C).astype(np.float32)).all() and (outs[3].reshape(16, 16) == (A @ B).astype(np.float32)).all()
