"""GPU memory: the VRAM allocator, the process-wide GPU VA space, and 4-level page tables with huge pages.

Page tables follow the gfx10+ layout (amdgpu_vm.h): PDB2 -> PDB1 -> PDB0 -> PTB, 9 index bits per level over 4 KiB
pages (48-bit VA). A PDB0 entry with the PDE_PTE bit maps 2 MiB directly (a huge page; its fragment field says
2 MiB), a PDB1 entry with PDE_PTE maps 1 GiB. gfx12 moved the PDE_PTE bit to bit 63 and the MTYPE field.
"""
from __future__ import annotations
import threading
from dataclasses import dataclass, field
from typing import Callable
from rawgpu.drivers.am import facts as F
from rawgpu.errors import RawGPUError

PAGE = 0x1000
LEVELS = 4
ADDR_MASK = 0x0000_FFFF_FFFF_F000


def round_up(x: int, a: int) -> int: return (x + a - 1) // a * a


class RangeAllocator:
  """First-fit allocator over [base, base+size): free ranges sorted by address, coalesced on free."""
  def __init__(self, size: int, base: int = 0, what: str = "memory"):
    self.base, self.size, self.what = base, size, what
    self.free_list: list[tuple[int, int]] = [(base, size)]
    self.used: dict[int, int] = {}
    self.lock = threading.Lock()

  def alloc(self, size: int, align: int = PAGE, below: int | None = None) -> int:
    size = round_up(max(size, 1), PAGE)
    with self.lock:
      for i, (start, sz) in enumerate(self.free_list):
        a = round_up(start, align)
        if a + size <= start + sz and (below is None or a + size <= below):
          parts = [(start, a - start)] if a > start else []
          if a + size < start + sz: parts.append((a + size, start + sz - a - size))
          self.free_list[i:i + 1] = parts
          self.used[a] = size
          return a
    raise MemoryError(f"out of {self.what}: no free {size:#x}-byte range (aligned {align:#x})")

  def free(self, addr: int) -> None:
    with self.lock:
      size = self.used.pop(addr, None)
      if size is None: raise RawGPUError(f"{self.what}: double free or foreign address {addr:#x}")
      fl = self.free_list
      fl.append((addr, size)); fl.sort()
      merged: list[tuple[int, int]] = []
      for s, z in fl:
        if merged and merged[-1][0] + merged[-1][1] == s: merged[-1] = (merged[-1][0], merged[-1][1] + z)
        else: merged.append((s, z))
      self.free_list[:] = merged

  @property
  def free_bytes(self) -> int: return sum(z for _, z in self.free_list)


# One GPU VA space for every device in the process: a buffer has the same VA on all boards it is mapped on.
VA_BASE, VA_SIZE = 0x7F00_0000_0000, 1 << 40
VA = RangeAllocator(VA_SIZE, VA_BASE, "GPU virtual address space")


@dataclass
class PTEFlags:
  gfx12: bool = False
  gfx9: bool = False   # "translate further" (gmc_v9_0.c): PDB1 entries carry PDE_BFS(9), PDB0 entries that point at a
                       # PTB carry PTE_TF, a PDB0 entry without it is a 2 MiB page; MTYPE at bits 58:57

  def leaf(self, level: int, *, system: bool = False, snooped: bool = False, uncached: bool = False, frag: int = 0,
           writeable: bool = True, executable: bool = True) -> int:
    f = F.AMDGPU_PTE_VALID | F.AMDGPU_PTE_READABLE | ((frag & 0x1f) << F.AMDGPU_PTE_FRAG_SHIFT)
    if writeable: f |= F.AMDGPU_PTE_WRITEABLE
    if executable: f |= F.AMDGPU_PTE_EXECUTABLE
    if system: f |= F.AMDGPU_PTE_SYSTEM
    if snooped: f |= F.AMDGPU_PTE_SNOOPED
    if self.gfx12:
      if uncached: f |= F.MTYPE_UC << F.AMDGPU_PTE_MTYPE_GFX12_SHIFT
      if level != LEVELS - 1: f |= F.AMDGPU_PDE_PTE_GFX12
    elif self.gfx9:
      if uncached: f |= F.MTYPE_UC << F.AMDGPU_PTE_MTYPE_VG10_SHIFT
      if level < LEVELS - 2: f |= F.AMDGPU_PDE_PTE
    else:
      if uncached: f |= F.MTYPE_UC << F.AMDGPU_PTE_MTYPE_NV10_SHIFT
      if level != LEVELS - 1: f |= F.AMDGPU_PDE_PTE
    return f

  def table(self, level: int) -> int:
    """Extra bits of an entry at `level` that points at the next table."""
    if not self.gfx9: return 0
    return 9 << F.AMDGPU_PDE_BFS_SHIFT if level == LEVELS - 3 else F.AMDGPU_PTE_TF if level == LEVELS - 2 else 0

  def is_huge(self, entry: int, level: int) -> bool:
    """Whether an entry above the PTB level maps memory itself rather than a table."""
    if self.gfx9 and level == LEVELS - 2: return not entry & F.AMDGPU_PTE_TF
    return bool(entry & (F.AMDGPU_PDE_PTE_GFX12 if self.gfx12 else F.AMDGPU_PDE_PTE))


def level_shift(level: int) -> int: return 12 + 9 * (LEVELS - 1 - level)   # PDB2: 39, PDB1: 30, PDB0: 21, PTB: 12


@dataclass
class Mapping:
  va: int
  size: int
  chunks: list[tuple[int, int]]   # (physical or bus address, size) in VA order
  system: bool = False
  huge: bool = False
  ptes: list[tuple[int, int]] = field(default_factory=list)   # (table paddr, index) written, for unmap


class PageTables:
  """Page tables in VRAM. `mem(paddr, size)` gives a CPU view of VRAM (BAR0); tables live in `alloc`ed pages.
  `phys_offset` is VRAM's GPU physical address (MC_VM_FB_OFFSET, the XGMI node's segment): a PDE names the next
  table by it, as amdgpu_gmc_get_pde_for_bo adds vram_base_offset."""
  def __init__(self, mem: Callable[[int, int], memoryview], alloc: Callable[[], int], free: Callable[[int], None], flags: PTEFlags,
               root: int | None = None, base: int = VA_BASE, phys_offset: int = 0):
    self.mem, self._alloc, self._free, self.flags = mem, alloc, free, flags
    self.base = base   # the VA the tables start at (their context's START address)
    self.phys_offset = phys_offset
    self.root = root if root is not None else self._new_table()

  def _new_table(self) -> int:
    p = self._alloc()
    self.mem(p, PAGE)[:] = bytes(PAGE)
    return p

  def _entries(self, table: int) -> memoryview: return self.mem(table, PAGE).cast("Q")

  def _walk(self, va: int, level: int, create: bool) -> int | None:
    """The table at `level` that holds va's entry, creating intermediate tables if asked."""
    table = self.root
    for lv in range(level):
      ents = self._entries(table)
      idx = ((va - self.base) >> level_shift(lv)) & 0x1ff
      e = ents[idx]
      if not e & F.AMDGPU_PTE_VALID:
        if not create: return None
        nt = self._new_table()
        ents[idx] = (nt + self.phys_offset) | F.AMDGPU_PTE_VALID | self.flags.table(lv)
        e = ents[idx]
      elif self.flags.is_huge(e, lv): raise RawGPUError(f"GPU VA {va:#x}: already covered by a huge page at level {lv}")
      table = self._table_of(e)
    return table

  def _table_of(self, pde: int) -> int: return (pde & ADDR_MASK) - self.phys_offset   # the VRAM offset of the table a PDE names

  def map(self, va: int, chunks: list[tuple[int, int]], *, system: bool = False, snooped: bool = False, uncached: bool = False,
          writeable: bool = True, executable: bool = True) -> Mapping:
    m = Mapping(va, sum(s for _, s in chunks), chunks, system)
    try: self._map_chunks(m, va, chunks, system, snooped, uncached, dict(writeable=writeable, executable=executable))
    except BaseException:   # no page left for a table, or a clash: no entry of the failed mapping stays
      self.unmap(m)
      raise
    return m

  def _map_chunks(self, m: Mapping, va: int, chunks: list[tuple[int, int]], system: bool, snooped: bool, uncached: bool, access: dict) -> None:
    cur = va
    for addr, size in chunks:
      off = 0
      while off < size:
        # a 2 MiB huge page where VA, address and remaining size all line up, else 4 KiB pages
        lvl = LEVELS - 2 if (cur | (addr + off)) & ((1 << 21) - 1) == 0 and size - off >= (1 << 21) else LEVELS - 1
        table = self._walk(cur, lvl, create=True)
        assert table is not None
        idx = ((cur - self.base) >> level_shift(lvl)) & 0x1ff
        ents = self._entries(table)
        # 4 KiB pages: the run that stays in this page table (up to its 2 MiB end, where a huge page may start)
        n = 1 if lvl != LEVELS - 1 else max(1, min((size - off) >> 12, 512 - idx))
        if any(ents[idx + k] & F.AMDGPU_PTE_VALID for k in range(n)):
          # a page table left by 4 KiB mappings that were all unmapped gives way to a huge page
          sub = self._table_of(ents[idx])
          if lvl == LEVELS - 1 or self.flags.is_huge(ents[idx], lvl) or any(self._entries(sub)):
            raise RawGPUError(f"GPU VA {cur + 4096 * next(k for k in range(n) if ents[idx + k] & F.AMDGPU_PTE_VALID):#x} is already mapped")
          self._free(sub)
        leaf = self.flags.leaf(lvl, system=system, snooped=snooped, uncached=uncached, frag=9 if lvl == LEVELS - 2 else 0, **access)
        step = 1 << level_shift(lvl)
        for k in range(n): ents[idx + k] = ((addr + off + k * step) & ADDR_MASK) | leaf
        m.ptes += [(table, idx + k) for k in range(n)]
        m.huge |= lvl != LEVELS - 1
        cur, off = cur + n * step, off + n * step

  def unmap(self, m: Mapping) -> None:
    ents, cur = None, None
    for table, idx in m.ptes:   # in mapping order: one view per page table
      if table != cur: ents, cur = self._entries(table), table
      ents[idx] = 0
    m.ptes.clear()

  def release(self) -> None:
    """Give back every table page (the root too): the VA space is gone, whatever it still mapped."""
    def tables(table: int, lv: int) -> list[int]:
      out = [table]
      if lv < LEVELS - 1:
        for e in self._entries(table).tolist():
          if e & F.AMDGPU_PTE_VALID and not self.flags.is_huge(e, lv): out += tables(self._table_of(e), lv + 1)
      return out
    for t in tables(self.root, 0): self._free(t)

  def translate(self, va: int) -> int | None:
    """The physical/bus address va maps to (a CPU-side page walk, used by fault reports and tests)."""
    table = self.root
    for lv in range(LEVELS):
      e = self._entries(table)[((va - self.base) >> level_shift(lv)) & 0x1ff]
      if not e & F.AMDGPU_PTE_VALID: return None
      if lv == LEVELS - 1 or self.flags.is_huge(e, lv):
        return (e & ADDR_MASK & ~((1 << level_shift(lv)) - 1)) + (va & ((1 << level_shift(lv)) - 1))
      table = self._table_of(e)
    return None
