"""PCI devices through VFIO (vfio-pci): config space and BARs as regions of the device fd, interrupts as eventfds.

Only the noiommu container type is used: DMA still goes to host physical addresses (pagemap), so this is for
machines without an IOMMU (or with it off). What makes VFIO unusable is said with the command that fixes it.
"""
from __future__ import annotations
import ctypes, errno, os, struct
from dataclasses import dataclass
from rawgpu.autogen import vfio as V
from rawgpu.drivers.mmio import MMIO
from rawgpu.drivers.pci import SYSFS_PCI, check_bus, info
from rawgpu.drivers.system import SYSTEM, System
from rawgpu.errors import DeviceBusy, DeviceNotFound, IoctlError, PermissionProblem, RawGPUError

DEV_VFIO = "/dev/vfio"
NOIOMMU_PARAM = "/sys/module/vfio/parameters/enable_unsafe_noiommu_mode"
IRQ_INDEX = {"intx": V.VFIO_PCI_INTX_IRQ_INDEX, "msi": V.VFIO_PCI_MSI_IRQ_INDEX, "msix": V.VFIO_PCI_MSIX_IRQ_INDEX}


def bind_hint(bus: str) -> str:
  return (f"bind it to vfio-pci: `modprobe vfio-pci; echo vfio-pci > {SYSFS_PCI}/{bus}/driver_override; "
          f"echo {bus} > {SYSFS_PCI}/{bus}/driver/unbind; echo {bus} > /sys/bus/pci/drivers_probe`")


def holders(path: str, system: System = SYSTEM) -> list[int]:
  """Pids with `path` open, from /proc/<pid>/fd links (those this process may read)."""
  out = []
  try: pids = [p for p in system.listdir("/proc") if p.isdigit()]
  except OSError: return []
  for pid in pids:
    try: fds = system.listdir(f"/proc/{pid}/fd")
    except OSError: continue
    for fd in fds:
      try: target = system.readlink(f"/proc/{pid}/fd/{fd}")
      except OSError: continue  # closed meanwhile (the listing's own fd, a process exiting)
      if target == path: out.append(int(pid)); break
  return sorted(out)


@dataclass(frozen=True)
class Region:
  index: int
  flags: int
  size: int
  offset: int  # where the region starts in the device fd (for pread/pwrite/mmap)

  @property
  def mappable(self) -> bool: return bool(self.flags & V.VFIO_REGION_INFO_FLAG_MMAP)


class VFIODevice:
  """A vfio-pci device: `VFIODevice(bus, system)` opens its group, container (noiommu) and device fd."""
  def __init__(self, bus: str, system: System = SYSTEM):
    self.system, self.bus = system, check_bus(bus)
    self.fds: list[int] = []
    self.irq_fd: int | None = None
    self.irq_index: int | None = None
    self._regions: dict[int, Region] = {}
    group = self._group_path()
    try:
      self.container = self._open(f"{DEV_VFIO}/vfio")
      if (ver := system.ioctl(self.container, int(V.VFIO_GET_API_VERSION), 0)) != V.VFIO_API_VERSION:
        raise RawGPUError(f"{bus}: VFIO API version {ver}, expected {V.VFIO_API_VERSION}")
      if not system.ioctl(self.container, int(V.VFIO_CHECK_EXTENSION), V.VFIO_NOIOMMU_IOMMU):
        raise RawGPUError(f"{bus}: the VFIO container offers no noiommu mode: `echo 1 > {NOIOMMU_PARAM}` (needs an unsafe-noiommu kernel, CONFIG_VFIO_NOIOMMU)")
      self.group = self._open(group)
      st = V.VFIO_GROUP_GET_STATUS(system, self.group)
      if not st.flags & V.VFIO_GROUP_FLAGS_VIABLE:
        raise DeviceBusy(f"{bus}: VFIO group {group} is not viable: every device of the group must be bound to vfio-pci (see {SYSFS_PCI}/{bus}/iommu_group/devices)")
      V.VFIO_GROUP_SET_CONTAINER(system, self.group, ctypes.c_int(self.container))
      V.VFIO_SET_IOMMU(system, self.container, V.VFIO_NOIOMMU_IOMMU)
      try: self.fd = system.ioctl(self.group, int(V.VFIO_GROUP_GET_DEVICE_FD), bytearray(bus.encode() + b"\0"))
      except OSError as e:
        if e.errno == errno.EBUSY: raise DeviceBusy(f"{bus}: the VFIO device is already open in another process") from e
        raise IoctlError("VFIO_GROUP_GET_DEVICE_FD", e.errno or 0, bus) from e
      self.fds.append(self.fd)
      dinfo = V.VFIO_DEVICE_GET_INFO(system, self.fd)
      if not dinfo.flags & V.VFIO_DEVICE_FLAGS_PCI: raise RawGPUError(f"{bus}: the VFIO device is not a PCI device")
      self.num_regions, self.num_irqs = dinfo.num_regions, dinfo.num_irqs
    except BaseException:
      self.close()
      raise

  def _open(self, path: str) -> int:
    try: fd = self.system.open(path, os.O_RDWR)
    except PermissionError as e: raise PermissionProblem(f"{self.bus}: cannot open {path}: run as root or give your user access to it") from e
    except OSError as e:
      if e.errno == errno.EBUSY:
        pids = holders(path, self.system)
        who = f"pid {', '.join(map(str, pids))}" if pids else "another process"
        raise DeviceBusy(f"{self.bus}: {path} is in use by {who} (a VFIO group opens once): stop that process") from e
      raise
    self.fds.append(fd)
    return fd

  def _group_path(self) -> str:
    """/dev/vfio/noiommu-N or /dev/vfio/N for the device's iommu_group, or why VFIO cannot be used."""
    sysdev = f"{SYSFS_PCI}/{self.bus}"
    if not self.system.exists(sysdev): raise DeviceNotFound(f"no PCI device at {self.bus}")
    if not self.system.exists(f"{DEV_VFIO}/vfio"):
      raise RawGPUError(f"{self.bus}: VFIO is not available ({DEV_VFIO}/vfio is missing): load it with `modprobe vfio-pci` (as root)")
    drv = info(self.bus, self.system).driver
    if drv != "vfio-pci":
      raise DeviceBusy(f"{self.bus} is {'bound to ' + drv if drv else 'not bound to any driver'}, not to vfio-pci: {bind_hint(self.bus)}")
    if not self.system.exists(f"{sysdev}/iommu_group"):
      mode = self._read(NOIOMMU_PARAM)
      raise RawGPUError(f"{self.bus} has no IOMMU group (no IOMMU and noiommu mode is {'off' if mode in ('N', None) else mode}): "
                        f"`echo 1 > {NOIOMMU_PARAM}` and rebind it to vfio-pci")
    n = os.path.basename(self.system.readlink(f"{sysdev}/iommu_group"))
    for cand in (f"{DEV_VFIO}/noiommu-{n}", f"{DEV_VFIO}/{n}"):
      if self.system.exists(cand): return cand
    raise RawGPUError(f"{self.bus}: its IOMMU group {n} has no node in {DEV_VFIO}: {bind_hint(self.bus)}")

  def _read(self, path: str) -> str | None:
    try: return self.system.read_text(path).strip()
    except OSError: return None

  # ---- regions
  def region(self, index: int) -> Region:
    if index not in self._regions:
      r = V.VFIO_DEVICE_GET_REGION_INFO(self.system, self.fd, index=index)
      self._regions[index] = Region(index, r.flags, r.size, r.offset)
    return self._regions[index]

  def config_read(self, off: int, size: int = 4) -> int:
    cfg = self.region(V.VFIO_PCI_CONFIG_REGION_INDEX)
    data = self.system.read(self.fd, size, cfg.offset + off)
    if len(data) != size: raise RawGPUError(f"{self.bus}: VFIO config read at {off:#x} returned {len(data)} bytes")
    return int.from_bytes(data, "little")

  def config_write(self, off: int, value: int, size: int = 4) -> None:
    self.system.write(self.fd, value.to_bytes(size, "little"), self.region(V.VFIO_PCI_CONFIG_REGION_INDEX).offset + off)

  def map_bar(self, n: int, offset: int = 0, size: int | None = None) -> MMIO:
    r = self.region(n)
    size = r.size - offset if size is None else size
    if r.size == 0 or offset + size > r.size: raise RawGPUError(f"{self.bus}: BAR{n} is {r.size:#x} bytes, cannot map {offset:#x}+{size:#x}")
    if not r.mappable: raise RawGPUError(f"{self.bus}: VFIO does not let BAR{n} be mapped (region flags {r.flags:#x})")
    return self.system.mmap(self.fd, size, r.offset + offset)

  def reset(self) -> None:
    V.VFIO_DEVICE_RESET(self.system, self.fd)

  # ---- interrupts
  def enable_irq(self, kind: str = "msi") -> None:
    """Signal an eventfd on the device's first `kind` (msi, msix, intx) vector; one kind at a time."""
    if kind not in IRQ_INDEX: raise RawGPUError(f"interrupt kind must be one of {', '.join(IRQ_INDEX)}, not {kind!r}")
    idx = IRQ_INDEX[kind]
    if self.irq_index is not None: self.disable_irq()
    irq = V.VFIO_DEVICE_GET_IRQ_INFO(self.system, self.fd, index=idx)
    if irq.count == 0 or not irq.flags & V.VFIO_IRQ_INFO_EVENTFD:
      raise RawGPUError(f"{self.bus}: the device has no {kind.upper()} interrupt VFIO can signal (count {irq.count})")
    efd = self.system.eventfd(0, os.EFD_NONBLOCK)
    hdr = V.vfio_irq_set(argsz=ctypes.sizeof(V.vfio_irq_set) + 4, flags=V.VFIO_IRQ_SET_DATA_EVENTFD | V.VFIO_IRQ_SET_ACTION_TRIGGER,
                         index=idx, start=0, count=1)
    try: V.VFIO_DEVICE_SET_IRQS(self.system, self.fd, bytearray(bytes(hdr) + struct.pack("<i", efd)))
    except BaseException:
      self.system.close(efd)
      raise
    self.irq_fd, self.irq_index = efd, idx

  def disable_irq(self) -> None:
    if self.irq_index is None: return
    V.VFIO_DEVICE_SET_IRQS(self.system, self.fd, flags=V.VFIO_IRQ_SET_DATA_NONE | V.VFIO_IRQ_SET_ACTION_TRIGGER, index=self.irq_index, start=0, count=0)
    if self.irq_fd is not None: self.system.close(self.irq_fd)
    self.irq_fd = self.irq_index = None

  def wait_irq(self, timeout: float | None = None) -> int:
    """Interrupts signalled since the last wait; 0 when `timeout` seconds passed without one."""
    if self.irq_fd is None: raise RawGPUError(f"{self.bus}: no interrupt enabled: call enable_irq first")
    n = self.system.eventfd_wait(self.irq_fd, timeout)
    if n and self.irq_index == V.VFIO_PCI_INTX_IRQ_INDEX:
      # vfio-pci masks INTx when it fires (level-triggered, shared line): unmask it or no further one arrives
      V.VFIO_DEVICE_SET_IRQS(self.system, self.fd, flags=V.VFIO_IRQ_SET_DATA_NONE | V.VFIO_IRQ_SET_ACTION_UNMASK, index=self.irq_index, start=0, count=1)
    return n

  def close(self) -> None:
    if getattr(self, "fd", None) is not None and self.irq_index is not None:
      try: self.disable_irq()
      except RawGPUError: pass
    while self.fds: self.system.close(self.fds.pop())
    self.fd = None  # type: ignore[assignment]
