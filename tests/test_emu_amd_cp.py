"""MEC compute queues from HQD registers, PM4 from the ring up to the write pointer, and a real kernel dispatch.

Packets are encoded in the test from the opcodes in the kernel's nvd.h; queue setup follows gfx_v11_0's HQD sequence.
"""
from __future__ import annotations
import struct, time
import numpy as np
import pytest
from test_emu_amd_common import ComputeRing, d, Dev, P, pkt3
from test_emu_amd_gmc import setup_ih


def test_write_data_release_mem_and_rptr_report(d, P):
  ring, wb = setup_ih(d)
  q = ComputeRing(d)
  d.wr("gc", "regCP_ME1_PIPE0_INT_CNTL", TIME_STAMP_INT_ENABLE=1)
  dst, fence = q.mc(0x300000), q.mc(0x300100)
  pk = pkt3(P["PACKET3_WRITE_DATA"], [(5 << 8) | (1 << 20), dst & 0xffffffff, dst >> 32, 0xdeadbeef, 0x12345678])
  pk += pkt3(P["PACKET3_RELEASE_MEM"], [0x14 | (5 << 8), (2 << 29) | (2 << 24), fence & 0xffffffff, fence >> 32, 0x89abcdef, 0x01234567, 0x55])
  q.submit(pk)
  q.run()
  assert d.vram.read32(0x300000) == 0xdeadbeef and d.vram.read32(0x300004) == 0x12345678
  assert d.vram.read64(0x300100) == 0x0123456789abcdef
  assert d.vram.read32(q.rptr_off) == len(pk) and q.hqd("regCP_HQD_PQ_RPTR") == len(pk)
  e = struct.unpack_from("<8I", d.vram.mem, ring)
  assert e[0] & 0xff == 0x14 and (e[0] >> 8) & 0xff == 181 and e[4] == 0x55          # GRBM_CP, CP_EOP, context id
  assert (e[0] >> 16) & 0xff == (1 << 2)                                             # me 1, pipe 0, queue 0


def test_the_header_only_nop_is_one_dword(d, P):
  """PACKET3(NOP, 0x3FFF) is a NOP by itself (Mesa's PKT3_NOP_PAD "header-only version of NOP", amdgpu's ring nop
  and IB padding): the packet after it runs, in the ring and at the end of an indirect buffer."""
  q = ComputeRing(d)
  dst = q.mc(0x300300)
  pad = 0xC0000000 | (0x3FFF << 16) | (P["PACKET3_NOP"] << 8)
  q.submit([pad, pad] + pkt3(P["PACKET3_WRITE_DATA"], [(5 << 8) | (1 << 20), dst & 0xffffffff, dst >> 32, 0x1234]))
  q.run()
  assert d.vram.read32(0x300300) == 0x1234


def test_release_mem_write_confirm_interrupts_nobody(d, P):
  """INT_SEL 3 (send data after write confirm, Mesa's data writes) writes and confirms, with no interrupt; 2 interrupts."""
  ring, wb = setup_ih(d)
  q = ComputeRing(d)
  d.wr("gc", "regCP_ME1_PIPE0_INT_CNTL", TIME_STAMP_INT_ENABLE=1)
  fence = q.mc(0x300200)
  q.submit(pkt3(P["PACKET3_RELEASE_MEM"], [0x14 | (5 << 8), (2 << 29) | (3 << 24), fence & 0xffffffff, fence >> 32, 5, 0, 0x66]))
  q.run()
  assert d.vram.read64(0x300200) == 5 and struct.unpack_from("<8I", d.vram.mem, ring) == (0,) * 8   # no IH entry
  q.submit(pkt3(P["PACKET3_RELEASE_MEM"], [0x14 | (5 << 8), (2 << 29) | (2 << 24), fence & 0xffffffff, fence >> 32, 6, 0, 0x67]))
  q.run()
  assert d.vram.read64(0x300200) == 6 and struct.unpack_from("<8I", d.vram.mem, ring)[4] == 0x67


def test_wait_reg_mem_blocks_until_memory_matches(d, P):
  q = ComputeRing(d)
  sem, dst = q.mc(0x310000), q.mc(0x310040)
  d.vram.write32(0x310000, 0)
  pk = pkt3(P["PACKET3_WAIT_REG_MEM"], [(1 << 4) | 3, sem & 0xffffffff, sem >> 32, 7, 0xffffffff, 4])
  pk += pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 42])
  q.submit(pk)
  q.run()
  assert d.vram.read32(0x310040) == 0 and q.hqd("regCP_HQD_PQ_RPTR") == 0
  assert d.rd("gc", "regCP_STAT") != 0                                                # busy while waiting
  d.vram.write32(0x310000, 7)
  q.run()
  assert d.vram.read32(0x310040) == 42 and q.hqd("regCP_HQD_PQ_RPTR") == len(pk)
  assert d.rd("gc", "regCP_STAT") == 0


def test_rptr_report_shows_where_a_waiting_queue_stopped(d, P):
  """The CP reports its read pointer when it stops (a wait here), so a driver waiting for ring room sees the packets
  consumed before the wait."""
  q = ComputeRing(d)
  sem, dst = q.mc(0x318000), q.mc(0x318040)
  d.vram.write32(0x318000, 0)
  first = pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 41])
  q.submit(first + pkt3(P["PACKET3_WAIT_REG_MEM"], [(1 << 4) | 3, sem & 0xffffffff, sem >> 32, 1, 0xffffffff, 4]))
  q.run()
  assert d.vram.read32(0x318040) == 41 and d.vram.read32(q.rptr_off) == len(first)
  d.vram.write32(0x318000, 1)
  q.run()
  assert d.vram.read32(q.rptr_off) == q.hqd("regCP_HQD_PQ_RPTR") == len(first) + 7


def test_rptr_report_follows_the_cp_block_by_block(d, P):
  """The CP writes its read pointer back each time it has read another RPTR_BLOCK_SIZE block (2^5 quad-words = 64
  dwords in this ring) and when it stops, so a driver whose ring is full goes on once a block is free, not once the CP
  has caught up with everything queued."""
  q = ComputeRing(d)
  dst = q.mc(0x318040)
  q.submit(pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 7]) * 40)   # 40 packets of 5 dwords
  seen = [d.vram.read32(q.rptr_off)]
  for _ in range(100):   # one packet per step; the step that finds the ring empty reports and returns False
    more = d.board.step()
    if (v := d.vram.read32(q.rptr_off)) != seen[-1]: seen.append(v)
    if not more: break
  assert seen == [0, 65, 130, 195, 200]   # past 64, 128 and 192 dwords, then where it stopped
  assert q.hqd("regCP_HQD_PQ_RPTR") == 200


def test_wait_reg_mem_write_wait_write_on_registers(d, P):
  """The HDP flush idiom: write GPU_HDP_FLUSH_REQ, wait for the same bit in GPU_HDP_FLUSH_DONE."""
  q = ComputeRing(d)
  req, done = d.addr("nbio", "regBIF_BX_PF0_GPU_HDP_FLUSH_REQ"), d.addr("nbio", "regBIF_BX_PF0_GPU_HDP_FLUSH_DONE")
  n = d.board.nbio.hdp_flushes
  q.submit(pkt3(P["PACKET3_WAIT_REG_MEM"], [(1 << 6) | 3, req, done, 1 << 2, 1 << 2, 0x20]))
  q.run()
  assert d.board.nbio.hdp_flushes == n + 1 and q.hqd("regCP_HQD_PQ_RPTR") == 7


def test_indirect_buffer_runs_then_ring_continues(d, P):
  q = ComputeRing(d)
  ib_off, dst = 0x320000, q.mc(0x330000)
  ib = pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 1, 2, 3])
  for i, v in enumerate(ib): d.vram.write32(ib_off + 4 * i, v)
  ibva = q.mc(ib_off)
  pk = pkt3(P["PACKET3_INDIRECT_BUFFER"], [ibva & 0xfffffffc, ibva >> 32, len(ib) | (1 << 23)])
  pk += pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, (dst + 12) & 0xffffffff, dst >> 32, 4])
  q.submit(pk)
  q.run()
  assert [d.vram.read32(0x330000 + 4 * i) for i in range(4)] == [1, 2, 3, 4]


def test_an_indirect_buffer_run_again_after_a_patch_runs_the_patched_commands(d, P):
  """A graph replay: the host patches a bound IB in place between two runs; the second run executes the new words,
  not what the CP fetched ahead during the first."""
  q = ComputeRing(d)
  ib_off, dst = 0x320000, q.mc(0x330000)
  ibva = q.mc(ib_off)
  for value in (5, 6):
    for i, v in enumerate(pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, value])): d.vram.write32(ib_off + 4 * i, v)
    q.submit(pkt3(P["PACKET3_INDIRECT_BUFFER"], [ibva & 0xfffffffc, ibva >> 32, 5 | (1 << 23)]))
    q.run()
    assert d.vram.read32(0x330000) == value


def test_ring_wraps(d, P):
  q = ComputeRing(d, ring_bytes=0x100)                 # 64 dwords
  dst = q.mc(0x340000)
  for i in range(20):                                  # 5-dword packets: wraps several times, some straddle the end
    q.submit(pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, (dst + 4 * i) & 0xffffffff, dst >> 32, 100 + i]))
    q.run()
  assert [d.vram.read32(0x340000 + 4 * i) for i in range(20)] == list(range(100, 120))


def test_a_public_opcode_the_model_lacks_halts_without_a_bad_opcode_error(d, P, caplog):
  """COND_WRITE is a packet nvd.h names (the MEC may well run it): the model, which does not, stops the queue saying
  so, and posts no CP_BAD_OPCODE interrupt nor sets OPCODE_ERROR_INT_STATUS, which would claim the hardware refuses it."""
  from rawgpu.drivers.emu.amd import pm4
  assert P["PACKET3_COND_WRITE"] not in pm4.HANDLERS
  ring, wb = setup_ih(d)
  q = ComputeRing(d)
  d.wr("gc", "regCP_ME1_PIPE0_INT_CNTL", OPCODE_ERROR_INT_ENABLE=1)
  q.submit(pkt3(P["PACKET3_COND_WRITE"], [0] * 8))
  q.run()
  hung = d.board.gfx.queues[(1, 0, 0)].hung or ""
  assert "PACKET3_COND_WRITE (0x45) is not modelled" in hung and "opcode error" not in hung
  assert struct.unpack_from("<8I", d.vram.mem, ring)[0] == 0 and q.hqd("regCP_HQD_PQ_RPTR") == 0
  st = d.rd("gc", "regCP_ME1_PIPE0_INT_STATUS")
  assert d.f("gc", "regCP_ME1_PIPE0_INT_STATUS", st, "OPCODE_ERROR_INT_STATUS") == 0
  # the driver sees only a queue that stopped: the emulator says why on its logger
  assert d.board.unmodelled == ["compute queue me1 pipe 0 queue 0: PACKET3_COND_WRITE (0x45) is not modelled"]
  assert any(r.name == "rawgpu.emu" and "COND_WRITE" in r.getMessage() for r in caplog.records)


def test_a_wait_reg_mem_memory_space_the_model_lacks_halts(d, P):
  """MEM_SPACE is two bits (Mesa's pkt3.json): 2 and 3 are not register or memory, and stop the queue as not modelled
  (the model read one bit and took 2 for a register)."""
  q = ComputeRing(d)
  q.submit(pkt3(P["PACKET3_WAIT_REG_MEM"], [5 | 2 << 4, 0, 0, 0, 0xffffffff, 4]))
  q.run()
  assert "WAIT_REG_MEM mem_space 2 is not modelled" in (d.board.gfx.queues[(1, 0, 0)].hung or "")


def test_unknown_opcode_halts_queue(d, P):
  ring, wb = setup_ih(d)
  q = ComputeRing(d)
  d.wr("gc", "regCP_ME1_PIPE0_INT_CNTL", OPCODE_ERROR_INT_ENABLE=1)
  dst = q.mc(0x350000)
  known = {v for k, v in P.items() if k.startswith("PACKET3_") and not k.endswith(("_START", "_END")) and v < 0x100}
  bad = next(op for op in range(0xff, 0, -1) if op not in known)
  pk = pkt3(bad, [0, 0]) + pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 9])
  q.submit(pk)
  q.run()
  assert d.vram.read32(0x350000) == 0 and q.hqd("regCP_HQD_PQ_RPTR") == 0   # stuck on the bad packet
  e = struct.unpack_from("<8I", d.vram.mem, ring)
  assert e[0] & 0xff == 0x14 and (e[0] >> 8) & 0xff == 183                  # CP_BAD_OPCODE_ERROR
  st = d.rd("gc", "regCP_ME1_PIPE0_INT_STATUS")
  assert d.f("gc", "regCP_ME1_PIPE0_INT_STATUS", st, "OPCODE_ERROR_INT_STATUS") == 1
  q.submit(pkt3(P["PACKET3_NOP"], [0]))
  q.run()
  assert q.hqd("regCP_HQD_PQ_RPTR") == 0                                   # stays hung


def test_queue_needs_running_mec_and_firmware(P):
  d = Dev("gfx1100")                                   # cold: no firmware loaded
  try:
    q = ComputeRing(d)
    dst = q.mc(0x360000)
    q.submit(pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 5]))
    q.run()
    assert d.vram.read32(0x360000) == 0
  finally: d.close()


def test_mec_halted_queue_does_not_run(d, P):
  q = ComputeRing(d)
  d.wr("gc", "regCP_MEC_RS64_CNTL", MEC_PIPE0_ACTIVE=1, MEC_HALT=1)
  dst = q.mc(0x360000)
  q.submit(pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 5]))
  q.run()
  assert d.vram.read32(0x360000) == 0
  d.wr("gc", "regCP_MEC_RS64_CNTL", MEC_PIPE0_ACTIVE=1)
  q.run()
  assert d.vram.read32(0x360000) == 5


def test_a_pipe_never_given_its_firmware_start_runs_nothing(d, P):
  """A MEC pipe starts the firmware where PRGRM_CNTR_START pointed when its reset was released
  (gfx_v11_0_config_gfx_rs64); released without a start the driver wrote, it runs none."""
  q = ComputeRing(d, start_pipe=False)
  dst = q.mc(0x368000)
  q.submit(pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 5]))
  q.run()
  assert d.vram.read32(0x368000) == 0


def test_doorbells_reach_no_queue_until_cp_pq_status_enables_them(d, P):
  """CP_PQ_STATUS.DOORBELL_ENABLE is 0 at reset; kiq_init_register sets it last: until then a doorbell moves no
  queue's write pointer."""
  q = ComputeRing(d, doorbells=False)
  dst = q.mc(0x36c000)
  q.submit(pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 5]))
  q.run()
  assert d.vram.read32(0x36c000) == 0 and q.hqd("regCP_HQD_PQ_WPTR_LO") == 0
  d.wr("gc", "regCP_PQ_STATUS", DOORBELL_ENABLE=1)
  q.submit([], ring_doorbell=True)
  q.run()
  assert d.vram.read32(0x36c000) == 5


def test_doorbell_outside_mec_range_is_ignored(d, P):
  q = ComputeRing(d, db=0x800)                          # dword 0x800 = byte 0x2000 > range upper 0x1000
  dst = q.mc(0x370000)
  q.submit(pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 5]))
  q.run()
  assert d.vram.read32(0x370000) == 0


def test_dequeue_request_deactivates(d, P):
  q = ComputeRing(d)
  d.wr("gc", "regGRBM_GFX_CNTL", MEID=1, PIPEID=0, QUEUEID=0)
  d.wr("gc", "regCP_HQD_DEQUEUE_REQUEST", 2)
  assert d.rd("gc", "regCP_HQD_ACTIVE") & 1 == 0
  d.wr("gc", "regGRBM_GFX_CNTL", 0)
  dst = q.mc(0x370000)
  q.submit(pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 5]))
  q.run()
  assert d.vram.read32(0x370000) == 0                                  # a dequeued HQD fetches nothing


def test_concurrent_mode_worker_runs_on_doorbell(P):
  d = Dev("gfx1100", deterministic=False, firmware="loaded")
  try:
    q = ComputeRing(d)
    fence = q.mc(0x380000)
    q.submit(pkt3(P["PACKET3_RELEASE_MEM"], [0x14 | (5 << 8), (1 << 29), fence & 0xffffffff, fence >> 32, 77, 0, 0]))
    deadline = time.monotonic() + 20
    while d.vram.read32(0x380000) != 77 and time.monotonic() < deadline: time.sleep(0.001)
    assert d.vram.read32(0x380000) == 77
  finally: d.close()


# ---- a real kernel: vadd_f32 from kernels/<arch>/vadd.hsaco, dispatched with SET_SH_REG + DISPATCH_DIRECT
def load_kernel(d: Dev, arch: str, name: str, base_off: int) -> dict:
  from elftools.elf.elffile import ELFFile
  import io
  from rawgpu.kernels import path
  blob = path(arch, name).read_bytes()
  elf = ELFFile(io.BytesIO(blob))
  for seg in elf.iter_segments():
    if seg["p_type"] == "PT_LOAD": d.vram.writebytes(base_off + seg["p_vaddr"], seg.data())
  syms = {s.name: s["st_value"] for s in elf.get_section_by_name(".symtab").iter_symbols()}
  return syms


def test_dispatch_vadd_matches_numpy(d, P):
  pytest.importorskip("elftools")
  arch = d.board.arch
  q = ComputeRing(d)
  code_off = 0x400000
  syms = load_kernel(d, arch, "vadd", code_off)
  kd_off = code_off + syms["vadd_f32.kd"]
  kd = d.vram.readbytes(kd_off, 64)
  entry = struct.unpack_from("<q", kd, 16)[0]          # kernel_code_entry_byte_offset (AMDHSAKernelDescriptor.h)
  rsrc3, rsrc1, rsrc2, props = struct.unpack_from("<IIIH", kd, 44)
  n, wg = 1000, 64
  a = np.arange(n, dtype=np.float32) * 0.5; b = np.full(n, 3.25, np.float32)
  A, B, C, KA = 0x500000, 0x510000, 0x520000, 0x530000
  d.vram.writebytes(A, a.tobytes()); d.vram.writebytes(B, b.tobytes())
  ka = struct.pack("<QQQI", q.mc(A), q.mc(B), q.mc(C), n) + bytes(4)
  grid = -(-n // wg)
  ka += struct.pack("<III", grid, 1, 1) + struct.pack("<HHH", wg, 1, 1)    # COV5 hidden block counts / group sizes
  d.vram.writebytes(KA, ka + bytes(256 - len(ka)))
  user = []
  if props & 1: user += [0, 0, 0, 0]                                        # private segment buffer
  if props & 2: user += [0, 0]                                              # dispatch ptr
  if props & 4: user += [0, 0]                                              # queue ptr
  if props & 8: user += [q.mc(KA) & 0xffffffff, q.mc(KA) >> 32]             # kernarg segment ptr
  pgm = q.mc(kd_off + entry)
  sh = lambda name, vals: pkt3(P["PACKET3_SET_SH_REG"], [d.addr("gc", name) - P["PACKET3_SET_SH_REG_START"]] + vals)
  pk = sh("regCOMPUTE_PGM_LO", [(pgm >> 8) & 0xffffffff, pgm >> 40])
  pk += sh("regCOMPUTE_PGM_RSRC1", [rsrc1, rsrc2])
  pk += sh("regCOMPUTE_PGM_RSRC3", [rsrc3])
  pk += sh("regCOMPUTE_TMPRING_SIZE", [0])
  pk += sh("regCOMPUTE_USER_DATA_0", user)
  pk += sh("regCOMPUTE_START_X", [0, 0, 0])
  pk += sh("regCOMPUTE_NUM_THREAD_X", [wg, 1, 1])
  wave32 = (1 << 15) if props & (1 << 10) else 0                            # kernel_code_properties ENABLE_WAVEFRONT_SIZE32
  pk += pkt3(P["PACKET3_DISPATCH_DIRECT"], [grid, 1, 1, 1 | wave32])
  fence = q.mc(0x540000)
  pk += pkt3(P["PACKET3_RELEASE_MEM"], [0x14 | (5 << 8), (1 << 29), fence & 0xffffffff, fence >> 32, 1, 0, 0])
  q.submit(pk)
  q.run()
  assert d.board.gfx.queues[(1, 0, 0)].hung is None, d.board.gfx.queues[(1, 0, 0)].hung
  assert d.vram.read32(0x540000) == 1
  c = np.frombuffer(d.vram.readbytes(C, 4 * n), np.float32)
  np.testing.assert_array_equal(c, a + b)


def test_dispatch_indirect_reads_dims_from_memory(d, P, monkeypatch):
  """What the CP hands the compute units: the programmed SH registers and the dimensions read from memory."""
  import rawgpu.drivers.emu.shader as rdna
  seen = []
  def waves(mem, regs, **kw):
    seen.append(regs)
    return rdna.DispatchResult(True, None, None, 0)
    yield
  monkeypatch.setattr(rdna, "dispatch_slices", waves)
  q = ComputeRing(d)
  dims = 0x560000
  for i, v in enumerate((7, 3, 2)): d.vram.write32(dims + 4 * i, v)
  sh = lambda name, vals: pkt3(P["PACKET3_SET_SH_REG"], [d.addr("gc", name) - P["PACKET3_SET_SH_REG_START"]] + vals)
  pk = sh("regCOMPUTE_PGM_LO", [0x1234, 0x56]) + sh("regCOMPUTE_PGM_RSRC1", [0x11, 0x22]) + sh("regCOMPUTE_PGM_RSRC3", [0x33])
  pk += sh("regCOMPUTE_USER_DATA_0", [10, 11, 12]) + sh("regCOMPUTE_NUM_THREAD_X", [64, 2, 1])
  pk += pkt3(P["PACKET3_DISPATCH_INDIRECT"], [q.mc(dims) & 0xffffffff, q.mc(dims) >> 32, 0x8001])
  q.submit(pk)
  q.run()
  assert len(seen) == 1
  r = seen[0]
  assert (r.pgm_addr, r.rsrc1, r.rsrc2, r.rsrc3) == ((0x56 << 40) | (0x1234 << 8), 0x11, 0x22, 0x33)
  assert r.user_data[:3] == [10, 11, 12] and r.num_thread == (64, 2, 1) and r.grid == (7, 3, 2) and r.dispatch_initiator == 0x8001


def test_dispatch_page_fault_hangs_queue_and_reports(d, P):
  """fault.cl writes to an address given as argument: the GC hub reports it and the queue stops."""
  pytest.importorskip("elftools")
  from test_emu_amd_gmc import PT, enable_context, pte_bits
  ring, wb = setup_ih(d)
  q = ComputeRing(d)
  code_off = 0x400000
  syms = load_kernel(d, d.board.arch, "fault", code_off)
  name = next(s for s in syms if s.endswith(".kd"))
  kd_off = code_off + syms[name]
  kd = d.vram.readbytes(kd_off, 64)
  entry = struct.unpack_from("<q", kd, 16)[0]
  rsrc3, rsrc1, rsrc2, props = struct.unpack_from("<IIIH", kd, 44)
  KA = 0x530000
  bad = 0x7fff_0000_0000                               # far above the FB aperture: translated by the (empty) page table
  d.vram.writebytes(KA, struct.pack("<QI", bad, 0) + bytes(248))
  user = ([0] * 4 if props & 1 else []) + ([0, 0] if props & 2 else []) + ([0, 0] if props & 4 else []) + \
         ([q.mc(KA) & 0xffffffff, q.mc(KA) >> 32] if props & 8 else [])
  pgm = q.mc(kd_off + entry)
  sh = lambda name, vals: pkt3(P["PACKET3_SET_SH_REG"], [d.addr("gc", name) - P["PACKET3_SET_SH_REG_START"]] + vals)
  pt = PT(d, pte_bits())
  enable_context(d, "gc", pt)                          # VMID 0 page table with nothing at `bad`
  pk = sh("regCOMPUTE_PGM_LO", [(pgm >> 8) & 0xffffffff, pgm >> 40]) + sh("regCOMPUTE_PGM_RSRC1", [rsrc1, rsrc2])
  pk += sh("regCOMPUTE_PGM_RSRC3", [rsrc3]) + sh("regCOMPUTE_USER_DATA_0", user) + sh("regCOMPUTE_NUM_THREAD_X", [32, 1, 1])
  pk += pkt3(P["PACKET3_DISPATCH_DIRECT"], [1, 1, 1, 1 | ((1 << 15) if props & (1 << 10) else 0)])
  q.submit(pk)
  q.run()
  cq = d.board.gfx.queues[(1, 0, 0)]
  assert cq.hung is not None and "fault" in cq.hung
  fa = (d.rd("gc", "regGCVM_L2_PROTECTION_FAULT_ADDR_HI32") << 32 | d.rd("gc", "regGCVM_L2_PROTECTION_FAULT_ADDR_LO32")) << 12
  assert fa == bad & ~0xfff


def test_kiq_map_queues_from_mqd(d, P):
  """The Linux path: the KIQ (queue 0, named in RLC_CP_SCHEDULERS) maps queue 1 from an MQD with MAP_QUEUES."""
  from rawgpu.autogen.amd import mqd_v11, mqd_v12
  kiq = ComputeRing(d)
  d.wr("gc", "regRLC_CP_SCHEDULERS", (1 << 5) | (0 << 3) | 0 | 0x80)
  mqd_t = mqd_v11.v11_compute_mqd if d.board.arch == "gfx1100" else mqd_v12.v12_compute_mqd
  ring_off, mqd_off, q_dst = 0x440000, 0x450000, 0x460000
  ring = kiq.mc(ring_off)
  m = mqd_t(cp_hqd_pq_base_lo=(ring >> 8) & 0xffffffff, cp_hqd_pq_base_hi=ring >> 40,
            cp_hqd_pq_control=d.tables["gc"]["regCP_HQD_PQ_CONTROL"].encode(QUEUE_SIZE=(0x400).bit_length() - 2, RPTR_BLOCK_SIZE=5),
            cp_hqd_vmid=0)
  d.vram.writebytes(mqd_off, bytes(m))
  db = 12
  c = (1 << 13) | (0 << 16) | (1 << 18) | (1 << 29)                 # queue 1, pipe 0, me 1, one queue
  kiq.submit(pkt3(P["PACKET3_MAP_QUEUES"], [c, db << 2, kiq.mc(mqd_off) & 0xffffffff, kiq.mc(mqd_off) >> 32, 0, 0]))
  kiq.run()
  d.wr("gc", "regGRBM_GFX_CNTL", MEID=1, PIPEID=0, QUEUEID=1)
  assert d.rd("gc", "regCP_HQD_ACTIVE") & 1 and d.rd("gc", "regCP_HQD_PQ_BASE") == (ring >> 8) & 0xffffffff
  d.wr("gc", "regGRBM_GFX_CNTL", 0)
  pk = pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, kiq.mc(q_dst) & 0xffffffff, kiq.mc(q_dst) >> 32, 0x777])
  for i, v in enumerate(pk): d.vram.write32(ring_off + 4 * i, v)
  d.db.write64(db * 4, len(pk))
  kiq.run()
  assert d.vram.read32(q_dst) == 0x777


def test_map_queues_refused_on_a_normal_queue(d, P):
  q = ComputeRing(d)                                                  # RLC_CP_SCHEDULERS left at 0: no KIQ
  q.submit(pkt3(P["PACKET3_MAP_QUEUES"], [(1 << 18) | (1 << 29), 0, 0, 0, 0, 0]))
  q.run()
  assert q.hqd("regCP_HQD_PQ_RPTR") == 0 and d.board.gfx.queues[(1, 0, 0)].hung


def _dispatch_packets(d, q, P, name: str, args: bytes, wg: int = 32, grid: int = 1, code_off: int = 0x400000, KA: int = 0x530000) -> list[int]:
  syms = load_kernel(d, d.board.arch, name, code_off)
  kd_off = code_off + syms[next(s for s in syms if s.endswith(".kd"))]
  kd = d.vram.readbytes(kd_off, 64)
  entry = struct.unpack_from("<q", kd, 16)[0]
  rsrc3, rsrc1, rsrc2, props = struct.unpack_from("<IIIH", kd, 44)
  d.vram.writebytes(KA, args + bytes(256 - len(args)))
  user = ([0] * 4 if props & 1 else []) + ([0, 0] if props & 2 else []) + ([0, 0] if props & 4 else []) + \
         ([q.mc(KA) & 0xffffffff, q.mc(KA) >> 32] if props & 8 else [])
  pgm = q.mc(kd_off + entry)
  sh = lambda n, vals: pkt3(P["PACKET3_SET_SH_REG"], [d.addr("gc", n) - P["PACKET3_SET_SH_REG_START"]] + vals)
  pk = sh("regCOMPUTE_PGM_LO", [(pgm >> 8) & 0xffffffff, pgm >> 40]) + sh("regCOMPUTE_PGM_RSRC1", [rsrc1, rsrc2])
  pk += sh("regCOMPUTE_PGM_RSRC3", [rsrc3]) + sh("regCOMPUTE_USER_DATA_0", user) + sh("regCOMPUTE_NUM_THREAD_X", [wg, 1, 1])
  return pk + pkt3(P["PACKET3_DISPATCH_DIRECT"], [grid, 1, 1, 1 | ((1 << 15) if props & (1 << 10) else 0)])


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_spinning_kernel_released_by_sdma_while_it_runs(arch, P):
  """Concurrent mode: the shader array runs beside the other engines, so a kernel spinning on memory finishes when
  an SDMA fence, submitted after the dispatch, writes it."""
  pytest.importorskip("elftools")
  from test_emu_amd_sdma import SDMARing, hdr
  from test_emu_amd_common import sdma_defs
  S = sdma_defs()
  d = Dev(arch, deterministic=False, firmware="loaded")
  try:
    q = ComputeRing(d)
    flag, done = 0x570000, 0x570100
    q.submit(_dispatch_packets(d, q, P, "spin", struct.pack("<QIIQ", q.mc(flag), 5, 0, q.mc(done))))
    deadline = time.monotonic() + 5
    while not d.board.gfx.queues[(1, 0, 0)].running and time.monotonic() < deadline: time.sleep(0.001)
    assert d.vram.read32(done) == 0                       # still spinning
    s = SDMARing(d)
    s.submit([hdr(S, "FENCE"), s.mc(flag) & 0xffffffff, s.mc(flag) >> 32, 5])
    deadline = time.monotonic() + 30
    while d.vram.read32(done) != 6 and time.monotonic() < deadline: time.sleep(0.002)
    assert d.vram.read32(done) == 6 and not d.board.errors
  finally: d.close()


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_spinning_kernel_released_by_a_kernel_on_another_queue(arch, P):
  """Two queues' dispatches run side by side (their waves take turns on the board): a kernel spinning on a flag on
  queue 0 finishes when a fill dispatched afterwards on queue 1 writes the flag."""
  pytest.importorskip("elftools")
  d = Dev(arch, deterministic=False, firmware="loaded")
  try:
    q0 = ComputeRing(d)
    q1 = ComputeRing(d, ring_off=0x210000, db=10, queue=1, rptr_off=0x1fe000)
    flag, done = 0x570000, 0x570100
    q0.submit(_dispatch_packets(d, q0, P, "spin", struct.pack("<QIIQ", q0.mc(flag), 5, 0, q0.mc(done))))
    deadline = time.monotonic() + 5
    while not d.board.gfx.queues[(1, 0, 0)].running and time.monotonic() < deadline: time.sleep(0.001)
    assert d.vram.read32(done) == 0                       # spinning
    q1.submit(_dispatch_packets(d, q1, P, "fill", struct.pack("<QII", q1.mc(flag), 5, 1), code_off=0x480000, KA=0x538000))
    deadline = time.monotonic() + 30
    while d.vram.read32(done) != 6 and time.monotonic() < deadline: time.sleep(0.002)
    assert d.vram.read32(done) == 6 and not d.board.errors
  finally: d.close()


def _spin_then(d, q, P, after: list[int], flag: int = 0x570000, done: int = 0x570100) -> None:
  """Dispatch kernels/spin (done = 6 once flag is 5) and, behind it in the same ring, the packets `after`; return
  once its waves run, still spinning (unless `after` releases them)."""
  q.submit(_dispatch_packets(d, q, P, "spin", struct.pack("<QIIQ", q.mc(flag), 5, 0, q.mc(done))) + after)
  assert _until(lambda: d.board.gfx.queues[(1, 0, 0)].running, 5) and d.vram.read32(done) == 0


def _until(cond, s: float = 30) -> bool:
  deadline = time.monotonic() + s
  while not cond() and time.monotonic() < deadline: time.sleep(0.002)
  return cond()


def _write(q, P, off: int, v: int) -> list[int]:
  a = q.mc(off)
  return pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, a & 0xffffffff, a >> 32, v])


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_the_cp_reads_on_while_a_dispatch_runs(arch, P):
  """PM4 orders nothing after a dispatch: a WRITE_DATA behind a kernel that spins on a flag, in the same ring, is
  what releases it."""
  pytest.importorskip("elftools")
  d = Dev(arch, deterministic=False, firmware="loaded")
  try:
    q = ComputeRing(d)
    q.submit(_dispatch_packets(d, q, P, "spin", struct.pack("<QIIQ", q.mc(0x570000), 5, 0, q.mc(0x570100))) + _write(q, P, 0x570000, 5))
    assert _until(lambda: d.vram.read32(0x570100) == 6) and not d.board.errors
  finally: d.close()


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_cs_partial_flush_holds_the_cp_until_the_waves_end(arch, P):
  """EVENT_WRITE CS_PARTIAL_FLUSH (EVENT_TYPE 7, EVENT_INDEX 4): the packet after it waits for the dispatch's waves;
  here they spin until the host writes the flag."""
  pytest.importorskip("elftools")
  d = Dev(arch, deterministic=False, firmware="loaded")
  try:
    q = ComputeRing(d)
    _spin_then(d, q, P, pkt3(P["PACKET3_EVENT_WRITE"], [7 | (4 << 8)]) + _write(q, P, 0x570200, 1))
    time.sleep(0.1)
    assert d.vram.read32(0x570200) == 0 and d.board.gfx.queues[(1, 0, 0)].busy()
    d.vram.write32(0x570000, 5)
    assert _until(lambda: d.vram.read32(0x570200) == 1) and d.vram.read32(0x570100) == 6 and not d.board.errors
  finally: d.close()


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_release_mem_acts_once_the_dispatches_before_it_ended(arch, P):
  """RELEASE_MEM is an end-of-pipe event: the CP reads on (the WRITE_DATA after it lands at once) while its write
  and interrupt wait for the running dispatch; two of them retire in order, the timestamp after the kernel ended."""
  pytest.importorskip("elftools")
  d = Dev(arch, deterministic=False, firmware="loaded")
  try:
    ring, wb = setup_ih(d)
    q = ComputeRing(d)
    d.wr("gc", "regCP_ME1_PIPE0_INT_CNTL", TIME_STAMP_INT_ENABLE=1)
    fence, stamp = q.mc(0x570300), q.mc(0x570308)
    stamp64 = lambda: struct.unpack("<Q", d.vram.readbytes(0x570308, 8))[0]
    rel = lambda a, dw2, data: pkt3(P["PACKET3_RELEASE_MEM"], [0x14 | (5 << 8), dw2, a & 0xffffffff, a >> 32, data, 0, 0x55])
    _spin_then(d, q, P, rel(fence, (1 << 29) | (1 << 24), 0x1111) + rel(stamp, 3 << 29, 0) + _write(q, P, 0x570200, 1))
    assert _until(lambda: d.vram.read32(0x570200) == 1)
    time.sleep(0.05)
    assert d.vram.read32(0x570300) == 0 and stamp64() == 0 and d.vram.read32(ring) == 0   # no write, no interrupt yet
    released = d.board.clock.now()
    d.vram.write32(0x570000, 5)
    assert _until(lambda: stamp64() != 0) and d.vram.read32(0x570300) == 0x1111
    assert stamp64() >= released and d.vram.read32(0x570100) == 6
    e = struct.unpack_from("<8I", d.vram.mem, ring)
    assert (e[0] >> 8) & 0xff == 181 and e[4] == 0x55 and not d.board.errors
  finally: d.close()


def test_close_kills_a_kernel_that_never_finishes(P):
  pytest.importorskip("elftools")
  d = Dev("gfx1100", deterministic=False, firmware="loaded")
  q = ComputeRing(d)
  q.submit(_dispatch_packets(d, q, P, "spin", struct.pack("<QIIQ", q.mc(0x570000), 5, 0, q.mc(0x570100))))
  deadline = time.monotonic() + 5
  while not d.board.gfx.queues[(1, 0, 0)].running and time.monotonic() < deadline: time.sleep(0.001)
  t = d.board.gfx.queues[(1, 0, 0)].running[0]
  d.close()
  assert t is not None and not t.is_alive()
  time.sleep(0.05)
  assert d.board._thread is None                       # nothing restarted the closed board


# Packet fields below as Mesa's sid.h and the kernel's nvd.h define them:
# COPY_DATA: SRC_SEL [3:0] (0 register, 1 memory, 5 immediate, 9 GPU clock), DST_SEL [11:8] (0 register, 5 memory),
# COUNT_SEL bit 16 (64 bits); WRITE_DATA: DST_SEL [11:8], WR_ONE_ADDR bit 16; DMA_DATA: DST_SEL [21:20], SRC_SEL [30:29]
# (0 memory, 2 immediate data), command BYTE_COUNT [25:0], SAS bit 26 / DAS bit 27 (register address space).

def test_copy_data_moves_immediates_memory_registers_and_the_clock(d, P):
  q = ComputeRing(d)
  mc = lambda off: q.mc(0x320000 + off)
  reg = d.addr("gc", "regSCRATCH_REG0")
  d.vram.write64(0x320000, 0x1122334455667788)
  cp = lambda ctl, src, dst: pkt3(P["PACKET3_COPY_DATA"], [ctl, src & 0xffffffff, src >> 32, dst & 0xffffffff, dst >> 32])
  pk = cp(5 | (5 << 8), 0xcafe, mc(0x40))                           # immediate -> memory (32 bits)
  pk += cp(5 | (5 << 8) | (1 << 16), 0xaaaa_bbbb_cccc_dddd, mc(0x48))   # immediate -> memory (64 bits)
  pk += cp(1 | (5 << 8) | (1 << 16), mc(0), mc(0x50))               # memory -> memory (64 bits)
  pk += cp(1 | (0 << 8), mc(4), reg)                                # memory -> register
  pk += cp(0 | (5 << 8), reg, mc(0x58))                             # register -> memory
  pk += cp(9 | (5 << 8) | (1 << 16), 0, mc(0x60))                   # GPU clock -> memory
  pk += cp(9 | (5 << 8) | (1 << 16), 0, mc(0x68))
  q.submit(pk)
  q.run()
  assert d.vram.read32(0x320040) == 0xcafe and d.vram.read64(0x320048) == 0xaaaa_bbbb_cccc_dddd
  assert d.vram.read64(0x320050) == 0x1122334455667788
  assert d.rd("gc", "regSCRATCH_REG0") == 0x11223344 == d.vram.read32(0x320058)
  t0, t1 = d.vram.read64(0x320060), d.vram.read64(0x320068)
  assert 0 < t0 <= t1 and q.hqd("regCP_HQD_PQ_RPTR") == len(pk)


def test_set_uconfig_reg_and_write_data_to_registers(d, P):
  q = ComputeRing(d)
  r0, r1 = d.addr("gc", "regSCRATCH_REG0"), d.addr("gc", "regSCRATCH_REG1")
  q.submit(pkt3(P["PACKET3_SET_UCONFIG_REG"], [r0 - P["PACKET3_SET_UCONFIG_REG_START"], 5, 6]))   # two registers in a row
  q.run()
  assert (d.rd("gc", "regSCRATCH_REG0"), d.rd("gc", "regSCRATCH_REG1")) == (5, 6)
  dst = q.mc(0x321000)
  pk = pkt3(P["PACKET3_WRITE_DATA"], [0 << 8, r0, 0, 7, 8])                      # register, incrementing address
  pk += pkt3(P["PACKET3_WRITE_DATA"], [(5 << 8) | (1 << 16), dst & 0xffffffff, dst >> 32, 1, 2, 3])   # one address
  q.submit(pk)
  q.run()
  assert (d.rd("gc", "regSCRATCH_REG0"), d.rd("gc", "regSCRATCH_REG1")) == (7, 8) and r1 == r0 + 1
  assert d.vram.read32(0x321000) == 3 and d.vram.read32(0x321004) == 0             # each value to the same dword


def test_dma_data_fills_and_copies_memory(d, P):
  q = ComputeRing(d)
  src, dst, fill = q.mc(0x322000), q.mc(0x322100), q.mc(0x322200)
  d.vram.writebytes(0x322000, bytes(range(64)))
  dma = lambda ctl, lo, hi, t, n: pkt3(P["PACKET3_DMA_DATA"], [ctl, lo, hi, t & 0xffffffff, t >> 32, n])
  q.submit(dma((1 << 31) | (0 << 29), src & 0xffffffff, src >> 32, dst, 64)   # CP_SYNC, from memory
           + dma(2 << 29, 0x5a5a0102, 0, fill, 32))                           # immediate data
  q.run()
  assert d.vram.readbytes(0x322100, 64) == bytes(range(64))
  assert d.vram.readbytes(0x322200, 36) == (0x5a5a0102).to_bytes(4, "little") * 8 + bytes(4)


def test_dma_data_without_address_increment(d, P):
  """COMMAND.SAIC / DAIC (pkt3.json COMMAND__SAIC: NO_INCREMENT, nvd.h PACKET3_DMA_DATA_CMD_SAIC/DAIC): a source that
  stays put repeats its first dword; a destination that stays put keeps the last (both ran as a plain copy)."""
  q = ComputeRing(d)
  src, dst, fill = q.mc(0x322000), q.mc(0x322100), q.mc(0x322200)
  d.vram.writebytes(0x322000, bytes(range(16)))
  d.vram.writebytes(0x322100, bytes(32)); d.vram.writebytes(0x322200, bytes(32))
  dma = lambda ctl, lo, hi, t, n: pkt3(P["PACKET3_DMA_DATA"], [ctl, lo, hi, t & 0xffffffff, t >> 32, n])
  q.submit(dma(0, src & 0xffffffff, src >> 32, dst, (1 << 28) | 16)            # SAIC: source dword 0, four times
           + dma(0, src & 0xffffffff, src >> 32, dst + 16, (1 << 29) | 16)     # DAIC: the last source dword, once
           + dma(2 << 29, 0x5a5a0102, 0, fill, (1 << 29) | 16))               # DAIC with immediate data: one dword
  q.run()
  assert d.vram.readbytes(0x322100, 16) == bytes(range(4)) * 4
  assert d.vram.readbytes(0x322110, 8) == bytes(range(12, 16)) + bytes(4)
  assert d.vram.readbytes(0x322200, 8) == (0x5a5a0102).to_bytes(4, "little") + bytes(4)


def test_a_64_bit_copy_data_takes_8_byte_aligned_addresses(d, P):
  """COPY_DATA's 64-bit (COUNT_SEL) memory addresses are [31:3] (nvd.h COPY_DATA__SRC_64B_ADDR_LO, DST_64B_ADDR_LO):
  address bit 2 is not an address bit then (the source kept it, the destination dropped only bits 0-1)."""
  q = ComputeRing(d)
  d.vram.writebytes(0x320000, bytes(range(16))); d.vram.writebytes(0x320100, bytes(16))
  src, dst = q.mc(0x320004), q.mc(0x320104)
  q.submit(pkt3(P["PACKET3_COPY_DATA"], [1 | (5 << 8) | (1 << 16), src & 0xffffffff, src >> 32, dst & 0xffffffff, dst >> 32]))
  q.run()
  assert d.vram.readbytes(0x320100, 16) == bytes(range(8)) + bytes(8)


def test_dma_data_from_a_register_halts_the_queue(d, P):
  q = ComputeRing(d)
  dst = q.mc(0x323000)
  q.submit(pkt3(P["PACKET3_DMA_DATA"], [0, 0x1234, 0, dst & 0xffffffff, dst >> 32, (1 << 26) | 4]))   # SAS: a register source
  q.run()
  assert q.hqd("regCP_HQD_PQ_RPTR") == 0 and "register" in d.board.gfx.queues[(1, 0, 0)].hung


def test_the_2_dword_dispatch_indirect_is_not_modelled_on_a_compute_queue(d, P):
  """radv sends the MEC the 3-dword DISPATCH_INDIRECT (the dimensions' address) and the SET_BASE-relative 2-dword form
  only to the graphics ring: on a compute queue the model stops, saying so, and launches nothing."""
  q = ComputeRing(d)
  base = 0x570000
  for i, v in enumerate((5, 4, 3)): d.vram.write32(base + 0x40 + 4 * i, v)
  q.submit(pkt3(P["PACKET3_SET_BASE"], [1, q.mc(base) & 0xffffffff, q.mc(base) >> 32]) + pkt3(P["PACKET3_DISPATCH_INDIRECT"], [0x40, 1]))
  q.run()
  cq = d.board.gfx.queues[(1, 0, 0)]
  assert "2-dword DISPATCH_INDIRECT" in (cq.hung or "") and "not modelled" in cq.hung and cq.dispatches == 0


def test_wait_reg_mem_greater_than_and_release_mem_clock(d, P):
  q = ComputeRing(d)
  sem, ts, done = q.mc(0x324000), q.mc(0x324040), q.mc(0x324080)
  d.vram.write32(0x324000, 7)
  pk = pkt3(P["PACKET3_WAIT_REG_MEM"], [(1 << 4) | 6, sem & 0xffffffff, sem >> 32, 7, 0xffffffff, 4])   # > 7
  pk += pkt3(P["PACKET3_RELEASE_MEM"], [0x14 | (5 << 8), 3 << 29, ts & 0xffffffff, ts >> 32, 0, 0, 0])   # GPU clock
  pk += pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, done & 0xffffffff, done >> 32, 1])
  q.submit(pk)
  q.run()
  assert d.vram.read32(0x324080) == 0                                   # 7 is not > 7
  d.vram.write32(0x324000, 8)
  q.run()
  assert d.vram.read32(0x324080) == 1 and d.vram.read64(0x324040) > 0
  q.submit(pkt3(P["PACKET3_RELEASE_MEM"], [0x14 | (5 << 8), 6 << 29, ts & 0xffffffff, ts >> 32, 0, 0, 0]))   # data_sel 6: none such
  q.run()
  assert "data_sel" in d.board.gfx.queues[(1, 0, 0)].hung


def test_kiq_query_status_and_unmap_queues(d, P):
  """On the KIQ: QUERY_STATUS writes its fence value; UNMAP_QUEUES stops the queue behind a doorbell, which then
  fetches nothing more."""
  kiq = ComputeRing(d)
  d.wr("gc", "regRLC_CP_SCHEDULERS", (1 << 5) | 0x80)
  other = ComputeRing(d, ring_off=0x480000, db=16, queue=1, rptr_off=0x47f000)
  fence, dst = kiq.mc(0x490000), kiq.mc(0x490100)
  kiq.submit(pkt3(P["PACKET3_QUERY_STATUS"], [0, 0, fence & 0xffffffff, fence >> 32, 0x1234_5678, 0x9abc_def0]))
  kiq.run()
  assert d.vram.read64(0x490000) == 0x9abc_def0_1234_5678
  other.submit(pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 8]))
  other.run()
  assert d.vram.read32(0x490100) == 8                                   # the queue runs while mapped
  kiq.submit(pkt3(P["PACKET3_UNMAP_QUEUES"], [0, 16 << 2, 0, 0, 0]))
  kiq.run()
  other.submit(pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 9]))
  other.run()
  assert d.vram.read32(0x490100) == 8


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_unmap_queues_stops_the_waves_of_the_queue_it_unmaps(arch, P):
  """UNMAP_QUEUES through the KIQ takes the queue off with its waves: a kernel spinning on it stops where it is
  (its WaveRun ends without a result) and the queue reads as inactive."""
  pytest.importorskip("elftools")
  d = Dev(arch, deterministic=False, firmware="loaded")
  try:
    kiq = ComputeRing(d)
    d.wr("gc", "regRLC_CP_SCHEDULERS", (1 << 5) | 0x80)
    other = ComputeRing(d, ring_off=0x480000, db=16, queue=1, rptr_off=0x47f000)
    other.submit(_dispatch_packets(d, other, P, "spin", struct.pack("<QIIQ", other.mc(0x570000), 5, 0, other.mc(0x570100))))
    cq = d.board.gfx.queues[(1, 0, 1)]
    assert _until(lambda: cq.running, 5)
    run = cq.running[0]
    kiq.submit(pkt3(P["PACKET3_UNMAP_QUEUES"], [0, 16 << 2, 0, 0, 0]))
    assert _until(lambda: not cq.active, 5) and not run.is_alive() and cq.running == [] and not d.board.errors
  finally: d.close()


def test_a_dispatch_with_scratch_waits_for_one_in_flight(d, P, monkeypatch):
  """The compute units hand each dispatch its scratch slots from the first; the hardware shares the ring's slots out
  across dispatches. So a second dispatch with SCRATCH_EN launches only once the one in flight ended (a schedule the
  hardware can take: waves without a free slot wait), while one without scratch launches beside it."""
  import rawgpu.drivers.emu.shader as cus
  launched, release = [], []
  def waves(mem, regs, **kw):
    launched.append(bool(cus.decode_regs(regs).scratch_en))
    while not release: yield
    return cus.DispatchResult(True, None, None, 0)
  monkeypatch.setattr(cus, "dispatch_slices", waves)
  rsrc2 = lambda **f: pkt3(P["PACKET3_SET_SH_REG"], [d.addr("gc", "regCOMPUTE_PGM_RSRC2") - P["PACKET3_SET_SH_REG_START"],
                                                     d.tables["gc"]["regCOMPUTE_PGM_RSRC2"].encode(**f)])
  go = pkt3(P["PACKET3_DISPATCH_DIRECT"], [1, 1, 1, 1])
  q = ComputeRing(d)
  q.submit(rsrc2(SCRATCH_EN=1) + go + rsrc2(SCRATCH_EN=0) + go + rsrc2(SCRATCH_EN=1) + go)
  for _ in range(40): d.board.step()
  assert launched == [True, False]                 # the second scratch dispatch waits for the first
  release.append(1)
  for _ in range(40): d.board.step()
  assert launched == [True, False, True] and d.board.gfx.queues[(1, 0, 0)].hung is None
