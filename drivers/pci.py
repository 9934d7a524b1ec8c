"""PCI devices over sysfs: enumeration, config space, BARs, bus mastering, reset, host memory and the owner lock."""
from __future__ import annotations
import errno, os, re, tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable
from rawgpu.autogen import pci as regs
from rawgpu.drivers.mmio import MMIO, MemMMIO
from rawgpu.drivers.system import HUGE_PAGE, PAGE, SYSTEM, System
from rawgpu.errors import DeviceBusy, DeviceNotFound, DeviceSpecError, PermissionProblem, RawGPUError
if TYPE_CHECKING: from rawgpu.drivers.vfio import VFIODevice

SYSFS_PCI = "/sys/bus/pci/devices"
BUS_RE = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")   # (\Z: "$" would let a trailing newline through)
PCI_COMMAND, PCI_COMMAND_MEMORY, PCI_COMMAND_MASTER, PCI_COMMAND_INTX_DISABLE = 0x04, 0x2, 0x4, 0x400  # from pci_regs.h


def check_bus(bus: str) -> str:
  if not BUS_RE.match(bus): raise RawGPUError(f"{bus!r} is not a PCI bus address of the form dddd:bb:dd.f (e.g. 0000:03:00.0)")
  return bus


@dataclass(frozen=True)
class PCIInfo:
  bus: str
  vendor: int
  device: int
  cls: int
  driver: str | None  # bound kernel driver, None when unbound


def _hex(system: System, path: str) -> int: return int(system.read_text(path).strip(), 16)


def info(bus: str, system: System = SYSTEM) -> PCIInfo:
  d = f"{SYSFS_PCI}/{check_bus(bus)}"
  if not system.exists(d): raise DeviceNotFound(f"no PCI device at {bus}")
  drv = os.path.basename(system.readlink(f"{d}/driver")) if system.exists(f"{d}/driver") else None
  return PCIInfo(bus, _hex(system, f"{d}/vendor"), _hex(system, f"{d}/device"), _hex(system, f"{d}/class"), drv)


def scan(vendor: int | None = None, devices: set[int] | None = None, cls_prefix: int | None = None, system: System = SYSTEM) -> list[PCIInfo]:
  """Devices matching vendor / device ids / class (cls_prefix compares the top byte, 0x03 = display), by bus order."""
  if not system.exists(SYSFS_PCI): return []
  out = []
  for bus in system.listdir(SYSFS_PCI):
    if not BUS_RE.match(bus): continue
    i = info(bus, system)
    if vendor is not None and i.vendor != vendor: continue
    if devices is not None and i.device not in devices: continue
    if cls_prefix is not None and (i.cls >> 16) != cls_prefix: continue
    out.append(i)
  return out


# ---- capabilities (linux/capability.h bit numbers)
CAP_IPC_LOCK, CAP_SYS_ADMIN = 14, 21
HUGEPAGES_2M = "/sys/kernel/mm/hugepages/hugepages-2048kB"
# kernel drivers that own a GPU and how to release it
RELEASE_HINT = {"amdgpu": "run `hcq-smi amd rmmod` (or unbind it)", "nvidia": "run `hcq-smi nv rmmod` (or unbind it)"}


def effective_caps(system: System = SYSTEM) -> int | None:
  """CapEff of this process from /proc/self/status, or None when it cannot be read."""
  try: text = system.read_text("/proc/self/status")
  except OSError: return None
  for ln in text.splitlines():
    if ln.startswith("CapEff:"): return int(ln.split()[1], 16)
  return None


def require_caps(system: System, why: str, *caps: tuple[int, str]) -> None:
  """PermissionProblem naming each missing capability; silent when CapEff is unreadable (the operation says then)."""
  eff = effective_caps(system)
  if eff is None: return
  missing = [name for bit, name in caps if not eff >> bit & 1]
  if missing: raise PermissionProblem(f"{why} needs {' and '.join(missing)}, which this process lacks: run as root (sudo) or grant it (setcap / capsh)")


def lock_path(prefix: str, bus: str, system: System = SYSTEM) -> str:
  return os.path.join(system.lock_dir or tempfile.gettempdir(), f"{prefix}_{check_bus(bus)}.lock")


def lock_owner(path: str, system: System = SYSTEM) -> int | None:
  """The pid recorded in a lock file, if the file exists and holds one."""
  try: text = system.read_text(path).strip()
  except (FileNotFoundError, PermissionProblem): return None
  return int(text) if text.isdigit() else None


class DeviceLock:
  """The per-device owner lock `<tmpdir>/<prefix>_<bus>.lock`: held by the owning process, holds its pid."""
  def __init__(self, prefix: str, bus: str, system: System = SYSTEM):
    self.path, self.system, self.bus = lock_path(prefix, bus, system), system, bus
    # O_NOFOLLOW: never follow a link another user planted; the file itself is only ever written by its owner.
    try: self.fd = system.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e: raise RawGPUError(f"cannot open lock file {self.path} for {bus}: {e.strerror} (remove it if it is a symlink or not yours)") from e
    try: system.flock(self.fd, exclusive=True, blocking=False)
    except BlockingIOError:
      system.close(self.fd)
      owner = lock_owner(self.path, system)
      raise DeviceBusy(f"{bus} is in use by pid {owner if owner else 'unknown'} (lock {self.path}); stop that process or run `hcq-smi amd kill_pids --pci_bus {bus}`") from None
    system.truncate(self.fd, 0)
    system.write(self.fd, f"{os.getpid()}\n".encode())

  def release(self) -> None:
    if self.fd is not None:
      self.system.close(self.fd)
      self.fd = None


@dataclass
class HostMem:
  """Locked host memory the device reaches by bus address: `view` for the CPU, one bus address per 4 KiB page."""
  view: MemMMIO
  bus_addrs: list[int]

  @property
  def contiguous(self) -> bool: return all(b - a == PAGE for a, b in zip(self.bus_addrs, self.bus_addrs[1:]))


@dataclass(frozen=True)
class ResizableBar:
  """One BAR's entry in the Resizable BAR extended capability: sizes it offers and its current size, in bytes."""
  bar: int
  sizes: tuple[int, ...]
  current: int


def _rebar_sizes(cap: int) -> tuple[int, ...]:
  # PCI_REBAR_CAP bits 4..31: bit (4+n) means 2^n MiB is supported
  mask = (cap & 0xffff_fff0) >> 4
  return tuple(1 << (n + 20) for n in range(28) if mask >> n & 1)


def _check_part(bus: str, n: int, full: int, offset: int, size: int) -> None:
  if offset < 0 or size <= 0 or offset + size > full: raise RawGPUError(f"{bus}: BAR{n} is {full:#x} bytes, cannot map {offset:#x}+{size:#x}")


class PCIDevice:
  """A PCI function over sysfs (config file, resourceN), or over VFIO with `use_vfio=True` (regions of the device fd,
  interrupts through eventfds)."""
  def __init__(self, bus: str, system: System = SYSTEM, lock_prefix: str | None = None, use_vfio: bool = False):
    self.system, self.bus = system, check_bus(bus)
    self.path = f"{SYSFS_PCI}/{bus}"
    self.info = info(bus, system)
    self._cfg_fd: int | None = None
    self._bar_fds: list[int] = []   # BAR files bar_mapper keeps open
    self.closed = False
    self.vfio: VFIODevice | None = None
    self.lock = DeviceLock(lock_prefix, bus, system) if lock_prefix else None
    if use_vfio:
      from rawgpu.drivers.vfio import VFIODevice
      try: self.vfio = VFIODevice(bus, system)
      except BaseException:
        if self.lock: self.lock.release()
        raise

  @property
  def vendor(self) -> int: return self.info.vendor
  @property
  def device(self) -> int: return self.info.device

  def _cfg(self) -> int:
    if self._cfg_fd is None: self._cfg_fd = self.system.open(f"{self.path}/config", os.O_RDWR)
    return self._cfg_fd

  def config_read(self, off: int, size: int = 4) -> int:
    if self.vfio is not None: return self.vfio.config_read(off, size)
    data = self.system.read(self._cfg(), size, off)
    if len(data) != size: raise PermissionProblem(f"{self.bus}: config space read at {off:#x} returned {len(data)} bytes (reading beyond 64 bytes needs root)")
    return int.from_bytes(data, "little")

  def config_write(self, off: int, value: int, size: int = 4) -> None:
    if self.vfio is not None: return self.vfio.config_write(off, value, size)
    self.system.write(self._cfg(), value.to_bytes(size, "little"), off)

  def enable_bus_master(self) -> None:
    """Memory decode and bus mastering on; legacy INTx off: a userspace driver polls, and an interrupt line the board
    held asserted with no handler would make the kernel disable that line for every device sharing it."""
    cmd = self.config_read(PCI_COMMAND, 2)
    self.config_write(PCI_COMMAND, cmd | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER | PCI_COMMAND_INTX_DISABLE, 2)

  HEADER_DWORDS = 16   # the type-0 header: what pci_save_state keeps of it, and what unprivileged sysfs reads reach

  def save_config(self) -> list[int]:
    """The configuration header as it is now, for restore_config after a reset that may clear it (mode 1)."""
    return [self.config_read(4 * i, 4) for i in range(self.HEADER_DWORDS)]

  def restore_config(self, saved: list[int]) -> None:
    """Write back what save_config read, last dword first so the command register (memory decode, bus mastering)
    comes after the BARs, and only what differs (pci_restore_config_space). The status half of dword 1 is
    write-one-to-clear and is left alone."""
    for i in range(self.HEADER_DWORDS - 1, 0, -1):
      if i == 1:
        if self.config_read(PCI_COMMAND, 2) != saved[1] & 0xffff: self.config_write(PCI_COMMAND, saved[1] & 0xffff, 2)
      elif self.config_read(4 * i, 4) != saved[i]: self.config_write(4 * i, saved[i], 4)

  def disable_bus_master(self) -> None:
    self.config_write(PCI_COMMAND, self.config_read(PCI_COMMAND, 2) & ~PCI_COMMAND_MASTER, 2)

  def resources(self) -> list[tuple[int, int, int]]:
    """(start, end, flags) per BAR from the sysfs `resource` file."""
    lines = self.system.read_text(f"{self.path}/resource").splitlines()
    return [tuple(int(x, 16) for x in ln.split()[:3]) for ln in lines if ln.strip()]  # type: ignore[misc]

  def bar_size(self, n: int) -> int:
    if self.vfio is not None: return self.vfio.region(n).size
    start, end, _ = self.resources()[n]
    return 0 if end == 0 else end - start + 1

  def can_write_combine(self, n: int) -> bool:
    """Whether BAR n can be mapped write-combining: Linux offers `resource<n>_wc` only for a prefetchable BAR on an
    architecture that can map WC; through VFIO, BARs are mapped uncached (vfio-pci's mmap default)."""
    return self.vfio is None and self.system.exists(f"{self.path}/resource{n}_wc")

  def map_bar(self, n: int, offset: int = 0, size: int | None = None, write_combine: bool = False) -> MMIO:
    """Map BAR n (or `size` bytes of it from `offset`). Uncached by default: every store is its own bus write, in order.
    write_combine: stores may merge into bursts and reach the device late and out of order, until an uncached access
    or a fence drains them (for memory such as VRAM; never for registers)."""
    full = self._check_mappable(n, write_combine)
    size = full - offset if size is None else size
    _check_part(self.bus, n, full, offset, size)
    if self.vfio is not None: return self.vfio.map_bar(n, offset, size)
    fd = self._open_bar(n, write_combine)
    try: return self.system.mmap(fd, size, offset)
    finally: self.system.close(fd)

  def bar_mapper(self, n: int, write_combine: bool = False) -> Callable[[int, int], MMIO]:
    """map(offset, size): mappings of parts of BAR n as map_bar makes them, each its own (System.munmap takes one
    away), with the checks done and the file opened once (it stays open until close): for a mapping per allocation."""
    full = self._check_mappable(n, write_combine)
    if self.vfio is not None: return lambda offset, size: self.vfio.map_bar(n, offset, size)   # type: ignore[union-attr]
    fd = self._open_bar(n, write_combine)
    self._bar_fds.append(fd)
    def map_part(offset: int, size: int) -> MMIO:
      _check_part(self.bus, n, full, offset, size)
      return self.system.mmap(fd, size, offset)
    return map_part

  def _check_mappable(self, n: int, write_combine: bool) -> int:
    """BAR n's size, once it is known it can be mapped so."""
    full = self.bar_size(n)
    if write_combine and not self.can_write_combine(n):
      why = "through VFIO, rawgpu maps BARs uncached (vfio-pci's mmap default)" if self.vfio is not None else f"{self.path}/resource{n}_wc does not exist (the BAR is not prefetchable, or this architecture cannot map write-combined)"
      raise RawGPUError(f"{self.bus}: BAR{n} cannot be mapped write-combined: {why}")
    return full

  def _open_bar(self, n: int, write_combine: bool) -> int:
    node = f"{self.path}/resource{n}" + ("_wc" if write_combine else "")
    try: return self.system.open(node, os.O_RDWR | os.O_SYNC)
    except PermissionError as e: raise PermissionProblem(f"{self.bus}: cannot open BAR{n} ({node}): mapping BARs needs root (CAP_SYS_ADMIN)") from e

  def require_bar(self, n: int, need: int, what: str = "the driver") -> None:
    """DeviceSpecError when BAR n is smaller than `need` bytes (a small BAR): how to get a larger one."""
    have = self.bar_size(n)
    if have >= need: return
    fix = "enable Resizable BAR and Above 4G Decoding in the BIOS (firmware setup), then reboot"
    try:
      rb = next((r for r in self.rebar() if r.bar == n), None)
      if rb and any(s >= need for s in rb.sizes): fix = f"resize it: PCIDevice.resize_bar({n}, {min(s for s in rb.sizes if s >= need):#x}) with no driver bound, or " + fix
    except (RawGPUError, OSError): pass
    raise DeviceSpecError(f"{self.bus}: BAR{n} is {have >> 20} MiB but {what} needs {need >> 20} MiB (small BAR): {fix}")

  # ---- resizable BAR
  def ext_capability(self, cap_id: int) -> int | None:
    """Offset of an extended capability (PCIe config space above 0x100), or None."""
    off, seen = regs.PCI_CFG_SPACE_SIZE, set()
    while off and off not in seen and off < regs.PCI_CFG_SPACE_EXP_SIZE:
      seen.add(off)
      hdr = self.config_read(off, 4)
      if hdr in (0, 0xffffffff): return None
      if regs.PCI_EXT_CAP_ID(hdr) == cap_id: return off
      off = regs.PCI_EXT_CAP_NEXT(hdr)
    return None

  def rebar(self) -> list[ResizableBar]:
    """The BARs the Resizable BAR capability covers (empty when the device has none)."""
    off = self.ext_capability(regs.PCI_EXT_CAP_ID_REBAR)
    if off is None: return []
    first_ctrl = self.config_read(off + regs.PCI_REBAR_CTRL, 4)
    count = (first_ctrl & regs.PCI_REBAR_CTRL_NBAR_MASK) >> regs.PCI_REBAR_CTRL_NBAR_SHIFT
    out = []
    for i in range(max(1, count)):
      cap, ctrl = self.config_read(off + regs.PCI_REBAR_CAP + 8 * i, 4), self.config_read(off + regs.PCI_REBAR_CTRL + 8 * i, 4)
      cur = 1 << (((ctrl & regs.PCI_REBAR_CTRL_BAR_SIZE) >> regs.PCI_REBAR_CTRL_BAR_SHIFT) + 20)
      out.append(ResizableBar(ctrl & regs.PCI_REBAR_CTRL_BAR_IDX, _rebar_sizes(cap), cur))
    return out

  def resize_bar(self, n: int, size: int) -> None:
    """Resize BAR n through sysfs `resource<n>_resize` (the kernel reassigns the bridge windows); needs no driver bound."""
    rb = next((r for r in self.rebar() if r.bar == n), None)
    if rb is None: raise DeviceSpecError(f"{self.bus}: BAR{n} is not resizable (no Resizable BAR capability for it); enable Resizable BAR in the BIOS if the board supports it")
    if size not in rb.sizes:
      raise DeviceSpecError(f"{self.bus}: BAR{n} cannot be {size:#x} bytes; it offers {', '.join(f'{s >> 20} MiB' for s in rb.sizes)}")
    drv = info(self.bus, self.system).driver
    if drv is not None: raise DeviceBusy(f"{self.bus}: cannot resize BAR{n} while the {drv} driver is bound: {RELEASE_HINT.get(drv, 'unbind it')} first")
    node = f"{self.path}/resource{n}_resize"
    if not self.system.exists(node): raise RawGPUError(f"{self.bus}: the kernel has no {node} (it appeared in Linux 5.13): resize BAR{n} in the BIOS or update the kernel")
    try: self.system.write_text(node, str((size >> 20).bit_length() - 1))
    except PermissionError as e: raise PermissionProblem(f"{self.bus}: writing {node} needs root") from e
    except OSError as e:
      if e.errno == errno.EBUSY: raise DeviceBusy(f"{self.bus}: the kernel refused to resize BAR{n}: a driver is bound or the device has VFs") from e
      if e.errno == errno.ENOSPC: raise RawGPUError(f"{self.bus}: no room for a {size >> 20} MiB BAR{n} behind its bridge: enable Above 4G Decoding in the BIOS") from e
      raise RawGPUError(f"{self.bus}: resizing BAR{n} failed: {e.strerror}") from e

  # ---- drivers and the IOMMU
  def require_unbound(self) -> None:
    """DeviceBusy when a kernel driver owns the device, with how to release it."""
    drv = info(self.bus, self.system).driver
    if drv is None: return
    raise DeviceBusy(f"{self.bus} is bound to the kernel driver {drv}: {RELEASE_HINT.get(drv, 'unbind it')}, "
                     f"e.g. `echo {self.bus} > /sys/bus/pci/drivers/{drv}/unbind`")

  def iommu_translates(self) -> bool:
    """True when an IOMMU remaps this device's DMA (sysfs iommu_group with type DMA/DMA-FQ): physical addresses
    are then not bus addresses. Passthrough (identity) and VFIO's noiommu groups do not translate."""
    grp = f"{self.path}/iommu_group"
    if not self.system.exists(grp): return False
    try:
      if self.system.read_text(f"{grp}/name").strip() == "vfio-noiommu": return False
    except OSError: pass
    try: kind = self.system.read_text(f"{grp}/type").strip()
    except OSError: return True  # a group without a type file still belongs to an IOMMU
    return kind != "identity"

  def require_direct_dma(self) -> None:
    if self.iommu_translates():
      raise RawGPUError(f"{self.bus}: the IOMMU translates this device's DMA, so host physical addresses are not its bus addresses: "
                        "boot with iommu=pt (amd_iommu=pt / intel_iommu=pt), or disable the IOMMU and use VFIO's noiommu mode")

  def unbind(self) -> None:
    if self.info.driver: self.system.write_text(f"{self.path}/driver/unbind", self.bus)

  def reset(self) -> None:
    if self.vfio is not None: return self.vfio.reset()
    self.system.write_text(f"{self.path}/reset", "1")

  # ---- host memory
  def alloc_host(self, size: int, contiguous: bool = False) -> HostMem:
    """Locked host pages with their bus addresses. contiguous=True takes 2 MiB hugepages and checks through pagemap
    that the whole range is physically contiguous."""
    if self.system.host_memory is None:
      self.require_direct_dma()
      require_caps(self.system, "reading physical addresses from /proc/self/pagemap", (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"))
    if contiguous: mem = self._alloc_huge(size)
    else:
      try: mem = self.system.alloc_host(size)
      except PermissionProblem:
        require_caps(self.system, "locking host memory (mlock)", (CAP_IPC_LOCK, "CAP_IPC_LOCK"))
        raise
    out = HostMem(mem, self.system.bus_addresses(mem))
    if contiguous and not out.contiguous:
      self.system.free_host(mem)
      raise RawGPUError(f"{self.bus}: {size:#x} bytes over several 2 MiB hugepages are not physically contiguous: allocate at most 2 MiB per contiguous buffer")
    return out

  def _alloc_huge(self, size: int) -> MemMMIO:
    need = (size + HUGE_PAGE - 1) // HUGE_PAGE
    try: return self.system.alloc_host_huge(size)
    except PermissionProblem:
      require_caps(self.system, "locking host memory (mlock)", (CAP_IPC_LOCK, "CAP_IPC_LOCK"))
      raise
    except OSError as e:
      if e.errno not in (errno.ENOMEM, errno.EINVAL): raise
      try: free = int(self.system.read_text(f"{HUGEPAGES_2M}/free_hugepages").strip())
      except (OSError, ValueError): free = None
      have = "none are free" if not free else f"only {free} are free"
      raise RawGPUError(f"{self.bus}: {size:#x} contiguous bytes need {need} 2 MiB hugepages and {have}: "
                        f"reserve them with `echo {need} > /proc/sys/vm/nr_hugepages` (as root)") from e

  # ---- interrupts (VFIO)
  def enable_irq(self, kind: str = "msi") -> None:
    """Route the device's interrupt (msi, msix or intx) to an eventfd; needs use_vfio=True."""
    if self.vfio is None: raise RawGPUError(f"{self.bus}: interrupts need VFIO: open the device with use_vfio=True")
    self.vfio.enable_irq(kind)

  def wait_irq(self, timeout: float | None = None) -> int:
    """Interrupts since the last wait (0 when `timeout` seconds passed without one)."""
    if self.vfio is None: raise RawGPUError(f"{self.bus}: interrupts need VFIO: open the device with use_vfio=True")
    return self.vfio.wait_irq(timeout)

  def close(self) -> None:
    self.closed = True
    if self._cfg_fd is not None: self.system.close(self._cfg_fd); self._cfg_fd = None
    for fd in self._bar_fds: self.system.close(fd)
    self._bar_fds.clear()
    if self.vfio is not None: self.vfio.close(); self.vfio = None
    if self.lock: self.lock.release()
