"""The driver sees only the PCI interface of the emulated board: it never imports the model, and the only path from
its objects to the model runs through the hardware boundary (register/doorbell mappings, the OS seam, host RAM)."""
import ast, gc, pathlib, sys
from rawgpu.drivers.emu.amd import AMDBoard
from rawgpu.drivers.emu.pcibus import HostRAM, VirtualBus
from rawgpu.drivers.mmio import HookArray, HookMMIO
from rawgpu.drivers.system import System

ROOT = pathlib.Path(__file__).resolve().parent.parent
BOUNDARY = (HookMMIO, HookArray, System, HostRAM)  # what a real driver holds too: mappings (and typed views over them), the OS, memory


def reachable(root) -> set[int]:
  seen, todo = {id(root)}, [root]
  while todo:
    obj = todo.pop()
    if isinstance(obj, BOUNDARY): continue
    for r in gc.get_referents(obj):
      if id(r) not in seen and not isinstance(r, (type, type(sys))):  # classes and modules: shared code, not state
        seen.add(id(r)); todo.append(r)
  return seen


def test_driver_and_hcq_never_import_the_model():
  for pkg in ("drivers/am", "drivers/kfd", "hcq"):
    for f in (ROOT / pkg).rglob("*.py"):
      for node in ast.walk(ast.parse(f.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        assert not any(n.startswith("rawgpu.drivers.emu") for n in names), f"{f.relative_to(ROOT)} imports the emulator"


def test_am_driver_holds_no_reference_to_the_model(firmware_dir, monkeypatch):
  monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", firmware_dir)
  from rawgpu.drivers.am import AMIface
  vb = VirtualBus(HostRAM(1 << 28))
  board = AMDBoard(arch="gfx1100", host=vb.host, vram_size=256 << 20)
  it = AMIface(vb.plug(board), vb.system)
  try:
    ring = it.create_ring("compute", 0x1000)
    held = reachable({"iface": it, "ring": ring})
    for part in (board, board.gmc, board.gfx, board.psp, board.smu, board.regs, board.sdma):
      assert id(part) not in held, f"the driver reaches the board's {type(part).__name__} outside the PCI interface"
  finally: it.close()
