"""Buffer instructions (MUBUF; gfx12: VBUFFER) compiled by clang from tests/rdna_cases/buffer.cl, run on the emulator's
compute units for RDNA3, RDNA4 and CDNA3 against the ISA guides' range-checking rules, written out here on their own:

  RDNA3/RDNA4, by the descriptor's OOB_SELECT: 0 index >= num_records or offset + payload > stride; 1 index >=
  num_records; 2 num_records == 0; 3 (raw) offset + payload > num_records - soffset. FORMAT 0 without ADD_TID is
  an unbound descriptor (everything out of range).
  CDNA3: raw (no IDXEN) offset >= num_records; structured (IDXEN, stride != 0) index >= num_records.

Multi-dword loads and stores are checked a dword at a time; out-of-range loads give 0, stores and atomics are dropped.
In-range data must be the bytes at base + soffset + index * stride + offset."""
from __future__ import annotations
import os

import numpy as np
import pytest

from test_emu_rdna_common import compile_cl, kernels, launch, need, objdump

SRC = os.path.join(os.path.dirname(__file__), "rdna_cases", "buffer.cl")
N = 64
FMT_32 = {"gfx1100": 0x16 << 12, "gfx1201": 0x16 << 12, "gfx942": (4 << 15) | (7 << 12)}   # word3: a 32-bit format
CASES = [("gfx1100", s) for s in (0, 1, 2, 3)] + [("gfx1201", 3), ("gfx1201", 1), ("gfx942", None)]


def _elf(mcpu: str) -> bytes:
  need("clang-19", "ld.lld-19")
  return compile_cl(open(SRC).read(), mcpu)


def in_range(mcpu: str, sel, nrec: int, soff: int, off, payload: int, index=0, stride: int = 0, idxen: bool = False):
  off, index = np.asarray(off, np.int64), np.asarray(index, np.int64)
  shape = np.broadcast(off, index).shape
  if mcpu == "gfx942": ok = index < nrec if idxen else off < nrec
  else: ok = {0: ~((index >= nrec) | (off + payload > stride)), 1: index < nrec, 2: np.asarray(nrec != 0),
              3: index * stride + off + payload <= max(nrec - soff, 0)}[sel]
  return np.broadcast_to(ok, shape)


def words_at(mem_bytes: bytes, at: np.ndarray) -> np.ndarray:
  b = np.frombuffer(mem_bytes, np.uint8)
  return b[at[:, None] + np.arange(4)].copy().view(np.uint32).reshape(-1)


@pytest.mark.parametrize("mcpu,sel", CASES)
def test_raw_loads_and_stores_follow_the_range_rules(mcpu, sel):
  elf = _elf(mcpu)
  nrec, soff, dnrec = 100, 8, 300
  flags = FMT_32[mcpu] | ((sel or 0) << 28)
  rng = np.random.default_rng(7)
  src = rng.integers(0, 2**32, 256, dtype=np.uint64).astype(np.uint32)
  offs = np.array([4 * i for i in range(32)] + [3 * i + 1 for i in range(32)], np.uint32)
  dst = np.full(256, 0xffffffff, np.uint32)
  res, outs, _ = launch(kernels(elf)["raw"], mcpu, [src, offs, np.zeros(16 * N, np.uint32), dst, np.uint32(nrec), np.uint32(flags),
                        np.uint32(soff), np.uint32(dnrec)], (1, 1, 1), (N, 1, 1), wave64=mcpu == "gfx942")
  assert res.ok, res.fault
  out, got_dst = outs[2].reshape(N, 16), outs[3]
  sb, o = src.tobytes(), offs.astype(np.int64)
  def load(off, size):
    ok = in_range(mcpu, sel, nrec, soff, off, size)
    v = words_at(sb + bytes(16), soff + off) & np.uint32((1 << 8 * size) - 1 if size < 4 else 0xffffffff)
    return np.where(ok, v, 0).astype(np.uint32), ok
  for col, k in ((0, 0), (1, 0), (2, 1), (3, 0), (4, 1), (5, 2), (6, 3)):
    want, _ = load(o + 4 * k, 4)
    np.testing.assert_array_equal(out[:, col], want, err_msg=f"load dword {k} (column {col})")
  np.testing.assert_array_equal(out[:, 7], load(o + 1, 1)[0], err_msg="u8 load at offset + 1")
  np.testing.assert_array_equal(out[:, 8], load(o + 2, 2)[0], err_msg="u16 load at offset + 2")
  # stores (soffset 0): b32 at 4i, b64 at 256 + 8i (dword by dword), b16 at 512 + 2i
  want = np.full(256, 0xffffffff, np.uint32).view(np.uint8).copy()
  i = np.arange(N)
  def put(off, vals, size):
    for a, v in zip(off[in_range(mcpu, sel, dnrec, 0, off, size)], vals[in_range(mcpu, sel, dnrec, 0, off, size)]):
      want[a:a + size] = np.frombuffer(int(v).to_bytes(size, "little"), np.uint8)
  put(4 * i, 0xa0000000 | i, 4)
  put(256 + 8 * i, 0xb0000000 | i, 4)
  put(260 + 8 * i, 0xc0000000 | i, 4)
  put(512 + 2 * i, 0x5500 | i, 2)
  np.testing.assert_array_equal(got_dst.view(np.uint8), want)
  # the kernel really uses buffer instructions with VGPR, instruction and SGPR offsets
  text = " ".join(t for _, t, _ in objdump(elf, mcpu, wave64=mcpu == "gfx942"))
  assert "offen offset:1" in text and "buffer_store" in text


def test_an_unbound_descriptor_reads_zero_and_writes_nothing():
  """RDNA: FORMAT 0 (and no ADD_TID) marks the descriptor unbound: every access is out of range."""
  elf = _elf("gfx1100")
  src = np.arange(1, 257, dtype=np.uint32)
  dst = np.full(256, 7, np.uint32)
  res, outs, _ = launch(kernels(elf)["raw"], "gfx1100", [src, np.arange(N, dtype=np.uint32) * 4, np.full(16 * N, 9, np.uint32), dst,
                        np.uint32(1024), np.uint32(3 << 28), np.uint32(0), np.uint32(1024)], (1, 1, 1), (N, 1, 1))
  assert res.ok, res.fault
  assert not outs[2].reshape(N, 16)[:, :9].any()
  assert (outs[3] == 7).all()


@pytest.mark.parametrize("mcpu,sel", [("gfx1100", 0), ("gfx1100", 1), ("gfx1201", 1), ("gfx942", None)])
def test_structured_index_stride_and_atomics(mcpu, sel):
  elf = _elf(mcpu)
  nrec, stride = 5, 16
  src = np.arange(1000, 1256, dtype=np.uint32)
  idx = (np.arange(N) % 8).astype(np.uint32)
  res, outs, _ = launch(kernels(elf)["structured"], mcpu, [src, idx, np.zeros(N, np.uint32), np.uint32(nrec),
                        np.uint32(FMT_32[mcpu] | ((sel or 0) << 28)), np.uint32(stride)], (1, 1, 1), (N, 1, 1), wave64=mcpu == "gfx942")
  assert res.ok, res.fault
  ok = in_range(mcpu, sel, nrec, 0, 4, 4, idx.astype(np.int64), stride, idxen=True)
  np.testing.assert_array_equal(outs[2], np.where(ok, src[idx * 4 + 1], 0))
  want = src.copy()
  for k in idx[in_range(mcpu, sel, nrec, 0, 0, 4, idx.astype(np.int64), stride, idxen=True)]: want[k * 4] += 1
  np.testing.assert_array_equal(outs[0], want)


def test_a_swizzled_buffer_is_a_clear_fault():
  elf = _elf("gfx1100")
  res, _, _ = launch(kernels(elf)["structured"], "gfx1100", [np.zeros(256, np.uint32), np.zeros(N, np.uint32), np.zeros(N, np.uint32),
                     np.uint32(5), np.uint32(FMT_32["gfx1100"]), np.uint32(0x4010)], (1, 1, 1), (N, 1, 1))
  assert not res.ok and "swizzled buffer" in res.fault and "not modelled" in res.fault
