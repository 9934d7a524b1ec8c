"""The emulated Radeon RX 7900 XTX (Navi31, gfx1100) and RX 9070 XT (Navi48, gfx1201) boards for the virtual PCI bus."""
from rawgpu.drivers.emu.amd.board import AMDBoard

__all__ = ["AMDBoard"]
