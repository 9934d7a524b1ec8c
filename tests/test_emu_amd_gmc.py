"""GMC hubs: FB location, system aperture, multi-level page walk with this generation's PDE/PTE bits, TLB and its
invalidation engines, protection-fault registers and the IH entry a fault raises; IH ring mechanics; HDP flush.

Page tables are written into VRAM through BAR0 by the test, with bit values parsed from the kernel's amdgpu_vm.h.
"""
from __future__ import annotations
import re, struct
import pytest
from test_emu_amd_common import Dev, linux_root, dev  # noqa: F401  (dev is a fixture)


def pte_bits() -> dict[str, int]:
  text = (linux_root() / "drivers/gpu/drm/amd/amdgpu/amdgpu_vm.h").read_text()
  out = {}
  for name in ("AMDGPU_PTE_VALID", "AMDGPU_PTE_SYSTEM", "AMDGPU_PTE_SNOOPED", "AMDGPU_PTE_READABLE", "AMDGPU_PTE_WRITEABLE",
               "AMDGPU_PDE_PTE", "AMDGPU_PDE_PTE_GFX12", "AMDGPU_PTE_IS_PTE"):
    m = re.search(rf"#define {name}\s+\(1ULL << (\d+)\)", text)
    out[name] = 1 << int(m.group(1))
  m = re.search(r"#define AMDGPU_PTE_FRAG\(x\)\s+\(\(x & 0x1fULL\) << (\d+)\)", text)
  out["FRAG_SHIFT"] = int(m.group(1))
  return out


class PT:
  """Page tables built in VRAM the way amdgpu lays them out: 4 levels (PDB2, PDB1, PDB0, PTB), 512 entries each."""
  def __init__(self, d: Dev, bits: dict, base: int = 0x100000):
    self.d, self.bits, self.next = d, bits, base
    self.gfx12 = d.board.arch == "gfx1201"
    self.root = self.alloc()

  def alloc(self) -> int:
    a = self.next; self.next += 0x1000
    self.d.vram.writebytes(a, bytes(4096))
    return a

  def leaf_flags(self, huge: bool) -> int:
    b = self.bits
    f = b["AMDGPU_PTE_VALID"] | b["AMDGPU_PTE_READABLE"] | b["AMDGPU_PTE_WRITEABLE"]
    if self.gfx12: f |= b["AMDGPU_PDE_PTE_GFX12"]                    # gfx12 leaves carry bit 63 at every level
    elif huge: f |= b["AMDGPU_PDE_PTE"]
    return f

  def map(self, va: int, pa: int, system: bool = False, huge: bool = False, frag: int = 0, drop: int = 0) -> None:
    t = self.root
    levels = (39, 30, 21) if not huge else (39, 30)
    for sh in levels:
      i = (va >> sh) & 0x1ff
      e = struct.unpack_from("<Q", self.d.vram.mem, t + 8 * i)[0]
      if not e & 1:
        nt = self.alloc()
        e = nt | self.bits["AMDGPU_PTE_VALID"]
        self.d.vram.write64(t + 8 * i, e)
      t = e & 0x0000FFFFFFFFF000
    sh = 21 if huge else 12
    e = (pa & 0x0000FFFFFFFFF000) | self.leaf_flags(huge) | (frag << self.bits["FRAG_SHIFT"])
    if system: e |= self.bits["AMDGPU_PTE_SYSTEM"] | self.bits["AMDGPU_PTE_SNOOPED"]
    self.d.vram.write64(t + 8 * ((va >> sh) & 0x1ff), e & ~drop)   # drop: flags this leaf goes without


def enable_context(d: Dev, hub: str, pt: PT, vmid: int = 0, start: int = 0, end: int = (1 << 48) - 1) -> None:
  ip, pfx = ("gc", "GCVM_") if hub == "gc" else ("mmhub", "MMVM_")
  d.wr(ip, f"reg{pfx}CONTEXT{vmid}_PAGE_TABLE_START_ADDR_LO32", (start >> 12) & 0xffffffff)
  d.wr(ip, f"reg{pfx}CONTEXT{vmid}_PAGE_TABLE_START_ADDR_HI32", start >> 44)
  d.wr(ip, f"reg{pfx}CONTEXT{vmid}_PAGE_TABLE_END_ADDR_LO32", (end >> 12) & 0xffffffff)
  d.wr(ip, f"reg{pfx}CONTEXT{vmid}_PAGE_TABLE_END_ADDR_HI32", end >> 44)
  d.wr(ip, f"reg{pfx}CONTEXT{vmid}_PAGE_TABLE_BASE_ADDR_LO32", pt.root | 1)
  d.wr(ip, f"reg{pfx}CONTEXT{vmid}_PAGE_TABLE_BASE_ADDR_HI32", 0)
  d.wr(ip, f"reg{pfx}CONTEXT{vmid}_CNTL", ENABLE_CONTEXT=1, PAGE_TABLE_DEPTH=3, RANGE_PROTECTION_FAULT_ENABLE_INTERRUPT=1,
       VALID_PROTECTION_FAULT_ENABLE_INTERRUPT=1, PDE0_PROTECTION_FAULT_ENABLE_INTERRUPT=1, READ_PROTECTION_FAULT_ENABLE_INTERRUPT=1,
       WRITE_PROTECTION_FAULT_ENABLE_INTERRUPT=1)


def flush_tlb(d: Dev, hub: str, vmid: int = 0) -> None:
  ip, pfx = ("gc", "GCVM_") if hub == "gc" else ("mmhub", "MMVM_")
  if hub == "mm": assert d.rd(ip, f"reg{pfx}INVALIDATE_ENG17_SEM") & 1      # semaphore acquired (gmc_v11_0_flush_gpu_tlb)
  d.wr(ip, f"reg{pfx}INVALIDATE_ENG17_REQ", PER_VMID_INVALIDATE_REQ=1 << vmid, INVALIDATE_L2_PTES=1, INVALIDATE_L2_PDE0=1,
       INVALIDATE_L2_PDE1=1, INVALIDATE_L2_PDE2=1, INVALIDATE_L1_PTES=1)
  assert d.rd(ip, f"reg{pfx}INVALIDATE_ENG17_ACK") & (1 << vmid)
  if hub == "mm": d.wr(ip, f"reg{pfx}INVALIDATE_ENG17_SEM", 0)


def setup_ih(d: Dev, ring_off: int = 0x40000, size: int = 0x1000, wb_off: int = 0x3f000) -> tuple[int, int]:
  """IH ring 0 in VRAM at MC addresses, programmed as ih_v6_0_enable_ring/ih_v6_0_rb_cntl do."""
  fb = (d.rd("mmhub", "regMMMC_VM_FB_LOCATION_BASE") & 0xffffff) << 24
  d.wr("mmhub", "regMMMC_VM_SYSTEM_APERTURE_LOW_ADDR", fb >> 18)
  d.wr("mmhub", "regMMMC_VM_SYSTEM_APERTURE_HIGH_ADDR", (fb + d.vram_size - 1) >> 18)
  d.wr("mmhub", "regMMMC_VM_MX_L1_TLB_CNTL", ENABLE_L1_TLB=1, SYSTEM_ACCESS_MODE=3)
  d.wr("osssys", "regIH_RB_BASE", ((fb + ring_off) >> 8) & 0xffffffff)
  d.wr("osssys", "regIH_RB_BASE_HI", (fb + ring_off) >> 40)
  d.wr("osssys", "regIH_RB_WPTR_ADDR_LO", (fb + wb_off) & 0xffffffff)
  d.wr("osssys", "regIH_RB_WPTR_ADDR_HI", (fb + wb_off) >> 32)
  d.wr("osssys", "regIH_RB_RPTR", 0); d.wr("osssys", "regIH_RB_WPTR", 0)
  for clear in (1, 0):   # the overflow latch cleared, then CLEAR dropped so that an overflow latches again
    d.wr("osssys", "regIH_RB_CNTL", MC_SPACE=4, WPTR_OVERFLOW_CLEAR=clear, WPTR_OVERFLOW_ENABLE=1, RB_SIZE=(size // 4).bit_length() - 1,
         WPTR_WRITEBACK_ENABLE=1, MC_SNOOP=1, RB_ENABLE=1, ENABLE_INTR=1)
  return ring_off, wb_off


@pytest.fixture(scope="module")
def bits(): return pte_bits()


@pytest.mark.parametrize("hub", ["gc", "mm"])
def test_page_walk_vram_host_and_huge(dev, bits, hub):
  dev.pci.enable_bus_master()
  pt = PT(dev, bits)
  host = dev.pci.alloc_host(0x2000)
  host.view.writebytes(0x10, b"host-page")
  dev.vram.writebytes(0x800000 + 0x123, b"vram-page")
  dev.vram.writebytes(0xc00000 + 0x1ff000, b"huge-tail")
  va = 0x7f00_0000_0000
  pt.map(va, 0x800000)
  pt.map(va + 0x1000, host.bus_addrs[0], system=True)
  pt.map(va + 0x20_0000, 0xc00000, huge=True)
  enable_context(dev, hub, pt)
  h = dev.board.gmc.gc if hub == "gc" else dev.board.gmc.mm
  assert h.read(0, va + 0x123, 9) == b"vram-page"
  assert h.read(0, va + 0x1010, 9) == b"host-page"
  assert h.read(0, va + 0x3ff000, 9) == b"huge-tail"               # last 4K page of the 2 MiB leaf at PDB0
  h.write(0, va + 0x1020, b"from-gpu")
  assert host.view.readbytes(0x20, 8) == b"from-gpu"


def test_tlb_keeps_stale_entry_until_invalidated(dev, bits):
  pt = PT(dev, bits)
  va = 0x1000_0000
  pt.map(va, 0x800000)
  dev.vram.write32(0x800000, 0x11111111); dev.vram.write32(0x900000, 0x22222222)
  enable_context(dev, "gc", pt)
  h = dev.board.gmc.gc
  assert h.read32(0, va) == 0x11111111
  pt.map(va, 0x900000)                                            # remap without telling the hub
  assert h.read32(0, va) == 0x11111111
  flush_tlb(dev, "gc")
  assert h.read32(0, va) == 0x22222222


def test_a_cached_write_translation_does_not_let_a_read_through(dev, bits):
  """A page that is writeable but not readable: a write's walk fills the TLB, and a read after it still faults (the
  TLB kept only the write permission, and the read went through)."""
  from rawgpu.drivers.emu.amd.gmc import Fault
  pt, va = PT(dev, bits), 0x1000_0000
  pt.map(va, 0x800000, drop=bits["AMDGPU_PTE_READABLE"])
  enable_context(dev, "gc", pt)
  h = dev.board.gmc.gc
  with pytest.raises(Fault): h.read32(0, va)
  st_name = "regGCVM_L2_PROTECTION_FAULT_STATUS" + ("_LO32" if dev.board.arch == "gfx1201" else "")
  assert dev.f("gc", st_name, dev.rd("gc", st_name), "PERMISSION_FAULTS") == 0b010   # the read that failed, a valid entry
  h.write32(0, va, 5)
  with pytest.raises(Fault): h.read32(0, va)
  with pytest.raises(Fault): h.read(0, va, 64)   # (the extent cache too)


def test_a_pde_names_its_table_to_64_bytes(dev, bits):
  """A PDE's address is bits [47:6] (gmc_v11_0.c's PDE format), a PTE's [47:12]: a page table 64 bytes into a page is
  found where its PDE says (the model dropped bits [11:6] and read the page's start)."""
  if dev.board.arch == "gfx1201": pytest.skip("gfx12's PDE address bits are not checked here")
  pt, va = PT(dev, bits), 0x1000_0000
  pt.map(va, 0x800000)
  dev.vram.write32(0x800000, 0x5a5a5a5a)
  t = pt.root
  for sh in (39, 30): t = struct.unpack_from("<Q", dev.vram.mem, t + 8 * ((va >> sh) & 0x1ff))[0] & 0x0000FFFFFFFFF000
  pdb0 = t + 8 * ((va >> 21) & 0x1ff)
  ptb = struct.unpack_from("<Q", dev.vram.mem, pdb0)[0] & 0x0000FFFFFFFFF000
  moved = pt.alloc() + 0x40; pt.alloc()   # two pages in a row: the table spans their boundary
  dev.vram.writebytes(moved, bytes(dev.vram.mem[ptb:ptb + 4096]))
  dev.vram.writebytes(ptb, bytes(4096))
  dev.vram.write64(pdb0, moved | bits["AMDGPU_PTE_VALID"])
  enable_context(dev, "gc", pt)
  assert dev.board.gmc.gc.read32(0, va) == 0x5a5a5a5a


def test_mm_invalidate_semaphore(dev):
  assert dev.rd("mmhub", "regMMVM_INVALIDATE_ENG17_SEM") & 1
  assert dev.rd("mmhub", "regMMVM_INVALIDATE_ENG17_SEM") & 1 == 0     # held
  dev.wr("mmhub", "regMMVM_INVALIDATE_ENG17_SEM", 0)
  assert dev.rd("mmhub", "regMMVM_INVALIDATE_ENG17_SEM") & 1


def test_fault_latches_status_and_raises_ih_entry(dev, bits):
  from rawgpu.drivers.emu.amd.gmc import Fault
  ring, wb = setup_ih(dev)
  pt = PT(dev, bits)
  enable_context(dev, "gc", pt)
  bad = 0x4567_8000_0000 + 0x3000
  with pytest.raises(Fault): dev.board.gmc.gc.write32(0, bad, 1)
  st_name = "regGCVM_L2_PROTECTION_FAULT_STATUS" + ("_LO32" if dev.board.arch == "gfx1201" else "")
  st = dev.rd("gc", st_name)
  assert dev.f("gc", st_name, st, "RW") == 1 and dev.f("gc", st_name, st, "VMID") == 0
  # an unmapped write, as real dumps show it: PERMISSION_FAULTS 0x5 (no valid entry | the write), no MAPPING_ERROR
  assert dev.f("gc", st_name, st, "PERMISSION_FAULTS") == 0x5 and dev.f("gc", st_name, st, "MAPPING_ERROR") == 0
  fa = (dev.rd("gc", "regGCVM_L2_PROTECTION_FAULT_ADDR_HI32") << 32 | dev.rd("gc", "regGCVM_L2_PROTECTION_FAULT_ADDR_LO32")) << 12
  assert fa == bad
  wptr = dev.vram.read32(wb)
  assert wptr == 32 and dev.rd("osssys", "regIH_RB_WPTR") & 0x3fffc == 32
  e = struct.unpack_from("<8I", dev.vram.mem, ring)
  # decode as gmc_v11_0_process_interrupt does: client/src from dw0, address from src_data[0..1]; gmc_v11_0/v12_0 take
  # GC-hub faults from the SOC21 GFX client (UTCL2_1_0__SRCID__FAULT = 0)
  gfx_client = int(re.search(r"SOC21_IH_CLIENTID_GFX\s*=\s*(0x[0-9a-fA-F]+)",
                             (linux_root() / "drivers/gpu/drm/amd/include/soc15_ih_clientid.h").read_text()).group(1), 16)
  assert e[0] & 0xff == gfx_client and (e[0] >> 8) & 0xff == 0
  assert ((e[4] << 12) | ((e[5] & 0xf) << 44)) == bad
  assert (e[0] >> 16) & 0xff == 0x28 and e[5] & 0x60 == 0x20   # ring 40 (valid | write), src_data[1]'s WRITE flag
  # clear through L2_PROTECTION_FAULT_CNTL bit 0, as the driver's handler does
  dev.wr("gc", "regGCVM_L2_PROTECTION_FAULT_CNTL", dev.rd("gc", "regGCVM_L2_PROTECTION_FAULT_CNTL") | 1)
  assert dev.rd("gc", st_name) == 0


def test_ih_ring_wraps_and_overflows(dev, bits):
  """A full ring is written on over its oldest entry and RB_OVERFLOW latches in the write pointer and its writeback,
  which is where amdgpu's get_wptr looks (ih_v6_0.c: resume "from the last not overwritten vector"); a CLEAR pulse
  clears the latch and the ring goes on."""
  ring, wb = setup_ih(dev, size=0x100)                             # 8 entries
  for i in range(7): dev.board.ih.post(client=0x14, src=181, data=(i, 0, 0, 0))
  assert dev.rd("osssys", "regIH_RB_WPTR") & 0xfc == 7 * 32
  dev.board.ih.post(client=0x14, src=181, data=(99, 0, 0, 0))     # full: the 8th slot would meet rptr
  w = dev.rd("osssys", "regIH_RB_WPTR")
  assert dev.f("osssys", "regIH_RB_WPTR", w, "RB_OVERFLOW") == 1 and w & 0xfc == 0
  assert struct.unpack_from("<I", dev.vram.mem, wb)[0] == w      # the writeback carries the latch
  assert struct.unpack_from("<I", dev.vram.mem, ring + 7 * 32 + 16)[0] == 99
  dev.board.ih.post(client=0x14, src=181, data=(8, 0, 0, 0))      # on over entry 0, the oldest
  assert struct.unpack_from("<I", dev.vram.mem, ring + 16)[0] == 8 and dev.rd("osssys", "regIH_RB_WPTR") == 32 | 1
  dev.wr("osssys", "regIH_RB_RPTR", 32)                           # the driver read on from wptr + 32 round to wptr
  cntl = dev.rd("osssys", "regIH_RB_CNTL")
  clear = dev.tables["osssys"]["regIH_RB_CNTL"].encode(WPTR_OVERFLOW_CLEAR=1)
  dev.wr("osssys", "regIH_RB_CNTL", cntl | clear); dev.wr("osssys", "regIH_RB_CNTL", cntl & ~clear)
  assert dev.rd("osssys", "regIH_RB_WPTR") == 32
  dev.board.ih.post(client=0x14, src=181, data=(9, 0, 0, 0))
  assert dev.rd("osssys", "regIH_RB_WPTR") == 64 and struct.unpack_from("<I", dev.vram.mem, ring + 32 + 16)[0] == 9


def test_hdp_flush_paths(dev):
  n = dev.board.nbio.hdp_flushes
  dev.wr("nbio", "regBIF_BX_PF0_GPU_HDP_FLUSH_REQ", 1 << 5)
  assert dev.rd("nbio", "regBIF_BX_PF0_GPU_HDP_FLUSH_DONE") & (1 << 5)
  remap = dev.rd("nbio", "regBIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL")
  dev.mmio.write32(remap, 0)                                      # the remapped flush page, as amdgpu_device_flush_hdp
  assert dev.board.nbio.hdp_flushes == n + 2


def test_hdp_flush_remap_follows_its_register(dev):
  """The driver places the remapped flush page (soc21 writes REMAP_HDP_MEM_FLUSH_CNTL): a write at the new offset
  flushes, and the old offset is an ordinary register again."""
  old = dev.rd("nbio", "regBIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL")
  new = old - 0x1000
  dev.wr("nbio", "regBIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL", new)
  n = dev.board.nbio.hdp_flushes
  dev.mmio.write32(new, 0)
  assert dev.board.nbio.hdp_flushes == n + 1
  dev.mmio.write32(old, 0x1234)
  assert dev.board.nbio.hdp_flushes == n + 1 and dev.mmio.read32(old) == 0x1234


def test_doorbell_aperture_enable(dev):
  dev.wr("osssys", "regIH_DOORBELL_RPTR", OFFSET=0x18, ENABLE=1)
  dev.db.write32(0x18 * 4, 0x40)
  assert dev.rd("osssys", "regIH_RB_RPTR") == 0                    # aperture still off: doorbell dropped
  dev.wr("nbio", "regRCC_DEV0_EPF0_RCC_DOORBELL_APER_EN", 1)
  dev.db.write32(0x18 * 4, 0x40)
  assert dev.rd("osssys", "regIH_RB_RPTR") == 0x40


def test_wave_accesses_across_pages_backings_and_page_boundaries(dev, bits):
  """What the compute units see through the GC hub (VMMemory): lanes of one access on one page, on pages that are not
  contiguous in VRAM, on VRAM and host pages at once, and lanes whose 4 bytes straddle two pages; loads, stores and an
  atomic agree with the bytes behind each page."""
  import numpy as np
  from rawgpu.drivers.emu.amd.gmc import VMMemory
  dev.pci.enable_bus_master()
  pt = PT(dev, bits)
  host = dev.pci.alloc_host(0x1000)
  va = 0x7e00_0000_0000
  backing = {0: ("vram", 0x800000), 1: ("host", 0), 2: ("vram", 0x840000)}   # page -> where its bytes are (not contiguous)
  pt.map(va, 0x800000)
  pt.map(va + 0x1000, host.bus_addrs[0], system=True)
  pt.map(va + 0x2000, 0x840000)
  enable_context(dev, "gc", pt)
  rng = np.random.default_rng(7)
  pages = [rng.integers(0, 256, 0x1000, dtype=np.uint8).tobytes() for _ in range(3)]
  def put(p, data):
    kind, at = backing[p]
    if kind == "vram": dev.vram.writebytes(at, data)
    else: host.view.writebytes(at, data)
  def get(p) -> bytes:
    kind, at = backing[p]
    return dev.vram.readbytes(at, 0x1000) if kind == "vram" else host.view.readbytes(at, 0x1000)
  for p, data in enumerate(pages): put(p, data)
  mem = VMMemory(dev.board.gmc.gc, 0)
  flat = lambda: np.frombuffer(b"".join(get(p) for p in range(3)), np.uint8)
  for offs in ([0x10, 0x20, 0x30],                       # one page
               [0x10, 0x2010, 0x20, 0x2ff0],             # VRAM pages 0 and 2, apart in VRAM
               [0x100, 0x1100, 0x2100, 0x104],           # VRAM, host, VRAM in one access
               [0xffe, 0x1ff0, 0x8, 0x1ffe]):            # lanes whose 4 bytes straddle pages 0/1 and 1/2
    a = np.array(offs, np.uint64) + np.uint64(va)
    ref = flat()
    want = np.array([int.from_bytes(ref[o:o + 4].tobytes(), "little") for o in offs], np.uint32)
    assert mem.load(a, 4).tolist() == want.tolist(), offs
    vals = rng.integers(0, 1 << 32, len(offs), dtype=np.uint32)
    mem.store(a, vals, 4)
    now = flat()
    assert [int.from_bytes(now[o:o + 4].tobytes(), "little") for o in offs] == vals.tolist(), offs
  a = np.array([0x40, 0x1040, 0x2040], np.uint64) + np.uint64(va)   # an atomic over VRAM and host at once
  before = mem.load(a, 4)
  old = mem.atomic("add", a, np.array([1, 2, 3], np.uint32), 4)
  assert old.tolist() == before.tolist() and mem.load(a, 4).tolist() == (before + np.array([1, 2, 3], np.uint32)).tolist()
