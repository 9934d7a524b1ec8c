import json, os
import numpy as np
import pytest
from rawgpu import kernels


@pytest.fixture(scope="module")
def dev():
  from conftest import find_firmware
  fw = find_firmware()
  if fw is None: pytest.skip("AMD firmware not found: run .ci/fetch-firmware (Debian firmware-amd-graphics) or set RAWGPU_FIRMWARE_DIR")
  os.environ.setdefault("RAWGPU_FIRMWARE_DIR", fw)
  from rawgpu.hcq.device import Device
  d = Device("MOCKPCI+AMD")
  yield d
  d.close()


def test_chrome_trace_has_one_ordered_event_per_launch(dev, tmp_path):
  from rawgpu.hcq.profile import Profiler
  fill = dev.program(kernels.path(dev.props.arch, "fill").read_bytes())
  vadd = dev.program(kernels.path(dev.props.arch, "vadd").read_bytes(), "vadd_f32")
  buf = dev.alloc(4 * 1024)
  prof = Profiler(dev)
  try:
    for v in (0, 7, 0x3f800000): fill(buf, v, 1024, global_size=4, local_size=256)  # the last is 1.0f
    gpu_s = vadd(buf, buf, buf, 1024, global_size=4, local_size=256, timing=True)
    path = prof.export(str(tmp_path / "trace.json"))
  finally: prof.close()
  assert np.all(buf.numpy(np.float32) == 2.0)  # 1.0 + 1.0: every launch ran, in order
  evs = json.load(open(path))["traceEvents"]
  assert [e["name"] for e in evs] == ["fill_u32"] * 3 + ["vadd_f32"]
  assert all(e["ph"] == "X" and e["dur"] > 0 for e in evs)
  assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in zip(evs, evs[1:]))  # one queue: launches do not overlap
  assert abs(evs[-1]["dur"] / 1e6 - gpu_s) < 1e-9
  fill(buf, 1, 1024, global_size=4, local_size=256, wait=True)  # after close: no profiling, still correct
  assert len(prof.events) == 4
