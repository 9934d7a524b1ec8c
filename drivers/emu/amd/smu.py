"""SMU (MP1): the message mailbox (C2PMSG_66 message, _82 argument, _90 response; debug mailbox _75/_53/_54),
the PPSMC message set of smu_v13_0_0_ppsmc.h / smu_v14_0_2_ppsmc.h, features, DPM clocks, power limit,
table transfers to the driver's buffer (metrics that follow the emulated load) and mode-1 reset.
"""
from __future__ import annotations
import ctypes, struct
from typing import TYPE_CHECKING
from rawgpu.autogen.amd import smu_v13_0_0 as V13, smu_v13_0_6 as V13_6, smu_v14_0_2 as V14
from rawgpu.drivers.emu.pcibus import BusError
if TYPE_CHECKING: from rawgpu.drivers.emu.amd.board import AMDBoard

OK, FAILED, UNKNOWN_CMD, REJECTED_PREREQ = V13.PPSMC_Result_OK, V13.PPSMC_Result_Failed, V13.PPSMC_Result_UnknownCmd, V13.PPSMC_Result_CmdRejectedPrereq
MODS = {13: V13, 14: V14, (13, 0, 6): V13_6}   # by major; MI300's 13.0.6 has a message set of its own
DEBUGSMC_MSG_MODE1_RESET = 0x2     # MP1 14 resets through the debug mailbox (smu_v14_0_2_ppt.c)
DRIVER_IF = {13: V13.SMU13_0_0_DRIVER_IF_VERSION, 14: 0x2E, (13, 0, 6): 0x1}
# MI300's SDMA engine reset (SMU 13.0.6). The message is newer than Linux 6.12's smu_v13_0_6_ppsmc.h: PPSMC_MSG_ResetSDMA
# 0x4D arrived with amdgpu's SDMA queue reset (amd-gfx, Jesse Zhang, 2024); smu_v13_0_6_ppt.c sends it with a mask of
# SDMA instances, and only to PMFW 85.121.0 and newer (program 0), which older PMFW does not know.
MSG_RESET_SDMA_13_0_6, RESET_SDMA_MIN_PMFW = 0x4D, 0x00557900
SMU_VERSION = {13: 0x004e4c00, 14: 0x00683d00, (13, 0, 6): RESET_SDMA_MIN_PMFW}   # 13.0.6: the first PMFW amdgpu resets SDMA with
TABLE_SMU_METRICS = V13.TABLE_SMU_METRICS


def _messages(mod) -> dict[int, str]:
  return {v: k[len("PPSMC_MSG_"):] for k, v in vars(mod).items() if k.startswith("PPSMC_MSG_") and isinstance(v, int)}


def _metrics_layout(mod) -> dict[str, int]:
  m = mod.SmuMetrics_t
  return dict(size=ctypes.sizeof(mod.SmuMetricsExternal_t), CurrClock=m.CurrClock.offset, GfxclkPreDs=m.AverageGfxclkFrequencyPreDs.offset,
              GfxActivity=m.AverageGfxActivity.offset, UclkActivity=m.AverageUclkActivity.offset, SocketPower=m.AverageSocketPower.offset,
              Temperature=m.AvgTemperature.offset)


PPCLK_GFXCLK, PPCLK_SOCCLK, PPCLK_UCLK, PPCLK_FCLK = 0, 1, 2, 3
DPM = {PPCLK_GFXCLK: [500, 1200, 1900, 2500], PPCLK_SOCCLK: [500, 960, 1200], PPCLK_UCLK: [96, 456, 772, 1249], PPCLK_FCLK: [400, 1200, 1800, 1900]}


class SMU:
  def __init__(self, board: "AMDBoard"):
    self.b = board
    ver = board.asic.version(1)
    self.major = ver if ver in MODS else ver[0]
    r = board.regs
    a = lambda n: r.addr("mp1", f"regMP1_SMN_C2PMSG_{n}")
    self.a_msg, self.a_arg, self.a_resp = a(66), a(82), a(90)
    self.a_dmsg, self.a_darg, self.a_dresp = a(75), a(53), a(54)
    r.wr[self.a_msg] = self._msg_wr
    r.wr[self.a_dmsg] = self._dmsg_wr
    self.running = False
    self.pending: int | None = None
    self.dpending: int | None = None
    self.allowed = self.enabled = 0
    self.driver_table = self.tools_table = 0
    self.soft = {c: (v[0], v[-1]) for c, v in DPM.items()}
    self.ppt = {13: 355, 14: 304, (13, 0, 6): 750}[self.major]
    self.messages = 0
    self.version = SMU_VERSION[self.major]        # the running PMFW's (a test may set an older one before the driver opens)
    self.names = _messages(MODS[self.major])
    self.layout = _metrics_layout(MODS[self.major]) if self.major != (13, 0, 6) else None
    self.accumulated = 0                           # 13.0.6 metrics: AccumulationCounter, which the driver waits on to move
    if board.asic.ifwi_firmware: self.preload()   # PMFW started by the IFWI, all features on

  def firmware_loaded(self) -> None: self.running = True

  def _msg_wr(self, a: int, v: int) -> None: self.b.regs.vals[a] = v; self.pending = v
  def _dmsg_wr(self, a: int, v: int) -> None: self.b.regs.vals[a] = v; self.dpending = v

  def busy(self) -> bool: return self.running and (self.pending is not None or self.dpending is not None)

  def step(self) -> bool:
    if not self.running or "smu_timeout" in self.b.faults: return False
    vals = self.b.regs.vals
    if self.dpending is not None:
      m, self.dpending = self.dpending, None
      if m == DEBUGSMC_MSG_MODE1_RESET and self.major >= 14:
        vals[self.a_dresp] = OK; self.b.request_mode1_reset(); return True
      vals[self.a_dresp] = UNKNOWN_CMD
      return True
    if self.pending is None: return False
    m, self.pending = self.pending, None
    self.messages += 1
    arg = vals.get(self.a_arg, 0)
    if "smu_error" in self.b.faults:
      f = self.b.faults["smu_error"]
      vals[self.a_resp] = f.get("response", FAILED) if isinstance(f, dict) else FAILED
      return True
    resp, out = self._handle(m, arg)
    if out is not None: vals[self.a_arg] = out & 0xffffffff
    vals[self.a_resp] = resp
    return True

  def _handle(self, m: int, arg: int) -> tuple[int, int | None]:
    if self.major == (13, 0, 6) and m == MSG_RESET_SDMA_13_0_6: return self._reset_sdma(arg)
    n = self.names.get(m)
    if n is None: return UNKNOWN_CMD, None
    if n == "Mode1Reset" or n == "GfxDriverReset": self.b.request_mode1_reset(); return OK, None   # 13.0.6: GfxDriverReset(1)
    if n in ("GetEnabledSmuFeaturesLow", "GetEnabledSmuFeaturesHigh"): return OK, self.enabled >> (32 if n.endswith("High") else 0) & 0xffffffff
    if n == "GetMetricsTable":
      if not self.driver_table: return REJECTED_PREREQ, None
      self.accumulated += 1
      try: self.b.gmc.phys(self.driver_table, ctypes.sizeof(V13_6.MetricsTableX_t))[:] = self.metrics_x()
      except BusError: return FAILED, None
      return OK, None
    if n == "TestMessage": return OK, arg + 1
    if n == "GetSmuVersion": return OK, self.version
    if n == "GetDriverIfVersion": return OK, DRIVER_IF[self.major]
    if n == "SetAllowedFeaturesMaskLow": self.allowed = (self.allowed & ~0xffffffff) | arg; return OK, None
    if n == "SetAllowedFeaturesMaskHigh": self.allowed = (self.allowed & 0xffffffff) | (arg << 32); return OK, None
    if n == "EnableAllSmuFeatures": self.enabled = self.allowed or (1 << 64) - 1; return OK, None
    if n == "DisableAllSmuFeatures": self.enabled = 0; return OK, None
    if n in ("EnableSmuFeaturesLow", "EnableSmuFeaturesHigh", "DisableSmuFeaturesLow", "DisableSmuFeaturesHigh"):
      bits = arg << (32 if n.endswith("High") else 0)
      self.enabled = self.enabled | bits if n.startswith("Enable") else self.enabled & ~bits
      return OK, None
    if n == "GetRunningSmuFeaturesLow": return OK, self.enabled & 0xffffffff
    if n == "GetRunningSmuFeaturesHigh": return OK, self.enabled >> 32
    if n == "SetDriverDramAddrHigh": self.driver_table = (self.driver_table & 0xffffffff) | (arg << 32); return OK, None
    if n == "SetDriverDramAddrLow": self.driver_table = (self.driver_table & ~0xffffffff) | arg; return OK, None
    if n == "SetToolsDramAddrHigh": self.tools_table = (self.tools_table & 0xffffffff) | (arg << 32); return OK, None
    if n == "SetToolsDramAddrLow": self.tools_table = (self.tools_table & ~0xffffffff) | arg; return OK, None
    if n == "TransferTableSmu2Dram":
      if arg & 0xffff != TABLE_SMU_METRICS: return OK, None          # other tables: nothing the model keeps
      if not self.driver_table: return REJECTED_PREREQ, None
      try: self.b.gmc.phys(self.driver_table, self.layout["size"])[:] = self.metrics()
      except BusError: return FAILED, None
      return OK, None
    if n in ("GetDpmFreqByIndex", "GetMinDpmFreq", "GetMaxDpmFreq"):
      clk, idx = arg >> 16, arg & 0xffff
      levels = DPM.get(clk)
      if levels is None: return FAILED, None
      if n == "GetMinDpmFreq": return OK, levels[0]
      if n == "GetMaxDpmFreq": return OK, levels[-1]
      if idx == 0xff: return OK, len(levels)
      return (OK, levels[idx]) if idx < len(levels) else (FAILED, None)
    if n in ("SetSoftMinByFreq", "SetSoftMaxByFreq", "SetHardMinByFreq", "SetHardMaxByFreq"):
      clk, f = arg >> 16, arg & 0xffff
      if clk not in DPM: return FAILED, None
      lo, hi = self.soft[clk]
      self.soft[clk] = (f, hi) if "Min" in n else (lo, f)
      return OK, None
    if n == "SetPptLimit": self.ppt = arg & 0xffff; return OK, None
    if n == "GetPptLimit": return OK, self.ppt
    return OK, None                                # configuration messages the model accepts without effect

  def _reset_sdma(self, mask: int) -> tuple[int, int | None]:
    """ResetSDMA: reset the SDMA engines whose instance bits are set. PMFW older than the message does not know it; a
    mask naming no engine, or one the board lacks, fails (a model choice: the response to a bad mask is not public)."""
    if self.version < RESET_SDMA_MIN_PMFW: return UNKNOWN_CMD, None
    engines = self.b.sdma.engines
    if not mask or mask >> len(engines): return FAILED, None
    for e in engines:
      if mask >> e.i & 1: e.reset()
    return OK, None

  def metrics(self) -> bytes:
    """SmuMetrics_t with clocks, activity, power and temperatures that follow the emulated load."""
    m = self.layout
    out = bytearray(m["size"])
    busy = self.b.activity()
    gfx_lo, gfx_hi = self.soft[PPCLK_GFXCLK]
    gfx = gfx_lo + int((gfx_hi - gfx_lo) * busy)
    for clk in (PPCLK_GFXCLK, PPCLK_SOCCLK, PPCLK_UCLK, PPCLK_FCLK):
      struct.pack_into("<I", out, m["CurrClock"] + 4 * clk, gfx if clk == PPCLK_GFXCLK else self.soft[clk][1])
    struct.pack_into("<H", out, m["GfxclkPreDs"], gfx)
    struct.pack_into("<H", out, m["GfxActivity"], int(100 * busy))
    struct.pack_into("<H", out, m["UclkActivity"], int(60 * busy))
    struct.pack_into("<H", out, m["SocketPower"], 35 + int((self.ppt - 35) * busy))
    for i, t in enumerate((38 + 40 * busy, 45 + 50 * busy, 0, 0, 50 + 30 * busy)):   # TEMP_EDGE, HOTSPOT, .., MEM (Q8.8? plain C)
      struct.pack_into("<H", out, m["Temperature"] + 2 * i, int(t))
    return bytes(out)

  def metrics_x(self) -> bytes:
    """MI300's MetricsTableX_t, following the emulated load. Its figures are Q10 fixed point (smu_v13_0_6_ppt.c reads
    them through SMUQ10_ROUND): temperatures in C, power in W, clocks in MHz, busy figures in percent. The clock
    ranges are MI300X's published ones (2100 MHz peak engine clock, 1300 MHz HBM3 memory clock); the rest is model."""
    busy, q10 = self.b.activity(), lambda v: int(round(v * 1024))
    gfx = q10(500 + 1600 * busy)
    return bytes(V13_6.MetricsTableX_t(
      AccumulationCounter=self.accumulated, Timestamp=self.accumulated * 1000,
      MaxSocketTemperature=q10(40 + 45 * busy), MaxVrTemperature=q10(38 + 30 * busy), MaxHbmTemperature=q10(42 + 30 * busy),
      SocketPowerLimit=q10(self.ppt), MaxSocketPowerLimit=q10(750), SocketPower=q10(140 + (self.ppt - 140) * busy),
      SocketGfxBusy=q10(100 * busy), DramBandwidthUtilization=q10(60 * busy),
      GfxBusy=(ctypes.c_uint32 * 8)(*[q10(100 * g.busy()) for g in self.b.xccs]),   # per XCD: whether its MEC has work
      GfxclkFrequency=(ctypes.c_uint32 * 8)(*[gfx] * 8), MaxGfxclkFrequency=q10(2100), MinGfxclkFrequency=q10(500),
      UclkFrequency=q10(1300), FclkFrequency=q10(2000), SocclkFrequency=(ctypes.c_uint32 * 4)(*[q10(1143)] * 4)))

  def preload(self) -> None:
    self.running = True
    self.enabled = (1 << 64) - 1
