"""PCI devices over sysfs: enumeration, config space, BARs, bus mastering, reset, host memory and the owner lock."""
from __future__ import annotations
import os, re, tempfile
from dataclasses import dataclass
from rawgpu.drivers.mmio import MMIO, MemMMIO
from rawgpu.drivers.system import SYSTEM, System
from rawgpu.errors import DeviceBusy, DeviceNotFound, PermissionProblem, RawGPUError

SYSFS_PCI = "/sys/bus/pci/devices"
BUS_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
PCI_COMMAND, PCI_COMMAND_MEMORY, PCI_COMMAND_MASTER = 0x04, 0x2, 0x4  # from pci_regs.h


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


class PCIDevice:
  def __init__(self, bus: str, system: System = SYSTEM, lock_prefix: str | None = None):
    self.system, self.bus = system, check_bus(bus)
    self.path = f"{SYSFS_PCI}/{bus}"
    self.info = info(bus, system)
    self.lock = DeviceLock(lock_prefix, bus, system) if lock_prefix else None
    self._cfg_fd: int | None = None

  @property
  def vendor(self) -> int: return self.info.vendor
  @property
  def device(self) -> int: return self.info.device

  def _cfg(self) -> int:
    if self._cfg_fd is None: self._cfg_fd = self.system.open(f"{self.path}/config", os.O_RDWR)
    return self._cfg_fd

  def config_read(self, off: int, size: int = 4) -> int:
    data = self.system.read(self._cfg(), size, off)
    if len(data) != size: raise PermissionProblem(f"{self.bus}: config space read at {off:#x} returned {len(data)} bytes (reading beyond 64 bytes needs root)")
    return int.from_bytes(data, "little")

  def config_write(self, off: int, value: int, size: int = 4) -> None:
    self.system.write(self._cfg(), value.to_bytes(size, "little"), off)

  def enable_bus_master(self) -> None:
    cmd = self.config_read(PCI_COMMAND, 2)
    self.config_write(PCI_COMMAND, cmd | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER, 2)

  def resources(self) -> list[tuple[int, int, int]]:
    """(start, end, flags) per BAR from the sysfs `resource` file."""
    lines = self.system.read_text(f"{self.path}/resource").splitlines()
    return [tuple(int(x, 16) for x in ln.split()[:3]) for ln in lines if ln.strip()]  # type: ignore[misc]

  def bar_size(self, n: int) -> int:
    start, end, _ = self.resources()[n]
    return 0 if end == 0 else end - start + 1

  def map_bar(self, n: int, offset: int = 0, size: int | None = None) -> MMIO:
    full = self.bar_size(n)
    size = full - offset if size is None else size
    if full == 0 or offset + size > full: raise RawGPUError(f"{self.bus}: BAR{n} is {full:#x} bytes, cannot map {offset:#x}+{size:#x}")
    fd = self.system.open(f"{self.path}/resource{n}", os.O_RDWR | os.O_SYNC)
    try: return self.system.mmap(fd, size, offset)
    finally: self.system.close(fd)

  def unbind(self) -> None:
    if self.info.driver: self.system.write_text(f"{self.path}/driver/unbind", self.bus)

  def reset(self) -> None:
    self.system.write_text(f"{self.path}/reset", "1")

  def alloc_host(self, size: int) -> HostMem:
    mem = self.system.alloc_host(size)
    return HostMem(mem, self.system.bus_addresses(mem))

  def close(self) -> None:
    if self._cfg_fd is not None: self.system.close(self._cfg_fd); self._cfg_fd = None
    if self.lock: self.lock.release()
