"""PM4 type-3 packets for gfx11/gfx12 and gfx9.4 (CDNA3) compute queues: one emitter per packet, and a decoder.

Opcodes and field positions come from rawgpu.autogen.amd.pm4 (the kernel's nvd.h, gfx10+) and, for gen=9,
rawgpu.autogen.amd.pm4_soc15 (soc15d.h); the packet layouts and the values Linux programs (the gfx_v11_0.c,
gfx_v12_0.c and gfx_v9_4_3.c emit functions) are facts from the amdgpu driver. `gen` is the gfx major (GC IP major):
9 selects the soc15 forms (ACQUIRE_MEM with CP_COHER_CNTL, RELEASE_MEM with EOP_* cache actions, wave64 only).

    q = [*acquire_mem(), *set_sh_reg(pgm_lo_addr, lo, hi), *dispatch_direct(8, 1, 1, dispatch_initiator(wave32=True)),
         *release_mem(addr, 42, data_sel=DataSel.VALUE32, int_sel=IntSel.INTERRUPT_AFTER_WRITE)]
    print(format_pm4(q))
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Iterable

from rawgpu.autogen.amd import pm4 as P
from rawgpu.autogen.amd import pm4_soc15 as P9
from rawgpu.errors import RawGPUError

MASK32 = 0xffffffff
NOP_ONE_DWORD = 0x3fff  # a NOP header with this count is a packet by itself (amdgpu's ring nop)


def _lo(v: int) -> int: return v & MASK32
def _hi(v: int) -> int: return (v >> 32) & MASK32
def _bit(mask: int) -> int: return mask.bit_length() - 1
def _at(fn: Callable[[int], int]) -> int: return _bit(fn(1))  # shift of a generated field builder
def _defs(gen: int): return P9 if gen < 10 else P  # the generated header of that gfx generation


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


def header(opcode: int, body_dwords: int, gen: int = 11) -> int:
  """A type-3 header for a packet with body_dwords dwords after the header."""
  if body_dwords < 1: raise ValueError(f"a PM4 type-3 packet has at least one body dword, got {body_dwords}")
  return _defs(gen).PACKET3(opcode, body_dwords - 1)


def nop(dwords: int = 1, gen: int = 11) -> list[int]:
  """Padding of exactly `dwords` dwords (one packet)."""
  M = _defs(gen)
  if dwords < 1: raise ValueError("a NOP is at least one dword")
  if dwords == 1: return [M.PACKET3(M.PACKET3_NOP, NOP_ONE_DWORD)]
  return [header(M.PACKET3_NOP, dwords - 1, gen)] + [0] * (dwords - 1)


def _set_reg(opcode: int, start: int, end: int, what: str, reg: int, values: tuple[int, ...], gen: int) -> list[int]:
  if not values: raise ValueError(f"{what} needs at least one value")
  if not (start <= reg and reg + len(values) <= end):
    raise ValueError(f"register 0x{reg:x} (+{len(values)}) is outside the {what} range 0x{start:x}..0x{end:x}")
  return [header(opcode, 1 + len(values), gen), reg - start, *(v & MASK32 for v in values)]


def set_sh_reg(reg: int, *values: int, gen: int = 11) -> list[int]:
  """Write consecutive SH registers from reg (absolute dword address, e.g. Reg.addr(bases) of COMPUTE_PGM_LO)."""
  M = _defs(gen)
  return _set_reg(M.PACKET3_SET_SH_REG, M.PACKET3_SET_SH_REG_START, M.PACKET3_SET_SH_REG_END, "SET_SH_REG", reg, values, gen)


def set_uconfig_reg(reg: int, *values: int, gen: int = 11) -> list[int]:
  """Write consecutive UCONFIG registers from reg (absolute dword address)."""
  M = _defs(gen)
  return _set_reg(M.PACKET3_SET_UCONFIG_REG, M.PACKET3_SET_UCONFIG_REG_START, M.PACKET3_SET_UCONFIG_REG_END,
                  "SET_UCONFIG_REG", reg, values, gen)


GC9_VERSION = (9, 4, 3)  # the gfx9 register table compute queues use (CDNA3; the initiator fields are those of gc 9.0)


def dispatch_initiator(wave32: bool, gen: int = 11, force_start_at_000: bool = True, **extra: int) -> int:
  """A COMPUTE_DISPATCH_INITIATOR value (fields from the gc register tables): shader enabled, wave32 or wave64."""
  from rawgpu.autogen.regs import ip_regs
  if gen < 10:  # gfx9 has no CS_W32_EN: every wave is 64 lanes
    if wave32: raise ValueError("gfx9 (CDNA3) runs wave64 only: this kernel was built for wave32; rebuild it for gfx942")
    reg = ip_regs("gc", *GC9_VERSION)["regCOMPUTE_DISPATCH_INITIATOR"]
    return reg.encode(COMPUTE_SHADER_EN=1, FORCE_START_AT_000=int(force_start_at_000), **extra)
  reg = ip_regs("gc", gen, 0, 0)["regCOMPUTE_DISPATCH_INITIATOR"]
  return reg.encode(COMPUTE_SHADER_EN=1, FORCE_START_AT_000=int(force_start_at_000), CS_W32_EN=int(wave32), **extra)


def dispatch_direct(x: int, y: int, z: int, initiator: int, gen: int = 11) -> list[int]:
  """Launch an x*y*z grid of workgroups with the currently set COMPUTE_* registers."""
  return [header(_defs(gen).PACKET3_DISPATCH_DIRECT, 4, gen), x, y, z, initiator]


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


def coher_cntl(tc_nc: bool = False, tc_wc: bool = False, tc_inv_metadata: bool = False, tcl1_vol: bool = False,
                tc_wb: bool = False, tcl1: bool = False, tc: bool = False, cb: bool = False, db: bool = False,
                sh_kcache: bool = False, sh_kcache_vol: bool = False, sh_icache: bool = False,
                sh_kcache_wb: bool = False) -> int:
  """gfx9 ACQUIRE_MEM's CP_COHER_CNTL dword (soc15d.h): which caches to write back / invalidate."""
  flags = dict(TC_NC=tc_nc, TC_WC=tc_wc, TC_INV_METADATA=tc_inv_metadata, TCL1_VOL=tcl1_vol, TC_WB=tc_wb, TCL1=tcl1,
               TC=tc, CB=cb, DB=db, SH_KCACHE=sh_kcache, SH_KCACHE_VOL=sh_kcache_vol, SH_ICACHE=sh_icache,
               SH_KCACHE_WB=sh_kcache_wb)
  return sum(getattr(P9, f"PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_{k}_ACTION_ENA")(int(v)) for k, v in flags.items())


def coher_cntl_default() -> int:
  """gfx_v9_4_3_emit_mem_sync: invalidate I$, K$, L1 and L2, write L2 back."""
  return coher_cntl(sh_icache=True, sh_kcache=True, tc=True, tcl1=True, tc_wb=True)


def acquire_mem(gcr: int | None = None, gen: int = 11, coher_cntl: int | None = None, coher_size: int = MASK32,
                coher_size_hi: int = 0xffffff, coher_base: int = 0, coher_base_hi: int = 0, poll_interval: int = 10) -> list[int]:
  """Make memory written before it visible to what follows (default: the whole address range, as amdgpu does).
  gfx10+: the caches are named by gcr (GCR_CNTL); gfx9: by coher_cntl (CP_COHER_CNTL), one dword shorter."""
  if gen < 10:
    if gcr is not None: raise ValueError("gfx9 ACQUIRE_MEM has no GCR_CNTL dword; pass coher_cntl")
    return [header(P9.PACKET3_ACQUIRE_MEM, 6, gen), coher_cntl_default() if coher_cntl is None else coher_cntl,
            coher_size, coher_size_hi, coher_base, coher_base_hi, poll_interval]
  return [header(P.PACKET3_ACQUIRE_MEM, 7), coher_cntl or 0, coher_size, coher_size_hi, coher_base, coher_base_hi,
          poll_interval, acquire_gcr_default(gen) if gcr is None else gcr]


def release_gcr_default(gen: int = 11) -> int:
  """RELEASE_MEM cache actions of amdgpu's fence: gfx11 writes back GL2 and GLM; gfx12 (no GLM there) GL2 only;
  gfx9 (gfx_v9_4_3_ring_emit_fence) flushes and invalidates L1 and L2 and writes L2 and its metadata back."""
  if gen < 10: return P9.EOP_TCL1_ACTION_EN | P9.EOP_TC_ACTION_EN | P9.EOP_TC_WB_ACTION_EN | P9.EOP_TC_MD_ACTION_EN
  gcr = P.PACKET3_RELEASE_MEM_GCR_SEQ | P.PACKET3_RELEASE_MEM_GCR_GL2_WB
  return gcr | (P.PACKET3_RELEASE_MEM_GCR_GLM_INV | P.PACKET3_RELEASE_MEM_GCR_GLM_WB if gen < 12 else 0)


EOP_EVENTS = {Event.CACHE_FLUSH_TS, Event.CACHE_FLUSH_AND_INV_TS_EVENT, Event.BOTTOM_OF_PIPE_TS}
EOS_EVENTS = {Event.CS_DONE}


def event_index_of(event: int) -> int:
  """An event's EVENT_INDEX (Mesa's sid.h): 5 for end-of-pipe timestamp events, 6 for end-of-shader ones (CS_DONE),
  4 for the partial flushes, 0 for the others."""
  if event in EOP_EVENTS: return 5
  if event in EOS_EVENTS: return 6
  return 4 if event == Event.CS_PARTIAL_FLUSH else 0


def release_mem(addr: int, value: int = 0, data_sel: DataSel = DataSel.VALUE32, int_sel: IntSel = IntSel.NONE,
                event: int = Event.CACHE_FLUSH_AND_INV_TS_EVENT, event_index: int | None = None, gcr: int | None = None,
                gen: int = 11, cache_policy: int | None = None, dst_sel: int = 0, int_ctxid: int = 0) -> list[int]:
  """At the end of everything before it (event), flush caches (gcr: GCR bits on gfx10+, EOP_* action bits on gfx9)
  and write value or the timestamp to addr."""
  if event_index is None: event_index = event_index_of(event)
  if addr & (7 if data_sel in (DataSel.VALUE64, DataSel.TIMESTAMP) else 3):
    raise ValueError(f"RELEASE_MEM address 0x{addr:x} is not aligned for data_sel {DataSel(data_sel).name}")
  if gen < 10:  # the MEC's cache policy (kfd_pm4_headers_ai.h pm4_mec_release_mem: bits 25-26, 0 LRU, 1 stream); amdgpu sets none
    if cache_policy is not None and not 0 <= cache_policy <= 3: raise ValueError(f"gfx9 RELEASE_MEM cache_policy is 2 bits, not {cache_policy}")
    dw1 = P9.EVENT_TYPE(event) | P9.EVENT_INDEX(event_index) | (release_gcr_default(gen) if gcr is None else gcr) | (cache_policy or 0) << 25
    dw2 = P9.DATA_SEL(data_sel) | P9.INT_SEL(int_sel) | P9.DST_SEL(dst_sel)
    return [header(P9.PACKET3_RELEASE_MEM, 7, gen), dw1, dw2, _lo(addr), _hi(addr), _lo(value), _hi(value), int_ctxid]
  cache_policy = 3 if cache_policy is None else cache_policy
  dw1 = (P.PACKET3_RELEASE_MEM_EVENT_TYPE(event) | P.PACKET3_RELEASE_MEM_EVENT_INDEX(event_index)
         | P.PACKET3_RELEASE_MEM_CACHE_POLICY(cache_policy) | (release_gcr_default(gen) if gcr is None else gcr))
  dw2 = P.PACKET3_RELEASE_MEM_DATA_SEL(data_sel) | P.PACKET3_RELEASE_MEM_INT_SEL(int_sel) | P.PACKET3_RELEASE_MEM_DST_SEL(dst_sel)
  return [header(P.PACKET3_RELEASE_MEM, 7), dw1, dw2, _lo(addr), _hi(addr), _lo(value), _hi(value), int_ctxid]


class WaitOperation(enum.IntEnum):
  """WAIT_REG_MEM operation (Mesa's pkt3.json)."""
  WAIT_REG_MEM = 0
  WR_WAIT_WR_REG = 1  # write ref to register addr, then wait on register reg2 (the HDP flush request/done pair)


def wait_reg_mem(addr: int, ref: int, mask: int = MASK32, function: WaitFunction = WaitFunction.EQUAL, memory: bool = True,
                 poll_interval: int = 4, engine: int = 0, operation: int = 0, reg2: int = 0, gen: int = 11) -> list[int]:
  """Stall until (value at addr, or register addr when memory=False) & mask compares with ref; with memory=False
  reg2 is the second register (the one polled by WR_WAIT_WR_REG)."""
  M = _defs(gen)
  if memory and addr & 3: raise ValueError(f"WAIT_REG_MEM address 0x{addr:x} is not dword aligned")
  dw1 = (M.WAIT_REG_MEM_FUNCTION(function) | M.WAIT_REG_MEM_MEM_SPACE(int(memory)) | M.WAIT_REG_MEM_OPERATION(operation)
         | M.WAIT_REG_MEM_ENGINE(engine))
  return [header(M.PACKET3_WAIT_REG_MEM, 6, gen), dw1, _lo(addr), _hi(addr) if memory else reg2, ref & MASK32,
          mask & MASK32, poll_interval]


NBIO_HDP_VERSION = (7, 9, 0)  # GC 9.4.3's NBIO (nbio_v7_9.c provides its HDP flush registers)


def hdp_flush_regs(nbio_bases: tuple[int, ...] | list[int], me: int = 1, pipe: int = 0,
                   nbio_version: tuple[int, int, int] = NBIO_HDP_VERSION, sdma_engine: int | None = None) -> tuple[int, int, int]:
  """(request register, done register, ref_and_mask) a compute ring on MEC `me`, pipe `pipe` (or, given
  sdma_engine, an SDMA ring) uses to flush HDP (BIF_BX_PF0_GPU_HDP_FLUSH_REQ/DONE of NBIO 7.9, NBIO 4.3 (gfx11) or
  NBIF 6.3.1 (gfx12), whose tables are under nbif; MEC1 pipes from the CP2 bit, MEC2 pipes from CP6, SDMA 0 and 1
  their own bits, as the gfx9/11/12 and SDMA rings' emit_hdp_flush take them)."""
  from rawgpu.autogen.regs import ip_regs
  try: nbio = ip_regs("nbio", *nbio_version)
  except RawGPUError: nbio = ip_regs("nbif", *nbio_version)
  req, done = nbio["regBIF_BX_PF0_GPU_HDP_FLUSH_REQ"], nbio["regBIF_BX_PF0_GPU_HDP_FLUSH_DONE"]
  if sdma_engine is not None:
    if sdma_engine not in (0, 1): raise ValueError(f"no HDP flush bit for SDMA engine {sdma_engine} (engines 0-1)")
    bit = done.fields[f"SDMA{sdma_engine}"][1]
  else:
    if me not in (1, 2) or not 0 <= pipe < 4: raise ValueError(f"no HDP flush bit for compute ME {me} pipe {pipe} (ME 1-2, pipe 0-3)")
    bit = done.fields["CP2" if me == 1 else "CP6"][1] << pipe
  return req.addr(nbio_bases), done.addr(nbio_bases), bit


def hdp_flush(req_reg: int, done_reg: int, ref_and_mask: int, gen: int = 9) -> list[int]:
  """Flush the host data path: write ref_and_mask to the request register, wait for it in the done register
  (gfx_v9_4_3_ring_emit_hdp_flush on a compute ring: ME engine, poll interval 0x20)."""
  return wait_reg_mem(req_reg, ref_and_mask, ref_and_mask, WaitFunction.EQUAL, memory=False, poll_interval=0x20,
                      operation=WaitOperation.WR_WAIT_WR_REG, reg2=done_reg, gen=gen)


def indirect_buffer(addr: int, length_dw: int, vmid: int = 0, valid: bool = True, cache_policy: int = 0,
                    pre_ena: bool = False, inherit_vmid: bool = False, gen: int = 11) -> list[int]:
  """Run length_dw dwords of commands at addr (compute-ring form: size, VALID, vmid in the control dword)."""
  P = _defs(gen)
  if addr & 3: raise ValueError(f"indirect buffer address 0x{addr:x} is not dword aligned")
  if not 0 < length_dw < 1 << 20: raise ValueError(f"indirect buffer length {length_dw} is outside 1..2^20-1 dwords")
  control = (length_dw | (P.INDIRECT_BUFFER_VALID if valid else 0) | (vmid & 0xf) << 24
             | P.INDIRECT_BUFFER_CACHE_POLICY(cache_policy) | P.INDIRECT_BUFFER_PRE_ENB(int(pre_ena))
             | P.INDIRECT_BUFFER_PRE_RESUME(int(inherit_vmid)))   # bit 30: PRE_RESUME on the gfx ring; on compute, take
                                                                   # the VMID from the MQD (Mesa's S_3F3_INHERIT_VMID_MQD_COMPUTE)
  return [header(P.PACKET3_INDIRECT_BUFFER, 3, gen), _lo(addr), _hi(addr), control]


def event_write(event: int, event_index: int | None = None, addr: int | None = None, gen: int = 11) -> list[int]:
  """Send an event down the pipe (CS_PARTIAL_FLUSH: wait for dispatched waves to finish)."""
  P = _defs(gen)
  if event_index is None: event_index = event_index_of(event)
  dw1 = P.EVENT_TYPE(event) | P.EVENT_INDEX(event_index)
  if addr is None: return [header(P.PACKET3_EVENT_WRITE, 1, gen), dw1]
  return [header(P.PACKET3_EVENT_WRITE, 3, gen), dw1, _lo(addr), _hi(addr)]


def write_data(addr: int, *values: int, dst_sel: DstSel = DstSel.MEMORY, wr_confirm: bool = True,
               one_addr: bool = False, cache_policy: int = 0, engine_sel: int = 0, gen: int = 11) -> list[int]:
  """Write values to memory at addr (or to register addr with dst_sel=REGISTER)."""
  P = _defs(gen)
  if not values: raise ValueError("WRITE_DATA needs at least one value")
  control = (P.WRITE_DATA_DST_SEL(dst_sel) | (P.WR_CONFIRM if wr_confirm else 0) | (P.WR_ONE_ADDR if one_addr else 0)
             | P.WRITE_DATA_CACHE_POLICY(cache_policy) | P.WRITE_DATA_ENGINE_SEL(engine_sel))
  return [header(P.PACKET3_WRITE_DATA, 3 + len(values), gen), control, _lo(addr), _hi(addr), *(v & MASK32 for v in values)]


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


def _common_layouts(M) -> dict[int, tuple[str, list[Field]]]:
  """The packets whose fields sit at the same places on gfx9 and gfx10+, from generated header M."""
  return {
    M.PACKET3_NOP: ("NOP", []),
    M.PACKET3_SET_SH_REG: ("SET_SH_REG", [_f("reg_offset", 1, 0, 16)]),
    M.PACKET3_SET_UCONFIG_REG: ("SET_UCONFIG_REG", [_f("reg_offset", 1, 0, 16)]),
    M.PACKET3_DISPATCH_DIRECT: ("DISPATCH_DIRECT", [_f("dim_x", 1, 0, 32), _f("dim_y", 2, 0, 32), _f("dim_z", 3, 0, 32),
                                                    _f("dispatch_initiator", 4, 0, 32)]),
    M.PACKET3_WAIT_REG_MEM: ("WAIT_REG_MEM", [
      _f("function", 1, _at(M.WAIT_REG_MEM_FUNCTION), 3), _f("mem_space", 1, _at(M.WAIT_REG_MEM_MEM_SPACE), 2),
      _f("operation", 1, _at(M.WAIT_REG_MEM_OPERATION), 2), _f("engine", 1, _at(M.WAIT_REG_MEM_ENGINE), 2),
      _f("addr_lo", 2, 0, 32), _f("addr_hi", 3, 0, 32), _f("reference", 4, 0, 32), _f("mask", 5, 0, 32),
      _f("poll_interval", 6, 0, 16)]),
    M.PACKET3_INDIRECT_BUFFER: ("INDIRECT_BUFFER", [
      _f("ib_base_lo", 1, 0, 32), _f("ib_base_hi", 2, 0, 32), _f("ib_size", 3, 0, 20),
      _f("pre_ena", 3, _at(M.INDIRECT_BUFFER_PRE_ENB)), _f("valid", 3, _bit(M.INDIRECT_BUFFER_VALID)), _f("vmid", 3, 24, 4),
      _f("cache_policy", 3, _at(M.INDIRECT_BUFFER_CACHE_POLICY), 2), _f("inherit_vmid", 3, _at(M.INDIRECT_BUFFER_PRE_RESUME)),
      _f("chain", 3, IB_CHAIN_SHIFT)]),
    M.PACKET3_EVENT_WRITE: ("EVENT_WRITE", [_f("event_type", 1, _at(M.EVENT_TYPE), 6), _f("event_index", 1, _at(M.EVENT_INDEX), 4)]),
    M.PACKET3_WRITE_DATA: ("WRITE_DATA", [
      _f("dst_sel", 1, _at(M.WRITE_DATA_DST_SEL), 4), _f("wr_one_addr", 1, _bit(M.WR_ONE_ADDR)),
      _f("wr_confirm", 1, _bit(M.WR_CONFIRM)), _f("cache_policy", 1, _at(M.WRITE_DATA_CACHE_POLICY), 2),
      _f("engine_sel", 1, _at(M.WRITE_DATA_ENGINE_SEL), 2), _f("dst_addr_lo", 2, 0, 32), _f("dst_addr_hi", 3, 0, 32)]),
  }


# bits the kernel headers do not name (Mesa's pkt3.json does; tests check them against it): IB_CONTROL's CHAIN; gfx11's
# RELEASE_MEM WAIT_SYNC, GLK_WB, GLK_INV, PWS_ENABLE; gfx9's TC_WC_ACTION_ENA (sid.h) and MEC cache_policy
# (kfd_pm4_headers_ai.h pm4_mec_release_mem)
IB_CHAIN_SHIFT = 20
_RELEASE_GFX11 = [_f("wait_sync", 1, 7), _f("glk_wb", 1, 24), _f("glk_inv", 1, 30), _f("pws_enable", 1, 31)]
_RELEASE_GFX9 = [_f("tc_wc_action_ena", 1, 20), _f("cache_policy", 1, 25, 2)]
_RELEASE_TAIL = [_f("addr_lo", 3, 0, 32), _f("addr_hi", 4, 0, 32), _f("data_lo", 5, 0, 32), _f("data_hi", 6, 0, 32),
                 _f("int_ctxid", 7, 0, 32)]
# (nvd.h, soc15d.h: COHER_SIZE_HI [7:0]; amdgpu writes 0xffffff there, whose bits above 7 the field does not hold)
_COHER = [_f("coher_size", 2, 0, 32), _f("coher_size_hi", 3, 0, 8), _f("coher_base", 4, 0, 32),
          _f("coher_base_hi", 5, 0, 24), _f("poll_interval", 6, 0, 16)]

# opcode -> (name, fixed fields); packets with a variable tail (register values, data) put it in Packet.data
LAYOUTS: dict[int, tuple[str, list[Field]]] = {
  **_common_layouts(P),
  P.PACKET3_ACQUIRE_MEM: ("ACQUIRE_MEM", [_f("coher_cntl", 1, 0, 32), *_COHER, _f("gcr_cntl", 7, 0, 32), *_GCR_ACQUIRE]),
  P.PACKET3_RELEASE_MEM: ("RELEASE_MEM", [
    _f("event_type", 1, _at(P.PACKET3_RELEASE_MEM_EVENT_TYPE), 6), _f("event_index", 1, _at(P.PACKET3_RELEASE_MEM_EVENT_INDEX), 4),
    *_GCR_RELEASE, *_RELEASE_GFX11, _f("cache_policy", 1, _at(P.PACKET3_RELEASE_MEM_CACHE_POLICY), 2),
    _f("execute", 1, _bit(P.PACKET3_RELEASE_MEM_EXECUTE), 2),  # two bits on gfx11 (Mesa pkt3.json)
    _f("dst_sel", 2, _at(P.PACKET3_RELEASE_MEM_DST_SEL), 2), _f("int_sel", 2, _at(P.PACKET3_RELEASE_MEM_INT_SEL), 3),
    _f("data_sel", 2, _at(P.PACKET3_RELEASE_MEM_DATA_SEL), 3), *_RELEASE_TAIL]),
}
# gfx9 (soc15d.h): CP_COHER_CNTL action bits, RELEASE_MEM's EOP_* cache actions; no GCR dword
_COHER_BITS = [_f(n[len("PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_"):-len("_ACTION_ENA")].lower(), 1, _at(getattr(P9, n)))
               for n in vars(P9) if n.startswith("PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_")]
_EOP_BITS = [_f(n[len("EOP_"):-len("_ACTION_EN")].lower(), 1, _bit(getattr(P9, n)))
             for n in vars(P9) if n.startswith("EOP_") and n.endswith("_ACTION_EN")]
LAYOUTS_GFX9: dict[int, tuple[str, list[Field]]] = {
  **_common_layouts(P9),
  P9.PACKET3_ACQUIRE_MEM: ("ACQUIRE_MEM", [_f("coher_cntl", 1, 0, 32), *_COHER_BITS, *_COHER]),
  P9.PACKET3_RELEASE_MEM: ("RELEASE_MEM", [
    _f("event_type", 1, _at(P9.EVENT_TYPE), 6), _f("event_index", 1, _at(P9.EVENT_INDEX), 4), *_EOP_BITS, *_RELEASE_GFX9,
    _f("execute", 1, _bit(P9.EOP_EXEC)), _f("dst_sel", 2, _at(P9.DST_SEL), 2), _f("int_sel", 2, _at(P9.INT_SEL), 3),
    _f("data_sel", 2, _at(P9.DATA_SEL), 3), *_RELEASE_TAIL]),
}
_VAR_TAIL = {P.PACKET3_SET_SH_REG: 2, P.PACKET3_SET_UCONFIG_REG: 2, P.PACKET3_WRITE_DATA: 4}  # first data dword


def _opcode_names(M, layouts) -> dict[int, str]:
  """Every opcode gets its header's name (first one listed for shared values); decoded ones their layout name."""
  names: dict[int, str] = {}
  for name, v in vars(M).items():
    if name.startswith("PACKET3_") and isinstance(v, int) and M.PACKET3_NOP <= v < 256 and not name.endswith(("_START", "_END")):
      names.setdefault(v, name[len("PACKET3_"):])
  names.update({op: name for op, (name, _) in layouts.items()})
  return names


OPCODE_NAMES = _opcode_names(P, LAYOUTS)
OPCODE_NAMES_GFX9 = _opcode_names(P9, LAYOUTS_GFX9)


@dataclass
class Packet:
  offset: int  # dword index of the header in the stream
  name: str  # packet name, "TYPE0", "TYPE2", "UNKNOWN_0xNN", or "TRUNCATED"
  words: list[int]  # every dword of the packet, header included
  opcode: int | None = None
  fields: dict[str, int] = field(default_factory=dict)
  data: list[int] = field(default_factory=list)  # variable tail: register values, WRITE_DATA payload
  error: str = ""


def decode_pm4(words: Iterable[int], gen: int = 11) -> list[Packet]:
  """Split a PM4 stream into packets with named fields (gen=9: the soc15 forms). Never raises: bad input becomes a
  TRUNCATED packet."""
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
      out.append(_decode3(i, pkt, gen))
    i += size
  return out


def _decode3(at: int, pkt: list[int], gen: int) -> Packet:
  op = P.CP_PACKET3_GET_OPCODE(pkt[0])
  layouts, names = (LAYOUTS_GFX9, OPCODE_NAMES_GFX9) if gen < 10 else (LAYOUTS, OPCODE_NAMES)
  name, layout = layouts.get(op, (names.get(op, f"UNKNOWN_0x{op:02x}"), []))
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


def format_pm4(stream: Iterable[int] | list[Packet], reg_name: Callable[[int], str | None] | None = None,
               gen: int = 11) -> str:
  """The stream (or already decoded packets) one packet per line, for hang reports and `rawgpu decode`."""
  items = list(stream)
  packets = items if items and isinstance(items[0], Packet) else decode_pm4(items, gen)
  return "\n".join(format_packet(p, reg_name) for p in packets)
