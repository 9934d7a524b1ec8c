"""The RDNA emulator runs real clang-19 code objects (tests/rdna_cases/features.cl) for gfx1100 wave32, gfx1100
wave64 and gfx1201; results are checked against numpy / exact Python arithmetic."""
from __future__ import annotations
import os
from fractions import Fraction

import numpy as np
import pytest

from test_emu_rdna_common import compile_cl, kernels, launch

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = [("gfx1100", ()), ("gfx1100", ("-mwavefrontsize64",)), ("gfx1201", ()), ("gfx942", ())]
IDS = ["gfx1100", "gfx1100-w64", "gfx1201", "gfx942"]

def _src() -> str:
  with open(os.path.join(HERE, "rdna_cases", "features.cl")) as f: return f.read()

@pytest.fixture(scope="module", params=TARGETS, ids=IDS)
def target(request):
  mcpu, flags = request.param
  return mcpu, kernels(compile_cl(_src(), mcpu, flags))

@pytest.fixture(scope="module", params=TARGETS, ids=IDS)
def target_dpp(request):
  """The same kernels with LLVM's atomic optimizer using DPP wave reductions instead of a scalar loop."""
  mcpu, flags = request.param
  return mcpu, kernels(compile_cl(_src(), mcpu, flags + ("-mllvm", "-amdgpu-atomic-optimizer-strategy=DPP")))

def run(target, name, args, grid, block):
  mcpu, ks = target
  res, outs, _ = launch(ks[name], mcpu, args, grid, block)
  assert res.ok, res.fault
  return outs

def test_vadd(target):
  rng = np.random.default_rng(1)
  n = 256 * 8 - 37
  a, b = rng.standard_normal(2048).astype(np.float32), rng.standard_normal(2048).astype(np.float32)
  c = np.full(2048, 7.0, np.float32)
  out = run(target, "vadd", [a, b, c, np.int32(n)], (8, 1, 1), (256, 1, 1))[2]
  np.testing.assert_array_equal(out[:n], a[:n] + b[:n])
  np.testing.assert_array_equal(out[n:], 7.0)  # lanes past n are masked off by EXEC

def test_saxpy(target):
  rng = np.random.default_rng(2)
  x, y = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
  out = run(target, "saxpy", [np.float32(1.5), x, y.copy(), np.int32(1000)], (4, 1, 1), (256, 1, 1))[1]
  np.testing.assert_array_equal(out[:1000], np.float32(1.5) * x[:1000] + y[:1000])  # -ffp-contract=off: no fma
  np.testing.assert_array_equal(out[1000:], y[1000:])

def test_reduce_lds_barrier(target):
  rng = np.random.default_rng(3)
  a = rng.standard_normal(256 * 6).astype(np.float32)
  part = run(target, "reduce", [a, np.zeros(6, np.float32)], (6, 1, 1), (256, 1, 1))[1]
  ref = a.reshape(6, 256).copy()
  k = 128
  while k:  # the same tree order, in float32
    ref[:, :k] = ref[:, :k] + ref[:, k:2 * k]
    k //= 2
  np.testing.assert_array_equal(part, ref[:, 0])

@pytest.mark.parametrize("dpp", [False, True], ids=["iterative", "dpp"])
def test_atomics(target, target_dpp, dpp):
  t = target_dpp if dpp else target
  rng = np.random.default_rng(4)
  a = rng.integers(-2**31, 2**31, 512).astype(np.int32)
  g = np.zeros(16, np.int32); g[1] = 2**31 - 1; g[2] = -2**31
  g, h = run(t, "atomics", [a, g, np.zeros(1, np.uint32)], (2, 1, 1), (256, 1, 1))[1:]
  with np.errstate(over="ignore"):
    assert g[0] == a.sum(dtype=np.int32)
  assert g[1] == a.min() and g[2] == a.max() and g[3] == np.bitwise_xor.reduce(a)
  assert h[0] == 0xffffffff
  np.testing.assert_array_equal(g[8:16], np.bincount(a & 7, minlength=8))
  # LDS: per group, sums over t & 3 added into g[4..7] (slot 2 also takes a max in between: order-dependent, skipped)
  with np.errstate(over="ignore"):
    for k in (0, 1, 3): assert g[4 + k] == a.reshape(2, 256)[:, k::4].sum(dtype=np.int32)

def test_atomic_returns_are_a_permutation(target):
  out = run(target, "atomic_ret", [np.zeros(1, np.int32), np.zeros(512, np.int32)], (2, 1, 1), (256, 1, 1))
  assert out[0][0] == 512
  np.testing.assert_array_equal(np.sort(out[1]), np.arange(512))

def test_cas_loop(target):
  rng = np.random.default_rng(5)
  a = rng.standard_normal(512).astype(np.float32)
  m = np.full(1, -np.inf, np.float32)
  assert run(target, "cas_fmax", [a, m], (2, 1, 1), (256, 1, 1))[1][0] == a.max()

def test_float_atomic_add(target):
  a = np.random.default_rng(6).integers(-50, 50, 512).astype(np.float32)
  assert run(target, "fatomic", [a, np.zeros(1, np.float32)], (2, 1, 1), (256, 1, 1))[1][0] == a.sum()

def test_float_atomics_on_lds_and_global_memory(target):
  """ds_add_rtn_f32 and global_atomic_add_f32 add floats (they once ran as integer adds of the bits); with positive
  addends the last add of a group returns its sum less its own value."""
  a = np.random.default_rng(16).integers(1, 50, 512).astype(np.float32)
  s = run(target, "fatomic_scoped", [a, np.zeros(513, np.float32)], (2, 1, 1), (256, 1, 1))[1]
  assert s[0] == a.sum()
  for g in range(2):
    part = slice(256 * g, 256 * (g + 1))
    assert (s[1:][part] + a[part]).max() == a[part].sum()

def test_matmul_2d_groups(target):
  n = 32
  rng = np.random.default_rng(7)
  A, B = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
  C = run(target, "matmul", [A, B, np.zeros((n, n), np.float32), np.int32(n)], (2, 2, 1), (16, 16, 1))[2]
  ref = np.zeros((n, n), np.float32)
  for k in range(n): ref = ref + np.outer(A[:, k], B[k, :])  # sequential float32 accumulation, no fma
  np.testing.assert_array_equal(C, ref)

def test_ids_3d(target):
  bx, by, bz, gx, gy, gz = 4, 3, 2, 3, 2, 2
  total = bx * by * bz * gx * gy * gz
  out = run(target, "ids3", [np.zeros(4 * total, np.int32)], (gx, gy, gz), (bx, by, bz))[0].reshape(-1, 4)
  assert (out[:, 3] == 1).all()
  want = [(x | y << 8 | z << 16, a | b << 8 | c << 16) for c in range(gz) for b in range(gy) for a in range(gx)
          for z in range(bz) for y in range(by) for x in range(bx)]
  np.testing.assert_array_equal(out[:, :2], np.array(want))
  assert (out[:, 2] == (bx | by << 8 | bz << 16)).all()

def test_cross_lane(target):
  mcpu, ks = target
  wave = 64 if ks["lanes"].props >> 10 & 1 == 0 else 32
  a = np.random.default_rng(8).integers(-1000, 1000, 256).astype(np.int32)
  out = run(target, "lanes", [a, np.zeros(8 * 256, np.int32)], (1, 1, 1), (256, 1, 1))[1].reshape(256, 8)
  lane = np.arange(256) % wave
  base = np.arange(256) - lane
  np.testing.assert_array_equal(out[:, 0], a[base])
  np.testing.assert_array_equal(out[:, 1], a[base + 5])
  np.testing.assert_array_equal(out[:, 2], a[base + (lane ^ 3)])
  np.testing.assert_array_equal(out[:, 3], a[base + ((lane & ~31) | ((lane & 31) ^ 1))])
  shr = np.where(lane % 16 == 0, 0, a[np.maximum(np.arange(256) - 1, 0)])
  np.testing.assert_array_equal(out[:, 4], shr)
  np.testing.assert_array_equal(out[:, 5], a[(np.arange(256) & ~3) | (3 - (np.arange(256) & 3))])
  np.testing.assert_array_equal(out[:, 6], np.minimum(lane, 32) if wave == 64 else lane)
  first_odd = np.array([next((b + k for k in range(wave) if a[b + k] & 1), -1) for b in base])  # its work-item id
  np.testing.assert_array_equal(out[:, 7], np.where(a & 1, first_odd, -1))

def test_scratch(target):
  a = np.random.default_rng(9).integers(-1000, 1000, 128).astype(np.int32)
  out = run(target, "scratch", [a, np.zeros(128, np.int32)], (2, 1, 1), (64, 1, 1))[1]
  v = a.astype(np.int64)
  buf = [(v * k + (k ^ v)) for k in range(48)]
  ref = sum(np.choose((v + 7 * k) & 47, buf) for k in range(12))
  np.testing.assert_array_equal(out, ref.astype(np.int32))

def test_mixed_precision(target):
  rng = np.random.default_rng(10)
  n = 64
  x = (rng.standard_normal(n) * 4).astype(np.float32)
  d = rng.standard_normal(n) * 1e3
  l = rng.integers(-2**62, 2**62, n, dtype=np.int64)
  of, od, ol = run(target, "mixed", [x, d, l, np.zeros(2 * n, np.float32), np.zeros(3 * n), np.zeros(3 * n, np.int64)],
                   (1, 1, 1), (64, 1, 1))[3:]
  h, k = x.astype(np.float16), np.float16(0.75)
  np.testing.assert_array_equal(of[0::2], (h * k + h).astype(np.float32))
  q = (h / (k + h)).astype(np.float32)  # f16 division runs through an f32 reciprocal: allow 1 f16 ulp
  assert (np.abs(of[1::2] - q) <= np.abs(np.spacing(q.astype(np.float16)).astype(np.float32))).all()
  np.testing.assert_array_equal(od[0::3], d / (d + 3.0))
  np.testing.assert_array_equal(od[1::3], np.sqrt(np.abs(d)))
  np.testing.assert_array_equal(od[2::3], [float(Fraction(v) * Fraction(v) - 1) for v in d])
  wrap = lambda v: ((v + 2**63) % 2**64) - 2**63
  L = [int(v) for v in l]
  np.testing.assert_array_equal(ol[0::3], [wrap(v * (v >> 7)) for v in L])
  np.testing.assert_array_equal(ol[1::3], [(abs(v) // ((v & 0xfff) | 1)) * (1 if v >= 0 else -1) for v in L])
  np.testing.assert_array_equal(ol[2::3], [(v % 2**64) % 1000003 for v in L])

def test_uniform_half_precision(target):
  """Half-precision math on a value uniform across the workgroup (SALU float on gfx12), each operation rounded to f16."""
  x = np.array([1.5, -2.25, 1000.0, 6.1e-5, 0.7, -0.0, 65000.0, 3.0], np.float32)
  of = run(target, "uniform_half", [x, np.zeros(4 * 8 * 64, np.float32)], (8, 1, 1), (64, 1, 1))[1].reshape(8, 64, 4)
  with np.errstate(over="ignore"): h, k = x.astype(np.float16), np.float16(0.75)   # 65000 * 0.75 + 65000 is inf in f16
  with np.errstate(over="ignore"): want = np.stack([(h * k + h), (h - k * k), np.where(h < k, h, k), (x.astype(np.float16).astype(np.float32) * 3).astype(np.float16)], 1).astype(np.float32)
  np.testing.assert_array_equal(of, np.broadcast_to(want[:, None, :], of.shape))

def test_division_at_the_edges_of_the_range(target):
  """Quotients that overflow, underflow to denormals or zero, and every special operand, bit for bit as IEEE division
  (any NaN equals any NaN). A huge denominator once came out infinite: div_scale scaled it up instead of down."""
  vals = [1.0, -3.0, 1e308, -1.7e308, 1e-308, 5e-324, 2.5e-310, 3.4e38, 1e-45, 1.2e-38, np.inf, -np.inf, 0.0, -0.0, np.nan, 7.0]
  n, d = np.array([a for a in vals for _ in vals]), np.array([b for _ in vals for b in vals])
  q, qf = run(target, "divide_pairs", [n, d, np.zeros(256), np.zeros(256, np.float32)], (4, 1, 1), (64, 1, 1))[2:]
  with np.errstate(all="ignore"): want, wantf = n / d, n.astype(np.float32) / d.astype(np.float32)
  same = (q.view(np.uint64) == want.view(np.uint64)) | (np.isnan(q) & np.isnan(want))
  assert same.all(), [(n[k], d[k], want[k], q[k]) for k in np.flatnonzero(~same)[:6]]
  # f32 division is OpenCL's 2.5 ulp here (no -cl-fp32-correctly-rounded-divide-sqrt): specials exact, the rest close
  finite = np.isfinite(wantf) & (wantf != 0)
  with np.errstate(invalid="ignore"): ok = np.where(finite, np.abs(qf - wantf) <= 3 * np.spacing(np.abs(wantf)), (qf.view(np.uint32) == wantf.view(np.uint32)) | (np.isnan(qf) & np.isnan(wantf)))
  assert ok.all(), [(n[k], d[k], wantf[k], qf[k]) for k in np.flatnonzero(~ok)[:6]]

def test_double_fma_at_the_edges_of_the_range(target):
  """v_fma_f64 on products that overflow, underflow or meet infinities, bit for bit as the C library's fma (any NaN
  equals any NaN). A finite product past the range against an infinite addend came out NaN: it was rounded first."""
  import ctypes, ctypes.util
  libm = ctypes.CDLL(ctypes.util.find_library("m"))
  libm.fma.restype, libm.fma.argtypes = ctypes.c_double, [ctypes.c_double] * 3
  vals = [1.0, -3.0, 1e300, -1.7e308, 1e-300, 5e-324, np.inf, -np.inf, 0.0, -0.0, np.nan, 2.0 ** 600]
  rng = np.random.default_rng(5013)
  a, b, c = (np.array(rng.choice(vals, 256)) for _ in range(3))
  a[:4], b[:4], c[:4] = [-4.96539734e20, 1e300, 1e300, 2.0 ** 600], [1.81221441e302, -1e300, 1e-300, 2.0 ** 600], [np.inf, np.inf, -np.inf, -1e308]
  o = run(target, "fma_triples", [a, b, c, np.zeros(256)], (4, 1, 1), (64, 1, 1))[3]
  want = np.array([libm.fma(x, y, z) for x, y, z in zip(a, b, c)])
  same = (o.view(np.uint64) == want.view(np.uint64)) | (np.isnan(o) & np.isnan(want))
  assert same.all(), [(a[k], b[k], c[k], want[k], o[k]) for k in np.flatnonzero(~same)[:6]]

def test_more_cross_lane_moves_and_apertures(target):
  """v_writelane, DPP8 and v_permlanex16 against numpy; the LDS and private aperture checks of generic pointers."""
  mcpu, ks = target
  wave = 64 if ks["lanes2"].props >> 10 & 1 == 0 else 32
  a = np.random.default_rng(9).integers(-1000, 1000, 256).astype(np.int32)
  out = run(target, "lanes2", [a, np.zeros(6 * 256, np.int32)], (1, 1, 1), (256, 1, 1))[1].reshape(256, 6)
  i = np.arange(256)
  lane, base = i % wave, i - i % wave
  np.testing.assert_array_equal(out[:, 0], np.where(lane == 7, a[base + 3], a))
  np.testing.assert_array_equal(out[:, 1], a[(i & ~7) | (7 - (i & 7))])
  np.testing.assert_array_equal(out[:, 2], a[i ^ 16])              # identity selects: the same lane of the other row
  assert (out[:, 3] == 1).all() and (out[:, 4] == 1).all() and (out[:, 5] == 0).all()

def test_uniform_half_bits_and_constants(target):
  """f16 values in the halves of a uniform word, f16 literals and inline constants (on gfx12 the scalar unit's s_cvt_hi,
  s_cmp_*_f16 and s_add_f16 with -1.0: an inline constant of a 16-bit operand is the f16 value, not f32's low half)."""
  w = np.array([0x3c00bc01, 0xc1003800, 0x7bff3800, 0x00013c00], np.uint32)
  o, c = run(target, "uniform_half_bits", [w, np.zeros(4, np.float32), np.zeros(4, np.uint32)], (4, 1, 1), (32, 1, 1))[1:]
  lo = (w & 0xffff).astype(np.uint16).view(np.float16)
  np.testing.assert_array_equal(o, (w >> 16).astype(np.uint16).view(np.float16).astype(np.float32))
  np.testing.assert_array_equal(c, (lo < -1).astype(np.uint32) + 2 * (lo == 0.5) + 4 * ((lo + np.float16(-1)) == np.float16(-0.5)))

def test_function_calls_below_the_entry_point(target):
  """Non-inlined functions that LLVM placed before the kernel: s_getpc/s_swappc_b64 into them, a stack array in
  scratch, s_setpc_b64 back, nested (the emulator used to fetch code only from the entry point on)."""
  a = np.random.default_rng(3).integers(-1000, 1000, 64).astype(np.int32)
  out, side = run(target, "calls", [a, np.zeros(64, np.int32), np.zeros(64, np.int32)], (1, 1, 1), (64, 1, 1))[1:]
  mix = lambda x, y: x * 3 + y
  np.testing.assert_array_equal(out, [mix(x, x + 1) + mix(x + 2, x) + (mix(x, 7) if x & 1 else 0) for x in a.tolist()])
  last = [(x, 7) if x & 1 else (x + 2, x) for x in a.tolist()]   # the last call's arguments, as it left side[]
  np.testing.assert_array_equal(side, [[p, q, p ^ q, p + q][p & 3] for p, q in last])


def test_registers_indexed_at_run_time(target):
  """VGPR indexing: GFX9's s_set_gpr_idx_on mode (the index in M0, then v_mov_b32 reads or writes VGPR n + M0),
  RDNA's v_movrels/v_movreld."""
  sel = np.random.default_rng(17).integers(0, 1 << 16, 128).astype(np.int32)
  sel[0] = 29
  out = run(target, "dyn_index", [sel, np.zeros(128 * 32, np.int32)], (2, 1, 1), (64, 1, 1))[1].reshape(128, 32)
  for g in range(128):
    v = [g] * 32
    for k in range(29): v[k] = v[(k * 7) & 31] + k
    v[sel[g] & 31] += 1000
    assert list(out[g]) == v, g


def test_packed_halves_shorts_and_bytes(target):
  rng = np.random.default_rng(18)
  n = 128
  a, b = rng.integers(-64, 64, (n, 2)).astype(np.float16) / 8, rng.integers(-64, 64, (n, 2)).astype(np.float16) / 8
  s, u = rng.integers(-2**15, 2**15, (n, 2)).astype(np.int16), rng.integers(0, 256, (n, 4)).astype(np.uint8)
  c, t, v = run(target, "packed_small", [a, b, np.zeros((n, 2), np.float16), s, np.zeros((n, 2), np.int16), u,
                                         np.zeros((n, 4), np.uint8)], (2, 1, 1), (64, 1, 1))[2::2]
  f16 = np.float16   # each operation rounds to half (the values here keep every product and sum exact anyway)
  assert (c[:, 0] == f16(a[:, 0] * b[:, 1]) + a[:, 1]).all() and (c[:, 1] == a[:, 1] - f16(b[:, 0] * a[:, 0])).all()
  assert (t[:, 0] == s[:, 1] >> 3).all() and (t[:, 1] == (s[:, 0] + s[:, 1]).astype(np.int16)).all()
  want = np.stack([u[:, 1] + 1, u[:, 0] * 3, u[:, 3] >> 1, u[:, 2] ^ u[:, 0]], 1).astype(np.uint8)
  assert (v == want).all()


def test_mode_register_read_back(target):
  """s_setreg_b32 then s_getreg_b32 of MODE's rounding field, and C's FLT_ROUNDS for it (0 toward zero, 1 nearest,
  2 upward, 3 downward) from the hardware's 0 nearest, 1 +inf, 2 -inf, 3 zero."""
  out = run(target, "mode_regs", [np.zeros(2 * 4 * 64, np.int32)], (4, 1, 1), (64, 1, 1))[0].reshape(4, 64, 2)
  for g in range(4):
    assert (out[g, :, 0] == [1, 2, 3, 0][g]).all() and (out[g, :, 1] == g | g << 2).all(), (g, out[g, :2])
