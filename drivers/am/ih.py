"""IH: the interrupt handler ring (ih_v6_0.c / ih_v7_0.c; vega20_ih.c for MI300's OSSSYS 4.4.2, the same registers). The OSS writes 32-byte IV entries into a VRAM ring and
the write pointer to a writeback slot; AM polls it (no MSI in userspace) and turns VM faults into DeviceFault.
"""
from __future__ import annotations
import struct
from rawgpu.drivers.am import facts as F
from rawgpu.drivers.am.block import Block
from rawgpu.drivers.am.gmc import MM_CLIENTS
from rawgpu.autogen.amd import ih as _IH
from rawgpu.errors import DeviceFault

RING_SIZE = 256 << 10
ENTRY = 32
CP_ERRORS = {_IH.GFX_11_0_0__SRCID__CP_BAD_OPCODE_ERROR: "bad opcode", _IH.GFX_11_0_0__SRCID__CP_PRIV_REG_FAULT: "privileged register access",
             _IH.GFX_11_0_0__SRCID__CP_PRIV_INSTR_FAULT: "privileged instruction"}
DOORBELL_IH = F.AMDGPU_NAVI10_DOORBELL_IH
# interrupt clients of the events AM acts on: SOC21 (gfx11/12) and SOC15 (gfx9, vega20_ih on MI300)
CLIENTS = {"soc21": dict(cp=F.SOC21_IH_CLIENTID_GRBM_CP, mm=F.SOC21_IH_CLIENTID_VMC, gc=F.SOC21_IH_CLIENTID_GFX),
           "soc15": dict(cp=_IH.SOC15_IH_CLIENTID_GRBM_CP, mm=_IH.SOC15_IH_CLIENTID_VMC, gc=_IH.SOC15_IH_CLIENTID_UTCL2)}


class IH(Block):
  name = "ih"

  def init_sw(self) -> None:
    d = self.dev
    self.ring = d.boot_alloc(RING_SIZE, align=RING_SIZE)
    self.wptr_wb = d.boot_alloc(0x1000)          # wptr writeback at +0
    self.rptr, self.overflows, self.lost_faults = 0, 0, False
    self.pending: dict[int, DeviceFault] = {}   # XCC -> the fault its device has not been told yet

  def init_hw(self) -> None:
    r = lambda n: self.reg("osssys", n)
    d = self.dev
    # nbio_v4_3_ih_control: without MSI the BIF reads a dummy page (a host bus address in CNTL2) before each interrupt
    # unless IH_DUMMY_RD_OVERRIDE hands that to IH_DUMMY_RD_EN; AM polls and takes no interrupt, so none. The ring is
    # in VRAM: non-snooped requests (the kernel's comment for a VRAM ring)
    self.reg("nbio", "regBIF_BX0_INTERRUPT_CNTL").update(IH_DUMMY_RD_OVERRIDE=1, IH_DUMMY_RD_EN=0, IH_REQ_NONSNOOP_EN=1)
    mc = d.gmc.mc(self.ring)
    r("regIH_RB_BASE").write(mc >> 8)
    r("regIH_RB_BASE_HI").write((mc >> 40) & 0xff)
    cntl = r("regIH_RB_CNTL")   # read-modify-write (ih_v6_0_enable_ring), off while it is programmed (toggle_interrupts)
    cntl.write(cntl.reg.modify(cntl.read(), RB_ENABLE=0, ENABLE_INTR=0, MC_SPACE=4, WPTR_OVERFLOW_CLEAR=1, WPTR_OVERFLOW_ENABLE=1, RB_SIZE=(RING_SIZE // 4).bit_length() - 1,
                               WPTR_WRITEBACK_ENABLE=1, MC_SNOOP=1, MC_RO=0, MC_VMID=0, RPTR_REARM=0))
    wb = d.gmc.mc(self.wptr_wb)
    d.vram(self.wptr_wb, 4)[:] = bytes(4)   # a board not reset since its last owner keeps that owner's write pointer here
    r("regIH_RB_WPTR_ADDR_LO").write(wb & 0xffffffff)
    r("regIH_RB_WPTR_ADDR_HI").write((wb >> 32) & 0xffff)
    r("regIH_RB_WPTR").write(0)
    r("regIH_RB_RPTR").write(0)
    db = F.AMDGPU_DOORBELL_LAYOUT1_IH if d.gc9 else DOORBELL_IH
    r("regIH_DOORBELL_RPTR").write(OFFSET=db * 2, ENABLE=1)
    d.soc.ih_doorbell(db * 2)
    # enable: clear the overflow latch with a 0 -> 1 edge, then turn the ring and its interrupt on
    v = cntl.reg.modify(cntl.read(), RB_ENABLE=1, WPTR_OVERFLOW_CLEAR=0)
    cntl.write(v)
    cntl.write(cntl.reg.modify(v, WPTR_OVERFLOW_CLEAR=1))
    cntl.write(cntl.reg.modify(v, WPTR_OVERFLOW_CLEAR=0, ENABLE_INTR=1))
    self.rptr = 0

  def sync(self) -> None:
    """Warm boot: the ring kept running; skip what a previous owner left in it (and tell the IH, which would otherwise
    count those entries as unread, and overflow early)."""
    self.rptr = self._wptr()
    self.reg("osssys", "regIH_RB_RPTR").write(self.rptr)

  def _wptr(self) -> int:
    """The write pointer from its writeback slot. After an overflow (RB_OVERFLOW latched: the OSS wrote on over
    entries AM had not read) reading resumes at the oldest entry left and the latch is cleared (ih_v6_0_get_wptr);
    check_faults then also looks for a fault whose interrupt was overwritten in the hubs' latched status."""
    wb = struct.unpack_from("<I", self.dev.vram(self.wptr_wb, 4))[0]
    if wb & 1:                                     # IH_RB_WPTR.RB_OVERFLOW
      reg, cntl = self.reg("osssys", "regIH_RB_WPTR"), self.reg("osssys", "regIH_RB_CNTL")
      wb = reg.read()
      if wb & 1:
        self.rptr, self.overflows = ((wb & ~1) + ENTRY) & (RING_SIZE - 1) & ~(ENTRY - 1), self.overflows + 1
        cntl.update(WPTR_OVERFLOW_CLEAR=1)
        cntl.update(WPTR_OVERFLOW_CLEAR=0)
        self.lost_faults = True
    return wb & (RING_SIZE - 1) & ~(ENTRY - 1)

  def poll(self) -> list[dict]:
    """Consume every pending IV entry; returns them decoded (client, source, ring, vmid, src_data)."""
    out = []
    wptr = self._wptr()
    if self.rptr != wptr: self.dev.read_fence()   # the entries, read after the write pointer that says they are there
    while self.rptr != wptr:
      dw = struct.unpack_from("<8I", self.dev.vram(self.ring + self.rptr, ENTRY))
      out.append({"client_id": dw[0] & 0xff, "src_id": (dw[0] >> 8) & 0xff, "ring_id": (dw[0] >> 16) & 0xff,
                  "vmid": (dw[0] >> 24) & 0xf, "vmid_src": dw[0] >> 31, "pasid": dw[3] & 0xffff, "node_id": (dw[3] >> 16) & 0xff,
                  "src_data": dw[4:8]})
      self.rptr = (self.rptr + ENTRY) & (RING_SIZE - 1)
    if out: self.reg("osssys", "regIH_RB_RPTR").write(self.rptr)
    return out

  def check_faults(self, xcc: int = 0) -> bool:
    """Consume pending entries and raise DeviceFault for a VM fault or CP queue error of the device on `xcc`. On
    MI300 each open XCC is a device of its own: a fault goes to the XCC its die or copy engine belongs to (one that
    no open device owns, to every open one). A device is told the first fault of its since it last looked. True if
    anything arrived."""
    ivs = self.poll()
    told: set[int] = set()
    for iv in ivs:
      if (fault := self._fault_of(iv)) is not None: self._deliver(*fault, told)
    if self.lost_faults:   # entries were overwritten: a fault whose interrupt was among them is still latched in its hub
      self.lost_faults = False
      if (latched := self.dev.gmc.latched_fault("interrupt lost to an IH ring overflow")) is not None:
        hub, e, inst, cid = latched
        self._deliver(e, self.fault_owner(hub, inst, cid), told)
    if (e := self.pending.pop(xcc, None)) is not None: raise e
    return bool(ivs)

  def _fault_of(self, iv: dict) -> tuple[DeviceFault, int | None] | None:
    """The DeviceFault an entry reports (a VM fault, a CP queue error, a shader error) and the XCC whose device it
    concerns (None: every device), or None for an entry that reports none."""
    c, xcd = CLIENTS["soc15" if self.dev.gc9 else "soc21"], self._xcd(iv["node_id"])
    on = "" if xcd is None else f", XCC {xcd}"
    if iv["client_id"] == c["cp"] and iv["src_id"] in CP_ERRORS:
      rid = iv["ring_id"]
      me, pipe, queue = (rid & 0x0c) >> 2, rid & 0x03, (rid & 0x70) >> 4   # gfx_v11_0_handle_priv_fault
      return DeviceFault(f"{self.dev.bus}: compute queue {queue} (MEC {me} pipe {pipe}{on}) stopped: {CP_ERRORS[iv['src_id']]}; the "
                         "packet stream is malformed (check what was written to the ring); reopen the device to recover"), xcd
    if iv["client_id"] == c["cp"] and iv["src_id"] == _IH.GFX_11_0_0__SRCID__SQ_INTERRUPT_ID:
      sd, rid = iv["src_data"], iv["ring_id"]
      return DeviceFault(f"{self.dev.bus}: a wave of compute queue {(rid & 0x70) >> 4}{on} stopped with a shader error (SQ interrupt) at "
                         f"PC {sd[0] | (sd[1] << 32):#x}: an illegal instruction or a trap; Device.recover() or reopening restarts the queue"), xcd
    if iv["client_id"] in (c["mm"], c["gc"]) and iv["src_id"] == F.UTCL2_1_0__SRCID__FAULT:
      sd = iv["src_data"]
      addr = (sd[0] << 12) | ((sd[1] & 0xf) << 44)
      hub = "MM" if iv["client_id"] == c["mm"] else "GC"
      e, inst, cid = self.dev.gmc.page_fault(hub, addr, f"ring id {iv['ring_id']:#x}, vmid {iv['vmid']}", self.hub_instance(hub, iv["node_id"]))
      return e, self.fault_owner(hub, inst, cid)
    return None

  def fault_owner(self, hub: str, inst: int, cid: int) -> int | None:
    """The XCC (MI300 partition) a VM fault belongs to: a GC hub's own; for an MM hub the partition of the copy engine
    its client names (an AID's SDMA n is engine 4 * AID + n); None for any other client, and off MI300."""
    if not self.dev.gc9: return None
    if hub == "GC": return inst
    name = MM_CLIENTS.get(self.dev.ips["mmhub"], {}).get(cid, "")
    return self.dev.sdma.partition_of(4 * inst + int(name[4:])) if name.startswith("SDMA") else None

  def _deliver(self, e: DeviceFault, owner: int | None, told: set[int]) -> None:
    """Keep e for the device(s) it concerns, unless this poll already told them one (a fault's first report counts)."""
    open_ = self.dev.partitions or {0}
    for x in ([owner] if owner in open_ else open_):
      if x not in told: told.add(x); self.pending.setdefault(x, e)

  def hub_instance(self, hub: str, node: int) -> int | None:
    """MI300: the hub instance a fault's node id names (gmc_v9_0_process_interrupt: an AID's MM hub is node / 4, a GC hub
    the XCC of its XCD node); None elsewhere, or for a node id no die has."""
    if hub == "MM": return node // 4 if self.dev.gc9 and node in F.AID_NODEID else None
    return self._xcd(node)

  def _xcd(self, node: int) -> int | None:
    """MI300: the XCC an entry's node id names (amdgpu_irq.h XCDn_NODEID); None elsewhere, or for an AID's node."""
    return F.XCD_NODEID.index(node) if self.dev.gc9 and node in F.XCD_NODEID else None
