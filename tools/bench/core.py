"""How every benchmark is measured: warm-up, repeats, median with min and max, and the environment with each figure."""
from __future__ import annotations
import contextlib, os, platform, statistics, subprocess, time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator
from rawgpu.errors import debug_level

TIME_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6}
RATE_UNITS = {"GB/s": 1e-9, "elements/s": 1.0, "instructions/s": 1.0}


class Skip(Exception):
  """A prerequisite is missing: the benchmark reports `skipped: <reason>`, never a number."""


class DeviceFailed(Exception):
  """The device is there but would not open (a boot timeout, a fault): a failure, not a missing prerequisite."""


def _missing(e: BaseException) -> bool:
  """Whether an error opening a device means something is absent here (so: skip) rather than broken (so: fail)."""
  from rawgpu.errors import DeviceBusy, DeviceNotFound, DeviceSpecError, FirmwareError, PermissionProblem
  return isinstance(e, (ImportError, NotImplementedError, DeviceNotFound, DeviceSpecError, FirmwareError, PermissionProblem, DeviceBusy))


def _why(e: BaseException) -> str:
  msg = str(e).splitlines()[0] if str(e) else ""
  return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


@dataclass
class Figure:
  bench: str
  case: str
  metric: str
  unit: str
  median: float | None
  min: float | None
  max: float | None
  n: int
  device: str | None
  arch: str | None
  env: dict
  skipped: str | None = None   # "skipped: <reason>"
  error: str | None = None     # the benchmark broke: "failed: <error>"

  def record(self) -> dict:
    d = asdict(self)
    for k in ("skipped", "error"):
      if d[k] is None: del d[k]
    return d


@dataclass
class Bench:
  name: str
  fn: Callable[["Ctx"], None]
  doc: str


BENCHMARKS: dict[str, Bench] = {}
ORDER = ("launch", "signal", "copy", "emu", "boot", "alloc", "import", "tinygrad")


def benchmark(name: str):
  """Register `fn(ctx)`; it reports figures through ctx.figure / ctx.skip."""
  def deco(fn):
    BENCHMARKS[name] = Bench(name, fn, (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "")
    return fn
  return deco


def samples(fn: Callable[[], float | None], warmup: int, repeats: int) -> list[float]:
  """Seconds per call of fn after `warmup` unmeasured calls; a call that returns a float reports its own seconds."""
  for _ in range(warmup): fn()
  out = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    r = fn()
    dt = time.perf_counter() - t0
    out.append(float(r) if isinstance(r, (int, float)) and not isinstance(r, bool) else dt)
  return out


def _cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      for ln in f:
        if ln.startswith("model name"): return ln.split(":", 1)[1].strip()
  except OSError: pass
  return platform.processor() or platform.machine()


def _git_commit() -> str | None:
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  if not os.path.isdir(os.path.join(root, ".git")): return None
  try: r = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
  except (OSError, subprocess.TimeoutExpired): return None
  return r.stdout.strip() or None


def interpreter_ns() -> float:
  """What one trivial Python call costs on this machine now (median of 5 loops of 20000): shared machines run at
  different speeds from hour to hour, and host-time figures move with it, so runs are compared with this beside them."""
  def f(x): return x
  def loop() -> float:
    t0 = time.perf_counter()
    for i in range(20000): f(i)
    return (time.perf_counter() - t0) / 20000
  return statistics.median(loop() for _ in range(5)) * 1e9


def environment() -> dict:
  """The machine: recorded with every figure, so results from different runs can be told apart."""
  import rawgpu
  return {"cpu": _cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(), "implementation": platform.python_implementation(),
          "platform": platform.platform(), "rawgpu": rawgpu.__version__, "commit": _git_commit(), "python_call_ns": round(interpreter_ns(), 1)}


@dataclass
class Ctx:
  """What a benchmark gets: sizes (quick or full), the device (opened once, on demand), and where figures go."""
  dev_spec: str | None
  quick: bool = False
  env: dict = field(default_factory=environment)
  figures: list[Figure] = field(default_factory=list)
  bench: str = ""
  _devices: dict = field(default_factory=dict)

  @property
  def warmup(self) -> int: return 1 if self.quick else 3
  @property
  def repeats(self) -> int: return 3 if self.quick else 15

  def size(self, quick: int, full: int) -> int: return quick if self.quick else full

  # ---- devices
  def device(self, spec: str | None = None):
    """The opened rawgpu.hcq.Device for spec (default: --dev / DEV); a device that cannot be opened is a Skip."""
    spec = spec or self.dev_spec
    if spec is None: raise Skip("no device given: pass --dev (e.g. --dev MOCKPCI+AMD) or set DEV")
    got = self._devices.get(spec)
    if isinstance(got, (Skip, DeviceFailed)): raise got
    if got is None:
      try:
        from rawgpu.hcq import Device
        got = Device(spec)
      except Exception as e:
        got = (Skip if _missing(e) else DeviceFailed)(f"cannot open {spec}: {_why(e)}")
        self._devices[spec] = got
        raise got from None
      self._devices[spec] = got
    return got

  def close_device(self, spec: str | None = None) -> None:
    spec = spec or self.dev_spec
    d = self._devices.pop(spec, None)
    if d is not None and not isinstance(d, (Skip, DeviceFailed)): d.close()

  def close(self) -> None:
    for spec in list(self._devices): self.close_device(spec)

  @contextlib.contextmanager
  def needs(self, what: str) -> Iterator[None]:
    """A prerequisite step (an API the stack may not have yet): an API or resource that is absent is a Skip saying
    what is missing; anything else (a timeout, a fault, a wrong answer) is the benchmark failing."""
    try: yield
    except Skip: raise
    except (ImportError, AttributeError, NotImplementedError, TypeError) as e: raise Skip(f"{what}: {_why(e)}") from None
    except Exception as e:
      if _missing(e): raise Skip(f"{what}: {_why(e)}") from None
      raise

  # ---- figures
  def where(self, dev) -> tuple[str | None, str | None, dict]:
    """(device, arch, env) recorded with a figure measured on dev (None: no device)."""
    if dev is None: return None, None, {**self.env, "device": None, "iface": None}
    p = dev.props
    return repr(dev), p.arch, {**self.env, "device": repr(dev), "iface": p.iface, "name": p.name, "emulated": p.emulated}

  def figure(self, case: str, metric: str, unit: str, secs: list[float], work: float | None = None, dev=None, arch: str | None = None,
             where: tuple | None = None) -> Figure:
    """A figure from per-repeat seconds: a time (unit s/ms/us), or a rate work/time (GB/s with work in bytes, elements/s, instructions/s)."""
    if not secs: raise ValueError("no samples")
    if unit in TIME_UNITS: vals = [s * TIME_UNITS[unit] for s in secs]
    elif unit in RATE_UNITS:
      if not work: raise ValueError(f"a rate in {unit} needs the work done per repeat")
      vals = [work / s * RATE_UNITS[unit] for s in secs if s > 0]
      if len(vals) != len(secs): raise ValueError("a repeat took no measurable time: give it more work")
    else: raise ValueError(f"unknown unit {unit!r}")
    device, darch, env = where or self.where(dev)
    f = Figure(self.bench, case, metric, unit, statistics.median(vals), min(vals), max(vals), len(vals), device, arch or darch, env)
    self.figures.append(f)
    return f

  def skip(self, case: str, reason: str, metric: str = "", unit: str = "", dev=None, arch: str | None = None) -> Figure:
    device, darch, env = self.where(dev)
    f = Figure(self.bench, case, metric, unit, None, None, None, 0, device or self.dev_spec, arch or darch, env, skipped=f"skipped: {reason}")
    self.figures.append(f)
    return f

  def fail(self, case: str, why: str, metric: str = "", unit: str = "", dev=None, arch: str | None = None) -> Figure:
    device, darch, env = self.where(dev)
    f = Figure(self.bench, case, metric, unit, None, None, None, 0, device or self.dev_spec, arch or darch, env, error=f"failed: {why}")
    self.figures.append(f)
    return f

  @contextlib.contextmanager
  def case(self, case: str, metric: str = "", unit: str = "", dev=None, arch: str | None = None) -> Iterator[None]:
    """One case of a benchmark: a Skip or a failure inside it is recorded for this case, and the next case runs."""
    try: yield
    except Skip as e: self.skip(case, str(e), metric, unit, dev=dev, arch=arch)
    except DeviceFailed: raise
    except Exception as e:
      if debug_level(): raise
      self.fail(case, _why(e), metric, unit, dev=dev, arch=arch)


INTERRUPTED = "interrupted (Ctrl-C): the benchmarks after this one did not run"


def _summary(doc: str, width: int = 90) -> str:
  """A benchmark's docstring as one progress line: its first paragraph, cut at a word."""
  text = " ".join((doc or "").split("\n\n")[0].split())
  return text if len(text) <= width else text[:text.rfind(" ", 0, width)] + " ..."


def run(names: list[str] | None, dev_spec: str | None, quick: bool, progress: Callable[[str], None] | None = None) -> list[Figure]:
  """Run the named benchmarks (default: all, in ORDER): each figure measured, skipped with its reason, or failed.
  progress: told each benchmark's name as it starts. Ctrl-C stops the run: the figures so far are returned, the last
  one failed with INTERRUPTED."""
  from rawgpu.tools.bench import suites  # noqa: F401  (registers the benchmarks)
  ctx = Ctx(dev_spec, quick)
  try:
    order = [n for n in ORDER if n in BENCHMARKS] + [n for n in BENCHMARKS if n not in ORDER]
    unknown = sorted(set(names or ()) - set(order))
    if unknown: raise ValueError(f"no benchmark named {', '.join(unknown)}; there are {', '.join(order)}")
    todo = [n for n in order if not names or n in names]
    for k, name in enumerate(todo, 1):
      ctx.bench, before = name, len(ctx.figures)
      if progress is not None: progress(f"{name} ({k}/{len(todo)}): {_summary(BENCHMARKS[name].doc)}")
      try: BENCHMARKS[name].fn(ctx)
      except KeyboardInterrupt:
        ctx.fail("*", INTERRUPTED)
        break
      except Skip as e: ctx.skip("*", str(e))
      except Exception as e:
        if debug_level(): raise
        ctx.fail("*", str(e) if isinstance(e, DeviceFailed) else _why(e))
      if len(ctx.figures) == before: ctx.skip("*", "the benchmark reported nothing")
  finally:
    ctx.close()
  return ctx.figures


def table(figures: list[Figure]) -> str:
  """The figures for people: one line each, then the environment once."""
  def num(v: float | None) -> str:
    if v is None: return "-"
    return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.3e}"
  rows = [("BENCH", "CASE", "METRIC", "MEDIAN", "MIN", "MAX", "UNIT", "N", "DEVICE")]
  notes = []
  for f in figures:
    if f.skipped or f.error:
      rows.append((f.bench, f.case, f.metric or "", "", "", "", "", "", f.device or "-"))
      notes.append((len(rows) - 1, f.skipped or f.error))
    else: rows.append((f.bench, f.case, f.metric, num(f.median), num(f.min), num(f.max), f.unit, str(f.n), f.device or "-"))
  w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
  right = {3, 4, 5, 7}
  lines = []
  note_at = dict(notes)
  for i, r in enumerate(rows):
    if i in note_at: lines.append(f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {note_at[i]}")
    else: lines.append("  ".join(c.rjust(w[j]) if j in right else c.ljust(w[j]) for j, c in enumerate(r)).rstrip())
  env = figures[0].env if figures else environment()
  lines.append(f"\n{env['cpu']}, {env['cores']} cores, Python {env['python']} ({env['implementation']}), rawgpu {env['rawgpu']}" +
               (f" at {env['commit']}" if env.get("commit") else "") + f", {env['platform']}" +
               (f"\ninterpreter speed at the start: {env['python_call_ns']:.0f} ns per Python call (host times scale with it)" if env.get("python_call_ns") else ""))
  return "\n".join(lines)
