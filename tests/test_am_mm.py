"""AM memory management: the range allocator against a model, and the page tables against the emulated board's
own GMC page walker (drivers/emu/amd/gmc.py, written from amdgpu_vm.h and the VM_CONTEXT register semantics)."""
from __future__ import annotations
import random
import pytest
from rawgpu.drivers.am import mm
from rawgpu.errors import RawGPUError


def test_range_allocator_against_a_model():
  rng = random.Random(7)
  a = mm.RangeAllocator(64 << 20, 0x1000_0000, "test")
  live: dict[int, int] = {}
  for _ in range(3000):
    if live and rng.random() < 0.45:
      addr = rng.choice(list(live)); a.free(addr); del live[addr]
      continue
    size, align = rng.choice([0x1000, 0x3000, 0x10000, 1 << 21]) * rng.randint(1, 3), rng.choice([0x1000, 0x10000, 1 << 21])
    try: addr = a.alloc(size, align)
    except MemoryError: continue     # fragmentation may refuse; the invariants below must still hold
    size = mm.round_up(size, mm.PAGE)
    assert addr % align == 0 and 0x1000_0000 <= addr and addr + size <= 0x1000_0000 + (64 << 20)
    assert all(addr + size <= b or b + s <= addr for b, s in live.items()), "overlap"
    live[addr] = size
  assert a.free_bytes == (64 << 20) - sum(live.values())
  for addr in list(live): a.free(addr)
  assert a.free_list == [(0x1000_0000, 64 << 20)]   # fully coalesced
  with pytest.raises(RawGPUError): a.free(0x1000_0000)


def _board(arch: str):
  from rawgpu.drivers.emu.amd.board import AMDBoard
  try: return AMDBoard(arch=arch, vram_size=256 << 20, deterministic=True)
  except Exception as e: pytest.skip(f"the emulated {arch} board does not build yet: {e}")


@pytest.mark.parametrize("fb_offset", [0, 1 << 30])
@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201", "gfx942"])
def test_page_tables_walked_by_the_board(arch, fb_offset):
  """gfx942 (MI300): gmc_v9_0's "translate further": hardware depth 2 with block size 9, PDB0 entries pointing at a
  PTB marked PTE_TF, PDB1 entries PDE_BFS(9), 2 MiB pages as PDB0 entries without TF. fb_offset: VRAM at a GPU
  physical offset (MC_VM_FB_OFFSET): the base, every PDE and every VRAM PTE name it by that address."""
  b = _board(arch)
  r, hub = b.regs, b.gmc.gc
  r.vals[hub.a_fb_off] = fb_offset >> 24
  nxt = [64 << 20]
  def alloc() -> int:
    nxt[0] += mm.PAGE
    return nxt[0]
  gfx9 = arch == "gfx942"
  pt = mm.PageTables(lambda p, s: b.vram[p:p + s], alloc, lambda p: None, mm.PTEFlags(gfx12=arch.startswith("gfx12"), gfx9=gfx9),
                     phys_offset=fb_offset)
  # VMID 0 of the GC hub as AM's GMC programs it: range, root, 4 levels (gfx9: 3 and the last translating further)
  vm = "regVM_CONTEXT0_" if gfx9 else "regGCVM_CONTEXT0_"
  def w64(lo, hi, v): r.set("gc", f"{vm}{lo}", v & 0xffffffff); r.set("gc", f"{vm}{hi}", v >> 32)
  w64("PAGE_TABLE_START_ADDR_LO32", "PAGE_TABLE_START_ADDR_HI32", mm.VA_BASE >> 12)
  w64("PAGE_TABLE_END_ADDR_LO32", "PAGE_TABLE_END_ADDR_HI32", (mm.VA_BASE + mm.VA_SIZE - 1) >> 12)
  w64("PAGE_TABLE_BASE_ADDR_LO32", "PAGE_TABLE_BASE_ADDR_HI32", (pt.root + fb_offset) | 1)
  depth = dict(PAGE_TABLE_DEPTH=mm.LEVELS - 2, PAGE_TABLE_BLOCK_SIZE=9) if gfx9 else dict(PAGE_TABLE_DEPTH=mm.LEVELS - 1)
  r.set("gc", f"{vm}CNTL", r.reg("gc", f"{vm}CNTL").encode(ENABLE_CONTEXT=1, **depth))
  rng = random.Random(arch)
  maps, va = [], mm.VA_BASE + (1 << 30)
  for i in range(12):
    size = rng.choice([0x1000, 0x5000, 1 << 21, 3 << 21, (1 << 21) + 0x3000])
    va = mm.round_up(va, 1 << 21) + rng.choice([0, 0x1000, 1 << 21])
    host = i % 3 == 2
    if host: chunks = [(0x2_0000_0000 + rng.randrange(1 << 20) * mm.PAGE, mm.PAGE) for _ in range(size // mm.PAGE)]
    else: chunks = [((rng.randrange(1, 24) << 21) + fb_offset, size)]
    maps.append(pt.map(va, chunks, system=host, snooped=host))
    va += size
  assert any(m.huge for m in maps)
  for m in maps:
    pos = m.va
    for addr, size in m.chunks:
      for off in range(0, size, 3 * mm.PAGE):
        kind, phys = hub.page(0, pos + off, False)
        assert (kind, phys) == ((1, addr + off) if m.system else (0, addr + off - fb_offset)), hex(pos + off)
        assert pt.translate(pos + off + 0x123) == addr + off + 0x123
      pos += size
  with pytest.raises(RawGPUError): pt.map(maps[0].va, [(0, mm.PAGE)])   # already mapped
  pt.unmap(maps[1]); hub.tlb.clear()
  from rawgpu.drivers.emu.amd.gmc import Fault
  with pytest.raises(Fault): hub.page(0, maps[1].va, False)
  assert pt.translate(maps[1].va) is None
  b.close()


def test_huge_page_after_small_pages_at_the_same_va():
  b = _board("gfx1100")
  r, hub = b.regs, b.gmc.gc
  pages, freed = iter(range(64 << 20, 128 << 20, mm.PAGE)), []
  pt = mm.PageTables(lambda p, s: b.vram[p:p + s], lambda: next(pages), freed.append, mm.PTEFlags())
  def w64(lo, hi, v): r.set("gc", f"regGCVM_CONTEXT0_{lo}", v & 0xffffffff); r.set("gc", f"regGCVM_CONTEXT0_{hi}", v >> 32)
  w64("PAGE_TABLE_START_ADDR_LO32", "PAGE_TABLE_START_ADDR_HI32", mm.VA_BASE >> 12)
  w64("PAGE_TABLE_END_ADDR_LO32", "PAGE_TABLE_END_ADDR_HI32", (mm.VA_BASE + mm.VA_SIZE - 1) >> 12)
  w64("PAGE_TABLE_BASE_ADDR_LO32", "PAGE_TABLE_BASE_ADDR_HI32", pt.root | 1)
  r.set("gc", "regGCVM_CONTEXT0_CNTL", r.reg("gc", "regGCVM_CONTEXT0_CNTL").encode(ENABLE_CONTEXT=1, PAGE_TABLE_DEPTH=mm.LEVELS - 1))
  va = mm.VA_BASE + (5 << 21)
  small = pt.map(va, [(1 << 21, 0x3000)])
  pt.unmap(small)
  big = pt.map(va, [(3 << 21, 1 << 21)])
  assert big.huge and len(freed) == 1                                 # the emptied 4 KiB table was given back
  hub.tlb.clear()
  assert hub.page(0, va + 0x5000, False) == (0, (3 << 21) + 0x5000)
  with pytest.raises(RawGPUError): pt.map(va + 0x1000, [(0, mm.PAGE)])  # covered by the huge page now
  b.close()


def test_a_mapping_that_runs_out_of_table_pages_leaves_no_entry():
  """Page-table pages come from VRAM: when one cannot be had half way through a mapping, the entries written so far
  are cleared (they would otherwise point at memory the failed allocation gives back)."""
  vram = bytearray(1 << 20)
  pages = iter(range(0, 4 * mm.PAGE, mm.PAGE))         # the root and the three tables down to va's 4 KiB pages
  def take() -> int:
    try: return next(pages)
    except StopIteration: raise MemoryError("no page for a page table") from None
  pt = mm.PageTables(lambda p, s: memoryview(vram)[p:p + s], take, lambda p: None, mm.PTEFlags())
  va = mm.VA_BASE + (1 << 30) - 0x3000                # three 4 KiB pages below a 1 GiB boundary, then more above
  with pytest.raises(MemoryError): pt.map(va, [(64 << 20, 0x3000 + (1 << 30))])   # above the boundary: a new table
  assert all(pt.translate(va + k * mm.PAGE) is None for k in range(3))
  assert pt.translate(va + 0x3000) is None
