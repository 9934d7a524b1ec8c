"""Flush-to-zero mode, differentially: the random kernels of test_emu_rdna_random compiled with
-fdenormal-fp-math=preserve-sign (clang sets RSRC1.FLOAT_MODE denormals to "flush inputs and results" for f32 and
f16/f64) against the same C on the host with x86 MXCSR FTZ|DAZ set, with denormal inputs sprinkled in. Also LLVM's
correctly rounded f32 division, which switches denormals on around its iteration with s_denorm_mode."""
from __future__ import annotations
import pytest

from test_emu_rdna_random import FLAGS, TARGETS, batches, kernel_source, run_batch, run_sources

@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t[0] + ("-w64" if t[1] else ""))
@pytest.mark.parametrize("batch", batches(), ids=lambda b: f"seeds{b[0]}-{b[-1]}")
def test_random_kernels_flushing(target, batch):
  run_batch(target, batch, FLAGS + ("-fdenormal-fp-math=preserve-sign",), ftz=True, float_mode=0x00)


FOLDED = r"""
KDEF(k7212) {
  LDS_DECL
  PHASE(0) { int gid = GRP * WG + TID; float x = ff[gid]; uint32 u = (uint32)ii[(gid + 1) % 256];
    float y = __builtin_copysignf((float)((u + u) * (u - u)), x);
    of[gid * 4 + 0] = x - y * y;
  }
}
"""


def test_the_host_does_not_fold_what_flushing_changes():
  """What random seed 7212 found (flush mode): gcc -O1 proves y == +-0, so y*y == +0, and folds x - y*y into x, a
  denormal that the run with FTZ|DAZ would have flushed (as the GPU does). The host oracle is built with
  -frounding-math in flush mode, so that it computes what it is given. (The seed's program changed with the
  generator's flush-mode literals: this is its pattern, written out.)"""
  run_sources(TARGETS[0], [(7212, FOLDED, 1)], FLAGS + ("-fdenormal-fp-math=preserve-sign",), ftz=True, float_mode=0x00)


def test_the_generator_hides_operations_of_constants():
  """What random seed 8134 found (flush mode): clang folds (float)(0.1) * 2e-38f by IEEE's rules to the denormal
  2e-39 (LLVM's LangRef does not require flushing outputs), then (float)a != 2e-39 to true, where the host computes
  the product at run time under FTZ|DAZ: 0, and 0 != 0 for a == 0. In flush mode an operation of constants has its
  first operand hidden (keepf/keepd), so both sides compute it, and flush it."""
  assert "(keepf((float)(0.1)) * 2e-38f)" in kernel_source(8134, True)[0]
  run_batch(TARGETS[0], [8134], FLAGS + ("-fdenormal-fp-math=preserve-sign",), ftz=True, float_mode=0x00)


DIVIDE = r"""
__kernel void divide(__global const float *n, __global const float *d, __global float *q) {
  int i = __builtin_amdgcn_workitem_id_x() + 64 * __builtin_amdgcn_workgroup_id_x();
  q[i] = n[i] / d[i];
}
"""


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t[0] + ("-w64" if t[1] else ""))
def test_division_of_huge_operands_flushing(target):
  """Correctly rounded f32 division with denormals flushed, over every pair of a list of values: a huge denominator,
  whose reciprocal is an f32 denormal, must be scaled first (v_div_scale_f32 checks the reciprocal against the f32
  range; checked against the f64 range, 3.4e38 / 3.4e38 came out -0 instead of -1 here)."""
  import numpy as np
  from test_emu_rdna_common import compile_cl, kernels, launch
  mcpu, extra = target
  k = kernels(compile_cl(DIVIDE, mcpu, FLAGS + ("-fdenormal-fp-math=preserve-sign",) + extra))["divide"]
  vals = np.array([1.0, -3.0, 3.4e38, -3.39e38, 1e38, 1e-38, 1.2e-38, 2.0, np.inf, -np.inf, 0.0, -0.0, np.nan, 7.0, 1e-45, 5e37],
                  np.float32)
  n, d = np.repeat(vals, 16), np.tile(vals, 16)
  res, got, _ = launch(k, mcpu, [n, d, np.zeros(256, np.float32)], (4, 1, 1), (64, 1, 1), wave64=bool(extra))
  assert res.ok, res.fault
  tiny = np.finfo(np.float32).tiny
  flush = lambda v: np.where((v != 0) & (np.abs(v) < tiny), np.copysign(np.float32(0), v), v).astype(np.float32)
  with np.errstate(all="ignore"): want = flush(flush(n) / flush(d))
  q = got[2]
  same = (q.view(np.uint32) == want.view(np.uint32)) | (np.isnan(q) & np.isnan(want))
  assert same.all(), [(n[i], d[i], want[i], q[i]) for i in np.flatnonzero(~same)[:6]]
