"""NBIO/NBIF and HDP: VRAM size strap, the MM_INDEX/MM_DATA window, indirect register windows, HDP flush, doorbell
aperture enable.

MM_INDEX bit 31 selects memory; MM_INDEX_HI holds address bits 31 and up (amdgpu_device_mm_access).
The HDP flush is reachable two ways, like on hardware: GPU_HDP_FLUSH_REQ/DONE, and the remapped MMIO page whose BAR
offset REMAP_HDP_MEM_FLUSH_CNTL holds (KFD_MMIO_REMAP page at 0x80000 - 4 KiB by default).
"""
from __future__ import annotations
from typing import TYPE_CHECKING
if TYPE_CHECKING: from rawgpu.drivers.emu.amd.board import AMDBoard

REMAP_PAGE = 0x80000 - 0x1000


class NBIO:
  def __init__(self, board: "AMDBoard"):
    self.b, r = board, board.regs
    self.ip = ip = "nbio" if "nbio" in r.tables else "nbif"
    self.hdp_flushes = 0
    r.set(ip, "regRCC_DEV0_EPF0_RCC_CONFIG_MEMSIZE", board.vram_size >> 20)
    if r.has(ip, "regRCC_STRAP0_RCC_DEV0_EPF0_STRAP0"):   # the chip revision the straps give (MI300X: production silicon, 1)
      r.set(ip, "regRCC_STRAP0_RCC_DEV0_EPF0_STRAP0", r.reg(ip, "regRCC_STRAP0_RCC_DEV0_EPF0_STRAP0").encode(
        STRAP_DEVICE_ID_DEV0_F0=board.device, STRAP_ATI_REV_ID_DEV0_F0=board.asic.chip_rev))
    r.set(ip, "regBIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL", REMAP_PAGE)
    r.set(ip, "regBIF_BX0_REMAP_HDP_REG_FLUSH_CNTL", REMAP_PAGE + 4)
    self.a_remap = (r.hook(ip, "regBIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL", wr=self._remap_wr), r.hook(ip, "regBIF_BX0_REMAP_HDP_REG_FLUSH_CNTL", wr=self._remap_wr))
    self.remap = frozenset((REMAP_PAGE, REMAP_PAGE + 4))   # register-BAR offsets that flush the HDP (checked on every write)
    self.a_index, self.a_index_hi = r.addr(ip, "regBIF_BX_PF0_MM_INDEX"), r.addr(ip, "regBIF_BX_PF0_MM_INDEX_HI")
    r.hook(ip, "regBIF_BX_PF0_MM_DATA", rd=self._mm_data_rd, wr=self._mm_data_wr)
    self.a_rsmu = r.addr(ip, "regBIF_BX_PF0_RSMU_INDEX")
    r.hook(ip, "regBIF_BX_PF0_RSMU_DATA", rd=lambda a: r.read(r.vals.get(self.a_rsmu, 0) >> 2),
           wr=lambda a, v: r.write(r.vals.get(self.a_rsmu, 0) >> 2, v))
    self.a_pidx = r.addr(ip, "regBIF_BX0_PCIE_INDEX2")
    self.a_pidx_hi = r.addr(ip, "regBIF_BX0_PCIE_INDEX2_HI") if r.has(ip, "regBIF_BX0_PCIE_INDEX2_HI") else None
    self.other_dies: dict[tuple[int, int], int] = {}   # MI300: (AID, register) -> value of another AID's NBIO register
    r.hook(ip, "regBIF_BX0_PCIE_DATA2", rd=self._pcie_data_rd, wr=self._pcie_data_wr)
    self.a_done = r.addr(ip, "regBIF_BX_PF0_GPU_HDP_FLUSH_DONE")
    r.hook(ip, "regBIF_BX_PF0_GPU_HDP_FLUSH_REQ", wr=self._flush_req)
    r.hook(ip, "regBIF_BX_PF0_GPU_HDP_FLUSH_DONE", wr=lambda a, v: None)   # read-only status
    self.a_db_en = r.addr(ip, "regRCC_DEV0_EPF0_RCC_DOORBELL_APER_EN")

  def _other_die(self) -> int | None:
    """The AID an extended SMN access names (INDEX2_HI bit 2 = address bit 34 marks one, bits 1:0 = 33:32 pick it,
    aqua_vanjaram_encode_ext_smn_addressing); None for the local die."""
    hi = self.b.regs.vals.get(self.a_pidx_hi, 0) if self.a_pidx_hi is not None else 0
    return hi & 3 if hi & 4 else None

  def _pcie_data_rd(self, a: int) -> int:
    r, addr, die = self.b.regs, self.b.regs.vals.get(self.a_pidx, 0) >> 2, self._other_die()
    return r.read(addr) if not die else self.other_dies.get((die, addr), 0)

  def _pcie_data_wr(self, a: int, v: int) -> None:
    r, addr, die = self.b.regs, self.b.regs.vals.get(self.a_pidx, 0) >> 2, self._other_die()
    if not die: r.write(addr, v)
    else: self.other_dies[(die, addr)] = v   # modelled as storage: no block of another AID acts on its registers here

  def _mm_addr(self) -> tuple[bool, int]:
    idx = self.b.regs.vals.get(self.a_index, 0)
    return bool(idx & 0x80000000), (self.b.regs.vals.get(self.a_index_hi, 0) << 31) | (idx & 0x7fffffff)

  def _mm_data_rd(self, a: int) -> int:
    mem, addr = self._mm_addr()
    if not mem: return self.b.regs.read(addr >> 2)
    if addr + 4 > self.b.vram_size: return 0xffffffff
    return int.from_bytes(self.b.vram[addr:addr + 4], "little")

  def _mm_data_wr(self, a: int, v: int) -> None:
    mem, addr = self._mm_addr()
    if not mem: self.b.regs.write(addr >> 2, v); return
    if addr + 4 <= self.b.vram_size: self.b.vram[addr:addr + 4] = v.to_bytes(4, "little")

  def hdp_flush(self) -> None:
    # Host writes reach VRAM directly in the model (no HDP write cache to drain); count flushes for observability.
    self.hdp_flushes += 1

  def _flush_req(self, a: int, v: int) -> None:
    self.b.regs.vals[a] = v
    self.hdp_flush()
    self.b.regs.vals[self.a_done] = v        # each requesting client's bit reads back done

  def _remap_wr(self, a: int, v: int) -> None:
    r = self.b.regs.vals
    r[a] = v
    self.remap = frozenset(r.get(x) for x in self.a_remap)
