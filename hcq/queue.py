"""HWQueue: command words built once, patch slots rewritten on submit, optional binding into GPU memory."""
from __future__ import annotations
import functools, struct, weakref
from array import array
from typing import TYPE_CHECKING, Callable
from rawgpu.errors import RawGPUError
from rawgpu.hcq.patch import check_u64, locate

if TYPE_CHECKING: from rawgpu.hcq.device import Device

_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


class HWQueue:
  """Vendor queues add packets through `_add(emitter, **fields)`; fields may be Vars (patch slots)."""
  engine = "compute"

  def __init__(self):
    self._build: list[int] = []
    self._slots: dict[str, list[tuple[int, int]]] = {}
    self._words: array | memoryview | None = None   # finalized words (host array, or GPU memory once bound)
    self._cur: dict[str, int] = {}
    self._bound = None
    self._programs: list = []   # the programs its dispatches run (kept alive with it; a submit() marks them: program.py's _release_code)
    self._signals: list = []    # the signals it waits on or writes, but the timeline (a submit checks they are not freed, and a peer's still mapped)

  def _add(self, emit: Callable[..., list[int]], *args: int, **fields) -> "HWQueue":
    """Append a packet: emit(*args, **fields); any field may be a Var (a patch slot)."""
    if self._words is not None: raise RawGPUError("this queue was already submitted or bound; build a new one")
    try: words, slots = locate(functools.partial(emit, *args) if args else emit, fields)
    except ValueError as e:   # an encoder's field check (an address out of range or misaligned): the packet is refused
      raise RawGPUError(f"{type(self).__name__}: {getattr(emit, '__name__', 'packet')}: {e}") from None
    base = len(self._build)
    self._build += words
    for idx, name, shift in slots: self._slots.setdefault(name, []).append((base + idx, shift))
    return self

  @property
  def vars(self) -> set[str]: return set(self._slots)

  def narrow(self, name: str) -> bool:
    """Whether slot `name` stands somewhere as a 32-bit field alone (a wait's reference: the engines compare 32 bits),
    so a value of 2^32 or more would be cut there."""
    shifts = [sh for _, sh in self._slots.get(name, ())]
    return shifts.count(0) > shifts.count(32)

  def slot_writer(self, name: str) -> Callable[[int], None] | None:
    """A function that writes patch slot `name`'s value into words_array() (None if the queue has no such slot), for
    a caller that patches its words itself on a hot path and pushes them; it owns the queue from then on. A 64-bit
    value whose low and high dwords sit side by side is one 8-byte store, a bare C call when that is the whole slot."""
    stores, sl, words = [], sorted(self._slots.get(name, ())), self._finalize()
    while sl:
      (i, sh), sl = sl[0], sl[1:]
      if sh == 0 and sl and sl[0] == (i + 1, 32): stores.append((_U64, 4 * i, 0, (1 << 64) - 1)); sl = sl[1:]
      else: stores.append((_U32, 4 * i, sh, 0xffffffff))
    if not stores: return None
    if len(stores) == 1 and stores[0][0] is _U64: return functools.partial(_U64.pack_into, words, stores[0][1])
    def write(v: int) -> None:
      for st, at, sh, mask in stores: st.pack_into(words, at, (v >> sh) & mask)
    return write

  def words_array(self) -> array | memoryview:
    """The finalized words themselves (not a copy), for a caller that writes its slots in place (see slot_writer())."""
    return self._finalize()

  def _finalize(self) -> array | memoryview:
    if self._words is None: self._words = array("I", self._build)
    return self._words

  def patch(self, values: dict[str, int]) -> None:
    """Write the values of the patch slots; only slots whose value changed are touched. All are checked before any
    is written: a refused patch changes nothing."""
    if not isinstance(values, dict): raise RawGPUError(f"patch takes a dict of slot name -> value, not {type(values).__name__}")
    words, cur, slots = self._finalize(), self._cur, self._slots
    if len(cur) < len(slots):  # until every slot has had a value, say which are missing
      missing = self.vars - cur.keys() - values.keys()
      if missing: raise RawGPUError(f"no value given for patch slot(s) {', '.join(sorted(missing))}")
    todo = []
    for name, v in values.items():
      if cur.get(name) == v and type(v) is int: continue
      sl = slots.get(name)
      if sl is None: raise RawGPUError(f"this queue has no patch slot {name!r}; it has {', '.join(sorted(self.vars)) or 'none'}")
      v = check_u64(v, f"patch slot {name!r}")
      if v >> 32 and self.narrow(name): raise RawGPUError(f"patch slot {name!r} is a 32-bit field (a wait's reference: the engine compares 32 bits); {v:#x} does not fit")
      todo.append((name, sl, v))
    for name, sl, v in todo:
      for idx, shift in sl: words[idx] = (v >> shift) & 0xffffffff
      cur[name] = v

  def _check_device(self, dev: "Device") -> None:
    """Its packets hold the addresses of the device it was built for: only that one runs them."""
    if (own := getattr(getattr(self, "be", None), "dev", None)) is not None and dev is not own:
      raise RawGPUError(f"this queue was built for {own}{' (closed since)' if own.closed else ''}: its packets hold that device's addresses; "
                        f"build one with {dev}.compute_queue() or copy_queue()")

  def bind(self, dev: "Device") -> "HWQueue":
    """Place the words in GPU memory: a submit is then one indirect-buffer packet, and patches go straight there
    (so wait for a submission to finish before patching the queue for the next one, as Graph.replay does)."""
    self._check_device(dev)
    dev.check_open()
    if self._bound is not None: raise RawGPUError("this queue is bound already")
    self._indirect(0, 1)   # (raises before anything is allocated where the engine runs no indirect buffers)
    words = self._finalize()
    words = words + array("I", self._ib_padding(len(words)))
    mem = dev._iface_alloc(len(words) * 4, True, True, True)
    view = mem.cpu.view(0, len(words) * 4).cast("I")
    view[:] = words
    self._words, self._bound = view, mem
    self._ib = array("I", self._indirect(mem.va, len(words)))   # what each submit puts on the ring
    # dropped, its memory is freed once the work queued on dev by then is done (hcq/release.py); a submit()
    # takes no ticket, so one submitted so (self._submitted) is freed after a ticket of its engine taken later
    self._submitted: list = []
    self._unbind = weakref.finalize(self, _release_bound, dev, mem, self.engine, self._submitted)
    self._unbind.atexit = False
    if hasattr(dev, "_bound"): dev._bound[mem.va] = self
    return self

  def submit(self, dev: "Device", values: dict[str, int] | None = None) -> "HWQueue":
    self._check_device(dev)
    for p in self._programs: p.check_loaded()   # (a freed program's code may be someone else's memory by now)
    ring = dev.ring(self.engine)   # (a closed device is refused before anything is patched)
    for sig in self._signals: dev._check_reaches(sig)
    self.patch(values or {})
    ring.push(self._words if self._bound is None else self._ib)
    if self._bound is not None and not self._submitted: self._submitted.append(True)
    for p in self._programs:
      if not p._submitted: p._submitted.append(self.engine)
    return self

  def _indirect(self, va: int, ndw: int) -> list[int]:
    raise RawGPUError(f"{type(self).__name__} cannot run from GPU memory (no indirect buffers on this engine)")

  def _ib_padding(self, ndw: int) -> list[int]:
    """What goes after ndw dwords of commands bound as an indirect buffer (the engine's own padding rule)."""
    return []

  def words(self) -> list[int]:
    return list(self._finalize())


def _release_bound(dev: "Device", mem, engine: str, submitted: list) -> None:
  dev.releases.later(functools.partial(dev.iface.free, mem), fence=engine if submitted else None)
