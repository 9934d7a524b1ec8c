"""The emulated MEC against public facts about packet and register fields: how a dispatch's dims, start and
workgroup size make its grid, chained indirect buffers, DMA_DATA's byte count and destinations, and the RELEASE_MEM /
ACQUIRE_MEM forms it refuses.

Field positions: Mesa's src/amd/registers/pkt3.json (IB_CONTROL, DMA_DATA_WORD0_gfx9, COMMAND_gfx9), radv's
radv_cmd_buffer.c (dispatch dims), kfd_pm4_headers_ai.h (RELEASE_MEM) and the gc sh_mask headers.
"""
from __future__ import annotations
import struct, types
import pytest
from test_emu_amd_common import ComputeRing, d, Dev, P, pkt3
from test_emu_amd_gmc import setup_ih
from test_emu_amd_cp import _dispatch_packets

DST = 0x580000                    # where store_ids writes


def hung(d) -> str | None: return d.board.gfx.queues[(1, 0, 0)].hung


def initiator(d, **fields) -> int: return d.tables["gc"]["regCOMPUTE_DISPATCH_INITIATOR"].encode(**fields)


def sh(d, P, name: str, vals: list[int]) -> list[int]:
  return pkt3(P["PACKET3_SET_SH_REG"], [d.addr("gc", name) - P["PACKET3_SET_SH_REG_START"]] + vals)


def store_ids(d, q, P, dim_x: int, init: int = 0, num_thread: tuple = (64, 1, 1), start_x: int = 0) -> list[int]:
  """kernels/store_ids (dst[group_x * 64 + thread_x] = 1000 + thread_x) launched by DISPATCH_DIRECT(dim_x, 1, 1)."""
  pk = _dispatch_packets(d, q, P, "store_ids", struct.pack("<QII", q.mc(DST), 64, 1000))
  base = pk[-1]                   # the helper's initiator: COMPUTE_SHADER_EN, CS_W32_EN for a wave32 kernel
  pk = pk[:-5] + sh(d, P, "regCOMPUTE_START_X", [start_x, 0, 0]) + sh(d, P, "regCOMPUTE_NUM_THREAD_X", list(num_thread))
  return pk + pkt3(P["PACKET3_DISPATCH_DIRECT"], [dim_x, 1, 1, base | init])


def written(d, n: int) -> list[int]: return list(struct.unpack(f"<{n}I", d.vram.readbytes(DST, 4 * n)))


def ids(lanes: range, n: int) -> list[int]:
  """What store_ids leaves in n dwords when exactly `lanes` ran (64-thread groups)."""
  return [1000 + i % 64 if i in lanes else 0 for i in range(n)]


def run_store_ids(d, P, dim_x: int, **kw) -> None:
  pytest.importorskip("elftools")
  q = ComputeRing(d)
  q.submit(store_ids(d, q, P, dim_x, **kw))
  q.run()


# ---- the dispatch grid
def test_use_thread_dimensions_dims_count_threads_once(d, P):
  """USE_THREAD_DIMENSIONS: the packet's dims are threads (radv: "blocks is already in thread dimensions"): 200
  threads in groups of 64 are four groups, the last one of 8 threads."""
  run_store_ids(d, P, 200, init=initiator(d, USE_THREAD_DIMENSIONS=1))
  assert hung(d) is None and written(d, 256) == ids(range(200), 256)


def test_use_thread_dimensions_runs_every_lane_of_full_groups(d, P):
  run_store_ids(d, P, 256, init=initiator(d, USE_THREAD_DIMENSIONS=1))
  assert hung(d) is None and written(d, 320) == ids(range(256), 320)


def test_a_start_makes_the_dims_end_values(d, P):
  """COMPUTE_START_X 2 without FORCE_START_AT_000: dims 5 run groups 2, 3 and 4 (radv: "The blocks in the packet
  are not counts but end values")."""
  run_store_ids(d, P, 5, start_x=2)
  assert hung(d) is None and written(d, 448) == ids(range(128, 320), 448)


def test_force_start_at_000_ignores_the_start_registers(d, P):
  run_store_ids(d, P, 3, start_x=2, init=initiator(d, FORCE_START_AT_000=1))
  assert hung(d) is None and written(d, 320) == ids(range(192), 320)


def test_gfx12_num_thread_full_is_bits_12_to_0(P):
  """gc_12_0_0_sh_mask.h: NUM_THREAD_FULL [12:0], INTERLEAVE_BITS_X [15:13]: a group of 64 with interleave bits set
  is still 64 threads."""
  d = Dev("gfx1201", firmware="loaded")
  try:
    run_store_ids(d, P, 2, num_thread=(64 | (1 << 13), 1, 1))
    assert hung(d) is None and written(d, 256) == ids(range(128), 256)
  finally: d.close()


def test_partial_tg_en_gives_the_last_group_num_thread_partial(d, P):
  """PARTIAL_TG_EN (radv's unaligned direct dispatch): the last group of X has NUM_THREAD_PARTIAL (8) threads; Y and
  Z, one thread wide, have a partial count of one (radv: the whole group where the size is aligned)."""
  run_store_ids(d, P, 3, num_thread=(64 | (8 << 16), 1 | (1 << 16), 1 | (1 << 16)), init=initiator(d, PARTIAL_TG_EN=1))
  assert hung(d) is None and written(d, 256) == ids(range(136), 256)


def test_partial_tg_en_with_no_partial_threads_is_refused(d, P):
  """NUM_THREAD_PARTIAL 0 (radv: "these should be an entire block size, not 0"): what the hardware does is not
  public, so the queue halts saying so and no wave runs."""
  run_store_ids(d, P, 3, num_thread=(64, 1 | (1 << 16), 1 | (1 << 16)), init=initiator(d, PARTIAL_TG_EN=1))
  assert "not modelled" in (hung(d) or "") and "NUM_THREAD_X.NUM_THREAD_PARTIAL 0" in hung(d) and written(d, 256) == [0] * 256


# ---- INDIRECT_BUFFER CHAIN
def write(q, P, off: int, v: int) -> list[int]:
  a = q.mc(off)
  return pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, a & 0xffffffff, a >> 32, v])


def ib(q, P, off: int, n: int, chain: bool = False) -> list[int]:
  a = q.mc(off)
  return pkt3(P["PACKET3_INDIRECT_BUFFER"], [a & 0xfffffffc, a >> 32, n | (1 << 23) | (chain << 20)])


def put(d, off: int, words: list[int]) -> None: d.vram.writebytes(off, struct.pack(f"<{len(words)}I", *words))


def test_a_chained_ib_replaces_the_current_one(d, P):
  """IB_CONTROL.CHAIN: ring -> IB1 -> IB2 -> IB3, each chaining to the next, keeps one IB level (no "nested too
  deep"); what follows a CHAIN in its IB never runs, and the ring goes on after the last IB."""
  q = ComputeRing(d)
  ib1, ib2, ib3, out = 0x590000, 0x591000, 0x592000, 0x593000
  three = write(q, P, out + 8, 3)
  two = write(q, P, out + 4, 2) + ib(q, P, ib3, len(three), chain=True)
  one = write(q, P, out, 1) + ib(q, P, ib2, len(two), chain=True) + write(q, P, out + 12, 4)   # the last must not run
  for off, words in ((ib1, one), (ib2, two), (ib3, three)): put(d, off, words)
  q.submit(ib(q, P, ib1, len(one)) + write(q, P, out + 16, 5))
  q.run()
  assert hung(d) is None, hung(d)
  assert [d.vram.read32(out + 4 * i) for i in range(5)] == [1, 2, 3, 0, 5]


def test_an_ib_without_valid_halts_the_queue(d, P):
  """IB_CONTROL.VALID (bit 23) clear: what the CP does is not public (every IB Mesa and amdgpu send sets it)."""
  q = ComputeRing(d)
  put(d, 0x590000, write(q, P, 0x593000, 1))
  a = q.mc(0x590000)
  q.submit(pkt3(P["PACKET3_INDIRECT_BUFFER"], [a & 0xfffffffc, a >> 32, 5]) + write(q, P, 0x593004, 2))
  q.run()
  assert "VALID" in (hung(d) or "") and "not modelled" in hung(d) and d.vram.read32(0x593000) == d.vram.read32(0x593004) == 0


def test_a_chain_in_the_ring_halts_the_queue(d, P):
  """What CHAIN does outside an IB is not public: the queue halts saying so."""
  q = ComputeRing(d)
  put(d, 0x590000, write(q, P, 0x593000, 1))
  q.submit(ib(q, P, 0x590000, 5, chain=True))
  q.run()
  assert "CHAIN" in (hung(d) or "") and d.vram.read32(0x593000) == 0


# ---- DMA_DATA
class Queue:
  """What the DMA_DATA, ACQUIRE_MEM handlers use of a queue: its memory (a flat VA space here) and generation."""
  def __init__(self, gfx9: bool, size: int = 8 << 20):
    self.gfx, self.mem = types.SimpleNamespace(gfx9=gfx9), bytearray(size)
  def mem_read(self, a: int, n: int) -> bytes: return bytes(self.mem[a:a + n])
  def mem_write(self, a: int, data: bytes) -> None: self.mem[a:a + len(data)] = data


@pytest.mark.parametrize("gfx9", [True, False], ids=["gfx942", "gfx11+"])
def test_dma_data_byte_count_is_26_bits(gfx9):
  """COMMAND_gfx9 (pkt3.json, gfx9 and gfx940 to gfx12; radv's S_415_BYTE_COUNT_GFX9): BYTE_COUNT [25:0], so a fill
  and a copy of 2 MiB + 4096 bytes (bit 21 set) move every byte and no more."""
  from rawgpu.drivers.emu.amd import pm4
  n, src, dst, fill = (2 << 20) + 4096, 0x10, 0x280000, 0x500000
  q = Queue(gfx9)
  pattern = bytes(range(256)) * (n // 256)
  q.mem_write(src, pattern)
  assert pm4.dma_data(q, [0, src, 0, dst, 0, n]) and q.mem_read(dst, n + 4) == pattern + bytes(4)
  assert pm4.dma_data(q, [2 << 29, 0xa5a5a5a5, 0, fill, 0, n]) and q.mem_read(fill, n + 4) == b"\xa5" * n + bytes(4)


def test_dma_data_to_nowhere_writes_nothing(d, P):
  """DST_SEL NOWHERE (2): radv's CP DMA prefetch; the destination address is left as it was."""
  q = ComputeRing(d)
  src, dst = q.mc(0x322000), q.mc(0x322100)
  d.vram.writebytes(0x322000, bytes(range(64)))
  q.submit(pkt3(P["PACKET3_DMA_DATA"], [2 << 20, src & 0xffffffff, src >> 32, dst & 0xffffffff, dst >> 32, 64]))
  q.run()
  assert hung(d) is None and d.vram.readbytes(0x322100, 64) == bytes(64) and q.hqd("regCP_HQD_PQ_RPTR") == 7


def test_dma_data_to_gds_halts_the_queue(d, P):
  q = ComputeRing(d)
  q.submit(pkt3(P["PACKET3_DMA_DATA"], [(1 << 20) | (2 << 29), 0x1234, 0, 0, 0, 64]))
  q.run()
  assert "GDS" in (hung(d) or "") and "not modelled" in hung(d) and q.hqd("regCP_HQD_PQ_RPTR") == 0


# ---- RELEASE_MEM and ACQUIRE_MEM
def release(q, P, dw2: int, addr: int, n: int = 7) -> list[int]:
  a = q.mc(addr)
  return pkt3(P["PACKET3_RELEASE_MEM"], [0x14 | (5 << 8), dw2, a & 0xffffffff, a >> 32, 0x1111, 0x2222, 0x77][:n])


@pytest.mark.parametrize("dst_sel", [2, 3])
def test_release_mem_to_the_write_pointer_halts_the_queue(d, P, dst_sel):
  """DST_SEL 2/3 (kfd_pm4_headers_ai.h: queue write pointer register / poll mask bit) are not modelled: no memory
  write, the queue halts saying so."""
  q = ComputeRing(d)
  q.submit(release(q, P, (1 << 29) | (dst_sel << 16), 0x325000))
  q.run()
  assert f"dst_sel {dst_sel}" in (hung(d) or "") and "not modelled" in hung(d) and d.vram.read32(0x325000) == 0


def test_release_mem_int_sel_4_interrupts_unconditionally(d, P):
  """INT_SEL 4 (unconditionally send int ctxid) with DATA_SEL 0: the EOP interrupt carries the context id."""
  ring, wb = setup_ih(d)
  q = ComputeRing(d)
  d.wr("gc", "regCP_ME1_PIPE0_INT_CNTL", TIME_STAMP_INT_ENABLE=1)
  q.submit(release(q, P, 4 << 24, 0x325000))
  q.run()
  e = struct.unpack_from("<8I", d.vram.mem, ring)
  assert hung(d) is None and (e[0] >> 8) & 0xff == 181 and e[4] == 0x77 and d.vram.read32(0x325000) == 0


@pytest.mark.parametrize("int_sel,data_sel", [(4, 1), (5, 0), (6, 0)])
def test_release_mem_interrupt_forms_not_public_halt_the_queue(d, P, int_sel, data_sel):
  """INT_SEL 5/6 interrupt after a compare, and whether INT_SEL 4 writes data first, are not public: halt."""
  q = ComputeRing(d)
  q.submit(release(q, P, (data_sel << 29) | (int_sel << 24), 0x325000))
  q.run()
  assert f"int_sel {int_sel}" in (hung(d) or "") and "not modelled" in hung(d) and d.vram.read32(0x325000) == 0


def test_a_release_mem_of_another_size_is_malformed(d, P):
  """The MEC's RELEASE_MEM is PACKET3(RELEASE_MEM, 6) (gfx_v9_4_3/v11/v12 fences): a shorter one halts the queue."""
  q = ComputeRing(d)
  q.submit(release(q, P, 1 << 29, 0x325000, n=6))
  q.run()
  assert "malformed RELEASE_MEM" in (hung(d) or "") and d.vram.read32(0x325000) == 0


def test_acquire_mem_is_seven_body_dwords_from_gfx10(d, P):
  """PACKET3(ACQUIRE_MEM, 6) from gfx10 on (gfx_v11_0/v12_0: GCR_CNTL last); the gfx9 form, one shorter, halts."""
  q = ComputeRing(d)
  q.submit(pkt3(P["PACKET3_ACQUIRE_MEM"], [0, 0xffffffff, 0xffffff, 0, 0, 0xa, 0]))
  q.run()
  assert hung(d) is None and q.hqd("regCP_HQD_PQ_RPTR") == 8
  q.submit(pkt3(P["PACKET3_ACQUIRE_MEM"], [0, 0xffffffff, 0xffffff, 0, 0, 0xa]))
  q.run()
  assert "malformed ACQUIRE_MEM" in (hung(d) or "") and q.hqd("regCP_HQD_PQ_RPTR") == 8


def test_gfx9_acquire_mem_is_six_body_dwords():
  """gfx_v9_4_3: PACKET3(ACQUIRE_MEM, 5), no GCR_CNTL dword; the gfx10+ form is malformed there."""
  from rawgpu.drivers.emu.amd import pm4
  q = Queue(gfx9=True, size=0)
  assert pm4.acquire_mem(q, [0, 0xffffffff, 0xffffff, 0, 0, 0xa])
  with pytest.raises(pm4.BadPacket, match="malformed ACQUIRE_MEM"): pm4.acquire_mem(q, [0, 0xffffffff, 0xffffff, 0, 0, 0xa, 0])


@pytest.mark.parametrize("what,body_of", [
  ("COPY_DATA src_sel 4", lambda P, a: pkt3(P["PACKET3_COPY_DATA"], [4 | (5 << 8), 0, 0, a & 0xffffffff, a >> 32])),          # perf counters
  ("WRITE_DATA dst_sel 3", lambda P, a: pkt3(P["PACKET3_WRITE_DATA"], [3 << 8, a & 0xffffffff, a >> 32, 1])),                 # GDS
  ("CS_PARTIAL_FLUSH with EVENT_INDEX 0", lambda P, a: pkt3(P["PACKET3_EVENT_WRITE"], [7])),                          # nvd.h: index 4
  ("WAIT_REG_MEM function 7", lambda P, a: pkt3(P["PACKET3_WAIT_REG_MEM"], [7 | (1 << 4), a & 0xfffffffc, a >> 32, 0, ~0 & 0xffffffff, 4]))])
def test_field_values_the_model_lacks_stop_the_queue_and_say_so(d, P, what, body_of):
  """A field value whose effect the model does not know stops the queue with no write, and the board names it."""
  q = ComputeRing(d)
  a = q.mc(0x326000)
  q.submit(body_of(P, a) + write(q, P, 0x326100, 7))
  q.run()
  assert f"{what}" in (hung(d) or "") and "not modelled" in hung(d) and d.vram.read32(0x326100) == 0
  assert len(d.board.unmodelled) == 1 and what in d.board.unmodelled[0]


# ---- COND_EXEC (radv_emit_cond_exec, amdgpu's init_cond_exec: skip `count` dwords when the dword at addr is 0)
def cond_exec(q, P, off: int, count: int, third: int = 0) -> list[int]:
  a = q.mc(off)
  return pkt3(P["PACKET3_COND_EXEC"], [a & 0xffffffff, a >> 32, third, count])


@pytest.mark.parametrize("cond,want", [(0, [0, 2]), (1, [1, 2])])
def test_cond_exec_skips_the_next_dwords_when_its_dword_is_zero(d, P, cond, want):
  """As radv's MEC predication uses it: COND_EXEC over a 5-dword WRITE_DATA; the packet after always runs."""
  q = ComputeRing(d)
  d.vram.write32(0x594000, cond)
  q.submit(cond_exec(q, P, 0x594000, 5) + write(q, P, 0x593000, 1) + write(q, P, 0x593004, 2))
  q.run()
  assert hung(d) is None and [d.vram.read32(0x593000 + 4 * i) for i in range(2)] == want


def test_cond_exec_in_an_ib_and_past_its_end(d, P):
  """Inside an IB the skip stays in the IB; one that would run past the IB's end is not modelled (the queue stops)."""
  q = ComputeRing(d)
  inner = cond_exec(q, P, 0x594000, 5) + write(q, P, 0x593000, 1) + write(q, P, 0x593004, 2)
  put(d, 0x590000, inner)
  q.submit(ib(q, P, 0x590000, len(inner)) + write(q, P, 0x593008, 3))
  q.run()
  assert hung(d) is None and [d.vram.read32(0x593000 + 4 * i) for i in range(3)] == [0, 2, 3]
  last = cond_exec(q, P, 0x594000, 5)                      # the IB ends right after it
  put(d, 0x591000, last)
  q.submit(ib(q, P, 0x591000, len(last)) + write(q, P, 0x59300c, 4))
  q.run()
  assert "COND_EXEC" in (hung(d) or "") and "not modelled" in hung(d) and d.vram.read32(0x59300c) == 0


def test_cond_exec_forms_not_public_stop_the_queue(d, P):
  q = ComputeRing(d)
  q.submit(cond_exec(q, P, 0x594000, 5, third=1) + write(q, P, 0x593000, 1))
  q.run()
  assert "third dword" in (hung(d) or "") and "not modelled" in hung(d) and d.vram.read32(0x593000) == 0


def test_cond_exec_in_the_ring_skips_dwords_written_later(d, P):
  """The dwords to skip need not be written yet: the CP skips what is there and the rest as the host writes it."""
  q = ComputeRing(d)
  skipped = write(q, P, 0x593000, 1)
  q.submit(cond_exec(q, P, 0x594000, 5) + skipped[:2])
  q.run()
  q.submit(skipped[2:] + write(q, P, 0x593004, 2))
  q.run()
  assert hung(d) is None and [d.vram.read32(0x593000 + 4 * i) for i in range(2)] == [0, 2]


# ---- ATOMIC_MEM (Mesa's sid.h: ATOMIC_OP [6:0], ATOMIC_COMMAND [9:8]; radv's perf-counter lock loops on CMPSWAP_32)
def atomic(q, P, off: int, op: int, cmd: int, data: int, cmp: int = 0) -> list[int]:
  a = q.mc(off)
  return pkt3(P["PACKET3_ATOMIC_MEM"], [op | (cmd << 8), a & 0xffffffff, a >> 32, data & 0xffffffff, data >> 32, cmp & 0xffffffff, cmp >> 32, 10])


def test_atomic_mem_ops(d, P):
  """SUB_RTN_32 (16), SUB_64 (112), XOR_64 (119), and CMPSWAP_32 (72) that does not swap when the compare fails."""
  q = ComputeRing(d)
  d.vram.writebytes(0x595000, struct.pack("<IIQQI", 10, 0, 1 << 40, 0xff00, 7))
  q.submit(atomic(q, P, 0x595000, 16, 0, 3) + atomic(q, P, 0x595008, 112, 3, 5) + atomic(q, P, 0x595010, 119, 2, 0x0ff0)
           + atomic(q, P, 0x595018, 72, 0, 9, cmp=6) + write(q, P, 0x59501c, 1))
  q.run()
  assert hung(d) is None
  assert struct.unpack("<IIQQII", d.vram.readbytes(0x595000, 32)) == (7, 0, (1 << 40) - 5, 0xf0f0, 7, 1)


def test_atomic_mem_loop_waits_until_the_swap_happens(d, P):
  """CMPSWAP_32 with COMMAND LOOP (radv's lock: 0 -> 1) holds the queue while the dword is not the compare value."""
  q = ComputeRing(d)
  d.vram.write32(0x595100, 1)                              # held
  q.submit(atomic(q, P, 0x595100, 72, 1, 1, cmp=0) + write(q, P, 0x595104, 5))
  q.run()
  assert d.vram.read32(0x595104) == 0 and hung(d) is None
  d.vram.write32(0x595100, 0)                              # released
  d.board.run_until_idle()
  assert d.vram.read32(0x595100) == 1 and d.vram.read32(0x595104) == 5


@pytest.mark.parametrize("op,cmd", [(72, 3), (112, 1), (5, 0)])
def test_atomic_mem_forms_not_public_stop_the_queue(d, P, op, cmd):
  """An _RTN op without a returning command, LOOP on an op that cannot fail, an opcode sid.h does not name."""
  q = ComputeRing(d)
  q.submit(atomic(q, P, 0x595200, op, cmd, 1) + write(q, P, 0x595204, 1))
  q.run()
  assert "ATOMIC_MEM" in (hung(d) or "") and "not modelled" in hung(d) and d.vram.read32(0x595204) == 0
