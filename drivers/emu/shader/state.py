"""Register state of every wave of a dispatch, held as numpy arrays so one instruction runs for all waves at once.

SGPRs: s[reg, wave] (reg numbers are the operand encoding: 0-105 SGPRs, 106/107 VCC, 108-123 TTMP, 125 M0,
126/127 EXEC). VGPRs: v[reg, wave, lane]. `sel` names the waves the current instruction runs for (None: all)."""
from __future__ import annotations
import numpy as np

u32, u64 = np.uint32, np.uint64

class EmuFault(Exception):
  """A wave did something the hardware halts the dispatch for (illegal instruction, page fault, trap)."""
  def __init__(self, msg: str, addr: int | None = None):
    super().__init__(msg)
    self.msg, self.addr = msg, addr

class State:
  def __init__(self, waves: int, lanes: int, nvgpr: int, wg_of_wave: np.ndarray, lds_bytes: int, mem, fam: str):
    self.W, self.L, self.fam, self.mem = waves, lanes, fam, mem
    self.s = np.zeros((128, waves), u32)
    self.v = np.zeros((nvgpr, waves, lanes), u32)
    self.nvgpr = nvgpr
    self.scc = np.zeros(waves, bool)
    self.pc = np.zeros(waves, np.int64)
    self.done = np.zeros(waves, bool)
    self.waiting = np.zeros(waves, bool)
    self.wg = wg_of_wave
    self.lds_bytes = lds_bytes
    self.lds = np.zeros(max(1, int(wg_of_wave.max(initial=0)) + 1) * max(lds_bytes, 4) + 16, np.uint8)
    self.lds_base = wg_of_wave.astype(np.int64) * max(lds_bytes, 4)
    self.lane = np.arange(lanes, dtype=u32)
    self.lane_bit = (u32(1) << (self.lane % u32(32)))
    self.apertures = (0, 0)          # the shared (LDS) and private apertures: a generic address's high dword there
    self.scratch_base = 0            # COMPUTE_DISPATCH_SCRATCH_BASE as a byte address
    self.scratch_wave_bytes = 0      # each wave's slot (COMPUTE_TMPRING_SIZE.WAVESIZE)
    self.slot = np.arange(waves)     # the scratch slot each wave holds while it runs
    self.offset_sgpr: int | None = None   # the system SGPR with the wave's byte offset in the scratch ring, if enabled
    self.wpg = 1                     # waves per workgroup
    self.hwreg = np.zeros((32, waves), u32)
    self._fmode: int | None = None  # MODE's float byte when every wave has the same one, else -1 (see fmode)
    self.sel: np.ndarray | None = None
    self.masks: dict[int, np.ndarray] = {}  # lane masks last written by VALU, as bools (saves unpacking them again)
    self._em: np.ndarray | None = None
    self._full = True
    self.count = 0
    self.pc_base = 0  # GPU virtual address of the program start (PCs here are offsets from it)

  def fresh(self, mem) -> "State":
    """A new State with this one's registers, for a template of a launch shape: what the waves write is copied,
    what they only read (workgroup of each wave, lane constants) is shared."""
    st = object.__new__(State)
    st.__dict__.update(self.__dict__)
    st.mem = mem
    st.s, st.v, st.scc, st.pc, st.hwreg = self.s.copy(), self.v.copy(), self.scc.copy(), self.pc.copy(), self.hwreg.copy()
    st.done, st.waiting, st.lds = self.done.copy(), self.waiting.copy(), np.zeros_like(self.lds)
    st.masks, st.sel, st._em, st._full, st._fmode, st.count = {}, None, None, True, None, 0
    return st

  def subset(self, idx: np.ndarray) -> "State":
    """A State holding copies of the waves idx (LDS and memory shared), for running a few diverged waves
    without touching every wave's registers. Write it back with merge()."""
    sub = object.__new__(State)
    sub.__dict__.update(self.__dict__)
    sub.W = len(idx)
    c = np.ascontiguousarray  # fancy indexing along a middle axis need not give C order; the executor reshapes views
    sub.s, sub.v, sub.scc, sub.hwreg = c(self.s[:, idx]), c(self.v[:, idx]), self.scc[idx], c(self.hwreg[:, idx])
    sub.pc, sub.done, sub.waiting, sub.wg = self.pc[idx], self.done[idx], self.waiting[idx], self.wg[idx]
    sub.lds_base, sub.slot = self.lds_base[idx], self.slot[idx]
    sub.sel, sub._em, sub._full, sub.masks = None, None, True, {}
    return sub

  def merge(self, idx: np.ndarray, sub: "State") -> None:
    self.s[:, idx], self.v[:, idx], self.scc[idx], self.hwreg[:, idx] = sub.s, sub.v, sub.scc, sub.hwreg
    self.count = sub.count
    self.masks.clear()
    self._fmode = None
    self._em = None

  @property
  def fmode(self) -> int:
    """MODE[7:0] (float round and denormal controls) shared by all waves, or -1 when they differ."""
    m = self._fmode
    if m is None:
      col = self.hwreg[1] & u32(0xff)
      m = self._fmode = int(col[0]) if self.W and bool((col == col[0]).all()) else -1
    return m

  def set_hwreg(self, hw: int, new) -> None:
    if self.sel is None: self.hwreg[hw] = new
    else: self.hwreg[hw] = np.where(self.sel, new, self.hwreg[hw])
    if hw == 1: self._fmode = None

  # ---- which lanes an instruction touches ----------------------------------------------------------------------
  def select(self, sel: np.ndarray | None) -> None:
    self.sel, self._em = sel, None

  def exec_lanes(self) -> np.ndarray:
    """EXEC as (waves, lanes) bools."""
    return self.unpack(126)

  def unpack(self, r: int) -> np.ndarray:
    m = self.masks.get(r)
    if m is not None: return m
    m = ((self.s[r][:, None] & self.lane_bit[: min(self.L, 32)]) != 0)
    if self.L == 64: m = np.concatenate([m, (self.s[r + 1][:, None] & self.lane_bit[32:]) != 0], 1)
    self.masks[r] = m  # valid until ws() writes r or r + 1
    return m

  def pack(self, b: np.ndarray) -> np.ndarray:
    """(waves, lanes) bools -> (waves, lanes/32) uint32 words."""
    return np.packbits(np.ascontiguousarray(b, bool), axis=1, bitorder="little").view("<u4")

  @property
  def emask(self) -> np.ndarray:
    if self._em is None:
      em = self.exec_lanes()
      if self.sel is not None: em = em & self.sel[:, None]
      self._em = em
      self._full = bool(em.all())
    return self._em

  @property
  def full(self) -> bool:
    self.emask
    return self._full

  def exec_changed(self) -> None:
    self._em = None

  # ---- write-back -------------------------------------------------------------------------------------------------
  def wv(self, r: int, val) -> None:
    """Write VGPR r for the active lanes of the selected waves."""
    if self.full: self.v[r][...] = val
    else: np.copyto(self.v[r], val, where=self.emask, casting="unsafe")

  def ws(self, r: int, val) -> None:
    """Write SGPR r (or a special register) for the selected waves."""
    if r == 124: return  # NULL
    if self.masks:
      self.masks.pop(r, None); self.masks.pop(r - 1, None)
    if self.sel is None: self.s[r][...] = val
    else: np.copyto(self.s[r], val, where=self.sel, casting="unsafe")
    if r in (126, 127): self.exec_changed()

  def ws64(self, r: int, val) -> None:
    if r == 124: return   # NULL: the pair's second half would be M0
    val = np.asarray(val).astype(u64, copy=False)
    self.ws(r, (val & u64(0xffffffff)).astype(u32))
    self.ws(r + 1, (val >> u64(32)).astype(u32))

  def wscc(self, val) -> None:
    if self.sel is None: self.scc[...] = val
    else: np.copyto(self.scc, val, where=self.sel)

  def wmask(self, r: int, b: np.ndarray) -> None:
    """Write a per-lane result mask to SGPR r (pair in wave64); lanes outside EXEC read as 0. NULL (124) takes
    nothing: in wave64 its pair's second half would be M0 (a carry-out to null used to clobber M0)."""
    if r == 124: return
    b = b & self.exec_lanes()
    words = self.pack(b)
    self.ws(r, words[:, 0])
    if self.L == 64: self.ws(r + 1, words[:, 1])
    if self.sel is None: self.masks[r] = b

  def s64(self, r: int) -> np.ndarray:
    return self.s[r].astype(u64) | (self.s[r + 1].astype(u64) << u64(32))

  def selected(self) -> np.ndarray:
    return np.ones(self.W, bool) if self.sel is None else self.sel
