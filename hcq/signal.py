"""Signals: a 64-bit value and a 64-bit timestamp in GPU-visible host memory, and the wait on them."""
from __future__ import annotations
import time
from typing import TYPE_CHECKING
from rawgpu.errors import DeviceFault, DeviceNotFound, DeviceTimeout, RawGPUError
from rawgpu.hcq.patch import check_u64

if TYPE_CHECKING: from rawgpu.hcq.device import Device

SIGNAL_SIZE = 16  # value at +0, timestamp at +8
SPIN_S = 0.002    # a wait spins this long before it sleeps between looks (short work is seen done at once)
FAULT_CHECK_S = 0.0002   # ... asking the interface for faults this often meanwhile (on KFD that is an ioctl)


def check_timeout(timeout_ms, what: str) -> None:
  if not isinstance(timeout_ms, (int, float)) or timeout_ms != timeout_ms: raise RawGPUError(f"{what}: timeout_ms takes a number of milliseconds, not {timeout_ms!r}")


def check_signal(obj, what: str) -> None:
  """obj is a Signal (or a stand-in with its addresses, as the encoders' tests give): what a queue waits on and writes."""
  if not hasattr(obj, "timestamp_va"): raise RawGPUError(f"{what} a Signal (Device.new_signal()), not {type(obj).__name__}")
  if getattr(obj, "freed", False): obj._check_alive()


class Signal:
  def __init__(self, dev: "Device", va: int, cpu: memoryview, name: str = "signal", narrow: bool = False):
    self.dev, self.va, self.name = dev, va, name
    self.narrow = narrow  # the driver's own counter (timeline, graph sync): its values stay below 2^32, high dword 0
    self._q = cpu  # 2-element 'Q' view
    self.freed = False    # Device.free_signal: its slot may be another signal's by now

  def _check_alive(self) -> None:
    """A freed signal's slot may be another signal's by now."""
    if self.freed: raise RawGPUError(f"{self.dev}: signal {self.name} at {self.va:#x} was freed; make a new one with new_signal()")

  def _check_device(self) -> None:
    """A closed device's signals are gone with its memory (not its timeline: close drains it, and later waits read
    what it last said); nor is a freed one's slot its own."""
    self._check_alive()
    if self.dev.closed and self is not self.dev.timeline: self.dev.check_open()

  @property
  def value(self) -> int:
    self._check_device()
    return self._q[0]
  @value.setter
  def value(self, v: int) -> None:
    v = check_u64(v, f"{self.name} value")
    if self.narrow and v >> 32: raise RawGPUError(f"{self.name} is the driver's 32-bit counter; {v:#x} does not fit (the engines compare 32 bits)")
    self._check_alive()
    self.dev.check_open()   # (its memory went with the device)
    self.dev.write_fence()   # what the CPU wrote into VRAM before it is visible when the GPU sees the new value
    self._q[0] = v
  @property
  def timestamp(self) -> int:
    self._check_device()
    return self._q[1]
  @property
  def timestamp_va(self) -> int: return self.va + 8

  def wait(self, value: int, timeout_ms: float | None = None, report: bool = True) -> None:
    """Wait until value >= `value` (as the GPU compares: 32-bit wrap-safe is the timeline's job). The timeout
    (default: the device's timeout_ms) counts from the last change of the signal, so long work that keeps
    progressing never times out. Its DeviceTimeout
    decodes the last commands submitted and dumps them (report=False: the bare timeout, for a caller expecting one)."""
    value = check_u64(value, f"a wait on {self.name}")
    self._check_alive()
    if self._q[0] >= value: return self.dev.read_fence()   # what the GPU wrote before the signal is read after it
    self._check_device()
    if self.dev.faulted: raise self.dev.earlier_fault()   # (its queues are stopped: the value will not come)
    if timeout_ms is None: timeout_ms = self.dev.timeout_ms
    check_timeout(timeout_ms, f"a wait on {self.name}")
    try: self._poll(value, timeout_ms, report)
    except (DeviceFault, DeviceNotFound) as e:   # the device's, whichever signal saw it: recover() and later waits know
      self.dev.faulted = self.dev.faulted or str(e).splitlines()[0]
      raise
    self.dev.read_fence()

  def _poll(self, value: int, timeout_ms: float, report: bool) -> None:
    now = time.monotonic()
    last, deadline, spin_until, check_at = self._q[0], now + timeout_ms / 1000, now + SPIN_S, now
    while (cur := self._q[0]) < value:
      now = time.monotonic()
      if cur != last: last, deadline = cur, now + timeout_ms / 1000
      if now > spin_until: self.dev.iface.sleep(0.2)   # (it raises a fault that arrives meanwhile)
      else:
        time.sleep(0)   # a spin that lets the process's other threads (an emulated board too) run
        if now >= check_at: self.dev.iface.check_faults(); check_at = now + FAULT_CHECK_S
      if time.monotonic() > deadline:
        if (alive := getattr(self.dev.iface, "check_alive", None)) is not None: alive()  # a vanished board says so
        if self is not self.dev.timeline: self.dev.timed_out = True   # (recover() restarts the queues then)
        raise DeviceTimeout(f"{self.dev}: {self.name} at {self.va:#x} stuck at {cur}, waited for {value} ({timeout_ms:.0f} ms without progress)"
                            + (f"\nlast commands submitted:\n{self.dev.last_submitted()}" if report else ""))
