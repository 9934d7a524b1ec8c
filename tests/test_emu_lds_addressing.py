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


PAIR = """@lds = internal addrspace(3) global [256 x i32] poison, align 4
declare i32 @llvm.amdgcn.workitem.id.x()
declare void @llvm.amdgcn.s.barrier()
define amdgpu_kernel void @pair(ptr addrspace(1) %p) {
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %a = getelementptr [256 x i32], ptr addrspace(3) @lds, i32 0, i32 %t
  %t3 = mul i32 %t, 3
  store i32 %t3, ptr addrspace(3) %a
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %r = sub i32 254, %t
  %r1 = sub i32 255, %t
  %b = getelementptr [256 x i32], ptr addrspace(3) @lds, i32 0, i32 %r
  %c = getelementptr [256 x i32], ptr addrspace(3) @lds, i32 0, i32 %r1
  %v = load i32, ptr addrspace(3) %b
  %w = load i32, ptr addrspace(3) %c
  %s = add i32 %v, %w
  %o = getelementptr i32, ptr addrspace(1) %p, i32 %t
  store i32 %s, ptr addrspace(1) %o
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


@pytest.mark.parametrize("mcpu", ["gfx1100", "gfx1201", "gfx942"])
def test_a_load_pair_wraps_too(mcpu):
  """t[254 - l] + t[255 - l]: one ds_load_2addr_b32 (ds_read2_b32) from base -4l with offsets 254 and 255 dwords."""
  elf = compile_cl(PAIR, mcpu, ir=True)
  if shutil.which(OBJDUMP):
    asm = subprocess.run([OBJDUMP, "-d", f"--mcpu={mcpu}", "-"], input=elf, capture_output=True).stdout.decode()
    assert "offset0:254 offset1:255" in asm, asm
  res, (out,), _ = launch(kernels(elf)["pair"], mcpu, [np.zeros(255, np.uint32)], (1, 1, 1), (255, 1, 1))
  assert res.ok, res.fault
  t = np.arange(1, 255)   # work-item 0 reads word 255, which nobody wrote
  assert np.array_equal(out[1:], (3 * (254 - t) + 3 * (255 - t)).astype(np.uint32))
