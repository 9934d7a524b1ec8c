"""The small surface every interface (PCI/AM, KFD, USB and their MOCK twins) offers to hcq.

hcq never knows which interface it has: it allocates GPU memory, creates hardware rings and waits, through this.
"""
from __future__ import annotations
import platform
from dataclasses import dataclass, field
from typing import Callable, Literal, Protocol
from rawgpu.drivers.mmio import MMIO


@dataclass
class DeviceProps:
  vendor: str                          # "AMD" / "NV"
  arch: str                            # "gfx1100", "gfx1201", ...
  iface: str                           # "PCI", "MOCKPCI", "KFD", ...
  target: str = ""                     # LLVM target ID code objects must match: arch plus the xnack/sramecc modes the
                                       # device runs where it has them and they are known ("gfx942:sramecc+:xnack-")
  name: str = ""                       # marketing name where known, e.g. "Radeon RX 7900 XTX"
  pci_bus: str | None = None
  compute_units: int = 0
  simd_per_cu: int = 2
  shader_engines: int = 1              # per XCC: gfx11+'s COMPUTE_TMPRING_SIZE.WAVES counts scratch waves per shader engine
  wave_size: int = 32                  # default wave size kernels are built for on this arch
  lds_size: int = 64 << 10             # bytes per workgroup
  vram_size: int = 0
  bar_size: int = 0                    # CPU-visible VRAM (large-BAR boards: == vram_size)
  vram_write_combined: bool = False    # the CPU's VRAM views are write-combined (or cached), not uncached: CPU copies stream
  vram_uncached_why: str = ""          # where they are uncached, why
  ip_versions: dict[str, tuple[int, int, int]] = field(default_factory=dict)   # "gc", "sdma", "mmhub", ...
  ip_bases: dict[str, tuple[int, ...]] = field(default_factory=dict)          # register segment bases (dwords) per IP, instance 0
  emulated: bool = False
  apu: bool = False                    # the GPU shares the CPU's memory (KFD: a node with CPU cores and SIMDs)
  xcc: int | None = None               # MI300 in CPX mode (AM, or KFD's partition nodes): the XCC this device is; None: the whole board


def hdp_bypassed(p: DeviceProps) -> bool:
  """An APU on x86-64: the CPU reaches the GPU's memory as its own, not through the HDP, and amdgpu flushes no HDP
  there, in rings or from the CPU (amdgpu_device_flush_hdp); NBIO 7.7 (Phoenix) has no flush registers in rawgpu's
  tables, and NBIO 7.11 (Strix) flushes through PF1's."""
  return p.apu and platform.machine() in ("x86_64", "AMD64")


@dataclass
class Mem:
  """GPU memory: a GPU virtual address, and a CPU view where the CPU can reach it."""
  va: int
  size: int
  cpu: MMIO | None                     # None when not CPU-visible (small-BAR VRAM beyond the BAR)
  host: bool = False                   # system memory (GTT) rather than VRAM
  uncached: bool = False
  meta: object = None                  # interface-private (physical pages, handles)


@dataclass
class HWRing:
  """A hardware ring the interface created. hcq writes packets, then the write pointer, then rings the doorbell."""
  kind: Literal["compute", "sdma"]
  ring: Mem                            # the ring buffer (CPU-visible)
  write_ptr: memoryview                # 1-element 'Q' view the engine reads (compute: dwords, sdma: bytes)
  read_ptr: memoryview                 # 1-element 'Q' view the engine writes (same unit)
  doorbell: object                     # 1-element 'Q' index view (memoryview or HookArray): doorbell[0] = wptr
  wptr_unit: int                       # bytes per write-pointer step: 4 (dwords) or 1 (bytes)
  before_doorbell: Callable[[], None] | None = None   # e.g. HDP flush on PCI, so the engine sees the CPU's writes
  name: str = ""


class Iface(Protocol):
  props: DeviceProps
  def alloc(self, size: int, *, host: bool = False, uncached: bool = False, cpu_access: bool = True, contiguous: bool = False) -> Mem: ...
  def free(self, mem: Mem) -> None: ...
  def cpu_view(self, mem: Mem) -> MMIO | None: ...   # the CPU view of mem users get (None: not CPU-visible); it may differ from mem.cpu
  def create_ring(self, kind: Literal["compute", "sdma"], size: int) -> HWRing: ...
  def sleep(self, timeout_ms: float) -> None: ...    # wait for an interrupt (or up to timeout_ms); raises DeviceFault on a fault
  def check_faults(self) -> None: ...                # raise DeviceFault for a pending page fault / shader error
  def flush_hdp(self) -> bool: ...                   # make CPU writes to VRAM through the BAR visible to the engines; False: no way to here
  read_fence: Callable[[], None]                     # orders the CPU's later VRAM reads after a read that said they are ready (cpufence)
  write_fence: Callable[[], None]                    # makes the CPU's VRAM writes visible before its later stores (a signal)
  def close(self) -> None: ...


class PeerMaps:
  """Memory of one device mapped into another's page tables at the same VA (hcq's Device.map), kept on both
  sides so that neither keeps a mapping of memory that is going away. An interface subclasses it and provides
  _map_peer (returns what _unmap_peer needs) and _unmap_peer; it calls _forget_peers when it frees memory or closes."""
  closed: bool

  def _init_peers(self) -> None:
    self.peer_maps: dict[int, tuple[Mem, object, "PeerMaps"]] = {}   # va -> another device's memory mapped here
    self.mapped_into: dict[int, list["PeerMaps"]] = {}              # va -> devices this one's memory is mapped into

  def _map_peer(self, mem: Mem, owner) -> object: raise NotImplementedError
  def _unmap_peer(self, mem: Mem, token: object) -> None: raise NotImplementedError

  def map_peer(self, mem: Mem, owner) -> None:
    """Map `mem` of `owner` (another device of the same interface) here, at its own VA. Idempotent."""
    if owner is self or mem.va in self.peer_maps: return
    self.peer_maps[mem.va] = (mem, self._map_peer(mem, owner), owner)
    owner.mapped_into.setdefault(mem.va, []).append(self)

  def unmap_peer(self, mem: Mem) -> None:
    """Drop the mapping map_peer made (no-op when there is none)."""
    if (ent := self.peer_maps.pop(mem.va, None)) is None: return
    _mem, token, owner = ent
    self._unmap_peer(mem, token)
    if (lst := owner.mapped_into.get(mem.va)) and self in lst: lst.remove(self)

  def maps_peer(self, mem: Mem) -> bool: return mem.va in self.peer_maps and self.peer_maps[mem.va][0] is mem

  def _forget_peers(self, mem: Mem | None = None) -> None:
    """Before `mem` is freed (None: before this device closes): every peer drops its mapping of it (of all this
    device's memory), and on close this device drops its mappings of peers' memory."""
    vas = [mem.va] if mem is not None else list(self.mapped_into)
    for va in vas:
      for peer in self.mapped_into.pop(va, []):
        if not peer.closed and va in peer.peer_maps: peer.unmap_peer(peer.peer_maps[va][0])
    if mem is None:
      for m, _token, _owner in list(self.peer_maps.values()): self.unmap_peer(m)
