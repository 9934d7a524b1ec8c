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


def test_a_program_a_graph_records_is_not_freed_under_it(dev):
  """From the moment a graph records a launch (before its first replay), Program.free refuses; a dynamic-LDS
  variant shares the program's code, so freeing either refuses later launches of both, cached or not."""
  fill, out = fill_of(dev), dev.alloc(4 * 64)
  g = Graph(dev).exec(fill, out, 3, 64, global_size=1, local_size=64)
  with pytest.raises(RawGPUError, match="recorded in 1 graph"):
    fill.free()
  del g   # dropped: no longer holds it
  fill(out, 1, 64, global_size=1, local_size=64)
  wide = fill.with_dynamic_lds(256)
  wide(out, 2, 64, global_size=1, local_size=64)   # both launch shapes cached
  wide.free()
  assert fill.image.freed and (out.numpy(np.uint32) == 2).all()
  for p in (fill, wide, fill.with_dynamic_lds(512)):
    with pytest.raises(RawGPUError, match="the program was freed"):
      p(out, 4, 64, global_size=1, local_size=64)


def test_free_refuses_launches_even_when_its_wait_fails(dev, monkeypatch):
  """A free() whose wait raises (a hang, a fault) has already refused further launches: the code it frees later
  never runs again."""
  fill, out = fill_of(dev), dev.alloc(4 * 64)
  fill(out, 1, 64, global_size=1, local_size=64, wait=True)
  def hung(wait_ms=None): raise RawGPUError("a hang (test)")
  monkeypatch.setattr(dev.releases, "run", hung)
  with pytest.raises(RawGPUError, match="a hang"):
    fill.free()
  monkeypatch.undo()
  with pytest.raises(RawGPUError, match="the program was freed"):
    fill(out, 1, 64, global_size=1, local_size=64)
  dev.synchronize()
  assert fill.image.freed


def test_a_freed_graph_leaves_recover_and_signals_alone(dev):
  """After Graph.free its signals are handed out again: recover() (which raises a live graph's signals) leaves them
  be, and gpu_time says the graph was freed."""
  fill, out = fill_of(dev), dev.alloc(4 * 64)
  g = Graph(dev).exec(fill, out, 3, 64, global_size=1, local_size=64)
  g.replay()
  g.free()
  mine = [dev.new_signal("reused") for _ in range(8)]
  dev.stalled = dev.timeline_value - 1   # as after a wait that timed out on work that ends anyway
  if dev.recovers_in_place: dev.recover()
  assert [s.value for s in mine] == [0] * 8
  with pytest.raises(RawGPUError, match="the graph was freed"):
    g.gpu_time()
  dev.stalled = 0


def _fake_device(done_upto: list):
  """What Releases reads of a device: tickets 1.. taken, those up to done_upto[0] done."""
  from types import SimpleNamespace
  d = SimpleNamespace(closed=False, timeline_value=10)
  d.done = lambda t: t <= done_upto[0]
  d.wait_timeline = lambda t, ms=None: done_upto.__setitem__(0, max(done_upto[0], t))
  return d


def test_frees_noted_from_another_thread_are_never_lost_or_doubled():
  """Finalizers note frees from any thread while the device frees what is due: every one is freed exactly once."""
  import sys, threading
  from rawgpu.hcq.release import Releases
  rel = Releases(_fake_device([10]))
  freed, n = [], 20000
  def note():
    for i in range(n): rel.later(lambda i=i: freed.append(i))
  old = sys.getswitchinterval()
  sys.setswitchinterval(1e-6)
  try:
    t = threading.Thread(target=note)
    t.start()
    while t.is_alive(): rel.run()
    rel.run()
  finally: sys.setswitchinterval(old)
  assert sorted(freed) == list(range(n)) and not rel.pending


def test_frees_wait_their_turn_and_a_failing_one_only_warns():
  """What is not due stays (and what comes after it: its tickets are as late or later); a free that raises is
  reported as a warning, not by the unrelated call that ran it, and the others still go."""
  from rawgpu.hcq.release import Releases
  upto = [3]
  dev = _fake_device(upto)
  rel, freed = Releases(dev), []
  dev.timeline_value = 3; rel.later(lambda: freed.append("a"))        # ticket 2: done
  dev.timeline_value = 8; rel.later(lambda: freed.append("b"))        # ticket 7: not yet
  rel.later(lambda: freed.append("c"))
  rel.run()
  assert freed == ["a"] and len(rel.pending) == 2
  def broken(): raise OSError(16, "busy (test)")
  rel.later(broken)
  rel.later(lambda: freed.append("d"))
  with pytest.warns(RuntimeWarning, match="busy"):
    rel.run(wait_ms=100)   # waits for this device's work
  assert freed == ["a", "b", "c", "d"] and not rel.pending


def test_an_interface_error_other_than_no_room_stays_itself(dev, monkeypatch):
  """Only ENOMEM (and MemoryError) mean no room (OutOfMemory); any other error of the interface comes out as it is."""
  import errno
  def alloc(size, **kw): raise OSError(errno.EINVAL, "invalid (test)")
  monkeypatch.setattr(dev.iface, "alloc", alloc)
  with pytest.raises(OSError, match="invalid") as e:
    dev.alloc(4096)
  assert type(e.value) is OSError


def test_a_timeline_restart_takes_no_ticket_for_pending_frees(dev):
  """A launch whose ticket restarts the timeline (near the engines' 32-bit limit) gets the ticket its buffers were
  recorded against, even with a dropped bound queue's free pending (its fence takes a ticket, but not there):
  freeing the launch's buffer waits for the launch."""
  from rawgpu.hcq.device import TIMELINE_LIMIT
  spin = dev.program(code(dev, "spin"))
  flag, done = dev.alloc(4, host=True), dev.alloc(4, host=True)
  flag.cpu()[:4] = (1).to_bytes(4, "little")
  spin(flag, 1, done, global_size=1, local_size=32, wait=True)
  dev.synchronize()
  dev.timeline_base -= TIMELINE_LIMIT - 2 - dev.timeline_gpu(dev.timeline_value - 1)   # as if 2^32 - 2 tickets passed
  dev.timeline.value = dev.timeline_gpu(dev.timeline_value - 1)
  q = dev.compute_queue().signal(dev.new_signal("s"), 1).bind(dev)
  q.submit(dev)
  del q
  gc.collect()
  flag.cpu()[:4] = bytes(4)
  spin(flag, 7, done, global_size=1, local_size=32)
  try: assert done.owner_use() == dev.timeline_value - 1 and not dev.done(done.owner_use())
  finally: flag.cpu()[:4] = (7).to_bytes(4, "little")
  done.free()
  assert done.freed and dev.done(dev.timeline_value - 1)


def test_a_dropped_program_goes_without_the_cycle_collector(dev):
  """A program (launched, so with a launch template, and with a dynamic-LDS variant) holds no reference cycle:
  dropped, it is released at once, with the cycle collector off."""
  out = dev.alloc(4 * 64)
  def load_launch_drop(i: int) -> None:
    p = fill_of(dev)
    p(out, i, 64, global_size=1, local_size=64, wait=True)
    p(out, i, 64, global_size=1, local_size=64, dynamic_lds=128 * (1 + i % 2), wait=True)   # and a variant of it
  load_launch_drop(0)   # (what the device allocates once, at first use: rings, kernel arguments, scratch)
  before = held(dev)
  gc.disable()
  try:
    for i in range(10): load_launch_drop(i)
    dev.synchronize()
    assert len(dev.iface.mems) == before
  finally: gc.enable()


def test_a_program_run_by_submit_is_freed_after_that_dispatch(dev):
  """A queue's submit() takes no ticket: a program it dispatches, then dropped, keeps its code until a ticket of
  that engine after it is done (the dispatch spins meanwhile)."""
  import time
  spin = dev.program(code(dev, "spin"))
  flag, done, ka = dev.alloc(4, host=True), dev.alloc(4, host=True), dev.alloc(4096, host=True)
  flag.cpu()[:4], done.cpu()[:4] = bytes(4), bytes(4)
  ln = spin._launch_setup(1, 32, False)
  spin._write_kernargs(ln, ka.mem.cpu.cast("B"), 0, (flag, 7, done), 0)
  image = spin.image
  dev.compute_queue().exec(spin, ka.va, (1, 1, 1), (32, 1, 1)).submit(dev)
  del spin, ln
  gc.collect()
  try:
    time.sleep(0.1)
    dev.alloc(4)
    assert not image.freed and done.numpy(np.uint32)[0] == 0
  finally: flag.cpu()[:4] = (7).to_bytes(4, "little")
  dev.synchronize()
  assert image.freed and done.numpy(np.uint32)[0] == 8


def test_what_holds_a_program_lets_go_of_it(dev):
  """A freed graph kept referenced, and a launch Graph.exec refused, hold the program no more: it frees (or is
  freed once dropped); a queue that dispatches a program freed since refuses to submit."""
  out = dev.alloc(4 * 64)
  fill = fill_of(dev)
  g = Graph(dev).exec(fill, out, 3, 64, global_size=1, local_size=64)
  g.replay()
  g.free()
  image = fill.image
  del fill
  dev.synchronize()
  assert image.freed   # (g still referenced)
  fill = fill_of(dev)
  with pytest.raises(RawGPUError, match="after= is for"):
    Graph(dev).exec(fill, out, 3, 64, global_size=1, local_size=64, after=[0])
  ka = dev.alloc(4096, host=True)
  ln = fill._launch_setup(1, 64, False)
  fill._write_kernargs(ln, ka.mem.cpu.cast("B"), 0, (out, 6, 64), 0)
  q = dev.compute_queue().exec(fill, ka.va, (1, 1, 1), (64, 1, 1))
  fill.free()   # the refused launch did not register a graph
  with pytest.raises(RawGPUError, match="the program was freed"):
    q.submit(dev)



def test_use_records_of_graphs_gone_are_let_go_once_done(dev):
  """A buffer keeps a dropped graph's use record only while that graph's work may still run."""
  out = dev.alloc(4 * 64)
  fill = fill_of(dev)
  for i in range(20):
    g = Graph(dev).exec(fill, out, i, 64, global_size=1, local_size=64)
    g.replay()
    del g
  dev.synchronize()
  assert dev.done(out.owner_use()) and len(out.graphs) == 0
  keep = Graph(dev).exec(fill, out, 1, 64, global_size=1, local_size=64)
  keep.replay()
  dev.synchronize()
  out.owner_use()
  assert len(out.graphs) == 1   # a live graph's record stays, done or not
