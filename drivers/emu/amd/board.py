"""AMDBoard: the emulated Radeon board on the virtual PCI bus.

BAR0 is VRAM (an anonymous mapping: untouched pages cost nothing), BAR2 the doorbell aperture, BAR5 the registers.
Blocks (NBIO, GMC, IH, PSP, SMU, GFX, SDMA) each own their registers; engines run on a worker thread woken by
doorbells and register kicks, or one step at a time with `step()` in deterministic mode.
"""
from __future__ import annotations
import _thread, logging, mmap, os, sys, threading, time, weakref
from typing import Any, Protocol
from rawgpu.drivers.emu.pcibus import Bar, HostRAM
from rawgpu.drivers.emu.amd import discovery
from rawgpu.drivers.emu.amd.asic import GC_HWID, Asic, asic as get_asic
from rawgpu.drivers.emu.amd.clock import GPUClock
from rawgpu.drivers.emu.amd.config import ConfigSpace
from rawgpu.drivers.emu.amd.regfile import RegFile

REG_BAR_SIZE = 1 << 20
DOORBELL_BAR_SIZE = 2 << 20
ALL_ONES = {1: 0xff, 2: 0xffff, 4: 0xffffffff, 8: 0xffffffffffffffff}


class Engine(Protocol):
  def step(self) -> bool: ...           # do one unit of work; True if anything happened
  def busy(self) -> bool: ...           # has work it is waiting to make progress on (re-poll periodically)


class AMDBoard:
  vendor = 0x1002

  def __init__(self, arch: str = "gfx1100", host: HostRAM | None = None, vram_size: int = 512 << 20, bar0_size: int | None = None,
               cus: int | None = None, deterministic: bool = False, firmware: str = "cold", xgmi: tuple[int, int] | None = None):
    self.asic: Asic = get_asic(arch)
    if xgmi is not None and (arch != "gfx942" or not 0 <= xgmi[0] < xgmi[1] <= 8):
      raise ValueError("xgmi=(node, nodes) is for an MI300X (gfx942) in a hive of up to 8 boards")
    self.xgmi = xgmi   # (this board's node, boards in the hive): its VRAM is that node's segment of the hive's FB space
    self.arch, self.device = arch, self.asic.device
    if vram_size & (vram_size - 1) or vram_size < (64 << 20): raise ValueError("vram_size must be a power of two >= 64 MiB")
    self.vram_size = vram_size
    self.host = host
    self.deterministic = deterministic
    # VRAM is a memfd, so that each mapping of BAR0 is a mapping of its own (one the driver can unmap), as on Linux
    self.vram_fd = os.memfd_create(f"amdboard-{arch}-vram", os.MFD_CLOEXEC)
    weakref.finalize(self, os.close, self.vram_fd)
    os.ftruncate(self.vram_fd, vram_size)
    self.vram_map = mmap.mmap(self.vram_fd, vram_size, mmap.MAP_SHARED)
    self.vram = memoryview(self.vram_map)
    bar0 = min(bar0_size or vram_size, vram_size)
    if bar0 & (bar0 - 1) or bar0 < (1 << 20): raise ValueError("bar0_size must be a power of two >= 1 MiB")
    self.bars: dict[int, Bar] = {
      0: Bar(bar0, mem=self.vram[:bar0], fd=self.vram_fd, prefetch=True),
      2: Bar(DOORBELL_BAR_SIZE, read=self._db_read, write=self._db_write, prefetch=True),
      5: Bar(REG_BAR_SIZE, read=self._reg_read, write=self._reg_write, is64=False),
    }
    sizes = 0
    for n in range(20, 40):
      if (1 << n) <= vram_size and (1 << n) >= (256 << 20): sizes |= 1 << (n - 20)
    self.cfg = ConfigSpace(self.vendor, self.device, self.asic.revision, self.asic.pci_class,
                           {0: (lambda: self.bars[0].size, 0xc), 2: (lambda: self.bars[2].size, 0xc), 5: (lambda: self.bars[5].size, 0x0)},
                           self._resize_bar0, sizes | (1 << max(0, (bar0 >> 20).bit_length() - 1)))
    self.lock = threading.RLock()
    self.clock = GPUClock(deterministic)
    self.removed = False
    self.faults: dict[str, Any] = {}
    self.errors: list[str] = []                 # internal errors the worker survived (a model bug: report it)
    self.unmodelled: list[str] = []             # engines stopped where the hardware's behaviour is not public (see stopped)
    self.doorbells: dict[int, int] = {}
    self.engines: list[Engine] = []
    self.fw_loaded: set[int] = set()            # GFX_FW_TYPE_* ids the PSP has loaded
    total_wgp = self.asic.num_se * self.asic.num_sa_per_se * self.asic.wgp_per_sa
    self.cus = min(cus or self.asic.active_cus or 2 * total_wgp, 2 * total_wgp)
    self.regs = RegFile(self.asic)
    if firmware not in ("cold", "loaded"): raise ValueError("firmware must be 'cold' or 'loaded'")
    self.firmware_state = firmware
    self._mode1_pending = False
    self._busy_ns, self._t_last = 0, 0
    self._build()
    if firmware == "loaded": self.preload_firmware()
    self._closed = False
    self._wake = _thread.allocate_lock()        # unlocked: a wake-up is pending (a binary semaphore: one futex wake to signal, less than an Event)
    self._wake.acquire()
    self._stop = False
    self._thread: threading.Thread | None = None
    self._waiting = False                       # the worker is (about to be) asleep: a doorbell must wake it
    self._kicked_at, self.host_busy = 0.0, False   # when the worker was last woken; whether the host holds it off (_worker)
    self._posted: dict[int, int] = {}           # doorbell writes on their way to the engines: index -> latest value
    self._route_lock = threading.Lock()         # one router at a time keeps each queue's pointer updates in order

  @property
  def cls(self) -> int: return self.asic.pci_class   # PCI class code (sysfs `class`): display, or accelerator (MI300)

  # ---- construction of the blocks
  def _build(self) -> None:
    from rawgpu.drivers.emu.amd.nbio import NBIO
    self.nbio = NBIO(self)
    self.discovery_blob = discovery.build(self.asic, self.asic.wgp_per_sa)   # physical shape; harvesting is in CC_GC_SHADER_ARRAY_CONFIG
    off = self.vram_size - discovery.DISCOVERY_TMR_OFFSET
    self.vram[off:off + len(self.discovery_blob)] = self.discovery_blob
    self.blocks: list[Any] = [self.nbio]
    for mod, cls, attr in self.BLOCKS:
      m = __import__(f"rawgpu.drivers.emu.amd.{mod}", fromlist=[cls])
      blk = getattr(m, cls)(self)
      setattr(self, attr, blk)
      self.blocks.append(blk)
      if hasattr(blk, "step"): self.engines.append(blk)
    # MI300: every XCC's command processor (board.gfx is XCC 0's)
    from rawgpu.drivers.emu.amd.gfx import GFX
    self.xccs = [self.gfx] + [GFX(self, x) for x in range(1, sum(1 for e in self.asic.ips if e.hw_id == GC_HWID))]
    self.blocks += self.xccs[1:]
    self.engines += self.xccs[1:]
    if len(self.xccs) > 1: self.psp.spatial_partition(1)   # the IFWI starts an MI300X as one partition of all its XCCs (SPX)
    # blocks that watch the doorbell BAR; the NBIO routes each doorbell to one of them (the queue engines are asked first)
    self._doorbell_sinks = sorted((blk.doorbell for blk in self.blocks if hasattr(blk, "doorbell")), key=lambda d: d.__self__ is self.ih)

  BLOCKS: list[tuple[str, str, str]] = [("gmc", "GMC", "gmc"), ("ih", "IH", "ih"), ("gfx", "GFX", "gfx"), ("sdma", "SDMA", "sdma"),
                                          ("psp", "PSP", "psp"), ("smu", "SMU", "smu")]

  # ---- pcibus.Board
  def config_read(self, off: int, size: int) -> int:
    if self.removed: return ALL_ONES.get(size, 0xffffffff)
    return self.cfg.read(off, size)

  def config_write(self, off: int, size: int, value: int) -> None:
    if not self.removed: self.cfg.write(off, size, value)

  def reset(self) -> None:
    """Function-level reset from sysfs: the board returns to its power-on state (VRAM content is not cleared)."""
    self.stop_worker()
    self._closed = False
    with self.lock:
      self.doorbells.clear(); self._posted.clear(); self.engines.clear(); self.faults.clear(); self.fw_loaded.clear()
      self.regs = RegFile(self.asic)
      self._build()

  def _resize_bar0(self, size: int) -> None:
    size = min(size, self.vram_size)
    self.bars[0].size, self.bars[0].mem = size, self.vram[:size]

  # ---- register BAR
  def _reg_read(self, off: int, width: int) -> int:
    if self.removed or not self.cfg.b[4] & 0x2: return ALL_ONES[width]      # removed, or memory decode off
    if self._posted: self._route_doorbells()   # PCIe ordering: a read does not pass the posted writes before it
    r = self.regs
    if width == 4:
      a = off >> 2
      h = r.rd.get(a)
      return h(a) if h is not None else r.vals.get(a, 0)
    if width == 8: return r.read(off >> 2) | (r.read((off >> 2) + 1) << 32)
    return (r.read(off >> 2) >> (8 * (off & 3))) & ALL_ONES[width]

  def _reg_write(self, off: int, width: int, value: int) -> None:
    if self.removed or not self.cfg.b[4] & 0x2: return
    if off in self.nbio.remap: return self.nbio.hdp_flush()   # the remapped HDP flush page (a write, whatever the value)
    with self.lock:
      r = self.regs
      if width == 4: r.write(off >> 2, value)
      elif width == 8: r.write(off >> 2, value & 0xffffffff); r.write((off >> 2) + 1, value >> 32)
      else:
        a, sh = off >> 2, 8 * (off & 3)
        mask = ALL_ONES[width] << sh
        r.write(a, (r.vals.get(a, 0) & ~mask) | ((value << sh) & mask))
    self.kick()

  # ---- doorbell BAR
  def _db_read(self, off: int, width: int) -> int:
    if self.removed or not self.cfg.mem_enabled: return ALL_ONES[width]
    v = self.doorbells.get(off >> 2, 0)
    if width == 8: v |= self.doorbells.get((off >> 2) + 1, 0) << 32
    return v & ALL_ONES[width]

  def _db_write(self, off: int, width: int, value: int) -> None:
    if self.removed or not self.cfg.b[4] & 0x2 or not self.regs.vals.get(self.nbio.a_db_en, 0) & 1: return   # memory decode or aperture off: dropped
    # A posted write: the CPU goes on at once; the NBIO routes it to the block that watches this doorbell on the
    # board's side (the worker, or a register read that must not pass it), without the board lock.
    idx = off >> 2
    self.doorbells[idx] = value & 0xffffffff
    if width == 8: self.doorbells[idx + 1] = value >> 32
    self._posted[idx] = value   # a later write to the same doorbell supersedes this one before it is routed
    if self._waiting or self._thread is None: self.kick()

  def _route_doorbells(self) -> None:
    """Deliver the posted doorbell writes to the block each belongs to (a queue's write pointer, the IH's read
    pointer); each store is atomic and pointers only move forward, so an engine mid-step sees old or new. No engine
    steps while they are routed, so only each doorbell's latest value matters: a host that rang one 1000 times since
    the last pass costs one delivery, not 1000 (popitem is atomic: a write that comes meanwhile is routed too)."""
    with self._route_lock:
      posted = self._posted
      while posted:
        idx, value = posted.popitem()
        for sink in self._doorbell_sinks:
          if sink(idx, value): break

  # ---- DMA to host memory: only with bus mastering on, only to pages the bus backs
  def host_dma(self, addr: int, size: int) -> memoryview:
    from rawgpu.drivers.emu.pcibus import BusError
    if not self.cfg.bus_master or self.host is None: raise BusError(addr, size)
    return self.host.dma(addr, size)

  def stopped(self, engine: str, why: str) -> None:
    """An engine stopped: where the model does not know what the hardware would do ("not modelled"), say so on the
    rawgpu.emu logger and keep it in `unmodelled`, since the driver sees only a queue that no longer moves."""
    if "not modelled" not in why: return
    self.unmodelled.append(f"{engine}: {why}")
    logging.getLogger("rawgpu.emu").warning("emulated %s: %s stopped: %s", self.arch, engine, why)

  # ---- execution
  def kick(self) -> None:
    if self.deterministic or self._closed: return
    if self._thread is not None and not self._wake.locked(): return   # already woken: nothing to add
    if self._thread is None:
      if not self.engines or self.removed: return      # resetting or removed: nothing restarts it
      self._stop = False
      self._thread = threading.Thread(target=self._worker, name=f"amdboard-{self.arch}", daemon=True)
      self._thread.start()
    self._kicked_at = time.perf_counter()
    self._signal_wake()

  def _signal_wake(self) -> None:
    try: self._wake.release()
    except RuntimeError: pass   # another kick released it first

  def _worker(self) -> None:
    while not self._stop:
      busy = self._mode1_pending or any(e.busy() for e in self.engines)
      self._waiting = True                # set before looking at the posted doorbells: one that comes later kicks
      asleep, timeout = time.perf_counter(), 0.0005 if busy else 0.05
      kicked = bool(self._posted) or self._wake.acquire(timeout=timeout)
      self._waiting = False
      self._wake.acquire(blocking=False)  # a wake-up that came anyway is consumed too
      held = time.perf_counter()
      self.host_busy = held - max(asleep, self._kicked_at if kicked else asleep + timeout) > self.host_busy_s()
      while not self._stop and self._pass():
        if self._posted or self.host_busy or time.perf_counter() - held > self.HOLD_S:   # the host is submitting, or waited long enough: let it run
          asleep = time.perf_counter()
          time.sleep(self.YIELD_S)
          held = time.perf_counter()
          self.host_busy = held - asleep - self.YIELD_S > self.host_busy_s()

  STEPS_PER_PASS = 16   # concurrent mode: an engine that makes progress takes up to this many steps in a row
  PASS_S = 0.001        # ... or steps for up to this long (the board lock is held meanwhile)
  HOLD_S, YIELD_S = 0.001, 0.00002   # after this long busy, the worker sleeps a moment (a GPU takes no host CPU time)
  # The worker shares the interpreter with the host. Where it gets it back only after most of the interpreter's switch
  # interval (sys.getswitchinterval(), 5 ms: a thread that never blocks hands over no sooner), the host was running
  # Python all along, and a shorter delay is the OS waking the worker: while the host is busy (enqueueing, say), each
  # engine takes one step per pass, waves run in short slices and the worker sleeps after every pass, so the host is
  # held off a fraction of a millisecond at a time, not for whole passes.
  @staticmethod
  def host_busy_s() -> float: return 0.8 * sys.getswitchinterval()
  WAVE_SLICE_S, BUSY_WAVE_SLICE_S = 0.001, 0.0002   # a dispatch's waves run this long per step, then the other engines get a turn

  def wave_slice(self) -> float:
    """How long a dispatch's waves run per step now (concurrent mode)."""
    return self.BUSY_WAVE_SLICE_S if self.host_busy else self.WAVE_SLICE_S

  def _pass(self) -> bool:
    if self._posted: self._route_doorbells()
    progressed, burst = False, 1 if self.deterministic or self.host_busy else self.STEPS_PER_PASS
    for e in list(self.engines):
      if self.removed: return False
      with self.lock:
        try:
          until = time.perf_counter() + self.PASS_S
          for _ in range(burst):   # a CP reads packets back to back; a pass over every block per packet costs more than the packet
            if not e.step(): break
            progressed = True
            if time.perf_counter() > until: break   # a dispatch's waves took their time: the other engines go next
        except Exception as ex:                   # a model bug must not silently stop the whole GPU
          msg = f"{type(e).__name__}: {type(ex).__name__}: {ex}"
          if msg not in self.errors: self.errors.append(msg)   # one that recurs every pass is listed once
          if self.deterministic: raise
    if self._mode1_pending and (self.clock.now() >= self._mode1_at):
      self._mode1_pending = False
      self._mode1_reset()
      return True
    return progressed

  MODE1_DELAY_TICKS = 500_000      # 5 ms of GPU time: the SMU answers the message first, then the ASIC goes down

  def request_mode1_reset(self) -> None:
    self._mode1_pending, self._mode1_at = True, self.clock.now() + self.MODE1_DELAY_TICKS

  def _mode1_reset(self) -> None:
    # Mode 1: the whole ASIC but the PCI configuration restarts; firmware is gone, VRAM keeps its content.
    self._drain_shaders()
    with self.lock:
      cfg = self.cfg
      self.doorbells.clear(); self._posted.clear(); self.engines.clear(); self.fw_loaded.clear()
      self.regs = RegFile(self.asic)
      self._build()
      self.cfg = cfg
      self.mode1_resets = getattr(self, "mode1_resets", 0) + 1

  def preload_firmware(self) -> None:
    """The state a previous driver leaves: sOS running, SMU up, every GFX/SDMA image loaded and the RLC autoloaded."""
    from rawgpu.drivers.emu.amd import psp
    self.psp.preload(); self.smu.preload()
    self.fw_loaded |= {psp.FW_SMU, psp.FW_RLC_G, psp.FW_IMU_I, psp.FW_IMU_D, psp.FW_SDMA_TH0, psp.FW_SDMA_TH1,
                       psp.FW_RS64_MEC, psp.FW_RS64_PFP, psp.FW_RS64_ME}
    self.gfx.autoload(self.fw_loaded, psp.AUTOLOAD_REQUIRED)

  def activity(self) -> float:
    """Fraction of recent time the engines had work (0..1), for the SMU's metrics."""
    return 1.0 if any(e.busy() for e in self.engines) else 0.0

  def step(self) -> bool:
    """Deterministic mode: run one unit of work on each engine. True if anything happened."""
    self.clock.advance()
    return self._pass()

  def run_until_idle(self, max_steps: int = 100_000) -> int:
    """Step until no engine makes progress; returns the number of steps taken."""
    n = 0
    while n < max_steps and (self.step() or self._mode1_pending): n += 1
    return n

  def stop_worker(self) -> None:
    self._stop = True
    self._signal_wake()
    if self._thread is not None and self._thread is not threading.current_thread(): self._thread.join(timeout=5)
    self._thread = None
    self._drain_shaders()

  def _drain_shaders(self) -> None:
    """Drop in-flight dispatches where their waves are (the worker, which runs them a slice at a time, is stopped
    or is the caller)."""
    for q in [q for g in getattr(self, "xccs", ()) for q in list(g.queues.values())]:
      q.kill_waves()

  def close(self) -> None:
    self._closed = True
    self.stop_worker()

  # ---- test-only fault injection
  def inject(self, kind: str, **kw: Any) -> None:
    """Make the board misbehave the way real boards do. Kinds: psp_timeout, psp_error(status=), psp_stale_status (the
    PSP carries commands out but leaves a non-zero status, which amdgpu's psp_cmd_submit_buf tolerates), smu_timeout,
    smu_error(response=), hung_queue(engine="compute"|"sdma"), page_fault(va=), surprise_removal, and
    sdma_reset_stuck (MI300: the SMU resets an SDMA engine, whose microengine then stays halted)."""
    known = {"psp_timeout", "psp_error", "psp_stale_status", "smu_timeout", "smu_error", "hung_queue", "page_fault", "surprise_removal", "sdma_reset_stuck"}
    if kind not in known: raise ValueError(f"unknown fault {kind!r}; known: {', '.join(sorted(known))}")
    if kind == "surprise_removal": self.removed = True
    self.faults[kind] = kw or True

  def clear_faults(self) -> None:
    self.faults.clear(); self.removed = False
