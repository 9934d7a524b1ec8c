"""A virtual PCI bus: emulated boards appear in a System's sysfs tree, and emulated host RAM backs DMA.

The driver sees only what Linux shows for a real board (vendor/device/class files, config, resource, resourceN,
resourceN_wc) and reaches the board only through config space, BAR mappings and the bus addresses of host pages it
allocated.
"""
from __future__ import annotations
import atexit, bisect, ctypes, mmap, os, shutil, tempfile, threading, weakref
from dataclasses import dataclass, field
from typing import Callable, Protocol
from rawgpu.drivers.mmio import HookMMIO, MMIO, MemMMIO
from rawgpu.drivers.system import PAGE, System, map_file, zero_pages

SYSFS_PCI = "/sys/bus/pci/devices"
PCI_COMMAND, PCI_COMMAND_MEMORY = 0x04, 0x02   # include/uapi/linux/pci_regs.h


class BusError(Exception):
  """A DMA to a bus address nobody backs (a master abort). Boards catch it and report it their own way."""
  def __init__(self, addr: int, size: int): super().__init__(f"master abort at bus address {addr:#x}+{size:#x}"); self.addr = addr


@dataclass
class Bar:
  size: int
  mem: memoryview | None = None                               # memory-backed BAR (VRAM): plain shared memory
  fd: int | None = None                                       # ... whose bytes are this file's from offset 0 (a memfd):
                                                              # then each mmap maps the file, as Linux maps a BAR
  read: Callable[[int, int], int] | None = None               # register BAR: read(offset, width)
  write: Callable[[int, int, int], None] | None = None        # register BAR: write(offset, width, value)
  prefetch: bool = False
  is64: bool = True


class Board(Protocol):
  """What the bus needs from an emulated PCI function."""
  vendor: int
  device: int
  cls: int
  bars: dict[int, Bar]
  def config_read(self, off: int, size: int) -> int: ...
  def config_write(self, off: int, size: int, value: int) -> None: ...
  def reset(self) -> None: ...


class HostRAM:
  """Emulated host RAM: anonymous mappings for DMA come from here, with made-up but stable physical addresses.

  The RAM is a memfd: the bus reaches all of it through one mapping (`mem`), and each allocation is a mapping of its
  own, as each of a process's anonymous mappings is on Linux, so that free can take it away (zero pages stay where a
  Python view outlives it: a stale view never reaches the memory's next owner)."""
  PHYS_BASE = 0x1_0000_0000  # above 4 GiB, like most of a real machine's RAM

  def __init__(self, size: int = 1 << 30):
    self.size = size
    self.fd = os.memfd_create("hostram", os.MFD_CLOEXEC)
    weakref.finalize(self, os.close, self.fd)
    os.ftruncate(self.fd, size)
    self.buf = mmap.mmap(self.fd, size, mmap.MAP_SHARED)
    self.mem = memoryview(self.buf)
    self.vbase = ctypes.addressof(ctypes.c_char.from_buffer(self.buf))
    self.lock, self.next, self.free_list = threading.Lock(), 0, []
    self.maps: list[tuple[int, int, int]] = []   # (CPU address, RAM offset, size) of the live mappings, by address
    self.live: dict[int, MemMMIO] = {}           # CPU address -> that mapping, held until unmap: garbage collection must not
                                                 # unmap it first (its addresses could then go to another mapping)
    self._last = (0, 0, 0)                       # the one _lookup found last
    self.peer: Callable[[int, int], memoryview | None] | None = None   # the bus's routing to boards' BARs (VirtualBus)

  def alloc(self, size: int, align: int = PAGE) -> MemMMIO:
    """`size` bytes, physically contiguous; `align` (a power of two) aligns the physical start like a hugepage."""
    size = (size + PAGE - 1) & ~(PAGE - 1)
    with self.lock:
      for i, (off, sz) in enumerate(self.free_list):
        if sz >= size and off % align == 0:
          self.free_list[i:i + 1] = [(off + size, sz - size)] if sz > size else []
          break
      else:
        start = (self.next + align - 1) & ~(align - 1)
        if start + size > self.size: raise MemoryError(f"emulated host RAM exhausted ({self.size >> 20} MiB)")
        if start > self.next: self.free_list.append((self.next, start - self.next))
        off, self.next = start, start + size
    self.mem[off:off + size] = bytes(size)
    return self._map(off, size)

  def alias(self, m: MemMMIO) -> MemMMIO:
    """Another mapping of the RAM an allocation maps (a second mmap of the same pages, as a driver hands a process)."""
    return self._map(self._offset(m), m.size)

  def free(self, m: MemMMIO) -> None:
    """Give back an allocation: its mapping becomes zero pages and its RAM may be handed out again."""
    off = self.unmap(m)
    with self.lock: self.free_list.append((off, m.size))

  def unmap(self, m: MemMMIO) -> int:
    """End a mapping alloc or alias made, given it or a view from its start (zero pages take its place); returns its
    RAM offset."""
    with self.lock:
      entry = next((e for e in self.maps if e[0] == m.addr), None)
      if entry is None: raise ValueError(f"{m.addr:#x} is not the start of a mapping of emulated host RAM")
      self.maps.remove(entry)
      self._last = (0, 0, 0)
      mapping = self.live.pop(entry[0])
    zero_pages(entry[0], entry[2])
    del mapping   # views of it keep the zero pages; the last one unmaps them
    return entry[1]

  def _map(self, off: int, size: int) -> MemMMIO:
    m = map_file(self.fd, size, off)
    with self.lock:
      bisect.insort(self.maps, (m.addr, off, size))
      self.live[m.addr] = m   # type: ignore[index]
    return m

  def _offset(self, m: MemMMIO) -> int:
    assert m.addr is not None
    if (off := self._lookup(m.addr)) is None: raise ValueError(f"{m.addr:#x} is not a mapping of emulated host RAM")
    return off

  def _lookup(self, vaddr: int) -> int | None:
    """The RAM offset a CPU address of a live mapping reaches, or None."""
    addr, off, size = self._last   # pagemap asks page by page: most asks fall in the mapping found last
    if addr <= vaddr < addr + size: return off + vaddr - addr
    with self.lock:
      i = bisect.bisect_right(self.maps, (vaddr, 1 << 64, 0)) - 1
      if i < 0 or not (e := self.maps[i])[0] <= vaddr < e[0] + e[2]: return None
      self._last = e
    return e[1] + vaddr - e[0]

  @property
  def free_bytes(self) -> int:
    with self.lock: return self.size - self.next + sum(sz for _, sz in self.free_list)

  def phys(self, vaddr: int) -> int | None:
    off = vaddr - self.vbase
    if not 0 <= off < self.size: off = self._lookup(vaddr)   # type: ignore[assignment]
    return None if off is None else self.PHYS_BASE + off

  # the device side: bus addresses
  def dma(self, addr: int, size: int) -> memoryview:
    """What a bus master reaches at [addr, addr+size): host RAM, or a peer's memory BAR (a PCIe peer-to-peer
    transaction the bus routes by address), else a master abort."""
    off = addr - self.PHYS_BASE
    if size < 0: raise BusError(addr, size)
    if 0 <= off and off + size <= self.size: return self.mem[off:off + size]
    if self.peer is not None and (m := self.peer(addr, size)) is not None: return m
    raise BusError(addr, size)


class _ConfigFile:
  def __init__(self, board: Board): self.board = board
  def read(self, n: int, offset: int) -> bytes:
    n = max(0, min(n, 4096 - offset))
    return bytes(self.board.config_read(offset + i, 1) for i in range(n))
  def write(self, data: bytes, offset: int) -> int:
    for i, b in enumerate(data): self.board.config_write(offset + i, 1, b)
    return len(data)
  def ioctl(self, request: int, buf) -> int: raise OSError(25, "Inappropriate ioctl for device")
  def mmap(self, size: int, offset: int) -> MMIO: raise OSError(19, "config space cannot be mapped")
  def close(self) -> None: pass


class _TextFile:
  def __init__(self, text: str = "", on_write: Callable[[str], None] | None = None): self.text, self.on_write = text, on_write
  def read(self, n: int, offset: int) -> bytes: return self.text.encode()[offset:offset + n]
  def write(self, data: bytes, offset: int) -> int:
    if self.on_write is None: raise PermissionError(13, "read-only sysfs attribute")
    self.on_write(data.decode())
    return len(data)
  def ioctl(self, request: int, buf) -> int: raise OSError(25, "Inappropriate ioctl for device")
  def mmap(self, size: int, offset: int) -> MMIO: raise OSError(19, "not mappable")
  def close(self) -> None: pass


class _ResourceFile(_TextFile):
  def __init__(self, bar: Bar): super().__init__(); self.bar = bar
  def mmap(self, size: int, offset: int) -> MMIO:
    if offset + size > self.bar.size: raise OSError(22, "mapping beyond the BAR")
    if self.bar.fd is not None: return map_file(self.bar.fd, size, offset)   # a mapping of its own, which munmap takes away
    if self.bar.mem is not None: return MemMMIO(self.bar.mem[offset:offset + size])
    assert self.bar.read and self.bar.write
    return HookMMIO(size, self.bar.read, self.bar.write, offset)

  def munmap(self, m: MMIO) -> None:
    """As Linux unmaps a BAR mapping: where it was, a view left over reads zeros and writes go nowhere."""
    if self.bar.fd is not None: zero_pages(m.addr, m.size)   # type: ignore[attr-defined]


class BoardSysfs:
  """The sysfs directory of one emulated board (a Provider for System.mount)."""
  BAR_BASE = 0xf000_0000_0000

  def __init__(self, board: Board, index: int):
    self.board, self.index = board, index

  def bar_ranges(self) -> dict[int, tuple[int, Bar]]:
    """BAR number -> (bus address, Bar): the addresses the bus assigned (they follow a resized BAR)."""
    out, base = {}, self.BAR_BASE + (self.index << 36)
    for n in range(7):
      if (bar := self.board.bars.get(n)) is None: continue
      out[n] = (base, bar)
      base += max(bar.size, 1 << 20)
    return out

  def _resource_text(self) -> str:
    lines, ranges = [], self.bar_ranges()
    for n in range(7):
      if n not in ranges: lines.append("0x0000000000000000 0x0000000000000000 0x0000000000000000"); continue
      base, bar = ranges[n]
      flags = 0x200 | (0x2000 if bar.prefetch else 0) | (0x100000 if bar.is64 else 0)  # IORESOURCE_MEM | PREFETCH | MEM_64
      lines.append(f"{base:#018x} {base + bar.size - 1:#018x} {flags:#018x}")
    return "\n".join(lines) + "\n"

  def _files(self) -> dict[str, Callable[[], object]]:
    b = self.board
    files: dict[str, Callable[[], object]] = {
      "vendor": lambda: _TextFile(f"{b.vendor:#06x}\n"), "device": lambda: _TextFile(f"{b.device:#06x}\n"),
      "class": lambda: _TextFile(f"{b.cls:#08x}\n"), "config": lambda: _ConfigFile(b),
      "resource": lambda: _TextFile(self._resource_text()), "reset": lambda: _TextFile("", lambda _t: b.reset()),
    }
    for n, bar in b.bars.items():
      files[f"resource{n}"] = (lambda bar=bar: _ResourceFile(bar))
      if bar.prefetch: files[f"resource{n}_wc"] = files[f"resource{n}"]   # Linux: prefetchable BARs only; no WC buffers here to model
    return files

  def open(self, rel: str, flags: int):
    f = self._files().get(rel)
    if f is None: raise FileNotFoundError(2, f"No such file: {rel}")
    return f()

  def listdir(self, rel: str) -> list[str]:
    if rel: raise NotADirectoryError(20, rel)
    return list(self._files())

  def readlink(self, rel: str) -> str: raise OSError(22, "not a link")  # no kernel driver is bound
  def exists(self, rel: str) -> bool: return rel == "" or rel in self._files()


def check_same_process(pid: int, what: str) -> None:
  """Emulated hardware lives in the memory and threads of the process that made it: a forked child has a copy of
  its memory without the threads that run it, so the copy must not be used as hardware."""
  if os.getpid() != pid:
    from rawgpu.errors import DeviceNotFound
    raise DeviceNotFound(f"{what} lives in process {pid}, of which this process ({os.getpid()}) is a forked child: the child has a "
                         "copy of its memory but not the emulator running it. Open DEV=MOCKPCI+AMD or DEV=MOCKKFD+AMD in the child: "
                         "it gets emulated boards of its own")


class DevicesDir:
  """/sys/bus/pci/devices of the virtual bus: only its own boards, nothing of the real machine."""
  def __init__(self, boards: dict[str, BoardSysfs]): self.boards, self.pid = boards, os.getpid()

  def _split(self, rel: str) -> tuple[BoardSysfs, str]:
    bus, _, rest = rel.partition("/")
    if bus in self.boards: check_same_process(self.pid, f"the emulated board {bus}")
    if bus not in self.boards: raise FileNotFoundError(2, f"No such device: {bus}")
    return self.boards[bus], rest

  def open(self, rel: str, flags: int):
    b, rest = self._split(rel)
    return b.open(rest, flags)

  def listdir(self, rel: str) -> list[str]:
    if not rel: return list(self.boards)
    b, rest = self._split(rel)
    return b.listdir(rest)

  def readlink(self, rel: str) -> str:
    b, rest = self._split(rel)
    return b.readlink(rest)

  def exists(self, rel: str) -> bool:
    if not rel: return True
    bus, _, rest = rel.partition("/")
    return bus in self.boards and self.boards[bus].exists(rest)


def _remove_lock_dir(path: str, pid: int) -> None:
  if os.getpid() == pid: shutil.rmtree(path, True)   # a forked child that exits leaves its parent's locks alone


@dataclass
class VirtualBus:
  """A System with boards plugged in at distinct bus addresses, and the emulated host RAM they DMA to."""
  host: HostRAM = field(default_factory=HostRAM)
  system: System = field(default_factory=System)
  boards: dict[str, Board] = field(default_factory=dict)

  def __post_init__(self):
    self.system.host_memory = self.host
    # the boards live in this process: their owner locks must not collide with another process's virtual boards
    self.system.lock_dir = tempfile.mkdtemp(prefix=f"rawgpu-mockpci-{os.getpid()}-")
    atexit.register(_remove_lock_dir, self.system.lock_dir, os.getpid())
    self._dirs: dict[str, BoardSysfs] = {}
    self.host.peer = self._peer_dma
    self.system.mount(SYSFS_PCI, DevicesDir(self._dirs))

  def plug(self, board: Board) -> str:
    """Plug a board in at the next free bus address (0000:c1:00.0, 0000:c2:00.0, ...) and return that address."""
    n = next(i for i in range(len(self.boards) + 1) if f"0000:{0xc1 + i:02x}:00.0" not in self.boards)  # a slot freed by unplug is reused
    bus = f"0000:{0xc1 + n:02x}:00.0"
    self.boards[bus], self._dirs[bus] = board, BoardSysfs(board, n)
    return bus

  def _peer_dma(self, addr: int, size: int) -> memoryview | None:
    """Route a DMA to the memory BAR of the board whose bus address range holds it (a PCIe peer-to-peer request);
    claimed only while that board decodes memory space (PCI_COMMAND bit 1), like a real endpoint."""
    for bus, sysfs in list(self._dirs.items()):
      if not sysfs.BAR_BASE + (sysfs.index << 36) <= addr < sysfs.BAR_BASE + ((sysfs.index + 1) << 36): continue
      for base, bar in sysfs.bar_ranges().values():
        if base <= addr and addr + size <= base + bar.size and bar.mem is not None:
          if not sysfs.board.config_read(PCI_COMMAND, 1) & PCI_COMMAND_MEMORY: return None
          return bar.mem[addr - base:addr - base + size]
      return None
    return None

  def unplug(self, bus: str) -> None:
    """Surprise removal: the sysfs entry disappears; mappings the driver holds stay but the board decides what they read.
    Peer DMA to its BARs master-aborts from now on."""
    self.boards.pop(bus); self._dirs.pop(bus)
