"""Firmware loading against the real Debian files: every image AM hands the PSP must be the bytes a C program,
compiled against the kernel's amdgpu_ucode.h, finds at the offsets the headers name (amdgpu_ucode.c semantics).
Also: pinning, missing files, corrupt and truncated files."""
from __future__ import annotations
import hashlib, os, re, shutil, subprocess
import pytest
from rawgpu.autogen.amd import psp as P
from rawgpu.drivers.am import firmware as fw
from rawgpu.drivers.am.fwpins import KNOWN
from rawgpu.errors import FirmwareError
from test_am_facts import linux_root
from conftest import find_firmware

BOARDS = {"gfx1100": dict(mp0=(13, 0, 0), mp1=(13, 0, 0), sdma=(6, 0, 0), gc=(11, 0, 0)),
          "gfx1102": dict(mp0=(13, 0, 7), mp1=(13, 0, 7), sdma=(6, 0, 2), gc=(11, 0, 2)),
          "gfx1201": dict(mp0=(14, 0, 3), mp1=(14, 0, 3), sdma=(7, 0, 1), gc=(12, 0, 1))}

ORACLE = r'''
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef uint8_t u8; typedef uint16_t u16; typedef uint32_t u32; typedef uint64_t u64;
struct mutex { int x; };
#define __printf(a, b)
#include "amdgpu_ucode.h"
static unsigned char buf[1 << 22];
#define P(t, o, s) printf("%d %u %u\n", t, (unsigned)(o), (unsigned)(s))
int main(int argc, char **argv) {
  FILE *f = fopen(argv[2], "rb"); size_t n = fread(buf, 1, sizeof buf, f); (void)n;
  const struct common_firmware_header *h = (void *)buf;
  const char *k = argv[1];
  if (!strcmp(k, "sos") && h->header_version_minor == 1) {   /* v2.1 (PSP 13.0.6): the main set, before the aux one */
    const struct psp_firmware_header_v2_1 *s = (void *)buf;
    for (unsigned i = 0; i < s->psp_fw_bin_count - s->psp_aux_fw_bin_index; i++)
      P(s->psp_fw_bin[i].fw_type, h->ucode_array_offset_bytes + s->psp_fw_bin[i].offset_bytes, s->psp_fw_bin[i].size_bytes);
  } else if (!strcmp(k, "sos")) {
    const struct psp_firmware_header_v2_0 *s = (void *)buf;
    for (unsigned i = 0; i < s->psp_fw_bin_count; i++)
      P(s->psp_fw_bin[i].fw_type, h->ucode_array_offset_bytes + s->psp_fw_bin[i].offset_bytes, s->psp_fw_bin[i].size_bytes);
  } else if (!strcmp(k, "smu")) { P(GFX_SMU, h->ucode_array_offset_bytes, h->ucode_size_bytes);
  } else if (!strcmp(k, "sdma")) {
    if (h->header_version_major == 3) { const struct sdma_firmware_header_v3_0 *s = (void *)buf; P(GFX_SDMA0, h->ucode_array_offset_bytes, s->ucode_size_bytes); }
    else { const struct sdma_firmware_header_v2_0 *s = (void *)buf;
      P(GFX_SDMA0, h->ucode_array_offset_bytes, s->ctx_ucode_size_bytes); P(GFX_SDMA1, s->ctl_ucode_offset, s->ctl_ucode_size_bytes); }
  } else if (!strcmp(k, "cp")) { const struct gfx_firmware_header_v2_0 *c = (void *)buf;
    P(GFX_CODE, h->ucode_array_offset_bytes, c->ucode_size_bytes); P(GFX_STACK, c->data_offset_bytes, c->data_size_bytes);
  } else if (!strcmp(k, "imu")) { const struct imu_firmware_header_v1_0 *m = (void *)buf;
    P(GFX_IMUI, h->ucode_array_offset_bytes, m->imu_iram_ucode_size_bytes);
    P(GFX_IMUD, h->ucode_array_offset_bytes + m->imu_iram_ucode_size_bytes, m->imu_dram_ucode_size_bytes);
  } else if (!strcmp(k, "rlc")) { const struct rlc_firmware_header_v2_3 *r = (void *)buf;
    const struct rlc_firmware_header_v2_2 *r2 = &r->v2_2; const struct rlc_firmware_header_v2_1 *r1 = &r2->v2_1;
    P(GFX_RLCG, h->ucode_array_offset_bytes, h->ucode_size_bytes);
    P(GFX_GPM, r1->save_restore_list_gpm_offset_bytes, r1->save_restore_list_gpm_size_bytes);
    P(GFX_SRM, r1->save_restore_list_srm_offset_bytes, r1->save_restore_list_srm_size_bytes);
    P(GFX_IRAM, r2->rlc_iram_ucode_offset_bytes, r2->rlc_iram_ucode_size_bytes);
    P(GFX_DRAM, r2->rlc_dram_ucode_offset_bytes, r2->rlc_dram_ucode_size_bytes);
    if (h->header_version_minor >= 3) { P(GFX_RLCP, r->rlcp_ucode_offset_bytes, r->rlcp_ucode_size_bytes); P(GFX_RLCV, r->rlcv_ucode_offset_bytes, r->rlcv_ucode_size_bytes); }
  } else if (!strcmp(k, "rlc21")) { const struct rlc_firmware_header_v2_1 *r = (void *)buf;   /* gfx9: no IRAM/DRAM/P/V */
    P(GFX_CNTL, r->save_restore_list_cntl_offset_bytes, r->save_restore_list_cntl_size_bytes);
    P(GFX_GPM, r->save_restore_list_gpm_offset_bytes, r->save_restore_list_gpm_size_bytes);
    P(GFX_SRM, r->save_restore_list_srm_offset_bytes, r->save_restore_list_srm_size_bytes);
    P(GFX_RLCG, h->ucode_array_offset_bytes, h->ucode_size_bytes);
  } else if (!strcmp(k, "cp1")) { const struct gfx_firmware_header_v1_0 *c = (void *)buf;   /* amdgpu_ucode_init_single_fw */
    P(GFX_MEC, h->ucode_array_offset_bytes, h->ucode_size_bytes - c->jt_size * 4);
    P(GFX_MECJT, h->ucode_array_offset_bytes + c->jt_offset * 4, c->jt_size * 4);
  } else if (!strcmp(k, "sdma1")) { P(GFX_SDMAV1, h->ucode_array_offset_bytes, h->ucode_size_bytes);
  } else if (!strcmp(k, "p2s")) { const struct smc_firmware_header_v2_1 *v = (void *)buf;   /* smu_v13_0_6_init_microcode */
    const struct smc_soft_pptable_entry *e = (void *)(buf + v->pptable_entry_offset);
    for (unsigned i = 0; i < v->pptable_count; i++) if (e[i].id == 0x50325358) P(GFX_P2S, e[i].ppt_offset_bytes, e[i].ppt_size_bytes);
  }
  return 0;
}
'''


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
  cc = shutil.which("clang-19") or shutil.which("cc")
  root = linux_root()
  if cc is None: pytest.skip("no C compiler (clang-19 or cc) for the amdgpu_ucode.h oracle")
  if root is None: pytest.skip("Linux 6.12 headers not found: run `python -m rawgpu.autogen fetch` or set RAWGPU_LINUX_SRC")
  d = tmp_path_factory.mktemp("oracle")
  (d / "o.c").write_text(ORACLE)
  T = P  # the GFX_FW_TYPE numbers the oracle prints as tags come from the PSP interface header too
  defs = {"GFX_SMU": T.GFX_FW_TYPE_SMU, "GFX_SDMA0": T.GFX_FW_TYPE_SDMA_UCODE_TH0, "GFX_SDMA1": T.GFX_FW_TYPE_SDMA_UCODE_TH1,
          "GFX_CODE": -1, "GFX_STACK": -2, "GFX_IMUI": T.GFX_FW_TYPE_IMU_I, "GFX_IMUD": T.GFX_FW_TYPE_IMU_D, "GFX_RLCG": T.GFX_FW_TYPE_RLC_G,
          "GFX_GPM": T.GFX_FW_TYPE_RLC_RESTORE_LIST_GPM_MEM, "GFX_SRM": T.GFX_FW_TYPE_RLC_RESTORE_LIST_SRM_MEM,
          "GFX_IRAM": T.GFX_FW_TYPE_RLC_IRAM, "GFX_DRAM": T.GFX_FW_TYPE_RLC_DRAM_BOOT, "GFX_RLCP": T.GFX_FW_TYPE_RLC_P, "GFX_RLCV": T.GFX_FW_TYPE_RLC_V,
          "GFX_CNTL": T.GFX_FW_TYPE_RLC_RESTORE_LIST_SRM_CNTL, "GFX_MEC": T.GFX_FW_TYPE_CP_MEC, "GFX_MECJT": T.GFX_FW_TYPE_CP_MEC_ME1,
          "GFX_SDMAV1": -3, "GFX_P2S": T.GFX_FW_TYPE_P2S_TABLE}
  subprocess.run([cc, "-w", "-O0", f"-I{root}/drivers/gpu/drm/amd/amdgpu", f"-I{root}/drivers/gpu/drm/amd/include",
                  *[f"-D{k}={v}" for k, v in defs.items()], "-o", str(d / "o"), str(d / "o.c")], check=True)
  def run(kind: str, path: str) -> list[tuple[int, bytes]]:
    data = open(path, "rb").read()
    out = subprocess.run([str(d / "o"), kind, path], check=True, capture_output=True, text=True).stdout.split("\n")
    return [(int(t), data[int(o):int(o) + int(s)]) for t, o, s in (ln.split() for ln in out if ln) if int(s)]
  return run


def _dir(version: str) -> str:
  d = find_firmware(version)
  if d is None: pytest.skip(f"firmware-amd-graphics {version} not fetched: run .ci/fetch-firmware")
  return d


@pytest.mark.parametrize("version,arch", [("20230210-5", "gfx1100"), ("20250410-2", "gfx1100"), ("20250410-2", "gfx1102"), ("20250410-2", "gfx1201")])
def test_images_match_the_c_oracle(version, arch, oracle, monkeypatch):
  d = _dir(version)
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", d)
  monkeypatch.delenv("RAWGPU_FIRMWARE_ANY", raising=False)
  ips = BOARDS[arch]
  f = fw.load(ips)
  v = lambda t: "_".join(map(str, ips[t]))
  assert {x.package for x in f.files.values()} == {next(p for p in KNOWN if version in p)}
  # PSP bootloader components
  assert sorted(f.sos.items()) == sorted(oracle("sos", f"{d}/psp_{v('mp0')}_sos.bin"))
  assert [(f.smu.fw_type, f.smu.data)] == oracle("smu", f"{d}/smu_{v('mp1')}.bin")
  want = oracle("sdma", f"{d}/sdma_{v('sdma')}.bin")
  for eng, pipes in (("pfp", 2), ("me", 2), ("mec", 4)):
    (_, code), (_, stack) = oracle("cp", f"{d}/gc_{v('gc')}_{eng}.bin")
    want += [(getattr(P, f"GFX_FW_TYPE_RS64_{eng.upper()}"), code)]
    want += [(getattr(P, f"GFX_FW_TYPE_RS64_{eng.upper()}_P{p}_STACK"), stack) for p in range(pipes)]
  want += oracle("imu", f"{d}/gc_{v('gc')}_imu.bin")
  rlc = oracle("rlc", f"{d}/gc_{v('gc')}_rlc.bin")
  want += [x for x in rlc if x[0] != P.GFX_FW_TYPE_RLC_G] + [x for x in rlc if x[0] == P.GFX_FW_TYPE_RLC_G]  # RLC_G last, as amdgpu
  assert sorted((u.fw_type, u.data) for u in f.images) == sorted(want)
  assert f.images[-1].fw_type == P.GFX_FW_TYPE_RLC_G
  assert all(u.data for u in f.images)


def test_cdna3_images_match_the_c_oracle(oracle, monkeypatch):
  """MI300 (GC 9.4.3): the P2S table from smu_13_0_6.bin, SDMA 4.4.2's one image as SDMA0-3, the F32 MEC and its jump
  table, the RLC v2.1 lists and RLC_G, in psp_load_non_psp_fw's order; every image is a PSP-signed one."""
  d = _dir("20250410-2")
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", d)
  monkeypatch.delenv("RAWGPU_FIRMWARE_ANY", raising=False)
  f = fw.load(dict(mp0=(13, 0, 6), mp1=(13, 0, 6), sdma=(4, 4, 2), gc=(9, 4, 3)))
  assert sorted(f.sos.items()) == sorted(oracle("sos", f"{d}/psp_13_0_6_sos.bin")) and f.smu is None
  (_, sdma), = oracle("sdma1", f"{d}/sdma_4_4_2.bin")
  want = oracle("p2s", f"{d}/smu_13_0_6.bin") + [(getattr(P, f"GFX_FW_TYPE_SDMA{i}"), sdma) for i in range(4)]
  want += oracle("cp1", f"{d}/gc_9_4_3_mec.bin") + oracle("rlc21", f"{d}/gc_9_4_3_rlc.bin")
  assert [(u.fw_type, u.data) for u in f.images] == want
  assert all(u.data[0x10:0x14] == b"$PS1" for u in f.images)


def test_pins_are_sha256_of_the_package_files():
  for version in ("20230210-5", "20250410-2"):
    d = find_firmware(version)
    if d is None: continue
    pkg = next(p for p in KNOWN if version in p)
    for name, h in KNOWN[pkg].items(): assert hashlib.sha256(open(os.path.join(d, name), "rb").read()).hexdigest() == h, name


def test_missing_file_names_the_package(tmp_path, monkeypatch):
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", str(tmp_path))
  with pytest.raises(FirmwareError, match="firmware-amd-graphics.*bookworm-backports"): fw.read_file("smu_13_0_0.bin")


def test_a_firmware_dir_that_does_not_exist_is_said_so(tmp_path, monkeypatch):
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", str(tmp_path / "nonexistent"))
  with pytest.raises(FirmwareError, match=f"RAWGPU_FIRMWARE_DIR={re.escape(str(tmp_path))}/nonexistent: no such directory .*smu_13_0_0.bin"):
    fw.read_file("smu_13_0_0.bin")


def _copy(src: str, dst, name: str) -> bytearray:
  dst.mkdir(exist_ok=True)
  data = bytearray(open(os.path.join(src, name), "rb").read())
  return data


def test_unknown_hash_refused_unless_allowed(tmp_path, monkeypatch):
  d = _dir("20250410-2")
  data = _copy(d, tmp_path, "sdma_6_0_0.bin"); data[-1] ^= 1
  (tmp_path / "sdma_6_0_0.bin").write_bytes(data)
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", str(tmp_path))
  with pytest.raises(FirmwareError, match="not a version rawgpu knows"): fw.read_file("sdma_6_0_0.bin")
  monkeypatch.setenv("RAWGPU_FIRMWARE_ANY", "1")
  f = fw.read_file("sdma_6_0_0.bin")
  assert f.package is None and len(fw.parse_sdma(f)) == 2


def test_file_under_another_name_is_not_its_pin(tmp_path, monkeypatch):
  d = _dir("20250410-2")
  (tmp_path).mkdir(exist_ok=True)
  shutil.copy(os.path.join(d, "sdma_6_0_0.bin"), tmp_path / "sdma_6_0_2.bin")   # right bytes, wrong file
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", str(tmp_path))
  with pytest.raises(FirmwareError, match="not a version"): fw.read_file("sdma_6_0_2.bin")


@pytest.mark.parametrize("damage", ["truncate", "header_version", "offset"])
def test_corrupt_files(tmp_path, monkeypatch, damage):
  d = _dir("20250410-2")
  data = _copy(d, tmp_path, "gc_11_0_0_mec.bin")
  if damage == "truncate": data = data[:len(data) // 2]
  elif damage == "header_version": data[8] = 7                              # header_version_major
  else: data[0x2c:0x30] = (len(data) * 2).to_bytes(4, "little")             # data_offset_bytes past the end
  (tmp_path / "gc_11_0_0_mec.bin").write_bytes(bytes(data))
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", str(tmp_path))
  monkeypatch.setenv("RAWGPU_FIRMWARE_ANY", "1")
  with pytest.raises(FirmwareError, match="gc_11_0_0_mec.bin"): fw.parse_cp(fw.read_file("gc_11_0_0_mec.bin"), "mec")


def test_rlc_header_2_4_is_refused_not_read_as_2_3():
  """v2.4 (GC 10.3's tap delays) follows 2.3's layout, but amdgpu reads the RLC_P/RLC_V fields only for 2.3: a real
  v2.4 file is refused with its version, its RLC_P/V words never become images."""
  d = _dir("20250410-2")
  path = os.path.join(d, "sienna_cichlid_rlc.bin")
  if not os.path.exists(path): pytest.skip(f"sienna_cichlid_rlc.bin is not in {d}")
  data = open(path, "rb").read()
  assert data[8:12] == bytes([2, 0, 4, 0])   # header 2.4
  with pytest.raises(FirmwareError, match=r"header version 2\.4 is not the expected 2\.1/2/3"):
    fw.parse_rlc(fw.FwFile("sienna_cichlid_rlc.bin", path, data, None))
  assert fw.parse_rlc(fw.FwFile("gc_11_0_0_rlc.bin", "gc_11_0_0_rlc.bin", open(os.path.join(d, "gc_11_0_0_rlc.bin"), "rb").read(), None))


def test_xz_compressed_files(tmp_path, monkeypatch):
  import lzma
  d = _dir("20250410-2")
  (tmp_path / "smu_13_0_0.bin.xz").write_bytes(lzma.compress(open(os.path.join(d, "smu_13_0_0.bin"), "rb").read()))
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", str(tmp_path))
  f = fw.read_file("smu_13_0_0.bin")
  assert f.package is not None and f.path.endswith(".xz")


def test_firmware_is_looked_for_in_the_fetched_cache_after_the_system(tmp_path, monkeypatch):
  """`.ci/fetch-firmware` unpacks Debian's packages into ~/.cache/rawgpu/firmware/<version>/amdgpu: a checkout that
  ran it finds them without RAWGPU_FIRMWARE_DIR (newest version first, after /lib/firmware)."""
  from rawgpu.drivers.am import firmware
  for v in ("20230210-5", "20250410-2"): (tmp_path / "firmware" / v / "amdgpu").mkdir(parents=True)
  monkeypatch.delenv("RAWGPU_FIRMWARE_DIR", raising=False)
  monkeypatch.setenv("RAWGPU_CACHE", str(tmp_path))
  assert firmware._dirs() == [*firmware.DIRS, str(tmp_path / "firmware" / "20250410-2" / "amdgpu"), str(tmp_path / "firmware" / "20230210-5" / "amdgpu")]
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", str(tmp_path))
  assert firmware._dirs() == [str(tmp_path)]   # given, it is the only place
