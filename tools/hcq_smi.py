"""hcq-smi: list GPUs, unload/reload their kernel drivers, reset boards, and find or end the processes holding them.

Every OS access goes through a `Host` (a System for files, a runner for commands, kill and sleep), so the tool runs
against a fake /sys and /proc tree in tests exactly as it runs on a machine.
"""
from __future__ import annotations
import argparse, json, os, re, signal, subprocess, sys, tempfile, time
from dataclasses import asdict, dataclass, field
from typing import Callable
from rawgpu.drivers import pci
from rawgpu.drivers.system import SYSTEM, System
from rawgpu.errors import DeviceBusy, DeviceNotFound, PermissionProblem, RawGPUError
from rawgpu.tools.command import run_command, seconds_arg


@dataclass(frozen=True)
class Vendor:
  key: str                 # "amd" / "nv", as typed on the command line
  pci_id: int
  lock_prefix: str         # rawgpu's lock files are <tmpdir>/<prefix>_<bus>.lock
  modules: tuple[str, ...]  # unload order; loading goes the other way
  label: str               # "AMD" / "NV", as inventory() names them


VENDORS = {"amd": Vendor("amd", 0x1002, "am", ("amdgpu",), "AMD"),
           "nv": Vendor("nv", 0x10de, "nv", ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"), "NV")}


@dataclass
class RunResult:
  rc: int
  stdout: str = ""
  stderr: str = ""


Runner = Callable[[list[str], "str | None"], RunResult]


def run_subprocess(argv: list[str], input: str | None = None) -> RunResult:
  """The real runner: an argument list, never a shell string."""
  try: p = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=300)
  except FileNotFoundError: return RunResult(127, "", f"{argv[0]}: command not found")
  except subprocess.TimeoutExpired: return RunResult(124, "", f"{' '.join(argv)}: timed out after 300 s")
  return RunResult(p.returncode, p.stdout, p.stderr)


@dataclass
class Host:
  """The machine as the tool sees it. Tests swap in a System serving fake /sys and /proc, a fake runner and kill."""
  system: System = SYSTEM
  runner: Runner = run_subprocess
  lockdir: str = field(default_factory=tempfile.gettempdir)
  is_root: bool = field(default_factory=lambda: os.geteuid() == 0)
  sudoless: bool = False
  kill: Callable[[int, int], None] = os.kill
  sleep: Callable[[float], None] = time.sleep
  clock: Callable[[], float] = time.monotonic
  include_self: bool = False   # count this process among the holders (emulated boards live in it)

  def may_sudo(self) -> bool: return not self.is_root and not self.sudoless

  def write_sysfs(self, path: str, text: str) -> None:
    """Write a sysfs attribute; when that is not permitted, through `sudo tee` (unless root or --sudoless)."""
    try: self.system.write_text(path, text); return
    except PermissionError as e:
      if not self.may_sudo(): raise PermissionProblem(f"cannot write {path}: permission denied ({'run as root' if self.sudoless else 'even as root'})") from e
    r = self.runner(["sudo", "tee", path], text)
    if r.rc != 0: raise PermissionProblem(f"sudo tee {path} failed (exit {r.rc}): {r.stderr.strip() or 'no message'}")

  def privileged(self, argv: list[str]) -> list[str]: return ["sudo", *argv] if self.may_sudo() else argv


# ---- processes, through /proc

def proc_state(host: Host, pid: int) -> str | None:
  """The one-letter state of a process from /proc/<pid>/stat, None when there is no such process."""
  try: stat = host.system.read_text(f"/proc/{pid}/stat")
  except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError): return None
  rest = stat[stat.rfind(")") + 1:].split()  # comm may hold spaces and parentheses: the state follows the last ')'
  return rest[0] if rest else None


def alive(host: Host, pid: int) -> bool:
  return proc_state(host, pid) not in (None, "Z", "X", "x")  # a zombie holds no files and will never run again


def cmdline(host: Host, pid: int) -> str:
  try: raw = host.system.read_text(f"/proc/{pid}/cmdline")
  except (OSError, UnicodeDecodeError): return "?"
  return " ".join(a for a in raw.split("\0") if a) or "?"


def fd_targets(host: Host, pid: int) -> list[str] | None:
  """Where the open files of a process point, None when /proc does not let us look (another user's process)."""
  d = f"/proc/{pid}/fd"
  try: fds = host.system.listdir(d)
  except (PermissionError, FileNotFoundError, NotADirectoryError, ProcessLookupError): return None
  out = []
  for fd in fds:
    try: out.append(host.system.readlink(f"{d}/{fd}"))
    except OSError: continue  # closed between listdir and readlink
  return out


def pids(host: Host) -> list[int]:
  return sorted(int(p) for p in host.system.listdir("/proc") if p.isdigit())


# ---- rawgpu's owner locks

@dataclass
class Holder:
  pid: int
  bus: str
  lock: str
  cmdline: str
  verified: bool   # /proc/<pid>/fd shows the lock file open; False: the lock names it and it lives, but its fds are hidden


def lock_files(host: Host, vendor: Vendor, bus: str | None = None) -> dict[str, str]:
  """bus -> lock file path for the vendor's lock files in the lock directory."""
  pat = re.compile(rf"^{vendor.lock_prefix}_(.+)\.lock$")
  try: names = host.system.listdir(host.lockdir)
  except FileNotFoundError: return {}
  out = {}
  for n in names:
    if (m := pat.match(n)) and pci.BUS_RE.match(m.group(1)) and (bus is None or m.group(1) == bus): out[m.group(1)] = os.path.join(host.lockdir, n)
  return out


def holders(host: Host, vendor: Vendor, bus: str | None = None) -> list[Holder]:
  """Processes holding the vendor's boards open: every process whose fds include a lock file (no lsof: /proc)."""
  locks = lock_files(host, vendor, bus)
  if not locks: return []
  by_path: dict[str, str] = {}
  for b, p in locks.items(): by_path[p] = by_path[os.path.realpath(p)] = b
  found: dict[tuple[int, str], Holder] = {}
  hidden: set[int] = set()
  me = os.getpid()
  for pid in pids(host):
    if (targets := fd_targets(host, pid)) is None: hidden.add(pid); continue
    for t in targets:
      if (b := by_path.get(t)) is not None and (pid, b) not in found and (pid != me or host.include_self): found[(pid, b)] = Holder(pid, b, locks[b], cmdline(host, pid), True)
  for b, p in locks.items():  # the pid the lock names, where we could not see its files
    owner = pci.lock_owner(p, host.system)
    if owner in hidden and (owner, b) not in found and alive(host, owner): found[(owner, b)] = Holder(owner, b, p, cmdline(host, owner), False)
  return sorted(found.values(), key=lambda h: (h.bus, h.pid))


def lock_state(host: Host, vendor: Vendor, bus: str, held: list[Holder]) -> str:
  if held: return "held by " + ", ".join(f"pid {h.pid}" + ("" if h.verified else " (unverified: its fds are hidden, run as root)") for h in held)
  path = os.path.join(host.lockdir, f"{vendor.lock_prefix}_{bus}.lock")
  if not host.system.exists(path): return "free"
  owner = pci.lock_owner(path, host.system)
  if owner is None: return "free (empty lock file)"
  return f"free (stale lock of pid {owner}, {'which no longer runs' if not alive(host, owner) else 'which does not hold it open'})"


# ---- boards and modules

def boards(host: Host, vendor: Vendor) -> list[dict]:
  from rawgpu.tools.inventory import inventory
  out = []
  for d in inventory(host.system):
    if d["vendor"] != vendor.label: continue
    held = holders(host, vendor, d["bus"])
    out.append({**d, "owner": [{"pid": h.pid, "cmdline": h.cmdline, "verified": h.verified} for h in held],
                "lock": lock_state(host, vendor, d["bus"], held)})
  return out


def board(host: Host, vendor: Vendor, bus: str) -> dict:
  for b in boards(host, vendor):
    if b["bus"] == bus: return b
  raise DeviceNotFound(f"no {vendor.label} GPU at {bus} (hcq-smi {vendor.key} list shows them)")


def loaded_modules(host: Host) -> set[str]:
  try: text = host.system.read_text("/proc/modules")
  except FileNotFoundError: return set()
  return {ln.split()[0] for ln in text.splitlines() if ln.strip()}


def reset_board(host: Host, vendor: Vendor, b: dict) -> None:
  bus = b["bus"]
  if b["owner"]: raise DeviceBusy(f"{bus} is held by pid {', '.join(str(o['pid']) for o in b['owner'])}: end it first (hcq-smi {vendor.key} kill_pids --pci_bus {bus})")
  if b["driver"]: raise DeviceBusy(f"{bus} is bound to {b['driver']}: unload it first (hcq-smi {vendor.key} rmmod)")
  path = f"{pci.SYSFS_PCI}/{bus}/reset"
  if not host.system.exists(path): raise RawGPUError(f"{bus}: the kernel offers no reset method for this device (no {path})")
  host.write_sysfs(path, "1")


def signal_pid(host: Host, pid: int, sig: int) -> str | None:
  """Send a signal; None on success, else why not."""
  try: host.kill(pid, sig); return None
  except ProcessLookupError: return None  # already gone: what we wanted
  except PermissionError:
    if not host.may_sudo(): return "permission denied" + (" (--sudoless)" if host.sudoless else "")
  r = host.runner(["sudo", "kill", "-s", signal.Signals(sig).name[3:], str(pid)], None)
  return None if r.rc == 0 else f"sudo kill failed (exit {r.rc}): {r.stderr.strip() or 'no message'}"


def wait_gone(host: Host, pid: int, timeout: float) -> bool:
  deadline = host.clock() + timeout
  while alive(host, pid):
    if host.clock() >= deadline: return not alive(host, pid)   # (one last look: it may have gone while we slept)
    host.sleep(0.05)
  return True


def end_process(host: Host, pid: int, wait: float) -> dict:
  """SIGTERM, wait, then SIGKILL, wait: what was sent and how it ended."""
  sent: list[str] = []
  for sig in (signal.SIGTERM, signal.SIGKILL):
    if (why := signal_pid(host, pid, sig)) is not None: return {"pid": pid, "sent": sent, "ended": False, "why": f"{sig.name}: {why}"}
    sent.append(sig.name)
    if wait_gone(host, pid, wait): return {"pid": pid, "sent": sent, "ended": True, "why": f"ended after {sig.name}"}
  return {"pid": pid, "sent": sent, "ended": False, "why": f"still running {wait:g} s after SIGKILL (stuck in the kernel?)"}


# ---- commands

def _emit(args, data, text: list[str]) -> None:
  if args.json: print(json.dumps(data, indent=2))
  else:
    for ln in text: print(ln)


def _step_text(verb: str, s: dict) -> str:
  return f"{verb} {s['module']}: " + ("ok" if s["rc"] == 0 else f"failed: {s['stderr'] or 'exit ' + str(s['rc'])}")


def cmd_list(host: Host, v: Vendor, args) -> int:
  bs = boards(host, v)
  lines = [f"no {v.label} GPU found"] if not bs else []
  for b in bs:
    owner = ", ".join(f"pid {o['pid']} ({o['cmdline']})" + ("" if o["verified"] else " [unverified]") for o in b["owner"]) or b["lock"]
    lines.append(f"{b['bus']}  {b['name']:<24} {b['device_id']:#06x}  driver={b['driver'] or '-':<8} owner={owner}")
    lines += [f"    {k:<4} {'usable' if w is True else w}" for k, w in b["ifaces"].items()]
  _emit(args, bs, lines)
  return 0


def cmd_rmmod(host: Host, v: Vendor, args) -> int:
  loaded = loaded_modules(host)
  todo = [m for m in v.modules if m in loaded]
  if args.expect:
    _emit(args, {"loaded": todo}, [f"still loaded: {', '.join(todo)}" if todo else f"not loaded: {', '.join(v.modules)}"])
    return 1 if todo else 0
  steps = []
  for m in todo:
    r = host.runner(host.privileged(["rmmod", m]), None)
    steps.append({"module": m, "rc": r.rc, "stderr": r.stderr.strip()})
    if r.rc != 0: break  # the next module is in use by this one: stop and say why
  still = [m for m in v.modules if m in loaded_modules(host)]
  _emit(args, {"steps": steps, "loaded": still},
        [_step_text("rmmod", s) for s in steps] +
        ([f"still loaded: {', '.join(still)}"] if still else [f"not loaded: {', '.join(v.modules)}"]))
  return 1 if still else 0


def cmd_insmod(host: Host, v: Vendor, args) -> int:
  bs = boards(host, v)
  if held := [b for b in bs if b["owner"]]:
    raise DeviceBusy(f"{', '.join(b['bus'] for b in held)} held by rawgpu processes: end them first (hcq-smi {v.key} kill_pids)")
  reset = []
  for b in bs:
    if not b["driver"]: reset_board(host, v, b); reset.append(b["bus"])
  steps, loaded = [], loaded_modules(host)
  for m in reversed(v.modules):
    if m in loaded: continue
    r = host.runner(host.privileged(["modprobe", m]), None)
    steps.append({"module": m, "rc": r.rc, "stderr": r.stderr.strip()})
    if r.rc != 0: break
  failed = [s for s in steps if s["rc"] != 0]
  bound = {b["bus"]: b["driver"] for b in boards(host, v)}
  _emit(args, {"reset": reset, "steps": steps, "drivers": bound},
        [f"reset {b}" for b in reset] + [_step_text("modprobe", s) for s in steps] +
        [f"{b}: driver={d or '-'}" for b, d in bound.items()])
  return 1 if failed else 0


def _selected(host: Host, v: Vendor, bus: str | None) -> list[dict]:
  if bus is not None: return [board(host, v, bus)]
  return boards(host, v)


def cmd_reset(host: Host, v: Vendor, args) -> int:
  bs = _selected(host, v, args.pci_bus)
  if not bs: raise DeviceNotFound(f"no {v.label} GPU found")
  for b in bs: reset_board(host, v, b)
  _emit(args, {"reset": [b["bus"] for b in bs]}, [f"reset {b['bus']}" for b in bs])
  return 0


def _holders_of(host: Host, v: Vendor, bus: str | None) -> list:
  """The processes holding the boards (or the one at bus: a lock may outlive its board, so the bus must name a board
  only where nothing holds it)."""
  hs = holders(host, v, bus)
  if bus is not None and not hs: board(host, v, bus)
  return hs


def cmd_pids(host: Host, v: Vendor, args) -> int:
  hs = _holders_of(host, v, args.pci_bus)
  _emit(args, [asdict(h) for h in hs], [f"{h.bus}  pid {h.pid}  {h.cmdline}" + ("" if h.verified else "  (unverified)") for h in hs] or ["no process holds a board"])
  return 0


def cmd_kill_pids(host: Host, v: Vendor, args) -> int:
  hs = _holders_of(host, v, args.pci_bus)
  done: dict[int, dict] = {}
  for h in hs:
    if h.pid not in done: done[h.pid] = {**end_process(host, h.pid, args.wait), "bus": h.bus, "cmdline": h.cmdline}
  rep = list(done.values())
  _emit(args, rep, [f"pid {r['pid']} ({r['cmdline']}) on {r['bus']}: sent {', '.join(r['sent']) or 'nothing'}: {r['why']}" for r in rep] or ["no process holds a board"])
  return 0 if all(r["ended"] for r in rep) else 1


EPILOG = """examples:
  hcq-smi amd list                          every AMD GPU: bus, name, kernel driver, owner, usable interfaces
  hcq-smi amd list --json
  hcq-smi amd rmmod                         unload amdgpu (so the AM driver can take the boards)
  hcq-smi nv rmmod --expect                 exit 1 if any of nvidia_drm/modeset/uvm/nvidia is loaded
  hcq-smi amd insmod                        reset the unbound boards, then load amdgpu again
  hcq-smi amd reset --pci_bus 0000:03:00.0  reset one board through sysfs
  hcq-smi amd pids                          processes holding boards (rawgpu's lock files, found through /proc)
  hcq-smi amd kill_pids --pci_bus 0000:03:00.0 --sudoless

exit codes: 0 ok; 1 failure (the message says why: a module still loaded, a process that survived, a board
busy or missing, permission denied); 2 bad usage (incl. a bus id not of the form dddd:bb:dd.f); 130 interrupted.
Without root, privileged steps run through sudo (never with --sudoless). DEBUG=1 shows tracebacks.
"""


def bus_arg(s: str) -> str:
  if not pci.BUS_RE.match(s): raise argparse.ArgumentTypeError(f"{s!r} is not a PCI bus address of the form dddd:bb:dd.f (e.g. 0000:03:00.0)")
  return s


def _parser() -> argparse.ArgumentParser:
  fmt = argparse.RawDescriptionHelpFormatter
  p = argparse.ArgumentParser(prog="hcq-smi", description="Manage the GPUs rawgpu drives: kernel drivers, resets, owning processes.", epilog=EPILOG, formatter_class=fmt)
  p.add_argument("vendor", choices=sorted(VENDORS), help="amd or nv")
  sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
  common = argparse.ArgumentParser(add_help=False)
  common.add_argument("--json", action="store_true", help="print JSON instead of text")
  common.add_argument("--sudoless", action="store_true", help="never use sudo (fail where root is needed)")

  def add(name, fn, help, examples):
    s = sub.add_parser(name, parents=[common], help=help, description=help, epilog="examples:\n" + examples + "\n\n" + EPILOG.split("\n\n", 1)[1], formatter_class=fmt)
    s.set_defaults(fn=fn)
    return s
  add("list", cmd_list, "list the vendor's GPUs: bus, name, kernel driver, owner, usable interfaces and why not", "  hcq-smi amd list\n  hcq-smi nv list --json")
  add("rmmod", cmd_rmmod, "unload the kernel driver (nv: nvidia_drm, nvidia_modeset, nvidia_uvm, nvidia)", "  hcq-smi amd rmmod\n  hcq-smi nv rmmod --expect").add_argument(
    "--expect", action="store_true", help="only check /proc/modules: exit 1 naming the modules still loaded")
  add("insmod", cmd_insmod, "reset the unbound boards through sysfs, then load the kernel driver", "  hcq-smi amd insmod")
  for name, fn, help in (("reset", cmd_reset, "reset boards through sysfs (all of the vendor's, or --pci_bus)"),
                         ("pids", cmd_pids, "list processes holding boards (lock files + /proc, no lsof)"),
                         ("kill_pids", cmd_kill_pids, "end processes holding boards: SIGTERM, wait, SIGKILL, wait")):
    s = add(name, fn, help, f"  hcq-smi amd {name}\n  hcq-smi amd {name} --pci_bus 0000:03:00.0")
    s.add_argument("--pci_bus", type=bus_arg, metavar="BUS", help="only this board (dddd:bb:dd.f)")
    if name == "kill_pids": s.add_argument("--wait", type=seconds_arg, default=5.0, metavar="S", help="seconds to wait after each signal (default 5)")
  return p


def main(argv: list[str] | None = None, host: Host | None = None) -> int:
  p = _parser()
  args = p.parse_args(argv)
  if not getattr(args, "fn", None):
    p.print_help()
    return 2
  host = host or Host()
  host.sudoless = host.sudoless or args.sudoless
  return run_command("hcq-smi", lambda: args.fn(host, VENDORS[args.vendor], args))

if __name__ == "__main__": sys.exit(main())
