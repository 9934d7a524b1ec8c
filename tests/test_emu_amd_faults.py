"""Harvested WGPs as amdgpu counts them, and the board's fault injection: hung queues, page faults, removal."""
from __future__ import annotations
import pytest
from test_emu_amd_common import ComputeRing, d, Dev, nvd, pkt3


@pytest.mark.parametrize("arch,cus", [("gfx1100", 8), ("gfx1201", 6), ("gfx1100", None)])
def test_active_cus_counted_like_amdgpu(arch, cus):
  d = Dev(arch, cus=cus)
  try:
    gc = d.disc["gc_info"]
    n_se, wgp_per_sa, n_sa = gc[0], gc[1] + gc[2], gc[16]
    total = 0
    for se in range(n_se):
      for sa in range(n_sa):                                # gfx_v11_0_get_cu_info: select SE/SA, read the inactive mask
        d.wr("gc", "regGRBM_GFX_INDEX", SE_INDEX=se, SA_INDEX=sa, INSTANCE_BROADCAST_WRITES=1)
        inactive = d.f("gc", "regCC_GC_SHADER_ARRAY_CONFIG", d.rd("gc", "regCC_GC_SHADER_ARRAY_CONFIG"), "INACTIVE_WGPS")
        total += 2 * bin(~inactive & ((1 << wgp_per_sa) - 1)).count("1")
    d.wr("gc", "regGRBM_GFX_INDEX", SE_BROADCAST_WRITES=1, SA_BROADCAST_WRITES=1, INSTANCE_BROADCAST_WRITES=1)
    assert total == (cus if cus else 2 * n_se * n_sa * wgp_per_sa)
  finally: d.close()


def test_hung_queue_injection(d):
  P = nvd()
  q = ComputeRing(d)
  d.board.inject("hung_queue", engine="compute")
  dst = q.mc(0x300000)
  q.submit(pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 1]))
  q.run()
  assert d.vram.read32(0x300000) == 0 and q.hqd("regCP_HQD_PQ_RPTR") == 0
  assert d.rd("gc", "regCP_STAT") != 0
  d.board.clear_faults(); q.run()
  assert d.vram.read32(0x300000) == 1


def test_injected_page_fault_reports_like_a_missing_page(d):
  from test_emu_amd_gmc import setup_ih
  setup_ih(d)
  P = nvd()
  q = ComputeRing(d)
  dst = q.mc(0x300000)
  d.board.inject("page_fault", va=dst)
  q.submit(pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 1]))
  q.run()
  assert d.vram.read32(0x300000) == 0 and d.board.gfx.queues[(1, 0, 0)].hung
  fa = (d.rd("gc", "regGCVM_L2_PROTECTION_FAULT_ADDR_HI32") << 32 | d.rd("gc", "regGCVM_L2_PROTECTION_FAULT_ADDR_LO32")) << 12
  assert fa == dst & ~0xfff


def test_surprise_removal_everything_reads_all_ones(d):
  d.board.inject("surprise_removal")
  assert d.mmio.read32(d.addr("gc", "regCP_STAT") * 4) == 0xffffffff
  assert d.db.read64(0) == 0xffffffffffffffff
  assert d.pci.config_read(0, 2) == 0xffff
  d.mmio.write32(d.addr("gc", "regSCRATCH_REG0") * 4, 5)        # writes go nowhere
  d.board.clear_faults()
  assert d.rd("gc", "regSCRATCH_REG0") == 0


def test_unknown_fault_kind_is_an_error(d):
  with pytest.raises(ValueError): d.board.inject("melt")


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_golden_tsc_counts(arch):
  """gfx_v11_0_get_gpu_clock_counter: upper, lower, upper from SMUIO at the base discovery publishes (SMUIO id 4)."""
  from rawgpu.autogen.regs import ip_regs
  d = Dev(arch, deterministic=False)
  try:
    t = ip_regs("smuio", 13, 0, 6) if arch == "gfx1100" else ip_regs("smuio", 14, 0, 2)
    bases = d.disc["ips"][4][1]
    rd = lambda n: d.mmio.read32(t[n].addr(bases) * 4)
    a = (rd("regGOLDEN_TSC_COUNT_UPPER") << 32) | rd("regGOLDEN_TSC_COUNT_LOWER")
    import time; time.sleep(0.01)
    b = (rd("regGOLDEN_TSC_COUNT_UPPER") << 32) | rd("regGOLDEN_TSC_COUNT_LOWER")
    assert 0 < a < b
  finally: d.close()
