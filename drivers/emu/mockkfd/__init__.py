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
import os, threading
from rawgpu.drivers.system import System

TOPOLOGY_ROOT = "/sys/devices/virtual/kfd/kfd/topology"
_lock = threading.Lock()
_machines: dict[str, "MockMachine"] = {}


def _forget_machines() -> None:
  """In a forked child: the parent's machines are a copy without the emulator that runs them; the child's first
  open builds its own (drivers/emu/pcibus.py check_same_process)."""
  global _lock
  _lock = threading.Lock()
  _machines.clear()


os.register_at_fork(after_in_child=_forget_machines)


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
  (booted) and /dev/kfd present. `bar_size` makes small-BAR boards (BAR0 smaller than VRAM; default all of it).
  plug() adds boards to the running machine, as a PCI hotplug does: amdgpu boots them and amdkfd adds their nodes to
  the topology (kfd_topology_add_device, which bumps generation_id)."""
  def __init__(self, arch: str, count: int, bar_size: int | None = None):
    from rawgpu.drivers.emu.mockkfd.kernel import Kernel
    from rawgpu.drivers.emu.mockkfd.sysfs import Tree
    from rawgpu.drivers.emu.pcibus import VirtualBus
    self.arch, self.bar_size, self.pid = arch, bar_size, os.getpid()
    # a bus of its own: these boards belong to the emulated kernel, never to a MOCKPCI opener in the same process
    self.vbus = VirtualBus()
    self.gpus: list = []
    self.system = System()
    self.system.host_memory = self.vbus.system.host_memory
    self.kernel = Kernel(self.gpus, self.vbus.system.host_memory, self.system)
    self.topology = Tree({"nodes/0/gpu_id": "0\n", "nodes/0/properties": "cpu_cores_count 16\nsimd_count 0\nmem_banks_count 1\n",
                          "system_properties": "platform_oem 0\nplatform_id 0\nplatform_rev 0\n", "generation_id": "0\n"})
    self.dri, self.drm, self.pci = Tree(), Tree(), Tree()
    self.system.mount("/dev/kfd", Tree(nodes={"": self._open_kfd}))
    self.system.mount("/dev/dri", self.dri)
    self.system.mount(TOPOLOGY_ROOT, self.topology)
    self.system.mount("/sys/class/drm", self.drm)
    self.system.mount("/sys/bus/pci/devices", self.pci)
    self.plug(count)

  def _open_kfd(self, flags: int):
    from rawgpu.drivers.emu.mockkfd.kernel import KFDFile
    from rawgpu.drivers.emu.pcibus import check_same_process
    check_same_process(self.pid, "this emulated machine")
    return KFDFile(self.kernel)

  def plug(self, count: int) -> None:
    """Plug in boards until the machine has at least `count` GPU nodes."""
    from rawgpu.drivers.am.boards import xccs_of
    from rawgpu.drivers.am.device import AMDevice
    from rawgpu.drivers.emu.amd import AMDBoard
    from rawgpu.drivers.emu.amd.asic import asic
    from rawgpu.drivers.emu.mockkfd.kernel import GPU, RenderFile
    from rawgpu.drivers.emu.mockpci import vram_size
    from rawgpu.drivers.pci import lock_path
    per, ecc = xccs_of(asic(self.arch).device), asic(self.arch).ecc
    while len(self.gpus) < count:
      bus = self.vbus.plug(AMDBoard(arch=self.arch, host=self.vbus.host, vram_size=vram_size(), bar0_size=self.bar_size))
      # owner locks of emulated boards are private to this process (a real /tmp file would collide)
      self.vbus.system.mount(lock_path("am", bus), _LockFile())
      dev = AMDevice(bus, self.vbus.system)
      first = len(self.gpus)
      new = [GPU(dev, node=first + x + 1, render_minor=128 + first + x, xcc=x, ecc=ecc) for x in range(per)]
      for g in new:
        g.kernel = self.kernel
        self.topology.files.update(g.topology_files(f"nodes/{g.node}"))
        # ip_discovery lives under the PCI device (amdgpu_discovery.c); a render node's `device` is that PCI device for
        # a board's first partition, and a platform device without it (amdgpu_xcp) for MI300's others
        self.pci.files.update(g.ip_files(f"{bus}/ip_discovery/die/0"))
        if g.xcc == 0: self.drm.files.update(g.ip_files(f"renderD{g.render_minor}/device/ip_discovery/die/0"))
        self.dri.nodes[f"renderD{g.render_minor}"] = (lambda g: lambda flags: RenderFile(g))(g)
      self.gpus.extend(new)   # the kernel's list: its processes see the new nodes
      self.topology.files["generation_id"] = f"{int(self.topology.files['generation_id']) + 1}\n"

  def close(self) -> None:
    """Power the machine off: the kernel's drivers let go of the boards, whose emulators stop."""
    for p in list(self.kernel.processes): p.exit()
    for dev in {id(g.dev): g.dev for g in self.gpus}.values(): dev.fini()
    for board in self.vbus.boards.values(): board.close()


def machine(arch: str = "gfx1100", count: int = 1) -> MockMachine:
  """The process's emulated machine for `arch`, created on first use; boards are plugged in until it has `count` nodes."""
  with _lock:
    m = _machines.get(arch)
    if m is None: m = _machines[arch] = MockMachine(arch, count)
    else: m.plug(count)
    return m


def mock_kfd(arch: str = "gfx1100", count: int = 1) -> System:
  return machine(arch, count).system


__all__ = ["mock_kfd", "machine", "MockMachine"]
