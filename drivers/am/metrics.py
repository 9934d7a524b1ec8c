"""SMUMetrics: am-smi's source for boards a rawgpu process drives through AM (tools/am_smi.py's MetricsSource).

It maps the board without taking the owner lock, finds the SMU driver table where the owner's boot put it (boot
memory has the same addresses on every boot), asks the SMU to copy its metrics table there (TransferTableSmu2Dram)
and decodes SmuMetrics_t (smu13/smu14 driver_if, generated). Only boards left warm by AM are read: anything else
has no driver table to read from. The one SMU message it sends can interleave with the owner's own messages; AM
sends none after boot, so in practice the mailbox is free.
"""
from __future__ import annotations
import ctypes, time
from dataclasses import dataclass
from rawgpu.drivers import pci
from rawgpu.drivers.system import SYSTEM, System
from rawgpu.errors import RawGPUError


@dataclass(kw_only=True)
class SMUReading:
  """The dynamic figures am-smi shows (its BoardMetrics adds what the kernel shows of a board); None where the table
  has no such figure."""
  gfx_activity: float | None = None         # percent
  mem_activity: float | None = None         # percent
  temp_edge: float | None = None            # degrees C
  temp_hotspot: float | None = None
  temp_mem: float | None = None
  power_w: float | None = None
  power_limit_w: float | None = None
  gfx_clock_mhz: float | None = None
  mem_clock_mhz: float | None = None
  soc_clock_mhz: float | None = None
  fan_rpm: int | None = None
  fan_pct: float | None = None
  vram_used: int | None = None              # bytes
  vram_total: int | None = None
  throttle: list[str] | None = None         # active throttle reasons; [] = none; None = unknown
  xcc_activity: list[float] | None = None   # MI300: percent per XCC (each a device of its own); None elsewhere
  source: str = "smu"                       # where the figures came from
  unavailable: str | None = None            # why they are missing ("metrics unavailable: ...")
  time: float = 0.0                         # when they were read (time.time())


class SMUMetrics:
  def __init__(self, system: System = SYSTEM): self.system = system

  def boards(self) -> list[str]:
    from rawgpu.drivers.am import supported
    return [i.bus for i in pci.scan(vendor=0x1002, system=self.system) if supported(i)]

  def read(self, bus: str) -> SMUReading:
    from rawgpu.drivers.am.device import BOOT_MARKER, AMDevice
    try: dev = AMDevice(bus, self.system, probe=True)
    except RawGPUError as e: return SMUReading(source="none", unavailable=f"metrics unavailable: {e}", time=time.time())
    try:
      if dev.regs.reg("gc", "regSCRATCH_REG7").read() != BOOT_MARKER and not dev.gfx.mec_running():
        return SMUReading(source="none", unavailable="metrics unavailable: the board was not booted by AM", time=time.time())
      if dev.ips["mp1"] == (13, 0, 6): return _read_metrics_x(dev)
      mod = dev.smu.driver_if()
      dev.smu.send("PPSMC_MSG_TransferTableSmu2Dram", mod.TABLE_SMU_METRICS, timeout=0.5)
      m = mod.SmuMetrics_t.from_buffer_copy(bytes(dev.vram(dev.smu.driver_table, ctypes.sizeof(mod.SmuMetrics_t))))
      temps = m.AvgTemperature
      return SMUReading(
        gfx_activity=float(m.AverageGfxActivity), mem_activity=float(m.AverageUclkActivity),
        temp_edge=float(temps[mod.TEMP_EDGE]), temp_hotspot=float(temps[mod.TEMP_HOTSPOT]), temp_mem=float(temps[mod.TEMP_MEM]),
        power_w=float(m.AverageSocketPower), gfx_clock_mhz=float(m.CurrClock[mod.PPCLK_GFXCLK]),
        mem_clock_mhz=float(m.CurrClock[mod.PPCLK_UCLK]), soc_clock_mhz=float(m.CurrClock[mod.PPCLK_SOCCLK]),
        fan_rpm=int(m.AvgFanRpm), fan_pct=float(m.AvgFanPwm), vram_total=dev.vram_size, time=time.time())
    except RawGPUError as e: return SMUReading(source="none", unavailable=f"metrics unavailable: {e}", time=time.time())
    finally: dev.pci.close()


def _read_metrics_x(dev) -> SMUReading:
  """MI300 (SMU 13.0.6): GetMetricsTable fills MetricsTableX_t, Q10 fixed point, rounded as smu_v13_0_6_ppt.c's
  SMUQ10_ROUND does. It has no edge temperature and no fan (hotspot is the socket's maximum, mem the HBM's). Each
  XCD's activity is GfxBusy[n] (the table's "per XCD activity"), in the same units as the socket's."""
  from rawgpu.autogen.amd import smu_v13_0_6 as mod
  dev.smu.send("PPSMC_MSG_GetMetricsTable", timeout=0.5)
  m = mod.MetricsTableX_t.from_buffer_copy(bytes(dev.vram(dev.smu.driver_table, ctypes.sizeof(mod.MetricsTableX_t))))
  q10 = lambda v: (v >> 10) + ((v & 0x3ff) >= 0x200)
  return SMUReading(
    gfx_activity=float(q10(m.SocketGfxBusy)), mem_activity=float(q10(m.DramBandwidthUtilization)),
    temp_hotspot=float(q10(m.MaxSocketTemperature)), temp_mem=float(q10(m.MaxHbmTemperature)),
    power_w=float(q10(m.SocketPower)), power_limit_w=float(q10(m.SocketPowerLimit)),
    gfx_clock_mhz=float(q10(m.GfxclkFrequency[0])), mem_clock_mhz=float(q10(m.UclkFrequency)),
    soc_clock_mhz=float(q10(m.SocclkFrequency[0])), vram_total=dev.vram_size, time=time.time(),
    xcc_activity=[float(q10(v)) for v in m.GfxBusy[:dev.disc.count("gc")]])
