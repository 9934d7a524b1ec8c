"""PCI configuration space of the board: type 0 header, BAR sizing, PM / PCIe / MSI capabilities, resizable BAR.

Offsets and ids follow the PCI Local Bus and PCIe Base specifications (pci_regs.h names them).
"""
from __future__ import annotations
from typing import Callable

CMD_MEMORY, CMD_MASTER = 0x2, 0x4
PM_CAP, PCIE_CAP, MSI_CAP, REBAR_EXT = 0x50, 0x64, 0xa0, 0x200


class ConfigSpace:
  """4 KiB of config space. `bar_layout` maps a BAR register index to (size getter, flags)."""

  def __init__(self, vendor: int, device: int, revision: int, cls: int, bars: dict[int, tuple[Callable[[], int], int]],
               on_rebar: Callable[[int], None], rebar_sizes: int, subsys: int = 0x0e3b):
    self.b = bytearray(4096)
    self.bars, self.on_rebar = bars, on_rebar
    self.bar_addr = {n: 0 for n in bars}
    self._w16(0x00, vendor); self._w16(0x02, device)
    self._w16(0x04, CMD_MEMORY)                       # firmware left memory decode on, bus mastering off
    self._w16(0x06, 0x0010)                           # capabilities list present
    self.b[0x08] = revision
    self._w32(0x08, (cls << 8) | revision)
    self.b[0x0e] = 0x00                               # type 0 header
    self._w16(0x2c, vendor); self._w16(0x2e, subsys)
    self.b[0x34] = PM_CAP
    self.b[0x3d] = 1                                  # INTA
    # power management (id 1) -> PCIe (id 0x10) -> MSI (id 5)
    self.b[PM_CAP:PM_CAP + 2] = bytes((0x01, PCIE_CAP)); self._w16(PM_CAP + 2, 0x0003)
    self.b[PCIE_CAP:PCIE_CAP + 2] = bytes((0x10, MSI_CAP)); self._w16(PCIE_CAP + 2, 0x0002)   # v2, legacy endpoint type 0
    self._w32(PCIE_CAP + 0x04, 0x00008fa0 | 0x2)      # devcap: max payload 512, FLR-capable bit 28 left off
    self._w32(PCIE_CAP + 0x0c, 0x00400d04 | (16 << 4))  # linkcap: gen4 (4), x16, ASPM L0s/L1
    self._w16(PCIE_CAP + 0x10, 0x0003)                # linkctl: ASPM L0s+L1 enabled at power-on
    self._w16(PCIE_CAP + 0x12, 0x0004 | (16 << 4))    # linkstatus: gen4 x16
    self.b[MSI_CAP:MSI_CAP + 2] = bytes((0x05, 0x00)); self._w16(MSI_CAP + 2, 0x0080)  # 64-bit MSI
    # extended capabilities: 0x100 vendor-specific header pointing at resizable BAR
    self._w32(0x100, 0x000b | (1 << 16) | (REBAR_EXT << 20)); self._w32(0x104, 0x0001_0010)
    self._w32(REBAR_EXT, 0x0015 | (1 << 16))          # resizable BAR, v1, end of list
    self._w32(REBAR_EXT + 4, rebar_sizes << 4)        # bit (4+n): 2^n MiB supported
    self._rebar_ctl_sync()

  def _w16(self, off: int, v: int) -> None: self.b[off:off + 2] = (v & 0xffff).to_bytes(2, "little")
  def _w32(self, off: int, v: int) -> None: self.b[off:off + 4] = (v & 0xffffffff).to_bytes(4, "little")
  def _r32(self, off: int) -> int: return int.from_bytes(self.b[off:off + 4], "little")

  @property
  def command(self) -> int: return self.b[4] | (self.b[5] << 8)
  @property
  def bus_master(self) -> bool: return bool(self.b[4] & CMD_MASTER)
  @property
  def mem_enabled(self) -> bool: return bool(self.b[4] & CMD_MEMORY)

  def _rebar_ctl_sync(self) -> None:
    size = self.bars[0][0]()
    enc = max(0, (size >> 20).bit_length() - 1)
    self._w32(REBAR_EXT + 8, 0 | (1 << 5) | (enc << 8))  # BAR index 0, one resizable BAR, current size

  def _bar_reg(self, off: int) -> int | None:
    """Value of a BAR register (with flags), or None if off is not a BAR register."""
    if not 0x10 <= off < 0x28: return None
    idx = (off - 0x10) // 4
    for n, (size, flags) in self.bars.items():
      if idx == n:
        addr = self.bar_addr[n] & ~(size() - 1)
        return (addr & 0xfffffff0) | flags
      if idx == n + 1 and flags & 0x4: return (self.bar_addr[n] & ~(size() - 1)) >> 32
    return 0

  def read(self, off: int, size: int) -> int:
    out = 0
    for i in range(size):
      o = off + i
      dw = self._bar_reg(o & ~3)
      byte = ((dw >> (8 * (o & 3))) & 0xff) if dw is not None else self.b[o] if o < 4096 else 0xff
      out |= byte << (8 * i)
    return out

  def write(self, off: int, size: int, value: int) -> None:
    for i in range(size): self._write_byte(off + i, (value >> (8 * i)) & 0xff)

  def _write_byte(self, o: int, v: int) -> None:
    if o >= 4096: return
    if 0x10 <= o < 0x28:
      idx, sh = (o - 0x10) // 4, 8 * (o & 3)
      for n, (_size, flags) in self.bars.items():
        if idx == n: self.bar_addr[n] = (self.bar_addr[n] & ~(0xff << sh)) | ((v & (0xf0 if sh == 0 else 0xff)) << sh)
        elif idx == n + 1 and flags & 0x4: self.bar_addr[n] = (self.bar_addr[n] & ~(0xff << (sh + 32))) | (v << (sh + 32))
      return
    if o in (0x04, 0x05): self.b[o] = v & (0x07 if o == 0x04 else 0x04); return   # mem/io/master, INTx disable
    if o == 0x06 or o == 0x07: return                                              # status: nothing latched
    if o in (PCIE_CAP + 0x10, PCIE_CAP + 0x11): self.b[o] = v; return              # link control
    if o == REBAR_EXT + 9:                                                          # BAR size field [13:8]
      enc = v & 0x3f
      if (self._r32(REBAR_EXT + 4) >> 4) & (1 << enc): self.on_rebar(1 << (enc + 20))
      self._rebar_ctl_sync()
      return
    if o == 0x3c: self.b[o] = v                                                    # interrupt line is scratch
