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


def firmware_or_skip() -> str:
  """The firmware directory; skips (with the reason) where the real firmware is not fetched (CI fetches it with
  .ci/fetch-firmware)."""
  d = find_firmware()
  if d is None: pytest.skip("AMD firmware not found: run .ci/fetch-firmware (Debian firmware-amd-graphics) or set RAWGPU_FIRMWARE_DIR")
  return d


@pytest.fixture
def firmware_dir(): return firmware_or_skip()


# Every device hcq's end-to-end suites run on: both interfaces, both RDNA boards, and MI300X (gfx942), whose AM support
# is in progress (drivers/emu/amd/MI300.md) and opens with RAWGPU_AM_IN_PROGRESS=1; an MI300 device is an XCC of the
# board (a CPX partition), so XCC 5 too.
HCQ_TARGETS = [f"{iface}+AMD::{arch}" for iface in ("MOCKPCI", "MOCKKFD") for arch in ("gfx1100", "gfx1201", "gfx942")]
HCQ_TARGETS += ["MOCKPCI:5+AMD::gfx942", "MOCKKFD:5+AMD::gfx942"]


def need_firmware() -> None:
  """Skips where the firmware is absent; else points RAWGPU_FIRMWARE_DIR at it for the boards tests open."""
  os.environ.setdefault("RAWGPU_FIRMWARE_DIR", firmware_or_skip())


def open_hcq_target(spec: str):
  """Open `spec` for a module of tests (skips where the firmware is absent); yields the Device, closes it after."""
  need_firmware()
  from rawgpu.hcq.device import Device
  mp = pytest.MonkeyPatch()
  if spec.endswith("gfx942"): mp.setenv("RAWGPU_AM_IN_PROGRESS", "1")
  d = Device(spec)
  yield d
  d.close()
  mp.undo()


# Pairs of devices for peer-to-peer: MOCKKFD boards of one arch share a machine (one /dev/kfd); a mixed pair needs the
# PCI bus that MOCKPCI has; the last pair is XCCs 0 and 1 of one MI300X
HCQ_PAIRS = [("MOCKPCI", "gfx1100", "gfx1100"), ("MOCKPCI", "gfx1201", "gfx1201"), ("MOCKPCI", "gfx1100", "gfx1201"),
             ("MOCKKFD", "gfx1100", "gfx1100"), ("MOCKKFD", "gfx1201", "gfx1201"), ("MOCKPCI", "gfx942", "gfx942")]


def open_hcq_pair(iface: str, a_arch: str, b_arch: str):
  """Two distinct devices: boards 0 and 1 of one arch, or board 0 of each arch (MI300: XCCs 0 and 1); yields (a, b)."""
  need_firmware()
  from rawgpu.hcq.device import Device
  mp = pytest.MonkeyPatch()
  if a_arch == "gfx942": mp.setenv("RAWGPU_AM_IN_PROGRESS", "1")
  b = Device(f"{iface}:{1 if a_arch == b_arch else 0}+AMD::{b_arch}")
  a = Device(f"{iface}:0+AMD::{a_arch}")
  yield a, b
  b.close(); a.close()
  mp.undo()


@pytest.fixture
def bench_registry(monkeypatch):
  """rawgpu bench's registry, for a test to add benchmarks to: the real ones registered first (whichever test runs
  first), the test's gone after it; DEBUG unset, so a failing benchmark is reported, not raised."""
  import rawgpu.tools.bench.suites  # noqa: F401
  from rawgpu.tools.bench import core
  monkeypatch.setattr(core, "BENCHMARKS", dict(core.BENCHMARKS))
  monkeypatch.delenv("DEBUG", raising=False)
