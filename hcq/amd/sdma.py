"""SDMA packets (SDMA 4.4 for CDNA3, 5.x, 6.x and 7.x rings): one emitter per packet (lists of uint32), and a decoder.

Every packet's dword layout comes from rawgpu.autogen.amd.sdma_v6 (the kernel's sdma_v6_0_0_pkt_open.h, which also
describes SDMA 7): the fields of dword <NAME> of packet <PKT> are SDMA_PKT_<PKT>_<NAME>_<field>_{offset,mask,shift}.
The packets used here have the same layout on SDMA 4 and 5 (vega10/navi10 headers) except that their count fields are
22 bits wide there, which the chunk sizes respect (SDMA 5.2 takes 30 bits, as Mesa's SDMA_V5_2_COPY_MAX_BYTES does,
where navi10's header still says 22). SDMA 4 (version < (5, 0)) packets are built and decoded from
rawgpu.autogen.amd.sdma_v4 (vega10_sdma_pkt_open.h), which has no cache-policy/cpv/mtype fields.
Values amdgpu and Mesa program (fence mtype, poll retry) are noted.
"""
from __future__ import annotations

import functools, re
import dataclasses
from dataclasses import dataclass, field
from typing import Iterable

from rawgpu.autogen.amd import sdma_v4 as S4
from rawgpu.autogen.amd import sdma_v6 as S
from rawgpu.hcq.amd.pm4 import WaitFunction

MASK32 = 0xffffffff
Version = tuple[int, int]


# POLL_REGMEM compares (value & mask) with the reference by the same function codes as PM4's WAIT_REG_MEM
# (sdma_v6_0_0_pkt_open.h FUNC; nvd.h / soc15d.h WAIT_REG_MEM_FUNCTION)
PollFunction = WaitFunction


MTYPE_UC = 3  # fences are written uncached (amdgpu's sdma_v*_ring_emit_fence)
RETRY_FOREVER = 0xfff  # POLL_REGMEM retry_count that never gives up
FILL_DWORDS = 2  # CONSTANT_FILL fillsize: the 32-bit pattern repeats (Mesa's radv_sdma_fill_buffer)


def copy_max_bytes(version: Version) -> int:
  """Largest COPY_LINEAR per packet: 30-bit count from SDMA 5.2, 22-bit before (minus the last 255 bytes, see Mesa).
  SDMA 4: the whole 22-bit count (bytes-1), 4 MiB, as sdma_v4_4_2's copy_max_bytes."""
  if version < (5, 0): return S4.SDMA_PKT_COPY_LINEAR_COUNT_count_mask + 1
  return 0x3fffff00 if version >= (5, 2) else 0x3fff00


def fill_max_bytes(version: Version) -> int:
  if version < (5, 0): return (S4.SDMA_PKT_CONSTANT_FILL_COUNT_count_mask + 1) & ~3  # sdma_v4_4_2 fill_max_bytes
  return ((1 << 30) - 1 if version >= (6, 0) else (1 << 22) - 1) & ~3


# ---- packet layouts, read from the generated module

@dataclass(frozen=True)
class Field:
  name: str
  dword: int
  shift: int
  mask: int  # unshifted

  def get(self, words: list[int]) -> int: return (words[self.dword] >> self.shift) & self.mask


def _fields(M, pkt: str, dw: str) -> list[Field]:
  return _field_index(M).get(f"{pkt}_{dw}", [])


@functools.cache
def _field_index(M) -> dict[str, list[Field]]:
  """"<PACKET>_<DWORD>" -> its fields, from one pass over the header's names (SDMA_PKT_<PACKET>_<DWORD>_<field>_offset:
  packet and dword names are upper case, fields lower case). Matching each packet's names against all of them took
  a quarter of a second at the first copy queue."""
  out: dict[str, list[Field]] = {}
  for name in vars(M):
    if (m := re.fullmatch(r"SDMA_PKT_([A-Z0-9_]+)_([a-z][a-z0-9_]*)_offset", name)) is not None:
      base = name[:-len("_offset")]
      out.setdefault(m[1], []).append(Field(m[2], getattr(M, name), getattr(M, base + "_shift"), getattr(M, base + "_mask")))
  return out


@dataclass(frozen=True)
class Layout:
  name: str  # the header's packet name (SDMA_PKT_<name>_*)
  op: int
  sub_op: int
  dwords: tuple[str, ...]  # dword names in order; a trailing data/count tail is described by `tail`
  tail: str = ""  # "write": DW_3 count+1 data dwords follow; "nop": count dwords follow; "cpv": one more if cpv is set
  fields: tuple[Field, ...] = ()
  header: str = ""  # the header's packet name where this layout is another form of it (USER_GCR is a GCR_REQ)

  @property
  def pkt(self) -> str: return self.header or self.name


def _layout(M, name: str, op: int, sub_op: int, dwords: tuple[str, ...], tail: str = "") -> Layout:
  fs = tuple(f for dw in dwords for f in _fields(M, name, dw))
  return Layout(name, op, sub_op, dwords, tail, fs)


def _layouts(M) -> list[Layout]:
  """The packets used here, from generated header M (sdma_v6 for SDMA 5-7, sdma_v4 for SDMA 4)."""
  return [
    _layout(M, "COPY_LINEAR", M.SDMA_OP_COPY, M.SDMA_SUBOP_COPY_LINEAR,
            ("HEADER", "COUNT", "PARAMETER", "SRC_ADDR_LO", "SRC_ADDR_HI", "DST_ADDR_LO", "DST_ADDR_HI"), "cpv"),
    _layout(M, "CONSTANT_FILL", M.SDMA_OP_CONST_FILL, 0, ("HEADER", "DST_ADDR_LO", "DST_ADDR_HI", "DATA", "COUNT")),
    _layout(M, "FENCE", M.SDMA_OP_FENCE, 0, ("HEADER", "ADDR_LO", "ADDR_HI", "DATA")),
    _layout(M, "POLL_REGMEM", M.SDMA_OP_POLL_REGMEM, 0, ("HEADER", "ADDR_LO", "ADDR_HI", "VALUE", "MASK", "DW5")),
    _layout(M, "TIMESTAMP_SET", M.SDMA_OP_TIMESTAMP, M.SDMA_SUBOP_TIMESTAMP_SET, ("HEADER", "INIT_DATA_LO", "INIT_DATA_HI")),
    _layout(M, "TIMESTAMP_GET", M.SDMA_OP_TIMESTAMP, M.SDMA_SUBOP_TIMESTAMP_GET, ("HEADER", "WRITE_ADDR_LO", "WRITE_ADDR_HI")),
    _layout(M, "TIMESTAMP_GET_GLOBAL", M.SDMA_OP_TIMESTAMP, M.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL,
            ("HEADER", "WRITE_ADDR_LO", "WRITE_ADDR_HI")),
    _layout(M, "WRITE_UNTILED", M.SDMA_OP_WRITE, M.SDMA_SUBOP_WRITE_LINEAR, ("HEADER", "DST_ADDR_LO", "DST_ADDR_HI", "DW_3"),
            "write"),
    _layout(M, "TRAP", M.SDMA_OP_TRAP, 0, ("HEADER", "INT_CONTEXT")),
    _layout(M, "NOP", M.SDMA_OP_NOP, 0, ("HEADER",), "nop"),
    # not emitted here, but amdgpu puts them on its rings (*_ring_emit_ib, _emit_wreg, the GPU TLB flush) and the
    # engine runs them: a hang report or `rawgpu decode` reads on past them
    _layout(M, "INDIRECT", M.SDMA_OP_INDIRECT, 0, ("HEADER", "BASE_LO", "BASE_HI", "IB_SIZE", "CSA_ADDR_LO", "CSA_ADDR_HI")),
    _layout(M, "SRBM_WRITE", M.SDMA_OP_SRBM_WRITE, 0, ("HEADER", "ADDR", "DATA")),
  ] + ([] if not hasattr(M, "SDMA_OP_GCR_REQ") else _gcr_layouts(M)) + (   # SDMA 4 has no GCR packet,
    [] if not hasattr(M, "SDMA_SUBOP_VM_INVALIDATION") else       # nor VM_INVALIDATION (a POLL_REGMEM sub-op)
    [_layout(M, "VM_INVALIDATION", M.SDMA_OP_POLL_REGMEM, M.SDMA_SUBOP_VM_INVALIDATION, ("HEADER", "INVALIDATEREQ", "ADDRESSRANGELO", "ADDRESSRANGEHI"))])


def _broadcast(M) -> Layout:
  """COPY_LINEAR with its header's broadcast bit: a second destination follows the first (9 dwords)."""
  return _layout(M, "COPY_BROADCAST_LINEAR", M.SDMA_OP_COPY, M.SDMA_SUBOP_COPY_LINEAR,
                 ("HEADER", "COUNT", "PARAMETER", "SRC_ADDR_LO", "SRC_ADDR_HI", "DST1_ADDR_LO", "DST1_ADDR_HI", "DST2_ADDR_LO", "DST2_ADDR_HI"))


GCR_DWORDS = ("HEADER", "PAYLOAD1", "PAYLOAD2", "PAYLOAD3", "PAYLOAD4")
SUBOP_USER_GCR = 1   # the user-queue form of GCR_REQ (ROCr's SDMA_SUBOP_USER_GCR; the kernel headers name only sub_op 0)


def _gcr_layouts(M) -> list[Layout]:
  gcr = _layout(M, "GCR_REQ", M.SDMA_OP_GCR_REQ, 0, GCR_DWORDS)
  return [gcr, dataclasses.replace(gcr, name="USER_GCR", sub_op=SUBOP_USER_GCR, header="GCR_REQ")]


LAYOUTS = _layouts(S)
LAYOUTS_V4 = _layouts(S4)
BROADCAST, BROADCAST_V4 = _broadcast(S), _broadcast(S4)   # (same op and sub-op as COPY_LINEAR: chosen by the header bit)
BROADCAST_BIT = 1 << S.SDMA_PKT_COPY_BROADCAST_LINEAR_HEADER_broadcast_shift
BY_NAME = {lay.name: lay for lay in LAYOUTS}
BY_OP = {(lay.op, lay.sub_op): lay for lay in LAYOUTS}
BY_NAME_V4 = {lay.name: lay for lay in LAYOUTS_V4}
BY_OP_V4 = {(lay.op, lay.sub_op): lay for lay in LAYOUTS_V4}
V6 = (6, 0)


def _pack(name: str, version: Version = V6, **values: int) -> list[int]:
  """The fixed dwords of packet `name` with its op/sub_op and the given fields (by their header names)."""
  lay = (BY_NAME_V4 if version < (5, 0) else BY_NAME)[name]
  words = [0] * len(lay.dwords)
  values = {"op": lay.op, "sub_op": lay.sub_op, **values}
  known = {f.name: f for f in lay.fields}
  for k, v in values.items():
    f = known.get(k)
    if f is None: raise ValueError(f"SDMA {name} has no field {k!r}; fields: {', '.join(known)}")
    if v < 0 or v > f.mask: raise ValueError(f"SDMA {name}.{k} = {v:#x} does not fit its {f.mask.bit_length()} bits")
    words[f.dword] |= v << f.shift
  return words


# ---- emitters

def copy_linear(dst: int, src: int, nbytes: int, version: Version = (6, 0), tmz: bool = False) -> list[int]:
  """Copy nbytes from src to dst, as as many COPY_LINEAR packets as the engine's count field needs."""
  if nbytes <= 0: raise ValueError(f"copy of {nbytes} bytes")
  out, step = [], copy_max_bytes(version)
  for off in range(0, nbytes, step):
    n = min(step, nbytes - off)
    s, d = src + off, dst + off
    # SDMA 7 as sdma_v7_0_emit_copy_buffer: cpv set and the compression-parameter dword after the packet (0: none);
    # with cpv set the engine reads that dword, without it the packet has none (SDMA 4's header has no cpv bit)
    cpv = {"cpv": int(version >= (7, 0))} if version >= (5, 0) else {}
    out += _pack("COPY_LINEAR", version, tmz=int(tmz), count=n - 1, **cpv,  # count is bytes-1 (SDMA 4+)
                 src_addr_31_0=s & MASK32, src_addr_63_32=s >> 32, dst_addr_31_0=d & MASK32, dst_addr_63_32=d >> 32)
    if cpv.get("cpv"): out.append(0)
  return out


def const_fill(dst: int, value: int, nbytes: int, version: Version = (6, 0)) -> list[int]:
  """Fill nbytes (a multiple of 4) at dst with the 32-bit value."""
  if nbytes <= 0 or nbytes % 4 or dst % 4: raise ValueError(f"fill of {nbytes} bytes at {dst:#x}: needs dword size and address")
  out, step = [], fill_max_bytes(version)
  for off in range(0, nbytes, step):
    n, d = min(step, nbytes - off), dst + off
    out += _pack("CONSTANT_FILL", version, fillsize=FILL_DWORDS, dst_addr_31_0=d & MASK32, dst_addr_63_32=d >> 32,
                 src_data_31_0=value & MASK32, count=n - 1)  # bytes-1, even when filling dwords
  return out


def fence(addr: int, value: int, mtype: int | None = None, version: Version = V6) -> list[int]:
  """Write the 32-bit value to addr once everything before has completed (SDMA 4 has no mtype field: sdma_v4_4_2
  writes a bare FENCE header; later engines get MTYPE_UC by default)."""
  if addr % 4: raise ValueError(f"SDMA fence address {addr:#x} is not dword aligned")
  if version < (5, 0):
    if mtype: raise ValueError("SDMA 4 FENCE has no mtype field")
    return _pack("FENCE", version, addr_31_0=addr & MASK32, addr_63_32=addr >> 32, data=value & MASK32)
  return _pack("FENCE", mtype=MTYPE_UC if mtype is None else mtype, addr_31_0=addr & MASK32, addr_63_32=addr >> 32, data=value & MASK32)


def poll_regmem(addr: int, ref: int, mask: int = MASK32, function: PollFunction = PollFunction.EQUAL, memory: bool = True,
                interval: int = 4, retry_count: int = RETRY_FOREVER, hdp_flush: bool = False, version: Version = V6) -> list[int]:
  """Stall until (memory at addr, or register addr) & mask compares with ref; hdp_flush=True is the HDP flush form."""
  if memory and addr % 4: raise ValueError(f"POLL_REGMEM address {addr:#x} is not dword aligned")
  return _pack("POLL_REGMEM", version, hdp_flush=int(hdp_flush), func=int(function), mem_poll=int(memory), addr_31_0=addr & MASK32,
               addr_63_32=addr >> 32, value=ref & MASK32, mask=mask & MASK32, interval=interval, retry_count=retry_count)


# GCR_CONTROL of a whole-cache invalidate before SDMA reads what the CPU or another engine wrote: amdgpu's
# sdma_v6_0/v7_0_ring_emit_mem_sync (GL2 written back and invalidated, GLM, GL1, GLV, GLK and GLI invalidated) for a
# kernel ring, ROCr's user-queue invalidate (GL2 write back + invalidate, GL1, GLV, GLK invalidate, GLK write back)
GCR_KERNEL_INV = (S.SDMA_GCR_GL2_INV | S.SDMA_GCR_GL2_WB | S.SDMA_GCR_GLM_INV | S.SDMA_GCR_GL1_INV | S.SDMA_GCR_GLV_INV
                  | S.SDMA_GCR_GLK_INV | S.SDMA_GCR_GLI_INV(1))
GCR_USER_INV = S.SDMA_GCR_GL2_WB | S.SDMA_GCR_GL2_INV | S.SDMA_GCR_GL1_INV | S.SDMA_GCR_GLV_INV | S.SDMA_GCR_GLK_INV | S.SDMA_GCR_GLK_WB


def gcr(gcr_control: int, user: bool = False, version: Version = V6) -> list[int]:
  """Invalidate / write back the GPU caches SDMA 5+ goes through (GL2 above all: SDMA 6/7 reads look it up), over the
  whole address range. user: the user-queue form (a KFD queue), else the kernel ring's."""
  if version < (5, 0): raise ValueError("SDMA 4 has no GCR packet (it does not go through the XCD's L2)")
  return _pack("USER_GCR" if user else "GCR_REQ", version, gcr_control_15_0=gcr_control & 0xffff, gcr_control_18_16=gcr_control >> 16)


def hdp_flush(req_reg: int, done_reg: int, ref_and_mask: int, version: Version = V6) -> list[int]:
  """Flush the host data path: the HDP form of POLL_REGMEM writes ref_and_mask to the request register (the address's
  high dword) and polls the done register (the low dword) for it (sdma_v4/v6/v7 ring_emit_hdp_flush: interval 10)."""
  return poll_regmem((req_reg << 2) << 32 | done_reg << 2, ref_and_mask, ref_and_mask, PollFunction.EQUAL, memory=False,
                     interval=10, hdp_flush=True, version=version)


def timestamp(addr: int, global_clock: bool = True, version: Version = V6) -> list[int]:
  """Write the engine's 64-bit timestamp (the global GPU clock by default) to addr (8-byte aligned)."""
  if addr % 8: raise ValueError(f"SDMA timestamp address {addr:#x} is not 8-byte aligned")
  name = "TIMESTAMP_GET_GLOBAL" if global_clock else "TIMESTAMP_GET"
  return _pack(name, version, write_addr_31_3=(addr & MASK32) >> 3, write_addr_63_32=addr >> 32)


def timestamp_set(value: int, version: Version = V6) -> list[int]:
  return _pack("TIMESTAMP_SET", version, init_data_31_0=value & MASK32, init_data_63_32=(value >> 32) & MASK32)


def write_linear(addr: int, *values: int, version: Version = V6) -> list[int]:
  """Write the dwords values to linear memory at addr."""
  if not values: raise ValueError("SDMA WRITE needs at least one dword")
  if addr % 4: raise ValueError(f"SDMA write address {addr:#x} is not dword aligned")
  head = _pack("WRITE_UNTILED", version, dst_addr_31_0=addr & MASK32, dst_addr_63_32=addr >> 32, count=len(values) - 1)
  return head + [v & MASK32 for v in values]


def trap(int_context: int = 0, version: Version = V6) -> list[int]:
  """Raise an SDMA trap interrupt carrying int_context."""
  return _pack("TRAP", version, int_context=int_context)


def nop(dwords: int = 1, version: Version = V6) -> list[int]:
  """Padding of exactly `dwords` dwords: one NOP whose count skips the zeros after it (burst NOP)."""
  if dwords < 1: raise ValueError("a NOP is at least one dword")
  return _pack("NOP", version, count=dwords - 1) + [0] * (dwords - 1)


# ---- decoder

@dataclass
class Packet:
  offset: int
  name: str  # layout name, "UNKNOWN" or "TRUNCATED"
  words: list[int]
  fields: dict[str, int] = field(default_factory=dict)
  data: list[int] = field(default_factory=list)
  error: str = ""


def _length(lay: Layout, words: list[int], i: int, version: Version) -> int | None:
  """Dwords in the packet at words[i], or None when its fixed part is already cut off."""
  n = len(lay.dwords)
  if i + n > len(words): return None
  count = next((f for f in lay.fields if f.name == "count"), None)
  if lay.tail == "nop": return 1 + count.get(words[i:i + 1])
  if lay.tail == "write": return n + count.get(words[i:i + n]) + 1
  if lay.tail == "cpv":   # SDMA 7: + the compression-parameter dword its header's cpv announces; on 5.2-6.x cpv is
    # the cache-policy-valid bit of a 7-dword packet (Mesa's ac_sdma_5_2_uses_cpv), and SDMA 4 has no such bit
    if version < (7, 0): return n
    return n + next((f.get(words[i:i + 1]) for f in lay.fields if f.name == "cpv"), 0)
  return n


def decode_sdma(words: Iterable[int], version: Version = V6) -> list[Packet]:
  """Split an SDMA stream into packets (version < (5, 0): SDMA 4 layouts). Never raises: an unknown opcode ends
  decoding (SDMA packets carry no length)."""
  by_op = BY_OP_V4 if version < (5, 0) else BY_OP
  w = [int(x) & MASK32 for x in words]
  out, i = [], 0
  while i < len(w):
    op, sub_op = w[i] & 0xff, (w[i] >> 8) & 0xff
    lay = by_op.get((op, sub_op))
    if lay is not None and lay.name == "COPY_LINEAR" and w[i] & BROADCAST_BIT: lay = BROADCAST_V4 if version < (5, 0) else BROADCAST
    if lay is None:
      out.append(Packet(i, "UNKNOWN", w[i:], error=f"unknown op {op} sub_op {sub_op}; the rest is not decoded"))
      break
    n = _length(lay, w, i, version)
    if n is None or i + n > len(w):
      out.append(Packet(i, "TRUNCATED", w[i:], error=f"{lay.name} needs {n or len(lay.dwords)} dwords, {len(w) - i} left"))
      break
    pkt = w[i:i + n]
    p = Packet(i, lay.name, pkt, {f.name: f.get(pkt) for f in lay.fields})
    if lay.name == "SRBM_WRITE" and version >= (7, 0):   # SDMA 7's REGISTER_WRITE: a byte address, the whole dword
      p = Packet(i, "REGISTER_WRITE", pkt, {"addr": pkt[1], "data": pkt[2]})
    if lay.tail: p.data = pkt[len(lay.dwords):]
    for lo, hi, full in (("src_addr_31_0", "src_addr_63_32", "src_addr"), ("dst_addr_31_0", "dst_addr_63_32", "dst_addr"),
                         ("dst1_addr_31_0", "dst1_addr_63_32", "dst1_addr"), ("dst2_addr_31_0", "dst2_addr_63_32", "dst2_addr"),
                         ("ib_base_31_0", "ib_base_63_32", "ib_base"), ("csa_addr_31_0", "csa_addr_63_32", "csa_addr"),
                         ("addr_31_0", "addr_63_32", "addr"), ("init_data_31_0", "init_data_63_32", "init_data")):
      if lo in p.fields: p.fields[full] = p.fields[lo] | p.fields[hi] << 32
    if "write_addr_31_3" in p.fields: p.fields["write_addr"] = p.fields["write_addr_31_3"] << 3 | p.fields["write_addr_63_32"] << 32
    out.append(p)
    i += n
  return out


_HIDDEN = re.compile(r".*_(31_0|63_32|31_3)$|^op$|^sub_op$")


def format_packet(p: Packet) -> str:
  parts = [f"{p.offset:05x}", p.name]
  for k, v in p.fields.items():
    if _HIDDEN.match(k) or (v == 0 and k not in ("count",)): continue
    text = f"{k}={v:#x}"
    if p.name == "POLL_REGMEM" and k == "func" and v in PollFunction._value2member_map_: text += f"({PollFunction(v).name})"
    if k == "count" and p.name in ("COPY_LINEAR", "COPY_BROADCAST_LINEAR", "CONSTANT_FILL"): text += f"({v + 1} bytes)"
    parts.append(text)
  if p.data and p.name != "NOP": parts.append("data=[" + " ".join(f"{d:#x}" for d in p.data[:16]) + (" ...]" if len(p.data) > 16 else "]"))
  if p.error: parts.append(f"!! {p.error}")
  return " ".join(parts)


def format_sdma(stream: Iterable[int] | list[Packet], version: Version = V6) -> str:
  """The stream (or decoded packets) one packet per line, for hang reports and `rawgpu decode`."""
  items = list(stream)
  packets = items if items and isinstance(items[0], Packet) else decode_sdma(items, version)
  return "\n".join(format_packet(p) for p in packets)
