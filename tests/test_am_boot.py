"""AM boots the emulated board (drivers/emu/amd) whose PSP/SMU stand in through tests/test_am_fakes.py: cold boot,
warm boot, mode-1 reset of a board another driver left running, rings, memory as the GPU sees it, faults, bad input."""
from __future__ import annotations
import os, shutil, tempfile, time
import pytest
from rawgpu.autogen.amd import pm4, psp as P
from rawgpu.drivers.am import AMIface, supported
from rawgpu.drivers.pci import info
from rawgpu.errors import DeviceBusy, DeviceFault, DeviceNotFound, DeviceTimeout, FirmwareError
from test_am_fakes import make_board

FAST = dict(timeout_scale=1.0, reset_wait_s=0.0)
SHORT = dict(timeout_scale=0.05, reset_wait_s=0.0)   # for waits that are meant to time out


@pytest.fixture(autouse=True)
def private_locks(tmp_path, monkeypatch):
  """Owner locks live in the temp dir; keep this test's emulated buses away from other processes' boards."""
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture
def fw(firmware_dir, monkeypatch):
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", firmware_dir)
  monkeypatch.delenv("RAWGPU_FIRMWARE_ANY", raising=False)
  return firmware_dir


@pytest.fixture
def board():
  vb, bus, b, fake = make_board("gfx1100")
  yield vb, bus, b, fake
  b.close()


COMMON = ("SMU", "SDMA_UCODE_TH0", "RS64_PFP", "RS64_ME", "RS64_MEC", "RS64_PFP_P0_STACK", "RS64_PFP_P1_STACK", "RS64_ME_P0_STACK",
          "RS64_ME_P1_STACK", "RS64_MEC_P0_STACK", "RS64_MEC_P1_STACK", "RS64_MEC_P2_STACK", "RS64_MEC_P3_STACK", "IMU_I", "IMU_D",
          "RLC_G", "RLC_IRAM", "RLC_DRAM_BOOT", "RLC_RESTORE_LIST_GPM_MEM", "RLC_RESTORE_LIST_SRM_MEM")
ARCHS = {  # what amdgpu has the PSP load for each (psp_np_fw_load with RLC autoload), and the firmware file prefixes
  "gfx1100": dict(types=COMMON + ("SDMA_UCODE_TH1", "RLC_P", "RLC_V"), files=("gc_11_0_0_", "sdma_6_0_0", "smu_13_0_0"),
                  sos="psp_13_0_0_sos.bin", setup_tmr=True),
  "gfx1201": dict(types=COMMON, files=("gc_12_0_1_", "sdma_7_0_1", "smu_14_0_3"), sos="psp_14_0_3_sos.bin", setup_tmr=False),
}


@pytest.mark.parametrize("arch", list(ARCHS))
def test_cold_boot(fw, arch):
  vb, bus, b, fake = make_board(arch)
  want_fw = ARCHS[arch]
  it = AMIface(bus, vb.system, **FAST)
  try:
    p = it.props
    assert (p.arch, p.vendor, p.iface, p.pci_bus) == (arch, "AMD", "MOCKPCI", bus)
    assert p.vram_size == b.vram_size and p.bar_size == b.bars[0].size
    assert p.compute_units == b.cus
    assert p.ip_versions["gc"] == b.asic.version(11) and p.ip_versions["sdma"] == b.asic.version(42)
    assert not it.dev.warm
    # the PSP got every image amdgpu loads for this GC with RLC autoload, each a verbatim piece of one of the files
    types = [t for t, _ in fake.loaded]
    assert {getattr(P, f"GFX_FW_TYPE_{n}") for n in want_fw["types"]} <= set(types) and types[0] == P.GFX_FW_TYPE_SMU
    files = [open(os.path.join(fw, f), "rb").read() for f in os.listdir(fw) if f.startswith(want_fw["files"])]
    for t, data in fake.loaded: assert len(data) > 0 and any(data in f for f in files), t
    cmds = [c for k, c in fake.log if k == "psp"]
    assert cmds[0] == P.GFX_CMD_ID_LOAD_TOC and cmds[-1] == P.GFX_CMD_ID_AUTOLOAD_RLC
    assert (P.GFX_CMD_ID_SETUP_TMR in cmds) == want_fw["setup_tmr"]    # PSP 14.0.2/3 set their TMR up at boot
    # amdgpu's order (psp_hw_start, psp_load_non_psp_fw): the SMU's image is the first LOAD_IP_FW, and on MP0 13.0.0,
    # whose PMFW manages the DF C-states, it goes before SETUP_TMR; the SMU gets its first message after the autoload
    if want_fw["setup_tmr"]: assert cmds.index(P.GFX_CMD_ID_LOAD_IP_FW) < cmds.index(P.GFX_CMD_ID_SETUP_TMR) < cmds.index(P.GFX_CMD_ID_LOAD_IP_FW, cmds.index(P.GFX_CMD_ID_SETUP_TMR))
    first_smu = next(i for i, e in enumerate(fake.log) if e[0] == "smu")
    assert fake.log.index(("psp", P.GFX_CMD_ID_AUTOLOAD_RLC)) < first_smu
    # bootloader: key database before the system driver before the secure OS, each image from the SOS file
    bl = [c for c, _ in fake.bl_cmds]
    assert bl.index(0x80000) < bl.index(0x10000) < bl.index(0x20000) and bl[-1] == 0x20000
    sos = open(os.path.join(fw, want_fw["sos"]), "rb").read()
    for _, buf in fake.bl_cmds: assert buf.rstrip(b"\0")[:4096] in sos
    # the SMU was pointed at its driver table and asked to enable its features
    assert {0x2, 0xE, 0xF, 0x6} <= {m for m, _ in fake.smu_msgs}
  finally:
    it.close(); b.close()


def test_small_bar_board(fw):
  """256 MiB BAR over 512 MiB VRAM: discovery comes through the MM_INDEX window, memory beyond the BAR has no CPU view
  but the GPU reaches it."""
  vb, bus, b, fake = make_board("gfx1100", bar0_size=256 << 20)
  it = AMIface(bus, vb.system, **FAST)
  try:
    assert it.props.bar_size == 256 << 20 and it.props.vram_size == 512 << 20
    m = it.alloc(1 << 21, cpu_access=False)
    assert m.cpu is None
    b.gmc.gc.write32(0, m.va + 8, 0x5a5a5a5a)
    assert b.gmc.gc.read32(0, m.va + 8) == 0x5a5a5a5a
    assert it.alloc(0x1000).cpu is not None
  finally:
    it.close(); b.close()


def test_vram_is_mapped_write_combined_where_linux_offers_it(fw):
  """BAR0 is prefetchable: AM maps VRAM through resource0_wc, as amdgpu maps it write-combined, and hcq's small
  copies into VRAM are CPU stores. A BAR0 without resource0_wc is mapped uncached and those copies take the copy
  engine (uncached, 64 KiB of CPU stores would be thousands of single bus writes)."""
  import numpy as np
  from rawgpu.hcq.device import Device
  for prefetch in (True, False):
    vb, bus, b, fake = make_board("gfx1100")
    b.bars[0].prefetch = prefetch
    dev = Device(iface=AMIface(bus, vb.system, **FAST))
    try:
      assert dev.props.vram_write_combined == prefetch and dev.iface.dev.vram_wc == prefetch
      assert ("resource0_wc is not offered" in dev.props.vram_uncached_why) != prefetch
      buf, data = dev.alloc(4096, cpu_access=True), np.arange(1024, dtype=np.uint32)
      ticket = dev.timeline_value
      buf.copyin(data)
      assert (dev.timeline_value > ticket) != prefetch and np.array_equal(buf.numpy(np.uint32), data)
    finally:
      dev.close(); b.close()


def test_vram_is_mapped_uncached_where_the_cpu_has_no_fences(fw, board, monkeypatch):
  """Write-combined VRAM needs CPU fences (rawgpu.drivers.cpufence); where the CPU has none, AM maps
  the prefetchable BAR0 uncached and says why."""
  from rawgpu.drivers.am import device as amdevice
  monkeypatch.setattr(amdevice, "fences_or_none", lambda: (None, "no CPU fences are known for riscv64"))
  vb, bus, b, fake = board
  assert b.bars[0].prefetch
  it = AMIface(bus, vb.system, **FAST)
  try:
    assert not it.props.vram_write_combined and not it.dev.vram_wc
    assert it.props.vram_uncached_why == "write-combined VRAM needs CPU fences: no CPU fences are known for riscv64"
    m = it.alloc(0x1000)
    m.cpu.write(8, 0x1234)
    assert m.cpu.read(8) == 0x1234 and b.gmc.gc.read32(0, m.va + 8) == 0x1234
  finally: it.close()


def test_a_cpu_view_kept_past_free_never_reaches_the_next_owner(fw, board):
  """The CPU view users get of a VRAM allocation (cpu_view: hcq's Buffer.cpu) is a mapping of its own, which free
  takes away: a view kept past free reads zeros and its writes go nowhere, while the allocation that gets the same VRAM
  next keeps its data (GPU side too). The view is made once, at the first ask."""
  vb, bus, b, fake = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    old = it.alloc(0x2000)
    view = it.cpu_view(old)
    assert it.cpu_view(old) is view and view is not old.cpu
    stale = view.mem
    view.write(0x10, 0xdead_beef)
    assert old.cpu.read(0x10) == 0xdead_beef and b.gmc.gc.read32(0, old.va + 0x10) == 0xdead_beef
    it.free(old)
    new = it.alloc(0x2000)
    assert new.meta[1] == old.meta[1]   # the same VRAM
    it.cpu_view(new).write(0x10, 0x600d_f00d)
    assert bytes(stale[0x10:0x14]) == bytes(4)
    stale[0x10:0x14] = b"\x11" * 4
    assert it.cpu_view(new).read(0x10) == 0x600d_f00d and b.gmc.gc.read32(0, new.va + 0x10) == 0x600d_f00d
  finally: it.close()


def test_pointing_a_vmid_at_new_tables_drops_what_the_hubs_cached(fw, board):
  """A VMID given a new page-table root is flushed too: the hubs' TLBs may still hold the old tables' translations."""
  from rawgpu.drivers.am import mm
  vb, bus, b, fake = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    d, vmid, va = it.dev, 9, 0x40_0000_0000
    pages = [d.valloc_phys(mm.PAGE) for _ in range(2)]
    for n, paddr in enumerate(pages): d.vram(paddr, 4)[:] = (0x1111 * (n + 1)).to_bytes(4, "little")
    tables = [mm.PageTables(d.vram, lambda: d.visible.alloc(mm.PAGE), d.visible.free, d.pt.flags, base=0) for _ in pages]
    for pt, paddr in zip(tables, pages): pt.map(va, [(paddr + d.gmc.vram_base_offset, mm.PAGE)])
    d.gmc.set_context(vmid, tables[0].root, 0, 1 << 47)
    assert b.gmc.gc.read32(vmid, va) == 0x1111          # now in the hub's TLB
    d.gmc.set_context(vmid, tables[1].root, 0, 1 << 47)
    assert b.gmc.gc.read32(vmid, va) == 0x2222          # the new tables, not the cached translation
    d.gmc.set_context(vmid, None)
  finally: it.close()


def test_warm_boot_skips_firmware(fw, board):
  vb, bus, b, fake = board
  AMIface(bus, vb.system, **FAST).close()
  psp = lambda: [e for e in fake.log if e[0] == "psp"]
  n_psp, n_bl = len(psp()), len(fake.bl_cmds)
  it = AMIface(bus, vb.system, **FAST)
  try:
    assert it.dev.warm and len(psp()) == n_psp and len(fake.bl_cmds) == n_bl and fake.resets == 0
    ring = it.create_ring("compute", 0x4000)
    assert ring.kind == "compute"
  finally: it.close()


def test_warm_boot_tells_the_ih_what_it_skips(fw, board):
  """Entries a previous owner left in the IH ring are skipped on a warm boot, and the IH is told so (IH_RB_RPTR):
  otherwise it counts them as unread, and would overflow early."""
  vb, bus, b, fake = board
  it = AMIface(bus, vb.system, **FAST)
  bad = it.alloc(0x1000).va + 0x10_0000
  with pytest.raises(Exception): b.gmc.mm.read32(0, bad)   # an entry nobody reads before close
  it.close()
  it = AMIface(bus, vb.system, **FAST)
  try:
    assert it.dev.warm and it.dev.ih.rptr > 0
    assert b.regs.get("osssys", "regIH_RB_RPTR") == it.dev.ih.rptr
    it.check_faults()   # the old owner's fault is not this one's
  finally: it.close()


def test_board_left_by_another_driver_is_reset(fw):
  vb, bus, b, fake = make_board("gfx1100", sos_alive=True)
  try:
    it = AMIface(bus, vb.system, **FAST)
    assert fake.resets == 1 and not it.dev.warm and fake.loaded
    it.close()
  finally: b.close()


def test_mode1_reset_saves_the_pci_header_and_masters_no_dma_meanwhile(fw, monkeypatch):
  """amdgpu_device_mode1_reset: bus mastering is off while the board resets, and the configuration header is written
  back afterwards, here after a reset that cleared the command register and a BAR while the driver waited."""
  from rawgpu.drivers.am import smu as amsmu
  vb, bus, b, fake = make_board("gfx1100", sos_alive=True)
  before, during = bytes(b.cfg.b[:64]), []
  reset = fake._mode1
  fake._mode1 = lambda: (during.append(b.cfg.bus_master), reset())
  real_sleep = time.sleep
  def reset_wait(s: float) -> None:   # the ASIC goes down after its answer: the header with it
    if fake.resets == 1 and not during[1:]: b.cfg.b[4:6] = bytes(2); b.cfg.b[0x18:0x1c] = bytes(4); during.append("cleared")
    real_sleep(s)
  monkeypatch.setattr(amsmu.time, "sleep", reset_wait)
  try:
    it = AMIface(bus, vb.system, **FAST)
    assert fake.resets == 1 and during == [False, "cleared"] and not it.dev.warm
    assert b.cfg.bus_master and bytes(b.cfg.b[0x10:0x40]) == before[0x10:0x40]
    it.close()
  finally: b.close()


def test_smu_message_waits_for_the_previous_answer(fw, board):
  """A message goes to the SMU only after the previous one was answered (smu_cmn.c polls the response first); one
  still pending is a clear timeout, not an overwritten mailbox."""
  vb, bus, b, fake = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    n = len(fake.smu_msgs)
    b.regs.set("mp1", "regMP1_SMN_C2PMSG_90", 0)   # the last message still has no answer
    it.dev.timeout_scale = 0.05
    with pytest.raises(DeviceTimeout, match="SMU to finish the message before PPSMC_MSG_GetSmuVersion"): it.dev.smu.send("PPSMC_MSG_GetSmuVersion")
    assert len(fake.smu_msgs) == n
    b.regs.set("mp1", "regMP1_SMN_C2PMSG_90", 1)
    assert it.dev.smu.send("PPSMC_MSG_GetSmuVersion") and len(fake.smu_msgs) == n + 1
  finally: it.close()


def test_psp_ring_starts_with_a_clear_fence_and_handshake_delays(fw, board, monkeypatch):
  """psp_v13_0/v14_0 wait 20 ms after starting the sOS and after the ring command; a fence value a last owner left
  in the fence buffer must not pass for this boot's first answer."""
  from rawgpu.drivers.am import psp as amp
  vb, bus, b, fake = board
  sleeps = []
  real_sleep = amp.time.sleep
  monkeypatch.setattr(amp.time, "sleep", lambda s: (sleeps.append(s), real_sleep(s)))
  it = AMIface(bus, vb.system, **FAST)
  try:
    assert sleeps.count(amp.HANDSHAKE_S) >= 2
    psp = it.dev.psp
    psp.ring_stop()
    it.dev.vram(psp.fence, 4)[:] = (7).to_bytes(4, "little")
    psp.ring_create()
    assert bytes(it.dev.vram(psp.fence, 4)) == bytes(4) and psp.fence_value == 0
  finally: it.close()


def test_forced_cold_boot_after_clean_fini(fw, board, monkeypatch):
  vb, bus, b, fake = board
  AMIface(bus, vb.system, **FAST).close()
  monkeypatch.setenv("RAWGPU_AM_RESET", "1")
  it = AMIface(bus, vb.system, **FAST)
  assert not it.dev.warm and fake.resets == 1
  it.close()


def _wait(cond, what, timeout=10.0):
  end = time.time() + timeout
  while not cond():
    if time.time() > end: raise AssertionError(f"timed out: {what}")
    time.sleep(0.001)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_compute_ring_runs_nops(fw, arch):
  vb, bus, b, fake = make_board(arch)
  it = AMIface(bus, vb.system, **FAST)
  try:
    r = it.create_ring("compute", 0x1000)
    assert r.wptr_unit == 4 and r.ring.cpu is not None and r.ring.size == 0x1000
    words = [pm4.PACKET3(pm4.PACKET3_NOP, 2), 0, 0, 0] * 4
    for i, w in enumerate(words): r.ring.cpu.write(4 * i, w)
    r.write_ptr[0] = len(words)
    r.before_doorbell()
    r.doorbell[0] = len(words)
    _wait(lambda: r.read_ptr[0] == len(words), "compute ring consumed")
  finally:
    it.close(); b.close()


@pytest.mark.parametrize("arch", list(ARCHS))
def test_sdma_ring_runs_nops(fw, arch):
  vb, bus, b, fake = make_board(arch)
  if not hasattr(b, "sdma"): pytest.skip("the emulated board has no SDMA engine model yet")
  from rawgpu.autogen.amd import sdma_v6
  it = AMIface(bus, vb.system, **FAST)
  try:
    r = it.create_ring("sdma", 0x1000)
    assert r.wptr_unit == 1
    for i in range(8): r.ring.cpu.write(4 * i, sdma_v6.SDMA_OP_NOP)
    r.write_ptr[0] = 32
    r.before_doorbell()
    r.doorbell[0] = 32
    _wait(lambda: r.read_ptr[0] == 32, "sdma ring consumed")
  finally:
    it.close(); b.close()


@pytest.mark.parametrize("arch", list(ARCHS))
def test_every_sdma_engine_runs_after_boot(fw, arch):
  """AM starts and sets up every copy engine, as sdma_v6_0/v7_0_gfx_resume does, though it rings only engine 0 itself
  (MOCKKFD's user queues take the others). Engine 1's F32 (MCU) control sits 0x20 dwords after engine 0's, not 0x600
  as the rest of its registers: AM once unhalted a register that was not there, and engine 1 never ran."""
  vb, bus, b, fake = make_board(arch)
  it = AMIface(bus, vb.system, **FAST)
  try:
    assert [e.running() for e in b.sdma.engines] == [True, True]
    halt = "F32_CNTL" if it.dev.regs.has("gc", "regSDMA0_F32_CNTL") else "MCU_CNTL"
    for e in (0, 1): assert it.dev.sdma.r(e, f"regSDMA0_{halt}").addr == it.dev.regs.reg("gc", f"regSDMA{e}_{halt}").addr
    for e in (0, 1):   # each engine's L2 policies, as gfx_resume leaves them (reads no-allocate, writes bypass)
      page = it.dev.sdma.r(e, "regSDMA0_UTCL1_PAGE").fields()
      assert (page["RD_L2_POLICY"], page["WR_L2_POLICY"], page.get("LLC_NOALLOC", 1)) == (2, 3, 1), e
      assert it.dev.sdma.r(e, "regSDMA0_WATCHDOG_CNTL").fields()["QUEUE_HANG_COUNT"] == 1   # 100 ms
  finally:
    it.close(); b.close()


def test_memory_seen_by_the_gpu(fw, board):
  """CPU writes through Mem.cpu; the board's own page walker (GC hub, VMID 0) must read the same bytes at Mem.va."""
  vb, bus, b, fake = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    small, huge, host = it.alloc(0x3000), it.alloc(6 << 20), it.alloc(0x5000, host=True)
    assert len({small.va, huge.va, host.va}) == 3 and host.host
    for m in (small, huge, host):
      for off in (0, 0x1004, m.size - 8):
        m.cpu.write(off, 0x1234_0000 + off + (m.va & 0xffff), 4)
        assert b.gmc.gc.read32(0, m.va + off) == 0x1234_0000 + off + (m.va & 0xffff)
    b.gmc.gc.write32(0, huge.va + (4 << 20) + 12, 0xfeedbeef)       # and the other way round
    assert huge.cpu.read((4 << 20) + 12) == 0xfeedbeef
    it.free(small)
    with pytest.raises(Exception): b.gmc.gc.read32(0, small.va)        # unmapped again (the model reports a fault)
    for hub in (b.gmc.gc, b.gmc.mm):   # the system aperture covers VRAM to its last byte (it left out the last 16 MiB)
      fb_base, fb_end, _ = hub.fb()
      for mc in (fb_base, fb_end - (1 << 20), fb_end - 4): hub.read32(0, mc)
  finally: it.close()


def test_page_fault_is_reported(fw, board):
  vb, bus, b, fake = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    m = it.alloc(0x1000)
    bad = m.va + 0x10_0000
    with pytest.raises(Exception): b.gmc.mm.read32(0, bad)             # an MM-hub client (e.g. SDMA) touches it
    with pytest.raises(DeviceFault, match=f"{bad & ~0xfff:#x}"): it.check_faults()
    it.check_faults()                                                   # reported once, then clear
  finally: it.close()


def test_second_opener_is_busy(fw, board):
  vb, bus, b, fake = board
  it = AMIface(bus, vb.system, **FAST)
  try:
    with pytest.raises(DeviceBusy, match=str(os.getpid())): AMIface(bus, vb.system, **FAST)
  finally: it.close()
  AMIface(bus, vb.system, **FAST).close()                               # released by close


def test_unsupported_board():
  from rawgpu.drivers.emu.pcibus import VirtualBus
  from rawgpu.drivers.emu.amd.board import AMDBoard
  vb = VirtualBus()
  b = AMDBoard(arch="gfx1100", host=vb.host)
  b.device = 0x73bf                                                     # a Navi21: not an AM board
  bus = vb.plug(b)
  assert not supported(info(bus, vb.system))
  with pytest.raises(DeviceNotFound, match="73bf"): AMIface(bus, vb.system, **FAST)
  b.close()


def test_missing_firmware(board, tmp_path, monkeypatch):
  vb, bus, b, fake = board
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", str(tmp_path))
  with pytest.raises(FirmwareError, match="firmware-amd-graphics"): AMIface(bus, vb.system, **FAST)


def test_unknown_firmware_hash(fw, board, tmp_path, monkeypatch):
  vb, bus, b, fake = board
  d = tmp_path / "fw"
  shutil.copytree(fw, d, ignore=lambda _d, names: [n for n in names if not n.startswith(("gc_11_0_0", "psp_13_0_0", "smu_13_0_0", "sdma_6_0_0"))])
  data = bytearray((d / "smu_13_0_0.bin").read_bytes()); data[-1] ^= 0xff
  (d / "smu_13_0_0.bin").write_bytes(data)
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", str(d))
  with pytest.raises(FirmwareError, match="not a version rawgpu knows"): AMIface(bus, vb.system, **FAST)


@pytest.mark.parametrize("kind,err,match", [("psp_timeout", DeviceTimeout, "PSP"), ("psp_error", FirmwareError, "PSP rejected"),
                                            ("smu_timeout", DeviceTimeout, "SMU"), ("smu_error", DeviceFault, "SMU answered")])
def test_firmware_processor_failures(fw, board, kind, err, match):
  vb, bus, b, fake = board
  b.inject(kind, **({"status": 0x12} if kind == "psp_error" else {"response": 0xff} if kind == "smu_error" else {}))
  with pytest.raises(err, match=match): AMIface(bus, vb.system, **SHORT)
  b.clear_faults()
  it = AMIface(bus, vb.system, **FAST)                                 # the lock was released; a retry boots
  it.close()


def test_a_psp_status_left_on_commands_that_worked_is_a_warning(fw, board, capfd):
  """Some PSP firmware leaves a non-zero status on commands it carried out; amdgpu warns and goes on
  (psp_cmd_submit_buf), and so does AM: the board boots, and each such answer is said."""
  vb, bus, b, fake = board
  b.inject("psp_stale_status")
  it = AMIface(bus, vb.system, **FAST)
  try:
    assert it.dev.psp.rejected and all("status 0x1" in r for r in it.dev.psp.rejected)
    assert "warning: PSP answered GFX_CMD_ID_LOAD_TOC with status 0x1" in capfd.readouterr().err
    it.create_ring("compute", 0x1000)
  finally: it.close()


@pytest.mark.parametrize("arch,cus", [("gfx1100", 84), ("gfx1201", 56)])
def test_harvested_board_reports_the_cus_that_work(fw, arch, cus):
  """A board with WGPs fused off (as an RX 7900 XT is a Navi31 with 42 of its 48): AM counts the CUs through
  GRBM_GFX_INDEX and CC_GC_SHADER_ARRAY_CONFIG as amdgpu's get_cu_info does; IP discovery keeps the physical shape."""
  from rawgpu.drivers.am.discovery import compute_units
  vb, bus, b, fake = make_board(arch, cus=cus)
  it = AMIface(bus, vb.system, **FAST)
  try:
    assert it.props.compute_units == cus < compute_units(it.dev.disc.gc_info)
    assert b.regs.reg("gc", "regGRBM_GFX_INDEX").decode(b.regs.get("gc", "regGRBM_GFX_INDEX"))["SE_BROADCAST_WRITES"] == 1   # left broadcasting
  finally: it.close(); b.close()
