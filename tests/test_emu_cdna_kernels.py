"""The committed CDNA3 (gfx942) code objects in kernels/ run on the emulator's compute units and give numpy's
answers. No GPU board models gfx942 yet, so these play the command processor themselves (test_emu_rdna_common.launch);
the code objects are loaded and relocated by hcq's loader, as the runtime would."""
from __future__ import annotations
import numpy as np
import pytest

from rawgpu import kernels as K
from rawgpu.hcq.amd.elf import load_code_object
from test_emu_rdna_common import Kernel, launch

ARCH, BASE = "gfx942", 0x1000_0000   # launch() places the code at BASE
u32, f32 = np.uint32, np.float32


def kernel(obj: str, name: str) -> Kernel:
  co = load_code_object(K.path(ARCH, obj).read_bytes(), ARCH)
  k = co.kernels[name]
  image = co.image_at(BASE)   # relocated for where launch() puts it (lut_u32 reads a table of pointers)
  return Kernel(name, image, 0, k.code_offset, image[k.descriptor_offset:k.descriptor_offset + 64])


def run(obj: str, name: str, args: list, grid, block=(256, 1, 1), **kw):
  res, outs, _ = launch(kernel(obj, name), ARCH, args, grid, block, **kw)
  assert res.ok, res.fault
  return outs


def test_fill_copy_vadd_saxpy():
  n, rng = 1000, np.random.default_rng(1)
  dst = run("fill", "fill_u32", [np.zeros(1024, u32), u32(7), u32(n)], (4, 1, 1))[0]
  assert (dst[:n] == 7).all() and (dst[n:] == 0).all()
  src = rng.integers(0, 2**32, 1024, dtype=u32)
  out = run("copy", "copy_u32", [src, np.zeros(1024, u32), u32(n)], (4, 1, 1))[1]
  assert (out[:n] == src[:n]).all() and (out[n:] == 0).all()
  a, b = rng.standard_normal(1024).astype(f32), rng.standard_normal(1024).astype(f32)
  c = run("vadd", "vadd_f32", [a, b, np.zeros(1024, f32), u32(n)], (4, 1, 1))[2]
  assert (c[:n] == a[:n] + b[:n]).all()
  y = run("saxpy", "saxpy_f32", [f32(1.5), a, b.copy(), u32(n)], (4, 1, 1))[1]   # the buffers, in argument order
  assert (y[:n] == f32(1.5) * a[:n] + b[:n]).all() and (y[n:] == b[n:]).all()   # -ffp-contract=off: mul, then add


def test_reductions_with_lds_and_barriers():
  x = np.random.default_rng(2).integers(0, 1000, 1000).astype(f32)
  s = run("reduce", "reduce_sum_f32", [x, np.zeros(4, f32), u32(1000)], (4, 1, 1))[1]
  assert (s == [x[k * 256:(k + 1) * 256].sum() for k in range(4)]).all()   # integer-valued: any order is exact
  xi = np.random.default_rng(3).integers(0, 2**32, 1000, dtype=u32)
  si = run("reduce", "reduce_sum_u32", [xi, np.zeros(4, u32), u32(1000)], (4, 1, 1))[1]
  assert (si == [xi[k * 256:(k + 1) * 256].sum(dtype=u32) for k in range(4)]).all()


@pytest.mark.parametrize("name", ["matmul_naive_f32", "matmul_tiled_f32"])
def test_matmul(name):
  M, N, Kd = 20, 36, 24
  rng = np.random.default_rng(4)
  A, B = rng.integers(-8, 8, (M, Kd)).astype(f32), rng.integers(-8, 8, (Kd, N)).astype(f32)
  C = run("matmul", name, [A.ravel(), B.ravel(), np.zeros(M * N, f32), u32(M), u32(N), u32(Kd)],
          (-(-N // 16), -(-M // 16), 1), (16, 16, 1))[2]
  assert (C.reshape(M, N) == A @ B).all()


def test_atomic_counter_lut_scratch_and_ids():
  counter, old = run("atomic", "atomic_counter", [np.zeros(1, u32), np.zeros(512, u32), u32(500)], (2, 1, 1))
  assert counter[0] == 500 and sorted(old[:500]) == list(range(500))
  for which, table in ((0, [0, 1, 4, 9]), (1, [0, 1, 8, 27])):
    out = run("lut", "lut_u32", [np.zeros(256, u32), u32(which), u32(256)], (1, 1, 1))[0]
    assert (out == np.tile(table, 64)).all()
  i = np.arange(256)
  out = run("scratch", "scratch_u32", [np.zeros(256, u32), u32(5), u32(256)], (1, 1, 1))[0]
  assert (out == ((i * 7 + 5) & 63) ** 2 + 5).all()
  dst = run("store_ids", "store_ids", [np.zeros(3 * 100, u32), u32(100), u32(1000)], (3, 1, 1), (64, 1, 1))[0]
  assert all((dst[g * 100:g * 100 + 64] == 1000 + np.arange(64)).all() for g in range(3))
  assert (dst.reshape(3, 100)[:, 64:] == 0).all()


def test_empty_spin_and_fault():
  assert run("empty", "empty", [], (4, 1, 1), (64, 1, 1)) == []
  flag, done = run("spin", "spin_until", [np.full(1, 3, u32), u32(3), np.zeros(1, u32)], (1, 1, 1), (64, 1, 1))
  assert done[0] == 4
  res, _, _ = launch(kernel("spin", "spin_until"), ARCH, [np.zeros(1, u32), u32(3), np.zeros(1, u32)], (1, 1, 1), (64, 1, 1),
                     max_instructions=20_000)   # the flag never comes: it spins until the limit stops it
  assert not res.ok and "instruction limit" in res.fault
  res, _, _ = launch(kernel("fault", "fault_store"), ARCH, [np.uint64(0xdead_0000_0000), u32(1)], (1, 1, 1), (64, 1, 1))
  assert not res.ok and res.fault == "page fault" and res.fault_addr == 0xdead_0000_0000
