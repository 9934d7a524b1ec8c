"""The AMDHSA kernel descriptor (64 bytes, one per kernel, symbol <name>.kd): raw words and decoded fields.

All bit positions live here, in one place. They are facts from LLVM's AMDHSAKernelDescriptor.h (the documented
layout in LLVM's AMDGPUUsage); field names follow the assembler's .amdhsa_* directives so that they can be compared
with what llvm-objdump prints.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

SIZE = 64
_LAYOUT = struct.Struct("<IIIIq20sIIIHH4s")  # offsets 0, 4, 8, 12, 16, 24, 44, 48, 52, 56, 58, 60

# name -> (shift, width, first gfx major, last gfx major); gfx "9.1" stands for gfx90a and later gfx9 (rsrc3 accum).
_Bits = dict[str, tuple[int, int, float, float]]
RSRC1: _Bits = {
  "granulated_workitem_vgpr_count": (0, 6, 0, 99), "granulated_wavefront_sgpr_count": (6, 4, 0, 99),
  "priority": (10, 2, 0, 99), "float_round_mode_32": (12, 2, 0, 99), "float_round_mode_16_64": (14, 2, 0, 99),
  "float_denorm_mode_32": (16, 2, 0, 99), "float_denorm_mode_16_64": (18, 2, 0, 99), "priv": (20, 1, 0, 99),
  "dx10_clamp": (21, 1, 0, 11), "round_robin_scheduling": (21, 1, 12, 99), "debug_mode": (22, 1, 0, 99),
  "ieee_mode": (23, 1, 0, 11), "disable_perf": (23, 1, 12, 99), "bulky": (24, 1, 0, 99), "cdbg_user": (25, 1, 0, 99),
  "fp16_overflow": (26, 1, 9, 99), "workgroup_processor_mode": (29, 1, 10, 99), "memory_ordered": (30, 1, 10, 99),
  "forward_progress": (31, 1, 10, 99),
}
RSRC2: _Bits = {
  "enable_private_segment": (0, 1, 0, 99), "user_sgpr_count": (1, 5, 0, 99), "enable_trap_handler": (6, 1, 0, 11),
  "system_sgpr_workgroup_id_x": (7, 1, 0, 99), "system_sgpr_workgroup_id_y": (8, 1, 0, 99),
  "system_sgpr_workgroup_id_z": (9, 1, 0, 99), "system_sgpr_workgroup_info": (10, 1, 0, 99),
  "system_vgpr_workitem_id": (11, 2, 0, 99), "exception_address_watch": (13, 1, 0, 99),
  "exception_memory": (14, 1, 0, 99), "granulated_lds_size": (15, 9, 0, 99),
  "exception_fp_ieee_invalid_op": (24, 1, 0, 99), "exception_fp_denorm_src": (25, 1, 0, 99),
  "exception_fp_ieee_div_zero": (26, 1, 0, 99), "exception_fp_ieee_overflow": (27, 1, 0, 99),
  "exception_fp_ieee_underflow": (28, 1, 0, 99), "exception_fp_ieee_inexact": (29, 1, 0, 99),
  "exception_int_div_zero": (30, 1, 0, 99),
}
RSRC3: _Bits = {
  "accum_offset": (0, 6, 9.1, 9.9), "tg_split": (16, 1, 9.1, 9.9),
  "shared_vgpr_count": (0, 4, 10, 11), "inst_pref_size": (4, 6, 11, 11), "trap_on_start": (10, 1, 11, 11),
  "trap_on_end": (11, 1, 11, 11), "glg_en": (13, 1, 12, 99), "image_op": (31, 1, 11, 99),
}
RSRC3_GFX12_INST_PREF_SIZE = (4, 8)  # same name, wider field on gfx12
CODE_PROPERTIES: _Bits = {
  "user_sgpr_private_segment_buffer": (0, 1, 0, 99), "user_sgpr_dispatch_ptr": (1, 1, 0, 99),
  "user_sgpr_queue_ptr": (2, 1, 0, 99), "user_sgpr_kernarg_segment_ptr": (3, 1, 0, 99),
  "user_sgpr_dispatch_id": (4, 1, 0, 99), "user_sgpr_flat_scratch_init": (5, 1, 0, 99),
  "user_sgpr_private_segment_size": (6, 1, 0, 99), "wavefront_size32": (10, 1, 10, 99),
  "uses_dynamic_stack": (11, 1, 0, 99),
}
KERNARG_PRELOAD: _Bits = {"kernarg_preload_length": (0, 7, 9.1, 99), "kernarg_preload_offset": (7, 9, 9.1, 99)}
# User SGPRs in the order the hardware loads them, with their sizes in SGPRs (AMDGPUUsage "Initial Kernel Execution State").
USER_SGPR_ORDER = (("user_sgpr_private_segment_buffer", 4), ("user_sgpr_dispatch_ptr", 2), ("user_sgpr_queue_ptr", 2),
                   ("user_sgpr_kernarg_segment_ptr", 2), ("user_sgpr_dispatch_id", 2), ("user_sgpr_flat_scratch_init", 2),
                   ("user_sgpr_private_segment_size", 1))


def _decode(word: int, bits: _Bits, gen: float) -> dict[str, int]:
  return {name: (word >> shift) & ((1 << width) - 1) for name, (shift, width, lo, hi) in bits.items() if lo <= gen <= hi}


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
    g, p, k, r0, entry, r1, rsrc3, rsrc1, rsrc2, props, preload, r3 = _LAYOUT.unpack(data)
    fields = {**_decode(rsrc1, RSRC1, gen), **_decode(rsrc2, RSRC2, gen), **_decode(props, CODE_PROPERTIES, gen),
              **_decode(preload, KERNARG_PRELOAD, gen)}
    if gen >= 9.1:
      fields.update(_decode(rsrc3, RSRC3, gen))
      if gen >= 12:
        shift, width = RSRC3_GFX12_INST_PREF_SIZE
        fields["inst_pref_size"] = (rsrc3 >> shift) & ((1 << width) - 1)
    return cls(gen, g, p, k, entry, rsrc1, rsrc2, rsrc3, props, preload, bool(r0 or any(r1) or any(r3)), fields)

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
