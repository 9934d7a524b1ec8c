"""The AMD side of a Device: compute (PM4) and copy (SDMA) queues, programs, kernargs, copies."""
from __future__ import annotations
from collections import deque
from typing import TYPE_CHECKING
from rawgpu.autogen.regs import ip_regs
from rawgpu.drivers.iface import hdp_bypassed
from rawgpu.errors import CodeObjectError, RawGPUError
from rawgpu.hcq.amd import pm4
from rawgpu.hcq.amd.queues import AMDComputeQueue, AMDCopyQueue
from rawgpu.hcq.buffer import Buffer

if TYPE_CHECKING: from rawgpu.hcq.device import Device

KERNARG_RING = 8 << 20
STAGING = 2 << 20    # per staging buffer; two of them, so the CPU fills one while the copy engine drains the other
# Copies into VRAM up to this size go through the BAR (CPU stores, then an HDP flush) when the buffer is CPU-visible:
# below it a copy-engine round trip costs more than the stores. Copies out always use the copy engine (BAR reads are
# uncached: slow on the bus).
BAR_COPYIN = 64 << 10
# Waves that may hold scratch at once (the dispatcher stalls waves beyond them): 32 per CU, as ROCr
# (MaxSlotsScratchCU) and Mesa (max_scratch_waves) size it, fewer when the buffer would pass SCRATCH_BUDGET (not fewer
# than one 1024-thread workgroup's waves).
SCRATCH_SLOTS_PER_CU, SCRATCH_BUDGET = 32, 256 << 20


class KernargRing:
  """Kernel arguments in GPU-visible host memory, bump-allocated round the ring. Reusing a region waits only for the
  launches that read it a lap before (long done, as a rule), never for everything queued since.

  Which launches those are is kept coarsely: a ticket is recorded each time the allocations pass a sixteenth of the
  ring (a mark), so a launch that passes no mark, does not wrap and writes where the lap before is known done takes
  its region with no bookkeeping at all."""
  MARKS = 16

  def __init__(self, dev: "Device", size: int):
    self.dev, self.mem = dev, dev.iface.alloc(size, host=True, uncached=True)
    self.view, self.size, self.va = self.mem.cpu.cast("B"), size, self.mem.va
    self.chunk = size // self.MARKS
    self.total = 0                        # bytes handed out ever (tail gaps skipped at a wrap included)
    self.marks: deque[tuple[int, int]] = deque()   # (absolute position m, ticket t): every launch that started before m has a ticket <= t
    self.next_mark = self.chunk
    self.free_to = size                   # absolute positions below this are free: their last lap's launches are done
    self.check_at = self.chunk            # min(next_mark, free_to): take() stops to look only past it
    self.done = 0                         # a ticket known complete

  def take(self, n: int) -> int:
    """Offset into self.view of n bytes (256-byte aligned) for the launch that takes the device's next ticket."""
    n = (n + 255) & ~255
    pos = self.total
    end = pos + n
    if end > self.check_at: pos, end = self._advance(pos, n)
    self.total = end
    return pos % self.size

  def _advance(self, pos: int, n: int) -> tuple[int, int]:
    """take() past a mark, a wrap, or into the part of the ring the lap before may still use."""
    size, dev = self.size, self.dev
    if n > self.chunk: raise RawGPUError(f"{dev}: {n} bytes of kernel arguments exceed the kernarg ring's limit ({self.chunk})")
    if pos % size + n > size: pos += size - pos % size   # does not fit before the end: start again at offset 0
    end = pos + n
    while self.next_mark < end:           # marks passed: this launch's ticket covers every launch before them
      self.marks.append((self.next_mark, dev.timeline_value))
      self.next_mark += self.chunk
    if end > self.free_to:                # the lap before: every launch that started before end - size must be done
      while self.marks[0][0] < end - size: self.marks.popleft()
      mark, ticket = self.marks[0]        # the first mark past them (there is one: the marks reach end)
      if ticket > self.done:
        self.done = max(self.done, dev.timeline.value + dev.timeline_base)
        if ticket > self.done: dev.wait_timeline(ticket); self.done = ticket
      self.free_to = mark + size
    self.check_at = min(self.next_mark, self.free_to)
    return pos, end


def scratch_wave_bytes(gfx: int, prg) -> tuple[int, int]:
  """(WAVESIZE unit, bytes of scratch per wave) for prg: 1 KiB (256-dword) units on gfx9, 256 bytes on gfx11+."""
  unit = 1024 if gfx < 10 else 256
  return unit, (prg.scratch * (32 if prg.wave32 else 64) + unit - 1) // unit * unit


class AMDBackend:
  def __init__(self, dev: "Device"):
    self.dev, p = dev, dev.props
    if "gc" not in p.ip_versions or "gc" not in p.ip_bases: raise RawGPUError(f"{dev}: the interface reported no GC version/register base")
    self.gc = ip_regs("gc", *p.ip_versions["gc"])
    self.gc_base = p.ip_bases["gc"]
    self.gfx = p.ip_versions["gc"][0]
    self.sdma_version = p.ip_versions.get("sdma", (6, 0, 0))[:2]
    # KFD: (slot address, event id) of the device's signal event, which every queue signal also wakes (queues.py)
    if (wake := getattr(dev.iface, "wake", None)) is not None: self.wake = wake
    # the compute barrier flushes the HDP in the stream (NBIO's request/done pair, MEC1 pipe 0's bit), so what the CPU
    # wrote into VRAM after a submit, behind a signal the queue waits on, is what the kernels after the barrier read
    self.hdp_flush = self.sdma_hdp_flush = None
    if not hdp_bypassed(p):
      nbio_version = p.ip_versions.get("nbio", pm4.NBIO_HDP_VERSION if self.gfx < 10 else None)
      if "nbio" not in p.ip_bases or nbio_version is None:
        raise RawGPUError(f"{dev}: the interface reported no NBIO register base and version (the barrier's HDP flush needs them)")
      self.hdp_flush = pm4.hdp_flush_regs(p.ip_bases["nbio"], me=1, pipe=0, nbio_version=nbio_version)
      self.sdma_hdp_flush = pm4.hdp_flush_regs(p.ip_bases["nbio"], nbio_version=nbio_version, sdma_engine=0)   # the copy queue's barrier
    self.timestamp_hz = 100_000_000  # the GPU's 100 MHz reference clock counts RELEASE_MEM timestamps
    self.kernargs = KernargRing(dev, KERNARG_RING)
    self.cpu_flush = dev.iface.flush_hdp()   # False: a KFD kernel without a remap page (64 KiB pages) leaves the CPU no way
    # CPU stores into VRAM reach the engines only where the HDP can be flushed, and beat a copy-engine round trip only
    # through a write-combined view (uncached, 64 KiB is thousands of single bus writes)
    self.bar_copyin = p.vram_write_combined and self.cpu_flush
    self._staging: list[Buffer] | None = None
    self._scratch: Buffer | None = None
    self._retired_scratch: list[Buffer] = []   # scratch buffers a larger one replaced (see scratch_for)

  def ring_prefix(self, engine: str) -> list[int] | None:
    """Packets every submission on the engine's ring starts with: where the CPU cannot flush the HDP before the
    doorbell, the engine flushes it first thing, so what cpu() wrote into VRAM before the submit is what it reads."""
    if self.cpu_flush or self.hdp_flush is None: return None
    if engine == "compute": return pm4.hdp_flush(*self.hdp_flush, gen=self.gfx)
    return AMDCopyQueue(self).memory_barrier().words()   # the HDP flush, then (SDMA 5+) the GL2 invalidate

  def reg(self, name: str) -> int:
    """Absolute dword address of a GC register on this device."""
    r = self.gc[name]
    return self.gc_base[r.base_idx] + r.offset

  def compute_queue(self) -> AMDComputeQueue: return AMDComputeQueue(self)
  def copy_queue(self) -> AMDCopyQueue: return AMDCopyQueue(self)

  def program(self, code: bytes, name: str | None = None):
    from rawgpu.hcq.amd.program import AMDProgram
    return AMDProgram(self, code, name)

  def exec_template(self, prg, g, l, timing: bool | str) -> AMDComputeQueue:
    """The launch template: timing=True times with a signal pair of its own, "profile" with patched addresses
    (every launch gets its own pair from the Profiler)."""
    from rawgpu.hcq.patch import Var
    q = AMDComputeQueue(self)
    if timing == "profile": start, end = Var("ts_start"), Var("ts_end")
    elif timing:
      start, end = q.t_start, q.t_end = self.dev.new_signal("start"), self.dev.new_signal("end")
      prg._signals += [start, end]   # freed with the program
    if timing: q.timestamp(start)
    q.exec(prg, Var("kernargs"), g, l)
    if timing: q.timestamp(end)
    q._programs = []   # the program keeps its templates: a reference back would make a cycle (and it takes tickets)
    return q.signal(self.dev.timeline, Var("timeline"))

  def scratch_for(self, prg) -> tuple[int, int]:
    """COMPUTE_TMPRING_SIZE and the scratch base for prg: per-lane private memory, one slot per wave in flight. On
    gfx11+ WAVES counts the slots of each shader engine (Mesa's radv_emit_compute_scratch divides by the SE count),
    so the buffer holds WAVES slots for every engine, and an engine holds at least one 1024-thread workgroup's waves
    (a workgroup starts only when all its waves have slots on its engine).

    The buffer only grows. One that a larger need replaces is kept until the device closes: launch templates and
    recorded graphs carry its address, and work queued with them may run any time."""
    if not prg.scratch: return 0, 0
    wave = 32 if prg.wave32 else 64
    unit, wave_bytes = scratch_wave_bytes(self.gfx, prg)
    engines = max(1, self.dev.props.shader_engines) if self.gfx >= 11 else 1
    total, group = SCRATCH_SLOTS_PER_CU * max(1, self.dev.props.compute_units), 1024 // wave
    while total > group * engines and total * wave_bytes > SCRATCH_BUDGET: total //= 2
    waves = min(max(-(-total // engines), group), 0xfff)
    if self.gfx < 10:   # gfx9 counts the XCC's slots, which its shader engines share evenly (ROCr asserts it)
      se = max(1, self.dev.props.shader_engines)
      waves = max(se, waves // se * se)
    need = waves * engines * wave_bytes
    if self._scratch is None or self._scratch.size < need:
      if self._scratch is not None: self._retired_scratch.append(self._scratch)
      grown = min(2 * self._scratch.size, SCRATCH_BUDGET) if self._scratch is not None else 0
      self._scratch = self.dev.alloc(max(need, grown))
    return self.gc["regCOMPUTE_TMPRING_SIZE"].encode(WAVES=waves, WAVESIZE=wave_bytes // unit), self._scratch.va

  def check_scratch(self, prg, name: str) -> None:
    """At load: a kernel whose per-wave scratch does not fit COMPUTE_TMPRING_SIZE.WAVESIZE is refused now, not at its
    first launch."""
    if not prg.scratch: return
    unit, wave_bytes = scratch_wave_bytes(self.gfx, prg)
    shift, mask = self.gc["regCOMPUTE_TMPRING_SIZE"].fields["WAVESIZE"]
    if wave_bytes // unit > mask >> shift:
      wave = 32 if prg.wave32 else 64
      raise CodeObjectError(f"kernel {name} needs {prg.scratch} bytes of scratch per work-item"
                            f"{' (with the dynamic stack reserve)' if prg.dynamic_stack else ''}; "
                            f"{self.dev.props.arch} gives a wave{wave} at most {(mask >> shift) * unit // wave}")

  def maps(self, buf: Buffer) -> bool:
    """Whether a kernel of this device may take buf of another device (mapped with Device.map); the launch about to
    be queued then counts as a use of buf on this device's timeline."""
    if not self.dev.maps(buf): return False
    buf.used_by(self.dev, self.dev.timeline_value)
    return True

  def _settle(self, buf: Buffer) -> None:
    """Before this device's engine touches buf: the work queued on it by its owner (if another device) and by
    devices other than this one is done."""
    if buf.dev is not self.dev: buf.dev.wait_timeline(buf.owner_use())
    buf.wait_peers(but=self.dev)

  # ---- copies
  def _staging_bufs(self) -> list[Buffer]:
    if self._staging is None: self._staging = [self.dev.alloc(STAGING, host=True) for _ in range(2)]
    return self._staging

  def _sdma(self, dst_va: int, src_va: int, n: int) -> int:
    v, q, prof = self.dev.next_timeline("sdma"), AMDCopyQueue(self), self.dev._profiler
    if prof is not None:   # timed on the GPU: the clock before and after the copy
      start, end = prof.timed(f"copy {n} bytes", "copy", v)
      q.timestamp(start).copy(dst_va, src_va, n).timestamp(end)
    else: q.copy(dst_va, src_va, n)
    q.signal(self.dev.timeline, self.dev.timeline_gpu(v)).submit(self.dev)
    return v

  def copyin(self, dst: Buffer, src: memoryview) -> None:
    dst.wait_peers()
    if dst.mem.cpu is not None and (dst.host or (len(src) <= BAR_COPYIN and self.bar_copyin)):
      self.dev.wait_timeline(dst.owner_use())   # no queued work still reads or writes it
      dst.mem.cpu.writebytes(dst.offset, src)
      if not dst.host: self.dev.iface.flush_hdp()
      return
    fences = [0, 0]
    for i, off in enumerate(range(0, len(src), STAGING)):
      st, n = self._staging_bufs()[i % 2], min(STAGING, len(src) - off)
      self.dev.wait_timeline(fences[i % 2])
      st.mem.cpu.writebytes(0, src[off:off + n])
      fences[i % 2] = self._sdma(dst.va + off, st.va, n)
      dst.used_until(fences[i % 2])
    self.dev.wait_timeline(max(fences))

  def copyout(self, dst: memoryview, src: Buffer) -> None:
    self.dev.wait_timeline(src.owner_use())
    src.wait_peers()
    if src.host and src.mem.cpu is not None:
      dst[:] = src.mem.cpu.readbytes(src.offset, len(dst))
      return
    bufs, pending = self._staging_bufs(), []
    for i, off in enumerate(range(0, len(dst), STAGING)):
      n = min(STAGING, len(dst) - off)
      if len(pending) == 2: self._drain(dst, *pending.pop(0))
      pending.append((off, n, bufs[i % 2], self._sdma(bufs[i % 2].va, src.va + off, n)))
    for p in pending: self._drain(dst, *p)

  def _drain(self, dst: memoryview, off: int, n: int, st: Buffer, fence: int) -> None:
    self.dev.wait_timeline(fence)
    dst[off:off + n] = st.mem.cpu.readbytes(0, n)

  def transfer(self, dst: Buffer, src: Buffer, size: int) -> None:
    if size > min(dst.size, src.size): raise RawGPUError(f"transfer of {size} bytes between buffers of {src.size} and {dst.size}")
    for b in (dst, src):
      if b.dev is not self.dev: self.dev.map(b)   # a peer copy: this device's copy engine reaches it over the bus
      self._settle(b)   # (another device's queued work on a buffer of this one's counts too)
    v = self._sdma(dst.va, src.va, size)
    dst.used_by(self.dev, v); src.used_by(self.dev, v)

  def describe_history(self, rings) -> str:
    from rawgpu.hcq.amd import sdma
    out = []
    for engine, r in rings.items():
      for words in r.recent()[-2:]:
        text = pm4.format_pm4(list(words), gen=self.gfx) if engine == "compute" else sdma.format_sdma(list(words), self.sdma_version)
        out.append(f"[{engine}] " + text.replace("\n", f"\n[{engine}] "))
        if engine == "compute": out += self._bound_ibs(words)
    return "\n".join(out) or "(nothing submitted)"

  def bound_ibs(self, words) -> list[tuple[int, list[int]]]:
    """(GPU VA, words) of each bound queue (a graph replay's) that a submission's INDIRECT_BUFFERs run."""
    bound = getattr(getattr(self, "dev", None), "_bound", {})
    return [(p.fields["ib_base"], list(q._words)) for p in pm4.decode_pm4(list(words), gen=self.gfx)
            if p.name == "INDIRECT_BUFFER" and (q := bound.get(p.fields["ib_base"])) is not None]

  def _bound_ibs(self, words) -> list[str]:
    """The packets of the bound queues that a submission's INDIRECT_BUFFERs run, decoded."""
    return [f"[compute IB {va:#x}] " + pm4.format_pm4(ib, gen=self.gfx).replace("\n", f"\n[compute IB {va:#x}] ")
            for va, ib in self.bound_ibs(words)]

