"""Buffers: GPU memory with a CPU view where there is one, sub-buffers, and copies in and out."""
from __future__ import annotations
import weakref
from typing import TYPE_CHECKING
import numpy as np
from rawgpu.drivers.iface import Mem
from rawgpu.errors import RawGPUError
from rawgpu.hcq.patch import as_index

if TYPE_CHECKING: from rawgpu.hcq.device import Device


class Local:
  """The value of a kernel's __local pointer argument: nbytes of LDS for each workgroup, placed after the kernel's own
  LDS at launch (OpenCL's clSetKernelArg with a size and no value)."""
  def __init__(self, nbytes: int):
    n = as_index(nbytes)
    if n is None or n <= 0: raise RawGPUError(f"Local takes a positive number of bytes, not {nbytes!r}")
    self.nbytes = n

  def __repr__(self) -> str: return f"Local({self.nbytes})"


class GraphUses:
  """A graph's share of the buffers it recorded: each device's ticket of its part of the last replay, updated in
  place by every replay; the buffers hold this (not the graph), so it outlives a graph dropped while it runs."""
  __slots__ = ("tickets", "graph")

  def __init__(self, graph):
    self.tickets: dict = {}           # Device -> ticket
    self.graph = weakref.ref(graph)   # (for Buffer.free to mark it)

  def done(self) -> bool:
    return all(d.closed or d.done(t) for d, t in self.tickets.items())


class Buffer:
  def __init__(self, dev: "Device", mem: Mem, offset: int = 0, size: int | None = None, base: "Buffer | None" = None):
    self.dev, self.mem, self.offset = dev, mem, offset
    self.va = mem.va + offset   # GPU virtual address (fixed for the buffer's life; read on every launch)
    self.size = mem.size - offset if size is None else size
    self.base = base          # the buffer this is a view of, or None
    self.last_use = 0         # timeline value of the last queued work that touches it
    self.freed = False
    self.peer_use: dict = {}  # Device -> its timeline ticket of the last work of another device that touches it
    self.graphs = None        # on the root: the GraphUses of the graphs that recorded it (their replays are uses)
    self.lent = False         # on the root: other devices' work touched it (Device._lent holds it)

  @property
  def host(self) -> bool: return self.mem.host

  def view(self, offset: int, size: int) -> "Buffer":
    o, n = as_index(offset), as_index(size)   # (numpy's ints too)
    if o is None or n is None: raise RawGPUError(f"a sub-buffer takes an int offset and size, not {offset!r} and {size!r}")
    offset, size = o, n
    if offset < 0 or size < 0 or offset + size > self.size: raise RawGPUError(f"sub-buffer {offset}+{size} is outside a {self.size}-byte buffer")
    return Buffer(self.dev, self.mem, self.offset + offset, size, self.base or self)

  def _root(self) -> "Buffer": return self.base or self

  def used_until(self, value: int) -> None:
    r = self._root()
    r.last_use = max(r.last_use, value)

  def used_by(self, dev: "Device", value: int) -> None:
    """Work of `dev` (this buffer's device, or another that mapped it) touches it until `dev`'s ticket `value`."""
    r = self.base or self
    if dev is r.dev:
      if r.last_use < value: r.last_use = value
    else:
      r.peer_use[dev] = max(r.peer_use.get(dev, 0), value)
      if not r.lent: r._lend()

  def owner_use(self) -> int:
    """The owner's ticket of the last queued work that touches it: launches, copies, and the last replay of each
    graph that recorded it (counted here, not at every replay: a replay costs nothing per buffer)."""
    r = self.base or self
    t = r.last_use
    for u in r._uses():
      t = max(t, u.tickets.get(r.dev, 0))
    return t

  def peer_uses(self) -> dict:
    """Device -> its ticket of the last work of another device that touches it (graphs' replays included)."""
    r = self.base or self
    out = dict(r.peer_use)
    for u in r._uses():
      for d, t in u.tickets.items():
        if d is not r.dev and t > out.get(d, 0): out[d] = t
    return out

  def recorded_by(self, uses: "GraphUses") -> None:
    """A graph recorded this buffer: its replays count as uses from now on, even after the graph is gone."""
    r = self.base or self
    r.graphs = [*r._uses(), uses]
    if not r.lent: r._lend()

  def _lend(self) -> None:
    """(On the root) another device's work touches it from now on: its device's close waits for that work."""
    self.lent = True
    self.dev._lent.add(self)

  def _uses(self) -> list:
    """(On the root) its graphs' use records, less those of graphs gone whose work is done."""
    if not self.graphs: return []
    if any(u.graph() is None and u.done() for u in self.graphs):
      self.graphs = [u for u in self.graphs if u.graph() is not None or not u.done()]
    return self.graphs

  def wait_peers(self, but: "Device | None" = None) -> None:
    """Wait for the work other devices queued on this buffer (all but `but`)."""
    for dev, v in self.peer_uses().items():
      if dev is not but and not dev.closed: dev.wait_timeline(v)

  def copyin(self, src) -> "Buffer":
    """Copy bytes / a numpy array / a memoryview (any buffer) into the buffer once the queued work that uses it is
    done (host buffers directly, small copies into CPU-visible VRAM through the BAR, the rest through the copy engine).
    Non-contiguous sources are gathered first."""
    data = _bytes_of(src, "copyin source")
    if len(data) > self.size: raise RawGPUError(f"copyin of {len(data)} bytes into a {self.size}-byte buffer")
    self._check_alive()
    self.dev.copyin(self, data)
    return self

  def copyout(self, dst=None) -> memoryview:
    """Copy the buffer out into `dst` (a writable C-contiguous numpy array, bytearray or memoryview of at least
    self.size bytes) or a new bytearray; returns it as memoryview."""
    self._check_alive()
    out = memoryview(bytearray(self.size)) if dst is None else _bytes_of(dst, "copyout destination", writable=True)
    if len(out) < self.size: raise RawGPUError(f"copyout of a {self.size}-byte buffer into {len(out)} bytes")
    self.dev.copyout(out[:self.size], self)
    return out

  def cpu(self) -> memoryview:
    """Direct CPU access to host (or CPU-visible) memory, NOT ordered with queued GPU work: for flags and mailboxes
    the GPU polls while it runs. Use copyin/copyout for ordered copies."""
    self._check_alive()
    self.dev.check_open()
    if (view := self.dev.iface.cpu_view(self.mem)) is None: raise RawGPUError(f"{self.dev}: buffer at {self.va:#x} is not CPU-visible")
    return view.view(self.offset, self.size).cast("B")

  def numpy(self, dtype=np.uint8) -> np.ndarray:
    """A copy of the buffer as a 1-D array of dtype."""
    try: dt = np.dtype(dtype)
    except TypeError: raise RawGPUError(f"numpy() takes a numpy dtype, not {dtype!r}") from None
    if dt.hasobject: raise RawGPUError(f"numpy() takes a dtype of numbers, not {dt} (memory holds no Python objects)")
    n = dt.itemsize
    if n == 0: raise RawGPUError(f"numpy() takes a dtype with a size, not {dt} (0 bytes each)")
    if self.size % n: raise RawGPUError(f"{self} is not a whole number of {np.dtype(dtype)} ({n} bytes each); take a view of a multiple of {n} bytes")
    return np.frombuffer(self.copyout(), dtype=dtype)

  def _check_alive(self) -> None:
    if (self.base or self).freed: raise RawGPUError(f"{self.dev}: buffer at {self.va:#x} was freed")

  def free(self) -> None:
    """Free the memory once the queued work that uses it is done (never under the GPU)."""
    r = self._root()
    if self.base is not None: raise RawGPUError("free the base buffer, not a view of it")
    if r.freed: return
    self.dev.wait_timeline(r.owner_use())
    self.wait_peers()
    self.dev.iface.free(r.mem)   # also unmaps it from every device that mapped it
    r.freed = True
    for u in r.graphs or ():   # a graph that recorded it refuses to replay from now on
      if (g := u.graph()) is not None: g.lost = g.lost or self

  def __repr__(self) -> str: return f"<Buffer {self.size} bytes at {self.va:#x} on {self.dev}{' host' if self.host else ''}>"


def _bytes_of(obj, what: str, writable: bool = False) -> memoryview:
  """obj's bytes as a flat memoryview. A source that is not contiguous is gathered into a copy; a destination must
  be the memory itself (writing into a gathered copy would lose the data), so it is refused instead."""
  if isinstance(obj, np.ndarray):
    if obj.dtype.hasobject: raise RawGPUError(f"{what}: an array of Python objects ({obj.dtype}) has no bytes to copy; give an array of numbers")
    if not obj.flags.c_contiguous:
      if writable: raise RawGPUError(f"{what}: the array is not C-contiguous (strides {obj.strides}); pass np.ascontiguousarray(...) and copy back, or a contiguous slice")
      obj = np.ascontiguousarray(obj)
    obj = obj.reshape(-1).view(np.uint8)   # a view of contiguous memory, whatever the dtype
  try: mv = memoryview(obj)
  except TypeError: raise RawGPUError(f"{what}: {type(obj).__name__} is not a buffer (give bytes, a bytearray, a memoryview or a numpy array)") from None
  if not mv.c_contiguous:
    if writable: raise RawGPUError(f"{what}: the memoryview is not C-contiguous; pass a contiguous one")
    mv = memoryview(mv.tobytes())
  if writable and mv.readonly: raise RawGPUError(f"{what}: {type(obj).__name__} is read-only; pass a bytearray, a writable memoryview or a numpy array")
  if mv.nbytes == 0: return memoryview(b"" if not writable else bytearray())   # (cast refuses a shape with a 0)
  return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


def check_no_overlap(dst: Buffer, src: Buffer, n: int, who: str) -> None:
  """A copy engine does not promise the order of a copy's reads and writes (as memcpy, not memmove): a copy between
  overlapping ranges of one buffer is refused (the same range is nothing to do, and allowed)."""
  if n and dst._root() is src._root() and dst.va != src.va and dst.va < src.va + n and src.va < dst.va + n:
    raise RawGPUError(f"{who}: a copy of {n} bytes from {src.va:#x} to {dst.va:#x} overlaps itself; the copy engine does not "
                      "promise the order of its reads and writes: copy through a second buffer")


def check_copy_size(size) -> int:
  """A copy's byte count as given by a caller: an int of 0 or more."""
  n = as_index(size)
  if n is None or n < 0: raise RawGPUError(f"a copy takes a size of 0 or more bytes, not {size!r}")
  return n
