"""The compute queue's packets, read back with the PM4 decoder and the generated register tables."""
from types import SimpleNamespace
from rawgpu import kernels
from rawgpu.autogen.regs import ip_regs
from rawgpu.hcq.amd import pm4
from rawgpu.hcq.amd.kd import KernelDescriptor  # noqa: F401  (the program's descriptor type)
from rawgpu.hcq.amd.elf import load_code_object
from rawgpu.hcq.amd.queues import AMDComputeQueue, _user_data
from rawgpu.hcq.patch import Var

GC_BASE = (0x1260, 0xa000)  # gc 11 segment bases as the discovery table of a Navi31 reports them


def backend(gfx=11):
  gc = ip_regs("gc", gfx, 0, 0)
  return SimpleNamespace(gfx=gfx, reg=lambda n: gc[n].addr(GC_BASE), gc=gc, scratch_for=lambda prg: (0, 0))


def program(arch="gfx1100", name="vadd", kernel=None):
  co = load_code_object(kernels.path(arch, name).read_bytes(), arch)
  k = co.kernels[kernel or next(iter(co.kernels))]
  d = k.descriptor
  return SimpleNamespace(code_va=0x7000_0000_1000, rsrc1=d.compute_pgm_rsrc1, rsrc2=d.compute_pgm_rsrc2, rsrc3=d.compute_pgm_rsrc3,
                         wave32=d.wave32, user_sgprs=d.user_sgprs(), dispatch_offset=256)


def sh_writes(words, be):
  """{register name: [values]} for every SET_SH_REG in the stream."""
  names = {be.gc[n].addr(GC_BASE): n for n in be.gc.names() if be.gc[n].base_idx == 0}
  out = {}
  for p in pm4.decode_pm4(words):
    if p.name == "SET_SH_REG":
      start = pm4.P.PACKET3_SET_SH_REG_START + p.words[1]
      for i, v in enumerate(p.words[2:]): out[names[start + i]] = v
  return out


def test_exec_programs_the_dispatch_registers():
  be, prg = backend(), program()
  q = AMDComputeQueue(be).exec(prg, Var("kernargs"), (7, 1, 1), (256, 1, 1))
  q.patch({"kernargs": 0x12_3456_7800})
  w = q.words()
  regs = sh_writes(w, be)
  assert (regs["regCOMPUTE_PGM_HI"] << 40 | regs["regCOMPUTE_PGM_LO"] << 8) == prg.code_va
  assert regs["regCOMPUTE_PGM_RSRC1"] == prg.rsrc1 and regs["regCOMPUTE_PGM_RSRC2"] == prg.rsrc2
  assert (regs["regCOMPUTE_NUM_THREAD_X"], regs["regCOMPUTE_NUM_THREAD_Y"], regs["regCOMPUTE_NUM_THREAD_Z"]) == (256, 1, 1)
  ka = next(at for n, at, _ in prg.user_sgprs if n == "user_sgpr_kernarg_segment_ptr")
  assert regs[f"regCOMPUTE_USER_DATA_{ka}"] == 0x3456_7800 and regs[f"regCOMPUTE_USER_DATA_{ka + 1}"] == 0x12
  disp = [p for p in pm4.decode_pm4(w) if p.name == "DISPATCH_DIRECT"]
  assert len(disp) == 1 and disp[0].words[1:4] == [7, 1, 1]
  init = be.gc["regCOMPUTE_DISPATCH_INITIATOR"].decode(disp[0].words[4])
  assert init["COMPUTE_SHADER_EN"] == 1 and init["CS_W32_EN"] == int(prg.wave32)


def test_signal_and_wait_slots():
  be = backend()
  sig = SimpleNamespace(va=0x5000_0040, timestamp_va=0x5000_0048)
  q = AMDComputeQueue(be).wait(sig, Var("w", 32)).signal(sig, Var("v"))
  q.patch({"w": 41, "v": 42})
  pk = pm4.decode_pm4(q.words())
  assert [p.name for p in pk] == ["WAIT_REG_MEM", "RELEASE_MEM"]
  assert pk[0].words[2] == sig.va and pk[0].words[4] == 41
  assert pk[1].words[3] == sig.va and pk[1].words[5:7] == [42, 0]
  q.patch({"v": 1 << 33 | 5})
  assert pm4.decode_pm4(q.words())[1].words[5:7] == [5, 2]


def test_user_data_order_with_dispatch_ptr():
  prg = SimpleNamespace(user_sgprs=[("user_sgpr_dispatch_ptr", 0, 2), ("user_sgpr_kernarg_segment_ptr", 2, 2)])
  assert _user_data(prg, 0xaaaa_0000_1111, 0xbbbb_0000_2222) == [0x2222, 0xbbbb, 0x1111, 0xaaaa]
