"""The boards AM drives, by PCI id, and the LLVM target of each GC version."""
from __future__ import annotations
from dataclasses import dataclass

AMD_VENDOR = 0x1002


@dataclass(frozen=True)
class Board:
  name: str
  chip: str
  xccs: int = 1   # compute partitions AM makes of it (MI300: each XCC one, as amdgpu's CPX mode): a device each


# PCI ids from the Linux amdgpu_drv.c pciidlist families and the pci.ids database; IP versions come from discovery.
BOARDS: dict[int, Board] = {
  0x744c: Board("Radeon RX 7900 XTX / XT", "Navi31"), 0x7448: Board("Radeon Pro W7900", "Navi31"),
  0x745e: Board("Radeon Pro W7800", "Navi31"), 0x747e: Board("Radeon RX 7800 XT / 7700 XT", "Navi32"),
  0x7480: Board("Radeon RX 7600", "Navi33"), 0x7550: Board("Radeon RX 9070 XT / 9070", "Navi48"),
  0x7590: Board("Radeon RX 9060 XT", "Navi44"),
}

# Boards whose support is being written (drivers/emu/amd/MI300.md): AM opens them only with RAWGPU_AM_IN_PROGRESS=1 and
# runs what is written (on MI300X: compute on one XCC, two copy engines). Not offered to real-hardware scans.
IN_PROGRESS: dict[int, Board] = {0x74a1: Board("Instinct MI300X", "Aqua Vanjaram", xccs=8)}

def board_list() -> str:
  """The boards AM supports, for errors that name them."""
  return ", ".join(f"{d:04x} {b.name}" for d, b in BOARDS.items())


def xccs_of(device: int) -> int:
  """How many devices AM makes of a board with this PCI device id (its XCCs on MI300, else 1)."""
  return (BOARDS.get(device) or IN_PROGRESS.get(device) or Board("", "")).xccs


GC_ARCH = {(11, 0, 0): "gfx1100", (11, 0, 2): "gfx1102", (11, 0, 3): "gfx1101", (12, 0, 0): "gfx1200", (12, 0, 1): "gfx1201",
           (9, 4, 3): "gfx942"}


def arch_of(gc: tuple[int, int, int]) -> str | None: return GC_ARCH.get(tuple(gc))  # type: ignore[arg-type]
