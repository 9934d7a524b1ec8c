"""GMC: the GC hub and the MM hub. FB location and apertures, VM contexts 0-15 with multi-level page tables, TLB with
invalidation engines, protection faults (status/address registers + an IH entry).

Page-table format (amdgpu_vm.h, gmc_v11_0.c): PTE address bits [47:12], PDE [47:6], VALID bit 0, SYSTEM 1, SNOOPED 2, READABLE 5,
WRITEABLE 6, FRAG [11:7]; a PDE that is a leaf (huge page) has PDE_PTE (bit 54 on gfx9/gfx11, bit 63 on gfx12).
GFX9 with PAGE_TABLE_BLOCK_SIZE 9 translates further: the last level's entries (amdgpu's PDB0) are 2 MiB PTEs, and one
with PTE_TF (bit 56) points at a table of 512 4 KiB PTEs instead (gmc_v9_0.c). PDE_BFS (bits 63:59) is not checked.
Levels: PTB covers 9 + PAGE_TABLE_BLOCK_SIZE bits above 4 KiB, each PDB level 9 more; the root is PAGE_TABLE_DEPTH
levels above the PTB. VAs are taken relative to the context's PAGE_TABLE_START_ADDR.
"""
from __future__ import annotations
import struct, threading
from typing import TYPE_CHECKING, Callable
import numpy as np
from rawgpu.autogen.amd import ih
from rawgpu.drivers.emu.pcibus import BusError
from rawgpu.drivers.emu.amd.asic import GC_HWID, MMHUB_HWID, ih_node_aid, ih_node_xcd
from rawgpu.drivers.emu.amd.regfile import instance_key
if TYPE_CHECKING: from rawgpu.drivers.emu.amd.board import AMDBoard

PTE_VALID, PTE_SYSTEM, PTE_READABLE, PTE_WRITEABLE = 1 << 0, 1 << 1, 1 << 5, 1 << 6
PERM_READ, PERM_WRITE = 1, 2                  # what a cached translation allows
PTE_TF = 1 << 56                               # GFX9: "translate further", this PTE points at one more table
ADDR_MASK = 0x0000_FFFF_FFFF_F000
PDE_ADDR_MASK = 0x0000_FFFF_FFFF_FFC0
VRAM, HOST, PEER = 0, 1, 2                     # backing of a translated page (PEER: a bus address outside host RAM)
FB_LOCATION_BASE = 0x8000                      # power-on FB location (16 MiB units), as the VBIOS leaves it
# SOC21 (gfx11/gfx12) interrupt clients of VM faults: the MM hub's arrive as VMC, the GC hub's as GFX (amdgpu takes
# them there in gmc_v11_0.c/gmc_v12_0.c); UTCL2 is the SOC15 (gfx9) client and does not exist in SOC21.
IH_CLIENT_VMC, IH_CLIENT_GFX, IH_SRC_VM_FAULT = ih.SOC21_IH_CLIENTID_VMC, ih.SOC21_IH_CLIENTID_GFX, 0


class Fault(Exception):
  """A translation failure inside the model (already reported through the fault registers and the IH)."""
  def __init__(self, hub: str, va: int, write: bool, why: str):
    super().__init__(f"{hub} hub fault at {va:#x} ({'write' if write else 'read'}): {why}"); self.va, self.write, self.why = va, write, why


class Hub:
  def __init__(self, board: "AMDBoard", name: str, ip: str, prefix_vm: str, prefix_mc: str, ih_client: int):
    self.b, self.name, self.ip, self.vm, self.mc, self.ih_client = board, name, ip, prefix_vm, prefix_mc, ih_client
    r = board.regs
    self.gfx12, self.gfx9 = board.asic.version(11)[0] >= 12, board.asic.version(11)[0] == 9
    self.pde_pte = 1 << 63 if self.gfx12 else 1 << 54
    # MI300 in an XGMI hive (board.xgmi = (node, nodes)): the FB aperture spans every node's segment, this board's VRAM
    # is segment `node` of it, and the IFWI says so in MC_VM_XGMI_LFB_CNTL/SIZE (gfxhub_v1_2_get_xgmi_info reads them)
    node, nodes = board.xgmi or (0, 1)
    seg = board.vram_size >> 24
    r.set(ip, f"reg{prefix_mc}FB_LOCATION_BASE", FB_LOCATION_BASE)
    r.set(ip, f"reg{prefix_mc}FB_LOCATION_TOP", FB_LOCATION_BASE + nodes * seg - 1)
    if nodes > 1:
      r.set(ip, f"reg{prefix_mc}XGMI_LFB_CNTL", r.reg(ip, f"reg{prefix_mc}XGMI_LFB_CNTL").encode(PF_LFB_REGION=node, PF_MAX_REGION=nodes - 1))
      r.set(ip, f"reg{prefix_mc}XGMI_LFB_SIZE", r.reg(ip, f"reg{prefix_mc}XGMI_LFB_SIZE").encode(PF_LFB_SIZE=seg))
    self.node_offset = node * (seg << 24)   # where this board's VRAM starts in the hive's FB aperture and physical space
    self.tlb: dict[tuple[int, int], tuple[int, int, int]] = {}   # (vmid, va page) -> (backing, phys page, PERM_*)
    self.ext: dict[tuple[int, int], tuple[int, int, int, int]] = {}   # (vmid, first page) -> (.., pages): contiguous runs
    a = lambda n: r.addr(ip, n)
    self.a_fb_base, self.a_fb_top, self.a_fb_off = a(f"reg{prefix_mc}FB_LOCATION_BASE"), a(f"reg{prefix_mc}FB_LOCATION_TOP"), a(f"reg{prefix_mc}FB_OFFSET")
    self.a_agp_base, self.a_agp_bot, self.a_agp_top = a(f"reg{prefix_mc}AGP_BASE"), a(f"reg{prefix_mc}AGP_BOT"), a(f"reg{prefix_mc}AGP_TOP")
    self.a_sys_lo, self.a_sys_hi = a(f"reg{prefix_mc}SYSTEM_APERTURE_LOW_ADDR"), a(f"reg{prefix_mc}SYSTEM_APERTURE_HIGH_ADDR")
    self.a_l1 = a(f"reg{prefix_mc}MX_L1_TLB_CNTL")
    self.sam_shift, self.sam_mask = r.field(ip, f"reg{prefix_mc}MX_L1_TLB_CNTL", "SYSTEM_ACCESS_MODE")
    self.ctx = []
    for v in range(16):
      self.ctx.append((a(f"reg{prefix_vm}CONTEXT{v}_CNTL"), a(f"reg{prefix_vm}CONTEXT{v}_PAGE_TABLE_BASE_ADDR_LO32"),
                       a(f"reg{prefix_vm}CONTEXT{v}_PAGE_TABLE_BASE_ADDR_HI32"), a(f"reg{prefix_vm}CONTEXT{v}_PAGE_TABLE_START_ADDR_LO32"),
                       a(f"reg{prefix_vm}CONTEXT{v}_PAGE_TABLE_START_ADDR_HI32"), a(f"reg{prefix_vm}CONTEXT{v}_PAGE_TABLE_END_ADDR_LO32"),
                       a(f"reg{prefix_vm}CONTEXT{v}_PAGE_TABLE_END_ADDR_HI32")))
    cntl = f"reg{prefix_vm}CONTEXT0_CNTL"
    self.f_en, self.f_depth, self.f_bs = (r.field(ip, cntl, f) for f in ("ENABLE_CONTEXT", "PAGE_TABLE_DEPTH", "PAGE_TABLE_BLOCK_SIZE"))
    self.f_int = {k: r.field(ip, cntl, f"{k}_PROTECTION_FAULT_ENABLE_INTERRUPT") for k in ("RANGE", "PDE0", "VALID", "READ", "WRITE")}
    st = f"reg{prefix_vm}L2_PROTECTION_FAULT_STATUS" + ("_LO32" if self.gfx12 else "")
    self.a_st, self.st = a(st), r.reg(ip, st)
    self.a_fa_lo, self.a_fa_hi = a(f"reg{prefix_vm}L2_PROTECTION_FAULT_ADDR_LO32"), a(f"reg{prefix_vm}L2_PROTECTION_FAULT_ADDR_HI32")
    r.hook(ip, f"reg{prefix_vm}L2_PROTECTION_FAULT_CNTL", wr=self._fault_cntl)
    self.req = r.reg(ip, f"reg{prefix_vm}INVALIDATE_ENG0_REQ")
    self.a_inv_req = [a(f"reg{prefix_vm}INVALIDATE_ENG{e}_REQ") for e in range(18)]   # an engine's request (SDMA's VM_INVALIDATION)
    for e in range(18):
      ack = a(f"reg{prefix_vm}INVALIDATE_ENG{e}_ACK")
      r.hook(ip, f"reg{prefix_vm}INVALIDATE_ENG{e}_REQ", wr=lambda ad, v, ack=ack: self._invalidate(ad, v, ack))
      r.hook(ip, f"reg{prefix_vm}INVALIDATE_ENG{e}_SEM", rd=self._sem_rd, wr=self._sem_wr)
    self.faults = 0
    self.ih_node = 0   # the die its interrupts name (MI300: set by GMC)

  # ---- registers that act
  def _sem_rd(self, a: int) -> int:
    # reading acquires the semaphore if it is free (returns 1); a held one reads 0 until released by writing 0
    if self.b.regs.vals.get(a, 0): return 0
    self.b.regs.vals[a] = 1
    return 1

  def _sem_wr(self, a: int, v: int) -> None: self.b.regs.vals[a] = v & 1

  def _invalidate(self, a: int, v: int, ack: int) -> None:
    self.b.regs.vals[a] = v
    d = self.req.decode(v)
    vmids = d["PER_VMID_INVALIDATE_REQ"]
    # copies are atomic under the GIL; the worker may be filling the TLB meanwhile
    for key in [k for k in self.tlb.copy() if vmids >> k[0] & 1]: self.tlb.pop(key, None)
    for key in [k for k in self.ext.copy() if vmids >> k[0] & 1]: self.ext.pop(key, None)
    if d["CLEAR_PROTECTION_FAULT_STATUS_ADDR"]: self._clear_fault()
    self.b.regs.vals[ack] = (self.b.regs.vals.get(ack, 0) & ~0xffff) | vmids

  def _fault_cntl(self, a: int, v: int) -> None:
    if v & 1: self._clear_fault()                          # CLEAR_PROTECTION_FAULT_STATUS_ADDR
    self.b.regs.vals[a] = v & ~1

  def _clear_fault(self) -> None:
    vals = self.b.regs.vals
    vals[self.a_st] = 0; vals[self.a_fa_lo] = 0; vals[self.a_fa_hi] = 0

  # ---- translation
  def fb(self) -> tuple[int, int, int]:
    v = self.b.regs.vals
    return v.get(self.a_fb_base, 0) << 24, ((v.get(self.a_fb_top, 0) + 1) << 24), v.get(self.a_fb_off, 0) << 24

  def mc_phys(self, mc: int) -> tuple[int, int]:
    """An MC physical address -> (backing, address): FB aperture -> VRAM offset, AGP aperture -> bus address."""
    fb_base, fb_end, _ = self.fb()
    if fb_base <= mc < fb_end: return VRAM, mc - fb_base - self.node_offset   # another node's segment: past this VRAM (XGMI is not modelled)
    v = self.b.regs.vals
    bot, top = v.get(self.a_agp_bot, 0) << 24, (v.get(self.a_agp_top, 0) << 24) | 0xffffff
    if bot <= mc <= top and v.get(self.a_agp_top, 0) >= v.get(self.a_agp_bot, 0): return HOST, mc - bot + (v.get(self.a_agp_base, 0) << 24)
    return HOST, mc                                          # outside FB/AGP: the system (bus) address itself

  def _pte_target(self, e: int, pde: bool = False) -> tuple[int, int]:
    """(backing, address) an entry points at: a PDE's table at bits [47:6] (gmc_v11_0.c's PDE format; amdgpu keeps
    them 64-byte aligned), a PTE's page at [47:12]."""
    a = e & (PDE_ADDR_MASK if pde else ADDR_MASK)
    if e & PTE_SYSTEM: return HOST, a
    return VRAM, a - self.fb()[2] - self.node_offset

  def _read_q(self, kind: int, addr: int) -> int:
    if kind == VRAM:
      if not 0 <= addr <= self.b.vram_size - 8: raise BusError(addr, 8)
      return struct.unpack_from("<Q", self.b.vram, addr)[0]
    return struct.unpack("<Q", self.b.host_dma(addr, 8))[0]

  def page(self, vmid: int, va: int, write: bool) -> tuple[int, int]:
    """Translate the 4 KiB page holding va: (backing, physical page address). Raises Fault after reporting it."""
    t = self.tlb.get((vmid, va >> 12))
    if t is not None and t[2] & (PERM_WRITE if write else PERM_READ): return t[0], t[1]
    kind, phys, perm, _n = self._walk(vmid, va & ~0xfff, write, 1)
    if len(self.tlb) > 1 << 16: self.tlb.clear()
    self.tlb[(vmid, va >> 12)] = (kind, phys, perm)
    return kind, phys

  def extent(self, vmid: int, va: int, write: bool, want: int) -> tuple[int, int, int]:
    """Translate va and as much of the following range (up to `want` bytes) as is physically contiguous with the
    same backing: (backing, physical address, bytes). Cached like the TLB, keyed by the first page."""
    key, off = (vmid, va >> 12), va & 0xfff
    t = self.ext.get(key)
    if t is None or not t[2] & (PERM_WRITE if write else PERM_READ):
      kind, phys, perm, n = self._walk(vmid, va & ~0xfff, write, (off + want + 0xfff) >> 12)
      if len(self.ext) > 1 << 14: self.ext.clear()
      t = self.ext[key] = (kind, phys, perm, n)
    return t[0], t[1] + off, min(want, (t[3] << 12) - off)

  def _walk(self, vmid: int, va: int, write: bool, want_pages: int) -> tuple[int, int, int, int]:
    """(backing, physical address, PERM_READ/PERM_WRITE the leaf allows, pages mapped alike from va on)."""
    v = self.b.regs.vals
    if "page_fault" in self.b.faults and self.b.faults["page_fault"] is not True and self.b.faults["page_fault"].get("va", -1) >> 12 == va >> 12:
      self.report(vmid, va, write, "VALID"); raise Fault(self.name, va, write, "injected")
    if vmid == 0:
      mode = (v.get(self.a_l1, 0) & self.sam_mask) >> self.sam_shift
      lo, hi = v.get(self.a_sys_lo, 0) << 18, (v.get(self.a_sys_hi, 0) << 18) | 0x3ffff
      if mode != 0 and lo <= va <= hi and v.get(self.a_sys_hi, 0) >= v.get(self.a_sys_lo, 0):
        kind, a = self.mc_phys(va)
        fb_base, fb_end, _ = self.fb()
        end = min(hi + 1, fb_end) if fb_base <= va < fb_end else (va & ~0xfff) + 0x1000
        return kind, a, PERM_READ | PERM_WRITE, max(1, min(want_pages, (end - va) >> 12))
    cntl, blo, bhi, slo, shi, elo, ehi = self.ctx[vmid]
    c = v.get(cntl, 0)
    if not c & self.f_en[1]:
      self.report(vmid, va, write, "RANGE"); raise Fault(self.name, va, write, f"context {vmid} disabled")
    start = ((v.get(shi, 0) << 32) | v.get(slo, 0)) << 12
    end = ((v.get(ehi, 0) << 32) | v.get(elo, 0)) << 12 | 0xfff
    if not start <= va <= end:
      self.report(vmid, va, write, "RANGE"); raise Fault(self.name, va, write, "outside the context's range")
    depth, bs = (c & self.f_depth[1]) >> self.f_depth[0], (c & self.f_bs[1]) >> self.f_bs[0]
    # GFX9 "translate further": the last level's entries map 2 MiB unless PTE_TF sends the walk on to a table of 512
    # 4 KiB PTEs (gmc_v9_0.c's PTE/PDE formats); elsewhere the last level covers 9 + block-size bits of 4 KiB pages
    further = self.gfx9 and bs == 9
    rel = va - start
    base = (v.get(bhi, 0) << 32) | v.get(blo, 0)
    kind, table = self._pte_target(base, pde=True)          # the base register is a PDE: address + flags
    for lvl in range(depth, -1, -1):                         # lvl 0 = PTB
      shift = 12 + 9 * lvl + bs if lvl or further else 12
      nbits = 9 + bs if lvl == 0 and not further else 9
      idx = (rel >> shift) & ((1 << nbits) - 1) if lvl != depth else rel >> shift
      e = self._entry(kind, table + 8 * idx, vmid, va, write, lvl)
      if further and lvl == 0 and e & PTE_TF:   # a PTE that is a PDE: one more level, 4 KiB pages
        kind, table = self._pte_target(e)   # (a PTE's format: its flags may use bits [11:6])
        shift, nbits, idx = 12, 9, (rel >> 12) & 0x1ff
        e = self._entry(kind, table + 8 * idx, vmid, va, write, None)
      leaf = lvl == 0 or bool(e & self.pde_pte)
      if leaf:
        if not e & PTE_READABLE and not write:
          self.report(vmid, va, write, "READ"); raise Fault(self.name, va, write, "not readable")
        if write and not e & PTE_WRITEABLE:
          self.report(vmid, va, write, "WRITE"); raise Fault(self.name, va, write, "not writeable")
        k, a = self._pte_target(e)
        a = (a & ~((1 << shift) - 1)) + (rel & ((1 << shift) - 1) & ~0xfff)
        n = ((1 << shift) - (rel & ((1 << shift) - 1))) >> 12
        if shift == 12 and want_pages > 1: n = self._contiguous(kind, table, idx, e, min(want_pages, (1 << nbits) - idx))
        # what the cached translation allows: a write's walk does not check READABLE, so a later read must walk again
        perm = (PERM_READ if e & PTE_READABLE else 0) | (PERM_WRITE if e & PTE_WRITEABLE else 0)
        return k, a, perm, max(1, min(n, want_pages))
      kind, table = self._pte_target(e, pde=True)
    raise AssertionError("unreachable")

  def _entry(self, kind: int, addr: int, vmid: int, va: int, write: bool, lvl: int | None) -> int:
    """A valid entry of va's walk at level lvl (None: the PTE a GFX9 PDB0 entry translates further to), or the fault:
    an unreachable table (PDE0), or an invalid entry (VALID at the PTE level, PDE0 above)."""
    try: e = self._read_q(kind, addr)
    except BusError:
      self.report(vmid, va, write, "WALKER"); raise Fault(self.name, va, write, "page table not reachable") from None
    if not e & PTE_VALID:
      self.report(vmid, va, write, "VALID" if lvl in (0, None) else "PDE0")
      raise Fault(self.name, va, write, f"invalid entry at level {lvl}" if lvl is not None else "invalid entry at the PTE level")
    return e

  def _contiguous(self, kind: int, table: int, idx: int, e: int, count: int) -> int:
    """How many PTEs from table[idx] on map consecutive pages with the same flags (reads the PTB in one go)."""
    try: raw = bytes(self.b.vram[table + 8 * idx:table + 8 * (idx + count)]) if kind == VRAM else bytes(self.b.host_dma(table + 8 * idx, 8 * count))
    except BusError: return 1
    ents = np.frombuffer(raw, np.uint64)
    want = (np.uint64(e & ADDR_MASK) + np.arange(len(ents), dtype=np.uint64) * np.uint64(0x1000)) | np.uint64(e & ~ADDR_MASK)
    bad = np.nonzero(ents != want)[0]
    return int(bad[0]) if len(bad) else len(ents)

  def report(self, vmid: int, va: int, write: bool, kind: str) -> None:
    """Latch the first fault in the status/address registers and raise an interrupt if the context asks for one.
    PERMISSION_FAULTS is a mask, as real dumps show it (an unmapped read 0x3, an unmapped write 0x5: ROCm/amdgpu#150,
    #172): bit 0 no valid entry, bit 1 the read, bit 2 the write that failed; MAPPING_ERROR and WALKER_ERROR are a walk
    that could not read a table (0xb32 in ROCm/legacy-rocm-build#2766). The IV's ring_id carries the same three bits
    from bit 3 (ring 24 for an unmapped read; kfd_int_process_v11.c reads 0x08 valid, 0x10 read, 0x20 write), and
    src_data[1] the access (AMDGPU_GMC9_FAULT_SOURCE_DATA_READ 0x40 / WRITE 0x20) above the address bits."""
    if getattr(_probing, "on", False): return  # an instruction prefetch past the program: it faults nobody
    self.faults += 1
    vals = self.b.regs.vals
    access = 0b100 if write else 0b010
    perm = {"VALID": 1 | access, "PDE0": 1 | access, "WALKER": 1 | access, "READ": 0b010, "WRITE": 0b100}.get(kind, 0)
    walker = int(kind == "WALKER")
    if vals.get(self.a_st, 0) == 0:
      vals[self.a_st] = self.st.encode(VMID=vmid, RW=int(write), CID=getattr(_client, "cid", CID_CPC) if self.name.startswith("gc") else getattr(_client, "mm_cid", MM_CID_OTHER),
                                       PERMISSION_FAULTS=perm, MAPPING_ERROR=walker, WALKER_ERROR=walker)
      vals[self.a_fa_lo], vals[self.a_fa_hi] = (va >> 12) & 0xffffffff, va >> 44
    else: vals[self.a_st] |= self.st.encode(MORE_FAULTS=1)
    c = vals.get(self.ctx[vmid][0], 0)
    s, m = self.f_int.get(kind, self.f_int["VALID"])
    if c & m and hasattr(self.b, "ih"):
      flags = 0x20 if write else 0x40
      self.b.ih.post(client=self.ih_client, src=IH_SRC_VM_FAULT, ring_id=perm << 3, vmid=vmid, data=((va >> 12) & 0xffffffff, ((va >> 44) & 0xf) | flags, 0, 0),
                     node=self.ih_node, mm_hub=self.name.startswith("mm"))

  # ---- byte access for engines
  def chunks(self, vmid: int, va: int, size: int, write: bool) -> list[memoryview]:
    """Memory behind [va, va+size) as contiguous chunks (adjacent physical pages merged)."""
    out: list[memoryview] = []
    run_kind, run_start, run_len = -1, 0, 0
    end = va + size
    while va < end:
      if (vmid, va >> 12) in self.tlb and (vmid, va >> 12) not in self.ext:   # a page the TLB already holds
        kind, phys = self.page(vmid, va, write)
        phys += va & 0xfff
        n = min(0x1000 - (va & 0xfff), end - va)
      else: kind, phys, n = self.extent(vmid, va, write, end - va)
      if kind == run_kind and phys == run_start + run_len: run_len += n
      else:
        if run_len: out.append(self._mem(run_kind, run_start, run_len))
        run_kind, run_start, run_len = kind, phys, n
      va += n
    if run_len: out.append(self._mem(run_kind, run_start, run_len))
    return out

  def _mem(self, kind: int, addr: int, n: int) -> memoryview:
    if kind == VRAM:
      if addr < 0 or addr + n > self.b.vram_size: raise BusError(addr, n)
      return self.b.vram[addr:addr + n]
    return self.b.host_dma(addr, n)

  def read(self, vmid: int, va: int, size: int) -> bytes: return b"".join(bytes(c) for c in self.chunks(vmid, va, size, False))

  def write(self, vmid: int, va: int, data: bytes) -> None:
    pos = 0
    for c in self.chunks(vmid, va, len(data), True):
      c[:] = data[pos:pos + len(c)]; pos += len(c)

  def read32(self, vmid: int, va: int) -> int: return struct.unpack("<I", self.read(vmid, va, 4))[0]
  def write32(self, vmid: int, va: int, v: int) -> None: self.write(vmid, va, struct.pack("<I", v & 0xffffffff))
  def read64(self, vmid: int, va: int) -> int: return struct.unpack("<Q", self.read(vmid, va, 8))[0]
  def write64(self, vmid: int, va: int, v: int) -> None: self.write(vmid, va, struct.pack("<Q", v & 0xffffffffffffffff))


class GMC:
  def __init__(self, board: "AMDBoard"):
    if board.asic.version(11)[0] == 9:   # GC 9.4.3: gfxhub 1.2 per XCC and mmhub 1.8 per AID, named VM_/MC_VM_ (SOC15 clients)
      n = lambda hw: sum(1 for e in board.asic.ips if e.hw_id == hw)
      self.gcs = [Hub(board, f"gc{i}", instance_key("gc", i), "VM_", "MC_VM_", ih.SOC15_IH_CLIENTID_UTCL2) for i in range(n(GC_HWID))]
      self.mms = [Hub(board, f"mm{i}", instance_key("mmhub", i), "VM_", "MC_VM_", ih.SOC15_IH_CLIENTID_VMC) for i in range(n(MMHUB_HWID))]
      self.gc, self.mm = self.gcs[0], self.mms[0]
      for i, h in enumerate(self.gcs): h.ih_node = ih_node_xcd(i)
      for a, h in enumerate(self.mms): h.ih_node = ih_node_aid(a)
    else:
      self.gc = Hub(board, "gc", "gc", "GCVM_", "GCMC_VM_", IH_CLIENT_GFX)
      self.mm = Hub(board, "mm", "mmhub", "MMVM_", "MMMC_VM_", IH_CLIENT_VMC)
      self.gcs, self.mms = [self.gc], [self.mm]
    self.b = board

  def phys(self, mc: int, size: int) -> memoryview:
    """What a firmware processor (PSP, SMU) reaches at an MC physical address: VRAM through the FB aperture, else the bus."""
    kind, a = self.mm.mc_phys(mc)
    return self.mm._mem(kind, a, size)


_DT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


_probing = threading.local()

# UTCL2 client ids of the GC hub (GCVM_L2_PROTECTION_FAULT_STATUS.CID; amdgpu names them in gfxhub_v3_0.c and
# gfxhub_v12_0.c): the engine a thread is stepping says which client its memory accesses come from.
CID_CPC, CID_TCP, CID_SQC_INST, CID_SQC_DATA, CID_SDMA0 = 5, 8, 9, 10, 13
# ... and of an MM hub, which MI300's SDMA engines go through. gmc_v9_0.c names MMHUB 1.8's clients with Aldebaran's
# table: SDMA0-4 are 256 + n (an AID's engines 0-3 here). Clients the model has no engine for report 2 (a model choice).
MM_CID_SDMA0, MM_CID_OTHER = 256, 2
_client = threading.local()


def as_client(cid: int, access, *args):
  """access(*args) as client cid (then back to the thread's own client)."""
  prev = getattr(_client, "cid", CID_CPC)
  _client.cid = cid
  try: return access(*args)
  finally: _client.cid = prev


def acting_as(cid: int, mm_cid: int = MM_CID_OTHER) -> None:
  """From now on this thread's GC-hub accesses are client `cid`'s (a CP, a shader's TCP, an SDMA engine), and its
  MM-hub accesses client `mm_cid`'s."""
  _client.cid, _client.mm_cid = cid, mm_cid


class BusMemory:
  """Loads and stores the board sends out on the bus (peer BARs): lane by lane, the slow path."""
  def __init__(self, board: "AMDBoard"): self.b = board

  def _dma(self, addr: int, size: int, write: bool) -> memoryview:
    from rawgpu.drivers.emu.shader.memory import MemoryFault
    try: return self.b.host_dma(addr, size)
    except BusError: raise MemoryFault(addr, write) from None   # nobody answers at that bus address

  def load(self, p: np.ndarray, size: int) -> np.ndarray:
    return np.array([int.from_bytes(self._dma(x, size, False), "little") for x in p.tolist()], _DT[size])

  def store(self, p: np.ndarray, vals: np.ndarray, size: int) -> None:
    for x, v in zip(p.tolist(), vals.tolist()): self._dma(x, size, True)[:] = int(v).to_bytes(size, "little")


class VMMemory:
  """rdna.GPUMemory over one VM context of a hub: lanes translated page by page (one translation when the lanes'
  span is physically contiguous), backed by VRAM or host pages."""
  def __init__(self, hub: Hub, vmid: int):
    from rawgpu.drivers.emu.shader.memory import FlatMemory, MemoryFault
    self.hub, self.vmid, self.MemoryFault = hub, vmid, MemoryFault
    b = hub.b
    self.flat = [FlatMemory(b.vram_size, 0, np.frombuffer(b.vram_map, np.uint8)),
                 FlatMemory(b.host.size, b.host.PHYS_BASE, np.frombuffer(b.host.buf, np.uint8)) if b.host is not None else None,
                 BusMemory(b)]
    self.fault: Fault | None = None

  def _host_ok(self, k: int, addr: int, write: bool) -> None:
    if k == HOST and (self.flat[HOST] is None or not self.hub.b.cfg.bus_master): raise self.MemoryFault(addr, write)

  def _kind(self, k: int, ph: int) -> int:
    """System pages outside host RAM go out on the bus (another board's BAR: PCIe peer to peer)."""
    h = self.hub.b.host
    return PEER if k == HOST and h is not None and not h.PHYS_BASE <= ph < h.PHYS_BASE + h.size else k

  def _phys(self, a: np.ndarray, write: bool, lo: int, hi: int) -> tuple[int, np.ndarray | None, np.ndarray]:
    """(backing if all lanes share one, else -1; per-lane backing or None; physical addresses) of lanes a, whose
    lowest and highest addresses are lo and hi."""
    if self.hub.b.removed: raise self.MemoryFault(int(a[0]) if len(a) else 0, write)   # the board is gone: waves die
    base = lo & ~0xfff
    probing, _probing.on = getattr(_probing, "on", False), True   # a guess at the whole span: a fault is reported below,
    try:                                                       # once, for the exact lane (one access, one interrupt)
      k, ph, n = self.hub.extent(self.vmid, base, write, hi + 1 - base)
      if n >= hi + 1 - base:                                   # the whole span is one contiguous run
        self._host_ok(k, lo, write)
        return self._kind(k, ph), None, a - np.uint64(base) + np.uint64(ph)
    except Fault: pass                                         # find the exact faulting lane below
    finally: _probing.on = probing
    pg = a >> np.uint64(12)
    pmin = int(pg.min())
    span = (hi >> 12) - pmin + 1
    if span <= 1 << 16:                                        # page lookup table instead of a sort
      idx = (pg - np.uint64(pmin)).astype(np.int64)
      used = np.zeros(span, bool); used[idx] = True
      pages = np.nonzero(used)[0] + pmin
      lut_k, lut_b = np.zeros(span, np.int8), np.zeros(span, np.uint64)
    else:
      pages, idx = np.unique(pg, return_inverse=True)
      lut_k, lut_b = np.zeros(len(pages), np.int8), np.zeros(len(pages), np.uint64)
      pmin = None
    for i, p in enumerate(pages.tolist()):
      k, ph = self._page(p << 12, write, lambda p=p: int(a[np.argmax(pg == np.uint64(p))]))
      j = p - pmin if pmin is not None else i
      lut_k[j], lut_b[j] = self._kind(k, ph), ph
    kinds = lut_k[idx]
    uniform = int(kinds[0]) if (kinds == kinds[0]).all() else -1
    return uniform, (None if uniform >= 0 else kinds), lut_b[idx] + (a & np.uint64(0xfff))

  def _page(self, va: int, write: bool, lane: Callable[[], int]) -> tuple[int, int]:
    """(backing, physical address) of the page at va, host access checked. A fault is reported once, by the walk,
    and raised as the MemoryFault of lane(), the first lane that touched the page."""
    try: k, ph = self.hub.page(self.vmid, va, write)
    except Fault as f:
      self.fault = f
      raise self.MemoryFault(lane(), write) from None
    self._host_ok(k, va, write)
    return k, ph

  def _split(self, addrs, size: int, write: bool):
    a = np.asarray(addrs, np.uint64).reshape(-1)
    if not len(a): return a, None, None, None
    lo, hi = int(a.min()), int(a.max())
    if lo >> 12 == (hi + size - 1) >> 12:   # every lane in one page (the common case for a few lanes): one TLB lookup
      if self.hub.b.removed: raise self.MemoryFault(lo, write)
      base = lo & ~0xfff
      k, ph = self._page(base, write, lambda: int(a[0]))
      return a, self._kind(k, ph), None, a + np.uint64((ph - base) % (1 << 64))
    if ((a & np.uint64(0xfff)) + np.uint64(size) > np.uint64(0x1000)).any(): return a, None, None, None
    u, k, p = self._phys(a, write, lo, hi)
    return a, u, k, p

  def load(self, addrs: np.ndarray, size: int) -> np.ndarray:
    if size == 16: return np.stack([self.load(np.asarray(addrs, np.uint64) + np.uint64(4 * j), 4) for j in range(4)], 1)
    a, u, k, p = self._split(addrs, size, False)
    if p is None:                                              # a lane crosses a page (or no lanes): bytewise
      if not len(a): return np.zeros(0, _DT[size])
      b = self.load((a[:, None] + np.arange(size, dtype=np.uint64)).reshape(-1), 1)
      return np.ascontiguousarray(b.reshape(-1, size)).view(_DT[size]).reshape(-1)
    if u >= 0: return self.flat[u].load(p, size)
    out = np.empty(len(a), _DT[size])
    for kind in (VRAM, HOST, PEER):
      m = k == kind
      if m.any(): out[m] = self.flat[kind].load(p[m], size)
    return out

  def store(self, addrs: np.ndarray, values: np.ndarray, size: int) -> None:
    if size == 16:
      vals = np.asarray(values, np.uint32).reshape(-1, 4)
      for j in range(4): self.store(np.asarray(addrs, np.uint64) + np.uint64(4 * j), vals[:, j], 4)
      return
    a, u, k, p = self._split(addrs, size, True)
    vals = np.asarray(values).astype(_DT[size], copy=False).reshape(-1)
    if p is None:
      if len(a): self.store((a[:, None] + np.arange(size, dtype=np.uint64)).reshape(-1), np.ascontiguousarray(vals).view(np.uint8), 1)
      return
    if u >= 0: self.flat[u].store(p, vals, size); return
    for kind in (VRAM, HOST, PEER):
      m = k == kind
      if m.any(): self.flat[kind].store(p[m], vals[m], size)

  def atomic(self, op: str, addrs: np.ndarray, values: np.ndarray, size: int, cmp: np.ndarray | None = None) -> np.ndarray:
    a, u, k, p = self._split(addrs, size, True)
    if p is None: raise self.MemoryFault(int(a[0]) if len(a) else 0, True)
    if u == PEER or (u < 0 and (k == PEER).any()): raise self.MemoryFault(int(a[0]), True)   # atomics across the bus: not modelled
    if u >= 0: return self.flat[u].atomic(op, p, values, size, cmp)
    # lanes on VRAM and on host memory: each backing's lanes in order (no address is in both)
    vals = np.broadcast_to(np.asarray(values), (len(a),) + np.shape(values)[1:])
    cmps = None if cmp is None else np.broadcast_to(np.asarray(cmp), (len(a),) + np.shape(cmp)[1:])
    out = None
    for kind in (VRAM, HOST):
      m = k == kind
      if not m.any(): continue
      r = self.flat[kind].atomic(op, p[m], vals[m], size, None if cmps is None else cmps[m])
      if out is None: out = np.empty((len(a),) + r.shape[1:], r.dtype)
      out[m] = r
    return out

  def scalar_load(self, addrs: np.ndarray, size: int) -> np.ndarray:
    """A scalar load (s_load, s_buffer_load): it reaches memory through the SQC's data cache, not the TCP."""
    return as_client(CID_SQC_DATA, self.load, addrs, size)

  def fetch(self, addr: int, n: int) -> bytes:
    """An instruction fetch: through the SQC's instruction cache."""
    return as_client(CID_SQC_INST, self.read, addr, n)

  def prefetch(self, addr: int, n: int) -> bytes | None:
    """Instruction prefetch: the bytes if mapped, None otherwise, without raising or reporting a fault."""
    _probing.on, fault = True, self.fault
    try: return self.read(addr, n)
    except self.MemoryFault: return None
    finally: _probing.on, self.fault = False, fault

  def read(self, addr: int, n: int) -> bytes:
    if self.hub.b.removed: raise self.MemoryFault(addr, False)
    try: return self.hub.read(self.vmid, addr, n)
    except Fault as f:
      self.fault = f
      raise self.MemoryFault(addr, False) from None
    except BusError: raise self.MemoryFault(addr, False) from None
