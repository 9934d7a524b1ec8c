"""One compute dispatch: initial wave state from the registers the driver programmed, then all waves run together.

Scheduling: the runnable waves with the lowest PC run the basic block at that PC as one vectorized group; waves
that branched elsewhere wait their turn, so divergent waves reconverge where their PCs meet. s_barrier parks a
wave until every live wave of its workgroup has arrived."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Callable, Generator, Iterator
import functools, re, time

import numpy as np

from rawgpu.drivers.emu.shader.decode import decode_at, CodeEnds, DecodeError, family
from rawgpu.drivers.emu.shader.state import State, EmuFault
from rawgpu.drivers.emu.shader.memory import GPUMemory, MemoryFault
from rawgpu.drivers.emu.shader.compile import compile_inst
from rawgpu.drivers.emu.shader.gfx9 import gpr_idx_mode as gfx9_gpr_idx_mode
from rawgpu.drivers.emu.shader.salu import END, BARRIER

u32, u64 = np.uint32, np.uint64

@dataclass
class DispatchRegs:
  """Raw register values the driver programmed, as the hardware sees them."""
  arch: str                      # "gfx1100", "gfx1201", ...
  pgm_addr: int                  # byte address (COMPUTE_PGM_LO/HI combined and shifted << 8)
  rsrc1: int
  rsrc2: int
  rsrc3: int
  user_data: list[int]           # COMPUTE_USER_DATA_0..15
  num_thread: tuple[int, int, int]   # COMPUTE_NUM_THREAD_X/Y/Z (workgroup size in NUM_THREAD_FULL)
  grid: tuple[int, int, int]     # DISPATCH_DIRECT dims as in the packet (see launch_grid)
  start: tuple[int, int, int] = (0, 0, 0)   # COMPUTE_START_X/Y/Z
  dispatch_initiator: int = 0    # COMPUTE_DISPATCH_INITIATOR
  tmpring_size: int = 0          # COMPUTE_TMPRING_SIZE
  scratch_base: int = 0          # COMPUTE_DISPATCH_SCRATCH_BASE_LO/HI as a byte address
  shader_engines: int = 1        # gfx11+: TMPRING_SIZE.WAVES counts the scratch slots of each shader engine
  sh_mem_bases: int = 0x0001_0002   # SH_MEM_BASES of the queue's VMID (default: amdkfd's apertures, LDS 1 << 48, private 2 << 48)

@dataclass
class DispatchResult:
  ok: bool
  fault: str | None
  fault_addr: int | None
  wave_instructions: int

@dataclass(frozen=True)
class Fields:
  """The register fields the emulator acts on (positions from the gc_11/12 sh_mask headers and AMDGPUUsage)."""
  vgprs: int; user_sgprs: int; tgid_en: tuple[bool, bool, bool]; tg_size_en: bool; tidig_cnt: int
  lds_bytes: int; scratch_en: bool; trap_present: bool; float_mode: int; wave32: bool
  scratch_wave_bytes: int; scratch_waves: int = 0
  accum_offset: int = 0   # CDNA: the first AGPR's place in the unified register file

def _gc(arch: str):
  """The generated GC register table for the architecture's graphics IP version (gfx1100 -> GC 11.0.0; CDNA3's
  gfx940-942 -> GC 9.4.3, the MI300 register headers)."""
  from rawgpu.autogen.regs import ip_regs
  if family(arch) == "gfx9": return ip_regs("gc", 9, 4, 3)
  n = arch[3:]
  major, minor, step = int(n[:-2]), int(n[-2], 16), int(n[-1], 16)
  return ip_regs("gc", major, minor, step)

def decode_regs(r: DispatchRegs) -> Fields:
  """All bit-field decoding of rsrc1/2/3, DISPATCH_INITIATOR and TMPRING_SIZE in one place, with the field layout
  from rawgpu.autogen.regs (the gc_11/gc_12 sh_mask headers)."""
  return _decode_regs(r.arch, r.rsrc1, r.rsrc2, r.rsrc3, r.dispatch_initiator, r.tmpring_size)

@functools.lru_cache(maxsize=256)   # a program launches with the same values again and again
def _decode_regs(arch: str, rsrc1: int, rsrc2: int, rsrc3: int, initiator: int, tmpring_size: int) -> Fields:
  gc = _gc(arch)
  r1, r2 = gc["COMPUTE_PGM_RSRC1"].decode(rsrc1), gc["COMPUTE_PGM_RSRC2"].decode(rsrc2)
  di, tmp = gc["COMPUTE_DISPATCH_INITIATOR"].decode(initiator), gc["COMPUTE_TMPRING_SIZE"].decode(tmpring_size)
  gfx9 = family(arch) == "gfx9"
  wave32 = bool(di.get("CS_W32_EN", 0))                        # GFX9 has no such bit: wave64 only
  granule = 8 if wave32 or gfx9 else 4     # VGPR allocation granule (AMDGPUUsage): gfx940's unified VGPR/AGPR file: 8
  return Fields(
    vgprs=min(512 if gfx9 else 256, (r1["VGPRS"] + 1) * granule), float_mode=r1["FLOAT_MODE"],
    scratch_en=bool(r2["SCRATCH_EN"]), user_sgprs=r2["USER_SGPR"], trap_present=bool(r2.get("TRAP_PRESENT", 0)),
    tgid_en=(bool(r2["TGID_X_EN"]), bool(r2["TGID_Y_EN"]), bool(r2["TGID_Z_EN"])), tg_size_en=bool(r2["TG_SIZE_EN"]),
    tidig_cnt=r2["TIDIG_COMP_CNT"], lds_bytes=r2["LDS_SIZE"] * 512,   # LDS granule: 128 dwords
    wave32=wave32,
    scratch_wave_bytes=tmp["WAVESIZE"] * (1024 if gfx9 else 256),   # 256-dword units on GFX9, 64-dword units after
    scratch_waves=tmp["WAVES"],
    accum_offset=(gc["COMPUTE_PGM_RSRC3"].decode(rsrc3)["ACCUM_OFFSET"] + 1) * 4 if gfx9 else 0)

class NotModelled(ValueError):
  """A launch whose outcome on the hardware is not public: the CP refuses it rather than guess."""

@dataclass(frozen=True)
class Grid:
  """The workgroups a dispatch launches along X, Y, Z: ids first .. first + count - 1 of `size` threads each, but
  the last one along a dimension, which has `last` threads (a partial workgroup)."""
  first: tuple[int, int, int]
  count: tuple[int, int, int]
  size: tuple[int, int, int]
  last: tuple[int, int, int]

def launch_grid(r: DispatchRegs) -> Grid:
  """The workgroups the dispatch dims, COMPUTE_START_*, COMPUTE_NUM_THREAD_* and DISPATCH_INITIATOR describe
  (raises NotModelled)."""
  return _launch_grid(r.arch, tuple(r.num_thread), tuple(r.grid), tuple(r.start), r.dispatch_initiator)

@functools.lru_cache(maxsize=256)
def _launch_grid(arch: str, num_thread: tuple, dims: tuple, start: tuple, initiator: int) -> Grid:
  gc = _gc(arch)
  di = gc["COMPUTE_DISPATCH_INITIATOR"].decode(initiator)
  axes = [_axis(gc[f"COMPUTE_NUM_THREAD_{c}"].decode(nt), int(d), int(s), di, c) for c, nt, d, s in zip("XYZ", num_thread, dims, start)]
  return Grid(*(tuple(a[i] for a in axes) for i in range(4)))

def _axis(nt: dict, dim: int, start: int, di: dict, c: str) -> tuple[int, int, int, int]:
  """(first id, count, threads per workgroup, threads in the last) along one axis. NUM_THREAD_FULL's width comes
  from the register table (bits 12:0 on gfx12, 15:0 before)."""
  size = max(1, nt["NUM_THREAD_FULL"])
  first = 0 if di["FORCE_START_AT_000"] else start
  if di["USE_THREAD_DIMENSIONS"]:   # dim counts threads (radv: "blocks is already in thread dimensions")
    end = -(-dim // size)
    last = dim - (end - 1) * size if end else size
  else: end, last = dim, size
  if di["PARTIAL_TG_EN"]:
    part = nt["NUM_THREAD_PARTIAL"]
    # radv sends 1..size ("an entire block size, not 0"), and with USE_THREAD_DIMENSIONS the same remainder
    if not 0 < part <= size or di["USE_THREAD_DIMENSIONS"] and part != last:
      raise NotModelled(f"PARTIAL_TG_EN with COMPUTE_NUM_THREAD_{c}.NUM_THREAD_PARTIAL {part} (NUM_THREAD_FULL {size}"
                        f"{f', {last} by USE_THREAD_DIMENSIONS' if di['USE_THREAD_DIMENSIONS'] else ''}) is not modelled")
    last = part
  # from a non-zero start the dims are end values (radv: "The blocks in the packet are not counts but end values")
  if end < first: raise NotModelled(f"a dispatch ending at {c} {end}, before COMPUTE_START_{c} {first}, is not modelled")
  return first, end - first, size, last

@functools.lru_cache(maxsize=64)
def apertures(arch: str, sh_mem_bases: int) -> tuple[int, int]:
  """The high dwords of the shared (LDS) and private apertures of the flat address space: SH_MEM_BASES's
  SHARED_BASE and PRIVATE_BASE are address bits 63:48 (amdkfd's MAKE_LDS_APP_BASE_V9 shifts by 48), each aperture 4 GiB."""
  f = _gc(arch)["SH_MEM_BASES"].decode(sh_mem_bases)
  return f["SHARED_BASE"] << 16, f["PRIVATE_BASE"] << 16

MAX_INST_BYTES = 32   # more than the longest RDNA encoding with its literal: what a decode needs in hand

class Program:
  """Decoded and compiled basic blocks of one code image at `addr`, built lazily per start PC (an offset from addr).
  Its code is what the instruction fetch has read so far: a block that runs past it reads further (an instruction-cache
  miss), and a call or jump below addr (LLVM places functions before the kernel too) reads the pages down to it."""
  def __init__(self, arch: str, addr: int, code: bytes, lanes: int, acc: int = 0):
    self.arch, self.addr, self.L, self.fam, self.acc = arch, addr, lanes, family(arch), acc
    self.buf, self.off = code, 0   # the fetched bytes, from addr - off on
    self.blocks: dict[int, tuple[list, bool]] = {}

  @property
  def code(self) -> bytes:
    """The fetched bytes from addr on."""
    return self.buf[self.off:]

  def _fetch_below(self, pc: int, mem: GPUMemory) -> None:
    """Read the pages from the one holding addr + pc up to what is fetched; an unmapped page leaves them unread."""
    start = (self.addr + pc) & ~0xfff
    want = self.addr - self.off - start
    got = _prefetch(mem, start, want)
    if len(got) >= want: self.buf, self.off = got[:want] + self.buf, self.off + want

  def block(self, pc: int, mem: GPUMemory | None = None) -> tuple[list, bool]:
    b = self.blocks.get(pc)
    if b is None:
      b, keep = self._build(pc, mem)
      if keep: self.blocks[pc] = b
    return b

  def _build(self, pc: int, mem: GPUMemory | None) -> tuple[tuple[list, bool], bool]:
    """(the block at pc, whether to keep it: a block that ends at unmapped code is built again next time)."""
    fns, gpr_idx = [], None   # gpr_idx: CDNA's VGPR indexing mode, followed through the block (gfx9.gpr_idx_mode)
    while True:
      if mem is not None and pc < -self.off: self._fetch_below(pc, mem)
      if mem is not None and pc + self.off + MAX_INST_BYTES > len(self.buf):
        self.buf += _prefetch(mem, self.addr - self.off + len(self.buf), pc + self.off + MAX_INST_BYTES - len(self.buf))
      try:
        if pc < -self.off: raise CodeEnds("code below what could be fetched")
        i = decode_at(self.arch, self.buf, pc + self.off)
        i.addr = pc                      # PCs count from addr, whatever was fetched below it
        if i.y is not None: i.y.addr = pc
        fn = compile_inst(i, self.L, self.fam, self.acc, gpr_idx)
        if self.fam == "gfx9": gpr_idx = gfx9_gpr_idx_mode(i, gpr_idx)
      except (DecodeError, EmuFault) as e:
        if mem is not None and isinstance(e, CodeEnds):   # past the fetched code, and the prefetch found no more
          fns.append((self._fetch_fault(pc), pc, pc + 4))
          return (fns, True), False
        msg = e.msg if isinstance(e, EmuFault) else f"illegal instruction at {pc:#x}: {e}"
        def fault(st, msg=msg, pc=pc): raise EmuFault(msg, pc)
        fault.terminator = True
        fns.append((fault, pc, pc + 4))
        return (fns, True), True
      fns.append((fn, pc, pc + i.size))
      pc += i.size
      if getattr(fn, "terminator", False): return (fns, True), True
      # a long block is cut, but not inside a VGPR indexing region: the mode is followed at compile time, so the
      # next block would start as not indexed (seed 8095 on gfx942: a cut between s_set_gpr_idx_on and its v_mov)
      if len(fns) >= 256 and gpr_idx is None: return (fns, False), True

  def _fetch_fault(self, pc: int):
    """The wave reaches code on an unmapped page: the fetch of it faults (reported, as the SQC's instruction path)."""
    def fetch_fault(st, addr=self.addr + pc if pc < -self.off else self.addr + len(self.code)):
      _first_fetch(st.mem, addr, 4)   # raises MemoryFault: the page is still unmapped
      raise EmuFault(f"illegal instruction at {pc:#x}: the code at {addr:#x} was not there when it was decoded", pc)
    fetch_fault.terminator = True
    return fetch_fault

_CACHE: dict[tuple, Program] = {}
SUBSET_MIN = 16  # waves in a dispatch before diverged groups run on a compact copy

def _first_fetch(mem: GPUMemory, addr: int, n: int) -> bytes:
  """An instruction fetch that reports a fault (raises MemoryFault) where the code is not mapped."""
  return getattr(mem, "fetch", mem.read)(addr, n)

def _prefetch(mem: GPUMemory, addr: int, n: int) -> bytes:
  """Up to n bytes (whole pages) of code from addr, stopping at the first unmapped page without reporting it
  (memories with a `prefetch` method read without reporting; others fault quietly here)."""
  out, peek = b"", getattr(mem, "prefetch", None)
  while len(out) < n:
    at = addr + len(out)
    if peek is not None: chunk = peek(at, 4096 - at % 4096)
    else:
      try: chunk = mem.read(at, 4096 - at % 4096)
      except MemoryFault: chunk = None
    if not chunk: break
    out += chunk
  return out

def _code(mem: GPUMemory, addr: int, n: int) -> bytes:
  """The program's first page (its fetch faults, reported, where it is unmapped: b""), then up to n bytes as far
  as memory is mapped."""
  try: out = _first_fetch(mem, addr, 4096 - addr % 4096)
  except MemoryFault: return b""
  return out + _prefetch(mem, addr + len(out), n - len(out)) if n > len(out) else out

def program_for(mem: GPUMemory, arch: str, addr: int, lanes: int, acc: int = 0) -> Program:
  """The decoded program at addr: the one decoded before if memory still holds the bytes it was decoded from,
  else one decoded afresh from the first page on (the rest is fetched as the waves reach it). acc: where CDNA's
  AGPRs start in the register file (the kernel's ACCUM_OFFSET), compiled into the code's register numbers."""
  key = (arch, lanes, addr, acc)
  p = _CACHE.get(key)
  code = _code(mem, addr, len(p.code) if p is not None else 0)
  if not code: raise EmuFault("page fault", addr)
  if p is None or p.code != code or (p.off and _prefetch(mem, addr - p.off, p.off) != p.buf[:p.off]):   # code below too
    if len(_CACHE) > 64: _CACHE.clear()
    p = _CACHE[key] = Program(arch, addr, code, lanes, acc)
  return p

_SHAPES: dict[tuple, State] = {}   # the initial State of small dispatches by launch shape (see init_state)
SHAPE_MAX_BYTES = 256 << 10        # registers of at most this size: beyond, computing afresh costs no more than copying

def init_state(mem: GPUMemory, r: DispatchRegs, fl: Fields) -> State:
  """The waves' registers at dispatch start. Everything but the user SGPRs follows from the launch shape, so small
  dispatches (where numpy's per-call cost dominates) start from a copy of the state computed the first time."""
  g = launch_grid(r)
  key = (r.arch, fl, g)
  tmpl = _SHAPES.get(key)
  if tmpl is None:
    tmpl = _shape_state(mem, family(r.arch), g, fl)
    if tmpl.s.nbytes + tmpl.v.nbytes > SHAPE_MAX_BYTES: return _with_user_data(tmpl, r, fl)
    if len(_SHAPES) > 64: _SHAPES.clear()
    _SHAPES[key] = tmpl
  return _with_user_data(tmpl.fresh(mem), r, fl)

def _with_user_data(st: State, r: DispatchRegs, fl: Fields) -> State:
  ud = list(r.user_data) + [0] * 32
  for k in range(fl.user_sgprs): st.s[k] = u32(ud[k] & 0xffffffff)
  return st

def _shape_state(mem: GPUMemory, fam: str, g: Grid, fl: Fields) -> State:
  L = 32 if fl.wave32 else 64
  nt, ngrid = g.size, g.count
  per_wg = nt[0] * nt[1] * nt[2]
  wpg = -(-per_wg // L)
  nwg = ngrid[0] * ngrid[1] * ngrid[2]
  W = nwg * wpg
  wg = np.repeat(np.arange(nwg, dtype=np.int64), wpg)
  st = State(W, L, fl.vgprs, wg, fl.lds_bytes, mem, fam)
  st.wpg = wpg
  wgx, wgy, wgz = wg % ngrid[0], wg // ngrid[0] % max(ngrid[1], 1), wg // (ngrid[0] * max(ngrid[1], 1))
  # work-items: linear id within the group -> x, y, z; lanes past the group's size start with EXEC off
  lin = (np.arange(W) % wpg)[:, None] * L + np.arange(L)[None, :]
  # the last group of each dimension may be partial
  sx, sy, sz = (np.where(w == n - 1, last, t) for w, n, last, t in zip((wgx, wgy, wgz), ngrid, g.last, nt))
  tx, ty, tz = lin % nt[0], lin // nt[0] % nt[1], lin // (nt[0] * nt[1])
  valid = (lin < per_wg) & (tx < sx[:, None]) & (ty < sy[:, None]) & (tz < sz[:, None])
  tid = tx.astype(u32)
  if fl.tidig_cnt >= 1: tid |= ty.astype(u32) << u32(10)
  if fl.tidig_cnt >= 2: tid |= tz.astype(u32) << u32(20)
  if st.nvgpr: st.v[0] = np.where(valid, tid, 0)
  words = st.pack(valid)
  st.s[126] = words[:, 0]
  if L == 64: st.s[127] = words[:, 1]
  n = fl.user_sgprs   # the user SGPRs come first (_with_user_data)
  ids = [wgx + g.first[0], wgy + g.first[1], wgz + g.first[2]]
  for k in range(3):
    if fl.tgid_en[k]: st.s[n] = ids[k].astype(u32); n += 1
  if fl.tg_size_en:  # workgroup info: wave id in group [4:0]... first-wave bit [10:6], waves in group [15:12]?
    st.s[n] = ((np.arange(W) % wpg).astype(u32) << u32(6)) | u32(wpg); n += 1
  if fl.scratch_en and fam != "gfx12":   # the wave's byte offset in the scratch ring: set with its slot (take_slots)
    st.offset_sgpr = n; n += 1
  if fam == "gfx12":  # architected SGPRs: workgroup ids in TTMP9 and TTMP7 (AMDGPUUsage)
    st.s[108 + 9] = ids[0].astype(u32)
    st.s[108 + 7] = (ids[1].astype(u32) & u32(0xffff)) | (ids[2].astype(u32) << u32(16))
  st.hwreg[1] = u32(fl.float_mode)  # HW_REG_MODE[7:0] = RSRC1.FLOAT_MODE: round [3:0], denormals [7:4]
  if fl.scratch_en and fl.scratch_wave_bytes:
    st.scratch_wave_bytes = fl.scratch_wave_bytes
  return st

def run_waves(st: State, prog: Program, max_instructions: int | None, slice_s: Callable[[], float] | None = None) -> Iterator[None]:
  """Run the waves to the end; with slice_s (a function saying how many seconds the next slice lasts), a generator
  that yields after each slice, so whoever drives it (the board's worker) can let the other engines run meanwhile."""
  while True:
    until = None if slice_s is None else time.perf_counter() + slice_s()
    with np.errstate(all="ignore"):
      if _run_for(st, prog, max_instructions, until): return
    yield

_NO_PC = np.iinfo(np.int64).max   # what a wave that may not run counts as when the lowest PC is picked

def _run_for(st: State, prog: Program, max_instructions: int | None, until: float | None) -> bool:
  """Run block after block until every wave ended (True) or the clock passes `until` (False)."""
  while True:
    live = ~st.done
    if not live.any(): return True
    if until is not None and time.perf_counter() > until: return False
    runnable = live & ~st.waiting
    if not runnable.any():
      st.waiting[:] = False  # every live wave is parked at a barrier: all groups may go
      continue
    pcs = np.where(runnable, st.pc, _NO_PC)
    p = int(pcs.min())
    sel = pcs == p
    nsel = int(sel.sum())
    fns, _ = prog.block(p, st.mem)
    res = None
    nxt = p
    if nsel * 4 <= st.W and st.W >= SUBSET_MIN:
      # a few diverged waves: run them on a compact copy so the cost follows them, not the dispatch
      idx = np.flatnonzero(sel)
      sub = st.subset(idx)
      for fn, at, nxt in fns:
        res = fn(sub)
      st.merge(idx, sub)
      if isinstance(res, np.ndarray):
        full = np.zeros(st.W, np.int64); full[idx] = res; res = full
    else:
      st.select(None if nsel == st.W else sel)
      for fn, at, nxt in fns:
        res = fn(st)
    st.count += nsel * len(fns)
    if max_instructions is not None and st.count > max_instructions:
      raise EmuFault(f"instruction limit of {max_instructions} wave-instructions reached at {nxt:#x}", nxt)
    if res is END: st.done |= sel
    elif res is BARRIER:
      st.waiting |= sel
      st.pc[sel] = nxt
      _release(st)
    elif res is None: st.pc[sel] = nxt
    elif isinstance(res, (int, np.integer)): st.pc[sel] = int(res)
    else: st.pc[sel] = np.broadcast_to(res, (st.W,))[sel]

def _release(st: State) -> None:
  """Release the groups whose live waves are all at the barrier (ended waves count as arrived)."""
  live = ~st.done
  n_live = np.bincount(st.wg, weights=live, minlength=int(st.wg.max(initial=0)) + 1)
  n_wait = np.bincount(st.wg, weights=st.waiting & live, minlength=len(n_live))
  go = (n_live == n_wait)[st.wg]
  st.waiting &= ~go

@dataclass(frozen=True)
class Stalled:
  """What dispatch_slices yields, again and again, for a dispatch none of whose workgroups can ever start."""
  why: str

def scratch_batches(st: State, fl: Fields, regs: DispatchRegs) -> list[tuple[np.ndarray, np.ndarray]] | None:
  """The waves of a dispatch with private memory in the batches they run in, each wave with its scratch slot.

  A wave holds a slot of the scratch ring from its start to its end. The dispatcher starts a workgroup only when all
  its waves get slots on the shader engine it goes to (TMPRING_SIZE.WAVES of them per engine on gfx11+, as Mesa's
  radv_emit_compute_scratch sizes it; of the whole queue on gfx9) and holds the rest back until slots free (ROCr
  and Mesa size WAVES for that). Workgroups go to the engines in turn. Which slot a wave takes is not public: here
  the workgroups that fit run to the end before the next ones start, each engine's slots taken in order.
  None: the waves take no slots (no scratch). []: no workgroup fits an engine's slots."""
  if not (fl.scratch_en and fl.scratch_wave_bytes): return None
  engines = 1 if family(regs.arch) == "gfx9" else max(1, regs.shader_engines)
  fit = fl.scratch_waves // st.wpg          # workgroups that fit one engine's slots at once
  if fit == 0: return []
  groups, batch = st.W // st.wpg, fit * engines
  out = []
  for first in range(0, groups, batch):
    k = np.arange(min(groups - first, batch))   # the batch's workgroups, in order
    first_slot = (k % engines) * fl.scratch_waves + (k // engines) * st.wpg
    waves = ((first + k)[:, None] * st.wpg + np.arange(st.wpg)).reshape(-1)
    out.append((waves, (first_slot[:, None] + np.arange(st.wpg)).reshape(-1)))
  return out

def _take_slots(st: State, slots: np.ndarray) -> None:
  st.slot = slots
  if st.offset_sgpr is not None: st.s[st.offset_sgpr] = (slots * st.scratch_wave_bytes).astype(u32)

def _run_batches(st: State, fl: Fields, regs: DispatchRegs, prog: Program, max_instructions: int | None,
                 slice_s: Callable[[], float] | None) -> Generator:
  batches = scratch_batches(st, fl, regs)
  if batches is None:
    yield from run_waves(st, prog, max_instructions, slice_s)
    return
  if not batches:
    why = (f"a workgroup of {st.wpg} waves with private memory needs as many scratch slots on one shader engine, and "
           f"COMPUTE_TMPRING_SIZE.WAVES gives {fl.scratch_waves}: no workgroup can start (the dispatch hangs)")
    while True: yield Stalled(why)
  for waves, slots in batches:
    sub = st if len(waves) == st.W else st.subset(waves)
    _take_slots(sub, slots)
    yield from run_waves(sub, prog, max_instructions, slice_s)
    st.count = sub.count

def run_dispatch(mem: GPUMemory, regs: DispatchRegs, *, max_instructions: int | None = None) -> DispatchResult:
  """Run one dispatch to completion. Never raises for what the program does: faults come back in the result, and
  so does a dispatch that could never start (on the board it hangs)."""
  gen = dispatch_slices(mem, regs, max_instructions=max_instructions)
  while True:
    try: y = next(gen)
    except StopIteration as done: return done.value
    if isinstance(y, Stalled):
      gen.close()
      return DispatchResult(False, y.why, None, 0)

def dispatch_slices(mem: GPUMemory, regs: DispatchRegs, *, max_instructions: int | None = None,
                    slice_s: Callable[[], float] | None = None) -> Generator[None, None, DispatchResult]:
  """run_dispatch as a generator that yields after every slice of wave time (slice_s() seconds) and returns the result."""
  st = None
  try:
    fl = decode_regs(regs)
    st = init_state(mem, regs, fl)
    if st.W == 0: return DispatchResult(True, None, None, 0)
    prog = program_for(mem, regs.arch, regs.pgm_addr, st.L, fl.accum_offset)
    st.pc_base = regs.pgm_addr
    st.scratch_base = regs.scratch_base
    st.apertures = apertures(regs.arch, regs.sh_mem_bases)
    yield from _run_batches(st, fl, regs, prog, max_instructions, slice_s)
    return DispatchResult(True, None, None, st.count)
  except EmuFault as e:
    if e.msg == "page fault": return DispatchResult(False, "page fault", e.addr, st.count if st is not None else 0)
    # code offsets in the message become GPU virtual addresses
    msg = re.sub(r"at 0x([0-9a-f]+)", lambda m: f"at {regs.pgm_addr + int(m.group(1), 16):#x}", e.msg)
    addr = None if e.addr is None else regs.pgm_addr + e.addr
    return DispatchResult(False, msg, addr, st.count if st is not None else 0)
  except MemoryFault as e:
    return DispatchResult(False, "page fault", e.addr, st.count if st is not None else 0)
