"""Open interfaces for a DEV spec: the named one, or the real ones in order, saying why each was not usable."""
from __future__ import annotations
from rawgpu.drivers.devspec import REAL_IFACES, DevSpec, parse_dev
from rawgpu.drivers.iface import Iface
from rawgpu.errors import DeviceNotFound, DeviceSpecError, RawGPUError


def _amd_pci(spec: DevSpec, system=None) -> list[Iface]:
  from rawgpu.drivers import pci
  from rawgpu.drivers.am import supported
  from rawgpu.drivers.system import SYSTEM
  system = system or SYSTEM
  boards = [i for i in pci.scan(vendor=0x1002, system=system) if supported(i)]
  if not boards:
    from rawgpu.drivers.am.boards import board_list
    raise DeviceNotFound(f"no supported AMD board on the PCI bus (supported: {board_list()})")
  return _am_partitions(spec, [i.bus for i in boards], system)


def _am_partitions(spec: DevSpec, buses: list[str], system) -> list[Iface]:
  """AM's devices: a board each, or on MI300 each XCC of a board (a partition, as KFD lists CPX nodes) in order."""
  from rawgpu.drivers import pci
  from rawgpu.drivers.am import AMIface
  from rawgpu.drivers.am.boards import xccs_of
  parts = [(bus, x) for bus in buses for x in range(xccs_of(pci.info(bus, system).device))]
  return [AMIface(parts[i][0], system, xcc=parts[i][1]) for i in _pick(spec, len(parts))]


def _emulated_arch(spec: DevSpec) -> str:
  """The arch of the emulated boards spec asks for; one whose AM support is in progress needs the flag that opens it
  (the emulated kernel, too, boots its boards with AM)."""
  import os
  from rawgpu.drivers.devspec import IN_PROGRESS_ARCHS
  arch = spec.arch or "gfx1100"
  if arch in IN_PROGRESS_ARCHS.get(spec.iface, ()) and os.environ.get("RAWGPU_AM_IN_PROGRESS") != "1":
    raise DeviceSpecError(f"DEV={spec}: the emulated {arch} is booted by AM, whose support for it is in progress "
                          "(drivers/emu/amd/MI300.md): set RAWGPU_AM_IN_PROGRESS=1 to open it as far as it goes")
  return arch


def _amd_mockpci(spec: DevSpec) -> list[Iface]:
  from rawgpu.drivers.emu.mockpci import virtual_boards
  from rawgpu.drivers.am.boards import xccs_of
  from rawgpu.drivers.emu.amd.asic import asic
  arch = _emulated_arch(spec)
  per = xccs_of(asic(arch).device)   # MI300: a device per XCC
  want = max(spec.indices) + 1 if spec.indices else 1
  vbus, buses = virtual_boards(arch, -(-want // per))
  return _am_partitions(spec, buses, vbus.system)


def _amd_kfd(spec: DevSpec, system=None) -> list[Iface]:
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.drivers.kfd.topology import gpu_nodes
  from rawgpu.drivers.system import SYSTEM
  system = system or SYSTEM
  KFDIface.check_present(system)
  return [KFDIface(i, system) for i in _pick(spec, len(gpu_nodes(system)))]


def _amd_mockkfd(spec: DevSpec) -> list[Iface]:
  from rawgpu.drivers.emu.mockkfd import mock_kfd
  from rawgpu.drivers.kfd import KFDIface
  want = max(spec.indices) + 1 if spec.indices else 1
  system = mock_kfd(_emulated_arch(spec), want)
  return [KFDIface(i, system) for i in _pick(spec, want)]


def _pick(spec: DevSpec, n: int) -> list[int]:
  idx = list(spec.indices) if spec.indices else [0]
  if max(idx) >= n: raise DeviceNotFound(f"DEV={spec}: device index {max(idx)} asked for, but only {n} device(s) found")
  return idx


OPENERS = {("AMD", "PCI"): _amd_pci, ("AMD", "MOCKPCI"): _amd_mockpci, ("AMD", "KFD"): _amd_kfd, ("AMD", "MOCKKFD"): _amd_mockkfd}


def open_ifaces(spec: str | DevSpec) -> list[Iface]:
  """Interfaces for the devices `spec` selects (one per index). No fallback to an emulated device, ever."""
  spec = parse_dev(spec) if isinstance(spec, str) else spec
  if spec.iface is not None:
    opener = OPENERS.get((spec.vendor, spec.iface))
    if opener is None: raise DeviceSpecError(f"DEV={spec}: the {spec.iface} interface for {spec.vendor} is not implemented yet; implemented: {', '.join(f'{i}+{v}' for v, i in OPENERS)}")
    return opener(spec)
  why = []
  for name in REAL_IFACES[spec.vendor]:
    opener = OPENERS.get((spec.vendor, name))
    if opener is None: why.append(f"{name}: not implemented yet"); continue
    try: return opener(DevSpec(spec.vendor, name, spec.indices, spec.renderer, spec.arch))
    except RawGPUError as e: why.append(f"{name}: {e}")
  raise DeviceNotFound(f"no {spec.vendor} device usable:\n  " + "\n  ".join(why) + "\n(the emulated GPU is available with DEV=MOCKPCI+AMD)")
