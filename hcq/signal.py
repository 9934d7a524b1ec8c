"""Signals: a 64-bit value and a 64-bit timestamp in GPU-visible host memory, and the wait on them."""
from __future__ import annotations
import time
from typing import TYPE_CHECKING
from rawgpu.errors import DeviceTimeout

if TYPE_CHECKING: from rawgpu.hcq.device import Device

SIGNAL_SIZE = 16  # value at +0, timestamp at +8


class Signal:
  def __init__(self, dev: "Device", va: int, cpu: memoryview, name: str = "signal"):
    self.dev, self.va, self.name = dev, va, name
    self._q = cpu  # 2-element 'Q' view

  @property
  def value(self) -> int: return self._q[0]
  @value.setter
  def value(self, v: int) -> None: self._q[0] = v
  @property
  def timestamp(self) -> int: return self._q[1]
  @property
  def timestamp_va(self) -> int: return self.va + 8

  def wait(self, value: int, timeout_ms: float = 10_000) -> None:
    """Wait until value >= `value` (as the GPU compares: 32-bit wrap-safe is the timeline's job). The timeout counts
    from the last change of the signal, so long work that keeps progressing never times out."""
    last, deadline, spins = self._q[0], time.monotonic() + timeout_ms / 1000, 0
    while (cur := self._q[0]) < value:
      if cur != last: last, deadline = cur, time.monotonic() + timeout_ms / 1000
      spins += 1
      if spins > 64: self.dev.iface.sleep(0.2)
      else: time.sleep(0)   # a short spin that lets the process's other threads (an emulated board too) run
      self.dev.iface.check_faults()
      if time.monotonic() > deadline:
        if (alive := getattr(self.dev.iface, "check_alive", None)) is not None: alive()  # a vanished board says so
        raise DeviceTimeout(f"{self.dev}: {self.name} at {self.va:#x} stuck at {cur}, waited for {value} ({timeout_ms:.0f} ms without progress)\n"
                            f"last commands submitted:\n{self.dev.last_submitted()}")
