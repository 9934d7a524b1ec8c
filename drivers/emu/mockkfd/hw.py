"""The kernel's side of user queues on the emulated board: hardware queue descriptors programmed with the user's
ring, read/write pointer and EOP addresses (GPU VAs in the process's VM), as amdgpu's MQD managers do.

Every process shares VMID 0 and one page table here (the real kernel gives each process its own VMID).
"""
from __future__ import annotations
from dataclasses import dataclass
from rawgpu.drivers.am import facts as F

MAX_COMPUTE = 8        # MEC 1 pipe 0 queues 0..7 (doorbells MEC_RING0 + n)
MQD_SIZE = 0x1000
SDMA1_REG_OFFSET = 0x600
SDMA_ENGINE_STRIDE = 0x0A   # AMDGPU_NAVI10_DOORBELL_sDMA_ENGINE1 - ENGINE0 (amdgpu_doorbell.h), in 64-bit doorbells


def log2(x: int) -> int: return x.bit_length() - 1


@dataclass
class HWQueue:
  kind: str            # "compute" / "sdma"
  slot: int            # compute queue number or SDMA engine
  doorbell: int        # dword index in the doorbell BAR (== within the process doorbell frame)
  mqd: int = 0         # kernel VRAM for the MQD (compute)


def compute_start(dev, slot: int, ring_va: int, ring_size: int, rptr_va: int, wptr_va: int, eop_va: int, eop_size: int) -> HWQueue:
  gc = lambda n: dev.regs.reg("gc", n)
  q = HWQueue("compute", slot, (F.AMDGPU_NAVI10_DOORBELL_MEC_RING0 + slot) * 2, dev.valloc_phys(MQD_SIZE))
  dev.vram(q.mqd, MQD_SIZE)[:] = bytes(MQD_SIZE)
  mqd = dev.gmc.mc(q.mqd)
  gfx = dev.gfx
  gfx.grbm_select(me=1, pipe=0, queue=slot)
  try:
    gc("regCP_PQ_WPTR_POLL_CNTL").update(EN=0)
    gc("regCP_HQD_EOP_BASE_ADDR").write((eop_va >> 8) & 0xffffffff)
    gc("regCP_HQD_EOP_BASE_ADDR_HI").write(eop_va >> 40)
    gc("regCP_HQD_EOP_CONTROL").write(EOP_SIZE=log2(eop_size // 4) - 1)
    gc("regCP_MQD_BASE_ADDR").write(mqd & 0xfffffffc)
    gc("regCP_MQD_BASE_ADDR_HI").write(mqd >> 32)
    gc("regCP_MQD_CONTROL").write(VMID=0)
    gc("regCP_HQD_PQ_BASE").write((ring_va >> 8) & 0xffffffff)
    gc("regCP_HQD_PQ_BASE_HI").write(ring_va >> 40)
    gc("regCP_HQD_PQ_CONTROL").write(QUEUE_SIZE=log2(ring_size // 4) - 1, RPTR_BLOCK_SIZE=log2(0x1000 // 4) - 1,
                                     UNORD_DISPATCH=1, TUNNEL_DISPATCH=0, PRIV_STATE=1, KMD_QUEUE=1)
    gc("regCP_HQD_PQ_RPTR_REPORT_ADDR").write(rptr_va & 0xfffffffc)
    gc("regCP_HQD_PQ_RPTR_REPORT_ADDR_HI").write((rptr_va >> 32) & 0xffff)
    gc("regCP_HQD_PQ_WPTR_POLL_ADDR").write(wptr_va & 0xfffffff8)
    gc("regCP_HQD_PQ_WPTR_POLL_ADDR_HI").write((wptr_va >> 32) & 0xffff)
    gc("regCP_HQD_PQ_DOORBELL_CONTROL").write(DOORBELL_OFFSET=q.doorbell, DOORBELL_EN=1, DOORBELL_SOURCE=0, DOORBELL_HIT=0)
    for n in ("regCP_HQD_PQ_RPTR", "regCP_HQD_PQ_WPTR_LO", "regCP_HQD_PQ_WPTR_HI", "regCP_HQD_VMID"): gc(n).write(0)
    gc("regCP_HQD_PERSISTENT_STATE").update(PRELOAD_SIZE=0x55)
    gc("regCP_HQD_IB_CONTROL").update(MIN_IB_AVAIL_SIZE=3)
    gc("regCP_HQD_ACTIVE").write(ACTIVE=1)
  finally: gfx.grbm_select()
  gc("regCP_ME1_PIPE0_INT_CNTL").update(TIME_STAMP_INT_ENABLE=1)   # end-of-pipe interrupts reach the IH (events)
  return q


def compute_stop(dev, q: HWQueue) -> None:
  gc = lambda n: dev.regs.reg("gc", n)
  dev.gfx.grbm_select(me=1, pipe=0, queue=q.slot)
  try:
    if gc("regCP_HQD_ACTIVE").read() & 1:
      gc("regCP_HQD_DEQUEUE_REQUEST").write(DEQUEUE_REQ=1)
      dev.wait(lambda: (gc("regCP_HQD_ACTIVE").read() & 1) == 0, "compute queue dequeue")
      gc("regCP_HQD_DEQUEUE_REQUEST").write(0)
  finally: dev.gfx.grbm_select()
  dev.pfree(q.mqd)


def _sdma_reg(dev, engine: int, name: str):
  """Engine N's copy of an SDMA0 register by its own name (some, like F32_CNTL, are not at a fixed stride)."""
  own = name.replace("regSDMA0_", f"regSDMA{engine}_")
  if dev.regs.has("gc", own): return dev.regs.reg("gc", own)
  b = dev.regs.reg("gc", name)
  return type(b)(b.regs, b.reg, b.addr + engine * SDMA1_REG_OFFSET)


def _sdma_unhalt(dev, engine: int) -> None:
  if dev.regs.has("gc", "regSDMA0_F32_CNTL"): _sdma_reg(dev, engine, "regSDMA0_F32_CNTL").update(HALT=0, TH1_RESET=0)
  else: _sdma_reg(dev, engine, "regSDMA0_MCU_CNTL").update(HALT=0)   # SDMA 7


def sdma_start(dev, engine: int, engines: int, ring_va: int, ring_size: int, rptr_va: int, wptr_va: int) -> HWQueue:
  q = HWQueue("sdma", engine, (F.AMDGPU_NAVI10_DOORBELL_sDMA_ENGINE0 + engine * SDMA_ENGINE_STRIDE) << 1)
  r = lambda n: _sdma_reg(dev, engine, n)
  if dev.regs.has("gc", "regSDMA0_SEM_WAIT_FAIL_TIMER_CNTL"): r("regSDMA0_SEM_WAIT_FAIL_TIMER_CNTL").write(0)
  cntl = r("regSDMA0_QUEUE0_RB_CNTL")
  v = cntl.reg.modify(cntl.read(), RB_ENABLE=0, RB_SIZE=log2(ring_size // 4), RB_PRIV=1)
  cntl.write(v)
  for n in ("RB_RPTR", "RB_RPTR_HI", "RB_WPTR", "RB_WPTR_HI"): r(f"regSDMA0_QUEUE0_{n}").write(0)
  r("regSDMA0_QUEUE0_RB_WPTR_POLL_ADDR_LO").write(wptr_va & 0xffffffff)
  r("regSDMA0_QUEUE0_RB_WPTR_POLL_ADDR_HI").write(wptr_va >> 32)
  r("regSDMA0_QUEUE0_RB_RPTR_ADDR_HI").write(rptr_va >> 32)
  r("regSDMA0_QUEUE0_RB_RPTR_ADDR_LO").write(rptr_va & 0xfffffffc)
  poll = "F32_WPTR_POLL_ENABLE" if "F32_WPTR_POLL_ENABLE" in cntl.reg.fields else "MCU_WPTR_POLL_ENABLE"   # SDMA 7 renamed it
  v = cntl.reg.modify(v, RPTR_WRITEBACK_ENABLE=1, WPTR_POLL_ENABLE=0, **{poll: 1})
  r("regSDMA0_QUEUE0_RB_BASE").write((ring_va >> 8) & 0xffffffff)
  r("regSDMA0_QUEUE0_RB_BASE_HI").write(ring_va >> 40)
  r("regSDMA0_QUEUE0_MINOR_PTR_UPDATE").write(1)
  r("regSDMA0_QUEUE0_RB_WPTR").write(0)
  r("regSDMA0_QUEUE0_RB_WPTR_HI").write(0)
  r("regSDMA0_QUEUE0_DOORBELL").update(ENABLE=1)
  r("regSDMA0_QUEUE0_DOORBELL_OFFSET").update(OFFSET=q.doorbell)
  dev.soc.doorbell_range(2, awid=0xe, offset=(F.AMDGPU_NAVI10_DOORBELL_sDMA_ENGINE0 << 1), size=F.SDMA_DOORBELL_RANGE * engines, awaddr=0x3)
  r("regSDMA0_QUEUE0_MINOR_PTR_UPDATE").write(0)
  r("regSDMA0_UTCL1_CNTL").update(RESP_MODE=3, REDO_DELAY=9)
  _sdma_unhalt(dev, engine)
  cntl.write(cntl.reg.modify(v, RB_ENABLE=1))
  r("regSDMA0_QUEUE0_IB_CNTL").update(IB_ENABLE=1)
  return q


def sdma_stop(dev, q: HWQueue) -> None:
  _sdma_reg(dev, q.slot, "regSDMA0_QUEUE0_RB_CNTL").update(RB_ENABLE=0)
  _sdma_reg(dev, q.slot, "regSDMA0_QUEUE0_IB_CNTL").update(IB_ENABLE=0)
