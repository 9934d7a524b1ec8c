"""PSP bootloader and ring, firmware loading and RLC autoload, driven with the real firmware files the way
psp_v13_0/psp_v14_0 and amdgpu_psp.c do; SMU mailbox, features, DPM, metrics; fault injection.

Firmware comes from RAWGPU_FIRMWARE_DIR (Debian firmware-amd-graphics); tests that need it skip without it.
"""
from __future__ import annotations
import ctypes, os, pathlib, struct
import pytest
from rawgpu.autogen.amd import psp as G, ucode as U
from test_emu_amd_common import ComputeRing, Dev, nvd, pkt3

ARCH_FW = {"gfx1100": dict(psp="13_0_0", smu="13_0_0", sdma="6_0_0", gc="11_0_0"),
           "gfx1201": dict(psp="14_0_3", smu="14_0_3", sdma="7_0_1", gc="12_0_1")}
BL_ORDER = [(U.PSP_FW_TYPE_PSP_KDB, 0x80000), (U.PSP_FW_TYPE_PSP_SPL, 0x10000000), (U.PSP_FW_TYPE_PSP_SYS_DRV, 0x10000),
            (U.PSP_FW_TYPE_PSP_SOC_DRV, 0xB0000), (U.PSP_FW_TYPE_PSP_INTF_DRV, 0xD0000), (U.PSP_FW_TYPE_PSP_DBG_DRV, 0xC0000),
            (U.PSP_FW_TYPE_PSP_RAS_DRV, 0xE0000), (U.PSP_FW_TYPE_PSP_SOS, 0x20000)]      # enum psp_bootloader_cmd


def fw_dir() -> pathlib.Path:
  from conftest import find_firmware
  for p in (os.environ.get("RAWGPU_FIRMWARE_DIR"), find_firmware("20250410-2"), "/lib/firmware/updates/amdgpu", "/lib/firmware/amdgpu"):
    if p and (pathlib.Path(p) / "psp_13_0_0_sos.bin").exists(): return pathlib.Path(p)
  pytest.skip("AMD firmware missing: run .ci/fetch-firmware (Debian firmware-amd-graphics) or set RAWGPU_FIRMWARE_DIR")


def need(arch: str, name: str) -> bytes:
  p = fw_dir() / name
  if not p.exists(): pytest.skip(f"{name} missing from {p.parent} (firmware-amd-graphics 20250410 has the RDNA4 files)")
  return p.read_bytes()


def sos_components(blob: bytes) -> dict[int, bytes]:
  h = U.common_firmware_header.from_buffer_copy(blob)
  n = struct.unpack_from("<I", blob, ctypes.sizeof(U.common_firmware_header))[0]
  out = {}
  for i in range(n):
    d = U.psp_fw_bin_desc.from_buffer_copy(blob, U.psp_firmware_header_v2_0.psp_fw_bin.offset + 16 * i)
    st = h.ucode_array_offset_bytes + d.offset_bytes
    out[d.fw_type] = blob[st:st + d.size_bytes]
  return out


def ip_images(arch: str) -> list[tuple[int, bytes]]:
  """(GFX_FW_TYPE, image) for every image the driver sends through LOAD_IP_FW (amdgpu_ucode.c layouts)."""
  f = ARCH_FW[arch]
  out = []
  b = need(arch, f"smu_{f['smu']}.bin"); h = U.common_firmware_header.from_buffer_copy(b)
  smu = (G.GFX_FW_TYPE_SMU, b[h.ucode_array_offset_bytes:h.ucode_array_offset_bytes + h.ucode_size_bytes])
  b = need(arch, f"sdma_{f['sdma']}.bin"); h = U.common_firmware_header.from_buffer_copy(b)
  if h.header_version_major == 2:
    s = U.sdma_firmware_header_v2_0.from_buffer_copy(b)
    out += [(G.GFX_FW_TYPE_SDMA_UCODE_TH1, b[s.ctl_ucode_offset:s.ctl_ucode_offset + s.ctl_ucode_size_bytes]),
            (G.GFX_FW_TYPE_SDMA_UCODE_TH0, b[h.ucode_array_offset_bytes:h.ucode_array_offset_bytes + s.ctx_ucode_size_bytes])]
  else:
    s = U.sdma_firmware_header_v3_0.from_buffer_copy(b)
    out += [(G.GFX_FW_TYPE_SDMA_UCODE_TH0, b[s.ucode_offset_bytes:s.ucode_offset_bytes + s.ucode_size_bytes])]
  for eng in (["pfp", "me"] if arch == "gfx1201" else []) + ["mec"]:
    b = need(arch, f"gc_{f['gc']}_{eng}.bin")
    g = U.gfx_firmware_header_v2_0.from_buffer_copy(b)
    E = eng.upper()
    out += [(getattr(G, f"GFX_FW_TYPE_RS64_{E}"), b[g.header.ucode_array_offset_bytes:g.header.ucode_array_offset_bytes + g.ucode_size_bytes]),
            (getattr(G, f"GFX_FW_TYPE_RS64_{E}_P0_STACK"), b[g.data_offset_bytes:g.data_offset_bytes + g.data_size_bytes])]
  b = need(arch, f"gc_{f['gc']}_imu.bin"); m = U.imu_firmware_header_v1_0.from_buffer_copy(b)
  o = m.header.ucode_array_offset_bytes
  out += [(G.GFX_FW_TYPE_IMU_I, b[o:o + m.imu_iram_ucode_size_bytes]),
          (G.GFX_FW_TYPE_IMU_D, b[o + m.imu_iram_ucode_size_bytes:o + m.imu_iram_ucode_size_bytes + m.imu_dram_ucode_size_bytes])]
  b = need(arch, f"gc_{f['gc']}_rlc.bin"); r0 = U.rlc_firmware_header_v2_0.from_buffer_copy(b)
  minor = r0.header.header_version_minor
  if minor >= 1:
    r1 = U.rlc_firmware_header_v2_1.from_buffer_copy(b)
    for t, k in (("LIST_SRM_CNTL", "cntl"), ("LIST_GPM_MEM", "gpm"), ("LIST_SRM_MEM", "srm")):
      off, sz = getattr(r1, f"save_restore_list_{k}_offset_bytes"), getattr(r1, f"save_restore_list_{k}_size_bytes")
      if sz: out.append((getattr(G, f"GFX_FW_TYPE_RLC_RESTORE_{t}"), b[off:off + sz]))
  if minor >= 2:
    r2 = U.rlc_firmware_header_v2_2.from_buffer_copy(b)
    out += [(G.GFX_FW_TYPE_RLC_IRAM, b[r2.rlc_iram_ucode_offset_bytes:r2.rlc_iram_ucode_offset_bytes + r2.rlc_iram_ucode_size_bytes]),
            (G.GFX_FW_TYPE_RLC_DRAM_BOOT, b[r2.rlc_dram_ucode_offset_bytes:r2.rlc_dram_ucode_offset_bytes + r2.rlc_dram_ucode_size_bytes])]
  if minor >= 3:
    r3 = U.rlc_firmware_header_v2_3.from_buffer_copy(b)
    for t in ("P", "V"):
      off, sz = getattr(r3, f"rlc{t.lower()}_ucode_offset_bytes"), getattr(r3, f"rlc{t.lower()}_ucode_size_bytes")
      if sz: out.append((getattr(G, f"GFX_FW_TYPE_RLC_{t}"), b[off:off + sz]))
  o = r0.header.ucode_array_offset_bytes
  out.append((G.GFX_FW_TYPE_RLC_G, b[o:o + r0.header.ucode_size_bytes]))
  return [smu] + out


class PSPDriver:
  """The host side of the PSP protocol, written from psp_v13_0.c / amdgpu_psp.c (buffers in VRAM, MC addresses)."""
  MSG1, RING, CMD, FENCE, TMR = 0x0100_0000, 0x0200_0000, 0x0201_0000, 0x0201_1000, 0x0300_0000

  def __init__(self, d: Dev):
    self.d = d
    self.p = "regMP0_SMN_C2PMSG_" if "regMP0_SMN_C2PMSG_35" in d.tables["mp0"] else "regMPASP_SMN_C2PMSG_"
    self.fb = (d.rd("mmhub", "regMMMC_VM_FB_LOCATION_BASE") & 0xffffff) << 24
    self.fence = 0

  def rd(self, n: int) -> int: return self.d.rd("mp0", f"{self.p}{n}")
  def wr(self, n: int, v: int) -> None: self.d.wr("mp0", f"{self.p}{n}", v)
  def run(self) -> None: self.d.board.run_until_idle()

  def bootloader(self, cmd: int, image: bytes) -> int:
    assert self.rd(35) & 0x80000000
    self.d.vram.writebytes(self.MSG1, image)
    self.wr(36, (self.fb + self.MSG1) >> 20)
    self.wr(35, cmd)
    self.run()
    return self.rd(35)

  def boot_sos(self, comps: dict[int, bytes]) -> None:
    for t, cmd in BL_ORDER:
      if t in comps: assert self.bootloader(cmd, comps[t]) == 0x80000000, (t, hex(self.rd(35)))
    assert self.rd(81) != 0

  def ring_create(self, size: int = 0x10000) -> int:
    assert self.rd(64) & 0x80000000
    mc = self.fb + self.RING
    self.wr(69, mc & 0xffffffff); self.wr(70, mc >> 32); self.wr(71, size); self.wr(64, 2 << 16)
    self.run()
    return self.rd(64) & 0x8000ffff

  def submit(self, cmd_id: int, fill=None) -> G.psp_gfx_cmd_resp:
    c = G.psp_gfx_cmd_resp(cmd_id=cmd_id)
    if fill: fill(c.cmd)
    self.d.vram.writebytes(self.CMD, bytes(c))
    self.fence += 1
    w = self.rd(67)
    frame = G.psp_gfx_rb_frame(cmd_buf_addr_lo=(self.fb + self.CMD) & 0xffffffff, cmd_buf_addr_hi=(self.fb + self.CMD) >> 32,
                               fence_addr_lo=(self.fb + self.FENCE) & 0xffffffff, fence_addr_hi=(self.fb + self.FENCE) >> 32, fence_value=self.fence)
    self.d.vram.writebytes(self.RING + 4 * w, bytes(frame))
    self.wr(67, w + ctypes.sizeof(frame) // 4)
    self.run()
    assert self.d.vram.read32(self.FENCE) == self.fence, "PSP did not signal the fence"
    return G.psp_gfx_cmd_resp.from_buffer_copy(self.d.vram.readbytes(self.CMD, ctypes.sizeof(G.psp_gfx_cmd_resp)))

  def load_ip_fw(self, fw_type: int, image: bytes) -> int:
    self.d.vram.writebytes(self.MSG1, image)
    mc = self.fb + self.MSG1
    def f(cmd):
      cmd.cmd_load_ip_fw.fw_phy_addr_lo, cmd.cmd_load_ip_fw.fw_phy_addr_hi = mc & 0xffffffff, mc >> 32
      cmd.cmd_load_ip_fw.fw_size, cmd.cmd_load_ip_fw.fw_type = len(image), fw_type
    return self.submit(G.GFX_CMD_ID_LOAD_IP_FW, f).resp.status

  def load_toc(self, toc: bytes) -> G.psp_gfx_cmd_resp:
    self.d.vram.writebytes(self.MSG1, toc)
    mc = self.fb + self.MSG1
    def f(cmd): cmd.cmd_load_toc.toc_phy_addr_lo, cmd.cmd_load_toc.toc_phy_addr_hi, cmd.cmd_load_toc.toc_size = mc & 0xffffffff, mc >> 32, len(toc)
    return self.submit(G.GFX_CMD_ID_LOAD_TOC, f)

  def setup_tmr(self, size: int) -> int:
    mc = self.fb + self.TMR
    def f(cmd):
      cmd.cmd_setup_tmr.buf_phy_addr_lo, cmd.cmd_setup_tmr.buf_phy_addr_hi, cmd.cmd_setup_tmr.buf_size = mc & 0xffffffff, mc >> 32, size
    return self.submit(G.GFX_CMD_ID_SETUP_TMR, f).resp.status


@pytest.fixture(params=["gfx1100", "gfx1201"])
def d(request):
  need(request.param, f"psp_{ARCH_FW[request.param]['psp']}_sos.bin")
  dev = Dev(request.param, vram_size=1 << 30)
  yield dev
  dev.close()


def full_boot(d: Dev) -> PSPDriver:
  arch = d.board.arch
  comps = sos_components(need(arch, f"psp_{ARCH_FW[arch]['psp']}_sos.bin"))
  p = PSPDriver(d)
  p.boot_sos(comps)
  assert p.ring_create() == 0x80000000
  r = p.load_toc(comps[U.PSP_FW_TYPE_PSP_TOC])
  assert r.resp.status == 0 and r.resp.tmr_size > 0
  imgs = ip_images(arch)
  assert p.load_ip_fw(*imgs[0]) == 0                                     # SMU first (psp_load_smu_fw)
  if arch == "gfx1100": assert p.setup_tmr(r.resp.tmr_size) == 0          # boot-time TMR on MP 14
  for t, img in imgs[1:]: assert p.load_ip_fw(t, img) == 0, t
  assert p.submit(G.GFX_CMD_ID_AUTOLOAD_RLC).resp.status == 0
  return p


def test_cold_boot_with_real_firmware(d):
  assert d.f("gc", "regRLC_RLCS_BOOTLOAD_STATUS", d.rd("gc", "regRLC_RLCS_BOOTLOAD_STATUS"), "BOOTLOAD_COMPLETE") == 0
  full_boot(d)
  assert d.f("gc", "regRLC_RLCS_BOOTLOAD_STATUS", d.rd("gc", "regRLC_RLCS_BOOTLOAD_STATUS"), "BOOTLOAD_COMPLETE") == 1
  q = ComputeRing(d)                                                     # and now the MEC runs a queue
  P = nvd()
  dst = q.mc(0x380000)
  q.submit(pkt3(P["PACKET3_WRITE_DATA"], [5 << 8, dst & 0xffffffff, dst >> 32, 0x1234]))
  q.run()
  assert d.vram.read32(0x380000) == 0x1234


def test_sos_needs_the_system_driver_first(d):
  comps = sos_components(need(d.board.arch, f"psp_{ARCH_FW[d.board.arch]['psp']}_sos.bin"))
  p = PSPDriver(d)
  st = p.bootloader(0x20000, comps[U.PSP_FW_TYPE_PSP_SOS])
  assert st != 0x80000000 and p.rd(81) == 0


def test_bad_signature_is_refused(d):
  p = full_boot(d)
  imgs = dict(ip_images(d.board.arch))
  bad = bytearray(imgs[G.GFX_FW_TYPE_RS64_MEC]); bad[0x10:0x14] = b"XXXX"
  assert p.load_ip_fw(G.GFX_FW_TYPE_RS64_MEC, bytes(bad)) != 0


def test_autoload_without_rlc_firmware_fails(d):
  arch = d.board.arch
  comps = sos_components(need(arch, f"psp_{ARCH_FW[arch]['psp']}_sos.bin"))
  p = PSPDriver(d)
  p.boot_sos(comps)
  assert p.ring_create() == 0x80000000
  r = p.load_toc(comps[U.PSP_FW_TYPE_PSP_TOC])
  imgs = ip_images(arch)
  assert p.load_ip_fw(*imgs[0]) == 0
  if arch == "gfx1100":
    assert p.load_ip_fw(*imgs[1]) != 0                                    # before SETUP_TMR there is nowhere to put it
    assert p.setup_tmr(r.resp.tmr_size) == 0
  for t, img in imgs[1:]:
    if t != G.GFX_FW_TYPE_RLC_G: assert p.load_ip_fw(t, img) == 0
  assert p.submit(G.GFX_CMD_ID_AUTOLOAD_RLC).resp.status != 0
  assert d.f("gc", "regRLC_RLCS_BOOTLOAD_STATUS", d.rd("gc", "regRLC_RLCS_BOOTLOAD_STATUS"), "BOOTLOAD_COMPLETE") == 0


def test_tmr_waits_for_the_pmfw_where_it_manages_the_df_cstates(d):
  """MP0 13.0.0 (PMFW-centralized DF C-states): SETUP_TMR before the SMU's image is refused, and accepted after it."""
  if d.board.arch != "gfx1100": pytest.skip("MP0 14.0.3 sets its TMR up at boot: the driver sends no SETUP_TMR")
  comps = sos_components(need("gfx1100", f"psp_{ARCH_FW['gfx1100']['psp']}_sos.bin"))
  p = PSPDriver(d)
  p.boot_sos(comps)
  assert p.ring_create() == 0x80000000
  r = p.load_toc(comps[U.PSP_FW_TYPE_PSP_TOC])
  assert p.setup_tmr(r.resp.tmr_size) == 0xFFFF0007                      # TEE_ERROR_BAD_STATE: the PMFW is not loaded yet
  assert p.load_ip_fw(*ip_images("gfx1100")[0]) == 0
  assert p.setup_tmr(r.resp.tmr_size) == 0


def test_psp_timeout_and_error_injection(d):
  comps = sos_components(need(d.board.arch, f"psp_{ARCH_FW[d.board.arch]['psp']}_sos.bin"))
  p = PSPDriver(d)
  d.board.inject("psp_timeout")
  d.vram.writebytes(p.MSG1, comps[U.PSP_FW_TYPE_PSP_SYS_DRV]); p.wr(36, (p.fb + p.MSG1) >> 20); p.wr(35, 0x10000)
  p.run()
  assert p.rd(35) & 0x80000000 == 0                                       # never answers
  d.board.clear_faults(); p.run()
  assert p.rd(35) == 0x80000000                                           # the PSP was only slow



def test_psp_error_injection_returns_status(d):
  p = full_boot(d)
  d.board.inject("psp_error", status=0xFFFF0006)
  smu = ip_images(d.board.arch)[0]
  assert p.load_ip_fw(*smu) == 0xFFFF0006
  d.board.clear_faults()
  assert p.load_ip_fw(*smu) == 0


# ---- SMU
class SMUDriver:
  """smu_cmn_send_smc_msg_with_param: clear response, write argument, write message, poll the response."""
  def __init__(self, d: Dev): self.d = d
  def send(self, msg: int, arg: int = 0) -> tuple[int, int]:
    d = self.d
    d.wr("mp1", "regMP1_SMN_C2PMSG_90", 0); d.wr("mp1", "regMP1_SMN_C2PMSG_82", arg); d.wr("mp1", "regMP1_SMN_C2PMSG_66", msg)
    d.board.run_until_idle()
    return d.rd("mp1", "regMP1_SMN_C2PMSG_90"), d.rd("mp1", "regMP1_SMN_C2PMSG_82")


def smu_mod(arch: str):
  from rawgpu.autogen.amd import smu_v13_0_0, smu_v14_0_2
  return smu_v13_0_0 if arch == "gfx1100" else smu_v14_0_2


@pytest.fixture(params=["gfx1100", "gfx1201"])
def booted(request):
  dev = Dev(request.param, firmware="loaded")
  yield dev
  dev.close()


def test_smu_silent_until_firmware_loaded():
  d = Dev("gfx1100")
  try:
    rsp, _ = SMUDriver(d).send(smu_mod("gfx1100").PPSMC_MSG_GetSmuVersion)
    assert rsp == 0
  finally: d.close()


def test_smu_messages(booted):
  m, s = smu_mod(booted.board.arch), SMUDriver(booted)
  assert s.send(m.PPSMC_MSG_TestMessage, 41) == (m.PPSMC_Result_OK, 42)
  rsp, ver = s.send(m.PPSMC_MSG_GetSmuVersion); assert rsp == m.PPSMC_Result_OK and ver != 0
  assert s.send(0xEE)[0] == m.PPSMC_Result_UnknownCmd
  s.send(m.PPSMC_MSG_DisableAllSmuFeatures)
  s.send(m.PPSMC_MSG_SetAllowedFeaturesMaskLow, 0x0000ffff); s.send(m.PPSMC_MSG_SetAllowedFeaturesMaskHigh, 0x1)
  s.send(m.PPSMC_MSG_EnableAllSmuFeatures)
  assert s.send(m.PPSMC_MSG_GetRunningSmuFeaturesLow)[1] == 0xffff and s.send(m.PPSMC_MSG_GetRunningSmuFeaturesHigh)[1] == 1
  n = s.send(m.PPSMC_MSG_GetDpmFreqByIndex, (m.PPCLK_GFXCLK << 16) | 0xff)[1]
  levels = [s.send(m.PPSMC_MSG_GetDpmFreqByIndex, (m.PPCLK_GFXCLK << 16) | i)[1] for i in range(n)]
  assert n >= 2 and levels == sorted(levels) and levels[0] > 0
  assert s.send(m.PPSMC_MSG_SetSoftMaxByFreq, (m.PPCLK_GFXCLK << 16) | levels[0])[0] == m.PPSMC_Result_OK


def test_smu_metrics_follow_load(booted):
  m, s, d = smu_mod(booted.board.arch), SMUDriver(booted), booted
  fb = (d.rd("mmhub", "regMMMC_VM_FB_LOCATION_BASE") & 0xffffff) << 24
  tbl = 0x800000
  s.send(m.PPSMC_MSG_SetDriverDramAddrHigh, (fb + tbl) >> 32); s.send(m.PPSMC_MSG_SetDriverDramAddrLow, (fb + tbl) & 0xffffffff)
  def metrics():
    assert s.send(m.PPSMC_MSG_TransferTableSmu2Dram, m.TABLE_SMU_METRICS)[0] == m.PPSMC_Result_OK
    return m.SmuMetricsExternal_t.from_buffer_copy(d.vram.readbytes(tbl, ctypes.sizeof(m.SmuMetricsExternal_t))).SmuMetrics
  idle = metrics()
  q = ComputeRing(d)                                                     # a queue spinning on WAIT_REG_MEM is load
  P = nvd()
  sem = q.mc(0x390000); d.vram.write32(0x390000, 0)
  q.submit(pkt3(P["PACKET3_WAIT_REG_MEM"], [(1 << 4) | 3, sem & 0xffffffff, sem >> 32, 1, 0xffffffff, 4]))
  q.run()
  busy = metrics()
  assert idle.AverageGfxActivity < busy.AverageGfxActivity <= 100
  assert idle.CurrClock[m.PPCLK_GFXCLK] < busy.CurrClock[m.PPCLK_GFXCLK]
  assert 0 < idle.AvgTemperature[m.TEMP_EDGE] < busy.AvgTemperature[m.TEMP_HOTSPOT] < 110
  assert idle.AverageSocketPower < busy.AverageSocketPower


def test_smu_error_and_timeout_injection(booted):
  m, s = smu_mod(booted.board.arch), SMUDriver(booted)
  booted.board.inject("smu_error", response=m.PPSMC_Result_Failed)
  assert s.send(m.PPSMC_MSG_GetSmuVersion)[0] == m.PPSMC_Result_Failed
  booted.board.clear_faults()
  booted.board.inject("smu_timeout")
  assert s.send(m.PPSMC_MSG_GetSmuVersion)[0] == 0
  booted.board.clear_faults()
  booted.board.run_until_idle()
  assert booted.rd("mp1", "regMP1_SMN_C2PMSG_90") == m.PPSMC_Result_OK


def test_mode1_reset_loses_firmware_keeps_vram(booted):
  d, m, s = booted, smu_mod(booted.board.arch), SMUDriver(booted)
  d.vram.write32(0x100, 0xabcdef)
  d.wr("gc", "regSCRATCH_REG7", 0x1234)
  if d.board.arch == "gfx1100": s.send(m.PPSMC_MSG_Mode1Reset)
  else:
    d.wr("mp1", "regMP1_SMN_C2PMSG_54", 0); d.wr("mp1", "regMP1_SMN_C2PMSG_53", 0); d.wr("mp1", "regMP1_SMN_C2PMSG_75", 2)
    d.board.run_until_idle()
  assert d.rd("mp0", "regMP0_SMN_C2PMSG_81" if "regMP0_SMN_C2PMSG_81" in d.tables["mp0"] else "regMPASP_SMN_C2PMSG_81") == 0
  assert d.rd("gc", "regSCRATCH_REG7") == 0 and d.vram.read32(0x100) == 0xabcdef
  assert d.f("gc", "regRLC_RLCS_BOOTLOAD_STATUS", d.rd("gc", "regRLC_RLCS_BOOTLOAD_STATUS"), "BOOTLOAD_COMPLETE") == 0


def test_ring_destroy_and_recreate(d):
  """psp_v13_0_ring_stop/ring_create: DESTROY_RINGS answers with bit 31, a new ring starts at write pointer 0."""
  p = full_boot(d)
  p.wr(64, G.GFX_CTRL_CMD_ID_DESTROY_RINGS); p.run()
  assert p.rd(64) & 0x80000000
  assert p.ring_create() == 0x80000000 and p.rd(67) == 0
  assert p.submit(G.GFX_CMD_ID_LOAD_TA).resp.status == 0
