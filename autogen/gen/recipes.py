"""One recipe per generated module: which headers, include paths, prelude, and which names to keep."""
from __future__ import annotations

import dataclasses
import pathlib


@dataclasses.dataclass(frozen=True)
class Recipe:
  module: str                       # dotted path under rawgpu.autogen, e.g. "amd.pm4"
  source: str                       # header_root() source: linux, llvm, mesa, nvidia
  headers: tuple[str, ...]          # relative to the source root, in include order
  includes: tuple[str, ...] = ()    # -I dirs relative to the source root
  prelude: str = ""                 # C text included before the headers (types the headers assume)
  defines: tuple[str, ...] = ()
  keep: str = ""                    # regex: keep only matching names (default: all of the headers' own names)
  drop: str = ""                    # regex: leave these out
  cxx: bool = False                 # parse and check as C++ (LLVM headers)
  stubs: tuple[tuple[str, str], ...] = ()  # (path, text) of stand-in headers put on the include path first
  only: tuple[tuple[str, str], ...] = ()  # (header, regex): from that header keep only names (or enum types) matching
  ioctl_args: tuple[tuple[str, str], ...] = ()  # (ioctl, struct) where the header's _IO() does not name the type
  doc: str = ""

  def header_names(self, root: pathlib.Path) -> list[tuple[str, pathlib.Path]]:
    """(name, absolute path) of each header; "source:path" names another fetched source; "dir/*.h" globs (sorted)."""
    from rawgpu.autogen.fetch import header_root
    out = []
    for h in self.headers:
      src, rel = h.split(":", 1) if ":" in h else ("", h)
      base = header_root(src) if src else root
      paths = sorted(base.glob(rel)) if "*" in rel else [base / rel]
      if not paths: raise FileNotFoundError(f"{self.module}: no header matches {h}")
      out += [(f"{src}:{p.relative_to(base)}" if src else str(p.relative_to(base)), p) for p in paths]
    return out

  def header_paths(self, root: pathlib.Path) -> list[pathlib.Path]:
    return [p for _, p in self.header_names(root)]

  def clang_args(self, root: pathlib.Path, stubdir: pathlib.Path) -> list[str]:
    from rawgpu.autogen.fetch import header_root
    stub = [f"-I{stubdir}"] if self.stubs else []
    inc = [header_root(d.split(":", 1)[0]) / d.split(":", 1)[1] if ":" in d else root / d for d in self.includes]
    return stub + [f"-I{d}" for d in inc] + [f"-D{d}" for d in self.defines]

  @property
  def path(self) -> pathlib.Path:
    return pathlib.Path(__file__).parent.parent.joinpath(*self.module.split(".")).with_suffix(".py")


# Kernel-internal headers assume the kernel's type names; these are their definitions (include/linux/types.h,
# include/uapi/linux/stddef.h, compiler_attributes.h), written out so the headers parse outside the kernel.
KERNEL = """#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
typedef uint8_t u8; typedef uint16_t u16; typedef uint32_t u32; typedef uint64_t u64;
typedef int8_t s8; typedef int16_t s16; typedef int32_t s32; typedef int64_t s64;
typedef uint8_t __u8; typedef uint16_t __u16; typedef uint32_t __u32; typedef uint64_t __u64;
typedef int8_t __s8; typedef int16_t __s16; typedef int32_t __s32; typedef int64_t __s64;
typedef uint16_t __le16; typedef uint32_t __le32; typedef uint64_t __le64;
typedef uint16_t __be16; typedef uint32_t __be32; typedef uint64_t __be64;
#define __packed __attribute__((packed))
#define __aligned(x) __attribute__((aligned(x)))
#define DECLARE_FLEX_ARRAY(TYPE, NAME) struct { struct { } __empty_ ## NAME; TYPE NAME[]; }
"""
UAPI = "#include <stdint.h>\n#include <stddef.h>\n"
# headers_install drops this include from exported uapi headers; an empty stand-in does the same
UAPI_STUBS = (("linux/compiler_types.h", ""),)

AMD = "drivers/gpu/drm/amd"
AMDGPU = f"{AMD}/amdgpu"
AMDINC = f"{AMD}/include"
SMU = f"{AMD}/pm/swsmu/inc/pmfw_if"
UAPI_INC = ("include/uapi",)


def _amd(module: str, *headers: str, **kw) -> Recipe:
  kw.setdefault("prelude", KERNEL)
  return Recipe(module, "linux", headers, includes=(AMDINC, AMDGPU), **kw)


RECIPES: tuple[Recipe, ...] = (
  _amd("amd.pm4", f"{AMDGPU}/nvd.h", f"{AMDINC}/soc21_enum.h", only=((f"{AMDINC}/soc21_enum.h", r"^VGT_EVENT_TYPE$"),),
       doc="PM4 packets for gfx10+ (nvd.h): PACKET3 opcodes and field builders; VGT event types (soc21_enum.h)"),
  _amd("amd.pm4_soc15", f"{AMDGPU}/soc15d.h", f"{AMDINC}/vega10_enum.h",
       only=((f"{AMDINC}/vega10_enum.h", r"^VGT_EVENT_TYPE$"),), doc="PM4 packets for gfx9 (soc15d.h); VGT event types"),
  _amd("amd.sdma_v6", f"{AMDGPU}/sdma_v6_0_0_pkt_open.h", doc="SDMA 6 (and 7) packets: opcodes and field macros"),
  _amd("amd.sdma_v5", f"{AMDGPU}/navi10_sdma_pkt_open.h", doc="SDMA 5 packets"),
  _amd("amd.sdma_v4", f"{AMDGPU}/vega10_sdma_pkt_open.h", doc="SDMA 4 packets"),
  _amd("amd.discovery", f"{AMDINC}/discovery.h", f"{AMDINC}/soc15_hw_ip.h",
       doc="IP discovery binary: tables, IP entries, gc_info, harvest info; HW ids (GC_HWID, MP1_HWID, ...)"),
  # amdgpu_ucode.h ends with driver-internal state (a mutex, printf-annotated prototypes) that we leave out
  _amd("amd.ucode", f"{AMDGPU}/amdgpu_ucode.h", doc="firmware file headers (amdgpu_ucode.h)",
       prelude=KERNEL + "struct mutex { int opaque_; };\n#define __printf(a, b)\n",
       drop=r"^(AMDGPU_UCODE_ID|amdgpu_firmware_info|amdgpu_firmware$|amdgpu_firmware_load_type)"),
  _amd("amd.psp", f"{AMDGPU}/psp_gfx_if.h", doc="PSP GFX interface: commands, responses, ring frames, fw types"),
  _amd("amd.mqd_v11", f"{AMDINC}/v11_structs.h", doc="gfx11 MQDs (compute, gfx, sdma)"),
  _amd("amd.mqd_v12", f"{AMDINC}/v12_structs.h", doc="gfx12 MQDs"),
  _amd("amd.mqd_v9", f"{AMDINC}/v9_structs.h", doc="gfx9 MQDs"),
  _amd("amd.ih", f"{AMDINC}/soc15_ih_clientid.h", f"{AMDINC}/ivsrcid/gfx/irqsrcs_gfx_11_0_0.h",
       f"{AMDINC}/ivsrcid/sdma0/irqsrcs_sdma0_5_0.h", f"{AMDINC}/ivsrcid/sdma1/irqsrcs_sdma1_5_0.h",
       f"{AMDINC}/ivsrcid/vmc/irqsrcs_vmc_1_0.h", doc="interrupt client ids and gfx11/sdma/vmc source ids"),
  Recipe("amd.smu_v13_0_0", "linux", (f"{SMU}/smu_v13_0_0_ppsmc.h", f"{SMU}/smu13_driver_if_v13_0_0.h"),
         includes=(SMU,), prelude=KERNEL, doc="SMU 13.0.0 messages, driver interface tables, features"),
  Recipe("amd.smu_v14_0_2", "linux", (f"{SMU}/smu_v14_0_2_ppsmc.h", f"{SMU}/smu14_driver_if_v14_0.h"),
         includes=(SMU,), prelude=KERNEL, doc="SMU 14.0.2 messages, driver interface tables, features"),
  Recipe("amd.smu_v13_0_6", "linux", (f"{SMU}/smu_v13_0_6_ppsmc.h", f"{SMU}/smu_v13_0_6_pmfw.h"),
         includes=(SMU,), prelude=KERNEL, doc="SMU 13.0.6 (MI300) messages, PMFW features and metrics table"),
  _amd("amd.mes_v11", f"{AMDINC}/mes_v11_api_def.h", doc="MES 11 scheduler API: packet headers and queue ops"),
  _amd("amd.mes_v12", f"{AMDINC}/mes_v12_api_def.h", doc="MES 12 scheduler API"),
  Recipe("bnxt", "linux", ("drivers/net/ethernet/broadcom/bnxt/bnxt_hsi.h",), prelude=KERNEL,
         doc="Broadcom NetXtreme-E HWRM interface: commands, request/response structs, rings, doorbells"),
  Recipe("kfd", "linux", ("include/uapi/linux/kfd_ioctl.h", "include/uapi/linux/kfd_sysfs.h"), includes=UAPI_INC, prelude=UAPI, stubs=UAPI_STUBS,
         defines=("__user=",), doc="/dev/kfd ioctls and the topology sysfs properties (KFD interface of Linux 6.12)"),
  Recipe("amdgpu_drm", "linux", ("include/uapi/drm/drm.h", "include/uapi/drm/amdgpu_drm.h"),
         includes=UAPI_INC + ("include/uapi/drm",),
         prelude=UAPI, stubs=UAPI_STUBS, defines=("__user=",),
         doc="DRM core and amdgpu ioctls and structures (drm.h, amdgpu_drm.h)"),
  Recipe("pci", "linux", ("include/uapi/linux/pci_regs.h",), includes=UAPI_INC, prelude=UAPI, stubs=UAPI_STUBS,
         doc="PCI configuration space registers and capabilities"),
  # vfio.h declares every ioctl as _IO(); the argument types below are the ones its comments document
  Recipe("vfio", "linux", ("include/uapi/linux/vfio.h",), includes=UAPI_INC, prelude=UAPI, stubs=UAPI_STUBS,
         defines=("__user=",), doc="VFIO ioctls and structures",
         ioctl_args=(("VFIO_GROUP_GET_STATUS", "vfio_group_status"), ("VFIO_DEVICE_GET_INFO", "vfio_device_info"),
                     ("VFIO_DEVICE_GET_REGION_INFO", "vfio_region_info"), ("VFIO_DEVICE_GET_IRQ_INFO", "vfio_irq_info"),
                     ("VFIO_DEVICE_SET_IRQS", "vfio_irq_set"), ("VFIO_IOMMU_GET_INFO", "vfio_iommu_type1_info"),
                     ("VFIO_IOMMU_MAP_DMA", "vfio_iommu_type1_dma_map"),
                     ("VFIO_IOMMU_UNMAP_DMA", "vfio_iommu_type1_dma_unmap"),
                     ("VFIO_DEVICE_GET_PCI_HOT_RESET_INFO", "vfio_pci_hot_reset_info"),
                     ("VFIO_DEVICE_PCI_HOT_RESET", "vfio_pci_hot_reset"))),
  # the kernel descriptor from LLVM; the AQL packets and queue from ROCm's hsa.h / amd_hsa_queue.h
  Recipe("amd.hsa", "llvm", ("llvm/Support/AMDHSAKernelDescriptor.h", "rocr:hsa.h", "rocr:amd_hsa_queue.h",
                             "rocr:amd_hsa_signal.h"), cxx=True,
         keep=r"^(?!hsa_|HSA_|amd_|AMD_)|^(hsa_(kernel_dispatch|agent_dispatch|barrier_and|barrier_or)_packet_t|"
              r"hsa_packet_|HSA_PACKET_|hsa_fence_scope_t|HSA_FENCE_|hsa_kernel_dispatch_packet_setup|"
              r"HSA_KERNEL_DISPATCH_PACKET_SETUP|hsa_signal_t|hsa_queue_type|HSA_QUEUE_TYPE|hsa_queue_t|"
              r"amd_queue_t|amd_queue_properties|AMD_QUEUE_PROPERTIES|amd_signal_t|amd_signal_kind|AMD_SIGNAL_KIND|"
              r"AMD_HSA_)",
         doc="AMDGPU kernel descriptor (COMPUTE_PGM_RSRC*/KERNEL_CODE_PROPERTIES fields), AQL packets, amd_queue_t"),
)


# NVIDIA: the 580.142 open-gpu-kernel-modules SDK and open-gpu-doc class headers (../shared/third_party, source nv580)
NV = "open-gpu-kernel-modules-580.142"
NVSDK = f"{NV}/src/common/sdk/nvidia/inc"
NVDOC = "open-gpu-doc/classes"
NV_INC = (NVSDK, f"{NV}/kernel-open/common/inc", f"{NV}/kernel-open/nvidia-uvm", f"{NV}/src/nvidia/arch/nvalloc/unix/include")
# MW(hi:lo) marks a QMD field by bit position in the whole structure; NVIDIA leaves MW to the includer
NV_PRELUDE = '#include <stdint.h>\n#include <stddef.h>\n#include "nvtypes.h"\n#define MW(x) x\n'


def _nv(module: str, *headers: str, **kw) -> Recipe:
  kw.setdefault("prelude", NV_PRELUDE)
  kw.setdefault("includes", NV_INC)
  return Recipe(module, "nv580", headers, **kw)


RECIPES += (
  _nv("nv.nvos", f"{NVSDK}/nvos.h", doc="NVIDIA RM API: NVOS* parameter structs, flags (nvos.h, 580.142)"),
  _nv("nv.nv_escape", f"{NV}/src/nvidia/arch/nvalloc/unix/include/nv_escape.h", doc="RM escape (ioctl) numbers"),
  _nv("nv.nv_ioctl", f"{NV}/kernel-open/common/inc/nv-ioctl-numbers.h", f"{NV}/kernel-open/common/inc/nv-ioctl.h",
      doc="nvidia.ko ioctl numbers and structs (nv-ioctl.h)"),
  # the 580 archive's uvm_types.h needs headers it does not carry (nv_uvm_user_types.h, nvCpuUuid.h): take the
  # complete 535.261.03 set from the Debian source instead
  Recipe("nv.uvm", "nvidia", ("kernel-open/nvidia-uvm/uvm_ioctl.h", "kernel-open/nvidia-uvm/uvm_linux_ioctl.h"),
         includes=("kernel-open/nvidia-uvm", "kernel-open/common/inc", "src/common/sdk/nvidia/inc"),
         prelude=NV_PRELUDE, doc="nvidia-uvm ioctls and parameter structs (535.261.03)"),
  _nv("nv.cl0080", f"{NVSDK}/class/cl0080.h", doc="NV01_DEVICE_0 allocation parameters"),
  _nv("nv.cl2080", f"{NVSDK}/class/cl2080.h", doc="NV20_SUBDEVICE_0 allocation parameters and notifiers"),
  _nv("nv.clc56f", f"{NVDOC}/host/clc56f.h", doc="AMPERE_CHANNEL_GPFIFO_A methods and GPFIFO entry fields"),
  _nv("nv.clc86f", f"{NVSDK}/class/clc86f.h", doc="HOPPER_CHANNEL_GPFIFO_A methods and GPFIFO entry fields"),
  _nv("nv.clc6c0", f"{NVDOC}/compute/clc6c0.h", doc="AMPERE_COMPUTE_A methods"),
  _nv("nv.clc7c0", f"{NVDOC}/compute/clc7c0.h", doc="AMPERE_COMPUTE_B methods"),
  _nv("nv.clcbc0", f"{NVDOC}/compute/clcbc0.h", doc="HOPPER_COMPUTE_A methods"),
  _nv("nv.classes", *(f"{NVSDK}/class/{c}.h" for c in (
        "cl0000", "cl0040", "cl0070", "cl003e", "cl503b", "cl503c", "cl83de", "cl90f1", "cla06c", "cla06f", "clc36f",
        "clc46f", "clc6b5", "clc7b5", "clc8b5")),
      doc="class ids and allocation parameters of the other RM objects a compute client creates (memory, VA space, "
          "channel group, GPFIFO, copy engines); cl0080/cl2080/clc56f/clc86f/compute classes have their own modules"),
  _nv("nv.ctrl0000", *(f"{NVSDK}/ctrl/ctrl0000/ctrl0000{c}.h" for c in ("base", "client", "gpu", "system", "unix")),
      doc="NV01_ROOT controls (client, GPU ids, system, unix fds)"),
  _nv("nv.ctrl0080", f"{NVSDK}/ctrl/ctrl0080/*.h", doc="NV01_DEVICE_0 controls"),
  _nv("nv.ctrl2080", *(f"{NVSDK}/ctrl/ctrl2080/ctrl2080{c}.h" for c in (
        "base", "bus", "ce", "event", "fb", "fifo", "gpu", "gr", "mc", "rc", "tmr")),
      doc="NV20_SUBDEVICE_0 controls (bus, ce, event, fb, fifo, gpu, gr, mc, rc, tmr)"),
  _nv("nv.ctrl", f"{NVSDK}/ctrl/ctrla06c.h", f"{NVSDK}/ctrl/ctrla06f.h", f"{NVSDK}/ctrl/ctrla06f/*.h",
      f"{NVSDK}/ctrl/ctrlc36f.h", f"{NVSDK}/ctrl/ctrl83de.h", f"{NVSDK}/ctrl/ctrl83de/*.h", f"{NVSDK}/ctrl/ctrl90f1.h",
      doc="channel group (a06c), GPFIFO (a06f, c36f work submit token), debugger (83de), VA space (90f1) controls"),
  _nv("nv.qmd", f"{NVDOC}/compute/clc6c0qmd.h", f"{NVDOC}/compute/clc7c0qmd.h", f"{NVDOC}/compute/clc9c0qmd.h",
      f"{NVDOC}/compute/clcbc0qmd.h", doc="QMD layouts (Ampere V03, Ada, Hopper V04) as (hi, lo) bit ranges"),
)


def by_module() -> dict[str, Recipe]:
  return {r.module: r for r in RECIPES}
