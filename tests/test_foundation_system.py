import os, pytest
from rawgpu.drivers import pci
from rawgpu.drivers.emu.pcibus import Bar, BusError, HostRAM, VirtualBus
from rawgpu.drivers.system import SYSTEM, DirProvider, System
from rawgpu.drivers.mmio import MemMMIO
from rawgpu.errors import PermissionProblem, RawGPUError


def test_mount_routes_and_merges_listdir(tmp_path):
  (tmp_path / "a").write_text("hello")
  s = System()
  s.mount("/nonexistent/root/x", DirProvider(str(tmp_path)))
  assert s.listdir("/nonexistent/root") == ["x"] and s.exists("/nonexistent/root/x/a")
  assert s.read_text("/nonexistent/root/x/a") == "hello"
  with pytest.raises(PermissionError): DirProvider(str(tmp_path)).open("../../etc/passwd", os.O_RDONLY)


def test_real_host_memory_has_bus_addresses():
  mem = SYSTEM.alloc_host(3 * 4096)
  try: addrs = SYSTEM.bus_addresses(mem)
  except PermissionProblem as e: pytest.skip(f"not allowed to read physical addresses here: {e}")
  assert len(addrs) == 3 and all(a and a % 4096 == 0 for a in addrs)


class DummyBoard:
  vendor, device, cls = 0x1002, 0x744c, 0x030000
  def __init__(self):
    self.cfg = bytearray(4096)
    self.regs: dict[int, int] = {}
    self.vram = bytearray(1 << 16)
    self.bars = {0: Bar(1 << 16, mem=memoryview(self.vram)), 5: Bar(1 << 12, read=lambda o, w: self.regs.get(o, 0), write=self.regs.__setitem__ and (lambda o, w, v: self.regs.__setitem__(o, v)))}
  def config_read(self, off, size): return int.from_bytes(self.cfg[off:off + size], "little")
  def config_write(self, off, size, value): self.cfg[off:off + size] = value.to_bytes(size, "little")
  def reset(self): self.regs.clear()


def test_virtual_bus_presents_board_like_sysfs():
  vb = VirtualBus(HostRAM(1 << 24))
  b1, b2 = DummyBoard(), DummyBoard()
  bus1, bus2 = vb.plug(b1), vb.plug(b2)
  assert bus1 != bus2
  found = pci.scan(vendor=0x1002, system=vb.system)
  assert [i.bus for i in found] == [bus1, bus2] and found[0].driver is None
  dev = pci.PCIDevice(bus1, vb.system)
  dev.enable_bus_master()
  assert b1.cfg[4] & pci.PCI_COMMAND_MASTER and not b2.cfg[4]
  regs = dev.map_bar(5)
  regs.write32(0x10, 42)
  assert b1.regs[0x10] == 42 and regs.read32(0x10) == 42
  dev.map_bar(0).write32(0x100, 0xabcd)
  assert int.from_bytes(b1.vram[0x100:0x104], "little") == 0xabcd
  host = dev.alloc_host(8192)
  host.view.write32(4096, 0x5555)
  assert bytes(vb.host.dma(host.bus_addrs[1], 4)) == (0x5555).to_bytes(4, "little")  # the device sees what the CPU wrote
  with pytest.raises(BusError): vb.host.dma(0x1000, 4)
  vb.unplug(bus2)
  assert [i.bus for i in pci.scan(system=vb.system)] == [bus1]


def test_emulated_host_ram_maps_each_allocation_on_its_own():
  """Each allocation of emulated host RAM is a mapping of its own of the RAM the bus reaches: physical addresses
  follow it, an alias shares its pages, and freeing (or unmapping an alias) leaves zero pages behind, so a stale view
  never reaches the memory's next owner."""
  ram = HostRAM(1 << 22)
  a = ram.alloc(8192)
  a.write32(4100, 0x1234)
  pa = ram.phys(a.addr + 4096)
  assert pa == ram.phys(a.addr) + 4096 and bytes(ram.dma(pa + 4, 4)) == (0x1234).to_bytes(4, "little")
  alias = ram.alias(a)
  assert alias.addr != a.addr and alias.read32(4100) == 0x1234 and ram.phys(alias.addr) == ram.phys(a.addr)
  ram.unmap(alias)
  assert alias.read32(4100) == 0 and a.read32(4100) == 0x1234 and ram.phys(alias.addr) is None
  stale = a.mem
  ram.free(a)
  b = ram.alloc(8192)
  assert ram.phys(b.addr) == pa - 4096 and ram.phys(a.addr) is None   # the same RAM, another mapping
  b.write32(4100, 0x600d)
  stale[4100:4104] = b"\xff" * 4
  assert bytes(stale[4100:4104]) == b"\xff" * 4 and b.read32(4100) == 0x600d and bytes(ram.dma(pa + 4, 4)) == (0x600d).to_bytes(4, "little")
  with pytest.raises(ValueError, match="not the start of a mapping"): ram.unmap(a)


def test_mmap_offset_beyond_2_63_reaches_the_kernel():
  # /dev/zero accepts any offset: what matters is that the 64-bit value is passed, not refused by Python's mmap
  fd = SYSTEM.open("/dev/zero", os.O_RDWR)
  try:
    m = SYSTEM.mmap(fd, 4096, 3 << 62)
    assert m.size == 4096 and m.addr  # mapped (touching it would SIGBUS: /dev/zero has nothing that far)
  finally: SYSTEM.close(fd)


def _range_mapped(addr: int) -> bool:
  """Whether a mapping covers addr (the zero pages munmap leaves may merge with a neighbour into one entry)."""
  with open("/proc/self/maps") as f:
    for line in f:
      lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
      if lo <= addr < hi: return True
  return False


def test_a_mapping_beyond_2_63_goes_with_its_last_view():
  """KFD's doorbell and MMIO pages are mapped through libc (offsets of 2^63 and more): ended with munmap or not, the
  address range goes when the last view of it does, as Python's own mmap does (a device opened and closed again and
  again must not leak address space)."""
  import gc
  fd = SYSTEM.open("/dev/zero", os.O_RDWR)
  try:
    for end in (True, False):
      m = SYSTEM.mmap(fd, 8192, 3 << 62)
      addr, view = m.addr, m.cast("I")
      if end: SYSTEM.munmap(m)
      del m; gc.collect()
      assert _range_mapped(addr)                                                 # a view still holds it
      if end: assert view[0] == 0                                                # zero pages since munmap
      del view; gc.collect()
      assert not _range_mapped(addr)
  finally: SYSTEM.close(fd)


def _mapped(path: str) -> bool:
  with open("/proc/self/maps") as f: return any(line.rstrip().endswith(path) for line in f)


def test_munmap_drops_the_file_and_leaves_stale_views_harmless(tmp_path):
  """After munmap the file is no longer mapped (the kernel drops what the mapping held: a BO, here a file), while a
  view Python still holds reads zeros and its writes reach nothing, rather than faulting."""
  path = str(tmp_path / "backing")
  with open(path, "wb") as f: f.write(b"\x5a" * 8192)
  fd = SYSTEM.open(path, os.O_RDWR)
  try:
    m = SYSTEM.mmap(fd, 8192)
    words = m.cast("I")
    assert words[0] == 0x5a5a5a5a and _mapped(path)
    SYSTEM.munmap(m)
    assert not _mapped(path)
    assert words[0] == 0 and m.read(4096) == 0
    words[1] = 7
    assert SYSTEM.read(fd, 8, 0) == b"\x5a" * 8
    with pytest.raises(RawGPUError, match="did not make"): SYSTEM.munmap(MemMMIO(bytearray(4096)))
  finally: SYSTEM.close(fd)
