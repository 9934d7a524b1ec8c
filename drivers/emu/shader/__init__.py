"""The emulated shader cores (compute units) of RDNA3/RDNA4 (gfx11/gfx12) and CDNA3 (gfx942): they run real
LLVM-compiled code objects, all waves of a dispatch vectorized with numpy. Hardware, not a driver: it imports nothing
from hcq or the drivers. See README.md."""
from rawgpu.drivers.emu.shader.memory import GPUMemory, FlatMemory, MemoryFault
from rawgpu.drivers.emu.shader.dispatch import DispatchRegs, DispatchResult, run_dispatch, dispatch_slices, decode_regs
from rawgpu.drivers.emu.shader.decode import family, tables


def prepare(arch: str) -> None:
  """Load what running code for arch needs (its opcode tables) now, as a board does at power-on, so its first
  dispatch does not pay for it. Raises ValueError for an architecture the emulator does not model."""
  tables(family(arch))


__all__ = ["DispatchRegs", "DispatchResult", "run_dispatch", "dispatch_slices", "decode_regs", "GPUMemory", "FlatMemory", "MemoryFault", "prepare"]
