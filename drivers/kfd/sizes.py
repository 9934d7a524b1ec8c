"""Queue buffer sizes amdkfd insists on (kfd_queue.c: kfd_queue_ctx_save_restore_size, kfd_queue_acquire_buffers).

Since Linux 6.10 CREATE_QUEUE fails with EINVAL unless ctl_stack_size equals the node's, the context-save area is
at least cwsr_size, and the CWSR buffer is mapped with exactly (cwsr + debugger area) * XCCs bytes, page aligned.
"""
from __future__ import annotations
from dataclasses import dataclass

PAGE = 4096
SGPR_SIZE_PER_CU, LDS_SIZE_PER_CU, HWREG_SIZE_PER_CU = 0x4000, 0x10000, 0x1000
DEBUGGER_BYTES_PER_WAVE, DEBUGGER_BYTES_ALIGN = 32, 64
CSA_HEADER = 40   # sizeof the user context-save-area header


def align(x: int, a: int) -> int: return (x + a - 1) // a * a


@dataclass(frozen=True)
class QueueSizes:
  ctl_stack: int
  cwsr: int           # minimum ctx_save_restore_size
  debug_memory: int   # debugger area after each XCC's save area
  eop: int
  num_xcc: int = 1

  @property
  def cwsr_alloc(self) -> int:
    """Bytes of the CWSR buffer mapping (must match exactly)."""
    return align((self.cwsr + self.debug_memory) * self.num_xcc, PAGE)


def vgpr_size_per_cu(gfxv: int) -> int:
  if gfxv in (90402, 90010, 90008): return 0x80000
  if gfxv in (110000, 110001, 110501, 120000, 120001): return 0x60000  # larger VGPR files
  return 0x40000


def queue_sizes(gfxv: int, simd_count: int, simd_per_cu: int, array_count: int, simd_arrays_per_engine: int, num_xcc: int = 1) -> QueueSizes:
  """What the kernel computes for a topology node (all sizes in bytes)."""
  if gfxv < 80001: return QueueSizes(0, 0, 0, 0, num_xcc)
  cu_num = simd_count // simd_per_cu // num_xcc
  waves = min(cu_num * 40, array_count // simd_arrays_per_engine * 512) if gfxv < 100100 else cu_num * 32
  wg_data = align(cu_num * (vgpr_size_per_cu(gfxv) + SGPR_SIZE_PER_CU + LDS_SIZE_PER_CU + HWREG_SIZE_PER_CU), PAGE)
  ctl = align(CSA_HEADER + waves * (12 if gfxv >= 100100 else 8) + 8, PAGE)
  if gfxv // 10000 == 10: ctl = min(ctl, 0x7000)   # gfx10 hardware limit
  eop = 0x8000 if gfxv == 80002 else 4096
  return QueueSizes(ctl, ctl + wg_data, align(waves * DEBUGGER_BYTES_PER_WAVE, DEBUGGER_BYTES_ALIGN), eop, num_xcc)
