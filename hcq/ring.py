"""Submission into a hardware ring: wait for room, copy with wrap, publish the write pointer, ring the doorbell."""
from __future__ import annotations
import time
from collections import deque
from array import array
from rawgpu.drivers.iface import HWRing
from rawgpu.errors import DeviceTimeout, RawGPUError


class Ring:
  def __init__(self, hw: HWRing, sleep, check_faults, name: str):
    self.hw, self.sleep, self.check_faults, self.name = hw, sleep, check_faults, name
    self.words = hw.ring.cpu.cast("I")
    self.size_dw = len(self.words)
    self.per_dw = 4 // hw.wptr_unit          # write-pointer steps per dword
    self.put = hw.write_ptr[0] // self.per_dw  # dwords ever written (monotonic, like the hardware's 64-bit wptr)
    self.history: deque[tuple[int, int]] = deque(maxlen=4)  # (put, dwords) of the last few submissions, for hang reports
    self.limit = self.put                    # put may grow to this without reading the read pointer again
    self.prefix: array | None = None         # packets every submission starts with (see AMDBackend.ring_prefix)

  def _room(self) -> int:
    # engines report the read pointer either monotonic or wrapped to the ring size: both agree modulo the size,
    # and the ring is never filled completely, so "full" and "empty" cannot be confused
    pending = (self.put - self.hw.read_ptr[0] // self.per_dw) % self.size_dw
    return self.size_dw - 1 - pending

  def push(self, words: array | list[int]) -> None:
    if not isinstance(words, array): words = array("I", words)
    if self.prefix is not None: words = self.prefix + words
    n, put, size = len(words), self.put, self.size_dw
    if put + n > self.limit:   # the room known since the read pointer was last read runs out: read it again
      if n > size: raise RawGPUError(f"{self.name}: a submission of {n} dwords does not fit the ring ({size}); split it, or bind the queue (one indirect buffer)")
      self._wait_room(n)
    off = put % size
    if off + n <= size: self.words[off:off + n] = words
    else:   # wraps: packets may straddle the end, the engine reads on
      first = size - off
      self.words[off:] = words[:first]
      self.words[0:n - first] = words[first:]
    self.put = put = put + n
    hw = self.hw
    hw.write_ptr[0] = wptr = put * self.per_dw
    if hw.before_doorbell is not None: hw.before_doorbell()
    hw.doorbell[0] = wptr
    self.history.append((put - n, n))   # where they went: a template the caller patches again is not what ran

  def recent(self) -> list[array]:
    """The last few submissions as the ring holds them (those the ring has not written over since)."""
    out, size = [], self.size_dw
    for at, n in self.history:
      if self.put - at > size: continue
      off = at % size
      out.append(array("I", self.words[off:off + n]) if off + n <= size else array("I", self.words[off:]) + array("I", self.words[:off + n - size]))
    return out

  STALL_S = 10   # the ring stays full this long without the engine reading on: it is hung

  def _wait_room(self, n: int) -> None:
    """Until the engine has read far enough: the time limit counts from the read pointer's last move, so an engine
    that works through a long backlog, reporting its progress a block at a time, is never called hung."""
    last, deadline = self.hw.read_ptr[0], time.monotonic() + self.STALL_S
    while (room := self._room()) < n:
      self.check_faults()
      self.sleep(0.2)
      if (rp := self.hw.read_ptr[0]) != last: last, deadline = rp, time.monotonic() + self.STALL_S
      elif time.monotonic() > deadline: raise DeviceTimeout(f"{self.name}: ring full for {self.STALL_S} s (read pointer stuck at {rp}): the engine is hung")
    self.limit = self.put + room

  def restart(self) -> None:
    """The ring was emptied and its pointers zeroed (a reset in place): start again at its beginning."""
    self.put, self.limit = 0, 0
    self.history.clear()
