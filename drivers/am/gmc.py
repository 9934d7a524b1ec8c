"""GMC: the two VM hubs (GC and MM), their system apertures, VMID 0 page tables and TLB invalidation
(gmc_v11_0.c / gmc_v12_0.c with gfxhub_v3_0.c / mmhub_v3_0.c / gfxhub_v12_0.c / mmhub_v4_1_0.c).

Every engine reaches memory through VMID 0 and the page tables of rawgpu.drivers.am.mm; VRAM is also reachable at
its MC address through the system aperture (PSP, IH and the page walker use MC/physical addresses).
"""
from __future__ import annotations
from rawgpu.drivers.am import mm
from rawgpu.drivers.am.block import Block
from rawgpu.errors import DeviceFault, RawGPUError

HUBS = {"GC": "gc", "MM": "mmhub"}     # register prefix -> register table
# GC-hub UTCL2 clients by the L2 protection fault status' CID, as amdgpu names them (gmc_v9_0.c, gfxhub_v3_0.c, gfxhub_v12_0.c)
GC_CLIENTS = {9: ("CB", "DB", "IA", "WD", "CPF", "CPC", "CPG", "RLC", "TCP", "SQC (inst)", "SQC (data)", "SQG", "PA"),   # gmc_v9_0.c
              11: ("CB/DB", "Reserved", "GE1", "GE2", "CPF", "CPC", "CPG", "RLC", "TCP", "SQC (inst)", "SQC (data)", "SQG",
                   "Reserved", "SDMA0", "SDMA1", "GCR", "SDMA2", "SDMA3"),
              12: ("CB", "DB", "GE1", "GE2", "CPF", "CPC", "CPG", "RLC", "TCP", "SQC (inst)", "SQC (data)", "SQG/PC/SC",
                   "Reserved", "SDMA0", "SDMA1", "GCR", "Reserved", "Reserved", "WGS", "DSM", "PA")}
# MM-hub clients: gmc_v9_0.c names MMHUB 1.8's (MI300) with Aldebaran's table (reads and writes alike); newer MM hubs
# are not named by amdgpu
MM_CLIENTS = {(1, 8, 0): {2: "MP1", 3: "MP0", 33: "DBGU_IO0", 34: "DBGU_IO2", 36: "MPIO", 107: "JPEG0", 108: "VCN0", 109: "VCNU0",
                          139: "JPEG1", 140: "VCN1", 141: "VCNU1", 161: "XDP", 174: "HDP", 256: "SDMA0", 257: "SDMA1",
                          258: "SDMA2", 259: "SDMA3", 260: "SDMA4", 384: "OSS"}}
INV_ENG = 17                           # the invalidation engine the driver keeps for itself (as amdgpu's KIQ path)


class GMC(Block):
  name = "gmc"

  def init_sw(self) -> None:
    d = self.dev
    pfx = "reg" if d.gc9 else "regMM"   # mmhub 1.8 (MI300) names them MC_VM_*, mmhub 3/4 MMMC_VM_*
    self.fb_base = (self.reg("mmhub", f"{pfx}MC_VM_FB_LOCATION_BASE").read() & 0xffffff) << 24
    # the FB's last byte: LOCATION_TOP names its last 16 MiB block (amdgpu_gmc_vram_location's fb_end)
    self.fb_end = (((self.reg("mmhub", f"{pfx}MC_VM_FB_LOCATION_TOP").read() & 0xffffff) + 1) << 24) - 1
    self.vram_base_offset = (self.reg("mmhub", f"{pfx}MC_VM_FB_OFFSET").read() & 0xffffff) << 24
    self.fb_start = self.fb_base   # the FB aperture's start: the hive's, on an XGMI node
    if d.gc9:   # an XGMI hive's node: its VRAM is its segment of the hive's FB range (gmc_v9_0_vram_gtt_location)
      node, seg = self.xgmi_node()
      self.fb_base += node * seg
      self.vram_base_offset += node * seg
    d.pt.phys_offset = self.vram_base_offset   # the page tables' PDEs name their tables by it too
    self.scratch_page = d.boot_alloc(mm.PAGE)     # where unmapped system-aperture accesses land
    self.dummy_page = d.boot_alloc(mm.PAGE)       # where faulting accesses are redirected
    self.hub_ready = {"GC": False, "MM": False}

  def xgmi_node(self) -> tuple[int, int]:
    """(physical node id, segment bytes) from GC's MC_VM_XGMI_LFB_CNTL/SIZE (gfxhub_v1_2_get_xgmi_info); (0, 0) where
    PF_MAX_REGION is 0: no hive."""
    cntl = self.reg("gc", "regMC_VM_XGMI_LFB_CNTL").fields()
    if not cntl["PF_MAX_REGION"]: return 0, 0
    if cntl["PF_MAX_REGION"] > 7 or cntl["PF_LFB_REGION"] > 7:
      raise RawGPUError(f"{self.dev.bus}: MC_VM_XGMI_LFB_CNTL names node {cntl['PF_LFB_REGION']} of {cntl['PF_MAX_REGION'] + 1}: "
                        "an XGMI hive has at most 8")
    return cntl["PF_LFB_REGION"], self.reg("gc", "regMC_VM_XGMI_LFB_SIZE").fields()["PF_LFB_SIZE"] << 24

  def mc(self, paddr: int) -> int: return self.fb_base + paddr

  def hubs(self, hub: str) -> tuple[str, str, range]:
    """(register table, name prefix, instances) of a hub kind: gfx9 (MI300) has a gfxhub per XCC and an mmhub per AID,
    their registers named VM_*/MC_VM_*; gfx11/12 one of each, named GCVM_*/MMVM_*."""
    ip = HUBS[hub]
    if not self.dev.gc9: return ip, f"reg{hub}", range(1)
    return ip, "reg", range(self.dev.disc.count("gc" if hub == "GC" else "mmhub"))

  def init_hw(self) -> None:
    """The MM hub(s); on gfx9 (gmc_v9_0_gart_enable) the GC hubs too. On gfx11/12 GFX programs its hub once the RLC
    autoload has brought GFX up (gfx_v11_0/v12_0_gfxhub_enable, from gfx hw_init), as amdgpu does."""
    for hub in ("MM", "GC") if self.dev.gc9 else ("MM",):
      for inst in self.hubs(hub)[2]: self.init_hub(hub, inst)

  def init_hub(self, hub: str, inst: int = 0) -> None:
    ip, p, _ = self.hubs(hub)
    r = lambda n: self.reg(ip, p + n, inst)
    w64 = lambda lo, hi, v: self.dev.regs.write64(ip, p + lo, p + hi, v, inst)
    # system aperture: AGP off, VRAM MC range, default page for stray accesses
    r("MC_VM_AGP_BASE").write(0)
    r("MC_VM_AGP_BOT").write(0xffffff)
    r("MC_VM_AGP_TOP").write(0)
    r("MC_VM_SYSTEM_APERTURE_LOW_ADDR").write(self.fb_start >> 18)
    r("MC_VM_SYSTEM_APERTURE_HIGH_ADDR").write(self.fb_end >> 18)   # (it covered all but the last 16 MiB of VRAM)
    w64("MC_VM_SYSTEM_APERTURE_DEFAULT_ADDR_LSB", "MC_VM_SYSTEM_APERTURE_DEFAULT_ADDR_MSB", (self.scratch_page + self.vram_base_offset) >> 12)
    w64("VM_L2_PROTECTION_FAULT_DEFAULT_ADDR_LO32", "VM_L2_PROTECTION_FAULT_DEFAULT_ADDR_HI32", (self.dummy_page + self.vram_base_offset) >> 12)
    r("VM_L2_PROTECTION_FAULT_CNTL2").update(ACTIVE_PAGE_MIGRATION_PTE_READ_RETRY=1)
    # L1 TLB and L2 cache
    eco = {"ECO_BITS": 0} if "ECO_BITS" in r("MC_VM_MX_L1_TLB_CNTL").reg.fields else {}   # gfxhub_v3_0/mmhub_v3_0 clear them
    r("MC_VM_MX_L1_TLB_CNTL").update(ENABLE_L1_TLB=1, SYSTEM_ACCESS_MODE=3, ENABLE_ADVANCED_DRIVER_MODEL=1,
                                     SYSTEM_APERTURE_UNMAPPED_ACCESS=0, MTYPE=3, **eco)
    # the fault default page is a VRAM page: not "out to system memory", where amdgpu's (a host DMA page) is
    r("VM_L2_CNTL").update(ENABLE_L2_CACHE=1, ENABLE_L2_FRAGMENT_PROCESSING=0, ENABLE_DEFAULT_PAGE_OUT_TO_SYSTEM_MEMORY=0,
                           L2_PDE0_CACHE_TAG_GENERATION_MODE=0, PDE_FAULT_CLASSIFICATION=0, CONTEXT1_IDENTITY_ACCESS_MODE=1,
                           IDENTITY_MODE_FRAGMENT_SIZE=0)
    r("VM_L2_CNTL2").update(INVALIDATE_ALL_L1_TLBS=1, INVALIDATE_L2_CACHE=1)
    # gfx9 translates further (gfxhub_v1_2/mmhub_v1_8 init_cache_regs: bank select 12, big-K fragments 9); no VM_L2_CNTL5
    bank, bigk = (12, 9) if self.dev.gc9 else (9, 6)
    r("VM_L2_CNTL3").write(BANK_SELECT=bank, L2_CACHE_BIGK_FRAGMENT_SIZE=bigk, L2_CACHE_4K_ASSOCIATIVITY=1, L2_CACHE_BIGK_ASSOCIATIVITY=1)
    r("VM_L2_CNTL4").write(L2_CACHE_4K_PARTITION_COUNT=1)
    if not self.dev.gc9: r("VM_L2_CNTL5").write(WALKER_PRIORITY_CLIENT_ID=0x1ff)
    self._context(hub, inst, 0, self.dev.pt.root, mm.VA_BASE, mm.VA_BASE + mm.VA_SIZE)   # VMID 0: AM's own tables
    # no identity aperture for context 1
    w64("VM_L2_CONTEXT1_IDENTITY_APERTURE_LOW_ADDR_LO32", "VM_L2_CONTEXT1_IDENTITY_APERTURE_LOW_ADDR_HI32", 0xf_ffff_ffff)
    w64("VM_L2_CONTEXT1_IDENTITY_APERTURE_HIGH_ADDR_LO32", "VM_L2_CONTEXT1_IDENTITY_APERTURE_HIGH_ADDR_HI32", 0)
    w64("VM_L2_CONTEXT_IDENTITY_PHYSICAL_OFFSET_LO32", "VM_L2_CONTEXT_IDENTITY_PHYSICAL_OFFSET_HI32", 0)
    for eng in range(18): w64(f"VM_INVALIDATE_ENG{eng}_ADDR_RANGE_LO32", f"VM_INVALIDATE_ENG{eng}_ADDR_RANGE_HI32", 0x1f_ffff_ffff)
    # gfxhub_v3_0/v12_0_set_fault_enable_default: a page fault of the CP's fetches does not halt the CP (it reports)
    if hub == "GC" and not self.dev.gc9: self.reg("gc", "regCP_DEBUG").update(CPG_UTCL1_ERROR_HALT_DISABLE=1)
    self.hub_ready[hub] = True

  def set_context(self, vmid: int, root: int | None, start: int = mm.VA_BASE, end: int = mm.VA_BASE + mm.VA_SIZE,
                  hubs: dict[str, tuple[int, ...]] | None = None) -> None:
    """Point VMID's context on every hub (or on `hubs`' instances: {"GC": (xcc,), "MM": (aid,)}) at 4-level tables
    rooted at `root` (a VRAM address) over [start, end), or disable it (None). Its translations are flushed either
    way: the hubs may hold ones of the tables before (gmc_v11_0_emit_flush_gpu_tlb invalidates after every new
    page-table base)."""
    for hub in ("MM", "GC"):
      for inst in self._instances(hub, hubs): self._context(hub, inst, vmid, root, start, end)
    self.flush_tlb(vmid, hubs)

  def _instances(self, hub: str, hubs: dict[str, tuple[int, ...]] | None):
    return self.hubs(hub)[2] if hubs is None else hubs.get(hub, ())

  def _context(self, hub: str, inst: int, vmid: int, root: int | None, start: int, end: int) -> None:
    """The tables over the process VA window, every protection fault reported and redirected to the dummy page
    (gfxhub/mmhub setup_vmid_config)."""
    ip, p, _ = self.hubs(hub)
    c = f"VM_CONTEXT{vmid}_"
    cntl = self.reg(ip, p + "VM_CONTEXT0_CNTL", inst).reg   # the 16 contexts' registers share one layout
    if root is None:
      self.reg(ip, p + c + "CNTL", inst).write(0)
      return
    w64 = lambda lo, hi, v: self.dev.regs.write64(ip, p + lo, p + hi, v, inst)
    w64(c + "PAGE_TABLE_START_ADDR_LO32", c + "PAGE_TABLE_START_ADDR_HI32", start >> 12)
    w64(c + "PAGE_TABLE_END_ADDR_LO32", c + "PAGE_TABLE_END_ADDR_HI32", (end - 1) >> 12)
    w64(c + "PAGE_TABLE_BASE_ADDR_LO32", c + "PAGE_TABLE_BASE_ADDR_HI32", (root + self.vram_base_offset) | 1)
    faults = {f"{x}_PROTECTION_FAULT_ENABLE_{k}": 1 for x in ("RANGE", "DUMMY_PAGE", "PDE0", "VALID", "READ", "WRITE", "EXECUTE")
              for k in ("INTERRUPT", "DEFAULT")}
    # gfx9: the last of mm's four levels is walked as "translate further" below the hardware's three (block size 9)
    depth, block = (mm.LEVELS - 2, 9) if self.dev.gc9 else (mm.LEVELS - 1, 0)
    self.reg(ip, p + c + "CNTL", inst).write(cntl.encode(ENABLE_CONTEXT=1, PAGE_TABLE_DEPTH=depth, PAGE_TABLE_BLOCK_SIZE=block, **faults))

  def flush_tlb(self, vmid: int = 0, hubs: dict[str, tuple[int, ...]] | None = None) -> None:
    """Invalidate VMID's translations in every hub, or in `hubs`' instances (gmc_v11_0_flush_vm_hub: semaphore on
    MM, request, wait for ack; GC 9.4.3 takes no semaphore, gmc_v9_0_use_invalidate_semaphore)."""
    self.dev.soc.flush_hdp()
    for hub in ("MM", "GC"):
      if not self.hub_ready[hub]: continue
      ip, p, _ = self.hubs(hub)
      for inst in self._instances(hub, hubs):
        req = self.reg(ip, f"{p}VM_INVALIDATE_ENG{INV_ENG}_REQ", inst)
        sem = self.reg(ip, f"{p}VM_INVALIDATE_ENG{INV_ENG}_SEM", inst) if hub == "MM" and not self.dev.gc9 else None
        if sem is not None: self.dev.wait(lambda: sem.read() & 1, f"{hub} hub invalidation semaphore")
        try:
          req.write(PER_VMID_INVALIDATE_REQ=1 << vmid, FLUSH_TYPE=0, INVALIDATE_L2_PTES=1, INVALIDATE_L2_PDE0=1,
                    INVALIDATE_L2_PDE1=1, INVALIDATE_L2_PDE2=1, INVALIDATE_L1_PTES=1, CLEAR_PROTECTION_FAULT_STATUS_ADDR=0)
          ack = self.reg(ip, f"{p}VM_INVALIDATE_ENG{INV_ENG}_ACK", inst)
          self.dev.wait(lambda: ack.read() & (1 << vmid), f"{hub} hub {inst} TLB invalidation")
        finally:
          if sem is not None: sem.write(0)   # released even after a timeout, or every later flush would wait on it
        if hub == "MM" and not self.dev.gc9:
          # gmc_v11_0_flush_vm_hub: the MM hub's reserved-bank clients get a private invalidation too (MMHUB 3.0, 4.1)
          cid2 = self.reg(ip, f"{p}VM_L2_BANK_SELECT_RESERVED_CID2", inst)
          cid2.update(RESERVED_CACHE_PRIVATE_INVALIDATION=1)
          cid2.read()   # read back: the invalidation is done

  def _status_reg(self, hub: str, inst: int):
    ip, p, _ = self.hubs(hub)
    name = p + "VM_L2_PROTECTION_FAULT_STATUS"
    return self.reg(ip, name if self.dev.regs.has(ip, name) else name + "_LO32", inst)

  def fault_status(self, hub: str, inst: int = 0) -> dict[str, int]:
    """Decode and clear the hub's L2 protection fault status (the IH entry carries the address)."""
    ip, p, _ = self.hubs(hub)
    if hub == "GC": self._status_reg(hub, inst).read()   # gmc_v11_0_process_interrupt: a dummy read first (the GRBM's fast path)
    fields = self._status_reg(hub, inst).fields()
    self.reg(ip, p + "VM_L2_PROTECTION_FAULT_CNTL", inst).update(CLEAR_PROTECTION_FAULT_STATUS_ADDR=1)
    return fields

  def _latched(self, hub: str) -> int | None:
    """The first instance of a hub kind that holds a fault (MI300 has a GC hub per XCC and an MM hub per AID)."""
    return next((i for i in self.hubs(hub)[2] if self._status_reg(hub, i).read()), None)

  def latched_fault(self, why: str) -> tuple[str, DeviceFault, int, int] | None:
    """A fault whose interrupt never arrived: the first one a hub latched (its status and address), as page_fault
    describes it with its hub kind, or None."""
    for hub in ("GC", "MM"):
      if (inst := self._latched(hub)) is None: continue
      ip, p, _ = self.hubs(hub)
      lo, hi = (self.reg(ip, f"{p}VM_L2_PROTECTION_FAULT_ADDR_{h}32", inst).read() for h in ("LO", "HI"))
      return (hub, *self.page_fault(hub, (lo << 12) | ((hi & 0xf) << 44), why, inst))
    return None

  def page_fault(self, hub: str, addr: int, client: str, inst: int | None = None) -> tuple[DeviceFault, int, int]:
    """A fault the IH reported, read (and cleared) from hub instance `inst` (on MI300 the entry's node id names it),
    else from the first instance that latched one: the error to raise, the instance and the client id it latched."""
    if inst is None: inst = self._latched(hub) or 0
    st = self.fault_status(hub, inst)
    kind = "write" if st.get("RW") else "read"
    what = [k for k in ("MORE_FAULTS", "WALKER_ERROR", "PERMISSION_FAULTS", "MAPPING_ERROR") if st.get(k)]
    cid = st.get("CID", 0)
    names = dict(enumerate(GC_CLIENTS.get(self.dev.ips["gc"][0], ()))) if hub == "GC" else MM_CLIENTS.get(self.dev.ips["mmhub"], {})
    if cid in names: client = f"client {names[cid]}, {client}"
    where = f"hub {hub}" + (f" {inst}" if len(self.hubs(hub)[2]) > 1 else "")
    vmid = "" if "vmid" in client else f", VMID {st.get('VMID', 0)}"   # (the interrupt's entry names it already)
    err = DeviceFault(f"{self.dev.bus}: GPU page fault at VA {addr:#x} ({kind}, {client}, {where}, client id {cid}"
                      f"{vmid}{', ' + ' '.join(what).lower() if what else ''}): the address is not mapped; "
                      "check the buffer's lifetime and the kernel's indexing")
    return err, inst, cid
