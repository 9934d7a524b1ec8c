"""The hcq suite end to end on the emulated boards: the real AM driver boots MOCKPCI with the real firmware."""
import os
import re
import tempfile
import time
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from rawgpu import kernels
from rawgpu.errors import RawGPUError
from rawgpu.hcq.graph import Graph
from rawgpu.hcq.patch import Var

from conftest import HCQ_TARGETS, open_hcq_target


@pytest.fixture(scope="module", params=HCQ_TARGETS)
def dev(request): yield from open_hcq_target(request.param)


def prog(dev, name, kernel=None):
  return dev.program(kernels.path(dev.props.arch, name).read_bytes(), kernel)


def test_props(dev):
  p = dev.props
  assert p.vendor == "AMD" and p.iface in ("MOCKPCI", "MOCKKFD") and p.vram_size > 0 and p.compute_units > 0
  assert p.ip_versions["gc"][0] == {"gfx1100": 11, "gfx1201": 12, "gfx942": 9}[p.arch]
  assert p.shader_engines == {"gfx1100": 6, "gfx1201": 4, "gfx942": 4}[p.arch]   # per XCC; gfx11+ counts scratch waves per SE
  if p.iface == "MOCKKFD":   # the node as amdkfd publishes it: gfx_target_version (kfd_device.c), SIMDs per CU, wave size,
    node = dev.iface.node.props   # waves per SIMD from the board's discovery table (16 on RDNA; 8 on MI300X: 32 per CU)
    want = {"gfx1100": (110000, 2, 32, 16), "gfx1201": (120001, 2, 32, 16), "gfx942": (90402, 4, 64, 8)}[p.arch]
    got = (node["gfx_target_version"], node["simd_per_cu"], node["wave_front_size"], node["max_waves_per_simd"], node["num_xcc"])
    assert got == (*want, 1)


def test_signal_wait_from_host(dev):
  s, done = dev.new_signal("host"), dev.new_signal("done")
  q = dev.compute_queue().wait(s, 5).signal(done, 7)
  q.submit(dev)
  s.value = 5
  done.wait(7, timeout_ms=5000)
  assert done.value == 7


def test_copy_roundtrip_odd_sizes(dev):
  rng = np.random.default_rng(1)
  for size, off in ((1, 0), (3, 5), (4097, 3), (1 << 16, 0), (300_001, 1000)):
    data = rng.integers(0, 256, size, dtype=np.uint8)
    buf = dev.alloc(size + off + 7)
    buf.view(off, size).copyin(data)
    assert np.array_equal(buf.view(off, size).numpy(), data)


def test_long_copy_crosses_staging(dev):
  data = np.random.default_rng(2).integers(0, 2**32, (5 << 20) // 4, dtype=np.uint32)  # > two staging buffers
  buf = dev.alloc(data.nbytes).copyin(data)
  assert np.array_equal(buf.numpy(np.uint32), data)


def test_device_to_device_transfer(dev):
  data = np.arange(10000, dtype=np.uint32)
  a, b = dev.alloc(data.nbytes).copyin(data), dev.alloc(data.nbytes)
  dev.transfer(b, a)
  assert np.array_equal(b.numpy(np.uint32), data)


def test_a_copy_between_overlapping_ranges_of_one_buffer_is_refused(dev):
  """The copy engine does not promise memmove's order (the emulated one copied as memmove, hiding the hazard): a
  transfer or graph copy between overlapping views is refused and writes nothing; views that do not overlap copy."""
  data = np.arange(1024, dtype=np.uint32)
  a = dev.alloc(data.nbytes).copyin(data)
  lo, hi, far = a.view(0, 2048), a.view(16, 2048), a.view(2048, 2048)
  for use in (lambda: dev.transfer(hi, lo), lambda: dev.transfer(lo, hi), lambda: Graph(dev).copy(hi, lo)):
    with pytest.raises(RawGPUError, match="overlaps itself"): use()
  assert np.array_equal(a.numpy(np.uint32), data)
  dev.transfer(far, lo)
  dev.transfer(lo, lo)   # the same range: nothing changes
  assert np.array_equal(a.numpy(np.uint32), np.concatenate([data[:512], data[:512]]))


def test_vadd_matches_numpy(dev):
  n = 3000  # not a multiple of the workgroup: the kernel's bounds check matters
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
  A, B, C = dev.alloc(4 * n).copyin(a), dev.alloc(4 * n).copyin(b), dev.alloc(4 * n)
  t = prog(dev, "vadd", "vadd_f32")(A, B, C, n, global_size=(n + 127) // 128, local_size=128, timing=True)
  assert t > 0
  assert np.array_equal(C.numpy(np.float32), a + b)


def test_a_host_spinning_in_python_still_sees_the_gpu_progress(dev):
  """The emulated board shares the interpreter with the host. A host that polls memory in a pure-Python loop (it
  never blocks, so the interpreter hands over only every switch interval) holds it off the longest: the board then runs
  in short slices, but it runs, and twenty launches finish."""
  import time
  fill = prog(dev, "fill")
  out = dev.alloc(4 * 256, host=True)
  for i in range(1, 21): fill(out, i, 256, global_size=1, local_size=256)
  seen, deadline = out.cpu().cast("I"), time.monotonic() + 60
  while seen[255] != 20:
    if time.monotonic() > deadline: raise AssertionError(f"{dev}: the GPU made no progress in 60 s while the host spun (last value {seen[255]})")
  dev.synchronize()
  assert np.all(out.numpy(np.uint32) == 20)


def test_two_kernels_100_times(dev):
  n = 256
  x = np.arange(n, dtype=np.float32)
  X, Y = dev.alloc(4 * n).copyin(x), dev.alloc(4 * n).copyin(np.zeros(n, np.float32))
  saxpy = prog(dev, "saxpy")
  vadd = prog(dev, "vadd", "vadd_f32")
  for _ in range(100):
    saxpy(2.0, X, Y, n, global_size=2, local_size=128)  # y = 2x + y
    vadd(Y, X, Y, n, global_size=2, local_size=128)
  dev.synchronize()
  ref = np.zeros(n, np.float32)
  for _ in range(100): ref = (np.float32(2.0) * x + ref) + x
  assert np.array_equal(Y.numpy(np.float32), ref)


def test_arguments_the_fast_packer_declines_take_the_checked_path(dev):
  """An int for a float argument is its value; a negative int for a 32-bit argument is two's complement; a buffer
  that was freed is refused by name. (The one-struct packer declines these and the checked path decides.)"""
  n = 64
  x = np.arange(n, dtype=np.float32)
  X, Y = dev.alloc(4 * n).copyin(x), dev.alloc(4 * n).copyin(np.ones(n, np.float32))
  prog(dev, "saxpy")(3, X, Y, n, global_size=1, local_size=64, wait=True)  # y = 3x + 1
  assert np.array_equal(Y.numpy(np.float32), np.float32(3) * x + 1)
  buf = dev.alloc(4 * n)
  fill = prog(dev, "fill")
  fill(buf, -2, n, global_size=1, local_size=64, wait=True)
  assert (buf.numpy(np.uint32) == 0xfffffffe).all()
  gone = dev.alloc(4 * n)
  gone.free()
  with pytest.raises(RawGPUError, match="freed"): fill(gone, 1, n, global_size=1, local_size=64)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 700), value=st.integers(0, 2**32 - 1), local=st.sampled_from([32, 64, 256]))
def test_fill_with_updated_arguments(dev, n, value, local):
  fill = prog(dev, "fill")
  buf = dev.alloc(4 * (n + 16))
  buf.copyin(np.full(n + 16, 0xabababab, np.uint32))
  fill(buf, value, n, global_size=(n + local - 1) // local, local_size=local, wait=True)
  out = buf.numpy(np.uint32)
  assert np.all(out[:n] == value) and np.all(out[n:] == 0xabababab)


def test_bound_queue_and_patching(dev):
  s = dev.new_signal("bound")
  q = dev.compute_queue().signal(s, Var("v")).bind(dev)
  for v in (3, 9, 1 << 20):
    q.submit(dev, {"v": v})
    s.wait(v, timeout_ms=5000)
    assert s.value == v


def test_graph_replay_with_new_inputs(dev):
  n = 512
  vadd = prog(dev, "vadd", "vadd_f32")
  g = Graph(dev)
  a_in, out = g.input("a"), dev.alloc(4 * n)
  b = dev.alloc(4 * n).copyin(np.ones(n, np.float32))
  for _ in range(10): g.exec(vadd, a_in, b, out, n, global_size=n // 128, local_size=128)
  for k in range(3):
    a = dev.alloc(4 * n).copyin(np.full(n, k, np.float32))
    dev.wait_timeline(g.replay(a=a))
    assert np.array_equal(out.numpy(np.float32), np.full(n, k + 1, np.float32))
  with pytest.raises(RawGPUError, match="no input"): g.replay(zz=1)
  fresh = Graph(dev)
  fresh.exec(vadd, fresh.input("a"), b, out, n, global_size=n // 128, local_size=128)
  with pytest.raises(RawGPUError, match="graph inputs not given: a"): fresh.replay()
  with pytest.raises(RawGPUError, match="pointer"): g.replay(a=5)
  gone = dev.alloc(4 * n)
  gone.free()
  with pytest.raises(RawGPUError, match="was freed"): g.replay(a=gone)
  dev.synchronize()  # the refused replays took no timeline ticket


def test_graph_replay_reports_its_gpu_time(dev):
  from rawgpu.hcq.profile import Profiler
  fill, a = prog(dev, "fill"), dev.alloc(4 * 256)
  g = Graph(dev)
  for _ in range(8): g.exec(fill, a, g.input("v"), 256, local_size=256)
  with pytest.raises(RawGPUError, match="not replayed yet"): g.gpu_time()
  g.replay(v=1)
  one = fill(a, 2, 256, local_size=256, timing=True)   # queued after the replay: gpu_time waits for the replay only
  assert g.gpu_time() > one > 0                         # eight such kernels, one after the other
  prof = Profiler(dev)
  try:
    g.replay(v=3)
    t = g.gpu_time()
    (_, _, _, view, i), = prof.events
    assert t == (view[i + 1] - view[i]) / dev.backend.timestamp_hz > 0   # the profiler's graph event, the same clock
  finally: prof.close()
  assert np.all(a.numpy(np.uint32) == 3)


DIMS = """
// What a work-item reads of its launch: 4 words at its global index. The grid in work-items (dispatch packet), the
// workgroup (code object v5: hidden arguments; v4: dispatch packet), then v5's hidden block count and grid dims, or
// v4's workgroups and dims from the dispatch packet (setup).
__kernel void dims(__global uint* out) {
  uint lx = __builtin_amdgcn_workgroup_size_x(), ly = __builtin_amdgcn_workgroup_size_y();
  uint gx = __builtin_amdgcn_grid_size_x(), gy = __builtin_amdgcn_grid_size_y();
#if COV == 5
  __constant uint* h = (__constant uint*)__builtin_amdgcn_implicitarg_ptr();
  uint extra = h[0] << 4 | ((__constant ushort*)h)[32];
#else
  __constant ushort* d = (__constant ushort*)__builtin_amdgcn_dispatch_ptr();
  uint extra = (gx / lx) << 4 | (d[1] & 3);
#endif
  uint i = __builtin_amdgcn_workgroup_id_x() * lx + __builtin_amdgcn_workitem_id_x()
         + (__builtin_amdgcn_workgroup_id_y() * ly + __builtin_amdgcn_workitem_id_y()) * gx;
  out[4 * i] = gx; out[4 * i + 1] = gy; out[4 * i + 2] = lx << 16 | ly; out[4 * i + 3] = extra;
}
"""


def _dims_expected(n: int, gx: int, gy: int, lx: int) -> np.ndarray:
  want, items = np.zeros((n, 4), np.uint32), gx * lx * gy
  want[:items] = gx * lx, gy, lx << 16 | 1, gx << 4 | (2 if gy > 1 else 1)
  return want.ravel()


@pytest.mark.parametrize("cov", [5, 4])
def test_graph_launch_dimensions_are_inputs(dev, cov):
  """Grid and workgroup sizes given at replay: the dispatch, and what the kernel reads of its launch (code object
  v5's hidden arguments, v4's dispatch packet), follow each replay; a shape a launch would refuse is refused before
  anything is written, and the replay after it runs with the last good one."""
  from test_emu_rdna_common import compile_cl
  k = dev.program(compile_cl(DIMS, dev.props.arch, (f"-mcode-object-version={cov}", f"-DCOV={cov}")), "dims")
  assert k.needs_dispatch and bool(k.hidden) == (cov == 5)
  n, out = 1024, dev.alloc(4 * 4 * 1024)
  g = Graph(dev)
  g.exec(k, out, global_size=(g.input("gx"), g.input("gy")), local_size=g.input("lx"))
  for gx, gy, lx in ((2, 1, 64), (3, 2, 32), (1, 1, 128), (5, 3, 16)):
    out.copyin(np.zeros(4 * n, np.uint32))
    dev.wait_timeline(g.replay(gx=gx, gy=gy, lx=lx))
    assert np.array_equal(out.numpy(np.uint32), _dims_expected(n, gx, gy, lx)), (gx, gy, lx)
  before = dev.timeline_value
  with pytest.raises(RawGPUError, match="'gx' is a launch dimension of kernel dims: give a positive int, not 0"): g.replay(gx=0)
  with pytest.raises(RawGPUError, match="positive int, not 2.0"): g.replay(lx=2.0)
  with pytest.raises(RawGPUError, match="more than its maximum"): g.replay(lx=2048)
  with pytest.raises(RawGPUError, match="more than the 4294967295 a dispatch can count"): g.replay(gx=1 << 30)
  assert dev.timeline_value == before
  out.copyin(np.zeros(4 * n, np.uint32))
  dev.wait_timeline(g.replay(gy=1))   # the others as the last replay that ran left them
  assert np.array_equal(out.numpy(np.uint32), _dims_expected(n, 5, 1, 16))
  out.copyin(np.zeros(4 * n, np.uint32))
  dev.wait_timeline(g.replay(gx=np.int64(2), lx=np.uint16(64)))   # numpy's ints, as a launch takes them
  assert np.array_equal(out.numpy(np.uint32), _dims_expected(n, 2, 1, 64))


FIB = r"""
__attribute__((noinline)) int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__kernel void fibs(__global int *out, int n) {
  int i = __builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();
  out[i] = fib(n + i % 3);
}
"""


def test_a_recursive_kernel_s_stack_outgrows_what_llvm_reserves(dev):
  """LLVM 19 reserves one frame of private memory for a recursive call (.private_segment_fixed_size 32, no dynamic
  stack), and the runtime sizes WAVESIZE by it: deeper calls write past the wave's share, into the next slots of the
  scratch ring, as on the hardware, whose flat scratch has a base and no size. One wave runs alone and gets its
  answers (several would overwrite each other's frames). The emulated board hung on this kernel: it faulted such
  writes and never reported the fault."""
  from test_emu_rdna_common import compile_cl
  k = dev.program(compile_cl(FIB, dev.props.arch), "fibs")
  lanes = 32 if k.wave32 else 64
  out = dev.alloc(4 * 64)
  k(out, 4, global_size=(1, 1, 1), local_size=(lanes, 1, 1), wait=True, timeout_ms=20_000)   # 6 calls deep
  fib = lambda n: n if n < 2 else fib(n - 1) + fib(n - 2)
  assert out.numpy(np.int32)[:lanes].tolist() == [fib(4 + i % 3) for i in range(lanes)]


def _wait_until(cond, what: str, timeout_s: float = 10) -> None:
  t0 = time.monotonic()
  while not cond():
    if time.monotonic() - t0 > timeout_s: raise AssertionError(f"timed out waiting for {what}")
    time.sleep(0.005)


def test_unordered_graph_runs_queues_at_once_and_waits_only_where_told(dev):
  """Graph(dev, ordered=False): a kernel spins until a flag is set and the copy engine sets it, recorded after the
  kernel but depending on nothing, so the two run at once (in order this replay could never end). A fill that
  waits for both (after=) runs after them; a second spin holds a copy that waits for it, and nothing that does not."""
  spin, fill = prog(dev, "spin"), prog(dev, "fill")
  flag, done, seven = dev.alloc(4, host=True), dev.alloc(4, host=True), dev.alloc(4, host=True)
  seven.cpu()[:4] = (7).to_bytes(4, "little")
  out, held, free_ = dev.alloc(64), dev.alloc(4, host=True), dev.alloc(4, host=True)   # read while the replay runs
  g = Graph(dev, ordered=False)
  g.exec(spin, flag, 7, done, global_size=1, local_size=32); k = g.last_node
  g.copy(flag, seven); c = g.last_node                        # the copy engine releases the kernel
  g.exec(fill, out, g.input("v"), 16, local_size=16, after=[k, c])
  for v in (3, 4, 5):
    flag.cpu()[:4], done.cpu()[:4] = bytes(4), bytes(4)
    dev.wait_timeline(g.replay(v=v), timeout_ms=5000)
    assert done.numpy(np.uint32)[0] == 8 and list(out.numpy(np.uint32)) == [v] * 16
  flag.cpu()[:4] = bytes(4)
  word = lambda b: int.from_bytes(b.cpu()[:4], "little")
  h = Graph(dev, ordered=False)
  h.copy(free_, seven)                                        # the copy engine runs this at once,
  h.exec(spin, flag, 7, done, global_size=1, local_size=32); k = h.last_node
  h.copy(held, seven, after=[k])                              # and holds this until the kernel ends
  t = h.replay()
  _wait_until(lambda: word(free_) == 7, "the copy that waits for nothing")
  time.sleep(0.05)
  assert word(held) == 0 and dev.timeline.value < dev.timeline_gpu(t)
  flag.cpu()[:4] = (7).to_bytes(4, "little")
  dev.wait_timeline(t, timeout_ms=5000)
  assert word(held) == 7


def test_unordered_graph_starts_after_the_devices_earlier_work(dev):
  """A replay whose nodes all run on the copy engine still starts after a kernel launched before it (the device's
  work runs in submission order), and the work after it waits for its end."""
  spin = prog(dev, "spin")
  flag, done, seven, dst = (dev.alloc(4, host=True) for _ in range(4))
  seven.cpu()[:4], flag.cpu()[:4] = (7).to_bytes(4, "little"), bytes(4)
  g = Graph(dev, ordered=False)
  g.copy(dst, seven)
  spin(flag, 7, done, global_size=1, local_size=32)
  t = g.replay()
  time.sleep(0.05)
  assert int.from_bytes(dst.cpu()[:4], "little") == 0   # read as it is, without waiting for the replay
  flag.cpu()[:4] = (7).to_bytes(4, "little")
  dev.wait_timeline(t, timeout_ms=5000)
  assert dst.numpy(np.uint32)[0] == 7 and done.numpy(np.uint32)[0] == 8


@pytest.mark.parametrize("ordered", [True, False])
def test_graph_signals_start_again_below_their_limit(dev, monkeypatch, ordered):
  """The graph's own signals count up by replay and start again at 0 before the engines' 32-bit compare would
  wrap (SYNC_LIMIT, here made small): replays across several restarts still wait for each other's nodes."""
  import rawgpu.hcq.graph as graph_mod
  monkeypatch.setattr(graph_mod, "SYNC_LIMIT", 7)
  fill = prog(dev, "fill")
  a, b = dev.alloc(4 * 64), dev.alloc(4 * 64)
  g = Graph(dev, ordered=ordered)
  g.exec(fill, a, g.input("v"), 64, local_size=64); k = g.last_node
  g.copy(b, a, **({} if ordered else {"after": [k]}))
  g.exec(fill, a, 0, 64, local_size=64, **({} if ordered else {"after": [g.last_node]}))
  for v in range(1, 12):
    dev.wait_timeline(g.replay(v=v), timeout_ms=5000)
    assert np.all(b.numpy(np.uint32) == v) and np.all(a.numpy(np.uint32) == 0), v
  assert g.nsync >= 2 and g.replays < 4   # it started again


def test_graph_after_is_checked(dev):
  fill, a = prog(dev, "fill"), dev.alloc(64)
  with pytest.raises(RawGPUError, match="no nodes yet"): Graph(dev).last_node
  with pytest.raises(RawGPUError, match=r"after= is for Graph\(dev, ordered=False\)"): Graph(dev).exec(fill, a, 1, 1).exec(fill, a, 1, 1, after=[0])
  g = Graph(dev, ordered=False).exec(fill, a, 1, 1)
  for bad in ([1], [-1], ["0"]):
    with pytest.raises(RawGPUError, match=r"after= takes ids of nodes recorded before this one \(0..0\)"): g.exec(fill, a, 1, 1, after=bad)


def test_graph_refuses_a_workgroup_the_kernel_cannot_take(dev):
  g = Graph(dev)
  with pytest.raises(RawGPUError, match="more than its maximum"): g.exec(prog(dev, "fill"), dev.alloc(64), 1, 1, local_size=2048)


def test_graph_replay_refuses_buffers_freed_since_it_was_recorded(dev):
  """A buffer recorded in the graph, or an input kept from the last replay (or given again), that was freed since is
  a clear error before anything is queued: the GPU would write memory that may be someone else's by then."""
  fill, copy = prog(dev, "fill"), prog(dev, "copy", "copy_u32")
  a, b, c = dev.alloc(64), dev.alloc(64), dev.alloc(64)
  g = Graph(dev)
  x = g.input("x")
  g.exec(fill, x, 5, 16, local_size=16)
  g.exec(copy, x, b, 16, local_size=16)   # b: recorded in the graph
  dev.wait_timeline(g.replay(x=a))
  assert list(b.numpy(np.uint32)) == [5] * 16
  before = dev.timeline_value
  a.free()
  with pytest.raises(RawGPUError, match=r"input 'x', kept from the last replay, is <Buffer .*which was freed"): g.replay()
  with pytest.raises(RawGPUError, match=r"input 'x' is <Buffer .*which was freed"): g.replay(x=a)
  dev.wait_timeline(g.replay(x=c))   # a live buffer: it runs
  b.free()
  with pytest.raises(RawGPUError, match=r"<Buffer .*recorded in the graph, was freed"): g.replay(x=c)
  assert dev.timeline_value == before + 1   # only the replay that ran took a ticket
  assert list(c.numpy(np.uint32)) == [5] * 16

def test_a_graph_replay_counts_as_a_use_of_every_buffer_it_recorded(dev):
  """A replay touches nothing per recorded buffer, yet a copy out of or a free of such a buffer waits for the replay
  still running (a kernel before it spins until the host lets it go), also once the graph is dropped."""
  spin, fill = prog(dev, "spin"), prog(dev, "fill")
  flag, done, out, out2 = dev.alloc(4, host=True), dev.alloc(4, host=True), dev.alloc(4 * 64), dev.alloc(4 * 64)
  flag.cpu()[:4] = bytes(4)
  g = Graph(dev).exec(spin, flag, 7, done, global_size=1, local_size=32).exec(fill, out, 9, 64, local_size=64).exec(fill, out2, 8, 64, local_size=64)
  h = Graph(dev).exec(fill, out, 9, 64, local_size=64)   # also records out
  t = g.replay()
  assert out.owner_use() == t and out2.owner_use() == t and not dev.done(t)
  import threading
  threading.Timer(0.2, lambda: flag.cpu().__setitem__(slice(0, 4), (7).to_bytes(4, "little"))).start()
  assert np.all(out.numpy(np.uint32) == 9) and dev.done(t)   # the copy out waited for the replay
  flag.cpu()[:4] = bytes(4)
  t = g.replay()
  del g, h   # dropped while it runs: its replay still counts
  import gc
  gc.collect()
  threading.Timer(0.2, lambda: flag.cpu().__setitem__(slice(0, 4), (7).to_bytes(4, "little"))).start()
  out2.free()
  assert out2.freed and dev.done(t)


def test_graph_scalar_inputs_are_packed_as_each_site_takes_them(dev):
  """A scalar input fills every argument that takes it, each as a launch would pack it: the same uint in two fills
  (one store serves both), and one value as saxpy's float a and as a fill's uint value. Bad values are refused
  before anything is queued."""
  fill, saxpy = prog(dev, "fill"), prog(dev, "saxpy")
  n = 64
  a, b, x, y = (dev.alloc(4 * n) for _ in range(4))
  x.copyin(np.ones(n, np.float32))
  g = Graph(dev)
  v = g.input("v")
  g.exec(fill, a, v, n, local_size=n).exec(fill, b, v, n, local_size=n)
  for k in (3, 0xffffffff):
    dev.wait_timeline(g.replay(v=k))
    assert np.all(a.numpy(np.uint32) == k) and np.all(b.numpy(np.uint32) == k)
  with pytest.raises(RawGPUError, match="does not fit"): g.replay(v=1 << 40)
  with pytest.raises(RawGPUError, match="float"): g.replay(v=1.5)
  mixed = Graph(dev)
  w = mixed.input("w")
  mixed.exec(fill, y, 0, n, local_size=n).exec(saxpy, w, x, y, n, local_size=n).exec(fill, a, w, n, local_size=n)
  for k in (2, 5):
    dev.wait_timeline(mixed.replay(w=k))
    assert np.all(y.numpy(np.float32) == k) and np.all(a.numpy(np.uint32) == k)   # 2.0 in saxpy, 2 (not 2.0's bits) in fill
  dev.synchronize()   # the refused replays took no timeline ticket


def test_timeline_wraps(dev):
  from rawgpu.hcq.device import TIMELINE_LIMIT
  dev.synchronize()
  # pretend 2^32 - 4 tickets have passed: the GPU value is just below the engines' limit
  dev.timeline_base -= TIMELINE_LIMIT - 4 - dev.timeline_gpu(dev.timeline_value - 1)
  dev.timeline.value = dev.timeline_gpu(dev.timeline_value - 1)
  fill = prog(dev, "fill")
  buf = dev.alloc(4 * 64)
  before = dev.timeline_base
  for v in range(6): fill(buf, v, 64, global_size=1, local_size=64)
  dev.synchronize()
  assert dev.timeline_base > before and dev.timeline.value < 10 and np.all(buf.numpy(np.uint32) == 5)


def test_free_waits_for_queued_work(dev):
  fill = prog(dev, "fill")
  buf = dev.alloc(4 * 4096)
  fill(buf, 1, 4096, global_size=16, local_size=256)
  buf.free()
  assert buf.freed and dev.timeline.value >= dev.timeline_gpu(buf.last_use)


def test_reduce_with_lds_and_barriers(dev):
  n = 256 * 6 + 17
  x = np.random.default_rng(4).integers(0, 1 << 20, n, dtype=np.uint32)
  groups = (n + 255) // 256
  X, out = dev.alloc(4 * n).copyin(x), dev.alloc(4 * groups)
  prog(dev, "reduce", "reduce_sum_u32")(X, out, n, global_size=groups, local_size=256, wait=True)
  ref = np.add.reduceat(x, np.arange(0, n, 256)).astype(np.uint32)
  assert np.array_equal(out.numpy(np.uint32), ref)


def test_tiled_matmul_equals_naive_order(dev):
  m, n, k = 20, 36, 24  # not multiples of the 16x16 tile
  rng = np.random.default_rng(5)
  A, B = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
  bA, bB, bC = dev.alloc(A.nbytes).copyin(A), dev.alloc(B.nbytes).copyin(B), dev.alloc(4 * m * n)
  prog(dev, "matmul", "matmul_tiled_f32")(bA, bB, bC, m, n, k, global_size=((n + 15) // 16, (m + 15) // 16), local_size=(16, 16), wait=True)
  ref = np.zeros((m, n), np.float32)
  for i in range(k): ref += A[:, i:i + 1] * B[i:i + 1, :]
  assert np.array_equal(bC.numpy(np.float32).reshape(m, n), ref)


def test_atomic_counter(dev):
  n = 1000
  counter, old = dev.alloc(4).copyin(np.array([5], np.uint32)), dev.alloc(4 * n)
  prog(dev, "atomic")(counter, old, n, global_size=(n + 127) // 128, local_size=128, wait=True)
  assert counter.numpy(np.uint32)[0] == 5 + n
  assert np.array_equal(np.sort(old.numpy(np.uint32)), np.arange(5, 5 + n, dtype=np.uint32))


def test_relocated_pointer_tables(dev):
  n = 37
  out = dev.alloc(4 * n)
  lut = prog(dev, "lut")
  for which, table in ((0, [0, 1, 4, 9]), (1, [0, 1, 8, 27])):
    lut(out, which, n, global_size=1, local_size=64, wait=True)
    assert np.array_equal(out.numpy(np.uint32), np.array([table[i % 4] for i in range(n)], np.uint32))


def test_wrong_arguments_are_clear_errors(dev):
  vadd = prog(dev, "vadd", "vadd_f32")
  buf = dev.alloc(64)
  with pytest.raises(RawGPUError, match="takes 4 arguments"): vadd(buf, buf, 3)
  with pytest.raises(RawGPUError, match="pointer; pass a Buffer"): vadd(buf, 1, buf, 3)
  with pytest.raises(RawGPUError, match="does not fit"): vadd(buf, buf, buf, 1 << 40)
  with pytest.raises(RawGPUError, match="argument #3 \\(uint\\) is an integer .*got the float 3.0"): vadd(buf, buf, buf, 3.0)
  with pytest.raises(RawGPUError, match="does not fit argument #0 \\(float\\)"): prog(dev, "saxpy")(1e300, buf, buf, 1)
  with pytest.raises(RawGPUError, match="launch dimensions"): vadd(buf, buf, buf, 1, global_size=0)
  with pytest.raises(RawGPUError, match="4294967296 work-items along x"): vadd(buf, buf, buf, 1, global_size=1 << 24, local_size=256)
  with pytest.raises(RawGPUError, match="work-items along y"): vadd(buf, buf, buf, 1, global_size=(1, 1 << 32))
  with pytest.raises(RawGPUError, match="work-items along z"): Graph(dev).exec(vadd, buf, buf, buf, 1, global_size=(1, 1, 1 << 31), local_size=(1, 1, 2))
  Graph(dev).exec(vadd, buf, buf, buf, 1, global_size=(1 << 31) - 1, local_size=2)   # 2^32 - 2 work-items: recorded (not run)
  with pytest.raises(RawGPUError, match=r"argument #3 \(uint\) \(by_value, 4 bytes\) cannot take str"): vadd(buf, buf, buf, "3")
  gone = dev.alloc(64)
  gone.free()
  with pytest.raises(RawGPUError, match="was freed"): vadd(buf, gone, buf, 1)
  dev.synchronize()  # nothing was submitted by the failed launches: the timeline has no holes


def test_out_of_memory_is_one_clear_error_and_loses_nothing(dev):
  from rawgpu.errors import OutOfMemory
  keep = dev.alloc(4096).copyin(np.arange(1024, dtype=np.uint32))
  for what, size, kw in (("VRAM", 2 * dev.props.vram_size, {}), ("host memory", 1 << 46, {"host": True}), ("VRAM", 1 << 50, {})):
    with pytest.raises(OutOfMemory, match=f"{re.escape(str(dev))}: cannot allocate {size} bytes of {what}: .*; free buffers or ask for less") as e:
      dev.alloc(size, **kw)
    assert isinstance(e.value, MemoryError)   # what a caching allocator catches to free and retry
  again = dev.alloc(1 << 20)   # the failed attempts gave back what they had taken
  again.copyin(np.full(1 << 18, 3, np.uint32))
  assert np.array_equal(keep.numpy(np.uint32), np.arange(1024, dtype=np.uint32)) and again.numpy(np.uint32)[-1] == 3
  again.free()


def test_no_room_for_a_devices_first_queue_is_out_of_memory(spare_dev):
  """A fresh device whose VRAM is full gets OutOfMemory at its first kernel (its compute queue needs VRAM), as an
  allocation does; it was a bare MemoryError on MOCKPCI and an IoctlError (ENOMEM) on MOCKKFD. Once there is room the
  same device runs the kernel."""
  from rawgpu.errors import OutOfMemory
  d = spare_dev
  fill, out = prog(d, "fill"), d.alloc(256, host=True)
  held, size = [], 1 << 26
  while size >= 4096:
    try: held.append(d.alloc(size))
    except OutOfMemory: size //= 2
  with pytest.raises(OutOfMemory, match=f"{re.escape(str(d))}: cannot allocate the compute queue: .*; free buffers or ask for less"):
    fill(out, 5, 64, global_size=1, local_size=64)
  for b in held: b.free()
  fill(out, 5, 64, global_size=1, local_size=64)
  d.synchronize()
  assert list(out.numpy(np.uint32)[:64]) == [5] * 64


def test_copy_sizes_and_signal_values_are_checked_not_cut(dev):
  a, b = dev.alloc(64).copyin(np.arange(16, dtype=np.uint32)), dev.alloc(64)
  ticket = dev.timeline_value
  with pytest.raises(RawGPUError, match="size of 0 or more bytes, not -4"): dev.transfer(b, a, -4)
  with pytest.raises(RawGPUError, match="size of 0 or more bytes, not -1"): Graph(dev).copy(b, a, -1)
  dev.transfer(b, a, 0)                        # nothing to copy: nothing queued
  assert Graph(dev).copy(b, a, 0).nodes == []
  assert dev.timeline_value == ticket
  sig = dev.new_signal("checked")
  with pytest.raises(RawGPUError, match=r"compute queue wait takes an int in 0..2\^64-1, not -1"): dev.compute_queue().wait(sig, -1)
  with pytest.raises(RawGPUError, match="compute queue signal takes"): dev.compute_queue().signal(sig, 1 << 64)
  with pytest.raises(RawGPUError, match="copy queue signal takes"): dev.copy_queue().signal(sig, 1 << 64)
  with pytest.raises(RawGPUError, match="patch slot 'v' takes an int"): dev.compute_queue().signal(sig, Var("v")).submit(dev, {"v": -1})
  with pytest.raises(RawGPUError, match=r"checked value takes an int in 0..2\^64-1, not -1"): sig.value = -1
  with pytest.raises(RawGPUError, match="a wait on checked takes"): sig.wait(1 << 64, 10)
  steps = ((dev.copy_queue, (1 << 32) - 1, True), (dev.copy_queue, 3 << 32, False), (dev.copy_queue, 5 << 32 | 7, True),
           (dev.compute_queue, 1 << 40, True), (dev.copy_queue, (1 << 64) - 1, True))
  for queue, v, patched in steps:   # rising values, each whole (the copy engine's in two FENCEs when they need it)
    if patched: queue().signal(sig, Var("v")).submit(dev, {"v": v})
    else: queue().signal(sig, v).submit(dev)
    sig.wait(v, 5000)
    assert sig.value == v
  for v, patched in ((9, False), (11, True)):   # a small value over a large one a user left: the whole value, not 2^32 + v
    sig.value, done = 3 << 32, dev.new_signal("done")
    q = dev.copy_queue().signal(sig, Var("v", 32) if patched else v).signal(done, 1)
    q.submit(dev, {"v": v} if patched else None)
    done.wait(1, 5000)
    assert sig.value == v
  dev.synchronize()


@pytest.fixture
def spare_dev(dev):
  """A second board of the same kind, for tests that break their device on purpose (or fill it). On MOCKKFD a machine (a process)
  of its own: after a fault amdkfd keeps the process's queues on that GPU stopped until the process exits."""
  from rawgpu.hcq.device import Device
  if dev.props.iface != "MOCKKFD":
    d = Device(f"{dev.props.iface}:1+AMD::{dev.props.arch}")
    yield d
    d.close()
    return
  from rawgpu.drivers.emu.mockkfd import MockMachine
  from rawgpu.drivers.kfd import KFDIface
  m = MockMachine(dev.props.arch, 1)
  try:
    d = Device(iface=KFDIface(0, m.system))
    yield d
    d.close()
  finally: m.close()


def test_numpy_of_a_size_that_is_not_whole_elements_is_refused(dev):
  b = dev.alloc(64).copyin(np.arange(16, dtype=np.uint32))
  with pytest.raises(RawGPUError, match=r"is not a whole number of uint32 \(4 bytes each\)"): b.view(0, 6).numpy(np.uint32)
  assert list(b.view(4, 8).numpy(np.uint32)) == [1, 2]


def test_close_drains_as_long_as_the_devices_waits(spare_dev):
  """close() waits for the work queued so far as long without progress as the device's own waits (timeout_ms), then
  releases it as it is; it waited 10 s whatever timeout_ms said."""
  d = spare_dev
  flag, done = d.alloc(4, host=True), d.alloc(4, host=True)
  flag.cpu()[:4] = bytes(4)
  prog(d, "spin")(flag, 7, done, global_size=1, local_size=32)   # never released
  d.timeout_ms = 300
  t0 = time.monotonic()
  d.close()
  assert time.monotonic() - t0 < 5


def test_a_closed_device_refuses_work_at_once(spare_dev):
  """After close its rings and memory are gone: each use says so at once (they used to hang for the 10 s timeout,
  or map into page tables that were no longer the device's)."""
  d = spare_dev
  fill = prog(d, "fill")
  a = d.alloc(4096)
  g = Graph(d)
  g.exec(fill, a, 1, 1)
  fill(a, 7, 1, wait=True)
  sig = d.new_signal("user")
  sig.value = 0
  g.replay()
  d.synchronize()
  d.close()
  d.close()   # a second close does nothing
  t0 = time.monotonic()
  from rawgpu.hcq.profile import Profiler
  def set_signal(): sig.value = 1
  for use in (lambda: d.alloc(64), lambda: fill(a, 1, 1), lambda: a.numpy(), lambda: a.copyin(b"1234"), g.replay,
              lambda: d.transfer(a, a), lambda: d.transfer(a, a, 0), d.new_signal, d.compute_queue, d.copy_queue, lambda: d.program(b""),
              set_signal, lambda: sig.value, lambda: sig.wait(1), g.gpu_time, lambda: Profiler(d)):   # (a signal's wait used to time out after 10 s)
    with pytest.raises(RawGPUError, match=f"{re.escape(str(d))}: the device is closed; open it again"): use()
  assert time.monotonic() - t0 < 2
  d.synchronize()   # nothing left to wait for: not an error
  a.free()



def test_a_transfer_refuses_freed_buffers_and_other_objects(dev):
  """Device.transfer into a freed buffer wrote the memory of whichever allocation had its place by then."""
  a, b = dev.alloc(4096), dev.alloc(4096)
  a.free()
  for dst, src in ((a, b), (b, a), (b.view(0, 64), a)):
    with pytest.raises(RawGPUError, match=f"buffer at {a.va:#x} was freed"): dev.transfer(dst, src, 64)
  with pytest.raises(RawGPUError, match="transfer copies between Buffers, not bytes"): dev.transfer(b"xx", b, 2)


def test_a_refused_graph_replay_changes_nothing(dev):
  """A value refused at replay used to leave what the replay had written before it: the next replay ran with it."""
  fill = prog(dev, "fill")
  a, b = dev.alloc(64), dev.alloc(64)
  g = Graph(dev)
  x, n = g.input("x"), g.input("n")
  g.exec(fill, x, n, 1)
  dev.wait_timeline(g.replay(x=a, n=2))
  with pytest.raises(RawGPUError, match="does not fit"): g.replay(n=2**40)
  with pytest.raises(RawGPUError, match="got the float 2.5"): g.replay(x=b, n=2.5)   # x written first, then refused
  b.copyin(np.zeros(16, np.uint32))
  dev.wait_timeline(g.replay(n=3))
  assert a.numpy(np.uint32)[0] == 3 and b.numpy(np.uint32)[0] == 0   # x is still a
  b.free()
  with pytest.raises(RawGPUError, match="was freed"): g.replay(x=b)


def test_wait_references_of_2_to_the_32_or_more_are_refused_where_patched(dev):
  """The engines compare 32 bits: a patched wait for 2^32 + 5 went on at 5 (the int form was already refused)."""
  gate = dev.new_signal("gate")
  q = dev.compute_queue().wait(gate, Var("v"))
  with pytest.raises(RawGPUError, match="'v' is a 32-bit field"): q.submit(dev, {"v": 2**32 + 5})
  g = Graph(dev)
  g.wait(gate, g.input("go"))
  with pytest.raises(RawGPUError, match="graph input 'go' is a wait's reference"): g.replay(go=2**32 + 7)


def test_a_queue_refuses_objects_that_are_not_signals(dev):
  buf = dev.alloc(64)
  for q in (dev.compute_queue(), dev.copy_queue()):
    with pytest.raises(RawGPUError, match="a queue waits on and signals a Signal .*not Buffer"): q.signal(buf, 1)
    with pytest.raises(RawGPUError, match="not int"): q.wait(123, 1)


def test_launch_dimensions_take_ints_numpy_ints_and_nothing_else(dev):
  fill = prog(dev, "fill")
  a = dev.alloc(64).copyin(np.zeros(16, np.uint32))
  fill(a, 4, 8, global_size=np.int64(2), local_size=(np.int32(4),), wait=True)
  assert list(a.numpy(np.uint32)[:9]) == [4] * 8 + [0]
  for bad in (None, 2.0, True, (2, None), "2", [], (1, 1, 1, 1)):
    with pytest.raises(RawGPUError, match="launch dimensions must be 1 to 3 positive ints"): fill(a, 4, 8, global_size=bad, local_size=4)


def test_timing_is_a_yes_or_no(dev):
  """timing="profile" used to pick the Profiler's template without a Profiler: the GPU wrote its clock to VA 0."""
  fill = prog(dev, "fill")
  a = dev.alloc(64)
  assert fill(a, 1, 1, timing="profile") > 0 and fill(a, 2, 1, wait=True) is None


def test_a_wait_with_a_timeout_that_is_not_a_number_is_refused(dev):
  sig = dev.new_signal("never")
  for bad in (float("nan"), "10"):   # (None is the default: the device's timeout_ms)
    with pytest.raises(RawGPUError, match="timeout_ms takes a number of milliseconds"): sig.wait(1, timeout_ms=bad)


def test_sizes_offsets_and_dtypes_of_the_wrong_type_are_clear_errors(dev):
  a = dev.alloc(np.int64(64))   # numpy's ints are sizes and offsets too
  assert a.size == 64 and a.view(np.int64(16), np.int32(8)).size == 8
  for use, what in ((lambda: dev.alloc(1.5), "alloc takes a size in bytes"), (lambda: dev.alloc("8"), "alloc takes a size in bytes"),
                    (lambda: a.view(1.5, 2), "a sub-buffer takes an int offset and size"), (lambda: a.view(0, None), "int offset and size"),
                    (lambda: dev.alloc(True), "alloc takes a size in bytes"), (lambda: a.view(True, True), "int offset and size"),   # (bools are ints to Python)
                    (lambda: prog(dev, "fill")(a, 1, 1, dynamic_lds=True), "dynamic_lds takes a number of bytes"),
                    (lambda: a.numpy("foo"), "numpy\\(\\) takes a numpy dtype"), (lambda: dev.map(5), "map takes a Buffer or a Signal"),
                    (lambda: prog(dev, "fill")(a, np.array([9]), 1), "cannot take ndarray"),
                    (lambda: prog(dev, "fill")(a, 1, 1, dynamic_lds="64"), "dynamic_lds takes a number of bytes"),
                    (lambda: dev.copy_queue().copy(a.va, a.va, 0), "copies a positive number of bytes"),
                    (lambda: dev.copy_queue().copy(a, a.va, 4), "copies between addresses"),
                    (lambda: Graph(None), "Graph takes the Device it runs on"), (lambda: Graph(dev).exec(print), "Graph.exec takes a program"),
                    (lambda: Graph(dev).exec(prog(dev, "fill"), a, 1, 1, after=5), "after= takes a list of ids"),
                    (lambda: Graph(dev, ordered=False).exec(prog(dev, "fill"), a, 1, 1, after=[0]), "there are none yet"),
                    (lambda: Graph(dev).wait(123, 1), "a graph wait takes a Signal"), (lambda: dev.program(kernels.path(dev.props.arch, "fill")), "program takes a code object's bytes")):
    with pytest.raises(RawGPUError, match=what): use()
  from rawgpu.hcq.device import Device
  with pytest.raises(RawGPUError, match="a device is named by a DEV string"): Device(0)

def test_page_fault_is_reported_then_reopen_recovers(spare_dev):
  from rawgpu.errors import DeviceFault
  from rawgpu.hcq.device import Device
  d, arch = spare_dev, spare_dev.props.arch
  bad = 0x7f10_0000_0000
  with pytest.raises(DeviceFault, match=f"{bad:#x}"): prog(d, "fault")(bad, 5, wait=True)
  if not d.recovers_from_faults:   # in place neither: recover() says why, and changes nothing
    with pytest.raises(DeviceFault, match=f"{bad:#x}.*restart the process"): d.recover()
    assert d.faulted
  d.close()
  if d.props.iface == "MOCKKFD":   # amdkfd: this process's queues on that GPU stay stopped; a new process starts clean
    from rawgpu.drivers.emu.mockkfd import MockMachine
    from rawgpu.drivers.kfd import KFDIface
    with pytest.raises(DeviceFault, match=f"{bad:#x}.*restart the process"): KFDIface(0, d.iface.system)
    m = MockMachine(arch, 1)
    try: _fill_works(Device(iface=KFDIface(0, m.system)))
    finally: m.close()
    return
  _fill_works(Device(f"{d.props.iface}:1+AMD::{arch}"))  # reopening re-initialises the queues


def _fill_works(d2) -> None:
  try:
    buf = d2.alloc(64)
    prog(d2, "fill")(buf, 3, 16, local_size=16, wait=True)
    assert list(buf.numpy(np.uint32)) == [3] * 16
  finally: d2.close()


def test_page_fault_then_in_place_recovery(spare_dev):
  from rawgpu.errors import DeviceFault
  d = spare_dev
  if not d.recovers_from_faults: pytest.skip(f"{d.props.iface}: after a fault the queues restart by reopening (tested above)")
  d.ring("compute")   # created before the copy ring: recover() meets it first (a refusal must still come before any reset)
  prog(d, "fill")(d.alloc(64), 1, 16, local_size=16, wait=True)
  done = d.timeline_value - 1
  with pytest.raises(DeviceFault, match="page fault at VA 0x7f1000000000 \\(write, client TCP, .*client id 8"):   # a wave's store
    prog(d, "fault")(0x7f10_0000_0000, 5, wait=True)
  with pytest.raises(DeviceFault, match="faulted earlier"): d.synchronize()
  d.wait_timeline(done)   # work that was done before the fault is done: waiting for it (a peer's use, say) returns
  s = d.new_signal("behind")   # a raw queue's signal behind the faulted work: its wait says so at once (it waited
  d.copy_queue().wait(d.timeline, d.timeline_gpu(d.timeline_value - 1)).signal(s, 1).submit(d)   # out its timeout)
  t0 = time.monotonic()
  with pytest.raises(DeviceFault, match="faulted earlier .*; dev.recover\\(\\) restarts its queues"): s.wait(1, timeout_ms=3000)
  assert time.monotonic() - t0 < 1
  d.recover()
  buf = d.alloc(64)
  for v in (4, 9):
    prog(d, "fill")(buf, v, 16, local_size=16, wait=True)
    assert list(buf.numpy(np.uint32)) == [v] * 16


def test_one_faulting_store_is_one_fault_interrupt(spare_dev):
  """A wave's store to an unmapped page faults once: one fault reported, one IH entry. (The emulated GC hub used to
  report it twice, from its contiguous-span guess and again from the per-page walk; MOCKKFD then handed the second
  one to the next device opened in the process.)"""
  from rawgpu.drivers.emu import mockpci
  from rawgpu.errors import DeviceFault
  d = spare_dev
  if d.props.iface != "MOCKPCI": pytest.skip("counts on the board through the virtual PCI bus (MOCKKFD's kernel owns its boards)")
  board = mockpci._vbus.boards[d.props.pci_bus]
  hub, ih = board.gmc.gcs[d.iface.xcc], board.ih   # the GC hub of the device's XCC (MI300: one per XCC)
  faults, posted = hub.faults, ih.posted
  with pytest.raises(DeviceFault, match="page fault at VA 0x7f1000000000"): prog(d, "fault")(0x7f10_0000_0000, 5, wait=True)
  assert (hub.faults - faults, ih.posted - posted) == (1, 1)
  d.recover()


def test_shader_faults_name_the_sqc_for_scalar_loads_and_instruction_fetch(spare_dev):
  """A wave reaches memory through three clients (gfxhub_v3_0/v12_0's table): vector memory through the TCP, scalar
  loads through the SQC's data path, instruction fetch through its instruction path. A launch whose kernel-argument
  address is unmapped faults in the kernel's first s_load; one whose program address is unmapped, in its fetch."""
  import copy
  from rawgpu.errors import DeviceFault
  d = spare_dev
  if not d.recovers_from_faults: pytest.skip(f"{d.props.iface}: after a fault the queues restart by reopening (tested above)")
  fill, buf = prog(d, "fill"), d.alloc(64)
  fill(buf, 1, 16, local_size=16, wait=True)
  bad_code = copy.copy(fill)
  bad_code.code_va = 0x7f60_0000_0000
  cases = ((fill, 0x7f50_0000_0000, r"0x7f5000000000 \(read, client SQC \(data\), .*client id 10"),
           (bad_code, fill.backend.kernargs.mem.va, r"0x7f6000000000 \(read, client SQC \(inst\), .*client id 9"))
  for p, kernargs, where in cases:
    v = d.next_timeline("compute")
    d.compute_queue().exec(p, kernargs, (1, 1, 1), (16, 1, 1)).signal(d.timeline, d.timeline_gpu(v)).submit(d)
    with pytest.raises(DeviceFault, match="page fault at VA " + where): d.wait_timeline(v, timeout_ms=5000)
    d.recover()
  fill(buf, 6, 16, local_size=16, wait=True)
  assert list(buf.numpy(np.uint32)) == [6] * 16


def test_copy_engine_fault_then_in_place_recovery(spare_dev):
  """A copy from an unmapped address faults the copy engine; recover() resets it (sdma_v6_0_soft_reset's sequence;
  on MI300 the SMU's engine reset) with the compute queue, and both engines work again."""
  from rawgpu.errors import DeviceFault
  d = spare_dev
  if not d.recovers_from_faults: pytest.skip(f"{d.props.iface}: after a fault the queues restart by reopening (tested above)")
  y = d.alloc(1 << 16)
  v = d.next_timeline("sdma")
  d.copy_queue().copy(y.va, 0x7f30_0000_0000, 4096).signal(d.timeline, d.timeline_gpu(v)).submit(d)
  # MI300's engines reach memory through their AID's MM hub, whose clients gmc_v9_0.c names with Aldebaran's table; a
  # device on XCC x copies with engines 2x and 2x + 1 (amdgpu's CPX partitions), 4 to an AID
  e = 2 * getattr(d.iface, "xcc", 0)
  who = f"client SDMA{e % 4}, .*hub MM {e // 4}, client id {256 + e % 4}" if d.props.arch == "gfx942" else "client SDMA0, .*client id 13"
  with pytest.raises(DeviceFault, match=f"page fault at VA 0x7f3000000000 \\(read, .*{who}"): d.wait_timeline(v, timeout_ms=5000)
  d.recover()
  data = np.arange(4096, dtype=np.uint32)
  assert np.array_equal(y.copyin(data).numpy(np.uint32)[:4096], data)   # through the copy engine, both ways
  prog(d, "fill")(y, 3, 16, local_size=16, wait=True)
  assert list(y.numpy(np.uint32)[:17]) == [3] * 16 + [16]


def test_a_fault_seen_by_a_signal_of_the_users_is_the_devices(spare_dev):
  """A fault that a wait on the user's own signal sees is recorded on the device, as a timeline wait's is: recover()
  restarts the engines (AM), or says the queues stay stopped (KFD). It used to pass unrecorded: recover() returned
  without a word and the next copy timed out on the stopped engine."""
  from rawgpu.errors import DeviceFault
  d = spare_dev
  y, s = d.alloc(4096), d.new_signal()
  d.copy_queue().copy(y.va, 0x7f30_0000_0000, 4096).signal(s, 1).submit(d)
  with pytest.raises(DeviceFault, match="page fault"): s.wait(1, timeout_ms=5000)
  assert "page fault" in d.faulted
  if not d.recovers_from_faults:
    with pytest.raises(DeviceFault, match="page fault"): d.recover()
    return
  d.recover()
  data = np.arange(1024, dtype=np.uint32)
  d.transfer(y, d.alloc(4096).copyin(data))   # on the copy engine
  d.synchronize(timeout_ms=5000)
  assert np.array_equal(y.numpy(np.uint32), data)


def test_hung_kernel_times_out_naming_the_signal_then_finishes(dev):
  from rawgpu.errors import DeviceTimeout
  flag, done = dev.alloc(4, host=True), dev.alloc(4, host=True)
  flag.cpu()[:4] = bytes(4)
  prog(dev, "spin")(flag, 7, done, global_size=1, local_size=32)
  with pytest.raises(DeviceTimeout, match="timeline.*stuck") as e: dev.synchronize(timeout_ms=300)
  assert "DISPATCH_DIRECT" in str(e.value)  # the report decodes what was submitted, and dumps it for rawgpu decode
  hint = next(ln for ln in str(e.value).splitlines() if "dumped: rawgpu decode pm4" in ln)
  assert hint.endswith(f"--arch {dev.props.arch}")   # (gfx942's rings hold gfx9's packet forms)
  from rawgpu.tools import cli
  assert cli.main(hint.split("rawgpu ", 1)[1].split()) == 0   # the command as printed: whole, well-formed packets
  flag.cpu()[:4] = (7).to_bytes(4, "little")  # the kernel polls the flag: release it
  dev.synchronize()
  assert done.numpy(np.uint32)[0] == 8


def test_a_hang_report_shows_what_each_launch_submitted(spare_dev):
  """The report decodes the submissions as the ring holds them: two launches of one kernel (one template, patched in
  place) showed the second's kernargs and ticket twice. Each report dumps to a file of its own (two hangs in one
  second shared one), and a close that gives up on a hung device writes no dump nobody is told of."""
  import glob
  from rawgpu.errors import DeviceTimeout
  from rawgpu.hcq.amd import pm4
  d = spare_dev
  spin = prog(d, "spin")
  go, stay, done = d.alloc(4, host=True), d.alloc(4, host=True), d.alloc(4, host=True)
  go.cpu()[:4], stay.cpu()[:4] = (7).to_bytes(4, "little"), bytes(4)
  first = d.timeline_value - d.timeline_base   # the GPU value each launch's ticket signals
  spin(go, 7, done, global_size=1, local_size=32)
  d.synchronize()
  second = d.timeline_value - d.timeline_base
  spin(stay, 7, done, global_size=1, local_size=32)   # hangs until stay is 7
  paths = []
  for _ in range(2):
    with pytest.raises(DeviceTimeout) as e: d.synchronize(timeout_ms=200)
    paths.append(next(ln for ln in str(e.value).splitlines() if "dumped: rawgpu decode pm4" in ln).split()[4])
  assert paths[0] != paths[1] and all(os.path.getsize(p) for p in paths)
  pkts = pm4.decode_pm4(list(np.fromfile(paths[0], np.uint32)), gen=d.backend.gfx)
  tickets = [p.fields["data_lo"] for p in pkts if p.name == "RELEASE_MEM"]   # each launch signals its own ticket
  assert {first, second} <= set(tickets), [pm4.format_packet(p) for p in pkts]
  for p in paths: os.unlink(p)
  mine = os.path.join(tempfile.gettempdir(), f"rawgpu-hang-{os.getpid()}-*")   # (other test processes hang too)
  before = set(glob.glob(mine))
  d.timeout_ms = 200
  d.close()   # gives up on the hung kernel, quietly
  assert set(glob.glob(mine)) == before   # (the spin is left, as a close leaves it)


def test_a_graph_replays_hang_report_decodes_the_graphs_packets(dev):
  """A replay is one INDIRECT_BUFFER on the ring: the report decodes the bound queue it runs too (it showed only the
  INDIRECT_BUFFER, not the dispatch that hung)."""
  from rawgpu.errors import DeviceTimeout
  from rawgpu.hcq.amd import pm4
  spin, fill = prog(dev, "spin"), prog(dev, "fill")
  flag, done, buf = dev.alloc(4, host=True), dev.alloc(4, host=True), dev.alloc(1024)
  flag.cpu()[:4] = bytes(4)
  g = Graph(dev).exec(fill, buf, 1, 256, local_size=256).exec(spin, flag, 7, done, global_size=1, local_size=32)
  t = g.replay()
  with pytest.raises(DeviceTimeout) as e: dev.wait_timeline(t, timeout_ms=300)
  ib = [ln for ln in str(e.value).splitlines() if ln.startswith("[compute IB ")]
  assert sum("DISPATCH_DIRECT" in ln for ln in ib) == 2, str(e.value)
  dumps = [ln.split()[4] for ln in str(e.value).splitlines() if "dumped: rawgpu decode" in ln]
  ib_dumps = [p for p in dumps if "-compute-ib-" in p]   # the bound queue's words too, for rawgpu decode
  assert len(ib_dumps) == 1, dumps
  pkts = pm4.decode_pm4(list(np.fromfile(ib_dumps[0], np.uint32)), gen=dev.backend.gfx)
  assert sum(p.name == "DISPATCH_DIRECT" for p in pkts) == 2
  for p in dumps: os.unlink(p)
  flag.cpu()[:4] = (7).to_bytes(4, "little")
  dev.wait_timeline(t)


def test_free_signal_refuses_misuse_and_waits_for_the_work_queued_on_it(dev):
  """A freed signal's slot goes back only once the work queued by then is done (raw submits too), so a new signal
  never shares it with work still writing the old one; freeing twice or the timeline is refused, and so is any use
  of a freed signal. Before, the slot went back at once: the old work wrote 99 into the fresh signal, a double free
  gave two new signals one slot, and freeing the timeline made a new signal alias it."""
  from rawgpu.errors import DeviceTimeout
  flag, s, done = dev.new_signal("flag"), dev.new_signal("s"), dev.new_signal("done")
  dev.compute_queue().wait(flag, 1).signal(s, 99).signal(done, 1).submit(dev)   # held until flag is set
  dev.free_signal(s)
  fresh = dev.new_signal("fresh")
  assert fresh.va != s.va
  flag.value = 1
  done.wait(1, timeout_ms=5000)
  assert fresh.value == 0
  with pytest.raises(RawGPUError, match="was freed already"): dev.free_signal(s)
  with pytest.raises(RawGPUError, match="the timeline is the device's own"): dev.free_signal(dev.timeline)
  with pytest.raises(RawGPUError, match="free_signal takes a Signal"): dev.free_signal(dev.alloc(16))
  for use in (lambda: s.value, lambda: setattr(s, "value", 3), lambda: s.wait(1, timeout_ms=10),
              lambda: dev.compute_queue().signal(s, 1), lambda: dev.copy_queue().wait(s, 1)):
    with pytest.raises(RawGPUError, match="was freed; make a new one"): use()
  later = [dev.new_signal(f"n{i}") for i in range(300)]   # (the slots that came back are given out once each)
  assert len({x.va for x in later + [fresh, flag]}) == len(later) + 2
  for x in later: dev.free_signal(x)


def test_a_refused_patch_or_submit_changes_nothing(dev):
  """patch()/submit() check every value before writing any: a bad one refused after a good one had been written
  left the queue half patched (the next submit wrote the good value). A submit to a closed device is refused before
  anything is patched."""
  s, t = dev.new_signal("s"), dev.new_signal("t")
  q = dev.compute_queue().signal(s, Var("a")).signal(t, Var("b"))
  q.submit(dev, {"a": 1, "b": 1})
  t.wait(1, timeout_ms=5000)
  for bad in ({"a": 7, "b": -1}, {"a": 9, "nope": 1}, {"a": 5.0}, [("a", 1)]):
    with pytest.raises(RawGPUError): q.submit(dev, bad)
    assert q._cur == {"a": 1, "b": 1}, bad
  q.submit(dev, {"b": 2})
  t.wait(2, timeout_ms=5000)
  assert s.value == 1


def test_queue_builders_refuse_addresses_they_would_cut_or_misalign(dev):
  sig = dev.new_signal("s")
  for use in (lambda: dev.compute_queue().timestamp(-8), lambda: dev.compute_queue().timestamp((1 << 64) + sig.va),
              lambda: dev.copy_queue().timestamp(1 << 64), lambda: dev.copy_queue().copy(-1, sig.va, 4),
              lambda: dev.copy_queue().copy(1 << 64, sig.va, 4), lambda: dev.compute_queue().timestamp(sig.va + 3)):
    with pytest.raises(RawGPUError): use()   # (bare ValueErrors, or the address silently cut to its low 64 bits)
  from rawgpu.hcq.amd.sdma import copy_max_bytes
  with pytest.raises(RawGPUError, match="a copy with a patched address copies at most"):   # (a cryptic locate() error)
    dev.copy_queue().copy(Var("d"), sig.va, copy_max_bytes(dev.backend.sdma_version) + 1)
  with pytest.raises(RawGPUError, match="the driver's 32-bit counter"): dev.timeline.value = 1 << 40


def test_a_refused_bind_leaves_the_queue_as_it_was(dev):
  """A copy queue cannot be bound (no indirect buffers here): the refusal came after the queue's words had moved
  into new GPU memory, and its next submit failed with an AttributeError."""
  s = dev.new_signal("s")
  q = dev.copy_queue().signal(s, 1)
  with pytest.raises(RawGPUError, match="cannot run from GPU memory"): q.bind(dev)
  q.submit(dev)
  s.wait(1, timeout_ms=5000)
  b = dev.compute_queue().signal(s, 2).bind(dev)
  with pytest.raises(RawGPUError, match="bound already"): b.bind(dev)


def test_recover_restarts_a_queue_held_by_a_raw_wait_that_timed_out(dev):
  """A raw queue waits on a flag that is never set; its signal's wait times out. recover() restarted nothing (no
  ticket had stalled), and the next launch timed out behind the held ring."""
  from rawgpu.errors import DeviceTimeout
  if not dev.recovers_in_place: pytest.skip(f"{dev.props.iface} cannot restart a queue in place")
  fill, buf = prog(dev, "fill"), dev.alloc(4096)
  flag, s = dev.new_signal("flag"), dev.new_signal("s")
  dev.compute_queue().wait(flag, 1).signal(s, 1).submit(dev)
  with pytest.raises(DeviceTimeout): s.wait(1, timeout_ms=100, report=False)
  dev.recover()
  fill(buf, 7, 1024, global_size=4, local_size=256, wait=True, timeout_ms=5000)
  assert np.all(buf.numpy(np.uint32) == 7)


def test_a_signal_wait_gives_up_after_the_device_s_timeout(dev):
  from rawgpu.errors import DeviceTimeout
  s, old = dev.new_signal("s"), dev.timeout_ms
  dev.timeout_ms = 150
  try:
    t0 = time.monotonic()
    with pytest.raises(DeviceTimeout, match="150 ms without progress"): s.wait(1, report=False)
    assert time.monotonic() - t0 < 3   # (it waited a fixed 10 s)
  finally: dev.timeout_ms = old


def test_a_waiting_launch_gives_up_after_its_timeout(dev):
  from rawgpu.errors import DeviceTimeout
  flag, done, other = dev.alloc(4, host=True), dev.alloc(4, host=True), dev.alloc(4)
  fill = prog(dev, "fill")   # loaded before the spin: on KFD its code goes to VRAM on the copy engine, and waits
  flag.cpu()[:4] = bytes(4)
  t0 = time.monotonic()
  with pytest.raises(DeviceTimeout, match="timeline.*stuck"):
    prog(dev, "spin")(flag, 7, done, global_size=1, local_size=32, timing=True, timeout_ms=300)
  assert time.monotonic() - t0 < 5   # not the 10 s default
  with pytest.raises(DeviceTimeout, match="ms without progress\\)$") as e:   # the bare timeout: nothing decoded or dumped
    fill(other, 1, 1, wait=True, timeout_ms=100, report=False)
  assert "last commands" not in str(e.value)
  flag.cpu()[:4] = (7).to_bytes(4, "little")
  dev.synchronize()
  assert done.numpy(np.uint32)[0] == 8


def test_a_hang_is_stopped_in_place_by_recover(spare_dev):
  """recover() after a wait timed out: a kernel that never ends, a compute queue waiting for a signal nobody writes
  and a copy engine polling one are each stopped in place (the HQD dequeued with its waves reset, the SDMA engine
  reset; on KFD the kernel destroys the queue, preempting it, and a new one is made); what was queued behind them is
  dropped, the timeline fast-forwarded, and the device goes on."""
  from rawgpu.errors import DeviceTimeout
  d = spare_dev
  fill, spin = prog(d, "fill"), prog(d, "spin")
  flag, done, behind = d.alloc(4, host=True), d.alloc(4, host=True), d.alloc(64)
  gate = d.new_signal("never written")
  def kernel_spins():
    spin(flag, 7, done, global_size=1, local_size=32)
  def compute_waits():
    v = d.next_timeline("compute")
    d.compute_queue().wait(gate, 1).signal(d.timeline, d.timeline_gpu(v)).submit(d)
  def copy_polls():
    v = d.next_timeline("sdma")
    d.copy_queue().wait(gate, 1).signal(d.timeline, d.timeline_gpu(v)).submit(d)
  for hang in (kernel_spins, compute_waits, copy_polls):
    flag.cpu()[:4], done.cpu()[:4] = bytes(4), bytes(4)
    hang()
    fill(behind, 5, 16, local_size=16)   # queued behind the hang: dropped
    with pytest.raises(DeviceTimeout): d.synchronize(timeout_ms=200)
    t0 = time.monotonic()
    d.recover()
    assert time.monotonic() - t0 < 2, hang.__name__
    d.synchronize(timeout_ms=1000)   # nothing pending: the abandoned tickets count as done
    flag.cpu()[:4] = (7).to_bytes(4, "little")   # too late: the spinning waves are gone
    fill(behind, 9, 16, local_size=16, wait=True)
    assert list(behind.numpy(np.uint32)) == [9] * 16 and done.numpy(np.uint32)[0] == 0, hang.__name__
    y = d.alloc(4096)
    assert np.array_equal(y.copyin(np.arange(1024, dtype=np.uint32)).numpy(np.uint32), np.arange(1024)), hang.__name__


def test_recover_after_a_timeout_leaves_work_that_finished_since_alone(spare_dev, monkeypatch):
  """A wait that gave up on slow work, which then finished: recover() has nothing to stop and restarts nothing."""
  from rawgpu.errors import DeviceTimeout
  d = spare_dev
  resets = []
  if d.recovers_in_place: monkeypatch.setattr(d.iface, "reset_ring", resets.append)
  flag, done = d.alloc(4, host=True), d.alloc(4, host=True)
  flag.cpu()[:4] = bytes(4)
  prog(d, "spin")(flag, 7, done, global_size=1, local_size=32)
  with pytest.raises(DeviceTimeout): d.synchronize(timeout_ms=100)
  flag.cpu()[:4] = (7).to_bytes(4, "little")
  while d.timeline.value < d.timeline_gpu(d.timeline_value - 1): time.sleep(0.01)
  d.recover()   # on KFD too: there is nothing to restart
  assert done.numpy(np.uint32)[0] == 8 and resets == []


def test_a_wait_for_earlier_work_does_not_hide_a_later_hang_from_recover(spare_dev):
  """A wait gives up on a hung kernel's ticket; a wait for an earlier ticket then succeeds. The hang is still there,
  and recover() still stops it."""
  from rawgpu.errors import DeviceTimeout
  d = spare_dev
  if not d.recovers_in_place: pytest.skip(f"{d.props.iface} restarts queues by reopening")
  fill, out = prog(d, "fill"), d.alloc(64)
  flag, done = d.alloc(4, host=True), d.alloc(4, host=True)
  flag.cpu()[:4] = bytes(4)
  fill(out, 2, 16, local_size=16)
  earlier = d.timeline_value - 1
  prog(d, "spin")(flag, 7, done, global_size=1, local_size=32)
  with pytest.raises(DeviceTimeout): d.synchronize(timeout_ms=200)
  d.wait_timeline(earlier)
  d.recover()
  d.synchronize(timeout_ms=1000)
  fill(out, 5, 16, local_size=16, wait=True)
  assert list(out.numpy(np.uint32)[:16]) == [5] * 16 and done.numpy(np.uint32)[0] == 0


def test_closing_a_device_whose_kernel_never_ends_resets_its_waves(spare_dev):
  """A drain (DEQUEUE_REQ DRAIN_PIPE) waits for the queue's waves, and a wave that spins forever never ends: the
  HQD stays active. Closing the device takes its queue off with the waves reset (RESET_WAVES, as
  gfx_v11_0_reset_kcq and amdkfd's destroy do), at once, and the board opens again."""
  from rawgpu.errors import DeviceTimeout
  from rawgpu.hcq.device import Device
  d = spare_dev
  if d.props.iface != "MOCKPCI": pytest.skip("MOCKKFD's kernel owns the HQDs (its queue destroy resets the waves the same way)")
  flag, done = d.alloc(4, host=True), d.alloc(4, host=True)
  flag.cpu()[:4] = bytes(4)
  prog(d, "spin")(flag, 7, done, global_size=1, local_size=32)   # never released
  with pytest.raises(DeviceTimeout): d.synchronize(timeout_ms=200)
  gfx = d.iface.dev.gfx
  q = next(q for q in gfx.queues.values() if q.xcc == (d.props.xcc or 0))
  with gfx._selected(q) as gc:
    gc("regCP_HQD_DEQUEUE_REQUEST").write(DEQUEUE_REQ=1)
    time.sleep(0.05)
    still = gc("regCP_HQD_ACTIVE").read() & 1
    gc("regCP_HQD_DEQUEUE_REQUEST").write(0)
  assert still == 1   # drained it would never be
  t0 = time.monotonic()
  d.close()
  assert time.monotonic() - t0 < 2
  again = Device(f"{d.props.iface}:1+AMD::{d.props.arch}")
  try:
    buf = again.alloc(4096)
    prog(again, "fill")(buf, 3, 4, local_size=4, wait=True)
    assert list(buf.numpy(np.uint32)[:4]) == [3] * 4
  finally: again.close()


def _scratch_result(n: int, k: int, entries: int = 64) -> np.ndarray:
  j = (np.arange(n) * 7 + k) & (entries - 1)
  return (j * j + k).astype(np.uint32)


def test_private_memory_in_scratch(dev):
  n, k = 300, 5
  out = dev.alloc(4 * n)
  prog(dev, "scratch", "scratch_u32")(out, k, n, global_size=3, local_size=128, wait=True)
  assert np.array_equal(out.numpy(np.uint32), _scratch_result(n, k))


def _descriptor_patched(arch: str, obj: str, name: str, **fields) -> bytes:
  """The code object with kernel `name`'s descriptor changed: code_properties (u16 at 56), kernarg_preload (u16 at
  58), private_segment_fixed_size (u32 at 4), OR-ed or set as named (AMDGPUUsage's kernel descriptor layout)."""
  import struct
  from rawgpu.hcq.amd.elf import load_code_object
  data = bytearray(kernels.path(arch, obj).read_bytes())
  co = load_code_object(bytes(data), arch)
  off = co.kernels[name].descriptor_offset - co.segments[0][0]
  for field, (at, fmt) in {"code_properties_or": (56, "<H"), "kernarg_preload": (58, "<H"), "private_segment_fixed_size": (4, "<I")}.items():
    if field not in fields: continue
    v = fields[field] | (struct.unpack_from(fmt, data, off + at)[0] if field.endswith("_or") else 0)
    struct.pack_into(fmt, data, off + at, v)
  return bytes(data)


def test_a_dynamic_stack_gets_room_past_the_fixed_size(spare_dev):
  """A kernel whose descriptor says it has a dynamic call stack (USES_DYNAMIC_STACK) gets its fixed private size plus
  a stack reserve per work-item, as AMDGPUUsage asks of the runtime; it runs. (A device of its own: the scratch
  buffer, which only grows, then takes a good part of the emulated board's VRAM.)"""
  from rawgpu.hcq.amd.program import DYNAMIC_STACK_BYTES
  dev = spare_dev
  arch = dev.props.arch
  plain = prog(dev, "scratch", "scratch_u32")
  dyn = dev.program(_descriptor_patched(arch, "scratch", "scratch_u32", code_properties_or=1 << 11), "scratch_u32")
  assert dyn.dynamic_stack and dyn.scratch == plain.scratch + DYNAMIC_STACK_BYTES
  n, k = 300, 9
  out = dev.alloc(4 * n)
  dyn(out, k, n, global_size=3, local_size=128, wait=True)
  assert np.array_equal(out.numpy(np.uint32), _scratch_result(n, k))


def test_kernarg_preload_and_oversized_scratch_are_refused_at_load(dev):
  """Kernargs the firmware would preload into SGPRs (-amdgpu-kernarg-preload-count) are not given by this runtime's
  dispatch, and a per-wave scratch slot wider than COMPUTE_TMPRING_SIZE.WAVESIZE cannot be described: both refused
  when the program loads, not at a launch (128 KiB per lane fits a wave32's slot, not a wave64's)."""
  from rawgpu.errors import CodeObjectError
  arch = dev.props.arch
  with pytest.raises(CodeObjectError, match="preloads 2 kernarg dwords"):
    dev.program(_descriptor_patched(arch, "fill", "fill_u32", kernarg_preload=2), "fill_u32")
  big = _descriptor_patched(arch, "scratch", "scratch_u32", private_segment_fixed_size=128 << 10)
  if prog(dev, "scratch", "scratch_u32").wave32: dev.program(big, "scratch_u32")
  else:
    with pytest.raises(CodeObjectError, match="at most"): dev.program(big, "scratch_u32")


def test_launches_recorded_before_a_larger_scratch_buffer_still_run(dev):
  """A launch template and a graph recorded for scratch_u32 carry the scratch buffer's address. scratch_big_u32
  needs a larger buffer; the older one stays theirs, so both still run after (the emulated compute units keep
  private memory at COMPUTE_DISPATCH_SCRATCH_BASE: a freed buffer faults, as it did through KFD; AM's first-fit VA
  allocator happened to give the larger buffer the freed one's address)."""
  small, big = prog(dev, "scratch", "scratch_u32"), prog(dev, "scratch", "scratch_big_u32")
  n, kw = 256, dict(global_size=2, local_size=128)
  out = dev.alloc(4 * n)
  small(out, 1, n, **kw, wait=True)                        # the launch template for this shape is made here
  g = Graph(dev)
  g.exec(small, out, g.input("k"), n, **kw)
  big(out, 2, n, **kw, wait=True)
  assert np.array_equal(out.numpy(np.uint32), _scratch_result(n, 2, 1024))
  small(out, 3, n, **kw, wait=True)
  assert np.array_equal(out.numpy(np.uint32), _scratch_result(n, 3))
  dev.wait_timeline(g.replay(k=4))
  assert np.array_equal(out.numpy(np.uint32), _scratch_result(n, 4))


def test_a_dispatch_short_of_scratch_slots_hangs_and_is_reported(spare_dev, monkeypatch):
  """A workgroup starts only when all its waves get scratch slots on one engine: COMPUTE_TMPRING_SIZE.WAVES below
  one workgroup's waves (a driver bug) leaves the dispatch waiting for ever. The wait times out naming the stuck
  timeline and the dispatch, and the device still closes."""
  from rawgpu.errors import DeviceTimeout
  d = spare_dev
  be, real = d.backend, d.backend.scratch_for
  tmpring = be.gc["regCOMPUTE_TMPRING_SIZE"]
  def one_slot(prg):
    t, va = real(prg)
    return tmpring.encode(WAVES=1, WAVESIZE=tmpring.decode(t)["WAVESIZE"]), va
  monkeypatch.setattr(be, "scratch_for", one_slot)
  out = d.alloc(4 * 256)
  prog(d, "scratch", "scratch_u32")(out, 1, 256, global_size=1, local_size=256)
  with pytest.raises(DeviceTimeout, match="timeline.*stuck") as e: d.synchronize(timeout_ms=300)
  assert "DISPATCH_DIRECT" in str(e.value)


def test_kernels_that_may_use_runtime_services_load_with_a_warning(dev):
  """Built at -O0, LLVM declares every hidden argument of runtime services (hostcall, heap, device enqueue, ...)
  it cannot prove unused. hcq provides none of them: such a kernel loads with a warning that says so, and runs when
  it does not use them. The committed kernels (-O2) declare none."""
  import warnings
  from test_emu_rdna_common import compile_cl
  src = "__attribute__((noinline)) void put(__global uint* p, uint v) { p[__builtin_amdgcn_workitem_id_x()] = v; }\n" \
        "__kernel void k(__global uint* p, uint v) { put(p, v); }\n"
  code = compile_cl(src, dev.props.arch, ("-O0",))
  with pytest.warns(RuntimeWarning, match="may use .*hostcall.* which this runtime does not provide.*-O0"): k = dev.program(code, "k")
  out = dev.alloc(256)
  k(out, 7, local_size=64, wait=True)
  assert (out.numpy(np.uint32)[:64] == 7).all()
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    for name in kernels.names(dev.props.arch): dev.program(kernels.path(dev.props.arch, name).read_bytes(), kernels.kernels(dev.props.arch, name)[0])


def test_dispatch_id_is_the_launch_ticket_or_the_place_in_a_graph(dev):
  """A kernel that reads its dispatch id (a user SGPR the descriptor enables) gets the launch's timeline ticket, a
  unique, rising number, as ROCm gives the AQL packet's index; in a graph, the launch's place in it."""
  k = _build_ir(dev, 'declare i64 @llvm.amdgcn.dispatch.id()\n'   # OpenCL C has no builtin for it
                'define amdgpu_kernel void @k(ptr addrspace(1) %p) {\n  %id = call i64 @llvm.amdgcn.dispatch.id()\n'
                '  store i64 %id, ptr addrspace(1) %p\n  ret void\n}\n', "k")
  assert any(n == "user_sgpr_dispatch_id" for n, _, _ in k.user_sgprs)
  out = dev.alloc(8)
  for _ in range(2):
    ticket = dev.timeline_value
    k(out, local_size=64, wait=True)
    assert int(out.numpy(np.uint64)[0]) == ticket
  g = Graph(dev)
  x = g.input("out")
  g.exec(k, out, local_size=64)
  g.exec(k, x, local_size=64)
  other = dev.alloc(8)
  dev.wait_timeline(g.replay(out=other))
  assert int(out.numpy(np.uint64)[0]) == 0 and int(other.numpy(np.uint64)[0]) == 1


def _build_ir(dev, ir: str, name: str):
  """A kernel written in LLVM IR (for what OpenCL C cannot say), built for the device."""
  from test_emu_rdna_common import compile_cl
  return dev.program(compile_cl(ir, dev.props.arch, ir=True), name)


def test_dynamic_lds_is_allocated_per_launch(dev):
  """A kernel with dynamic LDS (HIP's extern __shared__: an LDS array of size 0 in the code object) gets the bytes a
  launch asks for after its own, in a direct launch and in a graph; more than a workgroup has is refused."""
  k = _build_ir(dev, "@dyn = external addrspace(3) global [0 x i32], align 4\ndeclare i32 @llvm.amdgcn.workitem.id.x()\n"
                "define amdgpu_kernel void @k(ptr addrspace(1) %p) {\n  %t = call i32 @llvm.amdgcn.workitem.id.x()\n"
                "  %r = sub i32 255, %t\n  %a = getelementptr i32, ptr addrspace(3) @dyn, i32 %t\n  store i32 %t, ptr addrspace(3) %a\n"
                "  fence syncscope(\"workgroup\") release\n  call void @llvm.amdgcn.s.barrier()\n  fence syncscope(\"workgroup\") acquire\n"
                "  %b = getelementptr i32, ptr addrspace(3) @dyn, i32 %r\n  %v = load i32, ptr addrspace(3) %b\n"
                "  %o = getelementptr i32, ptr addrspace(1) %p, i32 %t\n  store i32 %v, ptr addrspace(1) %o\n  ret void\n}\n"
                "declare void @llvm.amdgcn.s.barrier()\n", "k")
  assert k.lds == 0
  out, want = dev.alloc(4 * 256), np.arange(255, -1, -1, dtype=np.uint32)   # each work-item reads its mirror's word
  k(out, local_size=256, dynamic_lds=4 * 256, wait=True)
  assert np.array_equal(out.numpy(np.uint32), want)
  out.copyin(np.zeros(256, np.uint32))
  g = Graph(dev)
  g.exec(k, out, local_size=256, dynamic_lds=4 * 256)
  dev.wait_timeline(g.replay())
  assert np.array_equal(out.numpy(np.uint32), want)
  with pytest.raises(RawGPUError, match="dynamic LDS .* do not fit"): k(out, local_size=256, dynamic_lds=dev.props.lds_size + 4)


LOCAL_REDUCE = """
__kernel void red(__global const float* in, __global float* out, __local float* tmp, __local uint* cnt) {
  uint l = __builtin_amdgcn_workitem_id_x(), g = __builtin_amdgcn_workgroup_id_x(), n = __builtin_amdgcn_workgroup_size_x();
  tmp[l] = in[g * n + l];
  if (l == 0) *cnt = 0;
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  for (uint s = n / 2; s > 0; s >>= 1) {
    if (l < s) tmp[l] += tmp[l + s];
    __atomic_fetch_add(cnt, 1u, __ATOMIC_RELAXED);
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  }
  if (l == 0) out[g] = tmp[0] + (float)(*cnt != 8 * n);   /* 8 steps for 256 work-items: off by one if cnt is wrong */
}
"""


def test_local_pointer_arguments_get_lds_at_launch(dev):
  """OpenCL __local pointer arguments take a Local(nbytes): each gets that much LDS after the kernel's own, aligned
  as the metadata says, in a direct launch and in a graph. Anything else, or more LDS than a workgroup has, is refused."""
  from rawgpu.hcq import Local
  from test_emu_rdna_common import compile_cl
  k = dev.program(compile_cl(LOCAL_REDUCE, dev.props.arch), "red")
  x = np.random.default_rng(4).integers(0, 100, 4 * 256).astype(np.float32)
  X, out = dev.alloc(x.nbytes), dev.alloc(16)
  X.copyin(x)
  want = x.reshape(4, 256).sum(1)
  k(X, out, Local(4 * 256), Local(4), global_size=4, local_size=256, wait=True)
  assert np.array_equal(out.numpy(np.float32), want)
  out.copyin(np.zeros(4, np.float32))
  g = Graph(dev)
  g.exec(k, X, out, Local(4 * 256), Local(4), global_size=4, local_size=256)
  dev.wait_timeline(g.replay())
  assert np.array_equal(out.numpy(np.float32), want)
  with pytest.raises(RawGPUError, match=r"argument #2 .* is a __local pointer; pass rawgpu.hcq.Local"): k(X, out, X, Local(4), global_size=4, local_size=256)
  with pytest.raises(RawGPUError, match="do not fit"): k(X, out, Local(dev.props.lds_size), Local(4), global_size=4, local_size=256)
  with pytest.raises(RawGPUError, match="positive"): Local(0)
  # a negative dynamic_lds is refused with Locals too (it was taken from theirs: a workgroup got 4 bytes of LDS)
  for launch in (lambda: k(X, out, Local(4 * 256), Local(4), global_size=4, local_size=256, dynamic_lds=-1020),
                 lambda: Graph(dev).exec(k, X, out, Local(4 * 256), Local(4), global_size=4, local_size=256, dynamic_lds=-4)):
    with pytest.raises(RawGPUError, match="dynamic_lds is a number of bytes after the kernel's own LDS \\(0 or more\\), not -"): launch()


def test_hidden_dynamic_lds_size_says_what_the_launch_added(dev):
  """The hidden_dynamic_lds_size argument (code object v5) carries the launch's dynamic LDS bytes."""
  from rawgpu.hcq.amd.elf import KernelArg
  k = prog(dev, "fill")
  p = k.with_dynamic_lds(1536)
  at = k.kernarg_size   # past the kernel's own arguments (fill_u32 declares no such argument: one is added here)
  view = memoryview(bytearray(at + 8))
  p.hidden = [*p.hidden, KernelArg("", at, 4, "hidden_dynamic_lds_size")]
  p._pack_hidden(view, (1, 1, 1), (64, 1, 1))
  assert int.from_bytes(view[at:at + 4], "little") == 1536 and k.with_dynamic_lds(1536) is p and k.dynamic_lds == 0


def test_generic_pointers_reach_lds_and_private_memory(dev):
  """generic_u32 loads through one generic pointer that points at LDS or at private memory: the compute units route
  it by the apertures in SH_MEM_BASES."""
  n = 300
  out, kern = dev.alloc(4 * n), prog(dev, "generic", "generic_u32")
  for from_lds, want in ((1, np.arange(n) * 3 + 1), (0, np.arange(n) + 5 + (n & 3))):
    kern(out, from_lds, n, global_size=2, local_size=256, wait=True)
    assert np.array_equal(out.numpy(np.uint32), want.astype(np.uint32)), from_lds


def test_generic_addresses_lie_in_the_apertures_the_interface_gives(dev):
  """The GPU forms a generic pointer to LDS or private memory from the apertures of the queue's VMID (SH_MEM_BASES):
  AM's own (amdgpu's gmc shared/private aperture starts), or what KFD reports to the process (amdkfd programs the
  hardware with the same)."""
  from rawgpu.drivers.am import facts as F
  out = dev.alloc(16)
  prog(dev, "generic", "apertures")(out, global_size=1, local_size=64, wait=True)
  lds, private = (int(x) for x in out.numpy(np.uint64))
  if dev.props.iface in ("KFD", "MOCKKFD"):
    ap = dev.iface.process_apertures()
    want = ap["lds"][0], ap["scratch"][0]
  else: want = F.SHARED_APERTURE_START, F.PRIVATE_APERTURE_START
  assert (lds >> 32 << 32, private >> 32 << 32) == want


def test_graph_orders_kernels_and_copies_across_queues(dev):
  n = 256
  fill, vadd = prog(dev, "fill"), prog(dev, "vadd", "vadd_f32")
  a, b, c = dev.alloc(4 * n), dev.alloc(4 * n), dev.alloc(4 * n)
  g = Graph(dev)
  v = g.input("v")
  g.exec(fill, a, v, n, global_size=1, local_size=256)     # compute: a = v
  g.copy(b, a)                                              # copy engine, after the fill
  g.exec(vadd, b, b, c, n, global_size=1, local_size=256)   # compute again, after the copy: c = 2b
  for f in (1.0, 2.5, -3.0):
    dev.wait_timeline(g.replay(v=int(np.float32(f).view(np.uint32))))
    assert np.all(c.numpy(np.float32) == np.float32(2 * f)) and np.all(b.numpy(np.float32) == np.float32(f))
  from rawgpu.hcq.amd.sdma import decode_sdma
  copy_q = next(q for (_d, engine), q in g.queues.items() if engine == "sdma")
  names = [p.name for p in decode_sdma(list(copy_q.words()), dev.backend.sdma_version)]
  wake = int(getattr(dev.iface, "wake", None) is not None)   # KFD: one more FENCE, into the event slot
  assert names.count("FENCE") == 1 + wake and names.count("TRAP") == 1   # its sync value fits a dword: one FENCE, not two


def test_shader_trap_is_a_device_fault_naming_the_pc(spare_dev, tmp_path):
  """An s_trap with no trap handler stops the wave: the SQ interrupt reaches the host as a DeviceFault."""
  import shutil, subprocess
  from rawgpu.errors import DeviceFault
  from rawgpu.kernels.build import ASM_FLAGS
  if not (shutil.which("llvm-mc-19") and shutil.which("ld.lld-19")): pytest.skip("llvm-mc-19 / ld.lld-19 not installed (apt-get install llvm-19 lld-19)")
  d, arch = spare_dev, spare_dev.props.arch
  src = (kernels.KERNELS_DIR / f"empty.{'gfx9' if arch.startswith('gfx9') else 'gfx11' if arch.startswith('gfx11') else 'gfx12'}.s").read_text()
  (tmp_path / "trap.s").write_text(src.replace("  s_endpgm\n", "  s_trap 2\n  s_endpgm\n", 1))
  subprocess.run(["llvm-mc-19", *ASM_FLAGS, f"-mcpu={arch}", str(tmp_path / "trap.s"), "-o", str(tmp_path / "trap.o")], check=True)
  subprocess.run(["ld.lld-19", "-shared", str(tmp_path / "trap.o"), "-o", str(tmp_path / "trap.hsaco")], check=True)
  trap = d.program((tmp_path / "trap.hsaco").read_bytes())
  if d.props.iface == "MOCKPCI":  # AM takes the SQ interrupt itself
    with pytest.raises(DeviceFault, match="shader error .* at PC 0x"): trap(wait=True)
  else:  # amdkfd leaves wave errors to the runtime's trap handler, which this runtime does not install: the wave halts
    from rawgpu.errors import DeviceTimeout
    trap()
    with pytest.raises(DeviceTimeout): d.synchronize(timeout_ms=300)


def test_surprise_removal_is_named_and_close_is_clean(dev):
  from rawgpu.errors import DeviceNotFound
  from rawgpu.hcq.device import Device
  if dev.props.iface != "MOCKPCI": pytest.skip("the board is injected through the virtual PCI bus (MOCKKFD's kernel owns its boards)")
  from rawgpu.drivers.emu import mockpci
  per = 8 if dev.props.arch == "gfx942" else 1     # MI300: a device per XCC
  d = Device(f"MOCKPCI:{2 * per}+AMD::{dev.props.arch}")  # a board of its own: it stays removed
  fill, buf = prog(d, "fill"), d.alloc(64)
  fill(buf, 1, 16, local_size=16, wait=True)  # the queues exist and run
  mockpci._vbus.boards[d.props.pci_bus].inject("surprise_removal")
  fill(buf, 1, 16, local_size=16)
  with pytest.raises(DeviceNotFound, match="no longer answers"): d.synchronize(timeout_ms=300)
  d.close()  # releases without hanging or raising
  mockpci._vbus.unplug(d.props.pci_bus)  # the removed board leaves the bus: a later open of this index gets a fresh one


def test_graph_copies_take_inputs(dev):
  n = 3 << 20  # more than one SDMA packet on some engines: every chunk's addresses are patched
  src = [dev.alloc(n).copyin(np.full(n, k, np.uint8)) for k in (7, 9)]
  out = dev.alloc(n)
  g = Graph(dev)
  g.copy(out, g.input("src"), n)
  for s_buf, k in zip(src, (7, 9)):
    dev.wait_timeline(g.replay(src=s_buf))
    assert np.all(out.numpy() == k)
  with pytest.raises(RawGPUError, match="at least"): g.replay(src=dev.alloc(16))


def test_numpy_ints_objects_and_timeouts_at_the_edges_of_the_api(dev):
  """numpy's ints are taken wherever a size is (transfer, Local); arrays of Python objects are one clear error, not a
  numpy traceback; a launch's bad timeout_ms is refused before the kernel is queued (it took a ticket)."""
  from rawgpu.hcq import Local
  a, b = dev.alloc(64).copyin(np.arange(16, dtype=np.uint32)), dev.alloc(64)
  dev.transfer(b, a, np.int64(8))
  assert list(b.numpy(np.uint32)[:2]) == [0, 1] and Local(np.int64(4)).nbytes == 4
  with pytest.raises(RawGPUError, match="an array of Python objects \\(object\\) has no bytes to copy"): a.copyin(np.array([1, "x"], dtype=object))
  with pytest.raises(RawGPUError, match="numpy\\(\\) takes a dtype of numbers, not object"): a.numpy(object)
  fill = prog(dev, "fill")   # (loading may take a ticket: on KFD its code is copied in)
  ticket = dev.timeline_value
  with pytest.raises(RawGPUError, match="kernel fill_u32: timeout_ms takes a number of milliseconds, not '5'"):
    fill(b, 1, 16, local_size=16, wait=True, timeout_ms="5")
  assert dev.timeline_value == ticket


TYPEDEF_ARGS = r"""
typedef float real;
typedef double real64;
typedef unsigned int count_t;
__kernel void tdef(__global float* out, real a, real64 b, const float c, count_t n) {
  if (__builtin_amdgcn_workitem_id_x() == 0) { out[0] = a * 2.0f; out[1] = (float)b; out[2] = c; out[3] = (float)n; }
}
"""


def test_a_float_argument_named_by_a_typedef_takes_a_float(dev):
  """.type_name is the source's spelling (a typedef's name), not a base type: a Python float given to such an
  argument is packed as a float of its size (it was refused as "an integer"); integer types are known by name."""
  from test_emu_rdna_common import compile_cl
  k = dev.program(compile_cl(TYPEDEF_ARGS, dev.props.arch, ()), "tdef")
  assert [a.type_name for a in k.args[1:]] == ["real", "real64", "float", "count_t"]
  out = dev.alloc(16)
  k(out, 1.5, 2.5, 3.5, 7, wait=True)
  assert list(out.numpy(np.float32)) == [3.0, 2.5, 3.5, 7.0]


def test_a_graph_refuses_at_the_call_what_its_replay_would(dev):
  """Values given when a node is recorded are checked as a launch (or a queue's signal and wait) checks them, at
  the call: they were taken, and the first replay failed, which left the graph dead."""
  fill = prog(dev, "fill")
  out, gone = dev.alloc(256), dev.alloc(256)
  gone.free()
  g = Graph(dev)
  for bad, words in (((out, 1.5, 64), "argument #1 \\(uint\\) is an integer"), ((7, 1, 64), "argument #0 \\(uint\\*\\) is a pointer"),
                     ((gone, 1, 64), "was freed")):
    with pytest.raises(RawGPUError, match=words): g.exec(fill, *bad, local_size=64)
  sig = dev.new_signal("graph checks")
  with pytest.raises(RawGPUError, match="a graph signal takes an int in 0..2\\^64-1, not -1"): g.signal(sig, -1)
  with pytest.raises(RawGPUError, match="a graph wait for 0x200000000: the engine compares 32 bits"): g.wait(sig, 1 << 33)
  g.exec(fill, out, np.uint32(3), 64, local_size=64).signal(sig, np.int64(5))   # nothing refused was recorded
  dev.wait_timeline(g.replay())
  assert list(out.numpy(np.uint32)[:64]) == [3] * 64 and sig.value == 5
  dev.free_signal(sig)


def test_a_graph_copy_without_a_size_copies_all_of_src_or_refuses(dev):
  """As Device.transfer: all of src, refused where dst is smaller (it copied dst's size of src without a word)."""
  src, small = dev.alloc(4096).copyin(np.arange(1024, dtype=np.uint32)), dev.alloc(1024)
  with pytest.raises(RawGPUError, match="graph copy of 4096 bytes does not fit a 1024-byte buffer"): Graph(dev).copy(small, src)
  big = dev.alloc(8192)
  dev.wait_timeline(Graph(dev).copy(big, src).replay())
  assert np.array_equal(big.numpy(np.uint32)[:1024], np.arange(1024, dtype=np.uint32))
  dev.wait_timeline(Graph(dev).copy(small, src, np.int64(1024)).replay())   # a size as numpy's int, as transfer takes it
  assert np.array_equal(small.numpy(np.uint32), np.arange(256, dtype=np.uint32))


def test_copies_and_kernels_share_the_timeline_in_submission_order(dev):
  """A copy queued behind a kernel that is still running waits for it: it reads what the kernel wrote, and the
  timeline (signalled by both engines) never runs ahead of the kernel nor falls back when the kernel ends."""
  flag, done, out = dev.alloc(4, host=True), dev.alloc(4), dev.alloc(4)
  flag.cpu()[:4] = bytes(4)
  spin = prog(dev, "spin")
  dev.synchronize()
  before = dev.timeline.value
  spin(flag, 7, done, global_size=1, local_size=32)   # runs until the host writes 7 to flag
  dev.transfer(out, done)                                          # copy engine: must come after the kernel
  copy_ticket = dev.timeline_value - 1
  import time
  time.sleep(0.1)
  assert dev.timeline.value == before, "the copy finished (and signalled the timeline) while the kernel before it ran"
  flag.cpu()[:4] = (7).to_bytes(4, "little")
  dev.synchronize()
  assert dev.timeline.value == dev.timeline_gpu(copy_ticket)   # the copy's value, written last
  assert out.numpy(np.uint32)[0] == 8
  prog(dev, "fill")(done, 1, 1, local_size=32, wait=True)          # and back: a kernel after the copy engine's ticket
  assert dev.timeline.value == dev.timeline_gpu(dev.timeline_value - 1)


def test_a_kernel_queued_behind_a_running_kernel_waits_for_it(dev):
  """The CP reads on past a dispatch (PM4 orders nothing after one): exec's CS_PARTIAL_FLUSH is what keeps the next
  kernel off a result that is not written yet. The copy kernel runs only once the spinning kernel ended."""
  flag, done, out = dev.alloc(4, host=True), dev.alloc(4), dev.alloc(4, host=True)
  flag.cpu()[:4] = bytes(4)
  out.cpu()[:4] = bytes(4)
  spin, copy = prog(dev, "spin"), prog(dev, "copy")
  dev.synchronize()
  spin(flag, 7, done, global_size=1, local_size=32)
  copy(done, out, 1, global_size=1, local_size=32)
  import time
  time.sleep(0.1)
  assert bytes(out.cpu()[:4]) == bytes(4), "the copy kernel ran while the kernel before it was still spinning"
  flag.cpu()[:4] = (7).to_bytes(4, "little")
  dev.synchronize()
  assert out.numpy(np.uint32)[0] == 8


def test_small_copies_interleaved_with_kernels_without_waiting(dev):
  """Kernel, copy, kernel, copy... with no host wait in between: every copy sees the kernel before it (read after
  write) and no kernel overwrites what a copy before it has not read yet (write after read)."""
  fill, n, rounds = prog(dev, "fill"), 64, 12
  a = dev.alloc(4 * n)
  outs = [dev.alloc(4 * n) for _ in range(rounds)]
  for k, o in enumerate(outs):
    fill(a, k + 1, n, local_size=64)
    dev.transfer(o, a)
  dev.synchronize()
  assert [int(o.numpy(np.uint32)[:n].min()) for o in outs] == list(range(1, rounds + 1))
  assert all(np.all(o.numpy(np.uint32)[:n] == k + 1) for k, o in enumerate(outs))


def test_numpy_scalars_are_their_values(dev):
  n = 64
  X, Y = dev.alloc(4 * n).copyin(np.arange(n, dtype=np.float32)), dev.alloc(4 * n).copyin(np.ones(n, np.float32))
  prog(dev, "saxpy")(np.float32(0.5), X, Y, np.uint32(n), local_size=64, wait=True)
  assert np.array_equal(Y.numpy(np.float32), np.arange(n, dtype=np.float32) * 0.5 + 1)


def _board_of(dev):
  """The emulated board behind dev: on MOCKPCI's virtual bus, or in the MOCKKFD machine of its arch."""
  if dev.props.iface == "MOCKPCI":
    from rawgpu.drivers.emu import mockpci
    return mockpci._vbus.boards[dev.props.pci_bus]
  from rawgpu.drivers.emu import mockkfd
  return mockkfd._machines[dev.props.arch].vbus.boards[dev.props.pci_bus]


def test_small_copyin_into_cpu_visible_vram_is_cpu_stores_and_an_hdp_flush(dev):
  """Up to BAR_COPYIN bytes into VRAM with a CPU view: the CPU stores through the BAR once the work queued on the
  buffer is done, then flushes the HDP on the board; no copy-engine ticket. A kernel queued just before still reads
  the old bytes, one queued after reads the new ones; a larger copy takes the copy engine."""
  from rawgpu.hcq.amd.backend import BAR_COPYIN
  board, copy = _board_of(dev), prog(dev, "copy", "copy_u32")
  n = 1024
  src, out, later = dev.alloc(4 * n, cpu_access=True), dev.alloc(4 * n), dev.alloc(4 * n)
  old, new = np.arange(n, dtype=np.uint32), np.arange(n, dtype=np.uint32)[::-1] * 3
  src.copyin(old)
  copy(src, out, n, global_size=n // 64, local_size=64)   # queued, not waited for
  flushes, ticket = board.nbio.hdp_flushes, dev.timeline_value
  src.copyin(new)   # waits for the kernel above: it reads src
  assert dev.timeline_value == ticket and board.nbio.hdp_flushes > flushes
  copy(src, later, n, global_size=n // 64, local_size=64, wait=True)
  assert np.array_equal(out.numpy(np.uint32), old) and np.array_equal(later.numpy(np.uint32), new)
  big = dev.alloc(BAR_COPYIN + 4, cpu_access=True)
  ticket = dev.timeline_value
  big.copyin(np.arange((BAR_COPYIN + 4) // 4, dtype=np.uint32))
  assert dev.timeline_value > ticket and np.array_equal(big.numpy(np.uint32), np.arange((BAR_COPYIN + 4) // 4, dtype=np.uint32))


def test_every_doorbell_is_preceded_by_an_hdp_flush(dev):
  """So what the CPU wrote into VRAM through a cpu() view is what the queue's engine reads."""
  board = _board_of(dev)
  for make in (dev.compute_queue, dev.copy_queue):
    sig = dev.new_signal("hdp")
    make().signal(sig, 1).submit(dev)   # the first submit may create the ring (AM maps memory: it flushes then too)
    sig.wait(1, timeout_ms=5000)
    flushes = board.nbio.hdp_flushes
    make().signal(sig, 2).submit(dev)
    assert board.nbio.hdp_flushes == flushes + 1, make
    sig.wait(2, timeout_ms=5000)


def test_memory_barrier_flushes_the_hdp_for_cpu_writes_made_behind_a_signal(dev):
  """The queue waits on a signal, then a barrier, then a kernel reads a VRAM buffer. The CPU writes that buffer
  through cpu() after every doorbell (so no host-side flush covers it) and sets the signal: the barrier's flush in the
  stream (NBIO's request/done pair, which the board counts) is what makes the writes reach the kernel."""
  board, copy = _board_of(dev), prog(dev, "copy", "copy_u32")
  n = 256
  src, out, gate = dev.alloc(4 * n, cpu_access=True), dev.alloc(4 * n), dev.new_signal("gate")
  src.copyin(np.zeros(n, np.uint32))
  dev.compute_queue().wait(gate, 1).memory_barrier().submit(dev)
  copy(src, out, n, global_size=n // 64, local_size=64)   # behind the wait
  flushes, new = board.nbio.hdp_flushes, np.arange(n, dtype=np.uint32) * 7 + 1
  np.frombuffer(src.cpu(), np.uint32)[:] = new
  gate.value = 1
  dev.wait_timeline(dev.timeline_value - 1)   # (not synchronize: it may free dropped memory, which flushes too)
  assert board.nbio.hdp_flushes == flushes + 1 and np.array_equal(out.numpy(np.uint32), new)


def test_copy_queue_memory_barrier_flushes_the_hdp_for_cpu_writes_made_behind_a_signal(dev):
  """The same on the copy engine: a wait, the barrier (SDMA's HDP form of POLL_REGMEM), then a copy of the VRAM
  buffer the CPU wrote after the doorbell."""
  board, n = _board_of(dev), 4096
  src, out, gate, done = dev.alloc(n, cpu_access=True), dev.alloc(n), dev.new_signal("gate"), dev.new_signal("done")
  src.copyin(bytes(n))
  dev.copy_queue().wait(gate, 1).memory_barrier().copy(out.va, src.va, n).signal(done, 1).submit(dev)
  flushes, new = board.nbio.hdp_flushes, np.arange(n, dtype=np.uint32).astype(np.uint8) ^ 0x5a
  np.frombuffer(src.cpu(), np.uint8)[:] = new
  gate.value = 1
  done.wait(1, timeout_ms=5000)
  assert board.nbio.hdp_flushes == flushes + 1 and np.array_equal(out.numpy(np.uint8), new)


def test_a_wait_that_sees_its_value_fences_the_cpus_later_vram_reads(dev, monkeypatch):
  """VRAM views are write-combined here, and write-combined loads may pass older loads (rawgpu.drivers.cpufence): once a
  wait has seen its value, the device's read fence runs before the wait returns, so a read of what the kernel wrote
  through a cpu() view comes after the signal. Both the waits that find their value at once and those that spin."""
  from rawgpu.drivers.cpufence import fences
  assert dev.props.vram_write_combined and dev.read_fence is dev.iface.read_fence is fences().load
  fill, out = prog(dev, "fill", "fill_u32"), dev.alloc(4096, cpu_access=True)
  seen: list[int] = []
  monkeypatch.setattr(dev, "read_fence", lambda: seen.append(dev.timeline.value))
  gate = dev.new_signal("gate")
  dev.compute_queue().wait(gate, 1).submit(dev)
  fill(out, 9, 1024, global_size=16, local_size=64)        # behind the gate: the wait below spins first
  ticket = dev.timeline_value - 1
  gate.value = 1
  dev.wait_timeline(ticket)
  assert seen and seen[-1] >= ticket - dev.timeline_base and np.frombuffer(out.cpu(), np.uint32)[0] == 9
  for wait in (lambda: dev.wait_timeline(ticket), lambda: gate.wait(1)):   # already there: the fence still runs
    n = len(seen)
    wait()
    assert len(seen) == n + 1


def test_a_signal_the_cpu_sets_is_stored_after_a_store_fence(dev, monkeypatch):
  """Stores to write-combined VRAM may still sit in the CPU's write-combining buffers when a later store to host
  memory is visible (rawgpu.drivers.cpufence): setting a signal's value fences first, so a queue waiting on the
  signal reads what cpu() wrote into VRAM before it (as in the memory-barrier tests)."""
  from rawgpu.drivers.cpufence import fences
  assert dev.write_fence is dev.iface.write_fence is fences().store
  gate, seen = dev.new_signal("gate"), []
  monkeypatch.setattr(dev, "write_fence", lambda: seen.append(gate.value))
  gate.value = 5
  assert seen == [0] and gate.value == 5


@pytest.mark.parametrize("host", [False, True], ids=["vram", "host"])
def test_a_cpu_view_kept_past_free_never_reaches_the_next_owner(dev, host):
  """A cpu() view used after its buffer was freed (a user's mistake) must not read or write the memory of whatever
  is allocated there next: the view's own mapping (AM's per-allocation one, KFD's BO mapping, an emulated host
  RAM allocation) became zero pages."""
  old = dev.alloc(4096, cpu_access=True, host=host)
  stale = np.frombuffer(old.cpu(), np.uint32)
  stale[:] = 0xdead
  old.free()
  new = [dev.alloc(4096, cpu_access=True, host=host) for _ in range(4)]   # one of them may well take the freed memory
  for b in new: b.copyin(np.full(1024, 0x600d, np.uint32))
  assert 0x600d not in stale and not stale.any()
  stale[:] = 0x5a5a
  for b in new:
    assert np.all(b.numpy(np.uint32) == 0x600d) and np.all(np.frombuffer(b.cpu(), np.uint32) == 0x600d)
    b.free()

def test_copy_in_and_out_of_every_buffer_kind(dev):
  data = np.arange(1000, dtype=np.uint16)
  buf = dev.alloc(data.nbytes)
  sources = (data, data.tobytes(), bytearray(data.tobytes()), memoryview(data.tobytes()), memoryview(data),
             np.ascontiguousarray(data.reshape(20, 50).T).T,                  # Fortran order: gathered first
             np.repeat(data, 2)[::2], memoryview(np.repeat(data, 2))[::2])    # strided: gathered first
  for k, src in enumerate(sources):
    buf.copyin(np.zeros(1000, np.uint16))
    buf.copyin(src)
    for dst in (np.zeros(1000, np.uint16), np.zeros((10, 50), np.uint32), bytearray(2000), memoryview(bytearray(2000))):
      buf.copyout(dst)
      assert bytes(memoryview(dst).cast("B") if not isinstance(dst, np.ndarray) else dst.tobytes()) == data.tobytes(), (k, type(dst))
  strided = np.zeros(2000, np.uint16)
  with pytest.raises(RawGPUError, match="not C-contiguous"): buf.copyout(strided[::2])   # would land in a copy: refused
  assert not strided.any()
  with pytest.raises(RawGPUError, match="read-only"): buf.copyout(bytes(2000))
  with pytest.raises(RawGPUError, match="read-only"): buf.copyout(np.frombuffer(bytes(2000), np.uint8))
  with pytest.raises(RawGPUError, match="not a buffer"): buf.copyin([1, 2, 3])
  with pytest.raises(RawGPUError, match="into 1000 bytes"): buf.copyout(bytearray(1000))
  empty = memoryview(np.zeros((0, 4), np.float32))   # a shape with a 0 (memoryview.cast refuses it)
  buf.copyin(empty)
  with pytest.raises(RawGPUError, match="into 0 bytes"): buf.copyout(empty)
  for dt in ("V", str):
    with pytest.raises(RawGPUError, match="a dtype with a size"): buf.numpy(dt)


def test_naive_matmul_matches_the_host_in_the_same_order(dev):
  m, n, k = 19, 33, 27
  rng = np.random.default_rng(8)
  A, B = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
  bA, bB, bC = dev.alloc(A.nbytes).copyin(A), dev.alloc(B.nbytes).copyin(B), dev.alloc(4 * m * n)
  prog(dev, "matmul", "matmul_naive_f32")(bA, bB, bC, m, n, k, global_size=((n + 15) // 16, (m + 15) // 16), local_size=(16, 16), wait=True)
  ref = np.zeros((m, n), np.float32)
  for i in range(k): ref += A[:, i:i + 1] * B[i:i + 1, :]   # k in order, multiply then add: the kernel's bits
  assert np.array_equal(bC.numpy(np.float32).reshape(m, n), ref)


def test_hand_written_assembly_kernel(dev):
  """kernels/store_ids.gfx1x.s (no compiler in between): dst[wg * stride + tid] = value + tid."""
  groups, local, stride = 3, 48, 64
  dst = dev.alloc(4 * groups * stride).copyin(np.full(groups * stride, 0xdead, np.uint32))
  prog(dev, "store_ids")(dst, stride, 100, global_size=groups, local_size=local, wait=True)
  want = np.full((groups, stride), 0xdead, np.uint32)
  want[:, :local] = 100 + np.arange(local)
  assert np.array_equal(dst.numpy(np.uint32).reshape(groups, stride), want)


def test_wait_timeout_counts_from_the_last_progress(dev):
  """A signal that keeps moving never times out, however long the whole wait; one that stops does, naming it."""
  import threading, time
  from rawgpu.errors import DeviceTimeout
  s = dev.new_signal("slow")
  def step():
    for v in range(1, 13): time.sleep(0.05); s.value = v
  t = threading.Thread(target=step)
  t0 = time.monotonic()
  t.start()
  s.wait(12, timeout_ms=250)                     # 12 steps of 50 ms: 0.6 s in all, never 250 ms without progress
  t.join()
  assert time.monotonic() - t0 > 0.5
  with pytest.raises(DeviceTimeout, match="slow .* stuck at 12, waited for 13 \\(250 ms without progress\\)"): s.wait(13, timeout_ms=250)


def test_graph_of_100_kernels_replays_with_one_submission(dev):
  fill = prog(dev, "fill")
  outs = [dev.alloc(4 * 32) for _ in range(2)]
  g = Graph(dev)
  dst = g.input("dst")
  for k in range(100): g.exec(fill, dst, g.input("v") if k == 99 else k, 32, local_size=32)
  dev.wait_timeline(g.replay(dst=outs[0], v=5))
  ring = dev.ring("compute")
  pushes = []
  push = ring.push
  ring.push = lambda words: (pushes.append(len(words)), push(words))[1]
  try:
    dev.synchronize()
    dev.wait_timeline(g.replay(dst=outs[1], v=6))
  finally: del ring.push
  assert len(pushes) == 1 and pushes[0] <= 8          # one INDIRECT_BUFFER packet for the whole graph
  assert np.all(outs[0].numpy(np.uint32)[:32] == 5) and np.all(outs[1].numpy(np.uint32)[:32] == 6)


@pytest.mark.parametrize("kind", ["host uncached", "vram cpu_access"])
def test_cpu_visible_buffers(dev, kind):
  """Host (uncached) and CPU-visible VRAM buffers: a kernel writes, the CPU reads them directly once the work is done."""
  buf = dev.alloc(4 * 64, host=True, uncached=True) if kind == "host uncached" else dev.alloc(4 * 64, cpu_access=True)
  prog(dev, "fill")(buf, 0x5eed, 64, local_size=64, wait=True)
  assert np.all(np.frombuffer(buf.cpu(), np.uint32)[:64] == 0x5eed)
  buf.cpu()[:4] = (7).to_bytes(4, "little")
  assert buf.numpy(np.uint32)[0] == 7


def test_resource_checks_use_what_the_device_reports(dev, monkeypatch):
  """A kernel needing more LDS than the device reports is refused when loaded, naming the device."""
  from rawgpu.errors import CodeObjectError
  code = kernels.path(dev.props.arch, "reduce").read_bytes()
  dev.program(code, "reduce_sum_u32")                            # 1 KiB of LDS: fits the 64 KiB the device reports
  monkeypatch.setattr(dev.props, "lds_size", 512)
  with pytest.raises(CodeObjectError, match=f"needs 1024 bytes of LDS per workgroup, {dev.props.iface}.* has 512"):
    dev.program(code, "reduce_sum_u32")


def test_kernarg_ring_reuse_waits_only_for_the_lap_before(dev):
  """Arguments wrap round the kernarg ring while the GPU is held at a wait: reusing a region waits for the launches
  of the lap before (done), not for everything queued (which would wait for the held GPU forever)."""
  from rawgpu.hcq.amd.backend import KernargRing
  fill, old = prog(dev, "fill"), dev.backend.kernargs
  dev.backend.kernargs = ring = KernargRing(dev, 16 * 512)        # 16 launches of fill's 512-byte block per lap
  try:
    outs = [dev.alloc(4 * 32) for _ in range(22)]
    for k, o in enumerate(outs[:10]): fill(o, k, 32, local_size=32)
    dev.synchronize()
    gate = dev.new_signal("gate")
    dev.compute_queue().wait(gate, 1).submit(dev)
    for k, o in enumerate(outs[10:], 10): fill(o, k, 32, local_size=32)   # slots 10..21: wraps past slot 15
    assert ring.total > ring.size and dev.timeline.value < dev.timeline_gpu(dev.timeline_value - 1)   # still held
    gate.value = 1
    dev.synchronize()
    assert [int(o.numpy(np.uint32)[:32].max()) for o in outs] == list(range(22))
    assert all(np.all(o.numpy(np.uint32)[:32] == k) for k, o in enumerate(outs))
  finally: dev.backend.kernargs = old


def test_graph_signal_values_restart_before_the_engines_32_bit_compare_wraps(dev):
  """The graph's private signal counts up with every replay; near 2^31 it restarts at 0 (after the last replay is done)
  so the engines' 32-bit compare never sees a wrapped value as already reached."""
  fill = prog(dev, "fill")
  a, b = dev.alloc(4 * 64), dev.alloc(4 * 64)
  g = Graph(dev)
  g.exec(fill, a, g.input("v"), 64, local_size=64).copy(b, a).exec(fill, a, 0, 64, local_size=64)
  dev.wait_timeline(g.replay(v=1))
  g.replays = (1 << 32) // g.nsync - 2                      # as if ~2^32 sync values had been used: the next ones wrap
  for v in range(2, 7):
    dev.wait_timeline(g.replay(v=v))
    assert np.all(b.numpy(np.uint32) == v) and np.all(a.numpy(np.uint32) == 0), v
  assert g.replays < 10 and g.sync.value < 100                # restarted


DISPATCH_PTR_SRC = r"""
typedef struct { ushort header, setup, wg_x, wg_y, wg_z, reserved0; uint grid_x, grid_y, grid_z, private_size, group_size;
                 ulong kernel_object, kernarg_address; } aql_t;   // the leading fields of hsa_kernel_dispatch_packet_t
__kernel void read_packet(__global uint* out, uint tag) {
  __constant aql_t* p = (__constant aql_t*)__builtin_amdgcn_dispatch_ptr();
  if (__builtin_amdgcn_workgroup_id_x() == 0 && __builtin_amdgcn_workgroup_id_y() == 0 && __builtin_amdgcn_workitem_id_x() == 0
      && __builtin_amdgcn_workitem_id_y() == 0) {
    out[0] = p->setup; out[1] = p->wg_x; out[2] = p->wg_y; out[3] = p->grid_x; out[4] = p->grid_y; out[5] = tag;
    __constant uint* ka = (__constant uint*)p->kernarg_address;   // the packet points at this launch's arguments
    out[6] = ka[2];
  }
}
"""


def test_kernel_reads_its_dispatch_packet(dev):
  """A kernel that takes the dispatch pointer (user SGPR) reads the AQL packet the runtime writes after its
  arguments: its sizes, and the address of the arguments of this very launch (launches back to back, and in a graph,
  each see their own)."""
  from test_emu_rdna_common import compile_cl
  prg = dev.program(compile_cl(DISPATCH_PTR_SRC, dev.props.arch), "read_packet")
  assert prg.needs_dispatch
  outs = [dev.alloc(64) for _ in range(3)]
  for k, o in enumerate(outs): prg(o, 100 + k, global_size=(2, 3), local_size=(32, 2))   # queued back to back
  dev.synchronize()
  for k, o in enumerate(outs):
    assert list(o.numpy(np.uint32)[:7]) == [2, 32, 2, 64, 6, 100 + k, 100 + k]
  g = Graph(dev)
  g.exec(prg, outs[0], g.input("tag"), global_size=(1, 1), local_size=(32, 1)).exec(prg, outs[1], 9, global_size=(4, 1), local_size=(32, 1))
  dev.wait_timeline(g.replay(tag=77))
  assert list(outs[0].numpy(np.uint32)[:7]) == [1, 32, 1, 32, 1, 77, 77]
  assert list(outs[1].numpy(np.uint32)[:7]) == [1, 32, 1, 128, 1, 9, 9]


def test_a_local_pointer_argument_takes_a_local_not_a_buffer(dev):
  """A __local pointer argument is a 4-byte LDS address: it takes a Local, and a Buffer given for it is refused (once,
  a Buffer's 8-byte address was written into the 4-byte slot, over the next argument)."""
  from rawgpu.hcq import Local
  from test_emu_rdna_common import compile_cl
  src = r"""__kernel void uses_local(__global uint* out, __local uint* tmp, uint n) {
    uint t = __builtin_amdgcn_workitem_id_x();
    tmp[t] = t * n;
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
    out[t] = tmp[63 - t];
  }"""
  k, out = dev.program(compile_cl(src, dev.props.arch), "uses_local"), dev.alloc(4 * 64)
  with pytest.raises(RawGPUError, match=r"uses_local: argument #1 .* is a __local pointer; pass rawgpu.hcq.Local\(nbytes\), not Buffer"):
    k(out, out, 3, local_size=64)
  k(out, Local(4 * 64), 3, local_size=64, wait=True)
  assert np.array_equal(out.numpy(np.uint32), (np.arange(63, -1, -1) * 3).astype(np.uint32))


SCALARS_SRC = r"""
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef struct { uint a; ushort b; uchar c; } pod_t;
__kernel void scalars(__global ulong* out, char c, uchar uc, short s, ushort us, int i, uint u, long l, ulong ul,
                      half h, float f, double d, pod_t p) {
  if (__builtin_amdgcn_workitem_id_x() != 0) return;
  out[0] = (ulong)(long)c; out[1] = uc; out[2] = (ulong)(long)s; out[3] = us; out[4] = (ulong)(long)i; out[5] = u;
  out[6] = (ulong)l; out[7] = ul; out[8] = as_ushort(h); out[9] = as_uint(f); out[10] = as_ulong(d);
  out[11] = p.a; out[12] = p.b; out[13] = p.c;
}
"""


def test_every_scalar_argument_type_reaches_the_kernel(dev):
  """Arguments of every C scalar size and type, at the offsets and alignments the metadata gives, and a struct passed
  by value as its bytes: the kernel reads what the launch packed (numpy scalars count as their values)."""
  import struct
  from test_emu_rdna_common import compile_cl
  prg = dev.program(compile_cl(SCALARS_SRC, dev.props.arch), "scalars")
  out = dev.alloc(8 * 16)
  pod = struct.pack("<IHBx", 0xdeadbeef, 0xbeef, 0xab)
  cases = [(-5, 250, -30000, 65000, -(1 << 31), 0xffffffff, -(1 << 62), (1 << 64) - 1, 1.5, 3.25, -2.0 ** -1000, pod),
           (np.int8(7), np.uint8(1), np.int16(-1), np.uint16(2), np.int32(-7), np.uint32(9), np.int64(-1), np.uint64(5),
            np.float16(-0.5), np.float32(1e-3), np.float64(1e300), pod)]
  for args in cases:
    prg(out, *args, local_size=32, wait=True)
    got = out.numpy(np.uint64)[:14]
    c, uc, s, us, i, u, lg, ul, h, f, d, _ = (int(a) if isinstance(a, (int, np.integer)) else a for a in args)
    want = [c & (2**64 - 1), uc, s & (2**64 - 1), us, i & (2**64 - 1), u, lg & (2**64 - 1), ul,
            int(np.float16(h).view(np.uint16)), int(np.float32(f).view(np.uint32)), int(np.float64(d).view(np.uint64)),
            0xdeadbeef, 0xbeef, 0xab]
    assert [int(x) for x in got] == want


def test_copy_queue_cannot_be_bound(dev):
  """The copy engine has no indirect buffers here: binding its queue is a clear error, and nothing is queued."""
  q = dev.copy_queue().copy(dev.alloc(64).va, dev.alloc(64).va, 64)
  with pytest.raises(RawGPUError, match="AMDCopyQueue cannot run from GPU memory"): q.bind(dev)


def test_mapping_needs_both_devices_on_one_interface(dev):
  """A buffer of a MOCKPCI board cannot be mapped into a MOCKKFD device (nor the other way): a clear error."""
  from rawgpu.hcq.device import Device
  other_iface = "MOCKKFD" if dev.props.iface == "MOCKPCI" else "MOCKPCI"
  with Device(f"{other_iface}+AMD::{dev.props.arch}") as other:
    with pytest.raises(RawGPUError, match="peer mappings need both devices on the same interface"): dev.map(other.alloc(4096))


@pytest.mark.parametrize("spec", ["MOCKKFD+AMD::gfx942", "MOCKPCI+AMD::gfx942"])
def test_a_code_object_must_match_the_devices_xnack_and_sramecc(spec, tmp_path):
  """The device's target ID (MOCKKFD: the emulated MI300X's RAS and amdkfd's XNACK default, gfx942:sramecc+:xnack-;
  AM: xnack- only, SRAM ECC unknown) against code objects clang built for gfx942 with each setting."""
  import shutil, subprocess
  from conftest import open_hcq_target
  from rawgpu.errors import CodeObjectError
  if shutil.which("clang-19") is None or shutil.which("ld.lld-19") is None: pytest.skip("clang-19 / ld.lld-19 not installed")
  (tmp_path / "k.cl").write_text("__kernel void k(__global int* p, int v) { p[0] = v; }\n")
  def build(mcpu):
    subprocess.run(["clang-19", "-target", "amdgcn-amd-amdhsa", f"-mcpu={mcpu}", "-nogpulib", "-O2", "-c", "k.cl", "-o", "k.o"], cwd=tmp_path, check=True)
    subprocess.run(["ld.lld-19", "-shared", "k.o", "-o", "k.hsaco"], cwd=tmp_path, check=True)
    return (tmp_path / "k.hsaco").read_bytes()
  gen = open_hcq_target(spec)
  dev = next(gen)
  try:
    kfd = spec.startswith("MOCKKFD")
    assert dev.props.target == ("gfx942:sramecc+:xnack-" if kfd else "gfx942:xnack-")
    out = dev.alloc(4, host=True)
    for mcpu in ("gfx942", "gfx942:xnack-", "gfx942:sramecc+") + (() if kfd else ("gfx942:sramecc-",)):
      dev.program(build(mcpu))(out, 5, global_size=1, local_size=1, wait=True)
      assert out.numpy(np.int32)[0] == 5, mcpu
      out.copyin(np.zeros(1, np.int32))
    with pytest.raises(CodeObjectError, match="built with xnack on, the device runs xnack off"): dev.program(build("gfx942:xnack+"))
    if kfd:
      with pytest.raises(CodeObjectError, match="built with sramecc off, the device runs sramecc on"): dev.program(build("gfx942:sramecc-"))
  finally: next(gen, None)
