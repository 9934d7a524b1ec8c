"""The KFD topology in sysfs (kfd_topology.c) and the render node's IP discovery (amdgpu_discovery.c), read through
the OS seam. GPU nodes are ordered by PCI address, so KFD:N and PCI:N name the same board.
"""
from __future__ import annotations
import os
from dataclasses import dataclass, field
from rawgpu.drivers.system import System
from rawgpu.errors import DeviceNotFound, RawGPUError

TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"
DRM = "/sys/class/drm"
# ip_discovery directory -> the name hcq and AM use
IP_NAMES = {"GC": "gc", "SDMA0": "sdma", "MMHUB": "mmhub", "ATHUB": "athub", "OSSSYS": "osssys", "HDP": "hdp",
            "NBIF": "nbio", "MP0": "mp0", "MP1": "mp1", "SMUIO": "smuio"}


@dataclass
class Node:
  index: int                      # the node directory number
  gpu_id: int
  props: dict[str, int]
  mem_banks: list[dict[str, int]] = field(default_factory=list)
  partition: int | None = None    # a board split into several nodes (MI300 in CPX mode): which one this is

  @property
  def gfx_target_version(self) -> int: return self.props.get("gfx_target_version", 0)

  @property
  def arch(self) -> str:
    v = self.gfx_target_version
    return f"gfx{v // 10000}{(v // 100) % 100:x}{v % 100:x}"

  @property
  def pci_bus(self) -> str:
    loc, dom = self.props.get("location_id", 0), self.props.get("domain", 0)
    # a partition's node id is in the function bits (amdkfd ORs it into location_id); the GPU is function 0
    return f"{dom:04x}:{loc >> 8:02x}:{(loc >> 3) & 0x1f:02x}.{0 if self.partition is not None else loc & 7}"

  @property
  def render_minor(self) -> int: return self.props.get("drm_render_minor", -1)


def parse_properties(text: str) -> dict[str, int]:
  out = {}
  for line in text.splitlines():
    parts = line.split()
    if len(parts) == 2:
      try: out[parts[0]] = int(parts[1], 0)
      except ValueError: pass   # a non-numeric value (marketing name in old kernels): not needed
  return out


def gpu_nodes(system: System) -> list[Node]:
  """Every GPU node (gpu_id != 0) of the topology, in PCI order. A missing topology raises DeviceNotFound."""
  if not system.exists(TOPOLOGY): raise DeviceNotFound(f"no KFD topology at {TOPOLOGY}: amdgpu is not loaded or the kernel is not ROCm-capable (CONFIG_HSA_AMD)")
  nodes = []
  for name in system.listdir(TOPOLOGY):
    if not name.isdigit(): continue
    base = f"{TOPOLOGY}/{name}"
    try: gpu_id = int(system.read_text(f"{base}/gpu_id").strip() or 0)
    except (OSError, ValueError): continue
    if gpu_id == 0: continue   # a CPU node
    node = Node(int(name), gpu_id, parse_properties(system.read_text(f"{base}/properties")))
    banks = f"{base}/mem_banks"
    if system.exists(banks):
      node.mem_banks = [parse_properties(system.read_text(f"{banks}/{b}/properties")) for b in system.listdir(banks) if b.isdigit()]
    nodes.append(node)
  # kfd_topology_add_device: a GPU of several nodes (partitions) ORs the node's id into location_id's low bits, so
  # nodes that differ only there are one board's partitions (amdgpu drives no GPU at a function other than 0)
  board = lambda n: (n.props.get("domain", 0), n.props.get("location_id", 0) >> 3)
  for n in nodes:
    if sum(board(m) == board(n) for m in nodes) > 1: n.partition = n.props.get("location_id", 0) & 7
  return sorted(nodes, key=lambda n: (n.props.get("domain", 0), n.props.get("location_id", 0), n.index))


def vram_size(node: Node) -> int:
  """Local memory: the node's local_mem_size, else the sum of its VRAM banks (heap types 1 public, 2 private)."""
  if node.props.get("local_mem_size"): return node.props["local_mem_size"]
  return sum(b.get("size_in_bytes", 0) for b in node.mem_banks if b.get("heap_type") in (1, 2))


def bar_size(node: Node) -> int:
  """CPU-visible VRAM: all of it when the bank is FB_PUBLIC (large BAR), else unknown here (0)."""
  return sum(b.get("size_in_bytes", 0) for b in node.mem_banks if b.get("heap_type") == 1)


PCI_DEVICES = "/sys/bus/pci/devices"


def ip_discovery(system: System, render_minor: int, pci_bus: str | None = None) -> tuple[dict[str, tuple[int, int, int]], dict[str, tuple[int, ...]]]:
  """IP versions and instance-0 register segment bases from the GPU's ip_discovery directory. amdgpu creates it under
  the PCI device only (amdgpu_discovery.c); an MI300 partition past the first has a render node of its own whose
  `device` is a platform device (amdgpu_xcp), so the PCI device's is read first, then the render node's."""
  tried = ([f"{PCI_DEVICES}/{pci_bus}/ip_discovery/die/0"] if pci_bus else []) + [f"{DRM}/renderD{render_minor}/device/ip_discovery/die/0"]
  root = next((r for r in tried if system.exists(r)), None)
  if root is None:
    raise RawGPUError(f"{' and '.join(tried)} are missing: the kernel exposes no IP discovery for this GPU (Linux 5.19+ with an "
                      "IP-discovery board is needed)")
  versions, bases = {}, {}
  for dirname, name in IP_NAMES.items():
    inst = f"{root}/{dirname}/0"
    if not system.exists(inst): continue
    rd = lambda f: system.read_text(f"{inst}/{f}").strip()
    versions[name] = (int(rd("major")), int(rd("minor")), int(rd("revision")))
    bases[name] = tuple(int(x, 0) for x in rd("base_addr").split())
  if "gc" not in versions: raise RawGPUError(f"{root}: no GC block listed")
  return versions, bases


def render_node(minor: int) -> str: return os.path.join("/dev/dri", f"renderD{minor}")
