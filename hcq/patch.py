"""Patch slots: values in a command stream that change between submits (addresses, signal values, grid sizes).

A queue builds its words once. Where a packet takes a `Var`, the queue finds which words carry it by building the
packet with two probe values and comparing (so any emitter works, and a field that is not a whole dword, or the
low/high dword of a 64-bit value, is refused). On submit only the slots whose value changed are rewritten.
"""
from __future__ import annotations
import operator
from dataclasses import dataclass
from typing import Callable
from rawgpu.errors import RawGPUError


def as_index(v) -> int | None:
  """v as a Python int where it is an integer (numpy's too), else None (a bool too: True is no size or count)."""
  if type(v) is int: return v
  if isinstance(v, bool): return None
  try: return operator.index(v)
  except TypeError: return None


def check_u64(v, what: str) -> int:
  """A value for a 64-bit field (a signal value, a wait reference, a patch slot): refused rather than cut to its low
  bits."""
  i = as_index(v)
  if i is None or not 0 <= i < 1 << 64: raise RawGPUError(f"{what} takes an int in 0..2^64-1, not {v!r}")
  return i


def check_wait_ref(v, what: str) -> int:
  """A wait's reference: WAIT_REG_MEM and POLL_REGMEM compare the low 32 bits of memory with 32 bits, so a value of
  2^32 or more cannot be waited for (the timeline stays below it, graph.SYNC_LIMIT)."""
  v = check_u64(v, what)
  if v >> 32: raise RawGPUError(f"{what} for {v:#x}: the engine compares 32 bits, so a value of 2^32 or more cannot be waited for")
  return v


@dataclass(frozen=True)
class Var:
  name: str
  width: int = 64  # 32 or 64 bits

  def __post_init__(self):
    if not isinstance(self.name, str) or not self.name: raise RawGPUError(f"a patch slot (Var) is named by a string, not {self.name!r}")
    if self.width not in (32, 64): raise RawGPUError(f"patch slot {self.name!r}: a width of 32 or 64 bits, not {self.width!r}")


def _probe(i: int, which: int, width: int) -> int:
  # distinct per var and per probe, 4 KiB aligned (emitters may align addresses), high dword small (48-bit addresses)
  lo = (0x1357_9000, 0x2468_a000)[which] + (i << 12)
  return lo if width == 32 else (((0x123, 0x456)[which] + i) << 32) | lo


def locate(build: Callable[..., list[int]], kwargs: dict) -> tuple[list[int], list[tuple[int, str, int]]]:
  """Build a packet whose keyword arguments may be Vars: returns its words and [(word index, var name, shift)]."""
  vars_ = [(k, v) for k, v in kwargs.items() if isinstance(v, Var)]
  if not vars_: return build(**kwargs), []
  runs = []
  for which in (0, 1):
    probes = {k: _probe(i, which, v.width) for i, (k, v) in enumerate(vars_)}
    runs.append((build(**{**kwargs, **probes}), probes))
  (wa, pa), (wb, pb) = runs
  if len(wa) != len(wb): raise RawGPUError(f"{getattr(build, '__name__', build)}: packet length depends on a patched value")
  slots = []
  for idx, (a, b) in enumerate(zip(wa, wb)):
    if a == b: continue
    for k, v in vars_:
      hit = next((sh for sh in (0, 32) if (pa[k] >> sh) & 0xffffffff == a and (pb[k] >> sh) & 0xffffffff == b), None)
      if hit is not None: slots.append((idx, v.name, hit)); break
    else: raise RawGPUError(f"{getattr(build, '__name__', build)}: word {idx} depends on a patched value but is not a whole dword of it")
  return [0 if any(s[0] == i for s in slots) else w for i, w in enumerate(wa)], slots
