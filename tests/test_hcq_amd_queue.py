"""The compute queue's packets, read back with the PM4 decoder and the generated register tables."""
import pytest
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


@pytest.mark.parametrize("version", [(6, 0), (7, 0), (4, 4)])
def test_copy_timestamp_waits_for_the_copies_before(version):
  """A NOP, which makes SDMA wait for its pending copies (Mesa's ac_emit_sdma_nop), goes before every timestamp."""
  from rawgpu.hcq.amd import sdma
  from rawgpu.hcq.amd.queues import AMDCopyQueue
  be = SimpleNamespace(sdma_version=version)
  q = AMDCopyQueue(be).copy(0x10_0000, 0x20_0000, 4096).timestamp(0x5000_0048)
  names = [p.name for p in sdma.decode_sdma(q.words(), version)]
  assert names[-2:] == ["NOP", "TIMESTAMP_GET_GLOBAL"] and "COPY_LINEAR" in names


def test_kfd_signal_confirms_its_write_before_the_wake_interrupt_and_stamps_flush_nothing():
  """KFD: the signal's RELEASE_MEM completes once its write is confirmed (INT_SEL 3, as Mesa writes data), then the
  wake slot's interrupts (no second cache flush); a timestamp is BOTTOM_OF_PIPE_TS with no cache actions."""
  be = backend()
  be.wake = (0x6000_0000, 7)
  sig = SimpleNamespace(va=0x5000_0040, timestamp_va=0x5000_0048, dev=None)
  w = list(AMDComputeQueue(be).signal(sig, 9).timestamp(sig).words())
  assert w == (pm4.release_mem(sig.va, 9, pm4.DataSel.VALUE64, pm4.IntSel.WAIT_WRITE_CONFIRM)
               + pm4.release_mem(0x6000_0000, 1, pm4.DataSel.VALUE64, pm4.IntSel.INTERRUPT_AFTER_WRITE, gcr=0, int_ctxid=7)
               + pm4.release_mem(sig.timestamp_va, data_sel=pm4.DataSel.TIMESTAMP, int_sel=pm4.IntSel.WAIT_WRITE_CONFIRM,
                                 event=pm4.Event.BOTTOM_OF_PIPE_TS, gcr=0))


def test_a_bound_queue_is_padded_to_the_ib_alignment():
  """A bound compute queue's indirect buffer is a multiple of 8 dwords (amdgpu's 32-byte ib_size_alignment for
  compute), padded with one-dword ring NOPs after the commands; patch slots keep their places."""
  from rawgpu.drivers.iface import Mem
  from rawgpu.drivers.mmio import MemMMIO
  iface = SimpleNamespace(alloc=lambda size, **kw: Mem(0x7000_0000, size, MemMMIO(bytearray(size))), free=lambda mem: None)
  sig = SimpleNamespace(va=0x5000_0040, timestamp_va=0x5000_0048, dev=None)
  q = AMDComputeQueue(backend()).wait(sig, Var("w", 32))
  n = len(q.words())
  assert n % 8
  released = []
  q.bind(SimpleNamespace(iface=iface, check_open=lambda: None, _iface_alloc=lambda size, *flags: iface.alloc(size), releases=SimpleNamespace(later=lambda free, fence=None: released.append(fence))))
  ib = pm4.decode_pm4(list(q._ib))[0]
  assert ib.name == "INDIRECT_BUFFER" and ib.fields["ib_size"] == n + (-n % 8)
  assert list(q.words())[n:] == [0xffff1000] * (-n % 8)   # PACKET3(NOP, 0x3FFF): the kernel's ring NOP
  q.patch({"w": 41})
  assert pm4.decode_pm4(list(q.words()))[0].words[4] == 41
  del q, ib
  assert released == [None]   # dropped, its memory goes once the work queued by then is done (never submitted)


@pytest.mark.parametrize("version", [(6, 0), (7, 0), (4, 4)])
@pytest.mark.parametrize("kfd", [False, True])
def test_copy_barrier_flushes_hdp_then_invalidates_gl2(version, kfd):
  """SDMA 6/7 reads look up GL2, which may hold a stale line of what the CPU wrote: after the HDP flush the copy
  barrier invalidates it (the kernel ring's GCR_REQ as amdgpu's emit_mem_sync, a KFD queue's ROCr user form);
  SDMA 4.4.2 does not go through the XCD's L2 and has no such packet."""
  from rawgpu.hcq.amd import sdma
  from rawgpu.hcq.amd.queues import AMDCopyQueue
  be = SimpleNamespace(sdma_version=version, sdma_hdp_flush=(0x106, 0x107, 0x400))
  if kfd: be.wake = (0x6000_0000, 7)
  names = [p.name for p in sdma.decode_sdma(AMDCopyQueue(be).memory_barrier().words(), version)]
  assert names == ["POLL_REGMEM"] + ([] if version < (5, 0) else ["USER_GCR" if kfd else "GCR_REQ"])
  be.sdma_hdp_flush = None   # an APU: no HDP, the cache still
  names = [p.name for p in sdma.decode_sdma(AMDCopyQueue(be).memory_barrier().words(), version)]
  assert names == ([] if version < (5, 0) else ["USER_GCR" if kfd else "GCR_REQ"])


def test_a_wait_for_a_value_past_32_bits_is_refused():
  """WAIT_REG_MEM and POLL_REGMEM compare 32 bits: a reference of 2^32 or more would pass early or never."""
  from rawgpu.errors import RawGPUError
  from rawgpu.hcq.amd.queues import AMDCopyQueue
  sig = SimpleNamespace(va=0x5000_0040, timestamp_va=0x5000_0048, dev=None)
  be = backend()
  be.sdma_version = (6, 0)
  with pytest.raises(RawGPUError, match="compares 32 bits"): AMDCopyQueue(be).wait(sig, 1 << 32)
  AMDCopyQueue(be).wait(sig, (1 << 32) - 1)
  with pytest.raises(RawGPUError, match="compares 32 bits"): AMDComputeQueue(be).wait(sig, 1 << 33)


def test_user_data_order_with_dispatch_ptr_and_id():
  prg = SimpleNamespace(user_sgprs=[("user_sgpr_dispatch_ptr", 0, 2), ("user_sgpr_kernarg_segment_ptr", 2, 2), ("user_sgpr_dispatch_id", 4, 2)])
  assert _user_data(prg, 0xaaaa_0000_1111, 0xbbbb_0000_2222, 0xcccc_0000_3333) == [0x2222, 0xbbbb, 0x1111, 0xaaaa, 0x3333, 0xcccc]


class _FakeTimeline:
  """Just what KernargRing asks of a Device: its next ticket, the GPU's timeline and waiting for a ticket."""
  def __init__(self):
    from rawgpu.drivers.iface import Mem
    from rawgpu.drivers.mmio import MemMMIO
    self.iface = SimpleNamespace(alloc=lambda size, **kw: Mem(0x10000, size, MemMMIO(memoryview(bytearray(size)))))
    self.timeline, self.timeline_base, self.timeline_value, self.waits = SimpleNamespace(value=0), 0, 1, []

  def wait_timeline(self, ticket):
    self.waits.append(ticket)
    self.timeline.value = max(self.timeline.value, ticket)


def test_kernarg_ring_waits_only_for_the_lap_before():
  """Offsets go round the ring 256-byte aligned, a block that does not fit before the end starts at 0, and a region
  is reused once the launches of the lap before that used it are done: the ticket waited for is one of those (at
  most a sixteenth of the ring later), never a launch of the current lap."""
  from rawgpu.hcq.amd.backend import KernargRing
  dev = _FakeTimeline()
  ring = KernargRing(dev, 64 * 256)   # 64 slots of 256 bytes; a mark every 4 slots
  offs, started = [], {}              # ticket -> absolute start
  for _ in range(3 * 64 + 10):
    t = dev.timeline_value
    off = ring.take(200)              # rounds to 256
    started[t] = ring.total - 256
    offs.append(off)
    dev.timeline_value += 1
  assert offs[:66] == [256 * (i % 64) for i in range(66)]
  assert dev.waits and all(started[w] < started[max(started)] - 64 * 256 + ring.chunk + 256 for w in dev.waits)   # a lap (less a mark) back
  for w in dev.waits: assert w < max(started) - 60    # never a recent launch
  dev.timeline.value = dev.timeline_value - 1         # the GPU caught up: most of a lap more needs no wait
  n = len(dev.waits)
  for _ in range(48): ring.take(256); dev.timeline_value += 1
  assert len(dev.waits) == n
  for _ in range(16): ring.take(256); dev.timeline_value += 1
  assert len(dev.waits) > n and max(dev.waits) < dev.timeline_value - 48   # the lap's first launches, not later ones
  # a block that does not fit before the end starts again at 0
  ring2 = KernargRing(_FakeTimeline(), 16 * 1024)
  assert [ring2.take(700) for _ in range(23)] == [768 * i for i in range(21)] + [0, 768]   # 21 fit, then 16128 + 768 > 16384


def test_kernarg_ring_refuses_a_block_beyond_its_limit():
  from rawgpu.errors import RawGPUError
  from rawgpu.hcq.amd.backend import KernargRing
  ring = KernargRing(_FakeTimeline(), 64 * 256)
  with pytest.raises(RawGPUError, match="kernel arguments exceed the kernarg ring's limit"):
    ring.take(ring.chunk + 256)
  assert ring.take(256) == 0   # nothing was taken by the refused one
