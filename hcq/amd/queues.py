"""AMD queues: PM4 on the compute ring, SDMA on the copy ring. Packets come from hcq/amd/pm4.py and sdma.py.

The packet forms follow the backend: `gfx` (the GC IP major: 9 = CDNA3's soc15 forms, 11/12 = gfx10+ forms),
`sdma_version` (an (major, minor) pair: below (5, 0) the SDMA 4 layouts) and `hdp_flush` = (request register, done
register, ref_and_mask) from pm4.hdp_flush_regs, flushed by memory_barrier (None: the barrier is the cache flush alone)."""
from __future__ import annotations
import ctypes
from typing import TYPE_CHECKING
from rawgpu.autogen.amd import hsa
from rawgpu.errors import RawGPUError
from rawgpu.hcq.amd import pm4
from rawgpu.hcq.patch import Var, check_u64, check_wait_ref
from rawgpu.hcq.queue import HWQueue
from rawgpu.hcq.signal import Signal, check_signal

if TYPE_CHECKING:
  from rawgpu.hcq.amd.backend import AMDBackend
  from rawgpu.hcq.amd.program import AMDProgram

DISPATCH_PACKET_SIZE = ctypes.sizeof(hsa.hsa_kernel_dispatch_packet_t)
KERNARG_ADDRESS_AT = hsa.hsa_kernel_dispatch_packet_t.kernarg_address.offset   # where a launch writes its own


def _split(v: int) -> tuple[int, int]: return v & 0xffffffff, v >> 32


def _value(v: int | Var, what: str) -> int | Var:
  """A signal value or wait reference given now; a patch slot's is checked when it is patched."""
  return v if isinstance(v, Var) else check_u64(v, what)


def _wait_ref(v: int | Var, what: str) -> int | Var:
  """A wait's reference given now (patch.check_wait_ref); a patch slot's is checked when it is patched."""
  return v if isinstance(v, Var) else check_wait_ref(v, what)


def _wake(be: "AMDBackend") -> tuple[int, int] | None:
  """On KFD, (slot address, event id) of the device's signal event: amdkfd's interrupt handler wakes a sleeping
  WAIT_EVENTS only for an event whose slot the GPU wrote (kfd_signal_event_interrupt), so a signal writes the slot
  too and interrupts with the event id. None elsewhere (AM takes the interrupt itself)."""
  return getattr(be, "wake", None)


class AMDComputeQueue(HWQueue):
  engine = "compute"

  def __init__(self, backend: "AMDBackend"):
    super().__init__()
    self.be = backend

  def wait(self, signal: Signal, value: int | Var) -> "AMDComputeQueue":
    """Stall the queue until signal >= value (the engine compares the low 32 bits: a value of 2^32 or more is refused)."""
    _reachable(self, signal)
    return self._add(pm4.wait_reg_mem, signal.va, ref=_wait_ref(value, 'a compute queue wait'), function=pm4.WaitFunction.GREATER_EQUAL, gen=self.be.gfx)

  def signal(self, signal: Signal, value: int | Var) -> "AMDComputeQueue":
    """Once everything before has finished and its writes are visible, set signal = value and interrupt the host."""
    _reachable(self, signal)
    value = _value(value, 'a compute queue signal')
    if (wake := _wake(self.be)) is None:
      return self._add(pm4.release_mem, signal.va, value=value, data_sel=pm4.DataSel.VALUE64, int_sel=pm4.IntSel.INTERRUPT_AFTER_WRITE, gen=self.be.gfx)
    # KFD: the signal's write is confirmed before the wake slot's interrupt can go out (Mesa writes data with INT_SEL
    # 3), so a woken host reads the new value; the first release flushed the caches, the second needs none
    self._add(pm4.release_mem, signal.va, value=value, data_sel=pm4.DataSel.VALUE64, int_sel=pm4.IntSel.WAIT_WRITE_CONFIRM, gen=self.be.gfx)
    return self._add(pm4.release_mem, wake[0], value=1, data_sel=pm4.DataSel.VALUE64, int_sel=pm4.IntSel.INTERRUPT_AFTER_WRITE, gen=self.be.gfx,
                     int_ctxid=wake[1], gcr=0)

  def timestamp(self, signal: Signal | Var | int) -> "AMDComputeQueue":
    """Write the GPU clock, once everything before has finished, to the signal's timestamp (or to the address)."""
    addr = _timestamp_address(signal)
    # no cache actions (Mesa's timestamps: BOTTOM_OF_PIPE_TS alone): a stamp is no flush, and a flush would be timed
    return self._add(pm4.release_mem, addr=addr, data_sel=pm4.DataSel.TIMESTAMP, event=pm4.Event.BOTTOM_OF_PIPE_TS, gcr=0,
                     int_sel=pm4.IntSel.WAIT_WRITE_CONFIRM, gen=self.be.gfx)

  def memory_barrier(self) -> "AMDComputeQueue":
    if (hdp := self.be.hdp_flush) is not None: self._add(pm4.hdp_flush, *hdp, gen=self.be.gfx)
    return self._add(pm4.acquire_mem, gen=self.be.gfx)

  def exec(self, prg: "AMDProgram", kernargs: int | Var, global_size, local_size, dispatch_id: int = 0) -> "AMDComputeQueue":
    """Dispatch prg over global_size workgroups of local_size work-items; kernargs is the address of its argument
    block (usually a Var: then the dispatch packet's address and the dispatch id are the patch slots "dispatch" and
    "dispatch_id" too). Any of the six dimensions may be a 32-bit Var (DISPATCH_DIRECT's workgroup counts and the
    COMPUTE_NUM_THREAD_X/Y/Z dwords); the caller keeps the kernel's hidden arguments in step with them."""
    r, g, (gx, gy, gz), (lx, ly, lz) = self.be.reg, self.be.gfx, global_size, local_size
    initiator = pm4.dispatch_initiator(prg.wave32, g)  # raises for wave32 on gfx9 before anything is queued
    self._programs.append(prg)
    sh = lambda name, *v: self._add(pm4.set_sh_reg, r(name), *v, gen=g)
    self._add(pm4.acquire_mem, gen=g)
    sh("regCOMPUTE_PGM_LO", *_split(prg.code_va >> 8))
    sh("regCOMPUTE_PGM_RSRC1", prg.rsrc1, prg.rsrc2)
    sh("regCOMPUTE_PGM_RSRC3", prg.rsrc3)
    tmpring, scratch_va = self.be.scratch_for(prg)
    sh("regCOMPUTE_TMPRING_SIZE", tmpring)
    if scratch_va: sh("regCOMPUTE_DISPATCH_SCRATCH_BASE_LO", *_split(scratch_va >> 8))
    if prg.user_sgprs:
      var = isinstance(kernargs, Var)
      self._add(lambda ka, dp, di: pm4.set_sh_reg(r("regCOMPUTE_USER_DATA_0"), *_user_data(prg, ka, dp, di), gen=g), ka=kernargs,
                dp=Var("dispatch") if var else kernargs + prg.dispatch_offset, di=Var("dispatch_id") if var else dispatch_id)
    sh("regCOMPUTE_RESOURCE_LIMITS", 0)
    self._add(lambda x, y, z: pm4.set_sh_reg(r("regCOMPUTE_START_X"), 0, 0, 0, x, y, z, gen=g), x=lx, y=ly, z=lz)
    self._add(lambda x, y, z: pm4.dispatch_direct(x, y, z, initiator, gen=g), x=gx, y=gy, z=gz)
    return self._add(pm4.event_write, pm4.Event.CS_PARTIAL_FLUSH, gen=g)

  def _indirect(self, va: int, ndw: int) -> list[int]: return pm4.indirect_buffer(va, ndw, gen=self.be.gfx)

  IB_ALIGN_DW = 8   # amdgpu reports a 32-byte IB size alignment for compute (amdgpu_kms.c) and pads with ring NOPs

  def _ib_padding(self, ndw: int) -> list[int]:
    return pm4.nop(1, gen=self.be.gfx) * (-ndw % self.IB_ALIGN_DW)


def _timestamp_address(target) -> int | Var:
  """Where a timestamp goes: a signal's timestamp slot, or an address (a Var, or an int refused rather than cut)."""
  if isinstance(target, Var): return target
  if isinstance(target, int): return check_u64(target, "a timestamp address")
  check_signal(target, "a timestamp goes to")
  return target.timestamp_va


def _reachable(q: HWQueue, signal: Signal) -> None:
  """The queue's device reaches the signal now; a submit checks it again (a peer may have closed, a signal been
  freed since)."""
  check_signal(signal, "a queue waits on and signals")
  dev = getattr(q.be, "dev", None)
  if dev is None: return
  if signal.dev is not dev and not dev.maps(signal):
    if signal.dev.closed: raise RawGPUError(f"{dev}: {signal.name} lives on {signal.dev}, which is closed")
    raise RawGPUError(f"{dev}: {signal.name} lives on {signal.dev} and is not mapped here; call {dev}.map(signal) first")
  if signal is not dev.timeline: q._signals.append(signal)


def _user_data(prg: "AMDProgram", kernargs: int, dispatch: int, dispatch_id: int) -> list[int]:
  """User SGPR values in the order the kernel descriptor enables them."""
  words = [0] * sum(n for _, _, n in prg.user_sgprs)
  for name, at, n in prg.user_sgprs:
    if name == "user_sgpr_kernarg_segment_ptr": words[at:at + 2] = _split(kernargs)
    elif name == "user_sgpr_dispatch_ptr": words[at:at + 2] = _split(dispatch)
    elif name == "user_sgpr_dispatch_id": words[at:at + 2] = _split(dispatch_id)
    # queue_ptr, private segment: not provided by this runtime (zero), the loader refuses kernels needing them
  return words


def fill_dispatch_packet(view: memoryview, prg: "AMDProgram", g, l, kernargs: int) -> None:
  """The AQL dispatch packet some kernels read through the dispatch pointer (sizes of the launch)."""
  pkt = hsa.hsa_kernel_dispatch_packet_t.from_buffer(view)
  pkt.workgroup_size_x, pkt.workgroup_size_y, pkt.workgroup_size_z = l
  pkt.grid_size_x, pkt.grid_size_y, pkt.grid_size_z = g[0] * l[0], g[1] * l[1], g[2] * l[2]
  pkt.group_segment_size, pkt.private_segment_size = prg.lds, prg.scratch
  pkt.kernel_object, pkt.kernarg_address = prg.kd_va, kernargs
  pkt.setup = 1 + (g[1] * l[1] > 1 or g[2] * l[2] > 1) + (g[2] * l[2] > 1)


class AMDCopyQueue(HWQueue):
  engine = "sdma"

  def __init__(self, backend: "AMDBackend"):
    super().__init__()
    self.be = backend

  def copy(self, dst: int, src: int, size: int) -> "AMDCopyQueue":
    from rawgpu.hcq.amd import sdma
    if any(not isinstance(a, (int, Var)) for a in (dst, src)): raise RawGPUError(f"a copy queue copies between addresses (ints such as buffer.va, or Vars), not {type(dst).__name__} and {type(src).__name__}")
    if type(size) is not int or size <= 0: raise RawGPUError(f"a copy queue copies a positive number of bytes, not {size!r}")
    for a in (dst, src):
      if isinstance(a, int): check_u64(a, "a copy queue's address")   # (refused, not cut to 64 bits)
    if (isinstance(dst, Var) or isinstance(src, Var)) and size > (most := sdma.copy_max_bytes(self.be.sdma_version)):
      raise RawGPUError(f"a copy with a patched address copies at most {most} bytes (one packet: the slot is its whole address); split it")
    return self._add(sdma.copy_linear, dst=dst, src=src, nbytes=size, version=self.be.sdma_version)  # addresses may be Vars

  def signal(self, signal: Signal, value: int | Var) -> "AMDCopyQueue":
    """Once the copies before have finished, set signal = value and interrupt the host. FENCE writes 32 bits: the
    high dword gets a second FENCE after the low one, as amdgpu writes its 64-bit SDMA fences. Both land after the
    work is done; a reader between them sees the new low dword under the old high one. Only the driver's counters
    (a narrow signal given a value below 2^32 or a 32-bit slot: the timeline, a graph's sync) skip it: their high
    dword is always 0. Any other signal may hold 2^32 or more from before (a user set it), so 5 must not read 2^32+5."""
    from rawgpu.hcq.amd import sdma
    _reachable(self, signal)
    v = self.be.sdma_version
    value = _value(value, "a copy queue signal")
    self._add(sdma.fence, signal.va, value=value, version=v)
    narrow = signal.narrow and (value.width == 32 if isinstance(value, Var) else value >> 32 == 0)
    if not narrow:
      self._add(lambda value: sdma.fence(signal.va + 4, value >> 32, version=v), value=value)
    if (wake := _wake(self.be)) is None: return self._add(sdma.trap, version=v)
    self._add(sdma.fence, wake[0], value=1, version=v)
    return self._add(sdma.trap, int_context=wake[1], version=v)

  def wait(self, signal: Signal, value: int | Var) -> "AMDCopyQueue":
    from rawgpu.hcq.amd import sdma
    _reachable(self, signal)
    return self._add(sdma.poll_regmem, signal.va, ref=_wait_ref(value, 'a copy queue wait'), function=sdma.PollFunction.GREATER_EQUAL, version=self.be.sdma_version)

  def memory_barrier(self) -> "AMDCopyQueue":
    """Flush the HDP (SDMA 0's request bit), so the copies after read what the CPU wrote into VRAM through cpu()
    after the submit, behind a signal the queue waits on; on SDMA 5+ then invalidate GL2, which SDMA's reads look up
    and may hold a stale line of (amdgpu invalidates it before every SDMA IB: "needed for correctness")."""
    from rawgpu.hcq.amd import sdma
    v = self.be.sdma_version
    if (hdp := self.be.sdma_hdp_flush) is not None: self._add(sdma.hdp_flush, *hdp, version=v)   # None: an APU, no HDP
    return self._add_gcr_invalidate() if v >= (5, 0) else self

  def _add_gcr_invalidate(self) -> "AMDCopyQueue":
    from rawgpu.hcq.amd import sdma
    user = _wake(self.be) is not None   # a KFD user queue: ROCr's form; AM's kernel ring: amdgpu's
    return self._add(sdma.gcr, sdma.GCR_USER_INV if user else sdma.GCR_KERNEL_INV, user=user, version=self.be.sdma_version)

  def timestamp(self, signal: Signal | Var | int) -> "AMDCopyQueue":
    """Write the GPU clock, once the copies before have finished, to the signal's timestamp (or to the address). The
    NOP before it is what makes the engine wait for its copies in flight (Mesa's ac_emit_sdma_nop): without it the
    stamp after a copy could be taken while the copy still writes."""
    from rawgpu.hcq.amd import sdma
    self._add(sdma.nop, version=self.be.sdma_version)
    return self._add(sdma.timestamp, addr=_timestamp_address(signal), version=self.be.sdma_version)
