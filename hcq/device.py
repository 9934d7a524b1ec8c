"""Device: an opened GPU with its memory, rings, timeline, and the vendor's queues and programs."""
from __future__ import annotations
import errno, time, weakref
from array import array
from rawgpu.drivers.devspec import DevSpec, dev_from_env, parse_dev
from rawgpu.drivers.iface import Iface
from rawgpu.errors import DeviceFault, DeviceNotFound, DeviceTimeout, OutOfMemory, RawGPUError
from rawgpu.hcq.buffer import Buffer, check_copy_size, check_no_overlap
from rawgpu.hcq.patch import as_index
from rawgpu.hcq.release import Releases
from rawgpu.hcq.ring import Ring
from rawgpu.hcq.signal import SIGNAL_SIZE, Signal

RING_SIZE = {"compute": 1 << 18, "sdma": 1 << 18}
TIMELINE_LIMIT = 1 << 32  # the engines compare signal words as 32-bit values


def _spec(dev: str | DevSpec | None) -> DevSpec:
  if dev is not None and not isinstance(dev, (str, DevSpec)): raise RawGPUError(f"a device is named by a DEV string (e.g. 'MOCKPCI+AMD'), not {dev!r}")
  spec = dev_from_env() if dev is None else parse_dev(dev) if isinstance(dev, str) else dev
  if spec is None: raise RawGPUError("no device given: pass one (e.g. Device('MOCKPCI+AMD')) or set DEV")
  return spec


def devices(dev: str | DevSpec | None = None) -> list["Device"]:
  """Every device a DEV names (DEV=PCI:0-3+AMD: four; on MI300 each index is an XCC), opened in index order; if one
  cannot be opened, those opened before it are closed again."""
  from rawgpu.drivers.select import open_ifaces
  ifaces = open_ifaces(_spec(dev))
  out: list[Device] = []
  try:
    for it in ifaces: out.append(Device(iface=it))
  except BaseException:
    for d in out: d.close()
    for it in ifaces[len(out):]: it.close()
    raise
  return out


class Device:
  _profiler = None   # a Profiler while one records this device
  def __init__(self, dev: str | DevSpec | None = None, *, iface: Iface | None = None):
    if iface is None:
      spec = _spec(dev)
      if spec.indices and len(spec.indices) > 1:
        raise RawGPUError(f"DEV={spec} names {len(spec.indices)} devices and Device opens one: give one index, or open them all "
                          "with rawgpu.hcq.devices(DEV)")
      from rawgpu.drivers.select import open_ifaces
      iface = open_ifaces(spec)[0]
    self.iface, self.props = iface, iface.props
    self.read_fence = iface.read_fence   # after a wait, reads of VRAM through CPU views see what the GPU wrote before the signal
    self.write_fence = iface.write_fence # before a signal the CPU sets, its writes to VRAM through CPU views are visible
    self._rings: dict[str, Ring] = {}
    self._bound = weakref.WeakValueDictionary()   # GPU VA -> the live bound queue whose words are there (hang reports decode them)
    self.closed, self.faulted = False, ""   # faulted: the first fault seen; the queues are stopped until reopened
    self.stalled = 0                        # the ticket a wait gave up on (0: none, or its work is known done)
    self.timed_out = False                  # a wait on another signal gave up (a raw queue's, which takes no ticket)
    self.timeout_ms: float = 10_000         # how long waits (copies, synchronize, launches' wait=) allow without progress
    self._recover_hooks: list = []          # weak methods recover() calls once the queues restarted (graphs spanning devices)
    self._graphs = weakref.WeakSet()        # its graphs that span other devices (close waits for their shares)
    self._lent = weakref.WeakSet()          # its buffers other devices' work touched (close waits for that work)
    self._signal_pages: list = []
    self._free_signals: list[tuple[int, memoryview]] = []
    self.releases = Releases(self)           # memory dropped while the GPU may still read it
    self.timeline = self.new_signal("timeline", narrow=True)
    self.timeline.value = 0
    # Host-side tickets grow without bound; the GPU sees ticket - base, kept below the engines' 32-bit compare.
    self.timeline_value = 1   # the next ticket
    self.timeline_base = 0
    self._ticket_engine: str | None = None   # the engine that signals the latest ticket (None: unknown)
    self._order_queues: dict = {}            # engine -> its queue that waits for another engine's ticket
    if self.props.vendor != "AMD": raise RawGPUError(f"{self}: hcq has no queues for {self.props.vendor} yet")
    from rawgpu.hcq.amd.backend import AMDBackend
    self.backend = AMDBackend(self)

  def __repr__(self) -> str:
    p = self.props
    return f"{p.iface}+{p.vendor}:{p.arch}@{p.pci_bus}" + (f"/xcc{p.xcc}" if p.xcc is not None else "")

  # ---- memory
  def check_open(self) -> None:
    """Refuse work for a closed device: its rings, memory and mappings are gone (the board may be someone else's)."""
    if self.closed: raise RawGPUError(f"{self}: the device is closed; open it again")

  def alloc(self, size: int, *, host: bool = False, uncached: bool = False, cpu_access: bool = False) -> Buffer:
    self.check_open()
    if type(size) is not int:
      if (n := as_index(size)) is None: raise RawGPUError(f"{self}: alloc takes a size in bytes (an int), not {size!r}")
      size = n
    if size <= 0: raise RawGPUError(f"{self}: cannot allocate {size} bytes")
    return Buffer(self, self._iface_alloc(size, host, uncached, cpu_access or host), 0, size)

  def _iface_alloc(self, size: int, host: bool, uncached: bool, cpu_access: bool):
    """The interface's allocation, with room made for it (_with_room)."""
    return self._with_room(f"{size} bytes of {'host memory' if host else 'VRAM'}",
                           lambda: self.iface.alloc(size, host=host, uncached=uncached, cpu_access=cpu_access))

  def _with_room(self, what: str, make):
    """make() (an allocation of the interface's), after freeing the dropped memory that is due; where there is no room
    and more waits for this device's work, wait for it, free it and try once more. No room is OutOfMemory."""
    if self.releases.pending: self.releases.run()
    for last in (False, True):
      try: return make()
      except (MemoryError, OSError) as e:   # every interface's "no room" (AM's allocators, KFD's ENOMEM) is one error
        if isinstance(e, OSError) and e.errno != errno.ENOMEM: raise
        if last or not self.releases.pending:
          raise OutOfMemory(f"{self}: cannot allocate {what}: {e}; free buffers or ask for less") from e
      self.releases.run(wait_ms=10_000)

  def done(self, ticket: int) -> bool:
    """Whether the work of `ticket` is done (without waiting)."""
    return ticket <= self.timeline_base or self.timeline.value >= ticket - self.timeline_base

  def new_signal(self, name: str = "signal", *, narrow: bool = False) -> Signal:
    """A signal at 0 (narrow: only for the driver's counters, whose values stay below 2^32; see Signal.narrow)."""
    self.check_open()
    if not self._free_signals:
      mem = self._iface_alloc(4096, True, True, True)
      self._signal_pages.append(mem)
      self._free_signals = [(mem.va + off, mem.cpu.view(off, SIGNAL_SIZE).cast("Q")) for off in range(0, 4096, SIGNAL_SIZE)][::-1]
    va, view = self._free_signals.pop()
    view[0] = view[1] = 0
    return Signal(self, va, view, name, narrow)

  def free_signal(self, sig: Signal) -> None:
    """Give a signal's slot back for a later new_signal, once the work queued so far is done (raw submits too: each
    engine first signals a ticket after them); the signal is refused from now on."""
    self.check_open()
    if not isinstance(sig, Signal): raise RawGPUError(f"{self}: free_signal takes a Signal, not {type(sig).__name__}")
    if sig.dev is not self: raise RawGPUError(f"{self}: signal {sig.name} is {sig.dev}'s")
    if sig is self.timeline: raise RawGPUError(f"{self}: the timeline is the device's own and cannot be freed")
    if sig.freed: raise RawGPUError(f"{self}: signal {sig.name} at {sig.va:#x} was freed already")
    sig.freed = True
    slot = (sig.va, sig._q)
    self.releases.later(lambda: self._free_signals.append(slot), fence=tuple(self._rings) or None)

  def _check_reaches(self, sig: Signal) -> None:
    """A queue about to be submitted here waits on or writes sig: it is still this device's, or mapped here."""
    sig._check_alive()
    if sig.dev is not self and not self.maps(sig):
      why = "is closed" if sig.dev.closed else "no longer maps it here"
      raise RawGPUError(f"{self}: this queue waits on or writes {sig.name} of {sig.dev}, which {why}; build a new queue")

  def _reuse_signal(self, sig: Signal) -> None:
    """A signal of the driver's own whose work is known done (a dropped graph's or program's): its slot at once."""
    sig.freed = True
    self._free_signals.append((sig.va, sig._q))

  # ---- peer-to-peer
  def _mem_of(self, obj: Buffer | Signal):
    if isinstance(obj, Signal):
      mem = next((m for m in obj.dev._signal_pages if m.va <= obj.va < m.va + m.size), None)
      if mem is None: raise RawGPUError(f"{obj.dev}: signal {obj.name} at {obj.va:#x} is not in its signal pages")
      return mem
    obj._check_alive()
    return obj.mem

  def map(self, obj: Buffer | Signal) -> None:
    """Make a buffer or signal of another device reachable by this device's engines and kernels at its own VA
    (peer VRAM over the PCI bus, host memory at its bus addresses). Idempotent; freeing the buffer unmaps it."""
    self.check_open()
    if not isinstance(obj, (Buffer, Signal)): raise RawGPUError(f"{self}: map takes a Buffer or a Signal, not {type(obj).__name__}")
    if obj.dev is self: return
    if not hasattr(self.iface, "map_peer") or type(obj.dev.iface) is not type(self.iface):
      raise RawGPUError(f"{self}: cannot map memory of {obj.dev}: peer mappings need both devices on the same interface (PCI or KFD, or their MOCK twins)")
    self.iface.map_peer(self._mem_of(obj), obj.dev.iface)

  def maps(self, obj: Buffer | Signal) -> bool:
    """Whether this device reaches obj (its own, or mapped with map())."""
    if obj.dev is self: return True
    if isinstance(obj, Buffer) and obj._root().freed: return False
    return hasattr(self.iface, "maps_peer") and self.iface.maps_peer(self._mem_of(obj))

  # ---- engines
  def ring(self, engine: str) -> Ring:
    self.check_open()
    if (r := self._rings.get(engine)) is None:
      hw = self._with_room(f"the {engine} queue", lambda: self.iface.create_ring(engine, RING_SIZE[engine]))
      r = self._rings[engine] = Ring(hw, self.iface.sleep, self.iface.check_faults, f"{self} {engine} ring")
      if (prefix := self.backend.ring_prefix(engine)) is not None: r.prefix = array("I", prefix)
    return r

  def next_timeline(self, engine: str | tuple[str, ...] | None = None, last: str | None = None) -> int:
    """Take the next ticket for work that starts on `engine` (several: work that starts on each of them at once; it
    signals the timeline from `last`, by default the same engine); the caller's queue signals the timeline with
    timeline_gpu(ticket) when its work is done.
    One engine finishes its work in order, two engines do not: where the previous ticket is another engine's and may
    still be pending, `engine` is first told to wait for it. So the device's work runs in submission order across its
    engines and the timeline only moves forward. engine=None: the caller orders its work itself (any engine after it
    then waits for it).
    Before the GPU value would reach the engines' 32-bit limit, everything is drained and the GPU value restarts."""
    self.check_open()
    if self.timeline_value - self.timeline_base >= TIMELINE_LIMIT - 1:
      self.wait_timeline(self.timeline_value - 1)   # (not synchronize: its pending frees may take a ticket)
      self.timeline.value, self.timeline_base = 0, self.timeline_value - 1
    engines = (engine,) if isinstance(engine, str) else engine or ()
    prev = self.timeline_value - 1 - self.timeline_base    # the GPU value of the latest ticket
    for e in engines:
      if self._ticket_engine != e and prev > 0 and self.timeline.value < prev: self._engine_waits(e, prev)
    self._ticket_engine = last or (engine if isinstance(engine, str) else None)
    v, self.timeline_value = self.timeline_value, self.timeline_value + 1
    return v

  def _engine_waits(self, engine: str, value: int) -> None:
    """Queue on `engine` a wait until the timeline reaches value (one template per engine, patched)."""
    if (q := self._order_queues.get(engine)) is None:
      from rawgpu.hcq.patch import Var
      q = self._order_queues[engine] = {"compute": self.compute_queue, "sdma": self.copy_queue}[engine]().wait(self.timeline, Var("value"))
    q.submit(self, {"value": value})

  def timeline_gpu(self, ticket: int) -> int:
    """The value the GPU writes to (and compares with) the timeline signal for `ticket`."""
    return ticket - self.timeline_base

  def wait_timeline(self, ticket: int, timeout_ms: float | None = None, report: bool = True) -> None:
    """Wait until the work of `ticket` is done (tickets from before a restart are done already); timeout_ms: of no
    progress, default self.timeout_ms; report: as in Signal.wait."""
    if ticket <= self.timeline_base: return
    ticket = min(ticket, self.timeline_value - 1)   # a ticket of another device's timeline (a peer's use) never exceeds ours
    if self.timeline.value >= ticket - self.timeline_base: return self.read_fence()   # done (before any fault): nothing to wait for
    self.check_open()
    self._wait_ticket(ticket, self.timeout_ms if timeout_ms is None else timeout_ms, report)

  def earlier_fault(self) -> DeviceFault:
    """The error of a wait after a fault this device saw (its queues are stopped: nothing more will run)."""
    fix = "; dev.recover() restarts its queues (what was queued is dropped)" if self.recovers_from_faults else ""
    return DeviceFault(f"{self}: the device faulted earlier ({self.faulted}){fix}")

  def _wait_ticket(self, ticket: int, timeout_ms: float, report: bool = True) -> None:
    if self.faulted: raise self.earlier_fault()
    try: self.timeline.wait(ticket - self.timeline_base, timeout_ms, report)   # (a fault it sees sets self.faulted)
    except DeviceTimeout:
      self.stalled = max(self.stalled, ticket)  # close() then releases without draining again
      raise
    if ticket >= self.stalled: self.stalled = 0   # a wait for earlier work says nothing of the stalled ticket

  def synchronize(self, timeout_ms: float | None = None) -> None:
    timeout_ms = self.timeout_ms if timeout_ms is None else timeout_ms
    self.wait_timeline(self.timeline_value - 1, timeout_ms)
    if self.releases.pending: self.releases.run(wait_ms=timeout_ms)   # (what waits for this device alone: done by now, or a fence)

  def last_submitted(self) -> str:
    """The last submissions decoded, and where their raw dwords were dumped for `rawgpu decode`."""
    return self.backend.describe_history(self._rings) + "".join(f"\n  dumped: rawgpu decode {kind} {path} --arch {self.props.arch}" for kind, path in self.dump_hang())

  def dump_hang(self) -> list[tuple[str, str]]:
    """Write the last submissions of each ring (raw little-endian dwords) to the temp dir, and the bound queues their
    indirect buffers run (a graph replay's packets) to files of their own; [(stream kind, path)]."""
    import os, tempfile, time
    out, prefix = [], f"rawgpu-hang-{os.getpid()}-{int(time.time())}-"
    def dump(kind: str, suffix: str, chunks) -> None:
      # a file of its own per report (two hangs in one second wrote one file, the first report naming the second's)
      fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix)
      with os.fdopen(fd, "wb") as f:
        for words in chunks: f.write(array("I", words).tobytes())
      out.append((kind, path))
    for engine, r in self._rings.items():
      if not (recent := r.recent()): continue
      kind = "pm4" if engine == "compute" else "sdma"
      dump(kind, f"-{engine}.{kind}", recent)
      if engine == "compute" and (ibs := getattr(self.backend, "bound_ibs", None)) is not None:
        for va, words in dict(ib for words in recent for ib in ibs(words)).items(): dump(kind, f"-{engine}-ib-{va:x}.{kind}", [words])
    return out

  # ---- copies (vendor engines do the work)
  def copyin(self, dst: Buffer, src: memoryview) -> None: self.check_open(); self.backend.copyin(dst, src)
  def copyout(self, dst: memoryview, src: Buffer) -> None: self.check_open(); self.backend.copyout(dst, src)
  def transfer(self, dst: Buffer, src: Buffer, size: int | None = None) -> None:
    """Copy size bytes (default: all of src) from src to dst on this device's copy engine; 0 bytes is nothing to do."""
    self.check_open()
    for b in (dst, src):   # (a freed buffer's memory may be someone else's by now)
      if not isinstance(b, Buffer): raise RawGPUError(f"{self}: transfer copies between Buffers, not {type(b).__name__}")
      b._check_alive()
    n = src.size if size is None else check_copy_size(size)
    check_no_overlap(dst, src, n, str(self))
    if n: self.backend.transfer(dst, src, n)

  # ---- programs and queues
  def program(self, code: bytes, name: str | None = None):
    self.check_open()
    if not isinstance(code, (bytes, bytearray, memoryview)): raise RawGPUError(f"{self}: program takes a code object's bytes (e.g. path.read_bytes()), not {type(code).__name__}")
    return self.backend.program(code, name)
  def compute_queue(self): self.check_open(); return self.backend.compute_queue()
  def copy_queue(self): self.check_open(); return self.backend.copy_queue()

  @property
  def recovers_in_place(self) -> bool:
    """Whether recover() can restart this device's queues after a hang without reopening it (AM restarts them
    itself, KFD has the kernel destroy and make them again)."""
    return hasattr(self.iface, "reset_ring")

  @property
  def recovers_from_faults(self) -> bool:
    """Whether it can after a fault too: AM can; amdkfd stops a process's queues on a GPU that faulted for the
    process's life."""
    return getattr(self.iface, "RECOVERS_FROM_FAULTS", False)

  def recover(self) -> None:
    """After a fault, or a wait that timed out (a hang): restart the queues in place and fast-forward the timeline,
    so the process can go on without reopening the device. The work queued on them is dropped, and a kernel still
    running is stopped (its waves reset). Nothing to do when neither happened, or the late work has finished since."""
    self.check_open()
    if self.stalled and not self.faulted and self.done(self.timeline_value - 1):
      self.stalled = 0   # the slow work finished after all: nothing to stop
    if not (self.faulted or self.stalled or self.timed_out): return
    if not self.recovers_in_place:
      raise RawGPUError(f"{self}: the {self.props.iface} interface cannot restart a queue in place; close the device and open it again")
    for ring in self._rings.values():   # a fault or a hang may have stopped either engine; both restart empty
      self.iface.reset_ring(ring.hw)
      ring.restart()
    self._ticket_engine = None
    self.timeline.value = self.timeline_gpu(self.timeline_value - 1)   # abandoned tickets count as done
    self.faulted, self.stalled, self.timed_out = "", 0, False
    self._release_peers()

  def _release_peers(self) -> None:
    """Its queues will not write what the other devices' shares of its graphs wait for (the work was dropped, or
    stopped by a fault): the graphs release those waits, so the peers finish instead of waiting for ever."""
    for hook in list(self._recover_hooks):
      if (fn := hook()) is None: self._recover_hooks.remove(hook)
      else: fn(self)

  def close(self) -> None:
    """Drain and release the device. After a fault there is nothing to drain: release it as it is."""
    if self.closed: return
    if self.faulted or self.stalled or self.timed_out:
      self._release_peers()   # (while it is open: the releases write its signals) so the peers get clear of its memory
    self.closed = True
    self.releases.pending.clear()   # what they hold goes with the device
    try:
      try:
        # drain (as long without progress as its waits; the public waits refuse a closed device), without a report:
        # nobody would see it, and its dumps would be left behind
        if not self.faulted: self._wait_ticket(self.timeline_value - 1, 500 if self.stalled else self.timeout_ms, report=False)
      except (DeviceFault, DeviceTimeout, DeviceNotFound): pass
      self._wait_peers()
    finally:
      self.timeline._q = memoryview(array("Q", self.timeline._q))   # its memory goes with the device: later waits read what it last said
      self.iface.close()

  def _wait_peers(self, timeout_ms: float = 1000) -> None:
    """Before its memory goes: the other devices' queued work on it (their transfers and kernels on its buffers, their
    shares of its graphs, which read its kernel arguments and end by waiting on its signal). Only healthy peers,
    for timeout_ms in all, without a report: a peer still busy then faults on the memory, which is gone."""
    deadline = time.monotonic() + timeout_ms / 1000
    waits = [(d, t) for g in list(self._graphs) for d, t in list(g.uses.tickets.items())]
    waits += [(d, t) for r in list(self._lent) if not r.freed for d, t in r.peer_uses().items()]
    for d, t in waits:
      if d is self or d.closed or d.iface.closed or d.faulted or d.stalled or d.done(t): continue
      if (left := deadline - time.monotonic()) <= 0: return
      try: d.timeline.wait(t - d.timeline_base, left * 1000, report=False)
      except RawGPUError: pass

  def __enter__(self) -> "Device": return self
  def __exit__(self, *exc) -> None: self.close()
