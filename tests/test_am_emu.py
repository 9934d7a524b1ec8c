"""AM on the emulated board as it is (its own PSP, SMU, GFX, SDMA models; no stand-ins): the same code DEV=PCI+AMD runs."""
from __future__ import annotations
import tempfile, time
import pytest
from rawgpu.autogen.amd import pm4, sdma_v6
from rawgpu.drivers.am import AMIface
from rawgpu.errors import DeviceFault, DeviceTimeout, FirmwareError

FAST = dict(timeout_scale=1.0, reset_wait_s=0.0)
SHORT = dict(timeout_scale=0.05, reset_wait_s=0.0)   # for waits that are meant to time out


@pytest.fixture(autouse=True)
def private_locks(tmp_path, monkeypatch):
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture(params=["gfx1100", "gfx1201"])
def board(request, firmware_dir, monkeypatch):
  from rawgpu.drivers.emu.pcibus import VirtualBus
  from rawgpu.drivers.emu.amd.board import AMDBoard
  if not {"psp", "smu"} <= {a for _, _, a in AMDBoard.BLOCKS}: pytest.skip("the emulated board has no PSP/SMU model yet")
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", firmware_dir)
  monkeypatch.delenv("RAWGPU_AM_RESET", raising=False)
  vb = VirtualBus()
  b = AMDBoard(arch=request.param, host=vb.host)
  bus = vb.plug(b)
  yield vb, bus, b
  b.close()


def _wait(cond, what, timeout=10.0):
  end = time.time() + timeout
  while not cond():
    if time.time() > end: raise AssertionError(f"timed out: {what}")
    time.sleep(0.001)


def _run_rings(it):
  c = it.create_ring("compute", 0x1000)
  words = [pm4.PACKET3(pm4.PACKET3_NOP, 2), 0, 0, 0] * 8
  for i, w in enumerate(words): c.ring.cpu.write(4 * i, w)
  c.write_ptr[0] = len(words); c.before_doorbell(); c.doorbell[0] = len(words)
  s = it.create_ring("sdma", 0x1000)
  for i in range(16): s.ring.cpu.write(4 * i, sdma_v6.SDMA_OP_NOP)
  s.write_ptr[0] = 64; s.before_doorbell(); s.doorbell[0] = 64
  _wait(lambda: c.read_ptr[0] == len(words), "compute ring consumed")
  _wait(lambda: s.read_ptr[0] == 64, "sdma ring consumed")


def test_cold_then_warm_boot(board):
  vb, bus, b = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    assert not it.dev.warm and it.props.arch == b.arch and it.props.ip_bases["gc"] == b.asic.ip(11).bases
    _run_rings(it)
  finally: it.close()
  it = AMIface(bus, vb.system, **FAST)
  try:
    assert it.dev.warm
    _run_rings(it)        # GFX and SDMA came back without the PSP
  finally: it.close()


def test_crashed_owner_gets_a_reset(board):
  """A process that died without fini leaves the MEC running: the next open resets (mode 1) and boots cold."""
  vb, bus, b = board
  it = AMIface(bus, vb.system, **FAST)
  _run_rings(it)
  it.dev.pci.close()                       # dies: the lock goes, no fini
  it2 = AMIface(bus, vb.system, **FAST)
  try:
    assert not it2.dev.warm
    _run_rings(it2)
  finally: it2.close()


def test_gpu_sees_cpu_writes(board):
  vb, bus, b = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    for m in (it.alloc(0x2000), it.alloc(4 << 20), it.alloc(0x3000, host=True)):
      m.cpu.write(m.size - 4, 0xc0ffee00 | (m.size & 0xff))
      assert b.gmc.gc.read32(0, m.va + m.size - 4) == 0xc0ffee00 | (m.size & 0xff)
  finally: it.close()


def test_an_alloc_that_cannot_map_gives_back_its_memory(board):
  """No VRAM page for a page table in the middle of an allocation: the VRAM or host pages it took and its VA are
  given back (a caching allocator frees and retries on MemoryError; a leak here would shrink the board each time)."""
  from rawgpu.drivers.am import mm
  vb, bus, b = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    d = it.dev
    def state(): return list(d.visible.free_list), list(mm.VA.free_list), vb.host.size - vb.host.next + sum(n for _, n in vb.host.free_list)
    take, failed = d.pt._alloc, 0
    def no_page() -> int: raise MemoryError("no VRAM page for a page table")
    for host in (False, True):
      for _ in range(600):   # 4 KiB allocations until one needs a new table (a new 2 MiB range of VA)
        before = state()
        d.pt._alloc = no_page
        try: it.alloc(mm.PAGE, host=host)
        except MemoryError:
          failed += 1
          assert state() == before
          break
        finally: d.pt._alloc = take
      else: pytest.fail("600 allocations never needed a new page table")
    assert failed == 2 and it.alloc(mm.PAGE).va   # and the board allocates again
  finally: it.close()


def test_fault_on_an_unmapped_address(board):
  vb, bus, b = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    m = it.alloc(0x1000)
    with pytest.raises(Exception): b.gmc.mm.read32(0, m.va + (1 << 24))
    with pytest.raises(DeviceFault, match=hex((m.va + (1 << 24)) & ~0xfff)): it.sleep(5)
    it.check_faults()
  finally: it.close()


def _flood_ih(b, extra: int) -> None:
  """More entries than the IH ring holds, from a source AM ignores, with AM not reading."""
  ring = b.ih.rings[0]
  for _ in range((4 << ring.cntl.decode(b.regs.vals[ring.a_cntl])["RB_SIZE"]) // 32 + extra): b.ih.post(client=0x1f, src=0xff)


def test_ih_overflow_resumes_and_still_reports_a_fault_whose_interrupt_was_overwritten(board):
  """A page fault, then more interrupts than the IH ring holds before AM reads any: the OSS writes on over the
  oldest entries and latches RB_OVERFLOW. AM resumes at the oldest entry left and clears the latch (ih_v6_0_get_wptr),
  and still reports the fault, from the status and address its hub latched; the ring works on afterwards."""
  vb, bus, b = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    m = it.alloc(0x1000)
    bad = m.va + (1 << 24)
    with pytest.raises(Exception): b.gmc.mm.read32(0, bad)            # the fault: latched in the MM hub, its entry posted
    ring = b.ih.rings[0]
    _flood_ih(b, 5)                                                     # ... and written over
    assert ring.overflows and b.regs.vals[ring.a_wptr] & 1
    with pytest.raises(DeviceFault, match=rf"VA {bad & ~0xfff:#x} \(read, interrupt lost to an IH ring overflow, hub MM"): it.check_faults()
    assert it.dev.ih.overflows == 1 and not b.regs.vals[ring.a_wptr] & 1   # the latch is cleared
    it.check_faults()                                                   # nothing left
    _flood_ih(b, 1)                                                     # an overflow without a fault reports nothing,
    ring_entries = (4 << ring.cntl.decode(b.regs.vals[ring.a_cntl])["RB_SIZE"]) // 32
    assert len(it.dev.ih.poll()) == ring_entries - 1                   # and reads on from the oldest entry left
    it.check_faults()
    assert it.dev.ih.overflows == 2
    with pytest.raises(Exception): b.gmc.mm.read32(0, bad + 0x2000)   # and a fault after it arrives as usual
    with pytest.raises(DeviceFault, match=rf"VA {(bad + 0x2000) & ~0xfff:#x} \(read, ring id"): it.check_faults()
  finally: it.close()


@pytest.mark.parametrize("kind,err", [("psp_timeout", DeviceTimeout), ("psp_error", FirmwareError), ("smu_timeout", DeviceTimeout),
                                      ("smu_error", DeviceFault)])
def test_injected_firmware_failures(board, kind, err):
  vb, bus, b = board
  b.inject(kind, **({"status": 0x12} if kind == "psp_error" else {"response": 0xff} if kind == "smu_error" else {}))
  with pytest.raises(err): AMIface(bus, vb.system, **SHORT)
  b.clear_faults()
  b.reset()                                 # what a power cycle does
  it = AMIface(bus, vb.system, **FAST)
  it.close()


def test_a_psp_that_leaves_a_status_on_commands_that_worked_still_boots(board):
  """amdgpu warns about a non-zero PSP status and goes on (psp_cmd_submit_buf: some PSP firmware leaves one); AM
  does too, and a kernel then runs on the board it booted."""
  vb, bus, b = board
  b.inject("psp_stale_status")
  it = AMIface(bus, vb.system, **FAST)
  try:
    assert it.dev.psp.rejected and len(it.dev.psp.rejected) == sum(1 for k, _, st in b.psp.log if k == "cmd" and st)
    ring = it.create_ring("compute", 0x1000)
    assert ring.kind == "compute"
  finally: it.close()


def test_vram_at_a_gpu_physical_offset(board):
  """A board whose VRAM starts at a GPU physical offset (MC_VM_FB_OFFSET, in both hubs, as an XGMI node's segment
  is): every PTE and every PDE names VRAM by that address (vram_base_offset, amdgpu_gmc_get_pde_for_bo), so the
  hub's walk reaches the tables and the kernel code, and a kernel's stores land in the buffer."""
  import numpy as np
  from rawgpu import kernels
  from rawgpu.hcq.device import Device
  vb, bus, b = board
  for hub in (b.gmc.gc, b.gmc.mm): b.regs.vals[hub.a_fb_off] = 0x40   # 1 GiB, in 16 MiB units
  dev = Device(iface=AMIface(bus, vb.system, **FAST))
  try:
    assert dev.iface.dev.gmc.vram_base_offset == 1 << 30
    buf = dev.alloc(4096)
    buf.copyin(np.arange(1024, dtype=np.uint32))
    dev.program(kernels.path(b.arch, "fill").read_bytes(), "fill_u32")(buf, 7, 16, global_size=(1, 1, 1), local_size=(16, 1, 1), wait=True)
    assert np.array_equal(buf.numpy(np.uint32), np.r_[np.full(16, 7), np.arange(16, 1024)].astype(np.uint32))
  finally: dev.close()


def _submit(ring, words):
  for i, w in enumerate(words): ring.ring.cpu.write(4 * i, w)
  ring.write_ptr[0] = len(words); ring.before_doorbell(); ring.doorbell[0] = len(words)


def test_bad_packet_names_the_queue_and_reopen_recovers(board):
  vb, bus, b = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    c = it.create_ring("compute", 0x1000)
    _submit(c, [pm4.PACKET3(0xee, 0), 0])                              # no such opcode
    with pytest.raises(DeviceFault, match="compute queue 0 .*bad opcode"): it.sleep(5000)
  finally: it.close()
  it = AMIface(bus, vb.system, **FAST)
  try: _run_rings(it)
  finally: it.close()


def test_compute_page_fault_names_the_address(board):
  vb, bus, b = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    c = it.create_ring("compute", 0x1000)
    bad = it.alloc(0x1000).va + (1 << 26)
    _submit(c, [pm4.PACKET3(pm4.PACKET3_WRITE_DATA, 3), pm4.WRITE_DATA_DST_SEL(5), bad & 0xffffffff, bad >> 32, 0x1234])
    with pytest.raises(DeviceFault, match=hex(bad & ~0xfff)): it.sleep(5000)
  finally: it.close()


def test_board_left_by_amdgpu_is_reset(board):
  """What the kernel driver leaves: sOS and SMU running, every image loaded; AM resets it (mode 1) and boots cold."""
  vb, bus, b = board
  if not hasattr(b, "preload_firmware"): pytest.skip("the emulated board cannot stage a previous driver's state")
  b.preload_firmware()
  it = AMIface(bus, vb.system, **FAST)
  try:
    assert not it.dev.warm and getattr(b, "mode1_resets", 0) == 1
    _run_rings(it)
  finally: it.close()


def test_quiet_unless_debug(board, capsys, monkeypatch):
  vb, bus, b = board
  monkeypatch.delenv("DEBUG", raising=False)
  AMIface(bus, vb.system, **FAST).close()
  assert capsys.readouterr().out == ""
  monkeypatch.setenv("DEBUG", "1")
  AMIface(bus, vb.system, **FAST).close()
  out = capsys.readouterr().out.splitlines()
  assert any("boot done (warm)" in ln for ln in out) and all(" ms" in ln and bus in ln for ln in out)


def test_mqd_matches_the_programmed_hqd(board):
  """The MQD in VRAM (generated v11/v12_compute_mqd layout) says what the HQD registers the board latched say."""
  import ctypes
  from rawgpu.autogen.amd import mqd_v11, mqd_v12
  from rawgpu.drivers.am.gfx import GFX
  vb, bus, b = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    it.create_ring("compute", 0x2000)
    q = it.dev.gfx.queues[(0, 0)]
    cls = mqd_v12.v12_compute_mqd if b.arch.startswith("gfx12") else mqd_v11.v11_compute_mqd
    m = cls.from_buffer_copy(bytes(b.vram[q.mqd:q.mqd + ctypes.sizeof(cls)]))
    bank = b.gfx.banks[(1, 0, 0)]
    for reg, fld in GFX.HQD_FROM_MQD: assert bank.get(b.regs.addr("gc", reg), 0) == getattr(m, fld), reg
    assert (m.cp_hqd_pq_base_hi << 32 | m.cp_hqd_pq_base_lo) << 8 == it.dev.gmc.mc(q.ring)
    # every shader engine's CUs take the queue's waves (kfd_mqd_manager_v11/v12.c init_mqd: SE0-7), Navi31's six too
    n_se = it.dev.disc.gc_info["gc_num_se"]
    assert n_se <= 8 and all(getattr(m, f"compute_static_thread_mgmt_se{se}") == 0xffffffff for se in range(8))
    assert m.compute_misc_reserved == 7                                   # gfx_v11_0/v12_0_compute_mqd_init
  finally: it.close()


def test_board_bound_to_amdgpu_is_refused(board, monkeypatch):
  import dataclasses
  from rawgpu.drivers import pci
  from rawgpu.errors import DeviceBusy
  vb, bus, b = board
  real = pci.info
  monkeypatch.setattr(pci, "info", lambda bus_, system=None: dataclasses.replace(real(bus_, system), driver="amdgpu"))
  with pytest.raises(DeviceBusy, match="bound to the kernel driver amdgpu"): AMIface(bus, vb.system, **FAST)
  monkeypatch.setattr(pci, "info", real)
  AMIface(bus, vb.system, **FAST).close()     # nothing was left held


def test_smu_metrics_of_a_held_board(board):
  """am-smi's reader, next to the owner (which holds the lock): the figures are the board SMU's own."""
  from rawgpu.drivers.am.metrics import SMUMetrics
  vb, bus, b = board
  src = SMUMetrics(vb.system)
  assert src.boards() == [bus]
  assert src.read(bus).unavailable is not None                        # nobody booted it yet: no driver table
  it = AMIface(bus, vb.system, **FAST)
  try:
    r = src.read(bus)
    assert r.unavailable is None and r.source == "smu" and r.vram_total == b.vram_size
    mod = it.dev.smu.driver_if()
    assert r.gfx_clock_mhz > 0 and r.mem_clock_mhz == b.smu.soft[mod.PPCLK_UCLK][1] and r.soc_clock_mhz == b.smu.soft[mod.PPCLK_SOCCLK][1]
    assert 0 <= r.gfx_activity <= 100 and r.temp_edge is not None
  finally: it.close()


def test_two_boards_share_one_va_space(firmware_dir, monkeypatch):
  from rawgpu.drivers.emu.pcibus import VirtualBus
  from rawgpu.drivers.emu.amd.board import AMDBoard
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", firmware_dir)
  vb = VirtualBus()
  boards = [AMDBoard(arch=a, host=vb.host) for a in ("gfx1100", "gfx1201")]
  its = [AMIface(vb.plug(b), vb.system, **FAST) for b in boards]
  try:
    mems = [(b, it.alloc(0x3000)) for b, it in zip(boards, its) for _ in range(3)]
    spans = sorted((m.va, m.va + m.size) for _, m in mems)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))          # no VA is handed out twice, across boards
    for b, m in mems:
      m.cpu.write(0, m.va & 0xffffffff)
      assert b.gmc.gc.read32(0, m.va) == m.va & 0xffffffff
  finally:
    for it in its: it.close()
    for b in boards: b.close()


def test_close_returns_the_devices_host_memory_and_addresses(board):
  """A device's close gives back the host pages and GPU virtual addresses its buffers and rings took (the board's page
  tables go with AM's fini): opening and closing again and again does not grow the process's use."""
  from rawgpu.drivers.am import mm
  vb, bus, b = board
  def free() -> tuple[int, int]:
    h = vb.host
    return mm.VA.free_bytes, h.size - h.next + sum(z for _, z in h.free_list)
  before = free()
  for _ in range(2):
    it = AMIface(bus, vb.system, **FAST)
    it.alloc(1 << 20, host=True); it.alloc(3 << 20); it.create_ring("compute", 1 << 16); it.create_ring("sdma", 1 << 16)
    assert free() != before
    it.close()
    assert free() == before


def test_vram_reads_after_the_flag_that_says_they_are_ready_are_fenced(board, monkeypatch):
  """Write-combined loads may pass older loads (rawgpu.drivers.cpufence): between the flag that says VRAM holds new
  data and the reads of that data AM puts the load fence: a PSP response after its ring fence, the IH entries after
  the write pointer, an SMU table after the message's answer. (The emulator performs loads in order; this checks
  where the fence stands.)"""
  from rawgpu.drivers.am import device as amdevice, facts as F
  from rawgpu.drivers.am.metrics import SMUMetrics
  log: list = []
  real_vram = amdevice.AMDevice.vram
  def vram(self, paddr, size):
    log.append(paddr)
    return real_vram(self, paddr, size)
  monkeypatch.setattr(amdevice.AMDevice, "vram", vram)
  from rawgpu.drivers.cpufence import Fences
  monkeypatch.setattr(amdevice, "fences_or_none", lambda: (Fences(load=lambda: log.append("fence"), store=lambda: None), None))
  vb, bus, b = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    d = it.dev
    assert d.vram_wc and it.props.vram_write_combined
    responses = [i for i, e in enumerate(log) if e == d.psp.cmd + F.PSP_CMD.resp.offset]
    assert len(responses) > 5 and all(log[i - 1] == "fence" for i in responses)   # every command of the boot
    bad = it.alloc(0x1000).va + 0x10_0000
    with pytest.raises(Exception): b.gmc.mm.read32(0, bad)             # an MM-hub client faults: the IH takes an entry
    del log[:]
    with pytest.raises(DeviceFault, match=f"{bad & ~0xfff:#x}"): it.check_faults()
    entries = [e for e in log if e != "fence" and d.ih.ring <= e < d.ih.ring + (256 << 10)]
    assert log[:2] == [d.ih.wptr_wb, "fence"] and entries and log.index(entries[0]) == 2
    del log[:]
    assert SMUMetrics(vb.system).read(bus).unavailable is None
    table = [i for i, e in enumerate(log) if e == d.smu.driver_table]
    assert table and all(log[i - 1] == "fence" for i in table)
  finally: it.close()


def test_gfx_bring_up_follows_the_kernel(board, firmware_dir):
  """What amdgpu's gfx/ih hw_init programs, AM programs on a cold boot (Linux 6.12, the values its code writes):
  each MEC pipe's firmware start from the MEC file's header as gfx_v11_0/v12_0_config_gfx_rs64 computes it
  (lo >> 2 | hi << 30, hi >> 2) then taken at a pipe reset; the golden settings; GC's S2A doorbell routes (gc_doorbell_init's 0x30000007 and
  0x3000000d); CP_PQ_STATUS.DOORBELL_ENABLE (kiq_init_register); the queue's MQD with PRIV_STATE and PRELOAD_REQ (the
  registers' defaults, amdkfd's init_mqd); the hubs' fault settings and the MM hub's private invalidation; no IH dummy reads and non-snooped requests for a VRAM ring (nbio_v4_3_ih_control's
  comments); IH_RB_CNTL read-modify-written; INTx off in the PCI command register (AM polls)."""
  import ctypes, os
  from rawgpu.autogen.amd import ucode
  from rawgpu.drivers.pci import PCI_COMMAND, PCI_COMMAND_INTX_DISABLE
  vb, bus, b = board
  gc_ver = {"gfx1100": "11_0_0", "gfx1201": "12_0_1"}[b.arch]
  with open(os.path.join(firmware_dir, f"gc_{gc_ver}_mec.bin"), "rb") as f: hdr = ucode.gfx_firmware_header_v2_0.from_buffer_copy(f.read(ctypes.sizeof(ucode.gfx_firmware_header_v2_0)))
  start = (hdr.ucode_start_addr_lo >> 2 | hdr.ucode_start_addr_hi << 30) & 0xffffffff
  start_hi = hdr.ucode_start_addr_hi >> 2
  ih_cntl = b.regs.reg("osssys", "regIH_RB_CNTL")
  b.regs.set("osssys", "regIH_RB_CNTL", ih_cntl.encode(RB_USED_INT_THRESHOLD=5))   # a field AM does not set: ih_v6_0 keeps it (RMW)
  nb, s2a = ("nbio", "regS2A_DOORBELL_ENTRY_{}_CTRL") if b.arch == "gfx1100" else ("nbif", "regGDC_S2A0_S2A_DOORBELL_ENTRY_{}_CTRL")
  sdma_route = b.regs.reg(nb, s2a.format(2))
  b.regs.set(nb, s2a.format(2), sdma_route.encode(S2A_DOORBELL_PORT2_FENCE_ENABLE=1))   # kept too (sdma_doorbell_range's RMW)
  it = AMIface(bus, vb.system, **FAST)
  try:
    g, regs = b.gfx, b.regs
    ih = ih_cntl.decode(regs.get("osssys", "regIH_RB_CNTL"))
    assert (ih["RB_USED_INT_THRESHOLD"], ih["RB_ENABLE"], ih["MC_SPACE"]) == (5, 1, 4)
    route = sdma_route.decode(regs.get(nb, s2a.format(2)))
    assert (route["S2A_DOORBELL_PORT2_FENCE_ENABLE"], route["S2A_DOORBELL_PORT2_ENABLE"], route["S2A_DOORBELL_PORT2_AWID"]) == (1, 1, 0xe)
    # SDMA 6 turns its context-empty interrupt on (sdma_v6_0_start: ring preemption); SDMA 7 has none to set
    ctxempty = [regs.reg("gc", f"regSDMA{e}_CNTL").decode(regs.get("gc", f"regSDMA{e}_CNTL"))["CTXEMPTY_INT_ENABLE"] for e in range(2)]
    assert ctxempty == ([1, 1] if b.arch == "gfx1100" else [0, 0])
    a_hi = regs.addr("gc", "regCP_MEC_RS64_PRGRM_CNTR_START_HI")
    assert [(g.pc_banks[p][g.a_pc_start], g.pc_banks[p][a_hi]) for p in range(4)] == [(start, start_hi)] * 4
    assert g.pipe_started == [True] * len(g.pipes)
    golden = ("regTCP_CNTL", 0x20000000) if b.arch == "gfx1100" else ("regDB_MEM_CONFIG", 0x00008000)   # golden_settings_gc_11_0 / 12_0
    assert regs.get("gc", golden[0]) & golden[1] == golden[1]
    nb, s2a = ("nbio", "regS2A_DOORBELL_ENTRY_{}_CTRL") if b.arch == "gfx1100" else ("nbif", "regGDC_S2A0_S2A_DOORBELL_ENTRY_{}_CTRL")
    assert [regs.get(nb, s2a.format(n)) for n in (0, 3)] == [0x30000007, 0x3000000d]
    ring = it.create_ring("compute", 0x1000)
    assert regs.vals[g.a_pq_status] & g.pq_doorbells
    q = next(iter(it.dev.gfx.queues.values()))
    m = it.dev.gfx.build_mqd(q)
    mqd_control, persistent = regs.reg("gc", "regCP_MQD_CONTROL"), regs.reg("gc", "regCP_HQD_PERSISTENT_STATE")
    assert mqd_control.decode(m.cp_mqd_control)["PRIV_STATE"] == 1 and persistent.decode(m.cp_hqd_persistent_state)["PRELOAD_REQ"] == 1
    # the queue control from regCP_HQD_PQ_CONTROL_DEFAULT (0x00308509): MIN_AVAIL_SIZE 3, then the queue's own fields
    assert regs.reg("gc", "regCP_HQD_PQ_CONTROL").decode(m.cp_hqd_pq_control)["MIN_AVAIL_SIZE"] == 3
    intr = regs.reg(nb, "regBIF_BX0_INTERRUPT_CNTL").decode(regs.get(nb, "regBIF_BX0_INTERRUPT_CNTL"))
    assert (intr["IH_DUMMY_RD_OVERRIDE"], intr["IH_DUMMY_RD_EN"], intr["IH_REQ_NONSNOOP_EN"]) == (1, 0, 1)
    assert it.dev.pci.config_read(PCI_COMMAND, 2) & PCI_COMMAND_INTX_DISABLE
    # the hubs (gfxhub_v3_0 / mmhub_v3_0 and their gfx12 twins): the fault default page is VRAM's, not out to system
    # memory; ECO_BITS cleared; a CP fetch fault does not halt the CP; the MM hub's flush ends with a private invalidation
    for ip, pfx in (("gc", "regGC"), ("mmhub", "regMM")):
      f = lambda n: regs.reg(ip, pfx + n).decode(regs.get(ip, pfx + n))
      assert f("VM_L2_CNTL")["ENABLE_DEFAULT_PAGE_OUT_TO_SYSTEM_MEMORY"] == 0 and f("MC_VM_MX_L1_TLB_CNTL")["ECO_BITS"] == 0
    assert regs.reg("gc", "regCP_DEBUG").decode(regs.get("gc", "regCP_DEBUG"))["CPG_UTCL1_ERROR_HALT_DISABLE"] == 1
    cid2 = regs.reg("mmhub", "regMMVM_L2_BANK_SELECT_RESERVED_CID2")
    assert cid2.decode(regs.get("mmhub", "regMMVM_L2_BANK_SELECT_RESERVED_CID2"))["RESERVED_CACHE_PRIVATE_INVALIDATION"] == 1
    assert ring.kind == "compute"
  finally: it.close()


def test_gfx_programs_its_hub_once_the_rlc_autoload_brought_gfx_up(board, monkeypatch):
  """amdgpu enables the MM hub from gmc hw_init and the GC hub from gfx hw_init, after the RLC autoload
  (gmc_v11_0_gart_enable, gfx_v11_0_gfxhub_enable): AM programs them in that order on a cold boot."""
  from rawgpu.drivers.am.gmc import GMC
  vb, bus, b = board
  seen, real = [], GMC.init_hub
  def init_hub(self, hub, inst=0):
    seen.append((hub, b.gfx.autoload_done))
    return real(self, hub, inst)
  monkeypatch.setattr(GMC, "init_hub", init_hub)
  AMIface(bus, vb.system, **FAST).close()
  assert seen == [("MM", False), ("GC", True)]
