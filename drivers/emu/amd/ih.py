"""IH (OSSSYS): interrupt rings 0 and 1. Entries are the 32-byte SOC15 IV format (amdgpu_irq.c/ih_v6_0.c decode):
dw0 client id [7:0], source id [15:8], ring id [23:16], vmid [27:24]; dw1-2 timestamp; dw3 pasid [15:0] and node id
[23:16] (the MI300 die the interrupt comes from, asic.ih_node_*); dw4-7 source data.
"""
from __future__ import annotations
import struct, threading
from typing import TYPE_CHECKING
from rawgpu.drivers.emu.pcibus import BusError
from rawgpu.drivers.emu.amd.gmc import Fault
if TYPE_CHECKING: from rawgpu.drivers.emu.amd.board import AMDBoard

ENTRY = 32


class IHRing:
  def __init__(self, board: "AMDBoard", suffix: str):
    r, self.b, self.sfx = board.regs, board, suffix
    a = lambda n: r.addr("osssys", n)
    self.cntl = r.reg("osssys", f"regIH_RB_CNTL{suffix}")
    self.wptr_reg = r.reg("osssys", f"regIH_RB_WPTR{suffix}")
    self.a_cntl, self.a_base, self.a_base_hi = a(f"regIH_RB_CNTL{suffix}"), a(f"regIH_RB_BASE{suffix}"), a(f"regIH_RB_BASE_HI{suffix}")
    self.a_rptr, self.a_wptr = a(f"regIH_RB_RPTR{suffix}"), a(f"regIH_RB_WPTR{suffix}")
    self.a_wb_lo = a("regIH_RB_WPTR_ADDR_LO") if not suffix else None
    self.a_wb_hi = a("regIH_RB_WPTR_ADDR_HI") if not suffix else None
    self.a_db = a(f"regIH_DOORBELL_RPTR{suffix}")
    self.db = r.reg("osssys", f"regIH_DOORBELL_RPTR{suffix}")
    r.hook("osssys", f"regIH_RB_CNTL{suffix}", wr=self._cntl_wr)
    self.dropped = self.overflows = 0

  def _cntl_wr(self, a: int, v: int) -> None:
    d = self.cntl.decode(v)
    if d.get("WPTR_OVERFLOW_CLEAR"):
      self.b.regs.vals[self.a_wptr] = self.b.regs.vals.get(self.a_wptr, 0) & ~self.wptr_reg.fields["RB_OVERFLOW"][1]
    self.b.regs.vals[a] = v

  def post(self, words: bytes) -> bool:
    """Write one entry. A full ring with WPTR_OVERFLOW_ENABLE is written on over its oldest entry and latches
    RB_OVERFLOW in the write pointer (register and writeback) until WPTR_OVERFLOW_CLEAR: amdgpu's get_wptr then
    resumes "from the last not overwritten vector" (ih_v6_0.c, vega20_ih.c). Without it the entry is dropped (what
    the IH does then is not public)."""
    vals = self.b.regs.vals
    c = self.cntl.decode(vals.get(self.a_cntl, 0))
    if not c["RB_ENABLE"]: return False
    size = 4 << c["RB_SIZE"]
    w = vals.get(self.a_wptr, 0)
    overflow = w & self.wptr_reg.fields["RB_OVERFLOW"][1]
    off = w & (size - 1) & ~3
    rptr = vals.get(self.a_rptr, 0) & (size - 1)
    nxt = (off + ENTRY) & (size - 1)
    if nxt == rptr:                                        # full
      if not c["WPTR_OVERFLOW_ENABLE"]: self.dropped += 1; return False
      self.overflows += 1
      if not c["WPTR_OVERFLOW_CLEAR"]: overflow = self.wptr_reg.fields["RB_OVERFLOW"][1]   # CLEAR held at 1 keeps it clear
    base = ((vals.get(self.a_base_hi, 0) << 32) | vals.get(self.a_base, 0)) << 8
    try:
      self._write(c, base + off, words)
      vals[self.a_wptr] = nxt | overflow
      if self.a_wb_lo is not None and c["WPTR_WRITEBACK_ENABLE"]:
        self._write(c, (vals.get(self.a_wb_hi, 0) << 32) | vals.get(self.a_wb_lo, 0), struct.pack("<I", nxt | overflow))
    except (BusError, Fault): self.dropped += 1; return False
    return True

  def _write(self, c: dict, addr: int, data: bytes) -> None:
    if c["MC_SPACE"] == 2: self.b.host_dma(addr, len(data))[:] = data        # bus (system physical) addresses
    else: self.b.gmc.mm.write(c["MC_VMID"], addr, data)                      # through the MM hub

  def doorbell(self, idx: int, value: int) -> bool:
    v = self.b.regs.vals.get(self.a_db, 0)
    (_, en), (sh, off) = self.db.fields["ENABLE"], self.db.fields["OFFSET"]
    if not (v & en and (v & off) >> sh == idx): return False
    self.b.regs.vals[self.a_rptr] = value & 0xffffffff
    return True


class IH:
  def __init__(self, board: "AMDBoard"):
    self.b = board
    self.rings = [IHRing(board, ""), IHRing(board, "_RING1")]
    self.posted = 0
    self.lock = threading.Lock()          # the worker and a direct post (a test's) may come at once
    r = board.regs
    self.a_lut = {mm: [r.addr("osssys", f"regIH_VMID_{v}_LUT{'_MM' if mm else ''}") for v in range(16)] for mm in (False, True)}
    # MI300 (OSSSYS 4.4.2): a LUT pair per die, IH_VMID_LUT_INDEX choosing which the registers reach; the index
    # counts as the IV node id does, AID n at 4n and its XCDs after it (amdgpu_amdkfd_gc_9_4_3.c, amdgpu_irq.h)
    self.banked = r.has("osssys", "regIH_VMID_LUT_INDEX")
    self.luts: dict[tuple[int, bool], list[int]] = {}
    if self.banked:
      self.a_index = r.addr("osssys", "regIH_VMID_LUT_INDEX")
      for mm, addrs in self.a_lut.items():
        for v, a in enumerate(addrs):
          r.rd[a] = lambda a, v=v, mm=mm: self._lut(mm)[v]
          r.wr[a] = lambda a, val, v=v, mm=mm: self._lut(mm).__setitem__(v, val & 0xffffffff)

  def _lut(self, mm: bool, bank: int | None = None) -> list[int]:
    if bank is None: bank = self.b.regs.vals.get(self.a_index, 0) & 0xff
    return self.luts.setdefault((bank, mm), [0] * 16)

  def pasid_of(self, vmid: int, node: int = 0, mm_hub: bool = False) -> int:
    """The PASID the driver gave a VMID: IH_VMID_n_LUT for GC-hub VMIDs, _LUT_MM for MM-hub ones (gfx9, where the
    copy engines sit on the MM hub; amdgpu_amdkfd_gfx_v9.c writes both), in the IV's die's bank on MI300."""
    if self.banked: return self._lut(mm_hub, node)[vmid] & 0xffff
    return self.b.regs.vals.get(self.a_lut[mm_hub][vmid], 0) & 0xffff

  def post(self, client: int, src: int, ring_id: int = 0, vmid: int = 0, pasid: int = 0, data: tuple[int, int, int, int] = (0, 0, 0, 0),
           node: int = 0, mm_hub: bool = False) -> None:
    """One IV. A source in a VMID other than 0 gets the PASID the driver gave that VMID (pasid_of)."""
    ts = self.b.clock.now()
    if vmid and not pasid: pasid = self.pasid_of(vmid, node, mm_hub)
    words = struct.pack("<8I", client | (src << 8) | (ring_id << 16) | (vmid << 24), ts & 0xffffffff, (ts >> 32) & 0xffff,
                        pasid | (node << 16), *data)
    with self.lock:
      self.posted += 1
      self.rings[0].post(words)

  def doorbell(self, idx: int, value: int) -> bool:
    return any(r.doorbell(idx, value) for r in self.rings)
