"""Memory a program, a graph or a bound queue holds on the device goes when it is dropped or freed, and never while
queued work may still read it (Device.release_later): on both interfaces, all boards."""
import gc
import numpy as np
import pytest
from rawgpu import kernels
from rawgpu.errors import RawGPUError
from rawgpu.hcq.graph import Graph

from conftest import HCQ_TARGETS, open_hcq_target


@pytest.fixture(scope="module", params=HCQ_TARGETS)
def dev(request): yield from open_hcq_target(request.param)


def code(dev, name): return kernels.path(dev.props.arch, name).read_bytes()


def held(dev) -> int:
  """Allocations the interface holds for this device now, once what is due was freed."""
  gc.collect()
  dev.synchronize()   # (frees what release_later holds and is done)
  return len(dev.iface.mems)


def allocated(dev, mem) -> bool:
  mems = dev.iface.mems
  return any(m is mem for m in (mems.values() if isinstance(mems, dict) else mems))


def test_dropped_programs_graphs_and_bound_queues_hold_no_memory(dev):
  """Loading and dropping kernels (as a BEAM search does, timed launches too), recording, replaying and dropping
  graphs, binding and dropping queues: the device's allocations and signal pages stay as they were."""
  fill = dev.program(code(dev, "fill"), "fill_u32")
  out = dev.alloc(4 * 64)
  fill(out, 1, 64, global_size=1, local_size=64, wait=True)
  assert out.numpy(np.uint32)[0] == 1   # (its staging buffers are allocated once, here)
  before, pages = held(dev), len(dev._signal_pages)
  for i in range(40):
    p = dev.program(code(dev, "fill"), "fill_u32")
    assert p(out, i, 64, global_size=1, local_size=64, timing=True) >= 0   # its own timing signals
    g = Graph(dev)
    g.exec(fill, g.input("dst"), i, 64, global_size=1, local_size=64)
    dev.wait_timeline(g.replay(dst=out))
    q = dev.compute_queue().signal(dev.new_signal("bound"), 1).bind(dev)
    q.submit(dev)
    del p, g, q
  assert out.numpy(np.uint32)[0] == 39
  dev.synchronize()
  assert held(dev) - len(dev._signal_pages) == before - pages   # all but signal pages: the test's own 40 signals
  assert len(dev._signal_pages) <= pages + 1                     # take one at most


def test_a_graph_dropped_while_it_runs_keeps_its_memory_until_it_ends(dev):
  """A replay held by a kernel that spins on a flag, its graph dropped meanwhile: its kernel arguments and commands
  stay allocated (and are not handed out again) until the replay is done, then they go; its results are right."""
  spin, fill = dev.program(code(dev, "spin")), fill_of(dev)
  flag, done, out = dev.alloc(4, host=True), dev.alloc(4, host=True), dev.alloc(4 * 64)
  flag.cpu()[:4] = bytes(4)
  g = Graph(dev).exec(spin, flag, 7, done, global_size=1, local_size=32).exec(fill, out, 5, 64, global_size=1, local_size=64)
  t = g.replay()
  ka, ib = g.ka, next(q._bound for q in g.queues.values() if q._bound is not None)
  del g
  gc.collect()
  fresh = [dev.alloc(ka.size, host=True, uncached=True) for _ in range(4)]
  try: assert not ka.freed and allocated(dev, ib) and ka.va not in {b.va for b in fresh}
  finally: flag.cpu()[:4] = (7).to_bytes(4, "little")   # (a failure leaves no spin behind for the next test)
  dev.wait_timeline(t, timeout_ms=5000)
  assert done.numpy(np.uint32)[0] == 8 and (out.numpy(np.uint32) == 5).all()
  dev.alloc(4)   # a later allocation frees what is due
  assert ka.freed and not allocated(dev, ib)


def fill_of(dev): return dev.program(code(dev, "fill"), "fill_u32")


def test_free_is_explicit_and_refuses_later_use(dev):
  """Program.free and Graph.free wait for the queued work, free at once, and later use is a clear error; a program
  a live graph recorded is not freed under it."""
  fill = fill_of(dev)
  out = dev.alloc(4 * 64)
  g = Graph(dev).exec(fill, out, 3, 64, global_size=1, local_size=64)
  t = g.replay()
  with pytest.raises(RawGPUError, match="recorded in 1 graph"):
    fill.free()
  ka = g.ka
  g.free()
  assert dev.done(t) and ka.freed and (out.numpy(np.uint32) == 3).all()
  with pytest.raises(RawGPUError, match="the graph was freed"):
    g.replay()
  with pytest.raises(RawGPUError, match="the graph was freed"):
    g.exec(fill, out, 3, 64, global_size=1, local_size=64)
  g.free()   # twice: nothing more to do
  fill(out, 4, 64, global_size=1, local_size=64)
  image = fill.image
  fill.free()
  assert image.freed and (out.numpy(np.uint32) == 4).all()
  with pytest.raises(RawGPUError, match="the program was freed"):
    fill(out, 4, 64, global_size=1, local_size=64)
  with pytest.raises(RawGPUError, match="the program was freed"):
    Graph(dev).exec(fill, out, 3, 64, global_size=1, local_size=64)
  Graph(dev).free()   # never replayed: holds nothing


def test_no_room_waits_for_dropped_memory_then_retries(dev, monkeypatch):
  """An allocation that finds no room while dropped memory waits for the GPU waits for that work, frees it and tries
  once more; with nothing to wait for, the interface's error stands (as OutOfMemory)."""
  from rawgpu.errors import OutOfMemory
  spin, p = dev.program(code(dev, "spin")), fill_of(dev)   # loaded before the spin (on KFD a load waits for it)
  flag, done = dev.alloc(4, host=True), dev.alloc(4, host=True)
  flag.cpu()[:4] = bytes(4)
  spin(flag, 7, done, global_size=1, local_size=32)
  image = p.image
  del p
  gc.collect()
  real, tries = dev.iface.alloc, []
  def alloc(size, **kw):
    tries.append(size)
    if not image.freed:   # no room until the dropped program's code is freed
      flag.cpu()[:4] = (7).to_bytes(4, "little")   # (the spin ends: the wait for it returns)
      raise MemoryError("no room (test)")
    return real(size, **kw)
  monkeypatch.setattr(dev.iface, "alloc", alloc)
  b = dev.alloc(4096)
  assert image.freed and len(tries) == 2 and done.numpy(np.uint32)[0] == 8
  monkeypatch.setattr(dev.iface, "alloc", lambda size, **kw: (_ for _ in ()).throw(MemoryError("no room (test)")))
  with pytest.raises(OutOfMemory, match="no room"):
    dev.alloc(4096)
  monkeypatch.undo()
  b.free()
