"""hcq-smi against a fake /sys and /proc tree, and against boards held by real processes of the test."""
import json, os, signal, subprocess, sys, textwrap
import pytest
from conftest import make_pci_tree
from rawgpu.drivers.system import DirProvider, System
from rawgpu.tools import hcq_smi
from rawgpu.tools.hcq_smi import Host, RunResult, main

BUS_A, BUS_B, BUS_NV = "0000:03:00.0", "0000:04:00.0", "0000:41:00.0"


class FakeMachine:
  """A fake /sys/bus/pci/devices, /proc (processes, /proc/modules), a lock directory, a runner and kill."""
  def __init__(self, root, devices, modules=()):
    self.root, self.proc, self.locks = root, root / "proc", root / "locks"
    (root / "sys" / "devices").mkdir(parents=True)
    make_pci_tree(str(root / "sys" / "devices"), devices)
    for bus in devices: (root / "sys" / "devices" / bus / "reset").write_text("")
    self.proc.mkdir(); self.locks.mkdir()
    self.modules = list(modules)
    self._write_modules()
    self.system = System()
    self.system.mount("/sys/bus/pci/devices", DirProvider(str(root / "sys" / "devices")))
    self.system.mount("/proc", DirProvider(str(self.proc)))
    self.calls: list[tuple[list[str], str | None]] = []
    self.signals: list[tuple[int, int]] = []
    self.ignores: dict[int, set[int]] = {}
    self.fail: dict[str, str] = {}

  def _write_modules(self):
    (self.proc / "modules").write_text("".join(f"{m} 16384 0 - Live 0x0000000000000000\n" for m in self.modules))

  def process(self, pid, argv, holds=(), ignores=(), state="S"):
    d = self.proc / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "stat").write_text(f"{pid} (weird ) name) {state} 1 {pid} {pid} 0 -1\n")
    (d / "cmdline").write_text("\0".join(argv) + "\0")
    for i, target in enumerate(["/dev/null", *holds]): os.symlink(target, d / "fd" / str(i))
    self.ignores[pid] = set(ignores)

  def lock(self, prefix, bus, pid):
    p = self.locks / f"{prefix}_{bus}.lock"
    p.write_text(f"{pid}\n")
    return str(p)

  def kill(self, pid, sig):
    if not (self.proc / str(pid)).exists(): raise ProcessLookupError(pid)
    self.signals.append((pid, sig))
    if sig not in self.ignores.get(pid, ()):  # the process dies and stays a zombie until reaped, like a child would
      stat = self.proc / str(pid) / "stat"
      stat.write_text(stat.read_text().replace(") S ", ") Z "))
      for f in (self.proc / str(pid) / "fd").iterdir(): f.unlink()

  def run(self, argv, input=None):
    self.calls.append((argv, input))
    cmd, arg = argv[-2], argv[-1]
    if cmd in self.fail: return RunResult(1, "", self.fail[cmd])
    if cmd == "rmmod": self.modules.remove(arg)
    elif cmd == "modprobe": self.modules.append(arg)
    self._write_modules()
    return RunResult(0)

  def host(self, **kw):
    clock = iter(range(10**6))
    return Host(system=self.system, runner=self.run, lockdir=str(self.locks), kill=self.kill, sleep=lambda s: None, clock=lambda: next(clock) * 0.05, **kw)


@pytest.fixture
def machine(tmp_path):
  return FakeMachine(tmp_path, {BUS_A: dict(vendor=0x1002, device=0x744c), BUS_B: dict(vendor=0x1002, device=0x7550, driver="amdgpu"),
                                BUS_NV: dict(vendor=0x10de, device=0x2335, driver="nvidia")}, modules=["amdgpu", "nvidia", "nvidia_uvm"])


def run_json(capsys, argv, host):
  rc = main(argv + ["--json"], host)
  out = capsys.readouterr()
  return rc, json.loads(out.out), out.err


def test_list_shows_boards_drivers_and_owner(machine, capsys):
  lk = machine.lock("am", BUS_A, 4242)
  machine.process(4242, ["python3", "train.py"], holds=[lk])
  rc, data, _ = run_json(capsys, ["amd", "list"], machine.host())
  assert rc == 0
  assert [d["bus"] for d in data] == [BUS_A, BUS_B]  # only AMD, in bus order
  a, b = data
  assert a["driver"] is None and b["driver"] == "amdgpu"
  assert a["owner"] == [{"pid": 4242, "cmdline": "python3 train.py", "verified": True}] and b["owner"] == []
  assert a["name"] == "Radeon RX 7900 XTX/XT" and b["name"] == "Radeon RX 9070 XT"
  assert "amdgpu not bound" in a["ifaces"]["KFD"] and "bound to amdgpu" in b["ifaces"]["PCI"]
  assert main(["amd", "list"], machine.host()) == 0
  text = capsys.readouterr().out
  assert BUS_A in text and "pid 4242 (python3 train.py)" in text and "driver=amdgpu" in text
  rc, nv, _ = run_json(capsys, ["nv", "list"], machine.host())
  assert [d["bus"] for d in nv] == [BUS_NV] and nv[0]["driver"] == "nvidia"


def test_stale_and_unheld_locks_are_not_owners(machine, capsys):
  machine.lock("am", BUS_A, 777)           # pid 777 does not exist
  machine.lock("am", BUS_B, 778)
  machine.process(778, ["sleep", "1000"])  # alive, but does not hold the lock open
  rc, data, _ = run_json(capsys, ["amd", "list"], machine.host())
  assert [d["owner"] for d in data] == [[], []]
  assert "stale lock of pid 777, which no longer runs" in data[0]["lock"]
  assert "does not hold it open" in data[1]["lock"]
  rc, data, _ = run_json(capsys, ["amd", "pids"], machine.host())
  assert rc == 0 and data == []


def test_zombie_holds_nothing(machine, capsys):
  lk = machine.lock("am", BUS_A, 99)
  machine.process(99, ["x"], holds=[lk], state="Z")
  assert not hcq_smi.alive(machine.host(), 99)
  assert hcq_smi.alive(machine.host(), os.getpid()) is False  # not in the fake /proc at all


def test_pids_finds_every_holder_and_filters_by_bus(machine, capsys):
  la, lb = machine.lock("am", BUS_A, 10), machine.lock("am", BUS_B, 11)
  machine.process(10, ["a"], holds=[la])
  machine.process(12, ["forked-child-of-10"], holds=[la])  # inherited the fd: also holds the board
  machine.process(11, ["b"], holds=[lb])
  machine.process(13, ["bystander"], holds=["/tmp/other.lock"])
  rc, data, _ = run_json(capsys, ["amd", "pids"], machine.host())
  assert sorted((d["bus"], d["pid"]) for d in data) == [(BUS_A, 10), (BUS_A, 12), (BUS_B, 11)]
  rc, data, _ = run_json(capsys, ["amd", "pids", "--pci_bus", BUS_B], machine.host())
  assert [(d["pid"], d["cmdline"], d["verified"]) for d in data] == [(11, "b", True)]
  rc, data, _ = run_json(capsys, ["nv", "pids"], machine.host())
  assert data == []


def test_kill_pids_escalates_and_reports(machine, capsys):
  la, lb = machine.lock("am", BUS_A, 20), machine.lock("am", BUS_B, 21)
  machine.process(20, ["polite"], holds=[la])
  machine.process(21, ["stubborn"], holds=[lb], ignores={signal.SIGTERM})
  rc, data, _ = run_json(capsys, ["amd", "kill_pids", "--wait", "0.2"], machine.host())
  assert rc == 0
  by = {d["pid"]: d for d in data}
  assert by[20]["sent"] == ["SIGTERM"] and by[20]["ended"]
  assert by[21]["sent"] == ["SIGTERM", "SIGKILL"] and by[21]["ended"]
  assert machine.signals == [(20, signal.SIGTERM), (21, signal.SIGTERM), (21, signal.SIGKILL)]
  rc, data, _ = run_json(capsys, ["amd", "pids"], machine.host())
  assert data == []


def test_kill_pids_that_survive_exit_1(machine, capsys):
  la = machine.lock("am", BUS_A, 30)
  machine.process(30, ["unkillable"], holds=[la], ignores={signal.SIGTERM, signal.SIGKILL})
  rc, data, _ = run_json(capsys, ["amd", "kill_pids", "--wait", "0.1"], machine.host())
  assert rc == 1 and data[0]["sent"] == ["SIGTERM", "SIGKILL"] and not data[0]["ended"] and "still running" in data[0]["why"]



def test_a_lock_that_outlived_its_board_is_still_found(machine, capsys):
  """A process holds the lock of a bus where no board is listed (gone, or another process's emulated board): pids and
  kill_pids --pci_bus find it; a bus nobody holds and no board has is an error."""
  gone = "0000:99:00.0"
  machine.process(40, ["holder"], holds=[machine.lock("am", gone, 40)])
  rc, data, _ = run_json(capsys, ["amd", "pids", "--pci_bus", gone], machine.host())
  assert rc == 0 and [(d["pid"], d["bus"]) for d in data] == [(40, gone)]
  rc, data, _ = run_json(capsys, ["amd", "kill_pids", "--pci_bus", gone, "--wait", "0.2"], machine.host())
  assert rc == 0 and data[0]["ended"]
  assert main(["amd", "pids", "--pci_bus", "0000:98:00.0"], machine.host()) == 1
  assert "no AMD GPU at 0000:98:00.0" in capsys.readouterr().err

def test_kill_without_permission_uses_sudo_unless_sudoless(machine, capsys):
  la = machine.lock("am", BUS_A, 40)
  machine.process(40, ["other-user"], holds=[la])
  def denied(pid, sig): raise PermissionError(1, "Operation not permitted")
  h = machine.host(is_root=False); h.kill = denied
  assert main(["amd", "kill_pids", "--wait", "0.1"], h) == 1  # the fake runner's sudo kill does nothing: it survives
  assert machine.calls[0] == (["sudo", "kill", "-s", "TERM", "40"], None) and machine.calls[1][0] == ["sudo", "kill", "-s", "KILL", "40"]
  machine.calls.clear(); capsys.readouterr()
  h = machine.host(is_root=False); h.kill = denied
  rc, data, _ = run_json(capsys, ["amd", "kill_pids", "--sudoless"], h)
  assert rc == 1 and machine.calls == [] and "permission denied" in data[0]["why"]


def test_rmmod_order_and_expect(machine, capsys):
  machine.modules = ["nvidia", "nvidia_modeset", "nvidia_uvm", "nvidia_drm", "amdgpu"]; machine._write_modules()
  rc, data, _ = run_json(capsys, ["nv", "rmmod", "--expect"], machine.host())
  assert rc == 1 and data["loaded"] == ["nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"] and machine.calls == []
  assert main(["nv", "rmmod"], machine.host(is_root=True)) == 0
  assert [c[0] for c in machine.calls] == [["rmmod", m] for m in ("nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia")]
  assert machine.modules == ["amdgpu"]
  assert main(["nv", "rmmod", "--expect"], machine.host()) == 0
  machine.calls.clear()
  assert main(["amd", "rmmod"], machine.host(is_root=False)) == 0
  assert machine.calls == [(["sudo", "rmmod", "amdgpu"], None)]
  assert main(["amd", "rmmod", "--sudoless"], machine.host(is_root=False)) == 0  # nothing left to unload
  capsys.readouterr()


def test_rmmod_failure_names_what_is_left(machine, capsys):
  machine.fail["rmmod"] = "rmmod: ERROR: Module amdgpu is in use"
  assert main(["amd", "rmmod"], machine.host()) == 1
  out = capsys.readouterr().out
  assert "Module amdgpu is in use" in out and "still loaded: amdgpu" in out


def test_reset_through_sysfs_and_refusals(machine, capsys, tmp_path):
  reset_a = tmp_path / "sys" / "devices" / BUS_A / "reset"
  assert main(["amd", "reset", "--pci_bus", BUS_A], machine.host()) == 0
  assert reset_a.read_text() == "1"
  assert main(["amd", "reset", "--pci_bus", BUS_B], machine.host()) == 1  # bound to amdgpu
  assert "bound to amdgpu" in capsys.readouterr().err
  assert main(["amd", "reset", "--pci_bus", "0000:09:00.0"], machine.host()) == 1
  assert "no AMD GPU at 0000:09:00.0" in capsys.readouterr().err
  with pytest.raises(SystemExit) as e: main(["amd", "reset", "--pci_bus", "03:00.0"], machine.host())
  assert e.value.code == 2
  lk = machine.lock("am", BUS_A, 50); machine.process(50, ["owner"], holds=[lk])
  reset_a.write_text("")
  assert main(["amd", "reset", "--pci_bus", BUS_A], machine.host()) == 1
  assert "held by pid 50" in capsys.readouterr().err and reset_a.read_text() == ""


def test_reset_without_permission_goes_through_sudo_tee(machine, capsys, tmp_path):
  reset_a = tmp_path / "sys" / "devices" / BUS_A / "reset"
  reset_a.chmod(0o444)
  if os.access(reset_a, os.W_OK):  # root ignores file modes: make the write fail the way sysfs does for a user
    real = machine.system.write_text
    def deny(path, text):
      if path.endswith("/reset"): raise PermissionError(13, "Permission denied")
      real(path, text)
    machine.system.write_text = deny
  assert main(["amd", "reset", "--pci_bus", BUS_A], machine.host(is_root=False)) == 0
  assert machine.calls == [(["sudo", "tee", f"/sys/bus/pci/devices/{BUS_A}/reset"], "1")]
  machine.calls.clear()
  assert main(["amd", "reset", "--pci_bus", BUS_A, "--sudoless"], machine.host(is_root=False)) == 1
  assert machine.calls == [] and "permission denied" in capsys.readouterr().err


def test_insmod_resets_unbound_then_loads(machine, capsys, tmp_path):
  machine.modules = []; machine._write_modules()
  rc, data, _ = run_json(capsys, ["amd", "insmod"], machine.host())
  assert rc == 0 and data["reset"] == [BUS_A] and (tmp_path / "sys" / "devices" / BUS_A / "reset").read_text() == "1"
  assert [c[0] for c in machine.calls] == [["modprobe", "amdgpu"]]
  machine.calls.clear()
  assert main(["nv", "insmod"], machine.host()) == 0
  assert [c[0][-1] for c in machine.calls] == ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"]
  capsys.readouterr()


def test_insmod_refuses_held_boards(machine, capsys):
  lk = machine.lock("am", BUS_A, 60); machine.process(60, ["owner"], holds=[lk])
  assert main(["amd", "insmod"], machine.host()) == 1
  assert "kill_pids" in capsys.readouterr().err and machine.calls == []


def test_usage_errors_and_debug(machine, capsys, monkeypatch):
  assert main(["amd"], machine.host()) == 2
  with pytest.raises(SystemExit) as e: main(["intel", "list"], machine.host())
  assert e.value.code == 2
  monkeypatch.setenv("DEBUG", "1")
  with pytest.raises(Exception, match="no AMD GPU at"): main(["amd", "pids", "--pci_bus", "0000:09:00.0"], machine.host())


@pytest.mark.parametrize("cmd", ["list", "rmmod", "insmod", "reset", "pids", "kill_pids"])
def test_help_has_examples_and_exit_codes(cmd, capsys):
  with pytest.raises(SystemExit) as e: main(["amd", cmd, "--help"])
  out = capsys.readouterr().out
  assert e.value.code == 0 and "examples:" in out and "exit codes:" in out and "--json" in out


# ---- real processes holding boards

HOLDER = textwrap.dedent("""
  import signal, sys, time
  from rawgpu.drivers.pci import DeviceLock
  if sys.argv[2] == "ignore-term": signal.signal(signal.SIGTERM, signal.SIG_IGN)
  lock = DeviceLock("am", sys.argv[1])
  print("ready", flush=True)
  time.sleep(120)
""")


def spawn_holder(lockdir, bus, mode="plain"):
  env = {**os.environ, "TMPDIR": str(lockdir)}  # DeviceLock puts its file in tempfile.gettempdir()
  p = subprocess.Popen([sys.executable, "-c", HOLDER, bus, mode], env=env, stdout=subprocess.PIPE, text=True)
  assert p.stdout.readline().strip() == "ready"
  return p


@pytest.fixture
def real(tmp_path, fake_pci):
  """A fake PCI tree, the real /proc, a private lock directory."""
  system = fake_pci({BUS_A: dict(vendor=0x1002, device=0x744c), BUS_B: dict(vendor=0x1002, device=0x744c)})
  lockdir = tmp_path / "locks"; lockdir.mkdir()
  procs = []
  yield system, lockdir, procs
  for p in procs:
    if p.poll() is None: p.kill()
    p.wait()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux /proc")
def test_real_holders_found_and_ended(real, capsys):
  system, lockdir, procs = real
  procs += [spawn_holder(lockdir, BUS_A), spawn_holder(lockdir, BUS_B, "ignore-term")]
  host = Host(system=system, lockdir=str(lockdir))
  rc, data, _ = run_json(capsys, ["amd", "pids"], host)
  assert sorted((d["bus"], d["pid"], d["verified"]) for d in data) == [(BUS_A, procs[0].pid, True), (BUS_B, procs[1].pid, True)]
  rc, data, _ = run_json(capsys, ["amd", "list"], host)
  assert [[o["pid"] for o in d["owner"]] for d in data] == [[procs[0].pid], [procs[1].pid]]
  rc, data, _ = run_json(capsys, ["amd", "kill_pids", "--pci_bus", BUS_A, "--wait", "10"], host)
  assert rc == 0 and data[0]["pid"] == procs[0].pid and data[0]["sent"] == ["SIGTERM"]
  assert procs[0].wait(10) == -signal.SIGTERM and procs[1].poll() is None
  rc, data, _ = run_json(capsys, ["amd", "kill_pids", "--wait", "0.5"], host)
  assert rc == 0 and data[0]["sent"] == ["SIGTERM", "SIGKILL"]
  assert procs[1].wait(10) == -signal.SIGKILL
  rc, data, _ = run_json(capsys, ["amd", "pids"], host)
  assert data == []
  rc, data, _ = run_json(capsys, ["amd", "list"], host)
  assert all("stale lock" in d["lock"] for d in data)


def test_holder_with_hidden_fds_is_reported_unverified(machine, capsys):
  lk = machine.lock("am", BUS_A, 70)
  machine.process(70, ["someone-elses"], holds=[lk])
  machine.process(71, ["also-hidden-but-not-named"], holds=[lk])
  real = machine.system.listdir
  def listdir(path):  # what a non-root user sees for another user's process
    if path in ("/proc/70/fd", "/proc/71/fd"): raise PermissionError(13, "Permission denied")
    return real(path)
  machine.system.listdir = listdir
  rc, data, _ = run_json(capsys, ["amd", "pids"], machine.host())
  assert [(d["pid"], d["verified"]) for d in data] == [(70, False)]  # only the pid the lock names
  assert main(["amd", "list"], machine.host()) == 0
  assert "pid 70 (someone-elses) [unverified]" in capsys.readouterr().out
