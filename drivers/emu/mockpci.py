"""MOCKPCI: the process's virtual PCI bus with emulated AMD boards plugged in, created when first asked for.

Boards persist for the life of the process (like boards in a machine), so a second open finds a warm board. They
are the process's own: a forked child starts with no boards, and its first open plugs in boards of its own.
"""
from __future__ import annotations
import os, threading
from rawgpu.drivers.emu.pcibus import VirtualBus
from rawgpu.errors import RawGPUError

_lock = threading.Lock()
_vbus: VirtualBus | None = None
_arch_of: dict[str, str] = {}


def _forget_boards() -> None:
  """In a forked child: the parent's boards are a copy without the emulator that runs them (drivers/emu/pcibus.py)."""
  global _vbus, _lock
  _vbus, _lock = None, threading.Lock()
  _arch_of.clear()


os.register_at_fork(after_in_child=_forget_boards)


def vram_size() -> int:
  """An emulated board's VRAM: RAWGPU_MOCK_VRAM_MB, a power of two of at least 64 (MiB), 512 by default."""
  text = os.environ.get("RAWGPU_MOCK_VRAM_MB", "512")
  mb = int(text) if text.strip().isdigit() else 0
  if mb < 64 or mb & (mb - 1):
    raise RawGPUError(f"RAWGPU_MOCK_VRAM_MB={text!r}: an emulated board's VRAM in MiB, a power of two of at least 64 (e.g. 512)")
  return mb << 20


def virtual_boards(arch: str, count: int) -> tuple[VirtualBus, list[str]]:
  """The virtual bus and the bus addresses of at least `count` emulated boards of `arch`, plugging in new ones."""
  global _vbus
  from rawgpu.drivers.emu.amd import AMDBoard
  with _lock:
    if _vbus is None: _vbus = VirtualBus()
    buses = [b for b, a in _arch_of.items() if a == arch and b in _vbus.boards]
    while len(buses) < count:
      bus = _vbus.plug(AMDBoard(arch=arch, host=_vbus.host, vram_size=vram_size()))
      _arch_of[bus] = arch
      buses.append(bus)
    return _vbus, buses
