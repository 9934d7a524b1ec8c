"""The kernel's side of user queues on the emulated board: hardware queue descriptors programmed with the user's
ring, read/write pointer and EOP addresses (GPU VAs in the process's VM), as amdgpu's MQD managers do. The register
sequences are AM's own (drivers/am gfx.py and sdma.py), given the process's addresses.

Each process has a VM and a VMID of its own per node (amdgpu's KFD range: 8..15, 3..15 on gfx9.4.3, split 4-9 / 10-15
between the two XCDs of an AID in CPX mode; kept for the process's life here, where amdkfd without a HWS takes it with
the first queue and amdgpu's schedulers share them out). SDMA user
queues take the ring queues amdkfd gives them (sdma_queue_ids), with its static doorbells (sdma_doorbell).
"""
from __future__ import annotations
from dataclasses import dataclass
from rawgpu.drivers.am import facts as F
from rawgpu.drivers.am.gfx import MAX_QUEUES, MQD_SIZE, ComputeQueue
from rawgpu.drivers.am.sdma import SDMAQueue

# amdkfd's flat apertures of a gfx9+ process, 4 GiB each (kfd_flat_memory.c MAKE_LDS_APP_BASE_V9, MAKE_SCRATCH_APP_BASE_V9)
LDS_APERTURE, SCRATCH_APERTURE = 1 << 48, 2 << 48
MAX_COMPUTE = MAX_QUEUES   # MEC 1 pipe 0 queues 0..7 (AM's GFX.doorbell: MEC_RING0 + n; on MI300 the node's XCC's layout-1 MEC rings)


@dataclass
class HWQueue:
  kind: str            # "compute" / "sdma"
  slot: int | tuple[int, int]   # compute queue number, or (SDMA engine, sdma_queue_id)
  doorbell: int        # dword index in the doorbell BAR (== within the process doorbell frame)
  am: ComputeQueue | SDMAQueue


def program_apertures(dev, xcc: int, vmid: int) -> None:
  """The process's VMID: amdkfd's sh_mem_config (update_qpd_v9/v11/v12: unaligned access; gfx9.4.3 also retry off,
  as its noretry default, and F8_MODE; gfx11/12 instruction prefetch 3) and its apertures in SH_MEM_BASES
  (program_sh_mem_settings, without a HWS), where the compute units place generic pointers to LDS and private memory."""
  config = dict(ALIGNMENT_MODE=F.SH_MEM_ALIGNMENT_MODE_UNALIGNED)
  config.update(RETRY_DISABLE=1, F8_MODE=1) if dev.gc9 else config.update(INITIAL_INST_PREFETCH=3)
  dev.gfx.grbm_select(vmid=vmid, xcc=xcc)
  dev.gfx.gc("regSH_MEM_CONFIG", xcc).write(**config)
  dev.gfx.gc("regSH_MEM_BASES", xcc).write(SHARED_BASE=LDS_APERTURE >> 48, PRIVATE_BASE=SCRATCH_APERTURE >> 48)
  dev.gfx.grbm_select(xcc=xcc)


def compute_start(dev, slot: int, ring_va: int, ring_size: int, rptr_va: int, wptr_va: int, eop_va: int, eop_size: int, xcc: int, vmid: int) -> HWQueue:
  q = ComputeQueue(slot, 0, ring_size, 0, 0, dev.valloc_phys(MQD_SIZE), dev.gfx.doorbell(slot, xcc), user=(ring_va, rptr_va, wptr_va, eop_va, eop_size),
                   xcc=xcc, vmid=vmid)
  dev.vram(q.mqd, MQD_SIZE)[:] = bytes(MQD_SIZE)
  dev.gfx.program_hqd(q)
  dev.regs.reg("gc", "regCP_ME1_PIPE0_INT_CNTL", xcc).update(TIME_STAMP_INT_ENABLE=1)   # end-of-pipe interrupts reach the IH (events)
  return HWQueue("compute", slot, q.doorbell, q)


def compute_stop(dev, q: HWQueue) -> None:
  dev.gfx.stop_hqd(q.am)   # waves reset, as destroy_queue_nocpsch_locked's KFD_PREEMPT_TYPE_WAVEFRONT_RESET
  dev.pfree(q.am.mqd)


def evict(dev, q: HWQueue) -> None:
  """Take the queue off the hardware and keep its descriptor (kfd_dqm_evict_pasid); destroying it later frees it."""
  # the kernel saves the waves (CWSR) or drains them; nothing restores an evicted queue here, so a reset looks the same
  if q.kind == "compute": dev.gfx.stop_hqd(q.am)
  else: dev.sdma.free_queue(q.am)


def sdma_queue_ids(dev) -> range:
  """The sdma_queue_ids amdkfd gives user queues on each engine (kfd_device.c): SDMA 6/7 have 8 queues and reserve
  0 and 1 of every engine (amdgpu's gfx and page rings); SDMA 4.4.2 has 8 RLC queues and reserves none."""
  return range(8) if dev.gc9 else range(2, 8)


def sdma_doorbell(dev, engine: int, qid: int) -> int:
  """amdkfd's static doorbell of SDMA queue qid on an engine (allocate_doorbell): the engine's 64-bit doorbell, plus
  the mirror offset for odd queues, plus qid // 2; as a dword index."""
  return dev.sdma.doorbell(engine) + 2 * ((qid & 1) * F.KFD_QUEUE_DOORBELL_MIRROR_OFFSET + (qid >> 1))


def sdma_start(dev, engine: int, qid: int, ring_va: int, ring_size: int, rptr_va: int, wptr_va: int, vmid: int) -> HWQueue:
  """User queue qid of an engine (SDMA 4.4.2: its RLC queue qid, the engine's ring queue 2 + qid)."""
  q = SDMAQueue(engine, 0, ring_size, 0, sdma_doorbell(dev, engine, qid), user=(ring_va, rptr_va, wptr_va), queue=qid + 2 if dev.gc9 else qid, vmid=vmid)
  dev.sdma.program(q)
  return HWQueue("sdma", (engine, qid), q.doorbell, q)


def sdma_stop(dev, q: HWQueue) -> None:
  dev.sdma.free_queue(q.am)
