"""What every command does with bad input, early stops and its own output: one-line errors with the right exit code,
a closed pipe, Ctrl-C, DEBUG; and the checks each command makes of its arguments before it starts."""
import json, os, subprocess, sys
import pytest
from rawgpu.errors import DeviceNotFound, RawGPUError, debug_level
from rawgpu.tools import am_smi, cli, hcq_smi
from rawgpu.tools.bench import bench_main, benchmark, core, samples
from rawgpu.tools.command import UsageError, run_command


def test_debug_level_reads_numbers_and_words(monkeypatch):
  for value, level in (("", 0), ("0", 0), (" 2 ", 2), ("yes", 1)):
    monkeypatch.setenv("DEBUG", value)
    assert debug_level() == level
  monkeypatch.delenv("DEBUG")
  assert debug_level() == 0


def test_run_command_exit_codes(capsys, monkeypatch):
  monkeypatch.setenv("DEBUG", "0")   # 0 is off: no traceback
  def raise_(e):
    def fn(): raise e
    return fn
  assert run_command("x", raise_(DeviceNotFound("no board"))) == 1
  assert capsys.readouterr().err == "x: error: no board\n"
  assert run_command("x", raise_(UsageError("bad value"))) == 2
  assert run_command("x", raise_(KeyboardInterrupt())) == 130
  monkeypatch.setenv("DEBUG", "1")
  with pytest.raises(DeviceNotFound): run_command("x", raise_(DeviceNotFound("no board")))


@pytest.mark.parametrize("argv", [["-m", "rawgpu.tools.hcq_smi", "amd", "list"], ["-m", "rawgpu.tools.hcq_smi", "amd", "list", "--json"],
                                  ["-m", "rawgpu.tools.am_smi", "--list"], ["-m", "rawgpu.tools.am_smi", "--json"],
                                  ["-m", "rawgpu", "devices"]])
def test_output_into_a_closed_pipe_is_quiet(argv):
  """The reader is gone before the command writes (as `| head` once it has its lines): exit 0, nothing on stderr."""
  r, w = os.pipe()
  os.close(r)
  env = {k: v for k, v in os.environ.items() if k not in ("DEV", "DEBUG")}
  p = subprocess.run([sys.executable, *argv], stdout=w, stderr=subprocess.PIPE, text=True, env=env, timeout=120)
  os.close(w)
  assert p.returncode == 0 and p.stderr == "", p.stderr


# ---- rawgpu bench

@pytest.fixture
def benches(bench_registry):

  @benchmark("zz_one")
  def one(ctx):
    """a tiny figure"""
    ctx.figure("tiny", "t", "us", samples(lambda: None, 1, 3))

  @benchmark("zz_stop")
  def stop(ctx):
    """Ctrl-C in the middle"""
    raise KeyboardInterrupt

  @benchmark("zz_after")
  def after(ctx):
    ctx.figure("never", "t", "us", samples(lambda: None, 1, 3))


def test_bench_json_to_stdout_is_json_alone_and_progress_goes_to_stderr(benches, capsys):
  assert bench_main(None, "-", ["zz_one"], True) == 0
  out = capsys.readouterr()
  assert [r["case"] for r in json.loads(out.out)] == ["tiny"]
  assert "rawgpu bench: zz_one (1/1): a tiny figure" in out.err and "MEDIAN" in out.err   # the table too


def test_bench_ctrl_c_keeps_what_was_measured(benches, capsys, tmp_path):
  path = tmp_path / "part.json"
  assert bench_main(None, str(path), ["zz_one", "zz_stop", "zz_after"], True) == 130
  recs = json.loads(path.read_text())
  assert [(r["bench"], r.get("error")) for r in recs] == [("zz_one", None), ("zz_stop", f"failed: {core.INTERRUPTED}")]
  assert "tiny" in capsys.readouterr().out


def test_bench_refuses_an_unwritable_json_file_before_it_runs(benches, tmp_path):
  ran = []
  @benchmark("zz_count")
  def count(ctx): ran.append(1)
  for path, why in ((tmp_path / "no" / "x.json", "no folder"), (tmp_path, "it is a folder")):
    with pytest.raises(RawGPUError, match=why): bench_main(None, str(path), ["zz_count"], True)
  assert ran == []


def test_bench_a_dev_that_does_not_parse_is_bad_usage(capsys, monkeypatch):
  monkeypatch.delenv("DEBUG", raising=False)
  assert cli.main(["bench", "--only", "import", "--dev", "FOO"]) == 2
  assert "unknown vendor 'FOO'" in capsys.readouterr().err
  monkeypatch.setenv("DEV", "CPU")   # tinygrad's, not rawgpu's: the device benchmarks skip, saying so
  assert cli.main(["bench", "--only", "import", "signal"]) == 0
  assert "skipped: cannot open CPU" in capsys.readouterr().out


# ---- rawgpu demo

@pytest.mark.parametrize("size", ["0", "-5", "x"])
def test_demo_size_must_be_positive(size, capsys):
  with pytest.raises(SystemExit) as e: cli.main(["demo", "--size", size])
  assert e.value.code == 2 and "is not a positive whole number" in capsys.readouterr().err


def test_demo_ends_its_progress_line_before_an_error(capsys, monkeypatch):
  monkeypatch.delenv("DEBUG", raising=False)
  assert cli.main(["demo", "--dev", "MOCKPCI:0,1+AMD"]) == 1   # parses, but names two devices: the boot fails
  err = capsys.readouterr().err
  assert "booting ... failed\nrawgpu: error:" in err and "names 2 devices" in err


def test_demo_interrupted_while_booting_says_so(capsys, monkeypatch):
  """Ctrl-C during the boot ends the progress line with "interrupted" (it said "failed", which reads as a boot
  failure), and the command exits 130."""
  from rawgpu.tools import demo
  def interrupted(dev): raise KeyboardInterrupt
  monkeypatch.setattr(demo, "open_demo_device", interrupted)
  assert cli.main(["demo", "--dev", "MOCKPCI+AMD"]) == 130
  assert "booting ... interrupted" in capsys.readouterr().err


# ---- rawgpu decode

def test_decode_hex_words_are_32_bits_and_text_must_be_hex(tmp_path, capsys, monkeypatch):
  pytest.importorskip("rawgpu.hcq.amd.pm4", reason="the PM4 decoder (hcq/amd/pm4.py) is not in this build")
  monkeypatch.delenv("DEBUG", raising=False)
  (tmp_path / "wide.txt").write_text("c0001000 deadbeefcafe\n")
  assert cli.main(["decode", "pm4", str(tmp_path / "wide.txt")]) == 1
  assert "0xdeadbeefcafe is wider" in capsys.readouterr().err
  for text in ("hello world!\n", "hello world\n"):   # (12 bytes would otherwise read as three binary dwords)
    (tmp_path / "t.txt").write_text(text)
    assert cli.main(["decode", "pm4", str(tmp_path / "t.txt")]) == 1
    assert "text that is not hex words ('hello')" in capsys.readouterr().err


def test_decode_marks_malformed_packets_and_exits_1(tmp_path, capsys):
  pytest.importorskip("rawgpu.hcq.amd.pm4", reason="the PM4 decoder (hcq/amd/pm4.py) is not in this build")
  (tmp_path / "t1.txt").write_text("40000000\n")   # a type-1 header: no such packet
  assert cli.main(["decode", "pm4", str(tmp_path / "t1.txt")]) == 1
  assert "!!" in capsys.readouterr().out


def test_decode_isa_says_where_it_stopped(tmp_path, capsys):
  pytest.importorskip("rawgpu.drivers.emu.shader.decode", reason="the ISA decoder is not in this build")
  nop = (0xbf800000).to_bytes(4, "little")   # s_nop 0 on gfx11
  bad = (0x7a000000).to_bytes(4, "little")
  from rawgpu.drivers.emu.shader.decode import DecodeError, decode_at
  with pytest.raises(DecodeError): decode_at("gfx1100", bad, 0)   # (the word is one no encoding knows)
  (tmp_path / "a.bin").write_bytes(nop + bad + nop)
  assert cli.main(["decode", "isa", str(tmp_path / "a.bin"), "--arch", "gfx1100", "--json"]) == 1
  rows = json.loads(capsys.readouterr().out)
  assert [r["text"].split()[0] for r in rows] == ["s_nop", "!!"] and rows[1]["offset"] == 4 and rows[1]["error"]
  assert "(word 0x7a000000): the rest is not decoded" in rows[1]["text"]
  (tmp_path / "b.bin").write_bytes(nop + nop[:3])   # an instruction cut off at the end
  assert cli.main(["decode", "isa", str(tmp_path / "b.bin"), "--arch", "gfx1100"]) == 1
  assert "(3 bytes left): the rest is not decoded" in capsys.readouterr().out


def test_decode_isa_with_another_arch_than_the_code_objects(capsys):
  """A code object names its target: --arch that disagrees is the user's mistake, said as such (not "the device")."""
  from rawgpu import kernels
  assert cli.main(["decode", "isa", str(kernels.path("gfx1100", "fill")), "--arch", "gfx1201"]) == 1
  assert "the code object is built for gfx1100, not gfx1201: drop --arch gfx1201" in capsys.readouterr().err


def test_decode_arch_is_checked_as_usage(tmp_path, capsys, monkeypatch):
  monkeypatch.delenv("DEBUG", raising=False)
  (tmp_path / "a.bin").write_bytes(bytes(8))
  for arch in ("gfx11", "gfx9999", "gfx1100:xnack-"):
    with pytest.raises(SystemExit) as e: cli.main(["decode", "isa", str(tmp_path / "a.bin"), "--arch", arch])
    assert e.value.code == 2 and "unknown arch" in capsys.readouterr().err
  assert cli.main(["decode", "isa", str(tmp_path / "a.bin")]) == 2   # raw bytes without --arch
  assert "raw instruction bytes need --arch" in capsys.readouterr().err
  pytest.importorskip("rawgpu.hcq.amd.pm4", reason="the PM4 decoder (hcq/amd/pm4.py) is not in this build")
  for arch in ("gfx940", "gfx1103", "gfx1151"):   # same packets as gfx942, gfx1100 (KFD opens any gfx11xx node)
    (tmp_path / "n.txt").write_text("c0001000 00000000\n")
    assert cli.main(["decode", "pm4", str(tmp_path / "n.txt"), "--arch", arch]) == 0, capsys.readouterr().err


# ---- hcq-smi and am-smi

@pytest.mark.parametrize("wait", ["0", "-1", "nan", "inf", "x"])
def test_kill_pids_wait_must_be_a_positive_number(wait, capsys):
  with pytest.raises(SystemExit) as e: hcq_smi.main(["amd", "kill_pids", "--wait", wait])
  assert e.value.code == 2 and "is not a positive number of seconds" in capsys.readouterr().err


def test_a_process_gone_at_the_deadline_counts_as_ended():
  """wait_gone looks once more at its deadline: the process may have ended while it slept."""
  looks = iter([True, True, False])
  host = hcq_smi.Host(clock=iter([0.0, 0.5, 1.5]).__next__, sleep=lambda s: None)
  hcq_smi_alive = hcq_smi.alive
  try:
    hcq_smi.alive = lambda h, pid: next(looks)
    assert hcq_smi.wait_gone(host, 123, 1.0)
  finally: hcq_smi.alive = hcq_smi_alive


@pytest.mark.parametrize("argv", [["--interval", "nan"], ["--interval", "inf"], ["--interval", "0"], ["--frames", "0"]])
def test_am_smi_interval_and_frames_are_checked(argv, capsys):
  with pytest.raises(SystemExit) as e: am_smi.main(argv)
  assert e.value.code == 2


def test_bus_ids_with_a_trailing_newline_are_refused():
  from rawgpu.drivers import pci
  assert pci.BUS_RE.match("0000:03:00.0") and not pci.BUS_RE.match("0000:03:00.0\n")


def test_tinygrad_without_a_script_is_bad_usage(capsys, monkeypatch):
  monkeypatch.delenv("DEBUG", raising=False)
  assert cli.main(["tinygrad"]) == 2
  assert "give the tinygrad script to run" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["abc", "1", "100", ""])
def test_a_bad_emulated_vram_size_is_one_clear_line(value, monkeypatch):
  """RAWGPU_MOCK_VRAM_MB that is not a power of two of at least 64 MiB is named (it was a ValueError traceback)."""
  from rawgpu.drivers.emu.mockpci import vram_size
  monkeypatch.setenv("RAWGPU_MOCK_VRAM_MB", value)
  with pytest.raises(RawGPUError, match="RAWGPU_MOCK_VRAM_MB=.*power of two of at least 64"): vram_size()
  monkeypatch.setenv("RAWGPU_MOCK_VRAM_MB", "256")
  assert vram_size() == 256 << 20
