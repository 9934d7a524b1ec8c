"""AMIface: drivers/iface.py's Iface over an AMDevice (what hcq sees of a board driven by AM)."""
from __future__ import annotations
import time
from typing import Literal
from rawgpu.drivers.am import mm
from rawgpu.drivers.am.device import AMDevice
from rawgpu.drivers.am.discovery import compute_units
from rawgpu.drivers.iface import DeviceProps, HWRing, Mem
from rawgpu.drivers.system import SYSTEM, System
from rawgpu.errors import RawGPUError

HUGE = 1 << 21


class AMIface:
  def __init__(self, bus: str, system: System = SYSTEM, **opts):
    self.dev = d = AMDevice(bus, system, **opts)
    self.closed = False
    self.rings: list[tuple[HWRing, object]] = []
    self.props = DeviceProps(vendor="AMD", arch=d.arch or "", iface="MOCKPCI" if system.host_memory is not None else "PCI",
                             name=d.board.name, pci_bus=bus, compute_units=compute_units(d.disc.gc_info),
                             wave_size=32, lds_size=64 << 10, vram_size=d.vram_size, bar_size=d.bar_size,
                             ip_versions={k: tuple(v) for k, v in d.ips.items()}, emulated=system.host_memory is not None,
                             ip_bases={n: d.disc.find(n).bases for n in ("gc", "mmhub", "osssys", "hdp", "nbif") if d.disc.has(n)})

  # ---- memory
  def alloc(self, size: int, *, host: bool = False, uncached: bool = False, cpu_access: bool = True, contiguous: bool = False) -> Mem:
    d = self.dev
    if size <= 0: raise RawGPUError(f"alloc of {size} bytes: the size must be positive")
    size = mm.round_up(size, HUGE if size >= HUGE else mm.PAGE)
    va = mm.VA.alloc(size, HUGE if size >= HUGE else mm.PAGE)
    try:
      if host:
        hm = d.pci.alloc_host(size)
        chunks: list[tuple[int, int]] = []
        for a in hm.bus_addrs:   # coalesce physically contiguous pages (huge pages when they line up)
          if chunks and chunks[-1][0] + chunks[-1][1] == a: chunks[-1] = (chunks[-1][0], chunks[-1][1] + mm.PAGE)
          else: chunks.append((a, mm.PAGE))
        m = d.pt.map(va, chunks, system=True, snooped=True, uncached=uncached)
        cpu, meta = hm.view, ("host", hm, m)
      else:
        paddr = d.valloc_phys(size, align=HUGE if size >= HUGE else mm.PAGE, cpu=cpu_access)
        m = d.pt.map(va, [(paddr + d.gmc.vram_base_offset, size)], uncached=uncached)
        cpu = d.vram_bar.view(paddr, size) if paddr + size <= d.bar_size else None
        meta = ("vram", paddr, m)
    except BaseException:
      mm.VA.free(va)
      raise
    d.gmc.flush_tlb()
    return Mem(va, size, cpu, host=host, uncached=uncached, meta=meta)

  def free(self, mem: Mem) -> None:
    kind, backing, m = mem.meta  # type: ignore[misc]
    self.dev.pt.unmap(m)
    self.dev.gmc.flush_tlb()
    if kind == "host": self.dev.system.free_host(backing.view)
    else: self.dev.pfree(backing)
    mm.VA.free(mem.va)

  def _ring_mem(self, paddr: int, size: int) -> Mem:
    d = self.dev
    va = mm.VA.alloc(size, max(mm.PAGE, min(size, HUGE)))
    m = d.pt.map(va, [(paddr + d.gmc.vram_base_offset, size)])
    d.gmc.flush_tlb()
    return Mem(va, size, d.vram_bar.view(paddr, size), meta=("ring", paddr, m))

  # ---- rings
  def create_ring(self, kind: Literal["compute", "sdma"], size: int) -> HWRing:
    d = self.dev
    if kind == "compute":
      q = d.gfx.new_queue(size)
      ring, wunit, name = q.ring, 4, f"compute{q.queue}"
    elif kind == "sdma":
      q = d.sdma.new_queue(size)
      ring, wunit, name = q.ring, 1, f"sdma{q.engine}"
    else: raise RawGPUError(f"unknown ring kind {kind!r}; use 'compute' or 'sdma'")
    ptrs = d.vram_bar.view(q.ptrs, mm.PAGE)
    rptr, wptr = ptrs.view(0, 8).cast("Q"), ptrs.view(0x100, 8).cast("Q")   # report and poll slots (gfx.py / sdma.py)
    doorbell = self.dev.doorbells.view(q.doorbell * 4, 8).cast("Q")
    hw = HWRing(kind, self._ring_mem(ring, size), wptr, rptr, doorbell, wunit, before_doorbell=d.soc.flush_hdp, name=name)
    self.rings.append((hw, q))
    return hw

  # ---- interrupts and faults
  def check_faults(self) -> None: self.dev.ih.check_faults()

  def sleep(self, timeout_ms: float) -> None:
    """Until an interrupt arrives (an end-of-pipe, a fault: raised) or timeout_ms pass. No MSI in userspace: the IH
    ring's write pointer is polled."""
    deadline = time.perf_counter() + timeout_ms / 1e3
    while not self.dev.ih.check_faults():
      left = deadline - time.perf_counter()
      if left <= 0: return
      time.sleep(min(2e-4, left))

  def close(self) -> None:
    if self.closed: return
    self.closed = True
    self.dev.fini()
