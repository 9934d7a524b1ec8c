from array import array
import functools
import pytest
from rawgpu.drivers.iface import HWRing, Mem
from rawgpu.drivers.mmio import MemMMIO
from rawgpu.errors import DeviceTimeout, RawGPUError
from rawgpu.hcq.patch import Var, locate
from rawgpu.hcq.queue import HWQueue
from rawgpu.hcq.ring import Ring


def release(addr: int, value: int, flags: int = 7) -> list[int]:
  # a packet shaped like RELEASE_MEM: header, control, address lo/hi (dword aligned, 16-bit high part), data lo/hi
  return [0xc0064900, flags, addr & 0xfffffffc, (addr >> 32) & 0xffff, value & 0xffffffff, value >> 32]


def test_locate_finds_lo_and_hi_words():
  words, slots = locate(release, dict(addr=Var("sig"), value=Var("val"), flags=3))
  assert sorted(slots) == [(2, "sig", 0), (3, "sig", 32), (4, "val", 0), (5, "val", 32)]
  assert words[:2] == [0xc0064900, 3] and words[2:] == [0, 0, 0, 0]


def test_locate_refuses_packed_fields():
  with pytest.raises(RawGPUError, match="not a whole dword"):
    locate(lambda n: [0xc0001000 | ((n & 0x3fff) << 16)], dict(n=Var("n", 32)))
  with pytest.raises(RawGPUError, match="length"):
    locate(lambda n: [0] * (n & 7 or 1) + [0] * ((n >> 12) & 1), dict(n=Var("n", 32)))


class Q(HWQueue):
  def signal(self, addr, value): return self._add(release, addr=addr, value=value)


def test_patch_only_changed_slots():
  q = Q().signal(Var("a"), Var("v")).signal(0x1000, 5)
  with pytest.raises(RawGPUError, match="no value"): q.patch({"a": 0x2000})
  q.patch({"a": 0x12_3456_7000, "v": 0x1_0000_0002})
  w = q.words()
  assert w[2:6] == [0x3456_7000, 0x12, 2, 1] and w[6:] == release(0x1000, 5)
  q._words[2] = 0xdead  # a slot whose value does not change must not be rewritten
  q.patch({"a": 0x12_3456_7000, "v": 9})
  assert q._words[2] == 0xdead and q._words[4] == 9
  with pytest.raises(RawGPUError, match="no patch slot"): q.patch({"zz": 1})
  with pytest.raises(RawGPUError, match="already"): q.signal(0, 0)


def make_ring(size_dw: int, unit: int = 4):
  ring = bytearray(size_dw * 4)
  ptrs = memoryview(bytearray(16)).cast("Q")
  doorbell = memoryview(bytearray(8)).cast("Q")
  hw = HWRing("compute", Mem(0x1000, len(ring), MemMMIO(ring)), ptrs[0:1], ptrs[1:2], doorbell, unit)
  return Ring(hw, lambda ms: None, lambda: None, "test ring"), ring, ptrs, doorbell


def test_slot_writers_write_what_patch_writes():
  """The launch path's writers: a 64-bit slot whose lo/hi dwords sit side by side is one 8-byte store (a bare C call),
  a 32-bit slot a masked 4-byte one; written through them the words equal what patch() writes."""
  q = Q().signal(Var("a"), Var("v"))
  assert isinstance(q.slot_writer("v"), functools.partial) and q.slot_writer("v").args[1] == 16
  assert q.slot_writer("a").args[1] == 8
  assert q.slot_writer("none") is None
  q32, ref32 = Q().signal(0x1000, Var("n", 32)), Q().signal(0x1000, Var("n", 32))
  q32.slot_writer("n")(0x1_2345_6789)   # masked to the slot's 32 bits (its caller checked the value)
  with pytest.raises(RawGPUError, match="'n' is a 32-bit field"): ref32.patch({"n": 0x1_2345_6789})   # patch() refuses it
  ref32.patch({"n": 0x2345_6789})
  assert q32.words() == ref32.words()
  ref = Q().signal(Var("a"), Var("v"))
  ref.patch({"a": 0x12_3456_7000, "v": 0xfedc_ba98_7654_3210})
  for name, v in (("a", 0x12_3456_7000), ("v", 0xfedc_ba98_7654_3210)): q.slot_writer(name)(v)
  assert q.words() == ref.words()


@pytest.mark.parametrize("unit", [4, 1])
def test_ring_wraps_and_publishes(unit):
  r, ring, ptrs, db = make_ring(16, unit)
  words = memoryview(ring).cast("I")
  r.push(array("I", range(100, 110)))
  assert list(words[:10]) == list(range(100, 110)) and ptrs[0] == 10 * 4 // unit == db[0]
  ptrs[1] = ptrs[0]  # the engine consumed everything
  r.push(list(range(200, 210)))  # straddles the end: 6 at the tail, 4 at the start
  assert list(words[10:16]) == list(range(200, 206)) and list(words[0:4]) == list(range(206, 210))
  assert ptrs[0] == 20 * 4 // unit == db[0]


def test_ring_accepts_wrapped_read_pointer():
  r, ring, ptrs, db = make_ring(16)
  for _ in range(5):
    r.push([7] * 10)
    ptrs[1] = r.put % 16  # this engine reports its read pointer modulo the ring size
  assert r.put == 50 and r._room() == 15


def test_ring_full_times_out(monkeypatch):
  import rawgpu.hcq.ring as ringmod
  r, *_ = make_ring(8)
  r.push([1] * 7)  # one dword always stays free
  t = iter(range(0, 1000, 20))
  monkeypatch.setattr(ringmod.time, "monotonic", lambda: next(t))
  with pytest.raises(Exception, match="ring full"): r.push([2])


def test_ring_full_waits_while_the_engine_reads_on(monkeypatch):
  """The time limit counts from the read pointer's last move: an engine that frees the ring slowly (a long backlog, a
  slow kernel) is waited for however long it takes; one that stops moving is hung."""
  import rawgpu.hcq.ring as ringmod
  r, _ring, ptrs, _db = make_ring(8)
  r.push([1] * 7)
  now = [0.0]
  monkeypatch.setattr(ringmod.time, "monotonic", lambda: now[0])
  def slow_engine(ms):   # each look: 3 s pass; the engine reads one dword every other look, for 12 looks
    now[0] += 3
    if now[0] <= 36 and int(now[0]) % 6 == 0: ptrs[1] += 1
  r.sleep = slow_engine
  r.push([2] * 6)         # needs 6 free dwords: 36 s in all, never 10 s without a move
  assert now[0] == 36 and r.put == 13
  with pytest.raises(DeviceTimeout, match="ring full for 10 s"): r.push([3] * 7)   # now it never moves again
  with pytest.raises(RawGPUError, match="does not fit the ring"): r.push([4] * 9)


def test_hcq_exports_its_classes_lazily():
  import rawgpu.hcq as hcq
  from rawgpu.hcq.device import Device
  from rawgpu.hcq.graph import Graph
  assert hcq.Device is Device and hcq.Graph is Graph and hcq.Var is Var and hcq.HWQueue is HWQueue
  assert {hcq.Buffer.__name__, hcq.Signal.__name__, hcq.Profiler.__name__} == {"Buffer", "Signal", "Profiler"}
  with pytest.raises(AttributeError, match="Nothing"): hcq.Nothing


def test_a_var_is_a_named_slot_of_32_or_64_bits():
  for args in (("v", 16), (3,), ("",)):
    with pytest.raises(RawGPUError, match="patch slot"): Var(*args)
  assert Var("v", 32).width == 32
