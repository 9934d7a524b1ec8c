"""LDS addressing on the emulated compute units: a DS instruction's address is the 32-bit sum of its VGPR and its
offset. LLVM folds a constant offset into a DS access whose base may be negative on every target after SI
(AMDGPUDAGToDAGISel::isDSOffsetLegal), so its code is the oracle: `t[255 - l]` becomes base -4l with offset 1020."""
from __future__ import annotations
import shutil, subprocess
import numpy as np
import pytest

from test_emu_rdna_common import OBJDUMP, compile_cl, kernels, launch

MIRROR = """@lds = internal addrspace(3) global [256 x i32] poison, align 4
declare i32 @llvm.amdgcn.workitem.id.x()
declare void @llvm.amdgcn.s.barrier()
define amdgpu_kernel void @mirror(ptr addrspace(1) %p) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %r = sub i32 255, %t
  %a = getelementptr [256 x i32], ptr addrspace(3) @lds, i32 0, i32 %t
  store i32 %t, ptr addrspace(3) %a
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %b = getelementptr [256 x i32], ptr addrspace(3) @lds, i32 0, i32 %r
  %v = load i32, ptr addrspace(3) %b
  %o = getelementptr i32, ptr addrspace(1) %p, i32 %t
  store i32 %v, ptr addrspace(1) %o
  ret void
}
"""


@pytest.mark.parametrize("mcpu", ["gfx1100", "gfx1201", "gfx942"])
def test_a_negative_base_plus_offset_wraps_to_the_lds_word(mcpu):
  elf = compile_cl(MIRROR, mcpu, ir=True)
  if shutil.which(OBJDUMP):   # the pattern this test is about is what LLVM emitted
    asm = subprocess.run([OBJDUMP, "-d", f"--mcpu={mcpu}", "-"], input=elf, capture_output=True).stdout.decode()
    assert "offset:1020" in asm, asm
  res, (out,), _ = launch(kernels(elf)["mirror"], mcpu, [np.zeros(256, np.uint32)], (1, 1, 1), (256, 1, 1))
  assert res.ok, res.fault
  assert np.array_equal(out, np.arange(255, -1, -1, dtype=np.uint32))
