"""Faults halt the dispatch and come back in DispatchResult, never as a Python exception: illegal instructions (an
encoding llvm-mc-19 calls invalid), unmapped addresses, s_trap, and the instruction limit."""
from __future__ import annotations
import dataclasses, os, subprocess

import numpy as np
import pytest

from test_emu_rdna_common import compile_cl, kernels, launch, need, objdump, MC
from rawgpu.drivers.emu.shader import DispatchRegs, FlatMemory, run_dispatch

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = ["gfx1100", "gfx1201", "gfx942"]
SRC = """
__kernel void store(__global int *p, int v) { p[__builtin_amdgcn_workitem_id_x()] = v; }
__kernel void trap(__global int *p) { if (p[0] == 7) __builtin_trap(); p[1] = 1; }
__kernel void spin(__global volatile int *p) { while (p[0] == 0) p[1] += 1; }
"""

def _ks(mcpu):
  return kernels(compile_cl(SRC, mcpu))

def _invalid_word(mcpu: str) -> int:
  """A 32-bit word LLVM's disassembler rejects for this target (checked, not assumed)."""
  need(MC)
  for w in (0xffffffff, 0xfc000000, 0xd4000000, 0xcd000000):
    r = subprocess.run([MC, "-disassemble", "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}"], capture_output=True, text=True,
                       input=",".join(f"0x{b:02x}" for b in (w.to_bytes(4, "little") + bytes(8))) + "\n")
    if "invalid instruction encoding" in r.stderr.splitlines()[0] if r.stderr else False: return w
  pytest.skip("no invalid encoding found")

@pytest.mark.parametrize("mcpu", TARGETS)
def test_store_runs(mcpu):
  res, outs, _ = launch(_ks(mcpu)["store"], mcpu, [np.zeros(64, np.int32), np.int32(5)], (1, 1, 1), (64, 1, 1))
  assert res.ok and (outs[0] == 5).all()

@pytest.mark.parametrize("mcpu", TARGETS)
def test_illegal_instruction(mcpu):
  elf = compile_cl(SRC, mcpu)
  k = kernels(elf)["store"]
  bad = _invalid_word(mcpu)
  second = [a for a, _, _ in objdump(elf, mcpu) if a > k.entry][0]  # where llvm-objdump says instruction 2 starts
  off = second - k.text_addr
  code = bytearray(k.code)
  code[off:off + 4] = bad.to_bytes(4, "little")
  k = dataclasses.replace(k, code=bytes(code))
  res, _, _ = launch(k, mcpu, [np.zeros(64, np.int32), np.int32(5)], (1, 1, 1), (64, 1, 1))
  assert not res.ok
  assert res.fault.startswith("illegal instruction at ")
  assert res.fault_addr == 0x1000_0000 + off and f"{res.fault_addr:#x}" in res.fault

@pytest.mark.parametrize("mcpu", TARGETS)
def test_page_fault_on_store(mcpu):
  k = _ks(mcpu)["store"]
  res, outs, mem = launch(k, mcpu, [np.zeros(64, np.int32), np.int32(5)], (1, 1, 1), (64, 1, 1))
  assert res.ok
  # same dispatch, but the kernarg now points the buffer past the end of the mapping
  bad = mem.base + mem.size + 0x10000
  kern = _kernarg_addr(k, mem)
  mem.write(kern, int(bad).to_bytes(8, "little"))
  res2 = run_dispatch(mem, _regs_like(mcpu, k, mem, kern), max_instructions=10_000)
  assert not res2.ok and res2.fault == "page fault"
  assert res2.fault_addr == bad  # lane 0 stores first

@pytest.mark.parametrize("mcpu", TARGETS)
def test_page_fault_on_code_fetch(mcpu):
  mem = FlatMemory(4096)
  regs = DispatchRegs(arch=mcpu, pgm_addr=0x2000_0000, rsrc1=0, rsrc2=0, rsrc3=0, user_data=[], num_thread=(32, 1, 1),
                      grid=(1, 1, 1), dispatch_initiator=1 | 1 << 15)
  res = run_dispatch(mem, regs)
  assert not res.ok and res.fault == "page fault" and res.fault_addr == 0x2000_0000

@pytest.mark.parametrize("mcpu", TARGETS)
def test_trap(mcpu):
  k = _ks(mcpu)["trap"]
  res, outs, _ = launch(k, mcpu, [np.array([7, 0], np.int32)], (1, 1, 1), (32, 1, 1))
  assert not res.ok and "s_trap" in res.fault
  res, outs, _ = launch(k, mcpu, [np.array([6, 0], np.int32)], (1, 1, 1), (32, 1, 1))
  assert res.ok and outs[0][1] == 1

@pytest.mark.parametrize("mcpu", TARGETS)
def test_instruction_limit(mcpu):
  k = _ks(mcpu)["spin"]
  res, _, _ = launch(k, mcpu, [np.zeros(2, np.int32)], (1, 1, 1), (32, 1, 1), max_instructions=5000)
  assert not res.ok and "instruction limit" in res.fault and res.wave_instructions >= 5000

# helpers that re-run a launch() layout with a patched kernarg
def _kernarg_addr(k, mem) -> int:
  return mem.base + -(-len(k.code) // 4096) * 4096

def _regs_like(mcpu, k, mem, kern) -> DispatchRegs:
  r1, r2, r3 = k.rsrc
  user = []
  if k.props & 1: user += [0, 0, 0, 0]
  if k.props & 2: user += [0, 0]
  if k.props & 4: user += [0, 0]
  if k.props & 8: user += [kern & 0xffffffff, kern >> 32]
  wave32 = bool(k.props >> 10 & 1)
  return DispatchRegs(arch=mcpu, pgm_addr=mem.base + (k.entry - k.text_addr),
                      rsrc1=r1, rsrc2=r2, rsrc3=r3, user_data=user, num_thread=(64, 1, 1), grid=(1, 1, 1),
                      dispatch_initiator=1 | (wave32 << 15))
