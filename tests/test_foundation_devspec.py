import pytest
from rawgpu.drivers.devspec import DevSpec, parse_dev
from rawgpu.errors import DeviceSpecError

GOOD = {
  "AMD": DevSpec("AMD"),
  "PCI+AMD": DevSpec("AMD", "PCI"),
  "KFD+AMD": DevSpec("AMD", "KFD"),
  "USB+AMD": DevSpec("AMD", "USB"),
  "MOCKPCI+AMD": DevSpec("AMD", "MOCKPCI"),
  "MOCKPCI+AMD::gfx1201": DevSpec("AMD", "MOCKPCI", arch="gfx1201"),
  "MOCKPCI+AMD::gfx942": DevSpec("AMD", "MOCKPCI", arch="gfx942"),   # in progress: AM opens it with RAWGPU_AM_IN_PROGRESS=1
  "PCI:0-3+AMD": DevSpec("AMD", "PCI", (0, 1, 2, 3)),
  "PCI:1,3+AMD": DevSpec("AMD", "PCI", (1, 3)),
  "NVK+NV": DevSpec("NV", "NVK"),
  "PCI+NV": DevSpec("NV", "PCI"),
  "AMD:LLVM:gfx1100": DevSpec("AMD", renderer="LLVM", arch="gfx1100"),
  "mockpci+amd": DevSpec("AMD", "MOCKPCI"),
}


@pytest.mark.parametrize("text", GOOD)
def test_good(text):
  spec = parse_dev(text)
  assert spec == GOOD[text]
  assert parse_dev(str(spec)) == spec  # the printed form parses back to the same value


@pytest.mark.parametrize("text,words", [
  ("", "empty"), ("+AMD", "nothing before"), ("FOO+AMD", "unknown interface"), ("PCI+INTEL", "unknown vendor"),
  ("PCI:3-1+AMD", "backwards"), ("PCI:a+AMD", "bad device index"), ("PCI:1,1+AMD", "repeated"),
  ("AMD::gfx9000", "unknown arch"), ("AMD:FOO", "unknown renderer"), ("MOCKUSB+AMD::gfx942", "emulated"),
  ("NVK+AMD", "unknown interface"), ("AMD:LLVM:gfx1100:x", "too many"),
  ("MOCKPCI+AMD:gfx1201", r"gfx1201 is an arch: VENDOR::ARCH, with two colons, e\.g\. AMD::gfx1201"),
])
def test_bad(text, words):
  with pytest.raises(DeviceSpecError, match=words) as e: parse_dev(text)
  assert "valid" in str(e.value) or words in str(e.value)


def test_emulated_flag():
  assert parse_dev("MOCKPCI+AMD").emulated and not parse_dev("PCI+AMD").emulated and not parse_dev("AMD").emulated


def test_an_in_progress_board_is_named_as_such():
  with pytest.raises(DeviceSpecError, match=r"models gfx1100, gfx1201 \(gfx942: in progress, with RAWGPU_AM_IN_PROGRESS=1\), not gfx1101"):
    parse_dev("MOCKPCI+AMD::gfx1101")


@pytest.mark.parametrize("iface", ["MOCKPCI", "MOCKKFD"])
def test_an_emulated_in_progress_board_asks_for_the_flag(iface, monkeypatch):
  """The emulated MI300X is booted by AM (MOCKKFD's kernel too): without RAWGPU_AM_IN_PROGRESS the error says to set
  it, before any board is made (it told users of an emulated board to "use KFD+AMD instead")."""
  from rawgpu.drivers.select import open_ifaces
  monkeypatch.delenv("RAWGPU_AM_IN_PROGRESS", raising=False)
  with pytest.raises(DeviceSpecError, match=f"DEV={iface}\\+AMD::gfx942: the emulated gfx942 is booted by AM, .*set RAWGPU_AM_IN_PROGRESS=1"):
    open_ifaces(f"{iface}+AMD::gfx942")


def test_the_pci_scan_names_the_boards_am_supports(fake_pci):
  from rawgpu.drivers.am.boards import BOARDS
  from rawgpu.drivers.select import _amd_pci
  from rawgpu.errors import DeviceNotFound
  with pytest.raises(DeviceNotFound) as e: _amd_pci(parse_dev("PCI+AMD"), fake_pci({"0000:03:00.0": dict(vendor=0x1002, device=0x1478)}))
  assert all(f"{d:04x} {b.name}" in str(e.value) for d, b in BOARDS.items())
