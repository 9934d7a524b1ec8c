"""The IP discovery binary the board keeps at (VRAM size - 64 KiB), laid out per discovery.h.

binary_header -> ip_discovery_header (one die, IP entries with base addresses; v4 with 64-bit bases for MI300) ->
gc_info v1.2 (RDNA) or v2.0 (CDNA) -> harvest table.
Every table carries the byte-sum checksum the driver verifies.
"""
from __future__ import annotations
import ctypes, struct
from rawgpu.drivers.emu.amd.asic import Asic

BINARY_SIGNATURE, DISCOVERY_TABLE_SIGNATURE, GC_TABLE_ID, HARVEST_TABLE_SIGNATURE = 0x28211407, 0x53445049, 0x4347, 0x56524148
IP_DISCOVERY, GC, HARVEST_INFO, TOTAL_TABLES = 0, 1, 2, 6
DISCOVERY_TMR_OFFSET, DISCOVERY_TMR_SIZE = 64 << 10, 10 << 10


def _csum(b: bytes) -> int: return sum(b) & 0xffff


def _gc_info_v1_2(asic: Asic, wgp_per_sa: int) -> bytes:
  """gpu_info_header + 30 u32 (RDNA: WGPs per shader array)."""
  gc_fields = [asic.num_se, wgp_per_sa, 0, 4, 24 if asic.arch == "gfx1100" else 16, 1536, 32, 32, 32, 32, 1, 32, 16, 32, 64,
               2, asic.num_sa_per_se, 1, 16, 2 * wgp_per_sa, 16, 2 * wgp_per_sa * asic.num_sa_per_se * asic.num_se, 2, 16, 1, 32, 16, 1, 256, 1]
  return struct.pack("<IHHI", GC_TABLE_ID, 1, 2, 12 + 4 * len(gc_fields)) + struct.pack(f"<{len(gc_fields)}I", *gc_fields)


def _gc_info_v2(fields: dict[str, int]) -> bytes:
  """gc_info v2.0 (discovery.h's gc_info_v2_0: CUs per shader array), the fields not given left 0."""
  from rawgpu.autogen.amd.discovery import gc_info_v2_0
  t = gc_info_v2_0()
  t.header.table_id, t.header.version_major, t.header.version_minor, t.header.size = GC_TABLE_ID, 2, 0, ctypes.sizeof(t)
  for k, v in fields.items(): setattr(t, k, v)
  return bytes(t)


def build(asic: Asic, wgp_per_sa: int, harvested: list[tuple[int, int]] = []) -> bytes:
  # ip discovery table: header (80 bytes) + die header + entries
  ip_ver = 4 if asic.version(11)[0] >= 12 or asic.base_addr_64 else 3
  width = "Q" if asic.base_addr_64 else "I"
  entries = b""
  for e in asic.ips:
    # ip_v3/v4: hw_id u16, instance u8, num_base u8, major, minor, revision, sub_revision:4|variant:4, bases u32[] (u64[])
    entries += struct.pack("<HBBBBBB", e.hw_id, e.instance, len(e.bases), *e.version, e.sub_revision & 0xf) + struct.pack(f"<{len(e.bases)}{width}", *e.bases)
  die = struct.pack("<HH", 0, len(asic.ips)) + entries
  ihdr_size = 4 + 2 + 2 + 4 + 2 + 16 * 4 + 2
  ihdr_off = 0x40
  die_off = ihdr_off + ihdr_size
  dies = struct.pack("<HH", 0, die_off) + bytes(4 * 15)
  flags = struct.pack("<BB", int(asic.base_addr_64), 0)   # v4: bit 0 base_addr_64_bit (the v3 padding otherwise)
  ip_table = struct.pack("<IHHIH", DISCOVERY_TABLE_SIGNATURE, ip_ver, ihdr_size + len(die), 0, 1) + dies + flags + die
  gc_table = _gc_info_v2(asic.gc_info) if asic.gc_info is not None else _gc_info_v1_2(asic, wgp_per_sa)
  # harvest table: header (signature, version) + 32 x {hw_id u16, instance u8, reserved u8}
  harv = struct.pack("<II", HARVEST_TABLE_SIGNATURE, 0) + b"".join(struct.pack("<HBB", h, i, 0) for h, i in harvested)
  harv += bytes(8 + 32 * 4 - len(harv))
  # binary: header then tables, 8-byte aligned
  gc_off = (ihdr_off + len(ip_table) + 7) & ~7
  harv_off = (gc_off + len(gc_table) + 7) & ~7
  total = harv_off + len(harv)
  out = bytearray(total)
  out[ihdr_off:ihdr_off + len(ip_table)] = ip_table
  out[gc_off:gc_off + len(gc_table)] = gc_table
  out[harv_off:harv_off + len(harv)] = harv
  tables = [(ihdr_off, _csum(ip_table), len(ip_table)), (gc_off, _csum(gc_table), len(gc_table)), (harv_off, _csum(harv), len(harv))]
  tables += [(0, 0, 0)] * (TOTAL_TABLES - len(tables))
  hdr = struct.pack("<IHHHH", BINARY_SIGNATURE, 1, 0, 0, total) + b"".join(struct.pack("<HHHH", o, c, s, 0) for o, c, s in tables)
  out[:len(hdr)] = hdr
  struct.pack_into("<H", out, 8, _csum(bytes(out[10:total])))
  assert total <= DISCOVERY_TMR_SIZE
  return bytes(out)
