"""SDMA emitters word by word against the generated sdma_v6 macros, Mesa's sid.h, and decoder round trips."""
import functools
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from test_hcq_amd_common import check_round_trip

from rawgpu.autogen.amd import sdma_v6 as S
from rawgpu.hcq.amd import sdma
from rawgpu.hcq.amd.sdma import PollFunction

u32 = st.integers(0, 0xffffffff)
addr4 = st.integers(0, (1 << 62) - 1).map(lambda a: a & ~3)
addr8 = addr4.map(lambda a: a & ~7)
versions = st.sampled_from([(5, 0), (5, 2), (6, 0), (7, 0)])
FAST = settings(max_examples=60, deadline=None)


def lo(a): return a & 0xffffffff
def hi(a): return a >> 32


def test_layouts_follow_the_generated_offsets():
  for lay in sdma.LAYOUTS:
    assert lay.fields, lay.name
    for f in lay.fields:
      dw = next(d for d in lay.dwords if hasattr(S, f"SDMA_PKT_{lay.pkt}_{d}_{f.name}_offset"))
      assert f.dword == lay.dwords.index(dw), (lay.name, f.name)


@FAST
@given(addr4, addr4, st.integers(1, 1 << 16), st.booleans(), versions)
def test_copy_linear(dst, src, n, tmz, version):
  want = [S.SDMA_PKT_COPY_LINEAR_HEADER_OP(S.SDMA_OP_COPY) | S.SDMA_PKT_COPY_LINEAR_HEADER_SUB_OP(S.SDMA_SUBOP_COPY_LINEAR)
          | S.SDMA_PKT_COPY_LINEAR_HEADER_TMZ(int(tmz)) | S.SDMA_PKT_COPY_LINEAR_HEADER_CPV(int(version >= (7, 0))),
          S.SDMA_PKT_COPY_LINEAR_COUNT_COUNT(n - 1), 0,
          S.SDMA_PKT_COPY_LINEAR_SRC_ADDR_LO_SRC_ADDR_31_0(lo(src)), S.SDMA_PKT_COPY_LINEAR_SRC_ADDR_HI_SRC_ADDR_63_32(hi(src)),
          S.SDMA_PKT_COPY_LINEAR_DST_ADDR_LO_DST_ADDR_31_0(lo(dst)), S.SDMA_PKT_COPY_LINEAR_DST_ADDR_HI_DST_ADDR_63_32(hi(dst))]
  want += [0] * (version >= (7, 0))   # sdma_v7_0_emit_copy_buffer: with cpv, the compression-parameter dword (none)
  assert sdma.copy_linear(dst, src, n, version, tmz=tmz) == want
  assert [p.name for p in sdma.decode_sdma(want + sdma.fence(0x1000, 1, version=version), version)] == ["COPY_LINEAR", "FENCE"]


@pytest.mark.parametrize("version", [(5, 0), (6, 0)])
def test_copy_linear_chunks_at_the_engine_maximum(version):
  step = sdma.copy_max_bytes(version)
  n = 2 * step + 12
  words = sdma.copy_linear(0x10000, 0x900000000, n, version)
  pkts = sdma.decode_sdma(words)
  assert [p.fields["count"] + 1 for p in pkts] == [step, step, 12]
  assert [p.fields["src_addr"] for p in pkts] == [0x900000000, 0x900000000 + step, 0x900000000 + 2 * step]
  assert [p.fields["dst_addr"] for p in pkts] == [0x10000, 0x10000 + step, 0x10000 + 2 * step]
  mask = (1 << 22) - 1 if version < (5, 2) else S.SDMA_PKT_COPY_LINEAR_COUNT_count_mask  # navi10's count is 22 bits
  assert all(p.fields["count"] <= mask for p in pkts)


@FAST
@given(addr4, u32, st.integers(1, 1 << 14).map(lambda n: n * 4))
def test_const_fill(dst, value, n):
  assert sdma.const_fill(dst, value, n) == [
    S.SDMA_PKT_CONSTANT_FILL_HEADER_OP(S.SDMA_OP_CONST_FILL) | S.SDMA_PKT_CONSTANT_FILL_HEADER_FILLSIZE(2),
    S.SDMA_PKT_CONSTANT_FILL_DST_ADDR_LO_DST_ADDR_31_0(lo(dst)), S.SDMA_PKT_CONSTANT_FILL_DST_ADDR_HI_DST_ADDR_63_32(hi(dst)),
    S.SDMA_PKT_CONSTANT_FILL_DATA_SRC_DATA_31_0(value), S.SDMA_PKT_CONSTANT_FILL_COUNT_COUNT(n - 1)]
  with pytest.raises(ValueError): sdma.const_fill(dst, value, n + 1)


@FAST
@given(addr4, u32)
def test_fence_as_amdgpu_emits_it(addr, value):
  assert sdma.fence(addr, value) == [S.SDMA_PKT_FENCE_HEADER_OP(S.SDMA_OP_FENCE) | S.SDMA_PKT_FENCE_HEADER_MTYPE(3),
                                     S.SDMA_PKT_FENCE_ADDR_LO_ADDR_31_0(lo(addr)), S.SDMA_PKT_FENCE_ADDR_HI_ADDR_63_32(hi(addr)),
                                     S.SDMA_PKT_FENCE_DATA_DATA(value)]


@FAST
@given(addr4, u32, u32, st.sampled_from(list(PollFunction)), st.booleans(), st.integers(0, 0xffff), st.integers(0, 0xfff))
def test_poll_regmem(addr, ref, mask, func, hdp, interval, retry):
  got = sdma.poll_regmem(addr, ref, mask, func, interval=interval, retry_count=retry, hdp_flush=hdp)
  assert got == [S.SDMA_PKT_POLL_REGMEM_HEADER_OP(S.SDMA_OP_POLL_REGMEM) | S.SDMA_PKT_POLL_REGMEM_HEADER_HDP_FLUSH(int(hdp))
                 | S.SDMA_PKT_POLL_REGMEM_HEADER_FUNC(func) | S.SDMA_PKT_POLL_REGMEM_HEADER_MEM_POLL(1),
                 S.SDMA_PKT_POLL_REGMEM_ADDR_LO_ADDR_31_0(lo(addr)), S.SDMA_PKT_POLL_REGMEM_ADDR_HI_ADDR_63_32(hi(addr)),
                 S.SDMA_PKT_POLL_REGMEM_VALUE_VALUE(ref), S.SDMA_PKT_POLL_REGMEM_MASK_MASK(mask),
                 S.SDMA_PKT_POLL_REGMEM_DW5_INTERVAL(interval) | S.SDMA_PKT_POLL_REGMEM_DW5_RETRY_COUNT(retry)]


@FAST
@given(st.integers(0, 0x3fffffff), st.integers(0, 0x3fffffff), u32)
def test_hdp_flush_as_amdgpu_emits_it(req, done, bit):
  """sdma ring_emit_hdp_flush: the HDP form, function equal, no memory poll, the done register in the low address
  dword and the request register in the high one (both as byte offsets), ref = mask = the engine's bit, interval 10."""
  assert sdma.hdp_flush(req, done, bit) == [
    S.SDMA_PKT_POLL_REGMEM_HEADER_OP(S.SDMA_OP_POLL_REGMEM) | S.SDMA_PKT_POLL_REGMEM_HEADER_HDP_FLUSH(1)
    | S.SDMA_PKT_POLL_REGMEM_HEADER_FUNC(3) | S.SDMA_PKT_POLL_REGMEM_HEADER_MEM_POLL(0),
    done << 2, req << 2, bit, bit, S.SDMA_PKT_POLL_REGMEM_DW5_INTERVAL(10) | S.SDMA_PKT_POLL_REGMEM_DW5_RETRY_COUNT(0xfff)]


@FAST
@given(addr8)
def test_timestamps(addr):
  assert sdma.timestamp(addr) == [
    S.SDMA_PKT_TIMESTAMP_GET_GLOBAL_HEADER_OP(S.SDMA_OP_TIMESTAMP)
    | S.SDMA_PKT_TIMESTAMP_GET_GLOBAL_HEADER_SUB_OP(S.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL),
    S.SDMA_PKT_TIMESTAMP_GET_GLOBAL_WRITE_ADDR_LO_WRITE_ADDR_31_3(lo(addr) >> 3),
    S.SDMA_PKT_TIMESTAMP_GET_GLOBAL_WRITE_ADDR_HI_WRITE_ADDR_63_32(hi(addr))]
  assert sdma.timestamp(addr, global_clock=False)[0] == (S.SDMA_PKT_TIMESTAMP_GET_HEADER_OP(S.SDMA_OP_TIMESTAMP)
                                                         | S.SDMA_PKT_TIMESTAMP_GET_HEADER_SUB_OP(S.SDMA_SUBOP_TIMESTAMP_GET))
  assert sdma.timestamp(addr)[1] == lo(addr)  # the 31_3 field keeps the address in place
  with pytest.raises(ValueError): sdma.timestamp(addr + 4)


@FAST
@given(addr4, st.lists(u32, min_size=1, max_size=6))
def test_write_linear(addr, values):
  assert sdma.write_linear(addr, *values) == [
    S.SDMA_PKT_WRITE_UNTILED_HEADER_OP(S.SDMA_OP_WRITE) | S.SDMA_PKT_WRITE_UNTILED_HEADER_SUB_OP(S.SDMA_SUBOP_WRITE_LINEAR),
    S.SDMA_PKT_WRITE_UNTILED_DST_ADDR_LO_DST_ADDR_31_0(lo(addr)), S.SDMA_PKT_WRITE_UNTILED_DST_ADDR_HI_DST_ADDR_63_32(hi(addr)),
    S.SDMA_PKT_WRITE_UNTILED_DW_3_COUNT(len(values) - 1), *values]


def test_trap_and_nop():
  assert sdma.trap(5) == [S.SDMA_PKT_TRAP_HEADER_OP(S.SDMA_OP_TRAP), S.SDMA_PKT_TRAP_INT_CONTEXT_INT_CONTEXT(5)]
  assert sdma.nop(1) == [S.SDMA_PKT_NOP_HEADER_OP(S.SDMA_OP_NOP)]
  assert sdma.nop(3) == [S.SDMA_PKT_NOP_HEADER_OP(S.SDMA_OP_NOP) | S.SDMA_PKT_NOP_HEADER_COUNT(2), 0, 0]
  with pytest.raises(ValueError, match="does not fit"): sdma.trap(1 << 28)


def emitted(draw, em=sdma):
  kind = draw(st.sampled_from(["copy", "fill", "fence", "poll", "hdp", "ts", "write", "trap", "nop", "gcr"]))
  if kind == "gcr":
    c, user = draw(st.integers(0, (1 << 19) - 1)), draw(st.booleans())
    return em.gcr(c, user=user), "USER_GCR" if user else "GCR_REQ", dict(gcr_control_15_0=c & 0xffff, gcr_control_18_16=c >> 16)
  if kind == "hdp":
    req, done, bit = draw(st.integers(0, 0x3fffffff)), draw(st.integers(0, 0x3fffffff)), 1 << draw(st.integers(0, 13))
    return em.hdp_flush(req, done, bit), "POLL_REGMEM", dict(addr=(req << 2) << 32 | done << 2, value=bit, mask=bit, func=3, mem_poll=0, hdp_flush=1)
  if kind == "copy":
    d, s, n = draw(addr4), draw(addr4), draw(st.integers(1, 1 << 20))
    return em.copy_linear(d, s, n), "COPY_LINEAR", dict(dst_addr=d, src_addr=s, count=n - 1)
  if kind == "fill":
    d, v, n = draw(addr4), draw(u32), 4 * draw(st.integers(1, 1 << 18))
    return em.const_fill(d, v, n), "CONSTANT_FILL", dict(dst_addr=d, src_data_31_0=v, count=n - 1, fillsize=2)
  if kind == "fence":
    a, v = draw(addr4), draw(u32)
    return em.fence(a, v), "FENCE", dict(addr=a, data=v, mtype=3)
  if kind == "poll":
    a, r, m, f = draw(addr4), draw(u32), draw(u32), draw(st.sampled_from(list(PollFunction)))
    return em.poll_regmem(a, r, m, f), "POLL_REGMEM", dict(addr=a, value=r, mask=m, func=f, mem_poll=1)
  if kind == "ts":
    a = draw(addr8)
    return em.timestamp(a), "TIMESTAMP_GET_GLOBAL", dict(write_addr=a)
  if kind == "write":
    a, vals = draw(addr4), draw(st.lists(u32, min_size=1, max_size=5))
    return em.write_linear(a, *vals), "WRITE_UNTILED", dict(dst_addr=a, _data=vals)
  if kind == "trap":
    c = draw(st.integers(0, (1 << 28) - 1))
    return em.trap(c), "TRAP", dict(int_context=c)
  n = draw(st.integers(1, 5))
  return em.nop(n), "NOP", dict(count=n - 1)


def emitted_v4(draw):
  kind = draw(st.sampled_from(["copy", "fill", "fence", "poll", "hdp", "ts", "write", "trap", "nop"]))
  if kind == "hdp":
    req, done, bit = draw(st.integers(0, 0x3fffffff)), draw(st.integers(0, 0x3fffffff)), 1 << draw(st.integers(0, 13))
    return sdma.hdp_flush(req, done, bit, (4, 4)), "POLL_REGMEM", dict(addr=(req << 2) << 32 | done << 2, value=bit, mask=bit, func=3, mem_poll=0, hdp_flush=1)
  if kind == "copy":
    d, s, n = draw(addr4), draw(addr4), draw(st.integers(1, 1 << 20))
    return sdma.copy_linear(d, s, n, (4, 4)), "COPY_LINEAR", dict(dst_addr=d, src_addr=s, count=n - 1)
  if kind == "fill":
    d, v, n = draw(addr4), draw(u32), 4 * draw(st.integers(1, 1 << 18))
    return sdma.const_fill(d, v, n, (4, 4)), "CONSTANT_FILL", dict(dst_addr=d, src_data_31_0=v, count=n - 1, fillsize=2)
  if kind == "fence":
    a, v = draw(addr4), draw(u32)
    return sdma.fence(a, v, version=(4, 4)), "FENCE", dict(addr=a, data=v)
  if kind == "poll":
    a, r, m, f = draw(addr4), draw(u32), draw(u32), draw(st.sampled_from(list(PollFunction)))
    return sdma.poll_regmem(a, r, m, f, version=(4, 4)), "POLL_REGMEM", dict(addr=a, value=r, mask=m, func=f, mem_poll=1)
  if kind == "ts":
    a = draw(addr8)
    return sdma.timestamp(a, version=(4, 4)), "TIMESTAMP_GET_GLOBAL", dict(write_addr=a)
  if kind == "write":
    a, vals = draw(addr4), draw(st.lists(u32, min_size=1, max_size=5))
    return sdma.write_linear(a, *vals, version=(4, 4)), "WRITE_UNTILED", dict(dst_addr=a, _data=vals)
  if kind == "trap":
    c = draw(st.integers(0, (1 << 28) - 1))
    return sdma.trap(c, version=(4, 4)), "TRAP", dict(int_context=c)
  n = draw(st.integers(1, 5))
  return sdma.nop(n, version=(4, 4)), "NOP", dict(count=n - 1)


def _at(module, names, **kw):
  """The module's emitters with one keyword fixed (here the SDMA version)."""
  from types import SimpleNamespace
  return SimpleNamespace(**{n: functools.partial(getattr(module, n), **kw) for n in names})


_SDMA_EMITTERS = ("copy_linear", "const_fill", "fence", "poll_regmem", "hdp_flush", "timestamp", "write_linear", "trap", "nop", "gcr")


@pytest.mark.parametrize("version,emit", [((6, 0), emitted), ((4, 4), emitted_v4)] + [
  (v, functools.partial(emitted, em=_at(sdma, _SDMA_EMITTERS, version=v))) for v in ((5, 0), (5, 2), (7, 0))],
  ids=lambda x: "sdma%d.%d" % x if isinstance(x, tuple) else "")
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_decoder_round_trips_emitted_streams(version, emit, data):
  pkts = [emit(data.draw) for _ in range(data.draw(st.integers(1, 8)))]
  decoded = check_round_trip(pkts, lambda s: sdma.decode_sdma(s, version), lambda s: sdma.format_sdma(s, version))
  if version < (5, 0): assert all("mtype" not in p.fields for p in decoded)


@settings(max_examples=150, deadline=None)
@given(st.lists(u32, max_size=40))
def test_decoder_never_raises_and_covers_every_word(words):
  decoded = sdma.decode_sdma(words)
  assert sum(len(p.words) for p in decoded) == len(words)
  sdma.format_sdma(decoded)


def test_constants_match_mesa_sid_h():
  cache = Path(os.environ.get("RAWGPU_CACHE") or Path.home() / ".cache" / "rawgpu")
  path = cache / "headers" / "mesa" / "src" / "amd" / "common" / "sid.h"
  if not path.exists(): pytest.skip(f"{path} not fetched (python -m rawgpu.autogen fetch mesa)")
  text = path.read_text()
  val = lambda name: int(re.search(rf"#define {name}\s+(0x[0-9a-fA-F]+|\d+)", text)[1], 0)
  for ours, theirs in ((S.SDMA_OP_COPY, "SDMA_OPCODE_COPY"), (S.SDMA_OP_WRITE, "SDMA_OPCODE_WRITE"),
                       (S.SDMA_OP_FENCE, "SDMA_OPCODE_FENCE"), (S.SDMA_OP_TRAP, "SDMA_OPCODE_TRAP"),
                       (S.SDMA_OP_POLL_REGMEM, "SDMA_OPCODE_POLL_REGMEM"), (S.SDMA_OP_CONST_FILL, "SDMA_OPCODE_CONSTANT_FILL"),
                       (S.SDMA_OP_TIMESTAMP, "SDMA_OPCODE_TIMESTAMP"),
                       (S.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL, "SDMA_TS_SUB_OPCODE_GET_GLOBAL_TIMESTAMP"),
                       (sdma.MTYPE_UC, "SDMA_FENCE_MTYPE_UC"), (sdma.RETRY_FOREVER, "SDMA_POLL_RETRY_INDEFINITELY"),
                       (sdma.copy_max_bytes((5, 0)), "SDMA_V2_0_COPY_MAX_BYTES"),
                       (sdma.copy_max_bytes((6, 0)), "SDMA_V5_2_COPY_MAX_BYTES")):
    assert ours == val(theirs), theirs
  assert re.search(r"#define SDMA_POLL_MEM\s+\(1 << 31\)", text) and sdma.poll_regmem(0, 0)[0] & (1 << 31)


def test_decoder_stops_at_unknown_and_truncated():
  stream = sdma.fence(0x100, 1) + [0xee, 1, 2] + sdma.trap()
  p = sdma.decode_sdma(stream)
  assert [x.name for x in p] == ["FENCE", "UNKNOWN"] and len(p[1].words) == 5 and "not decoded" in p[1].error
  assert [x.name for x in sdma.decode_sdma(sdma.write_linear(0x100, 1, 2, 3)[:5])] == ["TRUNCATED"]


def test_cpv_adds_a_dword_only_on_sdma7():
  """On SDMA 5.2-6.x cpv is COPY_LINEAR's cache-policy-valid bit in a 7-dword packet (Mesa's ac_sdma_5_2_uses_cpv);
  only SDMA 7 follows it with a compression-parameter dword (sdma_v7_0_emit_copy_buffer)."""
  from rawgpu.autogen.amd import sdma_v6 as S6
  seven = sdma.copy_linear(0x1000, 0x2000, 64, (6, 0))
  seven[0] |= S6.SDMA_PKT_COPY_LINEAR_HEADER_CPV(1)   # as Mesa emits it on SDMA 6
  stream = seven + sdma.fence(0x3000, 1, version=(6, 0))
  assert [p.name for p in sdma.decode_sdma(stream, (6, 0))] == ["COPY_LINEAR", "FENCE"]
  eight = sdma.copy_linear(0x1000, 0x2000, 64, (7, 0))
  assert len(eight) == 8 and [p.name for p in sdma.decode_sdma(eight + sdma.fence(0x3000, 1, version=(7, 0)), (7, 0))] == ["COPY_LINEAR", "FENCE"]


def test_gcr_matches_the_kernel_and_rocr_forms():
  """GCR_REQ as sdma_v6_0_ring_emit_mem_sync writes it (op 17, sub_op 0; GL2 INV+WB, GLM/GL1/GLV/GLK INV, GLI_INV(1)),
  and the user-queue form (sub_op 1) with ROCr's invalidate flags; SDMA 4 has none."""
  from rawgpu.autogen.amd import sdma_v6 as S6
  k = sdma.gcr(sdma.GCR_KERNEL_INV, version=(6, 0))
  assert k == [S6.SDMA_OP_GCR_REQ, 0, (sdma.GCR_KERNEL_INV & 0xffff) << 16, sdma.GCR_KERNEL_INV >> 16, 0] and sdma.GCR_KERNEL_INV == 0xC3A1
  assert sdma.gcr(sdma.GCR_USER_INV, user=True, version=(7, 0)) == [S6.SDMA_OP_GCR_REQ | 1 << 8, 0, 0xC3C00000, 0, 0]
  with pytest.raises(ValueError, match="no GCR"): sdma.gcr(sdma.GCR_KERNEL_INV, version=(4, 4))


def test_decoder_reads_on_past_the_packets_amdgpu_puts_on_its_rings():
  """Packets rawgpu does not emit but the engine runs (and a ring shared with amdgpu holds) are decoded by their
  header's layout, and decoding goes on after them: a broadcast COPY_LINEAR (9 dwords: it was read as 7), INDIRECT,
  SRBM_WRITE (SDMA 7's REGISTER_WRITE: a byte address) and POLL_REGMEM's VM_INVALIDATION sub-op."""
  fence = sdma.fence(0x4000, 7)
  bcast = [S.SDMA_PKT_COPY_LINEAR_HEADER_OP(S.SDMA_OP_COPY) | S.SDMA_PKT_COPY_BROADCAST_LINEAR_HEADER_BROADCAST(1), 199, 0,
           0x1000, 0, 0x2000, 0, 0x3000, 0x1]
  ib = [S.SDMA_PKT_INDIRECT_HEADER_OP(S.SDMA_OP_INDIRECT) | S.SDMA_PKT_INDIRECT_HEADER_VMID(3), 0x10000, 0, 8, 0, 0]
  wreg = [S.SDMA_PKT_SRBM_WRITE_HEADER_OP(S.SDMA_OP_SRBM_WRITE) | S.SDMA_PKT_SRBM_WRITE_HEADER_BYTE_EN(0xf), 0x1234, 5]
  inv = [S.SDMA_PKT_VM_INVALIDATION_HEADER_OP(S.SDMA_OP_POLL_REGMEM) | S.SDMA_PKT_VM_INVALIDATION_HEADER_SUB_OP(S.SDMA_SUBOP_VM_INVALIDATION)
         | S.SDMA_PKT_VM_INVALIDATION_HEADER_GFX_ENG_ID(17) | S.SDMA_PKT_VM_INVALIDATION_HEADER_MM_ENG_ID(0x1f), 1, 0xffffffff, 0x1f]
  ps = sdma.decode_sdma(bcast + fence + ib + fence + wreg + fence + inv + fence)
  assert [p.name for p in ps] == ["COPY_BROADCAST_LINEAR", "FENCE", "INDIRECT", "FENCE", "SRBM_WRITE", "FENCE", "VM_INVALIDATION", "FENCE"]
  assert (ps[0].fields["dst1_addr"], ps[0].fields["dst2_addr"]) == (0x2000, 0x1_0000_3000) and ps[2].fields["ib_base"] == 0x10000
  assert ps[2].fields["ib_size"] == 8 and ps[4].fields["addr"] == 0x1234 and ps[6].fields["gfx_eng_id"] == 17
  assert all(p.fields["data"] == 7 for p in ps[1::2])
  v7 = sdma.decode_sdma([S.SDMA_PKT_SRBM_WRITE_HEADER_OP(S.SDMA_OP_SRBM_WRITE), 0x1234 << 2, 5] + fence, (7, 0))
  assert [(p.name, p.fields.get("addr")) for p in v7] == [("REGISTER_WRITE", 0x1234 << 2), ("FENCE", 0x4000)]
  assert "COPY_BROADCAST_LINEAR broadcast=0x1 count=0xc7(200 bytes)" in sdma.format_sdma(bcast)
