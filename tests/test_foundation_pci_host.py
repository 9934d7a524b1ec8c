"""Host memory (contiguous from hugepages) and the actionable errors: capabilities, bound drivers, the IOMMU."""
import errno, os, re, pytest
from rawgpu.drivers import pci
from rawgpu.drivers.emu.pcibus import HostRAM
from rawgpu.drivers.system import HUGE_PAGE, PAGE, DirProvider, System
from rawgpu.errors import DeviceBusy, PermissionProblem, RawGPUError

BUS = "0000:03:00.0"


def board(driver=None):
  return {BUS: dict(vendor=0x1002, device=0x744c, bars={0: 1 << 16}, driver=driver)}


def header_caps() -> dict[str, int]:
  """CAP_* bit numbers from the installed kernel header (an oracle for the constants in pci.py)."""
  path = "/usr/include/linux/capability.h"
  if not os.path.exists(path): pytest.skip("needs linux-libc-dev (/usr/include/linux/capability.h)")
  return {m[1]: int(m[2]) for m in re.finditer(r"#define\s+(CAP_\w+)\s+(\d+)\s*$", open(path).read(), re.M)}


def test_cap_numbers_match_the_header():
  caps = header_caps()
  assert (pci.CAP_IPC_LOCK, pci.CAP_SYS_ADMIN) == (caps["CAP_IPC_LOCK"], caps["CAP_SYS_ADMIN"])


def mount_proc(system, tmp_path, capeff: int):
  d = tmp_path / "proc_self"
  d.mkdir()
  (d / "status").write_text(f"Name:\tpython\nCapInh:\t0000000000000000\nCapPrm:\t{capeff:016x}\nCapEff:\t{capeff:016x}\n")
  system.mount("/proc/self", DirProvider(str(d)))


def test_contiguous_from_emulated_host_ram(fake_pci):
  system = fake_pci(board())
  system.host_memory = HostRAM(64 << 20)
  dev = pci.PCIDevice(BUS, system)
  small = dev.alloc_host(PAGE)  # leaves the allocator unaligned
  mem = dev.alloc_host(3 << 20, contiguous=True)
  assert mem.view.size == 4 << 20 and len(mem.bus_addrs) == 1024  # rounded up to whole hugepages
  assert mem.contiguous and mem.bus_addrs[0] % HUGE_PAGE == 0
  assert not set(mem.bus_addrs) & set(small.bus_addrs)
  mem.view.write32(0, 0x5a5a5a5a)
  off = mem.bus_addrs[0] - HostRAM.PHYS_BASE
  assert system.host_memory.dma(mem.bus_addrs[0], 4).tobytes() == (0x5a5a5a5a).to_bytes(4, "little") and off % HUGE_PAGE == 0


def test_contiguous_from_real_hugepages():
  try: free = int(open("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages").read())
  except OSError: free = 0
  if free < 1: pytest.skip("no free 2 MiB hugepages (echo 1 > /proc/sys/vm/nr_hugepages to run this)")
  system = System()
  mem = system.alloc_host_huge(HUGE_PAGE)
  addrs = system.bus_addresses(mem)
  assert all(b - a == PAGE for a, b in zip(addrs, addrs[1:])) and addrs[0] % HUGE_PAGE == 0


def _enomem(size):
  raise OSError(errno.ENOMEM, "Cannot allocate memory")  # what mmap(MAP_HUGETLB) says with none reserved


def test_no_hugepages_reserved_says_how_to_reserve(fake_pci, tmp_path):
  system = fake_pci(board())
  system.alloc_host_huge = _enomem
  hp = tmp_path / "hugepages-2048kB"
  hp.mkdir()
  (hp / "free_hugepages").write_text("0\n")
  system.mount(pci.HUGEPAGES_2M, DirProvider(str(hp)))
  mount_proc(system, tmp_path, 1 << pci.CAP_SYS_ADMIN | 1 << pci.CAP_IPC_LOCK)
  dev = pci.PCIDevice(BUS, system)
  with pytest.raises(RawGPUError, match=r"need 3 2 MiB hugepages and none are free.*echo 3 > /proc/sys/vm/nr_hugepages"):
    dev.alloc_host(5 << 20, contiguous=True)


def test_missing_cap_sys_admin_for_pagemap(fake_pci, tmp_path):
  system = fake_pci(board())
  mount_proc(system, tmp_path, 1 << pci.CAP_IPC_LOCK)
  with pytest.raises(PermissionProblem, match=r"pagemap needs CAP_SYS_ADMIN"): pci.PCIDevice(BUS, system).alloc_host(PAGE)


def test_missing_cap_ipc_lock_for_mlock(fake_pci, tmp_path):
  system = fake_pci(board())
  mount_proc(system, tmp_path, 1 << pci.CAP_SYS_ADMIN)
  def mlock_fails(size): raise PermissionProblem("mlock of 4096 bytes failed (Operation not permitted)")
  system.alloc_host = mlock_fails
  with pytest.raises(PermissionProblem, match=r"mlock\) needs CAP_IPC_LOCK"): pci.PCIDevice(BUS, system).alloc_host(PAGE)


def test_real_caps_are_read():
  # this process's CapEff through the seam agrees with the kernel's own view in /proc/<pid>/status
  caps = pci.effective_caps(System())
  want = next(int(ln.split()[1], 16) for ln in open(f"/proc/{os.getpid()}/status") if ln.startswith("CapEff:"))
  assert caps == want


@pytest.mark.parametrize("drv,hint", [("amdgpu", "hcq-smi amd rmmod"), ("nvidia", "/sys/bus/pci/drivers/nvidia/unbind")])
def test_bound_driver(fake_pci, drv, hint):
  dev = pci.PCIDevice(BUS, fake_pci(board(drv)))
  with pytest.raises(DeviceBusy, match=f"bound to the kernel driver {drv}") as e: dev.require_unbound()
  assert hint in str(e.value)


def test_unbound_passes(fake_pci):
  pci.PCIDevice(BUS, fake_pci(board())).require_unbound()


@pytest.mark.parametrize("kind,name,translates", [("DMA-FQ", "", True), ("DMA", "", True), ("identity", "", False), (None, "vfio-noiommu", False)])
def test_iommu_detection(fake_pci, tmp_path, kind, name, translates):
  system = fake_pci(board())
  g = tmp_path / "sys" / "kernel" / "iommu_groups" / "12"
  g.mkdir(parents=True)
  if kind: (g / "type").write_text(kind + "\n")
  if name: (g / "name").write_text(name + "\n")
  os.symlink(g, tmp_path / "sys" / "devices" / BUS / "iommu_group")
  dev = pci.PCIDevice(BUS, system)
  assert dev.iommu_translates() is translates
  if translates:
    with pytest.raises(RawGPUError, match=r"IOMMU translates.*iommu=pt"): dev.alloc_host(PAGE)


def test_no_iommu_group_is_direct(fake_pci):
  assert pci.PCIDevice(BUS, fake_pci(board())).iommu_translates() is False


def test_real_hugetlb_mapping_fails_without_reserved_pages(fake_pci):
  # with no hugepages reserved the kernel must refuse MAP_HUGETLB: proves the seam really asks for hugepages
  try: free = int(open("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages").read())
  except OSError: pytest.skip("the kernel has no 2 MiB hugepage pool (no /sys/kernel/mm/hugepages/hugepages-2048kB)")
  if free: pytest.skip(f"{free} hugepages are free here: the refusal cannot be observed")
  with pytest.raises(OSError) as e: System().alloc_host_huge(HUGE_PAGE)
  assert e.value.errno == errno.ENOMEM
  dev = pci.PCIDevice(BUS, fake_pci(board()))  # the real memory seam behind a fake sysfs device
  with pytest.raises(RawGPUError, match=r"echo 1 > /proc/sys/vm/nr_hugepages"): dev.alloc_host(PAGE, contiguous=True)
