"""What a command engine (the CP, an SDMA queue) fetched ahead of the packet it parses: its prefetch queue.

Commands between an engine's read and write pointers, and an indirect buffer while it runs, belong to the engine:
the host does not rewrite them, so what was fetched stays valid until the engine moves on. Each ring and each entry
into an IB is a stream of its own (an IB entered again after the host patched it is fetched afresh)."""
from __future__ import annotations
from typing import Callable

FETCH_DW = 256   # dwords an engine fetches ahead at once from its ring (up to the write pointer) or IB (up to its end)


class Prefetch:
  def __init__(self): self.clear()

  def clear(self) -> None:
    self.stream, self.pos, self.words = -1, 0, []

  def get(self, stream: int, pos: int, n: int, avail: int, fetch: Callable[[int], list[int]]) -> list[int]:
    """n dwords of `stream` from dword position `pos` on; fetch(count) reads `count` (<= avail) dwords from there."""
    k = pos - self.pos
    if stream == self.stream and 0 <= k and len(self.words) - k >= n: return self.words[k:k + n]
    self.stream, self.pos, self.words = stream, pos, fetch(min(avail, max(n, FETCH_DW)))
    return self.words[:n]
