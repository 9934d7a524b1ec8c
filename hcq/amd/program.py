"""AMD programs: a code object loaded once into GPU memory, launched with checked arguments."""
from __future__ import annotations
import copy, dataclasses, functools, operator, struct, warnings, weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable
import numpy as np
from rawgpu.errors import CodeObjectError, RawGPUError
from rawgpu.hcq.amd.elf import KernelArg, check_launch, check_resources, limits_for, load_code_object
from rawgpu.hcq.amd.queues import DISPATCH_PACKET_SIZE, KERNARG_ADDRESS_AT, fill_dispatch_packet
from rawgpu.hcq.buffer import Buffer, Local
from rawgpu.hcq.patch import as_index
from rawgpu.hcq.signal import check_timeout

if TYPE_CHECKING:
  from rawgpu.hcq.amd.backend import AMDBackend
  from rawgpu.hcq.amd.queues import AMDComputeQueue

# hidden (implicit) kernel arguments the dispatch fills in, by value kind (code object v5+)
_HIDDEN = {
  "hidden_block_count_x": lambda g, l: g[0], "hidden_block_count_y": lambda g, l: g[1], "hidden_block_count_z": lambda g, l: g[2],
  "hidden_group_size_x": lambda g, l: l[0], "hidden_group_size_y": lambda g, l: l[1], "hidden_group_size_z": lambda g, l: l[2],
  "hidden_grid_dims": lambda g, l: 1 + (g[1] * l[1] > 1 or g[2] * l[2] > 1) + (g[2] * l[2] > 1),
}
_INT = {1: "B", 2: "H", 4: "I", 8: "Q"}
_U64 = struct.Struct("<Q")
DYNAMIC_STACK_BYTES = 1024   # per work-item, for a kernel with a dynamic call stack (HIP's default stack limit)
# argument kinds (code object metadata .value_kind) a launch cannot fill: the program is refused when loaded
_UNSUPPORTED_KINDS = {
  "image": "an image", "sampler": "a sampler", "pipe": "a pipe", "queue": "a device-side enqueue queue",
}


# hidden arguments for runtime services this runtime does not provide: a launch passes 0 for them (LLVM declares them
# all when it cannot prove them unused, as at -O0, so a kernel that declares them is loaded, with a warning)
_NO_SERVICE = {
  "hidden_printf_buffer": "printf", "hidden_hostcall_buffer": "hostcall (HIP printf, malloc)", "hidden_heap_v1": "a device heap (malloc)",
  "hidden_default_queue": "device-side enqueue", "hidden_completion_action": "device-side enqueue",
  "hidden_multigrid_sync_arg": "multi-grid sync", "hidden_queue_ptr": "the AQL queue",
}


class AMDProgram:
  def __init__(self, backend: "AMDBackend", code: bytes, name: str | None = None):
    dev = backend.dev
    self.backend, self.dev = backend, dev
    co = load_code_object(code, target=dev.props.target or dev.props.arch, name=name or "code object")
    if name is None:
      if len(co.kernels) != 1: raise CodeObjectError(f"the code object has kernels {', '.join(co.kernels)}: name the one to load")
      name = next(iter(co.kernels))
    if name not in co.kernels: raise CodeObjectError(f"no kernel {name!r} in the code object; it has {', '.join(co.kernels)}")
    self.name, self.kernel = name, co.kernels[name]
    self.limits = limits_for(dev.props.arch)
    if dev.props.lds_size:   # what the device reports (KFD topology, AM's IP facts) rules over the arch's table
      self.limits = dataclasses.replace(self.limits, lds_per_workgroup=dev.props.lds_size, target=f"{dev} ({dev.props.arch})")
    check_resources(self.kernel, self.limits)
    self.image = dev.alloc(max(len(co.image), 256) + co.align)
    # shared with its dynamic-LDS variants (copies that run the same code): the timing templates' signal pairs
    # (exec_template), the graphs that recorded a launch of any of them (free() refuses while one lives), the family
    # (weak: no cycle, so a program dropped goes at once), the engine of a submit() that ran it (no ticket: _release_code)
    self._signals: list = []
    self._graphs = weakref.WeakSet()
    self._family = weakref.WeakSet([self])
    self._submitted: list = []
    self._freed = False
    # once the program and its variants are all dropped (they share _code, and none points back at another: no cycle)
    # its code and signals are freed when the work queued by then is done (Releases)
    self._code = _Code()
    self._release = weakref.finalize(self._code, _release_code, dev, self.image, self._signals, self._submitted)
    self._release.atexit = False
    base = (self.image.va + co.align - 1) // co.align * co.align
    self.image.view(base - self.image.va, len(co.image)).copyin(co.image_at(base))
    kd = self.kernel.descriptor
    self.kd_va = base + self.kernel.descriptor_offset
    self.code_va = self.kd_va + kd.kernel_code_entry_byte_offset
    self.rsrc1, self.rsrc2, self.rsrc3 = kd.compute_pgm_rsrc1, kd.compute_pgm_rsrc2, kd.compute_pgm_rsrc3
    self.wave32 = kd.wave32
    self.lds = max(kd.group_segment_fixed_size, self.kernel.meta.group_segment_fixed_size)
    # The descriptor leaves LDS_SIZE to the dispatcher (HSA puts it in the AQL packet); gfx10+ counts it in 512-byte units.
    self.rsrc2 = backend.gc["regCOMPUTE_PGM_RSRC2"].modify(self.rsrc2, LDS_SIZE=(self.lds + 511) // 512)
    self.scratch = max(kd.private_segment_fixed_size, self.kernel.meta.private_segment_fixed_size)
    # a dynamic call stack (recursion, indirect calls, variable-size allocas) grows past the fixed size: AMDGPUUsage
    # says the runtime adds room for it, as HIP adds its stack limit
    self.dynamic_stack = bool(kd.fields.get("uses_dynamic_stack")) or self.kernel.meta.uses_dynamic_stack
    if self.dynamic_stack: self.scratch += DYNAMIC_STACK_BYTES
    if kd.kernarg_preload & 0xffff:   # KERNARG_PRELOAD_SPEC_LENGTH: arguments the firmware would put in SGPRs
      raise CodeObjectError(f"kernel {name} preloads {kd.kernarg_preload & 0xffff} kernarg dwords into SGPRs (built with "
                            "-amdgpu-kernarg-preload-count); this runtime dispatches without preloading: build it without")
    backend.check_scratch(self, name)
    self.kernarg_size = max(kd.kernarg_size, self.kernel.meta.kernarg_segment_size, 16)
    self.args = [a for a in self.kernel.meta.args if not a.hidden]
    for i, a in enumerate(self.args):
      if a.value_kind in _UNSUPPORTED_KINDS:
        raise CodeObjectError(f"kernel {name}: argument {repr(a.name) if a.name else f'#{i}'} is {_UNSUPPORTED_KINDS[a.value_kind]}, which this runtime does not provide")
    self.nargs = len(self.args)
    self.hidden = [a for a in self.kernel.meta.args if a.hidden]
    missing = sorted({_NO_SERVICE[a.value_kind] for a in self.hidden if a.value_kind in _NO_SERVICE})
    if missing:
      warnings.warn(f"kernel {name} may use {', '.join(missing)}, which this runtime does not provide (it passes 0): it faults if it "
                    "does; a kernel built at -O0 declares them all, build with -O1 or more", RuntimeWarning, stacklevel=4)
    self._ptr = [self.takes_buffer(a) for a in self.args]
    self.user_sgprs = kd.user_sgprs()
    unsupported = [n for n, _, _ in self.user_sgprs if n not in ("user_sgpr_kernarg_segment_ptr", "user_sgpr_dispatch_ptr", "user_sgpr_dispatch_id")]
    if unsupported: raise CodeObjectError(f"kernel {name} needs user SGPRs this runtime does not provide: {', '.join(unsupported)}")
    self.needs_dispatch = any(n == "user_sgpr_dispatch_ptr" for n, _, _ in self.user_sgprs)
    self.dispatch_offset = (self.kernarg_size + 63) & ~63  # the AQL packet follows the arguments
    self._ptr_idx = tuple(i for i, p in enumerate(self._ptr) if p)
    self._args_struct = _args_struct(self.args, self._ptr)
    self._templates: dict = {}
    self.dynamic_lds = 0                 # bytes of LDS a launch adds to the kernel's own (see with_dynamic_lds)
    self._dynamic: dict[int, AMDProgram] = {}
    self._locals = tuple(i for i, a in enumerate(self.args) if a.value_kind == "dynamic_shared_pointer")   # take a Local

  def with_dynamic_lds(self, nbytes: int) -> "AMDProgram":
    """This kernel launched with nbytes of LDS after its own (dynamic shared memory: HIP's extern __shared__ and
    hipLaunchKernel's sharedMemBytes). The workgroup's LDS allocation (RSRC2.LDS_SIZE, the dispatch packet's group
    segment size) covers both; the hidden_dynamic_lds_size argument says nbytes."""
    nbytes = self._lds_bytes(nbytes)
    if nbytes == 0: return self
    p = self._dynamic.get(nbytes)
    if p is None:
      limit = self.limits.lds_per_workgroup
      if not isinstance(nbytes, int) or nbytes < 0 or self.lds + nbytes > limit:
        raise RawGPUError(f"kernel {self.name}: {nbytes!r} bytes of dynamic LDS after its own {self.lds} do not fit the {limit} bytes a workgroup has")
      p = copy.copy(self)
      p.dynamic_lds, p.lds, p._templates, p._dynamic, p._locals = nbytes, self.lds + nbytes, {}, {}, ()
      self._family.add(p)   # (it shares self._code: the code stays loaded while it lives)
      p.rsrc2 = self.backend.gc["regCOMPUTE_PGM_RSRC2"].modify(self.rsrc2, LDS_SIZE=(p.lds + 511) // 512)
      self._dynamic[nbytes] = p
    return p

  def _lds_bytes(self, n) -> int:
    if (i := as_index(n)) is None: raise RawGPUError(f"kernel {self.name}: dynamic_lds takes a number of bytes (an int), not {n!r}")
    n = i
    if n < 0: raise RawGPUError(f"kernel {self.name}: dynamic_lds is a number of bytes after the kernel's own LDS (0 or more), not {n}")
    return n

  def with_lds_args(self, args: tuple, dynamic_lds: int = 0) -> tuple["AMDProgram", tuple]:
    """The program with the LDS its launch adds (its __local pointer arguments' Locals, in order, each aligned as the
    metadata's pointee_align says, then dynamic_lds bytes), and args with each Local replaced by its LDS address."""
    self.check_arg_count(args)
    dynamic_lds = self._lds_bytes(dynamic_lds)
    at, out = self.lds, list(args)
    for i in self._locals:
      a, v = self.args[i], args[i]
      if not isinstance(v, Local): raise RawGPUError(f"kernel {self.name}: argument {self._label(a)} is a __local pointer; pass rawgpu.hcq.Local(nbytes), not {type(v).__name__}")
      align = max(4, a.raw.get(".pointee_align", 4))
      at = (at + align - 1) // align * align
      out[i], at = at, at + v.nbytes
    return self.with_dynamic_lds(at - self.lds + dynamic_lds), tuple(out)

  def free(self) -> None:
    """Free the kernel's code (and its timing signals) once the work queued so far is done: waits for it. Launching
    it (or a variant of it with dynamic LDS) afterwards is an error; a graph that recorded it must be freed first."""
    if self._freed: return
    live = [g for g in self._graphs if not g.freed]
    if live:   # (one dropped may wait for the cycle collector)
      import gc
      gc.collect()
      live = [g for g in self._graphs if not g.freed]
    if live: raise RawGPUError(f"kernel {self.name} is recorded in {len(live)} graph(s) not freed yet: free them (Graph.free) or drop them first")
    for p in list(self._family):   # first: whatever happens below, no launch of it is queued again
      p._freed, p._templates = True, {}   # a launch looks for its template again: _launch_setup refuses it
    self._release()
    self.dev.releases.run(wait_ms=10_000)

  def check_loaded(self) -> None:
    if self._freed: raise RawGPUError(f"kernel {self.name}: the program was freed; load it again (Device.program)")

  def check_arg_count(self, args: tuple) -> None:
    if len(args) != len(self.args):
      raise RawGPUError(f"kernel {self.name} takes {len(self.args)} arguments ({', '.join(a.name or a.value_kind for a in self.args)}), got {len(args)}")

  def _pack_hidden(self, view: memoryview, g: tuple, l: tuple) -> None:
    for a in self.hidden:
      fill = _HIDDEN.get(a.value_kind)
      v = self.dynamic_lds if a.value_kind == "hidden_dynamic_lds_size" else None if fill is None else fill(g, l)
      if v is not None and a.size in _INT: struct.pack_into("<" + _INT[a.size], view, a.offset, v)

  def _label(self, a: KernelArg) -> str:
    """How errors name an argument: its source name, else its position (code objects built without arg names)."""
    pos = next((i for i, b in enumerate(self.args) if b is a), None)
    return repr(a.name) if a.name else f"#{pos} ({a.type_name or a.value_kind})"

  @staticmethod
  def takes_buffer(a: KernelArg) -> bool:
    """Whether the argument is a pointer (a Buffer's address goes there)."""
    return a.value_kind == "global_buffer" or a.address_space in ("global", "constant", "generic")

  def address_of(self, a: KernelArg, v) -> int:
    """The address pointer argument `a` takes from v: a live Buffer of this device, or one mapped here."""
    if not isinstance(v, Buffer): raise RawGPUError(f"kernel {self.name}: argument {self._label(a)} is a pointer; pass a Buffer, not {type(v).__name__}")
    v._check_alive()
    if v.dev is not self.dev and not self.dev.backend.maps(v): raise RawGPUError(f"kernel {self.name}: argument {self._label(a)} lives on {v.dev}, not mapped to {self.dev}")
    return v.va

  def _pack_one(self, view: memoryview, a: KernelArg, v, launch: int) -> None:
    if self.takes_buffer(a):
      struct.pack_into("<Q", view, a.offset, self.address_of(a, v))
      v.used_by(self.dev, launch)  # recorded against the device whose ticket it is
      return
    if isinstance(v, np.generic) and not isinstance(v, np.void): v = v.item()   # numpy scalars count as their value
    fmt = _float_fmt(a)
    # metadata without a type, or one it names by a typedef (.type_name is the source's spelling): trust the float
    if fmt is None and not _int_type(a) and isinstance(v, float) and a.size in (2, 4, 8): fmt = {2: "e", 4: "f", 8: "d"}[a.size]
    if fmt and isinstance(v, (float, int)):  # an int given to a float argument is its value
      try: struct.pack_into("<" + fmt, view, a.offset, float(v))
      except (OverflowError, struct.error): raise RawGPUError(f"kernel {self.name}: {v} does not fit argument {self._label(a)} ({a.type_name})") from None
    elif isinstance(v, float): raise RawGPUError(f"kernel {self.name}: argument {self._label(a)} is an integer ({a.type_name or a.value_kind}, {a.size} bytes); got the float {v!r}")
    elif isinstance(v, int) and a.size in _INT:
      if not -(1 << (8 * a.size - 1)) <= v < (1 << (8 * a.size)): raise RawGPUError(f"kernel {self.name}: {v} does not fit argument {self._label(a)} ({a.size} bytes)")
      struct.pack_into("<" + _INT[a.size], view, a.offset, v & ((1 << (8 * a.size)) - 1))
    elif isinstance(v, (bytes, bytearray)) and len(v) == a.size: view[a.offset:a.offset + a.size] = v
    else: raise RawGPUError(f"kernel {self.name}: argument {self._label(a)} ({a.value_kind}, {a.size} bytes) cannot take {type(v).__name__}")

  def _launch_setup(self, global_size, local_size, timing: bool | str) -> "_Launch":
    """Once per launch shape: the queue template, its patch slots and the kernarg image with the hidden arguments."""
    self.check_loaded()
    g, l = launch_dims(global_size, local_size)
    check_launch(self.kernel, l, self.limits)
    img = bytearray(self.dispatch_offset + DISPATCH_PACKET_SIZE if self.needs_dispatch else self.kernarg_size)
    self._pack_hidden(memoryview(img), g, l)
    if self.needs_dispatch: fill_dispatch_packet(memoryview(img)[self.dispatch_offset:], self, g, l, 0)   # a launch adds its kernarg address
    q = self.backend.exec_template(self, g, l, timing)
    st, whole = self._args_struct, None
    if st is not None and all(a.offset >= st.size for a in self.hidden) and len(img) >= st.size:
      whole = struct.Struct(st.format + f"{len(img) - st.size}s")   # the explicit arguments, then the image's rest
    return _Launch(q, q.words_array(), g, l, bytes(img), len(img), whole, bytes(img[st.size:]) if whole else b"",
                   q.slot_writer("kernargs") or _no_slot, q.slot_writer("dispatch"), q.slot_writer("timeline"), self.dev.ring(q.engine),
                   q.slot_writer("dispatch_id"))

  def _write_kernargs(self, ln: "_Launch", view: memoryview, off: int, args: tuple, ticket: int) -> None:
    """The launch's whole kernarg image at view[off:]: one struct over the explicit arguments (buffers as their
    addresses, their use recorded) and the hidden rest; what it does not take (a buffer that is not a live one of this
    device, a negative int, raw bytes, a wrong type) goes the checked way."""
    if ln.whole is not None:
      vals, dev = args, self.dev
      for i in self._ptr_idx:
        v = args[i]
        if type(v) is not Buffer or v.dev is not dev or (r := v.base or v).freed: break
        if r.last_use < ticket: r.last_use = ticket
        if vals is args: vals = list(args)
        vals[i] = v.va
      else:
        try: return ln.whole.pack_into(view, off, *vals, ln.tail)
        except (struct.error, OverflowError, TypeError): pass   # (the slow path below says what is wrong)
    ka = view[off:off + ln.size]
    ka[:] = ln.img
    for a, v in zip(self.args, args): self._pack_one(ka, a, v, ticket)

  def __call__(self, *args, global_size=(1, 1, 1), local_size=(1, 1, 1), wait: bool = False, timing: bool = False,
               dynamic_lds: int = 0, timeout_ms: float | None = None, report: bool = True) -> float | None:
    """Launch over `global_size` workgroups of `local_size` work-items. With timing=True, returns GPU seconds (waits;
    wait and timing wait at most timeout_ms (default: the device's timeout_ms) for the kernel, then raise DeviceTimeout, with the last submissions
    decoded and dumped unless report=False).
    __local pointer arguments take a Local(nbytes); dynamic_lds: bytes of LDS each workgroup gets after the kernel's
    own and those (see with_lds_args)."""
    if dynamic_lds or self._locals:
      prg, args = self.with_lds_args(args, dynamic_lds)
      return prg(*args, global_size=global_size, local_size=local_size, wait=wait, timing=timing, timeout_ms=timeout_ms, report=report)
    dev = self.dev
    if dev.closed: dev.check_open()
    if timeout_ms is not None: check_timeout(timeout_ms, f"kernel {self.name}")   # (before anything is queued)
    prof = dev._profiler
    key = (global_size, local_size, "profile" if prof is not None else bool(timing))   # ("profile" is the Profiler's)
    try: ln = self._templates[key]
    except (KeyError, TypeError):  # TypeError: unhashable sizes (lists)
      ln = self._launch_setup(global_size, local_size, key[2])
      if isinstance(global_size, (int, tuple)) and isinstance(local_size, (int, tuple)): self._templates[key] = ln
    if len(args) != self.nargs: self.check_arg_count(args)
    ka = self.backend.kernargs
    off = ka.take(ln.size)
    self._write_kernargs(ln, ka.view, off, args, dev.timeline_value)   # may raise: the ticket is taken after
    ka_va = ka.va + off
    ln.kernargs(ka_va)
    if ln.dispatch is not None:   # the AQL packet (in the image) points at this launch's arguments
      _U64.pack_into(ka.view, off + self.dispatch_offset + KERNARG_ADDRESS_AT, ka_va)
      ln.dispatch(ka_va + self.dispatch_offset)
    value = dev.next_timeline(ln.q.engine)
    tl = value - dev.timeline_base
    ln.timeline(tl)
    if ln.dispatch_id is not None: ln.dispatch_id(value)   # a kernel that reads its dispatch id gets its ticket
    if prof is not None:
      start, end, view, idx = prof.slot()
      prof.record(self.name, "kernel", value, view, idx)
      values = {"timeline": tl, "ts_start": start, "ts_end": end}   # profiled launches patch every slot they have
      if ln.kernargs is not _no_slot: values["kernargs"] = ka_va   # (a kernel without kernargs has none for them)
      if ln.dispatch: values["dispatch"] = ka_va + self.dispatch_offset
      if ln.dispatch_id: values["dispatch_id"] = value
      ln.q.submit(dev, values)
    else: ln.ring.push(ln.words)
    if not (wait or timing): return None
    dev.wait_timeline(value, timeout_ms, report)
    if not timing: return None
    if prof is not None: return (view[idx + 1] - view[idx]) / self.backend.timestamp_hz
    return (ln.q.t_end.timestamp - ln.q.t_start.timestamp) / self.backend.timestamp_hz


class _Code:
  """What a program and its dynamic-LDS variants share: when it goes, their code does (AMDProgram._release)."""
  __slots__ = ("__weakref__",)


def _release_code(dev, image: Buffer, signals: list, submitted: list) -> None:
  """A program dropped or freed: its code goes once the work queued so far is done (and, where a queue's submit()
  ran it without a ticket, a ticket of that engine after it)."""
  dev.releases.later(functools.partial(_free_program, dev, image, signals), fence=submitted[0] if submitted else None)


def _free_program(dev, image: Buffer, signals: list) -> None:
  image.free()
  for sig in signals: dev._reuse_signal(sig)


@dataclass
class _Launch:
  """A launch shape's queue template and where its per-launch values go (word index, shift) in its words."""
  q: "AMDComputeQueue"
  words: object           # the template's finalized words (array of uint32), written in place at each launch
  g: tuple[int, int, int]
  l: tuple[int, int, int]
  img: bytes             # the kernarg image with the hidden arguments (explicit ones zero)
  size: int              # its length
  whole: struct.Struct | None   # packs the explicit arguments and the image's tail in one call (None: checked path)
  tail: bytes
  kernargs: Callable[[int], None]         # HWQueue.slot_writer of each patch slot (dispatch: None where it has none)
  dispatch: Callable[[int], None] | None
  timeline: Callable[[int], None]
  ring: object            # the device's ring for the template's engine (the same object for the device's life)
  dispatch_id: Callable[[int], None] | None = None   # where the kernel reads its dispatch id (user SGPRs), if it does


def _no_slot(v: int) -> None:
  """The kernarg address of a kernel that reads no kernargs (no user SGPR takes it) goes nowhere."""


def _float_fmt(a: KernelArg) -> str | None:
  return {("half", 2): "e", ("float", 4): "f", ("double", 8): "d"}.get((a.type_name, a.size))


# OpenCL C's integer type spellings (and C's, which .type_name may carry); another name is a typedef, whose base type
# the metadata does not say
INT_TYPES = {"char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "bool", "size_t", "ptrdiff_t", "intptr_t", "uintptr_t",
             *(f"{s}{n}" for s in ("signed ", "unsigned ") for n in ("char", "short", "int", "long")), "unsigned", "signed",
             *(f"{u}int{n}_t" for u in ("", "u") for n in (8, 16, 32, 64))}


def _int_type(a: KernelArg) -> bool: return (a.type_name or "").removeprefix("const ").strip() in INT_TYPES


def _args_struct(args: list[KernelArg], ptr: list[bool]) -> struct.Struct | None:
  """One struct packing the explicit arguments at their offsets, in order (None where they are out of order,
  overlap or have sizes it cannot pack: those launches take the checked path)."""
  fmt, at = "<", 0
  for a, p in zip(args, ptr):
    code = "Q" if p and a.size == 8 else _float_fmt(a) or _INT.get(a.size)
    if code is None or a.offset < at: return None
    fmt += "x" * (a.offset - at) + code
    at = a.offset + a.size
  return struct.Struct(fmt)


def _dims(d) -> tuple[int, int, int]:
  """1 to 3 positive ints (numpy's too; not floats or bools) as three."""
  t = tuple(d) if isinstance(d, (tuple, list)) else (d,)
  try: t = () if any(isinstance(x, (bool, np.bool_)) for x in t) else tuple(operator.index(x) for x in t)
  except TypeError: t = ()
  if not 1 <= len(t) <= 3 or min(t) < 1:
    raise RawGPUError(f"launch dimensions must be 1 to 3 positive ints, got {d!r}")
  return (t + (1, 1))[:3]  # type: ignore[return-value]


GRID_MAX = (1 << 32) - 1   # work-items per dimension: the AQL dispatch packet's grid_size_x/y/z are 32-bit


def launch_dims(global_size, local_size) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
  """(workgroups, work-items per workgroup) per dimension, refused where the grid would not fit the dispatch: the
  dispatch packet and the kernel's own global-id arithmetic count work-items in 32 bits (as HIP refuses such a
  launch), and DISPATCH_DIRECT counts workgroups in 32 bits."""
  g, l = _dims(global_size), _dims(local_size)
  for axis, gn, ln in zip("xyz", g, l):
    if gn * ln > GRID_MAX:
      raise RawGPUError(f"launch of {g} workgroups of {l}: {gn} x {ln} = {gn * ln} work-items along {axis}, more than the "
                        f"{GRID_MAX} a dispatch can count; split the launch or use another dimension")
  return g, l
