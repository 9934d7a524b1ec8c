"""SOC glue in the NBIO: doorbell aperture, HDP flush remap, interrupt control (nbio_v4_3.c, soc21.c)."""
from __future__ import annotations
from rawgpu.drivers.am import facts as F
from rawgpu.drivers.am.block import Block


class SOC(Block):
  name = "soc"
  _hdp_flush = None

  def init_hw(self) -> None:
    nb = lambda n: self.reg("nbio", n)
    # HDP flush registers appear in the register hole so the CPU (and queues) can flush with one write
    nb("regBIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL").write(F.MMIO_REG_HOLE_OFFSET + F.KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL)
    nb("regBIF_BX0_REMAP_HDP_REG_FLUSH_CNTL").write(F.MMIO_REG_HOLE_OFFSET + F.KFD_MMIO_REMAP_HDP_REG_FLUSH_CNTL)
    nb("regRCC_DEV0_EPF0_RCC_DOORBELL_APER_EN").write(BIF_DOORBELL_APER_EN=1)

  def flush_hdp(self) -> None:
    """Make CPU writes to VRAM through the BAR visible to the GPU engines (hdp_v6_0_flush_hdp)."""
    if (store := self._hdp_flush) is not None and not self.dev.regs.trace: store[0] = 0; return   # before every doorbell: one store
    off, regs = F.MMIO_REG_HOLE_OFFSET + F.KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL, self.dev.regs
    if regs.trace or off + 4 > regs.mmio.size: return regs.wreg(off // 4, 0)
    self._hdp_flush = regs.mmio.view(off, 4).cast("I")
    self._hdp_flush[0] = 0

  def gc_doorbell_init(self) -> None:
    """The S2A routes of GC's doorbells (nbio_v4_3 / nbif_v6_3_1 gc_doorbell_init, from gfx hw_init): entries 0 and 3,
    AWIDs 3 and 6, upper address nibble 3, no range (0x30000007 and 0x3000000d, as the kernel writes them)."""
    self.doorbell_range(0, awid=3, offset=0, size=0, awaddr=3)
    self.doorbell_range(3, awid=6, offset=0, size=0, awaddr=3)

  def ih_doorbell(self, index: int) -> None:
    """Route the IH's read-pointer doorbell (dword index) to the OSS: nbio_v7_9 also opens a BIF range for it."""
    if not self.dev.gc9: return self.doorbell_range(1, awid=0, offset=index, size=2, awaddr=0)
    self.reg("nbio", "regDOORBELL0_CTRL_ENTRY_0").write(BIF_DOORBELL0_RANGE_OFFSET_ENTRY=index, BIF_DOORBELL0_RANGE_SIZE_ENTRY=8)
    self.doorbell_range(3, awid=0, offset=0, size=8, awaddr=0)

  def rev_id(self) -> int:
    """The chip revision (nbio_v7_9_get_rev_id, MI300): NBIO's discovery sub-revision where set, else the strap's
    ATI_REV_ID."""
    sub = self.dev.disc.find("nbif").sub_revision
    return sub or self.reg("nbio", "regRCC_STRAP0_RCC_DEV0_EPF0_STRAP0").fields()["STRAP_ATI_REV_ID_DEV0_F0"]

  def sdma_doorbell_ranges(self) -> None:
    """MI300: every SDMA engine's doorbells get a BIF range (DOORBELL0_CTRL_ENTRY_1..4 of its AID, four entries apart
    per AID) and an S2A route on its AID's NBIO (another AID's through extended SMN addressing), as
    soc15_common_hw_init has nbio_v7_9_sdma_doorbell_range do for each engine."""
    d, bif = self.dev, self.reg("nbio", "regDOORBELL0_CTRL_ENTRY_0")
    first = self.reg("nbio", "regDOORBELL0_CTRL_ENTRY_1").addr
    for e in d.sdma.all_engines():
      aid, n = divmod(e, 4)
      d.regs.wreg(first + n + 4 * aid, bif.encode(BIF_DOORBELL0_RANGE_OFFSET_ENTRY=d.sdma.doorbell(e), BIF_DOORBELL0_RANGE_SIZE_ENTRY=F.SDMA_DOORBELL_RANGE))
      port, awid, awaddr = F.NBIO_7_9_SDMA_S2A[n]
      self.doorbell_range(port, awid=awid, offset=awid, size=F.SDMA_DOORBELL_RANGE, awaddr=awaddr, aid=aid)

  def doorbell_range(self, port: int, awid: int, offset: int, size: int, awaddr: int, aid: int = 0, rmw: bool = False) -> None:
    """An NBIO S2A doorbell routing entry: doorbells [offset, offset+size) go to the engine with this AWID (on MI300,
    in AID `aid`'s NBIO). rmw: the entry's other fields keep their values (nbio_v4_3 / nbif_v6_3_1 read-modify-write
    it; nbio_v7_9 builds it from zero)."""
    name = f"regS2A_DOORBELL_ENTRY_{port}_CTRL"
    r = self.reg("nbio", name if self.dev.regs.has("nbio", name) else f"regGDC_S2A0_S2A_DOORBELL_ENTRY_{port}_CTRL", aid)  # NBIF 6.3.1 name
    p = f"S2A_DOORBELL_PORT{port}_"
    fields = {p + "ENABLE": 1, p + "AWID": awid, p + "RANGE_OFFSET": offset, p + "RANGE_SIZE": size, p + "AWADDR_31_28_VALUE": awaddr}
    v = r.reg.modify(r.read(), **fields) if rmw else r.encode(**fields)
    if aid: self.dev.regs.wreg_ext(r.addr, aid, v)
    else: r.write(v)
