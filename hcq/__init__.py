"""Hardware command queues: the vendor-neutral core (Device, Buffer, Signal, HWQueue, Program, Graph) and per-vendor encoders.

    from rawgpu.hcq import Device
    dev = Device("MOCKPCI+AMD")
"""
from __future__ import annotations

__all__ = ["Device", "devices", "Buffer", "Local", "Signal", "HWQueue", "Var", "Graph", "Profiler"]


def __getattr__(name: str):
  # lazy, so `import rawgpu.hcq` stays cheap
  if name == "Device": from rawgpu.hcq.device import Device; return Device
  if name == "devices": from rawgpu.hcq.device import devices; return devices
  if name == "Buffer": from rawgpu.hcq.buffer import Buffer; return Buffer
  if name == "Local": from rawgpu.hcq.buffer import Local; return Local
  if name == "Signal": from rawgpu.hcq.signal import Signal; return Signal
  if name == "HWQueue": from rawgpu.hcq.queue import HWQueue; return HWQueue
  if name == "Var": from rawgpu.hcq.patch import Var; return Var
  if name == "Graph": from rawgpu.hcq.graph import Graph; return Graph
  if name == "Profiler": from rawgpu.hcq.profile import Profiler; return Profiler
  raise AttributeError(name)
