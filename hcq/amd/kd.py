"""The AMDHSA kernel descriptor (64 bytes, one per kernel, symbol <name>.kd): raw words and decoded fields.

Offsets and bit positions come from rawgpu.autogen.amd.hsa (generated from LLVM's AMDHSAKernelDescriptor.h); this
module only names the fields after the assembler's .amdhsa_* directives, so they compare directly with what
llvm-objdump prints, and picks the ones that apply to a generation.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from rawgpu.autogen.amd import hsa

SIZE = 64
_OFFSETS = {"group_segment_fixed_size": (hsa.GROUP_SEGMENT_FIXED_SIZE_OFFSET, "<I"),
            "private_segment_fixed_size": (hsa.PRIVATE_SEGMENT_FIXED_SIZE_OFFSET, "<I"),
            "kernarg_size": (hsa.KERNARG_SIZE_OFFSET, "<I"),
            "kernel_code_entry_byte_offset": (hsa.KERNEL_CODE_ENTRY_BYTE_OFFSET_OFFSET, "<q"),
            "compute_pgm_rsrc3": (hsa.COMPUTE_PGM_RSRC3_OFFSET, "<I"), "compute_pgm_rsrc1": (hsa.COMPUTE_PGM_RSRC1_OFFSET, "<I"),
            "compute_pgm_rsrc2": (hsa.COMPUTE_PGM_RSRC2_OFFSET, "<I"),
            "kernel_code_properties": (hsa.KERNEL_CODE_PROPERTIES_OFFSET, "<H"),
            "kernarg_preload": (hsa.KERNARG_PRELOAD_OFFSET, "<H")}
_RESERVED = ((hsa.RESERVED0_OFFSET, 4), (hsa.RESERVED1_OFFSET, 20), (hsa.RESERVED3_OFFSET, 4))

# Our field names are the assembler's .amdhsa_* directive names; the right side names LLVM's field, whose
# generation prefix (GFX6_GFX11_, GFX12_PLUS_, GFX90A_, ...) says where it applies.
_NAMES = {
  "compute_pgm_rsrc1": {
    "granulated_workitem_vgpr_count": "GRANULATED_WORKITEM_VGPR_COUNT", "granulated_wavefront_sgpr_count":
    "GRANULATED_WAVEFRONT_SGPR_COUNT", "priority": "PRIORITY", "float_round_mode_32": "FLOAT_ROUND_MODE_32",
    "float_round_mode_16_64": "FLOAT_ROUND_MODE_16_64", "float_denorm_mode_32": "FLOAT_DENORM_MODE_32",
    "float_denorm_mode_16_64": "FLOAT_DENORM_MODE_16_64", "priv": "PRIV", "dx10_clamp": "GFX6_GFX11_ENABLE_DX10_CLAMP",
    "round_robin_scheduling": "GFX12_PLUS_ENABLE_WG_RR_EN", "debug_mode": "DEBUG_MODE",
    "ieee_mode": "GFX6_GFX11_ENABLE_IEEE_MODE", "disable_perf": "GFX12_PLUS_DISABLE_PERF", "bulky": "BULKY",
    "cdbg_user": "CDBG_USER", "fp16_overflow": "GFX9_PLUS_FP16_OVFL", "workgroup_processor_mode": "GFX10_PLUS_WGP_MODE",
    "memory_ordered": "GFX10_PLUS_MEM_ORDERED", "forward_progress": "GFX10_PLUS_FWD_PROGRESS"},
  "compute_pgm_rsrc2": {
    "enable_private_segment": "ENABLE_PRIVATE_SEGMENT", "user_sgpr_count": "USER_SGPR_COUNT",
    "enable_trap_handler": "GFX6_GFX11_ENABLE_TRAP_HANDLER", "system_sgpr_workgroup_id_x": "ENABLE_SGPR_WORKGROUP_ID_X",
    "system_sgpr_workgroup_id_y": "ENABLE_SGPR_WORKGROUP_ID_Y", "system_sgpr_workgroup_id_z": "ENABLE_SGPR_WORKGROUP_ID_Z",
    "system_sgpr_workgroup_info": "ENABLE_SGPR_WORKGROUP_INFO", "system_vgpr_workitem_id": "ENABLE_VGPR_WORKITEM_ID",
    "exception_address_watch": "ENABLE_EXCEPTION_ADDRESS_WATCH", "exception_memory": "ENABLE_EXCEPTION_MEMORY",
    "granulated_lds_size": "GRANULATED_LDS_SIZE",
    "exception_fp_ieee_invalid_op": "ENABLE_EXCEPTION_IEEE_754_FP_INVALID_OPERATION",
    "exception_fp_denorm_src": "ENABLE_EXCEPTION_FP_DENORMAL_SOURCE",
    "exception_fp_ieee_div_zero": "ENABLE_EXCEPTION_IEEE_754_FP_DIVISION_BY_ZERO",
    "exception_fp_ieee_overflow": "ENABLE_EXCEPTION_IEEE_754_FP_OVERFLOW",
    "exception_fp_ieee_underflow": "ENABLE_EXCEPTION_IEEE_754_FP_UNDERFLOW",
    "exception_fp_ieee_inexact": "ENABLE_EXCEPTION_IEEE_754_FP_INEXACT",
    "exception_int_div_zero": "ENABLE_EXCEPTION_INT_DIVIDE_BY_ZERO"},
  "compute_pgm_rsrc3": {
    "accum_offset": "GFX90A_ACCUM_OFFSET", "tg_split": "GFX90A_TG_SPLIT",
    "shared_vgpr_count": "GFX10_GFX11_SHARED_VGPR_COUNT", "inst_pref_size": "GFX11_INST_PREF_SIZE",
    "inst_pref_size ": "GFX12_PLUS_INST_PREF_SIZE", "trap_on_start": "GFX11_TRAP_ON_START",
    "trap_on_end": "GFX11_TRAP_ON_END", "glg_en": "GFX12_PLUS_GLG_EN", "image_op": "GFX11_PLUS_IMAGE_OP"},
  "kernel_code_properties": {
    "user_sgpr_private_segment_buffer": "ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER", "user_sgpr_dispatch_ptr":
    "ENABLE_SGPR_DISPATCH_PTR", "user_sgpr_queue_ptr": "ENABLE_SGPR_QUEUE_PTR", "user_sgpr_kernarg_segment_ptr":
    "ENABLE_SGPR_KERNARG_SEGMENT_PTR", "user_sgpr_dispatch_id": "ENABLE_SGPR_DISPATCH_ID",
    "user_sgpr_flat_scratch_init": "ENABLE_SGPR_FLAT_SCRATCH_INIT", "user_sgpr_private_segment_size":
    "ENABLE_SGPR_PRIVATE_SEGMENT_SIZE", "wavefront_size32": "ENABLE_WAVEFRONT_SIZE32",
    "uses_dynamic_stack": "USES_DYNAMIC_STACK"},
  "kernarg_preload": {"kernarg_preload_length": "LENGTH", "kernarg_preload_offset": "OFFSET"},
}
_PREFIX = {"compute_pgm_rsrc1": "COMPUTE_PGM_RSRC1_", "compute_pgm_rsrc2": "COMPUTE_PGM_RSRC2_",
           "compute_pgm_rsrc3": "COMPUTE_PGM_RSRC3_", "kernel_code_properties": "KERNEL_CODE_PROPERTY_",
           "kernarg_preload": "KERNARG_PRELOAD_SPEC_"}


def _gen(tag: str) -> float: return 9.1 if tag == "90A" else float(tag)


def _span(field_name: str) -> tuple[float, float]:
  """Generations a field applies to, from LLVM's prefix: GFX6_GFX11_ -> 6..11, GFX12_PLUS_ -> 12.., GFX11_ -> 11."""
  m = re.match(r"GFX(\d+A?)_(?:(PLUS)_|GFX(\d+)_)?", field_name)
  if not m: return 0, 99
  lo = _gen(m[1])
  if m[2]: return lo, 99
  if m[3]: return lo, float(m[3])
  return lo, int(lo)


# word -> {name: [(shift, width, first gen, last gen), ...]}; a name may map to a different field per generation
BITS: dict[str, dict[str, list[tuple[int, int, float, float]]]] = {}
for _word, _names in _NAMES.items():
  for _name, _f in _names.items():
    _full = _PREFIX[_word] + _f
    BITS.setdefault(_word, {}).setdefault(_name.strip(), []).append(
      (getattr(hsa, _full + "_SHIFT"), getattr(hsa, _full + "_WIDTH"), *_span(_f)))
# User SGPRs in the order the hardware loads them, with their sizes in SGPRs (AMDGPUUsage "Initial Kernel Execution State").
USER_SGPR_ORDER = (("user_sgpr_private_segment_buffer", 4), ("user_sgpr_dispatch_ptr", 2), ("user_sgpr_queue_ptr", 2),
                   ("user_sgpr_kernarg_segment_ptr", 2), ("user_sgpr_dispatch_id", 2), ("user_sgpr_flat_scratch_init", 2),
                   ("user_sgpr_private_segment_size", 1))


def _decode(word: int, bits: dict[str, list[tuple[int, int, float, float]]], gen: float) -> dict[str, int]:
  out = {}
  for name, spans in bits.items():
    for shift, width, lo, hi in spans:
      if lo <= gen and int(gen) <= hi: out[name] = (word >> shift) & ((1 << width) - 1)
  return out


@dataclass(frozen=True)
class KernelDescriptor:
  """One kernel descriptor. `gen` is the gfx major version (9, 10, 11, 12; 9.1 for gfx90a/gfx94x)."""
  gen: float
  group_segment_fixed_size: int
  private_segment_fixed_size: int
  kernarg_size: int
  kernel_code_entry_byte_offset: int
  compute_pgm_rsrc1: int
  compute_pgm_rsrc2: int
  compute_pgm_rsrc3: int
  kernel_code_properties: int
  kernarg_preload: int
  reserved_nonzero: bool = False  # reserved bytes that should be zero are not (kept, not rejected: LLVM may use them later)
  fields: dict[str, int] = field(default_factory=dict, compare=False)

  @classmethod
  def from_bytes(cls, data: bytes, gen: float) -> "KernelDescriptor":
    if len(data) != SIZE: raise ValueError(f"a kernel descriptor is {SIZE} bytes, got {len(data)}")
    raw = {name: struct.unpack_from(fmt, data, off)[0] for name, (off, fmt) in _OFFSETS.items()}
    fields: dict[str, int] = {}
    for word, bits in BITS.items():
      if word == "compute_pgm_rsrc3" and gen < 9.1: continue  # no rsrc3 before gfx90a
      fields.update(_decode(raw[word], bits, gen))
    reserved = any(any(data[off:off + n]) for off, n in _RESERVED)
    return cls(gen, **raw, reserved_nonzero=reserved, fields=fields)

  def __getitem__(self, name: str) -> int: return self.fields[name]

  @property
  def wave32(self) -> bool: return bool(self.fields.get("wavefront_size32", 0))

  @property
  def wavefront_size(self) -> int: return 32 if self.wave32 else 64

  @property
  def vgpr_granule(self) -> int:
    """VGPRs per unit of granulated_workitem_vgpr_count (gfx90a+ counts arch and acc VGPRs together, in 8s)."""
    if self.gen >= 10: return 8 if self.wave32 else 4
    return 8 if self.gen >= 9.1 else 4

  @property
  def vgprs(self) -> int:
    """VGPRs allocated per work-item (what the assembler calls .amdhsa_next_free_vgpr, rounded up to the granule)."""
    return (self.fields["granulated_workitem_vgpr_count"] + 1) * self.vgpr_granule

  @property
  def accum_offset(self) -> int | None:
    """First AccVGPR in the unified register file (gfx90a+), in VGPRs."""
    return (self.fields["accum_offset"] + 1) * 4 if "accum_offset" in self.fields else None

  @property
  def user_sgpr_count(self) -> int: return self.fields["user_sgpr_count"]

  def user_sgprs(self) -> list[tuple[str, int, int]]:
    """The enabled user SGPRs as (name, first SGPR, count), in hardware order; preloaded kernargs follow them."""
    out, at = [], 0
    for name, n in USER_SGPR_ORDER:
      if self.fields[name]:
        out.append((name, at, n))
        at += n
    return out

  def kernarg_sgpr(self) -> int | None:
    """The SGPR that receives the kernarg segment pointer (low half), if enabled."""
    return next((at for name, at, _ in self.user_sgprs() if name == "user_sgpr_kernarg_segment_ptr"), None)
