"""The GPU reference clock (100 MHz on RDNA3/4) behind timestamps and RLC/GOLDEN_TSC counters.

Concurrent mode follows host time; single-step mode advances a fixed amount per step so runs repeat exactly.
"""
from __future__ import annotations
import time

REFCLK_HZ = 100_000_000
TICKS_PER_STEP = 100   # 1 us of GPU time per deterministic step


class GPUClock:
  def __init__(self, deterministic: bool):
    self.deterministic, self.t0, self.ticks = deterministic, time.perf_counter_ns(), 0

  def now(self) -> int:
    if self.deterministic: return self.ticks
    return (time.perf_counter_ns() - self.t0) // 10

  def advance(self) -> None: self.ticks += TICKS_PER_STEP
