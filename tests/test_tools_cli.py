import json, os, subprocess, sys
from rawgpu.tools import cli
from rawgpu.tools.inventory import inventory


def test_inventory_on_a_fake_bus(fake_pci):
  system = fake_pci({
    "0000:03:00.0": dict(vendor=0x1002, device=0x744c, bars={0: 1 << 16}),
    "0000:04:00.0": dict(vendor=0x1002, device=0x7550, driver="amdgpu"),
    "0000:05:00.0": dict(vendor=0x10de, device=0x2335, cls=0x030200, driver="nvidia"),
    "0000:06:00.0": dict(vendor=0x8086, device=0x1234, cls=0x020000),
  })
  found = {d["bus"]: d for d in inventory(system)}
  assert set(found) == {"0000:03:00.0", "0000:04:00.0", "0000:05:00.0"}
  assert found["0000:03:00.0"]["name"] == "Radeon RX 7900 XTX/XT" and found["0000:03:00.0"]["ifaces"]["KFD"] == "amdgpu not bound"
  assert "hcq-smi amd rmmod" in found["0000:04:00.0"]["ifaces"]["PCI"] and found["0000:04:00.0"]["ifaces"]["KFD"] == "no /dev/kfd"
  assert found["0000:05:00.0"]["vendor"] == "NV" and "hcq-smi nv rmmod" in found["0000:05:00.0"]["ifaces"]["PCI"]


def test_usage_and_errors_without_traceback(capsys, monkeypatch):
  monkeypatch.delenv("DEBUG", raising=False)
  assert cli.main([]) == 2
  assert cli.main(["demo", "--dev", "FOO+AMD"]) == 1
  err = capsys.readouterr().err
  assert err.startswith("rawgpu: error:") and "unknown interface" in err and "Traceback" not in err


def test_demo_on_the_emulated_board(firmware_dir):
  env = {**os.environ, "RAWGPU_FIRMWARE_DIR": firmware_dir}
  env.pop("DEV", None)
  out = subprocess.run([sys.executable, "-m", "rawgpu", "demo", "--dev", "MOCKPCI+AMD::gfx1201", "--size", "1000", "--json"],
                       capture_output=True, text=True, env=env, timeout=300)
  assert out.returncode == 0, out.stderr
  res = json.loads(out.stdout)
  assert res["emulated"] and res["iface"] == "MOCKPCI" and res["arch"] == "gfx1201" and res["vadd_ok"] and res["matmul_ok"]
  assert res["vadd_kernel_s"] > 0 and res["launch_us"] > 0 and res["copyin_GBps"] > 0


def test_demo_report_names_the_interface_of_an_emulated_device(capsys):
  """An emulated board opened through MOCKKFD is labelled as such, not as MOCKPCI; a real device gets no label."""
  from rawgpu.tools.demo import report
  res = {"device": "MOCKKFD+AMD:gfx942@0000:c1:00.0", "emulated": True, "iface": "MOCKKFD", "boot_s": 0.5, "launch_us": 3.0,
         "vadd_ok": True, "vadd_kernel_s": 1e-3, "matmul_ok": True, "matmul_kernel_s": 1e-3, "copyin_GBps": 0.1}
  assert report(res) == 0
  out = capsys.readouterr().out
  assert "(emulated GPU through MOCKKFD, not real hardware)" in out and "MOCKPCI" not in out
  report({**res, "emulated": False, "iface": "KFD", "device": "KFD+AMD:gfx1100@0000:03:00.0", "copyin_GBps": 0.00123})
  out = capsys.readouterr().out
  assert "emulated" not in out and "copyin          0.00123 GB/s" in out   # (it printed 0.00 for a small --size)
