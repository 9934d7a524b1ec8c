"""Typed views over mapped BARs and memory.

A real mapping is a plain memoryview (stores stay memoryview stores, the fast path pays nothing for the emulator).
An emulated register BAR calls the device model on each access. Both offer the same small surface.
"""
from __future__ import annotations
from typing import Callable
from rawgpu.errors import RawGPUError

_FMT = {1: "B", 2: "H", 4: "I", 8: "Q"}


def _check(off: int, width: int, size: int) -> None:
  if width not in _FMT: raise RawGPUError(f"MMIO access width {width} is not 1, 2, 4 or 8 bytes")
  if off < 0 or off + width > size: raise RawGPUError(f"MMIO access at {off:#x}+{width} is outside the {size:#x}-byte view")
  if off % width: raise RawGPUError(f"MMIO access at {off:#x} is not {width}-byte aligned")


class MMIO:
  """Interface: byte-offset reads/writes of 1/2/4/8 bytes, sub-views and typed index views."""
  size: int
  def read(self, off: int, width: int = 4) -> int: raise NotImplementedError
  def write(self, off: int, value: int, width: int = 4) -> None: raise NotImplementedError
  def view(self, off: int, size: int) -> "MMIO": raise NotImplementedError
  def cast(self, fmt: str = "I"): raise NotImplementedError
  def read32(self, off: int) -> int: return self.read(off, 4)
  def write32(self, off: int, value: int) -> None: self.write(off, value, 4)
  def read64(self, off: int) -> int: return self.read(off, 8)
  def write64(self, off: int, value: int) -> None: self.write(off, value, 8)
  def __len__(self) -> int: return self.size


class MemMMIO(MMIO):
  """A view over memory (a real BAR mapping, VRAM, host pages): a memoryview underneath."""
  def __init__(self, buf, addr: int | None = None):
    self.mem = memoryview(buf).cast("B")
    self.size, self.addr = len(self.mem), addr  # addr: CPU virtual address where known (for pagemap)
    self._views = {fmt: self.mem.cast(fmt) for fmt in ("I",)} if self.size % 4 == 0 else {}

  def read(self, off: int, width: int = 4) -> int:
    _check(off, width, self.size)
    return self.mem[off:off + width].cast(_FMT[width])[0]

  def write(self, off: int, value: int, width: int = 4) -> None:
    _check(off, width, self.size)
    self.mem[off:off + width].cast(_FMT[width])[0] = value & ((1 << (8 * width)) - 1)

  def view(self, off: int, size: int) -> MemMMIO:
    if off < 0 or size < 0 or off + size > self.size: raise RawGPUError(f"sub-view {off:#x}+{size:#x} is outside the {self.size:#x}-byte view")
    return MemMMIO(self.mem[off:off + size], None if self.addr is None else self.addr + off)

  def cast(self, fmt: str = "I") -> memoryview:
    if fmt in self._views: return self._views[fmt]
    return self.mem.cast(fmt)

  def readbytes(self, off: int, n: int) -> bytes: return bytes(self.mem[off:off + n])
  def writebytes(self, off: int, data) -> None: self.mem[off:off + len(data)] = data


class HookMMIO(MMIO):
  """A register BAR of an emulated device: every access is a call into the model."""
  def __init__(self, size: int, read: Callable[[int, int], int], write: Callable[[int, int, int], None], base: int = 0):
    self.size, self._read, self._write, self._base = size, read, write, base

  def read(self, off: int, width: int = 4) -> int:
    _check(off, width, self.size)
    return self._read(self._base + off, width)

  def write(self, off: int, value: int, width: int = 4) -> None:
    _check(off, width, self.size)
    self._write(self._base + off, width, value & ((1 << (8 * width)) - 1))

  def view(self, off: int, size: int) -> HookMMIO:
    if off < 0 or size < 0 or off + size > self.size: raise RawGPUError(f"sub-view {off:#x}+{size:#x} is outside the {self.size:#x}-byte view")
    return HookMMIO(size, self._read, self._write, self._base + off)

  def cast(self, fmt: str = "I") -> HookArray: return HookArray(self, fmt)


class HookArray:
  """Index access (`regs[i] = v`) over a HookMMIO, like memoryview.cast on real mappings."""
  def __init__(self, mmio: HookMMIO, fmt: str):
    self.mmio, self.width = mmio, {v: k for k, v in _FMT.items()}[fmt]
    self.n, self.mask = mmio.size // self.width, (1 << (8 * self.width)) - 1
    self._read, self._write, self._base = mmio._read, mmio._write, mmio._base   # straight to the model: doorbells are hot

  def __len__(self) -> int: return self.n
  def _outside(self, i: int) -> IndexError: return IndexError(f"index {i} is outside this {self.n}-element view")
  def __getitem__(self, i: int) -> int:
    if not 0 <= i < self.n: raise self._outside(i)
    return self._read(self._base + i * self.width, self.width)
  def __setitem__(self, i: int, v: int) -> None:
    if not 0 <= i < self.n: raise self._outside(i)
    self._write(self._base + i * self.width, self.width, v & self.mask)
