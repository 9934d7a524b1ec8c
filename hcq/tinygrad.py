"""rawgpu as a tinygrad device: tinygrad's tensors computed through rawgpu's queues, on any device rawgpu opens (the
emulated GPU included). tinygrad renders and compiles each kernel (its LLVM renderer, LLVM in-process); rawgpu loads
and launches it, and replays TinyJit's batches of kernels as rawgpu Graphs.

    from rawgpu.hcq import tinygrad as rg
    rg.register("MOCKPCI+AMD")                 # tinygrad's device "RAWGPU" is this rawgpu device
    from tinygrad import Tensor
    (Tensor([1.0, 2.0], device="RAWGPU") * 3).numpy()

register(spec, spec2, ...) makes RAWGPU:1, RAWGPU:2, ... the other specs (several boards: MOCKPCI:1+AMD, ...);
register(..., name="RG1201") gives them another tinygrad name, so devices of several kinds can be open at once. A
spec may also be an open rawgpu.hcq.Device, which tinygrad then shares with its owner (and leaves open at exit).
Written against tinygrad 0.14.0 (`pip install 'rawgpu[tinygrad]'`); another version is refused with the reason.

tinygrad's LLVM backend emits relocatable objects; rawgpu loads linked code objects only (ET_DYN, as ROCr does), so
each kernel is linked with ld.lld (LLVM 19's, or $RAWGPU_LLD) before it is loaded.
"""
from __future__ import annotations
import os, shutil, subprocess, sys, tempfile, types, warnings
from rawgpu.errors import DeviceTimeout, RawGPUError

TINYGRAD_VERSION = "0.14.0"   # the tinygrad whose device interface this module implements
_ET_REL = 1


def _tinygrad():
  try: import tinygrad
  except ImportError as e: raise RawGPUError(f"tinygrad is not installed: pip install tinygrad=={TINYGRAD_VERSION}") from e
  from importlib.metadata import version
  if (v := version("tinygrad")) != TINYGRAD_VERSION:
    raise RawGPUError(f"tinygrad {v} is installed; rawgpu.hcq.tinygrad implements tinygrad {TINYGRAD_VERSION}'s device "
                      f"interface (Compiled, Allocator, Program), which changes between versions: pip install tinygrad=={TINYGRAD_VERSION}")
  return tinygrad


def lld() -> str:
  """The linker used for tinygrad's relocatable objects: $RAWGPU_LLD, else ld.lld-19 or ld.lld on PATH."""
  if (path := os.environ.get("RAWGPU_LLD")): return path
  for name in ("ld.lld-19", "ld.lld"):
    if (path := shutil.which(name)): return path
  raise RawGPUError("tinygrad's kernels need linking and no ld.lld was found: install lld-19 (Debian: apt install lld-19) or set RAWGPU_LLD")


def link(obj: bytes, name: str) -> bytes:
  """A relocatable AMDGPU object linked into a code object (ld.lld -shared); a linked one is returned as it is."""
  if len(obj) < 18 or obj[:4] != b"\x7fELF" or int.from_bytes(obj[16:18], "little") != _ET_REL: return obj
  with tempfile.TemporaryDirectory(prefix="rawgpu-tinygrad-") as d:
    src, dst = os.path.join(d, "kernel.o"), os.path.join(d, "kernel.so")
    with open(src, "wb") as f: f.write(obj)
    try: r = subprocess.run([linker := lld(), "-shared", "-o", dst, src], capture_output=True, text=True)
    except OSError as e: raise RawGPUError(f"linking tinygrad kernel {name}: cannot run {linker}: {e}") from e
    if r.returncode != 0: raise RawGPUError(f"linking tinygrad kernel {name} failed: {r.stderr.strip() or r.stdout.strip()}")
    with open(dst, "rb") as f: return f.read()


def register(*specs, name: str = "RAWGPU") -> str:
  """Make tinygrad's device `name` (and name:1, name:2, ...) the rawgpu devices `specs`, DEV strings or open Devices
  (default: rawgpu's default device); returns the name. A DEV string opens when tinygrad first uses it. A name
  tinygrad has opened already is refused: tinygrad keeps a device once opened, so register another name."""
  _tinygrad()
  if not name.isalnum() or not name.isupper() or not name[0].isalpha():
    raise RawGPUError(f"tinygrad device name {name!r}: use capital letters and digits, starting with a letter (e.g. RAWGPU)")
  from tinygrad.device import Device as TinygradDevices
  if any(d.split(":")[0] == name for d in TinygradDevices._opened_devices):   # tinygrad caches a device once opened
    raise RawGPUError(f"tinygrad device {name} is open already and keeps its rawgpu devices; register another name")
  module = f"tinygrad.runtime.ops_{name.lower()}"
  cls = type(f"{name.capitalize()}Device", (_device_class(),), {"SPECS": tuple(specs) or (_default_spec(),)})
  mod = types.ModuleType(module, f"tinygrad device {name}: rawgpu devices {', '.join(map(str, cls.SPECS))}")
  setattr(mod, cls.__name__, cls)
  sys.modules[module] = mod
  return name


def _default_spec() -> str:
  """register() without specs: rawgpu's DEV, read now (once tinygrad runs, DEV is tinygrad's: it writes its default
  device there, and DEV=RAWGPU names the device register() makes)."""
  from rawgpu.drivers.devspec import parse_dev
  text = os.environ.get("DEV")
  if text is None: raise RawGPUError("register() without specs opens rawgpu's DEV, and DEV is not set: give a spec, e.g. register('MOCKPCI+AMD')")
  try: parse_dev(text)
  except RawGPUError as e: raise RawGPUError(f"register() without specs opens rawgpu's DEV, which is not one ({e}); give a spec, e.g. register('KFD+AMD')") from None
  return text


_CLASS = None
_HOST_COPIES: set = set()   # (source, destination) tinygrad devices already warned that their copies go through the host


def _can_share_a_graph(devs: list) -> bool:
  """Whether one rawgpu Graph can hold work of these rawgpu devices: one device, or devices of one interface whose
  VRAM is all CPU-visible (a large BAR), which is what peer mappings need (the graph's arguments and signals, and
  the buffers their copies read, are mapped across)."""
  devs = list({id(d): d for d in devs}.values())
  return len(devs) == 1 or (len({type(d.iface) for d in devs}) == 1 and all(d.props.bar_size >= d.props.vram_size for d in devs))

def _device_class():
  """The tinygrad classes, built once tinygrad is imported (so importing this module needs no tinygrad)."""
  global _CLASS
  if _CLASS is not None: return _CLASS
  from tinygrad.device import BufferSpec, Compiled, LRUAllocator, MultiBuffer
  from tinygrad.engine.jit import GraphRunner, MultiGraphRunner
  from tinygrad.renderer.llvmir import AMDLLVMRenderer
  from tinygrad.uop.ops import Ops, sym_infer
  from rawgpu.hcq.buffer import Buffer as RawgpuBuffer
  from rawgpu.hcq.graph import Graph

  class Allocator(LRUAllocator):
    def _alloc(self, size: int, options: BufferSpec):
      if options.external_ptr is not None: raise RawGPUError(f"{self.dev.device}: buffers at external pointers are not supported")
      return self.dev.rg.alloc(size, host=options.host, uncached=options.uncached, cpu_access=options.cpu_access)
    def _free(self, opaque, options: BufferSpec) -> None: opaque.free()   # waits for queued work that uses it
    def _copyin(self, dest, src: memoryview) -> None: dest.copyin(src)
    def _copyout(self, dest: memoryview, src) -> None: src.copyout(dest)
    def _offset(self, buf, size: int, offset: int): return buf.view(offset, size)
    def _transfer(self, dest, src, sz: int, src_dev, dest_dev) -> None:
      """Between two rawgpu devices: the destination maps the source (peer VRAM or host pages) and copies it on its
      copy engine; where the two cannot map each other (another interface, a small BAR), through the host."""
      d = dest_dev.rg
      try: d.map(src)
      except RawGPUError as e:
        if (src_dev.device, dest_dev.device) not in _HOST_COPIES:
          _HOST_COPIES.add((src_dev.device, dest_dev.device))
          warnings.warn(f"tinygrad copies from {src_dev.device} to {dest_dev.device} go through the host: {e}", RuntimeWarning, stacklevel=2)
        tmp = memoryview(bytearray(sz))
        src.view(0, sz).copyout(tmp)
        dest.view(0, sz).copyin(tmp)
        return
      d.transfer(dest, src, sz)

  class Program:
    def __init__(self, dev, obj):
      self.dev, self.name = dev, obj.name
      self.prg = dev.rg.program(link(obj.lib, obj.name), obj.name)

    def __call__(self, *bufs, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=(), wait: bool = False, timeout: int | None = None):
      """tinygrad's launch: buffers, then the integer values; with wait, the GPU seconds it took. tinygrad's timeout
      in ms (BEAM's early stop: a candidate 3x slower than the best so far; 0 or None is none) stops a kernel that
      runs longer, on a device that recovers in place (AM, KFD): the kernel is stopped, the queues restarted, and
      the RuntimeError tinygrad's search expects is raised. Where it cannot recover, it is ignored, as tinygrad's own
      devices do: the kernel runs to its end (a hang is still a DeviceTimeout)."""
      args = dict(global_size=tuple(global_size), local_size=tuple(local_size), timing=wait)
      rg = self.dev.rg
      if not (wait and timeout and rg.recovers_in_place): return self.prg(*bufs, *vals, **args)
      rg.synchronize()   # the timeout is this kernel's alone: earlier work (tinygrad queues it) is not stopped with it
      try: return self.prg(*bufs, *vals, **args, timeout_ms=timeout, report=False)   # no hang report: BEAM expects this
      except DeviceTimeout as e:
        rg.recover()
        raise RuntimeError(f"{self.name} on {self.dev.device} ran past tinygrad's timeout of {timeout} ms: stopped") from e

  class RawgpuGraph(MultiGraphRunner):
    """A batch of TinyJit's kernels and copies as one rawgpu Graph: recorded once, replayed with the jit's new input
    buffers, variables and the launch dimensions that follow from them, by patching (one indirect buffer per queue
    per replay). The batch may span rawgpu devices that map each other (a sharded model): each queue runs its share
    at once with the others, waiting only where tinygrad's dependencies say (Graph(ordered=False))."""
    @staticmethod
    def supports_uop(batch_devs, new_call) -> bool:
      if not MultiGraphRunner.supports_uop(batch_devs, new_call): return False   # kernels and copies of one kind of device
      return _can_share_a_graph([d.rg for d in GraphRunner._all_devs(batch_devs, new_call)])

    def __init__(self, linear, input_uops=()):
      super().__init__(linear, input_uops)
      self.graph = Graph(self.calls[0][2][0].allocator.dev.rg, ordered=False)
      # a launch dimension that depends on variables is a graph input "dim<k>.<axis>" (k: which of the batch's
      # symbolic shapes), its value computed from the variables at each call
      self.sym_axes = [[a for a, d in enumerate(dims) if not isinstance(d, (int, float))] for dims in self.symbolic_dims]
      self.inputs: dict[str, tuple[int, int]] = {}      # graph input name -> (jit input index, device index)
      self.copy_maps: list[tuple[str, object]] = []     # (input, rawgpu device that copies it): mapped there at each call
      node_of: dict[int, int] = {}                      # call -> its graph node (a copy of 0 bytes has none)
      for j, ((dev_idx, ast, bufs, device_vars), runtime) in enumerate(zip(self.calls, self.runtimes)):
        args: list = [b._buf for b in bufs]
        for pos, iidx in self.uop_replace[j]:
          args[pos] = self.graph.input(name := f"in{iidx}.{dev_idx}")
          self.inputs[name] = (iidx, dev_idx)
        outs = ast.arg.outs if ast.op is Ops.PROGRAM else [0]
        after = [node_of[n] for n in self._access_resources(bufs, outs, j) if n in node_of]   # tinygrad's dependencies
        if ast.op is Ops.COPY:
          on = bufs[0].allocator.dev.rg   # the destination's copy engine reads the source where it lies
          for a in args:
            if isinstance(a, RawgpuBuffer): on.map(a)
            else: self.copy_maps.append((a.name, on))
          before = len(self.graph.nodes)
          self.graph.copy(args[0], args[1], bufs[0].nbytes, on=on, after=after)
          if len(self.graph.nodes) > before: node_of[j] = self.graph.last_node
          continue
        assert ast.op is Ops.PROGRAM and runtime is not None
        args += list(ast.arg.vals({v: 0 for v in self.vars} | device_vars))
        for i, vidx in self.var_vals_replace.get(j, ()): args[len(bufs) + i] = self.graph.input(f"var:{self.vars[vidx]}")
        g, l = (self._dims(k, d) for k, d in zip(self.launch_dims_replace.get(j, (None, None)), (ast.arg.global_size, ast.arg.local_size or (1, 1, 1))))
        self.graph.exec(runtime.prg, *args, global_size=g, local_size=l, after=after)
        node_of[j] = self.graph.last_node

    def _dims(self, k: int | None, dims) -> tuple:
      if k is None: return tuple(int(d) for d in dims)
      return tuple(self.graph.input(f"dim{k}.{a}") if a in self.sym_axes[k] else int(d) for a, d in enumerate(dims))

    def __call__(self, input_uops, var_vals, wait=False):
      bufs = {name: (b.bufs[d] if isinstance(b := input_uops[i].buffer, MultiBuffer) else b)._buf for name, (i, d) in self.inputs.items()}
      for name, on in self.copy_maps: on.map(bufs[name])
      dims = {f"dim{k}.{a}": int(sym_infer(d[a], var_vals)) for k, d in enumerate(self.symbolic_dims) for a in self.sym_axes[k]}
      self.graph.replay(**bufs, **{f"var:{v}": var_vals[v] for v in self.vars}, **dims)
      return self.graph.gpu_time() if wait else None   # gpu_time waits for the replay

  class RawgpuDevice(Compiled):
    SPECS: tuple = (None,)
    def __init__(self, device: str):
      from rawgpu.hcq.device import Device
      from tinygrad.helpers import getenv
      at = device.split(":", 1)[1] if ":" in device else "0"
      if not at.isdigit(): raise RawGPUError(f"tinygrad device {device}: the index after ':' must be 0, 1, ... (as in {device.split(':')[0]}:1)")
      idx = int(at)
      if idx >= len(self.SPECS):
        raise RawGPUError(f"tinygrad device {device}: {device.split(':')[0]} has {len(self.SPECS)} rawgpu device(s) "
                          f"({', '.join(map(str, self.SPECS))}); give register() more specs")
      spec = self.SPECS[idx]
      self.owned = not isinstance(spec, Device)   # a Device given to register() stays its owner's
      self.rg = Device(spec) if self.owned else spec
      if self.owned: self.rg.timeout_ms = getenv("HCQDEV_WAIT_TIMEOUT_MS", 30000)   # as long as tinygrad's own devices wait
      super().__init__(device, Allocator(self), [AMDLLVMRenderer], Program, graph=RawgpuGraph, arch=self.rg.props.arch)
    def synchronize(self, timeout: int | None = None) -> None: self.rg.synchronize(timeout)   # (None: the device's)
    def finalize(self) -> None:
      if self.owned and not self.rg.closed: self.rg.close()

  _CLASS = RawgpuDevice
  return _CLASS


def run_script(dev, script: str, args: list[str]) -> int:
  """Run a tinygrad program unchanged with rawgpu's device `dev` (an open Device) as tinygrad's default device
  (RAWGPU): `rawgpu tinygrad script.py`, which has checked the script exists. Returns the script's exit status."""
  import runpy
  register(dev)
  from tinygrad.helpers import DEV
  DEV.value = os.environ["DEV"] = "RAWGPU"   # tinygrad's default device, here and in its children (rawgpu read its DEV already)
  if not shutil.which(os.environ.get("CC", "clang")) and shutil.which("clang-19"):
    print("rawgpu tinygrad: tinygrad's CPU device compiles C with $CC; there is no clang, so CC=clang-19", file=sys.stderr)
    os.environ["CC"] = "clang-19"
  sys.argv = [script, *args]
  sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
  try: runpy.run_path(script, run_name="__main__")
  except SystemExit as e:
    if e.code is None or isinstance(e.code, int): return e.code or 0
    print(e.code, file=sys.stderr)   # sys.exit("message"), as Python itself prints it
    return 1
  return 0
