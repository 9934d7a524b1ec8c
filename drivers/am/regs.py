"""Register access by IP, instance and segment: generated tables (rawgpu.autogen.regs) + bases from IP discovery.

  r = regs.reg("gc", "regCP_HQD_ACTIVE")   # the GC register at discovery's GC segment base
  r.write(ACTIVE=1); r.read(); r.update(ACTIVE=0); r.fields()
MP0 and MP1 share the "mp" tables (MP0_* and MP1_* names) with their own bases; NBIO 6.x tables are named nbif.
"""
from __future__ import annotations
from dataclasses import dataclass
from rawgpu.autogen.regs import Reg, RegTable, ip_regs
from rawgpu.drivers.am.discovery import Discovery
from rawgpu.drivers.mmio import MMIO
from rawgpu.errors import RawGPUError

TABLE_OF = {"mp0": "mp", "mp1": "mp"}   # AM block name -> register table name


@dataclass(frozen=True)
class BoundReg:
  regs: "Regs"
  reg: Reg
  addr: int                   # absolute dword address

  def read(self) -> int: return self.regs.rreg(self.addr)
  def write(self, value: int = 0, **fields: int) -> None: self.regs.wreg(self.addr, self.reg.modify(value, **fields) if fields else value)
  def update(self, **fields: int) -> None: self.write(self.read(), **fields)
  def encode(self, **fields: int) -> int: return self.reg.encode(**fields)
  def fields(self) -> dict[str, int]: return self.reg.decode(self.read())


class Regs:
  def __init__(self, mmio: MMIO, disc: Discovery, trace=None):
    self.mmio, self.disc, self.trace = mmio, disc, trace
    self._tables: dict[str, RegTable] = {}
    self._cache: dict[tuple[str, str, int], BoundReg] = {}

  def table(self, ip: str) -> RegTable:
    if (t := self._tables.get(ip)) is None:
      major, minor, rev = self.disc.find("nbif" if ip == "nbio" else ip).version
      name = TABLE_OF.get(ip, ip)
      try: t = ip_regs(name, major, minor, rev)
      except RawGPUError:
        if ip != "nbio": raise
        t = ip_regs("nbif", major, minor, rev)   # NBIO 6.x ships as nbif headers
      self._tables[ip] = t
    return t

  def reg(self, ip: str, name: str, inst: int = 0) -> BoundReg:
    key = (ip, name, inst)
    if (b := self._cache.get(key)) is None:
      r = self.table(ip)[name]
      bases = self.disc.find("nbif" if ip == "nbio" else ip, inst).bases
      b = self._cache[key] = BoundReg(self, r, r.addr(bases))
    return b

  def has(self, ip: str, name: str) -> bool:
    try: return name in self.table(ip)
    except RawGPUError: return False

  def _indirect(self) -> tuple[int, int]:
    """Registers beyond the MMIO BAR go through the NBIO PCIE_INDEX2/DATA2 pair (amdgpu_device_indirect_rreg)."""
    if not hasattr(self, "_pcie"): self._pcie = (self.reg("nbio", "regBIF_BX0_PCIE_INDEX2").addr * 4, self.reg("nbio", "regBIF_BX0_PCIE_DATA2").addr * 4)
    return self._pcie

  def rreg(self, addr: int) -> int:
    if addr * 4 >= self.mmio.size:
      idx, data = self._indirect()
      self.mmio.write(idx, addr * 4); self.mmio.read(idx)
      v = self.mmio.read(data)
    else: v = self.mmio.read(addr * 4, 4)
    if self.trace: self.trace("r", addr, v)
    return v

  def wreg(self, addr: int, value: int) -> None:
    if self.trace: self.trace("w", addr, value)
    if addr * 4 >= self.mmio.size:
      idx, data = self._indirect()
      self.mmio.write(idx, addr * 4); self.mmio.read(idx)
      self.mmio.write(data, value & 0xffffffff); self.mmio.read(data)
    else: self.mmio.write(addr * 4, value & 0xffffffff, 4)

  def wreg_ext(self, addr: int, die: int, value: int) -> None:
    """A register of another MI300 die: extended SMN addressing through PCIE_INDEX2(_HI)/DATA2 (amdgpu_device_indirect_wreg_ext
    with aqua_vanjaram_encode_ext_smn_addressing: bit 34 marks another die, bits 33:32 name it; the high byte is
    cleared after)."""
    full = addr * 4 + ((((die & 3) << 32) | (1 << 34)) if die else 0)
    idx, data = self._indirect()
    hi = self.reg("nbio", "regBIF_BX0_PCIE_INDEX2_HI").addr * 4
    if self.trace: self.trace("w", addr | (die << 40), value)
    self.mmio.write(idx, full & 0xffffffff); self.mmio.read(idx)
    self.mmio.write(hi, (full >> 32) & 0xff); self.mmio.read(hi)
    self.mmio.write(data, value & 0xffffffff); self.mmio.read(data)
    self.mmio.write(hi, 0); self.mmio.read(hi)

  def write64(self, ip: str, lo: str, hi: str, value: int, inst: int = 0) -> None:
    """A 64-bit quantity split over a LO/HI register pair (LO first, as the hardware latches on HI for some pairs)."""
    self.reg(ip, lo, inst).write(value & 0xffffffff)
    self.reg(ip, hi, inst).write(value >> 32)
