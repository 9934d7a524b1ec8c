"""PSP: the security processor that loads every other firmware (psp_v13_0.c / psp_v14_0.c, amdgpu_psp.c).

Cold boot: hand the bootloader each SOS component through the 1 MiB private buffer (C2PMSG_35/36), start the
GPCOM ring (C2PMSG_64/67/69/70/71), load the TOC to learn the TMR size, set up the TMR (after the SMU's image where
the PMFW manages the DF C-states), then load the SMU's and every GFX and SDMA image with LOAD_IP_FW, and finish with
AUTOLOAD_RLC so the RLC boots the CP, IMU and SDMA engines.
"""
from __future__ import annotations
import ctypes, struct, sys, time
from rawgpu.drivers.am import facts as F
from rawgpu.drivers.am.block import Block
from rawgpu.errors import DeviceTimeout, FirmwareError

RING_SIZE = 0x1000
HANDSHAKE_S = 0.02   # psp_v13_0/v14_0 wait 20 ms after starting the sOS and after a ring command ("handshake issue")
FW_TYPE = F.PSP_FW_TYPE
# bootloader order (psp_hw_start): key database, SPL, system driver, SOC/INTF/DBG/RAS/IPKEYMGR drivers, then SOS
BL_ORDER = (("PSP_FW_TYPE_PSP_KDB", "PSP_BL__LOAD_KEY_DATABASE"), ("PSP_FW_TYPE_PSP_SPL", "PSP_BL__LOAD_TOS_SPL_TABLE"),
            ("PSP_FW_TYPE_PSP_SYS_DRV", "PSP_BL__LOAD_SYSDRV"), ("PSP_FW_TYPE_PSP_SOC_DRV", "PSP_BL__LOAD_SOCDRV"),
            ("PSP_FW_TYPE_PSP_INTF_DRV", "PSP_BL__LOAD_INTFDRV"), ("PSP_FW_TYPE_PSP_DBG_DRV", "PSP_BL__LOAD_DBGDRV"),
            ("PSP_FW_TYPE_PSP_RAS_DRV", "PSP_BL__LOAD_RASDRV"), ("PSP_FW_TYPE_PSP_IPKEYMGR_DRV", "PSP_BL__LOAD_IPKEYMGRDRV"))


def is_rejection(status: int) -> bool:
  """A status that says the PSP refused the command: a GlobalPlatform TEE error (0xFFFF00xx: TEE_ERROR_SECURITY for a
  bad signature, TEE_ERROR_NOT_SUPPORTED, ...) or psp_gfx_if.h's PSP_ERR_UNKNOWN_COMMAND. Any other value is taken as
  the status some PSP firmware leaves on commands that worked."""
  return status >> 8 == 0xFFFF00 or status == F.PSP_ERR_UNKNOWN_COMMAND


class PSP(Block):
  name = "psp"

  def init_sw(self) -> None:
    d = self.dev
    self.fw_buf = d.boot_alloc(F.PSP_1_MEG, align=F.PSP_1_MEG)      # the bootloader's private buffer
    self.ring = d.boot_alloc(RING_SIZE)
    self.cmd = d.boot_alloc(0x1000)
    self.fence = d.boot_alloc(0x1000)
    self.tmr: int | None = None   # the TMR the driver allocated (none where the PSP set one up at boot)
    self.tmr_size = 0
    self.fence_value = 0
    self.rejected: list[str] = []   # commands the PSP answered with a non-zero status (submit)

  def msg(self, n: int):
    name = f"regMP0_SMN_C2PMSG_{n}"
    return self.reg("mp0", name if self.dev.regs.has("mp0", name) else f"regMPASP_SMN_C2PMSG_{n}")  # MP 14 names them MPASP

  def sos_alive(self) -> bool: return self.msg(81).read() != 0

  # ---- bootloader
  def _wait_bootloader(self, what: str) -> None:
    """Ready is C2PMSG_35 == 0x80000000 exactly (psp_v13_0_wait_for_bootloader); bits [7:0] carry an error code."""
    self.dev.wait(lambda: self.msg(35).read() & 0x80000000, f"PSP bootloader ready ({what})", timeout=10.0)
    if (err := self.msg(35).read() & 0xff) != 0:
      raise FirmwareError(f"{self.dev.bus}: the PSP bootloader rejected {what} with error {err:#x}; the SOS firmware does not "
                          f"match this board ({self.dev.fw_hint()})")

  def _load_component(self, data: bytes, cmd: int, what: str) -> None:
    if len(data) > F.PSP_1_MEG: raise FirmwareError(f"PSP component {what} is {len(data)} bytes, more than the 1 MiB bootloader buffer")
    self._wait_bootloader(what)
    buf = self.dev.vram(self.fw_buf, F.PSP_1_MEG)
    buf[:len(data)] = data
    buf[len(data):] = bytes(F.PSP_1_MEG - len(data))
    self.dev.soc.flush_hdp()
    self.msg(36).write(self.dev.gmc.mc(self.fw_buf) >> 20)
    self.msg(35).write(cmd)

  def boot_sos(self) -> None:
    sos = self.dev.fw.sos
    v13 = self.dev.ips["mp0"][0] == 13
    for comp, cmd in BL_ORDER:
      if v13 and comp == "PSP_FW_TYPE_PSP_IPKEYMGR_DRV": continue   # PSP 13 bootloaders have no such command
      # PSP 13 hands the SPL command the key database image (psp_v13_0_bootloader_load_spl does exactly this)
      src = "PSP_FW_TYPE_PSP_KDB" if v13 and comp == "PSP_FW_TYPE_PSP_SPL" else comp
      if FW_TYPE[comp] in sos and (data := sos.get(FW_TYPE[src])) is not None:
        self._load_component(data, F.PSP_BL[cmd], comp)
        self._wait_bootloader(comp)
    self._load_component(sos[FW_TYPE["PSP_FW_TYPE_PSP_SOS"]], F.PSP_BL["PSP_BL__LOAD_SOSDRV"], "SOS")
    time.sleep(HANDSHAKE_S)
    self.dev.wait(lambda: self.msg(81).read() != 0, "PSP secure OS start (C2PMSG_81)", timeout=10.0)

  # ---- GPCOM ring
  def ring_create(self) -> None:
    self.dev.wait(lambda: self.msg(64).read() & 0x80000000, "PSP ready for ring creation")
    mc = self.dev.gmc.mc(self.ring)
    self.dev.vram(self.ring, RING_SIZE)[:] = bytes(RING_SIZE)
    self.dev.vram(self.fence, 4)[:] = bytes(4)   # a fence a last owner left could match this boot's first value
    self.fence_value = 0
    self.msg(69).write(mc & 0xffffffff)
    self.msg(70).write(mc >> 32)
    self.msg(71).write(RING_SIZE)
    self.msg(64).write(F.PSP_RING_TYPE__KM << 16)
    time.sleep(HANDSHAKE_S)
    self.dev.wait(lambda: self.msg(64).read() & 0x80000000, "PSP ring creation")
    if (st := self.msg(64).read() & 0xffff) != 0:
      raise DeviceTimeout(f"{self.dev.bus}: PSP refused to create its ring (status {st:#x}); reset the board (rawgpu resets it on the next open)")

  def ring_stop(self) -> None:
    self.msg(64).write(F.GFX_CTRL_CMD_ID_DESTROY_RINGS)
    time.sleep(HANDSHAKE_S)
    self.dev.wait(lambda: self.msg(64).read() & 0x80000000, "PSP ring destroy")

  def submit(self, cmd_id: str, member: str | None = None, **fields) -> dict:
    """One GPCOM command: build the 1 KiB command buffer, write a ring frame, bump the write pointer, wait the fence."""
    d = self.dev
    cmd = F.PSP_CMD(buf_size=ctypes.sizeof(F.PSP_CMD), buf_version=F.PSP_GFX_CMD_BUF_VERSION, cmd_id=F.GFX_CMD_ID[cmd_id])
    if member is not None:
      body = getattr(cmd.cmd, member)
      for k, v in fields.items():
        obj, _, leaf = k.rpartition("__")
        target = getattr(body, obj) if obj else body
        if not hasattr(type(target), leaf): raise AttributeError(f"{type(target).__name__} has no field {leaf}")
        setattr(target, leaf, v)
    d.vram(self.cmd, ctypes.sizeof(cmd))[:] = bytes(cmd)
    self.fence_value += 1
    wptr = self.msg(67).read()
    slot = (wptr % (RING_SIZE // 4)) * 4
    cmd_mc, fence_mc = d.gmc.mc(self.cmd), d.gmc.mc(self.fence)
    d.vram(self.ring + slot, F.PSP_RB_FRAME.size)[:] = F.PSP_RB_FRAME.pack(
      cmd_buf_addr_lo=cmd_mc & 0xffffffff, cmd_buf_addr_hi=cmd_mc >> 32, fence_addr_lo=fence_mc & 0xffffffff,
      fence_addr_hi=fence_mc >> 32, fence_value=self.fence_value)
    d.soc.flush_hdp()
    self.msg(67).write((wptr + F.PSP_RB_FRAME.size // 4) % (RING_SIZE // 4))
    fence = d.vram(self.fence, 4)
    d.wait(lambda: struct.unpack("<I", fence)[0] == self.fence_value, f"PSP command {cmd_id}", timeout=5.0)
    d.read_fence()   # the response, read after the fence that says it is written
    resp = F.PSP_RESP.parse(bytes(d.vram(self.cmd + F.PSP_CMD.resp.offset, F.PSP_RESP.size)))
    if (st := resp["status"]) != 0:
      what = f" (firmware type {fields['fw_type']})" if "fw_type" in fields else ""
      if is_rejection(st):
        raise FirmwareError(f"{d.bus}: PSP rejected {cmd_id}{what} with status {st:#x}; the firmware does not match this board ({self.dev.fw_hint()})")
      # amdgpu only warns about a status (psp_cmd_submit_buf): some PSP firmware leaves one on commands that worked. If
      # the engines then never start, that error names what the PSP answered here (AMDevice.wait).
      self.rejected.append(f"{cmd_id}{what}: status {st:#x}")
      print(f"am {d.bus}: warning: PSP answered {cmd_id}{what} with status {st:#x}; going on, as amdgpu does", file=sys.stderr)
    return resp

  def _copy(self, data: bytes) -> int:
    if len(data) > F.PSP_1_MEG: raise FirmwareError(f"a {len(data)}-byte firmware image does not fit the PSP's 1 MiB staging buffer")
    buf = self.dev.vram(self.fw_buf, F.PSP_1_MEG)
    buf[:len(data)] = data
    return self.dev.gmc.mc(self.fw_buf)

  def load_ip_fw(self, fw_type: int, data: bytes) -> None:
    mc = self._copy(data)
    self.submit("GFX_CMD_ID_LOAD_IP_FW", "cmd_load_ip_fw", fw_phy_addr_lo=mc & 0xffffffff, fw_phy_addr_hi=mc >> 32,
                fw_size=len(data), fw_type=fw_type)

  # Which MP0 does what, from amdgpu_psp.c (psp_early_init, psp_check_pmfw_centralized_cstate_management):
  # - boot-time TMR: the PSP set its TMR up itself; the driver allocates none.
  # - RLC autoload: the PSP loads the GFX images and the RLC boots the engines from them (every AM target but MI300).
  # - DF C-state management centralized in the PMFW: the SMU firmware must be loaded before SETUP_TMR.
  BOOT_TIME_TMR = {(13, 0, 6), (13, 0, 14), (14, 0, 2), (14, 0, 3)}
  NO_AUTOLOAD = {(13, 0, 6), (13, 0, 14)}
  PMFW_CENTRALIZED = {(13, 0, 0), (13, 0, 2), (13, 0, 7)}

  @property
  def boot_time_tmr(self) -> bool: return self.dev.ips["mp0"] in self.BOOT_TIME_TMR
  @property
  def autoload(self) -> bool: return self.dev.ips["mp0"] not in self.NO_AUTOLOAD
  @property
  def pmfw_centralized(self) -> bool: return self.dev.ips["mp0"] in self.PMFW_CENTRALIZED

  def tmr_init(self) -> None:
    """The TOC tells the PSP what it will load and how much TMR that takes; the driver allocates it unless the PSP
    set its own up at boot (psp_tmr_init)."""
    if self.boot_time_tmr and not self.autoload: return
    size = F.PSP_TMR_SIZE
    if (toc := self.dev.fw.sos.get(FW_TYPE["PSP_FW_TYPE_PSP_TOC"])) is not None:
      mc = self._copy(toc)
      resp = self.submit("GFX_CMD_ID_LOAD_TOC", "cmd_load_toc", toc_phy_addr_lo=mc & 0xffffffff, toc_phy_addr_hi=mc >> 32, toc_size=len(toc))
      size = resp["tmr_size"] or size
    if self.tmr is None and not self.boot_time_tmr: self.tmr, self.tmr_size = self.dev.boot_alloc(size, align=F.PSP_TMR_ALIGNMENT), size

  def tmr_load(self) -> None:
    """SETUP_TMR (psp_tmr_load): the driver's TMR; with a boot-time TMR and no autoload (MI300) the command names no
    buffer; a boot-time TMR with autoload (MP0 14.0.2/14.0.3) needs no command at all."""
    if self.boot_time_tmr and self.autoload: return
    if self.tmr is None:
      self.submit("GFX_CMD_ID_SETUP_TMR", "cmd_setup_tmr", buf_size=0, bitfield__virt_phy_addr=1)
      return
    mc = self.dev.gmc.mc(self.tmr)
    pa = self.tmr + self.dev.gmc.vram_base_offset
    self.submit("GFX_CMD_ID_SETUP_TMR", "cmd_setup_tmr", buf_phy_addr_lo=mc & 0xffffffff, buf_phy_addr_hi=mc >> 32,
                buf_size=self.tmr_size, bitfield__virt_phy_addr=1, system_phy_addr_lo=pa & 0xffffffff,
                system_phy_addr_hi=pa >> 32)

  def load_smu_firmware(self) -> None:
    fw = self.dev.fw.smu
    if fw is None: raise FirmwareError(f"{self.dev.bus}: no SMU firmware was found for MP1 {self.dev.ips['mp1']}")
    self.load_ip_fw(fw.fw_type, fw.data)

  def init_hw(self) -> None:
    """psp_hw_start: the bootloader stages, the ring, the TMR (the PMFW first where it manages the DF C-states)."""
    self.dev.step("psp: bootloader", self.boot_sos)
    self.dev.step("psp: ring", self.ring_create)
    self.dev.step("psp: tmr", self.tmr_init)
    if self.pmfw_centralized: self.dev.step("psp: smu firmware", self.load_smu_firmware)
    self.dev.step("psp: tmr setup", self.tmr_load)

  def load_non_psp_firmware(self) -> None:
    """psp_load_non_psp_fw: the SMU's image first (unless it went before the TMR), then every other image in the
    order amdgpu loads them, then (with autoload) the RLC boots the engines from them."""
    if self.autoload and not self.pmfw_centralized: self.load_smu_firmware()
    for u in self.dev.fw.images: self.load_ip_fw(u.fw_type, u.data)
    if self.autoload: self.submit("GFX_CMD_ID_AUTOLOAD_RLC")
