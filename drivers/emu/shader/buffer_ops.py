"""MUBUF (gfx12: VBUFFER) loads, stores and atomics through a buffer resource descriptor (V#) in four SGPRs.

Address (linear addressing, the ISA guides' "buffer addressing" sections): base + soffset + index * stride + offset,
with index = VGPR index (IDXEN) + lane id (ADD_TID_ENABLE) and offset = VGPR offset (OFFEN) + the instruction's offset.
Range checking decides per lane, and for multi-dword loads and stores per dword: out-of-range loads return 0 and
out-of-range stores write nothing. Atomics are checked all or nothing; a dropped non-returning atomic does nothing.

RDNA3/RDNA4 (OOB_SELECT, word3[29:28]; the RDNA4 guide's table, which Mesa's ac_descriptors.c applies to gfx11 too):
  0: index >= num_records or offset + payload > stride     1: index >= num_records
  2: num_records == 0                                      3: offset + payload > num_records - soffset (raw)
A descriptor with FORMAT 0 and no ADD_TID is unbound (every access out of range); TYPE must be 0 (buffer).
CDNA3 (the CDNA guides' range-checking section, no OOB_SELECT): ADD_TID without IDXEN (scratch): no checking;
raw (IDXEN off): offset >= num_records, checked for each dword's offset; structured (IDXEN, stride != 0):
index >= num_records.

Not modelled (a fault names them): swizzled buffers, format and typed loads/stores, TFE, GFX9's LDS loads, RDNA4's
stride scale, the descriptor combinations the guides leave open, and the value a returning atomic gives when it is out
of range (the guides only say the atomic is dropped).
"""
from __future__ import annotations
import numpy as np

from rawgpu.drivers.emu.shader.decode import Inst
from rawgpu.drivers.emu.shader.state import State, EmuFault
from rawgpu.drivers.emu.shader.memory import MemoryFault, ATOMIC_OPS
from rawgpu.drivers.emu.shader import compile as C
from rawgpu.drivers.emu.shader.mem_ops import _LOAD, _STORE, _atomic_kind, _extend, _get, _lanes, _put

u8, u16, u32, u64, i64 = np.uint8, np.uint16, np.uint32, np.uint64, np.int64


def _unmodelled(i: Inst, why: str) -> EmuFault:
  return EmuFault(f"illegal instruction at {i.addr:#x}: {i.name}: {why} is not modelled", i.addr)


def compile_buffer(i: Inst, L: int, fam: str):
  n, f = i.name, i.f
  kind, _, rest = n.partition("_")[2].partition("_")
  if f.get("tfe"): raise _unmodelled(i, "TFE")
  if f.get("lds"): raise _unmodelled(i, "a load to LDS")
  if rest.startswith(("format", "d16_format")) or kind not in ("load", "store", "atomic"): raise _unmodelled(i, "the format conversion")
  lanes_of = _lane_parts(i, L, fam)
  if kind == "load":
    if rest not in _LOAD: raise _unmodelled(i, "this load")
    size, nd, ext = _LOAD[rest]
    def runl(st):
      idx = _lanes(st)
      a, ok = lanes_of(st, idx, size, nd)
      for w in range(nd):
        v = np.zeros(len(a), {1: u8, 2: u16, 4: u32}[size])
        m = ok[w]
        if m.any(): v[m] = _mem(st.mem.load, a[m] + u64(4 * w), size)
        old = _get(st, f["data"] + w, idx) if ext in ("lo", "hi", "lo_i", "hi_i") else None
        _put(st, f["data"] + w, idx, _extend(v, size, ext, old))
    return runl
  if kind == "store":
    if rest not in _STORE: raise _unmodelled(i, "this store")
    size, nd, hi = _STORE[rest]
    def runs(st):
      idx = _lanes(st)
      a, ok = lanes_of(st, idx, size, nd)
      for w in range(nd):
        m = ok[w]
        if not m.any(): continue
        v = _get(st, f["data"] + w, idx)[m]
        if hi: v = v >> u32(16)
        _mem(st.mem.store, a[m] + u64(4 * w), v.astype({1: u8, 2: u16, 4: u32}[size]), size)
    return runs
  try: op, size = _atomic_kind(rest)
  except KeyError: raise _unmodelled(i, "this atomic") from None
  if op not in ATOMIC_OPS or op in ("rsub", "mskor"): raise _unmodelled(i, "this atomic")
  nd, rtn = size // 4, (f["th"] & 1 if fam == "gfx12" else f["glc"])
  def runa(st):
    idx = _lanes(st)
    a, ok = lanes_of(st, idx, size, 1)
    m = ok[0]   # all or nothing: the whole access is checked as one payload of `size` bytes
    if rtn and not m.all(): raise EmuFault(f"{n} at {i.addr:#x}: a returning buffer atomic out of range (its result is not documented)", i.addr)
    def val(r):
      v = _get(st, r, idx).astype(u64 if size == 8 else u32)
      return v | (_get(st, r + 1, idx).astype(u64) << u64(32)) if size == 8 else v
    v, c = val(f["data"]), (val(f["data"] + nd) if op == "cmpswap" else None)
    if not m.any(): return
    old = np.asarray(_mem(st.mem.atomic, op, a[m], v[m], size, None if c is None else c[m]))
    if rtn:
      _put(st, f["data"], idx, (old & 0xffffffff).astype(u32) if size == 8 else old.astype(u32))
      if size == 8: _put(st, f["data"] + 1, idx, (old >> u64(32)).astype(u32))
  return runa


def _mem(fn, *args):
  try: return fn(*args)
  except MemoryFault as e: raise EmuFault("page fault", e.addr) from None


def _lane_parts(i: Inst, L: int, fam: str):
  """A function (state, active lanes, bytes per checked piece, pieces) -> (address per lane, in-range mask per piece):
  a multi-dword load or store is checked a dword at a time, anything else as one piece."""
  f = i.f
  r, off, idxen, offen = f["srsrc"], f["offset"], f["idxen"], f["offen"]
  soff = C.raw_src(i, f["soffset"], 32, vec=True)
  addr = f["addr"]
  def parts(st: State, idx, payload: int, nd: int):
    wave = (np.arange(st.W * st.L) if idx is None else idx) // st.L
    w0, w1, w2, w3 = (st.s[r + k][wave].astype(u64) for k in range(4))
    base, stride = w0 | ((w1 & u64(0xffff)) << u64(32)), (w1 >> u64(16)) & u64(0x3fff)
    if w1.size and ((w1 >> u64(30)) & u64(3 if fam != "gfx9" else 2)).any(): raise _unmodelled(i, "a swizzled buffer")
    add_tid = (w3 >> u64(23)) & u64(1)
    index = _get(st, addr, idx).astype(u64) if idxen else np.zeros(len(wave), u64)
    index = index + add_tid * ((np.arange(st.W * st.L) if idx is None else idx) % st.L).astype(u64)
    vo = _get(st, addr + idxen, idx).astype(u64) if offen else np.zeros(len(wave), u64)
    offset = vo + u64(off)
    so = np.broadcast_to(np.asarray(soff(st), u32), (st.W, 1))[wave, 0].astype(u64)
    ok = _in_range(i, fam, stride, w2, w3, add_tid, index, offset, so, payload, nd, bool(idxen))
    return base + so + index * stride + offset, ok
  return parts


def _in_range(i: Inst, fam: str, stride, nrec, w3, add_tid, index, offset, so, payload: int, nd: int, idxen: bool) -> list[np.ndarray]:
  """In-range mask of each checked piece (`payload` bytes at offset + 4k)."""
  comp = [offset + u64(4 * k) for k in range(nd)]   # each checked dword's offset
  if fam == "gfx9":
    if not idxen and add_tid.all(): return [np.ones(len(offset), bool)] * nd          # scratch: no checking
    if not idxen and not add_tid.any(): return [o < nrec for o in comp]                # raw
    if idxen and not add_tid.any() and (stride != 0).all(): return [index < nrec] * nd  # structured
    raise _unmodelled(i, "this descriptor's range checking (ADD_TID/IDXEN/stride combination)")
  if ((w3 >> u64(30)) & u64(3)).any(): raise _unmodelled(i, "a descriptor whose TYPE is not buffer")
  if fam == "gfx12" and ((w3 >> u64(18)) & u64(3)).any(): raise _unmodelled(i, "RDNA4's stride scale")
  bound = ((w3 >> u64(12)) & u64(0x3f) != 0) | (add_tid != 0)
  sel = (w3 >> u64(28)) & u64(3)
  room = np.where(so > nrec, u64(0), nrec - so)   # raw buffers: num_records is reduced by soffset
  out = []
  for o in comp:
    raw = index * stride + o + u64(payload) > room
    bad = np.select([sel == 0, sel == 1, sel == 2], [(index >= nrec) | (o + u64(payload) > stride), index >= nrec, nrec == 0], raw)
    out.append(bound & ~bad)
  return out
