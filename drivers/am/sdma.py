"""SDMA: AM's own rings, one per engine on queue 0 (sdma_v6_0.c / sdma_v7_0.c gfx_resume; sdma_v4_4_2.c on MI300, where
each engine is an IP instance of its own and queue 0 is the GFX ring); program() also sets up another ring queue of an
engine (MOCKKFD's user queues, as amdkfd's hqd_sdma_load). Write pointers are in bytes."""
from __future__ import annotations
import time
from dataclasses import dataclass
from rawgpu.drivers.am import facts as F
from rawgpu.drivers.am.block import Block
from rawgpu.errors import RawGPUError

SOFT_RESET_SETTLE_S = 100e-6   # sdma_v6_0_soft_reset's udelay(100) around the GRBM soft reset


@dataclass
class SDMAQueue:
  engine: int
  ring: int
  size: int
  ptrs: int          # rptr writeback at +0, wptr poll at +0x100
  doorbell: int      # dword index
  user: tuple[int, int, int] | None = None   # (ring, rptr, wptr) GPU addresses when not AM's own (MOCKKFD's user queues)
  queue: int = 0     # the engine's ring queue (SDMA 6/7: QUEUEn; SDMA 4.4.2: see SDMA_V4_QUEUES); AM's own rings use 0
  vmid: int = 0      # the VM its addresses are in (AM's own: 0; MOCKKFD's kernel gives each process one)


class SDMA(Block):
  name = "sdma"
  warm_init = True

  def init_sw(self) -> None:
    self.queues: dict[int, SDMAQueue] = {}
    self.engines = max(1, min(2, self.dev.disc.count("sdma")))   # a device's copy engines (on MI300: each XCC's)
    # MI300: each XCC is a partition, with the copy engines amdgpu gives a CPX partition (aqua_vanjaram.c: SDMA
    # instances DIV_ROUND_UP(engines, partitions) per partition, partition k's XCP_INST_MASK from k times that on)
    self.partitions = self.dev.gfx.xcc_count()

  def partition_engines(self, xcc: int) -> range: return range(self.engines * xcc, self.engines * (xcc + 1))
  def partition_of(self, engine: int) -> int: return engine // self.engines
  def all_engines(self) -> range: return range(self.engines * self.partitions)

  @property
  def v4(self) -> bool: return self.dev.gc9   # SDMA 4.4.2 (MI300): an IP of its own per engine, SDMA_GFX_* names

  def r(self, engine: int, name: str, queue: int = 0):
    """Engine `engine`'s register by its SDMA0 name; a QUEUE0 register names ring queue `queue`'s (SDMA 4.4.2: the
    engine's own instance, its queues named as in F.SDMA_V4_QUEUES)."""
    if queue or self.v4: name = name.replace("regSDMA0_QUEUE0_", f"regSDMA0_{F.SDMA_V4_QUEUES[queue] if self.v4 else f'QUEUE{queue}'}_")
    if self.v4: return self.dev.regs.reg("sdma", name.replace("regSDMA0_", "regSDMA_"), engine)
    # SDMA 6/7: engine 1's registers by their own names (most sit 0x600 dwords after engine 0's, but the F32/MCU
    # control block only 0x20: sdma_v6_0_get_reg_offset's HYP_DEC range)
    return self.dev.regs.reg("gc", name.replace("regSDMA0_", f"regSDMA{engine}_"))

  def init_hw(self) -> None:
    for e in self.all_engines():
      self.engine_setup(e)
      self.halt(e, False)
    # GC 11/12: one S2A route for every engine's doorbells, read-modify-written (nbio_v4_3 / nbif_v6_3_1
    # sdma_doorbell_range for instance 0). MI300's per-AID routes are soc.sdma_doorbell_ranges'.
    if not self.v4: self.dev.soc.doorbell_range(2, awid=0xe, offset=self.doorbell(0), size=F.SDMA_DOORBELL_RANGE * self.engines, awaddr=0x3, rmw=True)
    for q in list(self.queues.values()): self.program(q)

  def engine_setup(self, e: int) -> None:
    """Engine e's settings as sdma_v6_0/v7_0 gfx_resume leaves every engine: the queue-hang watchdog at
    usec_timeout in 100 ms units, responses for non-copy addresses, and the L2 policies of its reads and writes
    (bits 15:12 and 31:24 cleared first; SDMA 6 also keeps its writes out of the last-level cache). SDMA 4.4.2
    (sdma_v4_4_2_inst_start): its UTC L1 on ("set utc l1 enable flag always to 1"), the context-empty interrupt, the
    semaphore-wait timer off, and a longer page-fault timeout ("to avoid interrupt storm")."""
    if self.v4:
      self.r(e, "regSDMA0_CNTL").update(UTC_L1_ENABLE=1, CTXEMPTY_INT_ENABLE=1)
      self.r(e, "regSDMA0_SEM_WAIT_FAIL_TIMER_CNTL").write(0)
      self.r(e, "regSDMA0_UTCL1_TIMEOUT").write(RD_XNACK_LIMIT=0x80, WR_XNACK_LIMIT=0x80)   # the kernel's 0x00800080
      return
    if self.dev.ips["sdma"][0] == 6: self.ctxempty_interrupt(e, True)   # sdma_v6_0_start ("enable sdma ring preemption"); 7 has none
    self.r(e, "regSDMA0_WATCHDOG_CNTL").update(QUEUE_HANG_COUNT=max(F.AMDGPU_MAX_USEC_TIMEOUT // 100000, 1))
    self.r(e, "regSDMA0_UTCL1_CNTL").update(RESP_MODE=3, REDO_DELAY=9)
    page = self.r(e, "regSDMA0_UTCL1_PAGE")
    nalloc = {"LLC_NOALLOC": 1} if "LLC_NOALLOC" in page.reg.fields else {}
    page.write(page.read() & 0xff0fff | page.reg.encode(RD_L2_POLICY=F.CACHE_READ_POLICY_L2__DEFAULT, WR_L2_POLICY=F.CACHE_WRITE_POLICY_L2__DEFAULT, **nalloc))

  def ctxempty_interrupt(self, e: int, on: bool) -> None: self.r(e, "regSDMA0_CNTL").update(CTXEMPTY_INT_ENABLE=int(on))

  def halt(self, e: int, on: bool, reset: bool = False) -> None:
    """Halt or start engine e's microengine. SDMA 4.4.2 is started by the PSP as it loads the image, and amdgpu
    never writes its F32_CNTL under PSP loading (sdma_v4_4_2_inst_enable): nothing to do there."""
    if self.v4: return
    if self.dev.regs.has("gc", "regSDMA0_F32_CNTL"): self.r(e, "regSDMA0_F32_CNTL").update(HALT=int(on), TH1_RESET=int(on))
    elif on: self.r(e, "regSDMA0_MCU_CNTL").update(HALT=1, **({"RESET": 1} if reset else {}))   # SDMA 7 renamed it
    else: self.r(e, "regSDMA0_MCU_CNTL").update(HALT=0, RESET=0)   # as sdma_v7_0_gfx_resume starts the engine

  def new_queue(self, size: int, xcc: int = 0) -> SDMAQueue:
    free = [e for e in self.partition_engines(xcc) if e not in self.queues]
    if not free: raise RawGPUError(f"{self.dev.bus}: all {self.engines} SDMA engines{f' of XCC {xcc}' if self.dev.gc9 else ''} already have a ring")
    if size & (size - 1) or size < 0x1000: raise RawGPUError(f"SDMA ring size {size:#x} must be a power of two >= 4 KiB")
    d, e = self.dev, free[0]
    q = SDMAQueue(e, d.valloc_phys(size, align=max(size, 0x1000)), size, d.valloc_phys(0x1000), self.doorbell(e))
    d.vram(q.ring, size)[:] = bytes(size)
    d.vram(q.ptrs, 0x1000)[:] = bytes(0x1000)
    self.queues[e] = q
    self.program(q)
    return q

  def doorbell(self, e: int) -> int:
    """Engine e's doorbell (dword index): sdma_engine[e] = first + e * (sdma_doorbell_range >> 1) 64-bit doorbells
    (soc21.c, aqua_vanjaram.c)."""
    first = F.AMDGPU_DOORBELL_LAYOUT1_sDMA_ENGINE_START if self.v4 else F.AMDGPU_NAVI10_DOORBELL_sDMA_ENGINE0
    return (first << 1) + e * F.SDMA_DOORBELL_RANGE

  def program(self, q: SDMAQueue) -> None:
    e, mc, r = q.engine, self.dev.gmc.mc, lambda n: self.r(q.engine, n, q.queue)
    ring, rptr, wptr = q.user or (mc(q.ring), mc(q.ptrs), mc(q.ptrs + 0x100))
    if self.dev.regs.has("gc", "regSDMA0_SEM_WAIT_FAIL_TIMER_CNTL"): r("regSDMA0_SEM_WAIT_FAIL_TIMER_CNTL").write(0)
    cntl = r("regSDMA0_QUEUE0_RB_CNTL")
    # AM's own rings are privileged; a process's queue is not (amdkfd's update_mqd_sdma leaves RB_PRIV clear)
    v = cntl.reg.modify(cntl.read(), RB_ENABLE=0, RB_SIZE=(q.size // 4).bit_length() - 1, RB_PRIV=int(q.user is None), RB_VMID=q.vmid)
    cntl.write(v)
    for n in ("RB_RPTR", "RB_RPTR_HI", "RB_WPTR", "RB_WPTR_HI"): r(f"regSDMA0_QUEUE0_{n}").write(0)
    r("regSDMA0_QUEUE0_RB_WPTR_POLL_ADDR_LO").write(wptr & 0xffffffff)
    r("regSDMA0_QUEUE0_RB_WPTR_POLL_ADDR_HI").write(wptr >> 32)
    r("regSDMA0_QUEUE0_RB_RPTR_ADDR_HI").write(rptr >> 32)
    r("regSDMA0_QUEUE0_RB_RPTR_ADDR_LO").write(rptr & 0xfffffffc)
    if self.v4:   # SDMA 4 keeps its write-pointer polling in RB_WPTR_POLL_CNTL: off on bare metal (doorbells), as the kernel
      v = cntl.reg.modify(v, RPTR_WRITEBACK_ENABLE=1)
      r("regSDMA0_QUEUE0_RB_WPTR_POLL_CNTL").update(F32_POLL_ENABLE=0)
    else:
      poll = "F32_WPTR_POLL_ENABLE" if "F32_WPTR_POLL_ENABLE" in cntl.reg.fields else "MCU_WPTR_POLL_ENABLE"   # SDMA 7 renamed it
      v = cntl.reg.modify(v, RPTR_WRITEBACK_ENABLE=1, WPTR_POLL_ENABLE=0, **{poll: 1})
    r("regSDMA0_QUEUE0_RB_BASE").write((ring >> 8) & 0xffffffff)
    r("regSDMA0_QUEUE0_RB_BASE_HI").write(ring >> 40)
    r("regSDMA0_QUEUE0_MINOR_PTR_UPDATE").write(1)
    r("regSDMA0_QUEUE0_RB_WPTR").write(0)
    r("regSDMA0_QUEUE0_RB_WPTR_HI").write(0)
    r("regSDMA0_QUEUE0_DOORBELL").update(ENABLE=1)
    r("regSDMA0_QUEUE0_DOORBELL_OFFSET").update(OFFSET=q.doorbell)
    r("regSDMA0_QUEUE0_MINOR_PTR_UPDATE").write(0)
    self.halt(e, False)
    cntl.write(cntl.reg.modify(v, RB_ENABLE=1))
    r("regSDMA0_QUEUE0_IB_CNTL").update(IB_ENABLE=1)

  def reset_refusal(self, e: int) -> str | None:
    """Why engine e cannot be reset in place, or None. SDMA 6/7 reset through GRBM_SOFT_RESET; SDMA 4.4.2 (MI300) has
    no such bit (Linux 6.12's sdma_v4_4_2_soft_reset is a todo) and later kernels ask the SMU, whose PMFW must be new
    enough to know the message."""
    if not self.v4:
      if f"SOFT_RESET_SDMA{e}" in self.reg("gc", "regGRBM_SOFT_RESET").reg.fields: return None
      return f"{self.dev.bus}: SDMA engine {e} has no GRBM soft reset bit: close the device and open it again"
    smu, v = self.dev.smu, self.dev.smu.version
    need = F.SDMA_RESET_MIN_PMFW.get(v >> 24)
    if need is not None and v >= need: return None
    return (f"{self.dev.bus}: SDMA 4.4.2 engine {e} is reset by the SMU, and its PMFW {smu.version_str(v)} is older than the message "
            f"({'PMFW ' + smu.version_str(need) if need else 'no version of this PMFW program'} knows it): close the device and "
            "open it again, or update the board's firmware")

  def reset_queue(self, q: SDMAQueue) -> None:
    """Restart a ring's engine after a fault, then empty the ring and pointers and program it afresh (the queued work
    is dropped). SDMA 6/7 as sdma_v6_0/v7_0_soft_reset: stop the ring, freeze (SDMA 6) and halt the engine, pulse its
    GRBM soft reset. SDMA 4.4.2 as sdma_v4_4_2_reset_queue after 6.12: stop the ring, clear IB_PREEMPT, have the SMU
    reset the engine, and wait for its firmware to run again."""
    e, r, has = q.engine, lambda n: self.r(q.engine, n, q.queue), self.dev.regs.has
    if (why := self.reset_refusal(e)) is not None: raise RawGPUError(why)
    r("regSDMA0_QUEUE0_RB_CNTL").update(RB_ENABLE=0)
    r("regSDMA0_QUEUE0_IB_CNTL").update(IB_ENABLE=0)
    if self.v4:
      r("regSDMA0_QUEUE0_PREEMPT").update(IB_PREEMPT=0)
      self.dev.smu.send("PPSMC_MSG_ResetSDMA", 1 << e)
      halt = r("regSDMA0_F32_CNTL")
      self.dev.wait(lambda: not halt.fields()["HALT"], f"SDMA engine {e} to run again after the SMU reset it")
    else:
      grbm = self.reg("gc", "regGRBM_SOFT_RESET")
      if "FREEZE" in r("regSDMA0_FREEZE").reg.fields: r("regSDMA0_FREEZE").update(FREEZE=1)   # SDMA 6 only (7 leaves it)
      self.halt(e, True, reset=True)
      if has("gc", "regSDMA0_QUEUE0_PREEMPT"): r("regSDMA0_QUEUE0_PREEMPT").write(0)
      # sdma_v6_0/v7_0_soft_reset: 100 us for the halted engine's memory requests to drain, with the reset held, and
      # for the block to come out of it before its registers are written
      time.sleep(SOFT_RESET_SETTLE_S)
      grbm.write(grbm.reg.encode(**{f"SOFT_RESET_SDMA{e}": 1}))
      grbm.read()                      # the read back lets the write land before the reset is released
      time.sleep(SOFT_RESET_SETTLE_S)
      grbm.write(0)
      grbm.read()
      time.sleep(SOFT_RESET_SETTLE_S)
    self.dev.vram(q.ring, q.size)[:] = bytes(q.size)
    self.dev.vram(q.ptrs, 0x1000)[:] = bytes(0x1000)
    self.engine_setup(e)   # the reset returned the engine's registers to their power-on values
    self.program(q)

  def free_queue(self, q: SDMAQueue) -> None:
    r = lambda n: self.r(q.engine, n, q.queue)
    r("regSDMA0_QUEUE0_RB_CNTL").update(RB_ENABLE=0)
    if q.user is not None:
      # a process's queue, as amdkfd's hqd_sdma_destroy: its slot is reprogrammed only once the queue is idle, and no
      # doorbell reaches it meanwhile
      status = r("regSDMA0_QUEUE0_CONTEXT_STATUS")
      self.dev.wait(lambda: status.fields()["IDLE"], f"SDMA engine {q.engine} queue {q.queue} to go idle", timeout=2.0)
      r("regSDMA0_QUEUE0_DOORBELL").write(0)
    r("regSDMA0_QUEUE0_IB_CNTL").update(IB_ENABLE=0)
    if self.queues.get(q.engine) is q: del self.queues[q.engine]
    if q.user is None:   # AM's own ring and pointer page go back
      for paddr in (q.ring, q.ptrs): self.dev.pfree(paddr)

  def fini(self) -> None:
    for q in list(self.queues.values()): self.free_queue(q)
    for e in self.all_engines():
      if self.dev.ips["sdma"][0] == 6: self.ctxempty_interrupt(e, False)   # sdma_v6_0_hw_fini
      self.halt(e, True)
