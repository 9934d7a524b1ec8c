"""PM4 emitters word by word against the generated nvd.h macros, Mesa's packet field tables, and decoder round trips."""
import functools
import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from test_hcq_amd_common import check_round_trip

from rawgpu.autogen.amd import pm4 as P
from rawgpu.autogen.amd import pm4_soc15 as P9
from rawgpu.hcq.amd import pm4
from rawgpu.hcq.amd.pm4 import DataSel, Event, IntSel, WaitFunction

u32 = st.integers(0, 0xffffffff)
u64 = st.integers(0, (1 << 64) - 1)
addr4 = st.integers(0, (1 << 62) - 1).map(lambda a: a & ~3)
addr8 = addr4.map(lambda a: a & ~7)
FAST = settings(max_examples=60, deadline=None)


def mesa_file(rel: str) -> Path:
  cache = Path(os.environ.get("RAWGPU_CACHE") or Path.home() / ".cache" / "rawgpu")
  path = cache / "headers" / "mesa" / rel
  if not path.exists(): pytest.skip(f"{path} not fetched (python -m rawgpu.autogen fetch mesa)")
  return path


# ---- every emitter against words built here from the generated macros

def test_nop():
  assert pm4.nop(1) == [P.PACKET3(P.PACKET3_NOP, 0x3fff)]
  assert pm4.nop(4) == [P.PACKET3(P.PACKET3_NOP, 2), 0, 0, 0]


@FAST
@given(st.integers(0, 0x3ff - 3), st.lists(u32, min_size=1, max_size=3))
def test_set_sh_reg(off, values):
  reg = P.PACKET3_SET_SH_REG_START + off
  assert pm4.set_sh_reg(reg, *values) == [P.PACKET3(P.PACKET3_SET_SH_REG, len(values)), off, *values]


@FAST
@given(st.integers(0, 0x3ff - 3), st.lists(u32, min_size=1, max_size=3))
def test_set_uconfig_reg(off, values):
  reg = P.PACKET3_SET_UCONFIG_REG_START + off
  assert pm4.set_uconfig_reg(reg, *values) == [P.PACKET3(P.PACKET3_SET_UCONFIG_REG, len(values)), off, *values]


def test_set_reg_range_checks():
  with pytest.raises(ValueError, match="outside"): pm4.set_sh_reg(P.PACKET3_SET_SH_REG_START - 1, 0)
  with pytest.raises(ValueError, match="outside"): pm4.set_sh_reg(P.PACKET3_SET_SH_REG_END - 1, 0, 0)
  with pytest.raises(ValueError, match="outside"): pm4.set_uconfig_reg(P.PACKET3_SET_SH_REG_START, 0)


def test_dispatch_direct_and_initiator():
  from rawgpu.autogen.regs import ip_regs
  assert pm4.dispatch_direct(3, 4, 5, 0x8005) == [P.PACKET3(P.PACKET3_DISPATCH_DIRECT, 3), 3, 4, 5, 0x8005]
  for gen in (11, 12):
    r = ip_regs("gc", gen, 0, 0)["regCOMPUTE_DISPATCH_INITIATOR"]
    for wave32 in (False, True):
      v = pm4.dispatch_initiator(wave32, gen)
      assert r.decode(v)["COMPUTE_SHADER_EN"] == 1 and r.decode(v)["FORCE_START_AT_000"] == 1
      assert r.decode(v)["CS_W32_EN"] == int(wave32) and r.decode(v)["ORDER_MODE"] == 0


def test_acquire_mem_matches_amdgpu_mem_sync():
  gcr = (P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_INV(1) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_WB(1)
         | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLM_INV(1) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLM_WB(1)
         | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL1_INV(1) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLV_INV(1)
         | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLK_INV(1) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLI_INV(1))
  for gen in (11, 12):  # gfx_v11_0_emit_mem_sync and gfx_v12_0_emit_mem_sync in Linux 6.12 emit the same 8 dwords
    assert pm4.acquire_mem(gen=gen) == [P.PACKET3(P.PACKET3_ACQUIRE_MEM, 6), 0, 0xffffffff, 0xffffff, 0, 0, 0xa, gcr]
  assert pm4.acquire_mem(gcr=0, coher_base=0x12, poll_interval=3)[4::3] == [0x12, 0]


@FAST
@given(st.integers(0, 3), st.integers(0, 3), *[st.booleans()] * 11, st.integers(0, 3))
def test_gcr_cntl(gli, gl1r, glm_wb, glm_inv, glk_wb, glk_inv, glv, gl1, us, disc, inv, wb, _, gl2r):
  got = pm4.gcr_cntl(gli_inv=gli, gl1_range=gl1r, glm_wb=glm_wb, glm_inv=glm_inv, glk_wb=glk_wb, glk_inv=glk_inv,
                     glv_inv=glv, gl1_inv=gl1, gl2_us=us, gl2_range=gl2r, gl2_discard=disc, gl2_inv=inv, gl2_wb=wb, seq=gli)
  want = (P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLI_INV(gli) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL1_RANGE(gl1r)
          | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLM_WB(glm_wb) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLM_INV(glm_inv)
          | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLK_WB(glk_wb) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLK_INV(glk_inv)
          | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GLV_INV(glv) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL1_INV(gl1)
          | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_US(us) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_RANGE(gl2r)
          | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_DISCARD(disc) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_INV(inv)
          | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_GL2_WB(wb) | P.PACKET3_ACQUIRE_MEM_GCR_CNTL_SEQ(gli))
  assert got == want


@FAST
@given(addr8, u64, st.sampled_from(list(DataSel)), st.sampled_from(list(IntSel)), st.sampled_from(list(Event)),
       st.integers(0, 15), st.integers(0, 3), u32, st.sampled_from([11, 12]))
def test_release_mem(addr, value, data_sel, int_sel, event, index, policy, ctx, gen):
  got = pm4.release_mem(addr, value, data_sel=data_sel, int_sel=int_sel, event=event, event_index=index,
                        cache_policy=policy, int_ctxid=ctx, gen=gen)
  # the cache actions amdgpu's gfx_v11_0/gfx_v12_0 emit_fence use
  gcr = P.PACKET3_RELEASE_MEM_GCR_SEQ | P.PACKET3_RELEASE_MEM_GCR_GL2_WB
  if gen == 11: gcr |= P.PACKET3_RELEASE_MEM_GCR_GLM_INV | P.PACKET3_RELEASE_MEM_GCR_GLM_WB
  assert got == [P.PACKET3(P.PACKET3_RELEASE_MEM, 6),
                 gcr | P.PACKET3_RELEASE_MEM_CACHE_POLICY(policy) | P.PACKET3_RELEASE_MEM_EVENT_TYPE(event)
                 | P.PACKET3_RELEASE_MEM_EVENT_INDEX(index),
                 P.PACKET3_RELEASE_MEM_DATA_SEL(data_sel) | P.PACKET3_RELEASE_MEM_INT_SEL(int_sel),
                 addr & 0xffffffff, addr >> 32, value & 0xffffffff, value >> 32, ctx]


def test_release_mem_alignment():
  pm4.release_mem(0x1004, 1)
  with pytest.raises(ValueError, match="aligned"): pm4.release_mem(0x1004, 1, data_sel=DataSel.VALUE64)
  with pytest.raises(ValueError, match="aligned"): pm4.release_mem(0x1002, 1)


@FAST
@given(addr4, u32, u32, st.sampled_from(list(WaitFunction)), st.booleans(), st.integers(0, 0xffff), st.integers(0, 3))
def test_wait_reg_mem(addr, ref, mask, func, memory, poll, engine):
  got = pm4.wait_reg_mem(addr, ref, mask, func, memory=memory, poll_interval=poll, engine=engine)
  assert got == [P.PACKET3(P.PACKET3_WAIT_REG_MEM, 5),
                 P.WAIT_REG_MEM_MEM_SPACE(int(memory)) | P.WAIT_REG_MEM_OPERATION(0) | P.WAIT_REG_MEM_FUNCTION(func)
                 | P.WAIT_REG_MEM_ENGINE(engine), addr & 0xffffffff, (addr >> 32) if memory else 0, ref, mask, poll]


@FAST
@given(addr4, st.integers(1, (1 << 20) - 1), st.integers(0, 15), st.integers(0, 3))
def test_indirect_buffer_as_the_compute_ring_emits_it(addr, n, vmid, policy):
  got = pm4.indirect_buffer(addr, n, vmid=vmid, cache_policy=policy)
  assert got == [P.PACKET3(P.PACKET3_INDIRECT_BUFFER, 2), addr & 0xffffffff, addr >> 32,
                 P.INDIRECT_BUFFER_VALID | n | (vmid << 24) | P.INDIRECT_BUFFER_CACHE_POLICY(policy)]
  with pytest.raises(ValueError): pm4.indirect_buffer(addr, 1 << 20)


def test_event_write():
  assert pm4.event_write(Event.CS_PARTIAL_FLUSH) == [P.PACKET3(P.PACKET3_EVENT_WRITE, 0), P.EVENT_TYPE(7) | P.EVENT_INDEX(4)]
  assert pm4.event_write(Event.CACHE_FLUSH_TS, 5, addr=0x123456789a0) == [
    P.PACKET3(P.PACKET3_EVENT_WRITE, 2), P.EVENT_TYPE(4) | P.EVENT_INDEX(5), 0x456789a0, 0x123]


@FAST
@given(addr4, st.lists(u32, min_size=1, max_size=5), st.booleans(), st.integers(0, 3))
def test_write_data(addr, values, one_addr, engine):
  got = pm4.write_data(addr, *values, one_addr=one_addr, engine_sel=engine)
  assert got == [P.PACKET3(P.PACKET3_WRITE_DATA, 2 + len(values)),
                 P.WRITE_DATA_DST_SEL(5) | P.WR_CONFIRM | (P.WR_ONE_ADDR if one_addr else 0) | P.WRITE_DATA_ENGINE_SEL(engine),
                 addr & 0xffffffff, addr >> 32, *values]


# ---- decoder

def emitted(draw, em=pm4) -> tuple[list[int], str, dict]:
  """One packet from a random emitter call, its name and the fields the decoder must report."""
  kind = draw(st.sampled_from(["release", "wait", "hdp", "ib", "sh", "uconfig", "dispatch", "acquire", "event", "write", "nop"]))
  if kind == "release":
    a, v, ds, isel, ev = draw(addr8), draw(u64), draw(st.sampled_from(list(DataSel))), draw(st.sampled_from(list(IntSel))), draw(st.sampled_from(list(Event)))
    return em.release_mem(a, v, ds, isel, ev), "RELEASE_MEM", dict(addr=a, data=v, data_sel=ds, int_sel=isel, event_type=ev)
  if kind == "wait":
    a, r, m, f = draw(addr4), draw(u32), draw(u32), draw(st.sampled_from(list(WaitFunction)))
    return em.wait_reg_mem(a, r, m, f), "WAIT_REG_MEM", dict(addr=a, reference=r, mask=m, function=f, mem_space=1)
  if kind == "hdp":
    req, done, bit = draw(st.integers(0, 0xffff)), draw(st.integers(0, 0xffff)), 1 << draw(st.integers(0, 13))
    return em.hdp_flush(req, done, bit), "WAIT_REG_MEM", dict(
      addr_lo=req, addr_hi=done, reference=bit, mask=bit, operation=1, mem_space=0, poll_interval=0x20)
  if kind == "ib":
    a, n, vm = draw(addr4), draw(st.integers(1, (1 << 20) - 1)), draw(st.integers(0, 15))
    return em.indirect_buffer(a, n, vmid=vm), "INDIRECT_BUFFER", dict(ib_base=a, ib_size=n, vmid=vm, valid=1)
  if kind in ("sh", "uconfig"):
    start = P.PACKET3_SET_SH_REG_START if kind == "sh" else P.PACKET3_SET_UCONFIG_REG_START
    reg, vals = start + draw(st.integers(0, 0x300)), draw(st.lists(u32, min_size=1, max_size=4))
    fn = em.set_sh_reg if kind == "sh" else em.set_uconfig_reg
    return fn(reg, *vals), "SET_SH_REG" if kind == "sh" else "SET_UCONFIG_REG", dict(reg=reg, _data=vals)
  if kind == "dispatch":
    x, y, z, i = draw(u32), draw(u32), draw(u32), draw(u32)
    return em.dispatch_direct(x, y, z, i), "DISPATCH_DIRECT", dict(dim_x=x, dim_y=y, dim_z=z, dispatch_initiator=i)
  if kind == "acquire":
    g = draw(u32)
    return em.acquire_mem(gcr=g), "ACQUIRE_MEM", dict(gcr_cntl=g, coher_size=0xffffffff)
  if kind == "event":
    e, idx = draw(st.sampled_from(list(Event))), draw(st.integers(0, 15))
    return em.event_write(e, idx), "EVENT_WRITE", dict(event_type=e, event_index=idx)
  if kind == "write":
    a, vals = draw(addr4), draw(st.lists(u32, min_size=1, max_size=4))
    return em.write_data(a, *vals), "WRITE_DATA", dict(dst_addr=a, dst_sel=5, _data=vals)
  n = draw(st.integers(1, 6))
  return em.nop(n), "NOP", {}


# Mesa's sid.h EVENT_INDEX: 5 end-of-pipe timestamp events, 6 end-of-shader events (CS_DONE), 4 partial flushes
EVENT_INDEX = {Event.CACHE_FLUSH_TS: 5, Event.CS_PARTIAL_FLUSH: 4, Event.CACHE_FLUSH_AND_INV_TS_EVENT: 5, Event.BOTTOM_OF_PIPE_TS: 5,
               Event.CS_DONE: 6}


def test_event_index_follows_the_event():
  assert {e: pm4.event_index_of(e) for e in Event} == EVENT_INDEX
  for e in Event:
    assert pm4.decode_pm4(pm4.release_mem(0x1000, event=e))[0].fields["event_index"] == EVENT_INDEX[e]
    assert pm4.decode_pm4(pm4.event_write(e))[0].fields["event_index"] == EVENT_INDEX[e]


def emitted9(draw) -> tuple[list[int], str, dict]:
  kind = draw(st.sampled_from(["release", "acquire", "wait", "hdp", "sh", "dispatch", "ib", "event", "write", "nop"]))
  if kind == "release":
    a, v, ds, isel, ev = draw(addr8), draw(u64), draw(st.sampled_from(list(DataSel))), draw(st.sampled_from(list(IntSel))), draw(st.sampled_from(list(Event)))
    return pm4.release_mem(a, v, ds, isel, ev, gen=9), "RELEASE_MEM", dict(
      addr=a, data=v, data_sel=ds, int_sel=isel, event_type=ev, event_index=EVENT_INDEX[ev], tcl1=1, tc=1, tc_wb=1, tc_md=1, tc_nc=0)
  if kind == "acquire":
    c = draw(u32)
    return pm4.acquire_mem(gen=9, coher_cntl=c), "ACQUIRE_MEM", dict(
      coher_cntl=c, coher_size=0xffffffff, coher_size_hi=0xff, poll_interval=10,   # (the field is [7:0] of what amdgpu writes, 0xffffff)
      sh_icache=c >> 29 & 1, tc_wb=c >> 18 & 1, tc=c >> 23 & 1, tcl1=c >> 22 & 1, sh_kcache=c >> 27 & 1)
  if kind == "wait":
    a, r, m, f = draw(addr4), draw(u32), draw(u32), draw(st.sampled_from(list(WaitFunction)))
    return pm4.wait_reg_mem(a, r, m, f, gen=9), "WAIT_REG_MEM", dict(addr=a, reference=r, mask=m, function=f, mem_space=1)
  if kind == "hdp":
    req, done = draw(st.integers(0, 0xffff)), draw(st.integers(0, 0xffff))
    return pm4.hdp_flush(req, done, 4), "WAIT_REG_MEM", dict(
      addr_lo=req, addr_hi=done, reference=4, mask=4, operation=1, mem_space=0, poll_interval=0x20)
  if kind == "sh":
    reg, vals = P9.PACKET3_SET_SH_REG_START + draw(st.integers(0, 0x300)), draw(st.lists(u32, min_size=1, max_size=4))
    return pm4.set_sh_reg(reg, *vals, gen=9), "SET_SH_REG", dict(reg=reg, _data=vals)
  if kind == "dispatch":
    x, y, z = draw(u32), draw(u32), draw(u32)
    return pm4.dispatch_direct(x, y, z, pm4.dispatch_initiator(False, 9), gen=9), "DISPATCH_DIRECT", dict(dim_x=x, dim_y=y, dim_z=z)
  if kind == "ib":
    a, n = draw(addr4), draw(st.integers(1, (1 << 20) - 1))
    return pm4.indirect_buffer(a, n, gen=9), "INDIRECT_BUFFER", dict(ib_base=a, ib_size=n, valid=1)
  if kind == "event":
    e = draw(st.sampled_from(list(Event)))
    return pm4.event_write(e, gen=9), "EVENT_WRITE", dict(event_type=e, event_index=EVENT_INDEX[e])
  if kind == "write":
    a, vals = draw(addr4), draw(st.lists(u32, min_size=1, max_size=4))
    return pm4.write_data(a, *vals, gen=9), "WRITE_DATA", dict(dst_addr=a, _data=vals)
  n = draw(st.integers(1, 6))
  return pm4.nop(n, gen=9), "NOP", {}


def _gen(gen: int):
  """pm4's emitters with the generation fixed (hdp_flush's own default is gfx9)."""
  from types import SimpleNamespace
  names = ("release_mem", "wait_reg_mem", "hdp_flush", "indirect_buffer", "set_sh_reg", "set_uconfig_reg", "dispatch_direct",
           "acquire_mem", "event_write", "write_data", "nop")
  return SimpleNamespace(**{n: functools.partial(getattr(pm4, n), gen=gen) for n in names})


@pytest.mark.parametrize("gen,emit", [(11, functools.partial(emitted, em=_gen(11))), (9, emitted9), (12, functools.partial(emitted, em=_gen(12)))],
                         ids=lambda x: f"gfx{x}" if isinstance(x, int) else "")
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_decoder_round_trips_emitted_streams(gen, emit, data):
  pkts = [emit(data.draw) for _ in range(data.draw(st.integers(1, 8)))]
  check_round_trip(pkts, lambda s: pm4.decode_pm4(s, gen), lambda s: pm4.format_pm4(s, gen=gen))


@settings(max_examples=150, deadline=None)
@given(st.lists(u32, max_size=40))
def test_decoder_never_raises_and_covers_every_word(words):
  decoded = pm4.decode_pm4(words)
  assert sum(len(p.words) for p in decoded) == len(words)
  assert all(p.name != "TRUNCATED" for p in decoded[:-1])
  pm4.format_pm4(decoded)


def test_format_names_registers():
  line = pm4.format_pm4(pm4.set_sh_reg(0x2e0c, 1), reg_name=lambda a: "COMPUTE_PGM_LO" if a == 0x2e0c else None)
  assert "reg=0x2e0c(COMPUTE_PGM_LO)" in line


# ---- Mesa as the oracle (fetched by `python -m rawgpu.autogen fetch mesa`)

@pytest.mark.parametrize("layouts,names", [(pm4.LAYOUTS, pm4.OPCODE_NAMES), (pm4.LAYOUTS_GFX9, pm4.OPCODE_NAMES_GFX9)],
                         ids=["nvd", "soc15"])
def test_opcodes_match_mesa_sid_h(layouts, names):
  text = mesa_file("src/amd/common/sid.h").read_text()
  mesa = {m[1]: int(m[2], 16) for m in re.finditer(r"#define PKT3_(\w+)\s+0x([0-9A-Fa-f]+)\b", text)}
  for op, (name, _) in layouts.items(): assert mesa[name] == op, name
  same = [n for n in names.values() if n in mesa]
  assert len(same) > 40
  for op, name in names.items():
    if name in mesa: assert mesa[name] == op, name
  assert int(WaitFunction.EQUAL) == int(re.search(r"WAIT_REG_MEM_EQUAL\s+(\d+)", text)[1])
  assert int(WaitFunction.NOT_EQUAL) == int(re.search(r"WAIT_REG_MEM_NOT_EQUAL\s+(\d+)", text)[1])
  assert int(WaitFunction.GREATER_EQUAL) == int(re.search(r"WAIT_REG_MEM_GREATER_OR_EQUAL\s+(\d+)", text)[1])
  for ours, theirs in ((DataSel.NONE, "DISCARD"), (DataSel.VALUE32, "VALUE_32BIT"), (DataSel.VALUE64, "VALUE_64BIT"),
                       (DataSel.TIMESTAMP, "TIMESTAMP")):
    assert int(ours) == int(re.search(rf"EOP_DATA_SEL_{theirs}\s+(\d+)", text)[1])
  assert int(IntSel.WAIT_WRITE_CONFIRM) == int(re.search(r"EOP_INT_SEL_SEND_DATA_AFTER_WR_CONFIRM\s+(\d+)", text)[1])


def test_event_types_match_mesa():
  regs = json.loads(mesa_file("src/amd/registers/gfx11.json").read_text())
  mesa = {e["name"]: e["value"] for e in regs["enums"]["VGT_EVENT_TYPE"]["entries"]}
  for e in Event: assert mesa[e.name] == e.value, e.name


# gfx9: pkt3.json describes only WRITE_DATA's control and the IB control dword (7 fields)
@pytest.mark.parametrize("chip,layouts,least", [("gfx11", pm4.LAYOUTS, 30), ("gfx9", pm4.LAYOUTS_GFX9, 7)])
def test_field_positions_match_mesa_pkt3_json(chip, layouts, least):
  # pkt3.json maps packet dwords (at = opcode << 4 | body dword index) to field layouts
  pkt3 = json.loads(mesa_file("src/amd/registers/pkt3.json").read_text())
  checked = 0
  for m in pkt3["register_mappings"]:
    if chip not in m["chips"] or "type_ref" not in m: continue
    op, body = m["map"]["at"] >> 4, m["map"]["at"] & 0xf
    if op not in layouts: continue
    ours = {f.name: f for f in layouts[op][1] if f.dword == body + 1}
    for mf in pkt3["register_types"][m["type_ref"]]["fields"]:
      name = {"ib_size": "ib_size"}.get(mf["name"].lower(), mf["name"].lower())
      if name in ours:
        lo, hi = mf["bits"]
        assert (ours[name].shift, ours[name].width) == (lo, hi - lo + 1), (m["name"], name)
        checked += 1
  assert checked >= least  # gfx11: WRITE_DATA control, RELEASE_MEM dword 1, ACQUIRE_MEM GCR_CNTL, IB control
  dst = {e["name"]: e["value"] for e in pkt3["enums"]["CONTROL__DST_SEL_cik"]["entries"]}
  assert dst["MEM_MAPPED_REGISTER"] == pm4.DstSel.REGISTER and dst["MEM"] == pm4.DstSel.MEMORY


def test_decoder_marks_bad_packets():
  short = [P.PACKET3(P.PACKET3_RELEASE_MEM, 1), 0, 0]  # a RELEASE_MEM that stops after its second body dword
  p = pm4.decode_pm4(short + pm4.nop(1))
  assert [x.name for x in p] == ["RELEASE_MEM", "NOP"] and "too short" in p[0].error and "addr" not in p[0].fields
  cut = pm4.release_mem(0x1000, 1)[:5]
  assert [(x.name, len(x.words)) for x in pm4.decode_pm4(cut)] == [("TRUNCATED", 5)]
  assert pm4.decode_pm4([P.PACKET3(0xee, 0), 7])[0].name == "UNKNOWN_0xee"
  assert pm4.decode_pm4([P.CP_PACKET2])[0].name == "TYPE2"
  assert pm4.decode_pm4([P.PACKET0(0x1234, 1), 5, 6])[0].fields["reg"] == 0x1234


def test_decoder_shows_the_bits_pkt3_json_names_beyond_the_kernel_headers():
  """A chained INDIRECT_BUFFER, gfx11 RELEASE_MEM's WAIT_SYNC/GLK_WB/GLK_INV/PWS_ENABLE and gfx9's TC_WC action and
  MEC cache policy are decoded (they were dropped: a chained IB printed as a call); positions as pkt3.json's."""
  ib = pm4.indirect_buffer(0x10000, 8)
  ib[3] |= 1 << 20
  (p,) = pm4.decode_pm4(ib)
  assert p.fields["chain"] == 1 and "chain=0x1" in pm4.format_packet(p)
  rel = pm4.release_mem(0x1000, 1)
  rel[1] |= (1 << 7) | (1 << 24) | (1 << 30) | (1 << 31)
  f = pm4.decode_pm4(rel)[0].fields
  assert (f["wait_sync"], f["glk_wb"], f["glk_inv"], f["pws_enable"]) == (1, 1, 1, 1)
  rel9 = pm4.release_mem(0x1000, 1, gen=9, cache_policy=1)   # (the MEC's STREAM policy, kfd_pm4_headers_ai.h)
  rel9[1] |= 1 << 20
  f9 = pm4.decode_pm4(rel9, gen=9)[0].fields
  assert (f9["tc_wc_action_ena"], f9["cache_policy"]) == (1, 1)
