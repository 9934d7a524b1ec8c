"""The committed code objects: manifest consistency, and a byte-for-byte rebuild where clang-19 is installed."""
import hashlib
import re
import shutil
import subprocess

import pytest

from rawgpu import kernels
from rawgpu.errors import CodeObjectError
from rawgpu.kernels import build

MAN = kernels.manifest()


def test_every_committed_file_is_in_the_manifest_with_its_hash():
  on_disk = {f"{t}/{p.name}" for t in kernels.TARGETS for p in (kernels.KERNELS_DIR / t).glob("*.hsaco")}
  assert on_disk == set(MAN["objects"])
  for rel, entry in MAN["objects"].items():
    data = (kernels.KERNELS_DIR / rel).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"], rel
    assert len(data) == entry["size"]


def test_manifest_sources_are_current():
  # a source edited without rebuilding shows up here, tools or not
  for rel, entry in MAN["objects"].items():
    for src, digest in entry["sources"].items():
      assert hashlib.sha256((kernels.KERNELS_DIR / src).read_bytes()).hexdigest() == digest, f"{rel}: {src} changed, rebuild"


def test_jobs_cover_every_source_for_every_target():
  outputs = {j.output for j in build.jobs()}
  assert outputs == set(MAN["objects"])
  for t in kernels.TARGETS:
    for src in kernels.KERNELS_DIR.glob("*.cl"): assert f"{t}/{src.stem}.hsaco" in outputs


def test_kernel_names_match_the_sources():
  for rel, entry in MAN["objects"].items():
    target, name = rel[:-len(".hsaco")].split("/")
    src = kernels.KERNELS_DIR / f"{name}.cl"
    if src.exists(): declared = re.findall(r"__kernel\b.*?\bvoid\s+(\w+)\s*\(", src.read_text(), re.S)
    else: declared = re.findall(r"^\s*\.globl\s+(\w+)", (kernels.KERNELS_DIR / f"{name}.{build.FAMILY[target]}.s").read_text(), re.M)
    assert sorted(declared) == entry["kernels"] == kernels.kernels(target, name), rel


def test_path_and_names():
  for t in kernels.TARGETS:
    assert set(kernels.names(t)) >= {"fill", "copy", "vadd", "saxpy", "reduce", "matmul", "atomic", "spin", "fault",
                                     "store_ids", "empty"}
    assert kernels.path(t, "vadd").read_bytes()[:4] == b"\x7fELF"
  with pytest.raises(CodeObjectError, match="no prebuilt code object"): kernels.path("gfx1100", "nope")
  with pytest.raises(CodeObjectError, match="target"): kernels.names("gfx000")


@pytest.mark.skipif(shutil.which("llvm-readelf-19") is None, reason="llvm-readelf-19 not installed (apt-get install llvm-19)")
def test_kernel_names_match_llvm_readelf():
  for rel, entry in MAN["objects"].items():
    out = subprocess.run(["llvm-readelf-19", "--dyn-syms", str(kernels.KERNELS_DIR / rel)], capture_output=True, text=True,
                         check=True).stdout
    assert sorted(re.findall(r"\s(\w+)\.kd$", out, re.M)) == entry["kernels"], rel


def test_rebuild_is_byte_identical():
  if missing := build.missing_tools(): pytest.skip(f"missing {', '.join(missing)} (apt-get install clang-19 lld-19 llvm-19)")
  if (have := build.tool_versions()) != MAN["tools"]:
    pytest.skip(f"tool versions differ from the recorded build: {have} vs {MAN['tools']}")
  built = build.build()
  assert set(built) == set(MAN["objects"])
  assert build.check(built) == []
