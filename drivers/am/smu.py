"""SMU (MP1): power management firmware, driven by a message mailbox (smu_cmn.c, smu_v13_0_0_ppt.c, smu_v14_0_2_ppt.c).

Message: clear the response (C2PMSG_90), write the argument (C2PMSG_82) and the message (C2PMSG_66), wait for a
non-zero response; 1 is OK, 0xFF/0xFE/0xFD/0xFC are failures. Mode 1 reset goes through the debug mailbox
(C2PMSG_75/53/54) on SMU 14 and as a normal message on SMU 13.
"""
from __future__ import annotations
import time
from rawgpu.drivers.am import facts as F
from rawgpu.drivers.am.block import Block
from rawgpu.errors import DeviceFault, DeviceTimeout

MSG = F.PPSMC_MSG
RESULTS = {v: k for k, v in F.PPSMC_RESULT.items()}
MODE1_RESET_WAIT_S = {13: 0.5, 14: 1.0}   # SMU13_MODE1_RESET_WAIT_TIME_IN_MS; smu_v14_0_2_ppt.c waits a full second


class SMU(Block):
  name = "smu"

  def init_sw(self) -> None:
    self._version: int | None = None
    self._fresh = True   # no message sent yet: the response register holds whatever the PMFW or a last owner left there
    self.driver_table = self.dev.boot_alloc(0x4000)

  def driver_if(self):
    """The generated PMFW interface of this SMU (message numbers, table ids, SmuMetrics_t)."""
    from rawgpu.autogen.amd import smu_v13_0_0, smu_v13_0_6, smu_v14_0_2
    if self.dev.ips["mp1"] == (13, 0, 6): return smu_v13_0_6   # MI300: a message set of its own
    return smu_v14_0_2 if self.dev.ips["mp1"][0] >= 14 else smu_v13_0_0

  def mb(self, n: int): return self.reg("mp1", f"regMP1_SMN_C2PMSG_{n}")

  def send(self, msg: str | int, arg: int = 0, timeout: float = 2.0) -> int:
    if isinstance(msg, int): num = msg
    elif self.dev.ips["mp1"] == (13, 0, 6): num = getattr(self.driver_if(), msg, None) or F.PPSMC_MSG_13_0_6_AFTER_6_12[msg]
    else: num = MSG[msg] if msg in MSG else getattr(self.driver_if(), msg)
    resp = self.mb(90)
    if not self._fresh:   # the previous message must have its answer first, or this one would overwrite it (smu_cmn.c)
      self.dev.wait(lambda: resp.read() != 0, f"the SMU to finish the message before {msg}", timeout=timeout)
    self._fresh = False
    resp.write(0)
    self.mb(82).write(arg)
    self.mb(66).write(num)
    try: self.dev.wait(lambda: resp.read() != 0, f"SMU message {msg}", timeout=timeout)
    except DeviceTimeout: raise
    r = resp.read()
    if r != F.PPSMC_RESULT["PPSMC_Result_OK"]:
      raise DeviceFault(f"{self.dev.bus}: SMU answered {msg} ({num:#x}, arg {arg:#x}) with {RESULTS.get(r, hex(r))}; "
                        "the power firmware is in a bad state: power-cycle or reset the board")
    out = self.mb(82).read()
    self.dev.read_fence()   # what the message left in VRAM (a table) is read after its answer
    return out

  def alive(self) -> bool:
    try: self.send("PPSMC_MSG_GetSmuVersion", timeout=0.1)
    except (DeviceTimeout, DeviceFault): return False
    return True

  @property
  def version(self) -> int:
    """The running PMFW's version (asked once: a warm boot does not run init_hw)."""
    if self._version is None: self._version = self.send("PPSMC_MSG_GetSmuVersion", timeout=5.0)
    return self._version

  @staticmethod
  def version_str(v: int) -> str: return f"{v >> 16 & 0xff}.{v >> 8 & 0xff}.{v & 0xff} (program {v >> 24})"   # as amdgpu prints it

  def init_hw(self) -> None:
    self._version = self.send("PPSMC_MSG_GetSmuVersion", timeout=5.0)   # the first message: PMFW may still be starting
    mc = self.dev.gmc.mc(self.driver_table)
    self.send("PPSMC_MSG_SetDriverDramAddrHigh", mc >> 32)
    self.send("PPSMC_MSG_SetDriverDramAddrLow", mc & 0xffffffff)
    self.send("PPSMC_MSG_EnableAllSmuFeatures")
    if self.dev.ips["mp1"] == (13, 0, 6):   # smu_v13_0_6: the features it runs, and a first metrics table (the counter moves)
      self.features = self.send("PPSMC_MSG_GetEnabledSmuFeaturesLow") | self.send("PPSMC_MSG_GetEnabledSmuFeaturesHigh") << 32
      if not self.features: raise DeviceFault(f"{self.dev.bus}: the SMU enabled no features; power-cycle the board")
      self.send("PPSMC_MSG_GetMetricsTable")
      if not int.from_bytes(self.dev.vram(self.driver_table, 4), "little"):
        raise DeviceFault(f"{self.dev.bus}: the SMU wrote no metrics (AccumulationCounter 0); power-cycle the board")

  def mode1_reset(self) -> None:
    """amdgpu_device_mode1_reset: the configuration header is saved and bus mastering turned off (the board must not
    DMA while it resets), the SMU resets the ASIC, the header is written back (mastering on again), then the board
    is out of reset once its straps read back and the sOS is gone."""
    d = self.dev
    saved = d.pci.save_config()
    d.pci.disable_bus_master()
    if d.ips["mp1"][0] >= 14:
      self.mb(53).write(0); self.mb(75).write(F.DEBUGSMC_MSG_Mode1Reset); self.mb(54).write(0)
    else: self.send(F.PPSMC_MSG_Mode1Reset_V13)
    time.sleep(d.reset_wait_s if d.reset_wait_s is not None else MODE1_RESET_WAIT_S[d.ips["mp1"][0]])
    d.pci.restore_config(saved)
    self._fresh = True
    d.wait(lambda: d.mmio.read(F.RCC_CONFIG_MEMSIZE * 4) not in (0, 0xffffffff) and not d.psp.sos_alive(), "the board to leave mode 1 reset",
           timeout=5.0)
