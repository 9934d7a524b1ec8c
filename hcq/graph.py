"""Graph: kernel launches and copies recorded once, replayed with new inputs by patching only (one submission per
queue per replay). The work runs as one chain in recorded order: where it switches queue (compute/copy engine, or
another device) the next queue waits on a graph-private signal the previous one writes.

    g = Graph(dev)
    x = g.input("x")                       # a placeholder: a Buffer or a scalar given at replay
    g.exec(prg, x, out, 1024, global_size=4, local_size=256)
    g.copy(host_buf, out)                  # on the copy engine, after the kernel
    g.replay(x=buf_a); g.replay(x=buf_b)

    g.wait(peer_signal, g.input("go"))     # waits and signals (on this or a mapped peer's signal) run on the compute
    g.signal(done_signal, g.input("n"))    # queue in recorded order; their values may be inputs (ints at replay)

    g.exec(prg, x, out, n, global_size=(g.input("blocks"), 1, 1), local_size=256)   # grid sizes may be inputs too

Several devices: a launch runs on its program's device, a copy or wait/signal on `on=` (default: the graph's
device); buffers a device touches must be mapped there (Device.map). The graph's kernel arguments and its signals live
on the graph's device and are mapped into the others. replay() returns the graph device's ticket, which marks the
end of all of it; every other device also takes a ticket for its share.

Graph(dev, ordered=False): each queue (a device's compute or copy engine) runs its own nodes in recorded order, and a
node waits for other queues' nodes only where it says so (`after=`: ids of earlier nodes, `g.last_node` of each), so
a copy overlaps a kernel it does not depend on, and two devices work at once:

    g = Graph(dev, ordered=False)
    g.copy(next_in, host_in); c = g.last_node        # on the copy engine, while the kernel runs
    g.exec(prg, x, out, n, global_size=4)            # on the compute engine, waits for nothing in the graph
    g.exec(prg, next_in, out2, n, after=[c])         # waits for the copy
As in order, the replay's copies start after other devices' earlier work on what they copy, and the replay ends
when every queue is done.
"""
from __future__ import annotations
import functools, weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING
from rawgpu.errors import RawGPUError
from rawgpu.hcq.buffer import Buffer, GraphUses, check_copy_size, check_no_overlap
from rawgpu.hcq.patch import Var, as_index, check_u64, check_wait_ref
from rawgpu.hcq.signal import check_signal

if TYPE_CHECKING: from rawgpu.hcq.device import Device


_NONE = object()   # an input without a value yet
SYNC_LIMIT = 1 << 31   # graph-private signal values stay below this (the engines compare 32 bits)


def _counter(name: str) -> Var:
  """A timeline or graph-sync value's patch slot: such values stay below 2^32 (TIMELINE_LIMIT, SYNC_LIMIT), so one
  dword, and one FENCE where the copy engine signals it."""
  return Var(name, 32)


@dataclass(frozen=True)
class Input:
  name: str


class Graph:
  def __init__(self, dev: "Device", ordered: bool = True):
    if not hasattr(dev, "compute_queue"): raise RawGPUError(f"Graph takes the Device it runs on, not {type(dev).__name__}")
    self.dev, self.ordered = dev, ordered
    self.cq = dev.compute_queue()
    self.queues: dict[tuple, object] = {(dev, "compute"): self.cq}   # (device, engine) -> its queue in this graph
    self.launches: list[tuple] = []              # (program, args, g, l)
    self.nodes: list[tuple] = []                 # in order: ("exec", launch index), ("copy", (dst, src, size, device)),
                                                 # ("wait" | "signal", (signal, value, device))
    self.after: list[tuple[int, ...]] = []       # per node: the earlier nodes it waits for (ordered=False)
    self.copy_sites: dict[str, list[tuple]] = {} # input name -> [(patch slot, offset, copy size, device)] of copies
    self.sites: dict[str, list[tuple]] = {}      # input name -> [(kernarg view, KernelArg, program, offset in the block)]
    self.dim_inputs: dict[int, tuple] = {}       # launch index -> ({axis: Input} of its grid, of its workgroup)
    self.dim_sites: dict[str, list[tuple]] = {}  # input name -> [(launch index, 0 grid | 1 workgroup, axis)]
    self.cur: dict[str, object] = {}
    self.ka = None
    self.uses = GraphUses(self)                  # every device's ticket of its share of the last replay (also for the
                                                 # buffers it recorded)
    self.freed, self.dead = False, ""               # dead: why it replays no more (freed, or its build failed)
    self.lost = None                             # a buffer recorded in it that was freed since (Buffer.free)

  def input(self, name: str) -> Input: return Input(name)

  @property
  def last(self) -> int:
    """The graph device's ticket of the last replay (0: none yet)."""
    return self.uses.tickets.get(self.dev, 0)

  def _check_recording(self) -> None:
    if self.freed: raise RawGPUError(self.dead)
    if self.ka is not None: raise RawGPUError("the graph was already replayed; record a new one")

  @property
  def last_node(self) -> int:
    """The id of the node recorded last, for a later node's after=."""
    if not self.nodes: raise RawGPUError("the graph has no nodes yet")
    return len(self.nodes) - 1

  def _add_node(self, kind: str, what, after) -> None:
    try: after = tuple(sorted(set(after)))
    except TypeError: raise RawGPUError(f"after= takes a list of ids of nodes recorded before (g.last_node of each), not {after!r}") from None
    if after and self.ordered: raise RawGPUError("after= is for Graph(dev, ordered=False): in order, every node runs after the one before")
    if any(type(j) is not int or not 0 <= j < len(self.nodes) for j in after):
      raise RawGPUError(f"after= takes ids of nodes recorded before this one ({f'0..{len(self.nodes) - 1}' if self.nodes else 'there are none yet'}), got {list(after)}")
    self.nodes.append((kind, what))
    self.after.append(after)

  def exec(self, prg, *args, global_size=(1, 1, 1), local_size=(1, 1, 1), dynamic_lds: int = 0, after=()) -> "Graph":
    """A launch of prg over global_size workgroups of local_size work-items; any argument, and any dimension of
    either size, may be a graph input (an int at replay, checked as a launch checks it)."""
    self._check_recording()
    if not hasattr(prg, "check_loaded"): raise RawGPUError(f"Graph.exec takes a program (Device.program()), not {type(prg).__name__}")
    prg.check_loaded()
    if dynamic_lds or prg._locals: prg, args = prg.with_lds_args(args, dynamic_lds)
    prg.check_arg_count(args)
    scratch = memoryview(bytearray(prg.kernarg_size))   # each value given now is checked as a launch checks it
    for a, meta in zip(args, prg.args):
      if isinstance(a, Input): continue
      if prg.takes_buffer(meta): prg.address_of(meta, a)
      else: prg._pack_one(scratch, meta, a, 0)
    (gs, g_in), (ls, l_in) = _dims_and_inputs(global_size), _dims_and_inputs(local_size)
    g, l = _checked_dims(prg, gs, ls, check_workgroup=not l_in)   # a workgroup with inputs is checked at replay
    self._add_node("exec", len(self.launches), after)   # (checks after=: a refused launch leaves nothing behind)
    if g_in or l_in:
      self.dim_inputs[len(self.launches)] = (g_in, l_in)
      for kind, ins in enumerate((g_in, l_in)):
        for axis, inp in ins.items(): self.dim_sites.setdefault(inp.name, []).append((len(self.launches), kind, axis))
    self.launches.append((prg, args, g, l))
    prg._graphs.add(self)   # (Program.free refuses while the graph lives)
    return self

  def copy(self, dst: Buffer | Input, src: Buffer | Input, size: int | None = None, *, on: "Device | None" = None, after=()) -> "Graph":
    """A copy on the copy engine of `on` (default: the graph's device), ordered after everything recorded before it;
    dst/src may be inputs (then give size)."""
    self._check_recording()
    if not all(isinstance(b, (Buffer, Input)) for b in (dst, src)): raise RawGPUError("graph copies take Buffers or graph inputs")
    sizes = [b.size for b in (dst, src) if isinstance(b, Buffer)]
    if size is None and len(sizes) < 2: raise RawGPUError("a graph copy with an input needs its size")
    n = src.size if size is None else check_copy_size(size)   # (all of src by default, as Device.transfer)
    if sizes and n > min(sizes): raise RawGPUError(f"graph copy of {n} bytes does not fit a {min(sizes)}-byte buffer")
    if len(sizes) == 2: check_no_overlap(dst, src, n, "graph copy")
    if n: self._add_node("copy", (dst, src, n, on or self.dev), after)   # 0 bytes: nothing to copy or order
    return self

  def wait(self, signal, value: int | Input, *, on: "Device | None" = None, after=()) -> "Graph":
    """The compute queue (of `on`, default the graph's device) waits here until signal >= value (the signal may be a
    peer device's, mapped there)."""
    return self._sync_node("wait", signal, value, on, after)

  def signal(self, signal, value: int | Input, *, on: "Device | None" = None, after=()) -> "Graph":
    """The compute queue (of `on`) writes value to signal once everything recorded before it (in order; else what
    that queue ran before and `after`) is done."""
    return self._sync_node("signal", signal, value, on, after)

  def _sync_node(self, kind: str, signal, value, on, after) -> "Graph":
    self._check_recording()
    if not isinstance(value, Input):
      if as_index(value) is None: raise RawGPUError(f"a graph {kind} takes an int or a graph input as its value, not {type(value).__name__}")
      value = (check_wait_ref if kind == "wait" else check_u64)(value, f"a graph {kind}")   # refused now, not at the first replay
    check_signal(signal, f"a graph {kind} takes")
    self._add_node(kind, (signal, value, on or self.dev), after)
    return self

  def _node_queue(self, kind: str, what):
    """The queue a node runs on: its device's compute queue, or copy queue for a copy."""
    dev = self.launches[what][0].dev if kind == "exec" else what[-1]
    key = (dev, "sdma" if kind == "copy" else "compute")
    if key not in self.queues: self.queues[key] = dev.copy_queue() if kind == "copy" else dev.compute_queue()
    return self.queues[key]

  def _build(self) -> None:
    """Once, at the first replay. A build that fails leaves the graph dead (its queues hold part of it), and what
    it allocated is freed."""
    try: self._build_once()
    except BaseException as e:
      self._die(f"the graph's first replay failed ({type(e).__name__}: {e}); record a new one")
      raise

  def _die(self, why: str) -> None:
    """No more replays: its memory goes (now or once its work is done), and what it holds of programs with it."""
    self.freed, self.dead = True, why
    if self.ka is not None:
      self._free()
      for q in self.queues.values():   # (its commands go as a bound queue's do)
        if q._bound is not None: q._unbind()
    for q in {self.cq, *self.queues.values()}: q._programs = []
    self.launches, self.sites, self.writers, self.submits, self.kviews, self.queues = [], {}, {}, [], {}, {}

  def _build_once(self) -> None:
    from rawgpu.hcq.amd.queues import DISPATCH_PACKET_SIZE
    sizes = [((p.dispatch_offset + DISPATCH_PACKET_SIZE if p.needs_dispatch else p.kernarg_size) + 255) & ~255 for p, *_ in self.launches]
    queues = [self._node_queue(k, w) for k, w in self.nodes]
    self.devices = list({id(q.be.dev): q.be.dev for q in [self.cq] + queues}.values())   # the graph's device first
    self.ka = self.dev.alloc(max(sum(sizes), 256), host=True, uncached=True)  # also marks the graph as built
    # dropped, freed, or its build failed: its memory goes once the work queued by then on its devices is done
    signals: list = []
    self._free = weakref.finalize(self, self.dev.releases.later, functools.partial(_free_graph, self.dev, self.ka, signals), tuple(self.devices[1:]))
    self._free.atexit = False
    def new_signal(name: str, narrow: bool = False):
      signals.append(sig := self.dev.new_signal(name, narrow=narrow))
      return sig
    view, offs = self.ka.mem.cpu.cast("B"), [sum(sizes[:i]) for i in range(len(sizes))]
    self.sync = new_signal("graph sync", narrow=True)
    # where the clock goes when no Profiler asks for it: the replay's start, and its end (written last, after the
    # clock of any node timed while profiling, which goes there too)
    self.stamps = (new_signal("graph start"), new_signal("graph end"))
    # the graph's signals: one per queue, written by that queue alone (so one that restarts can release the others
    # waiting on it: _release), and self.sync, written by the queue that ends the replay (and starts it, unordered)
    self.qsig = {q: new_signal(f"graph {q.be.dev} {q.engine} sync", narrow=True) for q in dict.fromkeys([self.cq] + queues)}
    self.sync_signals = [self.sync, *self.qsig.values()]
    copies = [b for k, w in self.nodes if k == "copy" for b in w[:2]]
    recorded = [a for _, args, _, _ in self.launches for a in args] + copies
    self.copied = list({id(r): r for r in (b._root() for b in copies if isinstance(b, Buffer))}.values())
    for r in {id(r): r for r in (b._root() for b in recorded if isinstance(b, Buffer))}.values():
      r.recorded_by(self.uses)   # its replays count as their uses (Buffer.owner_use, peer_uses)
      if r.freed: self.lost = self.lost or r
    # recorded buffers that devices other than their own use: a replay checks their device is open and still mapped
    users: dict[int, tuple] = {}
    uses = [(a, prg.dev) for prg, args, _, _ in self.launches for a in args] + [(b, w[3]) for k, w in self.nodes if k == "copy" for b in w[:2]]
    for b, d in uses:
      if isinstance(b, Buffer) and b._root().dev is not d: users.setdefault(id(b._root()), (b._root(), set()))[1].add(d)
    self.foreign = [(r, tuple(ds)) for r, ds in users.values()]
    if len(self.devices) > 1: self.dev._graphs.add(self)   # (its close waits for the others' shares)
    for d in self.devices[1:]:   # the other devices read the arguments and take part in the graph's signals, and the
      d.map(self.ka)             # replay starts after their earlier work on its buffers (_start, _earlier_work)
      for sig in self.sync_signals: d.map(sig)
      self.dev.map(d.timeline)
    self.last_point: dict = {}   # queue -> the patch slot number of the signal it writes after its last node
    self.nsync, self.value_sites = 0, set()   # value_sites: inputs that are signal values (patch slots "value:<name>")
    self.kviews: dict[int, tuple] = {}   # launch index -> (its kernarg view, their address)
    self.timed: list[tuple[str, str, str]] = []   # (name, kind, slot prefix) of nodes clocked one by one (built while profiling)
    cur, last_q, starts = (self._emit_chain if self.ordered else self._emit_queues)(queues, view, sizes, offs)
    self.tickets = {self.dev: (starts[self.dev], cur.engine)}   # device -> (engine(s) its share starts on, engine that signals its ticket)
    if len(self.devices) > 1:   # every other device signals its ticket once the graph's device says all is done
      self.nsync += 1
      cur.signal(self.sync, _counter(f"sync{self.nsync}"))   # before the ticket: nothing of the graph's device runs after it
      for d in self.devices[1:]:
        q = last_q[d]
        for q2 in self.qsig:   # its other queues too: its ticket stays honest if the graph's device lets go (_release)
          if q2 is not q and q2.be.dev is d and q2 in self.last_point: q.wait(self.qsig[q2], _counter(f"sync{self.last_point[q2]}"))
        q.wait(self.sync, _counter(f"sync{self.nsync}")).signal(d.timeline, _counter(f"timeline@{id(d)}"))
        self.tickets[d] = (starts[d], q.engine)
    cur.timestamp(Var("ts_end")).signal(self.dev.timeline, _counter("timeline"))
    for q in self.queues.values():
      if q.engine == "compute" and q._build: q.bind(q.be.dev)   # the copy engine has no indirect buffers here: its words go to its ring
    self.replays, self.slot_vals = 0, {}
    self.names = set(self.sites) | set(self.copy_sites) | self.value_sites | set(self.dim_sites)
    self.checks = {n: self._input_checks(n) for n in self.names}     # input name -> what a given value must pass
    self.writers = {n: self._input_writers(n) for n in self.names}   # input name -> what a new value changes
    # what each replay submits: a queue's words (its indirect buffer once bound) with its patch slots, which the graph
    # writes itself (HWQueue.slot_writer), only where the value changed since the last replay
    self.submits = [(q.be.dev.ring(q.engine), q._ib if q._bound is not None else q.words_array(),
                     [(name, q.slot_writer(name)) for name in sorted(q.vars)], {}) for q in self.queues.values() if q._build]
    self.sync_names = [f"sync{k}" for k in range(1, self.nsync + 1)]
    for d in self.devices:   # a device that restarts its queues releases the others' waits on the graph (_release)
      d._recover_hooks[:] = [h for h in d._recover_hooks if h() is not None] + [weakref.WeakMethod(self._release)]

  def _emit_timed(self, i: int, kind: str, what, q, view, sizes: list[int], offs: list[int]) -> None:
    """Node i's packets, between clocks of its own when profiling (nodes of the graph's device)."""
    timed = self.dev._profiler is not None and kind in ("exec", "copy") and q.be.dev is self.dev
    if timed:
      self.timed.append((self.launches[what][0].name if kind == "exec" else f"copy {what[2]} bytes", "kernel" if kind == "exec" else "copy", f"ts{i}"))
      q.timestamp(Var(f"ts{i}:start"))
    self._emit(kind, what, q, view, sizes, offs)
    if timed: q.timestamp(Var(f"ts{i}:end"))

  def _emit_chain(self, queues: list, view, sizes, offs) -> tuple:
    """In order: one chain through the nodes' queues, each switch a wait on the graph's signal. Returns (the queue
    that ends it, each device's last queue, each device's first engine)."""
    # the chain starts and ends on the graph's device (its clock and ticket mark the whole replay)
    cur = queues[0] if queues and queues[0].be.dev is self.dev else self.cq
    self._start(cur)
    last_q, starts = {}, {self.dev: cur.engine}
    for i, ((kind, what), q) in enumerate(zip(self.nodes, queues)):
      cur = self._switch(cur, q)
      last_q[q.be.dev] = q
      starts.setdefault(q.be.dev, q.engine)
      self._emit_timed(i, kind, what, q, view, sizes, offs)
    return self._switch(cur, cur if cur.be.dev is self.dev else self.cq), last_q, starts

  def _emit_queues(self, queues: list, view, sizes, offs) -> tuple:
    """ordered=False: each queue runs its nodes in order; a node waits for another queue's node only where after=
    names it (a signal of that queue's, written after the node); the graph device's compute queue ends the replay
    once every queue's last node is done. Every queue's share starts after its device's earlier work."""
    sig = self.qsig
    last = {q: i for i, q in enumerate(queues)}   # queue -> its last node
    wanted = {j for i, deps in enumerate(self.after) for j in deps if queues[j] is not queues[i]} | {i for q, i in last.items() if q is not self.cq}
    point: dict[int, int] = {}   # node -> the patch slot number of the signal written after it
    self._start(self.cq)
    if any(q is not self.cq for q in queues):   # every other queue starts once the graph's clock has (and so after
      self.nsync += 1                           # the earlier work of every device of the graph)
      begun = self.nsync
      self.cq.signal(self.sync, _counter(f"sync{begun}"))
    last_q, starts, started = {}, {self.dev: {"compute"}}, {self.cq}
    for i, ((kind, what), q) in enumerate(zip(self.nodes, queues)):
      if q not in started:
        started.add(q)
        q.wait(self.sync, _counter(f"sync{begun}"))
      waits: dict = {}
      for j in self.after[i]:
        if queues[j] is not q: waits[queues[j]] = max(waits.get(queues[j], 0), point[j])
      for qj, k in waits.items(): q.wait(sig[qj], _counter(f"sync{k}"))
      self._emit_timed(i, kind, what, q, view, sizes, offs)
      if i in wanted:
        self.nsync += 1
        point[i] = self.nsync
        q.signal(sig[q], _counter(f"sync{self.nsync}"))
      last_q[q.be.dev] = q
      starts.setdefault(q.be.dev, set()).add(q.engine)
    for q, i in last.items():
      if q is not self.cq:
        self.last_point[q] = point[i]
        self.cq.wait(sig[q], _counter(f"sync{point[i]}"))
    return self.cq, last_q, {d: tuple(sorted(e)) for d, e in starts.items()}

  def _start(self, q) -> None:
    """Where the replay begins, on the graph device's queue q: after the other devices' earlier work on the buffers
    the graph copies (slots prev@<device>, see _earlier_work; the graph's device orders its own, next_timeline),
    then its clock."""
    for d in self.devices[1:]: q.wait(d.timeline, _counter(f"prev@{id(d)}"))
    q.timestamp(Var("ts_start"))

  def _release(self, dev: "Device") -> None:
    """dev restarted its queues (Device.recover): the signals its queues would have written in the last replay jump
    to the last value it could reach, so the other devices' queues waiting on them finish their share instead of
    waiting forever (on what they have: that replay's results are lost). Later replays count on above it."""
    if self.freed or self.dev.closed: return   # its signals may be someone else's by now (or gone with their device)
    top = self.replays * self.nsync
    sigs = [sig for q, sig in self.qsig.items() if q.be.dev is dev] + ([self.sync] if dev is self.dev else [])
    for sig in sigs:
      if sig.value < top: sig.value = top

  def _earlier_work(self, inputs: dict) -> dict:
    """Per device other than this one: the latest of its tickets for work on the buffers the graph copies (owned by
    it, or mapped there and used), which the replay must start after, as Device.transfer does. A kernel's buffers
    are the client's to order across devices, as with a launch."""
    need: dict = {}
    roots = self.copied + [v._root() for n, v in (self.cur | inputs).items() if n in self.copy_sites and isinstance(v, Buffer)]
    for r in roots:
      if r.dev is not self.dev and (t := r.owner_use()) > need.get(r.dev, 0): need[r.dev] = t
      for d, t in r.peer_uses().items():
        if d is not self.dev and t > need.get(d, 0): need[d] = t
    return need

  def _emit(self, kind: str, what, q, view, sizes: list[int], offs: list[int]) -> None:
    """One recorded node's packets on its queue (a launch's arguments go into its slot of the graph's kernarg block)."""
    if kind == "copy":
      from rawgpu.hcq.amd import sdma
      dst, src, n, dev = what
      for b in (dst, src):
        if isinstance(b, Buffer) and not dev.maps(b): raise RawGPUError(f"graph copy on {dev}: {b} is not mapped there; call {dev}.map(buffer) first")
      step = sdma.copy_max_bytes(dev.backend.sdma_version)
      for o in range(0, n, step):  # one packet per chunk, so an input's address is a whole patch slot in each
        d, sr = (self._copy_var(b, o, n, dev) for b in (dst, src))
        q.copy(d, sr, min(step, n - o))
    elif kind in ("wait", "signal"):
      sig, v, _dev = what
      if isinstance(v, Input): self.value_sites.add(v.name); v = Var(f"value:{v.name}")
      (q.wait if kind == "wait" else q.signal)(sig, v)
    else:
      (prg, args, g, l), size, off = self.launches[what], sizes[what], offs[what]
      kv, ka_va = view[off:off + size], self.ka.va + off
      self.kviews[what] = (kv, ka_va)
      for a, meta in zip(args, prg.args):
        if isinstance(a, Input): self.sites.setdefault(a.name, []).append((kv, meta, prg, off + meta.offset))  # written at replay
        else: prg._pack_one(kv, meta, a, 0)
      self._relaunch(what, g, l)
      g_in, l_in = self.dim_inputs.get(what, ({}, {}))
      g, l = (tuple(Var(f"dim:{ins[a].name}", 32) if a in ins else n for a, n in enumerate(d)) for d, ins in ((g, g_in), (l, l_in)))
      q.exec(prg, ka_va, g, l, dispatch_id=what)   # a kernel that reads its dispatch id gets its place in the graph

  def _switch(self, cur, q):
    """Where the chain moves from queue cur to q: q waits for the value cur writes to the graph's signal."""
    if q is not cur:
      self.nsync += 1
      self.last_point[cur] = self.nsync
      cur.signal(self.qsig[cur], _counter(f"sync{self.nsync}"))
      q.wait(self.qsig[cur], _counter(f"sync{self.nsync}"))
    return q

  def _copy_var(self, b, off: int, n: int, dev: "Device"):
    if isinstance(b, Buffer): return b.va + off
    self.copy_sites.setdefault(b.name, []).append((f"copy:{b.name}@{off}", off, n, dev))
    return Var(f"copy:{b.name}@{off}")

  def free(self) -> None:
    """Free the graph's kernel arguments, commands and signals at once: waits for the work queued on its devices so
    far. Replaying it afterwards is an error. A graph dropped is freed the same way, once that work is done."""
    if self.freed: return
    built = self.ka is not None
    if built:
      for d in self.devices: d.wait_timeline(d.timeline_value - 1)
    self._die("the graph was freed; record a new one")
    if built:
      for d in self.devices: d.releases.run(wait_ms=10_000)

  def replay(self, **inputs) -> int:
    """Run the graph with these inputs; returns the timeline value that marks its completion."""
    self.dev.check_open()
    if self.ka is None or self.freed:
      if self.freed: raise RawGPUError(self.dead)
      self._build()
    names, dev = self.names, self.dev
    if len(self.cur) < len(names) and (missing := names - inputs.keys() - self.cur.keys()):
      raise RawGPUError(f"graph inputs not given: {', '.join(sorted(missing))}")
    if not inputs.keys() <= names:
      raise RawGPUError(f"the graph has no input(s) {', '.join(sorted(inputs.keys() - names))}; it has {', '.join(sorted(names)) or 'none'}")
    checks = self.checks
    for name, v in inputs.items():  # checked before a ticket is taken: a refused replay leaves no hole in the timeline
      for check in checks[name]: check(v)
    self._check_alive(inputs)
    new_dims = self._new_dims(inputs) if self.dim_sites and not inputs.keys().isdisjoint(self.dim_sites) else {}
    for d, t in self.uses.tickets.items(): d.wait_timeline(t)   # every device may still read the previous replay's
                                                                # arguments and commands, to its end
    need = self._earlier_work(inputs) if self.copied or self.copy_sites else {}
    for d, t in need.items():   # devices outside the graph: their work on its buffers is waited for here, on the host
      if d not in self.devices: d.wait_timeline(t)
    if (self.replays + 1) * self.nsync >= SYNC_LIMIT:   # the engines compare the signal's low 32 bits: start again at 0
      for sig in self.sync_signals: sig.value = 0   # every device is past its last wait on them (waited for above)
      self.replays = 0
    value, cur, writers, changed = dev.timeline_value, self.cur, self.writers, []   # value: the ticket this replay will take
    try:
      for name, v in inputs.items():
        if cur.get(name) is v: continue
        changed.append((name, cur.get(name, _NONE)))
        for write in writers[name]: write(v, value)   # (a kernel argument's value is checked as it is written)
        cur[name] = v
    except BaseException:
      self._unwrite(changed, value)
      raise
    for i, (g, l) in new_dims.items(): self._relaunch(i, g, l)
    vals, devices, uses = self.slot_vals, self.devices, self.uses.tickets
    if len(devices) > 1:   # the other devices' tickets, each behind its own earlier work
      for d in devices[1:]:
        t = uses[d] = d.next_timeline(*self.tickets[d])
        vals[f"timeline@{id(d)}"] = d.timeline_gpu(t)
        e = need.get(d, 0)   # its earlier work on the graph's buffers (0: done, or its timeline started again since)
        vals[f"prev@{id(d)}"] = 0 if d.done(e) else d.timeline_gpu(e)
        for v in self.cur.values():   # (the buffers it recorded count this replay through self.uses)
          if isinstance(v, Buffer): v.used_by(d, t)
    for v in self.cur.values():   # recorded against this device's ticket (a mapped peer's buffer too)
      if isinstance(v, Buffer): v.used_by(dev, value)
    value = uses[dev] = dev.next_timeline(*self.tickets[dev])   # (before the push: if it fails, what it
    vals["timeline"] = dev.timeline_gpu(value)                  # queued still counts as a use)
    if (prof := dev._profiler) is not None:
      vals["ts_start"], vals["ts_end"] = prof.timed(f"graph ({len(self.launches)} kernels, {len(self.nodes) - len(self.launches)} other nodes)", "graph", value)
      self.clock = prof.events[-1][3:]   # (view, index) of the replay's start and end
      for name, kind, at in self.timed: vals[f"{at}:start"], vals[f"{at}:end"] = prof.timed(name, kind, value)
    else:
      start, end = self.stamps
      vals["ts_start"], vals["ts_end"], self.clock = start.timestamp_va, end.timestamp_va, None
      for _name, _kind, at in self.timed: vals[f"{at}:start"] = vals[f"{at}:end"] = end.timestamp_va
    base, self.replays = self.replays * self.nsync, self.replays + 1
    for k, name in enumerate(self.sync_names, 1): vals[name] = base + k
    for ring, words, writers, written in self.submits:
      for name, write in writers:
        if written.get(name) != (v := vals[name]): write(v); written[name] = v
      ring.push(words)
    return value

  def _unwrite(self, changed: list[tuple], ticket: int) -> None:
    """A value this replay refused: the inputs it wrote before go back to their last replay's values (a refused
    replay changes nothing). One whose old value cannot be written again (its buffer was freed since) must be given
    at the next replay."""
    for name, old in reversed(changed):
      self.cur.pop(name, None)
      if old is _NONE: continue
      try:
        for write in self.writers[name]: write(old, ticket)
      except RawGPUError: continue
      self.cur[name] = old

  def gpu_time(self) -> float:
    """GPU seconds the last replay took, from its start to the end of its last node (waits for it)."""
    if self.freed: raise RawGPUError(self.dead)
    if self.ka is None or not self.last: raise RawGPUError("the graph was not replayed yet: replay() it first")
    self.dev.check_open()
    self.dev.wait_timeline(self.last)
    if self.clock is None: start, end = (s.timestamp for s in self.stamps)
    else: view, i = self.clock; start, end = view[i], view[i + 1]
    return (end - start) / self.dev.backend.timestamp_hz

  def _new_dims(self, inputs: dict) -> dict[int, tuple]:
    """The new (grid, workgroup) of each launch whose dimensions these inputs change, checked as a launch is (before
    anything is written: a refused replay changes nothing)."""
    out = {}
    for i in sorted({i for name in inputs.keys() & self.dim_sites.keys() for i, _, _ in self.dim_sites[name]}):
      prg, _, g, l = self.launches[i]
      dims = [list(g), list(l)]
      for kind, ins in enumerate(self.dim_inputs[i]):
        for axis, inp in ins.items():
          v = inputs[inp.name] if inp.name in inputs else self.cur[inp.name]
          n = as_index(v)
          if n is None or n < 1: raise RawGPUError(f"graph input {inp.name!r} is a launch dimension of kernel {prg.name}: give a positive int, not {v!r}")
          dims[kind][axis] = n
      try: out[i] = _checked_dims(prg, *dims, check_workgroup=bool(self.dim_inputs[i][1]))
      except RawGPUError as e: raise RawGPUError(f"graph replay: {e}") from None
    return out

  def _relaunch(self, i: int, g: tuple, l: tuple) -> None:
    """Launch i's new dimensions into its kernel arguments (the hidden ones, the dispatch packet); the queue's
    dimension slots are patched with the others."""
    from rawgpu.hcq.amd.queues import fill_dispatch_packet
    prg, args, *_ = self.launches[i]
    self.launches[i] = (prg, args, g, l)
    kv, ka_va = self.kviews[i]
    prg._pack_hidden(kv, g, l)
    if prg.needs_dispatch: fill_dispatch_packet(kv[prg.dispatch_offset:], prg, g, l, ka_va)

  def _check_alive(self, inputs: dict) -> None:
    """Every buffer the replay would touch is still allocated: those recorded in the graph, the inputs given, and
    those kept from the last replay (the GPU would otherwise write memory that may belong to someone else by now)."""
    if self.lost is not None: raise RawGPUError(f"{self.dev}: graph replay: {self.lost}, recorded in the graph, was freed; free a graph's buffers after its last replay")
    for d in self.devices[1:]:
      if d.closed: raise RawGPUError(f"{self.dev}: graph replay: {d}, which runs part of the graph, is closed; record a new graph")
    for r, users in self.foreign:   # (a closed device's memory is gone: its peers' mappings of it went with it)
      if r.dev.closed: raise RawGPUError(f"{self.dev}: graph replay: {r}, recorded in the graph, belonged to {r.dev}, which is closed; record a new graph")
      for u in users:
        if not u.maps(r): raise RawGPUError(f"{self.dev}: graph replay: {r}, recorded in the graph, is no longer mapped to {u}; call {u}.map(buffer) first")
    for name, v in (self.cur | inputs).items():
      if isinstance(v, Buffer) and (v._root().freed or v._root().dev.closed):
        kept = "" if name in inputs else ", kept from the last replay,"
        why = "which was freed" if v._root().freed else f"of {v._root().dev}, which is closed"
        raise RawGPUError(f"{self.dev}: graph replay: input {name!r}{kept} is {v}, {why}; give a live buffer")

  def _input_checks(self, name: str) -> list:
    """What a value of input `name` must pass before anything is written (kernel arguments check in their writer)."""
    out = []
    for _slot, _off, n, on in self.copy_sites.get(name, ()):
      def copied(v, n=n, on=on):
        if not isinstance(v, Buffer) or v.size < n: raise RawGPUError(f"graph input {name!r} is copied ({n} bytes): give a Buffer of at least that size")
        if not on.maps(v): raise RawGPUError(f"graph input {name!r} is copied on {on}, where {v} is not mapped; call {on}.map(buffer) first")
      out.append(copied)
    if name in self.value_sites:
      narrow = any(q.narrow(f"value:{name}") for q in self.queues.values())   # a wait's reference: 32 bits
      def signal_value(v):
        check_u64(v, f"graph input {name!r} (a signal value)")
        if narrow and v >> 32: raise RawGPUError(f"graph input {name!r} is a wait's reference: the engine compares 32 bits, so {v:#x} (2^32 or more) cannot be waited for")
      out.append(signal_value)
    return out

  def _input_writers(self, name: str) -> list:
    """What a new value of input `name` changes, each a write(value, ticket): the patch slots of the copies and
    signal values that take it, and its kernel argument sites (checked once; where every site is the same kind of
    4- or 8-byte value, one numpy store fills them all)."""
    vals, out = self.slot_vals, []
    for slot, off, _n, _on in self.copy_sites.get(name, ()):
      def copy_address(v, t, slot=slot, off=off): vals[slot] = v.va + off
      out.append(copy_address)
    if name in self.value_sites:
      def signal_value(v, t): vals[f"value:{name}"] = as_index(v)   # (checked: numpy's ints become Python's)
      out.append(signal_value)
    if name in self.dim_sites:   # the launches' hidden arguments follow in _relaunch
      def dimension(v, t): vals[f"dim:{name}"] = as_index(v)
      out.append(dimension)
    if name not in self.sites: return out
    sites = self.sites[name]
    kv, meta, prg, _ = sites[0]
    spread = _spread(self.ka, sites)
    if spread is not None:
      words, at = spread
      if meta.size == 8 and prg.takes_buffer(meta):
        # each device with a site must reach the buffer (checked by one program of each); its use is recorded with
        # the graph's other buffers
        checkers = list({id(p2.dev): (p2, m2) for _, m2, p2, _ in sites}.values())
        if len(checkers) == 1:
          def pointer(v, t): words[at] = prg.address_of(meta, v)
        else:
          def pointer(v, t):
            for p2, m2 in checkers: p2.address_of(m2, v)
            words[at] = v.va
        out.append(pointer)
      else:
        def value(v, t):
          prg._pack_one(kv, meta, v, t)   # checks the value once; the other sites take the same bytes
          words[at] = words[at[0]]
        out.append(value)
      return out
    # sites of the same kind take the same bytes; a pointer's on another device once that device is seen to reach it
    others = [(kv2, meta2, prg2, _kind(prg2, meta2) == _kind(prg, meta), prg2.dev is not prg.dev and prg2.takes_buffer(meta2))
              for kv2, meta2, prg2, _ in sites[1:]]
    def each_site(v, t):
      prg._pack_one(kv, meta, v, t)
      raw = bytes(kv[meta.offset:meta.offset + meta.size])
      for kv2, meta2, prg2, same_bytes, peer_pointer in others:
        if peer_pointer: prg2.address_of(meta2, v)
        if same_bytes: kv2[meta2.offset:meta2.offset + meta2.size] = raw
        else: prg2._pack_one(kv2, meta2, v, t)
    out.append(each_site)
    return out


def _free_graph(dev: "Device", ka: Buffer, signals: list) -> None:
  ka.free()   # (unmapped from the other devices too)
  for sig in signals: dev._reuse_signal(sig)


def _dims_and_inputs(d) -> tuple:
  """Launch dimensions that may hold graph inputs: (the dimensions with 1 for each input, {axis: Input})."""
  t = (d,) if isinstance(d, (int, Input)) else tuple(d)
  ins = {a: x for a, x in enumerate(t) if isinstance(x, Input)}
  return tuple(1 if isinstance(x, Input) else x for x in t), ins


def _checked_dims(prg, g, l, check_workgroup: bool = True) -> tuple:
  """(grid, workgroup) as three ints each, checked as a launch checks them (the grid fits the dispatch; the workgroup
  fits the kernel and the device)."""
  from rawgpu.hcq.amd.elf import check_launch
  from rawgpu.hcq.amd.program import launch_dims
  g, l = launch_dims(g, l)
  if check_workgroup: check_launch(prg.kernel, l, prg.limits)
  return g, l


def _kind(prg, meta) -> tuple:
  """Arguments of one kind take a value as the same bytes: any pointers (a buffer's address), scalars of one size,
  value kind and type (a uint and a float of the same size do not)."""
  return ("pointer",) if meta.size == 8 and prg.takes_buffer(meta) else (meta.size, meta.value_kind, meta.type_name)


def _spread(ka: Buffer, sites: list[tuple]):
  """Where every site of an input is the same kind of 4- or 8-byte value at an aligned offset, one numpy store
  copies the first site's value to all of them at replay: (words of that size over the kernargs, their indices)."""
  import numpy as np
  kinds = {_kind(prg, meta) for _, meta, prg, _ in sites}
  size = sites[0][1].size
  if len(kinds) != 1 or size not in (4, 8) or any(at % size for *_, at in sites): return None
  words = np.frombuffer(ka.mem.cpu.cast("B"), dtype=np.uint32 if size == 4 else np.uint64)
  return words, np.array([at // size for *_, at in sites], dtype=np.intp)
