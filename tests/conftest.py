import os, pytest
from rawgpu.drivers.system import DirProvider, System


def make_pci_tree(root, devices):
  """A fake /sys/bus/pci/devices: devices = {bus: dict(vendor=, device=, cls=, bars={n: size}, driver=None)}."""
  for bus, d in devices.items():
    p = os.path.join(root, bus)
    os.makedirs(p)
    for name, val in (("vendor", f"{d['vendor']:#06x}"), ("device", f"{d['device']:#06x}"), ("class", f"{d.get('cls', 0x030000):#08x}")):
      with open(os.path.join(p, name), "w") as f: f.write(val + "\n")
    cfg = bytearray(256)
    cfg[0:2], cfg[2:4] = d["vendor"].to_bytes(2, "little"), d["device"].to_bytes(2, "little")
    with open(os.path.join(p, "config"), "wb") as f: f.write(cfg)
    lines, base = [], 0xe000_0000
    for n in range(6):
      size = d.get("bars", {}).get(n, 0)
      lines.append(f"{base:#018x} {base + size - 1:#018x} 0x0000000000040200" if size else "0x0000000000000000 0x0000000000000000 0x0000000000000000")
      if size:
        with open(os.path.join(p, f"resource{n}"), "wb") as f: f.truncate(size)
        base += size
    with open(os.path.join(p, "resource"), "w") as f: f.write("\n".join(lines) + "\n")
    if d.get("driver"):
      drv = os.path.join(root, "..", "drivers", d["driver"])
      os.makedirs(drv, exist_ok=True)
      os.symlink(drv, os.path.join(p, "driver"))


@pytest.fixture
def fake_pci(tmp_path):
  def build(devices):
    root = tmp_path / "sys" / "devices"
    root.mkdir(parents=True)
    make_pci_tree(str(root), devices)
    system = System()
    system.mount("/sys/bus/pci/devices", DirProvider(str(root)))
    return system
  return build


FIRMWARE_VERSIONS = ("20250410-2", "20230210-5")  # Debian firmware-amd-graphics versions, newest first


def find_firmware(version: str | None = None) -> str | None:
  """The amdgpu firmware directory tests boot with: RAWGPU_FIRMWARE_DIR, the .ci/fetch-firmware cache, /lib/firmware."""
  if (env := os.environ.get("RAWGPU_FIRMWARE_DIR")) and version is None: return env
  cache = os.environ.get("RAWGPU_CACHE", os.path.expanduser("~/.cache/rawgpu"))
  for v in ((version,) if version else FIRMWARE_VERSIONS):
    if os.path.isdir(p := os.path.join(cache, "firmware", v, "amdgpu")): return p
  return "/lib/firmware/amdgpu" if version is None and os.path.isdir("/lib/firmware/amdgpu") else None


@pytest.fixture
def firmware_dir():
  """Skips (with the reason) where the real firmware is not fetched; CI fetches it with .ci/fetch-firmware."""
  d = find_firmware()
  if d is None: pytest.skip("AMD firmware not found: run .ci/fetch-firmware (Debian firmware-amd-graphics) or set RAWGPU_FIRMWARE_DIR")
  return d
