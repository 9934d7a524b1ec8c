"""What distinguishes the two modelled boards: PCI ids, IP versions, published base addresses, firmware, shader config.

Base addresses are the segment bases a Navi2x/3x-class SoC publishes in IP discovery (the layout of the kernel's
sienna_cichlid_ip_offset.h); the board publishes them and decodes its register BAR with the same numbers, so the
driver must read them from discovery rather than assume them.
"""
from __future__ import annotations
from dataclasses import dataclass, field

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


ASICS = {"gfx1100": _navi31, "gfx1201": _navi48}


def asic(arch: str) -> Asic:
  if arch not in ASICS: raise ValueError(f"no board model for {arch!r}; modelled: {', '.join(ASICS)}")
  return ASICS[arch]()
