"""amd.ucode and amd.psp layouts against real firmware files (Debian firmware-amd-graphics): every header says its own
size and version, so the struct for that version must have exactly that size, and offsets must land in the file.
Skips when no firmware is present (RAWGPU_FIRMWARE_DIR, /lib/firmware/amdgpu or the firmware cache)."""
import ctypes
import os
import pathlib

import pytest

from rawgpu.autogen.amd import ucode as U

FAMILY = {"imu": "imu", "me": "gfx", "mec": "gfx", "pfp": "gfx", "mes": "mes", "mes1": "mes", "mes_2": "mes",
          "uni_mes": "mes", "rlc": "rlc", "rlc_1": "rlc", "sos": "psp", "ta": "ta", "sdma": "sdma", "smu": "smc"}


def _dirs():
  env = os.environ.get("RAWGPU_FIRMWARE_DIR")
  cands = [pathlib.Path(env)] if env else []
  cands += [pathlib.Path("/lib/firmware/amdgpu")]
  cands += sorted((pathlib.Path.home() / ".cache" / "rawgpu" / "firmware").glob("*/amdgpu"))
  return [d for d in cands if d.is_dir()]


def _files():
  out = []
  for d in _dirs():
    for pat in ("gc_11_0_*", "gc_12_0_*", "psp_13_0_0_*", "psp_14_0_2_*", "sdma_6_0_*", "sdma_7_0_*", "smu_13_0_0*",
                "smu_14_0_2*"):
      out += sorted(p for p in d.glob(pat + ".bin"))
  return out


FILES = _files()
pytestmark = pytest.mark.skipif(not FILES, reason="no AMD firmware found (install firmware-amd-graphics or set "
                                                   "RAWGPU_FIRMWARE_DIR)")


def _family(path: pathlib.Path) -> str:
  stem = path.stem
  if stem.startswith(("sdma_", "smu_")): return FAMILY[stem.split("_")[0]]
  return FAMILY.get(stem.split("_", 4)[4] if stem.startswith(("gc_", "psp_")) else "", "")


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.parent.name}/{p.name}" for p in FILES])
def test_header_sizes_match_their_version_struct(path):
  data = path.read_bytes()
  h = U.common_firmware_header.from_buffer_copy(data)
  assert h.size_bytes == len(data)
  assert h.ucode_array_offset_bytes + h.ucode_size_bytes <= len(data)
  fam = _family(path)
  if not fam: pytest.skip(f"no header family known for {path.name}")
  cls = getattr(U, f"{fam}_firmware_header_v{h.header_version_major}_{h.header_version_minor}", None)
  assert cls is not None, f"{path.name}: no struct for {fam} v{h.header_version_major}.{h.header_version_minor}"
  assert ctypes.sizeof(cls) == h.header_size_bytes, f"{path.name}: {cls.__name__}"
  hdr = cls.from_buffer_copy(data)
  if fam == "gfx" and h.header_version_major == 2:
    assert hdr.ucode_offset_bytes + hdr.ucode_size_bytes <= len(data)
    assert hdr.data_offset_bytes + hdr.data_size_bytes <= len(data)
  if fam == "imu":
    assert hdr.imu_iram_ucode_size_bytes + hdr.imu_dram_ucode_size_bytes <= h.ucode_size_bytes
  if fam in ("psp", "ta") and h.header_version_major == 2:
    # the descriptor array follows the header; descriptor offsets count from the ucode array
    count = hdr.psp_fw_bin_count if fam == "psp" else hdr.ta_fw_bin_count
    descs = (U.psp_fw_bin_desc * count).from_buffer_copy(data, ctypes.sizeof(cls))
    fw_types = {v for k, v in vars(U).items() if k.startswith("PSP_FW_TYPE_")}
    assert count > 0
    for d in descs:
      assert d.fw_type in fw_types, f"{path.name}: fw_type {d.fw_type}"
      assert 0 < d.size_bytes and h.ucode_array_offset_bytes + d.offset_bytes + d.size_bytes <= len(data)
