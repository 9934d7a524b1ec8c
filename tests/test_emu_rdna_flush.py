"""Flush-to-zero mode, differentially: the random kernels of test_emu_rdna_random compiled with
-fdenormal-fp-math=preserve-sign (clang sets RSRC1.FLOAT_MODE denormals to "flush inputs and results" for f32 and
f16/f64) against the same C on the host with x86 MXCSR FTZ|DAZ set, with denormal inputs sprinkled in. Also LLVM's
correctly rounded f32 division, which switches denormals on around its iteration with s_denorm_mode."""
from __future__ import annotations
import pytest

from test_emu_rdna_random import FLAGS, TARGETS, batches, run_batch

@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t[0] + ("-w64" if t[1] else ""))
@pytest.mark.parametrize("batch", batches(), ids=lambda b: f"seeds{b[0]}-{b[-1]}")
def test_random_kernels_flushing(target, batch):
  run_batch(target, batch, FLAGS + ("-fdenormal-fp-math=preserve-sign",), ftz=True, float_mode=0x00)
