"""What GPUs this machine has and which interfaces can drive each (and why not)."""
from __future__ import annotations
import os
from rawgpu.drivers import pci
from rawgpu.drivers.system import SYSTEM, System

NAMES = {(0x1002, 0x744c): "Radeon RX 7900 XTX/XT", (0x1002, 0x7550): "Radeon RX 9070 XT", (0x1002, 0x7448): "Radeon Pro W7900",
         (0x1002, 0x74a1): "Instinct MI300X", (0x10de, 0x2335): "H200", (0x10de, 0x2330): "H100 SXM", (0x10de, 0x2684): "GeForce RTX 4090"}
VENDORS = {0x1002: "AMD", 0x10de: "NV"}


def _why_not_pci(i: pci.PCIInfo, system: System) -> str | bool:
  if i.driver: return f"bound to {i.driver} (unload it: hcq-smi {VENDORS[i.vendor].lower()} rmmod)"
  if os.geteuid() != 0: return "needs root"
  return True


def _why_not_kernel(i: pci.PCIInfo, system: System) -> str | bool:
  if i.vendor == 0x1002:
    if i.driver != "amdgpu": return "amdgpu not bound"
    return True if system.exists("/dev/kfd") else "no /dev/kfd"
  if i.driver != "nvidia": return "nvidia.ko not bound"
  return True if system.exists("/dev/nvidiactl") else "no /dev/nvidiactl"


def inventory(system: System = SYSTEM) -> list[dict]:
  out = []
  for i in pci.scan(cls_prefix=0x03, system=system) + pci.scan(cls_prefix=0x12, system=system):
    if i.vendor not in VENDORS: continue
    kernel = "KFD" if i.vendor == 0x1002 else "NVK"
    out.append({"bus": i.bus, "vendor": VENDORS[i.vendor], "device_id": i.device, "name": NAMES.get((i.vendor, i.device), "unknown"),
                "driver": i.driver, "ifaces": {kernel: _why_not_kernel(i, system), "PCI": _why_not_pci(i, system)}})
  return out
