"""The code-object loader against LLVM's own view of the same files (llvm-readelf-19, llvm-objdump-19, clang-19)."""
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from rawgpu import kernels
from rawgpu.errors import CodeObjectError
from rawgpu.hcq.amd import elf
from rawgpu.hcq.amd.elf import check_launch, check_resources, limits_for, load_code_object

READELF, OBJDUMP, CLANG, LLD = "llvm-readelf-19", "llvm-objdump-19", "clang-19", "ld.lld-19"
ALL = [(t, n) for t in kernels.TARGETS for n in kernels.names(t)]
need_readelf = pytest.mark.skipif(shutil.which(READELF) is None, reason=f"{READELF} not installed (apt-get install llvm-19)")
need_objdump = pytest.mark.skipif(shutil.which(OBJDUMP) is None, reason=f"{OBJDUMP} not installed (apt-get install llvm-19)")
need_clang = pytest.mark.skipif(shutil.which(CLANG) is None or shutil.which(LLD) is None,
                                reason=f"{CLANG}/{LLD} not installed (apt-get install clang-19 lld-19)")


def tool(*argv) -> str: return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def load(target, name): return load_code_object(kernels.path(target, name).read_bytes(), target=target, name=name)


def readelf_metadata(path: Path) -> dict:
  yaml = pytest.importorskip("yaml", reason="PyYAML reads llvm-readelf's metadata dump (pip install pyyaml)")
  text = tool(READELF, "--notes", str(path))
  return yaml.safe_load(text[text.index("---"):text.index("\n...") + 4])


@need_readelf
@pytest.mark.parametrize("target,name", ALL)
def test_metadata_matches_llvm_readelf(target, name):
  co, ref = load(target, name), readelf_metadata(kernels.path(target, name))
  assert co.metadata["amdhsa.version"] == ref["amdhsa.version"]
  assert sorted(co.kernels) == sorted(k[".name"] for k in ref["amdhsa.kernels"])
  for rk in ref["amdhsa.kernels"]:
    m = co.kernels[rk[".name"]].meta
    for key in ("symbol", "kernarg_segment_size", "kernarg_segment_align", "group_segment_fixed_size",
                "private_segment_fixed_size", "sgpr_count", "vgpr_count", "wavefront_size", "max_flat_workgroup_size"):
      assert getattr(m, key) == rk[f".{key}"], (rk[".name"], key)
    assert m.reqd_workgroup_size == (tuple(rk[".reqd_workgroup_size"]) if ".reqd_workgroup_size" in rk else None)
    assert len(m.args) == len(rk.get(".args", []))
    for a, ra in zip(m.args, rk.get(".args", [])):
      assert (a.offset, a.size, a.value_kind, a.address_space) == (ra[".offset"], ra[".size"], ra[".value_kind"],
                                                                     ra.get(".address_space"))
      assert a.name == ra.get(".name", "") and a.type_name == ra.get(".type_name")


def objdump_kd(path: Path, kd: str, mcpu: str) -> tuple[dict[str, int], str]:
  out = tool(OBJDUMP, "-D", f"--mcpu={mcpu}", f"--disassemble-symbols={kd}", str(path))
  fields = {m[1].lower(): int(m[2], 0) for m in re.finditer(r"^\s*(?:\.amdhsa_|; )(\w+) (-?\d\w*)$", out, re.M)}
  return fields, out


@need_objdump
@pytest.mark.parametrize("target,name", ALL)
def test_descriptor_matches_llvm_objdump(target, name, tmp_path):
  co, path = load(target, name), kernels.path(target, name)
  for k in co.kernels.values():
    ref, out = objdump_kd(path, f"{k.name}.kd", target)
    d = k.descriptor
    if "error decoding" in out:
      # LLVM 19 refuses clang's own gfx10+ descriptors that set the SGPR count bits (reserved there). Check that its
      # complaint matches what we decoded, clear those bits in a copy and let it decode the rest.
      assert "GRANULATED_WAVEFRONT_SGPR_COUNT" in out and d["granulated_wavefront_sgpr_count"] != 0
      data = bytearray(path.read_bytes())
      file_off = k.descriptor_offset - co.segments[0][0]  # the first segment (.rodata with the kds) maps offset 0
      assert data[file_off:file_off + 64] == co.image[k.descriptor_offset:k.descriptor_offset + 64]
      struct.pack_into("<I", data, file_off + 48, d.compute_pgm_rsrc1 & ~(0xf << 6))
      (tmp_path / "patched.hsaco").write_bytes(data)
      ref, out = objdump_kd(tmp_path / "patched.hsaco", f"{k.name}.kd", target)
      assert "error" not in out
    mine = {**d.fields, "group_segment_fixed_size": d.group_segment_fixed_size, "kernarg_size": d.kernarg_size,
            "private_segment_fixed_size": d.private_segment_fixed_size, "next_free_vgpr": d.vgprs}
    if d.accum_offset is not None: mine["accum_offset"] = d.accum_offset
    compared = set(ref) & set(mine)
    assert {"group_segment_fixed_size", "kernarg_size", "next_free_vgpr", "user_sgpr_kernarg_segment_ptr",
            "system_sgpr_workgroup_id_x", "system_vgpr_workitem_id", "float_denorm_mode_32"} <= compared
    if target != "gfx942": assert {"wavefront_size32", "workgroup_processor_mode", "inst_pref_size", "image_op"} <= compared
    else: assert {"accum_offset", "tg_split"} <= compared
    for key in compared: assert mine[key] == ref[key], (k.name, key)


@need_readelf
@pytest.mark.parametrize("target,name", ALL)
def test_symbols_segments_and_relocations_match_llvm_readelf(target, name):
  path = kernels.path(target, name)
  co, data = load(target, name), path.read_bytes()
  syms = {m[3]: (int(m[1], 16), m[2]) for m in re.finditer(r"^\s*\d+: ([0-9a-f]+)\s+\d+ (\w+)\s+\w+\s+\w+\s+\w+ (\S+)$",
                                                             tool(READELF, "--dyn-syms", str(path)), re.M)}
  for k in co.kernels.values():
    assert syms[f"{k.name}.kd"] == (k.descriptor_offset, "OBJECT")
    assert syms[k.name] == (k.code_offset, "FUNC")  # the entry offset in the descriptor lands on the function symbol
  loads = re.findall(r"^\s*LOAD\s+0x([0-9a-f]+) 0x([0-9a-f]+) 0x[0-9a-f]+ 0x([0-9a-f]+) 0x([0-9a-f]+)",
                     tool(READELF, "-l", "-W", str(path)), re.M)
  assert len(loads) == len(co.segments)
  for off, vaddr, filesz, memsz in loads:
    off, vaddr, filesz, memsz = (int(x, 16) for x in (off, vaddr, filesz, memsz))
    assert co.image[vaddr:vaddr + filesz] == data[off:off + filesz]
    assert co.image[vaddr + filesz:vaddr + memsz] == bytes(memsz - filesz)
  relocs = re.findall(r"^([0-9a-f]{16})\s+[0-9a-f]{16} (R_AMDGPU_\w+)\s+([0-9a-f]+)$", tool(READELF, "-r", "-W", str(path)), re.M)
  assert [(int(o, 16), t, int(a, 16)) for o, t, a in relocs] == [(r.offset, r.type_name, r.addend) for r in co.relocations]


@need_readelf
@pytest.mark.parametrize("target", kernels.TARGETS)
def test_relocations_point_at_the_tables(target):
  # lut.cl holds a table of pointers to two constant arrays; after loading at base it must hold base + their symbols
  path = kernels.path(target, "lut")
  co = load(target, "lut")
  syms = {m[2]: int(m[1], 16) for m in re.finditer(r"^\s*\d+: ([0-9a-f]+)\s+\d+ \w+\s+\w+\s+\w+\s+\w+ (\S+)$",
                                                   tool(READELF, "-s", str(path)), re.M)}
  assert len(co.relocations) == 2
  for base in (0x7f0000000000, 0x100000000):
    img = co.image_at(base)
    at = syms["tables"]
    assert struct.unpack_from("<QQ", img, at) == (base + syms["squares"], base + syms["cubes"])
    assert img[:at] == co.image[:at]  # nothing else moves
  with pytest.raises(CodeObjectError, match="alignment"): co.image_at(0x100000100)


def test_kernel_descriptor_user_sgprs_and_wave():
  for target in kernels.TARGETS:
    k = load(target, "vadd").kernels["vadd_f32"]
    assert k.descriptor.kernarg_sgpr() == 0  # only the kernarg pointer is enabled for these kernels
    assert k.descriptor.wavefront_size == k.meta.wavefront_size == (64 if target == "gfx942" else 32)
    # allocated VGPRs cover what the compiler reported, by less than one granule
    assert 0 <= k.descriptor.vgprs - k.meta.vgpr_count < k.descriptor.vgpr_granule   # agprs are in vgpr_count (gfx90a+)
    assert k.descriptor.kernarg_size == k.meta.kernarg_segment_size
  assert load("gfx1100", "empty").kernels["empty"].descriptor.user_sgprs() == []


def test_resource_checks():
  k = load("gfx1100", "reduce").kernels["reduce_sum_f32"]
  check_resources(k, limits_for("gfx1100"))
  with pytest.raises(CodeObjectError, match="1024 bytes of LDS"):
    check_resources(k, elf.DeviceLimits("gfx1100", lds_per_workgroup=512))
  s = load("gfx1100", "scratch").kernels["scratch_u32"]
  assert s.meta.private_segment_fixed_size > 0
  with pytest.raises(CodeObjectError, match="scratch"): check_resources(s, elf.DeviceLimits("gfx1100", max_private_segment_size=16))
  with pytest.raises(CodeObjectError, match="SGPRs"): check_resources(k, elf.DeviceLimits("gfx1100", max_sgprs=4))
  with pytest.raises(CodeObjectError, match="VGPRs"): check_resources(k, elf.DeviceLimits("gfx1100", max_vgprs=2))
  with pytest.raises(CodeObjectError, match="wave32"): check_resources(k, elf.DeviceLimits("gfx1100", wavefront_sizes=(64,)))
  check_launch(k, (256, 1, 1))
  with pytest.raises(CodeObjectError, match="compiled for workgroup size"): check_launch(k, (128, 1, 1))
  v = load("gfx1100", "vadd").kernels["vadd_f32"]
  check_launch(v, (v.meta.max_flat_workgroup_size, 1, 1))
  with pytest.raises(CodeObjectError, match="maximum"): check_launch(v, (v.meta.max_flat_workgroup_size, 2, 1))


def test_wrong_target():
  data = kernels.path("gfx942", "vadd").read_bytes()
  with pytest.raises(CodeObjectError, match="built for gfx942.*-mcpu=gfx1100"): load_code_object(data, target="gfx1100")
  load_code_object(data, target="gfx942:xnack-:sramecc+")  # built with xnack and sramecc "any": runs either way
  with pytest.raises(CodeObjectError, match="not AMDGPU"):
    load_code_object(data[:18] + struct.pack("<H", 62) + data[20:])
  with pytest.raises(CodeObjectError, match="ABI version"): load_code_object(data[:8] + b"\x01" + data[9:])


@pytest.mark.skipif(not Path("/usr/lib/llvm-19/include/llvm/BinaryFormat/ELF.h").exists(), reason="llvm-19-dev not installed")
def test_mach_numbers_match_llvm():
  text = Path("/usr/lib/llvm-19/include/llvm/BinaryFormat/ELF.h").read_text()
  ref = {m[1].lower().replace("_", "-"): int(m[2], 16) for m in re.finditer(r"EF_AMDGPU_MACH_AMDGCN_(GFX\w+?)\s*=\s*(0x[0-9a-f]+)", text)}
  for name, mach in elf.MACH.items(): assert ref[name] == mach, name


SRC = "__kernel void k(__global int* p, int v) { p[__builtin_amdgcn_workitem_id_x()] = v; }\n"


@need_clang
def test_target_features_match_clangs_target_ids(tmp_path):
  """TARGET_FEATURES against clang's target-ID parser: T:xnack+ / T:sramecc+ compile exactly where the table says."""
  from rawgpu.drivers.amd_target import TARGET_FEATURES
  (tmp_path / "t.cl").write_text(SRC)
  for target in elf.MACH:
    for feat in ("sramecc", "xnack"):
      ok = subprocess.run([CLANG, "-target", "amdgcn-amd-amdhsa", f"-mcpu={target}:{feat}+", "-nogpulib", "-c", "t.cl", "-o", "/dev/null"],
                          cwd=tmp_path, capture_output=True).returncode == 0
      assert ok == (feat in TARGET_FEATURES.get(target, ())), (target, feat)


def test_target_ids_name_the_known_modes_of_the_features_a_processor_has():
  from rawgpu.drivers.amd_target import target_id
  assert target_id("gfx942", xnack=False, sramecc=True) == "gfx942:sramecc+:xnack-"   # alphabetical, as LLVM writes them
  assert target_id("gfx942", xnack=True, sramecc=None) == "gfx942:xnack+"              # not known: left out
  assert target_id("gfx1100", xnack=False, sramecc=True) == "gfx1100"                   # RDNA has neither
  with pytest.raises(ValueError, match="tgsplit"): target_id("gfx942", tgsplit=True)


def compile_cl(tmp_path: Path, mcpu: str, cov: int) -> bytes:
  (tmp_path / "k.cl").write_text(SRC)
  subprocess.run([CLANG, "-target", "amdgcn-amd-amdhsa", f"-mcpu={mcpu}", f"-mcode-object-version={cov}", "-nogpulib",
                  "-O2", "-c", "k.cl", "-o", "k.o", "-Wno-everything"], cwd=tmp_path, check=True, capture_output=True)
  subprocess.run([LLD, "-shared", "k.o", "-o", "k.hsaco"], cwd=tmp_path, check=True, capture_output=True)
  return (tmp_path / "k.hsaco").read_bytes()


@need_clang
@pytest.mark.parametrize("mcpu,cov,runs_on", [("gfx1100", 4, "gfx1100"), ("gfx1201", 6, "gfx1201"), ("gfx942", 4, "gfx942"),
                                              ("gfx11-generic", 6, "gfx1100"), ("gfx12-generic", 6, "gfx1201"),
                                              ("gfx942:xnack+", 5, "gfx942:xnack+")])
def test_code_object_versions_and_generic_targets(tmp_path, mcpu, cov, runs_on):
  co = load_code_object(compile_cl(tmp_path, mcpu, cov), target=runs_on)
  assert co.code_object_version == cov and co.target == mcpu.split(":")[0]
  assert (co.generic_version > 0) == mcpu.endswith("generic")
  k = co.kernels["k"]
  assert k.meta.args[0].value_kind == "global_buffer" and k.meta.args[1].offset == 8
  if mcpu == "gfx942:xnack+":
    assert co.xnack == "on"
    with pytest.raises(CodeObjectError, match="xnack on"): load_code_object(compile_cl(tmp_path, mcpu, cov), target="gfx942:xnack-")
  if mcpu == "gfx11-generic":
    with pytest.raises(CodeObjectError, match="built for gfx11-generic"): load_code_object(co and compile_cl(tmp_path, mcpu, cov), target="gfx1201")


META = "  .amdgpu_metadata\n---\namdhsa.version: [1, 2]\namdhsa.kernels: []\n...\n  .end_amdgpu_metadata\n"


need_asm = pytest.mark.skipif(shutil.which("llvm-mc-19") is None or shutil.which(LLD) is None,
                              reason="llvm-mc-19/ld.lld-19 not installed (apt-get install llvm-19 lld-19)")


def assemble(tmp_path: Path, text: str) -> Path:
  (tmp_path / "r.s").write_text(text + META)
  subprocess.run(["llvm-mc-19", "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx1100", "-filetype=obj", "r.s", "-o", "r.o"],
                 cwd=tmp_path, check=True, capture_output=True)
  subprocess.run([LLD, "-shared", "r.o", "-o", "r.hsaco"], cwd=tmp_path, check=True, capture_output=True)
  return tmp_path / "r.hsaco"


@need_asm
@need_readelf
def test_abs64_relocations_against_symbols(tmp_path):
  # a default-visibility symbol is preemptible, so ld.lld leaves R_AMDGPU_ABS64 against it
  path = assemble(tmp_path, "  .data\n  .p2align 3\n  .globl target\ntarget:\n  .quad 0\n  .globl table\ntable:\n"
                            "  .quad target+8\n  .quad target\n")
  co = load_code_object(path.read_bytes(), target="gfx1100")
  ref = re.findall(r"^([0-9a-f]{16})\s+[0-9a-f]{16} (R_AMDGPU_\w+)\s+([0-9a-f]{16}) (\w+) \+ (\d+)$",
                   tool(READELF, "-r", "-W", str(path)), re.M)
  assert [r.type_name for r in co.relocations] == [t for _, t, _, _, _ in ref] == ["R_AMDGPU_ABS64"] * 2
  base = 0x123400000000
  img = co.image_at(base)
  for off, _, sym_value, name, addend in ref:
    assert struct.unpack_from("<Q", img, int(off, 16))[0] == base + int(sym_value, 16) + int(addend)


@need_asm
def test_undefined_symbols_are_rejected(tmp_path):
  path = assemble(tmp_path, "  .data\n  .p2align 3\n  .quad missing\n")
  with pytest.raises(CodeObjectError, match="undefined symbol 'missing'"): load_code_object(path.read_bytes())


@need_asm
@need_readelf
def test_pc_relative_relocations_never_reach_the_loader(tmp_path):
  """R_AMDGPU_REL64/REL32 (an object's `sym - .`) are resolved by ld.lld when the symbol is hidden, and refused when
  it is preemptible: a linked code object carries none, and its image holds the link-time differences at any base."""
  src = ('  .section .rodata.t,"a"\n  .p2align 3\n  .globl target\n{vis}target:\n  .quad 0\n'
         '  .data\n  .p2align 3\n  .globl table\ntable:\n  .quad target - . + 16\n  .long target - .\n')
  obj = tmp_path / "o"
  obj.mkdir()
  (obj / "r.s").write_text(src.format(vis="") + META)
  subprocess.run(["llvm-mc-19", "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx1100", "-filetype=obj", "r.s", "-o", "r.o"], cwd=obj, check=True)
  assert re.findall(r"R_AMDGPU_REL(?:64|32)", tool(READELF, "-r", str(obj / "r.o"))) == ["R_AMDGPU_REL64", "R_AMDGPU_REL32"]
  refused = subprocess.run([LLD, "-shared", "r.o", "-o", "r.hsaco"], cwd=obj, capture_output=True, text=True)
  assert refused.returncode != 0 and "R_AMDGPU_REL64 cannot be used against symbol 'target'" in refused.stderr
  path = assemble(tmp_path, src.format(vis="  .hidden target\n"))
  co = load_code_object(path.read_bytes(), target="gfx1100")
  syms = {name: v for v, name in re.findall(r"^\s*\d+: ([0-9a-f]{16})\s+\d+ NOTYPE\s+\w+\s+\w+\s+\d+ (\w+)$", tool(READELF, "-s", "-W", str(path)), re.M)}
  target, table = int(syms["target"], 16), int(syms["table"], 16)
  assert not co.relocations
  for base in (0, 0x7f12_3400_0000):
    img = co.image_at(base)
    assert struct.unpack_from("<q", img, table)[0] == target - table + 16 and struct.unpack_from("<i", img, table + 8)[0] == target - table - 8


def compile_src(tmp_path: Path, mcpu: str, src: str) -> bytes:
  (tmp_path / "r.cl").write_text(src)
  subprocess.run([CLANG, "-target", "amdgcn-amd-amdhsa", f"-mcpu={mcpu}", "-nogpulib", "-O2", "-c", "r.cl", "-o", "r.o",
                  "-Wno-everything"], cwd=tmp_path, check=True, capture_output=True)
  subprocess.run([LLD, "-shared", "r.o", "-o", "r.hsaco"], cwd=tmp_path, check=True, capture_output=True)
  return (tmp_path / "r.hsaco").read_bytes()


MFMA_SRC = """typedef float f16v __attribute__((ext_vector_type(16)));
typedef half h4 __attribute__((ext_vector_type(4)));
__kernel void mfma(__global f16v *out, __global const h4 *a) {
  f16v acc[8];
  for (int i = 0; i < 8; i++) acc[i] = out[i];
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < 8; i++) acc[i] = __builtin_amdgcn_mfma_f32_32x32x8f16(a[k], a[k + i], acc[i], 0, 0, 0);
  for (int i = 0; i < 8; i++) out[i] = acc[i];
}
"""


@need_clang
def test_agprs_are_part_of_the_unified_vgpr_count(tmp_path):
  """gfx90a+: .vgpr_count is the unified register file's total (arch VGPRs, then the AGPRs); .agpr_count is the AGPR
  share of it, not more registers on top (AMDGPUHSAMetadataStreamer; the descriptor's granulated count agrees)."""
  k = load_code_object(compile_src(tmp_path, "gfx942", MFMA_SRC), target="gfx942").kernels["mfma"]
  assert k.meta.agpr_count >= 128 and k.meta.vgpr_count > k.meta.agpr_count
  assert 0 <= k.descriptor.vgprs - k.meta.vgpr_count < k.descriptor.vgpr_granule
  assert k.meta.vgpr_count + k.meta.agpr_count > 256   # counted twice, the kernel would need more than it has
  check_resources(k, elf.DeviceLimits("gfx942", max_vgprs=k.meta.vgpr_count, wavefront_sizes=(64,)))
  with pytest.raises(CodeObjectError, match=f"uses {k.meta.vgpr_count} VGPRs"):
    check_resources(k, elf.DeviceLimits("gfx942", max_vgprs=k.meta.vgpr_count - 1, wavefront_sizes=(64,)))


@need_clang
@pytest.mark.parametrize("mcpu,top", [("gfx1100", 105), ("gfx1201", 105), ("gfx942", 101)])
def test_the_sgpr_limit_counts_vcc_and_the_other_extra_sgprs(tmp_path, mcpu, top):
  """A kernel that uses the highest addressable SGPR is valid: .sgpr_count adds VCC (and on gfx9 FLAT_SCRATCH and
  XNACK_MASK) to it, so the check is against LLVM's non-addressable maximum (108 on gfx10+, 112 on gfx9)."""
  src = f'__kernel void k(__global int *p) {{ __asm__ volatile("s_mov_b32 s{top}, 0" ::: "s{top}", "vcc"); p[0] = 1; }}\n'
  k = load_code_object(compile_src(tmp_path, mcpu, src), target=mcpu).kernels["k"]
  assert k.meta.sgpr_count > top + 1   # the extra SGPRs are in the count
  check_resources(k, limits_for(mcpu))


@need_clang
@need_asm
def test_an_argument_outside_the_kernarg_segment_is_refused(tmp_path):
  """The launch packs every argument at its metadata offset: one past the segment's end (or before its start) is a
  broken code object, refused at load rather than a struct error (or a silent write elsewhere) at the first launch."""
  text = tool(CLANG, "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1100", "-nogpulib", "-O2", "-S", "-o", "-", "-Wno-everything",
              str(kernels.KERNELS_DIR / "fill.cl"))
  for bad in ("4000", "-8"):
    broken = re.sub(r"(\.offset:\s+)0\b", rf"\g<1>{bad}", text, count=1)
    assert broken != text
    (tmp_path / "b.s").write_text(broken)
    subprocess.run(["llvm-mc-19", "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx1100", "-filetype=obj", "b.s", "-o", "b.o"],
                   cwd=tmp_path, check=True, capture_output=True)
    subprocess.run([LLD, "-shared", "b.o", "-o", "b.hsaco"], cwd=tmp_path, check=True, capture_output=True)
    with pytest.raises(CodeObjectError, match=f"offset {bad} .* outside its .*kernarg segment"):
      load_code_object((tmp_path / "b.hsaco").read_bytes(), target="gfx1100")
