"""Memory instructions: SMEM (scalar loads), DS (LDS), FLAT/GLOBAL/SCRATCH, and the cache controls (MUBUF: buffer_ops.py).

Only active lanes of selected waves generate addresses, in wave-major lane order; GPUMemory sees those vectors."""
from __future__ import annotations
import re

import numpy as np

from rawgpu.drivers.emu.shader.decode import Inst
from rawgpu.drivers.emu.shader.state import State, EmuFault
from rawgpu.drivers.emu.shader.memory import MemoryFault, atomic_apply, ATOMIC_OPS

u8, u16, u32, u64, i64 = np.uint8, np.uint16, np.uint32, np.uint64, np.int64
NOPS = {"buffer_gl0_inv", "buffer_gl1_inv", "global_wb", "global_inv", "global_wbinv", "s_dcache_inv", "s_gl1_inv",
        "s_icache_inv", "s_prefetch_data", "s_prefetch_inst", "s_prefetch_data_pc_rel", "s_prefetch_inst_pc_rel",
        "s_buffer_prefetch_data", "s_atc_probe", "s_atc_probe_buffer", "s_dcache_wb"}

ATOMIC_NAMES = {"add": "add", "sub": "sub", "rsub": "rsub", "inc": "inc", "dec": "dec", "min_i32": "smin", "max_i32": "smax",
                "min_i64": "smin", "max_i64": "smax", "min_u32": "umin", "max_u32": "umax", "min_u64": "umin",
                "max_u64": "umax", "and": "and", "or": "or", "xor": "xor", "swap": "swap", "storexchg": "swap",
                "cmpswap": "cmpswap", "cmpstore": "cmpswap", "add_f32": "fadd", "add_f64": "fadd", "min_f32": "fmin",
                "max_f32": "fmax", "min_num_f32": "fmin", "max_num_f32": "fmax", "min_f64": "fmin", "max_f64": "fmax",
                "min_num_f64": "fmin", "max_num_f64": "fmax", "mskor": "mskor", "csub": "csub", "cond_sub": "csub",
                "sub_clamp": "csub"}

def _atomic_kind(rest: str) -> tuple[str, int]:
  """'add_u32' -> ('add', 4); 'cmpswap_b64' -> ('cmpswap', 8)."""
  m = re.match(r"(.*?)(?:_rtn)?_([bfiu])(32|64)$", rest)
  if not m: raise KeyError(rest)
  op, t, w = m.group(1), m.group(2), int(m.group(3))
  for key in (f"{op}_{t}{w}", op, f"{op}_{'i' if t == 'i' else 'u'}{w}"):   # add_f32 is a float add, add_u32 an add
    if key in ATOMIC_NAMES: return ATOMIC_NAMES[key], w // 8
  raise KeyError(rest)

_LOAD = {"b32": (4, 1, None), "b64": (4, 2, None), "b96": (4, 3, None), "b128": (4, 4, None), "u8": (1, 1, "u"),
         "i8": (1, 1, "i"), "u16": (2, 1, "u"), "i16": (2, 1, "i"), "d16_b16": (2, 1, "lo"), "d16_hi_b16": (2, 1, "hi"),
         "d16_u8": (1, 1, "lo"), "d16_i8": (1, 1, "lo_i"), "d16_hi_u8": (1, 1, "hi"), "d16_hi_i8": (1, 1, "hi_i"),
         "u8_d16": (1, 1, "lo"), "i8_d16": (1, 1, "lo_i"), "u8_d16_hi": (1, 1, "hi"), "i8_d16_hi": (1, 1, "hi_i"),
         "u16_d16": (2, 1, "lo"), "u16_d16_hi": (2, 1, "hi")}
_STORE = {"b8": (1, 1, False), "b16": (2, 1, False), "b32": (4, 1, False), "b64": (4, 2, False), "b96": (4, 3, False),
          "b128": (4, 4, False), "d16_hi_b16": (2, 1, True), "d16_hi_b8": (1, 1, True), "b16_d16_hi": (2, 1, True),
          "b8_d16_hi": (1, 1, True)}

def _extend(vals: np.ndarray, size: int, kind: str | None, old: np.ndarray | None) -> np.ndarray:
  v = vals.astype(u32)
  if kind in ("i", "lo_i", "hi_i"):
    v = (vals.view(np.int8) if size == 1 else vals.view(np.int16)).astype(np.int32).view(u32)
  if kind in ("lo", "lo_i"): return (old & u32(0xffff0000)) | (v & u32(0xffff))
  if kind in ("hi", "hi_i"): return (old & u32(0xffff)) | (v << u32(16))
  return v

def _lanes(st: State) -> np.ndarray | None:
  """Flat (wave * lanes + lane) indices of the active lanes, or None when every lane of every wave is active."""
  if st.full: return None
  return np.flatnonzero(st.emask)

def _gather(st: State, a, idx):
  a = np.broadcast_to(a, (st.W, st.L)).reshape(-1)
  return a if idx is None else a[idx]

def _put(st: State, r: int, idx, vals) -> None:
  if r >= st.nvgpr: raise EmuFault(f"VGPR v{r} is beyond the {st.nvgpr} the kernel was given")
  if idx is None: st.v[r][...] = np.asarray(vals, u32).reshape(st.W, st.L)
  else: st.v[r].reshape(-1)[idx] = vals

def _get(st: State, r: int, idx) -> np.ndarray:
  return st.v[r].reshape(-1) if idx is None else st.v[r].reshape(-1)[idx]

def compile_mem(i: Inst, L: int, fam: str):
  n = i.name
  if n in NOPS: return lambda st: None
  if i.fmt == "smem": return _smem(i, fam)
  if i.fmt == "ds": return _ds(i, L)
  if i.fmt in ("global", "flat", "scratch"): return _vmem(i, L, fam)
  if i.fmt == "mubuf":
    from rawgpu.drivers.emu.shader.buffer_ops import compile_buffer
    return compile_buffer(i, L, fam)
  raise EmuFault(f"illegal instruction at {i.addr:#x}: {n} is not modelled", i.addr)

# ---- SMEM -----------------------------------------------------------------------------------------------------------
def _smem(i: Inst, fam: str):
  n, f = i.name, i.f
  if n in ("s_memtime", "s_memrealtime"):
    return lambda st: st.ws64(f["sdata"], np.full(st.W, u64(st.count)))
  m = re.match(r"s_(buffer_)?load_(b|u|i)(\d+)$", n)
  if not m: raise EmuFault(f"illegal instruction at {i.addr:#x}: {n} is not modelled", i.addr)
  buf, kind, bits = bool(m.group(1)), m.group(2), int(m.group(3))
  ndw = max(1, bits // 32)
  d, sb, off, so = f["sdata"], f["sbase"], f["offset"], f["soffset"]
  def run(st):
    ws = np.nonzero(st.selected())[0]
    st.masks.clear()  # SGPRs change behind ws()
    base = st.s64(sb)[ws]
    if buf: base = base & u64(0xffffffffffff)
    a = base + u64(off & 0xffffffffffffffff)
    if so != 124: a = a + st.s[so][ws].astype(u64)
    if kind == "b": a = a & ~u64(3)
    load = getattr(st.mem, "scalar_load", st.mem.load)
    try:
      if kind != "b":
        v = load(a, bits // 8)
        v = v.astype(u32) if kind == "u" else v.view(np.int8 if bits == 8 else np.int16).astype(np.int32).view(u32)
        st.s[d][ws] = v
        return
      # all the dwords in one access, in register order (dword k of every wave, then k + 1): one translation
      st.s[d:d + ndw, ws] = load((a[None, :] + u64(4) * np.arange(ndw, dtype=u64)[:, None]).reshape(-1), 4).reshape(ndw, -1)
    except MemoryFault as e: raise EmuFault("page fault", e.addr)
  return run

# ---- LDS ------------------------------------------------------------------------------------------------------------
def _lds_addr(st: State, a: np.ndarray, idx, size: int) -> tuple[np.ndarray, np.ndarray]:
  """LDS byte addresses -> (index into st.lds, in range). Out-of-range accesses read 0 and drop writes. The address
  is the 32-bit sum of the VGPR and the offset: LLVM folds an offset into a DS access whose base may be negative on
  every target after SI (isDSOffsetLegal), and such code reads the right word only if the sum wraps."""
  w = np.repeat(np.arange(st.W), st.L) if idx is None else idx // st.L
  a = a.astype(i64) & 0xffffffff
  ok = a + size <= st.lds_bytes
  return st.lds_base[w] + np.where(ok, a, 0), ok

def lds_load(st: State, a, idx, size: int) -> np.ndarray:
  p, ok = _lds_addr(st, a, idx, size)
  if size == 4 and not (p & 3).any(): v = st.lds.view(u32)[p >> 2]
  else:
    v = st.lds[p[:, None] + np.arange(size)].copy().view({1: u8, 2: u16, 4: u32, 8: u64}[size]).reshape(-1)
  return np.where(ok, v, v.dtype.type(0))

def lds_store(st: State, a, idx, vals, size: int) -> None:
  p, ok = _lds_addr(st, a, idx, size)
  p, vals = p[ok], np.asarray(vals)[ok] if np.ndim(vals) else vals
  T = {1: u8, 2: u16, 4: u32, 8: u64}[size]
  if size == 4 and not (p & 3).any(): st.lds.view(u32)[p >> 2] = vals
  else: st.lds[p[:, None] + np.arange(size)] = np.ascontiguousarray(np.broadcast_to(vals, p.shape).astype(T)).view(u8).reshape(-1, size)

def _ds(i: Inst, L: int):
  n, f = i.name, i.f
  off = f["offset0"] | f["offset1"] << 8
  ra, d0, d1, rd = f["addr"], f["data0"], f["data1"], f["vdst"]
  if f["gds"]: raise EmuFault(f"illegal instruction at {i.addr:#x}: GDS is not modelled", i.addr)
  if n in ("ds_nop",): return lambda st: None
  m = re.match(r"ds_(load|store)_2addr(_stride64)?_b(32|64)$", n)
  if m:
    size = int(m.group(3)) // 8
    scale = size * (64 if m.group(2) else 1)
    o0, o1 = f["offset0"] * scale, f["offset1"] * scale
    nd = size // 4
    def run2(st):
      idx = _lanes(st)
      a = _get(st, ra, idx).astype(i64)
      for k, (o, dr) in enumerate(((o0, d0), (o1, d1))):
        for w in range(nd):
          if m.group(1) == "load": _put(st, rd + k * nd + w, idx, lds_load(st, a + o + 4 * w, idx, 4))
          else: lds_store(st, a + o + 4 * w, idx, _get(st, dr + w, idx), 4)
    return run2
  m = re.match(r"ds_load_(.*)$", n)
  if m and m.group(1) in _LOAD:
    size, nd, kind = _LOAD[m.group(1)]
    def runl(st):
      idx = _lanes(st)
      a = _get(st, ra, idx).astype(i64) + off
      for w in range(nd):
        v = lds_load(st, a + 4 * w, idx, size)
        _put(st, rd + w, idx, _extend(v, size, kind, _get(st, rd + w, idx) if kind in ("lo", "hi", "lo_i", "hi_i") else None))
    return runl
  m = re.match(r"ds_store_(.*)$", n)
  if m and m.group(1) in _STORE:
    size, nd, hi = _STORE[m.group(1)]
    def runs(st):
      idx = _lanes(st)
      a = _get(st, ra, idx).astype(i64) + off
      for w in range(nd):
        v = _get(st, d0 + w, idx)
        if hi: v = v >> u32(16)
        lds_store(st, a + 4 * w, idx, v.astype({1: u8, 2: u16, 4: u32}[size]), size)
    return runs
  if n == "ds_swizzle_b32": return _swizzle(i, L)
  if n in ("ds_bpermute_b32", "ds_permute_b32"):
    back = n == "ds_bpermute_b32"
    def runp(st):
      em = st.emask
      lane = ((st.v[ra].astype(i64) + off) // 4) % st.L
      src = st.v[d0]
      if back:
        v = np.take_along_axis(np.where(st.exec_lanes(), src, u32(0)), lane, 1)
        st.wv(rd, v)
      else:
        out = np.zeros_like(src)
        w, l = np.nonzero(em)
        out[w, lane[w, l]] = src[w, l]
        st.wv(rd, out)
    return runp
  rest = n[3:]
  rtn = "_rtn_" in n
  try: op, size = _atomic_kind(rest.replace("_rtn", ""))
  except KeyError: raise EmuFault(f"illegal instruction at {i.addr:#x}: {n} is not modelled", i.addr)
  nd = size // 4
  def runa(st):
    idx = _lanes(st)
    a = _get(st, ra, idx).astype(i64) + off
    p, ok = _lds_addr(st, a, idx, size)
    def val(r):
      v = _get(st, r, idx).astype(u64 if size == 8 else u32)
      if size == 8: v = v | (_get(st, r + 1, idx).astype(u64) << u64(32))
      return v
    # cmpstore: data0 is the new value, data1 the comparand; mskor: data0 the mask, data1 the bits
    v, c = val(d0), (val(d1) if op in ("cmpswap", "mskor") else None)
    buf = st.lds.view(u64 if size == 8 else u32)
    if (p % size).any(): raise EmuFault(f"misaligned LDS atomic at {i.addr:#x}", i.addr)
    old = np.zeros(len(p), buf.dtype)
    old[ok] = atomic_apply(buf, (p // size)[ok], op, v[ok], None if c is None else c[ok])
    if rtn:
      _put(st, rd, idx, (old & 0xffffffff).astype(u32) if size == 8 else old)
      if size == 8: _put(st, rd + 1, idx, (old >> u64(32)).astype(u32))
  return runa

def _swizzle(i: Inst, L: int):
  f = i.f
  off = f["offset0"] | f["offset1"] << 8
  lane = np.arange(L)
  if off & 0x8000:
    src = (lane & ~3) | ((off >> (2 * (lane & 3))) & 3)
  else:
    am, om, xm = off & 0x1f, (off >> 5) & 0x1f, (off >> 10) & 0x1f
    src = (lane & ~31) | ((((lane & 31) & am) | om) ^ xm)
  ra, rd = f["addr"], f["vdst"]  # the swizzled value comes in the address operand
  def run(st):
    v = st.v[ra][:, src]
    ok = st.exec_lanes()[:, src]
    st.wv(rd, np.where(ok, v, u32(0)))
  return run

# ---- FLAT / GLOBAL / SCRATCH ----------------------------------------------------------------------------------------
def _vmem(i: Inst, L: int, fam: str):
  n, f = i.name, i.f
  seg = i.fmt
  kind, _, rest = n.partition("_")[2].partition("_")
  ra, rdat, rd, sa, off = f["addr"], f["data"], f["vdst"], f["saddr"], f["offset"]
  rtn = (f.get("th", 0) & 1 if fam == "gfx12" else f.get("glc", 0)) if kind == "atomic" else True
  def addrs(st, idx):
    """(per-lane address or private offset for the active lanes)"""
    if seg == "scratch":
      a = np.zeros(st.W * st.L if idx is None else len(idx), i64)
      if f["sve"]: a = a + _get(st, ra, idx).astype(i64)
      if sa != 124: a = a + _gather(st, st.s[sa][:, None], idx).astype(i64)
      return a + off
    if seg == "global" and sa != 124:
      base = _gather(st, st.s64(sa)[:, None], idx)
      return base + _get(st, ra, idx).astype(u64) + u64(off & 0xffffffffffffffff)
    a = _get(st, ra, idx).astype(u64) | (_get(st, ra + 1, idx).astype(u64) << u64(32))
    return a + u64(off & 0xffffffffffffffff)
  if kind == "load":
    if rest not in _LOAD: raise EmuFault(f"illegal instruction at {i.addr:#x}: {n} is not modelled", i.addr)
    size, nd, ext = _LOAD[rest]
    def runl(st):
      idx = _lanes(st)
      a = addrs(st, idx)
      for w in range(nd):
        v = _access(st, seg, a + (4 * w if seg == "scratch" else u64(4 * w)), idx, size, None)
        old = _get(st, rd + w, idx) if ext in ("lo", "hi", "lo_i", "hi_i") else None
        _put(st, rd + w, idx, _extend(v, size, ext, old))
    return runl
  if kind == "store":
    if rest not in _STORE: raise EmuFault(f"illegal instruction at {i.addr:#x}: {n} is not modelled", i.addr)
    size, nd, hi = _STORE[rest]
    def runs(st):
      idx = _lanes(st)
      a = addrs(st, idx)
      for w in range(nd):
        v = _get(st, rdat + w, idx)
        if hi: v = v >> u32(16)
        _access(st, seg, a + (4 * w if seg == "scratch" else u64(4 * w)), idx, size, v.astype({1: u8, 2: u16, 4: u32}[size]))
    return runs
  if kind == "atomic":
    try: op, size = _atomic_kind(rest)
    except KeyError: raise EmuFault(f"illegal instruction at {i.addr:#x}: {n} is not modelled", i.addr)
    if op not in ATOMIC_OPS or op in ("rsub", "mskor"):
      raise EmuFault(f"illegal instruction at {i.addr:#x}: {n} is not modelled", i.addr)
    nd = size // 4
    def runa(st):
      idx = _lanes(st)
      a = addrs(st, idx)
      def val(r):
        v = _get(st, r, idx).astype(u64 if size == 8 else u32)
        if size == 8: v = v | (_get(st, r + 1, idx).astype(u64) << u64(32))
        return v
      v = val(rdat)
      c = val(rdat + nd) if op == "cmpswap" else None
      if seg == "scratch": raise EmuFault(f"illegal instruction at {i.addr:#x}: scratch atomics", i.addr)
      if seg == "flat": _flat_global_only(st, a)
      try: old = st.mem.atomic(op, a, v, size, c)
      except MemoryFault as e: raise EmuFault("page fault", e.addr)
      if rtn:
        old = np.asarray(old)
        _put(st, rd, idx, (old & 0xffffffff).astype(u32) if size == 8 else old.astype(u32))
        if size == 8: _put(st, rd + 1, idx, (old >> u64(32)).astype(u32))
    return runa
  raise EmuFault(f"illegal instruction at {i.addr:#x}: {n} is not modelled", i.addr)

def _flat_global_only(st, a):
  hi = (np.asarray(a, u64) >> u64(32)).astype(u32)
  if ((hi == st.apertures[0]) | (hi == st.apertures[1])).any():
    raise EmuFault("flat atomics to LDS or scratch are not modelled")

def _access(st: State, seg: str, a, idx, size: int, vals):
  """One load (vals None) or store of `size` bytes per active lane."""
  try:
    if seg == "scratch": return _scratch(st, a, idx, size, vals)
    if seg == "flat":
      hi = (a >> u64(32)).astype(u32)
      lds, prv = hi == st.apertures[0], hi == st.apertures[1]
      if lds.any() or prv.any():
        out = np.zeros(len(a), {1: u8, 2: u16, 4: u32}[size]) if vals is None else None
        g = ~(lds | prv)
        ii = np.arange(st.W * st.L) if idx is None else idx
        for m, fn in ((lds, "lds"), (prv, "prv"), (g, "g")):
          if not m.any(): continue
          aa, sub = a[m], ii[m]
          if fn == "lds":
            lo = (aa & u64(0xffffffff)).astype(i64)
            if vals is None: out[m] = lds_load(st, lo, sub, size)
            else: lds_store(st, lo, sub, vals[m], size)
          elif fn == "prv":
            lo = (aa & u64(0xffffffff)).astype(i64)
            r = _scratch(st, lo, sub, size, None if vals is None else vals[m])
            if vals is None: out[m] = r
          else:
            if vals is None: out[m] = st.mem.load(aa, size)
            else: st.mem.store(aa, vals[m], size)
        return out
    if vals is None: return st.mem.load(a, size)
    st.mem.store(a, vals, size)
  except MemoryFault as e:
    raise EmuFault("page fault", e.addr)

def _scratch(st: State, off, idx, size: int, vals):
  """Private memory: each wave's slot of the scratch ring, at COMPUTE_DISPATCH_SCRATCH_BASE + slot x WAVESIZE, holds
  its lanes' bytes swizzled by dword (dword d of lane l at (d x lanes + l) x 4: element size 4, index stride the
  wave size, as the ISA guides' swizzled buffer addressing and AMDGPUUsage's interleaved private memory describe).
  The address is not checked against WAVESIZE: since gfx9, FLAT_SCRATCH holds a base and no size (AMDGPUUsage; gfx8's
  held the size), so an offset past the lane's share reaches the next slots, and past the ring whatever the VM maps
  there (a fault where nothing is). A negative offset, which the hardware does not take (LLVM never emits one), and
  private memory in a dispatch without SCRATCH_EN stop the wave as not modelled."""
  lanes = np.arange(st.W * st.L) if idx is None else idx
  off = np.asarray(off, i64)
  if not st.scratch_wave_bytes: raise EmuFault("private memory in a dispatch without scratch (SCRATCH_EN or WAVESIZE 0): not modelled")
  if (off < 0).any(): raise EmuFault(f"a private access at negative offset {int(off[np.argmax(off < 0)])}: not modelled")
  lane, wave = lanes % st.L, lanes // st.L
  addr = st.scratch_base + st.slot[wave].astype(i64) * st.scratch_wave_bytes + (off >> 2) * (4 * st.L) + lane * 4 + (off & 3)
  if size > 4 or ((off & 3) + size > 4).any():
    o = int(off[np.argmax((off & 3) + size > 4)]) if size <= 4 else int(off[0])
    raise EmuFault(f"a {size}-byte private access at offset {o} spans two swizzled dwords: not modelled")
  if vals is None: return st.mem.load(addr.astype(u64), size)
  st.mem.store(addr.astype(u64), np.asarray(vals, {1: u8, 2: u16, 4: u32}[size]), size)
