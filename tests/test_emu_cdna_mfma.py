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
