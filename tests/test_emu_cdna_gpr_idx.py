"""CDNA3's VGPR indexing mode across the emulator's block cut: the block compiler follows s_set_gpr_idx_on ... off
through straight-line code and cuts long blocks at 256 instructions; a cut between s_set_gpr_idx_on and its v_mov_b32
compiled the move as not indexed, so it wrote the base register (random differential seed 8095 on gfx942: a fully
unrolled loop storing to a vector at uniform run-time indices lost one store)."""
from __future__ import annotations
import numpy as np

from test_emu_rdna_common import compile_cl, kernels, launch

# LLVM's pattern (on, one move, off) repeated 300 times in one straight-line run of 900 instructions: the cuts every
# 256 instructions land at every phase of the triple (256 % 3 == 1), so one of them falls right after an _on
SRC = r"""
__kernel void idx_long(__global int *out) {
  int id = __builtin_amdgcn_workitem_id_x(), lo, hi;
  __asm__ volatile(
    "v_mov_b32 v10, %2\n"
    "v_mov_b32 v11, 0\n"
    "v_add_u32 v12, 1000, %2\n"
    "s_mov_b32 s0, 1\n"
    ".rept 300\n"
    "s_set_gpr_idx_on s0, gpr_idx(DST)\n"
    "v_mov_b32 v10, v12\n"          // writes v11 (v10 + M0[7:0])
    "s_set_gpr_idx_off\n"
    ".endr\n"
    "v_mov_b32 %0, v10\n"
    "v_mov_b32 %1, v11\n"
    : "=v"(lo), "=v"(hi) : "v"(id) : "v10", "v11", "v12", "s0", "m0");
  out[2 * id] = lo; out[2 * id + 1] = hi;
}
"""


def test_indexed_move_after_a_block_cut():
  k = kernels(compile_cl(SRC, "gfx942"))["idx_long"]
  res, outs, _ = launch(k, "gfx942", [np.zeros(2 * 64, np.int32)], (1, 1, 1), (64, 1, 1))
  assert res.ok, res.fault
  out = outs[0].reshape(64, 2)
  lane = np.arange(64)
  np.testing.assert_array_equal(out[:, 0], lane)               # the base register is never written
  np.testing.assert_array_equal(out[:, 1], lane + 1000)        # every move's value
