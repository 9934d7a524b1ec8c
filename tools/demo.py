"""`rawgpu demo`: boot a device, run vector add and matmul from kernels/, check them against numpy, report."""
from __future__ import annotations
import sys, time
import numpy as np
from rawgpu.errors import DeviceNotFound


def _say(msg: str, end: str = "\n") -> None:
  print(msg, end=end, file=sys.stderr, flush=True)


def open_demo_device(dev: str | None):
  """The device asked for; else the first real one; else the emulated board, labelled as such."""
  from rawgpu.hcq.device import Device
  if dev: return Device(dev), False
  try: return Device("AMD"), False
  except DeviceNotFound as e:
    why = "; ".join(line.strip() for line in str(e).splitlines()[1:] if line.startswith("  "))
    _say(f"no real GPU usable ({why}); using the built-in emulated GPU (MOCKPCI+AMD)")
    return Device("MOCKPCI+AMD"), True


def run(dev_name: str | None = None, size: int | None = None) -> dict:
  from rawgpu import kernels
  from rawgpu.drivers.devspec import parse_dev
  if dev_name: parse_dev(dev_name)  # a bad DEV is an error before any progress is printed
  t0 = time.perf_counter()
  _say("booting ...", end=" ")
  try: dev, emulated = open_demo_device(dev_name)
  except BaseException as e:
    _say("interrupted" if isinstance(e, KeyboardInterrupt) else "failed")   # (an error follows on a line of its own)
    raise
  boot_s = time.perf_counter() - t0
  _say(f"{dev} in {boot_s:.2f} s")
  arch, res = dev.props.arch, {"device": str(dev), "emulated": emulated or dev.props.emulated, "iface": dev.props.iface, "arch": dev.props.arch, "target": dev.props.target or dev.props.arch, "boot_s": boot_s}
  try:
    n = size or (1 << 14 if res["emulated"] else 1 << 22)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    _say(f"vector add of {n} floats ...", end=" ")
    vadd = dev.program(kernels.path(arch, "vadd").read_bytes(), "vadd_f32")
    ba, bb, bc = dev.alloc(4 * n), dev.alloc(4 * n), dev.alloc(4 * n)
    t = time.perf_counter(); ba.copyin(a); copy_s = time.perf_counter() - t
    bb.copyin(b)
    vadd(ba, bb, bc, n, global_size=(n + 255) // 256, local_size=256)   # a first run, so the timed one is warm
    kt = vadd(ba, bb, bc, n, global_size=(n + 255) // 256, local_size=256, timing=True)
    res["vadd_ok"] = bool(np.array_equal(bc.numpy(np.float32), a + b))
    res["vadd_kernel_s"], res["copyin_GBps"] = kt, 4 * n / copy_s / 1e9
    _say("ok" if res["vadd_ok"] else "WRONG")
    m = 32 if res["emulated"] else 512
    _say(f"matmul {m}x{m}x{m} ...", end=" ")
    A, B = rng.standard_normal((m, m), dtype=np.float32), rng.standard_normal((m, m), dtype=np.float32)
    mm = dev.program(kernels.path(arch, "matmul").read_bytes(), "matmul_naive_f32")
    bA, bB, bC = dev.alloc(A.nbytes).copyin(A), dev.alloc(B.nbytes).copyin(B), dev.alloc(A.nbytes)
    mm(bA, bB, bC, m, m, m, global_size=(m // 16, m // 16), local_size=(16, 16))
    res["matmul_kernel_s"] = mm(bA, bB, bC, m, m, m, global_size=(m // 16, m // 16), local_size=(16, 16), timing=True)
    ref = np.zeros((m, m), np.float32)
    for k in range(m): ref += A[:, k:k + 1] * B[k:k + 1, :]  # same order and rounding as the kernel's k loop
    res["matmul_ok"] = bool(np.array_equal(bC.numpy(np.float32).reshape(m, m), ref))
    _say("ok" if res["matmul_ok"] else "WRONG")
    empty = dev.program(kernels.path(arch, "empty").read_bytes())
    empty(); dev.synchronize()
    batches = []
    for _ in range(5):   # the median batch: one slow moment of the machine does not make the figure
      t = time.perf_counter()
      for _ in range(40): empty()
      batches.append((time.perf_counter() - t) / 40 * 1e6)
      dev.synchronize()
    res["launch_us"] = sorted(batches)[2]
  finally:
    dev.close()
  return res


def report(res: dict) -> int:
  label = f" (emulated GPU through {res['iface']}, not real hardware)" if res["emulated"] else ""
  print(f"device          {res['device']}{label}")
  print(f"boot            {res['boot_s']:.3f} s")
  print(f"launch (host)   {res['launch_us']:.1f} us per kernel")
  print(f"vector add      {res['vadd_kernel_s'] * 1e3:.3f} ms GPU time, {'correct' if res['vadd_ok'] else 'WRONG'}")
  print(f"matmul          {res['matmul_kernel_s'] * 1e3:.3f} ms GPU time, {'correct' if res['matmul_ok'] else 'WRONG'}")
  print(f"copyin          {res['copyin_GBps']:.3g} GB/s")   # (3 digits: a small --size copies at a few MB/s)
  ok = res["vadd_ok"] and res["matmul_ok"]
  print(f"verdict: {'PASS' if ok else 'FAIL'}: results {'match' if ok else 'do not match'} numpy on {res['device']}{label}")
  return 0 if ok else 1
