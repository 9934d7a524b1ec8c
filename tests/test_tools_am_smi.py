"""am-smi: the sysfs source on a fake tree, the screen as a person sees it (curses in a pty, read back by pyte)."""
import fcntl, json, os, pty, select, struct, termios, time
from collections import deque
import pytest
from conftest import make_pci_tree
from rawgpu.drivers.system import DirProvider, System
from rawgpu.tools import am_smi
from rawgpu.tools.am_smi import BoardMetrics, SysfsSource, main, render
from rawgpu.tools.hcq_smi import Host

BUS_A, BUS_B, BUS_C = "0000:03:00.0", "0000:04:00.0", "0000:05:00.0"


def write(root, rel, text):
  p = root / rel
  p.parent.mkdir(parents=True, exist_ok=True)
  p.write_text(text)


@pytest.fixture
def tree(tmp_path):
  """Three boards: A driven by amdgpu (with sensors), B unbound and held by a rawgpu process, C unbound and free."""
  sysdev = tmp_path / "sys"
  sysdev.mkdir()
  make_pci_tree(str(sysdev), {BUS_A: dict(vendor=0x1002, device=0x744c, driver="amdgpu"), BUS_B: dict(vendor=0x1002, device=0x7550),
                              BUS_C: dict(vendor=0x1002, device=0x744c), "0000:06:00.0": dict(vendor=0x10de, device=0x2335)})
  a = sysdev / BUS_A
  for rel, text in {"gpu_busy_percent": "37\n", "mem_busy_percent": "5\n", "mem_info_vram_used": f"{3 << 30}\n", "mem_info_vram_total": f"{24 << 30}\n",
                    "pp_dpm_sclk": "0: 500Mhz\n1: 2371Mhz *\n2: 2500Mhz\n", "pp_dpm_mclk": "0: 96Mhz\n3: 1249Mhz *\n", "pp_dpm_socclk": "0: 1200Mhz *\n",
                    "current_link_speed": "16.0 GT/s PCIe\n", "current_link_width": "16\n", "max_link_speed": "16.0 GT/s PCIe\n", "max_link_width": "16\n",
                    "hwmon/hwmon3/temp1_input": "45000\n", "hwmon/hwmon3/temp2_input": "61500\n", "hwmon/hwmon3/temp3_input": "52000\n",
                    "hwmon/hwmon3/power1_average": "123456789\n", "hwmon/hwmon3/power1_cap": "327000000\n", "hwmon/hwmon3/fan1_input": "1350\n",
                    "hwmon/hwmon3/pwm1": "102\n", "hwmon/hwmon3/pwm1_max": "255\n"}.items(): write(a, rel, text)
  write(sysdev / BUS_B, "current_link_speed", "8.0 GT/s PCIe\n"); write(sysdev / BUS_B, "current_link_width", "4\n")
  proc, locks = tmp_path / "proc", tmp_path / "locks"
  (proc / "900" / "fd").mkdir(parents=True); locks.mkdir()
  (locks / f"am_{BUS_B}.lock").write_text("900\n")
  (proc / "900" / "stat").write_text("900 (python) S 1\n"); (proc / "900" / "cmdline").write_text("python\0run.py\0")
  os.symlink(str(locks / f"am_{BUS_B}.lock"), proc / "900" / "fd" / "5")
  system = System()
  system.mount("/sys/bus/pci/devices", DirProvider(str(sysdev)))
  system.mount("/proc", DirProvider(str(proc)))
  clock = iter(range(10**6))
  return Host(system=system, lockdir=str(locks), kill=lambda pid, sig: None, sleep=lambda s: None, clock=lambda: next(clock) * 0.05)


def test_sysfs_source_reads_amdgpu_sensors_in_their_units(tree):
  src = SysfsSource(tree)
  assert src.boards() == [BUS_A, BUS_B, BUS_C]  # AMD only
  m = src.read(BUS_A)
  assert m.driver == "amdgpu" and m.source == "amdgpu sysfs" and m.unavailable is None
  assert (m.gfx_activity, m.mem_activity) == (37, 5)
  assert (m.temp_edge, m.temp_hotspot, m.temp_mem) == (45.0, 61.5, 52.0)          # hwmon: millidegrees C
  assert m.power_w == pytest.approx(123.456789) and m.power_limit_w == pytest.approx(327.0)  # hwmon: microwatts
  assert (m.gfx_clock_mhz, m.mem_clock_mhz, m.soc_clock_mhz) == (2371, 1249, 1200)  # the '*' level
  assert m.fan_rpm == 1350 and m.fan_pct == pytest.approx(40.0)
  assert (m.vram_used, m.vram_total) == (3 << 30, 24 << 30)
  assert m.pcie_link == "16.0 GT/s PCIe x16" and m.pcie_max == "16.0 GT/s PCIe x16"
  assert m.throttle is None  # not read from anywhere: unknown, not "none"


def test_boards_without_a_reader_say_why_and_show_no_numbers(tree):
  src = SysfsSource(tree, None, "the AM driver cannot read it yet")
  b, c = src.read(BUS_B), src.read(BUS_C)
  assert b.owner_pids == [900] and b.unavailable == "metrics unavailable: held by pid 900, and the AM driver cannot read it yet"
  assert c.owner_pids == [] and c.unavailable.startswith("metrics unavailable: no driver runs it")
  for m in (b, c):
    assert all(getattr(m, k) is None for k in am_smi.DYNAMIC), m
  assert b.pcie_link == "8.0 GT/s PCIe x4" and b.name == "Radeon RX 9070 XT"


def test_an_smu_reader_fills_held_boards(tree):
  class SMU:
    def boards(self): return [BUS_B]
    def read(self, bus): return BoardMetrics(bus, gfx_activity=88.0, temp_hotspot=70.0, throttle=["PPT"], source="AM SMU")
  m = SysfsSource(tree, SMU()).read(BUS_B)
  assert (m.gfx_activity, m.temp_hotspot, m.throttle, m.source, m.unavailable) == (88.0, 70.0, ["PPT"], "AM SMU", None)
  assert m.owner_pids == [900] and m.name == "Radeon RX 9070 XT"  # the static facts stay sysfs's
  assert SysfsSource(tree, SMU()).read(BUS_C).unavailable  # nobody holds C: the SMU reader is not asked


class FakeSource:
  """Two boards: one with figures that change each reading, one without metrics."""
  def __init__(self): self.n = 0
  def boards(self): return [BUS_A, BUS_B]
  def read(self, bus):
    if bus == BUS_B: return BoardMetrics(bus, "Radeon RX 9070 XT", 0x7550, None, [900], source="none", unavailable="metrics unavailable: test says so")
    self.n += 1
    return BoardMetrics(bus, "Radeon RX 7900 XTX/XT", 0x744c, "amdgpu", [], "16.0 GT/s PCIe x16", "16.0 GT/s PCIe x16",
                        gfx_activity=[10.0, 50.0, 100.0][(self.n - 1) % 3], mem_activity=None, temp_edge=45, temp_hotspot=61.5, temp_mem=52,
                        power_w=150.0, power_limit_w=300.0, gfx_clock_mhz=2371, mem_clock_mhz=1249, soc_clock_mhz=1200, fan_rpm=1350, fan_pct=40,
                        vram_used=3 << 30, vram_total=24 << 30, throttle=[], source="test")


def test_render_text(tmp_path):
  src = FakeSource()
  ms = am_smi.sample(src)
  lines = render(ms, {BUS_A: deque([(10.0, 150.0), (None, None), (100.0, 300.0)])}, 100, ascii_only=True)
  text = "\n".join(lines)
  assert "0000:03:00.0  Radeon RX 7900 XTX/XT (0x744c)  driver=amdgpu  owner=-" in text
  assert "GFX  10.0% [##   " in text and "MEM n/a" in text
  assert "Temp edge 45C  hotspot 62C  mem 52C" in text and "Fan 1350 RPM (40%)" in text
  assert "Power 150.0 W / 300.0 W" in text and "gfx 2371 MHz  mem 1249 MHz  soc 1200 MHz" in text
  assert "VRAM 3.00 GiB / 24.00 GiB    Throttle: none" in text
  graph = next(ln for ln in lines if "GFX%" in ln)
  assert graph.split("|")[1].endswith(". @")  # 10% -> lowest bar, missing -> blank, 100% -> top bar
  assert "owner=pid 900" in text and "  metrics unavailable: test says so" in text
  assert all(len(ln) <= 100 for ln in render(ms, {}, 100))


def test_main_json_list_and_errors(capsys):
  assert main(["--json"], FakeSource()) == 0
  data = json.loads(capsys.readouterr().out)
  assert [d["bus"] for d in data] == [BUS_A, BUS_B] and data[0]["temp_hotspot"] == 61.5 and data[1]["unavailable"]
  assert main(["--list", "--dev", BUS_B], FakeSource()) == 0
  out = capsys.readouterr().out.splitlines()
  assert out[0].startswith("BUS") and len(out) == 2 and out[1].startswith(BUS_B) and "metrics unavailable: test says so" in out[1]
  assert main(["--list", "--dev", "0000:09:00.0"], FakeSource()) == 1
  assert "no AMD board at 0000:09:00.0" in capsys.readouterr().err
  with pytest.raises(SystemExit) as e: main(["--dev", "3:0.0"], FakeSource())
  assert e.value.code == 2


def test_a_dev_that_is_not_an_emulated_board(capsys, monkeypatch):
  """Another tool's DEV (tinygrad's DEV=CPU) is said to be ignored and the real boards are watched; MOCKKFD's boards
  have no sensors to watch, which is said, instead of listing the real boards as if they were asked for."""
  monkeypatch.setenv("DEV", "CPU")
  assert main(["--list"], FakeSource()) == 0
  out = capsys.readouterr()
  assert "am-smi: ignoring DEV: DEV='CPU': unknown vendor" in out.err and BUS_B in out.out
  monkeypatch.setenv("DEV", "MOCKKFD+AMD")
  assert main(["--list"], FakeSource()) == 1
  assert "publishes no sensors (hwmon, gpu_metrics) to read: use DEV=MOCKPCI+AMD" in capsys.readouterr().err


def test_pids_and_kill(tree, capsys):
  killed = []
  tree.kill = lambda pid, sig: killed.append((pid, sig))
  assert main(["--pids"], host=tree, source=SysfsSource(tree)) == 0
  assert "0000:04:00.0  pid 900  python run.py" in capsys.readouterr().out
  # the fake process does not die (its stat stays "S"), so --kill escalates and reports a survivor
  assert main(["--kill", "--dev", BUS_B], host=tree, source=SysfsSource(tree)) == 1
  assert [s for _, s in killed] == [15, 9] and "still running" in capsys.readouterr().out



def test_pids_and_kill_as_json_and_never_of_itself(tree, tmp_path, capsys):
  """Watching an emulated board am-smi holds it itself: --pids lists it as such, --kill leaves it alone (it used to
  SIGTERM itself)."""
  me = os.getpid()
  (tmp_path / "proc" / str(me) / "fd").mkdir(parents=True)
  (tmp_path / "proc" / str(me) / "stat").write_text(f"{me} (python) R 1\n"); (tmp_path / "proc" / str(me) / "cmdline").write_text("am-smi\0")
  os.symlink(str(tmp_path / "locks" / f"am_{BUS_B}.lock"), tmp_path / "proc" / str(me) / "fd" / "3")
  tree.include_self, killed = True, []
  tree.kill = lambda pid, sig: killed.append((pid, sig))
  assert main(["--pids", "--json"], host=tree, source=SysfsSource(tree)) == 0
  rows = json.loads(capsys.readouterr().out)
  assert sorted((r["pid"], r["this_process"]) for r in rows) == sorted([(900, False), (me, True)])
  assert main(["--pids"], host=tree, source=SysfsSource(tree)) == 0
  assert f"pid {me}  am-smi  (this am-smi)" in capsys.readouterr().out
  assert main(["--kill", "--json"], host=tree, source=SysfsSource(tree)) == 1   # 900 survives (its stat stays "S")
  rep = {r["pid"]: r for r in json.loads(capsys.readouterr().out)}
  assert {pid for pid, _ in killed} == {900} and rep[me]["sent"] == [] and "not signalled" in rep[me]["why"]


def test_list_shows_unknown_vram_use_and_power_limit_as_na(capsys):
  m = BoardMetrics(BUS_A, "Radeon RX 7900 XTX/XT", 0x744c, None, [], power_w=35.0, vram_total=512 << 20, source="test")
  row = am_smi.table([m])[1]
  assert "n/a/512MiB" in row and " 35W" in row and "0/512MiB" not in row

def _read_screen(fd, screen, stream, until_exit_of):
  deadline = time.monotonic() + 20
  while time.monotonic() < deadline:
    r, _, _ = select.select([fd], [], [], 0.2)
    if r:
      try: data = os.read(fd, 65536)
      except OSError: break  # the child closed the pty
      if not data: break
      stream.feed(data.decode("utf-8", "replace"))
    elif os.waitpid(until_exit_of, os.WNOHANG) != (0, 0): return True
  return os.waitpid(until_exit_of, 0)[1] == 0


def test_monitor_screen_in_a_pty():
  pyte = pytest.importorskip("pyte", reason="pyte (PyPI) renders the terminal for this test: pip install pyte")
  rows, cols = 30, 110
  pid, fd = pty.fork()
  if pid == 0:  # the child: am-smi's monitor on a 110x30 terminal
    try:
      fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
      os.environ.update(TERM="xterm-256color", LANG="C.UTF-8", LC_ALL="C.UTF-8")
      os.environ.pop("LINES", None); os.environ.pop("COLUMNS", None)
      am_smi.monitor(FakeSource(), interval=0.02, frames=3)
      os._exit(0)
    except BaseException:
      os._exit(3)
  screen = pyte.Screen(cols, rows)
  stream = pyte.Stream(screen)
  assert _read_screen(fd, screen, stream, pid)
  os.close(fd)
  text = "\n".join(screen.display)
  assert "0000:03:00.0  Radeon RX 7900 XTX/XT (0x744c)  driver=amdgpu" in text
  assert "GFX 100.0% [████████████████████]" in text  # the third reading
  assert "Temp edge 45°C  hotspot 62°C  mem 52°C" in text and "Power 150.0 W / 300.0 W" in text
  graph = next(ln for ln in screen.display if "GFX%" in ln)
  assert graph.split("|")[1].endswith("▁▄█")  # the three readings, oldest first
  assert "metrics unavailable: test says so" in text and "owner=pid 900" in text
  assert "q: quit" in screen.display[0]


def test_emulated_board_metrics_from_its_smu(firmware_dir):
  """DEV=MOCKPCI+AMD: am-smi boots the emulated board in its process and reads the SMU metrics table like a real one."""
  import json as _json, subprocess as _sp, sys as _sys, os as _os
  env = {**_os.environ, "DEV": "MOCKPCI+AMD", "RAWGPU_FIRMWARE_DIR": firmware_dir}
  out = _sp.run([_sys.executable, "-m", "rawgpu.tools.am_smi", "--list", "--json"], capture_output=True, text=True, env=env, timeout=120)
  assert out.returncode == 0, out.stderr
  (board,) = _json.loads(out.stdout)
  assert board["source"] == "smu" and board["unavailable"] is None and board["owner_pids"]
  assert 0 < board["temp_edge"] < 120 and board["gfx_clock_mhz"] > 0 and board["vram_total"] == 512 << 20


def test_emulated_mi300_metrics_from_its_smu(firmware_dir):
  """DEV=MOCKPCI+AMD::gfx942: the SMU 13.0.6 metrics table (MetricsTableX_t, Q10 fixed point) read and rounded as
  smu_v13_0_6_ppt.c does; MI300 has no edge temperature and no fan, shown as n/a rather than guessed."""
  import json as _json, subprocess as _sp, sys as _sys, os as _os
  env = {**_os.environ, "DEV": "MOCKPCI+AMD::gfx942", "RAWGPU_FIRMWARE_DIR": firmware_dir, "RAWGPU_AM_IN_PROGRESS": "1"}
  out = _sp.run([_sys.executable, "-m", "rawgpu.tools.am_smi", "--list", "--json"], capture_output=True, text=True, env=env, timeout=120)
  assert out.returncode == 0, out.stderr
  (board,) = _json.loads(out.stdout)
  assert board["source"] == "smu" and board["unavailable"] is None and board["name"] == "Instinct MI300X"
  assert board["temp_edge"] is None and board["fan_rpm"] is None and board["fan_pct"] is None
  assert 0 < board["temp_hotspot"] < 120 and 0 < board["temp_mem"] < 120 and 0 < board["power_w"] <= board["power_limit_w"] <= 750
  assert 500 <= board["gfx_clock_mhz"] <= 2100 and board["mem_clock_mhz"] == 1300 and 0 <= board["gfx_activity"] <= 100
  assert len(board["xcc_activity"]) == 8 and all(0 <= a <= 100 for a in board["xcc_activity"])   # per XCD (GfxBusy)
