"""Memory dropped while the GPU may still read it (a program's code; a graph's kernel arguments, commands and signals;
a bound queue's commands), freed once the work queued by then is done."""
from __future__ import annotations
import warnings
from collections import deque
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING: from rawgpu.hcq.device import Device


class Releases:
  """A device's pending frees, in the order they were noted. Finalizers note them from any thread (a deque's append
  and popleft are atomic, so nothing is lost or freed twice); the device's own calls free what is due."""
  def __init__(self, dev: "Device"):
    self.dev = dev
    self.pending: deque = deque()   # (((device, ticket), ...), free, fence engine or None)

  def later(self, free: Callable[[], None], devices: tuple = (), fence: str | None = None) -> None:
    """free() runs once the work queued so far on this device (and on `devices`) is done. fence: an engine (or a tuple
    of them) that ran work outside the timeline (HWQueue.submit), which a ticket of its own must follow first."""
    if self.dev.closed: return   # the memory went with the device
    waits = tuple((d, d.timeline_value - 1) for d in (self.dev, *devices))
    self.pending.append((waits, free, fence))

  def run(self, wait_ms: float | None = None) -> None:
    """Free what is due, oldest first. Without wait_ms it stops at the first entry not due (the later ones wait for
    as much of this device's work or more); with it, it first waits up to that long for this device's share of each
    (another device's work is never waited for here: a busy peer does not hold this device up). Never called while
    a caller holds a predicted ticket: a fence takes one."""
    dev, pending, kept = self.dev, self.pending, []
    try:
      for _ in range(len(pending)):
        try: entry = pending.popleft()
        except IndexError: break   # another thread took the rest
        waits, free, fence = entry
        try:
          if fence is not None:   # that engine's earlier work is done once a ticket it signals after it is
            waits = tuple((dev, self._fence(e)) for e in ((fence,) if isinstance(fence, str) else fence))
            entry = (waits, free, None)
          if wait_ms is not None:
            for d, t in waits:
              if d is dev: dev.wait_timeline(t, wait_ms)
        except BaseException:
          kept.append(entry)   # kept for later: nothing is freed under the GPU
          raise
        if not all(d.closed or d.done(t) for d, t in waits):
          kept.append(entry)
          if wait_ms is None: break
          continue
        try: free()
        except Exception as e:   # memory half freed is not freed again; an unrelated call does not fail for it
          warnings.warn(f"{dev}: freeing memory dropped earlier failed: {type(e).__name__}: {e}", RuntimeWarning, stacklevel=2)
    finally: pending.extendleft(reversed(kept))

  def _fence(self, engine: str) -> int:
    dev = self.dev
    v = dev.next_timeline(engine)
    q = dev.compute_queue() if engine == "compute" else dev.copy_queue()
    q.signal(dev.timeline, dev.timeline_gpu(v)).submit(dev)
    return v
