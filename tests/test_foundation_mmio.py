import pytest
from rawgpu.drivers.mmio import HookMMIO, MemMMIO
from rawgpu.errors import RawGPUError


def test_mem_widths_and_views():
  buf = bytearray(64)
  m = MemMMIO(buf)
  m.write(0, 0x11223344)
  assert buf[:4] == bytes([0x44, 0x33, 0x22, 0x11])
  m.write64(8, 0x0102030405060708)
  assert m.read32(8) == 0x05060708 and m.read32(12) == 0x01020304 and m.read(8, 1) == 8 and m.read(10, 2) == 0x0506
  m.write(16, 0x1ff, 1)  # truncated to the width, like a byte store
  assert buf[16] == 0xff
  sub = m.view(8, 16)
  assert sub.read64(0) == 0x0102030405060708
  sub.write32(4, 0xdeadbeef)
  assert m.read32(12) == 0xdeadbeef
  words = m.cast("I")
  words[5] = 7
  assert m.read32(20) == 7 and len(words) == 16


@pytest.mark.parametrize("off,width", [(64, 4), (62, 4), (-4, 4), (2, 4), (0, 3)])
def test_mem_bounds(off, width):
  with pytest.raises(RawGPUError): MemMMIO(bytearray(64)).read(off, width)


def test_subview_bounds():
  with pytest.raises(RawGPUError): MemMMIO(bytearray(64)).view(60, 8)


def test_hooks_called_with_absolute_offsets():
  log = []
  h = HookMMIO(0x1000, lambda off, w: (log.append(("r", off, w)), off)[1], lambda off, w, v: log.append(("w", off, w, v)))
  sub = h.view(0x100, 0x100)
  sub.write32(4, 0x12345678)
  assert sub.read(8, 2) == 0x108
  regs = sub.cast("I")
  regs[3] = 5
  assert regs[3] == 0x10c
  assert log == [("w", 0x104, 4, 0x12345678), ("r", 0x108, 2), ("w", 0x10c, 4, 5), ("r", 0x10c, 4)]
  with pytest.raises(RawGPUError): sub.read32(0x100)
