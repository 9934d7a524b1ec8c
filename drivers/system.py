"""The OS seam: every file, ioctl, mmap, sysfs, flock and pagemap access of the drivers goes through one object.

Emulated devices plug in by mounting a provider at a path prefix (a sysfs device directory, a device node); the
provider answers for every path below it. Nothing else is patched. `System()` alone is the real operating system.
"""
from __future__ import annotations
import ctypes, fcntl, mmap, os, select, struct, weakref
from typing import Protocol
from rawgpu.drivers.mmio import MMIO, MemMMIO
from rawgpu.errors import PermissionProblem, RawGPUError

PAGE = 4096
HUGE_PAGE = 2 << 20
MAP_HUGETLB = getattr(mmap, "MAP_HUGETLB", 0x40000)  # asm-generic/mman-common.h (x86, arm64)
MAP_FIXED = 0x10                                      # asm-generic/mman-common.h
_libc = None


def _c():
  global _libc
  if _libc is None: _libc = ctypes.CDLL(None, use_errno=True)
  return _libc


class VFile(Protocol):
  """An open file of an emulated provider."""
  def read(self, n: int, offset: int) -> bytes: ...
  def write(self, data: bytes, offset: int) -> int: ...
  def ioctl(self, request: int, buf) -> int: ...
  def mmap(self, size: int, offset: int) -> MMIO: ...
  def close(self) -> None: ...
  # optional: `munmap(m)` where a mapping holds something (a BO) that System.munmap must give back


class Provider(Protocol):
  """Answers for every path below its mount point; `rel` is the path relative to it ('' for the mount point)."""
  def open(self, rel: str, flags: int) -> VFile: ...
  def listdir(self, rel: str) -> list[str]: ...
  def readlink(self, rel: str) -> str: ...
  def exists(self, rel: str) -> bool: ...


class HostMemory(Protocol):
  """Where anonymous mappings come from and what /proc/self/pagemap reports for them (emulated host RAM)."""
  def alloc(self, size: int) -> MemMMIO: ...
  def free(self, mem: MemMMIO) -> None: ...
  def phys(self, vaddr: int) -> int | None: ...


class System:
  _VFD_BASE = 1 << 24  # emulated fds never collide with real ones

  def __init__(self):
    self.mounts: dict[str, Provider] = {}
    self.vfds: dict[int, VFile] = {}
    self._vmaps: weakref.WeakKeyDictionary[MMIO, VFile] = weakref.WeakKeyDictionary()   # emulated mapping -> its file
    self.host_memory: HostMemory | None = None
    self.lock_dir: str | None = None  # where device owner locks live (None: the system temp dir)

  # ---- mounts
  def mount(self, prefix: str, provider: Provider) -> None:
    self.mounts[prefix.rstrip("/")] = provider

  def unmount(self, prefix: str) -> None:
    self.mounts.pop(prefix.rstrip("/"), None)

  def _route(self, path: str) -> tuple[Provider, str] | None:
    path = os.path.normpath(path)
    for prefix, prov in self.mounts.items():
      if path == prefix or path.startswith(prefix + "/"): return prov, path[len(prefix) + 1:]
    return None

  # ---- files
  def open(self, path: str, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    if (r := self._route(path)) is not None:
      fd = self._VFD_BASE + len(self.vfds)
      while fd in self.vfds: fd += 1
      self.vfds[fd] = r[0].open(r[1], flags)
      return fd
    try: return os.open(path, flags | os.O_CLOEXEC, mode)
    except PermissionError as e: raise PermissionProblem(f"cannot open {path}: permission denied (run as root or grant access to it)") from e

  def close(self, fd: int) -> None:
    if (vf := self.vfds.pop(fd, None)) is not None: vf.close()
    else: os.close(fd)

  def read(self, fd: int, n: int, offset: int = 0) -> bytes:
    if (vf := self.vfds.get(fd)) is not None: return vf.read(n, offset)
    return os.pread(fd, n, offset)

  def write(self, fd: int, data: bytes, offset: int = 0) -> int:
    if (vf := self.vfds.get(fd)) is not None: return vf.write(bytes(data), offset)
    return os.pwrite(fd, data, offset)

  def ioctl(self, fd: int, request: int, buf) -> int:
    if (vf := self.vfds.get(fd)) is not None: return vf.ioctl(request, buf)
    return fcntl.ioctl(fd, request, buf, True)

  def mmap(self, fd: int, size: int, offset: int = 0) -> MMIO:
    if (vf := self.vfds.get(fd)) is not None:
      m = vf.mmap(size, offset)
      self._vmaps[m] = vf
      return m
    if offset >= 1 << 63: return _mmap_signed_offset(fd, size, offset)
    return map_file(fd, size, offset)

  def munmap(self, m: MMIO) -> None:
    """End a mapping `mmap` made, so the file stops holding what it maps (amdgpu keeps a freed BO's memory while a
    CPU mapping of it lives). Python views of it may outlive this call: the range becomes private zero pages rather
    than going away, so a stale view reads zeros, never memory handed out again, and never faults; the pages go
    when the last view does."""
    if (vf := self._vmaps.pop(m, None)) is not None:
      if (unmap := getattr(vf, "munmap", None)) is not None: unmap(m)
      return
    if not isinstance(m, MemMMIO) or m.addr is None: raise RawGPUError("munmap of a view that System.mmap did not make")
    zero_pages(m.addr, m.size)

  def flock(self, fd: int, exclusive: bool = True, blocking: bool = False) -> None:
    if (vf := self.vfds.get(fd)) is not None:
      if isinstance(vf, _RealFile): fd = vf.fd
      else: return  # emulated files are private to this process
    fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if blocking else fcntl.LOCK_NB))

  def truncate(self, fd: int, size: int) -> None:
    if (vf := self.vfds.get(fd)) is not None: vf.write(b"", size)  # an empty write at `size` means truncate
    else: os.ftruncate(fd, size)

  def eventfd(self, initval: int = 0, flags: int = 0) -> int:
    return os.eventfd(initval, flags | os.EFD_CLOEXEC)

  def eventfd_wait(self, fd: int, timeout: float | None) -> int:
    """Wait up to `timeout` seconds (None: forever) for an eventfd; its counter (then reset to 0), or 0 on timeout."""
    p = select.poll()
    p.register(fd, select.POLLIN)
    if not p.poll(None if timeout is None else max(0, int(timeout * 1000))): return 0
    return os.eventfd_read(fd)

  # ---- paths and sysfs
  def listdir(self, path: str) -> list[str]:
    if (r := self._route(path)) is not None: return sorted(r[0].listdir(r[1]))
    norm = os.path.normpath(path)
    extra = [p[len(norm) + 1:].split("/")[0] for p in self.mounts if p.startswith(norm + "/")]
    try: real = os.listdir(path)
    except FileNotFoundError:
      if not extra: raise
      real = []
    return sorted(set(real) | set(extra))

  def exists(self, path: str) -> bool:
    if (r := self._route(path)) is not None: return r[0].exists(r[1])
    norm = os.path.normpath(path)
    return os.path.exists(path) or any(p.startswith(norm + "/") for p in self.mounts)

  def readlink(self, path: str) -> str:
    if (r := self._route(path)) is not None: return r[0].readlink(r[1])
    return os.readlink(path)

  def read_text(self, path: str) -> str:
    fd = self.open(path, os.O_RDONLY)
    try: return self.read(fd, 1 << 16).decode()
    finally: self.close(fd)

  def write_text(self, path: str, text: str) -> None:
    fd = self.open(path, os.O_WRONLY)
    try: self.write(fd, text.encode())
    finally: self.close(fd)

  # ---- host memory for DMA
  def alloc_host(self, size: int) -> MemMMIO:
    """Page-aligned, locked anonymous memory the device may reach by bus address (see `bus_addresses`)."""
    size = (size + PAGE - 1) & ~(PAGE - 1)
    if self.host_memory is not None: return self.host_memory.alloc(size)
    m = mmap.mmap(-1, size, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS, mmap.PROT_READ | mmap.PROT_WRITE)
    mem = MemMMIO(m, ctypes.addressof(ctypes.c_char.from_buffer(m)))
    if _c().mlock(ctypes.c_void_p(mem.addr), ctypes.c_size_t(size)) != 0:
      raise PermissionProblem(f"mlock of {size} bytes failed ({os.strerror(ctypes.get_errno())}): run as root or raise RLIMIT_MEMLOCK (ulimit -l)")
    return mem

  def alloc_host_huge(self, size: int) -> MemMMIO:
    """Locked memory from 2 MiB hugepages (MAP_HUGETLB): each hugepage is physically contiguous.
    OSError(ENOMEM) when the kernel has no free hugepages reserved."""
    size = (size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)
    if self.host_memory is not None: return self.host_memory.alloc(size, align=HUGE_PAGE)  # type: ignore[call-arg]
    m = mmap.mmap(-1, size, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS | MAP_HUGETLB, mmap.PROT_READ | mmap.PROT_WRITE)
    mem = MemMMIO(m, ctypes.addressof(ctypes.c_char.from_buffer(m)))
    if _c().mlock(ctypes.c_void_p(mem.addr), ctypes.c_size_t(size)) != 0:
      raise PermissionProblem(f"mlock of {size} bytes failed ({os.strerror(ctypes.get_errno())}): run as root or raise RLIMIT_MEMLOCK (ulimit -l)")
    return mem

  def free_host(self, mem: MemMMIO) -> None:
    if self.host_memory is not None: self.host_memory.free(mem)

  def bus_addresses(self, mem: MemMMIO) -> list[int]:
    """Physical (bus) address of each page of `mem`, from /proc/self/pagemap."""
    assert mem.addr is not None and mem.addr % PAGE == 0
    npages = (mem.size + PAGE - 1) // PAGE
    if self.host_memory is not None:
      out = [self.host_memory.phys(mem.addr + i * PAGE) for i in range(npages)]
      if None in out: raise RawGPUError("memory is not emulated host RAM: the emulated device cannot reach it")
      return out  # type: ignore[return-value]
    fd = self.open("/proc/self/pagemap", os.O_RDONLY)
    try: raw = self.read(fd, 8 * npages, (mem.addr // PAGE) * 8)
    finally: self.close(fd)
    addrs = []
    for (entry,) in struct.iter_unpack("<Q", raw):
      if not entry >> 63: raise RawGPUError("pagemap: a page is not present (was the memory locked?)")
      pfn = entry & ((1 << 55) - 1)
      if pfn == 0: raise PermissionProblem("pagemap hides physical addresses: reading them needs root (CAP_SYS_ADMIN)")
      addrs.append(pfn * PAGE)
    return addrs


def _mmap_signed_offset(fd: int, size: int, offset: int) -> MemMMIO:
  """mmap with an offset of 2^63 or more (KFD encodes doorbell and MMIO pages there): Python's mmap refuses those,
  the kernel takes the 64-bit value as off_t."""
  addr = _libc_mmap(None, size, mmap.MAP_SHARED, fd, offset - (1 << 64))
  buf = (ctypes.c_char * size).from_address(addr)
  # as Python's mmap does: the range (or the zero pages System.munmap left there) goes with the last view of it
  weakref.finalize(buf, _libc_munmap, addr, size)
  return MemMMIO(buf, addr)


def map_file(fd: int, size: int, offset: int) -> MemMMIO:
  """A shared read-write mapping of `size` bytes of a file from `offset`, with its address."""
  m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
  return MemMMIO(m, ctypes.addressof(ctypes.c_char.from_buffer(m)))


def zero_pages(addr: int, size: int) -> None:
  """Put private zero pages where a mapping was (System.munmap): Python views of it read zeros from now on."""
  _libc_mmap(addr, size, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_FIXED | getattr(mmap, "MAP_NORESERVE", 0), -1, 0)


def _libc_munmap(addr: int, size: int) -> None:
  libc = _c()
  libc.munmap.restype, libc.munmap.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]
  libc.munmap(addr, size)


def _libc_mmap(addr: int | None, size: int, flags: int, fd: int, offset: int) -> int:
  """libc's mmap (read-write), for what Python's mmap cannot do: 64-bit offsets, MAP_FIXED."""
  libc = _c()
  libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
  got = libc.mmap(addr, size, mmap.PROT_READ | mmap.PROT_WRITE, flags, fd, offset)
  if got in (None, ctypes.c_void_p(-1).value) or (addr is not None and got != addr):
    raise OSError(ctypes.get_errno(), f"mmap of {size:#x} bytes (fd {fd}, offset {offset & ((1 << 64) - 1):#x}) failed: {os.strerror(ctypes.get_errno())}")
  return got


class DirProvider:
  """Serves a real directory at a mount point: fake sysfs or /proc trees for tests and tools."""
  def __init__(self, root: str): self.root = root

  def _p(self, rel: str) -> str:
    path = os.path.normpath(os.path.join(self.root, rel))
    if path != self.root and not path.startswith(self.root.rstrip("/") + "/"): raise PermissionError(13, f"{rel} escapes {self.root}")
    return path

  def open(self, rel: str, flags: int) -> VFile: return _RealFile(os.open(self._p(rel), flags | os.O_CLOEXEC))
  def listdir(self, rel: str) -> list[str]: return os.listdir(self._p(rel))
  def readlink(self, rel: str) -> str: return os.readlink(self._p(rel))
  def exists(self, rel: str) -> bool: return os.path.lexists(self._p(rel))


class _RealFile:
  def __init__(self, fd: int): self.fd = fd
  def read(self, n: int, offset: int) -> bytes: return os.pread(self.fd, n, offset)
  def write(self, data: bytes, offset: int) -> int:
    if not data: os.ftruncate(self.fd, offset); return 0
    return os.pwrite(self.fd, data, offset)
  def ioctl(self, request: int, buf) -> int: return fcntl.ioctl(self.fd, request, buf, True)
  def mmap(self, size: int, offset: int) -> MMIO: return map_file(self.fd, size, offset)
  def close(self) -> None: os.close(self.fd)


SYSTEM = System()  # the real operating system; emulated devices get a System of their own

__all__ = ["System", "SYSTEM", "Provider", "VFile", "HostMemory", "PAGE", "HUGE_PAGE"]
