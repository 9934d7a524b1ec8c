"""The memory seam between the compute units and the board: GPUMemory (protocol) and FlatMemory (one numpy buffer)."""
from __future__ import annotations
from typing import Protocol

import numpy as np

class MemoryFault(Exception):
  """A GPU virtual address with no valid translation. Raised by GPUMemory; run_dispatch turns it into a fault."""
  def __init__(self, addr: int, write: bool):
    self.addr, self.write = int(addr), write
    super().__init__(f"GPU page fault at {self.addr:#x} ({'write' if write else 'read'})")

_DT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

class GPUMemory(Protocol):
  """The GMC's translated view of GPU virtual memory. Addresses are uint64 vectors in lane order (already masked to
  the active lanes); each method raises MemoryFault(addr, write) for the first bad address and then does nothing."""
  def load(self, addrs: np.ndarray, size: int) -> np.ndarray: ...
  def store(self, addrs: np.ndarray, values: np.ndarray, size: int) -> None: ...
  def atomic(self, op: str, addrs: np.ndarray, values: np.ndarray, size: int, cmp: np.ndarray | None = None) -> np.ndarray: ...
  def read(self, addr: int, n: int) -> bytes: ...
  # Optional: a memory that tells the shader's clients apart (the GMC names the one that faulted) also has
  # scalar_load(addrs, size) for scalar loads (the SQC's data path) and fetch(addr, n) for instruction fetch (the
  # SQC's instruction path); without them those are load() and read().

# Atomic operations, as (op name) -> f(old, value, cmp) -> new. Names are the protocol's vocabulary.
def _f32(x): return x.view(np.float32)
def _f64(x): return x.view(np.float64)
def _signed(x): return x.view(np.int32 if x.dtype == np.uint32 else np.int64)

def _fmin(o, v, f):
  a, b = f(o), f(v)
  return np.where(np.isnan(a), b, np.where(np.isnan(b), a, np.minimum(a, b))).astype(a.dtype).view(o.dtype)

def _fmax(o, v, f):
  a, b = f(o), f(v)
  return np.where(np.isnan(a), b, np.where(np.isnan(b), a, np.maximum(a, b))).astype(a.dtype).view(o.dtype)

ATOMIC_OPS = {
  "swap": lambda o, v, c: v,
  "cmpswap": lambda o, v, c: np.where(o == c, v, o),
  "add": lambda o, v, c: o + v,
  "sub": lambda o, v, c: o - v,
  "smin": lambda o, v, c: np.minimum(_signed(o), _signed(v)).view(o.dtype),
  "smax": lambda o, v, c: np.maximum(_signed(o), _signed(v)).view(o.dtype),
  "umin": lambda o, v, c: np.minimum(o, v),
  "umax": lambda o, v, c: np.maximum(o, v),
  "and": lambda o, v, c: o & v,
  "or": lambda o, v, c: o | v,
  "xor": lambda o, v, c: o ^ v,
  "inc": lambda o, v, c: np.where(o >= v, 0, o + 1).astype(o.dtype),
  "dec": lambda o, v, c: np.where((o == 0) | (o > v), v, o - 1).astype(o.dtype),
  "fadd": lambda o, v, c: (_f32(o) + _f32(v)).view(o.dtype) if o.dtype == np.uint32 else (_f64(o) + _f64(v)).view(o.dtype),
  "fmin": lambda o, v, c: _fmin(o, v, _f32 if o.dtype == np.uint32 else _f64),
  "fmax": lambda o, v, c: _fmax(o, v, _f32 if o.dtype == np.uint32 else _f64),
  "csub": lambda o, v, c: np.where(o >= v, o - v, o).astype(o.dtype),  # subtract unless it would wrap
  "rsub": lambda o, v, c: v - o,                                        # LDS only
  "mskor": lambda o, v, c: (o & ~v) | c,                                # LDS only: v mask, c bits
}

def atomic_apply(buf: np.ndarray, idx: np.ndarray, op: str, values: np.ndarray, cmp: np.ndarray | None) -> np.ndarray:
  """Apply op at buf[idx] in lane order (later lanes see earlier lanes' results); return the old values."""
  f = ATOMIC_OPS[op]
  values = values.astype(buf.dtype, copy=False)
  cmp = None if cmp is None else cmp.astype(buf.dtype, copy=False)
  old = np.empty(len(idx), buf.dtype)
  todo = np.arange(len(idx))
  while len(todo):  # each round takes the first remaining lane of every address, so rounds = worst multiplicity
    _, first = np.unique(idx[todo], return_index=True)
    now = todo[first]
    o = buf[idx[now]]
    old[now] = o
    buf[idx[now]] = f(o, values[now], None if cmp is None else cmp[now])
    if len(now) == len(todo): break
    keep = np.ones(len(todo), bool)
    keep[first] = False
    todo = todo[keep]
  return old

class FlatMemory:
  """GPUMemory over one numpy buffer mapped at [base, base + size). Everything else faults."""
  def __init__(self, size: int, base: int = 0x1000_0000, buf: np.ndarray | None = None):
    self.base = base
    self.buf = np.zeros(size, np.uint8) if buf is None else buf.view(np.uint8).reshape(-1)
    self.size = len(self.buf)

  def _index(self, addrs: np.ndarray, size: int, write: bool) -> np.ndarray:
    a = np.asarray(addrs, np.uint64)
    off = a - np.uint64(self.base)  # wraps for addresses below base, so one comparison checks both ends
    bad = off > np.uint64(self.size - size) if self.size >= size else np.ones(len(a), bool)
    if bad.any(): raise MemoryFault(int(a[np.argmax(bad)]), write)
    return off.astype(np.int64)

  def _view(self, size: int, off: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """An aligned typed view of the buffer and element indices, when every offset is aligned."""
    if size == 1: return self.buf, off
    if (self.base % size == 0) and not (off & (size - 1)).any() and self.size % size == 0:
      return self.buf.view(_DT[size]), off >> (size.bit_length() - 1)
    return None

  def load(self, addrs: np.ndarray, size: int) -> np.ndarray:
    if size == 16: return np.stack([self.load(np.asarray(addrs, np.uint64) + np.uint64(4 * k), 4) for k in range(4)], 1)
    off = self._index(addrs, size, False)
    v = self._view(size, off)
    if v is not None: return v[0][v[1]]
    b = self.buf[off[:, None] + np.arange(size)]
    return np.ascontiguousarray(b).view(_DT[size]).reshape(-1)

  def store(self, addrs: np.ndarray, values: np.ndarray, size: int) -> None:
    if size == 16:
      vals = np.asarray(values, np.uint32).reshape(-1, 4)
      for k in range(4): self.store(np.asarray(addrs, np.uint64) + np.uint64(4 * k), vals[:, k], 4)
      return
    off = self._index(addrs, size, True)
    vals = np.asarray(values).astype(_DT[size], copy=False)
    v = self._view(size, off)
    if v is not None: v[0][v[1]] = vals; return
    self.buf[off[:, None] + np.arange(size)] = np.ascontiguousarray(vals).view(np.uint8).reshape(-1, size)

  def atomic(self, op: str, addrs: np.ndarray, values: np.ndarray, size: int, cmp: np.ndarray | None = None) -> np.ndarray:
    off = self._index(addrs, size, True)
    v = self._view(size, off)
    if v is None: raise MemoryFault(int(np.asarray(addrs)[0]), True)  # atomics must be naturally aligned
    return atomic_apply(v[0], v[1], op, np.asarray(values), cmp)

  def read(self, addr: int, n: int) -> bytes:
    off = addr - self.base
    if off < 0 or off + n > self.size: raise MemoryFault(addr if off < 0 else self.base + self.size, False)
    return self.buf[off:off + n].tobytes()

  # conveniences for tests and tools
  def write(self, addr: int, data: bytes | np.ndarray) -> None:
    b = np.frombuffer(bytes(data), np.uint8) if isinstance(data, (bytes, bytearray)) else np.asarray(data).view(np.uint8).reshape(-1)
    off = addr - self.base
    if off < 0 or off + len(b) > self.size: raise MemoryFault(addr, True)
    self.buf[off:off + len(b)] = b
