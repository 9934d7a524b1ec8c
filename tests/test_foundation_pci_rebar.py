"""Resizable BAR: the capability read from the emulated board's config space and from a fake sysfs, resizing through
`resource<n>_resize` (the file Linux exposes), and the small-BAR message."""
import struct, pytest
from rawgpu.drivers import pci
from rawgpu.errors import DeviceBusy, DeviceSpecError, RawGPUError

BUS = "0000:03:00.0"
MiB = 1 << 20


def rebar_config(vendor: int, device: int, sizes_mib: list[int], current_mib: int) -> bytes:
  """4 KiB config space with one extended capability, Resizable BAR for BAR0, laid out per the PCIe Base spec 7.8.6
  (written here from the spec, not from the code under test)."""
  cfg = bytearray(4096)
  cfg[0:4] = struct.pack("<HH", vendor, device)
  cfg[0x100:0x104] = struct.pack("<I", 0x0015 | (1 << 16))  # id 0x15, version 1, next 0
  cfg[0x104:0x108] = struct.pack("<I", sum(1 << (4 + (m.bit_length() - 1)) for m in sizes_mib))
  cfg[0x108:0x10c] = struct.pack("<I", 0 | (1 << 5) | ((current_mib.bit_length() - 1) << 8))  # BAR 0, 1 BAR, size
  return bytes(cfg)


@pytest.fixture
def rebar_dev(fake_pci, tmp_path):
  def build(driver=None, resize_node=True, sizes=(256, 512, 1024), current=256, cap=True):
    system = fake_pci({BUS: dict(vendor=0x1002, device=0x744c, bars={0: current * MiB, 5: 1 << 14}, driver=driver)})
    d = tmp_path / "sys" / "devices" / BUS
    (d / "config").write_bytes(rebar_config(0x1002, 0x744c, list(sizes), current) if cap else bytes(4096))
    if resize_node: (d / "resource0_resize").write_text(f"{sum(1 << (s.bit_length() - 1) for s in sizes):016x}\n")
    return pci.PCIDevice(BUS, system), d
  return build


def test_rebar_from_fake_sysfs_and_resize(rebar_dev):
  dev, d = rebar_dev()
  assert dev.rebar() == [pci.ResizableBar(0, (256 * MiB, 512 * MiB, 1024 * MiB), 256 * MiB)]
  dev.resize_bar(0, 512 * MiB)
  assert (d / "resource0_resize").read_text().startswith("9")  # the kernel takes log2(size in MiB)
  with pytest.raises(DeviceSpecError, match="256 MiB, 512 MiB, 1024 MiB"): dev.resize_bar(0, 2048 * MiB)
  with pytest.raises(DeviceSpecError, match="BAR5 is not resizable"): dev.resize_bar(5, 256 * MiB)


def test_resize_refused_while_a_driver_is_bound(rebar_dev):
  dev, _ = rebar_dev(driver="amdgpu")
  with pytest.raises(DeviceBusy, match="hcq-smi amd rmmod"): dev.resize_bar(0, 512 * MiB)


def test_resize_without_kernel_support(rebar_dev):
  dev, _ = rebar_dev(resize_node=False)
  with pytest.raises(RawGPUError, match="resource0_resize"): dev.resize_bar(0, 512 * MiB)


def test_no_capability(rebar_dev):
  dev, _ = rebar_dev(cap=False)
  assert dev.rebar() == [] and dev.ext_capability(0x15) is None
  with pytest.raises(DeviceSpecError, match="not resizable"): dev.resize_bar(0, 512 * MiB)


def test_small_bar_message(rebar_dev):
  dev, _ = rebar_dev()
  dev.require_bar(0, 256 * MiB)
  with pytest.raises(DeviceSpecError, match=r"Resizable BAR and Above 4G Decoding in the BIOS") as e: dev.require_bar(0, 1024 * MiB, "VRAM access")
  assert "resize_bar(0, 0x40000000)" in str(e.value) and "256 MiB" in str(e.value)


def test_small_bar_without_resizable_bar(rebar_dev):
  dev, _ = rebar_dev(cap=False)
  with pytest.raises(DeviceSpecError, match="small BAR") as e: dev.require_bar(0, 1024 * MiB)
  assert "resize_bar" not in str(e.value)


class _KernelResize:
  """What Linux does on a write to resource0_resize for the emulated board: program the capability's BAR size field."""
  def __init__(self, board): self.board = board
  def open(self, rel, flags): return self
  def listdir(self, rel): return []
  def readlink(self, rel): raise OSError(22, rel)
  def exists(self, rel): return rel == ""
  def read(self, n, offset): return b""
  def write(self, data, offset):
    off = 0x100
    while off:  # walk the extended capabilities the way pci_find_ext_capability does
      hdr = self.board.config_read(off, 4)
      if hdr & 0xffff == 0x15: break
      off = (hdr >> 20) & 0xffc
    ctrl = self.board.config_read(off + 8, 4)
    self.board.config_write(off + 8, 4, (ctrl & ~0x3f00) | (int(data) << 8))
    return len(data)
  def ioctl(self, request, buf): raise OSError(25, "ioctl")
  def mmap(self, size, offset): raise OSError(19, "mmap")
  def close(self): pass


def test_emulated_board_rebar_and_resize():
  from rawgpu.drivers.emu.pcibus import SYSFS_PCI, VirtualBus
  from rawgpu.drivers.emu.amd.board import AMDBoard
  vb = VirtualBus()
  board = AMDBoard(arch="gfx1100", host=vb.host, vram_size=1 << 30, bar0_size=256 * MiB, deterministic=True)
  try:
    bus = vb.plug(board)
    # the board offers every power of two from 256 MiB up to its VRAM (its documented model)
    dev = pci.PCIDevice(bus, vb.system)
    assert dev.rebar() == [pci.ResizableBar(0, (256 * MiB, 512 * MiB, 1024 * MiB), 256 * MiB)]
    assert dev.bar_size(0) == 256 * MiB
    # mount the kernel's resize file ahead of the board's sysfs directory (the first matching mount answers)
    devices = vb.system.mounts.pop(SYSFS_PCI)
    vb.system.mount(f"{SYSFS_PCI}/{bus}/resource0_resize", _KernelResize(board))
    vb.system.mount(SYSFS_PCI, devices)
    dev.resize_bar(0, 1024 * MiB)
    assert dev.bar_size(0) == 1024 * MiB and dev.rebar()[0].current == 1024 * MiB
    dev.require_bar(0, 1024 * MiB)
    dev.close()
  finally:
    board.close()
