"""CDNA3 (gfx9.4.3, SDMA 4.4.2) command streams (decoder round trips and the Mesa checks of gen=9 /
SDMA 4 streams live in test_hcq_amd_pm4.py and test_hcq_amd_sdma.py, next to the gfx11 ones): the gen=9 PM4 emitters against soc15d.h's generated macros, the SDMA 4
emitters against the vega10 packet header, Mesa's pkt3.json, the NBIO 7.9 headers compiled by
the host C compiler, and the queues with a fake gfx9 backend. No gfx9 board is emulated: nothing here runs a kernel."""
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

from rawgpu.errors import RawGPUError

import pytest
from hypothesis import given, settings, strategies as st

from rawgpu import kernels
from rawgpu.autogen.amd import pm4_soc15 as P9
from rawgpu.autogen.amd import sdma_v4 as S4
from rawgpu.autogen.regs import ip_regs
from rawgpu.hcq.amd import pm4, sdma
from rawgpu.hcq.amd.elf import load_code_object
from rawgpu.hcq.amd.pm4 import DataSel, Event, IntSel, WaitFunction
from rawgpu.hcq.amd.queues import AMDComputeQueue, AMDCopyQueue
from rawgpu.hcq.amd.sdma import PollFunction
from rawgpu.hcq.patch import Var

u32 = st.integers(0, 0xffffffff)
u64 = st.integers(0, (1 << 64) - 1)
addr4 = st.integers(0, (1 << 62) - 1).map(lambda a: a & ~3)
addr8 = addr4.map(lambda a: a & ~7)
FAST = settings(max_examples=60, deadline=None)
V44 = (4, 4)
GC_BASE = (0x2000, 0xa000)  # GC instance-0 segment bases in the kernel's aldebaran_ip_offset.h (see autogen/regs/README)
NBIO_BASE = (0x0, 0x14, 0xd20, 0x10400, 0x241b000)  # NBIO bases of an MI300 discovery table, any values serve here


def cache() -> Path: return Path(os.environ.get("RAWGPU_CACHE") or Path.home() / ".cache" / "rawgpu") / "headers"


def lo(a): return a & 0xffffffff
def hi(a): return a >> 32


# ---- PM4, gen=9

def test_acquire_mem_is_gfx_v9_4_3_emit_mem_sync():
  cntl = (P9.PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_SH_ICACHE_ACTION_ENA(1) | P9.PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_SH_KCACHE_ACTION_ENA(1)
          | P9.PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_TC_ACTION_ENA(1) | P9.PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_TCL1_ACTION_ENA(1)
          | P9.PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_TC_WB_ACTION_ENA(1))
  assert pm4.acquire_mem(gen=9) == [P9.PACKET3(P9.PACKET3_ACQUIRE_MEM, 5), cntl, 0xffffffff, 0xffffff, 0, 0, 0xa]
  w = pm4.acquire_mem(gen=9, coher_cntl=0, coher_base=0x40)
  assert (w[1], w[4], w[6]) == (0, 0x40, 0xa)
  with pytest.raises(ValueError, match="GCR_CNTL"): pm4.acquire_mem(gcr=1, gen=9)


@FAST
@given(st.lists(st.booleans(), min_size=13, max_size=13))
def test_coher_cntl_bits(flags):
  names = ("TC_NC", "TC_WC", "TC_INV_METADATA", "TCL1_VOL", "TC_WB", "TCL1", "TC", "CB", "DB", "SH_KCACHE",
           "SH_KCACHE_VOL", "SH_ICACHE", "SH_KCACHE_WB")
  want = 0
  for n, f in zip(names, flags): want |= getattr(P9, f"PACKET3_ACQUIRE_MEM_CP_COHER_CNTL_{n}_ACTION_ENA")(int(f))
  assert pm4.coher_cntl(**{n.lower(): f for n, f in zip(names, flags)}) == want


@FAST
@given(addr8, u64, st.sampled_from(list(DataSel)), st.sampled_from(list(IntSel)), st.sampled_from(list(Event)),
       st.integers(0, 15), u32)
def test_release_mem_gfx9(addr, value, data_sel, int_sel, event, index, ctx):
  got = pm4.release_mem(addr, value, data_sel=data_sel, int_sel=int_sel, event=event, event_index=index, int_ctxid=ctx, gen=9)
  # gfx_v9_4_3_ring_emit_fence: flush + invalidate L1/L2, write back L2 and metadata; no cache policy
  eop = P9.EOP_TCL1_ACTION_EN | P9.EOP_TC_ACTION_EN | P9.EOP_TC_WB_ACTION_EN | P9.EOP_TC_MD_ACTION_EN
  assert got == [P9.PACKET3(P9.PACKET3_RELEASE_MEM, 6), eop | P9.EVENT_TYPE(event) | P9.EVENT_INDEX(index),
                 P9.DATA_SEL(data_sel) | P9.INT_SEL(int_sel), lo(addr), hi(addr), lo(value), value >> 32, ctx]
  # the MEC's cache policy: bits 25-26 (kfd_pm4_headers_ai.h pm4_mec_release_mem), 2 bits
  assert pm4.release_mem(addr, value, cache_policy=1, gen=9)[1] == pm4.release_mem(addr, value, gen=9)[1] | 1 << 25
  with pytest.raises(ValueError, match="cache_policy is 2 bits"): pm4.release_mem(addr, value, cache_policy=4, gen=9)


def test_fence_as_amdgpu_emits_it():
  got = pm4.release_mem(0x1000, 7, data_sel=DataSel.VALUE64, int_sel=IntSel.INTERRUPT_AFTER_WRITE, gen=9)
  assert got[1] == (P9.EOP_TCL1_ACTION_EN | P9.EOP_TC_ACTION_EN | P9.EOP_TC_WB_ACTION_EN | P9.EOP_TC_MD_ACTION_EN
                    | P9.EVENT_TYPE(P9.CACHE_FLUSH_AND_INV_TS_EVENT) | P9.EVENT_INDEX(5))
  assert got[2] == P9.DATA_SEL(2) | P9.INT_SEL(2)


@FAST
@given(addr4, u32, u32, st.sampled_from(list(WaitFunction)), st.booleans(), st.integers(0, 0xffff), st.integers(0, 3))
def test_wait_reg_mem_gfx9(addr, ref, mask, func, memory, poll, engine):
  got = pm4.wait_reg_mem(addr, ref, mask, func, memory=memory, poll_interval=poll, engine=engine, gen=9)
  assert got == [P9.PACKET3(P9.PACKET3_WAIT_REG_MEM, 5),
                 P9.WAIT_REG_MEM_MEM_SPACE(int(memory)) | P9.WAIT_REG_MEM_FUNCTION(func) | P9.WAIT_REG_MEM_ENGINE(engine),
                 lo(addr), hi(addr) if memory else 0, ref, mask, poll]


def test_other_packets_gfx9():
  assert pm4.set_sh_reg(P9.PACKET3_SET_SH_REG_START + 0x204, 1, 2, gen=9) == [P9.PACKET3(P9.PACKET3_SET_SH_REG, 2), 0x204, 1, 2]
  assert pm4.set_uconfig_reg(P9.PACKET3_SET_UCONFIG_REG_START + 3, 9, gen=9) == [P9.PACKET3(P9.PACKET3_SET_UCONFIG_REG, 1), 3, 9]
  with pytest.raises(ValueError, match="outside"): pm4.set_sh_reg(P9.PACKET3_SET_SH_REG_END, 0, gen=9)
  assert pm4.dispatch_direct(2, 3, 4, 5, gen=9) == [P9.PACKET3(P9.PACKET3_DISPATCH_DIRECT, 3), 2, 3, 4, 5]
  assert pm4.indirect_buffer(0x12_3456_7890, 77, vmid=3, gen=9) == [
    P9.PACKET3(P9.PACKET3_INDIRECT_BUFFER, 2), 0x3456_7890, 0x12, P9.INDIRECT_BUFFER_VALID | 77 | 3 << 24]
  assert pm4.event_write(Event.CS_PARTIAL_FLUSH, gen=9) == [
    P9.PACKET3(P9.PACKET3_EVENT_WRITE, 0), P9.EVENT_TYPE(P9.CS_PARTIAL_FLUSH) | P9.EVENT_INDEX(4)]
  assert pm4.write_data(0x100, 5, gen=9) == [P9.PACKET3(P9.PACKET3_WRITE_DATA, 3),
                                             P9.WRITE_DATA_DST_SEL(5) | P9.WR_CONFIRM, 0x100, 0, 5]
  assert pm4.nop(3, gen=9) == [P9.PACKET3(P9.PACKET3_NOP, 1), 0, 0]
  for e in Event: assert getattr(P9, e.name) == e.value  # vega10_enum.h's VGT event numbers


def test_dispatch_initiator_gfx9_is_wave64_only():
  for ver in ((9, 4, 3), (9, 0, 0)):  # the fields sit at the same bits on gc 9.0 (Vega) and 9.4.3 (CDNA3)
    r = ip_regs("gc", *ver)["COMPUTE_DISPATCH_INITIATOR"]
    assert "CS_W32_EN" not in r.fields
    d = r.decode(pm4.dispatch_initiator(False, 9))
    assert d["COMPUTE_SHADER_EN"] == 1 and d["FORCE_START_AT_000"] == 1 and sum(d.values()) == 2
  with pytest.raises(ValueError, match="wave64 only"): pm4.dispatch_initiator(True, 9)


def _nbio_oracle(header: str = "nbio_7_9_0") -> dict[str, int]:
  """Offsets, base indices and masks printed by a C program compiled with the kernel's NBIO/NBIF headers."""
  inc = cache() / "linux-6.12" / "drivers" / "gpu" / "drm" / "amd" / "include" / "asic_reg" / header.split("_")[0]
  cc = shutil.which("gcc") or shutil.which("cc")
  if not (inc / f"{header}_offset.h").exists(): pytest.skip(f"{inc} not fetched (python -m rawgpu.autogen fetch)")
  if cc is None: pytest.skip("no host C compiler")
  names = ["regBIF_BX_PF0_GPU_HDP_FLUSH_REQ", "regBIF_BX_PF0_GPU_HDP_FLUSH_REQ_BASE_IDX", "regBIF_BX_PF0_GPU_HDP_FLUSH_DONE",
           "regBIF_BX_PF0_GPU_HDP_FLUSH_DONE_BASE_IDX"] + [f"BIF_BX_PF0_GPU_HDP_FLUSH_DONE__{c}_MASK" for c in [f"CP{i}" for i in range(10)] + ["SDMA0", "SDMA1"]]
  src = (f'#include <stdio.h>\n#include <stdint.h>\n#include "{header}_offset.h"\n#include "{header}_sh_mask.h"\nint main(void){{\n'
         + "".join(f'printf("{n} %lu\\n", (unsigned long)({n}));\n' for n in names) + "return 0;}\n")
  import tempfile
  with tempfile.TemporaryDirectory() as d:
    (Path(d) / "t.c").write_text(src)
    subprocess.run([cc, "-I", str(inc), "-o", f"{d}/t", f"{d}/t.c"], check=True, capture_output=True)
    out = subprocess.run([f"{d}/t"], check=True, capture_output=True, text=True).stdout
  return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


@pytest.mark.parametrize("me,pipe", [(1, 0), (1, 3), (2, 0), (2, 2)])
def test_hdp_flush_matches_nbio_v7_9_headers(me, pipe):
  h = _nbio_oracle()
  req = NBIO_BASE[h["regBIF_BX_PF0_GPU_HDP_FLUSH_REQ_BASE_IDX"]] + h["regBIF_BX_PF0_GPU_HDP_FLUSH_REQ"]
  done = NBIO_BASE[h["regBIF_BX_PF0_GPU_HDP_FLUSH_DONE_BASE_IDX"]] + h["regBIF_BX_PF0_GPU_HDP_FLUSH_DONE"]
  bit = h[f"BIF_BX_PF0_GPU_HDP_FLUSH_DONE__CP{2 if me == 1 else 6}_MASK"] << pipe  # ref_and_mask_cp2/cp6 << pipe
  assert pm4.hdp_flush_regs(NBIO_BASE, me, pipe) == (req, done, bit)


@pytest.mark.parametrize("header,version", [("nbio_4_3_0", (4, 3, 0)), ("nbif_6_3_1", (6, 3, 1))])
def test_hdp_flush_of_rdna_boards_matches_their_nbio_headers(header, version):
  """gfx11 (NBIO 4.3) and gfx12 (NBIF 6.3.1): the same request/done pair and CP bits, at their own offsets."""
  h = _nbio_oracle(header)
  for me, pipe in ((1, 0), (1, 2), (2, 1)):
    req = NBIO_BASE[h["regBIF_BX_PF0_GPU_HDP_FLUSH_REQ_BASE_IDX"]] + h["regBIF_BX_PF0_GPU_HDP_FLUSH_REQ"]
    done = NBIO_BASE[h["regBIF_BX_PF0_GPU_HDP_FLUSH_DONE_BASE_IDX"]] + h["regBIF_BX_PF0_GPU_HDP_FLUSH_DONE"]
    bit = h[f"BIF_BX_PF0_GPU_HDP_FLUSH_DONE__CP{2 if me == 1 else 6}_MASK"] << pipe
    assert pm4.hdp_flush_regs(NBIO_BASE, me, pipe, nbio_version=version) == (req, done, bit)
  for engine in (0, 1):   # the SDMA rings' bits (ref_and_mask_sdma0/1)
    assert pm4.hdp_flush_regs(NBIO_BASE, nbio_version=version, sdma_engine=engine)[2] == h[f"BIF_BX_PF0_GPU_HDP_FLUSH_DONE__SDMA{engine}_MASK"]
  with pytest.raises(ValueError, match="SDMA engine 2"): pm4.hdp_flush_regs(NBIO_BASE, nbio_version=version, sdma_engine=2)
  # gfx_v9_4_3_ring_emit_hdp_flush: engine ME, register space, WRITE_WAIT_WRITE, equal, poll 0x20
  assert pm4.hdp_flush(req, done, bit) == [
    P9.PACKET3(P9.PACKET3_WAIT_REG_MEM, 5),
    P9.WAIT_REG_MEM_MEM_SPACE(0) | P9.WAIT_REG_MEM_OPERATION(1) | P9.WAIT_REG_MEM_FUNCTION(3) | P9.WAIT_REG_MEM_ENGINE(0),
    req, done, bit, bit, 0x20]


def test_hdp_flush_regs_rejects_unknown_pipes():
  with pytest.raises(ValueError, match="ME 3"): pm4.hdp_flush_regs(NBIO_BASE, 3, 0)
  with pytest.raises(ValueError): pm4.hdp_flush_regs(NBIO_BASE, 1, 4)


# ---- PM4 decoder, gen=9

def test_gfx9_acquire_would_be_short_for_the_gfx11_decoder():
  p9, p11 = pm4.decode_pm4(pm4.acquire_mem(gen=9), gen=9)[0], pm4.decode_pm4(pm4.acquire_mem(gen=9))[0]
  assert not p9.error and "gcr_cntl" not in p9.fields and p9.fields["sh_icache"] == 1
  assert "too short" in p11.error  # the decoder has to be told the generation
  line = pm4.format_pm4(pm4.release_mem(0x1000, 1, gen=9), gen=9)
  assert "tc_wb=0x1" in line and "tcl1=0x1" in line and "event_type=0x14(CACHE_FLUSH_AND_INV_TS_EVENT)" in line


# ---- SDMA 4.4

@FAST
@given(addr4, addr4, st.integers(1, 1 << 16), st.booleans())
def test_copy_linear_v4(dst, src, n, tmz):
  assert sdma.copy_linear(dst, src, n, V44, tmz=tmz) == [
    S4.SDMA_PKT_COPY_LINEAR_HEADER_OP(S4.SDMA_OP_COPY) | S4.SDMA_PKT_COPY_LINEAR_HEADER_SUB_OP(S4.SDMA_SUBOP_COPY_LINEAR)
    | S4.SDMA_PKT_COPY_LINEAR_HEADER_TMZ(int(tmz)), S4.SDMA_PKT_COPY_LINEAR_COUNT_COUNT(n - 1), 0,
    S4.SDMA_PKT_COPY_LINEAR_SRC_ADDR_LO_SRC_ADDR_31_0(lo(src)), S4.SDMA_PKT_COPY_LINEAR_SRC_ADDR_HI_SRC_ADDR_63_32(hi(src)),
    S4.SDMA_PKT_COPY_LINEAR_DST_ADDR_LO_DST_ADDR_31_0(lo(dst)), S4.SDMA_PKT_COPY_LINEAR_DST_ADDR_HI_DST_ADDR_63_32(hi(dst))]


def test_copy_and_fill_chunk_at_sdma_v4_4_2_limits():
  # sdma_v4_4_2's copy_max_bytes and fill_max_bytes are 0x400000: the whole 22-bit bytes-1 count of vega10's header
  assert S4.SDMA_PKT_COPY_LINEAR_COUNT_count_mask == (1 << 22) - 1 and sdma.copy_max_bytes(V44) == 0x400000
  assert sdma.fill_max_bytes(V44) == 0x400000
  n = 2 * 0x400000 + 12
  pkts = sdma.decode_sdma(sdma.copy_linear(0x10000, 0x900000000, n, V44), V44)
  assert [p.fields["count"] + 1 for p in pkts] == [0x400000, 0x400000, 12]
  assert [p.fields["src_addr"] for p in pkts] == [0x900000000 + k * 0x400000 for k in range(3)]
  assert all(p.fields["count"] <= S4.SDMA_PKT_COPY_LINEAR_COUNT_count_mask for p in pkts)
  fills = sdma.decode_sdma(sdma.const_fill(0x1000, 7, 0x400000 + 8, V44), V44)
  assert [p.fields["count"] + 1 for p in fills] == [0x400000, 8]
  with pytest.raises(ValueError, match="does not fit"):  # a 22-bit count cannot take a 5.2+ chunk
    sdma._pack("COPY_LINEAR", V44, count=sdma.copy_max_bytes((5, 2)) - 1)


@FAST
@given(addr4, u32, u32, u32, st.sampled_from(list(PollFunction)), st.booleans())
def test_fence_poll_write_trap_v4(addr, value, ref, mask, func, hdp):
  assert sdma.fence(addr, value, version=V44) == [  # sdma_v4_4_2_ring_emit_fence: no mtype on SDMA 4
    S4.SDMA_PKT_FENCE_HEADER_OP(S4.SDMA_OP_FENCE), S4.SDMA_PKT_FENCE_ADDR_LO_ADDR_31_0(lo(addr)),
    S4.SDMA_PKT_FENCE_ADDR_HI_ADDR_63_32(hi(addr)), S4.SDMA_PKT_FENCE_DATA_DATA(value)]
  assert sdma.poll_regmem(addr, ref, mask, func, hdp_flush=hdp, version=V44) == [
    S4.SDMA_PKT_POLL_REGMEM_HEADER_OP(S4.SDMA_OP_POLL_REGMEM) | S4.SDMA_PKT_POLL_REGMEM_HEADER_HDP_FLUSH(int(hdp))
    | S4.SDMA_PKT_POLL_REGMEM_HEADER_FUNC(func) | S4.SDMA_PKT_POLL_REGMEM_HEADER_MEM_POLL(1),
    S4.SDMA_PKT_POLL_REGMEM_ADDR_LO_ADDR_31_0(lo(addr)), S4.SDMA_PKT_POLL_REGMEM_ADDR_HI_ADDR_63_32(hi(addr)),
    S4.SDMA_PKT_POLL_REGMEM_VALUE_VALUE(ref), S4.SDMA_PKT_POLL_REGMEM_MASK_MASK(mask),
    S4.SDMA_PKT_POLL_REGMEM_DW5_INTERVAL(4) | S4.SDMA_PKT_POLL_REGMEM_DW5_RETRY_COUNT(0xfff)]
  assert sdma.write_linear(addr, value, ref, version=V44) == [
    S4.SDMA_PKT_WRITE_UNTILED_HEADER_OP(S4.SDMA_OP_WRITE) | S4.SDMA_PKT_WRITE_UNTILED_HEADER_SUB_OP(S4.SDMA_SUBOP_WRITE_LINEAR),
    lo(addr), hi(addr), S4.SDMA_PKT_WRITE_UNTILED_DW_3_COUNT(1), value, ref]
  assert sdma.trap(value >> 4, version=V44) == [S4.SDMA_PKT_TRAP_HEADER_OP(S4.SDMA_OP_TRAP),
                                               S4.SDMA_PKT_TRAP_INT_CONTEXT_INT_CONTEXT(value >> 4)]
  assert sdma.const_fill(addr, value, 64, V44) == [
    S4.SDMA_PKT_CONSTANT_FILL_HEADER_OP(S4.SDMA_OP_CONST_FILL) | S4.SDMA_PKT_CONSTANT_FILL_HEADER_FILLSIZE(2),
    lo(addr), hi(addr), value, S4.SDMA_PKT_CONSTANT_FILL_COUNT_COUNT(63)]
  with pytest.raises(ValueError, match="mtype"): sdma.fence(addr, value, mtype=3, version=V44)


@FAST
@given(addr8)
def test_timestamps_v4(addr):
  assert sdma.timestamp(addr, version=V44) == [
    S4.SDMA_PKT_TIMESTAMP_GET_GLOBAL_HEADER_OP(S4.SDMA_OP_TIMESTAMP)
    | S4.SDMA_PKT_TIMESTAMP_GET_GLOBAL_HEADER_SUB_OP(S4.SDMA_SUBOP_TIMESTAMP_GET_GLOBAL),
    S4.SDMA_PKT_TIMESTAMP_GET_GLOBAL_WRITE_ADDR_LO_WRITE_ADDR_31_3(lo(addr) >> 3),
    S4.SDMA_PKT_TIMESTAMP_GET_GLOBAL_WRITE_ADDR_HI_WRITE_ADDR_63_32(hi(addr))]
  assert sdma.timestamp_set(addr, version=V44)[1:] == [lo(addr), hi(addr) & 0xffffffff]


def test_v4_layouts_follow_vega10_offsets():
  for lay in sdma.LAYOUTS_V4:
    assert lay.fields, lay.name
    assert not any(f.name in ("cpv", "mtype", "cache_policy") for f in lay.fields), lay.name
    for f in lay.fields:
      dw = next(d for d in lay.dwords if hasattr(S4, f"SDMA_PKT_{lay.name}_{d}_{f.name}_offset"))
      assert f.dword == lay.dwords.index(dw) == getattr(S4, f"SDMA_PKT_{lay.name}_{dw}_{f.name}_offset")


# ---- the queues with a fake CDNA3 backend

def backend(hdp=None):
  gc = ip_regs("gc", 9, 4, 3)
  return SimpleNamespace(gfx=9, sdma_version=V44, reg=lambda n: gc[n].addr(GC_BASE), gc=gc, scratch_for=lambda prg: (0, 0),
                         hdp_flush=hdp)


def program(arch="gfx942", name="copy"):
  co = load_code_object(kernels.path(arch, name).read_bytes(), arch)
  d = next(iter(co.kernels.values())).descriptor
  return SimpleNamespace(code_va=0x7000_0000_1000, rsrc1=d.compute_pgm_rsrc1, rsrc2=d.compute_pgm_rsrc2, rsrc3=d.compute_pgm_rsrc3,
                         wave32=d.wave32, user_sgprs=d.user_sgprs(), dispatch_offset=256)


def test_exec_emits_the_gfx9_forms():
  be, prg = backend(), program()
  assert not prg.wave32
  q = AMDComputeQueue(be).exec(prg, Var("kernargs"), (7, 2, 1), (64, 1, 1))
  q.patch({"kernargs": 0x12_3456_7800, **({"dispatch": 0x12_3456_7900} if "dispatch" in q.vars else {})})
  w = list(q.words())
  pk = pm4.decode_pm4(w, gen=9)
  assert all(not p.error for p in pk)
  assert pk[0].words == pm4.acquire_mem(gen=9) and pk[-1].words == pm4.event_write(Event.CS_PARTIAL_FLUSH, gen=9)
  names = {be.gc[n].addr(GC_BASE): n for n in be.gc.names() if be.gc[n].base_idx == 0}
  regs = {}
  for p in pk:
    if p.name == "SET_SH_REG":
      for i, v in enumerate(p.data): regs[names[p.fields["reg"] + i]] = v
  assert (regs["regCOMPUTE_PGM_HI"] << 40 | regs["regCOMPUTE_PGM_LO"] << 8) == prg.code_va
  assert (regs["regCOMPUTE_PGM_RSRC1"], regs["regCOMPUTE_PGM_RSRC2"], regs["regCOMPUTE_PGM_RSRC3"]) == (prg.rsrc1, prg.rsrc2, prg.rsrc3)
  assert [regs[f"regCOMPUTE_NUM_THREAD_{a}"] for a in "XYZ"] == [64, 1, 1]
  ka = next(at for n, at, _ in prg.user_sgprs if n == "user_sgpr_kernarg_segment_ptr")
  assert [regs[f"regCOMPUTE_USER_DATA_{ka}"], regs[f"regCOMPUTE_USER_DATA_{ka + 1}"]] == [0x3456_7800, 0x12]
  disp = next(p for p in pk if p.name == "DISPATCH_DIRECT")
  assert disp.words == pm4.dispatch_direct(7, 2, 1, pm4.dispatch_initiator(False, 9), gen=9)


def test_exec_refuses_wave32_kernels_on_gfx9():
  with pytest.raises(ValueError, match="wave64 only"):
    AMDComputeQueue(backend()).exec(program("gfx1100", "vadd"), 0x1000, (1, 1, 1), (32, 1, 1))


def test_signal_wait_timestamp_and_barrier_gfx9():
  sig = SimpleNamespace(va=0x5000_0040, timestamp_va=0x5000_0048, dev=None)
  flush = pm4.hdp_flush_regs(NBIO_BASE, 1, 0)
  q = AMDComputeQueue(backend(flush)).wait(sig, 41).memory_barrier().signal(sig, Var("v")).timestamp(sig)
  q.patch({"v": 1 << 33 | 5})
  assert list(q.words()) == (pm4.wait_reg_mem(sig.va, 41, function=WaitFunction.GREATER_EQUAL, gen=9)
                             + pm4.hdp_flush(*flush) + pm4.acquire_mem(gen=9)
                             + pm4.release_mem(sig.va, 1 << 33 | 5, DataSel.VALUE64, IntSel.INTERRUPT_AFTER_WRITE, gen=9)
                             + pm4.release_mem(sig.timestamp_va, data_sel=DataSel.TIMESTAMP, int_sel=IntSel.WAIT_WRITE_CONFIRM,
                                               event=Event.BOTTOM_OF_PIPE_TS, gcr=0, gen=9))   # a stamp, no flush
  assert [p.name for p in pm4.decode_pm4(q.words(), gen=9)] == ["WAIT_REG_MEM"] * 2 + ["ACQUIRE_MEM"] + ["RELEASE_MEM"] * 2
  # without hdp registers from the backend the barrier is the ACQUIRE_MEM alone
  assert list(AMDComputeQueue(backend()).memory_barrier().words()) == pm4.acquire_mem(gen=9)


def test_copy_queue_emits_sdma4():
  sig = SimpleNamespace(va=0x5000_0040, timestamp_va=0x5000_0048, narrow=False)
  q = AMDCopyQueue(backend()).wait(sig, 3).copy(0x1000, 0x9_0000_0000, 0x400000 + 100).signal(sig, 1 << 32 | 9).timestamp(sig)
  w = list(q.words())
  assert w == (sdma.poll_regmem(sig.va, 3, function=PollFunction.GREATER_EQUAL, version=V44)
               + sdma.copy_linear(0x1000, 0x9_0000_0000, 0x400000 + 100, V44) + sdma.fence(sig.va, 9, version=V44)
               + sdma.fence(sig.va + 4, 1, version=V44)   # the high dword of the 64-bit value
               + sdma.trap(version=V44) + sdma.nop(version=V44) + sdma.timestamp(sig.timestamp_va, version=V44))
  assert [p.name for p in sdma.decode_sdma(w, V44)] == ["POLL_REGMEM", "COPY_LINEAR", "COPY_LINEAR", "FENCE", "FENCE", "TRAP",
                                                       "NOP", "TIMESTAMP_GET_GLOBAL"]


class _HostOnlyIface:
  """Enough of an interface for AMDBackend's constructor: host memory for the kernarg ring."""
  def alloc(self, size: int, host: bool = False, uncached: bool = False):
    from types import SimpleNamespace
    return SimpleNamespace(va=0x1000_0000, cpu=memoryview(bytearray(size)))

  def flush_hdp(self) -> bool: return False   # no board behind it


def _gfx9_backend(ip_bases: dict):

  from rawgpu.hcq.amd.backend import AMDBackend
  props = SimpleNamespace(ip_versions={"gc": (9, 4, 3), "sdma": (4, 4, 2)}, ip_bases=ip_bases, vram_write_combined=False, apu=False)
  return AMDBackend(SimpleNamespace(props=props, iface=_HostOnlyIface()))


def test_backend_on_gc_9_4_3_flushes_hdp_and_decodes_gfx9_history():
  be = _gfx9_backend({"gc": GC_BASE, "nbio": NBIO_BASE})
  assert (be.gfx, be.sdma_version) == (9, (4, 4))
  assert be.hdp_flush == pm4.hdp_flush_regs(NBIO_BASE, 1, 0)
  barrier = be.compute_queue().memory_barrier().words()
  assert barrier == pm4.hdp_flush(*be.hdp_flush) + pm4.acquire_mem(gen=9)
  ring = SimpleNamespace(recent=lambda: [barrier])
  text = be.describe_history({"compute": ring, "sdma": SimpleNamespace(recent=lambda: [sdma.fence(0x2000, 1, version=V44)])})
  assert "ACQUIRE_MEM" in text and "too short" not in text and "FENCE" in text


def test_backend_on_gfx9_without_nbio_base_is_a_clear_error():
  with pytest.raises(RawGPUError, match="NBIO register base"): _gfx9_backend({"gc": GC_BASE})


def test_gfx9_scratch_waves_split_evenly_over_the_xcc_s_engines():
  """gfx9's WAVES counts the XCC's slots, which its shader engines share: ROCr asserts it divides by their number.
  An MI300 XCC (38 CUs, 4 engines) with 64 KiB per lane halves its slots to 38 under the budget: 36 are used."""
  from rawgpu.hcq.amd.backend import AMDBackend
  gc = ip_regs("gc", 9, 4, 3)
  be = SimpleNamespace(gfx=9, gc=gc, _scratch=None, _retired_scratch=[],
                       dev=SimpleNamespace(alloc=lambda n: SimpleNamespace(size=n, va=0x7000_0000), props=SimpleNamespace(shader_engines=4, compute_units=38)))
  tmpring, _ = AMDBackend.scratch_for(be, SimpleNamespace(scratch=64 << 10, wave32=False))
  assert gc["regCOMPUTE_TMPRING_SIZE"].decode(tmpring)["WAVES"] == 36


@pytest.mark.parametrize("ver,unit,per_se", [((9, 4, 3), 1024, False), ((11, 0, 0), 256, True), ((12, 0, 1), 256, True)],
                         ids=["gfx9", "gfx11", "gfx12"])
def test_scratch_wave_size_counts_the_generation_s_units(ver, unit, per_se):
  """COMPUTE_TMPRING_SIZE.WAVESIZE counts 1 KiB units on gfx9 and 256 bytes on gfx11+ (LLVM's SPI_TMPRING_SIZE tests:
  private size * lanes aligned to 1024 before gfx11, to 256 after). WAVES counts the slots of the whole queue on gfx9
  and of each shader engine on gfx11+ (Mesa's radv_emit_compute_scratch divides by the SE count): the buffer holds
  WAVES slots (times the engines) of that size."""
  from rawgpu.hcq.amd.backend import AMDBackend, SCRATCH_BUDGET
  gc, allocs = ip_regs("gc", *ver), []
  def alloc(n):
    allocs.append(n)
    return SimpleNamespace(size=n, va=0x7000_0000, free=lambda: None)
  def scratch(private: int):
    be = SimpleNamespace(gfx=ver[0], gc=gc, _scratch=None, _retired_scratch=[],
                         dev=SimpleNamespace(alloc=alloc, props=SimpleNamespace(shader_engines=6, compute_units=96)))
    tmpring, va = AMDBackend.scratch_for(be, SimpleNamespace(scratch=private, wave32=False))   # wave64
    f = gc["regCOMPUTE_TMPRING_SIZE"].decode(tmpring)
    assert va == 0x7000_0000 and (f["WAVESIZE"] - 1) * unit < private * 64 <= f["WAVESIZE"] * unit
    slots = f["WAVES"] * (6 if per_se else 1)
    if not per_se: assert f["WAVES"] % 6 == 0   # gfx9: the XCC's slots split evenly over its engines (ROCr asserts it)
    assert allocs[-1] == slots * f["WAVESIZE"] * unit
    return slots
  assert 32 * 96 <= scratch(100) < 32 * 96 + 6              # 32 waves per CU (ROCr's MaxSlotsScratchCU, Mesa)
  big = scratch(64 << 10)                                   # 4 MiB a wave: fewer slots, within the budget...
  per_engine = big // (6 if per_se else 1)
  assert big < 32 * 96 and per_engine >= 16                 # ...but an engine holds a 1024-thread wave64 workgroup
  assert allocs[-1] <= SCRATCH_BUDGET + 6 * (4 << 20) or per_engine == 16


# ---- the CDNA3 dispatch hcq encodes, run on the emulator's compute units (no board models gfx942: this test reads the
# registers out of the packets as a command processor would, and runs the dispatch they describe)

def _dispatch_of(be, words, arch="gfx942"):
  from rawgpu.drivers.emu.shader import DispatchRegs
  names = {be.gc[n].addr(GC_BASE): n for n in be.gc.names() if be.gc[n].base_idx == 0}
  regs, disp = {}, None
  for p in pm4.decode_pm4(words, gen=9):
    assert not p.error, p
    if p.name == "SET_SH_REG":
      for i, v in enumerate(p.data): regs[names[p.fields["reg"] + i]] = v
    if p.name == "DISPATCH_DIRECT": disp = p.words[1:5]
  return DispatchRegs(arch=arch, pgm_addr=regs["regCOMPUTE_PGM_HI"] << 40 | regs["regCOMPUTE_PGM_LO"] << 8,
                      rsrc1=regs["regCOMPUTE_PGM_RSRC1"], rsrc2=regs["regCOMPUTE_PGM_RSRC2"], rsrc3=regs["regCOMPUTE_PGM_RSRC3"],
                      user_data=[regs.get(f"regCOMPUTE_USER_DATA_{k}", 0) for k in range(16)],
                      num_thread=tuple(regs[f"regCOMPUTE_NUM_THREAD_{a}"] for a in "XYZ"), grid=tuple(disp[:3]),
                      dispatch_initiator=disp[3], tmpring_size=regs.get("regCOMPUTE_TMPRING_SIZE", 0),
                      scratch_base=(regs.get("regCOMPUTE_DISPATCH_SCRATCH_BASE_HI", 0) << 32 | regs.get("regCOMPUTE_DISPATCH_SCRATCH_BASE_LO", 0)) << 8)


@pytest.mark.parametrize("obj,name", [("copy", "copy_u32"), ("scratch", "scratch_u32")])
def test_gfx9_dispatch_runs_on_the_emulated_compute_units(obj, name):
  """hcq's gfx942 launch (program address, RSRC1-3, user SGPRs, workgroup size, grid, initiator, and for a kernel with
  private memory the backend's COMPUTE_TMPRING_SIZE) runs the kernel as numpy expects."""
  import numpy as np
  from rawgpu.drivers.emu.shader import FlatMemory, run_dispatch
  from rawgpu.hcq.amd.backend import AMDBackend
  base, n = 0x7000_0000_0000, 1000
  co = load_code_object(kernels.path("gfx942", obj).read_bytes(), "gfx942")
  k = co.kernels[name]
  d = k.descriptor
  mem = FlatMemory(1 << 22, base)
  mem.write(base, co.image_at(base))
  scratch = base + 0x200000
  be = backend()
  be._scratch, be._retired_scratch, be.dev = None, [], SimpleNamespace(alloc=lambda size: SimpleNamespace(size=size, va=scratch, free=lambda: None),
                                              props=SimpleNamespace(shader_engines=4, compute_units=38))
  be.scratch_for = lambda p: AMDBackend.scratch_for(be, p)
  prg = SimpleNamespace(code_va=base + k.code_offset, rsrc1=d.compute_pgm_rsrc1, rsrc2=d.compute_pgm_rsrc2, rsrc3=d.compute_pgm_rsrc3,
                        wave32=d.wave32, user_sgprs=d.user_sgprs(), dispatch_offset=256, scratch=k.meta.private_segment_fixed_size,
                        group_segment_size=k.meta.group_segment_fixed_size)
  src, dst, ka = base + 0x100000, base + 0x110000, base + 0x120000
  data = np.arange(1024, dtype=np.uint32) * 3 + 1
  mem.write(src, data.tobytes())
  karg = bytearray(k.meta.kernarg_segment_size)
  explicit = [src, dst, n] if obj == "copy" else [dst, 5, n]   # copy_u32(src, dst, n), scratch_u32(out, k, n)
  hidden = {"hidden_block_count_x": 4, "hidden_block_count_y": 1, "hidden_block_count_z": 1, "hidden_group_size_x": 256,
            "hidden_group_size_y": 1, "hidden_group_size_z": 1, "hidden_grid_dims": 1}
  for a in k.meta.args:
    v = hidden.get(a.value_kind, 0) if a.hidden else explicit.pop(0)
    karg[a.offset:a.offset + a.size] = v.to_bytes(a.size, "little")
  mem.write(ka, bytes(karg))
  q = AMDComputeQueue(be).exec(prg, Var("kernargs"), (4, 1, 1), (256, 1, 1))
  q.patch({"kernargs": ka, **({"dispatch": ka + 256} if "dispatch" in q.vars else {})})
  res = run_dispatch(mem, _dispatch_of(be, list(q.words())))
  assert res.ok, res.fault
  out = np.frombuffer(mem.read(dst, 4096), np.uint32)
  i = np.arange(1024)
  want = data if obj == "copy" else ((i * 7 + 5) & 63) ** 2 + 5
  assert (out[:n] == want[:n]).all() and (out[n:] == 0).all()
