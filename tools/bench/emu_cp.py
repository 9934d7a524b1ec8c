"""Play the command processor for the CU executor alone (RDNA and CDNA3): lay a code object, its kernargs and buffers out in a
FlatMemory, program the dispatch registers from the kernel descriptor, and time run_dispatch. This measures the
emulator's speed without the rest of the stack (boot, rings, packets). Register fields come from the generated tables."""
from __future__ import annotations
import struct, time
from dataclasses import dataclass
import numpy as np

BASE = 0x1_0000_0000
_HIDDEN = {"hidden_block_count_x": lambda g, l: g[0], "hidden_block_count_y": lambda g, l: g[1], "hidden_block_count_z": lambda g, l: g[2],
           "hidden_group_size_x": lambda g, l: l[0], "hidden_group_size_y": lambda g, l: l[1], "hidden_group_size_z": lambda g, l: l[2],
           "hidden_grid_dims": lambda g, l: 1 + (g[1] * l[1] > 1 or g[2] * l[2] > 1) + (g[2] * l[2] > 1)}
_PACK = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}


def _up(n: int, a: int) -> int: return -(-n // a) * a


def _field(reg, name: str, value: int) -> int:
  shift, mask = reg.fields[name]
  if value << shift & ~mask: raise ValueError(f"{value} does not fit {name}")
  return value << shift


@dataclass
class Dispatch:
  mem: object          # FlatMemory
  regs: object         # DispatchRegs
  buffers: list[tuple[int, np.ndarray]]   # (address, initial contents) of each buffer argument

  def run(self) -> tuple[float, int]:
    """Run once: (seconds, wave instructions). A fault is an error, not a speed."""
    from rawgpu.drivers.emu.shader import run_dispatch
    t0 = time.perf_counter()
    r = run_dispatch(self.mem, self.regs)
    dt = time.perf_counter() - t0
    if not r.ok: raise RuntimeError(f"the emulated dispatch faulted: {r.fault} at {r.fault_addr}")
    return dt, r.wave_instructions

  def result(self, i: int) -> np.ndarray:
    addr, a = self.buffers[i]
    return np.frombuffer(self.mem.read(addr, a.nbytes), a.dtype).reshape(a.shape).copy()


def prepare(arch: str, obj: str, kernel: str, args: list, grid: tuple[int, int, int], block: tuple[int, int, int]) -> Dispatch:
  """A dispatch of kernels/<arch>/<obj>.hsaco:<kernel> over `grid` workgroups of `block`; numpy arrays become buffers."""
  from rawgpu import kernels
  from rawgpu.autogen.regs import ip_regs
  from rawgpu.drivers.emu.shader import DispatchRegs, FlatMemory
  from rawgpu.hcq.amd.elf import load_code_object
  co = load_code_object(kernels.path(arch, obj).read_bytes(), arch)
  k = co.kernels[kernel]
  kd, explicit = k.descriptor, [a for a in k.meta.args if not a.hidden]
  if len(args) != len(explicit): raise ValueError(f"{kernel} takes {len(explicit)} arguments, got {len(args)}")
  karg_at = _up(len(co.image), 4096)
  karg = bytearray(_up(max(k.meta.kernarg_segment_size, kd.kernarg_size, 16), 64))
  at, buffers = karg_at + len(karg), []
  for a in args:
    if isinstance(a, np.ndarray):
      at = _up(at, 256)
      buffers.append((BASE + at, a)); at += max(a.nbytes, 4)
  mem = FlatMemory(_up(at, 4096), BASE)
  mem.write(BASE, co.image_at(BASE))
  bufs = iter(buffers)
  for meta, v in zip(explicit, args):
    if isinstance(v, np.ndarray):
      addr, arr = next(bufs)
      struct.pack_into("<Q", karg, meta.offset, addr)
      mem.write(addr, arr.tobytes())
    elif isinstance(v, float): struct.pack_into("<f" if meta.size == 4 else "<d", karg, meta.offset, v)
    else: struct.pack_into(_PACK[meta.size], karg, meta.offset, v)
  for meta in k.meta.args:
    if meta.hidden and (fill := _HIDDEN.get(meta.value_kind)) and meta.size in _PACK: struct.pack_into(_PACK[meta.size], karg, meta.offset, fill(grid, block))
  mem.write(BASE + karg_at, bytes(karg))
  user = []
  for name, _, n in kd.user_sgprs():
    if name == "user_sgpr_kernarg_segment_ptr": user += [(BASE + karg_at) & 0xffffffff, (BASE + karg_at) >> 32]
    else: user += [0] * n  # no dispatch packet, queue or scratch: the benchmark kernels use none of them
  gc = ip_regs("gc", *((9, 4, 3) if arch.startswith("gfx94") else (int(arch[3:-2]), 0, 0)))   # gfx942: GC 9.4.3
  lds = max(kd.group_segment_fixed_size, k.meta.group_segment_fixed_size)
  rsrc2 = kd.compute_pgm_rsrc2 | _field(gc["regCOMPUTE_PGM_RSRC2"], "LDS_SIZE", _up(lds, 512) // 512)  # the CP fills LDS_SIZE
  init = gc["regCOMPUTE_DISPATCH_INITIATOR"]
  initiator = _field(init, "COMPUTE_SHADER_EN", 1) | (_field(init, "CS_W32_EN", 1) if kd.wave32 else 0)   # gfx9: wave64 only
  if max(kd.private_segment_fixed_size, k.meta.private_segment_fixed_size): raise ValueError(f"{kernel} needs scratch, which this harness does not set up")
  regs = DispatchRegs(arch=arch, pgm_addr=BASE + k.code_offset, rsrc1=kd.compute_pgm_rsrc1, rsrc2=rsrc2, rsrc3=kd.compute_pgm_rsrc3,
                      user_data=user, num_thread=block, grid=grid, dispatch_initiator=initiator)
  return Dispatch(mem, regs, buffers)
