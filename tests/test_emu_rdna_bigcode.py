"""A program larger than what the compute units fetch at dispatch start (tensor compilers emit kernels of 100 KiB and
more): the instruction fetch follows the waves into the rest of the code, on a flat memory and through MOCKPCI."""
from __future__ import annotations
import os
import numpy as np
import pytest
from test_emu_rdna_common import compile_cl, kernels, launch
from rawgpu.drivers.emu.shader import DispatchRegs, MemoryFault, run_dispatch

STEPS = 12000
SRC = f"""
__kernel void big(__global uint *p) {{
  uint t = __builtin_amdgcn_workitem_id_x(), x = p[t];
  #pragma unroll
  for (uint i = 0; i < {STEPS}u; i++) x = (x ^ (x >> 3)) * 2654435761u + i;   // xor-shift keeps LLVM from folding the steps
  p[t] = x;
}}
"""


def _want(seed: np.ndarray) -> np.ndarray:
  x = seed.astype(np.uint64)
  for i in range(STEPS): x = (((x ^ (x >> np.uint64(3))) * np.uint64(2654435761)) + np.uint64(i)) & np.uint64(0xffffffff)
  return x.astype(np.uint32)


@pytest.mark.parametrize("mcpu", ["gfx1100", "gfx1201"])
def test_program_longer_than_the_first_fetch(mcpu):
  elf = compile_cl(SRC, mcpu)
  k = kernels(elf)["big"]
  assert len(k.code) > 72 << 10, f"the unrolled kernel is only {len(k.code)} bytes: the test needs one past 64 KiB"
  seed = np.arange(1, 33, dtype=np.uint32) * np.uint32(0x9e3779b9)
  res, outs, _ = launch(k, mcpu, [seed.copy()], (1, 1, 1), (32, 1, 1))
  assert res.ok, res
  np.testing.assert_array_equal(outs[0], _want(seed))


class _Holey:
  """A memory with the pages [lo, hi) unmapped."""
  def __init__(self, mem, lo: int, hi: int): self.m, self.lo, self.hi = mem, lo, hi
  def _check(self, addrs, size: int, write: bool) -> None:
    a = np.asarray(addrs, np.uint64)
    bad = (a + np.uint64(size) > np.uint64(self.lo)) & (a < np.uint64(self.hi))
    if bad.any(): raise MemoryFault(max(int(a[np.argmax(bad)]), self.lo), write)
  def read(self, addr: int, n: int) -> bytes:
    if addr < self.hi and addr + n > self.lo: raise MemoryFault(max(addr, self.lo), False)
    return self.m.read(addr, n)
  def load(self, addrs, size): self._check(addrs, size, False); return self.m.load(addrs, size)
  def store(self, addrs, values, size): self._check(addrs, size, True); self.m.store(addrs, values, size)
  def atomic(self, op, addrs, values, size, cmp=None): self._check(addrs, size, True); return self.m.atomic(op, addrs, values, size, cmp)


@pytest.mark.parametrize("mcpu", ["gfx1100", "gfx1201"])
def test_waves_running_into_unmapped_code_fault_there(mcpu):
  """The same program with the pages of its second half unmapped: the waves run the first half, then the fetch of
  the next instruction faults at the first unmapped byte (a page fault, not an illegal instruction)."""
  k = kernels(compile_cl(SRC, mcpu))["big"]
  seed = np.arange(64, dtype=np.uint32)
  res, _, mem = launch(k, mcpu, [seed], (1, 1, 1), (64, 1, 1))
  assert res.ok, res
  pgm = mem.base + (k.entry - k.text_addr)
  hole = (pgm + len(k.code) // 2) & ~0xfff
  r1, r2, r3 = k.rsrc
  kern = mem.base + -(-len(k.code) // 4096) * 4096        # where launch() put the kernel arguments
  regs = DispatchRegs(arch=mcpu, pgm_addr=pgm, rsrc1=r1, rsrc2=r2, rsrc3=r3, user_data=[kern & 0xffffffff, kern >> 32],
                      num_thread=(64, 1, 1), grid=(1, 1, 1), dispatch_initiator=1 | ((k.props >> 10 & 1) << 15))
  assert k.props & 8 and not k.props & 7                  # the kernarg pointer is the only user SGPR pair
  res = run_dispatch(_Holey(mem, hole, hole + 8192), regs)    # two pages of code gone; the arguments and buffer stay
  assert not res.ok and res.fault == "page fault" and res.fault_addr == hole, res


def test_program_longer_than_the_first_fetch_on_mockpci():
  from conftest import find_firmware
  fw = find_firmware()
  if fw is None: pytest.skip("AMD firmware not found: run .ci/fetch-firmware (Debian firmware-amd-graphics) or set RAWGPU_FIRMWARE_DIR")
  os.environ.setdefault("RAWGPU_FIRMWARE_DIR", fw)
  elf = compile_cl(SRC, "gfx1100")
  from rawgpu.hcq.device import Device
  with Device("MOCKPCI+AMD::gfx1100") as d:
    seed = np.arange(7, 71, dtype=np.uint32) * np.uint32(0x85ebca6b)
    buf = d.alloc(seed.nbytes).copyin(seed)
    d.program(elf, "big")(buf, global_size=1, local_size=64, wait=True)
    np.testing.assert_array_equal(buf.numpy(np.uint32)[:64], _want(seed))
