"""VFIO against a fake /dev/vfio whose files answer the ioctls the way the kernel's vfio and vfio-pci code does
(argsz checks, container/group ordering, region offsets index << 40, eventfd triggers)."""
import ctypes, errno, os, struct, pytest
from rawgpu.autogen import vfio as V
from rawgpu.drivers import pci
from rawgpu.drivers.system import DirProvider
from rawgpu.errors import DeviceBusy, IoctlError, RawGPUError

BUS = "0000:03:00.0"
OFFSET_SHIFT = 40  # VFIO_PCI_OFFSET_SHIFT in drivers/vfio/pci/vfio_pci_priv.h (not uapi)
BOARD = {BUS: dict(vendor=0x1002, device=0x744c, bars={0: 1 << 16, 2: 4096, 5: 1 << 14}, driver="vfio-pci")}


def _buf(arg) -> memoryview:
  return memoryview(arg).cast("B")


def _einval(what: str): return OSError(errno.EINVAL, f"Invalid argument ({what})")


class FakeKernelVFIO:
  """The kernel side: one noiommu group holding one vfio-pci device backed by a fake sysfs device directory."""
  def __init__(self, system, sysdir: str, group: int = 7, noiommu: bool = True):
    self.system, self.sysdir, self.group, self.noiommu = system, sysdir, group, noiommu
    self.containers: list["_Container"] = []
    self.eventfds: dict[int, int] = {}  # irq index -> eventfd the kernel signals
    self.calls: list[str] = []
    self.intx_masked = self.intx_pending = self.group_open = False

  # Provider
  def open(self, rel: str, flags: int):
    if rel == "vfio": c = _Container(self); self.containers.append(c); return c
    if rel == self.node:
      if self.group_open: raise OSError(errno.EBUSY, "Device or resource busy")  # vfio_group_fops_open: one opener
      self.group_open = True; return _Group(self)
    if rel == ".device": return _Device(self)  # only reachable through VFIO_GROUP_GET_DEVICE_FD
    raise FileNotFoundError(errno.ENOENT, rel)
  @property
  def node(self) -> str: return f"noiommu-{self.group}" if self.noiommu else str(self.group)
  def listdir(self, rel: str): return ["vfio", self.node]
  def readlink(self, rel: str): raise OSError(errno.EINVAL, rel)
  def exists(self, rel: str): return rel in ("", *self.listdir(""))

  def trigger(self, index: int) -> None:
    """The device raised interrupt `index`: vfio-pci's handler signals the eventfd. INTx is level-triggered and
    automasked: while masked the line stays asserted and fires again on unmask."""
    if index == V.VFIO_PCI_INTX_IRQ_INDEX:
      if self.intx_masked: self.intx_pending = True; return
      self.intx_masked = True
    os.eventfd_write(self.eventfds[index], 1)

  def unmask_intx(self) -> None:
    self.intx_masked = False
    if self.intx_pending: self.intx_pending = False; self.trigger(V.VFIO_PCI_INTX_IRQ_INDEX)


class _File:
  def read(self, n, offset): raise OSError(errno.EINVAL, "read")
  def write(self, data, offset): raise OSError(errno.EINVAL, "write")
  def mmap(self, size, offset): raise OSError(errno.EINVAL, "mmap")
  def close(self): pass


class _Container(_File):
  def __init__(self, k): self.k, self.groups, self.iommu = k, [], None
  def ioctl(self, request, buf):
    self.k.calls.append(f"container {request:#x}")
    if request == V.VFIO_GET_API_VERSION: return V.VFIO_API_VERSION
    if request == V.VFIO_CHECK_EXTENSION: return int(buf == V.VFIO_NOIOMMU_IOMMU and self.k.noiommu)
    if request == V.VFIO_SET_IOMMU:
      if not self.groups or buf != V.VFIO_NOIOMMU_IOMMU or not self.k.noiommu: raise _einval("SET_IOMMU")
      self.iommu = buf; return 0
    raise OSError(errno.ENOTTY, "container ioctl")


class _Group(_File):
  def __init__(self, k): self.k, self.container = k, None
  def close(self): self.k.group_open = False
  def ioctl(self, request, buf):
    self.k.calls.append(f"group {request:#x}")
    if request == V.VFIO_GROUP_GET_STATUS:
      st = V.vfio_group_status.from_buffer(buf)
      if st.argsz < ctypes.sizeof(V.vfio_group_status): raise _einval("argsz")
      st.flags = V.VFIO_GROUP_FLAGS_VIABLE | (V.VFIO_GROUP_FLAGS_CONTAINER_SET if self.container else 0)
      return 0
    if request == V.VFIO_GROUP_SET_CONTAINER:
      fd = struct.unpack_from("<i", _buf(buf))[0]
      c = self.k.system.vfds.get(fd)
      if not isinstance(c, _Container) or self.container: raise _einval("SET_CONTAINER")
      self.container = c; c.groups.append(self); return 0
    if request == V.VFIO_GROUP_GET_DEVICE_FD:
      if self.container is None or self.container.iommu is None: raise _einval("no container / iommu")
      name = bytes(_buf(buf)).split(b"\0")[0].decode()
      if name != BUS: raise _einval("no such device in group")
      return self.k.system.open("/dev/vfio/.device", os.O_RDWR)
    raise OSError(errno.ENOTTY, "group ioctl")


class _Device(_File):
  def __init__(self, k): self.k = k
  def _path(self, idx: int) -> str:
    return os.path.join(self.k.sysdir, "config" if idx == V.VFIO_PCI_CONFIG_REGION_INDEX else f"resource{idx}")

  def _region(self, idx: int) -> tuple[int, int]:
    p = self._path(idx)
    if idx > V.VFIO_PCI_CONFIG_REGION_INDEX or not os.path.exists(p): return 0, 0
    flags = V.VFIO_REGION_INFO_FLAG_READ | V.VFIO_REGION_INFO_FLAG_WRITE
    if idx != V.VFIO_PCI_CONFIG_REGION_INDEX: flags |= V.VFIO_REGION_INFO_FLAG_MMAP
    return flags, os.path.getsize(p)

  def ioctl(self, request, buf):
    self.k.calls.append(f"device {request:#x}")
    if request == V.VFIO_DEVICE_GET_INFO:
      i = V.vfio_device_info.from_buffer(buf)
      if i.argsz < 16: raise _einval("argsz")  # minsz = offsetofend(num_irqs)
      i.flags, i.num_regions, i.num_irqs = V.VFIO_DEVICE_FLAGS_PCI | V.VFIO_DEVICE_FLAGS_RESET, V.VFIO_PCI_NUM_REGIONS, V.VFIO_PCI_NUM_IRQS
      return 0
    if request == V.VFIO_DEVICE_GET_REGION_INFO:
      r = V.vfio_region_info.from_buffer(buf)
      if r.argsz < ctypes.sizeof(V.vfio_region_info): raise _einval("argsz")
      if r.index >= V.VFIO_PCI_NUM_REGIONS: raise _einval("index")
      r.flags, r.size = self._region(r.index)
      r.offset = r.index << OFFSET_SHIFT
      return 0
    if request == V.VFIO_DEVICE_GET_IRQ_INFO:
      q = V.vfio_irq_info.from_buffer(buf)
      if q.argsz < ctypes.sizeof(V.vfio_irq_info) or q.index >= V.VFIO_PCI_NUM_IRQS: raise _einval("irq info")
      q.count = 1 if q.index in (V.VFIO_PCI_INTX_IRQ_INDEX, V.VFIO_PCI_MSI_IRQ_INDEX) else 0  # INTx pin A, one MSI, no MSI-X
      q.flags = V.VFIO_IRQ_INFO_EVENTFD | (V.VFIO_IRQ_INFO_MASKABLE | V.VFIO_IRQ_INFO_AUTOMASKED if q.index == 0 else V.VFIO_IRQ_INFO_NORESIZE)
      return 0
    if request == V.VFIO_DEVICE_SET_IRQS:
      mv, minsz = _buf(buf), 20  # offsetofend(struct vfio_irq_set, count)
      argsz, flags, index, start, count = struct.unpack_from("<5I", mv)
      if argsz < minsz or index >= V.VFIO_PCI_NUM_IRQS: raise _einval("set irqs")
      dtype = flags & V.VFIO_IRQ_SET_DATA_TYPE_MASK
      size = {V.VFIO_IRQ_SET_DATA_NONE: 0, V.VFIO_IRQ_SET_DATA_BOOL: 1, V.VFIO_IRQ_SET_DATA_EVENTFD: 4}[dtype]
      if argsz - minsz < size * count or start + count > 1 or len(mv) < argsz: raise _einval("set irqs data")
      if dtype == V.VFIO_IRQ_SET_DATA_NONE and count == 0 and flags & V.VFIO_IRQ_SET_ACTION_TRIGGER: self.k.eventfds.pop(index, None); return 0
      if dtype == V.VFIO_IRQ_SET_DATA_NONE and flags & V.VFIO_IRQ_SET_ACTION_UNMASK:
        if index != V.VFIO_PCI_INTX_IRQ_INDEX or count != 1: raise _einval("unmask")  # only INTx is maskable
        self.k.unmask_intx(); return 0
      if dtype == V.VFIO_IRQ_SET_DATA_EVENTFD and flags & V.VFIO_IRQ_SET_ACTION_TRIGGER:
        if self.k.eventfds and index not in self.k.eventfds: raise OSError(errno.EINVAL, "another interrupt type is enabled")
        self.k.eventfds[index] = struct.unpack_from("<i", mv, minsz)[0]; return 0
      raise _einval("set irqs action")
    if request == V.VFIO_DEVICE_RESET: self.k.calls.append("reset"); return 0
    raise OSError(errno.ENOTTY, "device ioctl")

  def _split(self, offset: int) -> tuple[str, int]: return self._path(offset >> OFFSET_SHIFT), offset & ((1 << OFFSET_SHIFT) - 1)
  def read(self, n, offset):
    p, off = self._split(offset)
    with open(p, "rb") as f: f.seek(off); return f.read(n)
  def write(self, data, offset):
    p, off = self._split(offset)
    with open(p, "r+b") as f: f.seek(off); return f.write(data)
  def mmap(self, size, offset):
    p, off = self._split(offset)
    f = DirProvider(os.path.dirname(p)).open(os.path.basename(p), os.O_RDWR)
    try: return f.mmap(size, off)
    finally: f.close()


@pytest.fixture
def vfio_sys(fake_pci, tmp_path):
  def build(board=BOARD, group: int | None = 7, noiommu: bool = True, dev_vfio: bool = True):
    system = fake_pci(board)
    sysdir = str(tmp_path / "sys" / "devices" / BUS)
    if group is not None:
      gdir = tmp_path / "sys" / "kernel" / "iommu_groups" / str(group)
      gdir.mkdir(parents=True)
      if noiommu: (gdir / "name").write_text("vfio-noiommu\n")
      os.symlink(gdir, os.path.join(sysdir, "iommu_group"))
    k = FakeKernelVFIO(system, sysdir, group or 0, noiommu)
    if dev_vfio: system.mount("/dev/vfio", k)
    return system, k, sysdir
  return build


def test_open_config_and_bars_through_device_fd(vfio_sys):
  system, k, sysdir = vfio_sys()
  dev = pci.PCIDevice(BUS, system, use_vfio=True)
  assert dev.config_read(0, 2) == 0x1002 and dev.config_read(2, 2) == 0x744c
  dev.enable_bus_master()
  with open(os.path.join(sysdir, "config"), "rb") as f: cmd = int.from_bytes(f.read()[4:6], "little")
  assert cmd & pci.PCI_COMMAND_MASTER  # the write went to the config region at its offset
  assert [dev.bar_size(n) for n in range(6)] == [1 << 16, 0, 4096, 0, 0, 1 << 14]
  dev.map_bar(5, 4096, 4096).write32(0x10, 0x1234abcd)
  with open(os.path.join(sysdir, "resource5"), "rb") as f: f.seek(4096 + 0x10); assert struct.unpack("<I", f.read(4))[0] == 0x1234abcd
  with pytest.raises(RawGPUError, match="BAR1"): dev.map_bar(1)
  assert not dev.can_write_combine(0)
  with pytest.raises(RawGPUError, match="through VFIO, rawgpu maps BARs uncached"): dev.map_bar(0, write_combine=True)
  dev.reset()
  assert "reset" in k.calls
  dev.close()


def test_interrupts_through_eventfd(vfio_sys):
  system, k, _ = vfio_sys()
  dev = pci.PCIDevice(BUS, system, use_vfio=True)
  dev.enable_irq("msi")
  assert dev.wait_irq(0) == 0
  k.trigger(V.VFIO_PCI_MSI_IRQ_INDEX); k.trigger(V.VFIO_PCI_MSI_IRQ_INDEX)
  assert dev.wait_irq(5) == 2 and dev.wait_irq(0) == 0
  dev.enable_irq("intx")  # switching disables MSI first (the kernel refuses two types at once)
  assert list(k.eventfds) == [V.VFIO_PCI_INTX_IRQ_INDEX]
  k.trigger(V.VFIO_PCI_INTX_IRQ_INDEX); k.trigger(V.VFIO_PCI_INTX_IRQ_INDEX)  # the second one finds the line masked
  assert dev.wait_irq(5) == 1  # ... and unmasking delivers it
  assert dev.wait_irq(5) == 1 and dev.wait_irq(0) == 0 and not k.intx_pending
  with pytest.raises(RawGPUError, match="MSIX"): dev.enable_irq("msix")
  dev.close()
  assert k.eventfds == {}


def test_fake_checks_argsz(vfio_sys):
  # the fake kernel must reject what the real one rejects, or the tests above prove nothing about argsz
  system, _, _ = vfio_sys()
  from rawgpu.drivers.vfio import VFIODevice
  d = VFIODevice(BUS, system)
  with pytest.raises(IoctlError): V.VFIO_DEVICE_GET_REGION_INFO(system, d.fd, argsz=16, index=0)
  short = V.vfio_irq_set(argsz=20, flags=V.VFIO_IRQ_SET_DATA_EVENTFD | V.VFIO_IRQ_SET_ACTION_TRIGGER, index=1, start=0, count=1)
  with pytest.raises(IoctlError): V.VFIO_DEVICE_SET_IRQS(system, d.fd, bytearray(bytes(short) + b"\0" * 4))
  d.close()


def test_request_numbers_match_the_c_header():
  # the generated request numbers against the installed kernel header, through the C compiler
  import shutil, subprocess, tempfile
  if not shutil.which("gcc") or not os.path.exists("/usr/include/linux/vfio.h"): pytest.skip("needs gcc and linux-libc-dev (/usr/include/linux/vfio.h)")
  names = ["VFIO_GET_API_VERSION", "VFIO_CHECK_EXTENSION", "VFIO_SET_IOMMU", "VFIO_GROUP_GET_STATUS", "VFIO_GROUP_SET_CONTAINER",
           "VFIO_GROUP_GET_DEVICE_FD", "VFIO_DEVICE_GET_INFO", "VFIO_DEVICE_GET_REGION_INFO", "VFIO_DEVICE_GET_IRQ_INFO",
           "VFIO_DEVICE_SET_IRQS", "VFIO_DEVICE_RESET"]
  src = "#include <stdio.h>\n#include <linux/vfio.h>\nint main(void){" + "".join(f'printf("%lu\\n",(unsigned long){n});' for n in names) + "return 0;}"
  with tempfile.TemporaryDirectory() as d:
    open(f"{d}/a.c", "w").write(src)
    subprocess.run(["gcc", "-o", f"{d}/a", f"{d}/a.c"], check=True)
    got = [int(x) for x in subprocess.run([f"{d}/a"], capture_output=True, text=True, check=True).stdout.split()]
  assert got == [int(getattr(V, n)) for n in names]


def test_unusable_vfio_says_why(vfio_sys):
  system, _, _ = vfio_sys(dev_vfio=False)
  with pytest.raises(RawGPUError, match="modprobe vfio-pci"): pci.PCIDevice(BUS, system, use_vfio=True)


def test_bound_to_another_driver_says_how_to_bind(vfio_sys):
  system, _, _ = vfio_sys(board={BUS: dict(BOARD[BUS], driver="amdgpu")})
  with pytest.raises(DeviceBusy, match=r"bound to amdgpu.*driver_override"): pci.PCIDevice(BUS, system, use_vfio=True)


def test_no_group_means_noiommu_mode_is_off(vfio_sys, tmp_path):
  system, _, _ = vfio_sys(group=None)
  param = tmp_path / "module" / "parameters"
  param.mkdir(parents=True)
  (param / "enable_unsafe_noiommu_mode").write_text("N\n")
  system.mount("/sys/module/vfio", DirProvider(str(tmp_path / "module")))
  with pytest.raises(RawGPUError, match=r"noiommu mode is off.*echo 1 > /sys/module/vfio/parameters/enable_unsafe_noiommu_mode"):
    pci.PCIDevice(BUS, system, use_vfio=True)


def test_container_without_noiommu(vfio_sys):
  system, _, _ = vfio_sys(noiommu=False)
  with pytest.raises(RawGPUError, match="enable_unsafe_noiommu_mode"): pci.PCIDevice(BUS, system, use_vfio=True)


def test_interrupts_need_vfio(fake_pci):
  dev = pci.PCIDevice(BUS, fake_pci({BUS: dict(BOARD[BUS], driver=None)}))
  with pytest.raises(RawGPUError, match="use_vfio=True"): dev.enable_irq()


def test_group_in_use_names_the_holder(vfio_sys, tmp_path):
  system, k, _ = vfio_sys()
  k.group_open = True  # another process holds the group
  proc = tmp_path / "proc"
  (proc / "4242" / "fd").mkdir(parents=True)
  (proc / "4243" / "fd").mkdir(parents=True)
  os.symlink("/dev/vfio/noiommu-7", proc / "4242" / "fd" / "5")
  os.symlink("/dev/null", proc / "4243" / "fd" / "0")
  system.mount("/proc", DirProvider(str(proc)))
  with pytest.raises(DeviceBusy, match=r"in use by pid 4242\b"): pci.PCIDevice(BUS, system, use_vfio=True)


def test_group_reopens_after_close(vfio_sys):
  system, k, _ = vfio_sys()
  pci.PCIDevice(BUS, system, use_vfio=True).close()
  assert not k.group_open
  pci.PCIDevice(BUS, system, use_vfio=True).close()


def test_holders_on_the_real_proc(tmp_path):
  from rawgpu.drivers.vfio import holders
  from rawgpu.drivers.system import System
  p = tmp_path / "held"
  p.write_text("x")
  fd = os.open(p, os.O_RDONLY)
  try: assert os.getpid() in holders(str(p), System())
  finally: os.close(fd)
  assert os.getpid() not in holders(str(p), System())


def test_failed_vfio_open_releases_the_owner_lock(vfio_sys, tmp_path):
  system, _, _ = vfio_sys(board={BUS: dict(BOARD[BUS], driver="amdgpu")})
  system.lock_dir = str(tmp_path)
  with pytest.raises(DeviceBusy, match="vfio-pci"): pci.PCIDevice(BUS, system, lock_prefix="am", use_vfio=True)
  pci.DeviceLock("am", BUS, system).release()  # would be DeviceBusy if the failed open had kept it
