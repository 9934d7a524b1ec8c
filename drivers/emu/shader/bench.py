"""Time the emulator on three dispatches: vector add over 2^20 float32, naive 256^3 float32 matmul, sum over 2^22
float32. Needs clang-19 and ld.lld-19 (development tools) to build the kernels.

  python -m rawgpu.drivers.emu.shader.bench [--arch gfx1100|gfx1201] [--wave64]
"""
from __future__ import annotations
import argparse, io, os, shutil, struct, subprocess, tempfile, time

import numpy as np

from rawgpu.drivers.emu.shader import DispatchRegs, FlatMemory, run_dispatch

SRC = r"""
__kernel void vadd(__global const float *a, __global const float *b, __global float *c) {
  int i = __builtin_amdgcn_workgroup_id_x() * 256 + __builtin_amdgcn_workitem_id_x();
  c[i] = a[i] + b[i];
}
__kernel void matmul(__global const float *A, __global const float *B, __global float *C, int n) {
  int col = __builtin_amdgcn_workgroup_id_x() * 16 + __builtin_amdgcn_workitem_id_x();
  int row = __builtin_amdgcn_workgroup_id_y() * 16 + __builtin_amdgcn_workitem_id_y();
  float acc = 0.0f;
  for (int k = 0; k < n; k++) acc += A[row * n + k] * B[k * n + col];
  C[row * n + col] = acc;
}
// two passes: each group of 256 sums 256 * per consecutive-strided values into one partial
__kernel void sum(__global const float *a, __global float *out, int per) {
  __local float s[256];
  int t = __builtin_amdgcn_workitem_id_x(), base = __builtin_amdgcn_workgroup_id_x() * 256 * per;
  float acc = 0.0f;
  for (int k = 0; k < per; k++) acc += a[base + k * 256 + t];
  s[t] = acc;
  for (int k = 128; k > 0; k >>= 1) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
    if (t < k) s[t] += s[t + k];
  }
  if (t == 0) out[__builtin_amdgcn_workgroup_id_x()] = s[0];
}
"""

def build(arch: str, wave64: bool) -> bytes:
  for tool in ("clang-19", "ld.lld-19"):
    if shutil.which(tool) is None: raise SystemExit(f"{tool} is needed to build the benchmark kernels")
  d = tempfile.mkdtemp()
  try:
    with open(os.path.join(d, "k.cl"), "w") as f: f.write(SRC)
    extra = ["-mwavefrontsize64"] if wave64 else []
    subprocess.run(["clang-19", "-target", "amdgcn-amd-amdhsa", f"-mcpu={arch}", "-nogpulib", "-O2", *extra, "-c",
                    os.path.join(d, "k.cl"), "-o", os.path.join(d, "k.o")], check=True)
    subprocess.run(["ld.lld-19", "-shared", os.path.join(d, "k.o"), "-o", os.path.join(d, "k.hsaco")], check=True)
    with open(os.path.join(d, "k.hsaco"), "rb") as f: return f.read()
  finally:
    shutil.rmtree(d, ignore_errors=True)

def descriptors(elf: bytes) -> tuple[bytes, int, dict[str, tuple[int, bytes]]]:
  """(.text bytes, its address, {kernel: (entry address, 64-byte descriptor)})."""
  from elftools.elf.elffile import ELFFile
  e = ELFFile(io.BytesIO(elf))
  text = e.get_section_by_name(".text")
  out = {}
  for s in e.get_section_by_name(".symtab").iter_symbols():
    if s.name.endswith(".kd"):
      sec = e.get_section(s["st_shndx"])
      kd = sec.data()[s["st_value"] - sec["sh_addr"]:][:64]
      out[s.name[:-3]] = (s["st_value"] + struct.unpack_from("<q", kd, 16)[0], kd)
  return text.data(), text["sh_addr"], out

class Board:
  """Just enough of a command processor to launch a kernel: memory bump allocator, kernarg, dispatch registers."""
  def __init__(self, arch: str, elf: bytes, size: int = 64 << 20):
    self.arch, self.mem = arch, FlatMemory(size, 0x1_0000_0000)
    self.code, self.text_addr, self.kds = descriptors(elf)
    self.mem.write(self.mem.base, self.code)
    self.top = self.mem.base + -(-len(self.code) // 4096) * 4096

  def alloc(self, data: np.ndarray | int) -> int:
    n = data if isinstance(data, int) else data.nbytes
    addr, self.top = self.top, self.top + -(-n // 256) * 256
    if not isinstance(data, int): self.mem.write(addr, data.tobytes())
    return addr

  def read(self, addr: int, dtype, n: int) -> np.ndarray:
    return np.frombuffer(self.mem.read(addr, n * np.dtype(dtype).itemsize), dtype)

  def regs(self, name: str, args: bytes, grid, block) -> DispatchRegs:
    entry, kd = self.kds[name]
    karg = self.alloc(np.frombuffer(args + bytes(256), np.uint8))
    r3, r1, r2 = struct.unpack_from("<III", kd, 44)
    group, props = struct.unpack_from("<I", kd, 0)[0], struct.unpack_from("<H", kd, 56)[0]
    user = ([0, 0, 0, 0] if props & 1 else []) + ([0, 0] if props & 2 else []) + ([0, 0] if props & 4 else [])
    user += [karg & 0xffffffff, karg >> 32] if props & 8 else []
    r2 |= (-(-group // 512)) << 15
    return DispatchRegs(arch=self.arch, pgm_addr=self.mem.base + (entry - self.text_addr), rsrc1=r1, rsrc2=r2, rsrc3=r3,
                        user_data=user, num_thread=block, grid=grid, dispatch_initiator=1 | ((props >> 10 & 1) << 15))

def _time(board: Board, regs: DispatchRegs) -> tuple[float, int]:
  run_dispatch(board.mem, regs)  # first run compiles the program's blocks
  t = time.perf_counter()
  res = run_dispatch(board.mem, regs)
  dt = time.perf_counter() - t
  if not res.ok: raise SystemExit(f"dispatch faulted: {res.fault}")
  return dt, res.wave_instructions

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--arch", default="gfx1100")
  ap.add_argument("--wave64", action="store_true")
  a = ap.parse_args()
  b = Board(a.arch, build(a.arch, a.wave64))
  rng = np.random.default_rng(0)
  rows = []
  n = 1 << 20
  x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
  px, py, pz = b.alloc(x), b.alloc(y), b.alloc(4 * n)
  dt, wi = _time(b, b.regs("vadd", struct.pack("<QQQ", px, py, pz), (n // 256, 1, 1), (256, 1, 1)))
  assert np.array_equal(b.read(pz, np.float32, n), x + y)
  rows.append(("vector add 2^20 f32", dt, wi, 0.25))
  m = 256
  A, B = rng.standard_normal((m, m)).astype(np.float32), rng.standard_normal((m, m)).astype(np.float32)
  pa, pb, pc = b.alloc(A), b.alloc(B), b.alloc(4 * m * m)
  dt, wi = _time(b, b.regs("matmul", struct.pack("<QQQi", pa, pb, pc, m), (m // 16, m // 16, 1), (16, 16, 1)))
  assert np.allclose(b.read(pc, np.float32, m * m).reshape(m, m), A @ B, atol=1e-3)
  rows.append(("matmul 256^3 f32", dt, wi, 1.0))
  n = 1 << 22
  v = rng.standard_normal(n).astype(np.float32)
  pv, pp, ps = b.alloc(v), b.alloc(4 * 1024), b.alloc(4)
  dt1, wi1 = _time(b, b.regs("sum", struct.pack("<QQi", pv, pp, 16), (1024, 1, 1), (256, 1, 1)))
  dt2, wi2 = _time(b, b.regs("sum", struct.pack("<QQi", pp, ps, 4), (1, 1, 1), (256, 1, 1)))
  assert abs(float(b.read(ps, np.float32, 1)[0]) - float(v.astype(np.float64).sum())) < 1e-2 * np.sqrt(n)
  rows.append(("sum 2^22 f32 (2 passes)", dt1 + dt2, wi1 + wi2, 0.5))
  print(f"{a.arch} wave{64 if a.wave64 else 32}")
  for name, dt, wi, goal in rows:
    print(f"  {name:22s} {dt * 1e3:8.1f} ms  {wi:9d} wave-instr  {wi / dt / 1e6:6.2f} M wave-instr/s  (goal < {goal * 1e3:.0f} ms)")

if __name__ == "__main__":
  main()
