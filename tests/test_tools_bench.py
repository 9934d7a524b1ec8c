"""rawgpu bench: the harness measures, skips and fails the same way every time; records are well-formed."""
import json, math, re, shutil, subprocess
import pytest
from conftest import find_firmware
from rawgpu.tools import cli
from rawgpu.tools.bench import core
from rawgpu.tools.bench.core import Ctx, Skip, benchmark, run, samples, table

KEYS = {"bench", "case", "metric", "unit", "median", "min", "max", "n", "device", "arch", "env"}
UNITS = set(core.TIME_UNITS) | set(core.RATE_UNITS)


def check_record(r: dict) -> None:
  assert KEYS <= set(r) <= KEYS | {"skipped", "error"}, r
  assert isinstance(r["bench"], str) and isinstance(r["case"], str) and isinstance(r["env"], dict)
  assert {"cpu", "cores", "python", "device", "iface", "python_call_ns"} <= set(r["env"]) and r["env"]["python_call_ns"] > 0
  if "skipped" in r or "error" in r:
    assert ("skipped" in r) != ("error" in r)
    text = r.get("skipped") or r.get("error")
    assert re.match(r"^(skipped|failed): \S", text), text
    assert r["median"] is r["min"] is r["max"] is None and r["n"] == 0
  else:
    assert r["unit"] in UNITS and r["metric"]
    assert r["n"] > 0
    for k in ("median", "min", "max"): assert isinstance(r[k], float) and math.isfinite(r[k]) and r[k] > 0, r
    assert r["min"] <= r["median"] <= r["max"]


def test_quick_run_of_every_benchmark(tmp_path, monkeypatch, capsys):
  """Each benchmark once at a tiny size on the emulated GPU: figures, or skips/failures that say why, never both."""
  monkeypatch.delenv("DEBUG", raising=False)
  if (fw := find_firmware()) is not None: monkeypatch.setenv("RAWGPU_FIRMWARE_DIR", fw)
  out = tmp_path / "bench.json"
  rc = cli.main(["bench", "--quick", "--dev", "MOCKPCI+AMD", "--json", str(out)])
  text = capsys.readouterr().out
  records = json.loads(out.read_text())
  for r in records: check_record(r)
  assert {r["bench"] for r in records} == set(core.ORDER)
  assert rc == (1 if any("error" in r for r in records) else 0)
  imports = {r["case"]: r for r in records if r["bench"] == "import"}
  assert set(imports) == {"rawgpu", "rawgpu.hcq", "rawgpu.hcq.Device"} and all("median" in r and r["unit"] == "ms" for r in imports.values())
  for r in records:  # the table shows every record: its number or its reason
    assert r["bench"] in text and (r.get("skipped") or r.get("error") or r["case"]) in text
  assert "cores, Python" in text


def test_figure_statistics():
  ctx = Ctx(None, env={"cpu": "x", "cores": 1, "python": "3"})
  f = ctx.figure("c", "m", "ms", [0.004, 0.001, 0.002])
  assert (f.median, f.min, f.max, f.n) == (2.0, 1.0, 4.0, 3)
  f = ctx.figure("c", "m", "us", [1e-6, 3e-6])
  assert f.median == pytest.approx(2.0) and f.max == pytest.approx(3.0)
  f = ctx.figure("c", "bw", "GB/s", [1.0, 2.0, 4.0], work=1e9)  # a rate: the fastest repeat is the max
  assert (f.median, f.min, f.max) == (0.5, 0.25, 1.0)
  f = ctx.figure("c", "t", "elements/s", [0.5, 0.25], work=1000)
  assert (f.median, f.min, f.max) == (3000.0, 2000.0, 4000.0)
  with pytest.raises(ValueError): ctx.figure("c", "m", "furlongs", [1.0])
  with pytest.raises(ValueError): ctx.figure("c", "m", "GB/s", [1.0])
  assert [r["env"]["device"] for r in (f.record(),)] == [None]


def test_samples_warmup_repeats_and_self_timed():
  calls = []
  assert len(samples(lambda: calls.append(1), 2, 5)) == 5 and len(calls) == 7
  assert samples(lambda: 0.125, 0, 3) == [0.125] * 3  # a call that times itself reports its own seconds


@pytest.fixture
def fake_benches(bench_registry):

  @benchmark("zz_ok")
  def ok(ctx):
    ctx.figure("tiny", "sleepless", "us", samples(lambda: sum(range(100)), 1, 3))

  @benchmark("zz_skip")
  def sk(ctx):
    with ctx.needs("the flux capacitor"): raise ImportError("no module named flux")

  @benchmark("zz_fail")
  def fail(ctx):
    with ctx.needs("a queue"): raise ZeroDivisionError("the wrong answer")

  @benchmark("zz_dev")
  def dev(ctx):
    ctx.device()

  @benchmark("zz_silent")
  def silent(ctx): pass


def test_skips_and_failures_are_reported_not_numbers(fake_benches):
  figs = {f.bench: f for f in run(["zz_ok", "zz_skip", "zz_fail", "zz_dev", "zz_silent"], None, True)}
  assert figs["zz_ok"].median > 0 and figs["zz_ok"].n == 3
  assert figs["zz_skip"].skipped == "skipped: the flux capacitor: ImportError: no module named flux" and figs["zz_skip"].median is None
  assert figs["zz_fail"].error == "failed: ZeroDivisionError: the wrong answer" and figs["zz_fail"].median is None
  assert figs["zz_dev"].skipped.startswith("skipped: no device given")
  assert figs["zz_silent"].skipped == "skipped: the benchmark reported nothing"
  for f in figs.values(): check_record(json.loads(json.dumps(f.record())))
  t = table(list(figs.values()))
  assert "skipped: the flux capacitor" in t and "failed: ZeroDivisionError" in t
  with pytest.raises(ValueError, match="no benchmark named nope"): run(["nope"], None, True)


def test_device_that_does_not_parse_is_skipped(fake_benches):
  (f,) = run(["zz_dev"], "NOTAVENDOR", True)
  assert f.skipped.startswith("skipped: cannot open NOTAVENDOR: DeviceSpecError")


def test_bench_cli_exit_codes(fake_benches, tmp_path, capsys):
  assert cli.main(["bench", "--only", "import", "--quick", "--json", "-"]) == 0
  out = capsys.readouterr().out
  records = json.loads(out[out.index("["):])
  assert [r["case"] for r in records] == ["rawgpu", "rawgpu.hcq", "rawgpu.hcq.Device"]
  with pytest.raises(SystemExit) as e: cli.main(["bench", "--only", "nope"])
  assert e.value.code == 2
  from rawgpu.tools.bench import bench_main
  assert bench_main(None, None, ["zz_fail"], True) == 1
  assert "zz_fail * : failed: ZeroDivisionError" in capsys.readouterr().err.replace("zz_fail *:", "zz_fail * :")


# ---- rawgpu decode

OBJDUMP = shutil.which("llvm-objdump-19")


@pytest.mark.skipif(OBJDUMP is None, reason="llvm-objdump-19 not installed (apt-get install llvm-19)")
@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201", "gfx942"])
def test_decode_isa_agrees_with_llvm_objdump(arch, capsys):
  from rawgpu import kernels
  path = str(kernels.path(arch, "vadd"))
  assert cli.main(["decode", "isa", path, "--json"]) == 0
  ours = [(r["offset"], " ".join(r["text"].split())) for r in json.loads(capsys.readouterr().out)]
  dump = subprocess.run([OBJDUMP, "-d", f"--mcpu={arch}", path], capture_output=True, text=True, check=True).stdout
  theirs = [(int(ln.split("//")[1].split(":")[0], 16), " ".join(ln.split("//")[0].split())) for ln in dump.splitlines() if ln.startswith(("\t", "  ")) and "//" in ln]
  theirs = theirs[:len(ours)]
  assert len(ours) > 20 and ours == theirs  # the same instructions at the same offsets, text for text (wave64 on gfx942)
  assert cli.main(["decode", "isa", path]) == 0
  assert "vadd_f32:" in capsys.readouterr().out


def test_decode_into_a_closed_pipe_is_quiet(tmp_path):
  """`rawgpu decode isa ... | head -1`: the reader leaves early (here after 1 of 64k lines, far more than a pipe
  buffers); no traceback, exit 0."""
  import sys
  (tmp_path / "movs.bin").write_bytes(bytes.fromhex("0002027e") * 65536)   # v_mov_b32 v1, s0
  r = subprocess.run(f"{sys.executable} -m rawgpu decode isa {tmp_path / 'movs.bin'} --arch gfx1100 | head -1; exit ${{PIPESTATUS[0]}}",
                     shell=True, executable="/bin/bash", capture_output=True, text=True)
  assert r.returncode == 0 and r.stdout.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


def test_decode_pm4_text_and_binary(tmp_path, capsys):
  pm4 = pytest.importorskip("rawgpu.hcq.amd.pm4", reason="the PM4 encoders/decoder (hcq/amd/pm4.py) are not in this build")
  words = pm4.nop(3) + pm4.release_mem(0x1234_5678_9000, 7) + pm4.nop(1)
  (tmp_path / "s.bin").write_bytes(b"".join(w.to_bytes(4, "little") for w in words))
  (tmp_path / "s.txt").write_text("\n".join(f"{i:04x}: " + " ".join(f"0x{w:08x}" for w in words[i:i + 4]) for i in range(0, len(words), 4)))
  outs = []
  for f in ("s.bin", "s.txt"):
    assert cli.main(["decode", "pm4", str(tmp_path / f), "--json"]) == 0
    outs.append([p["name"] for p in json.loads(capsys.readouterr().out)])
  assert outs[0] == outs[1] == ["NOP", "RELEASE_MEM", "NOP"]
  (tmp_path / "t.bin").write_bytes((tmp_path / "s.bin").read_bytes()[:-8])
  assert cli.main(["decode", "pm4", str(tmp_path / "t.bin")]) == 1  # cut short: the last packet is TRUNCATED
  assert "TRUNCATED" in capsys.readouterr().out
  assert cli.main(["decode", "pm4", str(tmp_path / "missing")]) == 1
  assert "cannot read" in capsys.readouterr().err
  (tmp_path / "empty.bin").write_bytes(b"")
  (tmp_path / "blank.txt").write_text("\n  \n")
  for stream, f in (("pm4", "empty.bin"), ("sdma", "blank.txt"), ("isa", "empty.bin")):   # said nothing and exited 0
    assert cli.main(["decode", stream, str(tmp_path / f), "--arch", "gfx1100"]) == 1
    what = "holds only whitespace" if f == "blank.txt" else "is empty"
    assert f"{f} {what}: nothing to decode" in capsys.readouterr().err
  (tmp_path / "seps.txt").write_text(" , [ ] \n")   # separators, no words: decoded nothing and exited 0
  assert cli.main(["decode", "pm4", str(tmp_path / "seps.txt")]) == 1
  assert "nothing to decode: the text holds no hex words" in capsys.readouterr().err


def test_decode_sdma(tmp_path, capsys):
  sdma = pytest.importorskip("rawgpu.hcq.amd.sdma", reason="the SDMA encoders/decoder (hcq/amd/sdma.py) are not in this build")
  words = sdma.copy_linear(0x2000, 0x1000, 256) + sdma.fence(0x3000, 5) + sdma.trap()
  (tmp_path / "s.txt").write_text(" ".join(f"{w:08x}" for w in words))
  assert cli.main(["decode", "sdma", str(tmp_path / "s.txt"), "--json"]) == 0
  assert [p["name"] for p in json.loads(capsys.readouterr().out)] == [p.name for p in sdma.decode_sdma(words)]
  assert cli.main(["decode", "sdma", str(tmp_path / "s.txt")]) == 0
  assert len(capsys.readouterr().out.splitlines()) == 3


def test_decode_follows_the_arch(tmp_path, capsys):
  """An MI300 ring holds gfx9's PM4 forms (a 7-dword ACQUIRE_MEM, RELEASE_MEM's TC bits) and SDMA 4 packets:
  --arch gfx942 decodes them so; read as gfx11's they come out wrong."""
  pm4 = pytest.importorskip("rawgpu.hcq.amd.pm4", reason="the PM4 encoders/decoder (hcq/amd/pm4.py) are not in this build")
  sdma = pytest.importorskip("rawgpu.hcq.amd.sdma", reason="the SDMA encoders/decoder (hcq/amd/sdma.py) are not in this build")
  words = pm4.acquire_mem(gen=9) + pm4.release_mem(0x1000, 5, gen=9)
  (tmp_path / "g9.txt").write_text(" ".join(f"{w:08x}" for w in words))
  assert cli.main(["decode", "pm4", str(tmp_path / "g9.txt"), "--arch", "gfx942", "--json"]) == 0
  got = json.loads(capsys.readouterr().out)
  assert [(p["name"], p["fields"], p["error"]) for p in got] == [(p.name, p.fields, "") for p in pm4.decode_pm4(words, 9)]
  assert got[0]["fields"]["tc_wb"] == 1 and got[1]["fields"]["tc_wb"] == 1
  assert cli.main(["decode", "pm4", str(tmp_path / "g9.txt"), "--json"]) == 1   # malformed as gfx11's: exit 1
  assert "too short" in json.loads(capsys.readouterr().out)[0]["error"]   # gfx11's ACQUIRE_MEM is 8 dwords
  words = sdma.copy_linear(0x2000, 0x1000, 256, version=(4, 4)) + sdma.fence(0x3000, 5, version=(4, 4))
  (tmp_path / "s4.txt").write_text(" ".join(f"{w:08x}" for w in words))
  assert cli.main(["decode", "sdma", str(tmp_path / "s4.txt"), "--arch", "gfx942", "--json"]) == 0
  assert [p["fields"] for p in json.loads(capsys.readouterr().out)] == [p.fields for p in sdma.decode_sdma(words, (4, 4))]
  with pytest.raises(SystemExit) as e: cli.main(["decode", "sdma", str(tmp_path / "s4.txt"), "--arch", "gfx90a"])
  assert e.value.code == 2 and "unknown arch 'gfx90a'; valid: gfx11xx" in capsys.readouterr().err   # bad usage


def test_cases_fail_and_skip_one_at_a_time(fake_benches):
  @benchmark("zz_cases")
  def cases(ctx):
    for i in range(3):
      with ctx.case(f"c{i}", "t", "us"):
        if i == 0: raise RuntimeError("broken case")
        if i == 1: raise Skip("needs a thing")
        ctx.figure(f"c{i}", "t", "us", samples(lambda: None, 0, 2))
  figs = run(["zz_cases"], None, True)
  assert [(f.case, bool(f.error), bool(f.skipped), f.n) for f in figs] == [("c0", True, False, 0), ("c1", False, True, 0), ("c2", False, False, 2)]
  assert figs[0].error == "failed: RuntimeError: broken case" and figs[1].skipped == "skipped: needs a thing"
