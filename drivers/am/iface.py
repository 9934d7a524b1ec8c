"""AMIface: drivers/iface.py's Iface over an AMDevice (what hcq sees of a board driven by AM)."""
from __future__ import annotations
import os, threading, time, weakref
from typing import Literal
from rawgpu.drivers.am import mm
from rawgpu.drivers.am.device import AMDevice
from rawgpu.drivers.amd_target import target_id
from rawgpu.drivers.iface import DeviceProps, HWRing, Mem, PeerMaps
from rawgpu.drivers.mmio import MMIO
from rawgpu.drivers.system import SYSTEM, System
from rawgpu.errors import DeviceBusy, RawGPUError

HUGE = 1 << 21


def _coalesce(bus_addrs: list[int]) -> list[tuple[int, int]]:
  """Physically contiguous 4 KiB pages as (address, size) runs (huge pages where they line up)."""
  chunks: list[tuple[int, int]] = []
  for a in bus_addrs:
    if chunks and chunks[-1][0] + chunks[-1][1] == a: chunks[-1] = (chunks[-1][0], chunks[-1][1] + mm.PAGE)
    else: chunks.append((a, mm.PAGE))
  return chunks


# AM owns a board once per process; on MI300 the devices of its XCCs (a partition each) share that AMDevice: its memory,
# page tables and interrupt ring. (id(system), bus) -> the AMDevice, while a device holds it (it keeps its System alive)
_OPEN: "weakref.WeakValueDictionary[tuple[int, str], AMDevice]" = weakref.WeakValueDictionary()
_OPEN_LOCK = threading.Lock()   # two threads opening XCCs of one board get one driver


class AMIface(PeerMaps):
  def __init__(self, bus: str, system: System = SYSTEM, *, xcc: int = 0, **opts):
    """xcc: on MI300, the XCC whose MEC runs this device's compute queues (each XCC is a partition of its own; the
    devices of one board's XCCs in a process share the driver, booted by the first with its options)."""
    key = (id(system), bus)
    with _OPEN_LOCK:
      # (a driver left without fini is gone; one a forked child inherited is its parent's, whose lock on the board decides)
      if (d := _OPEN.get(key)) is None or d.pci.closed or d.pid != os.getpid(): d = AMDevice(bus, system, **opts)
      elif xcc in d.partitions or not d.gc9:
        raise DeviceBusy(f"{bus}{f' XCC {xcc}' if d.gc9 else ''} is already open in this process (pid {os.getpid()}); close that device first")
      elif opts: raise RawGPUError(f"{bus} is already open in this process: its boot options ({', '.join(opts)}) apply to the first device only")
      try: d.gfx.check_xcc(xcc)
      except RawGPUError:
        if not d.partitions: d.fini()
        raise
      _OPEN[key], self._key = d, key
      d.partitions.add(xcc)
    self.dev, self.xcc, self.closed = d, xcc, False
    self.rings: list[tuple[HWRing, object]] = []
    self.mems: dict[int, Mem] = {}   # va -> this device's live allocations (freed when it closes before its board does)
    self.user_views: dict[int, MMIO] = {}   # va -> the CPU mapping of that VRAM allocation users were given (cpu_view)
    self._init_peers()
    # the target ID: AM runs without retry faults (SH_MEM_CONFIG.RETRY_DISABLE), so xnack is off; whether the board's
    # SRAM ECC is on is amdgpu's RAS knowledge, which AM has not: a code object's sramecc setting goes unchecked
    self.props = DeviceProps(vendor="AMD", arch=d.arch or "", target=target_id(d.arch or "", xnack=False),
                             iface="MOCKPCI" if system.host_memory is not None else "PCI",
                             name=d.board.name + (f" XCC {xcc}" if d.gc9 else ""), pci_bus=bus, compute_units=d.gfx.active_cus(xcc), shader_engines=d.disc.gc_info["gc_num_se"],
                             wave_size=d.disc.gc_info.get("gc_wave_size", 32) if d.gc9 else 32,
                             lds_size=64 << 10, vram_size=d.vram_size, bar_size=d.bar_size, vram_write_combined=d.vram_wc, vram_uncached_why=d.vram_uncached_why,
                             ip_versions={k: tuple(v) for k, v in d.ips.items()}, emulated=system.host_memory is not None, xcc=xcc if d.gc9 else None,
                             ip_bases={n: d.disc.find(n).bases for n in ("gc", "mmhub", "osssys", "hdp", "nbif") if d.disc.has(n)})
    self.read_fence, self.write_fence = d.read_fence, d.write_fence
    if "nbif" in self.props.ip_bases: self.props.ip_bases["nbio"] = self.props.ip_bases["nbif"]   # hcq's in-stream HDP flushes read NBIO

  # ---- memory
  def alloc(self, size: int, *, host: bool = False, uncached: bool = False, cpu_access: bool = True, contiguous: bool = False) -> Mem:
    d = self.dev
    if size <= 0: raise RawGPUError(f"alloc of {size} bytes: the size must be positive")
    size = mm.round_up(size, HUGE if size >= HUGE else mm.PAGE)
    va = mm.VA.alloc(size, HUGE if size >= HUGE else mm.PAGE)
    hm = paddr = None
    try:
      if host:
        hm = d.pci.alloc_host(size)
        m = d.pt.map(va, _coalesce(hm.bus_addrs), system=True, snooped=True, uncached=uncached)
        cpu, meta = hm.view, ("host", hm, m)
      else:
        paddr = d.valloc_phys(size, align=HUGE if size >= HUGE else mm.PAGE, cpu=cpu_access)
        m = d.pt.map(va, [(paddr + d.gmc.vram_base_offset, size)], uncached=uncached)
        cpu = d.vram_bar.view(paddr, size) if paddr + size <= d.bar_size else None
        meta = ("vram", paddr, m)
    except BaseException:   # e.g. no VRAM left for a page table: give back what was taken (map undid its entries)
      if hm is not None: d.system.free_host(hm.view)
      if paddr is not None: d.pfree(paddr)
      mm.VA.free(va)
      raise
    d.gmc.flush_tlb()
    mem = Mem(va, size, cpu, host=host, uncached=uncached, meta=meta)
    self.mems[va] = mem
    return mem

  def cpu_view(self, mem: Mem) -> MMIO | None:
    """The CPU view users get (hcq's Buffer.cpu). For VRAM a mapping of its own, made when first asked for, which free
    takes away: a view kept past free then reads zeros, never the data of the memory's next owner. (The driver's own
    copies use mem.cpu, part of the one BAR mapping, and never outlive the memory.)"""
    if mem.cpu is None or mem.host: return mem.cpu
    if (view := self.user_views.get(mem.va)) is None: view = self.user_views[mem.va] = self.dev.map_vram(mem.meta[1], mem.size)  # type: ignore[index]
    return view

  def free(self, mem: Mem) -> None:
    if self.mems.pop(mem.va, None) is not mem: return   # freed already (with its device, if that closed first)
    kind, backing, m = mem.meta  # type: ignore[misc]
    self._forget_peers(mem)   # no device keeps a mapping of memory that is going away
    self.dev.pt.unmap(m)
    self.dev.gmc.flush_tlb()
    if kind == "host": self.dev.system.free_host(backing.view)
    else:
      if (view := self.user_views.pop(mem.va, None)) is not None: self.dev.system.munmap(view)   # see cpu_view
      self.dev.pfree(backing)
    mm.VA.free(mem.va)

  # ---- peer-to-peer: another board's memory in this board's page tables, at the same VA (one VA space per process)
  def bar0_bus_address(self) -> int:
    """The bus address of VRAM offset 0 as other PCI functions reach it (BAR0's start)."""
    return self.dev.pci.resources()[0][0]

  def _map_peer(self, mem: Mem, owner: "AMIface") -> mm.Mapping | None:
    """`mem` of `owner` as system pages at its bus addresses: owner VRAM through owner's BAR0 (only the CPU-visible
    part is reachable, like large-BAR P2P), host memory at its own bus addresses."""
    if owner.dev is self.dev: return None   # another XCC of this board: the same page tables map it already
    kind, backing, _m = mem.meta  # type: ignore[misc]
    where = f"{self.dev.bus}: cannot map {mem.size:#x} bytes at {mem.va:#x} of {owner.dev.bus}"
    if self.closed or owner.closed: raise RawGPUError(f"{where}: a device is closed")
    if kind == "host": chunks, snooped = _coalesce(backing.bus_addrs), True
    elif kind == "vram":
      if backing + mem.size > owner.dev.bar_size:
        raise RawGPUError(f"{where}: VRAM {backing:#x}+{mem.size:#x} lies beyond its {owner.dev.bar_size >> 20} MiB BAR0, which is all a peer "
                          f"reaches; allocate it CPU-visible (cpu_access=True) or resize BAR0")
      chunks, snooped = [(owner.bar0_bus_address() + backing, mem.size)], False
    else: raise RawGPUError(f"{where}: {kind} memory is not shareable")
    m = self.dev.pt.map(mem.va, chunks, system=True, snooped=snooped, uncached=True)
    self.dev.gmc.flush_tlb()
    return m

  def _unmap_peer(self, mem: Mem, m: mm.Mapping | None) -> None:
    if m is None: return
    self.dev.pt.unmap(m)
    self.dev.gmc.flush_tlb()

  def _ring_mem(self, paddr: int, size: int) -> Mem:
    d = self.dev
    va = mm.VA.alloc(size, max(mm.PAGE, min(size, HUGE)))
    m = d.pt.map(va, [(paddr + d.gmc.vram_base_offset, size)])
    d.gmc.flush_tlb()
    return Mem(va, size, d.vram_bar.view(paddr, size), meta=("ring", paddr, m))

  def check_alive(self) -> None:
    """DeviceNotFound when the board is gone (surprise removal: its config space reads all ones)."""
    from rawgpu.errors import DeviceNotFound
    if self.dev.pci.config_read(0, 2) == 0xffff:
      raise DeviceNotFound(f"{self.dev.bus}: the board no longer answers (config space reads all ones): it was removed or fell off "
                           "the bus; close the device, check the slot/cable/power, and reset or rescan the PCI bus")

  # ---- rings
  RECOVERS_FROM_FAULTS = True   # (Device.recovers_from_faults)

  def reset_ring(self, hw: HWRing) -> None:
    """Restart a ring after a fault: a compute ring's HQD is dequeued, an SDMA ring's engine soft-reset; the ring and
    its pointers are emptied and programmed afresh. What was queued on it is dropped (the caller fast-forwards its
    timeline)."""
    q = next((q for h, q in self.rings if h is hw), None)
    if q is None: raise RawGPUError(f"{self.dev.bus}: ring {hw.name or hw.kind} is not one of this device's")
    d = self.dev
    # every ring restarts after a fault: refuse before touching any if one of them cannot
    for why in (d.sdma.reset_refusal(sq.engine) for h, sq in self.rings if h.kind == "sdma"):
      if why is not None: raise RawGPUError(why)
    if hw.kind == "sdma": return d.sdma.reset_queue(q)
    d.gfx.stop_hqd(q)   # the CP (and the queue's waves) must be off the queue before its ring and pointers change
    for paddr, sz in ((q.ring, q.size), (q.ptrs, mm.PAGE)): d.vram(paddr, sz)[:] = bytes(sz)
    d.gfx.program_hqd(q)

  def create_ring(self, kind: Literal["compute", "sdma"], size: int) -> HWRing:
    d = self.dev
    if kind == "compute":
      q = d.gfx.new_queue(size, self.xcc)
      ring, wunit, name = q.ring, 4, f"compute{q.queue}"
    elif kind == "sdma":
      q = d.sdma.new_queue(size, self.xcc)
      ring, wunit, name = q.ring, 1, f"sdma{q.engine}"
    else: raise RawGPUError(f"unknown ring kind {kind!r}; use 'compute' or 'sdma'")
    ptrs = d.vram_bar.view(q.ptrs, mm.PAGE)
    rptr, wptr = ptrs.view(0, 8).cast("Q"), ptrs.view(0x100, 8).cast("Q")   # report and poll slots (gfx.py / sdma.py)
    doorbell = self.dev.doorbells.view(q.doorbell * 4, 8).cast("Q")
    hw = HWRing(kind, self._ring_mem(ring, size), wptr, rptr, doorbell, wunit, before_doorbell=d.soc.flush_hdp, name=name)
    self.rings.append((hw, q))
    return hw

  def flush_hdp(self) -> bool:
    self.dev.soc.flush_hdp()
    return True

  # ---- interrupts and faults
  def check_faults(self) -> None: self.dev.ih.check_faults(self.xcc)

  def sleep(self, timeout_ms: float) -> None:
    """Until an interrupt arrives (an end-of-pipe, a fault: raised) or timeout_ms pass. No MSI in userspace: the IH
    ring's write pointer is polled."""
    deadline = time.perf_counter() + timeout_ms / 1e3
    while not self.dev.ih.check_faults(self.xcc):
      left = deadline - time.perf_counter()
      if left <= 0: return
      time.sleep(min(2e-4, left))

  def close(self) -> None:
    if self.closed: return
    lent = set(self.mapped_into)   # this device's memory that other devices mapped (and may still be using)
    self._forget_peers()   # peers lose the mappings of this device's memory, this one its mappings of theirs
    self.closed = True
    d = self.dev
    with _OPEN_LOCK:
      d.partitions.discard(self.xcc)
      last = not d.partitions
      if last and _OPEN.get(self._key) is d: del _OPEN[self._key]
    d.ih.pending.pop(self.xcc, None)
    if not last:   # other XCCs of the board stay open: this device's queues and memory go (as fini: whatever their state)
      for hw, q in self.rings:
        try: (d.sdma if hw.kind == "sdma" else d.gfx).free_queue(q)
        except RawGPUError: pass
        d.pt.unmap(hw.ring.meta[2])
      # its memory goes back, but what another XCC's device mapped stays until the board closes: work queued there may
      # still use it, and on one board that mapping is the owner's own page tables
      for mem in [m for va, m in self.mems.items() if va not in lent]: self.free(mem)
    else:
      d.fini()
      for kind, backing, _m in (m.meta for m in self.mems.values()):   # the board's page tables go with it; host pages and VAs do not
        if kind == "host": d.system.free_host(backing.view)
      for m in self.mems.values(): mm.VA.free(m.va)
      self.mems.clear()
    for hw, _q in self.rings: mm.VA.free(hw.ring.va)
