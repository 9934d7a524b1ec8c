"""RDNA3/RDNA4 (gfx11/gfx12) compute-unit emulator: runs real LLVM-compiled code objects, all waves of a dispatch
vectorized with numpy. Hardware, not a driver: it imports nothing from hcq or the drivers. See README.md."""
from rawgpu.drivers.emu.rdna.memory import GPUMemory, FlatMemory, MemoryFault
from rawgpu.drivers.emu.rdna.dispatch import DispatchRegs, DispatchResult, run_dispatch, dispatch_slices, decode_regs

__all__ = ["DispatchRegs", "DispatchResult", "run_dispatch", "dispatch_slices", "decode_regs", "GPUMemory", "FlatMemory", "MemoryFault"]
