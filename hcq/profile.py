"""Profiling: GPU timestamps around every kernel launch, copy and graph replay, exported as Chrome trace JSON
(Perfetto opens it). Each engine is a track of its own: kernels and graphs on the compute queue, copies on the copy
engine. Copies the CPU makes itself (into and out of host memory, small ones into VRAM through the BAR) are not GPU
work and are not in the trace.

    prof = Profiler(dev)          # from now on every launch, copy and replay on dev is timed by the GPU
    ...launches, copies, graph replays...
    prof.export("trace.json")     # waits for the work, then writes the trace
"""
from __future__ import annotations
import json, os
from typing import TYPE_CHECKING
from rawgpu.errors import RawGPUError

if TYPE_CHECKING: from rawgpu.hcq.device import Device

SLOTS = 4096  # timestamp pairs per chunk of host memory


class Profiler:
  def __init__(self, dev: "Device"):
    dev.check_open()
    if getattr(dev, "_profiler", None) is not None:   # (a second one took the first's events, and its close stopped the first)
      raise RawGPUError(f"{dev} is already profiled (one Profiler per device); close that one first, or use its trace")
    self.dev, self.events, self._chunks, self._free = dev, [], [], 0
    dev._profiler = self

  def slot(self) -> tuple[int, int, memoryview, int]:
    """A fresh pair of 8-byte timestamp slots: (start address, end address, view, index in the view)."""
    if self._free == 0:
      mem = self.dev.iface.alloc(16 * SLOTS, host=True, uncached=True)
      self._chunks.append((mem, mem.cpu.view(0, 16 * SLOTS).cast("Q")))
      self._free = SLOTS
    mem, view = self._chunks[-1]
    i = SLOTS - self._free
    self._free -= 1
    return mem.va + 16 * i, mem.va + 16 * i + 8, view, 2 * i

  def record(self, name: str, kind: str, ticket: int, view: memoryview, idx: int) -> None:
    self.events.append((name, kind, ticket, view, idx))

  def timed(self, name: str, kind: str, ticket: int) -> tuple[int, int]:
    """A recorded event's (start, end) timestamp addresses, for a queue to write the clock to."""
    start, end, view, idx = self.slot()
    self.record(name, kind, ticket, view, idx)
    return start, end

  def trace(self) -> dict:
    """The Chrome trace (wait for the work first): one complete event per launch, copy and replay, in submission order.
    Work that never ran (lost to a hang and recover(): its clock was never written) is no event: `otherData` names it,
    and the work that started and never ended (the kernel that hung or faulted) with when it started. After a fault
    nothing more is waited for: the trace is what had run by then. The device must be open: its clocks are in its
    memory."""
    self.dev.check_open()
    if not self.dev.faulted: self.dev.synchronize()
    hz = self.dev.backend.timestamp_hz
    ran, lost = [], []
    for e in self.events: (ran if 0 < e[3][e[4]] <= e[3][e[4] + 1] else lost).append(e)
    started = [e for e in lost if e[3][e[4]] > 0]
    t0 = min((v[i] for *_, v, i in ran + started), default=0)
    track = lambda kind: f"{self.dev} {'copy engine' if kind == 'copy' else 'compute'}"
    evs = [{"name": name, "cat": kind, "ph": "X", "pid": os.getpid(), "tid": track(kind),
            "ts": (v[i] - t0) * 1e6 / hz, "dur": (v[i + 1] - v[i]) * 1e6 / hz, "args": {"ticket": ticket}}
           for name, kind, ticket, v, i in ran]
    other = {"never_ran": [{"name": name, "cat": kind, "ticket": ticket} for name, kind, ticket, v, i in lost if v[i] == 0],
             "never_ended": [{"name": name, "cat": kind, "ticket": ticket, "ts": (v[i] - t0) * 1e6 / hz} for name, kind, ticket, v, i in started]}
    other = {k: v for k, v in other.items() if v}
    return {"traceEvents": evs, "displayTimeUnit": "ns", **({"otherData": other} if other else {})}

  def export(self, path: str) -> str:
    """Write the trace to path; where it cannot be made (a hang, a fault), the file is left as it was."""
    text = json.dumps(self.trace())
    try:
      with open(path, "w") as f: f.write(text)
    except OSError as e: raise RawGPUError(f"cannot write the trace to {path}: {e.strerror}") from e
    return path

  def close(self) -> None:
    if getattr(self.dev, "_profiler", None) is self: self.dev._profiler = None

