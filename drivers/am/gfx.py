"""GFX: wait for the RLC autoload, start the MEC, and run compute queues straight on hardware queue descriptors
(gfx_v11_0.c / gfx_v12_0.c: wait_for_rlc_autoload_complete, cp_compute_enable, compute_mqd_init, kiq_init_register).

Queue N lives at MEC 1, pipe 0, queue N, with 64-bit doorbell MEC_RING0 + N. The MQD buffer exists for the CP to
save state into; the HQD registers are programmed directly, as the KIQ would from the MQD. On MI300 every XCC has
a MEC of its own, each a partition of one XCC: a queue names the XCC it runs on (its registers are that GC
instance's, its doorbell in that XCC's layout-1 range).
"""
from __future__ import annotations
import contextlib, ctypes
from dataclasses import dataclass
from rawgpu.drivers.am import facts as F
from rawgpu.drivers.am.block import Block
from rawgpu.errors import DeviceTimeout, FirmwareError, RawGPUError

MAX_QUEUES = 8
MQD_SIZE = 0x1000           # >= sizeof(v11_compute_mqd) and sizeof(v12_compute_mqd)


@dataclass
class ComputeQueue:
  queue: int
  ring: int           # VRAM paddr
  size: int
  ptrs: int           # page: rptr report at +0, wptr poll at +0x100
  eop: int
  mqd: int
  doorbell: int       # dword index in the doorbell BAR
  # (ring, rptr report, wptr poll, eop) GPU addresses and the EOP size when they are not AM's own buffers (MOCKKFD's
  # kernel runs user queues from process VAs)
  user: tuple[int, int, int, int, int] | None = None
  xcc: int = 0        # the XCC whose MEC runs it (MI300; 0 elsewhere)
  vmid: int = 0       # the VM its addresses are in (AM's own: 0; MOCKKFD's kernel gives each process one)


class GFX(Block):
  name = "gfx"
  warm_init = True

  def init_sw(self) -> None:
    self.queues: dict[tuple[int, int], ComputeQueue] = {}   # (xcc, queue) -> queue

  def gc(self, n: str, xcc: int = 0): return self.reg("gc", n, xcc)

  def xcc_count(self) -> int: return self.dev.disc.count("gc") if self.dev.gc9 else 1

  def check_xcc(self, xcc: int) -> None:
    n = self.xcc_count()
    if not 0 <= xcc < n: raise RawGPUError(f"{self.dev.bus}: no XCC {xcc}; the board has {n}" + (f" (0-{n - 1})" if self.dev.gc9 else ""))

  def grbm_select(self, me: int = 0, pipe: int = 0, queue: int = 0, vmid: int = 0, xcc: int = 0) -> None:
    self.gc("regGRBM_GFX_CNTL", xcc).write(MEID=me, PIPEID=pipe, QUEUEID=queue, VMID=vmid)

  def init_hw(self) -> None:
    d = self.dev
    if self.dev.gc9: return self._init_gc9()
    if not d.warm:
      d.step("gfx: rlc autoload", lambda: d.wait(lambda: self.gc("regCP_STAT").read() == 0 and
                                                 self.gc("regRLC_RLCS_BOOTLOAD_STATUS").fields()["BOOTLOAD_COMPLETE"] == 1,
                                                 "RLC autoload of the GFX firmware", timeout=10.0))
      d.gmc.init_hub("GC")      # GFX's hub, now that GFX is up (gfx_v11_0_gfxhub_enable); a warm boot keeps it
      d.gmc.flush_tlb()
      self.golden()
      self.config_mec_start()   # a warm boot follows AM's own clean fini: the pipes keep the start it gave them
    # address mode and apertures for VMID 0 (gfx_v11_0_constants_init)
    self.grbm_select(vmid=0)
    self.gc("regSH_MEM_CONFIG").write(ADDRESS_MODE=F.SH_MEM_ADDRESS_MODE_64, ALIGNMENT_MODE=F.SH_MEM_ALIGNMENT_MODE_UNALIGNED, INITIAL_INST_PREFETCH=3)
    self.gc("regSH_MEM_BASES").write(PRIVATE_BASE=F.PRIVATE_APERTURE_START >> 48, SHARED_BASE=F.SHARED_APERTURE_START >> 48)
    self.grbm_select()
    d.soc.gc_doorbell_init()
    # MEC doorbell window, then un-halt the MEC pipes
    self.gc("regCP_MEC_DOORBELL_RANGE_LOWER").write((F.AMDGPU_NAVI10_DOORBELL_KIQ * 2) << 2)
    self.gc("regCP_MEC_DOORBELL_RANGE_UPPER").write((F.AMDGPU_NAVI10_DOORBELL_USERQUEUE_END * 2) << 2)
    self.mec_enable(True)
    # end-of-pipe timestamps and queue errors of pipe 0 raise interrupts (gfx_v11_0_set_*_state for ME1 pipe 0)
    self.gc("regCP_ME1_PIPE0_INT_CNTL").update(TIME_STAMP_INT_ENABLE=1, OPCODE_ERROR_INT_ENABLE=1, PRIV_REG_INT_ENABLE=1)
    for q in list(self.queues.values()): self.program_hqd(q)

  def golden(self) -> None:
    """amdgpu's golden settings for this GC (facts.GOLDEN_GC), each a read-modify-write of the masked bits."""
    for name, and_mask, or_mask in F.GOLDEN_GC.get(self.dev.ips["gc"][0], ()):
      r = self.gc(name)
      r.write(or_mask if and_mask == 0xffffffff else (r.read() & ~and_mask) | (or_mask & and_mask))

  def config_mec_start(self) -> None:
    """Where each MEC pipe starts the RS64 firmware the PSP loaded (gfx_v11_0/v12_0_config_gfx_rs64): the image's
    entry (its header's start address, in dwords) into every pipe's program counter start, then a reset pulse, on
    whose release the pipes take it. Their reset value is no entry of these images."""
    start = self.dev.fw.ucode_start["mec"] >> 2
    for p in range(4):
      self.grbm_select(me=1, pipe=p)
      self.gc("regCP_MEC_RS64_PRGRM_CNTR_START").write(start & 0xffffffff)
      self.gc("regCP_MEC_RS64_PRGRM_CNTR_START_HI").write(start >> 32)
    self.grbm_select()
    cntl = self.gc("regCP_MEC_RS64_CNTL")
    cntl.update(**{f"MEC_PIPE{p}_RESET": 1 for p in range(4)})
    cntl.update(**{f"MEC_PIPE{p}_RESET": 0 for p in range(4)})

  def _init_gc9(self) -> None:
    """GC 9.4.3 (gfx_v9_4_3.c), on every XCC: the PSP loaded and started the RLC; each XCC a partition of its own
    (CPX: see cpx_mode), VMID 0's address mode and apertures, the MEC doorbell window of its layout-1 range, the MEC
    unhalted. A queue runs on the XCC it names."""
    self.cpx_mode()
    rev = self.dev.soc.rev_id()
    for x in range(self.xcc_count()):
      reg = lambda n: self.reg("gc", n, x)
      if not reg("regRLC_CNTL").fields()["RLC_ENABLE_F32"]:
        raise DeviceTimeout(f"{self.dev.bus}: the RLC of XCC {x} is not running (the PSP loads and starts it on MI300); power-cycle the board")
      # golden settings (gfx_v9_4_3_init_golden_registers): the address config, and a TCP UTCL1 setting by revision
      reg("regGB_ADDR_CONFIG").write(F.GOLDEN_GB_ADDR_CONFIG_GC_9_4_3)
      if rev == 0: reg("regTCP_UTCL1_CNTL1").update(REDUCE_FIFO_DEPTH_BY_2=2)
      else: reg("regTCP_UTCL1_CNTL2").update(SPARE=1)
      reg("regGRBM_GFX_CNTL").write(MEID=0, PIPEID=0, QUEUEID=0, VMID=0)
      reg("regSH_MEM_CONFIG").write(ADDRESS_MODE=F.SH_MEM_ADDRESS_MODE_64, ALIGNMENT_MODE=F.SH_MEM_ALIGNMENT_MODE_UNALIGNED, RETRY_DISABLE=1)
      reg("regSH_MEM_BASES").write(PRIVATE_BASE=F.PRIVATE_APERTURE_START >> 48, SHARED_BASE=F.SHARED_APERTURE_START >> 48)
      first = x * F.AMDGPU_DOORBELL_LAYOUT1_XCC_RANGE
      reg("regCP_MEC_DOORBELL_RANGE_LOWER").write(((F.AMDGPU_DOORBELL_LAYOUT1_KIQ_START + first) * 2) << 2)
      reg("regCP_MEC_DOORBELL_RANGE_UPPER").write(((F.AMDGPU_DOORBELL_LAYOUT1_USERQUEUE_END + first) * 2) << 2)
      reg("regCP_MEC_CNTL").write(0)
      reg("regCP_ME1_PIPE0_INT_CNTL").update(TIME_STAMP_INT_ENABLE=1, OPCODE_ERROR_INT_ENABLE=1, PRIV_REG_INT_ENABLE=1)
    for q in list(self.queues.values()): self.program_hqd(q)

  def cpx_mode(self) -> None:
    """One compute partition per XCC. NBIO reports the board's mode (aqua_vanjaram_query_partition_mode); another is
    switched as gfx_v9_4_3_switch_compute_partition does on bare metal, by asking the PSP for one partition per XCC
    (psp_spatial_partition). Every XCC must then be a partition of one."""
    d, n = self.dev, self.xcc_count()
    status = self.reg("nbio", "regBIF_BX_PF0_PARTITION_COMPUTE_STATUS")
    if status.fields()["PARTITION_MODE"] != F.AMDGPU_CPX_PARTITION_MODE:
      try: d.step("psp: compute partitions", lambda: d.psp.submit("GFX_CMD_ID_SRIOV_SPATIAL_PART", "cmd_spatial_part", mode=n))
      except FirmwareError as e: raise RawGPUError(f"{d.bus}: the PSP refused to make {n} compute partitions (CPX), which AM needs: {e}") from None
    wrong = [x for x in range(n) if self.reg("gc", "regCP_HYP_XCP_CTL", x).fields()["NUM_XCC_IN_XCP"] != 1]
    if status.fields()["PARTITION_MODE"] != F.AMDGPU_CPX_PARTITION_MODE or wrong:
      raise RawGPUError(f"{d.bus}: the board is not in CPX mode after the PSP's switch (NBIO reports mode {status.fields()['PARTITION_MODE']}, "
                        f"XCCs in larger partitions: {wrong or 'none'}); AM runs one device per XCC: power-cycle the board")

  def mec_enable(self, on: bool) -> None:
    if self.dev.gc9:
      for x in range(self.xcc_count()): self.reg("gc", "regCP_MEC_CNTL", x).write(MEC_ME1_HALT=int(not on), MEC_ME2_HALT=int(not on))
      return
    kw = {"MEC_INVALIDATE_ICACHE": int(not on), "MEC_HALT": int(not on)}
    for p in range(4): kw[f"MEC_PIPE{p}_RESET"], kw[f"MEC_PIPE{p}_ACTIVE"] = int(not on), int(on)
    self.gc("regCP_MEC_RS64_CNTL").update(**kw)

  def mec_running(self) -> bool:
    if self.dev.gc9: return self.gc("regCP_MEC_CNTL").fields()["MEC_ME1_HALT"] == 0
    return self.gc("regCP_MEC_RS64_CNTL").fields()["MEC_HALT"] == 0

  def active_cus(self, xcc: int = 0) -> int:
    """The CUs that work (of one XCC, a partition on MI300), counted as amdgpu's get_cu_info does
    (gfx_v11_0.c, gfx_v12_0.c, gfx_v9_4_3.c): per shader engine and array, selected through GRBM_GFX_INDEX, the fused
    (CC_) and user (GC_USER_) inactive masks of its WGPs (gfx9: CUs); a disabled shader array counts none. IP
    discovery gives the physical shape only: harvested boards have fewer."""
    gc, reg = self.dev.disc.gc_info, lambda n: self.gc(n, xcc)
    sa_name = "SH" if self.dev.gc9 else "SA"
    n_se, n_sa = gc["gc_num_se"], gc["gc_num_sh_per_se" if self.dev.gc9 else "gc_num_sa_per_se"]
    per_sa = gc["gc_num_cu_per_sh"] if self.dev.gc9 else gc["gc_num_wgp0_per_sa"] + gc["gc_num_wgp1_per_sa"]   # CUs, or WGPs
    field = "INACTIVE_CUS" if self.dev.gc9 else "INACTIVE_WGPS"
    disabled = 0
    for cc, user in (("regCC_GC_SA_UNIT_DISABLE", "regGC_USER_SA_UNIT_DISABLE"), ("regGRBM_CC_GC_SA_UNIT_DISABLE", "regGRBM_GC_USER_SA_UNIT_DISABLE")):
      if self.dev.regs.has("gc", cc): disabled = reg(cc).fields()["SA_DISABLE"] | reg(user).fields()["SA_DISABLE"]   # gfx11 / gfx12
    index, total = reg("regGRBM_GFX_INDEX"), 0
    try:
      for se in range(n_se):
        for sa in range(n_sa):
          if disabled >> (se * n_sa + sa) & 1: continue
          index.write(SE_INDEX=se, **{f"{sa_name}_INDEX": sa}, INSTANCE_BROADCAST_WRITES=1)
          inactive = reg("regCC_GC_SHADER_ARRAY_CONFIG").fields()[field] | reg("regGC_USER_SHADER_ARRAY_CONFIG").fields()[field]
          total += bin(~inactive & ((1 << per_sa) - 1)).count("1")
    finally: index.write(SE_BROADCAST_WRITES=1, **{f"{sa_name}_BROADCAST_WRITES": 1}, INSTANCE_BROADCAST_WRITES=1)
    return total if self.dev.gc9 else 2 * total

  def new_queue(self, size: int, xcc: int = 0) -> ComputeQueue:
    self.check_xcc(xcc)
    free = [i for i in range(MAX_QUEUES) if (xcc, i) not in self.queues]
    if not free: raise RawGPUError(f"{self.dev.bus}: all {MAX_QUEUES} compute queues{f' of XCC {xcc}' if self.dev.gc9 else ''} are in use")
    if size & (size - 1) or size < 0x1000: raise RawGPUError(f"compute ring size {size:#x} must be a power of two >= 4 KiB")
    d, n = self.dev, free[0]
    hpd = self.hpd_size()
    q = ComputeQueue(n, d.valloc_phys(size, align=max(size, 0x1000)), size, d.valloc_phys(0x1000), d.valloc_phys(hpd, align=0x1000),
                     d.valloc_phys(MQD_SIZE), self.doorbell(n, xcc), xcc=xcc)
    for paddr, sz in ((q.ring, size), (q.ptrs, 0x1000), (q.eop, hpd), (q.mqd, MQD_SIZE)): d.vram(paddr, sz)[:] = bytes(sz)
    self.queues[(xcc, n)] = q
    self.program_hqd(q)
    return q

  def hpd_size(self) -> int: return F.GFX9_MEC_HPD_SIZE if self.dev.gc9 else F.GFX11_MEC_HPD_SIZE   # a queue's EOP buffer

  def doorbell(self, n: int, xcc: int = 0) -> int:
    """Queue n's doorbell (dword index): MEC ring n of the XCC's layout-1 range on MI300 (gfx_v9_4_3_compute_ring_init:
    mec_ring0 + xcc * xcc_doorbell_range), of NAVI10's layout elsewhere."""
    if self.dev.gc9: return (F.AMDGPU_DOORBELL_LAYOUT1_MEC_RING_START + xcc * F.AMDGPU_DOORBELL_LAYOUT1_XCC_RANGE + n) * 2
    return (F.AMDGPU_NAVI10_DOORBELL_MEC_RING0 + n) * 2

  def build_mqd(self, q: ComputeQueue):
    """The memory queue descriptor as gfx_v11_0_compute_mqd_init / gfx_v12_0_compute_mqd_init fill it."""
    from rawgpu.autogen.amd import mqd_v9, mqd_v11, mqd_v12
    mc, gc = self.dev.gmc.mc, lambda n: self.dev.regs.reg("gc", n).reg
    m = (mqd_v9.v9_mqd if self.dev.gc9 else mqd_v12.v12_compute_mqd if self.dev.ips["gc"][0] >= 12 else mqd_v11.v11_compute_mqd)()
    m.header = 0xC0310800
    m.compute_pipelinestat_enable = 1
    # every CU of every shader engine may take the queue's waves, as amdkfd's init_mqd sets user queues
    # (kfd_mqd_manager_v11/v12.c: SE0-7; v9 has SE0-3). amdgpu's own rings set SE0-3 only, which would leave a
    # Navi31's SE4 and SE5 idle.
    for se in range(4 if self.dev.gc9 else 8): setattr(m, f"compute_static_thread_mgmt_se{se}", 0xffffffff)
    m.compute_misc_reserved = 3 if self.dev.gc9 else 7   # as gfx_v9_4_3_xcc_mqd_init / gfx_v11_0 and v12_0's compute_mqd_init
    ring, rptr, poll, eop, eop_size = q.user or (mc(q.ring), mc(q.ptrs), mc(q.ptrs + 0x100), mc(q.eop), self.hpd_size())
    m.cp_hqd_eop_base_addr_lo, m.cp_hqd_eop_base_addr_hi = (eop >> 8) & 0xffffffff, eop >> 40
    m.cp_hqd_eop_control = gc("regCP_HQD_EOP_CONTROL").encode(EOP_SIZE=(eop_size // 4).bit_length() - 2)
    m.cp_mqd_base_addr_lo, m.cp_mqd_base_addr_hi = mc(q.mqd) & 0xfffffffc, mc(q.mqd) >> 32
    m.cp_mqd_control = gc("regCP_MQD_CONTROL").encode(VMID=0, PRIV_STATE=1)   # the register's default, as amdgpu and amdkfd leave it
    m.cp_hqd_pq_base_lo, m.cp_hqd_pq_base_hi = (ring >> 8) & 0xffffffff, ring >> 40
    # gfx9 (gfx_v9_4_3_xcc_mqd_init): ordered dispatch, no TUNNEL_DISPATCH field
    order = dict(UNORD_DISPATCH=0, ROQ_PQ_IB_FLIP=0) if self.dev.gc9 else dict(UNORD_DISPATCH=1, TUNNEL_DISPATCH=0)
    # AM's own rings are the kernel's (privileged); a process's queue is not (amdkfd's init_mqd: only the HIQ is)
    kernel = int(q.user is None)
    # a kernel queue starts from the register's reset value (amdgpu's regCP_HQD_PQ_CONTROL_DEFAULT on gfx11/12: fetch
    # once 3 units are free, MIN_AVAIL_SIZE); amdkfd builds a process's from zero
    avail = dict(MIN_AVAIL_SIZE=3) if kernel and not self.dev.gc9 else {}
    m.cp_hqd_pq_control = gc("regCP_HQD_PQ_CONTROL").encode(QUEUE_SIZE=(q.size // 4).bit_length() - 2,
      RPTR_BLOCK_SIZE=(0x1000 // 4).bit_length() - 2, PRIV_STATE=kernel, KMD_QUEUE=kernel, **order, **avail)
    m.cp_hqd_pq_rptr_report_addr_lo, m.cp_hqd_pq_rptr_report_addr_hi = rptr & 0xfffffffc, (rptr >> 32) & 0xffff
    m.cp_hqd_pq_wptr_poll_addr_lo, m.cp_hqd_pq_wptr_poll_addr_hi = poll & 0xfffffffc, (poll >> 32) & 0xffff
    m.cp_hqd_pq_doorbell_control = gc("regCP_HQD_PQ_DOORBELL_CONTROL").encode(DOORBELL_OFFSET=q.doorbell, DOORBELL_EN=1)
    m.cp_hqd_vmid = q.vmid
    # amdkfd's init_mqd (v9/v11/v12): preload requested, its size (amdgpu's rings keep the register default's PRELOAD_REQ too)
    m.cp_hqd_persistent_state = gc("regCP_HQD_PERSISTENT_STATE").encode(PRELOAD_REQ=1, PRELOAD_SIZE=0x53 if self.dev.gc9 else 0x55)
    m.cp_hqd_ib_control = gc("regCP_HQD_IB_CONTROL").encode(MIN_IB_AVAIL_SIZE=3)
    m.cp_hqd_active = 1
    return m

  # HQD registers in the order gfx_v11_0_kiq_init_register writes them, each from its MQD field
  HQD_FROM_MQD = (("regCP_HQD_EOP_BASE_ADDR", "cp_hqd_eop_base_addr_lo"), ("regCP_HQD_EOP_BASE_ADDR_HI", "cp_hqd_eop_base_addr_hi"),
                  ("regCP_HQD_EOP_CONTROL", "cp_hqd_eop_control"), ("regCP_MQD_BASE_ADDR", "cp_mqd_base_addr_lo"),
                  ("regCP_MQD_BASE_ADDR_HI", "cp_mqd_base_addr_hi"), ("regCP_MQD_CONTROL", "cp_mqd_control"),
                  ("regCP_HQD_PQ_BASE", "cp_hqd_pq_base_lo"), ("regCP_HQD_PQ_BASE_HI", "cp_hqd_pq_base_hi"),
                  ("regCP_HQD_PQ_CONTROL", "cp_hqd_pq_control"), ("regCP_HQD_PQ_RPTR_REPORT_ADDR", "cp_hqd_pq_rptr_report_addr_lo"),
                  ("regCP_HQD_PQ_RPTR_REPORT_ADDR_HI", "cp_hqd_pq_rptr_report_addr_hi"),
                  ("regCP_HQD_PQ_WPTR_POLL_ADDR", "cp_hqd_pq_wptr_poll_addr_lo"), ("regCP_HQD_PQ_WPTR_POLL_ADDR_HI", "cp_hqd_pq_wptr_poll_addr_hi"),
                  ("regCP_HQD_PQ_DOORBELL_CONTROL", "cp_hqd_pq_doorbell_control"), ("regCP_HQD_PQ_RPTR", "cp_hqd_pq_rptr"),
                  ("regCP_HQD_PQ_WPTR_LO", "cp_hqd_pq_wptr_lo"), ("regCP_HQD_PQ_WPTR_HI", "cp_hqd_pq_wptr_hi"),
                  ("regCP_HQD_VMID", "cp_hqd_vmid"), ("regCP_HQD_PERSISTENT_STATE", "cp_hqd_persistent_state"),
                  ("regCP_HQD_IB_CONTROL", "cp_hqd_ib_control"), ("regCP_HQD_ACTIVE", "cp_hqd_active"))

  def program_hqd(self, q: ComputeQueue) -> None:
    m = self.build_mqd(q)
    self.dev.vram(q.mqd, ctypes.sizeof(m))[:] = bytes(m)
    with self._selected(q) as gc:
      gc("regCP_PQ_WPTR_POLL_CNTL").update(EN=0)
      self._dequeue(gc)   # a queue left running: drain it first
      for reg, fld in self.HQD_FROM_MQD: gc(reg).write(getattr(m, fld))
      gc("regCP_PQ_STATUS").update(DOORBELL_ENABLE=1)   # kiq_init_register's last step (v9_4_3, v11, v12): doorbells reach the queue

  def stop_hqd(self, q: ComputeQueue) -> None:
    """Dequeue the queue's HQD and wait until the CP has let go of it."""
    with self._selected(q) as gc: self._dequeue(gc)

  @contextlib.contextmanager
  def _selected(self, q: ComputeQueue):
    """The queue's HQD selected through GRBM_GFX_CNTL of its XCC; yields that XCC's register lookup."""
    self.grbm_select(me=1, pipe=0, queue=q.queue, xcc=q.xcc)
    try: yield lambda n: self.gc(n, q.xcc)
    finally: self.grbm_select(xcc=q.xcc)

  def _dequeue(self, gc) -> None:
    """Take the HQD off its queue with the queue's waves reset, as gfx_v11_0_reset_kcq does: AM stops a queue only
    when it goes away or starts over, and a drain (DRAIN_PIPE) would wait for waves that may never end (a hang)."""
    if gc("regCP_HQD_ACTIVE").read() & 1:
      gc("regCP_HQD_DEQUEUE_REQUEST").write(DEQUEUE_REQ=F.HQD_DEQUEUE_RESET_WAVES)
      gc("regSPI_COMPUTE_QUEUE_RESET").write(RESET=1)
      self.dev.wait(lambda: (gc("regCP_HQD_ACTIVE").read() & 1) == 0, "compute queue dequeue")
      gc("regCP_HQD_DEQUEUE_REQUEST").write(0)

  def free_queue(self, q: ComputeQueue) -> None:
    self.stop_hqd(q)
    self.queues.pop((q.xcc, q.queue), None)
    if q.user is None:   # AM's own ring, pointers, EOP buffer and MQD go back (a user queue's are the process's)
      for paddr in (q.ring, q.ptrs, q.eop, q.mqd): self.dev.pfree(paddr)

  def fini(self) -> None:
    for q in list(self.queues.values()): self.free_queue(q)
    self.mec_enable(False)
