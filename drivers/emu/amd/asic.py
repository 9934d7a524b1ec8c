"""What distinguishes the modelled boards: PCI ids and class, IP versions, published base addresses, firmware, shader
config.

Base addresses are the segment bases a Navi2x/3x-class SoC publishes in IP discovery (the layout of the kernel's
sienna_cichlid_ip_offset.h); the board publishes them and decodes its register BAR with the same numbers, so the
driver must read them from discovery rather than assume them.
"""
from __future__ import annotations
from dataclasses import dataclass, field

PCI_CLASS_VGA, PCI_CLASS_ACCELERATOR = 0x030000, 0x120000   # display controller; processing accelerator (Instinct)

# hardware ids of discovery entries (soc15_hw_ip.h)
MP1_HWID, THM_HWID, SMUIO_HWID, CLKA_HWID, GC_HWID, MMHUB_HWID, ATHUB_HWID = 1, 3, 4, 6, 11, 34, 35
OSSSYS_HWID, HDP_HWID, SDMA0_HWID, SDMA1_HWID, DF_HWID, PCIE_HWID, NBIF_HWID, UMC_HWID, MP0_HWID = 40, 41, 42, 43, 46, 70, 108, 150, 255

_GC = (0x00001260, 0x0000A000, 0x0001C000, 0x02402C00)
_NBIO = (0x00000000, 0x00000014, 0x00000D20, 0x00010400, 0x0241B000, 0x04040000)
_MP = (0x00016000, 0x00DC0000, 0x00E00000, 0x00E40000, 0x0243FC00)
_MP1_GFX12 = (0x00016000, 0x00016200, 0x00DC0000, 0x00E00000, 0x00E40000, 0x0243FC00)
_HDP, _OSS, _MMHUB, _ATHUB = (0x00000F20, 0x0240A400), (0x000010A0, 0x0240A000), (0x0001A000, 0x02408800), (0x00000C00, 0x02408C00)
_SMUIO, _THM, _CLK, _DF = (0x00016800, 0x00016A00, 0x00440000, 0x02401000), (0x00016600, 0x02400C00), (0x00016C00, 0x02401800), (0x00007000, 0x0240B800)
_UMC = (0x00014000, 0x02425800)


@dataclass(frozen=True)
class IPEntry:
  hw_id: int
  instance: int
  version: tuple[int, int, int]
  bases: tuple[int, ...]
  reg_ip: str | None = None            # name of the generated register table the model decodes it with
  reg_version: tuple[int, int, int] | None = None   # table version when it differs from the IP's (see SMUIO)
  sub_revision: int = 0                # discovery v3+ (IP_VERSION_SUBREV); NBIO's, where set, is the chip revision


@dataclass(frozen=True)
class Asic:
  arch: str
  device: int
  revision: int
  name: str
  ips: tuple[IPEntry, ...]
  fw: dict[str, str] = field(default_factory=dict)
  num_se: int = 6
  num_sa_per_se: int = 2
  wgp_per_sa: int = 4
  sdma_engines: int = 2
  mec_pipes: int = 4
  queues_per_pipe: int = 8
  boot_time_tmr: bool = False         # PSP sets the TMR up itself (no SETUP_TMR from the driver)
  pci_class: int = PCI_CLASS_VGA
  base_addr_64: bool = False          # discovery v4 with 64-bit base addresses (MI300)
  gc_info: dict[str, int] | None = None   # gc_info v2.0 fields (CDNA: CUs per shader array, no WGPs); None: v1.2
  ifwi_firmware: bool = False         # IFWI starts the PSP's secure OS and the SMU's PMFW (MI300: no bootloader stages, no SMU image)
  active_cus: int | None = None       # CUs the fuses leave working (of each XCC on MI300); None: all of them
  chip_rev: int = 0                   # the straps' ATI_REV_ID (MI300: amdgpu's rev_id; gfx942 is GC 9.4.3 with rev_id >= 1)
  ecc: bool = False                   # the board runs with SRAM and HBM ECC (amdgpu's RAS on the GFX and UMC blocks):
                                      # MI300X ships so (rocminfo lists gfx942:sramecc+); the Radeons have none

  def ip(self, hw_id: int, instance: int = 0) -> IPEntry:
    for e in self.ips:
      if e.hw_id == hw_id and e.instance == instance: return e
    raise KeyError(hw_id)

  def version(self, hw_id: int) -> tuple[int, int, int]: return self.ip(hw_id).version


def _navi31() -> Asic:
  # SMUIO registers decode with the 13.0.6 table: gfx_v11_0.c reads GOLDEN_TSC through smuio_13_0_6_offset.h too
  ips = (IPEntry(GC_HWID, 0, (11, 0, 0), _GC, "gc"), IPEntry(SDMA0_HWID, 0, (6, 0, 0), _GC), IPEntry(SDMA1_HWID, 0, (6, 0, 0), _GC),
         IPEntry(MMHUB_HWID, 0, (3, 0, 0), _MMHUB, "mmhub"), IPEntry(ATHUB_HWID, 0, (3, 0, 0), _ATHUB, "athub"),
         IPEntry(NBIF_HWID, 0, (4, 3, 0), _NBIO, "nbio"), IPEntry(PCIE_HWID, 0, (6, 1, 0), _NBIO),
         IPEntry(MP0_HWID, 0, (13, 0, 0), _MP, "mp"), IPEntry(MP1_HWID, 0, (13, 0, 0), _MP, "mp"),
         IPEntry(HDP_HWID, 0, (6, 0, 0), _HDP, "hdp"), IPEntry(OSSSYS_HWID, 0, (6, 0, 0), _OSS, "osssys"),
         IPEntry(SMUIO_HWID, 0, (13, 0, 0), _SMUIO, "smuio", (13, 0, 6)), IPEntry(THM_HWID, 0, (13, 0, 0), _THM), IPEntry(CLKA_HWID, 0, (13, 0, 0), _CLK),
         IPEntry(DF_HWID, 0, (4, 3, 0), _DF), IPEntry(UMC_HWID, 0, (8, 10, 0), _UMC))
  fw = {"sos": "psp_13_0_0_sos.bin", "ta": "psp_13_0_0_ta.bin", "smu": "smu_13_0_0.bin", "sdma": "sdma_6_0_0.bin",
        "pfp": "gc_11_0_0_pfp.bin", "me": "gc_11_0_0_me.bin", "mec": "gc_11_0_0_mec.bin", "rlc": "gc_11_0_0_rlc.bin",
        "imu": "gc_11_0_0_imu.bin", "mes": "gc_11_0_0_mes_2.bin"}
  return Asic("gfx1100", 0x744c, 0xc8, "AMD Radeon RX 7900 XTX", ips, fw, num_se=6, num_sa_per_se=2, wgp_per_sa=4)


def _navi48() -> Asic:
  ips = (IPEntry(GC_HWID, 0, (12, 0, 1), _GC, "gc"), IPEntry(SDMA0_HWID, 0, (7, 0, 1), _GC), IPEntry(SDMA1_HWID, 0, (7, 0, 1), _GC),
         IPEntry(MMHUB_HWID, 0, (4, 1, 0), _MMHUB, "mmhub"), IPEntry(ATHUB_HWID, 0, (4, 1, 0), _ATHUB, "athub"),
         IPEntry(NBIF_HWID, 0, (6, 3, 1), _NBIO, "nbif"), IPEntry(PCIE_HWID, 0, (6, 1, 0), _NBIO),
         IPEntry(MP0_HWID, 0, (14, 0, 3), _MP, "mp"), IPEntry(MP1_HWID, 0, (14, 0, 3), _MP1_GFX12, "mp"),
         IPEntry(HDP_HWID, 0, (7, 0, 0), _HDP, "hdp"), IPEntry(OSSSYS_HWID, 0, (7, 0, 0), _OSS, "osssys"),
         IPEntry(SMUIO_HWID, 0, (14, 0, 2), _SMUIO, "smuio"), IPEntry(THM_HWID, 0, (14, 0, 2), _THM), IPEntry(CLKA_HWID, 0, (14, 0, 2), _CLK),
         IPEntry(DF_HWID, 0, (4, 1, 0), _DF), IPEntry(UMC_HWID, 0, (8, 14, 0), _UMC))
  fw = {"sos": "psp_14_0_3_sos.bin", "ta": "psp_14_0_3_ta.bin", "smu": "smu_14_0_3.bin", "sdma": "sdma_7_0_1.bin",
        "pfp": "gc_12_0_1_pfp.bin", "me": "gc_12_0_1_me.bin", "mec": "gc_12_0_1_mec.bin", "rlc": "gc_12_0_1_rlc.bin",
        "imu": "gc_12_0_1_imu.bin", "mes": "gc_12_0_1_mes.bin"}
  return Asic("gfx1201", 0x7550, 0xc0, "AMD Radeon RX 9070 XT", ips, fw, num_se=4, num_sa_per_se=2, wgp_per_sa=4, boot_time_tmr=True)


def _mi300x() -> Asic:
  """MI300X: 8 XCCs (GC 9.4.3 instances 0-7) over 4 AIDs, each AID with 4 SDMA 4.4.2 engines and an MMHUB 1.8.

  MI300's real register bases exist only in each board's discovery blob and are not public. The model starts from
  aldebaran_ip_offset.h (MI200, the same gfx9 register layout: GC at 0x2000/0xA000, whose spans are exactly the XCC
  ranges gfx_v9_4_3.c normalizes packet offsets to) and moves XCC k up by k << 20 and AID a by a << 24, which keeps
  every instance's low 16 bits and no two segments overlapping. The driver must read them from discovery.
  Only the engine models that exist for it are built: NBIO, the hubs (GFX9 page walks), the IH, every XCC's GFX (F32 MEC
  queues), the 16 SDMA 4.4.2 engines, the PSP and the SMU (see MI300.md for the plan)."""
  X, A = (lambda k: k << 20), (lambda a: a << 24)
  sdma = ((0x1260, 0x12540, 0x40A800), (0x1860, 0x12560, 0x40AC00), (0x13760, 0x1E000, 0x42EC00), (0x13780, 0x1E400, 0x42F000))
  ips = (*(IPEntry(GC_HWID, k, (9, 4, 3), (0x2000 + X(k), 0xA000 + X(k)), "gc") for k in range(8)),
         *(IPEntry(SDMA0_HWID, 4 * a + j, (4, 4, 2), tuple(b + A(a) for b in sdma[j]), "sdma") for a in range(4) for j in range(4)),
         *(IPEntry(MMHUB_HWID, a, (1, 8, 0), (0x1A000 + A(a), 0x02408800 + A(a)), "mmhub") for a in range(4)),
         IPEntry(NBIF_HWID, 0, (7, 9, 0), (*_NBIO, 0, 0, 0x04800000), "nbio"),   # nbio_7_9 also uses segment 8 (none use 6, 7)
         # every AID has an NBIO, which amdgpu reaches at reg_offset[NBIO][aid] through extended SMN addressing (the
         # die in address bits 34:32, aqua_vanjaram_encode_ext_smn_addressing): the same bases, the die selected by them
         *(IPEntry(NBIF_HWID, a, (7, 9, 0), (*_NBIO, 0, 0, 0x04800000), "nbio") for a in range(1, 4)),
         IPEntry(MP0_HWID, 0, (13, 0, 6), _MP, "mp"), IPEntry(MP1_HWID, 0, (13, 0, 6), _MP, "mp"),
         IPEntry(HDP_HWID, 0, (4, 4, 2), (0x00000F20, 0x0240A400), "hdp"), IPEntry(OSSSYS_HWID, 0, (4, 4, 2), _OSS, "osssys"),
         IPEntry(SMUIO_HWID, 0, (13, 0, 3), _SMUIO, "smuio", (13, 0, 6)))
  fw = {"sos": "psp_13_0_6_sos.bin", "ta": "psp_13_0_6_ta.bin", "smu": "smu_13_0_6.bin", "sdma": "sdma_4_4_2.bin",
        "mec": "gc_9_4_3_mec.bin", "rlc": "gc_9_4_3_rlc.bin"}
  # gc_info is per XCC (gfx_v9_4_3 walks max_shader_engines for each XCC): 4 SEs of one shader array of 10 CUs
  # (the physical 40 of an XCD; MI300X enables 38 of them, 304 in all: which two are fused off varies by chip, the
  # model takes the last CU of the last two arrays); 8 waves per SIMD, the 32 per CU that ROCm's rocminfo reports
  gc = {"gc_num_se": 4, "gc_num_cu_per_sh": 10, "gc_num_sh_per_se": 1, "gc_num_rb_per_se": 0, "gc_num_tccs": 16,
        "gc_num_gprs": 512, "gc_wave_size": 64, "gc_max_waves_per_simd": 8, "gc_max_scratch_slots_per_cu": 32, "gc_lds_size": 64}
  return Asic("gfx942", 0x74a1, 0x00, "AMD Instinct MI300X", ips, fw, num_se=4, num_sa_per_se=1, wgp_per_sa=5, sdma_engines=16,
              pci_class=PCI_CLASS_ACCELERATOR, base_addr_64=True, gc_info=gc, boot_time_tmr=True,
              ifwi_firmware=True, active_cus=38, chip_rev=1, ecc=True)


# The die an MI300 interrupt comes from, as its IV entry's node id says (amdgpu_irq.h AIDn_NODEID / XCDn_NODEID; gmc_v9_0.c
# prints node / 4 as the AID and node % 4 == 1 / 2 as its first / second XCD): an AID's own blocks (SDMA, MM hub) are
# node 4a, XCC x sits on AID x // 2. RDNA boards have one die: node 0.
def ih_node_aid(aid: int) -> int: return 4 * aid
def ih_node_xcd(xcc: int) -> int: return 4 * (xcc // 2) + 1 + xcc % 2


ASICS = {"gfx1100": _navi31, "gfx1201": _navi48, "gfx942": _mi300x}


def asic(arch: str) -> Asic:
  if arch not in ASICS: raise ValueError(f"no board model for {arch!r}; modelled: {', '.join(ASICS)}")
  return ASICS[arch]()
