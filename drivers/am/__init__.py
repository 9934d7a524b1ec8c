"""AM: rawgpu's own userspace amdgpu driver over PCI (RDNA3 gfx1100/1101/1102, RDNA4 gfx1200/1201; MI300X in progress,
opened only with RAWGPU_AM_IN_PROGRESS=1: compute on the XCC the interface names, XCC 0 by default; copies on SDMA 4.4.2).

  from rawgpu.drivers.am import AMIface, supported
  iface = AMIface("0000:03:00.0")        # boots the board (cold or warm) and serves drivers/iface.py's Iface
Importing this package touches no device.
"""
from __future__ import annotations
from typing import TYPE_CHECKING
from rawgpu.drivers.am.boards import AMD_VENDOR, BOARDS

if TYPE_CHECKING:
  from rawgpu.drivers.am.iface import AMIface
  from rawgpu.drivers.pci import PCIInfo


def supported(pci_info: "PCIInfo") -> bool:
  """Whether AM can drive this PCI function (an AMD board of a supported family)."""
  return pci_info.vendor == AMD_VENDOR and pci_info.device in BOARDS


def __getattr__(name: str):
  if name == "AMIface":
    from rawgpu.drivers.am.iface import AMIface
    return AMIface
  if name == "AMDevice":
    from rawgpu.drivers.am.device import AMDevice
    return AMDevice
  raise AttributeError(name)


__all__ = ["AMIface", "AMDevice", "supported"]
