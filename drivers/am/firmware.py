"""Firmware files: find them, check their sha256 against the known Debian packages, parse every header.

Files come from RAWGPU_FIRMWARE_DIR, else /lib/firmware/updates/amdgpu, else /lib/firmware/amdgpu, else the Debian
packages .ci/fetch-firmware unpacked into ${RAWGPU_CACHE:-~/.cache/rawgpu}/firmware/<version>/amdgpu (newest first).
Nothing is ever downloaded. A file whose sha256 is not pinned is refused unless RAWGPU_FIRMWARE_ANY=1 (newer firmware may work,
but nobody here has checked it).
"""
from __future__ import annotations
import hashlib, lzma, os
from dataclasses import dataclass, field
from rawgpu.drivers.am import facts as F
from rawgpu.drivers.am.fwpins import KNOWN
from rawgpu.drivers.am.layout import Layout
from rawgpu.drivers.system import SYSTEM, System
from rawgpu.errors import FirmwareError

DIRS = ("/lib/firmware/updates/amdgpu", "/lib/firmware/amdgpu")
PACKAGE_HINT = ("install Debian's firmware-amd-graphics (20230210-5 from bookworm non-free-firmware has RDNA3; "
                "20250410-2~bpo12+1 from bookworm-backports adds RDNA4), or run .ci/fetch-firmware in a rawgpu checkout "
                "(no root: it unpacks them into ~/.cache/rawgpu/firmware), or point RAWGPU_FIRMWARE_DIR at a directory with it")
_BY_HASH = {h: (pkg, name) for pkg, files in KNOWN.items() for name, h in files.items()}
GFX = F.GFX_FW_TYPE


def ver(v: tuple[int, int, int]) -> str: return "_".join(map(str, v))


@dataclass
class FwFile:
  name: str
  path: str
  data: bytes
  package: str | None            # the Debian package that ships exactly this file, None when unpinned (RAWGPU_FIRMWARE_ANY)


@dataclass
class Ucode:
  """One image the PSP loads: its GFX_FW_TYPE and payload."""
  fw_type: int
  data: bytes
  name: str


@dataclass
class Firmware:
  sos: dict[int, bytes] = field(default_factory=dict)   # PSP bootloader components by PSP_FW_TYPE
  smu: Ucode | None = None
  images: list[Ucode] = field(default_factory=list)     # SDMA, CP (PFP/ME/MEC), IMU, RLC in PSP load order
  ucode_start: dict[str, int] = field(default_factory=dict)  # RS64 start addresses: "pfp", "me", "mec"
  files: dict[str, FwFile] = field(default_factory=dict)


def _dirs() -> list[str]:
  env = os.environ.get("RAWGPU_FIRMWARE_DIR")
  if env: return [env]
  cache = os.path.join(os.environ.get("RAWGPU_CACHE") or os.path.expanduser("~/.cache/rawgpu"), "firmware")
  fetched = sorted(os.listdir(cache), reverse=True) if os.path.isdir(cache) else []   # (versions are dates: newest first)
  return list(DIRS) + [os.path.join(cache, v, "amdgpu") for v in fetched]


def _read_all(system: System, path: str) -> bytes:
  fd = system.open(path, os.O_RDONLY)
  try:
    out, off = bytearray(), 0
    while chunk := system.read(fd, 1 << 20, off): out += chunk; off += len(chunk)
    return bytes(out)
  finally: system.close(fd)


def read_file(name: str, system: System = SYSTEM) -> FwFile:
  env = os.environ.get("RAWGPU_FIRMWARE_DIR")
  if env and not system.exists(env):
    raise FirmwareError(f"RAWGPU_FIRMWARE_DIR={env}: no such directory (it names the folder that holds the amdgpu firmware files, "
                        f"such as {name}); fix the path or unset it to search {', '.join(DIRS)} and ~/.cache/rawgpu/firmware")
  for d in _dirs():
    for suffix, unpack in (("", None), (".xz", lzma.decompress)):
      path = os.path.join(d, name + suffix)
      if not system.exists(path): continue
      raw = _read_all(system, path)
      try: data = unpack(raw) if unpack else raw
      except lzma.LZMAError as e: raise FirmwareError(f"firmware {path} is not a valid .xz file ({e}); reinstall it: {PACKAGE_HINT}") from e
      digest = hashlib.sha256(data).hexdigest()
      known = _BY_HASH.get(digest)
      if known is None or known[1] != name:
        if os.environ.get("RAWGPU_FIRMWARE_ANY") != "1":
          raise FirmwareError(f"firmware {path} (sha256 {digest[:16]}...) is not a version rawgpu knows; {PACKAGE_HINT}, "
                              f"or set RAWGPU_FIRMWARE_ANY=1 to try it anyway")
        return FwFile(name, path, data, None)
      return FwFile(name, path, data, known[0])
  raise FirmwareError(f"firmware amdgpu/{name} not found in {', '.join(_dirs())}; {PACKAGE_HINT}")


def _hdr(f: FwFile, layout: Layout, major: int, minors: tuple[int, ...] | None = None) -> dict:
  h = F.COMMON_HDR.parse(f.data, what=f.path)
  if h["header_version_major"] != major or (minors is not None and h["header_version_minor"] not in minors):
    raise FirmwareError(f"firmware {f.path}: header version {h['header_version_major']}.{h['header_version_minor']} is not the "
                        f"expected {major}.{'/'.join(map(str, minors or ('x',)))}; the file does not belong to this board ({PACKAGE_HINT})")
  if h["size_bytes"] != len(f.data) or h["header_size_bytes"] < layout.size:
    raise FirmwareError(f"firmware {f.path}: header says {h['size_bytes']} bytes (header {h['header_size_bytes']}), the file has "
                        f"{len(f.data)}: truncated or corrupt ({PACKAGE_HINT})")
  return layout.parse(f.data, what=f.path)


def _cut(f: FwFile, off: int, size: int, what: str) -> bytes:
  if off < 0 or size <= 0 or off + size > len(f.data):
    raise FirmwareError(f"firmware {f.path}: {what} at {off:#x}+{size:#x} lies outside the {len(f.data):#x}-byte file (corrupt; {PACKAGE_HINT})")
  return f.data[off:off + size]


def parse_sos(f: FwFile, aux: bool = False) -> dict[int, bytes]:
  """The PSP bootloader components. A v2.1 file (PSP 13.0.6) holds two sets: the main one, and from
  psp_aux_fw_bin_index on the auxiliary one amdgpu loads instead under old PMFW (psp_init_sos_microcode)."""
  h = F.COMMON_HDR.parse(f.data, what=f.path)
  lay = F.PSP_HDR_V2_1 if (h["header_version_major"], h["header_version_minor"]) == (2, 1) else F.PSP_HDR_V2_0
  h = _hdr(f, lay, 2, (0, 1))
  out, base = {}, h["ucode_array_offset_bytes"]
  first, end = 0, h["psp_fw_bin_count"]
  if lay is F.PSP_HDR_V2_1:
    if not 0 < h["psp_aux_fw_bin_index"] < end: raise FirmwareError(f"firmware {f.path}: aux index {h['psp_aux_fw_bin_index']} outside its {end} components ({PACKAGE_HINT})")
    first, end = (h["psp_aux_fw_bin_index"], end) if aux else (0, end - h["psp_aux_fw_bin_index"])
  for i in range(first, end):
    d = F.PSP_FW_BIN_DESC.parse(f.data, lay.size + i * F.PSP_FW_BIN_DESC.size, what=f.path)
    out[d["fw_type"]] = _cut(f, base + d["offset_bytes"], d["size_bytes"], f"PSP component {d['fw_type']}")
  if F.PSP_FW_TYPE["PSP_FW_TYPE_PSP_SOS"] not in out or F.PSP_FW_TYPE["PSP_FW_TYPE_PSP_SYS_DRV"] not in out:
    raise FirmwareError(f"firmware {f.path}: no SOS or system driver component ({PACKAGE_HINT})")
  return out


def parse_smu(f: FwFile) -> Ucode:
  h = _hdr(f, F.SMC_HDR_V1_0, 2)
  return Ucode(GFX["GFX_FW_TYPE_SMU"], _cut(f, h["ucode_array_offset_bytes"], h["ucode_size_bytes"], "SMU ucode"), f.name)


def parse_sdma(f: FwFile, v1_copies: int = 1) -> list[Ucode]:
  """v1 (SDMA 4): one image, loaded as SDMA0..n-1 (SDMA 4.4.2: one per engine of an AID, amdgpu_sdma.c; PSP
  repeats them for the other AIDs); v2 (SDMA 5/6): context and control images; v3 (SDMA 7): one RS64 image."""
  major = F.COMMON_HDR.parse(f.data, what=f.path)["header_version_major"]
  if major == 1:
    h = _hdr(f, F.SDMA_HDR_V1_0, 1)
    img = _cut(f, h["ucode_array_offset_bytes"], h["ucode_size_bytes"], "SDMA ucode")
    return [Ucode(GFX["GFX_FW_TYPE_SDMA0"] if i == 0 else GFX["GFX_FW_TYPE_SDMA1"] if i == 1 else GFX[f"GFX_FW_TYPE_SDMA{i}"], img, f.name)
            for i in range(v1_copies)]
  if major == 3:  # SDMA 7: one image
    h = _hdr(f, F.SDMA_HDR_V3_0, 3)
    return [Ucode(GFX["GFX_FW_TYPE_SDMA_UCODE_TH0"], _cut(f, h["ucode_array_offset_bytes"], h["ucode_size_bytes"], "SDMA ucode"), f.name)]
  h = _hdr(f, F.SDMA_HDR_V2_0, 2)
  off = h["ucode_array_offset_bytes"]
  return [Ucode(GFX["GFX_FW_TYPE_SDMA_UCODE_TH0"], _cut(f, off, h["ctx_ucode_size_bytes"], "SDMA ctx ucode"), f.name),
          Ucode(GFX["GFX_FW_TYPE_SDMA_UCODE_TH1"], _cut(f, h["ctl_ucode_offset"], h["ctl_ucode_size_bytes"], "SDMA ctl ucode"), f.name)]


def parse_cp(f: FwFile, engine: str) -> tuple[list[Ucode], int]:
  """RS64 PFP/ME/MEC: code plus one stack image per pipe (2 for PFP/ME, 4 for MEC); returns the start address too."""
  h = _hdr(f, F.GFX_HDR_V2_0, 2)
  up = engine.upper()
  out = [Ucode(GFX[f"GFX_FW_TYPE_RS64_{up}"], _cut(f, h["ucode_array_offset_bytes"], h["ucode_size_bytes"], f"{engine} code"), f.name)]
  data = _cut(f, h["data_offset_bytes"], h["data_size_bytes"], f"{engine} stack")
  out += [Ucode(GFX[f"GFX_FW_TYPE_RS64_{up}_P{p}_STACK"], data, f.name) for p in range(4 if engine == "mec" else 2)]
  return out, h["ucode_start_addr_lo"] | h["ucode_start_addr_hi"] << 32


def parse_cp_v1(f: FwFile) -> list[Ucode]:
  """gfx9 F32 MEC (v1 header): the code, then the jump table at its end, which the PSP loads as an image of its own
  (CP_MEC, CP_MEC_ME1; amdgpu_ucode.c: the code is ucode_size - jt_size dwords, the table jt_offset dwords in)."""
  h = _hdr(f, F.GFX_HDR_V1_0, 1)
  off, jt_off, jt = h["ucode_array_offset_bytes"], 4 * h["jt_offset"], 4 * h["jt_size"]
  return [Ucode(GFX["GFX_FW_TYPE_CP_MEC"], _cut(f, off, h["ucode_size_bytes"] - jt, "MEC code"), f.name),
          Ucode(GFX["GFX_FW_TYPE_CP_MEC_ME1"], _cut(f, off + jt_off, jt, "MEC jump table"), f.name)]


P2S_TABLE_ID_X = 0x50325358   # smu_v13_0_6_ppt.c: the dGPU's power-to-SMN table among smu_13_0_6.bin's entries ("XS2P")


def parse_p2s(f: FwFile, table_id: int = P2S_TABLE_ID_X) -> Ucode:
  """SMU 13.0.6's file carries no SMU image (PMFW runs from IFWI) but P2S tables in its pptable entries; the PSP loads
  the one for this package (smu_v13_0_6_init_microcode)."""
  h = _hdr(f, F.SMC_HDR_V2_1, 2, (1,))
  for i in range(h["pptable_count"]):
    e = F.SMC_PPT_ENTRY.parse(f.data, h["pptable_entry_offset"] + i * F.SMC_PPT_ENTRY.size, what=f.path)
    if e["id"] == table_id: return Ucode(GFX["GFX_FW_TYPE_P2S_TABLE"], _cut(f, e["ppt_offset_bytes"], e["ppt_size_bytes"], "P2S table"), f.name)
  raise FirmwareError(f"firmware {f.path}: no P2S table {table_id:#x} among its {h['pptable_count']} entries ({PACKAGE_HINT})")


def parse_imu(f: FwFile) -> list[Ucode]:
  h = _hdr(f, F.IMU_HDR_V1_0, 1)
  off, isz, dsz = h["ucode_array_offset_bytes"], h["imu_iram_ucode_size_bytes"], h["imu_dram_ucode_size_bytes"]
  return [Ucode(GFX["GFX_FW_TYPE_IMU_I"], _cut(f, off, isz, "IMU iram"), f.name),
          Ucode(GFX["GFX_FW_TYPE_IMU_D"], _cut(f, off + isz, dsz, "IMU dram"), f.name)]


def parse_rlc(f: FwFile) -> list[Ucode]:
  minor = F.COMMON_HDR.parse(f.data, what=f.path)["header_version_minor"]
  # 2.3 adds RLC_P/RLC_V; 2.4 (GC 10.3's tap delays) extends 2.3's layout but amdgpu reads only its own fields there
  # (amdgpu_gfx_rlc_init_microcode): no AM board has it, so it is refused rather than read as 2.3
  h = _hdr(f, F.RLC_HDR_V2_3 if minor == 3 else F.RLC_HDR_V2_2 if minor == 2 else F.RLC_HDR_V2_1, 2, (1, 2, 3))
  out = []
  for typ, off, size in (("RLC_RESTORE_LIST_SRM_CNTL", "save_restore_list_cntl_offset_bytes", "save_restore_list_cntl_size_bytes"),
                         ("RLC_RESTORE_LIST_GPM_MEM", "save_restore_list_gpm_offset_bytes", "save_restore_list_gpm_size_bytes"),
                         ("RLC_RESTORE_LIST_SRM_MEM", "save_restore_list_srm_offset_bytes", "save_restore_list_srm_size_bytes"),
                         ("RLC_IRAM", "rlc_iram_ucode_offset_bytes", "rlc_iram_ucode_size_bytes"),
                         ("RLC_DRAM_BOOT", "rlc_dram_ucode_offset_bytes", "rlc_dram_ucode_size_bytes"),
                         ("RLC_P", "rlcp_ucode_offset_bytes", "rlcp_ucode_size_bytes"),
                         ("RLC_V", "rlcv_ucode_offset_bytes", "rlcv_ucode_size_bytes")):
    if size in h and h[size]: out.append(Ucode(GFX[f"GFX_FW_TYPE_{typ}"], _cut(f, h[off], h[size], typ), f.name))
  out.append(Ucode(GFX["GFX_FW_TYPE_RLC_G"], _cut(f, h["ucode_array_offset_bytes"], h["ucode_size_bytes"], "RLC_G"), f.name))
  return out


def load(ips: dict[str, tuple[int, int, int]], system: System = SYSTEM) -> Firmware:
  """Every firmware the board needs, by IP version from discovery: mp0 (PSP), mp1 (SMU), sdma, gc."""
  fw = Firmware()
  def get(name: str) -> FwFile:
    fw.files[name] = f = read_file(name, system)
    return f
  fw.sos = parse_sos(get(f"psp_{ver(ips['mp0'])}_sos.bin"))
  if ips["gc"][0] == 9:   # CDNA3: PMFW already runs; the PSP loads in psp_load_non_psp_fw's order (ucode-id order)
    fw.images = [parse_p2s(get(f"smu_{ver(ips['mp1'])}.bin")), *parse_sdma(get(f"sdma_{ver(ips['sdma'])}.bin"), v1_copies=4),
                 *parse_cp_v1(get(f"gc_{ver(ips['gc'])}_mec.bin")), *parse_rlc(get(f"gc_{ver(ips['gc'])}_rlc.bin"))]
    return fw
  fw.smu = parse_smu(get(f"smu_{ver(ips['mp1'])}.bin"))
  fw.images += parse_sdma(get(f"sdma_{ver(ips['sdma'])}.bin"))
  for eng in ("pfp", "me", "mec"):
    imgs, start = parse_cp(get(f"gc_{ver(ips['gc'])}_{eng}.bin"), eng)
    fw.images += imgs
    fw.ucode_start[eng] = start
  fw.images += parse_imu(get(f"gc_{ver(ips['gc'])}_imu.bin"))
  fw.images += parse_rlc(get(f"gc_{ver(ips['gc'])}_rlc.bin"))
  return fw
