"""KFD: AMD GPUs through the amdgpu kernel driver (/dev/kfd + the render node), serving drivers/iface.py's Iface.

  from rawgpu.drivers.kfd import KFDIface
  iface = KFDIface(0)                     # the first GPU node of the KFD topology (PCI order)
Importing this package touches no device.
"""
from __future__ import annotations
from typing import TYPE_CHECKING

if TYPE_CHECKING: from rawgpu.drivers.kfd.iface import KFDIface


def __getattr__(name: str):
  if name == "KFDIface":
    from rawgpu.drivers.kfd.iface import KFDIface
    return KFDIface
  raise AttributeError(name)


__all__ = ["KFDIface"]
