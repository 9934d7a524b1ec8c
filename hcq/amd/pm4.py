"""PM4 type-3 packets for gfx11/gfx12 compute queues: one emitter per packet (lists of uint32), and a decoder.

Opcodes and field positions come from rawgpu.autogen.amd.pm4 (generated from the kernel's nvd.h); the packet layouts
and the values Linux programs (gfx_v11_0.c / gfx_v12_0.c emit functions) are facts from the amdgpu driver.

    q = [*acquire_mem(), *set_sh_reg(pgm_lo_addr, lo, hi), *dispatch_direct(8, 1, 1, dispatch_initiator(wave32=True)),
         *release_mem(addr, 42, data_sel=DataSel.VALUE32, int_sel=IntSel.INTERRUPT_AFTER_WRITE)]
    print(format_pm4(q))
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Iterable

from rawgpu.autogen.amd import pm4 as P

MASK32 = 0xffffffff
NOP_ONE_DWORD = 0x3fff  # a NOP header with this count is a packet by itself (amdgpu's ring nop)


def _lo(v: int) -> int: return v & MASK32
def _hi(v: int) -> int: return (v >> 32) & MASK32
def _bit(mask: int) -> int: return mask.bit_length() - 1
def _at(fn: Callable[[int], int]) -> int: return _bit(fn(1))  # shift of a generated field builder


class WaitFunction(enum.IntEnum):
  """WAIT_REG_MEM compare function (value & mask) OP reference."""
  ALWAYS = 0
  LESS = 1
  LESS_EQUAL = 2
  EQUAL = 3
  NOT_EQUAL = 4
  GREATER_EQUAL = 5
  GREATER = 6


class DataSel(enum.IntEnum):
  """RELEASE_MEM data_sel: what is written to the address once the event has passed."""
  NONE = 0  # write nothing (an interrupt alone)
  VALUE32 = 1
  VALUE64 = 2
  TIMESTAMP = 3  # the 64-bit GPU clock counter


class IntSel(enum.IntEnum):
  """RELEASE_MEM int_sel."""
  NONE = 0
  INTERRUPT = 1
  INTERRUPT_AFTER_WRITE = 2  # once the write is confirmed (what amdgpu uses for fences)
  WAIT_WRITE_CONFIRM = 3  # no interrupt, but the packet completes only once the write is confirmed


class DstSel(enum.IntEnum):
  """WRITE_DATA dst_sel."""
  REGISTER = 0
  MEMORY = 5


class Event(enum.IntEnum):
  """VGT event types used on compute queues (the kernel's sid.h; Mesa's VGT_EVENT_TYPE)."""
  CACHE_FLUSH_TS = 4
  CS_PARTIAL_FLUSH = 7
  CACHE_FLUSH_AND_INV_TS_EVENT = 20
  BOTTOM_OF_PIPE_TS = 40
  CS_DONE = 47


# ---- emitters


def header(opcode: int, body_dwords: int) -> int:
  """A type-3 header for a packet with body_dwords dwords after the header."""
  if body_dwords < 1: raise ValueError(f"a PM4 type-3 packet has at least one body dword, got {body_dwords}")
  return P.PACKET3(opcode, body_dwords - 1)


def nop(dwords: int = 1) -> list[int]:
  """Padding of exactly `dwords` dwords (one packet)."""
  if dwords < 1: raise ValueError("a NOP is at least one dword")
  if dwords == 1: return [P.PACKET3(P.PACKET3_NOP, NOP_ONE_DWORD)]
  return [header(P.PACKET3_NOP, dwords - 1)] + [0] * (dwords - 1)


def _set_reg(opcode: int, start: int, end: int, what: str, reg: int, values: tuple[int, ...]) -> list[int]:
  if not values: raise ValueError(f"{what} needs at least one value")
  if not (start <= reg and reg + len(values) <= end):
    raise ValueError(f"register 0x{reg:x} (+{len(values)}) is outside the {what} range 0x{start:x}..0x{end:x}")
  return [header(opcode, 1 + len(values)), reg - start, *(v & MASK32 for v in values)]


def set_sh_reg(reg: int, *values: int) -> list[int]:
  """Write consecutive SH registers from reg (absolute dword address, e.g. Reg.addr(bases) of COMPUTE_PGM_LO)."""
  return _set_reg(P.PACKET3_SET_SH_REG, P.PACKET3_SET_SH_REG_START, P.PACKET3_SET_SH_REG_END, "SET_SH_REG", reg, values)


def set_uconfig_reg(reg: int, *values: int) -> list[int]:
  """Write consecutive UCONFIG registers from reg (absolute dword address)."""
  return _set_reg(P.PACKET3_SET_UCONFIG_REG, P.PACKET3_SET_UCONFIG_REG_START, P.PACKET3_SET_UCONFIG_REG_END,
                  "SET_UCONFIG_REG", reg, values)


def dispatch_initiator(wave32: bool, gen: int = 11, force_start_at_000: bool = True, **extra: int) -> int:
  """A COMPUTE_DISPATCH_INITIATOR value (fields from the gc register tables): shader enabled, wave32 or wave64."""
  from rawgpu.autogen.regs import ip_regs
  reg = ip_regs("gc", gen, 0, 0)["regCOMPUTE_DISPATCH_INITIATOR"]
  return reg.encode(COMPUTE_SHADER_EN=1, FORCE_START_AT_000=int(force_start_at_000), CS_W32_EN=int(wave32), **extra)


def dispatch_direct(x: int, y: int, z: int, initiator: int) -> list[int]:
  """Launch an x*y*z grid of workgroups with the currently set COMPUTE_* registers."""
  return [header(P.PACKET3_DISPATCH_DIRECT, 4), x, y, z, initiator]


def gcr_cntl(gli_inv: int = 0, gl1_range: int = 0, glm_wb: bool = False, glm_inv: bool = False, glk_wb: bool = False,
             glk_inv: bool = False, glv_inv: bool = False, gl1_inv: bool = False, gl2_us: bool = False, gl2_range: int = 0,
             gl2_discard: bool = False, gl2_inv: bool = False, gl2_wb: bool = False, seq: int = 0) -> int:
  """ACQUIRE_MEM's GCR_CNTL dword: which caches to write back / invalidate."""
  return (P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLI_INV(gli_inv) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL1_RANGE(gl1_range)
          | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLM_WB(int(glm_wb)) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLM_INV(int(glm_inv))
          | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLK_WB(int(glk_wb)) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLK_INV(int(glk_inv))
          | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLV_INV(int(glv_inv)) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL1_INV(int(gl1_inv))
          | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_US(int(gl2_us)) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_RANGE(gl2_range)
          | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_DISCARD(int(gl2_discard))
          | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_INV(int(gl2_inv)) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_WB(int(gl2_wb))
          | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_SEQ(seq))


def acquire_gcr_default(gen: int = 11) -> int:
  """What amdgpu's gfx_v11_0/gfx_v12_0 emit_mem_sync uses: write back and invalidate every level (same on both)."""
  return gcr_cntl(gli_inv=1, glm_wb=True, glm_inv=True, glk_inv=True, glv_inv=True, gl1_inv=True, gl2_inv=True, gl2_wb=True)


def acquire_mem(gcr: int | None = None, gen: int = 11, coher_cntl: int = 0, coher_size: int = MASK32,
                coher_size_hi: int = 0xffffff, coher_base: int = 0, coher_base_hi: int = 0, poll_interval: int = 10) -> list[int]:
  """Make memory written before it visible to what follows (default: the whole address range, as amdgpu does)."""
  return [header(P.PACKET3_ACQUIRE_MEM, 7), coher_cntl, coher_size, coher_size_hi, coher_base, coher_base_hi,
          poll_interval, acquire_gcr_default(gen) if gcr is None else gcr]


def release_gcr_default(gen: int = 11) -> int:
  """RELEASE_MEM cache actions of amdgpu's fence: gfx11 writes back GL2 and GLM; gfx12 (no GLM there) GL2 only."""
  gcr = P.PACKET3_RELEASE_MEM_GCR_SEQ | P.PACKET3_RELEASE_MEM_GCR_GL2_WB
  return gcr | (P.PACKET3_RELEASE_MEM_GCR_GLM_INV | P.PACKET3_RELEASE_MEM_GCR_GLM_WB if gen < 12 else 0)


def release_mem(addr: int, value: int = 0, data_sel: DataSel = DataSel.VALUE32, int_sel: IntSel = IntSel.NONE,
                event: int = Event.CACHE_FLUSH_AND_INV_TS_EVENT, event_index: int = 5, gcr: int | None = None,
                gen: int = 11, cache_policy: int = 3, dst_sel: int = 0, int_ctxid: int = 0) -> list[int]:
  """At the end of everything before it (event), flush caches (gcr) and write value or the timestamp to addr."""
  if addr & (7 if data_sel in (DataSel.VALUE64, DataSel.TIMESTAMP) else 3):
    raise ValueError(f"RELEASE_MEM address 0x{addr:x} is not aligned for data_sel {DataSel(data_sel).name}")
  dw1 = (P.PACKET3_RELEASE_MEM_EVENT_TYPE(event) | P.PACKET3_RELEASE_MEM_EVENT_INDEX(event_index)
         | P.PACKET3_RELEASE_MEM_CACHE_POLICY(cache_policy) | (release_gcr_default(gen) if gcr is None else gcr))
  dw2 = P.PACKET3_RELEASE_MEM_DATA_SEL(data_sel) | P.PACKET3_RELEASE_MEM_INT_SEL(int_sel) | P.PACKET3_RELEASE_MEM_DST_SEL(dst_sel)
  return [header(P.PACKET3_RELEASE_MEM, 7), dw1, dw2, _lo(addr), _hi(addr), _lo(value), _hi(value), int_ctxid]


def wait_reg_mem(addr: int, ref: int, mask: int = MASK32, function: WaitFunction = WaitFunction.EQUAL, memory: bool = True,
                 poll_interval: int = 4, engine: int = 0, operation: int = 0) -> list[int]:
  """Stall until (value at addr, or register addr when memory=False) & mask compares with ref."""
  if memory and addr & 3: raise ValueError(f"WAIT_REG_MEM address 0x{addr:x} is not dword aligned")
  dw1 = (P.WAIT_REG_MEM_FUNCTION(function) | P.WAIT_REG_MEM_MEM_SPACE(int(memory)) | P.WAIT_REG_MEM_OPERATION(operation)
         | P.WAIT_REG_MEM_ENGINE(engine))
  return [header(P.PACKET3_WAIT_REG_MEM, 6), dw1, _lo(addr), _hi(addr) if memory else 0, ref & MASK32, mask & MASK32,
          poll_interval]


def indirect_buffer(addr: int, length_dw: int, vmid: int = 0, valid: bool = True, cache_policy: int = 0,
                    pre_ena: bool = False, pre_resume: bool = False) -> list[int]:
  """Run length_dw dwords of commands at addr (compute-ring form: size, VALID, vmid in the control dword)."""
  if addr & 3: raise ValueError(f"indirect buffer address 0x{addr:x} is not dword aligned")
  if not 0 < length_dw < 1 << 20: raise ValueError(f"indirect buffer length {length_dw} is outside 1..2^20-1 dwords")
  control = (length_dw | (P.INDIRECT_BUFFER_VALID if valid else 0) | (vmid & 0xf) << 24
             | P.INDIRECT_BUFFER_CACHE_POLICY(cache_policy) | P.INDIRECT_BUFFER_PRE_ENB(int(pre_ena))
             | P.INDIRECT_BUFFER_PRE_RESUME(int(pre_resume)))
  return [header(P.PACKET3_INDIRECT_BUFFER, 3), _lo(addr), _hi(addr), control]


def event_write(event: int, event_index: int = 4, addr: int | None = None) -> list[int]:
  """Send an event down the pipe (CS_PARTIAL_FLUSH: wait for dispatched waves to finish)."""
  dw1 = P.EVENT_TYPE(event) | P.EVENT_INDEX(event_index)
  if addr is None: return [header(P.PACKET3_EVENT_WRITE, 1), dw1]
  return [header(P.PACKET3_EVENT_WRITE, 3), dw1, _lo(addr), _hi(addr)]


def write_data(addr: int, *values: int, dst_sel: DstSel = DstSel.MEMORY, wr_confirm: bool = True,
               one_addr: bool = False, cache_policy: int = 0, engine_sel: int = 0) -> list[int]:
  """Write values to memory at addr (or to register addr with dst_sel=REGISTER)."""
  if not values: raise ValueError("WRITE_DATA needs at least one value")
  control = (P.WRITE_DATA_DST_SEL(dst_sel) | (P.WR_CONFIRM if wr_confirm else 0) | (P.WR_ONE_ADDR if one_addr else 0)
             | P.WRITE_DATA_CACHE_POLICY(cache_policy) | P.WRITE_DATA_ENGINE_SEL(engine_sel))
  return [header(P.PACKET3_WRITE_DATA, 3 + len(values)), control, _lo(addr), _hi(addr), *(v & MASK32 for v in values)]


# ---- decoder

@dataclass(frozen=True)
class Field:
  name: str
  dword: int  # index in the packet, 0 = header
  shift: int
  width: int

  def get(self, words: list[int]) -> int: return (words[self.dword] >> self.shift) & ((1 << self.width) - 1)


def _f(name: str, dword: int, shift: int, width: int = 1) -> Field: return Field(name, dword, shift, width)


_GCR_ACQUIRE = [_f("gli_inv", 7, _at(P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLI_INV), 2),
                _f("gl1_range", 7, _at(P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL1_RANGE), 2),
                *(_f(n.lower(), 7, _at(getattr(P, f"PACKET3_ACQUIRE_MEM_GCR_CNTL_{n}")))
                  for n in ("GLM_WB", "GLM_INV", "GLK_WB", "GLK_INV", "GLV_INV", "GL1_INV", "GL2_US")),
                _f("gl2_range", 7, _at(P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_RANGE), 2),
                *(_f(n.lower(), 7, _at(getattr(P, f"PACKET3_ACQUIRE_MEM_GCR_CNTL_{n}")))
                  for n in ("GL2_DISCARD", "GL2_INV", "GL2_WB")),
                _f("seq", 7, _at(P.PACKET3_ACQUIRE_MEM_GCR_CNTL_SEQ), 2),
                _f("range_is_pa", 7, _bit(P.PACKET3_ACQUIRE_MEM_GCR_RANGE_IS_PA))]
# nvd.h names one bit of the two-bit GL2_RANGE and SEQ fields
_GCR_RELEASE = [_f(n.lower(), 1, _bit(getattr(P, f"PACKET3_RELEASE_MEM_GCR_{n}")), 2 if n in ("GL2_RANGE", "SEQ") else 1)
                for n in ("GLM_WB", "GLM_INV", "GLV_INV", "GL1_INV", "GL2_US", "GL2_RANGE", "GL2_DISCARD", "GL2_INV",
                          "GL2_WB", "SEQ")]

# opcode -> (name, fixed fields); packets with a variable tail (register values, data) put it in Packet.data
LAYOUTS: dict[int, tuple[str, list[Field]]] = {
  P.PACKET3_NOP: ("NOP", []),
  P.PACKET3_SET_SH_REG: ("SET_SH_REG", [_f("reg_offset", 1, 0, 16)]),
  P.PACKET3_SET_UCONFIG_REG: ("SET_UCONFIG_REG", [_f("reg_offset", 1, 0, 16)]),
  P.PACKET3_DISPATCH_DIRECT: ("DISPATCH_DIRECT", [_f("dim_x", 1, 0, 32), _f("dim_y", 2, 0, 32), _f("dim_z", 3, 0, 32),
                                                  _f("dispatch_initiator", 4, 0, 32)]),
  P.PACKET3_ACQUIRE_MEM: ("ACQUIRE_MEM", [_f("coher_cntl", 1, 0, 32), _f("coher_size", 2, 0, 32),
                                          _f("coher_size_hi", 3, 0, 24), _f("coher_base", 4, 0, 32),
                                          _f("coher_base_hi", 5, 0, 24), _f("poll_interval", 6, 0, 16),
                                          _f("gcr_cntl", 7, 0, 32), *_GCR_ACQUIRE]),
  P.PACKET3_RELEASE_MEM: ("RELEASE_MEM", [
    _f("event_type", 1, _at(P.PACKET3_RELEASE_MEM_EVENT_TYPE), 6), _f("event_index", 1, _at(P.PACKET3_RELEASE_MEM_EVENT_INDEX), 4),
    *_GCR_RELEASE, _f("cache_policy", 1, _at(P.PACKET3_RELEASE_MEM_CACHE_POLICY), 2),
    _f("execute", 1, _bit(P.PACKET3_RELEASE_MEM_EXECUTE), 2),  # two bits on gfx11 (Mesa pkt3.json)
    _f("dst_sel", 2, _at(P.PACKET3_RELEASE_MEM_DST_SEL), 2), _f("int_sel", 2, _at(P.PACKET3_RELEASE_MEM_INT_SEL), 3),
    _f("data_sel", 2, _at(P.PACKET3_RELEASE_MEM_DATA_SEL), 3), _f("addr_lo", 3, 0, 32), _f("addr_hi", 4, 0, 32),
    _f("data_lo", 5, 0, 32), _f("data_hi", 6, 0, 32), _f("int_ctxid", 7, 0, 32)]),
  P.PACKET3_WAIT_REG_MEM: ("WAIT_REG_MEM", [
    _f("function", 1, _at(P.WAIT_REG_MEM_FUNCTION), 3), _f("mem_space", 1, _at(P.WAIT_REG_MEM_MEM_SPACE), 2),
    _f("operation", 1, _at(P.WAIT_REG_MEM_OPERATION), 2), _f("engine", 1, _at(P.WAIT_REG_MEM_ENGINE), 2),
    _f("addr_lo", 2, 0, 32), _f("addr_hi", 3, 0, 32), _f("reference", 4, 0, 32), _f("mask", 5, 0, 32),
    _f("poll_interval", 6, 0, 16)]),
  P.PACKET3_INDIRECT_BUFFER: ("INDIRECT_BUFFER", [
    _f("ib_base_lo", 1, 0, 32), _f("ib_base_hi", 2, 0, 32), _f("ib_size", 3, 0, 20),
    _f("pre_ena", 3, _at(P.INDIRECT_BUFFER_PRE_ENB)), _f("valid", 3, _bit(P.INDIRECT_BUFFER_VALID)), _f("vmid", 3, 24, 4),
    _f("cache_policy", 3, _at(P.INDIRECT_BUFFER_CACHE_POLICY), 2), _f("pre_resume", 3, _at(P.INDIRECT_BUFFER_PRE_RESUME))]),
  P.PACKET3_EVENT_WRITE: ("EVENT_WRITE", [_f("event_type", 1, _at(P.EVENT_TYPE), 6), _f("event_index", 1, _at(P.EVENT_INDEX), 4)]),
  P.PACKET3_WRITE_DATA: ("WRITE_DATA", [
    _f("dst_sel", 1, _at(P.WRITE_DATA_DST_SEL), 4), _f("wr_one_addr", 1, _bit(P.WR_ONE_ADDR)),
    _f("wr_confirm", 1, _bit(P.WR_CONFIRM)), _f("cache_policy", 1, _at(P.WRITE_DATA_CACHE_POLICY), 2),
    _f("engine_sel", 1, _at(P.WRITE_DATA_ENGINE_SEL), 2), _f("dst_addr_lo", 2, 0, 32), _f("dst_addr_hi", 3, 0, 32)]),
}
_VAR_TAIL = {P.PACKET3_SET_SH_REG: 2, P.PACKET3_SET_UCONFIG_REG: 2, P.PACKET3_WRITE_DATA: 4}  # first data dword
# every other opcode gets its nvd.h name (first one listed for shared values), without fields
OPCODE_NAMES: dict[int, str] = {}
for _name, _v in vars(P).items():
  if _name.startswith("PACKET3_") and isinstance(_v, int) and P.PACKET3_NOP <= _v < 256 \
     and not _name.endswith(("_START", "_END")):
    OPCODE_NAMES.setdefault(_v, _name[len("PACKET3_"):])
OPCODE_NAMES.update({op: name for op, (name, _) in LAYOUTS.items()})


@dataclass
class Packet:
  offset: int  # dword index of the header in the stream
  name: str  # packet name, "TYPE0", "TYPE2", "UNKNOWN_0xNN", or "TRUNCATED"
  words: list[int]  # every dword of the packet, header included
  opcode: int | None = None
  fields: dict[str, int] = field(default_factory=dict)
  data: list[int] = field(default_factory=list)  # variable tail: register values, WRITE_DATA payload
  error: str = ""


def _opcode_name(op: int) -> str: return OPCODE_NAMES.get(op, f"UNKNOWN_0x{op:02x}")


def decode_pm4(words: Iterable[int]) -> list[Packet]:
  """Split a PM4 stream into packets with named fields. Never raises: bad input becomes a TRUNCATED packet."""
  w = [int(x) & MASK32 for x in words]
  out, i = [], 0
  while i < len(w):
    h = w[i]
    kind, count = P.CP_PACKET_GET_TYPE(h), P.CP_PACKET_GET_COUNT(h)
    if kind == P.PACKET_TYPE2:
      out.append(Packet(i, "TYPE2", [h]))
      i += 1
      continue
    if kind == P.PACKET_TYPE3 and P.CP_PACKET3_GET_OPCODE(h) == P.PACKET3_NOP and count == NOP_ONE_DWORD:
      out.append(Packet(i, "NOP", [h], P.PACKET3_NOP))
      i += 1
      continue
    size = count + 2  # header + count+1 body dwords (type 0: count+1 register values)
    if kind == P.PACKET_TYPE1:
      out.append(Packet(i, "TYPE1", [h], error="type-1 packets do not exist on gfx9+"))
      i += 1
      continue
    if i + size > len(w):
      out.append(Packet(i, "TRUNCATED", w[i:], error=f"header 0x{h:08x} announces {size} dwords, {len(w) - i} left"))
      break
    pkt = w[i:i + size]
    if kind == P.PACKET_TYPE0:
      out.append(Packet(i, "TYPE0", pkt, fields={"reg": P.CP_PACKET0_GET_REG(h)}, data=pkt[1:]))
    else:
      out.append(_decode3(i, pkt))
    i += size
  return out


def _decode3(at: int, pkt: list[int]) -> Packet:
  op = P.CP_PACKET3_GET_OPCODE(pkt[0])
  name, layout = LAYOUTS.get(op, (_opcode_name(op), []))
  p = Packet(at, name, pkt, op)
  fixed = [f for f in layout if f.dword < len(pkt)]
  if len(fixed) != len(layout):
    p.error = f"{name} is {len(pkt)} dwords, too short for its fields"
  p.fields = {f.name: f.get(pkt) for f in fixed}
  if op in _VAR_TAIL: p.data = pkt[_VAR_TAIL[op]:]
  if op == P.PACKET3_EVENT_WRITE and len(pkt) >= 4: p.fields["address"] = pkt[2] | pkt[3] << 32
  starts = {P.PACKET3_SET_SH_REG: P.PACKET3_SET_SH_REG_START, P.PACKET3_SET_UCONFIG_REG: P.PACKET3_SET_UCONFIG_REG_START}
  if op in starts and "reg_offset" in p.fields: p.fields["reg"] = starts[op] + p.fields["reg_offset"]
  for lo, hi, full in (("addr_lo", "addr_hi", "addr"), ("data_lo", "data_hi", "data"), ("ib_base_lo", "ib_base_hi", "ib_base"),
                       ("dst_addr_lo", "dst_addr_hi", "dst_addr")):
    if lo in p.fields and hi in p.fields: p.fields[full] = p.fields[lo] | p.fields[hi] << 32
  return p


_ENUMS = {("RELEASE_MEM", "event_type"): Event, ("EVENT_WRITE", "event_type"): Event, ("RELEASE_MEM", "data_sel"): DataSel,
          ("RELEASE_MEM", "int_sel"): IntSel, ("WAIT_REG_MEM", "function"): WaitFunction, ("WRITE_DATA", "dst_sel"): DstSel}
_HIDDEN = {"addr_lo", "addr_hi", "data_lo", "data_hi", "ib_base_lo", "ib_base_hi", "dst_addr_lo", "dst_addr_hi", "reg_offset"}


def format_packet(p: Packet, reg_name: Callable[[int], str | None] | None = None) -> str:
  """One line: offset, name, the non-zero fields (enums by name, registers by name when reg_name knows them)."""
  parts = [f"{p.offset:05x}", p.name]
  for k, v in p.fields.items():
    if k in _HIDDEN or (v == 0 and k not in ("reg", "dim_x", "dim_y", "dim_z")): continue
    e = _ENUMS.get((p.name, k))
    text = f"{k}={v:#x}"
    if e is not None and v in e._value2member_map_: text += f"({e(v).name})"
    if k == "reg" and reg_name and (rn := reg_name(v)): text += f"({rn})"
    parts.append(text)
  if p.data: parts.append("data=[" + " ".join(f"{d:#x}" for d in p.data[:16]) + (" ...]" if len(p.data) > 16 else "]"))
  if p.error: parts.append(f"!! {p.error}")
  return " ".join(parts)


def format_pm4(stream: Iterable[int] | list[Packet], reg_name: Callable[[int], str | None] | None = None) -> str:
  """The stream (or already decoded packets) one packet per line, for hang reports and `rawgpu decode`."""
  items = list(stream)
  packets = items if items and isinstance(items[0], Packet) else decode_pm4(items)
  return "\n".join(format_packet(p, reg_name) for p in packets)
