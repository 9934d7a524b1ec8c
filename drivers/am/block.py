"""The IP block lifecycle shared by every block of the boot sequence (Linux amdgpu's ip_block funcs, trimmed).

init_sw: decide addresses and buffers (runs on every boot, warm or cold, and must allocate the same way each time);
init_hw: program the hardware (cold boot; GFX and SDMA also on warm boot); fini: leave the block quiet.
"""
from __future__ import annotations
from typing import TYPE_CHECKING
if TYPE_CHECKING: from rawgpu.drivers.am.device import AMDevice


class Block:
  name = "block"
  warm_init = False           # True: init_hw runs on warm boots too

  def __init__(self, dev: "AMDevice"): self.dev = dev
  def init_sw(self) -> None: pass
  def init_hw(self) -> None: pass
  def fini(self) -> None: pass
  def reg(self, ip: str, name: str, inst: int = 0): return self.dev.regs.reg(ip, name, inst)
