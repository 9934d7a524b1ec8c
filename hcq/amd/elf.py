"""AMDGPU HSA code objects (v4, v5, v6) as LLVM links them: kernels, descriptors, relocations, image, metadata.

    co = load_code_object(data, target="gfx1100")
    k = co.kernels["vadd_f32"]           # Kernel: descriptor (kd.KernelDescriptor), metadata (KernelMeta), offsets
    image = co.image_at(base)            # loadable segments laid out by vaddr, relocations applied for base
    pgm = base + k.code_offset           # what COMPUTE_PGM_LO/HI point at (256-byte aligned)
    check_resources(k, limits_for("gfx1100"))

Anything malformed, truncated or for another target is a CodeObjectError; no other exception escapes.
"""
from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from typing import Any

from rawgpu.errors import CodeObjectError
from rawgpu.hcq.amd import kd as kdesc
from rawgpu.hcq.amd.msgpack import MsgpackError, unpackb

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
ABI_VERSION_TO_CODE_OBJECT = {2: 4, 3: 5, 4: 6}  # e_ident[EI_ABIVERSION] -> code object version
NT_AMDGPU_METADATA = 32
EF_AMDGPU_MACH = 0x0ff
EF_AMDGPU_FEATURE_XNACK = 0x300
EF_AMDGPU_FEATURE_SRAMECC = 0xc00
EF_AMDGPU_GENERIC_VERSION_SHIFT = 24
_FEATURE_SETTING = {0: "unsupported", 1: "any", 2: "off", 3: "on"}
# e_flags machine numbers (EF_AMDGPU_MACH_AMDGCN_*) for the targets rawgpu knows; the test checks them against LLVM.
MACH = {
  "gfx900": 0x02c, "gfx906": 0x02f, "gfx908": 0x030, "gfx90a": 0x03f, "gfx940": 0x040, "gfx941": 0x04b, "gfx942": 0x04c,
  "gfx1030": 0x036, "gfx1100": 0x041, "gfx1101": 0x046, "gfx1102": 0x047, "gfx1103": 0x044,
  "gfx1150": 0x043, "gfx1151": 0x04a, "gfx1200": 0x048, "gfx1201": 0x04e,
  "gfx10-3-generic": 0x053, "gfx11-generic": 0x054, "gfx12-generic": 0x059,
}
MACH_NAME = {v: k for k, v in MACH.items()}
GENERIC_COVERS = {  # which concrete targets a generic code object runs on
  "gfx10-3-generic": ("gfx1030",),
  "gfx11-generic": ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151"),
  "gfx12-generic": ("gfx1200", "gfx1201"),
}
MAX_IMAGE = 256 << 20  # a bigger loadable image is certainly not a kernel library worth trying to map


def gfx_gen(target: str) -> float:
  """ISA generation used by the descriptor decoder: 9, 9.1 (gfx90a and gfx94x: AccVGPRs, rsrc3), 10, 11, 12."""
  if target in ("gfx90a", "gfx940", "gfx941", "gfx942"): return 9.1
  digits = target[3:].split("-")[0]  # "1100", "942", or the major alone in generic names ("11" of gfx11-generic)
  return float(digits if "-" in target else digits[:-2])


# Relocation types LLVM uses in linked AMDGPU code objects (llvm/BinaryFormat/ELFRelocs/AMDGPU.def).
R_AMDGPU_NONE, R_AMDGPU_ABS32_LO, R_AMDGPU_ABS32_HI, R_AMDGPU_ABS64, R_AMDGPU_REL32, R_AMDGPU_REL64 = 0, 1, 2, 3, 4, 5
R_AMDGPU_ABS32, R_AMDGPU_REL32_LO, R_AMDGPU_REL32_HI, R_AMDGPU_RELATIVE64 = 6, 10, 11, 13
RELOC_NAMES = {0: "R_AMDGPU_NONE", 1: "R_AMDGPU_ABS32_LO", 2: "R_AMDGPU_ABS32_HI", 3: "R_AMDGPU_ABS64",
               4: "R_AMDGPU_REL32", 5: "R_AMDGPU_REL64", 6: "R_AMDGPU_ABS32", 10: "R_AMDGPU_REL32_LO",
               11: "R_AMDGPU_REL32_HI", 13: "R_AMDGPU_RELATIVE64"}
_RELOC_SIZE = {0: 0, 1: 4, 2: 4, 3: 8, 4: 4, 5: 8, 6: 4, 10: 4, 11: 4, 13: 8}


@dataclass(frozen=True)
class Relocation:
  offset: int  # vaddr (image offset) patched
  type: int
  symbol: str  # "" when the relocation has no symbol (RELATIVE64)
  symbol_value: int | None  # vaddr of the symbol when defined here
  addend: int

  @property
  def type_name(self) -> str: return RELOC_NAMES[self.type]


@dataclass(frozen=True)
class KernelArg:
  name: str
  offset: int
  size: int
  value_kind: str  # by_value, global_buffer, hidden_block_count_x, ...
  address_space: str | None = None  # global, constant, local, ... for pointers
  type_name: str | None = None
  is_const: bool = False
  raw: dict = field(default_factory=dict, compare=False, repr=False)

  @property
  def hidden(self) -> bool: return self.value_kind.startswith("hidden_")


@dataclass(frozen=True)
class KernelMeta:
  """One entry of amdhsa.kernels in the metadata note (the keys without their leading dot)."""
  name: str
  symbol: str
  args: tuple[KernelArg, ...]
  kernarg_segment_size: int
  kernarg_segment_align: int
  group_segment_fixed_size: int
  private_segment_fixed_size: int
  sgpr_count: int
  vgpr_count: int
  agpr_count: int
  wavefront_size: int
  max_flat_workgroup_size: int
  reqd_workgroup_size: tuple[int, int, int] | None
  uses_dynamic_stack: bool
  sgpr_spill_count: int
  vgpr_spill_count: int
  raw: dict = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Kernel:
  name: str
  descriptor_offset: int  # vaddr of <name>.kd, 64-byte aligned
  code_offset: int  # vaddr of the first instruction, 256-byte aligned
  descriptor: kdesc.KernelDescriptor
  meta: KernelMeta


@dataclass(frozen=True)
class CodeObject:
  target: str  # gfx1100, gfx942, gfx11-generic, ...
  code_object_version: int  # 4, 5, 6
  xnack: str  # unsupported / any / off / on
  sramecc: str
  generic_version: int  # 0 unless a v6 generic target
  segments: tuple[tuple[int, int, int, int], ...]  # (vaddr, memsz, flags, align) of each PT_LOAD
  image: bytes  # loadable segments laid out by vaddr from 0, relocations not applied
  align: int  # the load address must be a multiple of this
  relocations: tuple[Relocation, ...]
  kernels: dict[str, Kernel]
  metadata: dict  # the whole decoded note, keys as LLVM writes them ("amdhsa.kernels", ...)

  def image_at(self, base: int) -> bytes:
    """The image with every relocation applied for loading at GPU virtual address base."""
    if base % self.align:
      raise CodeObjectError(f"load address 0x{base:x} is not a multiple of the code object's {self.align}-byte alignment")
    img = bytearray(self.image)
    for r in self.relocations:
      s = base + (r.symbol_value or 0)
      p = base + r.offset
      value = {R_AMDGPU_RELATIVE64: base + r.addend, R_AMDGPU_ABS64: s + r.addend, R_AMDGPU_ABS32: s + r.addend,
               R_AMDGPU_ABS32_LO: (s + r.addend) & 0xffffffff, R_AMDGPU_ABS32_HI: (s + r.addend) >> 32,
               R_AMDGPU_REL64: s + r.addend - p, R_AMDGPU_REL32: s + r.addend - p,
               R_AMDGPU_REL32_LO: (s + r.addend - p) & 0xffffffff, R_AMDGPU_REL32_HI: (s + r.addend - p) >> 32}.get(r.type)
      if value is None: continue  # R_AMDGPU_NONE
      size = _RELOC_SIZE[r.type]
      img[r.offset:r.offset + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    return bytes(img)

  def runs_on(self, target: str) -> bool:
    return self.target == target or target in GENERIC_COVERS.get(self.target, ())


def _fail(what: str) -> CodeObjectError: return CodeObjectError(f"bad AMDGPU code object: {what}")


def load_code_object(data: bytes, target: str | None = None, name: str = "code object") -> CodeObject:
  """Parse an AMDGPU HSA code object. target (e.g. "gfx1100", optionally ":xnack-"/":sramecc+") must be able to run it."""
  try:
    co = _parse(bytes(data), name)
  except CodeObjectError:
    raise
  except MsgpackError as e:
    raise _fail(f"{name}: metadata note: {e}") from None
  except Exception as e:  # pyelftools and struct raise many kinds on hostile input; all mean the same thing here
    raise _fail(f"{name}: {type(e).__name__}: {e}") from None
  if target is not None: _check_target(co, target, name)
  return co


def _check_target(co: CodeObject, target: str, name: str) -> None:
  base, *features = target.split(":")
  if not co.runs_on(base):
    raise CodeObjectError(f"{name} is built for {co.target}, the device is {base}: rebuild it with -mcpu={base}")
  for feat in features:
    key, want = feat[:-1], {"+": "on", "-": "off"}.get(feat[-1:])
    have = {"xnack": co.xnack, "sramecc": co.sramecc}.get(key)
    if have is None or want is None: raise CodeObjectError(f"unknown target feature {feat!r} in {target!r}")
    if have in ("on", "off") and have != want:
      raise CodeObjectError(f"{name} is built with {key} {have}, the device runs {key} {want}: rebuild with -mcpu={target}")


def _parse(data: bytes, name: str) -> CodeObject:
  from elftools.elf.elffile import ELFFile
  if len(data) < 64 or data[:4] != b"\x7fELF": raise _fail(f"{name} is not an ELF file")
  if data[4] != 2 or data[5] != 1: raise _fail(f"{name} is not a 64-bit little-endian ELF")
  if data[7] != ELFOSABI_AMDGPU_HSA: raise _fail(f"{name} has OS ABI {data[7]}, not AMDGPU HSA ({ELFOSABI_AMDGPU_HSA})")
  if (cov := ABI_VERSION_TO_CODE_OBJECT.get(data[8])) is None:
    raise _fail(f"{name} has ABI version {data[8]}; rawgpu loads code object v4, v5 and v6 (-mcode-object-version=5)")
  e_type, e_machine = struct.unpack_from("<HH", data, 16)
  if e_machine != EM_AMDGPU: raise _fail(f"{name} is for machine {e_machine}, not AMDGPU ({EM_AMDGPU})")
  if e_type != 3: raise _fail(f"{name} is ELF type {e_type}, not a linked shared object (link it with ld.lld -shared)")
  e_flags = struct.unpack_from("<I", data, 48)[0]
  if (target := MACH_NAME.get(e_flags & EF_AMDGPU_MACH)) is None:
    raise _fail(f"{name} is for an unknown AMDGPU machine 0x{e_flags & EF_AMDGPU_MACH:03x}")
  xnack = _FEATURE_SETTING[(e_flags & EF_AMDGPU_FEATURE_XNACK) >> 8]
  sramecc = _FEATURE_SETTING[(e_flags & EF_AMDGPU_FEATURE_SRAMECC) >> 10]
  generic = e_flags >> EF_AMDGPU_GENERIC_VERSION_SHIFT
  if target.endswith("generic") and (cov < 6 or generic == 0):
    raise _fail(f"{name} is for {target} but has no generic version (needs code object v6)")

  elf = ELFFile(io.BytesIO(data))
  segments, image, align = _layout(elf, data, name)
  gen = gfx_gen(target)
  dynsym = elf.get_section_by_name(".dynsym")
  if dynsym is None: raise _fail(f"{name} has no .dynsym section (kernels are found through their .kd symbols)")
  symbols = {s.name: s for s in dynsym.iter_symbols() if s.name}
  metadata = _metadata(elf, data, name)
  metas = {}
  for entry in _list(metadata.get("amdhsa.kernels"), "amdhsa.kernels"):
    m = _kernel_meta(entry)
    metas[m.symbol] = m
  kernels = {}
  for sym_name, sym in symbols.items():
    if not sym_name.endswith(".kd") or sym["st_shndx"] == "SHN_UNDEF": continue
    kname, at = sym_name[:-3], sym["st_value"]
    if at % 64 or at + kdesc.SIZE > len(image):
      raise _fail(f"{name}: kernel descriptor {sym_name} at 0x{at:x} is misaligned or outside the loaded image")
    desc = kdesc.KernelDescriptor.from_bytes(image[at:at + kdesc.SIZE], gen)
    code = at + desc.kernel_code_entry_byte_offset
    if code % 256 or not any(v <= code < v + sz and fl & 1 for v, sz, fl, _ in segments):
      raise _fail(f"{name}: kernel {kname} entry 0x{code:x} is misaligned or not in an executable segment")
    if gen < 10 and desc.wave32: raise _fail(f"{name}: kernel {kname} asks for wave32 on {target}, which only runs wave64")
    if sym_name not in metas: raise _fail(f"{name}: kernel {kname} has no entry in the metadata note")
    kernels[kname] = Kernel(kname, at, code, desc, metas[sym_name])
  if not kernels and metas: raise _fail(f"{name}: the metadata names kernels but no .kd symbols are defined")
  relocs = _relocations(elf, symbols, len(image), name)
  return CodeObject(target, cov, xnack, sramecc, generic, segments, image, align, relocs, kernels, metadata)


def _layout(elf: Any, data: bytes, name: str) -> tuple[tuple, bytes, int]:
  loads = [seg for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD"]
  if not loads: raise _fail(f"{name} has no loadable segments")
  end = max(s["p_vaddr"] + s["p_memsz"] for s in loads)
  if end > MAX_IMAGE: raise _fail(f"{name} loads {end} bytes, more than the {MAX_IMAGE}-byte limit")
  image, segments, align = bytearray(end), [], 256
  spans = sorted((s["p_vaddr"], s["p_vaddr"] + s["p_memsz"]) for s in loads)
  if any(a_end > b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])): raise _fail(f"{name} has overlapping segments")
  for s in loads:
    off, filesz, memsz, vaddr = s["p_offset"], s["p_filesz"], s["p_memsz"], s["p_vaddr"]
    if filesz > memsz or off + filesz > len(data): raise _fail(f"{name}: a segment runs past the end of the file (truncated?)")
    image[vaddr:vaddr + filesz] = data[off:off + filesz]
    p_align = s["p_align"] or 1
    if p_align & (p_align - 1): raise _fail(f"{name}: segment alignment {p_align} is not a power of two")
    align = max(align, p_align)
    segments.append((vaddr, memsz, s["p_flags"], p_align))
  return tuple(segments), bytes(image), align


def _notes(data: bytes, off: int, size: int):
  """(name, type, desc) of each ELF note in data[off:off+size] (4-byte aligned, as AMDGPU code objects use)."""
  end = off + size
  if end > len(data): raise _fail("a note section runs past the end of the file (truncated?)")
  while off + 12 <= end:
    namesz, descsz, ntype = struct.unpack_from("<III", data, off)
    name_at = off + 12
    desc_at = name_at + (namesz + 3) // 4 * 4
    nxt = desc_at + (descsz + 3) // 4 * 4
    if desc_at + descsz > end: raise _fail("a note runs past the end of its section")
    yield data[name_at:name_at + namesz].rstrip(b"\0"), ntype, data[desc_at:desc_at + descsz]
    off = nxt


def _metadata(elf: Any, data: bytes, name: str) -> dict:
  for sec in elf.iter_sections():
    if sec["sh_type"] != "SHT_NOTE": continue
    for owner, ntype, desc in _notes(data, sec["sh_offset"], sec["sh_size"]):
      if owner == b"AMDGPU" and ntype == NT_AMDGPU_METADATA:
        md = unpackb(desc)
        if not isinstance(md, dict): raise _fail(f"{name}: the metadata note is not a map")
        return md
  raise _fail(f"{name} has no NT_AMDGPU_METADATA note (is it a code object v4+ linked by ld.lld?)")


def _list(v: Any, what: str) -> list:
  if not isinstance(v, list): raise _fail(f"metadata {what} is {type(v).__name__}, not a list")
  return v


def _get(d: dict, key: str, kind: type | tuple, default: Any = ..., what: str = "") -> Any:
  if key not in d:
    if default is ...: raise _fail(f"metadata {what} has no {key}")
    return default
  v = d[key]
  if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
    raise _fail(f"metadata {what}{key} is {type(v).__name__} {v!r}")
  return v


def _kernel_meta(e: Any) -> KernelMeta:
  if not isinstance(e, dict): raise _fail("metadata amdhsa.kernels entry is not a map")
  kname = _get(e, ".name", str, what="kernel ")
  w = f"kernel {kname} "
  args = []
  for a in _list(e.get(".args", []), f"{w}.args"):
    if not isinstance(a, dict): raise _fail(f"metadata {w}argument is not a map")
    args.append(KernelArg(_get(a, ".name", str, "", w), _get(a, ".offset", int, what=w), _get(a, ".size", int, what=w),
                          _get(a, ".value_kind", str, what=w), _get(a, ".address_space", str, None, w),
                          _get(a, ".type_name", str, None, w), bool(_get(a, ".is_const", (bool, int), False, w)), a))
  kernarg_size = _get(e, ".kernarg_segment_size", int, what=w)
  for a in args:   # the launch packs each argument at its offset: one outside the segment is a broken code object
    if a.offset < 0 or a.size < 0 or a.offset + a.size > kernarg_size:
      raise _fail(f"metadata {w}argument {a.name or a.value_kind} at offset {a.offset} ({a.size} bytes) lies outside its {kernarg_size}-byte kernarg segment")
  reqd = _get(e, ".reqd_workgroup_size", list, None, w)
  if reqd is not None and (len(reqd) != 3 or not all(isinstance(x, int) and x > 0 for x in reqd)):
    raise _fail(f"metadata {w}.reqd_workgroup_size is {reqd!r}")
  return KernelMeta(
    kname, _get(e, ".symbol", str, what=w), tuple(args), kernarg_size,
    _get(e, ".kernarg_segment_align", int, what=w), _get(e, ".group_segment_fixed_size", int, what=w),
    _get(e, ".private_segment_fixed_size", int, what=w), _get(e, ".sgpr_count", int, what=w),
    _get(e, ".vgpr_count", int, what=w), _get(e, ".agpr_count", int, 0, w), _get(e, ".wavefront_size", int, what=w),
    _get(e, ".max_flat_workgroup_size", int, 1024, w), tuple(reqd) if reqd else None,
    bool(_get(e, ".uses_dynamic_stack", (bool, int), False, w)), _get(e, ".sgpr_spill_count", int, 0, w),
    _get(e, ".vgpr_spill_count", int, 0, w), e)


def _relocations(elf: Any, symbols: dict, image_size: int, name: str) -> tuple[Relocation, ...]:
  from elftools.elf.relocation import RelocationSection
  out = []
  for sec in elf.iter_sections():
    if not isinstance(sec, RelocationSection) or not sec["sh_flags"] & 2: continue  # only SHF_ALLOC (dynamic) ones
    if not sec.is_RELA(): raise _fail(f"{name}: {sec.name} uses REL relocations; AMDGPU code objects use RELA")
    symtab = elf.get_section(sec["sh_link"]) if sec["sh_link"] else None
    for r in sec.iter_relocations():
      rtype, sym_index = r["r_info_type"], r["r_info_sym"]
      if rtype not in RELOC_NAMES: raise _fail(f"{name}: unsupported relocation type {rtype} at 0x{r['r_offset']:x}")
      size = _RELOC_SIZE[rtype]
      if r["r_offset"] + size > image_size: raise _fail(f"{name}: relocation at 0x{r['r_offset']:x} is outside the image")
      sym_name, sym_value = "", None
      if sym_index:
        if symtab is None: raise _fail(f"{name}: relocation at 0x{r['r_offset']:x} names a symbol but there is no table")
        sym = symtab.get_symbol(sym_index)
        sym_name = sym.name
        if sym["st_shndx"] == "SHN_UNDEF":
          raise _fail(f"{name}: undefined symbol {sym_name!r}; rawgpu loads self-contained code objects only")
        sym_value = sym["st_value"]
      out.append(Relocation(r["r_offset"], rtype, sym_name, sym_value, r["r_addend"]))
  return tuple(out)


@dataclass(frozen=True)
class DeviceLimits:
  """What a device can give one kernel. Defaults per target from limits_for()."""
  target: str
  lds_per_workgroup: int = 65536
  max_private_segment_size: int = 128 << 10  # bytes of scratch per work-item
  max_sgprs: int = 108  # SGPRs per wave with VCC (and FLAT_SCRATCH, XNACK_MASK on gfx9), as .sgpr_count counts them
  max_vgprs: int = 256  # VGPRs per work-item (the unified arch + acc file on gfx90a+)
  wavefront_sizes: tuple[int, ...] = (32, 64)
  max_workgroup_size: int = 1024


def limits_for(target: str) -> DeviceLimits:
  # LLVM's getMaxNumSGPRs(Addressable=false): 106 addressable + VCC on gfx10+, 102 + 6 extra rounded to 112 on gfx9
  if gfx_gen(target) < 10: return DeviceLimits(target, max_sgprs=112, max_vgprs=512 if gfx_gen(target) >= 9.1 else 256,
                                              wavefront_sizes=(64,))
  return DeviceLimits(target)


def check_resources(k: Kernel, limits: DeviceLimits) -> None:
  """Raise CodeObjectError when the kernel needs more than the device has (LDS, scratch, registers, wave size)."""
  d, m, dev = k.descriptor, k.meta, limits.target
  lds = max(d.group_segment_fixed_size, m.group_segment_fixed_size)
  if lds > limits.lds_per_workgroup:
    raise CodeObjectError(f"kernel {k.name} needs {lds} bytes of LDS per workgroup, {dev} has {limits.lds_per_workgroup}")
  priv = max(d.private_segment_fixed_size, m.private_segment_fixed_size)
  if priv > limits.max_private_segment_size:
    raise CodeObjectError(f"kernel {k.name} needs {priv} bytes of scratch per work-item, {dev} allows {limits.max_private_segment_size}")
  if m.sgpr_count > limits.max_sgprs:
    raise CodeObjectError(f"kernel {k.name} uses {m.sgpr_count} SGPRs, {dev} has {limits.max_sgprs} per wave")
  # on gfx90a+ .vgpr_count is already the unified file's total (arch VGPRs rounded up to 4, then the AGPRs);
  # .agpr_count is the AGPR share of it
  if (vgprs := max(d.vgprs, m.vgpr_count)) > limits.max_vgprs:
    raise CodeObjectError(f"kernel {k.name} uses {vgprs} VGPRs, {dev} has {limits.max_vgprs}")
  if d.wavefront_size not in limits.wavefront_sizes:
    raise CodeObjectError(f"kernel {k.name} runs wave{d.wavefront_size}, {dev} runs {limits.wavefront_sizes}")


def check_launch(k: Kernel, local_size: tuple[int, int, int], limits: DeviceLimits | None = None) -> None:
  """Raise CodeObjectError when a workgroup shape does not fit the kernel (reqd_work_group_size, max flat size)."""
  n = local_size[0] * local_size[1] * local_size[2]
  if min(local_size) < 1: raise CodeObjectError(f"kernel {k.name}: workgroup size {local_size} has an empty dimension")
  if k.meta.reqd_workgroup_size and tuple(local_size) != k.meta.reqd_workgroup_size:
    raise CodeObjectError(f"kernel {k.name} was compiled for workgroup size {k.meta.reqd_workgroup_size}, launched with {local_size}")
  cap = min(k.meta.max_flat_workgroup_size, limits.max_workgroup_size if limits else 1024)
  if n > cap: raise CodeObjectError(f"kernel {k.name}: workgroup of {n} work-items is more than its maximum {cap}")
