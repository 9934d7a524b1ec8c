import os, subprocess, sys, tempfile, pytest
from rawgpu.drivers import pci
from rawgpu.errors import DeviceBusy, DeviceNotFound, RawGPUError

BOARDS = {
  "0000:03:00.0": dict(vendor=0x1002, device=0x744c, bars={0: 1 << 16, 2: 4096, 5: 1 << 14}),
  "0000:04:00.0": dict(vendor=0x10de, device=0x2335, bars={0: 1 << 14}, driver="nvidia"),
  "0000:05:00.0": dict(vendor=0x8086, device=0x1234, cls=0x020000),
}


def test_scan_filters(fake_pci):
  system = fake_pci(BOARDS)
  assert [i.bus for i in pci.scan(system=system)] == sorted(BOARDS)
  amd = pci.scan(vendor=0x1002, system=system)
  assert [(i.bus, i.device, i.driver) for i in amd] == [("0000:03:00.0", 0x744c, None)]
  assert [i.bus for i in pci.scan(cls_prefix=0x03, system=system)] == ["0000:03:00.0", "0000:04:00.0"]
  assert pci.scan(vendor=0x10de, system=system)[0].driver == "nvidia"
  assert pci.scan(vendor=0x1002, devices={0x7550}, system=system) == []


def test_config_and_bars(fake_pci):
  system = fake_pci(BOARDS)
  dev = pci.PCIDevice("0000:03:00.0", system)
  assert dev.config_read(0, 2) == 0x1002 and dev.config_read(2, 2) == 0x744c
  dev.enable_bus_master()
  assert dev.config_read(pci.PCI_COMMAND, 2) & pci.PCI_COMMAND_MASTER
  assert [dev.bar_size(n) for n in range(6)] == [1 << 16, 0, 4096, 0, 0, 1 << 14]
  bar = dev.map_bar(5)
  bar.write32(0x40, 0xcafe)
  assert dev.map_bar(5).read32(0x40) == 0xcafe  # a second mapping sees the same memory
  with pytest.raises(RawGPUError, match="BAR1"): dev.map_bar(1)
  with pytest.raises(RawGPUError, match="cannot map"): dev.map_bar(5, 1 << 13, 1 << 14)
  dev.close()


def test_write_combined_bar_mappings(fake_pci, tmp_path):
  """Linux offers resource<n>_wc only for a prefetchable BAR where the architecture maps WC: without it a
  write-combined mapping is a clear error, with it the mapping sees the same memory."""
  system = fake_pci(BOARDS)
  dev = pci.PCIDevice("0000:03:00.0", system)
  assert not dev.can_write_combine(0)
  with pytest.raises(RawGPUError, match="BAR0 cannot be mapped write-combined: .*resource0_wc does not exist"): dev.map_bar(0, write_combine=True)
  node = tmp_path / "sys" / "devices" / "0000:03:00.0"
  os.link(node / "resource0", node / "resource0_wc")   # the same BAR behind both files, as in sysfs
  assert dev.can_write_combine(0) and not dev.can_write_combine(5)
  dev.map_bar(0, write_combine=True).write32(0x40, 0x5eed)
  assert dev.map_bar(0).read32(0x40) == 0x5eed
  dev.close()


def test_the_virtual_bus_offers_write_combined_files_for_prefetchable_bars_only():
  from rawgpu.drivers.emu.amd.board import AMDBoard
  from rawgpu.drivers.emu.pcibus import VirtualBus
  vb = VirtualBus()
  board = AMDBoard(arch="gfx1100", host=vb.host)
  try:
    bus = vb.plug(board)
    files = set(vb.system.listdir(f"/sys/bus/pci/devices/{bus}"))
    assert {"resource0_wc", "resource2_wc"} <= files and "resource5" in files and "resource5_wc" not in files   # VRAM, doorbells; not registers
    dev = pci.PCIDevice(bus, vb.system)
    assert dev.resources()[0][2] & 0x2000 and not dev.resources()[5][2] & 0x2000   # IORESOURCE_PREFETCH
    dev.close()
  finally:
    board.close()


def test_each_mapping_of_the_virtual_vram_bar_is_its_own_and_munmap_takes_it_away():
  """As Linux maps a BAR: two mappings of VRAM alias the board's memory; munmap of one leaves private zero pages
  behind (a view kept past it reads zeros and its writes go nowhere), the other mapping and the board unchanged."""
  from rawgpu.drivers.emu.amd.board import AMDBoard
  from rawgpu.drivers.emu.pcibus import VirtualBus
  vb = VirtualBus()
  board = AMDBoard(arch="gfx1100", host=vb.host)
  try:
    dev = pci.PCIDevice(vb.plug(board), vb.system)
    whole, part = dev.map_bar(0, write_combine=True), dev.map_bar(0, 0x3000, 0x1000)
    part.write(8, 0x1234_5678)
    assert whole.read(0x3008) == 0x1234_5678 and board.vram[0x3008:0x300c].tobytes() == (0x1234_5678).to_bytes(4, "little")
    stale = part.mem
    vb.system.munmap(part)
    assert bytes(stale[:16]) == bytes(16)
    stale[8:12] = b"\xff" * 4
    assert whole.read(0x3008) == 0x1234_5678 and board.vram[0x3008:0x300c].tobytes() == (0x1234_5678).to_bytes(4, "little")
    dev.close()
  finally:
    board.close()


def test_missing_device_and_bad_bus(fake_pci):
  system = fake_pci(BOARDS)
  with pytest.raises(DeviceNotFound): pci.PCIDevice("0000:09:00.0", system)
  for bad in ("03:00.0", "0000:03:00", "0000:3:00.0", "0000:03:00.0; rm -rf /"):
    with pytest.raises(RawGPUError, match="dddd:bb:dd.f"): pci.check_bus(bad)


def test_lock_file_second_owner(tmp_path, monkeypatch):
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
  bus = "0000:03:00.0"
  lock = pci.DeviceLock("am", bus)
  assert pci.lock_owner(pci.lock_path("am", bus)) == os.getpid()
  # another process trying to take it must be told who holds it
  code = f"import tempfile; tempfile.tempdir={str(tmp_path)!r}\nfrom rawgpu.drivers import pci\ntry: pci.DeviceLock('am', {bus!r})\nexcept Exception as e: print(type(e).__name__, e)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
  assert out.startswith("DeviceBusy") and f"pid {os.getpid()}" in out
  lock.release()
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
  assert out == ""


def test_lock_refuses_planted_symlink(tmp_path, monkeypatch):
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
  target = tmp_path / "victim"
  target.write_text("precious")
  os.symlink(target, pci.lock_path("am", "0000:03:00.0"))
  with pytest.raises(RawGPUError, match="symlink"): pci.DeviceLock("am", "0000:03:00.0")
  assert target.read_text() == "precious"


def test_lock_busy_in_process(tmp_path, monkeypatch):
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
  a = pci.DeviceLock("am", "0000:03:00.0")
  with pytest.raises(DeviceBusy): pci.DeviceLock("am", "0000:03:00.0")  # flock is per open file: a second open conflicts
  a.release()
