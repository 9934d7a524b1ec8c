"""The board's register space: one dword-addressed file with per-address read/write hooks for registers that act.

Addresses are absolute dword addresses (segment base from IP discovery + offset from the register headers), the
same numbers the register BAR decodes. Plain registers are a dict lookup; registers with side effects install a hook.
"""
from __future__ import annotations
from typing import Callable
from rawgpu.autogen.regs import Reg, RegTable, ip_regs
from rawgpu.drivers.emu.amd.asic import Asic

ReadHook = Callable[[int], int]
WriteHook = Callable[[int, int], None]


def instance_key(ip: str, inst: int) -> str:
  """The register-file name of an IP instance: the IP's own name for instance 0, "<ip>:<instance>" for the others."""
  return f"{ip}:{inst}" if inst else ip


class RegFile:
  def __init__(self, asic: Asic):
    self.asic = asic
    self.vals: dict[int, int] = {}
    self.rd: dict[int, ReadHook] = {}
    self.wr: dict[int, WriteHook] = {}
    self.tables: dict[str, RegTable] = {}
    self.bases: dict[str, tuple[int, ...]] = {}
    for e in asic.ips:   # instance 0 under the IP's name, the others as "<ip>:<instance>" (MI300's XCCs and AIDs)
      if e.reg_ip is None: continue
      key = "mp1" if e.hw_id == 1 else "mp0" if e.hw_id == 255 else e.reg_ip
      key = instance_key(key, e.instance)
      self.tables[key], self.bases[key] = ip_regs(e.reg_ip, *(e.reg_version or e.version)), e.bases

  # ---- names -> addresses
  def reg(self, ip: str, name: str) -> Reg: return self.tables[ip][name]
  def addr(self, ip: str, name: str) -> int: return self.tables[ip][name].addr(self.bases[ip])
  def has(self, ip: str, name: str) -> bool: return name in self.tables[ip]

  def field(self, ip: str, name: str, fld: str) -> tuple[int, int]:
    """(shift, mask) of a field."""
    return self.tables[ip][name].fields[fld]

  # ---- access (dword granular; the BAR splits wider/narrower accesses)
  def read(self, a: int) -> int:
    h = self.rd.get(a)
    return h(a) if h is not None else self.vals.get(a, 0)

  def write(self, a: int, v: int) -> None:
    h = self.wr.get(a)
    if h is not None: h(a, v)
    else: self.vals[a] = v

  # helpers for models: by name
  def get(self, ip: str, name: str) -> int: return self.vals.get(self.addr(ip, name), 0)
  def set(self, ip: str, name: str, v: int) -> None: self.vals[self.addr(ip, name)] = v & 0xffffffff

  def getf(self, ip: str, name: str, fld: str) -> int:
    s, m = self.field(ip, name, fld)
    return (self.get(ip, name) & m) >> s

  def hook(self, ip: str, name: str, rd: ReadHook | None = None, wr: WriteHook | None = None) -> int:
    a = self.addr(ip, name)
    if rd is not None: self.rd[a] = rd
    if wr is not None: self.wr[a] = wr
    return a
