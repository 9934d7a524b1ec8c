"""Register-level stand-ins for the board's firmware processors (PSP, SMU, RLC autoload, MEC/HQD status), hooked
onto the emulated AMDBoard until drivers/emu/amd models them. They follow the published handshakes
(psp_v13_0.c/psp_v14_0.c, smu_cmn.c, gfx_v11_0.c) and record what the driver asked for so tests can check it.
No tests live here; the helpers are imported by tests/test_am_*.py.
"""
from __future__ import annotations
import ctypes, struct
from rawgpu.autogen.amd import psp as P


class FakeFirmware:
  TMR_SIZE = 5 << 20      # what the fake PSP reports for the TOC

  def __init__(self, board, sos_alive: bool = False):
    self.b = board
    self.log: list[tuple] = []
    self.loaded: list[tuple[int, bytes]] = []
    self.bl_cmds: list[tuple[int, bytes]] = []
    self.smu_msgs: list[tuple[int, int]] = []
    self.resets = 0
    self.install(sos_alive)

  # ---- plumbing
  @property
  def r(self): return self.b.regs

  def _mp0(self, n: int) -> str:
    name = f"regMP0_SMN_C2PMSG_{n}"
    return name if self.r.has("mp0", name) else f"regMPASP_SMN_C2PMSG_{n}"

  def install(self, sos_alive: bool) -> None:
    r = self.r
    r.set("mp0", self._mp0(35), 0x80000000)
    r.set("mp0", self._mp0(81), 0x1 if sos_alive else 0)
    r.set("mp0", self._mp0(64), 0x80000000 if sos_alive else 0)
    a35 = r.hook("mp0", self._mp0(35), wr=self._bl)
    r.rd[a35] = lambda a: 0 if "psp_timeout" in self.b.faults else r.vals.get(a, 0)   # a hung bootloader never says ready
    r.hook("mp0", self._mp0(64), wr=self._ring_ctl)
    r.hook("mp0", self._mp0(67), wr=self._wptr)
    r.hook("mp1", "regMP1_SMN_C2PMSG_66", wr=self._smu)
    r.hook("mp1", "regMP1_SMN_C2PMSG_75", wr=self._smu_debug)
    if not hasattr(self.b, "gfx"):   # boards without the GFX model: power-on MEC state and dequeue by hand
      r.set("gc", "regCP_MEC_RS64_CNTL", r.reg("gc", "regCP_MEC_RS64_CNTL").encode(MEC_HALT=1))
      r.hook("gc", "regCP_HQD_DEQUEUE_REQUEST", wr=self._dequeue)
    self.rptr = 0

  def phys(self, mc: int, n: int) -> memoryview: return self.b.gmc.phys(mc, n)

  # ---- PSP bootloader (C2PMSG_35/36) and secure OS
  def _bl(self, a: int, v: int) -> None:
    if "psp_timeout" in self.b.faults: return
    buf = bytes(self.phys(self.r.get("mp0", self._mp0(36)) << 20, 1 << 20))
    self.bl_cmds.append((v, buf))
    self.r.vals[a] = 0x80000000
    if v == 0x20000:   # PSP_BL__LOAD_SOSDRV: the secure OS comes up and is ready for its ring
      self.r.set("mp0", self._mp0(81), 0x00310000)
      self.r.set("mp0", self._mp0(64), 0x80000000)

  def _ring_ctl(self, a: int, v: int) -> None:
    if "psp_timeout" in self.b.faults: self.r.vals[a] = 0; return
    if v >> 16 == 2:  # INIT ring (type KM)
      self.ring = (self.r.get("mp0", self._mp0(70)) << 32) | self.r.get("mp0", self._mp0(69))
      self.ring_size = self.r.get("mp0", self._mp0(71))
      self.rptr = 0
    self.r.vals[a] = 0x80000000

  def _wptr(self, a: int, v: int) -> None:
    self.r.vals[a] = v
    while self.rptr != v:
      fr = P.psp_gfx_rb_frame.from_buffer_copy(bytes(self.phys(self.ring + self.rptr * 4, 64)))
      self.rptr = (self.rptr + 16) % (self.ring_size // 4)
      cmd_mc = (fr.cmd_buf_addr_hi << 32) | fr.cmd_buf_addr_lo
      cmd = P.psp_gfx_cmd_resp.from_buffer_copy(bytes(self.phys(cmd_mc, ctypes.sizeof(P.psp_gfx_cmd_resp))))
      if "psp_timeout" in self.b.faults: continue          # the fence never arrives
      status = self._cmd(cmd)
      resp = self.phys(cmd_mc + P.psp_gfx_cmd_resp.resp.offset, 20)
      resp[:20] = struct.pack("<5I", status, 0, 0, 0, self.TMR_SIZE if cmd.cmd_id == P.GFX_CMD_ID_LOAD_TOC else 0)
      self.phys((fr.fence_addr_hi << 32) | fr.fence_addr_lo, 4)[:4] = struct.pack("<I", fr.fence_value)

  def _cmd(self, cmd) -> int:
    self.log.append(("psp", cmd.cmd_id))
    if (e := self.b.faults.get("psp_error")) and cmd.cmd_id == P.GFX_CMD_ID_LOAD_IP_FW: return e["status"] if isinstance(e, dict) else 0xffff
    if cmd.cmd_id == P.GFX_CMD_ID_LOAD_IP_FW:
      c = cmd.cmd.cmd_load_ip_fw
      self.loaded.append((c.fw_type, bytes(self.phys((c.fw_phy_addr_hi << 32) | c.fw_phy_addr_lo, c.fw_size))))
    elif cmd.cmd_id == P.GFX_CMD_ID_SETUP_TMR:
      self.tmr = (cmd.cmd.cmd_setup_tmr.buf_phy_addr_hi << 32) | cmd.cmd.cmd_setup_tmr.buf_phy_addr_lo, cmd.cmd.cmd_setup_tmr.buf_size
    elif cmd.cmd_id == P.GFX_CMD_ID_AUTOLOAD_RLC:
      types = {t for t, _ in self.loaded}
      need = {P.GFX_FW_TYPE_RS64_MEC, P.GFX_FW_TYPE_RLC_G, P.GFX_FW_TYPE_IMU_I}
      self.b.fw_loaded = types           # what the board's engines check before they run
      if hasattr(self.b, "gfx"): self.b.gfx.autoload(types, need)
      elif need <= types:
        self.r.set("gc", "regRLC_RLCS_BOOTLOAD_STATUS", self.r.reg("gc", "regRLC_RLCS_BOOTLOAD_STATUS").encode(BOOTLOAD_COMPLETE=1))
    return 0x1 if "psp_stale_status" in self.b.faults else 0   # done, yet a status left in the field (psp_cmd_submit_buf)

  # ---- SMU mailbox
  def _smu(self, a: int, v: int) -> None:
    self.r.vals[a] = v
    self.smu_msgs.append((v, self.r.get("mp1", "regMP1_SMN_C2PMSG_82")))
    self.log.append(("smu", v))
    if "smu_timeout" in self.b.faults: return
    if (e := self.b.faults.get("smu_error")): self.r.set("mp1", "regMP1_SMN_C2PMSG_90", e["response"] if isinstance(e, dict) else 0xff); return
    if v == 0x2: self.r.set("mp1", "regMP1_SMN_C2PMSG_82", 0x00504100)    # GetSmuVersion
    if v == 0x2F and self.b.asic.version(1)[0] == 13: self._mode1()
    self.r.set("mp1", "regMP1_SMN_C2PMSG_90", 1)

  def _smu_debug(self, a: int, v: int) -> None:
    if v == 2: self._mode1()

  def _mode1(self) -> None:
    """Mode 1 reset: every IP back to power-on state (VRAM kept), the PSP back in its bootloader."""
    self.resets += 1
    faults = dict(self.b.faults)
    self.b.reset()
    self.b.faults.update(faults)
    self.install(sos_alive=False)

  def _dequeue(self, a: int, v: int) -> None:
    self.r.vals[a] = v
    if v & 1: self.r.set("gc", "regCP_HQD_ACTIVE", 0)


def make_board(arch: str = "gfx1100", sos_alive: bool = False, **kw):
  """A VirtualBus with one emulated board plus the firmware stand-ins: (bus, system, board, fake)."""
  from rawgpu.drivers.emu.pcibus import VirtualBus
  from rawgpu.drivers.emu.amd.board import AMDBoard
  vb = VirtualBus()
  board = AMDBoard(arch=arch, host=vb.host, **kw)
  bus = vb.plug(board)
  return vb, bus, board, FakeFirmware(board, sos_alive)
