import json, os
import numpy as np
import pytest
from rawgpu import kernels


@pytest.fixture(scope="module")
def dev():
  from conftest import find_firmware
  fw = find_firmware()
  if fw is None: pytest.skip("AMD firmware not found: run .ci/fetch-firmware (Debian firmware-amd-graphics) or set RAWGPU_FIRMWARE_DIR")
  os.environ.setdefault("RAWGPU_FIRMWARE_DIR", fw)
  from rawgpu.hcq.device import Device
  d = Device("MOCKPCI+AMD")
  yield d
  d.close()


def test_chrome_trace_has_one_ordered_event_per_launch(dev, tmp_path):
  from rawgpu.hcq.profile import Profiler
  fill = dev.program(kernels.path(dev.props.arch, "fill").read_bytes())
  vadd = dev.program(kernels.path(dev.props.arch, "vadd").read_bytes(), "vadd_f32")
  buf = dev.alloc(4 * 1024)
  prof = Profiler(dev)
  try:
    for v in (0, 7, 0x3f800000): fill(buf, v, 1024, global_size=4, local_size=256)  # the last is 1.0f
    gpu_s = vadd(buf, buf, buf, 1024, global_size=4, local_size=256, timing=True)
    path = prof.export(str(tmp_path / "trace.json"))
  finally: prof.close()
  assert np.all(buf.numpy(np.float32) == 2.0)  # 1.0 + 1.0: every launch ran, in order
  evs = json.load(open(path))["traceEvents"]
  assert [e["name"] for e in evs] == ["fill_u32"] * 3 + ["vadd_f32"]
  assert all(e["ph"] == "X" and e["dur"] > 0 for e in evs)
  assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in zip(evs, evs[1:]))  # one queue: launches do not overlap
  assert abs(evs[-1]["dur"] / 1e6 - gpu_s) < 1e-9
  fill(buf, 1, 1024, global_size=4, local_size=256, wait=True)  # after close: no profiling, still correct
  assert len(prof.events) == 4


def test_copies_and_graph_replays_are_traced_on_their_engines(dev, tmp_path):
  from rawgpu.hcq.graph import Graph
  from rawgpu.hcq.profile import Profiler
  fill = dev.program(kernels.path(dev.props.arch, "fill").read_bytes())
  from rawgpu.hcq.amd.backend import BAR_COPYIN
  a, b, big = dev.alloc(4 * 256), dev.alloc(4 * 256), dev.alloc(BAR_COPYIN + 4)
  g = Graph(dev)
  for _ in range(3): g.exec(fill, a, g.input("v"), 256, local_size=256)
  g.copy(b, a)
  dev.wait_timeline(g.replay(v=1))                 # built before profiling: its clock slots are patched later
  prof = Profiler(dev)
  try:
    big.copyin(np.zeros(BAR_COPYIN + 4, np.uint8))  # one copy on the copy engine (a smaller one may be CPU stores)
    dev.wait_timeline(g.replay(v=9))
    evs = json.load(open(prof.export(str(tmp_path / "trace.json"))))["traceEvents"]
  finally: prof.close()
  assert [(e["name"], e["cat"]) for e in evs] == [(f"copy {BAR_COPYIN + 4} bytes", "copy"), ("graph (3 kernels, 1 other nodes)", "graph")]
  assert evs[0]["tid"].endswith("copy engine") and evs[1]["tid"].endswith("compute")
  assert all(e["dur"] > 0 for e in evs) and evs[0]["ts"] + evs[0]["dur"] <= evs[1]["ts"]   # the graph waited for the copy
  assert np.all(b.numpy(np.uint32) == 9)
  dev.wait_timeline(g.replay(v=4))                 # after close: the clock goes to the graph's own slot again
  assert np.all(b.numpy(np.uint32) == 4) and len(prof.events) == 2


def test_a_graph_built_while_profiling_times_every_launch_and_copy(dev, tmp_path):
  from rawgpu.hcq.graph import Graph
  from rawgpu.hcq.profile import Profiler
  fill = dev.program(kernels.path(dev.props.arch, "fill").read_bytes())
  a, b = dev.alloc(4 * 256), dev.alloc(4 * 256)
  prof = Profiler(dev)
  try:
    g = Graph(dev)
    g.exec(fill, a, 3, 256, local_size=256).copy(b, a).exec(fill, a, g.input("v"), 256, local_size=256)
    dev.wait_timeline(g.replay(v=4))
    evs = json.load(open(prof.export(str(tmp_path / "trace.json"))))["traceEvents"]
  finally: prof.close()
  assert [(e["name"], e["cat"]) for e in evs] == [("graph (2 kernels, 1 other nodes)", "graph"), ("fill_u32", "kernel"),
                                                   ("copy 1024 bytes", "copy"), ("fill_u32", "kernel")]
  graph, *nodes = evs
  assert all(e["dur"] > 0 for e in evs)
  assert all(x["ts"] + x["dur"] <= y["ts"] for x, y in zip(nodes, nodes[1:]))          # in recorded order
  assert graph["ts"] <= nodes[0]["ts"] and nodes[-1]["ts"] + nodes[-1]["dur"] <= graph["ts"] + graph["dur"]
  assert np.all(b.numpy(np.uint32) == 3) and np.all(a.numpy(np.uint32) == 4)
  dev.wait_timeline(g.replay(v=5))                                                     # not profiled any more: still runs
  assert np.all(a.numpy(np.uint32) == 5) and len(prof.events) == 4


def test_an_unordered_graph_is_timed_node_by_node_too(dev, tmp_path):
  """Graph(dev, ordered=False) while profiling: every launch and copy has its clock on its own engine's track, a
  node that waits (after=) starts after what it waits for ends, and the graph's span covers them all."""
  from rawgpu.hcq.graph import Graph
  from rawgpu.hcq.profile import Profiler
  fill = dev.program(kernels.path(dev.props.arch, "fill").read_bytes())
  a, b, c = (dev.alloc(4 * 256) for _ in range(3))
  c.copyin(np.full(256, 2, np.uint32))
  prof = Profiler(dev)
  try:
    g = Graph(dev, ordered=False)
    g.exec(fill, a, 3, 256, local_size=256); k = g.last_node
    g.copy(b, c)                                           # independent of the kernel
    g.copy(c, a, after=[k])                                # waits for the kernel
    dev.wait_timeline(g.replay())
    evs = json.load(open(prof.export(str(tmp_path / "trace.json"))))["traceEvents"]
  finally: prof.close()
  graph, kern, copy_b, copy_c = evs
  assert [e["cat"] for e in evs] == ["graph", "kernel", "copy", "copy"] and all(e["dur"] > 0 for e in evs)
  assert kern["tid"].endswith("compute") and copy_c["tid"].endswith("copy engine")
  assert kern["ts"] + kern["dur"] <= copy_c["ts"]
  assert all(graph["ts"] <= e["ts"] and e["ts"] + e["dur"] <= graph["ts"] + graph["dur"] for e in (kern, copy_c))
  assert np.all(b.numpy(np.uint32) == 2) and np.all(c.numpy(np.uint32) == 3)


def test_work_lost_to_a_hang_is_no_event_of_the_trace(tmp_path):
  """A launch that recover() dropped never wrote its clock: it used to be an event of negative duration, and its zero
  stamps the trace's origin. The kernel that hung started: it is named with its start (it was listed as never run)."""
  from conftest import find_firmware
  if find_firmware() is None: pytest.skip("AMD firmware not found: run .ci/fetch-firmware (Debian firmware-amd-graphics) or set RAWGPU_FIRMWARE_DIR")
  from rawgpu.errors import DeviceTimeout
  from rawgpu.hcq.device import Device
  from rawgpu.hcq.profile import Profiler
  with Device("MOCKPCI:1+AMD") as d:
    code = lambda name: d.program(kernels.path(d.props.arch, name).read_bytes())
    spin, fill = code("spin"), code("fill")
    flag, done, a = d.alloc(4096, host=True), d.alloc(4096, host=True), d.alloc(4096)
    flag.cpu()[:4] = bytes(4)
    prof = Profiler(d)
    fill(a, 1, 64, global_size=1, local_size=64, wait=True)
    spin(flag, 7, done, global_size=1, local_size=32)
    fill(a, 9, 64, global_size=1, local_size=64)   # queued behind the spin: recover() drops both
    with pytest.raises(DeviceTimeout): d.wait_timeline(d.timeline_value - 1, timeout_ms=300, report=False)
    d.recover()
    fill(a, 2, 64, global_size=1, local_size=64, wait=True)
    trace = json.load(open(prof.export(str(tmp_path / "t.json"))))
    prof.close()
  evs = trace["traceEvents"]
  assert [e["name"] for e in evs] == ["fill_u32", "fill_u32"] and all(e["dur"] > 0 for e in evs) and evs[0]["ts"] == 0
  assert [e["name"] for e in trace["otherData"]["never_ran"]] == ["fill_u32"]
  (hung,) = trace["otherData"]["never_ended"]
  assert hung["name"] == "spin_until" and evs[0]["ts"] + evs[0]["dur"] <= hung["ts"] <= evs[1]["ts"]


def test_the_trace_after_a_fault_holds_what_ran(tmp_path):
  """After a fault the trace is taken without waiting (it raised the fault, and on MOCKKFD, which cannot recover, the
  trace was lost): the work that ran is its events, the faulting kernel is named as started and never ended."""
  from conftest import find_firmware
  if find_firmware() is None: pytest.skip("AMD firmware not found: run .ci/fetch-firmware (Debian firmware-amd-graphics) or set RAWGPU_FIRMWARE_DIR")
  from rawgpu.errors import DeviceFault
  from rawgpu.hcq.device import Device
  from rawgpu.hcq.profile import Profiler
  with Device("MOCKPCI:1+AMD") as d:
    fill, fault = (d.program(kernels.path(d.props.arch, n).read_bytes()) for n in ("fill", "fault"))
    prof = Profiler(d)
    fill(d.alloc(1024), 1, 256, global_size=1, local_size=256, wait=True)
    with pytest.raises(DeviceFault): fault(0x7f10_0000_0000, 5, wait=True)
    trace = json.load(open(prof.export(str(tmp_path / "t.json"))))
    prof.close()
    d.recover()
  assert [e["name"] for e in trace["traceEvents"]] == ["fill_u32"] and [e["name"] for e in trace["otherData"]["never_ended"]] == [fault.name]


def test_profiling_a_kernel_without_kernargs_and_misuse(dev, tmp_path):
  """A kernel that takes no kernargs launches under a Profiler as without one (the profiled path patched a kernargs
  slot it lacked: the launch failed after taking its ticket, and every later wait timed out). A second Profiler of
  the device is refused (it took the first's events and its close stopped the first); a trace of a closed device is
  an error (its clocks went with its memory: it listed work that ran as never run); an export that cannot be made
  leaves the file as it was, and an unwritable path is a RawGPUError."""
  from rawgpu.errors import RawGPUError
  from rawgpu.hcq.device import Device
  from rawgpu.hcq.profile import Profiler
  empty = dev.program(kernels.path(dev.props.arch, "empty").read_bytes())
  prof = Profiler(dev)
  try:
    empty(global_size=1, local_size=32)
    dev.synchronize(timeout_ms=5000)
    with pytest.raises(RawGPUError, match="already profiled"): Profiler(dev)
    good = prof.export(str(tmp_path / "t.json"))
    assert [e["name"] for e in json.load(open(good))["traceEvents"]] == [empty.name]
    with pytest.raises(RawGPUError, match="cannot write the trace to /nonexistent-dir/t.json"): prof.export("/nonexistent-dir/t.json")
  finally: prof.close()
  Profiler(dev).close()   # (one at a time: after the close a new one may start)
  d = Device("MOCKPCI:1+AMD")
  try:
    p2 = Profiler(d)
    d.program(kernels.path(d.props.arch, "fill").read_bytes())(d.alloc(256), 1, 64, local_size=64, wait=True)
    before = open(good).read()
  finally: d.close()
  with pytest.raises(RawGPUError, match="the device is closed"): p2.export(good)
  assert open(good).read() == before   # the earlier trace is still there
