"""The benchmarks. Each measures through ctx (same warm-up, repeats and statistics every time); a missing
prerequisite is a Skip with the reason. Device benchmarks take an opened rawgpu.hcq.Device from ctx.device().

The launch path (Device.program and what it returns) is still being finished; these are written against the API as
hcq documents it: `prg = dev.program(code, name)`, `prg(*args, global_size=(x, y, z), local_size=(x, y, z), wait=bool)`
with global_size counting workgroups (tinygrad's convention), `dev.compute_queue().signal(signal, value).submit(dev)`.
"""
from __future__ import annotations
import contextlib, itertools, subprocess, sys, time
import numpy as np
from rawgpu.tools.bench.core import Ctx, Skip, benchmark, samples

MOCK = "MOCKPCI+AMD"


def _kernel(ctx: Ctx, dev, obj: str, name: str):
  """(program, kernel facts) of a prebuilt kernel for the device's arch."""
  with ctx.needs(f"prebuilt {obj}.hsaco for {dev.props.arch}"):
    from rawgpu import kernels
    from rawgpu.hcq.amd.elf import load_code_object
    code = kernels.path(dev.props.arch, obj).read_bytes()
    facts = load_code_object(code, dev.props.arch).kernels[name]
  with ctx.needs("Device.program (the launch path)"): prg = dev.program(code, name)
  return prg, facts


def _launch(ctx: Ctx, prg, *args, global_size, local_size, wait: bool = True):
  return prg(*args, global_size=global_size, local_size=local_size, wait=wait)


def _first_launch(ctx: Ctx, prg, *args, **kw) -> None:
  with ctx.needs("launching a program (the launch path)"): _launch(ctx, prg, *args, **kw)


# ---- no device needed

@benchmark("import")
def bench_import(ctx: Ctx) -> None:
  """time of `import rawgpu`, `import rawgpu.hcq` and `from rawgpu.hcq import Device` (which imports numpy) in a fresh interpreter"""
  for case, stmt in (("rawgpu", "import rawgpu"), ("rawgpu.hcq", "import rawgpu.hcq"), ("rawgpu.hcq.Device", "from rawgpu.hcq import Device")):
    code = f"import time; t = time.perf_counter(); {stmt}; print(repr(time.perf_counter() - t))"
    def once(code=code) -> float:
      r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
      if r.returncode != 0: raise RuntimeError(f"{stmt!r} failed in a fresh interpreter: {r.stderr.strip().splitlines()[-1:]}")
      return float(r.stdout.strip().splitlines()[-1])
    ctx.figure(case, "import time", "ms", samples(once, 1, ctx.repeats))


def _code_regions(arch: str) -> list[tuple[bytes, int, int]]:
  """(image, start, end) of the executable segment of every prebuilt code object for arch."""
  from rawgpu import kernels
  from rawgpu.hcq.amd.elf import load_code_object
  out = []
  for name in kernels.names(arch):
    co = load_code_object(kernels.path(arch, name).read_bytes(), arch)
    out += [(co.image, vaddr, vaddr + memsz) for vaddr, memsz, flags, _ in co.segments if flags & 1]  # PF_X
  return out


@benchmark("emu")
def bench_emu(ctx: Ctx) -> None:
  """the emulated GPU: RDNA and CDNA3 decode and disassembly speed, the executor alone; vector add, matmul and a
  reduction on MOCKPCI"""
  for arch in ("gfx1100", "gfx1201", "gfx942"):
    try:
      with ctx.needs("the shader-core decoder (rawgpu.drivers.emu.shader)"):
        from rawgpu.drivers.emu.shader.decode import decode_all
        from rawgpu.drivers.emu.shader.disasm import disasm
      with ctx.needs(f"prebuilt code objects for {arch}"): regions = _code_regions(arch)
    except Skip as e:
      ctx.skip(f"decode {arch}", str(e), "decode", "instructions/s", arch=arch); continue
    insts = [i for img, a, b in regions for i in decode_all(arch, img, a, b)]
    reps = 1 if ctx.quick else 5
    def dec() -> None:
      for img, a, b in regions * reps: decode_all(arch, img, a, b)
    ctx.figure(f"decode {arch}", "decode", "instructions/s", samples(dec, ctx.warmup, ctx.repeats), work=len(insts) * reps, arch=arch)
    ctx.figure(f"disasm {arch}", "disassemble", "instructions/s", samples(lambda: [disasm(arch, i, arch == "gfx942") for i in insts], ctx.warmup, ctx.repeats), work=len(insts), arch=arch)
    _emu_executor(ctx, arch)
  spec = ctx.dev_spec if ctx.dev_spec and ctx.dev_spec.upper().startswith("MOCKPCI") else MOCK
  cases = (("MOCKPCI vadd f32", _emu_vadd), ("MOCKPCI matmul f32", _emu_matmul), ("MOCKPCI reduce f32", _emu_reduce))
  for case, fn in cases:
    try: dev = ctx.device(spec)
    except Skip as e: ctx.skip(case, str(e), "throughput", "elements/s"); continue
    with ctx.case(case, "throughput", "elements/s", dev=dev): fn(ctx, dev, case)


def _emu_executor(ctx: Ctx, arch: str) -> None:
  """The CU executor alone (this harness plays the command processor): the speed goals' three kernels."""
  rng = np.random.default_rng(4)
  n, m, r = ctx.size(1 << 12, 1 << 20), ctx.size(32, 256), ctx.size(1 << 12, 1 << 22)
  vec = lambda k: rng.random(k, dtype=np.float32)
  a, b, A, B, x = vec(n), vec(n), vec(m * m).reshape(m, m), vec(m * m).reshape(m, m), vec(r)
  cases = [(f"executor vadd f32 {arch} n={n}", "vadd", "vadd_f32", [a, b, np.zeros(n, np.float32), n], ((n + 255) // 256, 1, 1), (256, 1, 1), n,
            lambda d: _check(d.result(2), a + b, "vadd", rtol=0, atol=0)),
           (f"executor matmul f32 {arch} naive {m}^3", "matmul", "matmul_naive_f32", [A, B, np.zeros((m, m), np.float32), m, m, m],
            (m // 16, m // 16, 1), (16, 16, 1), m * m, lambda d: _check(d.result(2), A @ B, "matmul", rtol=1e-4, atol=1e-4)),
           (f"executor reduce f32 {arch} n={r}", "reduce", "reduce_sum_f32", [x, np.zeros(r // 256, np.float32), r], (r // 256, 1, 1), (256, 1, 1), r,
            lambda d: _check(d.result(1).astype(np.float64).sum(), x.astype(np.float64).sum(), "reduce", rtol=1e-4))]
  for case, obj, kernel, args, grid, block, elements, check in cases:
    with ctx.case(case, "throughput", "elements/s", arch=arch): _executor_case(ctx, arch, case, obj, kernel, args, grid, block, elements, check)


def _executor_case(ctx: Ctx, arch: str, case: str, obj: str, kernel: str, args, grid, block, elements: int, check) -> None:
  with ctx.needs("the shader-core executor (rawgpu.drivers.emu.shader.run_dispatch)"):
    from rawgpu.tools.bench.emu_cp import prepare
    d = prepare(arch, obj, kernel, args, grid, block)
    _, waves = d.run()
  check(d)
  secs = samples(lambda: d.run()[0], 0, min(ctx.repeats, 5))  # the first run above was the warm-up (and the check)
  ctx.figure(case, "throughput", "elements/s", secs, work=elements, arch=arch)
  ctx.figure(case, "wave instructions", "instructions/s", secs, work=waves, arch=arch)


# Buffers may be larger than asked (allocations round up to pages): results are read back as [:count].
def _check(got: np.ndarray, want: np.ndarray, what: str, **tol) -> None:
  """A benchmark whose kernel computed the wrong answer reports an error, not a speed."""
  if not np.allclose(got, want, **tol): raise AssertionError(f"{what}: wrong result (max error {np.max(np.abs(got - want)):.3g})")


def _emu_vadd(ctx: Ctx, dev, case: str) -> None:
  n = ctx.size(1 << 12, 1 << 20)
  prg, _ = _kernel(ctx, dev, "vadd", "vadd_f32")
  rng = np.random.default_rng(0)
  a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
  with ctx.needs("buffers (Device.alloc, Buffer.copyin)"):
    A, B, C = (dev.alloc(4 * n) for _ in range(3))
    A.copyin(a); B.copyin(b)
  kw = dict(global_size=((n + 255) // 256, 1, 1), local_size=(256, 1, 1))
  _first_launch(ctx, prg, A, B, C, n, **kw)
  _check(C.numpy(np.float32)[:n], a + b, case, rtol=0, atol=0)
  ctx.figure(f"{case} n={n}", "throughput", "elements/s", samples(lambda: _launch(ctx, prg, A, B, C, n, **kw), 1, min(ctx.repeats, 5)), work=n, dev=dev)


def _emu_matmul(ctx: Ctx, dev, case: str) -> None:
  n = ctx.size(32, 256)
  prg, _ = _kernel(ctx, dev, "matmul", "matmul_naive_f32")
  rng = np.random.default_rng(1)
  a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
  with ctx.needs("buffers (Device.alloc, Buffer.copyin)"):
    A, B, C = (dev.alloc(4 * n * n) for _ in range(3))
    A.copyin(a); B.copyin(b)
  kw = dict(global_size=((n + 15) // 16, (n + 15) // 16, 1), local_size=(16, 16, 1))
  _first_launch(ctx, prg, A, B, C, n, n, n, **kw)
  _check(C.numpy(np.float32)[:n * n].reshape(n, n), a @ b, case, rtol=1e-4, atol=1e-4)
  ctx.figure(f"{case} naive {n}^3", "throughput", "elements/s", samples(lambda: _launch(ctx, prg, A, B, C, n, n, n, **kw), 1, min(ctx.repeats, 5)), work=n * n, dev=dev)


def _emu_reduce(ctx: Ctx, dev, case: str) -> None:
  n = ctx.size(1 << 12, 1 << 22)
  prg, facts = _kernel(ctx, dev, "reduce", "reduce_sum_f32")
  wg = (facts.meta.reqd_workgroup_size or (256, 1, 1))[0]
  groups = (n + wg - 1) // wg
  x = np.random.default_rng(2).random(n, dtype=np.float32)
  with ctx.needs("buffers (Device.alloc, Buffer.copyin)"):
    X, out = dev.alloc(4 * n), dev.alloc(4 * groups)
    X.copyin(x)
  kw = dict(global_size=(groups, 1, 1), local_size=(wg, 1, 1))
  _first_launch(ctx, prg, X, out, n, **kw)
  _check(out.numpy(np.float32)[:groups].astype(np.float64).sum(), x.astype(np.float64).sum(), case, rtol=1e-4)
  ctx.figure(f"{case} n={n}", "throughput", "elements/s", samples(lambda: _launch(ctx, prg, X, out, n, **kw), 1, min(ctx.repeats, 5)), work=n, dev=dev)


# ---- on the device (--dev / DEV)

class _PlainMMIO:
  """The compute ring's doorbell and its pre-doorbell flush (PCI: the HDP-flush register) made plain stores into
  memory, as they are on hardware; the doorbell is rung for real, once, on exit, so the GPU then runs what was queued.
  On an emulated board this takes the model's register hooks out of the host's time: what is left is the driver's."""
  def __init__(self, dev):
    import dataclasses
    self.ring = dev.ring("compute")
    self.real = self.ring.hw
    sink = memoryview(bytearray(16)).cast("Q")
    def flush() -> None: sink[1] = 0
    self.ring.hw = dataclasses.replace(self.real, doorbell=sink[0:1], before_doorbell=flush if self.real.before_doorbell else None)

  def __enter__(self): return self

  def __exit__(self, *exc) -> None:
    r, hw = self.ring, self.real
    r.hw = hw
    if hw.before_doorbell is not None: hw.before_doorbell()
    hw.doorbell[0] = r.put * r.per_dw

@benchmark("launch")
def bench_launch(ctx: Ctx) -> None:
  """launch overhead: the empty kernel (no kernargs) and a one-element fill (kernargs): enqueue only (with the GPU
  running them; with the GPU held at a wait until all are queued; with the doorbell and HDP flush plain stores, as on
  hardware: the driver's own cost), launch + wait, GPU time; 100-kernel graph replays; a graph of a kernel and a copy
  that does not depend on it, GPU time in order and with ordered=False (both engines at once)"""
  dev = ctx.device()
  n = ctx.size(10, 1000)
  for case, obj, name, args in (("empty kernel", "empty", "empty", lambda: ()), ("fill n=1", "fill", "fill_u32", lambda: (dst, 7, 1))):
    with ctx.case(case, "enqueue", "us", dev=dev):
      if obj == "fill":
        with ctx.needs("Device.alloc"): dst = dev.alloc(4096)
      prg, _ = _kernel(ctx, dev, obj, name)
      kw = dict(global_size=(1, 1, 1), local_size=(1, 1, 1))
      _first_launch(ctx, prg, *args(), **kw)
      if obj == "fill" and dst.numpy(np.uint32)[0] != 7: raise AssertionError("fill_u32 did not write its value")
      a, gs, ls = args(), kw["global_size"], kw["local_size"]   # the timed loops call the program as a user does
      def enqueue() -> float:
        t0 = time.perf_counter()
        for _ in range(n): prg(*a, global_size=gs, local_size=ls)
        dt = time.perf_counter() - t0
        dev.synchronize()
        return dt / n
      ctx.figure(case, "enqueue", "us", samples(enqueue, 1, ctx.repeats), dev=dev)
      gate = dev.new_signal("bench gate")
      def enqueue_gated() -> float:
        """The same launches queued behind a wait the host releases afterwards: the GPU runs none of them meanwhile,
        so on an emulated board the host's time is not shared with the emulator running the kernels."""
        gate.value = 0
        dev.compute_queue().wait(gate, 1).submit(dev)
        t0 = time.perf_counter()
        for _ in range(min(n, 500)): prg(*a, global_size=gs, local_size=ls)   # 500 launches fit the ring
        dt = time.perf_counter() - t0
        gate.value = 1
        dev.synchronize()
        return dt / min(n, 500)
      ctx.figure(case, "enqueue, gpu held", "us", samples(enqueue_gated, 1, ctx.repeats), dev=dev)
      def enqueue_plain() -> float:
        """The same launches with the doorbell and the HDP flush plain stores (as on hardware, see _PlainMMIO): the
        driver's own cost per launch; the GPU runs them after the one real doorbell at the end."""
        with _PlainMMIO(dev):
          t0 = time.perf_counter()
          for _ in range(min(n, 500)): prg(*a, global_size=gs, local_size=ls)
          dt = time.perf_counter() - t0
        dev.synchronize()
        return dt / min(n, 500)
      ctx.figure(case, "enqueue, MMIO as plain stores", "us", samples(enqueue_plain, 1, ctx.repeats), dev=dev)
      ctx.figure(case, "launch + wait", "us", samples(lambda: _launch(ctx, prg, *args(), wait=True, **kw), ctx.warmup, ctx.repeats * 4), dev=dev)
      with ctx.case(case, "gpu time", "us", dev=dev):
        with ctx.needs("launch with timing=True"): prg(*args(), timing=True, **kw)
        ctx.figure(case, "gpu time", "us", samples(lambda: prg(*args(), timing=True, **kw), ctx.warmup, ctx.repeats), dev=dev)

  with ctx.case("graph-100", "host_time_per_kernel", "us", dev=dev):
    from rawgpu.hcq.graph import Graph
    prg, _ = _kernel(ctx, dev, "fill", "fill_u32")
    bufs = [dev.alloc(4096) for _ in range(2)]
    def graph_of_100(outs: list | None = None) -> Graph:
      """100 launches of the fill kernel on the input (outs: each also fills a buffer of its own, as a model's
      kernels write their own tensors: the graph records 100 buffers)"""
      g = Graph(dev)
      x = g.input("dst")
      for i in range(100):
        if outs: g.exec(prg, outs[i], 7, 1, global_size=(1, 1, 1), local_size=(1, 1, 1))
        g.exec(prg, x, 7, 1, global_size=(1, 1, 1), local_size=(1, 1, 1))
      return g
    g = graph_of_100()
    dev.wait_timeline(g.replay(dst=bufs[0]))
    if bufs[0].numpy(np.uint32)[0] != 7: raise AssertionError("the graph's fill_u32 did not write its value")
    flip = iter(range(1 << 30))
    def replay(graphs: list, plain: bool, kernels: int) -> float:
      """The graphs replayed back to back with a new input (the kernargs of all their launches are patched), host
      time per kernel; plain: the doorbell and HDP flush plain stores (see _PlainMMIO), the driver's own cost.
      After the wait for the last replay the host's caches are cold for the first graph, warm for the next."""
      with _PlainMMIO(dev) if plain else contextlib.nullcontext():
        dst = bufs[next(flip) & 1]
        t0 = time.perf_counter()
        for gr in graphs: ticket = gr.replay(dst=dst)
        dt = time.perf_counter() - t0
      dev.wait_timeline(ticket)
      return dt / kernels
    three = [g, graph_of_100(), graph_of_100()]   # as a model's step split into graphs runs
    own = graph_of_100([dev.alloc(4096) for _ in range(100)])
    for case, graphs, kernels in (("graph-100", [g], 100), ("3 x graph-100", three, 300), ("graph-200, 100 buffers", [own], 200)):
      for metric, plain in (("host_time_per_kernel", False), ("host_time_per_kernel, MMIO as plain stores", True)):
        ctx.figure(case, metric, "us", samples(lambda: replay(graphs, plain, kernels), ctx.warmup, ctx.repeats), dev=dev)

  size = ctx.size(4 << 20, 16 << 20)
  case = f"graph kernel + copy {size >> 20} MiB"
  with ctx.case(case, "gpu time", "ms", dev=dev):
    # a kernel and a copy that does not depend on it: in order the copy engine waits for the kernel, ordered=False
    # lets both engines run at once (Graph.gpu_time: the replay's start to its end)
    from rawgpu.hcq.graph import Graph
    prg, _ = _kernel(ctx, dev, "fill", "fill_u32")
    n = ctx.size(1 << 12, 1 << 13)
    big, src, dst = dev.alloc(4 * n), dev.alloc(size), dev.alloc(size)
    for label, ordered in (("in order", True), ("ordered=False", False)):
      g = Graph(dev, ordered=ordered).exec(prg, big, 7, n, global_size=n // 256, local_size=256).copy(dst, src)
      def run(g=g) -> float: g.replay(); return g.gpu_time()
      ctx.figure(case, f"gpu time, {label}", "ms", samples(run, ctx.warmup, ctx.repeats), dev=dev)


@benchmark("signal")
def bench_signal(ctx: Ctx) -> None:
  """signals: a CPU wait that is already satisfied, and a queue signalling the timeline, round trip"""
  dev = ctx.device()
  with ctx.case("cpu wait (satisfied)", "wait", "us", dev=dev):
    with ctx.needs("Device.new_signal"): sig = dev.new_signal("bench")
    sig.value = 1
    ctx.figure("cpu wait (satisfied)", "wait", "us", samples(lambda: sig.wait(1), ctx.warmup, ctx.repeats * 4), dev=dev)
  for label, engine, make in (("compute", "compute", "compute_queue"), ("copy", "sdma", "copy_queue")):
    with ctx.case(f"{label} queue", "signal round trip", "us", dev=dev):
      def roundtrip() -> None:
        v = dev.next_timeline(engine)
        getattr(dev, make)().signal(dev.timeline, dev.timeline_gpu(v)).submit(dev)
        dev.wait_timeline(v)
      with ctx.needs(f"Device.{make}().signal().submit()"): roundtrip()
      ctx.figure(f"{label} queue", "signal round trip", "us", samples(roundtrip, ctx.warmup, ctx.repeats * 4), dev=dev)


@benchmark("copy")
def bench_copy(ctx: Ctx) -> None:
  """copy bandwidth: host to VRAM (copyin), VRAM to host (copyout), VRAM to VRAM (transfer), VRAM to a peer's VRAM (p2p)"""
  dev = ctx.device()
  size = ctx.size(1 << 20, 256 << 20)
  while dev.props.vram_size and size > 1 << 20 and 4 * size > dev.props.vram_size: size //= 2  # two buffers, room to spare
  mib = f"{size >> 20} MiB"
  host = np.random.default_rng(3).integers(0, 256, size, dtype=np.uint8)
  back = np.empty(size, np.uint8)
  with ctx.needs("Device.alloc"): a, b = dev.alloc(size), dev.alloc(size)
  a, b = a.view(0, size), b.view(0, size)  # exactly `size` bytes, whatever the allocation rounded up to
  def copyin() -> None: a.copyin(host); dev.synchronize()
  def copyout() -> None: a.copyout(back)
  def transfer() -> None: dev.transfer(b, a); dev.synchronize()
  ok = False
  with ctx.case(f"host->vram {mib}", "bandwidth", "GB/s", dev=dev):
    with ctx.needs("Buffer.copyin / copyout (the copy engine)"): copyin(); copyout()
    if not np.array_equal(back, host): raise AssertionError("copyin then copyout did not return the same bytes")
    ok = True
    ctx.figure(f"host->vram {mib}", "bandwidth", "GB/s", samples(copyin, ctx.warmup, ctx.repeats), work=size, dev=dev)
  with ctx.case(f"vram->host {mib}", "bandwidth", "GB/s", dev=dev):
    if not ok: raise Skip("copyin/copyout did not work (see host->vram)")
    ctx.figure(f"vram->host {mib}", "bandwidth", "GB/s", samples(copyout, ctx.warmup, ctx.repeats), work=size, dev=dev)
  with ctx.case(f"vram->vram {mib}", "bandwidth", "GB/s", dev=dev):
    if not ok: raise Skip("copyin/copyout did not work (see host->vram)")
    with ctx.needs("Device.transfer"): transfer()
    if not np.array_equal(b.numpy(), host): raise AssertionError("transfer did not copy the bytes")
    ctx.figure(f"vram->vram {mib}", "bandwidth", "GB/s", samples(transfer, ctx.warmup, ctx.repeats), work=size, dev=dev)
  with ctx.case(f"p2p {mib}", "bandwidth", "GB/s", dev=dev):
    if not ok: raise Skip("copyin/copyout did not work (see host->vram)")
    _p2p(ctx, dev, a, host, size, mib)
  for buf in (a.base, b.base): buf.free()
  for n in ((4 << 10, 64 << 10) if ctx.quick else (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)):  # the size sweep
    label = f"{n >> 10} KiB" if n < 1 << 20 else f"{n >> 20} MiB"
    with ctx.case(f"copyin {label}", "bandwidth", "GB/s", dev=dev):
      data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
      buf, out = dev.alloc(n), np.empty(n, np.uint8)
      buf.copyin(data); buf.copyout(out)
      if not np.array_equal(out, data): raise AssertionError(f"copyin/copyout of {label} did not return the same bytes")
      ctx.figure(f"copyin {label}", "bandwidth", "GB/s", samples(lambda: buf.copyin(data), ctx.warmup, ctx.repeats), work=n, dev=dev)
      ctx.figure(f"copyout {label}", "bandwidth", "GB/s", samples(lambda: buf.copyout(out), ctx.warmup, ctx.repeats), work=n, dev=dev)
      buf.free()


def _p2p(ctx: Ctx, dev, a, host: np.ndarray, size: int, mib: str) -> None:
  """The peer's copy engine reads this device's VRAM over the bus into its own VRAM (a PCIe peer read)."""
  spec = ctx.dev_spec or ""
  from rawgpu.drivers.devspec import DevSpec, parse_dev
  s = parse_dev(spec)
  peer_spec = str(DevSpec(s.vendor, s.iface, ((s.indices[0] if s.indices else 0) + 1,), s.renderer, s.arch))
  try: peer = ctx.device(peer_spec)
  except Skip as e: raise Skip(f"needs two devices: {e}") from None
  with ctx.needs("Device.map / a peer Device.transfer"):
    c = peer.alloc(size).view(0, size)
    peer.transfer(c, a); peer.synchronize()
  try:
    if not np.array_equal(c.numpy(), host): raise AssertionError("p2p transfer did not copy the bytes")
    def p2p() -> None: peer.transfer(c, a); peer.synchronize()
    ctx.figure(f"p2p {mib}", "bandwidth", "GB/s", samples(p2p, ctx.warmup, ctx.repeats), work=size, dev=dev)
  finally: c.base.free()


@benchmark("alloc")
def bench_alloc(ctx: Ctx) -> None:
  """Device.alloc and Buffer.free of VRAM and host memory"""
  dev = ctx.device()
  for host in (False, True):
    for size in (4 << 10, 1 << 20, ctx.size(4 << 20, 64 << 20)):
      case = f"{'host' if host else 'vram'} {size >> 20} MiB" if size >= 1 << 20 else f"{'host' if host else 'vram'} {size >> 10} KiB"
      frees: list[float] = []
      def once() -> float:
        t0 = time.perf_counter()
        buf = dev.alloc(size, host=host)
        t1 = time.perf_counter()
        buf.free()
        frees.append(time.perf_counter() - t1)
        return t1 - t0
      with ctx.case(case, "alloc", "us", dev=dev):
        with ctx.needs("Device.alloc / Buffer.free"): once()
        frees.clear()
        allocs = samples(once, ctx.warmup, ctx.repeats)
        ctx.figure(case, "alloc", "us", allocs, dev=dev)
        ctx.figure(case, "free", "us", frees[-len(allocs):], dev=dev)


BOOT_CHILD = """
import sys, time
t = time.perf_counter()
from rawgpu.hcq import Device
d = Device(sys.argv[1])
opened = time.perf_counter() - t
d.close()
print(repr(opened))
"""


@benchmark("boot")
def bench_boot(ctx: Ctx) -> None:
  """opening the device: in a new process (on MOCKPCI: a cold boot of a fresh board) and reopening in this one"""
  spec = ctx.dev_spec
  if spec is None: raise Skip("no device given: pass --dev (e.g. --dev MOCKPCI+AMD) or set DEV")
  where = ctx.where(ctx.device())  # it opens at all, and what it is
  ctx.close_device()  # while open, the board's lock is ours: another open would be refused
  from rawgpu.hcq import Device
  def reopen() -> float:
    t0 = time.perf_counter()
    d = Device(spec)
    dt = time.perf_counter() - t0
    d.close()
    return dt
  def fresh() -> float:
    r = subprocess.run([sys.executable, "-c", BOOT_CHILD, spec], capture_output=True, text=True, timeout=600)
    if r.returncode != 0: raise RuntimeError(f"opening {spec} in a new process failed: {r.stderr.strip().splitlines()[-1:]}")
    return float(r.stdout.strip().splitlines()[-1])
  ctx.figure("new process", "open", "ms", samples(fresh, 0, ctx.size(1, 5)), where=where)
  ctx.figure("reopen", "open", "ms", samples(reopen, 1, ctx.repeats), where=where)


_TINYGRAD_RUNS = itertools.count()

@benchmark("tinygrad")
def bench_tinygrad(ctx: Ctx) -> None:
  """rawgpu as tinygrad's runtime (rawgpu.hcq.tinygrad): a small CNN's SGD step under TinyJit, host time per step
  with the jit's kernels replayed as one rawgpu Graph and launched one by one (tinygrad's JIT=2), and step + wait"""
  dev = ctx.device()
  with ctx.needs("tinygrad (pip install 'rawgpu[tinygrad]')"):
    from rawgpu.hcq import tinygrad as rg
    name = rg.register(dev, name=f"RGBENCH{next(_TINYGRAD_RUNS)}")   # tinygrad keeps a name's device once opened
    from tinygrad import Context, Tensor, TinyJit, nn
  rng = np.random.default_rng(0)
  for case, jit in (("cnn step, graph", 1), ("cnn step, one launch at a time", 2)):
    with ctx.case(case, "host time per step", "us", dev=dev), Context(DEV=name, JIT=jit):
      c1, l1 = nn.Conv2d(1, 4, 3), nn.Linear(4 * 6 * 6, 10)   # 23 kernels a step on tinygrad 0.14.0
      opt = nn.optim.SGD([c1.weight, c1.bias, l1.weight, l1.bias], lr=0.01)
      X, Y = Tensor(rng.standard_normal((8, 1, 14, 14)).astype(np.float32)), Tensor(rng.integers(0, 10, 8).astype(np.int32))
      @TinyJit
      def step():
        with Context(TRAINING=1):
          opt.zero_grad()
          loss = l1(c1(X).relu().max_pool2d(2).flatten(1)).sparse_categorical_crossentropy(Y)
          loss.backward()
          opt.step()
          return loss
      with ctx.needs("tinygrad's compiler (its LLVM backend: libLLVM) and ld.lld"):
        for _ in range(3): step().realize()   # run, capture, first replay
      def host() -> float:
        dev.synchronize()
        t0 = time.perf_counter()
        step()
        dt = time.perf_counter() - t0
        dev.synchronize()
        return dt
      def step_and_wait() -> None: step(); dev.synchronize()
      ctx.figure(case, "host time per step", "us", samples(host, ctx.warmup, ctx.repeats), dev=dev)
      ctx.figure(case, "step + wait", "ms", samples(step_and_wait, ctx.warmup, ctx.repeats), dev=dev)
