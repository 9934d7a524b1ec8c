"""PSP (MP0): the bootloader mailbox for the sOS components, the KM ring, command buffers and fences in memory.

Mailbox registers MP0_SMN_C2PMSG_n (MPASP_SMN_C2PMSG_n on MP 14), as psp_v13_0.c/psp_v14_0.c drive them:
  33 bit 31: IFWI ready;  35: bootloader command / ready (bit 31);  36: component address >> 20 (MC);  81: sOS alive;
  64: ring control (create = type << 16, destroy = GFX_CTRL_CMD_ID_DESTROY_RINGS; bit 31 + status on completion);
  67: ring write pointer (dwords);  69/70: ring address;  71: ring size (bytes).
Command buffers are psp_gfx_cmd_resp (1 KiB, response at +864), frames psp_gfx_rb_frame (64 bytes) (psp_gfx_if.h).
Signed images carry the "$PS1" header at +0x10 with the body size at +0x14, like every signed AMD PSP image; an
image that fails that check is refused with a TEE status (GlobalPlatform TEE codes, as TEE_ERROR_NOT_SUPPORTED is).
"""
from __future__ import annotations
import ctypes, struct
from typing import TYPE_CHECKING
from rawgpu.autogen.amd import psp as G
from rawgpu.drivers.emu.amd.asic import MP0_HWID
from rawgpu.drivers.emu.pcibus import BusError
if TYPE_CHECKING: from rawgpu.drivers.emu.amd.board import AMDBoard

# enum psp_bootloader_cmd (amdgpu_psp.h; not among the generated modules)
PSP_BL_LOAD_SYSDRV, PSP_BL_LOAD_SOSDRV, PSP_BL_LOAD_KEY_DATABASE = 0x10000, 0x20000, 0x80000
PSP_BL_LOAD_SOCDRV, PSP_BL_LOAD_DBGDRV, PSP_BL_LOAD_INTFDRV, PSP_BL_LOAD_RASDRV = 0xB0000, 0xC0000, 0xD0000, 0xE0000
PSP_BL_LOAD_IPKEYMGRDRV, PSP_BL_LOAD_TOS_SPL_TABLE = 0xF0000, 0x10000000
BL_COMMANDS = {PSP_BL_LOAD_SYSDRV, PSP_BL_LOAD_SOSDRV, PSP_BL_LOAD_KEY_DATABASE, PSP_BL_LOAD_SOCDRV, PSP_BL_LOAD_DBGDRV,
               PSP_BL_LOAD_INTFDRV, PSP_BL_LOAD_RASDRV, PSP_BL_LOAD_IPKEYMGRDRV, PSP_BL_LOAD_TOS_SPL_TABLE}
PSP_RING_TYPE_KM = 2                               # enum psp_ring_type (amdgpu_psp.h)
GFX_CTRL_CMD_ID_DESTROY_RINGS = G.GFX_CTRL_CMD_ID_DESTROY_RINGS
GFX_CMD_ID_LOAD_TA, GFX_CMD_ID_LOAD_ASD, GFX_CMD_ID_SETUP_TMR = G.GFX_CMD_ID_LOAD_TA, G.GFX_CMD_ID_LOAD_ASD, G.GFX_CMD_ID_SETUP_TMR
GFX_CMD_ID_LOAD_IP_FW, GFX_CMD_ID_DESTROY_TMR = G.GFX_CMD_ID_LOAD_IP_FW, G.GFX_CMD_ID_DESTROY_TMR
GFX_CMD_ID_LOAD_TOC, GFX_CMD_ID_AUTOLOAD_RLC = G.GFX_CMD_ID_LOAD_TOC, G.GFX_CMD_ID_AUTOLOAD_RLC
GFX_CMD_ID_SRIOV_SPATIAL_PART = G.GFX_CMD_ID_SRIOV_SPATIAL_PART
# amdgpu_gfx.h enum amdgpu_gfx_partition, which is also what NBIO's PARTITION_COMPUTE_STATUS reports (aqua_vanjaram.c
# compares the two): partitions of an eight-XCC board -> mode
PARTITION_MODE = {1: 0, 2: 1, 3: 2, 4: 3}   # SPX, DPX, TPX, QPX; one partition per XCC is CPX (4)
CPX_PARTITION_MODE = 4
TEE_SUCCESS, TEE_ERROR_NOT_SUPPORTED, PSP_ERR_UNKNOWN_COMMAND = G.TEE_SUCCESS, G.TEE_ERROR_NOT_SUPPORTED, G.PSP_ERR_UNKNOWN_COMMAND
TEE_ERROR_BAD_FORMAT, TEE_ERROR_BAD_PARAMETERS, TEE_ERROR_BAD_STATE, TEE_ERROR_SECURITY = 0xFFFF0005, 0xFFFF0006, 0xFFFF0007, 0xFFFF000F   # GlobalPlatform TEE
# MP0s whose PMFW manages the DF C-states: the TMR is set up only after the SMU's firmware is loaded (amdgpu_psp.c,
# psp_check_pmfw_centralized_cstate_management and psp_hw_start). What the part does otherwise is not public; the
# model refuses the command (TEE_ERROR_BAD_STATE), so a driver that gets the order wrong learns it here.
PMFW_CENTRALIZED = {(13, 0, 0), (13, 0, 2), (13, 0, 7)}
STALE_STATUS = 0x1   # what the psp_stale_status fault leaves in a response (the value such firmware leaves is not public)
SIG = b"$PS1"
RESP_OFF, CMD_SIZE, FRAME_SIZE = G.psp_gfx_cmd_resp.resp.offset, ctypes.sizeof(G.psp_gfx_cmd_resp), ctypes.sizeof(G.psp_gfx_rb_frame)
TMR_SIZE, TMR_ALIGN = 0x1000000, 0x100000
FW_SMU, FW_RLC_G, FW_IMU_I, FW_IMU_D = G.GFX_FW_TYPE_SMU, G.GFX_FW_TYPE_RLC_G, G.GFX_FW_TYPE_IMU_I, G.GFX_FW_TYPE_IMU_D
FW_SDMA_TH0, FW_SDMA_TH1 = G.GFX_FW_TYPE_SDMA_UCODE_TH0, G.GFX_FW_TYPE_SDMA_UCODE_TH1
FW_RS64_PFP, FW_RS64_ME, FW_RS64_MEC = G.GFX_FW_TYPE_RS64_PFP, G.GFX_FW_TYPE_RS64_ME, G.GFX_FW_TYPE_RS64_MEC
# gfx9 (MI300): the F32 MEC and its jump table, SDMA 4 per engine, the RLC restore lists, the SMU's P2S table
GFX9_SIGNED = {G.GFX_FW_TYPE_CP_MEC, G.GFX_FW_TYPE_CP_MEC_ME1, G.GFX_FW_TYPE_SDMA0, G.GFX_FW_TYPE_SDMA1, G.GFX_FW_TYPE_SDMA2,
               G.GFX_FW_TYPE_SDMA3, G.GFX_FW_TYPE_RLC_RESTORE_LIST_SRM_CNTL, G.GFX_FW_TYPE_RLC_RESTORE_LIST_GPM_MEM,
               G.GFX_FW_TYPE_RLC_RESTORE_LIST_SRM_MEM, G.GFX_FW_TYPE_P2S_TABLE}
SIGNED_TYPES = {FW_SMU, FW_RLC_G, FW_IMU_I, FW_SDMA_TH0, FW_RS64_PFP, FW_RS64_ME, FW_RS64_MEC} | GFX9_SIGNED
AUTOLOAD_REQUIRED = {FW_RLC_G, FW_IMU_I, FW_IMU_D}
SOS_VERSION = 0x00310025


def signed_ok(img: bytes) -> bool:
  """A PSP-signed image: header with '$PS1' at +0x10 whose body fits the given length."""
  if len(img) < 0x100 or img[0x10:0x14] != SIG: return False
  return 0x100 + struct.unpack_from("<I", img, 0x14)[0] <= len(img)


class PSP:
  def __init__(self, board: "AMDBoard"):
    self.b = board
    r = board.regs
    pfx = "regMP0_SMN_C2PMSG_" if r.has("mp0", "regMP0_SMN_C2PMSG_35") else "regMPASP_SMN_C2PMSG_"
    self.a = {n: r.addr("mp0", f"{pfx}{n}") for n in (33, 35, 36, 58, 64, 67, 69, 70, 71, 81) if r.has("mp0", f"{pfx}{n}")}
    v = r.vals
    v[self.a[33]] = 0x80000000                     # IFWI done at power-on
    v[self.a[35]] = 0x80000000                     # bootloader ready
    for n in (35, 64, 67): r.wr[self.a[n]] = self._kick
    self.pending_bl: int | None = None
    self.pending_ctl: int | None = None
    self.bl_loaded: list[int] = []
    self.sos_alive = False
    self.ring: tuple[int, int] | None = None       # (MC address, size)
    self.rptr = 0
    self.tmr: tuple[int, int] | None = (0, TMR_SIZE) if board.asic.boot_time_tmr else None
    self.toc_loaded = False
    self.log: list[tuple[str, int, int]] = []       # (what, id, status) for tests and debugging
    if board.asic.ifwi_firmware: self._sos_running()

  # ---- register writes only record the request; the PSP acts on them when it runs
  def _kick(self, a: int, v: int) -> None:
    vals = self.b.regs.vals
    if a == self.a[35]:
      vals[a] = v & 0x7fffffff                     # ready bit drops while the command runs
      self.pending_bl = v
    elif a == self.a[64]:
      vals[a] = v & 0x7fffffff
      self.pending_ctl = v
    else: vals[a] = v

  def _stuck(self) -> bool: return "psp_timeout" in self.b.faults

  def busy(self) -> bool:
    return self.pending_bl is not None or self.pending_ctl is not None or (self.ring is not None and self._wptr() != self.rptr)

  def _wptr(self) -> int: return self.b.regs.vals.get(self.a[67], 0)

  def step(self) -> bool:
    if self._stuck(): return False
    if self.pending_bl is not None:
      cmd, self.pending_bl = self.pending_bl, None
      self._bootloader(cmd)
      return True
    if self.pending_ctl is not None:
      cmd, self.pending_ctl = self.pending_ctl, None
      self._ring_ctl(cmd)
      return True
    if self.ring is not None and self._wptr() != self.rptr:
      self._frame()
      return True
    return False

  # ---- bootloader
  def _bootloader(self, cmd: int) -> None:
    vals = self.b.regs.vals
    if self.sos_alive or cmd not in BL_COMMANDS:
      vals[self.a[35]] = 0x80000000 | 0x1 if cmd not in BL_COMMANDS else 0x80000000
      return
    addr = vals.get(self.a[36], 0) << 20
    try: img = bytes(self.b.gmc.phys(addr, 0x100))
    except BusError: img = b""
    # driver images are PSP-signed; the key database and the SPL table are data the bootloader checks itself
    ok = len(img) == 0x100 and (img[0x10:0x14] == SIG or cmd in (PSP_BL_LOAD_KEY_DATABASE, PSP_BL_LOAD_TOS_SPL_TABLE))
    if "psp_error" in self.b.faults: ok = False
    if cmd == PSP_BL_LOAD_SOSDRV and PSP_BL_LOAD_SYSDRV not in self.bl_loaded: ok = False   # sOS needs the system driver
    self.log.append(("bootloader", cmd, 0 if ok else 1))
    if not ok:
      vals[self.a[35]] = 0x80000000 | 0x1           # error code in bits [7:0]
      return
    self.bl_loaded.append(cmd)
    if cmd == PSP_BL_LOAD_SOSDRV:
      self.sos_alive = True
      vals[self.a[81]] = SOS_VERSION
      if 58 in self.a: vals[self.a[58]] = SOS_VERSION
      vals[self.a[64]] = 0x80000000               # trusted OS ready for ring creation
    vals[self.a[35]] = 0x80000000

  # ---- ring control
  def _ring_ctl(self, cmd: int) -> None:
    vals = self.b.regs.vals
    if not self.sos_alive: return                  # nobody home: the request is never answered
    status = 0
    if cmd == GFX_CTRL_CMD_ID_DESTROY_RINGS: self.ring = None
    elif cmd >> 16 == PSP_RING_TYPE_KM and not cmd & 0xffff:
      addr = (vals.get(self.a[70], 0) << 32) | vals.get(self.a[69], 0)
      size = vals.get(self.a[71], 0)
      if size < FRAME_SIZE or size % FRAME_SIZE or addr & 0xfff: status = 0x1
      else:
        self.ring, self.rptr = (addr, size), 0
        vals[self.a[67]] = 0
    else: status = PSP_ERR_UNKNOWN_COMMAND & 0xffff
    self.log.append(("ring", cmd, status))
    vals[self.a[64]] = 0x80000000 | status

  # ---- command frames
  def _frame(self) -> None:
    assert self.ring is not None
    base, size = self.ring
    off = (self.rptr * 4) % size
    try:
      f = bytes(self.b.gmc.phys(base + off, FRAME_SIZE))
      cmd_lo, cmd_hi, _cmd_size, fence_lo, fence_hi, fence_val = struct.unpack_from("<6I", f, 0)
      cmd_addr, fence_addr = (cmd_hi << 32) | cmd_lo, (fence_hi << 32) | fence_lo
      buf = self.b.gmc.phys(cmd_addr, CMD_SIZE)
      status, extra = self._command(bytes(buf))
      struct.pack_into("<I", buf, RESP_OFF, status)
      for off_, val in extra.items(): struct.pack_into("<I", buf, RESP_OFF + off_, val)
      self.b.gmc.phys(fence_addr, 4)[:] = struct.pack("<I", fence_val)
    except BusError: pass                           # unreachable frame/buffer: the command is lost
    self.rptr += FRAME_SIZE // 4

  def _command(self, buf: bytes) -> tuple[int, dict[int, int]]:
    cmd_id = struct.unpack_from("<I", buf, 8)[0]
    u = struct.unpack_from("<8I", buf, 28)
    if "psp_error" in self.b.faults:
      f = self.b.faults["psp_error"]
      st = f.get("status", TEE_ERROR_BAD_PARAMETERS) if isinstance(f, dict) else TEE_ERROR_BAD_PARAMETERS
      self.log.append(("cmd", cmd_id, st)); return st, {}
    st, extra = TEE_SUCCESS, {}
    if cmd_id == GFX_CMD_ID_LOAD_TOC:
      addr, size = (u[1] << 32) | u[0], u[2]
      if size == 0 or size > 0x100000: st = TEE_ERROR_BAD_PARAMETERS
      else: self.toc_loaded, extra = True, {16: TMR_SIZE}
    elif cmd_id == GFX_CMD_ID_SETUP_TMR:
      addr, size = (u[1] << 32) | u[0], u[2]
      if size == 0 and self.b.asic.boot_time_tmr: pass   # keeps the TMR it set up at boot (psp_tmr_load without a buffer)
      elif addr % TMR_ALIGN or size < TMR_SIZE: st = TEE_ERROR_BAD_PARAMETERS
      elif self.b.asic.version(MP0_HWID) in PMFW_CENTRALIZED and FW_SMU not in self.b.fw_loaded: st = TEE_ERROR_BAD_STATE
      else: self.tmr = (addr, size)
    elif cmd_id == GFX_CMD_ID_DESTROY_TMR: self.tmr = None if not self.b.asic.boot_time_tmr else self.tmr
    elif cmd_id == GFX_CMD_ID_LOAD_IP_FW: st = self._load_ip_fw((u[1] << 32) | u[0], u[2], u[3])
    elif cmd_id == GFX_CMD_ID_AUTOLOAD_RLC:
      st = TEE_SUCCESS if self.b.gfx.autoload(self.b.fw_loaded, AUTOLOAD_REQUIRED) else TEE_ERROR_BAD_PARAMETERS
    elif cmd_id in (GFX_CMD_ID_LOAD_TA, GFX_CMD_ID_LOAD_ASD): st = TEE_SUCCESS
    elif cmd_id == GFX_CMD_ID_SRIOV_SPATIAL_PART and len(self.b.xccs) > 1: st = self.spatial_partition(u[0])
    else: st = TEE_ERROR_NOT_SUPPORTED
    if st == TEE_SUCCESS and "psp_stale_status" in self.b.faults: st = STALE_STATUS   # done, yet the field not cleared
    self.log.append(("cmd", cmd_id, st))
    return st, extra

  def spatial_partition(self, n: int) -> int:
    """MI300: split the XCCs into n compute partitions (psp_spatial_partition's command). What the firmware does is
    modelled on what amdgpu writes itself where there is no PSP (gfx_v9_4_3_switch_compute_partition): every XCC's
    CP_HYP_XCP_CTL gets the partition's XCC count and its place in it; NBIO then reports the mode."""
    xccs = self.b.xccs
    if n < 1 or len(xccs) % n: return TEE_ERROR_BAD_PARAMETERS
    per, r = len(xccs) // n, self.b.regs
    for i, g in enumerate(xccs): r.vals[g.a_xcp] = r.reg(g.key, "regCP_HYP_XCP_CTL").encode(NUM_XCC_IN_XCP=per, VIRTUAL_XCC_ID=i % per)
    mode = CPX_PARTITION_MODE if per == 1 else PARTITION_MODE[n]
    a = r.addr("nbio", "regBIF_BX_PF0_PARTITION_COMPUTE_STATUS")
    r.vals[a] = r.reg("nbio", "regBIF_BX_PF0_PARTITION_COMPUTE_STATUS").encode(PARTITION_MODE=mode)
    return TEE_SUCCESS

  def _load_ip_fw(self, addr: int, size: int, fw_type: int) -> int:
    if size == 0 or size > 8 << 20 or not 0 < fw_type < 130: return TEE_ERROR_BAD_PARAMETERS
    if fw_type != FW_SMU and self.tmr is None: return TEE_ERROR_BAD_PARAMETERS   # images go into the TMR
    try: img = bytes(self.b.gmc.phys(addr, size))
    except BusError: return TEE_ERROR_BAD_PARAMETERS
    if fw_type in SIGNED_TYPES and not signed_ok(img): return TEE_ERROR_SECURITY
    self.b.fw_loaded.add(fw_type)
    if fw_type == FW_SMU: self.b.smu.firmware_loaded()
    self.b.sdma.firmware_loaded(fw_type)
    return TEE_SUCCESS

  # ---- a board left booted by a previous driver
  def preload(self) -> None: self._sos_running()

  def _sos_running(self) -> None:
    """The secure OS is up (started by the IFWI, or by a previous driver's bootloader stages): ready for a ring."""
    self.sos_alive = True
    vals = self.b.regs.vals
    vals[self.a[81]] = SOS_VERSION; vals[self.a[64]] = 0x80000000
    if 58 in self.a: vals[self.a[58]] = SOS_VERSION
    self.bl_loaded = [PSP_BL_LOAD_KEY_DATABASE, PSP_BL_LOAD_SYSDRV, PSP_BL_LOAD_SOSDRV]
    self.tmr = self.tmr or (0, TMR_SIZE)
