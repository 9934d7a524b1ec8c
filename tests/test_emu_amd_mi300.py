"""The emulated MI300X board, first stage (drivers/emu/amd/MI300.md): what it shows on the bus and in IP discovery.

It enumerates as a processing accelerator (class 0x120000, 1002:74a1), straps its VRAM size, and publishes a v4
discovery table with 64-bit base addresses: 8 GC 9.4.3 instances (XCCs), 16 SDMA 4.4.2 instances (4 per AID),
4 MMHUB 1.8, and gc_info v2.0. A C program on the kernel's discovery.h walks it (checksums, entries, gc_info), and
AM's own parser reads it from VRAM through the BAR. AM refuses the board unless RAWGPU_AM_IN_PROGRESS=1; then it
boots it as far as it has got (the PSP loading every image from the real firmware files) and says what is missing.""" 
from __future__ import annotations
import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from rawgpu.autogen.amd import psp as P
from rawgpu.drivers.am import discovery
from rawgpu.drivers.emu.amd import AMDBoard
from rawgpu.drivers.emu.pcibus import HostRAM, VirtualBus
from rawgpu.drivers.pci import PCIDevice
from rawgpu.errors import DeviceNotFound, DeviceTimeout, FirmwareError, RawGPUError
from conftest import find_firmware
from test_emu_amd_common import C_DISCOVERY_MAIN, compile_c, linux_root

GC, SDMA0, MMHUB = 11, 42, 34

C_WALK_V4 = C_DISCOVERY_MAIN + r"""
  printf("ihdr v%d ok %d b64 %d\n", ih->version, sum(b + t->offset, ih->size) == t->checksum, ih->base_addr_64_bit);
  for (int d = 0; d < ih->num_dies; d++) {
    struct die_header *dh = (void *)(b + ih->die_info[d].die_offset);
    uint8_t *p = (uint8_t *)dh + sizeof(*dh);
    for (int i = 0; i < dh->num_ips; i++) {
      struct ip_v4 *ip = (void *)p;
      printf("ip %d %d %d.%d.%d", ip->hw_id, ip->instance_number, ip->major, ip->minor, ip->revision);
      for (int j = 0; j < ip->num_base_address; j++) printf(" %llx", (unsigned long long)ip->base_address_64[j]);
      printf("\n"); p += offsetof(struct ip_v4, base_address_64) + 8 * ip->num_base_address;
    }
  }
  t = &bh->table_list[GC];
  struct gc_info_v2_0 *gc = (void *)(b + t->offset);
  printf("gc %x %d.%d ok %d se %u sh %u cu %u wave %u\n", gc->header.table_id, gc->header.version_major, gc->header.version_minor,
         sum(b + t->offset, gc->header.size) == t->checksum, gc->gc_num_se, gc->gc_num_sh_per_se, gc->gc_num_cu_per_sh, gc->gc_wave_size);
  return 0;
}
"""


@pytest.fixture
def mi300():
  """The board on a bus of its own; its worker runs the PSP as a driver waits on it (not deterministic)."""
  vbus = VirtualBus(host=HostRAM(16 << 20))
  board = AMDBoard(arch="gfx942", host=vbus.host, vram_size=256 << 20)
  bus = vbus.plug(board)
  pci = PCIDevice(bus, system=vbus.system)
  yield vbus, board, bus, pci
  pci.close()
  board.close()


def _blob(pci) -> bytes:
  memsize = pci.map_bar(5).read32(0xde3 * 4)   # NBIO 7.9 RCC_CONFIG_MEMSIZE at the NBIO base discovery publishes
  return pci.map_bar(0).readbytes((memsize << 20) - (64 << 10), 10 << 10)


def test_enumerates_as_an_instinct_accelerator(mi300):
  _, board, _, pci = mi300
  assert (pci.config_read(0, 2), pci.config_read(2, 2)) == (0x1002, 0x74a1)
  assert pci.config_read(0x08, 4) >> 8 == 0x120000       # processing accelerator: amdgpu binds MI300 by class
  assert pci.map_bar(5).read32(0xde3 * 4) << 20 == board.vram_size


def test_discovery_against_kernel_header(mi300, tmp_path):
  inc = linux_root() / "drivers/gpu/drm/amd/include"
  exe = compile_c(C_WALK_V4, [inc])
  (tmp_path / "d.bin").write_bytes(_blob(mi300[3]))
  out = subprocess.run([str(exe), str(tmp_path / "d.bin")], capture_output=True, text=True, check=True).stdout.splitlines()
  assert out[0] == "sig 28211407 ok 1" and out[1] == "ihdr v4 ok 1 b64 1"
  ips = [ln.split() for ln in out if ln.startswith("ip ")]
  gcs = {int(i): [int(b, 16) for b in bs] for _, hw, i, v, *bs in ips if int(hw) == GC and v == "9.4.3"}
  assert sorted(gcs) == list(range(8))
  assert len({tuple(b) for b in gcs.values()}) == 8                                  # each XCC its own registers
  assert all([b & 0xffff for b in bs] == [0x2000, 0xA000] for bs in gcs.values())     # the low 16 bits packets use
  sdma = sorted(int(i) for _, hw, i, v, *_ in ips if int(hw) == SDMA0 and v == "4.4.2")
  assert sdma == list(range(16))
  assert sorted(int(i) for _, hw, i, v, *_ in ips if int(hw) == MMHUB and v == "1.8.0") == [0, 1, 2, 3]
  assert out[-1] == "gc 4347 2.0 ok 1 se 4 sh 1 cu 10 wave 64"


def test_am_reads_the_table_and_refuses_the_board_clearly(mi300):
  vbus, _, bus, pci = mi300
  d = discovery.parse(_blob(pci))
  assert d.versions()["gc"] == (9, 4, 3) and d.versions()["sdma"] == (4, 4, 2) and d.versions()["nbio"] == (7, 9, 0)
  assert d.count("gc") == 8 and d.count("sdma") == 16 and d.count("mmhub") == 4
  assert d.find("gc", 3).bases == (0x302000, 0x30A000)
  assert discovery.compute_units(d.gc_info) == 40                                   # per XCC (gc_info v2.0)
  pci.close()
  from rawgpu.drivers.am.device import AMDevice
  with pytest.raises(DeviceNotFound, match=r"74a1.*not a board AM supports.*RAWGPU_AM_IN_PROGRESS=1 opens it.*KFD\+AMD"): AMDevice(bus, vbus.system)


# ---- AM on the board (RAWGPU_AM_IN_PROGRESS=1): the PSP loads every image with the real files, the SMU (PMFW running
# from the IFWI, smu_v13_0_6's message set) takes the driver table, the hubs get VMID 0, the IH its ring, every XCC its
# MEC; compute queues run on the XCC the device names (XCC 0 by default)

MI300_IMAGES = {P.GFX_FW_TYPE_P2S_TABLE, P.GFX_FW_TYPE_SDMA0, P.GFX_FW_TYPE_SDMA1, P.GFX_FW_TYPE_SDMA2, P.GFX_FW_TYPE_SDMA3,
                P.GFX_FW_TYPE_CP_MEC, P.GFX_FW_TYPE_CP_MEC_ME1, P.GFX_FW_TYPE_RLC_RESTORE_LIST_SRM_CNTL,
                P.GFX_FW_TYPE_RLC_RESTORE_LIST_GPM_MEM, P.GFX_FW_TYPE_RLC_RESTORE_LIST_SRM_MEM, P.GFX_FW_TYPE_RLC_G}


@pytest.fixture
def mi300_fw(monkeypatch):
  d = find_firmware("20250410-2")
  if d is None: pytest.skip("firmware-amd-graphics 20250410 (MI300's files) not fetched: run .ci/fetch-firmware")
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", d)
  monkeypatch.setenv("RAWGPU_AM_IN_PROGRESS", "1")
  monkeypatch.delenv("RAWGPU_FIRMWARE_ANY", raising=False)
  return d


def _open_am(bus, vbus):
  from rawgpu.drivers.am.device import AMDevice
  return AMDevice(bus, vbus.system)


def test_am_boots_the_board(mi300, mi300_fw):
  vbus, board, bus, pci = mi300
  pci.close()
  dev = _open_am(bus, vbus)
  assert board.fw_loaded == MI300_IMAGES
  assert board.smu.driver_table and board.smu.accumulated == 1             # the driver table set, a metrics table written
  _every_hub_walks_ams_tables(board)
  _a_page_fault_reaches_ams_ih_ring(board)
  r = board.regs
  for x in range(8):   # every XCC: its own partition, MEC running, the MEC doorbell window of its layout-1 range
    key = "gc" if x == 0 else f"gc:{x}"
    assert r.reg(key, "regCP_HYP_XCP_CTL").decode(r.vals[r.addr(key, "regCP_HYP_XCP_CTL")])["NUM_XCC_IN_XCP"] == 1
    assert r.vals[r.addr(key, "regCP_MEC_CNTL")] == 0
    assert r.vals[r.addr(key, "regCP_MEC_DOORBELL_RANGE_LOWER")] == (0x20 * x * 2) << 2
  for x in range(8):   # golden settings (gfx_v9_4_3_init_golden_registers) on every XCC; this board's straps say revision 1
    key = "gc" if x == 0 else f"gc:{x}"
    assert r.vals[r.addr(key, "regGB_ADDR_CONFIG")] == 0x2a114042
    assert r.reg(key, "regTCP_UTCL1_CNTL2").decode(r.vals[r.addr(key, "regTCP_UTCL1_CNTL2")])["SPARE"] == 1
  # every copy engine's BIF doorbell range (ENTRY_1 + n + 4 * AID: (0x100 + 10 e) * 2, 20 doorbells); every AID's S2A
  # routes as nbio_v7_9_sdma_doorbell_range writes them (entry, AWID = RANGE_OFFSET, AWADDR[31:28])
  bif = r.reg("nbio", "regDOORBELL0_CTRL_ENTRY_0")
  for e in range(16):
    v = bif.decode(r.vals.get(r.addr("nbio", "regDOORBELL0_CTRL_ENTRY_1") + e % 4 + 4 * (e // 4), 0))
    assert (v["BIF_DOORBELL0_RANGE_OFFSET_ENTRY"], v["BIF_DOORBELL0_RANGE_SIZE_ENTRY"]) == ((0x100 + 10 * e) * 2, 20), e
  for aid in range(4):   # AIDs 1-3 through extended SMN addressing: their NBIO's registers
    for port, awid, awaddr in ((1, 0xe, 1), (2, 0x8, 2), (5, 0x9, 8), (6, 0xa, 9)):
      a = r.addr("nbio", f"regS2A_DOORBELL_ENTRY_{port}_CTRL")
      v = r.reg("nbio", f"regS2A_DOORBELL_ENTRY_{port}_CTRL").decode(r.vals[a] if aid == 0 else board.nbio.other_dies[(aid, a)])
      p = f"S2A_DOORBELL_PORT{port}_"
      assert [v[p + f] for f in ("ENABLE", "AWID", "RANGE_OFFSET", "RANGE_SIZE", "AWADDR_31_28_VALUE")] == [1, awid, awid, 20, awaddr], (aid, port)
  assert r.vals.get(r.addr("nbio", "regBIF_BX0_PCIE_INDEX2_HI"), 0) == 0                 # the high byte cleared after each
  dev.fini()
  log = board.psp.log
  assert [e for e in log if e[1] == P.GFX_CMD_ID_SRIOV_SPATIAL_PART] == [("cmd", P.GFX_CMD_ID_SRIOV_SPATIAL_PART, 0)]   # SPX -> CPX, once
  assert r.reg("nbio", "regBIF_BX_PF0_PARTITION_COMPUTE_STATUS").decode(r.get("nbio", "regBIF_BX_PF0_PARTITION_COMPUTE_STATUS"))["PARTITION_MODE"] == 4
  assert not [e for e in log if e[0] == "bootloader"]                   # the IFWI's sOS: no bootloader stages
  assert ("cmd", P.GFX_CMD_ID_SETUP_TMR, 0) in log                         # the boot-time TMR, named without a buffer
  assert [e for e in log if e[1] == P.GFX_CMD_ID_LOAD_IP_FW] == [("cmd", P.GFX_CMD_ID_LOAD_IP_FW, 0)] * len(MI300_IMAGES)
  assert not board.errors


def test_a_clean_fini_lets_the_next_open_boot_warm(mi300, mi300_fw):
  """After AM's fini (the boot marker, every MEC halted) the next open skips the PSP and SMU work and only starts GFX
  again, as on RDNA; RAWGPU_AM_RESET's force_cold, or an owner that died with its MECs running, boots cold."""
  from rawgpu.drivers.am.device import AMDevice
  vbus, board, bus, pci = mi300
  pci.close()
  _open_am(bus, vbus).fini()
  # the PSP started every SDMA engine as it loaded its image; amdgpu writes no F32_CNTL under PSP loading
  # (sdma_v4_4_2_inst_enable), so AM's fini leaves them running for whoever comes next
  assert all(not board.regs.vals[e.a_halt] & e.halt_bit for e in board.sdma.engines)
  psp_cmds = len(board.psp.log)
  dev = _open_am(bus, vbus)
  assert dev.warm and len(board.psp.log) == psp_cmds                       # no PSP command at all
  assert all(board.regs.vals[board.regs.addr(k, "regCP_MEC_CNTL")] == 0 for k in ["gc"] + [f"gc:{x}" for x in range(1, 8)])
  dev.pci.close()                                                          # dies: no fini, the MECs keep running
  dev = _open_am(bus, vbus)
  assert not dev.warm and len(board.psp.log) > psp_cmds
  dev.fini()
  dev = AMDevice(bus, vbus.system, force_cold=True)
  assert not dev.warm
  dev.fini()
  assert not board.errors


def test_an_unsigned_image_is_refused_by_the_psp(mi300, mi300_fw, tmp_path, monkeypatch):
  """A MEC image whose PSP signature header is damaged: the PSP answers TEE_ERROR_SECURITY, AM names the image."""
  import os, shutil
  for n in os.listdir(mi300_fw):
    if n.startswith(("psp_13_0_6", "gc_9_4_3", "sdma_4_4_2", "smu_13_0_6")): shutil.copy(os.path.join(mi300_fw, n), tmp_path / n)
  mec = bytearray((tmp_path / "gc_9_4_3_mec.bin").read_bytes()); mec[0x110:0x114] = b"XXXX"   # '$PS1' of the code image
  (tmp_path / "gc_9_4_3_mec.bin").write_bytes(mec)
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", str(tmp_path))
  monkeypatch.setenv("RAWGPU_FIRMWARE_ANY", "1")
  vbus, board, bus, pci = mi300
  pci.close()
  with pytest.raises(FirmwareError, match=rf"LOAD_IP_FW \(firmware type {P.GFX_FW_TYPE_CP_MEC}\) with status 0xffff000f"): _open_am(bus, vbus)
  assert P.GFX_FW_TYPE_CP_MEC not in board.fw_loaded


def test_a_board_whose_psp_did_not_start_says_so(mi300, mi300_fw):
  vbus, board, bus, pci = mi300
  pci.close()
  board.psp.sos_alive = False
  board.regs.vals[board.psp.a[81]] = 0
  with pytest.raises(DeviceTimeout, match="secure OS is not running.*power-cycle"): _open_am(bus, vbus)


def test_an_smu_that_refuses_is_a_clear_fault(mi300, mi300_fw):
  from rawgpu.errors import DeviceFault
  vbus, board, bus, pci = mi300
  pci.close()
  board.inject("smu_error", response=0xFE)
  with pytest.raises(DeviceFault, match=r"SMU answered PPSMC_MSG_GetSmuVersion \(0x2, .*UnknownCmd"): _open_am(bus, vbus)


def _every_hub_walks_ams_tables(board):
  """Every XCC's gfxhub and every AID's mmhub were given VMID 0 on one root, 3 levels translating further: pages AM's
  page-table writer maps there (4 KiB and 2 MiB) translate the same through each hub."""
  from rawgpu.drivers.am import mm
  hubs = board.gmc.gcs + board.gmc.mms
  assert len(hubs) == 12
  v = board.regs.vals
  roots = {(v[h.ctx[0][2]] << 32 | v[h.ctx[0][1]]) & ~0xfff for h in hubs}
  assert len(roots) == 1
  for h in hubs:
    c = h.b.regs.reg(h.ip, "regVM_CONTEXT0_CNTL").decode(v[h.ctx[0][0]])
    assert (c["ENABLE_CONTEXT"], c["PAGE_TABLE_DEPTH"], c["PAGE_TABLE_BLOCK_SIZE"]) == (1, 2, 9), h.ip
  vram_base = (v.get(board.regs.addr("mmhub", "regMC_VM_FB_OFFSET"), 0) & 0xffffff) << 24
  root = roots.pop() - vram_base
  spare = iter(range(96 << 20, 128 << 20, mm.PAGE))
  pt = mm.PageTables(lambda p, s: board.vram[p:p + s], lambda: next(spare), lambda p: None, mm.PTEFlags(gfx9=True), root=root)
  small, huge = pt.map(mm.VA_BASE + (5 << 21) + 0x3000, [(0x140_0000, 0x2000)]), pt.map(mm.VA_BASE + (8 << 21), [(0x60_0000, 1 << 21)])
  assert huge.huge and not small.huge
  for h in hubs:
    h.tlb.clear(); h.ext.clear()
    assert h.page(0, small.va + 0x1000, False) == (0, 0x140_1000)
    assert h.page(0, huge.va + 0x12_3000, True) == (0, 0x72_3000)


def _a_page_fault_reaches_ams_ih_ring(board):
  """A GC-hub fault at an unmapped VA: the board latches it and posts a SOC15 UTCL2 entry into the ring AM set up
  (RB_BASE, 32-byte IVs), moving the write pointer AM reads from its writeback slot."""
  import struct
  from rawgpu.autogen.amd import ih
  from rawgpu.drivers.am import mm
  from rawgpu.drivers.emu.amd.gmc import Fault
  r, v = board.regs, board.regs.vals
  fb = (v[r.addr("mmhub", "regMC_VM_FB_LOCATION_BASE")] & 0xffffff) << 24
  base = ((v.get(r.addr("osssys", "regIH_RB_BASE_HI"), 0) << 32 | v[r.addr("osssys", "regIH_RB_BASE")]) << 8) - fb
  wb = (v[r.addr("osssys", "regIH_RB_WPTR_ADDR_HI")] << 32 | v[r.addr("osssys", "regIH_RB_WPTR_ADDR_LO")]) - fb
  assert struct.unpack_from("<I", board.vram, wb)[0] == 0
  va = mm.VA_BASE + (40 << 21)
  with pytest.raises(Fault): board.gmc.gc.page(0, va, False)
  assert struct.unpack_from("<I", board.vram, wb)[0] == 32
  dw = struct.unpack_from("<8I", board.vram, base)
  assert dw[0] & 0xff == ih.SOC15_IH_CLIENTID_UTCL2 and (dw[4] << 12 | (dw[5] & 0xf) << 44) == va


# ---- end to end: hcq on AM on the board (compute on XCC 0 unless named, copies on AID 0's SDMA 4.4.2 engines)

@pytest.fixture
def mi300_device(mi300_fw):
  from rawgpu.drivers.am import AMIface
  from rawgpu.hcq.device import Device
  vbus = VirtualBus(host=HostRAM(64 << 20))
  board = AMDBoard(arch="gfx942", host=vbus.host, vram_size=512 << 20)
  dev = Device(iface=AMIface(vbus.plug(board), vbus.system))
  yield dev, board
  dev.close()
  board.close()


def test_hcq_runs_gfx942_kernels_on_the_board(mi300_device):
  """The committed gfx942 code objects through hcq's gfx9 PM4 (HDP flush in the stream, gfx9 ACQUIRE_MEM and
  RELEASE_MEM, wave64 dispatch) on the board's F32 MEC, XCC 0, against numpy."""
  import numpy as np
  from rawgpu import kernels
  dev, board = mi300_device
  p = dev.props
  assert (p.arch, p.wave_size, p.ip_versions["gc"], p.ip_versions["sdma"]) == ("gfx942", 64, (9, 4, 3), (4, 4, 2))
  assert p.compute_units == 38 == board.cus   # XCC 0's CUs that work (an MI300X XCD enables 38 of 40), counted from the fuses
  prg = lambda obj, name: dev.program(kernels.path("gfx942", obj).read_bytes(), name)
  rng = np.random.default_rng(5)
  n = 1000
  a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
  A, B, C = dev.alloc(4 * n), dev.alloc(4 * n), dev.alloc(4 * n)
  A.copyin(a); B.copyin(b)
  prg("vadd", "vadd_f32")(A, B, C, n, global_size=(4, 1, 1), local_size=(256, 1, 1), wait=True)
  np.testing.assert_array_equal(C.numpy(np.float32)[:n], a + b)
  x = rng.random(4096, dtype=np.float32)
  X, S = dev.alloc(4 * 4096), dev.alloc(4 * 16)
  X.copyin(x)
  prg("reduce", "reduce_sum_f32")(X, S, 4096, global_size=(16, 1, 1), local_size=(256, 1, 1), wait=True)
  np.testing.assert_allclose(S.numpy(np.float32)[:16].astype(np.float64).sum(), x.astype(np.float64).sum(), rtol=1e-5)
  t = prg("vadd", "vadd_f32")(A, B, C, n, global_size=(4, 1, 1), local_size=(256, 1, 1), timing=True)
  assert t > 0                                                          # RELEASE_MEM timestamps around the dispatch
  assert not board.errors


def test_a_board_that_is_node_3_of_an_xgmi_hive(mi300_fw):
  """An MI300X in an 8-board XGMI hive: its VRAM is segment 3 of the hive's FB range (MC_VM_XGMI_LFB_CNTL/SIZE), so
  its MC addresses and every PTE/PDE are offset by 3 segments (gmc_v9_0_vram_gtt_location adds
  physical_node_id * node_segment_size to both). Kernels and copies see their data; the other segments are
  other boards' (XGMI to them is not modelled)."""
  import numpy as np
  from rawgpu import kernels
  from rawgpu.drivers.am import AMIface
  from rawgpu.hcq.device import Device
  vbus = VirtualBus(host=HostRAM(64 << 20))
  board = AMDBoard(arch="gfx942", host=vbus.host, vram_size=256 << 20, xgmi=(3, 8))
  dev = Device(iface=AMIface(vbus.plug(board), vbus.system))
  try:
    gmc = dev.iface.dev.gmc
    assert gmc.xgmi_node() == (3, 256 << 20) and gmc.vram_base_offset == 3 * (256 << 20) and gmc.fb_base == gmc.fb_start + 3 * (256 << 20)
    rng = np.random.default_rng(3)
    n = 1000
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    A, B, C = dev.alloc(4 * n), dev.alloc(4 * n), dev.alloc(4 * n)
    A.copyin(a); B.copyin(b)
    dev.program(kernels.path("gfx942", "vadd").read_bytes(), "vadd_f32")(A, B, C, n, global_size=(4, 1, 1), local_size=(256, 1, 1), wait=True)
    np.testing.assert_array_equal(C.numpy(np.float32)[:n], a + b)
    data = rng.integers(0, 256, 3 << 20, dtype=np.uint8)
    D = dev.alloc(len(data))
    D.copyin(data)
    assert np.array_equal(D.numpy(np.uint8)[:len(data)], data) and not board.errors
  finally:
    dev.close(); board.close()
  with pytest.raises(ValueError, match="MI300X"): AMDBoard(arch="gfx1100", xgmi=(0, 2))


def test_sdma_copies_on_the_board(mi300_device):
  """SDMA 4.4.2 on AID 0's MM hub: copies of odd sizes and offsets between VRAM and host memory (staged through the
  copy engine), a device-to-device transfer, a copy ordered after a kernel by a timeline wait."""
  import numpy as np
  from rawgpu import kernels
  dev, board = mi300_device
  rng = np.random.default_rng(9)
  data = rng.integers(0, 256, 3 << 20, dtype=np.uint8)             # more than one 2 MiB staging buffer
  A, B = dev.alloc(len(data) + 4096), dev.alloc(len(data) + 4096)
  A.view(7, len(data) - 11).copyin(data[:len(data) - 11])
  dev.transfer(B, A, len(data))
  np.testing.assert_array_equal(B.numpy(np.uint8)[7:len(data) - 4], data[:len(data) - 11])
  fill = dev.program(kernels.path("gfx942", "fill").read_bytes(), "fill_u32")
  fill(A, 0x5a5a5a5a, 1024, global_size=(4, 1, 1), local_size=(256, 1, 1))   # not waited for: the transfer orders after it
  dev.transfer(B, A, 4096)
  assert (B.numpy(np.uint32)[:1024] == 0x5a5a5a5a).all()
  assert any(q.rptr for e in board.sdma.engines[:4] for q in e.queues) and not board.errors


def test_every_sdma_engine_gets_the_kernels_settings(mi300_device):
  """sdma_v4_4_2_inst_start on every engine: UTC L1 on ("set utc l1 enable flag always to 1"), the context-empty
  interrupt, the semaphore-wait timer off, the page-fault timeout 0x00800080; a ring's F32 write-pointer polling off
  (doorbells on bare metal)."""
  dev, board = mi300_device
  d, regs = dev.iface.dev, board.regs
  dev.copy_queue()   # a ring exists
  for e in d.sdma.all_engines():
    cntl = d.sdma.r(e, "regSDMA0_CNTL").fields()
    assert (cntl["UTC_L1_ENABLE"], cntl["CTXEMPTY_INT_ENABLE"]) == (1, 1)
    assert d.sdma.r(e, "regSDMA0_UTCL1_TIMEOUT").read() == 0x00800080 and d.sdma.r(e, "regSDMA0_SEM_WAIT_FAIL_TIMER_CNTL").read() == 0
  for q in d.sdma.queues.values():
    assert d.sdma.r(q.engine, "regSDMA0_QUEUE0_RB_WPTR_POLL_CNTL", q.queue).fields()["F32_POLL_ENABLE"] == 0
  assert not board.errors


def test_sdma_4_counts_copies_in_22_bits(mi300_device):
  """SDMA 4's COPY_LINEAR count is 22 bits (sdma_v4_4_2_pkt_open.h; 30 from SDMA 5.2 on): a count with bit 22 set
  copies what its low 22 bits say, as hcq's 4 MiB chunking (copy_max_bytes) expects."""
  import numpy as np
  from rawgpu.hcq.amd import sdma
  dev, board = mi300_device
  src, dst = dev.alloc(4096), dev.alloc(4096)
  src.copyin(np.arange(1024, dtype=np.uint32) + 1)
  dst.copyin(np.zeros(1024, np.uint32))
  words = sdma.copy_linear(dst.va, src.va, 16, version=(4, 4))
  words[1] |= 1 << 22                                   # the count dword: a reserved bit above the 22-bit field
  v = dev.next_timeline("sdma")
  q = dev.copy_queue()
  q._add(lambda: words)
  q.signal(dev.timeline, dev.timeline_gpu(v)).submit(dev)
  dev.wait_timeline(v)
  out = dst.numpy(np.uint32)
  assert list(out[:4]) == [1, 2, 3, 4] and not out[4:].any() and not board.errors


def test_gfx9_dma_data_counts_bytes_in_26_bits(mi300_device):
  """On gfx940 DMA_DATA's BYTE_COUNT is bits 25:0 of its last dword (Mesa's pkt3.json COMMAND_gfx9, chips gfx9 to
  gfx12; radeonsi's CP DMA sizes by it from gfx9 on; soc15d.h's comment still gives gfx8's [20:0]): a fill whose
  count sets bit 21 writes 2 MiB + 16 bytes and no more."""
  import numpy as np
  from rawgpu.hcq.amd import pm4
  dev, board = mi300_device
  n = (1 << 21) | 16
  dst = dev.alloc(n + 4096)
  dst.copyin(np.zeros((n + 4096) // 4, np.uint32))
  body = [2 << 29, 0xc0ffee, 0, dst.va & 0xffffffff, dst.va >> 32, n]   # SRC_SEL DATA, DST_SEL memory
  v = dev.next_timeline("compute")
  q = dev.compute_queue()
  q._add(lambda: [pm4.header(pm4.P.PACKET3_DMA_DATA, len(body), gen=9), *body])
  q.signal(dev.timeline, dev.timeline_gpu(v)).submit(dev)
  dev.wait_timeline(v)
  out = dst.numpy(np.uint32)
  assert (out[:n // 4] == 0xc0ffee).all() and not out[n // 4:].any() and not board.errors


# ---- in-place recovery: the SMU resets an SDMA engine (ResetSDMA, newer than 6.12's headers: drivers/am/facts.py)

def _fault_the_copy_engine(dev):
  from rawgpu.errors import DeviceFault
  v = dev.next_timeline("sdma")
  dev.copy_queue().copy(dev.alloc(4096).va, 0x7f30_0000_0000, 4096).signal(dev.timeline, dev.timeline_gpu(v)).submit(dev)
  with pytest.raises(DeviceFault, match="page fault at VA 0x7f3000000000"): dev.wait_timeline(v, timeout_ms=5000)


def test_recovery_resets_only_the_faulted_engine_through_the_smu(mi300_device, monkeypatch):
  """recover() after a copy fault: AM stops the ring and sends ResetSDMA with the engine's instance bit; the SMU
  resets that engine alone (its ring registers read as at power-on, its microengine runs again) and AM programs the
  ring afresh. The other engines keep their state."""
  import numpy as np
  from rawgpu.drivers.emu.amd.sdma import SDMAEngine
  from rawgpu.errors import DeviceFault
  dev, board = mi300_device
  am = dev.iface.dev
  _fault_the_copy_engine(dev)
  e = next(q.engine for h, q in dev.iface.rings if h.kind == "sdma")
  hung = board.sdma.engines[e].queues[0]
  assert hung.hung and "memory fault" in hung.hung
  other = board.sdma.engines[e + 1]
  other_base = board.regs.get(other.ip, "regSDMA_GFX_RB_BASE")
  reset, orig = [], SDMAEngine.reset
  monkeypatch.setattr(SDMAEngine, "reset", lambda self: (reset.append(self.i), orig(self)))
  dev.recover()
  assert reset == [e]
  assert hung.hung is None and hung.enabled and board.sdma.engines[e].running()
  assert board.regs.get(other.ip, "regSDMA_GFX_RB_BASE") == other_base
  data = np.arange(1024, dtype=np.uint32)
  assert np.array_equal(dev.alloc(4096).copyin(data).numpy(np.uint32)[:1024], data)   # the copy engine works again
  with pytest.raises(DeviceFault, match=r"SMU answered PPSMC_MSG_ResetSDMA \(0x4d, arg 0x10000\) with .*Failed"):
    am.smu.send("PPSMC_MSG_ResetSDMA", 1 << 16)   # no engine 16
  assert not board.errors


def test_recovery_with_a_pmfw_too_old_for_the_reset_is_refused_clearly(mi300_fw):
  """PMFW before 85.121.0 does not know ResetSDMA (smu_v13_0_6_init_caps): AM refuses recover() by naming both
  versions before it touches any ring, and the board's SMU indeed answers the message with UnknownCmd."""
  from rawgpu.drivers.am import AMIface
  from rawgpu.errors import DeviceFault, RawGPUError
  from rawgpu.hcq.device import Device
  vbus = VirtualBus(host=HostRAM(64 << 20))
  board = AMDBoard(arch="gfx942", host=vbus.host, vram_size=512 << 20)
  board.smu.version = 0x00557300
  dev = Device(iface=AMIface(vbus.plug(board), vbus.system))
  try:
    _fault_the_copy_engine(dev)
    hw = dev.ring("sdma").hw
    before = (hw.ring.cpu.readbytes(0, hw.ring.size), int(hw.write_ptr[0]))
    with pytest.raises(RawGPUError, match=r"SDMA 4.4.2 engine 0 is reset by the SMU, and its PMFW 85.115.0 \(program 0\) is older .*"
                                          r"PMFW 85.121.0 \(program 0\) knows it.*open it again"):
      dev.recover()
    assert (hw.ring.cpu.readbytes(0, hw.ring.size), int(hw.write_ptr[0])) == before and dev.faulted
    with pytest.raises(DeviceFault, match=r"PPSMC_MSG_ResetSDMA \(0x4d, arg 0x1\) with .*UnknownCmd"): dev.iface.dev.smu.send("PPSMC_MSG_ResetSDMA", 1)
  finally:
    dev.close(); board.close()


def test_recovery_when_the_smu_fails_the_reset_says_so_and_stays_faulted(mi300_device):
  """The SMU answers ResetSDMA with Failed (injected): recover() raises a DeviceFault naming the message, the device
  stays faulted, and reopening is what is left."""
  from rawgpu.errors import DeviceFault
  dev, board = mi300_device
  _fault_the_copy_engine(dev)
  board.inject("smu_error", response=0xFF)
  with pytest.raises(DeviceFault, match=r"SMU answered PPSMC_MSG_ResetSDMA \(0x4d, arg 0x1\) with .*Failed"): dev.recover()
  board.clear_faults()
  assert dev.faulted


def test_recovery_when_the_engine_stays_halted_after_its_reset_times_out_naming_it(mi300_device):
  """The SMU resets the engine but its microengine does not run again (injected): recover() times out waiting for
  F32_CNTL.HALT to drop, naming the engine, instead of programming a ring nobody reads."""
  from rawgpu.errors import DeviceTimeout
  dev, board = mi300_device
  _fault_the_copy_engine(dev)
  board.inject("sdma_reset_stuck")
  dev.iface.dev.timeout_scale = 0.1
  with pytest.raises(DeviceTimeout, match="timed out waiting for SDMA engine 0 to run again after the SMU reset it"): dev.recover()
  board.clear_faults()
  assert dev.faulted


def test_a_fault_in_another_aids_mm_hub_is_read_from_that_hub(mi300_device):
  """MI300 has an MM hub per AID: a fault latched in AID 1's hub is decoded from that hub's status (client, access)
  and cleared there, not read from AID 0's empty one."""
  from rawgpu.drivers.emu.amd.gmc import CID_CPC, MM_CID_SDMA0, Fault, acting_as
  from rawgpu.errors import DeviceFault
  dev, board = mi300_device
  va = 0x7f40_0000_0000
  acting_as(CID_CPC, mm_cid=MM_CID_SDMA0 + 1)                  # as AID 1's second SDMA engine
  try:
    with pytest.raises(Fault): board.gmc.mms[1].page(0, va, True)
  finally: acting_as(CID_CPC)
  with pytest.raises(DeviceFault, match=rf"VA {va:#x} \(write, client SDMA1, .*hub MM 1, client id 257"): dev.iface.check_faults()
  assert board.regs.get("mmhub:1", "regVM_L2_PROTECTION_FAULT_STATUS") == 0    # cleared where it was latched


# ---- every XCC's MEC: AM runs a device's compute queues on the XCC it names (a partition of one XCC each)

@pytest.fixture
def mi300_xcc5(mi300_fw):
  """hcq on AM on the board with its compute queues on XCC 5 (the second XCD of AID 2)."""
  from rawgpu.drivers.am import AMIface
  from rawgpu.hcq.device import Device
  vbus = VirtualBus(host=HostRAM(64 << 20))
  board = AMDBoard(arch="gfx942", host=vbus.host, vram_size=512 << 20)
  dev = Device(iface=AMIface(vbus.plug(board), vbus.system, xcc=5))
  yield dev, board
  dev.close()
  board.close()


def test_a_device_on_xcc_5_runs_its_kernels_there(mi300_xcc5):
  """The queue's HQD is XCC 5's (its GRBM_GFX_CNTL and registers, its layout-1 doorbell range): XCC 5's MEC runs the
  kernels, on its CUs, through its own GC hub; XCC 0's MEC has nothing. Results against numpy."""
  import numpy as np
  from rawgpu import kernels
  dev, board = mi300_xcc5
  assert dev.props.compute_units == 38 and dev.props.name.endswith("XCC 5") and dev.props.xcc == 5 and str(dev).endswith("@0000:c1:00.0/xcc5")
  n = 1000
  rng = np.random.default_rng(7)
  a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
  A, B, C = dev.alloc(4 * n), dev.alloc(4 * n), dev.alloc(4 * n)
  A.copyin(a); B.copyin(b)
  vadd = dev.program(kernels.path("gfx942", "vadd").read_bytes(), "vadd_f32")
  vadd(A, B, C, n, global_size=(4, 1, 1), local_size=(256, 1, 1), wait=True)
  np.testing.assert_array_equal(C.numpy(np.float32)[:n], a + b)
  assert vadd(A, B, C, n, global_size=(4, 1, 1), local_size=(256, 1, 1), timing=True) > 0
  ran = {x: sum(q.dispatches for q in g.queues.values()) for x, g in enumerate(board.xccs)}
  assert ran[5] >= 2 and sum(ran.values()) == ran[5], ran
  (q,) = board.xccs[5].queues.values()
  assert q.doorbell_index() == (0x008 + 5 * 0x20) * 2          # MEC ring 0 of XCC 5's layout-1 range
  import ctypes
  from rawgpu.autogen.amd import mqd_v9
  am_q = next(iter(dev.iface.dev.gfx.queues.values()))
  m = mqd_v9.v9_mqd.from_buffer_copy(bytes(board.vram[am_q.mqd:am_q.mqd + ctypes.sizeof(mqd_v9.v9_mqd)]))
  assert m.compute_misc_reserved == 3 and all(getattr(m, f"compute_static_thread_mgmt_se{se}") == 0xffffffff for se in range(4))   # gfx_v9_4_3_xcc_mqd_init
  assert not board.errors


def test_packets_name_registers_of_their_own_xcc(mi300_xcc5):
  """A register a packet names by its normalized (XCC 0) offset is written on the queue's own XCC
  (gfx_v9_4_3_normalize_xcc_reg_offset), not on XCC 0."""
  from rawgpu.hcq.amd import pm4
  dev, board = mi300_xcc5
  r = board.regs
  scratch = r.addr("gc", "regSCRATCH_REG0")
  q = dev.compute_queue()
  q._add(pm4.write_data, scratch, 0x5a5a, dst_sel=pm4.DstSel.REGISTER, gen=9)
  q.signal(dev.timeline, dev.timeline_gpu(t := dev.next_timeline("compute"))).submit(dev)
  dev.wait_timeline(t)
  assert r.vals.get(r.addr("gc:5", "regSCRATCH_REG0")) == 0x5a5a and r.vals.get(scratch, 0) == 0


def test_faults_name_their_die_in_the_interrupt(mi300_xcc5):
  """IV entries carry the node id of the die they come from (amdgpu_irq.h): XCC 5's GC hub is XCD 5 = node 10, AID 2's
  MM hub node 8. A kernel that faults on XCC 5 is reported from XCC 5's hub."""
  import struct
  from rawgpu import kernels
  from rawgpu.drivers.emu.amd.gmc import Fault
  from rawgpu.errors import DeviceFault
  dev, board = mi300_xcc5
  posted = []
  real = board.ih.rings[0].post
  board.ih.rings[0].post = lambda words: posted.append(struct.unpack("<8I", words)) or real(words)
  for hub, node in ((board.gmc.gcs[5], 10), (board.gmc.mms[2], 8)):
    with pytest.raises(Fault): hub.page(0, 0x7f60_0000_0000, False)
    assert (posted[-1][3] >> 16) & 0xff == node, (hub.name, posted[-1])
    with pytest.raises(DeviceFault, match=f"hub {'GC 5' if node == 10 else 'MM 2'}"): dev.iface.check_faults()
  dev.faulted = ""
  fault = dev.program(kernels.path("gfx942", "fault").read_bytes(), "fault_store")
  with pytest.raises(DeviceFault, match="hub GC 5"): fault(0x7f70_0000_0000, 1, global_size=(1, 1, 1), local_size=(64, 1, 1), wait=True)


def test_an_xcc_the_board_lacks_is_refused(mi300_fw):
  from rawgpu.drivers.am import AMIface
  vbus = VirtualBus(host=HostRAM(64 << 20))
  board = AMDBoard(arch="gfx942", host=vbus.host, vram_size=512 << 20)
  try:
    with pytest.raises(RawGPUError, match=r"no XCC 8; the board has 8 \(0-7\)"): AMIface(vbus.plug(board), vbus.system, xcc=8)
  finally: board.close()


def test_devices_on_two_xccs_of_one_board(mi300_fw):
  """Each XCC is a device (a partition, as amdgpu's CPX mode): two of them share the board's driver, run kernels side by
  side on their own MECs and copy on their own engines (2x, 2x + 1); one's buffer is the other's once mapped; a fault
  stops only the device whose XCC made it; closing one leaves the other running."""
  import numpy as np
  from rawgpu import kernels
  from rawgpu.drivers.am import AMIface
  from rawgpu.drivers.am.iface import _OPEN
  from rawgpu.errors import DeviceBusy, DeviceFault
  from rawgpu.hcq.device import Device
  vbus = VirtualBus(host=HostRAM(64 << 20))
  board = AMDBoard(arch="gfx942", host=vbus.host, vram_size=512 << 20)
  bus = vbus.plug(board)
  a = Device(iface=AMIface(bus, vbus.system, xcc=2))
  b = Device(iface=AMIface(bus, vbus.system, xcc=5))
  try:
    assert a.iface.dev is b.iface.dev and a.iface.dev.partitions == {2, 5}
    with pytest.raises(DeviceBusy, match=r"XCC 5 is already open in this process"): AMIface(bus, vbus.system, xcc=5)
    with pytest.raises(RawGPUError, match=r"boot options \(timeout_scale\) apply to the first device only"): AMIface(bus, vbus.system, xcc=3, timeout_scale=2.0)
    prg = lambda d, obj, name: d.program(kernels.path("gfx942", obj).read_bytes(), name)
    rng = np.random.default_rng(11)
    n = 1 << 16
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    X, Y, Z = a.alloc(4 * n).copyin(x), a.alloc(4 * n).copyin(y), a.alloc(4 * n)
    S, T = b.alloc(4 * n).copyin(x), b.alloc(4 * 64)
    prg(a, "vadd", "vadd_f32")(X, Y, Z, n, global_size=(n // 256, 1, 1), local_size=(256, 1, 1))   # both queued, then waited
    prg(b, "reduce", "reduce_sum_f32")(S, T, 64 * 256, global_size=(64, 1, 1), local_size=(256, 1, 1))   # an element per thread
    a.synchronize(); b.synchronize()
    np.testing.assert_array_equal(Z.numpy(np.float32)[:n], x + y)
    np.testing.assert_allclose(T.numpy(np.float32)[:64].astype(np.float64).sum(), x[:64 * 256].astype(np.float64).sum(), rtol=1e-5)
    ran = {k: sum(q.dispatches for q in g.queues.values()) for k, g in enumerate(board.xccs)}
    assert ran[2] and ran[5] and not any(v for k, v in ran.items() if k not in (2, 5)), ran
    assert sorted(a.iface.dev.sdma.queues) == [4, 10]                       # each device's first copy engine
    b.map(Z)
    W = b.alloc(4 * n)
    b.transfer(W, Z); b.synchronize()                                       # b's engine reads what a's kernel wrote
    np.testing.assert_array_equal(W.numpy(np.float32)[:n], x + y)
    b.map(X)
    a.close()                                                               # b goes on with the buffer of a's it mapped
    b.transfer(W, X); b.synchronize()
    np.testing.assert_array_equal(W.numpy(np.float32)[:n], x)
    a = Device(iface=AMIface(bus, vbus.system, xcc=2))
    Z = a.alloc(4 * n)
    with pytest.raises(DeviceFault, match="hub GC 5"): prg(b, "fault", "fault_store")(0x7f70_0000_0000, 1, local_size=(64, 1, 1), wait=True)
    prg(a, "fill", "fill_u32")(Z, 3, 16, local_size=(16, 1, 1), wait=True)    # a goes on, told nothing
    assert not a.faulted and list(Z.numpy(np.uint32)[:16]) == [3] * 16
    b.close()
    assert a.iface.dev.partitions == {2} and (id(vbus.system), bus) in _OPEN
    prg(a, "fill", "fill_u32")(Z, 4, 16, local_size=(16, 1, 1), wait=True)
    assert list(Z.numpy(np.uint32)[:16]) == [4] * 16
  finally:
    b.close(); a.close()
  assert (id(vbus.system), bus) not in _OPEN                                # the last one closed the board's driver
  c = Device(iface=AMIface(bus, vbus.system, xcc=5))                        # and it opens again, warm (a clean fini)
  try:
    assert c.iface.dev.warm and board.fw_loaded == MI300_IMAGES
    buf = c.alloc(64)
    c.program(kernels.path("gfx942", "fill").read_bytes(), "fill_u32")(buf, 5, 16, local_size=(16, 1, 1), wait=True)
    assert list(buf.numpy(np.uint32)[:16]) == [5] * 16
  finally: c.close(); board.close()


def test_mockkfd_lists_a_node_per_xcc(mi300_fw):
  """amdkfd lists an MI300X in CPX mode as a node per XCC: one board, eight nodes of one XCC each (the board's PCI
  location, a gpu_id and render node each, the XCC's CUs). A node's queues run on its XCC's MEC and its partition's
  copy engines; a fault on one node stops that node only (amdkfd signals every memory event of the process, naming
  the GPU; the other node's device does not take it as its own)."""
  import numpy as np
  from rawgpu import kernels
  from rawgpu.drivers.emu.mockkfd import machine
  from rawgpu.drivers.kfd.topology import gpu_nodes
  from rawgpu.errors import DeviceFault
  from rawgpu.hcq.device import Device
  m = machine("gfx942", 8)
  nodes = gpu_nodes(m.system)[:8]
  assert len({n.pci_bus for n in nodes}) == 1 and len({n.gpu_id for n in nodes}) == 8 and len({n.render_minor for n in nodes}) == 8
  assert all(n.props["num_xcc"] == 1 and n.props["simd_count"] == 38 * 4 for n in nodes)
  board = m.vbus.boards[m.gpus[0].dev.bus]
  a, b = Device("MOCKKFD:6+AMD::gfx942"), Device("MOCKKFD:2+AMD::gfx942")
  try:
    before = {k: sum(q.dispatches for q in g.queues.values()) for k, g in enumerate(board.xccs)}
    fill = lambda d: d.program(kernels.path("gfx942", "fill").read_bytes(), "fill_u32")
    for d, v in ((a, 6), (b, 2)):
      buf = d.alloc(4096)
      buf.copyin(np.zeros(1024, np.uint32))                                      # through the node's copy engine
      fill(d)(buf, v, 16, local_size=(16, 1, 1), wait=True)
      assert list(buf.numpy(np.uint32)[:17]) == [v] * 16 + [0]
    ran = {k: sum(q.dispatches for q in g.queues.values()) - before[k] for k, g in enumerate(board.xccs)}
    assert ran[6] and ran[2] and not any(v for k, v in ran.items() if k not in (2, 6)), ran
    assert {e.i for e in board.sdma.engines if any(q.enabled for q in e.queues[2:])} >= {12, 4}   # RLC queues of engines 2k of nodes 6 and 2
    with pytest.raises(DeviceFault, match="page fault at 0x7f7000000000"):
      a.program(kernels.path("gfx942", "fault").read_bytes(), "fault_store")(0x7f70_0000_0000, 1, local_size=(64, 1, 1), wait=True)
    buf = b.alloc(64)
    fill(b)(buf, 9, 16, local_size=(16, 1, 1), wait=True)                       # node 2 goes on
    assert list(buf.numpy(np.uint32)[:16]) == [9] * 16 and not b.faulted
  finally: a.close(); b.close()


def test_mockkfd_xcc_nodes_of_one_board_have_vms_of_their_own(mi300_fw):
  """Each XCC partition of an MI300 is a KFD node with a VM of its own (ACQUIRE_VM with the node's render node): its
  own page tables, and in CPX mode a VMID from its half of the KFD range (kfd_device.c: 4-9 for an AID's first XCD,
  10-15 for its second). A BO a process made on one node reaches the other's engines only once it is mapped there
  too (MAP_MEMORY_TO_GPU, as for any peer); unmapped there, the first node keeps it; a BO never mapped there is a
  page fault on the other node."""
  import numpy as np
  from rawgpu.drivers.emu.mockkfd import machine
  from rawgpu.errors import DeviceFault
  from rawgpu.hcq.device import Device
  m = machine("gfx942", 8)
  a, b = Device("MOCKKFD:3+AMD::gfx942"), Device("MOCKKFD:4+AMD::gfx942")   # XCC 3 (AID 1's second XCD), XCC 4 (AID 2's first)
  proc, d = m.kernel.processes[0], m.gpus[0].dev
  vm_a, vm_b = proc.vms[m.gpus[3]], proc.vms[m.gpus[4]]
  assert (vm_a.vmid, vm_b.vmid) == (10, 4) and vm_a.pt is not vm_b.pt
  d.gfx.grbm_select(vmid=vm_a.vmid, xcc=3)
  try: assert {k: v for k, v in d.gfx.gc("regSH_MEM_CONFIG", 3).fields().items() if v} == {"ALIGNMENT_MODE": 3, "F8_MODE": 1, "RETRY_DISABLE": 1}
  finally: d.gfx.grbm_select(xcc=3)
  try:
    data = np.arange(1 << 14, dtype=np.uint32)
    x, y = a.alloc(data.nbytes).copyin(data), b.alloc(data.nbytes)
    assert vm_a.pt.translate(x.va) is not None and vm_b.pt.translate(x.va) is None
    b.map(x)
    assert vm_b.pt.translate(x.va) == vm_a.pt.translate(x.va)                  # the same VRAM, in node 4's tables too
    b.transfer(y, x)                                                            # node 4's copy engine reads node 3's BO
    assert np.array_equal(y.numpy(np.uint32), data)
    from test_kfd_mock import check_gpu_wakes
    check_gpu_wakes(b)                                                          # end of pipe and SDMA trap IVs reach the process
    b.iface.unmap_peer(x.mem)
    assert vm_b.pt.translate(x.va) is None and vm_a.pt.translate(x.va) is not None   # still node 3's
    assert np.array_equal(x.numpy(np.uint32), data)
    x.free()
    assert vm_a.pt.translate(x.va) is None
    z = a.alloc(4096)                                                           # node 3's only: node 4's kernels fault on it
    from rawgpu import kernels
    with pytest.raises(DeviceFault, match=f"page fault at {z.va:#x}"):
      b.program(kernels.path("gfx942", "fault").read_bytes(), "fault_store")(z.va, 1, local_size=(64, 1, 1), wait=True)
  finally: a.close(); b.close()


def test_a_closed_xcc_gives_back_its_memory_and_queues(mi300_fw):
  """A device of one XCC that closes while another of the board stays open frees what it took (its buffers, rings,
  queue descriptors, copy engines): opening and closing it again and again leaves the board's memory as it was, and a
  buffer freed after its device closed is not freed twice."""
  from rawgpu import kernels
  from rawgpu.drivers.am import AMIface, mm
  from rawgpu.hcq.device import Device
  vbus = VirtualBus(host=HostRAM(64 << 20))
  board = AMDBoard(arch="gfx942", host=vbus.host, vram_size=512 << 20)
  bus = vbus.plug(board)
  a = Device(iface=AMIface(bus, vbus.system, xcc=0))
  try:
    d = a.iface.dev
    a.alloc(4096).copyin(bytes(4096)); a.synchronize()
    def used() -> tuple[int, int]: return d.visible.free_bytes, mm.VA.free_bytes
    for i in range(3):
      b = Device(iface=AMIface(bus, vbus.system, xcc=3))
      buf = b.alloc(1 << 20)
      buf.copyin(bytes(1 << 20))                          # its copy engine and compute ring exist
      b.program(kernels.path("gfx942", "fill").read_bytes(), "fill_u32")(buf, 1, 16, local_size=(16, 1, 1), wait=True)
      b.close()
      buf.free()                                          # after its device: nothing freed twice
      if i == 0: first = used()
      else: assert used() == first, (i, used(), first)
    assert not d.sdma.queues.keys() - {0, 1} and all(x == 0 for x, _ in d.gfx.queues)
  finally: a.close(); board.close()


def test_smu_metrics_show_which_xcc_is_busy(mi300_fw):
  """am-smi's MI300 reading takes each XCD's activity from MetricsTableX_t.GfxBusy ("per XCD activity"): while a kernel
  spins on XCC 3 the board reports XCC 3 busy and the others idle; am-smi's screen shows the row."""
  import numpy as np
  from rawgpu import kernels
  from rawgpu.drivers.am import AMIface
  from rawgpu.drivers.am.metrics import SMUMetrics
  from rawgpu.hcq.device import Device
  from rawgpu.tools.am_smi import BoardMetrics, render
  vbus = VirtualBus(host=HostRAM(64 << 20))
  board = AMDBoard(arch="gfx942", host=vbus.host, vram_size=512 << 20)
  bus = vbus.plug(board)
  d = Device(iface=AMIface(bus, vbus.system, xcc=3))
  try:
    flag, done = d.alloc(4, host=True), d.alloc(4, host=True)
    flag.cpu()[:4] = done.cpu()[:4] = bytes(4)
    d.program(kernels.path("gfx942", "spin").read_bytes(), "spin_until")(flag, 7, done, local_size=(64, 1, 1))
    r = SMUMetrics(vbus.system).read(bus)
    assert r.unavailable is None and r.xcc_activity == [0.0, 0.0, 0.0, 100.0, 0.0, 0.0, 0.0, 0.0], r.xcc_activity
    assert any("XCC busy" in ln and "3:100%" in ln for ln in render([BoardMetrics(bus, xcc_activity=r.xcc_activity)], {}, width=200))
    flag.cpu()[:4] = (7).to_bytes(4, "little")          # the kernel polls the flag: release it
    d.synchronize()
    assert done.numpy(np.uint32)[0] == 8
    assert SMUMetrics(vbus.system).read(bus).xcc_activity == [0.0] * 8
  finally: d.close(); board.close()


def test_every_xcc_of_a_board_from_one_dev_string(mi300_fw):
  """hcq.devices(DEV) opens every device a DEV names (on MI300 each index an XCC: MOCKPCI:0-7 is one board's eight);
  Device(DEV) opens one and refuses a DEV that names several rather than opening them all and keeping one."""
  from rawgpu.hcq import Device, devices
  with pytest.raises(RawGPUError, match=r"names 2 devices and Device opens one: .*rawgpu.hcq.devices"): Device("MOCKPCI:6-7+AMD::gfx942")
  ds = devices("MOCKPCI:6-7+AMD::gfx942")
  try:
    assert [d.props.xcc for d in ds] == [6, 7] and ds[0].iface.dev is ds[1].iface.dev
    one = Device("MOCKPCI:5+AMD::gfx942")                      # another XCC of the same board, in the same process
    one.close()
  finally:
    for d in ds: d.close()
  again = Device("MOCKPCI:7+AMD::gfx942")                       # nothing was left open
  again.close()


@pytest.fixture(scope="module")
def mi300_board_for_sequences():
  from conftest import find_firmware
  d = find_firmware("20250410-2")
  if d is None: pytest.skip("firmware-amd-graphics 20250410 (MI300's files) not fetched: run .ci/fetch-firmware")
  mp = pytest.MonkeyPatch()
  mp.setenv("RAWGPU_FIRMWARE_DIR", d); mp.setenv("RAWGPU_AM_IN_PROGRESS", "1"); mp.delenv("RAWGPU_FIRMWARE_ANY", raising=False)
  vbus = VirtualBus(host=HostRAM(256 << 20))
  board = AMDBoard(arch="gfx942", host=vbus.host, vram_size=512 << 20)
  yield vbus, board, vbus.plug(board)
  board.close(); mp.undo()


STEPS = st.lists(st.tuples(st.sampled_from(["open", "close", "fill", "copy", "fault"]), st.integers(0, 7)), min_size=1, max_size=8)


@settings(max_examples=12, deadline=None)
@given(steps=STEPS)
def test_random_open_close_run_and_fault_sequences_on_xccs(mi300_board_for_sequences, steps):
  """XCC devices of one board opened, used, faulted and closed in any order: each device's work is right whatever
  the others did, a fault stops only its own device, and once all are closed the board opens again."""
  import numpy as np
  from rawgpu import kernels
  from rawgpu.drivers.am import AMIface
  from rawgpu.errors import DeviceFault
  from rawgpu.hcq.device import Device
  vbus, board, bus = mi300_board_for_sequences
  code = {k: kernels.path("gfx942", k).read_bytes() for k in ("fill", "fault")}
  open_: dict[int, Device] = {}
  try:
    for i, (op, x) in enumerate(steps):
      d = open_.get(x)
      if op == "open" or d is None:
        if d is None: d = open_[x] = Device(iface=AMIface(bus, vbus.system, xcc=x))
        if op == "open": continue
      if op == "close": open_.pop(x).close(); continue
      if op == "fault":
        with pytest.raises(DeviceFault, match=f"hub GC {x}"):
          d.program(code["fault"], "fault_store")(0x7f70_0000_0000, 1, local_size=(64, 1, 1), wait=True)
        open_.pop(x).close()
        continue
      buf = d.alloc(4096)
      if op == "fill":
        buf.copyin(np.zeros(1024, np.uint32))
        d.program(code["fill"], "fill_u32")(buf, i + 1, 64, local_size=(64, 1, 1), wait=True)
        assert list(buf.numpy(np.uint32)[:65]) == [i + 1] * 64 + [0]
      else:
        data = np.arange(1024, dtype=np.uint32) * (i + 3)
        assert np.array_equal(buf.copyin(data).numpy(np.uint32), data)
      buf.free()
    assert all(not d.faulted for d in open_.values())
  finally:
    for d in open_.values(): d.close()
  d = Device(iface=AMIface(bus, vbus.system, xcc=steps[0][1]))
  d.close()


def test_xccs_opened_from_several_threads_share_one_driver(mi300_fw):
  """Threads that open XCCs of one board at the same time get one driver between them (none is refused as busy)."""
  import threading
  from rawgpu.drivers.am import AMIface
  vbus = VirtualBus(host=HostRAM(64 << 20))
  board = AMDBoard(arch="gfx942", host=vbus.host, vram_size=512 << 20)
  bus = vbus.plug(board)
  out, errors = {}, []
  def open_one(x: int) -> None:
    try: out[x] = AMIface(bus, vbus.system, xcc=x)
    except Exception as e: errors.append(e)
  threads = [threading.Thread(target=open_one, args=(x,)) for x in range(4)]
  for t in threads: t.start()
  for t in threads: t.join()
  try:
    assert not errors and len({id(it.dev) for it in out.values()}) == 1 and out[0].dev.partitions == {0, 1, 2, 3}
  finally:
    for it in out.values(): it.close()
    board.close()


def test_the_board_starts_in_spx_and_the_psp_partitions_it(mi300):
  """The emulated MI300X powers on as one partition of its eight XCCs (SPX, as MI300X boards ship); the PSP's spatial
  partition command (psp_spatial_partition) splits it into 1, 2, 4 or 8 partitions, programming CP_HYP_XCP_CTL as
  gfx_v9_4_3_switch_compute_partition does without a PSP, and NBIO reports the mode (amdgpu_gfx_partition numbers)."""
  from rawgpu.drivers.emu.amd.psp import TEE_ERROR_BAD_PARAMETERS, TEE_SUCCESS
  vbus, board, bus, pci = mi300
  r = board.regs
  def state():
    ctl = [r.reg(g.key, "regCP_HYP_XCP_CTL").decode(r.vals[g.a_xcp]) for g in board.xccs]
    mode = r.reg("nbio", "regBIF_BX_PF0_PARTITION_COMPUTE_STATUS").decode(r.get("nbio", "regBIF_BX_PF0_PARTITION_COMPUTE_STATUS"))["PARTITION_MODE"]
    return mode, [(c["NUM_XCC_IN_XCP"], c["VIRTUAL_XCC_ID"]) for c in ctl]
  assert state() == (0, [(8, i) for i in range(8)])
  for n, mode in ((2, 1), (4, 3), (8, 4), (1, 0)):
    assert board.psp.spatial_partition(n) == TEE_SUCCESS
    assert state() == (mode, [(8 // n, i % (8 // n)) for i in range(8)])
  assert board.psp.spatial_partition(3) == TEE_ERROR_BAD_PARAMETERS and state()[0] == 0   # 8 XCCs do not split in 3


def test_a_psp_that_refuses_the_partition_switch_is_a_clear_error(mi300, mi300_fw, monkeypatch):
  from rawgpu.drivers.emu.amd.psp import TEE_ERROR_BAD_PARAMETERS
  vbus, board, bus, pci = mi300
  pci.close()
  monkeypatch.setattr(board.psp, "spatial_partition", lambda n: TEE_ERROR_BAD_PARAMETERS)
  with pytest.raises(RawGPUError, match=r"the PSP refused to make 8 compute partitions \(CPX\), which AM needs"): _open_am(bus, vbus)


def test_a_revision_0_chip_gets_its_own_golden_setting(mi300, mi300_fw):
  """amdgpu's rev_id (nbio_v7_9_get_rev_id: NBIO's discovery sub-revision, else the straps' ATI_REV_ID) picks the
  TCP UTCL1 golden setting: on revision 0 the FIFO depth is halved instead of setting CNTL2.SPARE."""
  vbus, board, bus, pci = mi300
  pci.close()
  r = board.regs
  r.set("nbio", "regRCC_STRAP0_RCC_DEV0_EPF0_STRAP0", r.reg("nbio", "regRCC_STRAP0_RCC_DEV0_EPF0_STRAP0").encode(STRAP_ATI_REV_ID_DEV0_F0=0))
  dev = _open_am(bus, vbus)
  try:
    assert dev.soc.rev_id() == 0
    assert all(r.reg(k, "regTCP_UTCL1_CNTL1").decode(r.get(k, "regTCP_UTCL1_CNTL1"))["REDUCE_FIFO_DEPTH_BY_2"] == 2 for k in ["gc"] + [f"gc:{x}" for x in range(1, 8)])
    assert all(r.reg(k, "regTCP_UTCL1_CNTL2").decode(r.get(k, "regTCP_UTCL1_CNTL2"))["SPARE"] == 0 for k in ["gc"] + [f"gc:{x}" for x in range(1, 8)])
  finally: dev.fini()


def test_the_discovery_sub_revision_names_the_chip_revision(mi300_fw):
  """nbio_v7_9_get_rev_id takes NBIO's discovery sub-revision where it is set (the low nibble after the revision in an
  ip_v3/v4 entry), over the straps."""
  import dataclasses
  from rawgpu.drivers.am import discovery as am_discovery
  from rawgpu.drivers.emu.amd import asic as asics, discovery
  a = asics.asic("gfx942")
  ips = tuple(dataclasses.replace(e, sub_revision=2) if e.hw_id == asics.NBIF_HWID and e.instance == 0 else e for e in a.ips)
  disc = am_discovery.parse(discovery.build(dataclasses.replace(a, ips=ips), a.wgp_per_sa))
  assert disc.find("nbif").sub_revision == 2 and disc.find("gc").sub_revision == 0


def _copy_queue_hang(dev, board, words: list[int]) -> str | None:
  """Submit raw SDMA words on the device's copy queue; what the queue that ran them halted on (None: it did not)."""
  import time
  q = dev.copy_queue()
  q._add(lambda: words)
  q.submit(dev)
  deadline = time.monotonic() + 5
  while time.monotonic() < deadline:
    hung = [qq.hung for e in board.sdma.engines for qq in e.queues if qq.hung]
    if hung: return hung[0]
    time.sleep(0.01)
  return None


def test_sdma_4_has_no_gcr_packet(mi300_device):
  """SDMA 4's opcodes end at DUMMY_TRAP (16, vega10_sdma_pkt_open.h): opcode 17 (SDMA 5's GCR_REQ) is unknown there."""
  from rawgpu.autogen.amd import sdma_v6 as S6
  dev, board = mi300_device
  hung = _copy_queue_hang(dev, board, [S6.SDMA_OP_GCR_REQ, 0, 0, 0, 0])
  assert hung is not None and "unknown SDMA opcode 17" in hung


def test_grbm_soft_reset_bit_23_is_utcl2_not_sdma_on_gc_9_4_3(mi300_device):
  """gc 9.4.3's GRBM_SOFT_RESET bit 23 is SOFT_RESET_UTCL2 (the SMU resets MI300's SDMA engines): setting it leaves
  the copy engines' queues running."""
  import numpy as np
  dev, board = mi300_device
  src, dst = dev.alloc(4096), dev.alloc(4096)
  src.copyin(np.arange(1024, dtype=np.uint32))
  dev.transfer(dst, src)   # the copy ring is up
  dev.synchronize()
  dst.copyin(np.zeros(1024, np.uint32))
  assert any(q.enabled for e in board.sdma.engines for q in e.queues)
  a = board.regs.addr(board.xccs[0].key, "regGRBM_SOFT_RESET")
  board.regs.write(a, 1 << 23); board.regs.write(a, 0)
  dev.transfer(dst, src)
  dev.synchronize(2000)
  assert np.array_equal(dst.numpy(np.uint32), np.arange(1024, dtype=np.uint32))


def test_the_ih_keeps_a_vmid_pasid_lut_pair_per_die(mi300):
  """OSSSYS 4.4.2: IH_VMID_LUT_INDEX chooses the die whose IH_VMID_n_LUT / _LUT_MM the registers reach, counted as IV
  node ids are (AID n at 4n, its XCDs at 4n+1 and 4n+2: amdgpu_amdkfd_gc_9_4_3.c's set_pasid_vmid_mapping). An IV
  finds its PASID in its own die's bank: _LUT for a GC-hub VMID, _LUT_MM for an MM-hub one (the copy engines')."""
  from rawgpu.drivers.emu.amd.asic import ih_node_aid, ih_node_xcd
  _, board, _, _ = mi300
  r = board.regs
  a = lambda n: r.addr("osssys", n)
  for index, name, pasid in ((ih_node_xcd(3), "regIH_VMID_10_LUT", 0x11), (ih_node_aid(1), "regIH_VMID_10_LUT_MM", 0x22),
                             (ih_node_xcd(2), "regIH_VMID_10_LUT", 0x33)):
    r.write(a("regIH_VMID_LUT_INDEX"), index)
    r.write(a(name), pasid)
  r.write(a("regIH_VMID_LUT_INDEX"), ih_node_xcd(3))
  assert r.read(a("regIH_VMID_10_LUT")) == 0x11 and r.read(a("regIH_VMID_10_LUT_MM")) == 0   # the bank the index names
  ih = board.ih
  assert ih.pasid_of(10, ih_node_xcd(3)) == 0x11 and ih.pasid_of(10, ih_node_xcd(2)) == 0x33
  assert ih.pasid_of(10, ih_node_aid(1), mm_hub=True) == 0x22 and ih.pasid_of(10, ih_node_xcd(4)) == 0


def test_a_dispatch_in_a_partition_of_several_xccs_stops_as_not_modelled(mi300_device):
  """Back in SPX (one partition of all eight XCCs), a dispatch would spread its workgroups over the XCCs, which the
  model does not do: the queue stops saying so (board.unmodelled, the rawgpu.emu logger), no model error, and the
  host's wait times out naming the signal."""
  from rawgpu import kernels
  from rawgpu.errors import DeviceTimeout
  dev, board = mi300_device
  buf = dev.alloc(4096)
  assert board.psp.spatial_partition(1) == 0
  dev.program(kernels.path("gfx942", "fill").read_bytes())(buf, 3, 16, local_size=16)
  with pytest.raises(DeviceTimeout, match="stuck"): dev.synchronize(timeout_ms=300)
  assert any("several XCCs" in u and "not modelled" in u for u in board.unmodelled) and not board.errors
