"""PM4 type-3 packets as the MEC executes them for a compute queue (opcodes and fields from nvd.h / soc15d.h).

Each handler gets the queue and the packet body; it returns False to retry the same packet later (WAIT_REG_MEM not
yet satisfied), True when done. An unknown opcode or a malformed body is raised as BadPacket; the queue then halts.
"""
from __future__ import annotations
import functools
from typing import TYPE_CHECKING, Callable
if TYPE_CHECKING: from rawgpu.drivers.emu.amd.gfx import ComputeQueue

from rawgpu.autogen.amd import pm4 as P

NOP, SET_BASE, CLEAR_STATE, DISPATCH_DIRECT = P.PACKET3_NOP, P.PACKET3_SET_BASE, P.PACKET3_CLEAR_STATE, P.PACKET3_DISPATCH_DIRECT
CONTEXT_CONTROL, WRITE_DATA, WAIT_REG_MEM, INDIRECT_BUFFER = P.PACKET3_CONTEXT_CONTROL, P.PACKET3_WRITE_DATA, P.PACKET3_WAIT_REG_MEM, P.PACKET3_INDIRECT_BUFFER
COPY_DATA, PFP_SYNC_ME, EVENT_WRITE, RELEASE_MEM = P.PACKET3_COPY_DATA, P.PACKET3_PFP_SYNC_ME, P.PACKET3_EVENT_WRITE, P.PACKET3_RELEASE_MEM
DMA_DATA, ACQUIRE_MEM, SET_CONFIG_REG, SET_SH_REG = P.PACKET3_DMA_DATA, P.PACKET3_ACQUIRE_MEM, P.PACKET3_SET_CONFIG_REG, P.PACKET3_SET_SH_REG
SET_UCONFIG_REG, INVALIDATE_TLBS, SET_SH_REG_INDEX = P.PACKET3_SET_UCONFIG_REG, P.PACKET3_INVALIDATE_TLBS, P.PACKET3_SET_SH_REG_INDEX
SET_Q_PREEMPTION_MODE = P.PACKET3_SET_Q_PREEMPTION_MODE
SET_RESOURCES, MAP_QUEUES, UNMAP_QUEUES, QUERY_STATUS = P.PACKET3_SET_RESOURCES, P.PACKET3_MAP_QUEUES, P.PACKET3_UNMAP_QUEUES, P.PACKET3_QUERY_STATUS
SH_START, UCONFIG_START, CONFIG_START = P.PACKET3_SET_SH_REG_START, P.PACKET3_SET_UCONFIG_REG_START, P.PACKET3_SET_CONFIG_REG_START
GPU_CLOCK_SRC = 9          # COPY_DATA source: 64-bit GPU timestamp counter


class BadPacket(Exception):
  pass


def _cmp(func: int, v: int, ref: int) -> bool:
  # WAIT_REG_MEM_FUNCTION: 0 always, 1 <, 2 <=, 3 ==, 4 !=, 5 >=, 6 >
  if func == 0: return True
  if func == 1: return v < ref
  if func == 2: return v <= ref
  if func == 3: return v == ref
  if func == 4: return v != ref
  if func == 5: return v >= ref
  if func == 6: return v > ref
  raise BadPacket(f"WAIT_REG_MEM function {func} (reserved) is not modelled")


def _need(body: list[int], n: int, name: str) -> None:
  if len(body) < n: raise BadPacket(f"{name} needs {n} body dwords, has {len(body)}")


def _exact(body: list[int], n: int, name: str) -> None:
  """A packet the MEC reads at a fixed size: another header count is a malformed packet."""
  if len(body) != n: raise BadPacket(f"malformed {name}: header count {len(body) - 1}, the MEC's is {n - 1} ({n} body dwords)")


def nop(q: "ComputeQueue", body: list[int]) -> bool: return True


def set_sh_reg(q: "ComputeQueue", body: list[int]) -> bool:
  _need(body, 1, "SET_SH_REG")
  base = SH_START + (body[0] & 0xffff)
  for i, v in enumerate(body[1:]): q.sh[base + i] = v
  return True


def set_uconfig_reg(q: "ComputeQueue", body: list[int]) -> bool:
  _need(body, 1, "SET_UCONFIG_REG")
  base = UCONFIG_START + (body[0] & 0xffff)
  for i, v in enumerate(body[1:]): q.reg_write(base + i, v)
  return True


def set_config_reg(q: "ComputeQueue", body: list[int]) -> bool:
  _need(body, 1, "SET_CONFIG_REG")
  base = CONFIG_START + (body[0] & 0xffff)
  for i, v in enumerate(body[1:]): q.reg_write(base + i, v)
  return True


def dispatch_direct(q: "ComputeQueue", body: list[int]) -> bool:
  _need(body, 4, "DISPATCH_DIRECT")
  return q.dispatch(body[0], body[1], body[2], body[3])


def set_base(q: "ComputeQueue", body: list[int]) -> bool:
  _need(body, 3, "SET_BASE")
  q.bases[body[0] & 0xf] = ((body[2] & 0xffff) << 32) | (body[1] & ~7)
  return True


def dispatch_indirect(q: "ComputeQueue", body: list[int]) -> bool:
  """On compute queues the packet gives the dimensions' address (3 dwords: radv's MEC form). The graphics ring's
  2-dword form, an offset from SET_BASE's base, radv sends to no MEC: whether the MEC takes it is not public."""
  if len(body) == 2: raise BadPacket("the 2-dword DISPATCH_INDIRECT (offset from SET_BASE) on a compute queue is not modelled")
  _exact(body, 3, "DISPATCH_INDIRECT")
  addr, init = (body[1] << 32) | body[0], body[2]
  x, y, z = (q.mem_read32(addr + 4 * i) for i in range(3))
  return q.dispatch(x, y, z, init)


def write_data(q: "ComputeQueue", body: list[int]) -> bool:
  _need(body, 3, "WRITE_DATA")
  ctl, lo, hi, data = body[0], body[1], body[2], body[3:]
  dst, one = (ctl >> 8) & 0xf, bool(ctl & (1 << 16))
  if dst == 0:                                               # register (dword address in the CP's space)
    for i, v in enumerate(data): q.reg_write(lo + (0 if one else i), v)
  elif dst in (1, 2, 5):
    addr = (hi << 32) | (lo & ~3)
    if one:
      for v in data: q.mem_write32(addr, v)
    else: q.mem_write(addr, b"".join(v.to_bytes(4, "little") for v in data))
  else: raise BadPacket(f"WRITE_DATA dst_sel {dst} is not modelled")
  return True


def wait_reg_mem(q: "ComputeQueue", body: list[int]) -> bool:
  _need(body, 6, "WAIT_REG_MEM")
  ctl, a0, a1, ref, mask = body[0], body[1], body[2], body[3], body[4]
  func, mem, op = ctl & 7, (ctl >> 4) & 3, (ctl >> 6) & 3   # MEM_SPACE is [5:4] (pkt3.json): 0 register, 1 memory
  if mem > 1: raise BadPacket(f"WAIT_REG_MEM mem_space {mem} is not modelled")
  if op == 1 and not q.wait_armed:                         # write, wait, write: write ref to addr0, poll addr1
    q.reg_write(a0, ref)
    q.wait_armed = True
  if mem: v = q.mem_read32((a1 << 32) | (a0 & ~3))
  else: v = q.reg_read(a1 if op == 1 else a0)
  if _cmp(func, v & mask, ref & mask):
    q.wait_armed = False
    return True
  return False


def indirect_buffer(q: "ComputeQueue", body: list[int]) -> bool:
  _need(body, 3, "INDIRECT_BUFFER")
  addr = ((body[1] & 0xffff) << 32) | (body[0] & ~3)
  size = body[2] & 0xfffff                                   # IB_CONTROL (pkt3.json): IB_SIZE [19:0], CHAIN 20, VALID 23
  vmid = (body[2] >> 24) & 0xf
  # IB_CONTROL.VALID clear: every public IB sets it (Mesa's S_3F2_VALID(1), amdgpu's INDIRECT_BUFFER_VALID); what the
  # CP does with an IB without it is not public
  if not body[2] & (1 << 23): raise BadPacket("an INDIRECT_BUFFER without IB_CONTROL.VALID is not modelled")
  q.push_ib(addr, size, vmid, chain=bool(body[2] & (1 << 20)))
  return True


def copy_data(q: "ComputeQueue", body: list[int]) -> bool:
  _need(body, 5, "COPY_DATA")
  ctl, s_lo, s_hi, d_lo, d_hi = body[:5]
  src, dst, is64 = ctl & 0xf, (ctl >> 8) & 0xf, bool(ctl & (1 << 16))
  # memory addresses are [31:2], or [31:3] for a 64-bit copy (nvd.h's COPY_DATA__SRC_64B_ADDR_LO / DST_64B_ADDR_LO)
  align = ~7 if is64 else ~3
  if src == 0: v = q.reg_read(s_lo) | ((q.reg_read(s_lo + 1) << 32) if is64 else 0)
  elif src in (1, 2): v = q.mem_read64((s_hi << 32) | (s_lo & align)) if is64 else q.mem_read32((s_hi << 32) | (s_lo & align))
  elif src == 5: v = s_lo | ((s_hi << 32) if is64 else 0)
  elif src == GPU_CLOCK_SRC: v = q.clock()
  else: raise BadPacket(f"COPY_DATA src_sel {src} is not modelled")
  if dst == 0:
    q.reg_write(d_lo, v & 0xffffffff)
    if is64: q.reg_write(d_lo + 1, v >> 32)
  elif dst in (1, 2, 5):
    a = (d_hi << 32) | (d_lo & align)
    if is64: q.mem_write64(a, v)
    else: q.mem_write32(a, v)
  else: raise BadPacket(f"COPY_DATA dst_sel {dst} is not modelled")
  return True


def cond_exec(q: "ComputeQueue", body: list[int]) -> bool:
  """If the dword at the address is 0, the CP skips the `count` dwords after the packet (radv_emit_cond_exec: "If the
  API predication VA == 0, skip next command"; amdgpu's rings: "discard following DWs if *cond_exec_gpu_addr==0").
  Both send 0 in the third dword, whose meaning is not public."""
  _exact(body, 4, "COND_EXEC")                              # PKT3(COND_EXEC, 3) from gfx7 on
  if body[2]: raise BadPacket(f"COND_EXEC with {body[2]:#x} in its third dword is not modelled")
  addr = (body[1] << 32) | body[0]
  if addr & 3: raise BadPacket(f"COND_EXEC on the unaligned address {addr:#x} is not modelled")
  if q.mem_read32(addr) == 0: q.skip_next(body[3])
  return True


# ATOMIC_MEM (Mesa's sid.h): ATOMIC_OP [6:0], ATOMIC_COMMAND [9:8]; the TC opcodes sid.h names, as (bits, operation)
ATOMIC_OPS = {16: (32, "sub"), 48: (64, "sub"), 72: (32, "cmpswap"), 112: (64, "sub"), 119: (64, "xor")}
ATOMIC_RTN = {16, 48, 72}                                    # the _RTN opcodes (SEND_RTN and LOOP take only these)
ATOMIC_SEND_RTN, ATOMIC_LOOP = 0, 1                         # ATOMIC_COMMAND; 2 WR_CONFIRM and 3 SEND_NO_RTN for the others


def atomic_mem(q: "ComputeQueue", body: list[int]) -> bool:
  """An atomic on memory (radv's perf-counter lock: CMPSWAP_32 with COMMAND LOOP, which tries again until the dword
  equals the compare value). Body: control, address, data, compare data (64 bits each), loop interval. The returned
  value of an _RTN op goes nowhere a packet names; the loop interval is not timed here (one try per step)."""
  _exact(body, 8, "ATOMIC_MEM")
  ctl, addr = body[0], (body[2] << 32) | body[1]
  op, cmd = ctl & 0x7f, (ctl >> 8) & 3
  if ctl & ~0x37f or op not in ATOMIC_OPS or (cmd in (ATOMIC_SEND_RTN, ATOMIC_LOOP)) != (op in ATOMIC_RTN) or cmd == ATOMIC_LOOP and op != 72:
    raise BadPacket(f"ATOMIC_MEM with control {ctl:#x} (op {op}, command {cmd}) is not modelled")
  bits, what = ATOMIC_OPS[op]
  if addr % (bits // 8): raise BadPacket(f"ATOMIC_MEM on the unaligned address {addr:#x} is not modelled")
  data, cmp = body[3] | (body[4] << 32), body[5] | (body[6] << 32)
  read, write = (q.mem_read32, q.mem_write32) if bits == 32 else (q.mem_read64, q.mem_write64)
  mask = (1 << bits) - 1
  old = read(addr)
  if what == "sub": write(addr, (old - data) & mask)
  elif what == "xor": write(addr, (old ^ data) & mask)
  elif old == cmp & mask: write(addr, data & mask)
  elif cmd == ATOMIC_LOOP: return False                       # the swap did not happen: try again
  return True


CS_PARTIAL_FLUSH = 7   # VGT_EVENT_TYPE (Mesa's sid.h V_028A90_CS_PARTIAL_FLUSH): wait until the dispatched waves ended


def event_write(q: "ComputeQueue", body: list[int]) -> bool:
  _need(body, 1, "EVENT_WRITE")
  # EVENT_TYPE [5:0]: a CS_PARTIAL_FLUSH holds the CP until the dispatches before it ended; the cache events do
  # nothing in a model whose memory is coherent. EVENT_INDEX [11:8] is 4 for the partial flushes (nvd.h)
  if body[0] & 0x3f != CS_PARTIAL_FLUSH: return True
  if (index := (body[0] >> 8) & 0xf) != 4: raise BadPacket(f"EVENT_WRITE CS_PARTIAL_FLUSH with EVENT_INDEX {index} (not 4) is not modelled")
  return not q.running


def acquire_mem(q: "ComputeQueue", body: list[int]) -> bool:
  # PACKET3(ACQUIRE_MEM, 5) on gfx9 (gfx_v9_4_3), 6 from gfx10 on, which adds GCR_CNTL
  _exact(body, 6 if q.gfx.gfx9 else 7, "ACQUIRE_MEM")
  # cache actions: the model keeps memory coherent; no wait for waves (radv's cache flush puts a CS_PARTIAL_FLUSH
  # before its ACQUIRE_MEM where shaders must be idle)
  return True


def release_mem(q: "ComputeQueue", body: list[int]) -> bool:
  _exact(body, 7, "RELEASE_MEM")                            # PACKET3(RELEASE_MEM, 6) on gfx9 and after
  dst_sel, int_sel, data_sel = (body[1] >> 16) & 3, (body[1] >> 24) & 7, (body[1] >> 29) & 7
  # kfd_pm4_headers_ai.h: DST_SEL 2/3 write the queue's write pointer register / poll mask bit, INT_SEL 4 sends the
  # interrupt unconditionally, 5/6 after a 32/64-bit compare; how those act otherwise is not public
  if dst_sel > 1: raise BadPacket(f"RELEASE_MEM dst_sel {dst_sel} (queue write pointer) is not modelled")
  if int_sel > 4: raise BadPacket(f"RELEASE_MEM int_sel {int_sel} (interrupt after a compare) is not modelled")
  if int_sel == 4 and data_sel: raise BadPacket(f"RELEASE_MEM int_sel 4 with data_sel {data_sel} is not modelled")
  if data_sel > 4: raise BadPacket(f"RELEASE_MEM data_sel {data_sel} is not modelled")
  addr = (body[3] << 32) | body[2]

  def release() -> None:   # at the end of the pipe: once the dispatches before it ended, the CP reading on meanwhile
    if data_sel == 1: q.mem_write32(addr & ~3, body[4])
    elif data_sel == 2: q.mem_write64(addr & ~7, body[4] | (body[5] << 32))
    elif data_sel in (3, 4): q.mem_write64(addr & ~7, q.clock())
    if int_sel in (1, 2, 4): q.eop_interrupt(body[6])       # 3: the write is confirmed, no interrupt
  q.at_end_of_pipe(release)
  return True


def dma_data(q: "ComputeQueue", body: list[int]) -> bool:
  _need(body, 6, "DMA_DATA")
  ctl, s_lo, s_hi, d_lo, d_hi, cmd = body[:6]
  # pkt3.json: DMA_DATA_WORD0_gfx9 DST_SEL [21:20], SRC_SEL [30:29]; COMMAND_gfx9 (gfx9 to gfx12) BYTE_COUNT [25:0]
  # (soc15d.h's comment gives [20:0], pkt3.json's gfx6-8 COMMAND layout)
  src_sel, dst_sel, count = (ctl >> 29) & 3, (ctl >> 20) & 3, cmd & 0x3ffffff
  if cmd & (3 << 26): raise BadPacket("DMA_DATA with a register source or destination (SAS/DAS) is not modelled")
  if 1 in (src_sel, dst_sel): raise BadPacket("DMA_DATA to or from GDS is not modelled")
  if dst_sel == 2: return True                              # NOWHERE: radv's prefetch into L2, which the model has not
  dst, src = (d_hi << 32) | d_lo, (s_hi << 32) | s_lo
  # SAIC/DAIC (COMMAND bits 28/29, pkt3.json's COMMAND__SAIC: NO_INCREMENT): the source or destination address stays put
  saic, daic = bool(cmd & (1 << 28)) and src_sel != 2, bool(cmd & (1 << 29))
  if (saic or daic) and count % 4: raise BadPacket("DMA_DATA without address increment of a byte count that is not whole dwords is not modelled")
  if src_sel == 2: data = s_lo.to_bytes(4, "little") * (count // 4)   # DATA
  elif saic: data = q.mem_read(src, 4) * (count // 4)                   # SRC_ADDR, SRC_ADDR_TC_L2
  else: data = q.mem_read(src, count)
  if daic: data = data[-4:]   # every dword lands on the same one: the last stays
  q.mem_write(dst, data)
  return True


def invalidate_tlbs(q: "ComputeQueue", body: list[int]) -> bool:
  q.board.gmc.gc.tlb.clear(); q.board.gmc.gc.ext.clear()
  return True


# ---- queue management: only the KIQ (the queue RLC_CP_SCHEDULERS names) may send these
def _kiq_only(q: "ComputeQueue", name: str) -> None:
  if not q.gfx.is_kiq(q): raise BadPacket(f"privileged {name} on a queue that is not the KIQ (opcode error)")


def set_resources(q: "ComputeQueue", body: list[int]) -> bool:
  _kiq_only(q, "SET_RESOURCES"); _need(body, 7, "SET_RESOURCES")
  return True


def map_queues(q: "ComputeQueue", body: list[int]) -> bool:
  """MAP_QUEUES (gfx11_kiq_map_queues): load an HQD from the MQD in memory and start it."""
  _kiq_only(q, "MAP_QUEUES"); _need(body, 6, "MAP_QUEUES")
  c = body[0]
  queue, pipe, me, eng = (c >> 13) & 7, (c >> 16) & 3, (c >> 18) & 3, (c >> 26) & 7
  if eng != 0 or me != 1: raise BadPacket(f"MAP_QUEUES for engine {eng} me {me} is not modelled")
  doorbell = (body[1] >> 2) & 0x3ffffff
  mqd = (body[3] << 32) | body[2]
  q.gfx.map_from_mqd(q, me, pipe, queue, mqd, doorbell)
  return True


def unmap_queues(q: "ComputeQueue", body: list[int]) -> bool:
  _kiq_only(q, "UNMAP_QUEUES"); _need(body, 5, "UNMAP_QUEUES")
  q.gfx.unmap_doorbell((body[1] >> 2) & 0x3ffffff)
  return True


def query_status(q: "ComputeQueue", body: list[int]) -> bool:
  _kiq_only(q, "QUERY_STATUS"); _need(body, 6, "QUERY_STATUS")
  q.mem_write64(((body[3] << 32) | body[2]) & ~7, body[4] | (body[5] << 32))
  return True


@functools.cache   # asked only when a packet has no handler: nothing at import time
def _public_opcodes() -> dict[int, str]:
  """Opcodes the kernel's nvd.h and soc15d.h name (their PACKET3_* opcode values below 0x100)."""
  from rawgpu.autogen.amd import pm4_soc15
  out: dict[int, str] = {}
  for m in (pm4_soc15, P):
    for k, v in vars(m).items():
      if k.startswith("PACKET3_") and isinstance(v, int) and 0x10 <= v <= 0xff and not k.endswith(("_START", "_END")): out.setdefault(v, k)
  return out


def not_modelled(op: int) -> str | None:
  """Why a packet the handlers lack stops the queue: a publicly named one (COND_WRITE, WAIT_REG_MEM64, ...) may well be
  valid on the MEC, so the model says it does not know it and posts no BAD_OPCODE; an opcode no header names gets
  the hardware's bad-opcode error (None)."""
  name = _public_opcodes().get(op)
  return f"{name} (0x{op:02x}) is not modelled" if name else None


HANDLERS: dict[int, Callable[["ComputeQueue", list[int]], bool]] = {
  NOP: nop, CLEAR_STATE: nop, CONTEXT_CONTROL: nop, PFP_SYNC_ME: nop, SET_Q_PREEMPTION_MODE: nop, SET_BASE: set_base,
  SET_SH_REG: set_sh_reg, SET_SH_REG_INDEX: set_sh_reg, SET_UCONFIG_REG: set_uconfig_reg, SET_CONFIG_REG: set_config_reg,
  DISPATCH_DIRECT: dispatch_direct, P.PACKET3_DISPATCH_INDIRECT: dispatch_indirect, WRITE_DATA: write_data, WAIT_REG_MEM: wait_reg_mem, INDIRECT_BUFFER: indirect_buffer,
  COPY_DATA: copy_data, P.PACKET3_COND_EXEC: cond_exec, P.PACKET3_ATOMIC_MEM: atomic_mem, EVENT_WRITE: event_write, ACQUIRE_MEM: acquire_mem, RELEASE_MEM: release_mem, DMA_DATA: dma_data,
  INVALIDATE_TLBS: invalidate_tlbs, SET_RESOURCES: set_resources, MAP_QUEUES: map_queues, UNMAP_QUEUES: unmap_queues,
  QUERY_STATUS: query_status,
}
