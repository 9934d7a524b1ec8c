"""SDMA rings from the RB registers and doorbells; COPY_LINEAR, CONST_FILL, WRITE, FENCE, TRAP, POLL_REGMEM,
TIMESTAMP, INDIRECT, NOP with opcodes and field positions parsed from the kernel's sdma_v6_0_0_pkt_open.h."""
from __future__ import annotations
import struct, time
import numpy as np
import pytest
from test_emu_amd_common import Dev, gc_system_aperture, sdma_defs
from test_emu_amd_gmc import PT, enable_context, flush_tlb, pte_bits, setup_ih


@pytest.fixture(params=["gfx1100", "gfx1201"])
def d(request):
  dev = Dev(request.param, firmware="loaded")
  yield dev
  dev.close()


@pytest.fixture(scope="module")
def S(): return sdma_defs()


def hdr(S, op: str, sub: str | None = None, **fields) -> int:
  v = S[f"SDMA_OP_{op}"]
  if sub: v |= S[f"SDMA_SUBOP_{sub}"] << 8
  for k, val in fields.items(): v |= val << S[k]
  return v


class SDMARing:
  """SDMA0 queue 0 set up as sdma_v6_0_gfx_resume_instance does (ring in VRAM at MC addresses)."""
  def __init__(self, d: Dev, ring_off: int = 0x600000, ring_bytes: int = 0x1000, db: int = 0x100, rptr_off: int = 0x5ff000):
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
    d.wr("gc", p + "RB_CNTL", RB_SIZE=(ring_bytes // 4).bit_length() - 1, RPTR_WRITEBACK_ENABLE=1, RB_ENABLE=1, RB_PRIV=1)
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
