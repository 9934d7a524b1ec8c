"""Random sequences of what a runtime's client does, on every emulated target, against a model kept in host bytes:
allocate (VRAM, host, uncached, CPU-visible), copy in and out through sub-buffers, copy on the copy engine, fill and
copy on the compute units, record graphs over inputs and replay them with other buffers and values, free buffers that
still have work queued, with no host wait between steps unless a step asks for one. Every read must equal the model.

Hypothesis shrinks a failing sequence to a short one and prints it. RAWGPU_HCQ_SEQUENCES sets the examples per target
(default 5, the same sequences on every run); set, each run draws new ones."""
from __future__ import annotations
import os
import numpy as np
import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test
from rawgpu import kernels
from rawgpu.errors import RawGPUError
from rawgpu.hcq.graph import Graph

from conftest import HCQ_PAIRS, HCQ_TARGETS, open_hcq_pair, open_hcq_target

EXAMPLES = int(os.environ.get("RAWGPU_HCQ_SEQUENCES", "5"))
KINDS = {"vram": {}, "host": dict(host=True), "uncached": dict(host=True, uncached=True), "cpu_access": dict(cpu_access=True)}
MAX_DWORDS = 3000   # kernels over at most this many work-items: the compute units are emulated


@pytest.fixture(scope="module", params=HCQ_TARGETS)
def dev(request): yield from open_hcq_target(request.param)


def sizes() -> st.SearchStrategy[int]:
  """Buffer sizes: small and odd, page-sized, and a few that span more than one staging buffer or SDMA packet."""
  return st.one_of(st.integers(1, 300), st.integers(301, 40_000), st.sampled_from([4096, 65536, 1 << 20, (5 << 20) + 3]))


class Tracked:
  """A live buffer and the bytes it must hold."""
  def __init__(self, buf, data: bytes, kind: str):
    self.buf, self.want, self.kind = buf, bytearray(data), kind

  def __repr__(self) -> str: return f"<{self.kind} {len(self.want)} B on {self.buf.dev}>"


def machine(*devs):
  """The state machine over one device, or over two that reach each other's memory (peer to peer)."""
  progs = {d: tuple(d.program(kernels.path(d.props.arch, n).read_bytes(), k) for n, k in (("fill", "fill_u32"), ("copy", "copy_u32"))) for d in devs}
  for a in devs:
    for b in devs: a.map(b.timeline)   # for the waits across devices

  class Sequences(RuleBasedStateMachine):
    def __init__(self):
      super().__init__()
      self.live: list[Tracked] = []
      self.freed = []
      self.graphs: list[tuple[Graph, str, int, object]] = []
      self.last = devs[0]   # the device that queued the latest GPU work

    # ---- helpers
    def _on(self, data):
      """The device a step runs on."""
      return data.draw(st.sampled_from(devs)) if len(devs) > 1 else devs[0]

    def _after_others(self, d, *ts: Tracked, on_gpu: bool = False) -> None:
      """hcq orders one device's work; across devices the client does (as with streams of two CUDA devices). Before
      d's next work: d reaches the buffers (map), and it runs after what the last other device queued: on the GPU (d's
      compute queue waits for that device's timeline) for a launch, else the host waits for it."""
      for t in ts: d.map(t.buf)
      o, self.last = self.last, d
      if o is d: return
      if on_gpu: d.compute_queue().wait(o.timeline, o.timeline_gpu(o.timeline_value - 1)).submit(d)
      else: o.synchronize()

    def _span(self, data, t: Tracked, align: int = 1, most: int | None = None) -> tuple[int, int]:
      """An (offset, size) inside t in bytes: multiples of align, size > 0 and at most `most` units of align."""
      n = len(t.want) // align
      off = data.draw(st.integers(0, n - 1)) if n > 1 else 0
      size = data.draw(st.integers(1, min(n - off, most or n)))
      return off * align, size * align

    def _pick(self, data, least: int = 1) -> Tracked:
      return data.draw(st.sampled_from([t for t in self.live if len(t.want) >= least]))

    def _two(self, data, least: int) -> tuple[Tracked, Tracked]:
      a = self._pick(data, least)
      b = data.draw(st.sampled_from([t for t in self.live if len(t.want) >= least and t is not a]))
      return a, b

    def _has(self, least: int = 1, count: int = 1) -> bool: return sum(len(t.want) >= least for t in self.live) >= count

    # ---- steps
    @initialize(kind=st.sampled_from(sorted(KINDS)), size=sizes(), seed=st.integers(0, 2**32 - 1), on=st.sampled_from(range(len(devs))))
    def first(self, kind, size, seed, on): self.alloc(kind, size, seed, on)

    @rule(kind=st.sampled_from(sorted(KINDS)), size=sizes(), seed=st.integers(0, 2**32 - 1), on=st.sampled_from(range(len(devs))))
    def alloc(self, kind, size, seed, on):
      if len(self.live) >= 8: return   # keep the VRAM a few examples hold small
      data = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()
      self.live.append(Tracked(devs[on].alloc(size, **KINDS[kind]).copyin(data), data, kind))

    @precondition(lambda self: self.live)
    @rule(data=st.data(), seed=st.integers(0, 2**32 - 1))
    def copyin(self, data, seed):
      t = self._pick(data)
      off, size = self._span(data, t)
      src = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
      t.buf.view(off, size).copyin(src)
      t.want[off:off + size] = src.tobytes()

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def copyout(self, data):
      t = self._pick(data)
      off, size = self._span(data, t)
      got = bytes(t.buf.view(off, size).copyout())
      assert got == bytes(t.want[off:off + size]), f"{t} [{off}:{off + size}]: first difference at {_first_diff(got, t.want[off:off + size])}"

    @precondition(lambda self: self._has(count=2))
    @rule(data=st.data())
    def transfer(self, data):
      a, b = self._two(data, 1)
      (doff, dsize), (soff, ssize) = self._span(data, a), self._span(data, b)
      n, d = min(dsize, ssize), self._on(data)
      self._after_others(d)
      d.transfer(a.buf.view(doff, n), b.buf.view(soff, n))
      a.want[doff:doff + n] = b.want[soff:soff + n]

    @precondition(lambda self: self._has(4))
    @rule(data=st.data(), value=st.integers(0, 2**32 - 1), local=st.sampled_from([32, 64, 256]))
    def fill(self, data, value, local):
      t = self._pick(data, 4)
      off, size = self._span(data, t, 4, MAX_DWORDS)
      n, d = size // 4, self._on(data)
      self._after_others(d, t, on_gpu=True)
      progs[d][0](t.buf.view(off, size), value, n, global_size=-(-n // local), local_size=local)
      t.want[off:off + size] = np.full(n, value, np.uint32).tobytes()

    @precondition(lambda self: self._has(4))
    @rule(data=st.data(), count=st.integers(2, 700), value=st.integers(0, 2**32 - 1))
    def fill_burst(self, data, count, value):
      """Many small launches back to back: the ring and the kernel-argument ring wrap, the last value stays."""
      t = self._pick(data, 4)
      off, size = self._span(data, t, 4, 64)
      n, view, d = size // 4, t.buf.view(off, size), self._on(data)
      self._after_others(d, t, on_gpu=True)
      fill = progs[d][0]
      for i in range(count): fill(view, (value + i) & 0xffffffff, n, global_size=1, local_size=64)
      t.want[off:off + size] = np.full(n, (value + count - 1) & 0xffffffff, np.uint32).tobytes()

    @precondition(lambda self: self._has(4, 2))
    @rule(data=st.data())
    def copy_kernel(self, data):
      a, b = self._two(data, 4)
      (doff, dsize), (soff, ssize) = self._span(data, a, 4, MAX_DWORDS), self._span(data, b, 4, MAX_DWORDS)
      n, d = min(dsize, ssize) // 4, self._on(data)
      self._after_others(d, a, b, on_gpu=True)
      progs[d][1](b.buf.view(soff, 4 * n), a.buf.view(doff, 4 * n), n, global_size=-(-n // 64), local_size=64)
      a.want[doff:doff + 4 * n] = b.want[soff:soff + 4 * n]

    @rule(n=st.integers(1, 512), shape=st.sampled_from(["fill, copy engine, copy kernel", "copy engine, fill"]), on=st.sampled_from(range(len(devs))))
    def record(self, n, shape, on):
      """A graph over inputs only (buffers x, y, z and a value v), so a later replay can take any live buffers."""
      if len(self.graphs) >= 3: return
      d = devs[on]
      fill, copy = progs[d]
      g = Graph(d)
      x, y, z, v = g.input("x"), g.input("y"), g.input("z"), g.input("v")
      if shape.startswith("fill"):
        g.exec(fill, x, v, n, global_size=-(-n // 64), local_size=64)
        g.copy(y, x, 4 * n)
        g.exec(copy, y, z, n, global_size=-(-n // 32), local_size=32)
      else:
        g.copy(y, x, 4 * n)
        g.exec(fill, z, v, n, global_size=-(-n // 256), local_size=256)
      self.graphs.append((g, shape, n, d))

    @precondition(lambda self: self.graphs)
    @rule(data=st.data(), value=st.integers(0, 2**32 - 1), times=st.integers(1, 4))
    def replay(self, data, value, times):
      """A graph replayed with new buffers (views at any dword offset) and a new value, a few times in a row."""
      g, shape, n, d = data.draw(st.sampled_from(self.graphs))
      if not self._has(4 * n, 3): return
      x, y = self._two(data, 4 * n)
      z = data.draw(st.sampled_from([t for t in self.live if len(t.want) >= 4 * n and t is not x and t is not y]))
      at = {name: (t, 4 * data.draw(st.integers(0, len(t.want) // 4 - n))) for name, t in (("x", x), ("y", y), ("z", z))}
      self._after_others(d, x, y, z)
      values = [(value - i) & 0xffffffff for i in range(times)]
      bufs = {name: t.buf.view(off, 4 * n) for name, (t, off) in at.items()}   # the same views each time: unchanged inputs
      for v in values: g.replay(v=v, **bufs)
      last = np.full(n, values[-1], np.uint32).tobytes()   # what the last replay filled
      tx, ox = at["x"]
      wrote = dict(x=last, y=last, z=last) if shape.startswith("fill") else dict(y=bytes(tx.want[ox:ox + 4 * n]), z=last)
      for name, b in wrote.items():
        t, off = at[name]
        t.want[off:off + 4 * n] = b

    @precondition(lambda self: self.live)
    @rule(data=st.data(), again=st.booleans(), seed=st.integers(0, 2**32 - 1))
    def free(self, data, again, seed):
      """Freed with work still queued on it: the free waits for that work, it never frees under the GPU. again: the
      same size and kind allocated at once (an allocator likely hands back the same memory) and written by the host."""
      t = self._pick(data)
      t.buf.free()
      self.live.remove(t)
      self.freed.append(t.buf)
      if again: self.alloc(t.kind, len(t.want), seed, devs.index(t.buf.dev))

    @precondition(lambda self: self.freed)
    @rule(data=st.data())
    def use_after_free(self, data):
      b = data.draw(st.sampled_from(self.freed))
      with pytest.raises(RawGPUError, match="was freed"): b.copyin(b"\0")
      with pytest.raises(RawGPUError, match="was freed"): b.copyout()

    @rule()
    def synchronize(self):
      for d in devs: d.synchronize()

    @invariant()
    def timeline_never_runs_ahead(self):
      for d in devs: assert d.timeline.value <= d.timeline_gpu(d.timeline_value - 1), d

    def teardown(self):
      try:
        for d in devs: d.synchronize()
        for t in self.live:
          got = bytes(t.buf.copyout())
          assert got == bytes(t.want), f"{t} at the end: first difference at {_first_diff(got, t.want)}"
      finally:
        for t in self.live: t.buf.free()

  return Sequences


def _first_diff(a: bytes, b) -> str:
  i = next(i for i in range(len(a)) if a[i] != b[i])
  return f"byte {i}: got {a[i]:#04x}, want {b[i]:#04x} ({sum(x != y for x, y in zip(a, bytes(b)))} bytes differ)"


SETTINGS = dict(
  max_examples=EXAMPLES, stateful_step_count=30, deadline=None, derandomize="RAWGPU_HCQ_SEQUENCES" not in os.environ, database=None,
  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])


def test_random_sequences_match_the_host_model(dev):
  run_state_machine_as_test(machine(dev), settings=settings(**SETTINGS))


@pytest.fixture(scope="module", params=HCQ_PAIRS, ids=lambda p: "-".join(p))
def pair(request): yield from open_hcq_pair(*request.param)


def test_random_sequences_across_two_devices_match_the_host_model(pair):
  """The same steps, each on either device: buffers of one used by the other's kernels, copy engine and graphs."""
  run_state_machine_as_test(machine(*pair), settings=settings(**SETTINGS))
