"""SDMA engines (v6 on gfx11, v7 on gfx12; both in the GC register space): ring queues from the RB registers and
doorbells, packets per sdma_v6_0_0_pkt_open.h (op [7:0], sub-op [15:8] of the header).

Read/write pointers are byte offsets (amdgpu shifts its dword pointers by 2); the read pointer is written back as a
64-bit value when RPTR_WRITEBACK_ENABLE is set. An engine runs once its firmware was loaded and it is unhalted.
"""
from __future__ import annotations
import struct
from typing import TYPE_CHECKING
from rawgpu.drivers.emu.pcibus import BusError
from rawgpu.drivers.emu.amd.gmc import CID_SDMA0, MM_CID_SDMA0, Fault, acting_as
from rawgpu.drivers.emu.amd.fetch import Prefetch
from rawgpu.drivers.emu.amd.asic import SDMA0_HWID, ih_node_aid
from rawgpu.drivers.emu.amd.regfile import instance_key
if TYPE_CHECKING: from rawgpu.drivers.emu.amd.board import AMDBoard

from rawgpu.autogen.amd import sdma_v6 as S, sdma_v4 as S4

OP_NOP, OP_COPY, OP_WRITE, OP_INDIRECT, OP_FENCE, OP_TRAP = S.SDMA_OP_NOP, S.SDMA_OP_COPY, S.SDMA_OP_WRITE, S.SDMA_OP_INDIRECT, S.SDMA_OP_FENCE, S.SDMA_OP_TRAP
OP_POLL_REGMEM, OP_CONST_FILL, OP_TIMESTAMP, OP_SRBM_WRITE, OP_GCR_REQ = S.SDMA_OP_POLL_REGMEM, S.SDMA_OP_CONST_FILL, S.SDMA_OP_TIMESTAMP, S.SDMA_OP_SRBM_WRITE, S.SDMA_OP_GCR_REQ
SUB_COPY_LINEAR, SUB_WRITE_LINEAR = S.SDMA_SUBOP_COPY_LINEAR, S.SDMA_SUBOP_WRITE_LINEAR
SUB_TS_SET, SUB_TS_GET, SUB_TS_GET_GLOBAL = S.SDMA_SUBOP_TIMESTAMP_SET, S.SDMA_SUBOP_TIMESTAMP_GET, S.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL
SUB_POLL_REGMEM, SUB_VM_INVALIDATION = 0, S.SDMA_SUBOP_VM_INVALIDATION
OP_COND_EXE, MM_ENG_NONE = S.SDMA_OP_COND_EXE, 0x1f
BROADCAST = 1 << S.SDMA_PKT_COPY_BROADCAST_LINEAR_HEADER_broadcast_shift   # a COPY_LINEAR with a second destination
# SDMA sits in GFX on SOC21 (irqsrcs_gfx_11_0_0.h): its trap, an SRBM_WRITE refused in an unprivileged queue, a poll
# with a finite retry count that ran out
IH_CLIENT_GFX, SRC_SDMA_TRAP, SRC_SDMA_SRBMWRITE, SRC_SDMA_POLL_TIMEOUT = 0x0a, 49, 50, 57
SRC_SDMA_V4_SRBMWRITE, SRC_SDMA_V4_POLL_TIMEOUT = 247, 246   # SDMA 4.x (irqsrcs_sdma0_4_0.h)
from rawgpu.autogen.amd import ih as IH, psp as G
from rawgpu.drivers.emu.amd.psp import FW_SDMA_TH0
# SDMA 4.4.2 (MI300): SOC15 clients per engine of an AID, the SDMA trap source, and the image the PSP loads per engine type
SOC15_SDMA_CLIENTS = (IH.SOC15_IH_CLIENTID_SDMA0, IH.SOC15_IH_CLIENTID_SDMA1, IH.SOC15_IH_CLIENTID_SDMA2, IH.SOC15_IH_CLIENTID_SDMA3)
FW_SDMA_V4 = (G.GFX_FW_TYPE_SDMA0, G.GFX_FW_TYPE_SDMA1, G.GFX_FW_TYPE_SDMA2, G.GFX_FW_TYPE_SDMA3)


class Bad(Exception):
  pass


def queue_names(v4: bool) -> list[str]:
  """An engine's ring queues, each with its own RB_* and DOORBELL* registers: SDMA 6/7's QUEUE0-7 (amdgpu runs its
  rings on 0 and 1, amdkfd's user queues take the rest); SDMA 4.4.2's GFX and PAGE rings, then RLC0-7 (user queues)."""
  return ["GFX", "PAGE"] + [f"RLC{k}" for k in range(8)] if v4 else [f"QUEUE{k}" for k in range(8)]


# SDMA_OP_* of each generation's packet header (v4: sdma_v4, else sdma_v6), by opcode; the AQL names alias NOP
_OP_NAMES = {v4: {v: k for k, v in reversed(vars(m).items()) if k.startswith("SDMA_OP_") and not k.startswith("SDMA_OP_AQL")}
             for v4, m in ((True, S4), (False, S))}


class SDMAQueue:
  def __init__(self, eng: "SDMAEngine", q: int):
    self.e, self.b, self.q = eng, eng.b, q
    r, ip = self.b.regs, eng.ip
    name = queue_names(eng.v4)[q]
    p = f"regSDMA_{name}_" if eng.v4 else f"regSDMA{eng.i}_{name}_"   # SDMA 4.4.2: an IP per engine
    a = lambda n: r.addr(ip, p + n)
    self.cntl = r.reg(ip, p + "RB_CNTL")
    self.a_cntl, self.a_base, self.a_base_hi = a("RB_CNTL"), a("RB_BASE"), a("RB_BASE_HI")
    self.a_rptr, self.a_rptr_hi, self.a_wptr, self.a_wptr_hi = a("RB_RPTR"), a("RB_RPTR_HI"), a("RB_WPTR"), a("RB_WPTR_HI")
    self.a_rb_lo, self.a_rb_hi = a("RB_RPTR_ADDR_LO"), a("RB_RPTR_ADDR_HI")
    self.a_db, self.a_db_off, self.a_ib_cntl, self.a_minor = a("DOORBELL"), a("DOORBELL_OFFSET"), a("IB_CNTL"), a("MINOR_PTR_UPDATE")
    self.db_en = r.reg(ip, p + "DOORBELL").fields["ENABLE"][1]
    self.db_off = r.reg(ip, p + "DOORBELL_OFFSET").fields["OFFSET"]
    r.wr[self.a_cntl] = self._cntl_wr
    r.wr[self.a_wptr] = r.wr[self.a_wptr_hi] = self._wptr_wr
    if r.has(ip, p + "CONTEXT_STATUS"):   # IDLE: no packet of the queue in progress or waiting (what amdkfd polls on destroy)
      idle = r.reg(ip, p + "CONTEXT_STATUS").fields["IDLE"][1]
      r.rd[a("CONTEXT_STATUS")] = lambda _a: 0 if self.enabled and (self.ib or self.wptr - self.rptr >= 4 or self.hung) else idle
    self.enabled, self.rptr, self.wptr = False, 0, 0
    self.ib: list[list[int]] = []
    self.hung: str | None = None
    self.waiting = False
    self.hdp_armed, self.polls = False, 0   # polls: failed tries of the POLL_REGMEM in progress
    self.ahead, self._streams = Prefetch(), 0   # fetched ahead of the parser; IBs entered (each a stream of its own)
    self._cntl_fields: tuple[int, dict[str, int]] = (0, self.cntl.decode(0))

  def reset(self) -> None:
    """The engine's reset (see SDMAEngine.reset): the ring stops, forgets where it was, and its registers read as at
    power-on."""
    vals, t = self.b.regs.vals, self.b.regs.tables[self.e.ip]
    for n in t.names():
      if n.startswith("regSDMA_GFX_"): vals.pop(self.b.regs.addr(self.e.ip, n), None)
    self.enabled, self.rptr, self.wptr, self.ib, self.hung, self.waiting, self.hdp_armed, self.polls = False, 0, 0, [], None, False, False, 0
    self.ahead.clear()
    self._cntl_fields = (0, self.cntl.decode(0))

  def _cntl_wr(self, a: int, v: int) -> None:
    vals = self.b.regs.vals
    vals[a] = v
    en = bool(self.cntl.decode(v)["RB_ENABLE"])
    if en and not self.enabled:
      self.rptr = vals.get(self.a_rptr, 0) | (vals.get(self.a_rptr_hi, 0) << 32)
      self.wptr = vals.get(self.a_wptr, 0) | (vals.get(self.a_wptr_hi, 0) << 32)
      self.hung, self.ib = None, []
      self.ahead.clear()
    self.enabled = en

  def _wptr_wr(self, a: int, v: int) -> None:
    vals = self.b.regs.vals
    vals[a] = v
    # MINOR_PTR_UPDATE lets a smaller write pointer through (sdma_v6_0_gfx_resume: "before programing wptr to a less
    # value"); what the engine does with one written without it is not public, so every write counts
    self.wptr = vals.get(self.a_wptr, 0) | (vals.get(self.a_wptr_hi, 0) << 32)

  def doorbell(self, idx: int, value: int) -> bool:
    vals = self.b.regs.vals
    s, m = self.db_off
    if not (self.enabled and vals.get(self.a_db, 0) & self.db_en and (vals.get(self.a_db_off, 0) & m) >> s == idx): return False
    self.wptr = value
    vals[self.a_wptr], vals[self.a_wptr_hi] = value & 0xffffffff, value >> 32
    return True

  # ---- geometry
  def _c(self) -> dict[str, int]:
    """RB_CNTL's fields (decoded again only when the register's value changed)."""
    v, dec = self._cntl_fields
    if (now := self.b.regs.vals.get(self.a_cntl, 0)) != v: v, dec = self._cntl_fields = (now, self.cntl.decode(now))
    return dec
  @property
  def vmid(self) -> int: return self._c()["RB_VMID"]
  @property
  def ring_bytes(self) -> int: return 4 << self._c()["RB_SIZE"]
  @property
  def base(self) -> int:
    v = self.b.regs.vals
    return ((v.get(self.a_base_hi, 0) << 32) | v.get(self.a_base, 0)) << 8

  def hub(self): return self.e.hub()

  def busy(self) -> bool: return self.enabled and self.hung is None and (self.waiting or self.rptr != self.wptr or bool(self.ib))

  def _read(self, n: int) -> list[int] | None:
    """The next n dwords of the current stream (out of what the engine fetched ahead), or None if not all were
    written yet."""
    if self.ib:
      a, end, vmid, stream = self.ib[-1]
      if a + 4 * n > end: raise Bad("packet runs past the end of the indirect buffer")
      return self.ahead.get(stream, a >> 2, n, (end - a) // 4, lambda k: list(struct.unpack(f"<{k}I", self.hub().read(vmid, a, 4 * k))))
    if self.wptr - self.rptr < 4 * n: return None
    return self.ahead.get(0, self.rptr >> 2, n, (self.wptr - self.rptr) // 4, self._ring_words)

  def _ring_words(self, n: int) -> list[int]:
    size, out, off = self.ring_bytes, [], self.rptr % self.ring_bytes
    need = 4 * n
    while need:
      take = min(need, size - off)
      out.append(self.hub().read(self.vmid, self.base + off, take))
      need -= take; off = 0
    return list(struct.unpack(f"<{n}I", b"".join(out)))

  def _advance(self, n: int) -> None:
    if self.ib:
      self.ib[-1][0] += 4 * n
      if self.ib[-1][0] >= self.ib[-1][1]: self.ib.pop()
      return
    self.rptr += 4 * n
    vals = self.b.regs.vals
    # the whole 64-bit byte pointer, as the write pointer is (amdkfd saves RB_RPTR/HI at a queue's destroy and
    # restores them with the user's monotonic write pointer)
    vals[self.a_rptr], vals[self.a_rptr_hi] = self.rptr & 0xffffffff, self.rptr >> 32
    if self._c()["RPTR_WRITEBACK_ENABLE"]:
      wb = (vals.get(self.a_rb_hi, 0) << 32) | vals.get(self.a_rb_lo, 0)
      try: self.hub().write64(self.vmid, wb & ~3, self.rptr)
      except (Fault, BusError): pass

  def step(self) -> bool:
    if not self.enabled or self.hung is not None: return False
    if not self.ib and self.wptr - self.rptr < 4: return False   # nothing written past the read pointer: idle
    if self.e.v4: acting_as(CID_SDMA0, mm_cid=MM_CID_SDMA0 + self.e.i % 4)   # MI300: on its AID's MM hub, as that AID's SDMA n
    else: acting_as(CID_SDMA0 + self.e.i)
    if self.ib and self.ib[-1][0] >= self.ib[-1][1]: self.ib.pop()
    try:
      h = self._read(1)
      if h is None: return False
      op, sub = h[0] & 0xff, (h[0] >> 8) & 0xff
      n = self._length(op, sub, h[0])
      if n is None:
        # a packet the engine's header names (COND_EXE, ATOMIC, a POLL_REGMEM sub-op, ...) may well run on the
        # hardware: the model says it does not know it; what an unnamed opcode does is not public either
        name = _OP_NAMES[self.e.v4].get(op)
        raise Bad(f"{name} (opcode {op}, sub-op {sub}) is not modelled" if name else f"unknown SDMA opcode {op} sub-op {sub}")
      pkt = self._read(n)
      if pkt is None: return False
      if not self._exec(op, sub, pkt):
        self.waiting = True
        return False
      self.waiting = False
      if op != OP_INDIRECT: self._advance(n)
    except Bad as e:
      self.hung = str(e)
      self.b.stopped(f"SDMA engine {self.e.i} queue {self.q}", self.hung)
      return True
    except (Fault, BusError) as e:
      self.hung = f"memory fault: {e}"
      return True
    return True

  def _length(self, op: int, sub: int, hdr: int) -> int | None:
    if op == OP_NOP: return 1 + ((hdr >> 16) & 0x3fff)
    if op == OP_COPY and sub == SUB_COPY_LINEAR:
      if hdr & BROADCAST and not self.e.v4 and hdr & self.e.copy_cpv: raise Bad("a broadcast COPY_LINEAR with cpv is not modelled")
      return (9 if hdr & BROADCAST else 7) + bool(hdr & self.e.copy_cpv)   # cpv: a compression-parameter dword follows
    if op == OP_POLL_REGMEM:   # its sub-ops are other packets: VM_INVALIDATION (SDMA 5+) is modelled, the others are not
      return 6 if sub == SUB_POLL_REGMEM else 4 if sub == SUB_VM_INVALIDATION and not self.e.v4 else None
    if op == OP_GCR_REQ and self.e.v4: return None   # SDMA 4's opcodes end at DUMMY_TRAP (16): no GCR packet
    if op == OP_WRITE and sub == SUB_WRITE_LINEAR:
      c = self._read(4)
      return None if c is None else 4 + (c[3] & 0xfffff) + 1
    return {OP_INDIRECT: 6, OP_FENCE: 4, OP_TRAP: 2, OP_CONST_FILL: 5, OP_TIMESTAMP: 3, OP_SRBM_WRITE: 3, OP_GCR_REQ: 5}.get(op)

  def _exec(self, op: int, sub: int, p: list[int]) -> bool:
    hub, vm = self.hub(), self.vmid if not self.ib else self.ib[-1][2]
    if op == OP_NOP: return True
    if op == OP_COPY:
      n = (p[1] & self.e.copy_count) + 1
      self.e.copy(vm, (p[4] << 32) | p[3], (p[6] << 32) | p[5], n)
      if p[0] & BROADCAST: self.e.copy(vm, (p[4] << 32) | p[3], (p[8] << 32) | p[7], n)   # and the second destination
      return True
    if op == OP_WRITE:
      hub.write(vm, (p[2] << 32) | (p[1] & ~3), struct.pack(f"<{len(p) - 4}I", *p[4:]))
      return True
    if op == OP_INDIRECT:
      vmid, base, size = (p[0] >> 16) & 0xf, (p[2] << 32) | p[1], p[3] & 0xfffff
      if not self._c()["RB_PRIV"]: vmid = self.vmid   # a user queue's IB runs in its own VM (see gfx.ComputeQueue.push_ib)
      if len(self.ib) >= 1: raise Bad("SDMA indirect buffer inside an indirect buffer")
      self._advance(6)
      self._streams += 1
      if size: self.ib.append([base, base + 4 * size, vmid, self._streams])
      return True
    if op == OP_FENCE:
      hub.write32(vm, (p[2] << 32) | (p[1] & ~3), p[3])
      return True
    if op == OP_TRAP:
      if self.b.regs.vals.get(self.e.a_cntl, 0) & self.e.trap_en:
        self._post(IH.SDMA0_5_0__SRCID__SDMA_TRAP if self.e.v4 else SRC_SDMA_TRAP, p[1] & 0xfffffff)
      return True
    if op == OP_POLL_REGMEM and sub == SUB_VM_INVALIDATION: return self._vm_invalidation(p)
    if op == OP_POLL_REGMEM:
      func, mem, hdp = (p[0] >> 28) & 7, p[0] >> 31, (p[0] >> 26) & 1
      addr, ref, mask = (p[2] << 32) | p[1], p[3], p[4]
      if hdp and not self.hdp_armed:                      # HDP flush: write REQ (addr hi), then poll DONE (addr lo)
        self.b.regs.write(p[2] >> 2, ref); self.hdp_armed = True
      v = hub.read32(vm, addr & ~3) if mem else self.b.regs.read((p[1] if hdp else p[1]) >> 2)
      from rawgpu.drivers.emu.amd.pm4 import _cmp, BadPacket
      try: ok = _cmp(func, v & mask, ref & mask)
      except BadPacket as e: raise Bad(str(e)) from None
      if ok: self.hdp_armed, self.polls = False, 0
      else: self._count_poll(p[5] >> 16 & 0xfff)
      return ok
    if op == OP_CONST_FILL:
      fill = (p[0] >> 30) & 3
      n = (p[4] & self.e.fill_count) + 1
      pat = p[3].to_bytes(4, "little")[:1 << fill] if fill < 2 else p[3].to_bytes(4, "little")
      self.e.fill(vm, (p[2] << 32) | p[1], pat, n)
      return True
    if op == OP_TIMESTAMP:   # SET and GET: the engine's local counter (set to a value, then counting with the clock)
      if sub == SUB_TS_SET: self.e.local_ts = ((p[2] << 32) | p[1]) - self.b.clock.now()
      elif sub == SUB_TS_GET: hub.write64(vm, (p[2] << 32) | (p[1] & ~7), (self.b.clock.now() + self.e.local_ts) & (1 << 64) - 1)
      elif sub == SUB_TS_GET_GLOBAL: hub.write64(vm, (p[2] << 32) | (p[1] & ~7), self.b.clock.now())
      else: raise Bad(f"TIMESTAMP sub-op {sub}")
      return True
    if op == OP_SRBM_WRITE:
      # SDMA 7 has no SRBM write: its REGISTER_WRITE of the same opcode takes a byte address and writes the whole
      # dword (sdma_v7_0_ring_emit_wreg: header, reg << 2, value); before, a dword address and byte enables
      a = (p[1] >> 2 if self.e.v7 else p[1]) & 0x3ffff
      if not self._c()["RB_PRIV"]:   # refused with its interrupt (sdma_v4_4_2_process_srbm_write_irq); what the engine
        self._post(SRC_SDMA_V4_SRBMWRITE if self.e.v4 else SRC_SDMA_SRBMWRITE)   # does next is not public: it stops
        raise Bad(f"SRBM_WRITE of register {a:#x} in an unprivileged queue")
      be = 0xf if self.e.v7 else (p[0] >> 28) & 0xf
      old, mask = self.b.regs.read(a), sum(0xff << (8 * i) for i in range(4) if be >> i & 1)
      self.b.regs.write(a, (old & ~mask) | (p[2] & mask))
      return True
    if op == OP_GCR_REQ: return True
    raise Bad(f"SDMA opcode {op}")

  def _post(self, src: int, ctx: int = 0) -> None:
    """An interrupt of this queue: SOC21's GFX client; SDMA 4.4.2's SOC15 client per engine of an AID."""
    if self.e.v4: self.b.ih.post(client=SOC15_SDMA_CLIENTS[self.e.i % 4], src=src, ring_id=self.q, vmid=self.vmid, data=(ctx, 0, 0, 0),
                                 node=ih_node_aid(self.e.i // 4), mm_hub=True)   # SDMA 4.4.2 translates through its AID's MM hub
    else: self.b.ih.post(client=IH_CLIENT_GFX, src=src, ring_id=self.q | (self.e.i << 4), vmid=self.vmid, data=(ctx, 0, 0, 0))

  def _count_poll(self, retries: int) -> None:
    """A poll that failed once more: with a finite retry count (0xfff: forever) it gives up after that many, with its
    timeout interrupt (sdma_v4_4_2's "POLL_REG/MEM with finite timer"); what the engine does next is not public: it
    stops."""
    if retries == 0xfff: return
    self.polls += 1
    if self.polls > retries:
      self.polls = 0
      self._post(SRC_SDMA_V4_POLL_TIMEOUT if self.e.v4 else SRC_SDMA_POLL_TIMEOUT)
      raise Bad(f"POLL_REGMEM gave up after {retries} retries")

  def _vm_invalidation(self, p: list[int]) -> bool:
    """The packet asks the hubs' invalidation engines (gfx_eng_id on the GC hub, mm_eng_id on the MM hub; 0x1f: none)
    for the request in dword 1, as a write of VM_INVALIDATE_ENGn_REQ would (sdma_v6_0_ring_emit_vm_flush); the ack
    is at once in this model."""
    gfx_eng, mm_eng = (p[0] >> 16) & 0x1f, (p[0] >> 24) & 0x1f
    for hub, eng in ((self.b.gmc.gc, gfx_eng), (self.b.gmc.mm, mm_eng)):
      if eng == MM_ENG_NONE: continue
      if eng >= len(hub.a_inv_req): raise Bad(f"VM_INVALIDATION names invalidation engine {eng}")
      self.b.regs.write(hub.a_inv_req[eng], p[1])
    return True


class SDMAEngine:
  def __init__(self, board: "AMDBoard", i: int):
    self.b, self.i = board, i
    r = board.regs
    self.v4 = board.asic.version(SDMA0_HWID)[0] == 4   # SDMA 4.4.2 (MI300): registers in the engine's own IP instance
    # the COPY_LINEAR and CONSTANT_FILL count fields (bytes - 1): 22 bits on SDMA 4, 30 from 5.2 on; the bits above
    # are reserved, and the engine reads none of them
    v = S4 if self.v4 else S
    self.copy_count, self.fill_count = v.SDMA_PKT_COPY_LINEAR_COUNT_count_mask, v.SDMA_PKT_CONSTANT_FILL_COUNT_count_mask
    # SDMA 7: a COPY_LINEAR whose header sets cpv carries a compression-parameter dword after its addresses
    # (sdma_v7_0_emit_copy_buffer writes it, "update the packet format accordingly")
    self.v7 = board.asic.version(SDMA0_HWID)[0] >= 7
    self.copy_cpv = S.SDMA_PKT_COPY_LINEAR_HEADER_CPV(1) if self.v7 else 0
    self.ip = instance_key("sdma", i) if self.v4 else "gc"
    pfx = "regSDMA_" if self.v4 else f"regSDMA{i}_"
    self.halt_name = "F32_CNTL" if r.has(self.ip, f"{pfx}F32_CNTL") else "MCU_CNTL"
    hn = f"{pfx}{self.halt_name}"
    self.a_halt = r.addr(self.ip, hn)
    self.halt_bit = r.reg(self.ip, hn).fields["HALT"][1]
    r.vals[self.a_halt] = self.halt_bit                  # halted at power-on
    self.a_cntl = r.addr(self.ip, f"{pfx}CNTL")
    self.trap_en = r.reg(self.ip, f"{pfx}CNTL").fields["TRAP_ENABLE"][1]
    self.local_ts = 0   # the local timestamp counter's offset from the clock (TIMESTAMP_SET)
    self.queues = [SDMAQueue(self, q) for q in range(len(queue_names(self.v4)))]

  def reset(self) -> None:
    """MI300's engine reset, which the SMU performs (ResetSDMA). What it clears is not published; the model follows
    what amdgpu does around it (sdma_v4_4_2 stop/restore queue, after Linux 6.12): the ring stops and its registers
    (all that amdgpu programs again) return to power-on values; an engine halted by an error runs again; the
    microengine restarts on the image it holds (amdgpu waits for F32_CNTL.HALT to drop, and loads none). Engine-wide
    registers (SDMA_CNTL and the like) keep their values."""
    for q in self.queues: q.reset()
    self.b.regs.vals[self.a_halt] = self.halt_bit if "sdma_reset_stuck" in self.b.faults else 0

  def hub(self):
    """The VM hub the engine's accesses go through: the GC hub on gfx11/12; MI300's engines sit on their AID's MM hub."""
    return self.b.gmc.mms[self.i // 4] if self.v4 else self.b.gmc.gc

  def running(self) -> bool:
    fw = FW_SDMA_V4[self.i % 4] if self.v4 else FW_SDMA_TH0   # SDMA 4.4.2: one image per engine of an AID, for every AID
    return fw in self.b.fw_loaded and not self.b.regs.vals.get(self.a_halt, 0) & self.halt_bit

  def copy(self, vmid: int, src: int, dst: int, n: int) -> None:
    hub = self.hub()
    s_chunks, d_chunks = hub.chunks(vmid, src, n, False), hub.chunks(vmid, dst, n, True)
    si = di = so = do = 0
    while si < len(s_chunks) and di < len(d_chunks):
      s, d = s_chunks[si], d_chunks[di]
      k = min(len(s) - so, len(d) - do)
      d[do:do + k] = s[so:so + k]
      so += k; do += k
      if so == len(s): si, so = si + 1, 0
      if do == len(d): di, do = di + 1, 0

  def fill(self, vmid: int, dst: int, pat: bytes, n: int) -> None:
    block = pat * (max(1, 65536 // len(pat)))
    pos = 0
    for c in self.hub().chunks(vmid, dst, n, True):
      for o in range(0, len(c), len(block)):
        k = min(len(block), len(c) - o)
        start = (pos + o) % len(pat)
        c[o:o + k] = (block[start:] + block[:start])[:k]
      pos += len(c)


class SDMA:
  def __init__(self, board: "AMDBoard"):
    self.b = board
    self.engines = [SDMAEngine(board, i) for i in range(board.asic.sdma_engines)]

  def doorbell(self, idx: int, value: int) -> bool:
    return any(q.doorbell(idx, value) for e in self.engines for q in e.queues)

  def firmware_loaded(self, fw_type: int) -> None:
    """SDMA 4.4.2 (MI300): the PSP starts each engine of an AID that image is for as it loads it; amdgpu writes no
    F32_CNTL under PSP loading (sdma_v4_4_2_inst_enable returns first). SDMA 6/7 wait for the driver's unhalt."""
    for e in self.engines:
      if e.v4 and FW_SDMA_V4[e.i % 4] == fw_type: self.b.regs.vals[e.a_halt] &= ~e.halt_bit

  def soft_reset(self, v: int) -> None:
    for e in self.engines:
      if e.v4: continue   # gc 9.4.3's GRBM_SOFT_RESET has no SDMA bits (bit 23 is SOFT_RESET_UTCL2): the SMU resets them
      if v >> (23 + e.i) & 1:                         # GRBM_SOFT_RESET.SOFT_RESET_SDMA0/1
        for q in e.queues: q.enabled, q.ib, q.hung = False, [], None

  def busy(self) -> bool: return any(q.busy() for e in self.engines for q in e.queues)

  def step(self) -> bool:
    if "hung_queue" in self.b.faults and isinstance(self.b.faults["hung_queue"], dict) and self.b.faults["hung_queue"].get("engine") == "sdma":
      return False
    progressed = False
    for e in self.engines:
      if not e.running(): continue
      for q in e.queues: progressed |= q.step()
    return progressed
