"""GFX: GRBM selection, RLC bootload status, the MEC (RS64) and its compute queues (HQDs).

HQD registers are banked by GRBM_GFX_CNTL (ME, pipe, queue) and SH_MEM_* by VMID, as amdgpu's soc21_grbm_select
programs them. A queue runs when its HQD is active, the MEC firmware was loaded and autoloaded by the RLC, and the MEC
is unhalted with the pipe active. On a doorbell in the MEC doorbell range the queue fetches PM4 from its ring up to the
write pointer; the read pointer is reported to CP_HQD_PQ_RPTR and to the report address in memory.
"""
from __future__ import annotations
import struct
from typing import TYPE_CHECKING, Callable
from rawgpu.drivers.emu.pcibus import BusError
from rawgpu.drivers.emu.amd import pm4
from rawgpu.drivers.emu.amd.fetch import Prefetch
from rawgpu.drivers.emu.amd.gmc import CID_CPC, CID_TCP, Fault, VMMemory, acting_as, as_client
from rawgpu.drivers.emu.amd.asic import ih_node_xcd
from rawgpu.drivers.emu.amd.regfile import instance_key
from rawgpu.drivers.emu.amd.psp import FW_RLC_G, FW_RS64_MEC
from rawgpu.autogen.amd.psp import GFX_FW_TYPE_CP_MEC as FW_CP_MEC
from rawgpu.drivers.emu import shader   # the compute units
from rawgpu.drivers.emu.shader.dispatch import NotModelled, launch_grid
if TYPE_CHECKING: from rawgpu.drivers.emu.amd.board import AMDBoard

IH_CLIENT_GRBM_CP, SRC_CP_EOP, SRC_CP_BAD_OPCODE = 0x14, 181, 183
SRC_SQ_INTERRUPT = 0xef  # GFX_11_0_0__SRCID__SQ_INTERRUPT_ID: the shader array reports wave errors (illegal instruction, trap)
MAX_IB_DEPTH = 2
DRAIN_PIPE = 1           # CP_HQD_DEQUEUE_REQUEST kinds: enum hqd_dequeue_request_type (amdgpu_amdkfd_gfx_v11.c)


PREFETCH_DW = 32       # dwords the CP hands the packet parser at once (a packet longer than that is read again whole)


class WaveRun:
  """A dispatch's waves in flight, run a slice at a time as the CP's TCP client; `result` once they ended. `seq`
  counts the queue's dispatches: an end-of-pipe event waits for those launched before it."""
  def __init__(self, slices, seq: int = 0, scratch: bool = False):
    self.slices, self.result, self.seq, self.scratch = slices, None, seq, scratch   # scratch: its waves hold scratch slots

  def advance(self) -> bool:
    """Run the next slice; True when every wave has ended."""
    if self.slices is None: return False   # killed: never ends
    try: as_client(CID_TCP, next, self.slices)   # the waves' loads and stores reach memory through the TCP
    except StopIteration as done:
      self.result = done.value
      return True
    return False

  def is_alive(self) -> bool: return self.result is None and self.slices is not None

  def kill(self) -> None:
    """The board closes or resets: the waves stop where they are and never finish."""
    if self.slices is not None: self.slices.close()
    self.slices = None


class ComputeQueue:
  def __init__(self, gfx: "GFX", me: int, pipe: int, queue: int):
    self.gfx, self.board, self.me, self.pipe, self.queue = gfx, gfx.b, me, pipe, queue
    self.bank: dict[int, int] = gfx.hqd_bank(me, pipe, queue)
    self.sh: dict[int, int] = {}
    self.bases: dict[int, int] = {}     # SET_BASE
    self.active = False
    self.rptr = 0                       # dwords consumed, not wrapped
    self.wptr = 0
    self.ib: list[list[int]] = []       # [addr, end, vmid] for each IB level
    self.wait_armed = False
    self.hung: str | None = None
    self.waiting = False
    self.dispatches = 0
    # The CP launches a dispatch and reads on (PM4 orders nothing after a dispatch: a CS_PARTIAL_FLUSH waits for its
    # waves, an end-of-pipe RELEASE_MEM acts once they ended): the dispatches whose waves run, in launch order, and
    # the end-of-pipe actions waiting for them, as (dispatches launched before it, action)
    self.running: list[WaveRun] = []
    self.eop: list[tuple[int, Callable[[], None]]] = []
    self._geometry: tuple[int, int, int, int, int] | None = None
    self.ahead = Prefetch()
    self._streams = 0                                       # IBs entered (each is a stream of its own)
    self.rptr_due = False                     # packets were consumed since the read pointer was last reported
    self.draining = False                     # a DRAIN_PIPE dequeue waits for the running dispatch's waves
    self.skip: tuple[int, int] | None = None  # COND_EXEC: (dwords still to skip, the stream they are in)

  # ---- HQD state
  def g(self, name: str) -> int: return self.bank.get(self.gfx.hqd_addr[name], 0)
  def s(self, name: str, v: int) -> None: self.bank[self.gfx.hqd_addr[name]] = v & 0xffffffff

  def activate(self) -> None:
    # a (re)started queue begins afresh: a dispatch of its previous life no longer completes into it
    self.active, self.hung, self.ib, self.wait_armed = True, None, [], False
    self.running, self.eop, self._geometry, self.rptr_due, self.draining, self.skip = [], [], None, False, False, None
    self.ahead.clear()
    self.rptr = self.g("regCP_HQD_PQ_RPTR")
    self.wptr = self.g("regCP_HQD_PQ_WPTR_LO") | (self.g("regCP_HQD_PQ_WPTR_HI") << 32)

  def geometry(self) -> tuple[int, int, int, int, int]:
    """(ring base, ring size in dwords, vmid, read-pointer report address, report block in dwords) from the HQD
    registers, looked up again after any of this queue's HQD registers is written (GFX._hqd_wr clears it).
    QUEUE_SIZE and RPTR_BLOCK_SIZE are log2 of quad-words (amdgpu: order_base_2(dwords) - 1)."""
    geo = self._geometry
    if geo is None:
      g = self.g
      cntl = self.gfx.pq_control.decode(g("regCP_HQD_PQ_CONTROL"))
      geo = self._geometry = (((g("regCP_HQD_PQ_BASE_HI") << 32) | g("regCP_HQD_PQ_BASE")) << 8, 2 << cntl["QUEUE_SIZE"],
                              g("regCP_HQD_VMID") & 0xf, ((g("regCP_HQD_PQ_RPTR_REPORT_ADDR_HI") << 32) | g("regCP_HQD_PQ_RPTR_REPORT_ADDR")) & ~3,
                              2 << cntl["RPTR_BLOCK_SIZE"])
    return geo

  @property
  def vmid(self) -> int: return self.geometry()[2]
  @property
  def ring_dw(self) -> int: return self.geometry()[1]
  @property
  def ring_base(self) -> int: return self.geometry()[0]

  def doorbell_index(self) -> int | None:
    v = self.g("regCP_HQD_PQ_DOORBELL_CONTROL")
    s_en, m_en = self.gfx.db_en
    if not v & m_en: return None
    s, m = self.gfx.db_off
    return (v & m) >> s

  # ---- what the packets touch
  def hub(self): return self.gfx.hub
  def mem_read(self, a: int, n: int) -> bytes: return self.hub().read(self.vmid, a, n)
  def mem_write(self, a: int, data: bytes) -> None: self.hub().write(self.vmid, a, data)
  def mem_read32(self, a: int) -> int: return self.hub().read32(self.vmid, a)
  def mem_read64(self, a: int) -> int: return self.hub().read64(self.vmid, a)
  def mem_write32(self, a: int, v: int) -> None: self.hub().write32(self.vmid, a, v)
  def mem_write64(self, a: int, v: int) -> None: self.hub().write64(self.vmid, a, v)
  def reg_read(self, a: int) -> int: return self.board.regs.read(self.gfx.local_reg(a))
  def reg_write(self, a: int, v: int) -> None: self.board.regs.write(self.gfx.local_reg(a), v & 0xffffffff)
  def clock(self) -> int: return self.board.clock.now()

  def push_ib(self, addr: int, size: int, vmid: int, chain: bool = False) -> None:
    # the packet's VMID is a privileged (kernel) queue's to choose; a user queue's IBs run in the queue's own VM,
    # else any process could read the kernel's: user-mode PM4 on amdkfd (tinygrad's, for one) leaves the field 0
    if not self.gfx.pq_control.decode(self.g("regCP_HQD_PQ_CONTROL"))["PRIV_STATE"]: vmid = self.vmid
    if chain:   # IB_CONTROL.CHAIN: the new IB takes the place of the one it was named in, whose rest never runs
      # (what a CHAIN in the ring itself does is not public)
      if not self.ib: raise pm4.BadPacket("INDIRECT_BUFFER with CHAIN in the ring, outside an IB, is not modelled")
      self.ib.pop()
    if len(self.ib) >= MAX_IB_DEPTH: raise pm4.BadPacket("INDIRECT_BUFFER nested too deep")
    self._streams += 1
    if size: self.ib.append([addr, addr + 4 * size, vmid, self._streams])

  def eop_interrupt(self, ctx: int) -> None:
    cntl = self.board.regs.vals.get(self.gfx.pipe_int_cntl[self.pipe], 0)
    if cntl & self.gfx.ts_int_en:
      self.board.ih.post(client=IH_CLIENT_GRBM_CP, src=SRC_CP_EOP, ring_id=(self.me << 2) | self.pipe | (self.queue << 4), vmid=self.vmid,
                         data=(ctx, 0, 0, 0), node=self.gfx.ih_node)

  def dispatch(self, x: int, y: int, z: int, initiator: int) -> bool:
    """Launch a dispatch: its waves run a slice of time per step (_run_waves) while the CP reads on. In concurrent
    mode the slices take turns with the other engines and queues (a kernel may spin on memory another engine, or a
    later packet, writes); deterministic mode runs them to the end in the step that launched them."""
    g = self.gfx
    if g.gfx9 and not g.single_xcc_partition():
      raise pm4.BadPacket("a dispatch in a partition of several XCCs (CP_HYP_XCP_CTL.NUM_XCC_IN_XCP > 1) is not modelled")
    sh = self.sh.get
    # the registers and the packet's dims as they are: the compute units' launch_grid reads them once
    regs = shader.DispatchRegs(arch=self.board.arch, pgm_addr=((sh(g.pgm_hi, 0) << 32) | sh(g.pgm_lo, 0)) << 8,
                        rsrc1=sh(g.rsrc[0], 0), rsrc2=sh(g.rsrc[1], 0), rsrc3=sh(g.rsrc[2], 0),
                        user_data=[sh(a, 0) for a in g.user_data], num_thread=tuple(sh(a, 0) for a in g.num_thread),
                        grid=(x, y, z), start=tuple(sh(a, 0) for a in g.start), dispatch_initiator=initiator,
                        tmpring_size=sh(g.tmpring, 0), scratch_base=((sh(g.scratch_hi, 0) << 32) | sh(g.scratch_lo, 0)) << 8,
                        shader_engines=self.board.asic.num_se, sh_mem_bases=g.vm_banks.get(self.vmid, {}).get(g.a_sh_mem_bases, 0))
    try: launch_grid(regs)
    except NotModelled as e: raise pm4.BadPacket(f"dispatch refused: {e}") from None
    # the compute units hand each dispatch its scratch slots from the first; the hardware shares the ring's slots out
    # across dispatches, so a dispatch with private memory waits for one in flight to end (waves that find no free
    # slot wait on the hardware too: a schedule it can take)
    scratch = shader.decode_regs(regs).scratch_en
    if scratch and any(r.scratch for r in self.running): return False
    self.dispatches += 1
    slice_s = None if self.board.deterministic else self.board.wave_slice
    self.running.append(WaveRun(shader.dispatch_slices(VMMemory(self.hub(), self.vmid), regs, slice_s=slice_s), self.dispatches, scratch))
    return True

  def at_end_of_pipe(self, action: Callable[[], None]) -> None:
    """Run action once every dispatch launched so far has ended, after the end-of-pipe actions queued before it."""
    if self.running or self.eop: self.eop.append((self.dispatches, action))
    else: action()

  def _run_waves(self) -> bool:
    """Give each running dispatch a slice; retire the ended ones (a wave fault halts the queue) and the end-of-pipe
    actions now due. True when any wave ran."""
    ran = bool(self.running)
    for run in list(self.running):
      if run.advance():
        self.running.remove(run)
        self._finish(run.result)
    oldest = self.running[0].seq if self.running else self.dispatches + 1
    while self.eop and self.eop[0][0] < oldest: self.eop.pop(0)[1]()
    return ran

  def _finish(self, res) -> bool:
    if not res.ok:
      self.last_fault = (res.fault, res.fault_addr)
      if res.fault != "page fault":  # page faults reach the host from the GMC; other wave errors from the SQ
        pc = res.fault_addr or 0
        self.board.ih.post(client=IH_CLIENT_GRBM_CP, src=SRC_SQ_INTERRUPT, ring_id=(self.me << 2) | self.pipe | (self.queue << 4), vmid=self.vmid,
                           data=(pc & 0xffffffff, pc >> 32, 0, 0), node=self.gfx.ih_node)
      raise pm4.BadPacket(f"wave fault: {res.fault} at {res.fault_addr:#x}" if res.fault_addr is not None else f"wave fault: {res.fault}")
    return True

  def halt(self, why: str) -> None:
    self.hung = why
    self.board.stopped(f"compute queue me{self.me} pipe {self.pipe} queue {self.queue}", why)
    a = self.gfx.pipe_int_status.get(self.pipe)
    if a is not None and "opcode" in why: self.board.regs.vals[a] = self.board.regs.vals.get(a, 0) | self.gfx.opcode_err_stat

  # ---- fetch/execute
  def _stream_id(self) -> int: return self.ib[-1][3] if self.ib else 0   # the IB being read (0: the ring)

  def skip_next(self, n: int) -> None:
    """Skip the n dwords after the packet now executing (COND_EXEC), in the stream it is in."""
    if n: self.skip = (n, self._stream_id())

  def _skip(self, avail: int, ib: bool) -> None:
    n, stream = self.skip
    # another stream: the IB ended (and was left) with dwords still to skip
    if stream != self._stream_id() or ib and n > avail:
      raise pm4.BadPacket("a COND_EXEC that skips past the end of its indirect buffer is not modelled")
    k = min(n, avail)   # in the ring: what is written so far, the rest once the host writes it
    self._advance(ib, k)
    self.skip = (n - k, stream) if n > k else None

  def _stream(self) -> tuple[int, int, int, bool]:
    """(address of next dword, dwords available, vmid, in IB)"""
    while self.ib:
      a, end, vmid, _ = self.ib[-1]
      if a < end: return a, (end - a) // 4, vmid, True
      self.ib.pop()
    base, n, vmid, *_ = self.geometry()
    return base + 4 * (self.rptr % n), self.wptr - self.rptr, vmid, False

  def _read_dw(self, addr: int, count: int, vmid: int, ib: bool) -> list[int]:
    if ib: return list(struct.unpack(f"<{count}I", self.hub().read(vmid, addr, 4 * count)))
    base, n, *_ = self.geometry()
    out = []
    first = self.rptr % n
    while count:
      take = min(count, n - first)
      out += struct.unpack(f"<{take}I", self.hub().read(vmid, base + 4 * first, 4 * take))
      count -= take; first = 0
    return out

  def busy(self) -> bool:
    return self.active and self.hung is None and (self.waiting or self.wptr != self.rptr or bool(self.ib) or bool(self.running) or bool(self.eop))

  def kill_waves(self) -> None:
    """The queue is reset or the board closes: running waves stop where they are, pending end-of-pipe actions never run."""
    for run in self.running: run.kill()
    self.running, self.eop = [], []

  def dequeue(self, kind: int) -> None:
    """CP_HQD_DEQUEUE_REQUEST (amdgpu's enum hqd_dequeue_request_type): DRAIN_PIPE lets the running dispatch's waves
    finish first (a wave that never ends keeps the queue active); RESET_WAVES ends them at once. SAVE_WAVES (CWSR)
    is not modelled: its waves end as for a reset."""
    if kind == DRAIN_PIPE and (self.running or self.eop) and self.hung is None: self.draining = True
    else: self.deactivate()

  def deactivate(self) -> None:
    self.kill_waves()
    self.active, self.draining = False, False
    self.bank[self.gfx.a_active] = 0

  def step(self) -> bool:
    if not self.active or self.hung is not None or "hung_queue" in self.board.faults and self._fault_engine() == "compute": return False
    acting_as(CID_CPC)
    try:
      ran = self._run_waves()
      if self.draining:   # a DRAIN_PIPE dequeue: the CP reads no further, the waves and their end-of-pipe actions finish
        if not self.running and not self.eop: self.deactivate()
        return True
      return self._parse() or ran
    except pm4.BadPacket as e:
      self._report_rptr()
      self.halt(f"opcode error: {e}" if "opcode" in str(e) or "type-" in str(e) else str(e))
      if "opcode" in str(e) or "type-" in str(e):
        cntl = self.board.regs.vals.get(self.gfx.pipe_int_cntl[self.pipe], 0)
        if cntl & self.gfx.opcode_int_en:
          self.board.ih.post(client=IH_CLIENT_GRBM_CP, src=SRC_CP_BAD_OPCODE, ring_id=(self.me << 2) | self.pipe | (self.queue << 4), vmid=self.vmid,
                             node=self.gfx.ih_node)
      return True
    except (Fault, BusError) as e:
      self._report_rptr()
      self.halt(f"memory fault: {e}")
      self.s("regCP_HQD_ERROR", self.g("regCP_HQD_ERROR") | self.gfx.err_pq)
      return True

  def _parse(self) -> bool:
    """Read and execute the next packet; False when there is none yet or it waits."""
    addr, avail, vmid, ib = self._stream()
    if avail <= 0:
      self._report_rptr()
      return False
    if self.skip is not None:
      self._skip(avail, ib)
      return True
    stream, pos = self._stream_id(), (addr >> 2 if ib else self.rptr)
    words = self.ahead.get(stream, pos, min(avail, PREFETCH_DW), avail, lambda n: self._read_dw(addr, n, vmid, ib))
    hdr = words[0]
    typ = hdr >> 30
    if typ == 2: body, ndw, op = [], 1, pm4.NOP           # type-2 filler
    elif typ == 3:
      op, ndw = (hdr >> 8) & 0xff, ((hdr >> 16) & 0x3fff) + 2
      if op == pm4.NOP and ndw == 0x4001: ndw = 1          # count 0x3fff: the header-only NOP (Mesa's PKT3_NOP_PAD, amdgpu's ring nop)
      if ndw > avail:
        if ib: raise pm4.BadPacket("packet runs past the end of the indirect buffer")
        return False                                       # rest of the packet not written yet
      body = words[1:ndw] if ndw <= len(words) else self._read_dw(addr, ndw, vmid, ib)[1:]
    else: raise pm4.BadPacket(f"type-{typ} packet header {hdr:#010x}")
    h = pm4.HANDLERS.get(op)
    if h is None: raise pm4.BadPacket(pm4.not_modelled(op) or f"unknown opcode {op:#x} (header {hdr:#010x})")
    if op == pm4.INDIRECT_BUFFER: self._advance(ib, ndw)   # the IB starts after its packet was consumed
    done = h(self, body)
    if not done:
      self.waiting = True
      self._report_rptr()
      return False
    self.waiting = False
    if op != pm4.INDIRECT_BUFFER: self._advance(ib, ndw)
    return True

  def _advance(self, ib: bool, ndw: int) -> None:
    if ib:
      self.ib[-1][0] += 4 * ndw
      return
    block = self.geometry()[4]
    crossed = (self.rptr + ndw) // block != self.rptr // block
    self.rptr += ndw
    self.s("regCP_HQD_PQ_RPTR", self.rptr % self.ring_dw)
    self.rptr_due = True
    if crossed: self._report_rptr()

  def _report_rptr(self) -> None:
    """Write the read pointer to the report address each time the CP has read another RPTR_BLOCK_SIZE block of the
    ring, and when the queue stops for now (caught up, waiting, halted): the driver reads it for ring room, so a
    host that filled the ring goes on once a block is free, not once the CP has caught up with everything."""
    rep = self.geometry()[3]
    if self.rptr_due and rep:
      self.rptr_due = False
      try: self.mem_write32(rep, self.rptr % self.ring_dw)
      except (Fault, BusError): pass

  def _fault_engine(self) -> str:
    f = self.board.faults.get("hung_queue")
    return f.get("engine", "compute") if isinstance(f, dict) else "compute"


class GFX:
  """One XCC's command processor (MEC) and compute units: GC instance `xcc` (MI300 has eight; RDNA boards one).
  The driver reaches its registers at that instance's discovery bases; its packets name registers in XCC-local
  form (see local_reg) and its memory goes through the XCC's own GC hub."""
  def __init__(self, board: "AMDBoard", xcc: int = 0):
    self.b, self.xcc = board, xcc
    if xcc == 0: shader.prepare(board.arch)   # the compute units' decoder, loaded at power-on rather than in the first dispatch's time
    r = board.regs
    key = self.key = instance_key("gc", xcc)
    t = r.tables[key]
    # GC 9.4.3 (MI300): the F32 MEC behind CP_MEC_CNTL, PSP-loaded (no RLC autoload), CUs rather than WGPs
    self.gfx9 = board.asic.version(11)[0] == 9
    self.hub = board.gmc.gcs[xcc]
    self.ih_node = ih_node_xcd(xcc) if self.gfx9 else 0
    self.seg_bases = r.bases[key]
    self.grbm = t["regGRBM_GFX_CNTL"]
    self.pq_control = t["regCP_HQD_PQ_CONTROL"]
    self.sel = (0, 0, 0, 0)                       # me, pipe, queue, vmid
    r.hook(key, "regGRBM_GFX_CNTL", wr=self._grbm_wr)
    # banked registers
    self.hqd_names = [n for n in t.names() if (n.startswith("regCP_HQD_") or n.startswith("regCP_MQD_")) and "GFX" not in n
                      and t[n].base_idx is not None]
    self.hqd_addr = {n: r.addr(key, n) for n in self.hqd_names}
    self.banks: dict[tuple[int, int, int], dict[int, int]] = {}
    self.queues: dict[tuple[int, int, int], ComputeQueue] = {}
    for n, a in self.hqd_addr.items():
      r.rd[a] = self._hqd_rd
      r.wr[a] = self._hqd_wr
    self.a_active, self.a_dequeue = self.hqd_addr["regCP_HQD_ACTIVE"], self.hqd_addr["regCP_HQD_DEQUEUE_REQUEST"]
    self.a_wptr_lo, self.a_wptr_hi = self.hqd_addr["regCP_HQD_PQ_WPTR_LO"], self.hqd_addr["regCP_HQD_PQ_WPTR_HI"]
    self.vm_banks: dict[int, dict[int, int]] = {}
    for n in ("regSH_MEM_CONFIG", "regSH_MEM_BASES"):
      a = r.addr(key, n); r.rd[a] = self._vm_rd; r.wr[a] = self._vm_wr
    self.a_sh_mem_bases = r.addr(key, "regSH_MEM_BASES")
    self.pc_banks: dict[int, dict[int, int]] = {}
    for n in ("regCP_MEC_RS64_PRGRM_CNTR_START", "regCP_MEC_RS64_PRGRM_CNTR_START_HI") if not self.gfx9 else ():
      a = r.addr(key, n); r.rd[a] = self._pc_rd; r.wr[a] = self._pc_wr
    self.db_off = t["regCP_HQD_PQ_DOORBELL_CONTROL"].fields["DOORBELL_OFFSET"]
    self.db_en = t["regCP_HQD_PQ_DOORBELL_CONTROL"].fields["DOORBELL_EN"]
    self.a_db_lo, self.a_db_hi = r.addr(key, "regCP_MEC_DOORBELL_RANGE_LOWER"), r.addr(key, "regCP_MEC_DOORBELL_RANGE_UPPER")
    self.err_pq = t["regCP_HQD_ERROR"].fields["PQ_UTCL1_ERROR"][1]
    # MEC control and interrupts
    self.pipes = [p for p in range(4) if f"regCP_ME1_PIPE{p}_INT_CNTL" in t]
    if self.gfx9:   # the F32 MEC runs its pipes while ME1 is not halted (gfx_v9_4_3_xcc_cp_compute_enable writes 0)
      self.a_mec = r.addr(key, "regCP_MEC_CNTL")
      r.vals[self.a_mec] = t["regCP_MEC_CNTL"].encode(MEC_ME1_HALT=1, MEC_ME2_HALT=1)
      self.mec_halt, self.mec_active = t["regCP_MEC_CNTL"].fields["MEC_ME1_HALT"][1], [0] * len(self.pipes)
      r.hook(key, "regRLC_CNTL", rd=self._rlc_cntl_rd)
      self.a_xcp = r.addr(key, "regCP_HYP_XCP_CTL")
    else:
      self.a_mec = r.addr(key, "regCP_MEC_RS64_CNTL")
      r.vals[self.a_mec] = t["regCP_MEC_RS64_CNTL"].encode(MEC_HALT=1)        # halted until the driver starts it
      self.mec_halt = t["regCP_MEC_RS64_CNTL"].fields["MEC_HALT"][1]
      self.mec_active = [t["regCP_MEC_RS64_CNTL"].fields[f"MEC_PIPE{p}_ACTIVE"][1] for p in self.pipes]
      # a pipe starts the firmware where its PRGRM_CNTR_START pointed when its reset was last released
      # (gfx_v11_0_config_gfx_rs64); one that never took a start the driver wrote runs no firmware
      self.pipe_reset = [t["regCP_MEC_RS64_CNTL"].fields[f"MEC_PIPE{p}_RESET"][1] for p in self.pipes]
      self.pipe_started = [False] * len(self.pipes)
      r.hook(key, "regCP_MEC_RS64_CNTL", wr=self._mec_cntl_wr)
      self.a_pc_start = r.addr(key, "regCP_MEC_RS64_PRGRM_CNTR_START")
    self.pipe_int_cntl = {p: r.addr(key, f"regCP_ME1_PIPE{p}_INT_CNTL") for p in self.pipes}
    # doorbells reach the queues only once CP_PQ_STATUS enables them (its default is 0; kiq_init_register sets it)
    self.a_pq_status, self.pq_doorbells = r.addr(key, "regCP_PQ_STATUS"), t["regCP_PQ_STATUS"].fields["DOORBELL_ENABLE"][1]
    self.pipe_int_status = {p: r.addr(key, f"regCP_ME1_PIPE{p}_INT_STATUS") for p in self.pipes if f"regCP_ME1_PIPE{p}_INT_STATUS" in t}
    f = t["regCP_ME1_PIPE0_INT_CNTL"].fields
    self.ts_int_en, self.opcode_int_en = f["TIME_STAMP_INT_ENABLE"][1], f["OPCODE_ERROR_INT_ENABLE"][1]
    st = t["regCP_ME1_PIPE0_INT_STATUS"].fields if "regCP_ME1_PIPE0_INT_STATUS" in t else {}
    self.opcode_err_stat = st.get("OPCODE_ERROR_INT_STATUS", (0, 0))[1]
    r.hook(key, "regCP_STAT", rd=self._cp_stat)
    r.hook(key, "regGRBM_SOFT_RESET", wr=self._soft_reset)
    self.cp_stat_busy = t["regCP_STAT"].fields["MEQ_BUSY"][1] | t["regCP_STAT"].fields["ROQ_RING_BUSY"][1]
    # RLC
    if not self.gfx9:
      self.bootload = t["regRLC_RLCS_BOOTLOAD_STATUS"]
      self.a_bootload = r.addr("gc", "regRLC_RLCS_BOOTLOAD_STATUS")
      r.hook("gc", "regRLC_RLCS_BOOTLOAD_STATUS", wr=lambda a, v: None)
    r.hook(key, "regRLC_SAFE_MODE", wr=self._safe_mode)
    r.hook(key, "regRLC_GPU_CLOCK_COUNT_LSB", rd=lambda a: board.clock.now() & 0xffffffff)
    r.hook(key, "regRLC_GPU_CLOCK_COUNT_MSB", rd=lambda a: board.clock.now() >> 32)
    # the SMUIO golden TSC (gfx_v11_0/v12_0_get_gpu_clock_counter read it upper, lower, upper)
    if xcc == 0:
      r.hook("smuio", "regGOLDEN_TSC_COUNT_LOWER", rd=lambda a: board.clock.now() & 0xffffffff)
      r.hook("smuio", "regGOLDEN_TSC_COUNT_UPPER", rd=lambda a: (board.clock.now() >> 32) & 0xffffff)
    # dispatch registers, as SET_SH_REG names them (XCC-local: instance 0's numbers on every XCC)
    self.pgm_lo, self.pgm_hi = r.addr("gc", "regCOMPUTE_PGM_LO"), r.addr("gc", "regCOMPUTE_PGM_HI")
    self.rsrc = [r.addr("gc", f"regCOMPUTE_PGM_RSRC{i}") for i in (1, 2, 3)]
    self.user_data = [r.addr("gc", f"regCOMPUTE_USER_DATA_{i}") for i in range(16)]
    self.num_thread = [r.addr("gc", f"regCOMPUTE_NUM_THREAD_{c}") for c in "XYZ"]
    self.start = [r.addr("gc", f"regCOMPUTE_START_{c}") for c in "XYZ"]
    self.tmpring = r.addr("gc", "regCOMPUTE_TMPRING_SIZE")
    self.scratch_lo, self.scratch_hi = r.addr("gc", "regCOMPUTE_DISPATCH_SCRATCH_BASE_LO"), r.addr("gc", "regCOMPUTE_DISPATCH_SCRATCH_BASE_HI")
    self.autoload_done = False
    # WGP (gfx9: CU) harvesting per shader array, read through GRBM_GFX_INDEX (gfx_v11_0_get_cu_active_bitmap_per_sh)
    a = board.asic
    unit = 2 if self.gfx9 else 1                  # the config counts CUs on gfx9, WGPs (2 CUs) after
    nsa, active = a.num_se * a.num_sa_per_se, max(1, board.cus * unit // 2)
    per = [active // nsa + (1 if i < active % nsa else 0) for i in range(nsa)]
    full = (1 << (a.wgp_per_sa * unit)) - 1
    self.inactive = {(i // a.num_sa_per_se, i % a.num_sa_per_se): full & ~((1 << n) - 1) for i, n in enumerate(per)}
    self.gfx_index = t["regGRBM_GFX_INDEX"]
    self.a_gfx_index = r.addr(key, "regGRBM_GFX_INDEX")
    self.f_inactive = t["regCC_GC_SHADER_ARRAY_CONFIG"].fields["INACTIVE_CUS" if self.gfx9 else "INACTIVE_WGPS"]
    r.hook(key, "regCC_GC_SHADER_ARRAY_CONFIG", rd=self._cc_rd, wr=lambda a_, v: None)
    self.a_sched = r.addr(key, "regRLC_CP_SCHEDULERS")
    mqd_mod = __import__(f"rawgpu.autogen.amd.mqd_v{board.asic.version(11)[0]}", fromlist=["x"])
    mqd_t = mqd_mod.v9_mqd if self.gfx9 else getattr(mqd_mod, f"v{board.asic.version(11)[0]}_compute_mqd")
    self.a_mqd_base = self.hqd_addr["regCP_MQD_BASE_ADDR"]
    self.mqd_first = mqd_t.cp_mqd_base_addr_lo.offset // 4      # the MQD holds the HQD registers in address order
    self.mqd_regs = t["regCP_HQD_PQ_WPTR_HI"].offset - t["regCP_MQD_BASE_ADDR"].offset + 1

  # ---- GRBM selection and banks
  def _grbm_wr(self, a: int, v: int) -> None:
    self.b.regs.vals[a] = v
    d = self.grbm.decode(v)
    self.sel = (d["MEID"], d["PIPEID"], d["QUEUEID"], d["VMID"])

  def hqd_bank(self, me: int, pipe: int, queue: int) -> dict[int, int]:
    return self.banks.setdefault((me, pipe, queue), {})

  def _hqd_rd(self, a: int) -> int:
    me, pipe, queue, _ = self.sel
    return self.banks.get((me, pipe, queue), {}).get(a, 0)

  def _hqd_wr(self, a: int, v: int) -> None:
    me, pipe, queue, _ = self.sel
    key = (me, pipe, queue)
    bank = self.hqd_bank(*key)
    bank[a] = v
    if me != 1: return                            # only MEC1 compute queues are modelled
    q = self.queues.get(key)
    if q is not None: q._geometry = None; q.ahead.clear()   # the ring may have moved or restarted
    if a == self.a_active:
      if v & 1:
        if q is None: q = self.queues[key] = ComputeQueue(self, *key)
        q.activate()
      elif q is not None: q.active = False
    elif a == self.a_dequeue and v & 0xf and q is not None: q.dequeue(v & 0xf)
    elif a in (self.a_wptr_lo, self.a_wptr_hi) and q is not None and q.active:
      q.wptr = bank.get(self.a_wptr_lo, 0) | (bank.get(self.a_wptr_hi, 0) << 32)

  def _cc_rd(self, a: int) -> int:
    d = self.gfx_index.decode(self.b.regs.vals.get(self.a_gfx_index, 0))
    sa = d["SH_INDEX"] if self.gfx9 else d["SA_INDEX"]
    return (self.inactive.get((d["SE_INDEX"], sa), 0) << self.f_inactive[0]) & self.f_inactive[1]

  def _rlc_cntl_rd(self, a: int) -> int:
    """GFX9: the RLC's F32 runs once the PSP has loaded RLC_G (gfx_v9_4_3_is_rlc_enabled reads RLC_ENABLE_F32)."""
    v = self.b.regs.vals.get(a, 0)
    return v | 1 if FW_RLC_G in self.b.fw_loaded else v & ~1

  def single_xcc_partition(self) -> bool:
    """The XCC runs a dispatch's workgroups alone only when CP_HYP_XCP_CTL puts it in a partition of one XCC."""
    return self.b.regs.reg(self.key, "regCP_HYP_XCP_CTL").decode(self.b.regs.vals.get(self.a_xcp, 0))["NUM_XCC_IN_XCP"] == 1

  # gfx_v9_4_3.c (XCC_REG_RANGE_*, NORMALIZE_XCC_REG_OFFSET): packets name a GC register by its low 16 bits, which
  # lie in one of the two XCC ranges (the GC segments, gfxdec0 and gfxdec1); the CP takes such an offset as a register
  # of its own XCC. Other registers (NBIO's, say) keep their address.
  XCC_REG_RANGES = ((0x2000, 0x3400), (0xA000, 0x10000))

  def local_reg(self, a: int) -> int:
    """The register a packet's address `a` names on this XCC."""
    if not self.gfx9: return a
    lo = a & 0xffff
    for seg, (first, end) in enumerate(self.XCC_REG_RANGES):
      if first <= lo < end: return self.seg_bases[seg] + lo - first
    return a

  def _vm_rd(self, a: int) -> int: return self.vm_banks.get(self.sel[3], {}).get(a, 0)
  def _vm_wr(self, a: int, v: int) -> None: self.vm_banks.setdefault(self.sel[3], {})[a] = v
  def _pc_rd(self, a: int) -> int: return self.pc_banks.get(self.sel[1], {}).get(a, 0)
  def _pc_wr(self, a: int, v: int) -> None: self.pc_banks.setdefault(self.sel[1], {})[a] = v

  def _mec_cntl_wr(self, a: int, v: int) -> None:
    vals = self.b.regs.vals
    for p, rst in enumerate(self.pipe_reset):
      if vals.get(a, 0) & rst and not v & rst: self.pipe_started[p] = self.a_pc_start in self.pc_banks.get(p, {})
    vals[a] = v

  def _cp_stat(self, a: int) -> int: return self.cp_stat_busy if any(q.busy() for q in self.queues.values()) else 0

  def _soft_reset(self, a: int, v: int) -> None:
    self.b.regs.vals[a] = v
    if v & 1:                                     # SOFT_RESET_CP: every HQD drops its queue
      for q in self.queues.values(): q.active = False
      for bank in self.banks.values(): bank[self.a_active] = 0
    if self.xcc == 0 and hasattr(self.b, "sdma"): self.b.sdma.soft_reset(v)

  def _safe_mode(self, a: int, v: int) -> None:
    self.b.regs.vals[a] = v & ~1                  # CMD bit reads back 0 once the RLC acknowledged

  # ---- KIQ queue management
  def is_kiq(self, q: ComputeQueue) -> bool:
    v = self.b.regs.vals.get(self.a_sched, 0)           # RLC_CP_SCHEDULERS: me[6:5] pipe[4:3] queue[2:0], bit 7 valid
    return bool(v & 0x80) and (v & 0x7f) == ((q.me << 5) | (q.pipe << 3) | q.queue)

  def map_from_mqd(self, kiq: ComputeQueue, me: int, pipe: int, queue: int, mqd: int, doorbell: int) -> None:
    """Load the HQD register image (MQD dwords from cp_mqd_base_addr_lo on) and start the queue."""
    n = self.mqd_regs
    words = struct.unpack(f"<{n}I", kiq.mem_read(mqd + 4 * self.mqd_first, 4 * n))
    bank = self.hqd_bank(me, pipe, queue)
    for i, w in enumerate(words): bank[self.a_mqd_base + i] = w
    dbc = bank.get(self.hqd_addr["regCP_HQD_PQ_DOORBELL_CONTROL"], 0)
    s, m = self.db_off
    bank[self.hqd_addr["regCP_HQD_PQ_DOORBELL_CONTROL"]] = (dbc & ~m) | ((doorbell << s) & m) | self.db_en[1]
    key = (me, pipe, queue)
    q = self.queues.get(key) or self.queues.setdefault(key, ComputeQueue(self, *key))
    bank[self.a_active] = 1
    q.activate()

  def unmap_doorbell(self, doorbell: int) -> None:
    for q in self.queues.values():
      if q.active and q.doorbell_index() == doorbell: q.deactivate()   # its waves stop where they are (no CWSR save modelled)

  # ---- RLC autoload (requested by the PSP)
  def autoload(self, loaded: set[int], required: set[int]) -> bool:
    ok = required <= loaded
    self.autoload_done = ok
    if ok: self.b.regs.vals[self.a_bootload] = self.bootload.encode(BOOTLOAD_COMPLETE=1, GFX_INIT_DONE=1, RLC_GPM_IRAM_LOADED=1, RLC_GPM_IRAM_DONE=1)
    return ok

  def mec_running(self, pipe: int) -> bool:
    c = self.b.regs.vals.get(self.a_mec, 0)
    if self.gfx9: return FW_CP_MEC in self.b.fw_loaded and pipe < len(self.pipes) and not c & self.mec_halt
    return (self.autoload_done and FW_RS64_MEC in self.b.fw_loaded and pipe < len(self.mec_active) and not c & self.mec_halt
            and bool(c & self.mec_active[pipe]) and self.pipe_started[pipe])

  # ---- engine interface
  def doorbell(self, idx: int, value: int) -> bool:
    """A doorbell write in the MEC's range: the HQD it belongs to takes it as its write pointer (True if one did)."""
    vals = self.b.regs.vals
    if not vals.get(self.a_pq_status, 0) & self.pq_doorbells: return False
    if not vals.get(self.a_db_lo, 0) <= idx * 4 <= vals.get(self.a_db_hi, 0): return False
    for q in tuple(self.queues.values()):   # a snapshot: the worker may map a queue meanwhile
      if q.active and q.doorbell_index() == idx:
        q.wptr = value
        q.bank[self.a_wptr_lo], q.bank[self.a_wptr_hi] = value & 0xffffffff, value >> 32
        return True
    return False

  def busy(self) -> bool: return any(q.busy() for q in self.queues.values())

  def step(self) -> bool:
    progressed = False
    for q in list(self.queues.values()):
      if q.active and self.mec_running(q.pipe): progressed |= q.step()
    return progressed
