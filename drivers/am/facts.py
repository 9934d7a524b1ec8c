"""Hardware and firmware-interface facts AM needs.

Structures and most constants come from the generated bindings (rawgpu.autogen.amd, checked against gcc there).
The few values those headers do not export (amdgpu.h / amdgpu_psp.h / amdgpu_vm.h / amdgpu_doorbell.h / ...
macros and enums outside the generated set) are stated here with the header they come from;
tests/test_am_facts.py checks each of them against the kernel header with a C compiler.
"""
from __future__ import annotations
from rawgpu.autogen.amd import discovery as _D, ih as _IH, psp as _P, smu_v13_0_0 as _S13, ucode as _U
from rawgpu.drivers.am.layout import Layout

L = Layout.from_ctypes

# ---- amdgpu_ucode.h: firmware file headers
COMMON_HDR = L(_U.common_firmware_header)
PSP_HDR_V2_0, PSP_HDR_V2_1 = L(_U.psp_firmware_header_v2_0), L(_U.psp_firmware_header_v2_1)
PSP_FW_BIN_DESC = L(_U.psp_fw_bin_desc)
SMC_HDR_V1_0, SMC_HDR_V2_1, SMC_PPT_ENTRY = L(_U.smc_firmware_header_v1_0), L(_U.smc_firmware_header_v2_1), L(_U.smc_soft_pptable_entry)
GFX_HDR_V1_0, GFX_HDR_V2_0 = L(_U.gfx_firmware_header_v1_0), L(_U.gfx_firmware_header_v2_0)
IMU_HDR_V1_0 = L(_U.imu_firmware_header_v1_0)
RLC_HDR_V2_1, RLC_HDR_V2_2, RLC_HDR_V2_3 = L(_U.rlc_firmware_header_v2_1), L(_U.rlc_firmware_header_v2_2), L(_U.rlc_firmware_header_v2_3)
SDMA_HDR_V1_0, SDMA_HDR_V2_0, SDMA_HDR_V3_0 = L(_U.sdma_firmware_header_v1_0), L(_U.sdma_firmware_header_v2_0), L(_U.sdma_firmware_header_v3_0)
PSP_FW_TYPE = {k: getattr(_U, k) for k in dir(_U) if k.startswith("PSP_FW_TYPE_PSP_")}

# ---- psp_gfx_if.h: ring control, GPCOM commands, firmware types, command buffer and ring frame
GFX_CTRL_CMD_ID_DESTROY_RINGS = _P.GFX_CTRL_CMD_ID_DESTROY_RINGS
GFX_FLAG_RESPONSE = _P.GFX_FLAG_RESPONSE
PSP_ERR_UNKNOWN_COMMAND = _P.PSP_ERR_UNKNOWN_COMMAND
PSP_GFX_CMD_BUF_VERSION = _P.PSP_GFX_CMD_BUF_VERSION
GFX_CMD_ID = {k: getattr(_P, k) for k in dir(_P) if k.startswith("GFX_CMD_ID_")}
GFX_FW_TYPE = {k: getattr(_P, k) for k in dir(_P) if k.startswith("GFX_FW_TYPE_")}
PSP_CMD = _P.psp_gfx_cmd_resp          # 1 KiB command buffer (ctypes; the response sits inside it)
PSP_RB_FRAME = L(_P.psp_gfx_rb_frame)
PSP_RESP = L(_P.psp_gfx_resp)

# ---- smu_v13_0_0_ppsmc.h (smu_v14_0_2_ppsmc.h has the same numbers for the messages AM sends; tests check both)
PPSMC_RESULT = {k: getattr(_S13, k) for k in dir(_S13) if k.startswith("PPSMC_Result_")}
PPSMC_MSG = {k: getattr(_S13, k) for k in ("PPSMC_MSG_TestMessage", "PPSMC_MSG_GetSmuVersion", "PPSMC_MSG_EnableAllSmuFeatures",
             "PPSMC_MSG_DisableAllSmuFeatures", "PPSMC_MSG_SetDriverDramAddrHigh", "PPSMC_MSG_SetDriverDramAddrLow",
             "PPSMC_MSG_PrepareMp1ForUnload")}
PPSMC_MSG_Mode1Reset_V13 = _S13.PPSMC_MSG_Mode1Reset   # SMU 14 resets through the debug mailbox instead
# SMU 13.0.6 (MI300) resets one SDMA engine on request. Both facts are newer than the 6.12 headers we fetch, so no C
# check: PPSMC_MSG_ResetSDMA came with amdgpu's SDMA queue reset (amd-gfx, Jesse Zhang, 2024; smu_v13_0_6_ppsmc.h),
# and smu_v13_0_6_init_caps grants SDMA_RESET from these PMFW versions, by PMFW program (the version's top byte).
PPSMC_MSG_13_0_6_AFTER_6_12 = {"PPSMC_MSG_ResetSDMA": 0x4D}
SDMA_RESET_MIN_PMFW = {0: 0x00557900, 4: 0x04557000, 7: 0x07550700}

# ---- discovery.h
BINARY_SIGNATURE, DISCOVERY_TABLE_SIGNATURE = _D.BINARY_SIGNATURE, _D.DISCOVERY_TABLE_SIGNATURE
GC_TABLE_ID, HARVEST_TABLE_SIGNATURE = _D.GC_TABLE_ID, _D.HARVEST_TABLE_SIGNATURE
DISC_TABLE = {"IP_DISCOVERY": _D.IP_DISCOVERY, "GC": _D.GC, "HARVEST_INFO": _D.HARVEST_INFO}
BINARY_HDR, IP_DISCOVERY_HDR, DIE_HDR = L(_D.binary_header), L(_D.ip_discovery_header), L(_D.die_header)
IP_ENTRY = L(_D.ip_v3)
GPU_INFO_HDR, GC_INFO_V1_0, GC_INFO_V2_0 = L(_D.gpu_info_header), L(_D.gc_info_v1_0), L(_D.gc_info_v2_0)
HARVEST_INFO_HDR, HARVEST_INFO = L(_D.harvest_info_header), L(_D.harvest_info)

# ---- soc15_ih_clientid.h, ivsrcid/*
SOC21_IH_CLIENTID_GFX, SOC21_IH_CLIENTID_VMC, SOC21_IH_CLIENTID_GRBM_CP = _IH.SOC21_IH_CLIENTID_GFX, _IH.SOC21_IH_CLIENTID_VMC, _IH.SOC21_IH_CLIENTID_GRBM_CP
UTCL2_1_0__SRCID__FAULT, VMC_1_0__SRCID__VM_FAULT = _IH.UTCL2_1_0__SRCID__FAULT, _IH.VMC_1_0__SRCID__VM_FAULT

# ======== not in the generated set: each checked against its header by tests/test_am_facts.py ========
# amdgpu_psp.h
PSP_BL = {"PSP_BL__LOAD_SYSDRV": 0x10000, "PSP_BL__LOAD_SOSDRV": 0x20000, "PSP_BL__LOAD_KEY_DATABASE": 0x80000,
          "PSP_BL__LOAD_SOCDRV": 0xB0000, "PSP_BL__LOAD_DBGDRV": 0xC0000, "PSP_BL__LOAD_INTFDRV": 0xD0000,
          "PSP_BL__LOAD_RASDRV": 0xE0000, "PSP_BL__LOAD_IPKEYMGRDRV": 0xF0000, "PSP_BL__LOAD_TOS_SPL_TABLE": 0x10000000}
PSP_RING_TYPE__KM = 2
PSP_1_MEG, PSP_TMR_ALIGNMENT, PSP_TMR_SIZE = 0x100000, 0x100000, 0x400000
# smu_v13_0.h / smu_v14_0.h
DEBUGSMC_MSG_Mode1Reset = 2
# soc15_hw_ip.h: hardware ids, by the name AM uses for the block
HWID = {"mp1": 1, "smuio": 4, "gc": 11, "mmhub": 34, "athub": 35, "osssys": 40, "hdp": 41, "sdma0": 42, "sdma1": 43,
        "sdma2": 68, "sdma3": 69, "nbif": 108, "umc": 150, "mp0": 255}
# amdgpu_discovery.c / amdgpu_discovery.h
MM_INDEX, MM_INDEX_HI, MM_DATA = 0x0, 0x6, 0x1       # dword offsets of the indirect VRAM window
RCC_CONFIG_MEMSIZE = 0xde3                            # VRAM size in MiB, at a fixed dword offset before discovery
DISCOVERY_TMR_OFFSET, DISCOVERY_TMR_SIZE = 64 << 10, 10 << 10
# amdgpu_vm.h: page table entry bits
AMDGPU_PTE_VALID, AMDGPU_PTE_SYSTEM, AMDGPU_PTE_SNOOPED = 1 << 0, 1 << 1, 1 << 2
AMDGPU_PTE_EXECUTABLE, AMDGPU_PTE_READABLE, AMDGPU_PTE_WRITEABLE = 1 << 4, 1 << 5, 1 << 6
AMDGPU_PTE_FRAG_SHIFT = 7                             # AMDGPU_PTE_FRAG(x) = (x & 0x1f) << 7
AMDGPU_PDE_PTE, AMDGPU_PDE_PTE_GFX12 = 1 << 54, 1 << 63
AMDGPU_PTE_MTYPE_NV10_SHIFT, AMDGPU_PTE_MTYPE_GFX12_SHIFT = 48, 54
AMDGPU_PTE_MTYPE_VG10_SHIFT, AMDGPU_PTE_TF, AMDGPU_PDE_BFS_SHIFT = 57, 1 << 56, 59   # GFX9 (Vega .. MI300): translate further
MTYPE_UC = 3                                          # soc21_enum.h / amdgpu_vm.h enum: NC=0, WC=1, CC=2, UC=3
# amdgpu.h / amdgpu_amdkfd.h: the register page the NBIO remaps the HDP flush registers into
MMIO_REG_HOLE_OFFSET = 0x80000 - 0x1000
KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL, KFD_MMIO_REMAP_HDP_REG_FLUSH_CNTL = 0x0, 0x4
# amdgpu_doorbell.h (soc21/soc24 layout, 64-bit doorbell units), soc21.c, gfx_v11_0.c, amdgpu_gmc.c
AMDGPU_NAVI10_DOORBELL_KIQ, AMDGPU_NAVI10_DOORBELL_MEC_RING0 = 0x000, 0x003
AMDGPU_NAVI10_DOORBELL_USERQUEUE_END, AMDGPU_NAVI10_DOORBELL_sDMA_ENGINE0 = 0x08A, 0x100
HQD_DEQUEUE_RESET_WAVES = 2   # CP_HQD_DEQUEUE_REQUEST: enum hqd_dequeue_request_type (amdgpu_amdkfd_gfx_v11.c)
AMDGPU_NAVI10_DOORBELL_IH = 0x178
AMDGPU_DOORBELL_LAYOUT1_IH = 0x1A0                   # GC 9.4.3 (aqua_vanjaram_doorbell_index_init): layout 1
AMDGPU_DOORBELL_LAYOUT1_KIQ_START, AMDGPU_DOORBELL_LAYOUT1_MEC_RING_START = 0x000, 0x008   # per XCC, XCC_RANGE apart
AMDGPU_DOORBELL_LAYOUT1_USERQUEUE_END, AMDGPU_DOORBELL_LAYOUT1_XCC_RANGE = 0x01F, 0x020
AMDGPU_DOORBELL_LAYOUT1_sDMA_ENGINE_START = 0x100
# amdgpu_irq.h: the die an MI300 IV entry comes from (its node id): AID n's own blocks (SDMA, MM hub) 4n, its XCDs 4n+1, 4n+2
AID_NODEID, XCD_NODEID = (0, 4, 8, 12), (1, 2, 5, 6, 9, 10, 13, 14)
# nbio_v7_9_sdma_doorbell_range (nbio_v7_9.c, a .c switch: no header has it): an AID's SDMA engine n routes its doorbells
# through S2A entry, AWID (also the entry's RANGE_OFFSET) and AWADDR[31:28] value, and BIF DOORBELL0_CTRL_ENTRY_{1 + n}
# four entries apart per AID
NBIO_7_9_SDMA_S2A = ((1, 0xe, 0x1), (2, 0x8, 0x2), (5, 0x9, 0x8), (6, 0xa, 0x9))   # (S2A entry, AWID, AWADDR) for n = 0..3
# amdgpu_gfx.h enum amdgpu_gfx_partition (NBIO's PARTITION_COMPUTE_STATUS reports the same numbers, aqua_vanjaram.c)
AMDGPU_SPX_PARTITION_MODE, AMDGPU_CPX_PARTITION_MODE = 0, 4
GOLDEN_GB_ADDR_CONFIG_GC_9_4_3 = 0x2a114042            # gfx_v9_4_3.c GOLDEN_GB_ADDR_CONFIG, every XCC at hw_init
GFX9_MEC_HPD_SIZE = 4096                              # gfx_v9_4_3.c: EOP buffer per compute queue
SDMA_DOORBELL_RANGE = 20
SDMA_V4_QUEUES = ("GFX", "PAGE") + tuple(f"RLC{k}" for k in range(8))   # SDMA 4.4.2's ring queues (sdma_4_4_2_offset.h)
# sdma_common.h: the L2 policies sdma_v6_0/v7_0 gfx_resume give an engine's UTCL1 (reads no-allocate, writes bypass)
CACHE_READ_POLICY_L2__DEFAULT, CACHE_WRITE_POLICY_L2__DEFAULT = 2, 3
AMDGPU_MAX_USEC_TIMEOUT = 100000                       # amdgpu.h: adev->usec_timeout; SDMA's hang watchdog counts it in 100 ms units
KFD_QUEUE_DOORBELL_MIRROR_OFFSET = 512                 # kfd_priv.h: SDMA queues 2i and 2i+1 of an engine, this many doorbells apart
GFX11_MEC_HPD_SIZE = 2048
# golden settings amdgpu programs on every gfx hw_init, (register, and-mask, or-mask) as soc15_program_register_sequence
# applies them (gfx_v11_0.c golden_settings_gc_11_0, gfx_v12_0.c golden_settings_gc_12_0); the bits have no names in the
# register headers. Not taken: gc_11_0_1's (APUs) and gc_12_0_rev0's (first-revision silicon)
GOLDEN_GC = {11: (("regTCP_CNTL", 0x20000000, 0x20000000),), 12: (("regDB_MEM_CONFIG", 0x00008000, 0x00008000),)}
SH_MEM_ADDRESS_MODE_64, SH_MEM_ALIGNMENT_MODE_UNALIGNED = 0, 3
PRIVATE_APERTURE_START, SHARED_APERTURE_START = 0x1000000000000000, 0x2000000000000000
