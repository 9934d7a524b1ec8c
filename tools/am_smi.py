"""am-smi: a live monitor of AMD boards (activity, temperatures, power, clocks, fan, VRAM, PCIe link, owner).

Data comes from a `MetricsSource`. `SysfsSource` serves what the kernel shows: the static facts of every board
(PCI ids, link, kernel driver, rawgpu owner), and for boards amdgpu drives, its sysfs/hwmon sensors. A board the
AM driver holds needs its SMU metrics table read without re-initializing it: that is a source drivers/am provides
(`rawgpu.drivers.am.metrics.SMUMetrics`, a MetricsSource); until it exists the board says "metrics unavailable"
and why. Nothing here ever shows a number that was not read from the board.
"""
from __future__ import annotations
import argparse, tempfile, json, locale, os, sys, time
from collections import deque
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Protocol
from rawgpu.drivers import pci
from rawgpu.drivers.am.metrics import SMUReading
from rawgpu.drivers.devspec import dev_from_env
from rawgpu.errors import DeviceNotFound, RawGPUError
from rawgpu.tools.command import positive_int, run_command, seconds_arg
from rawgpu.tools.hcq_smi import VENDORS, Host, bus_arg, end_process, holders

AMD = VENDORS["amd"]
HISTORY = 120  # samples kept per board for the graphs


@dataclass
class BoardMetrics(SMUReading):
  """One reading of a board: what the kernel shows of it, and the dynamic figures (SMUReading's, keyword only)."""
  bus: str
  name: str = "unknown"
  device_id: int = 0
  driver: str | None = None                 # bound kernel driver
  owner_pids: list[int] = field(default_factory=list)   # rawgpu processes holding it
  pcie_link: str | None = None              # "16.0 GT/s PCIe x16"
  pcie_max: str | None = None
  source: str = field(default="sysfs", kw_only=True)   # where the dynamic figures came from


_TAIL = ["source", "unavailable", "time"]
DYNAMIC = [f.name for f in fields(SMUReading) if f.name not in _TAIL]
JSON_ORDER = [f.name for f in fields(BoardMetrics) if f.name not in DYNAMIC + _TAIL] + DYNAMIC + _TAIL   # the board first, as the table reads


class MetricsSource(Protocol):
  """Where am-smi's numbers come from: the boards it can see, and one reading of one board."""
  def boards(self) -> list[str]: ...
  def read(self, bus: str) -> BoardMetrics: ...


def smu_source(host: Host) -> tuple[MetricsSource | None, str]:
  """The AM driver's SMU metrics reader, or None and why not."""
  try: from rawgpu.drivers.am.metrics import SMUMetrics  # type: ignore[import-not-found]
  except ImportError: return None, "the AM driver cannot read a warm board's SMU metrics table yet (no rawgpu.drivers.am.metrics)"
  return SMUMetrics(host.system), ""


class SysfsSource:
  """Static facts of every AMD board from sysfs and the lock files; sensors where amdgpu drives the board."""
  def __init__(self, host: Host | None = None, smu: MetricsSource | None = None, smu_why: str = ""):
    self.host = host or Host()
    self.smu, self.smu_why = smu, smu_why

  def boards(self) -> list[str]:
    return [i.bus for i in pci.scan(vendor=AMD.pci_id, system=self.host.system) if (i.cls >> 16) in (0x03, 0x12)]

  def _text(self, path: str) -> str | None:
    try: return self.host.system.read_text(path).strip()
    except (OSError, UnicodeDecodeError): return None

  def _num(self, path: str) -> float | None:
    t = self._text(path)
    try: return float(t) if t is not None else None
    except ValueError: return None

  def read(self, bus: str) -> BoardMetrics:
    from rawgpu.tools.inventory import NAMES
    i = pci.info(bus, self.host.system)
    d = f"{pci.SYSFS_PCI}/{bus}"
    link = lambda kind: (f"{s} x{w}" if (s := self._text(f"{d}/{kind}_link_speed")) and (w := self._text(f"{d}/{kind}_link_width")) else None)
    m = BoardMetrics(bus, NAMES.get((i.vendor, i.device), "unknown"), i.device, i.driver, sorted({h.pid for h in holders(self.host, AMD, bus)}),
                     link("current"), link("max"), time=time.time())
    if i.driver == "amdgpu": return self._amdgpu(m, d)
    if self.smu is not None and m.owner_pids:
      got = self.smu.read(bus)
      return replace(m, **{k: getattr(got, k) for k in DYNAMIC}, source=got.source, unavailable=got.unavailable)
    if m.owner_pids: why = f"held by pid {', '.join(map(str, m.owner_pids))}, and {self.smu_why or 'its SMU metrics could not be read'}"
    elif i.driver: why = f"bound to {i.driver}, which am-smi cannot read"
    else: why = "no driver runs it (amdgpu not bound, no rawgpu process holds it): its SMU is not initialized"
    return replace(m, source="none", unavailable=f"metrics unavailable: {why}")

  def _amdgpu(self, m: BoardMetrics, d: str) -> BoardMetrics:
    """amdgpu's sysfs (amdgpu_pm.c, amdgpu_vram_mgr.c) and hwmon (millidegrees C, microwatts, Hz, RPM)."""
    hw = None
    try: hw = next((f"{d}/hwmon/{h}" for h in self.host.system.listdir(f"{d}/hwmon") if h.startswith("hwmon")), None)
    except OSError: pass
    def hwn(name: str, scale: float) -> float | None:
      v = self._num(f"{hw}/{name}") if hw else None
      return None if v is None else v / scale
    def dpm(name: str) -> float | None:
      # pp_dpm_* lists the levels, the current one marked with '*': "1: 2500Mhz *"
      for ln in (self._text(f"{d}/{name}") or "").splitlines():
        if ln.rstrip().endswith("*"):
          try: return float(ln.split(":", 1)[1].strip().rstrip("*").strip().lower().removesuffix("mhz"))
          except (ValueError, IndexError): return None
      return None
    pwm, pwm_max = hwn("pwm1", 1), hwn("pwm1_max", 1)
    used, total = self._num(f"{d}/mem_info_vram_used"), self._num(f"{d}/mem_info_vram_total")
    power = hwn("power1_average", 1e6)
    return replace(m, source="amdgpu sysfs",
                   gfx_activity=self._num(f"{d}/gpu_busy_percent"), mem_activity=self._num(f"{d}/mem_busy_percent"),
                   temp_edge=hwn("temp1_input", 1000), temp_hotspot=hwn("temp2_input", 1000), temp_mem=hwn("temp3_input", 1000),
                   power_w=power if power is not None else hwn("power1_input", 1e6), power_limit_w=hwn("power1_cap", 1e6),
                   gfx_clock_mhz=dpm("pp_dpm_sclk") or hwn("freq1_input", 1e6), mem_clock_mhz=dpm("pp_dpm_mclk") or hwn("freq2_input", 1e6),
                   soc_clock_mhz=dpm("pp_dpm_socclk"),
                   fan_rpm=None if (f := hwn("fan1_input", 1)) is None else int(f),
                   fan_pct=None if pwm is None or not pwm_max else 100 * pwm / pwm_max,
                   vram_used=None if used is None else int(used), vram_total=None if total is None else int(total))


# ---- what a person sees

BARS = " ▁▂▃▄▅▆▇█"
BARS_ASCII = " .:-=+*#@"


def spark(values, top: float, width: int, ascii_only: bool = False) -> str:
  """The last `width` samples as one line of bar glyphs (blank where a sample is missing)."""
  bars = BARS_ASCII if ascii_only else BARS
  out = []
  for v in list(values)[-width:]:
    if v is None or not top: out.append(" ")
    else: out.append(bars[max(1, min(len(bars) - 1, round(v / top * (len(bars) - 1))))] if v > 0 else bars[0])
  return "".join(out).rjust(width)


def meter(pct: float | None, width: int = 20, ascii_only: bool = False) -> str:
  if pct is None: return "n/a".ljust(width + 7)
  n = round(max(0.0, min(100.0, pct)) / 100 * width)
  return f"{pct:5.1f}% [" + ("#" if ascii_only else "█") * n + " " * (width - n) + "]"


def _f(v, fmt: str, unit: str) -> str: return "n/a" if v is None else f"{v:{fmt}}{unit}"


def _gib(v: int | None) -> str: return "n/a" if v is None else f"{v / (1 << 30):.2f} GiB"


def render(ms: list[BoardMetrics], history: dict[str, deque], width: int = 100, ascii_only: bool = False, stamp: str = "") -> list[str]:
  """The screen as lines of text (the curses loop draws these; --list prints them once)."""
  deg = "C" if ascii_only else "°C"
  rule = ("-" if ascii_only else "─") * min(width, 100)
  lines = [f"am-smi  {len(ms)} AMD board{'s' if len(ms) != 1 else ''}  {stamp}".rstrip(), rule]
  if not ms: lines.append("no AMD board found")
  for m in ms:
    owner = f"pid {', '.join(map(str, m.owner_pids))}" if m.owner_pids else "-"
    lines.append(f"{m.bus}  {m.name} ({m.device_id:#06x})  driver={m.driver or '-'}  owner={owner}")
    lines.append(f"  PCIe {m.pcie_link or 'n/a'} (max {m.pcie_max or 'n/a'})    source: {m.source}")
    if m.unavailable: lines.append(f"  {m.unavailable}")
    else:
      lines.append(f"  GFX {meter(m.gfx_activity, 20, ascii_only)}   MEM {meter(m.mem_activity, 20, ascii_only)}")
      if m.xcc_activity: lines.append("  XCC busy " + "  ".join(f"{x}:{a:3.0f}%" for x, a in enumerate(m.xcc_activity)))
      lines.append(f"  Temp edge {_f(m.temp_edge, '.0f', deg)}  hotspot {_f(m.temp_hotspot, '.0f', deg)}  mem {_f(m.temp_mem, '.0f', deg)}"
                   f"    Fan {_f(m.fan_rpm, 'd', ' RPM')} ({_f(m.fan_pct, '.0f', '%')})")
      lines.append(f"  Power {_f(m.power_w, '.1f', ' W')} / {_f(m.power_limit_w, '.1f', ' W')}"
                   f"    Clocks gfx {_f(m.gfx_clock_mhz, '.0f', ' MHz')}  mem {_f(m.mem_clock_mhz, '.0f', ' MHz')}  soc {_f(m.soc_clock_mhz, '.0f', ' MHz')}")
      thr = "unknown" if m.throttle is None else ", ".join(m.throttle) or "none"
      lines.append(f"  VRAM {_gib(m.vram_used)} / {_gib(m.vram_total)}    Throttle: {thr}")
      h = history.get(m.bus)
      if h is not None and len(h):
        w = max(10, min(HISTORY, (width - 30) // 2))
        ptop = m.power_limit_w or max((p for _, p in h if p is not None), default=0)
        lines.append(f"  GFX% |{spark((a for a, _ in h), 100, w, ascii_only)}|  W |{spark((p for _, p in h), ptop, w, ascii_only)}|")
    lines.append(rule)
  return [ln[:width].rstrip() for ln in lines]


def table(ms: list[BoardMetrics]) -> list[str]:
  """One line per board (--list)."""
  head = f"{'BUS':<13} {'NAME':<24} {'DRIVER':<8} {'OWNER':<10} {'GFX%':>5} {'EDGE':>5} {'HOT':>5} {'POWER':>12} {'VRAM USED/TOTAL':>18}"
  out = [head] if ms else ["no AMD board found"]
  for m in ms:
    owner = ",".join(map(str, m.owner_pids)) or "-"
    pw = "n/a" if m.power_w is None else f"{m.power_w:.0f}" + ("" if m.power_limit_w is None else f"/{m.power_limit_w:.0f}") + "W"
    vram = "n/a" if m.vram_total is None else f"{'n/a' if m.vram_used is None else m.vram_used >> 20}/{m.vram_total >> 20}MiB"
    out.append(f"{m.bus:<13} {m.name[:24]:<24} {m.driver or '-':<8} {owner:<10} {_f(m.gfx_activity, '.0f', ''):>5} {_f(m.temp_edge, '.0f', ''):>5} "
               f"{_f(m.temp_hotspot, '.0f', ''):>5} {pw:>12} {vram:>18}" + (f"  {m.unavailable}" if m.unavailable else ""))
  return out


def sample(source: MetricsSource, dev: str | None = None) -> list[BoardMetrics]:
  buses = source.boards()
  if dev is not None:
    if dev not in buses: raise DeviceNotFound(f"no AMD board at {dev} (am-smi --list shows them)")
    buses = [dev]
  return [source.read(b) for b in buses]


def _utf8() -> bool: return "utf" in (locale.getpreferredencoding(False) or "").lower()


def monitor(source: MetricsSource, interval: float = 1.0, dev: str | None = None, frames: int | None = None) -> None:
  """Refresh in place until q (or `frames` refreshes). curses redraws only what changed, so nothing flickers."""
  import curses
  locale.setlocale(locale.LC_ALL, "")
  ascii_only = not _utf8()
  history: dict[str, deque] = {}

  def loop(scr) -> None:
    try: curses.curs_set(0)
    except curses.error: pass  # terminals without cursor visibility control
    scr.timeout(max(10, int(interval * 1000)))
    n = 0
    while True:
      ms = sample(source, dev)
      for m in ms: history.setdefault(m.bus, deque(maxlen=HISTORY)).append((m.gfx_activity, m.power_w))
      h, w = scr.getmaxyx()
      lines = render(ms, history, w - 1, ascii_only, time.strftime("%Y-%m-%d %H:%M:%S") + "   q: quit")
      scr.erase()
      for y, ln in enumerate(lines[:h]):
        try: scr.addstr(y, 0, ln)
        except curses.error: pass  # the last cell of the screen
      scr.refresh()
      n += 1
      if frames is not None and n >= frames: return
      if scr.getch() in (ord("q"), ord("Q"), 27): return

  curses.wrapper(loop)


EPILOG = """examples:
  am-smi                        live monitor of every AMD board (q quits)
  am-smi --dev 0000:03:00.0 --interval 0.5
  am-smi --list                 one line per board, once
  am-smi --json                 one reading of every board as JSON
  am-smi --pids                 processes holding boards;  am-smi --kill --dev BUS  ends them

exit codes: 0 ok; 1 failure (the message says why: no such board, a process that survived --kill);
2 bad usage (incl. a bus id not of the form dddd:bb:dd.f); 130 interrupted. DEBUG=1 shows tracebacks.
Figures that cannot be read show n/a, or "metrics unavailable: <why>" for the whole board; none are estimated.
"""


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="am-smi", description="Monitor AMD boards: activity, temperatures, power, clocks, fan, VRAM, link, owner.",
                              epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
  g = p.add_mutually_exclusive_group()
  g.add_argument("--list", action="store_true", help="print one line per board once and exit")
  p.add_argument("--json", action="store_true", help="print one reading of each board as JSON and exit (with or without --list)")
  g.add_argument("--pids", action="store_true", help="list the processes holding the boards")
  g.add_argument("--kill", action="store_true", help="end the processes holding the boards (SIGTERM, then SIGKILL)")
  p.add_argument("--dev", type=bus_arg, metavar="BUS", help="only this board (dddd:bb:dd.f)")
  p.add_argument("--interval", type=seconds_arg, default=1.0, metavar="S", help="seconds between refreshes (default 1)")
  p.add_argument("--frames", type=positive_int, metavar="N", help="stop the monitor after N refreshes")
  return p


def emulated_host(spec) -> tuple[Host, list]:
  """DEV names emulated boards: they live in this process, so boot them here (they are idle, not woken from sleep:
  an emulated board does not exist before its process) and watch them through their own virtual bus."""
  from rawgpu.hcq.device import Device
  devs = [Device(spec)]
  system = devs[0].iface.system if hasattr(devs[0].iface, "system") else None
  if system is None:
    from rawgpu.drivers.emu import mockpci
    system = mockpci.virtual_boards(spec.arch or "gfx1100", 1)[0].system
  return Host(system=system, lockdir=system.lock_dir or tempfile.gettempdir(), include_self=True), devs


def _holders(host: Host, args) -> int:
  """--pids and --kill. Watching an emulated board, am-smi holds it itself: it lists itself, and never signals itself."""
  hs = holders(host, AMD, args.dev)
  me = os.getpid()
  if args.pids:
    rows = [{**asdict(h), "this_process": h.pid == me} for h in hs]
    if args.json: print(json.dumps(rows, indent=2))
    for r in [] if args.json else rows: print(f"{r['bus']}  pid {r['pid']}  {r['cmdline']}" + ("  (this am-smi)" if r["this_process"] else ""))
    if not hs and not args.json: print("no process holds a board")
    return 0
  rep = [end_process(host, pid, 5.0) if pid != me else {"pid": pid, "sent": [], "ended": False, "why": "this am-smi itself: not signalled"}
         for pid in sorted({h.pid for h in hs})]
  if args.json: print(json.dumps(rep, indent=2))
  else:
    for r in rep: print(f"pid {r['pid']}: sent {', '.join(r['sent']) or 'nothing'}: {r['why']}")
    if not rep: print("no process holds a board")
  return 0 if all(r["ended"] for r in rep if r["pid"] != me) else 1


def main(argv: list[str] | None = None, source: MetricsSource | None = None, host: Host | None = None) -> int:
  args = _parser().parse_args(argv)
  return run_command("am-smi", lambda: _run(args, source, host))


def _emulated_spec():
  """The emulated boards $DEV names, or None: am-smi watches the real boards otherwise. A DEV of another tool (such
  as tinygrad's DEV=CPU) is said to be ignored; MOCKKFD's boards are its emulated kernel's, which publishes no sensors."""
  from rawgpu.errors import DeviceSpecError
  try: spec = dev_from_env()
  except DeviceSpecError as e:
    print(f"am-smi: ignoring DEV: {e}; watching the real boards", file=sys.stderr)
    return None
  if spec is None or spec.vendor != "AMD" or not spec.emulated: return None
  if spec.iface != "MOCKPCI":
    raise RawGPUError(f"DEV={spec}: am-smi watches emulated boards through MOCKPCI (the boards AM drives); MOCKKFD's emulated "
                      "amdgpu publishes no sensors (hwmon, gpu_metrics) to read: use DEV=MOCKPCI+AMD")
  return spec


def _run(args, source: MetricsSource | None, host: Host | None) -> int:
  spec = _emulated_spec() if host is None else None
  keep = []  # emulated devices stay open while they are watched
  if spec is not None: host, keep = emulated_host(spec)
  host = host or Host()
  if source is None:
    smu, why = smu_source(host)
    source = SysfsSource(host, smu, why)
  if args.pids or args.kill:
    if args.dev is not None: sample(source, args.dev)
    return _holders(host, args)
  if args.json: print(json.dumps([{k: d[k] for k in JSON_ORDER} for d in map(asdict, sample(source, args.dev))], indent=2)); return 0
  if args.list or not sys.stdout.isatty():
    for ln in table(sample(source, args.dev)): print(ln)
    return 0
  monitor(source, args.interval, args.dev, args.frames)
  return 0

if __name__ == "__main__": sys.exit(main())
