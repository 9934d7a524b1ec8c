"""SDMA rings from the RB registers and doorbells; COPY_LINEAR, CONST_FILL, WRITE, FENCE, TRAP, POLL_REGMEM,
TIMESTAMP, INDIRECT, NOP with opcodes and field positions parsed from the kernel's sdma_v6_0_0_pkt_open.h."""
from __future__ import annotations
import struct, time
import numpy as np
import pytest
from test_emu_amd_common import d, Dev, gc_system_aperture, sdma_defs
from test_emu_amd_gmc import PT, enable_context, flush_tlb, pte_bits, setup_ih


@pytest.fixture(scope="module")
def S(): return sdma_defs()


def hdr(S, op: str, sub: str | None = None, **fields) -> int:
  v = S[f"SDMA_OP_{op}"]
  if sub: v |= S[f"SDMA_SUBOP_{sub}"] << 8
  for k, val in fields.items(): v |= val << S[k]
  return v


class SDMARing:
  """SDMA0 queue 0 set up as sdma_v6_0_gfx_resume_instance does (ring in VRAM at MC addresses)."""
  def __init__(self, d: Dev, ring_off: int = 0x600000, ring_bytes: int = 0x1000, db: int = 0x100, rptr_off: int = 0x5ff000, priv: int = 1):
    self.d, self.ring_off, self.size, self.db, self.wptr = d, ring_off, ring_bytes, db, 0
    self.fb = fb = gc_system_aperture(d)
    self.rptr_off = rptr_off
    d.wr("nbio", "regRCC_DEV0_EPF0_RCC_DOORBELL_APER_EN", 1)
    halt = "regSDMA0_F32_CNTL" if "regSDMA0_F32_CNTL" in d.tables["gc"] else "regSDMA0_MCU_CNTL"
    d.wr("gc", halt, d.rd("gc", halt) & ~d.tables["gc"][halt].fields["HALT"][1])
    d.wr("gc", "regSDMA0_CNTL", TRAP_ENABLE=1)
    p = "regSDMA0_QUEUE0_"
    d.wr("gc", p + "MINOR_PTR_UPDATE", 1)
    for r in ("RB_RPTR", "RB_RPTR_HI", "RB_WPTR", "RB_WPTR_HI"): d.wr("gc", p + r, 0)
    ring = fb + ring_off
    d.wr("gc", p + "RB_BASE", (ring >> 8) & 0xffffffff); d.wr("gc", p + "RB_BASE_HI", ring >> 40)
    d.wr("gc", p + "RB_RPTR_ADDR_LO", (fb + rptr_off) & 0xffffffff); d.wr("gc", p + "RB_RPTR_ADDR_HI", (fb + rptr_off) >> 32)
    d.wr("gc", p + "DOORBELL_OFFSET", OFFSET=db); d.wr("gc", p + "DOORBELL", ENABLE=1)
    d.wr("gc", p + "MINOR_PTR_UPDATE", 0)
    d.wr("gc", p + "RB_CNTL", RB_SIZE=(ring_bytes // 4).bit_length() - 1, RPTR_WRITEBACK_ENABLE=1, RB_ENABLE=1, RB_PRIV=priv)
    d.wr("gc", p + "IB_CNTL", IB_ENABLE=1)

  def mc(self, off: int) -> int: return self.fb + off

  def submit(self, dws: list[int]) -> None:
    for v in dws:
      self.d.vram.write32(self.ring_off + (self.wptr % self.size), v & 0xffffffff)
      self.wptr += 4
    self.d.db.write64(self.db * 4, self.wptr)

  def run(self) -> None: self.d.board.run_until_idle()


def test_copy_fill_write_fence_and_rptr_writeback(d, S):
  q = SDMARing(d)
  src, dst, fill, wr, fence = 0x700000, 0x710000, 0x720000, 0x730000, 0x740000
  data = bytes(range(256)) * 16
  d.vram.writebytes(src, data)
  pk = [hdr(S, "COPY", "COPY_LINEAR"), len(data) - 1, 0, q.mc(src) & 0xffffffff, q.mc(src) >> 32, q.mc(dst) & 0xffffffff, q.mc(dst) >> 32]
  pk += [hdr(S, "CONST_FILL", SDMA_PKT_CONSTANT_FILL_HEADER_fillsize_shift=2), q.mc(fill) & 0xffffffff, q.mc(fill) >> 32, 0xa5a5a5a5, 4096 - 1]
  pk += [hdr(S, "WRITE", "WRITE_LINEAR"), q.mc(wr) & 0xffffffff, q.mc(wr) >> 32, 3 - 1, 7, 8, 9]
  pk += [hdr(S, "NOP") | (2 << S["SDMA_PKT_NOP_HEADER_count_shift"]), 0xdead, 0xbeef]     # NOP skipping two dwords
  pk += [hdr(S, "FENCE"), q.mc(fence) & 0xffffffff, q.mc(fence) >> 32, 0xfeedf00d]
  q.submit(pk)
  q.run()
  assert d.vram.readbytes(dst, len(data)) == data
  assert d.vram.readbytes(fill, 4096) == b"\xa5" * 4096
  assert [d.vram.read32(wr + 4 * i) for i in range(3)] == [7, 8, 9]
  assert d.vram.read32(fence) == 0xfeedf00d
  assert d.vram.read64(q.rptr_off) == q.wptr                                  # 64-bit byte read pointer


def test_sdma7_copy_with_cpv_carries_its_compression_parameter_dword(d, S):
  """SDMA 7 (gfx12): sdma_v7_0_emit_copy_buffer sets the header's cpv and writes an 8th dword (the compression
  parameters; 0: none); the engine takes it as part of the packet, so the FENCE after it runs. Without cpv the packet
  is 7 dwords (Mesa's radv_sdma form), on SDMA 6 too."""
  q = SDMARing(d)
  src, dst, fence = 0x700000, 0x710000, 0x740000
  data = bytes(range(256)) * 4
  d.vram.writebytes(src, data)
  from rawgpu.drivers.emu.amd.asic import SDMA0_HWID
  cpv = d.board.asic.version(SDMA0_HWID)[0] >= 7
  copy = [hdr(S, "COPY", "COPY_LINEAR", SDMA_PKT_COPY_LINEAR_HEADER_cpv_shift=int(cpv)), len(data) - 1, 0,
          q.mc(src) & 0xffffffff, q.mc(src) >> 32, q.mc(dst) & 0xffffffff, q.mc(dst) >> 32] + [0] * cpv
  plain = [hdr(S, "COPY", "COPY_LINEAR"), len(data) - 1, 0, q.mc(src) & 0xffffffff, q.mc(src) >> 32,
           q.mc(dst + 0x1000) & 0xffffffff, q.mc(dst + 0x1000) >> 32]
  q.submit(copy + plain + [hdr(S, "FENCE"), q.mc(fence) & 0xffffffff, q.mc(fence) >> 32, 0xfeedf00d])
  q.run()
  assert d.vram.readbytes(dst, len(data)) == data and d.vram.readbytes(dst + 0x1000, len(data)) == data
  assert d.vram.read32(fence) == 0xfeedf00d and d.vram.read64(q.rptr_off) == q.wptr
  if cpv:   # cpv set but no parameter dword: the next packet's header is taken for it, and that FENCE never runs
    q.submit(copy[:7] + [hdr(S, "FENCE"), q.mc(fence + 8) & 0xffffffff, q.mc(fence + 8) >> 32, 0xfeedf00d])
    q.run()
    assert d.vram.read32(fence + 8) != 0xfeedf00d


def test_trap_raises_ih_entry(d, S):
  ring, wb = setup_ih(d)
  q = SDMARing(d)
  q.submit([hdr(S, "TRAP"), 0x123])
  q.run()
  e = struct.unpack_from("<8I", d.vram.mem, ring)
  assert e[0] & 0xff == 0x0a and (e[0] >> 8) & 0xff == 49 and e[4] == 0x123   # SOC21 GFX client, SDMA_TRAP
  assert (e[0] >> 16) & 0xff == 0                                             # sdma_v6_0_process_trap_irq: instance 0 queue 0


def test_poll_regmem_waits_for_memory(d, S):
  q = SDMARing(d)
  sem, fence = 0x750000, 0x750100
  d.vram.write32(sem, 0)
  pk = [hdr(S, "POLL_REGMEM", SDMA_PKT_POLL_REGMEM_HEADER_func_shift=3, SDMA_PKT_POLL_REGMEM_HEADER_mem_poll_shift=1),
        q.mc(sem) & 0xffffffff, q.mc(sem) >> 32, 5, 0xffffffff, (0xfff << 16) | 10]
  pk += [hdr(S, "FENCE"), q.mc(fence) & 0xffffffff, q.mc(fence) >> 32, 1]
  q.submit(pk)
  q.run()
  assert d.vram.read32(fence) == 0
  d.vram.write32(sem, 5)
  q.run()
  assert d.vram.read32(fence) == 1


def test_context_status_says_when_a_queue_is_idle(d, S):
  """QUEUE0_CONTEXT_STATUS.IDLE (what amdkfd's hqd_sdma_destroy polls after turning the ring off): clear while a
  packet of the enabled queue is in progress or waiting, set once the queue is off or has nothing to do."""
  q = SDMARing(d)
  idle = lambda: d.rd("gc", "regSDMA0_QUEUE0_CONTEXT_STATUS") & d.tables["gc"]["regSDMA0_QUEUE0_CONTEXT_STATUS"].fields["IDLE"][1]
  assert idle()
  sem = 0x760000
  d.vram.write32(sem, 0)
  q.submit([hdr(S, "POLL_REGMEM", SDMA_PKT_POLL_REGMEM_HEADER_func_shift=3, SDMA_PKT_POLL_REGMEM_HEADER_mem_poll_shift=1),
            q.mc(sem) & 0xffffffff, q.mc(sem) >> 32, 5, 0xffffffff, (0xfff << 16) | 10])
  q.run()
  assert not idle()                                   # waiting in its POLL_REGMEM
  d.wr("gc", "regSDMA0_QUEUE0_RB_CNTL", d.rd("gc", "regSDMA0_QUEUE0_RB_CNTL") & ~1)   # RB_ENABLE off
  assert idle()


def test_timestamp_is_monotonic(d, S):
  q = SDMARing(d)
  a, b = 0x760000, 0x760008
  q.submit([hdr(S, "TIMESTAMP", "TIMESTAMP_GET_GLOBAL"), q.mc(a) & 0xffffffff, q.mc(a) >> 32])
  q.run()
  q.submit([hdr(S, "TIMESTAMP", "TIMESTAMP_GET_GLOBAL"), q.mc(b) & 0xffffffff, q.mc(b) >> 32])
  q.run()
  assert 0 < d.vram.read64(a) < d.vram.read64(b)


def test_indirect_buffer(d, S):
  q = SDMARing(d)
  ib, fence = 0x770000, 0x770100
  body = [hdr(S, "FENCE"), q.mc(fence) & 0xffffffff, q.mc(fence) >> 32, 31]
  for i, v in enumerate(body): d.vram.write32(ib + 4 * i, v)
  q.submit([hdr(S, "INDIRECT"), q.mc(ib) & 0xffffffff, q.mc(ib) >> 32, len(body), 0, 0])
  q.run()
  assert d.vram.read32(fence) == 31
  body[3] = 32    # patched in place after the first run: the second run executes the new words
  for i, v in enumerate(body): d.vram.write32(ib + 4 * i, v)
  q.submit([hdr(S, "INDIRECT"), q.mc(ib) & 0xffffffff, q.mc(ib) >> 32, len(body), 0, 0])
  q.run()
  assert d.vram.read32(fence) == 32


def test_unknown_opcode_halts_ring(d, S):
  q = SDMARing(d)
  fence = 0x780000
  ops = {v for k, v in S.items() if k.startswith("SDMA_OP_")}
  bad = next(o for o in range(0xff, 0, -1) if o not in ops)
  q.submit([bad, hdr(S, "FENCE"), q.mc(fence) & 0xffffffff, q.mc(fence) >> 32, 1])
  q.run()
  assert d.vram.read32(fence) == 0 and d.rd("gc", "regSDMA0_QUEUE0_RB_RPTR") == 0


def test_halted_engine_does_not_run(S):
  d = Dev("gfx1100", firmware="loaded")
  try:
    q = SDMARing(d)
    d.wr("gc", "regSDMA0_F32_CNTL", HALT=1)
    q.submit([hdr(S, "FENCE"), q.mc(0x790000) & 0xffffffff, q.mc(0x790000) >> 32, 1])
    q.run()
    assert d.vram.read32(0x790000) == 0
  finally: d.close()


def test_copy_through_page_tables_to_host(d, S):
  """A 4 MiB copy VRAM -> host pages mapped with SYSTEM PTEs, compared byte for byte."""
  d.pci.enable_bus_master()
  bits = pte_bits()
  pt = PT(d, bits, base=0x100000)
  q = SDMARing(d)
  n = 4 << 20
  host = d.pci.alloc_host(n)
  src_va, dst_va = 0x2000_0000, 0x3000_0000
  for i in range(0, n, 0x200000): pt.map(src_va + i, 0x1000000 + i, huge=True)
  for i, ba in enumerate(host.bus_addrs): pt.map(dst_va + i * 4096, ba, system=True)
  enable_context(d, "gc", pt)
  flush_tlb(d, "gc")
  data = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8).tobytes()
  d.vram.writebytes(0x1000000, data)
  q.submit([hdr(S, "COPY", "COPY_LINEAR"), n - 1, 0, src_va & 0xffffffff, src_va >> 32, dst_va & 0xffffffff, dst_va >> 32])
  q.run()
  assert host.view.readbytes(0, n) == data


def test_concurrent_mode_fence():
  S = sdma_defs()
  d = Dev("gfx1100", deterministic=False, firmware="loaded")
  try:
    q = SDMARing(d)
    q.submit([hdr(S, "FENCE"), q.mc(0x7a0000) & 0xffffffff, q.mc(0x7a0000) >> 32, 99])
    deadline = time.monotonic() + 20
    while d.vram.read32(0x7a0000) != 99 and time.monotonic() < deadline: time.sleep(0.001)
    assert d.vram.read32(0x7a0000) == 99
  finally: d.close()


def fence_pk(S, q: SDMARing, off: int, v: int) -> list[int]: return [hdr(S, "FENCE"), q.mc(off) & 0xffffffff, q.mc(off) >> 32, v]


def ih_sources(d, ring: int, n: int = 8) -> list[tuple[int, int]]:
  """(client, source) of the first n IH entries."""
  return [(e[0] & 0xff, (e[0] >> 8) & 0xff) for e in (struct.unpack_from("<8I", d.vram.mem, ring + 32 * i) for i in range(n))]


def test_rb_rptr_is_the_whole_64_bit_pointer_past_a_wrap(d, S):
  """RB_RPTR/RB_RPTR_HI count on as the write pointer does (amdkfd saves them at a queue's destroy and restores them
  with the user's monotonic write pointer): after a wrap they read the pointer, not its offset in the ring."""
  q = SDMARing(d, ring_bytes=0x100)
  nop = [hdr(S, "NOP") | (15 << S["SDMA_PKT_NOP_HEADER_count_shift"])] + [0] * 15   # 64 bytes
  for _ in range(5):
    q.submit(nop)
    q.run()
  rptr = d.rd("gc", "regSDMA0_QUEUE0_RB_RPTR") | d.rd("gc", "regSDMA0_QUEUE0_RB_RPTR_HI") << 32
  assert rptr == q.wptr == 0x140 == d.vram.read64(q.rptr_off)
  # disabled and enabled again (hqd_sdma_destroy, then a restore): the engine resumes where it was, re-running nothing
  fence = 0x7a0000
  d.wr("gc", "regSDMA0_QUEUE0_RB_CNTL", d.rd("gc", "regSDMA0_QUEUE0_RB_CNTL") & ~1)
  d.wr("gc", "regSDMA0_QUEUE0_RB_CNTL", d.rd("gc", "regSDMA0_QUEUE0_RB_CNTL") | 1)
  q.submit(fence_pk(S, q, fence, 7))
  q.run()
  assert d.vram.read32(fence) == 7 and d.vram.read64(q.rptr_off) == q.wptr


def test_vm_invalidation_asks_the_hub_and_is_four_dwords(d, S):
  """POLL_REGMEM sub-op VM_INVALIDATION (sdma_v6_0_ring_emit_vm_flush) is a 4-dword packet that makes the GC hub's
  invalidation engine take the request; the packet after it runs."""
  q = SDMARing(d)
  fence, eng, vmid = 0x7b0000, 5, 3
  req = 1 << vmid   # PER_VMID_INVALIDATE_REQ
  q.submit([hdr(S, "POLL_REGMEM", "VM_INVALIDATION", SDMA_PKT_VM_INVALIDATION_HEADER_gfx_eng_id_shift=eng,
                SDMA_PKT_VM_INVALIDATION_HEADER_mm_eng_id_shift=0x1f), req, 0xffffffff, (1 << vmid) | (0x1f << 16)]
           + fence_pk(S, q, fence, 9))
  q.run()
  assert d.vram.read32(fence) == 9
  assert d.rd("gc", f"regGCVM_INVALIDATE_ENG{eng}_REQ") == req and d.rd("gc", f"regGCVM_INVALIDATE_ENG{eng}_ACK") & 0xffff == 1 << vmid


@pytest.mark.parametrize("sub", ["POLL_REG_WRITE_MEM", "POLL_DBIT_WRITE_MEM", "POLL_MEM_VERIFY"])
def test_poll_regmem_sub_ops_that_are_other_packets_stop_the_queue(d, S, sub):
  q = SDMARing(d)
  fence = 0x7b1000
  q.submit([hdr(S, "POLL_REGMEM", sub), 0, 0, 0, 0, 0] + fence_pk(S, q, fence, 1))
  q.run()
  hung = d.board.sdma.engines[0].queues[0].hung
  assert d.vram.read32(fence) == 0 and hung == f"SDMA_OP_POLL_REGMEM (opcode 8, sub-op {S[f'SDMA_SUBOP_{sub}']}) is not modelled"
  assert d.board.unmodelled == [f"SDMA engine 0 queue 0: {hung}"]


def register_write(d, S, reg: int, value: int, byte_en: int = 0xf) -> list[int]:
  """A register write as amdgpu emits it (*_ring_emit_wreg): SDMA 6's SRBM_WRITE takes byte enables and the dword
  address; SDMA 7's REGISTER_WRITE, the same opcode, the byte address and the whole dword."""
  if d.board.sdma.engines[0].v7: return [hdr(S, "SRBM_WRITE"), reg << 2, value]
  return [hdr(S, "SRBM_WRITE") | (byte_en << 28), reg, value]


def test_a_register_write_in_each_versions_form(d, S):
  """amdgpu's own form writes the register on both SDMA 6 and 7 (SDMA 7's was read as SDMA 6's, with no byte
  enabled and the byte address taken for a dword one: nothing was written); SDMA 6's byte enables write only theirs."""
  reg = d.board.regs.addr("gc", "regSCRATCH_REG0")
  d.wr("gc", "regSCRATCH_REG0", 0x11111111)
  q = SDMARing(d)
  q.submit(register_write(d, S, reg, 0xcafef00d))
  q.run()
  assert d.rd("gc", "regSCRATCH_REG0") == 0xcafef00d
  if not d.board.sdma.engines[0].v7:
    d.wr("gc", "regSDMA0_QUEUE0_RB_CNTL", 0)
    q = SDMARing(d)
    q.submit(register_write(d, S, reg, 0x22334455, byte_en=0b0011))
    q.run()
    assert d.rd("gc", "regSCRATCH_REG0") == 0xcafe4455


def test_srbm_write_is_refused_in_an_unprivileged_queue(d, S):
  """A user queue (RB_PRIV=0) may not write registers: the engine refuses SRBM_WRITE with its interrupt
  (SDMA_SRBMWRITE, "SRBM write Protection") and, in this model, stops."""
  ring, _wb = setup_ih(d)
  reg = d.board.regs.addr("gc", "regSCRATCH_REG0")
  for priv in (1, 0):
    d.wr("gc", "regSDMA0_QUEUE0_RB_CNTL", 0)   # off, then set up again (as a user queue the second time)
    q = SDMARing(d, priv=priv)
    q.submit(register_write(d, S, reg, 0xcafe0000 | priv))
    q.run()
  assert d.rd("gc", "regSCRATCH_REG0") == 0xcafe0001   # the privileged queue's write, not the user queue's
  assert "unprivileged" in d.board.sdma.engines[0].queues[0].hung
  assert (0x0a, 50) in ih_sources(d, ring)


def test_broadcast_copy_writes_both_destinations(d, S):
  q = SDMARing(d)
  src, d1, d2, fence = 0x7c0000, 0x7c1000, 0x7c2000, 0x7c3000
  data = bytes(range(200))
  d.vram.writebytes(src, data)
  q.submit([hdr(S, "COPY", "COPY_LINEAR") | 1 << 27, len(data) - 1, 0, q.mc(src) & 0xffffffff, q.mc(src) >> 32,
            q.mc(d1) & 0xffffffff, q.mc(d1) >> 32, q.mc(d2) & 0xffffffff, q.mc(d2) >> 32] + fence_pk(S, q, fence, 1))
  q.run()
  assert d.vram.readbytes(d1, 200) == d.vram.readbytes(d2, 200) == data and d.vram.read32(fence) == 1


def test_poll_with_a_finite_retry_count_gives_up_with_its_interrupt(d, S):
  ring, _wb = setup_ih(d)
  q = SDMARing(d)
  sem, fence = 0x7d0000, 0x7d0100
  d.vram.write32(sem, 0)
  q.submit([hdr(S, "POLL_REGMEM", SDMA_PKT_POLL_REGMEM_HEADER_func_shift=3, SDMA_PKT_POLL_REGMEM_HEADER_mem_poll_shift=1),
            q.mc(sem) & 0xffffffff, q.mc(sem) >> 32, 5, 0xffffffff, (3 << 16) | 10] + fence_pk(S, q, fence, 1))
  q.run()
  assert d.board.sdma.engines[0].queues[0].hung is None   # one failed try: it polls again
  for _ in range(3): d.board.step()                       # each engine pass polls once more
  assert d.vram.read32(fence) == 0 and "gave up after 3 retries" in d.board.sdma.engines[0].queues[0].hung
  assert (0x0a, 57) in ih_sources(d, ring)


def test_local_timestamp_is_set_and_counts_on(d, S):
  """TIMESTAMP_SET loads the engine's local counter; TIMESTAMP_GET reads it (counting on with the clock), while
  GET_GLOBAL reads the GPU clock itself."""
  q = SDMARing(d)
  a, g = 0x7e0000, 0x7e0008
  start = 1 << 50
  q.submit([hdr(S, "TIMESTAMP", "TIMESTAMP_SET"), start & 0xffffffff, start >> 32,
            hdr(S, "TIMESTAMP", "TIMESTAMP_GET"), q.mc(a) & 0xffffffff, q.mc(a) >> 32,
            hdr(S, "TIMESTAMP", "TIMESTAMP_GET_GLOBAL"), q.mc(g) & 0xffffffff, q.mc(g) >> 32])
  q.run()
  assert start <= d.vram.read64(a) < start + (1 << 40) and 0 < d.vram.read64(g) < start
