"""MOCKKFD: /dev/kfd, /dev/dri/renderD* and the KFD topology of emulated AMD boards, in a System of their own.

The boards are the same emulated GPU as MOCKPCI (drivers/emu/amd on the process's virtual PCI bus); the kernel
side (drivers/emu/mockkfd/kernel.py) boots them with rawgpu's AM driver, as amdgpu would, and plays amdkfd.

  from rawgpu.drivers.emu.mockkfd import mock_kfd
  system = mock_kfd("gfx1100", count=1)          # a System with /dev/kfd and sysfs mounted
  iface = KFDIface(0, system)

gfx942 (the emulated MI300X, a node per XCC as amdkfd lists a board in CPX mode) needs RAWGPU_AM_IN_PROGRESS=1: its
kernel boots the board with AM, whose MI300 support is in progress (drivers/emu/amd/MI300.md).
"""
from __future__ import annotations
import threading
from rawgpu.drivers.system import System

TOPOLOGY_ROOT = "/sys/devices/virtual/kfd/kfd/topology"
_lock = threading.Lock()
_machines: dict[str, "MockMachine"] = {}


class _LockFile:
  def __init__(self): self.store = bytearray()
  def open(self, rel: str, flags: int):
    from rawgpu.drivers.emu.mockkfd.sysfs import MemFile
    return MemFile(self.store)
  def listdir(self, rel: str) -> list[str]: raise NotADirectoryError(20, rel)
  def readlink(self, rel: str) -> str: raise OSError(22, "not a link")
  def exists(self, rel: str) -> bool: return rel == ""


class MockMachine:
  """A machine with `count` GPU nodes of one arch (a board each; on MI300 a node per XCC of a board), amdgpu loaded
  (booted) and /dev/kfd present. `bar_size` makes small-BAR boards (BAR0 smaller than VRAM; default all of it)."""
  def __init__(self, arch: str, count: int, bar_size: int | None = None):
    from rawgpu.drivers.am.device import AMDevice
    from rawgpu.drivers.emu.amd import AMDBoard
    from rawgpu.drivers.emu.mockkfd.kernel import GPU, Kernel
    from rawgpu.drivers.emu.mockkfd.sysfs import Tree
    from rawgpu.drivers.emu.mockpci import vram_size
    from rawgpu.drivers.emu.pcibus import VirtualBus
    from rawgpu.drivers.am.boards import xccs_of
    from rawgpu.drivers.emu.amd.asic import asic
    from rawgpu.drivers.pci import lock_path
    # a bus of its own: these boards belong to the emulated kernel, never to a MOCKPCI opener in the same process
    self.vbus = vbus = VirtualBus()
    per = xccs_of(asic(arch).device)
    buses = [vbus.plug(AMDBoard(arch=arch, host=vbus.host, vram_size=vram_size(), bar0_size=bar_size)) for _ in range(-(-count // per))]
    for bus in buses:   # owner locks of emulated boards are private to this process (a real /tmp file would collide)
      vbus.system.mount(lock_path("am", bus), _LockFile())
    devs = [AMDevice(bus, vbus.system) for bus in buses]
    self.gpus = [GPU(devs[i // per], node=i + 1, render_minor=128 + i, xcc=i % per, ecc=asic(arch).ecc) for i in range(len(buses) * per)]
    self.system = System()
    self.system.host_memory = vbus.system.host_memory
    self.kernel = Kernel(self.gpus, vbus.system.host_memory, self.system)
    from rawgpu.drivers.emu.mockkfd.kernel import KFDFile, RenderFile
    topo = {"nodes/0/gpu_id": "0\n", "nodes/0/properties": "cpu_cores_count 16\nsimd_count 0\nmem_banks_count 1\n",
            "system_properties": "platform_oem 0\nplatform_id 0\nplatform_rev 0\n", "generation_id": "1\n"}
    drm, dri, pci = {}, {}, {}
    for g in self.gpus:
      topo.update(g.topology_files(f"nodes/{g.node}"))
      # ip_discovery lives under the PCI device (amdgpu_discovery.c); a render node's `device` is that PCI device for
      # a board's first partition, and a platform device without it (amdgpu_xcp) for MI300's others
      pci.update(g.ip_files(f"{g.dev.bus}/ip_discovery/die/0"))
      if g.xcc == 0: drm.update(g.ip_files(f"renderD{g.render_minor}/device/ip_discovery/die/0"))
      dri[f"renderD{g.render_minor}"] = (lambda g: lambda flags: RenderFile(g))(g)
    self.system.mount("/dev/kfd", Tree(nodes={"": lambda flags: KFDFile(self.kernel)}))
    self.system.mount("/dev/dri", Tree(nodes=dri))
    self.system.mount(TOPOLOGY_ROOT, Tree(topo))
    self.system.mount("/sys/class/drm", Tree(drm))
    self.system.mount("/sys/bus/pci/devices", Tree(pci))

  def close(self) -> None:
    """Power the machine off: the kernel's drivers let go of the boards, whose emulators stop."""
    for p in list(self.kernel.processes): p.exit()
    for dev in {id(g.dev): g.dev for g in self.gpus}.values(): dev.fini()
    for board in self.vbus.boards.values(): board.close()


def machine(arch: str = "gfx1100", count: int = 1) -> MockMachine:
  """The process's emulated machine for `arch` (created on first use, with at least `count` boards)."""
  with _lock:
    m = _machines.get(arch)
    if m is None or len(m.gpus) < count: m = _machines[arch] = MockMachine(arch, max(count, len(m.gpus) if m else 0))
    return m


def mock_kfd(arch: str = "gfx1100", count: int = 1) -> System:
  return machine(arch, count).system


__all__ = ["mock_kfd", "machine", "MockMachine"]
