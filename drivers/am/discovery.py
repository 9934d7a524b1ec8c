"""IP discovery: the binary the board keeps 64 KiB below the top of VRAM (discovery.h, amdgpu_discovery.c).

It names every IP block with its version, instance and register segment bases, which IPs are harvested, and the
GC configuration (shader engines, WGPs, wave size). The driver reads it before touching any IP register.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from rawgpu.drivers.am import facts as F
from rawgpu.errors import RawGPUError

_NAME_BY_HWID = {v: k for k, v in F.HWID.items()}
SDMA_HWIDS = {F.HWID["sdma0"], F.HWID["sdma1"], F.HWID["sdma2"], F.HWID["sdma3"]}


@dataclass
class IPBlock:
  hw_id: int
  instance: int
  version: tuple[int, int, int]
  bases: tuple[int, ...]         # dword base of each register segment (the *_BASE_IDX of the headers index this)
  harvested: bool = False
  sub_revision: int = 0          # tables v3+ (IP_VERSION_SUBREV): NBIO's names the chip revision where it is set


@dataclass
class Discovery:
  version: tuple[int, int]
  ips: list[IPBlock]
  gc_info: dict[str, int] = field(default_factory=dict)
  harvest: list[tuple[int, int]] = field(default_factory=list)   # (hw_id, instance) from the harvest table

  def find(self, name: str, instance: int = 0) -> IPBlock:
    """The block by AM's name (gc, mmhub, nbif, osssys, mp0, mp1, hdp, smuio, athub, sdma) and instance."""
    ids = SDMA_HWIDS if name == "sdma" else {F.HWID[name]}
    cands = [b for b in self.ips if b.hw_id in ids and not b.harvested]
    if name == "sdma": cands.sort(key=lambda b: (b.hw_id, b.instance))  # SDMA0..3 may be separate HWIDs or instances
    else: cands = [b for b in cands if b.instance == instance]
    idx = instance if name == "sdma" else 0
    if idx >= len(cands): raise RawGPUError(f"IP discovery lists no {name} instance {instance}")
    return cands[idx]

  def has(self, name: str, instance: int = 0) -> bool:
    try: self.find(name, instance); return True
    except (RawGPUError, KeyError): return False

  def count(self, name: str) -> int:
    ids = SDMA_HWIDS if name == "sdma" else {F.HWID[name]}
    return sum(1 for b in self.ips if b.hw_id in ids and not b.harvested)

  def versions(self) -> dict[str, tuple[int, int, int]]:
    out: dict[str, tuple[int, int, int]] = {}
    for name in ("gc", "mmhub", "athub", "osssys", "hdp", "nbif", "mp0", "mp1", "smuio", "sdma"):
      if self.has(name): out["nbio" if name == "nbif" else name] = self.find(name).version
    return out


def _sum16(data: bytes) -> int: return sum(data) & 0xffff


def parse(blob: bytes) -> Discovery:
  bh = F.BINARY_HDR.parse(blob, what="IP discovery")
  if bh["binary_signature"] != F.BINARY_SIGNATURE:
    raise RawGPUError(f"IP discovery: signature {bh['binary_signature']:#x} is not {F.BINARY_SIGNATURE:#x}; VRAM is not readable "
                      "or the board did not post (check the BAR mapping, or reset the board)")
  start = F.BINARY_HDR.offset("binary_checksum") + 2
  if bh["binary_size"] > len(blob) or _sum16(blob[start:bh["binary_size"]]) != bh["binary_checksum"]:
    raise RawGPUError("IP discovery: binary checksum mismatch (corrupt table in VRAM; a reset usually restores it)")
  tables = bh["table_list"]
  def table(i: int) -> tuple[int, int, int]: return tables[4 * i], tables[4 * i + 1], tables[4 * i + 2]

  off, csum, size = table(F.DISC_TABLE["IP_DISCOVERY"])
  ih = F.IP_DISCOVERY_HDR.parse(blob, off, what="IP discovery")
  if ih["signature"] != F.DISCOVERY_TABLE_SIGNATURE: raise RawGPUError(f"IP discovery: IP table signature {ih['signature']:#x} is wrong")
  if _sum16(blob[off:off + ih["size"]]) != csum: raise RawGPUError("IP discovery: IP table checksum mismatch")
  base64 = ih["version"] >= 4 and bool(ih["_anon0"][0] & 1)   # the union holds base_addr_64_bit in bit 0
  ips: list[IPBlock] = []
  for die in range(ih["num_dies"]):
    die_off = ih["die_info"][2 * die + 1]   # die_info holds (die id, offset) pairs; the die header names its id
    dh = F.DIE_HDR.parse(blob, die_off, what="IP discovery die")
    if dh["die_id"] != die: raise RawGPUError(f"IP discovery: die {die} has id {dh['die_id']}")
    pos = die_off + F.DIE_HDR.size
    for _ in range(dh["num_ips"]):
      e = F.IP_ENTRY.parse(blob, pos, what="IP discovery entry")
      pos += F.IP_ENTRY.size
      n, width = e["num_base_address"], 8 if base64 else 4
      raw = [int.from_bytes(blob[pos + i * width:pos + (i + 1) * width], "little") for i in range(n)]
      pos += n * width
      bases = tuple((b & 0xffffffff) & 0x3fffffff if base64 else b for b in raw)
      # version 1/2 tables carry a harvest nibble in the low half of the last byte; v3+ use it for sub_revision
      harvested = ih["version"] < 3 and bool(e["_bf0"] & 0xf)
      ips.append(IPBlock(e["hw_id"], e["instance_number"], (e["major"], e["minor"], e["revision"] & 0x3f), bases, harvested,
                         e["_bf0"] & 0xf if ih["version"] >= 3 else 0))

  disc = Discovery((bh["version_major"], bh["version_minor"]), ips)
  off, _, size = table(F.DISC_TABLE["HARVEST_INFO"])
  if off and size:
    hh = F.HARVEST_INFO_HDR.parse(blob, off, what="harvest table")
    if hh["signature"] == F.HARVEST_TABLE_SIGNATURE:
      for i in range(32):
        e = F.HARVEST_INFO.parse(blob, off + F.HARVEST_INFO_HDR.size + i * F.HARVEST_INFO.size, what="harvest table")
        if e["hw_id"] == 0: break
        disc.harvest.append((e["hw_id"], e["number_instance"]))
      for b in ips:
        if (b.hw_id, b.instance) in disc.harvest: b.harvested = True
  off, _, size = table(F.DISC_TABLE["GC"])
  if off and size:
    gh = F.GPU_INFO_HDR.parse(blob, off, what="gc_info")
    if gh["table_id"] == F.GC_TABLE_ID:
      lay = F.GC_INFO_V2_0 if gh["version_major"] == 2 else F.GC_INFO_V1_0
      disc.gc_info = {k: v for k, v in lay.parse(blob, off, what="gc_info").items() if k.startswith("gc_")}  # type: ignore[misc]
  return disc


def compute_units(gc: dict[str, int]) -> int:
  """CUs from gc_info: v1 counts WGPs per shader array (2 CUs each), v2 counts CUs per shader array directly."""
  if "gc_num_wgp0_per_sa" in gc: return gc["gc_num_se"] * gc["gc_num_sa_per_se"] * 2 * (gc["gc_num_wgp0_per_sa"] + gc["gc_num_wgp1_per_sa"])
  return gc.get("gc_num_se", 0) * gc.get("gc_num_sh_per_se", 0) * gc.get("gc_num_cu_per_sh", 0)
