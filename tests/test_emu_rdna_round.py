"""Directed rounding (MODE.FP_ROUND): tests/rdna_cases/rounding.cl sets each round mode with s_setreg (LLVM emits
s_round_mode on RDNA, s_setreg_imm32_b32 with a field offset and width on gfx942) and runs f32/f64 add, sub, mul, fma and the f64->f32 / int->f32 conversions on random operands,
denormals included; the host runs the same C with gcc -frounding-math under fesetround. Bit-exact, NaNs aside."""
from __future__ import annotations
import ctypes, os

import numpy as np
import pytest

from test_emu_rdna_common import compile_cl, host_so, kernels, launch, need, objdump

SRC = os.path.join(os.path.dirname(__file__), "rdna_cases", "rounding.cl")
MODES = {"round_nearest": 0, "round_up": 0x800, "round_down": 0x400, "round_zero": 0xc00}  # <fenv.h> on x86-64
GROUPS, NF = 4, 8
N = 64 * GROUPS

def host_library(text: str) -> ctypes.CDLL:
  need("gcc")
  text += "\n#include <fenv.h>\n" + "\n".join(
    f"void run_{k}(const float *f, const double *d, const int *n, float *of, double *od) {{ int old = fegetround(); "
    f"fesetround({v}); for (int i = 0; i < {N}; i++) {k}(f, d, n, of, od, i); fesetround(old); }}" for k, v in MODES.items())
  return host_so(text, ["-O1", "-frounding-math", "-ffp-contract=off"], "round")

def operands(rng, n: int, t) -> np.ndarray:
  """Random values over many binades, a share of them denormal, with random signs."""
  ex = rng.integers(-150 if t == np.float32 else -1075, 40, n)
  v = np.ldexp(1 + rng.random(n), ex) * rng.choice([-1, 1], n)
  return v.astype(t)

def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  u = f"u{a.itemsize}"
  return (a.view(u) == b.view(u)) | (np.isnan(a) & np.isnan(b))

@pytest.mark.parametrize("mcpu", ["gfx1100", "gfx1201", "gfx942"])
def test_round_modes(mcpu):
  need("gcc", "clang-19", "ld.lld-19")
  text = open(SRC).read()
  elf = compile_cl(text, mcpu)
  ks = kernels(elf)
  lib = host_library(text)
  rng = np.random.default_rng(7)
  f = operands(rng, 3 * N, np.float32)
  d = operands(rng, 3 * N, np.float64)
  d[::3][:N // 4] = f[: N // 4].astype(np.float64) * (1 + 2.0 ** -30)   # f64 -> f32 conversions that round
  n = rng.integers(-2**31, 2**31, N).astype(np.int32)
  host = {}
  for k in MODES:
    of_h, od_h = host[k] = np.zeros(NF * N, np.float32), np.zeros(4 * N, np.float64)
    getattr(lib, f"run_{k}")(*[a.ctypes.data_as(ctypes.c_void_p) for a in (f, d, n, of_h, od_h)])
    if mcpu == "gfx942" and k != "round_nearest":
      # LLVM 19 (SIModeRegister) clears MODE's f64 rounding bits again before the f64 instructions on gfx942, e.g.
      # s_setreg_imm32_b32 hwreg(HW_REG_MODE, 2, 1), 0 after setting 5: that code rounds f64 to nearest
      assert any(t.startswith("s_setreg_imm32_b32 hwreg(HW_REG_MODE, 2") or t.startswith("s_setreg_imm32_b32 hwreg(HW_REG_MODE, 3")
                 for _, t, _ in objdump(elf, mcpu, True) if t.endswith(", 0"))
      od_h = host["round_nearest"][1]
    res, outs, _ = launch(ks[k], mcpu, [f, d, n, np.zeros_like(of_h), np.zeros_like(od_h)], (GROUPS, 1, 1), (64, 1, 1))
    assert res.ok, res.fault
    for name, h, g in (("f32", of_h, outs[3]), ("f64", od_h, outs[4])):
      ok = same(h, g)
      j = int(np.argmin(ok))
      assert ok.all(), f"{k} {name}[{j}] (op {j % (NF if name == 'f32' else 4)}): host {h[j]!r} gpu {g[j]!r}, {(~ok).sum()} differ"
