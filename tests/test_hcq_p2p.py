"""Peer-to-peer between two emulated boards on one virtual PCI bus: the AM driver maps a peer's VRAM (through its
BAR0 bus address) and host memory into a board's page tables, the bus routes the DMA, hcq copies and waits across.
The same between two XCCs of one MI300X (each a device, a CPX partition): they share the board's page tables, so a
peer's memory is local there; hcq's rules (map before use, free waits for the peer) are the same."""
import re, time
import numpy as np
import pytest
from rawgpu import kernels
from rawgpu.errors import RawGPUError

from conftest import HCQ_PAIRS, need_firmware, open_hcq_pair


@pytest.fixture(scope="module", params=HCQ_PAIRS, ids=lambda p: "-".join(p))
def pair(request): yield from open_hcq_pair(*request.param)


def one_board(a, b) -> bool:
  """Two XCCs of one MI300 (one driver, one set of page tables), not two boards."""
  return a.props.iface == "MOCKPCI" and a.iface.dev is b.iface.dev


def translate(dev, va: int) -> int | None:
  """Where dev's GPU page tables send va (None: unmapped): AM's own tables, or those the emulated amdkfd keeps."""
  if dev.props.iface == "MOCKPCI": return dev.iface.dev.pt.translate(va)
  from rawgpu.drivers.emu.mockkfd import machine
  k = machine(dev.props.arch).kernel
  return k.translate(k.gpu_by_id(dev.iface.gpu_id), va)


def bar0(dev) -> int:
  if dev.props.iface == "MOCKPCI": return dev.iface.dev.pci.resources()[0][0]
  from rawgpu.drivers.emu.mockkfd import machine
  return machine(dev.props.arch).kernel.gpu_by_id(dev.iface.gpu_id).dev.pci.resources()[0][0]


def prog(dev, name, kernel=None):
  return dev.program(kernels.path(dev.props.arch, name).read_bytes(), kernel)


@pytest.mark.parametrize("size,off", [(1, 0), (4097, 3), (300_001, 1000), ((5 << 20) + 13, 5)])
def test_peer_copy_both_ways(pair, size, off):
  a, b = pair
  data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
  x = a.alloc(size + off).copyin(np.zeros(size + off, np.uint8))
  x.view(off, size).copyin(data)
  y = b.alloc(size + 2 * off + 1).copyin(np.full(size + 2 * off + 1, 0x5a, np.uint8))
  b.transfer(y.view(2 * off, size), x.view(off, size))          # B's copy engine reads A's VRAM over the bus
  out = y.numpy()
  assert np.array_equal(out[2 * off:2 * off + size], data)
  assert np.all(out[:2 * off] == 0x5a) and np.all(out[2 * off + size:] == 0x5a)  # nothing outside the range
  z = a.alloc(size)
  b.transfer(z, y.view(2 * off, size))                          # B's engine writes A's VRAM over the bus
  assert np.array_equal(z.numpy(), data)
  w = b.alloc(size)
  a.transfer(w, z)                                              # A's engine writes B's VRAM
  assert np.array_equal(w.numpy(), data)
  for buf in (x, y, z, w): buf.free()


def test_map_is_idempotent_and_same_va(pair):
  a, b = pair
  x = a.alloc(1 << 16)
  assert not b.maps(x)
  b.map(x); b.map(x)
  assert b.maps(x) and len(b.iface.peer_maps) >= 1
  # the peer's page tables point at A's BAR0 bus address + the VRAM offset, at the same VA (one board: the same tables)
  own = translate(a, x.va + 0x1234) - translate(a, x.va)
  if one_board(a, b): assert own == 0x1234 and translate(b, x.va + 0x1234) == translate(a, x.va + 0x1234)
  else: assert own == 0x1234 and bar0(a) <= translate(b, x.va + 0x1234) < bar0(a) + a.props.bar_size
  assert translate(b, x.va + 0x1234) - translate(b, x.va) == 0x1234
  x.free()


def test_cross_device_wait_orders_kernels(pair):
  """B's queue waits for a signal A's queue writes after A's kernel; B's kernel then consumes A's result."""
  a, b = pair
  n = 3000
  h = a.alloc(4 * n, host=True).copyin(np.full(n, 0xabababab, np.uint32))   # A's host memory, B reads it too
  y = b.alloc(4 * n).copyin(np.zeros(n, np.uint32))
  sig = a.new_signal("a-done")
  b.map(sig); b.map(h)
  b.compute_queue().wait(sig, 1).submit(b)                       # B stalls here until A says its result is ready
  prog(b, "copy")(h, y, n, global_size=(n + 127) // 128, local_size=128)
  value = 0x1234_5678
  prog(a, "fill")(h, value, n, global_size=(n + 127) // 128, local_size=128)
  a.compute_queue().signal(sig, 1).submit(a)
  a.synchronize(); b.synchronize()
  assert np.all(y.numpy(np.uint32) == value)                    # not the pattern that was there before A ran
  assert sig.value == 1
  h.free(); y.free()


def test_graphs_on_two_boards_order_each_other_with_signal_inputs(pair):
  """A's graph fills a host buffer and signals round r; B's graph waits for round r on A's signal, then copies the
  buffer into its VRAM. Each replay gives the round as an input (the waits and signals are patched, not rebuilt)."""
  from rawgpu.hcq.graph import Graph
  a, b = pair
  n = 2048
  h = a.alloc(4 * n, host=True)
  y = b.alloc(4 * n)
  sig = a.new_signal("round")
  b.map(sig); b.map(h)
  ga, gb = Graph(a), Graph(b)
  ga.exec(prog(a, "fill"), h, ga.input("value"), n, global_size=n // 128, local_size=128).signal(sig, ga.input("round"))
  gb.wait(sig, gb.input("round")).exec(prog(b, "copy"), h, y, n, global_size=n // 128, local_size=128)
  for r, value in ((1, 0x1111_0001), (2, 0x2222_0002), (3, 0x3333_0003)):
    tb = gb.replay(round=r)                                      # queued first: B must stall until A's round r
    ta = ga.replay(value=value, round=r)
    a.wait_timeline(ta); b.wait_timeline(tb)
    assert sig.value == r
    assert np.all(y.numpy(np.uint32) == value), f"round {r}: B copied before A's fill"
  with pytest.raises(RawGPUError, match="signal value"): gb.replay(round=-1)
  with pytest.raises(RawGPUError, match="signal value"): gb.replay(round=h)
  h.free(); y.free()


def test_graph_copy_input_must_be_mapped_where_it_is_copied(pair):
  """A graph copy that runs on B's copy engine takes its source at replay: a buffer B has not mapped is refused
  before anything is queued; once mapped, it is copied."""
  from rawgpu.hcq.graph import Graph
  a, b = pair
  src, dst = a.alloc(4096).copyin(np.full(4096, 5, np.uint8)), b.alloc(4096)
  g = Graph(a)
  g.copy(dst, g.input("src"), 4096, on=b)
  with pytest.raises(RawGPUError, match="is copied on .* where .* is not mapped; call .*map"): g.replay(src=src)
  with pytest.raises(RawGPUError, match="give a Buffer of at least that size"): g.replay(src=a.alloc(16))
  b.map(src)
  a.wait_timeline(g.replay(src=src))
  b.synchronize()
  assert np.all(dst.numpy() == 5)
  src.free(); dst.free()


def test_graph_signal_value_must_be_an_int_or_input(pair):
  from rawgpu.hcq.graph import Graph
  a, _ = pair
  with pytest.raises(RawGPUError, match="int or a graph input"): Graph(a).signal(a.new_signal("s"), 1.5)


def test_unmapped_peer_buffer_is_refused(pair):
  a, b = pair
  x, y = a.alloc(4096), b.alloc(4096)
  with pytest.raises(RawGPUError, match="not mapped"):
    prog(b, "fill")(x, 1, 16, global_size=1, local_size=64)
  if not one_board(a, b): assert translate(b, x.va) is None       # nothing maps it on B, so the GPU would fault
  x.free(); y.free()


# MOCKKFD boards are large-BAR; two XCCs of one board reach each other's VRAM without the bus
@pytest.mark.parametrize("pair", [p for p in HCQ_PAIRS if p[0] == "MOCKPCI" and p[1] != "gfx942"], indirect=True, ids=lambda p: "-".join(p))
def test_peer_vram_beyond_bar_is_refused(pair):
  from rawgpu.drivers.iface import Mem
  a, b = pair
  # memory of A that lies past A's BAR0: a peer cannot reach it (only the BAR is on the bus)
  beyond = Mem(0x7f80_0000_0000, 4096, None, meta=("vram", a.iface.dev.bar_size, None))
  with pytest.raises(RawGPUError, match="beyond its"):
    b.iface.map_peer(beyond, a.iface)
  assert b.iface.dev.pt.translate(beyond.va) is None


def test_free_unmaps_from_peer(pair):
  a, b = pair
  x = a.alloc(1 << 21)
  b.map(x)
  assert translate(b, x.va) is not None
  y = b.alloc(1 << 21)
  b.transfer(y, x)
  x.free()                                                       # waits for B's copy, then unmaps it on B
  assert translate(b, x.va) is None and x.va not in b.iface.peer_maps and not b.maps(x)
  with pytest.raises(RawGPUError, match="freed"): b.map(x)
  y.free()


class _MemBoard:
  """A minimal PCI function: a 1 MiB memory BAR0, a register BAR2, and a command register."""
  vendor, device, cls = 0x1002, 0x744c, 0x030000

  def __init__(self):
    from rawgpu.drivers.emu.pcibus import Bar
    self.vram, self.command = bytearray(1 << 20), 0x6      # memory space + bus master on
    self.bars = {0: Bar(1 << 20, mem=memoryview(self.vram)), 2: Bar(1 << 20, read=lambda o, w: 0, write=lambda o, w, v: None)}
  def config_read(self, off: int, size: int) -> int: return (self.command >> 8 * (off - 4)) & 0xff if off in (4, 5) and size == 1 else 0
  def config_write(self, off: int, size: int, value: int) -> None: pass
  def reset(self) -> None: pass


def test_bus_routes_only_memory_bar_ranges():
  """The bus model: DMA inside a board's memory BAR (at the address sysfs shows the driver) reaches its memory;
  a register BAR, a gap or a board with memory decoding off master-aborts."""
  from rawgpu.drivers import pci
  from rawgpu.drivers.emu.pcibus import BusError, HostRAM, VirtualBus
  vbus = VirtualBus(host=HostRAM(1 << 20))
  boards = [_MemBoard(), _MemBoard()]
  buses = [vbus.plug(bd) for bd in boards]
  res = [pci.PCIDevice(bus, vbus.system).resources() for bus in buses]
  start1, end1, _ = res[1][0]
  vbus.host.dma(start1 + 0x10, 4)[:] = b"peer"
  assert bytes(boards[1].vram[0x10:0x14]) == b"peer" and bytes(boards[0].vram[0x10:0x14]) == bytes(4)
  assert bytes(vbus.host.dma(end1 - 3, 4)) == bytes(4)          # the last bytes of the BAR
  for addr, size in ((end1 - 3, 8), (end1 + 1, 4), (res[1][2][0], 4), (res[0][0][0] - 4096, 4)):
    with pytest.raises(BusError): vbus.host.dma(addr, size)
  boards[1].command = 0x4                                        # memory space off: nobody claims it
  with pytest.raises(BusError): vbus.host.dma(start1 + 0x10, 4)
  vbus.unplug(buses[0])
  with pytest.raises(BusError): vbus.host.dma(res[0][0][0], 4)


def test_unmapped_peer_access_faults_on_the_gpu():
  """A copy engine given a peer's VA without the mapping takes a GPU page fault at that VA (raised, device reopenable)."""
  need_firmware()
  from rawgpu.errors import DeviceFault
  from rawgpu.hcq.device import Device
  a, b = Device("MOCKPCI:2+AMD::gfx1100"), Device("MOCKPCI:3+AMD::gfx1100")
  try:
    x, y = a.alloc(1 << 16), b.alloc(1 << 16)
    v = b.next_timeline()
    b.copy_queue().copy(y.va, x.va, 4096).signal(b.timeline, b.timeline_gpu(v)).submit(b)   # raw VA: no map()
    with pytest.raises(DeviceFault, match=f"page fault at VA {x.va:#x}"): b.wait_timeline(v, timeout_ms=5000)
  finally: b.close(); a.close()


def test_closing_the_owner_unmaps_from_peers():
  need_firmware()
  from rawgpu.hcq.device import Device
  a, b = Device("MOCKPCI:2+AMD::gfx1100"), Device("MOCKPCI:3+AMD::gfx1100")
  try:
    x, sig = a.alloc(1 << 16), a.new_signal("s")
    b.map(x); b.map(sig)
    assert b.maps(x) and b.maps(sig) and b.iface.dev.pt.translate(x.va) is not None
    a.close()
    assert b.iface.dev.pt.translate(x.va) is None and b.iface.dev.pt.translate(sig.va) is None and not b.iface.peer_maps
  finally: b.close(); a.close()


def test_kernel_reads_peer_vram():
  need_firmware()
  from rawgpu.hcq.device import Device
  a, b = Device("MOCKPCI:2+AMD::gfx1100"), Device("MOCKPCI:3+AMD::gfx1100")
  try:
    n = 1000
    src = np.arange(n, dtype=np.uint32) * 7
    x, y = a.alloc(4 * n).copyin(src), b.alloc(4 * n)
    b.map(x)
    prog(b, "copy")(x, y, n, global_size=(n + 127) // 128, local_size=128)
    b.wait_timeline(b.timeline_value - 1, timeout_ms=2000)
    assert np.array_equal(y.numpy(np.uint32), src)
  finally: b.close(); a.close()


def test_copy_benchmark_p2p_case(monkeypatch):
  """The copy benchmark's p2p case measures a checked peer copy with two boards, and skips saying why with one.
  Boards 2 and 3: the module's pairs may still hold boards 0 and 1."""
  need_firmware()
  from rawgpu.tools.bench import core
  from rawgpu.tools.bench.core import run
  figs = {f.case.split()[0]: f for f in run(["copy"], "MOCKPCI:2+AMD::gfx1100", True)}
  p2p = figs["p2p"]
  assert p2p.error is None and p2p.skipped is None and p2p.n > 0 and p2p.median > 0 and p2p.unit == "GB/s"
  real = core.Ctx.device
  def one_device(self, spec=None):
    if spec and spec.startswith("MOCKPCI:3"): raise core.Skip(f"cannot open {spec}: DeviceNotFound: only 1 device(s) found")
    return real(self, spec)
  monkeypatch.setattr(core.Ctx, "device", one_device)
  figs = {f.case.split()[0]: f for f in run(["copy"], "MOCKPCI:2+AMD::gfx1100", True)}
  assert figs["p2p"].skipped.startswith("skipped: needs two devices") and figs["vram->vram"].median > 0


def test_unmapped_peer_signal_is_refused_when_building_the_queue(pair):
  a, b = pair
  sig = a.new_signal("only on a")
  for _ in range(300):  # signals share pages; earlier tests may have mapped this one's page into b
    if not b.maps(sig): break
    sig = a.new_signal("only on a")
  with pytest.raises(RawGPUError, match="not mapped here"): b.compute_queue().wait(sig, 1)
  with pytest.raises(RawGPUError, match="not mapped here"): b.compute_queue().signal(sig, 1)
  b.map(sig)
  b.compute_queue().signal(sig, 3).submit(b)
  sig.wait(3, timeout_ms=5000)


def test_graph_replay_records_a_peer_buffer_against_its_own_ticket(pair):
  """A graph of B that writes A's (mapped) buffer counts as B's use of it: freeing it waits for B's timeline."""
  from rawgpu.hcq.graph import Graph
  a, b = pair
  x, y = a.alloc(4 * 64), a.alloc(4 * 64)
  b.map(x); b.map(y)
  g = Graph(b)
  g.exec(prog(b, "fill"), x, 5, 64, local_size=64).exec(prog(b, "fill"), g.input("out"), 6, 64, local_size=64)
  t = g.replay(out=y)
  assert x.peer_uses().get(b, 0) >= t and y.peer_uses().get(b, 0) >= t   # static and input buffers alike
  assert x.owner_use() < t or a.timeline_value > t                        # not a ticket of A's timeline
  b.wait_timeline(t)
  assert np.all(x.numpy(np.uint32) == 5) and np.all(y.numpy(np.uint32) == 6)
  x.free(); y.free()


def test_one_graph_across_two_devices(pair):
  """A graph recorded once over both boards: A fills, B's copy engine pulls it over the bus, B adds, A's copy engine
  brings the sum back. Replays with new inputs run the chain in order; A's ticket marks the end of all of it."""
  from rawgpu.hcq.graph import Graph
  a, b = pair
  n = 256
  x, w = a.alloc(4 * n), a.alloc(4 * n)
  y, z = b.alloc(4 * n), b.alloc(4 * n)
  b.map(x); a.map(z)
  fill, vadd = prog(a, "fill"), prog(b, "vadd", "vadd_f32")
  g = Graph(a)
  g.exec(fill, x, g.input("v"), n, local_size=256)                  # on A (the program's device)
  g.copy(y, x, on=b)                                                 # B's copy engine reads A's VRAM
  g.exec(vadd, y, y, z, n, local_size=256)                           # on B
  g.copy(g.input("out"), z, 4 * n)                                   # A's copy engine reads B's VRAM
  for f in (1.5, -4.0, 0.25):
    t = g.replay(v=int(np.float32(f).view(np.uint32)), out=w)
    a.wait_timeline(t)
    assert np.all(w.numpy(np.float32) == np.float32(2 * f)), f       # every step saw the one before it
    assert b.timeline.value >= b.timeline_gpu(b.timeline_value - 1)   # B's share signalled its own ticket
  with pytest.raises(RawGPUError, match="not mapped"): g.replay(v=0, out=b.alloc(4 * n))   # A cannot reach it
  g2 = Graph(a).copy(y, b.alloc(4 * n), on=a)                        # A's engine, B's buffers: A maps neither
  with pytest.raises(RawGPUError, match="not mapped there"): g2.replay()
  for buf in (x, w, y, z): buf.free()


def test_unordered_graph_runs_two_devices_at_once(pair):
  """Graph(a, ordered=False) over both boards: A's kernel spins until a flag is set, and B's kernel (recorded after
  it, waiting for nothing) sets it, so the boards run at once; A's fill waits for both (after=), B's copy for A's
  fill, and A's ticket marks the end of it all. In order, A's kernel would hold B's forever."""
  from rawgpu.hcq.graph import Graph
  a, b = pair
  flag, done = a.alloc(4, host=True), a.alloc(4, host=True)
  out, back = a.alloc(64), b.alloc(64)
  b.map(flag); b.map(out)
  spin, fill_a, fill_b = prog(a, "spin"), prog(a, "fill"), prog(b, "fill")
  g = Graph(a, ordered=False)
  g.exec(spin, flag, 7, done, global_size=1, local_size=32); k = g.last_node   # on A
  g.exec(fill_b, flag, 7, 1, local_size=1); f = g.last_node                     # on B: releases A's kernel
  g.exec(fill_a, out, g.input("v"), 16, local_size=16, after=[k, f]); w = g.last_node
  g.copy(back, out, on=b, after=[w])                                             # B's copy engine pulls A's result
  for v in (2, 6):
    flag.cpu()[:4], done.cpu()[:4] = bytes(4), bytes(4)
    a.wait_timeline(g.replay(v=v), timeout_ms=5000)
    assert done.numpy(np.uint32)[0] == 8 and list(back.numpy(np.uint32)) == [v] * 16
    assert b.timeline.value >= b.timeline_gpu(b.timeline_value - 1)   # B's share signalled its own ticket


@pytest.mark.parametrize("ordered", [True, False])
def test_a_graph_starts_after_the_earlier_work_of_every_device_it_touches(pair, ordered):
  """A kernel queued on one board before a replay writes what the graph then copies on the other board: the copy
  waits for it where that board is in the graph, either way round (on the GPU), and where it is not but owns a
  buffer the graph copies, recorded or given at replay (on the host)."""
  import threading
  from rawgpu.hcq.graph import Graph
  a, b = pair
  word = lambda buf: int.from_bytes(buf.cpu()[:4], "little")
  def graph(on, owner, copier, also=None, input_=False):
    """A graph on `on` that copies owner's word on copier's engine (and fills a word on `also`, to make it part of it)."""
    done, dst = owner.alloc(4, host=True), copier.alloc(4, host=True)
    copier.map(done)
    g = Graph(on, ordered=ordered)
    if also is not None: g.exec(prog(also, "fill"), also.alloc(4), 1, 1)
    g.copy(dst, g.input("src") if input_ else done, 4, on=copier)
    return g, done, dst
  cases = {"A's work, B copies": graph(a, a, b), "B's work (B in the graph), A copies": graph(a, b, a, also=b),
           "A's buffer, a graph of B's": graph(b, a, b), "A's buffer as an input, a graph of B's": graph(b, a, b, input_=True)}
  for what, (g, done, dst) in cases.items():
    owner = done.dev
    flag = owner.alloc(4, host=True)
    flag.cpu()[:4], done.cpu()[:4] = bytes(4), bytes(4)
    prog(owner, "spin")(flag, 7, done, global_size=1, local_size=32)   # queued on the owner: writes 8 once released
    release = lambda: flag.cpu().__setitem__(slice(0, 4), (7).to_bytes(4, "little"))
    if "a graph of B's" in what:   # the owner is outside the graph: the host waits for its work before it submits
      threading.Timer(0.1, release).start()   # (released from another thread)
      t = g.replay(**({"src": done} if "input" in what else {}))
    elif "input" in what:
      threading.Timer(0.1, release).start()
      t = g.replay(src=done)
    else:
      t = g.replay()
      time.sleep(0.1)
      assert word(dst) == 0, what   # held on the GPU
      release()
    g.dev.wait_timeline(t, timeout_ms=5000)
    assert word(dst) == 8, what


@pytest.mark.parametrize("ordered", [True, False])
def test_recover_on_one_board_releases_the_other_boards_share_of_a_graph(pair, ordered):
  """A two-board graph hangs on A (a kernel that never ends) and A recovers in place: B's share of that replay,
  waiting on A's graph signals, is released (it finishes, its ticket is signalled), and the next replay runs."""
  from rawgpu.errors import DeviceTimeout
  from rawgpu.hcq.graph import Graph
  a, b = pair
  if not a.recovers_in_place: pytest.skip(f"{a.props.iface} restarts queues by reopening")
  flag, done, y = a.alloc(4, host=True), a.alloc(4, host=True), b.alloc(256)
  g = Graph(a, ordered=ordered)
  g.exec(prog(a, "spin"), flag, 7, done, global_size=1, local_size=32); k = g.last_node
  g.exec(prog(b, "fill"), y, g.input("v"), 64, local_size=64, **({} if ordered else {"after": [k]}))
  flag.cpu()[:4] = (7).to_bytes(4, "little")
  a.wait_timeline(g.replay(v=1), timeout_ms=5000)
  flag.cpu()[:4] = bytes(4)
  t = g.replay(v=2)
  with pytest.raises(DeviceTimeout): a.wait_timeline(t, timeout_ms=300, report=False)
  a.recover()
  b.synchronize(timeout_ms=5000)   # B's share of the lost replay ran to its end
  flag.cpu()[:4] = (7).to_bytes(4, "little")
  a.wait_timeline(g.replay(v=3), timeout_ms=5000)
  assert list(y.numpy(np.uint32)[:64]) == [3] * 64


@pytest.mark.parametrize("case", ["copies a buffer of B's", "runs on B too"])
def test_a_graph_does_not_wait_for_a_peers_work_on_buffers_it_does_not_hold(pair, case):
  """B's earlier work waits for a signal the graph writes (a cross-device wait, as the README shows), then runs a
  kernel on a buffer the graph never touches: the replay does not wait for that work (it would wait forever)."""
  from rawgpu.errors import DeviceTimeout
  from rawgpu.hcq.graph import Graph
  a, b = pair
  sig = a.new_signal("go")
  b.map(sig)
  yb, xa, zb, wb = b.alloc(256), a.alloc(256), b.alloc(256), b.alloc(256)
  a.map(yb)
  g = Graph(a, ordered=False)
  g.exec(prog(a, "fill"), xa, 5, 64, local_size=64)
  if case == "runs on B too": g.exec(prog(b, "fill"), zb, 6, 64, local_size=64)
  else: g.copy(xa, yb, 64)
  g.signal(sig, 1)                                   # the graph tells B to go on
  fill_b = prog(b, "fill")
  b.compute_queue().wait(sig, 1).submit(b)           # B waits for the graph's signal,
  fill_b(wb, 9, 64, local_size=64)                   # then fills a buffer the graph never touches
  t = g.replay()
  try: a.wait_timeline(t, timeout_ms=3000, report=False)
  except DeviceTimeout:
    sig.value = 1   # let B go, so the device closes
    raise
  b.synchronize(timeout_ms=3000)
  assert list(wb.numpy(np.uint32)[:64]) == [9] * 64


def test_a_healthy_boards_ticket_stays_honest_when_another_board_of_the_graph_recovers(pair):
  """B's share of a two-board graph hangs and B recovers: A's queues that waited on B are released, and A's ticket
  for that replay still marks the end of all of A's share (its copy engine's last node too), not just its release."""
  from rawgpu.errors import DeviceTimeout
  from rawgpu.hcq.graph import Graph
  a, b = pair
  if not b.recovers_in_place: pytest.skip(f"{b.props.iface} restarts queues by reopening")
  n = 8 << 20
  src, dst = a.alloc(n, host=True), a.alloc(n, host=True)
  small_s, small_d, xa = a.alloc(64, host=True), a.alloc(64, host=True), a.alloc(256)
  flag, done = b.alloc(4, host=True), b.alloc(4, host=True)
  small_s.cpu()[:4] = (0x1234).to_bytes(4, "little")
  g = Graph(a, ordered=False)
  g.exec(prog(b, "spin"), flag, 7, done, global_size=1, local_size=32); kb = g.last_node   # on B
  g.copy(dst, src, after=[kb])                                                              # A's copy engine, after B
  for _ in range(30): g.copy(dst, src)                                                      # and busy a while
  g.exec(prog(a, "fill"), xa, 1, 64, local_size=64); ka = g.last_node                       # A's compute, independent
  g.copy(small_d, small_s, after=[ka])                                                      # A's copy engine's last node
  flag.cpu()[:4] = (7).to_bytes(4, "little")
  a.wait_timeline(g.replay(), timeout_ms=20000)
  small_d.cpu()[:4], flag.cpu()[:4] = bytes(4), bytes(4)
  t = g.replay()
  with pytest.raises(DeviceTimeout): b.wait_timeline(b.timeline_value - 1, timeout_ms=300, report=False)
  b.recover()
  a.wait_timeline(t, timeout_ms=20000)
  assert int.from_bytes(small_d.cpu()[:4], "little") == 0x1234   # done when the ticket says so
  flag.cpu()[:4] = (7).to_bytes(4, "little")
  a.wait_timeline(g.replay(), timeout_ms=20000)


def _allocated(dev) -> int:
  import gc
  gc.collect()
  dev.synchronize()   # (frees the dropped memory that is due)
  return len(dev.iface.mems) - len(dev._signal_pages)


def test_a_graph_whose_first_replay_failed_frees_what_it_took(pair):
  """A two-board graph whose build fails at its first replay (B copies A's buffer, not mapped on B) frees what it
  allocated, says why at any later replay, and free() has nothing left to do."""
  from rawgpu.hcq.graph import Graph
  a, b = pair
  src, dst = a.alloc(256), b.alloc(256)
  g = Graph(a).copy(dst, src, on=b)
  before = _allocated(a), _allocated(b)
  with pytest.raises(RawGPUError, match="not mapped there"):
    g.replay()
  with pytest.raises(RawGPUError, match="first replay failed"):
    g.replay()
  g.free()
  assert (_allocated(a), _allocated(b)) == before
  src.free(); dst.free()


def test_a_busy_peer_does_not_hold_up_synchronize(pair):
  """A dropped two-board graph's memory waits for both boards; while B is busy (a kernel spins), A.synchronize()
  returns at once, keeps it, and frees it once B is done."""
  import gc
  from rawgpu.hcq.graph import Graph
  a, b = pair
  spin, fill = prog(b, "spin"), prog(a, "fill")
  x = a.alloc(4 * 64)
  g = Graph(a).exec(fill, x, 5, 64, local_size=64).exec(prog(b, "fill"), b.alloc(4 * 64), 6, 64, local_size=64)
  a.wait_timeline(g.replay())
  ka = g.ka
  flag, done = b.alloc(4, host=True), b.alloc(4, host=True)
  flag.cpu()[:4] = bytes(4)
  spin(flag, 7, done, global_size=1, local_size=32)
  del g
  gc.collect()
  try:
    t0 = time.monotonic()
    a.synchronize(timeout_ms=2000)
    assert time.monotonic() - t0 < 1 and not ka.freed and not b.stalled
  finally: flag.cpu()[:4] = (7).to_bytes(4, "little")
  b.synchronize()
  a.synchronize()
  assert ka.freed and np.all(x.numpy(np.uint32) == 5)


def test_a_dropped_graph_still_counts_on_a_peer_buffer(pair):
  """A graph of B writes A's mapped buffer behind a kernel that spins; dropped while it runs, its replay still
  counts: A's copy out of the buffer waits for it and reads what it wrote."""
  import gc, threading
  from rawgpu.hcq.graph import Graph
  a, b = pair
  spin, fill = prog(b, "spin"), prog(b, "fill")
  x = a.alloc(4 * 64)
  b.map(x)
  flag, done = b.alloc(4, host=True), b.alloc(4, host=True)
  flag.cpu()[:4] = (7).to_bytes(4, "little")
  g = Graph(b).exec(spin, flag, 7, done, global_size=1, local_size=32).exec(fill, x, 5, 64, local_size=64)
  b.wait_timeline(g.replay())
  x.copyin(np.zeros(64, np.uint32))
  flag.cpu()[:4] = bytes(4)
  t = g.replay()
  del g
  gc.collect()
  threading.Timer(0.2, lambda: flag.cpu().__setitem__(slice(0, 4), (7).to_bytes(4, "little"))).start()
  assert np.all(x.numpy(np.uint32) == 5) and b.done(t)
  x.free()



def test_a_queue_is_submitted_only_to_the_device_it_was_built_for(pair):
  """Its packets hold that device's addresses: submitted to another board it used to fault there later, elsewhere."""
  a, b = pair
  s = a.new_signal("a's")
  for q in (a.compute_queue().signal(s, 5), a.copy_queue().signal(s, 5)):
    with pytest.raises(RawGPUError, match=f"this queue was built for {re.escape(str(a))}"): q.submit(b)
  assert s.value == 0
  b.alloc(64).copyin(b"x" * 64).numpy()   # b is fine


def test_recover_after_the_graphs_device_was_closed():
  """A graph of A with a node on B; A closed; B hangs and recovers. A's close waits for B's share, which still polls
  A's signal after A's ticket (B faulted on A's unmapped memory); the graph's recover hook leaves A's signals alone (it
  raised "the device is closed" out of B.recover(), and the hooks after it did not run)."""
  need_firmware()
  from rawgpu.errors import DeviceTimeout
  from rawgpu.hcq.device import Device
  from rawgpu.hcq.graph import Graph
  b, a = Device("MOCKPCI:3+AMD"), Device("MOCKPCI:2+AMD")
  try:
    fa, fb = (d.program(kernels.path(d.props.arch, "fill").read_bytes()) for d in (a, b))
    xa, yb = a.alloc(256), b.alloc(256)
    g = Graph(a).exec(fa, xa, 1, 64, local_size=64).exec(fb, yb, 2, 64, local_size=64).exec(fa, xa, 3, 64, local_size=64)
    a.wait_timeline(g.replay(), timeout_ms=5000)
    a.close()
    gate, v = b.new_signal("never written"), b.next_timeline("compute")
    b.compute_queue().wait(gate, 1).signal(b.timeline, b.timeline_gpu(v)).submit(b)
    with pytest.raises(DeviceTimeout): b.synchronize(timeout_ms=200)
    b.recover()
    assert not b.faulted and not b.stalled
    fb(yb, 5, 64, local_size=64, wait=True)
    assert list(yb.numpy(np.uint32)[:2]) == [5, 5]
  finally:
    a.close(); b.close()


def test_a_busy_or_hung_peer_does_not_hold_up_close():
  """close() waits for the peers' queued work on its memory for a second in all: B's own long work (here a kernel
  spinning until the host lets it go, on a buffer of A that B mapped) holds A's close no longer, nor is B marked
  stalled by it."""
  need_firmware()
  from rawgpu.hcq.device import Device
  b, a = Device("MOCKPCI:3+AMD"), Device("MOCKPCI:2+AMD")
  try:
    spin = b.program(kernels.path(b.props.arch, "spin").read_bytes())
    flag, done = b.alloc(4096, host=True), a.alloc(4096, host=True)
    flag.cpu()[:4] = bytes(4)
    b.map(done)
    spin(flag, 7, done, global_size=1, local_size=32)
    t0 = time.monotonic()
    a.close()
    assert time.monotonic() - t0 < 2 and not b.stalled
  finally:
    flag.cpu()[:4] = (7).to_bytes(4, "little")
    b.close()


def _held(dev, seconds: float = 0.3):
  """Hold dev's queues with a kernel that spins until the returned release() (or `seconds`) lets it go."""
  import threading
  spin = dev.program(kernels.path(dev.props.arch, "spin").read_bytes())
  flag, done = dev.alloc(4, host=True), dev.alloc(4, host=True)
  flag.cpu()[:4] = bytes(4)
  spin(flag, 7, done, global_size=1, local_size=32)
  release = lambda: flag.cpu().__setitem__(slice(0, 4), (7).to_bytes(4, "little"))
  threading.Timer(seconds, release).start()
  return release


def test_closing_a_device_waits_for_a_peers_queued_copy_of_its_memory():
  """B's copy out of A's buffer is queued behind a kernel that holds B for 0.5 s; A's close waits for it (as freeing
  the buffer would) before its memory goes. It released the memory at once, and B's copy engine faulted on it."""
  need_firmware()
  from rawgpu.hcq.device import Device
  b, a = Device("MOCKPCI:3+AMD"), Device("MOCKPCI:2+AMD")
  try:
    x, d = a.alloc(1 << 20).copyin(np.full(1 << 20, 3, np.uint8)), b.alloc(1 << 20)
    _held(b, 0.5)
    b.transfer(d, x)
    t0 = time.monotonic()
    a.close()
    assert time.monotonic() - t0 >= 0.3
    b.synchronize()
    assert not b.faulted and np.all(d.numpy() == 3)
  finally:
    a.close(); b.close()


def test_a_transfer_between_buffers_of_one_device_waits_for_a_peers_queued_write():
  """B's copy into A's buffer x is queued behind a kernel that holds B for 0.3 s; A's own transfer out of x waits
  for it, as A's copyout does. It copied x's old contents."""
  need_firmware()
  from rawgpu.hcq.device import Device
  b, a = Device("MOCKPCI:3+AMD"), Device("MOCKPCI:2+AMD")
  try:
    n = 1 << 20
    src = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8)
    x, y, s = a.alloc(n).copyin(np.zeros(n, np.uint8)), a.alloc(n).copyin(np.zeros(n, np.uint8)), b.alloc(n).copyin(src)
    _held(b)
    b.transfer(x, s)
    a.transfer(y, x)
    assert np.array_equal(y.numpy(), src)
  finally:
    a.close(); b.close()


@pytest.mark.parametrize("iface", ["MOCKPCI", "MOCKKFD"])
def test_closing_a_faulted_device_lets_its_graphs_peer_share_finish(iface):
  """A graph on A faults there; its share on B waits on A's signal. A's close (no recover: on KFD there is none)
  released the memory under B's waiting queue: B faulted, and on KFD was lost for the process. Now close releases
  the waits first, as recover() does, and B finishes and goes on."""
  need_firmware()
  from rawgpu.errors import DeviceFault
  from rawgpu.hcq.device import Device
  from rawgpu.hcq.graph import Graph
  b, a = Device(f"{iface}:7+AMD"), Device(f"{iface}:6+AMD")   # (boards of their own: KFD keeps A stopped)
  try:
    data = np.arange(256, dtype=np.uint32)
    x, y = a.alloc(data.nbytes, cpu_access=True).copyin(data), b.alloc(data.nbytes)
    b.map(x)
    g = Graph(a)
    g.exec(prog(a, "fault", "fault_store"), g.input("addr"), 3).copy(y, x, on=b)
    with pytest.raises(DeviceFault): a.wait_timeline(g.replay(addr=0xdead0000000), timeout_ms=5000)
    a.close()
    b.synchronize(timeout_ms=5000)
    assert not b.faulted
    fill = prog(b, "fill")
    fill(y, 5, 256, local_size=256, wait=True, timeout_ms=5000)
    assert np.all(y.numpy(np.uint32) == 5)
  finally:
    a.close(); b.close()


def test_a_queue_runs_only_where_it_was_built_and_while_its_peer_signals_are_there():
  """bind() to another device is refused, as submit() is (B's GPU fetched A's addresses and faulted); a queue that
  waits on a peer's signal is refused once the peer is closed (B's CP faulted on the unmapped page)."""
  need_firmware()
  from rawgpu.hcq.device import Device
  b, a = Device("MOCKPCI:3+AMD"), Device("MOCKPCI:2+AMD")
  try:
    with pytest.raises(RawGPUError, match="this queue was built for"): a.compute_queue().signal(a.new_signal(), 1).bind(b)
    sa = a.new_signal("sa")
    b.map(sa)
    q = b.compute_queue().wait(sa, 0)
    a.close()
    with pytest.raises(RawGPUError, match="which is closed; build a new queue"): q.submit(b)
    with pytest.raises(RawGPUError, match="which is closed"): b.compute_queue().wait(sa, 0)
    b.synchronize()
    assert not b.faulted
  finally:
    a.close(); b.close()


def test_a_graph_replay_refuses_what_a_closed_peer_took_with_it():
  """A graph on A that copies from B's buffer (mapped to A): once B is closed its memory, and A's mapping of it, are
  gone, so the replay is refused as a transfer would be. It ran, and A's copy engine faulted on the unmapped page."""
  need_firmware()
  from rawgpu.hcq.device import Device
  from rawgpu.hcq.graph import Graph
  b, a = Device("MOCKPCI:3+AMD"), Device("MOCKPCI:2+AMD")
  try:
    ra, zb = a.alloc(4096), b.alloc(4096).copyin(np.arange(1024, dtype=np.uint32))
    a.map(zb)
    g = Graph(a).copy(ra, zb)
    a.wait_timeline(g.replay(), timeout_ms=5000)
    assert list(ra.numpy(np.uint32)[:4]) == [0, 1, 2, 3]
    b.close()
    with pytest.raises(RawGPUError, match=f"graph replay: .*, recorded in the graph, belonged to {re.escape(str(b))}, which is closed"): g.replay()
    x = a.alloc(4096, host=True)
    assert not a.faulted
    a.transfer(ra, x)   # A's engines go on
    a.synchronize()
  finally:
    a.close(); b.close()


def test_a_graph_pointer_input_must_reach_every_device_that_takes_it(pair):
  """One input taken by a kernel on A and one on B: a buffer of A that B does not map is refused before anything is
  queued, as a launch on B is. Only the first site's device was checked: B's kernel wrote through an unmapped
  address (a fault on B, and a replay that never ended)."""
  a, b = pair
  from rawgpu.hcq.graph import Graph
  fa, fb = prog(a, "fill"), prog(b, "fill")
  mapped, unmapped = a.alloc(1024), a.alloc(1024)
  b.map(mapped)
  g = Graph(a)
  x = g.input("x")
  g.exec(fa, x, 1, 256, local_size=256).exec(fb, x, 2, 128, local_size=128)
  a.wait_timeline(g.replay(x=mapped), timeout_ms=10_000)
  assert list(mapped.numpy(np.uint32)[[0, 127, 128, 255]]) == [2, 2, 1, 1]
  ticket = a.timeline_value
  if one_board(a, b): pytest.skip("two XCCs of one board share its page tables: every buffer of A reaches B")
  with pytest.raises(RawGPUError, match=f"argument #0 .* lives on {re.escape(str(a))}, not mapped to {re.escape(str(b))}"): g.replay(x=unmapped)
  assert a.timeline_value == ticket   # refused before a ticket was taken
  a.wait_timeline(g.replay(x=mapped), timeout_ms=10_000)   # the graph goes on with a buffer both reach
  b.synchronize()
