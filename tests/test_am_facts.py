"""The values drivers/am/facts.py states by hand (the generated bindings do not export them) against the kernel
source they come from: each is read out of the named file as written there (a #define or an enum member)."""
from __future__ import annotations
import functools, os, re
import pytest
from rawgpu.drivers.am import facts as F


def linux_root() -> str | None:
  """A full 6.12 tree (RAWGPU_LINUX_SRC) first: some facts live in .c files; else the fetched headers."""
  env = os.environ.get("RAWGPU_LINUX_SRC")
  if env and os.path.isdir(env): return env
  try:
    from rawgpu.autogen.fetch import header_root
    return str(header_root("linux"))
  except Exception: return None


@pytest.fixture(scope="module")
def src():
  root = linux_root()
  if root is None: pytest.skip("Linux 6.12 sources not found: run `python -m rawgpu.autogen fetch` or set RAWGPU_LINUX_SRC")
  def value(path: str, name: str, **subst: int) -> int:
    p = os.path.join(root, path)
    if not os.path.exists(p): pytest.skip(f"{path} is not in the fetched headers (set RAWGPU_LINUX_SRC to a full 6.12 tree)")
    text = _read(p)
    m = re.search(rf"#define\s+{re.escape(name)}(\([^)]*\))?\s+(.+)", text) or re.search(rf"\b{re.escape(name)}\s*=\s*([^,\n]+)", text)
    assert m, f"{name} not in {path}"
    expr = m.group(m.lastindex).split("/*")[0].split("//")[0].strip().rstrip(",;")
    if m.re.pattern.startswith("#define") and m.group(1):   # function-like macro: substitute its arguments
      for arg in m.group(1)[1:-1].split(","): expr = re.sub(rf"\b{arg.strip()}\b", str(subst[arg.strip()]), expr)
    expr = re.sub(r"\((?:uint64_t|u64|uint32_t)\)", "", expr)
    expr = re.sub(r"(0x[0-9a-fA-F]+|\d+)(?:ULL|UL|LL|U|L)\b", r"\1", expr).replace("PAGE_SIZE", "4096")
    return int(eval(expr, {"__builtins__": {}}))
  return value


AMD = "drivers/gpu/drm/amd"


@functools.cache
def _read(path: str) -> str: return open(path, errors="replace").read()


def test_psp_bootloader_and_ring(src):
  for name, v in F.PSP_BL.items(): assert src(f"{AMD}/amdgpu/amdgpu_psp.h", name) == v, name
  assert src(f"{AMD}/amdgpu/amdgpu_psp.h", "PSP_RING_TYPE__KM") == F.PSP_RING_TYPE__KM
  assert src(f"{AMD}/amdgpu/amdgpu_psp.h", "PSP_1_MEG") == F.PSP_1_MEG
  assert src(f"{AMD}/amdgpu/amdgpu_psp.h", "PSP_TMR_ALIGNMENT") == F.PSP_TMR_ALIGNMENT
  text = open(os.path.join(linux_root(), f"{AMD}/amdgpu/amdgpu_psp.h")).read()
  assert re.search(r"#define\s+PSP_TMR_SIZE\(adev\).*:\s*(0x[0-9a-f]+)\)", text).group(1) == hex(F.PSP_TMR_SIZE)  # non-Aldebaran size


def test_smu_debug_mode1(src):
  assert src(f"{AMD}/pm/swsmu/smu13/smu_v13_0_0_ppt.c", "DEBUGSMC_MSG_Mode1Reset") == F.DEBUGSMC_MSG_Mode1Reset
  assert src(f"{AMD}/pm/swsmu/smu14/smu_v14_0_2_ppt.c", "DEBUGSMC_MSG_Mode1Reset") == F.DEBUGSMC_MSG_Mode1Reset


def test_smu14_messages_match_smu13():
  from rawgpu.autogen.amd import smu_v14_0_2 as S14
  for name, v in F.PPSMC_MSG.items(): assert getattr(S14, name) == v, name
  for name, v in F.PPSMC_RESULT.items(): assert getattr(S14, name) == v, name


def test_hardware_ids(src):
  names = {"mp1": "MP1_HWID", "smuio": "SMUIO_HWID", "gc": "GC_HWID", "mmhub": "MMHUB_HWID", "athub": "ATHUB_HWID",
           "osssys": "OSSSYS_HWID", "hdp": "HDP_HWID", "sdma0": "SDMA0_HWID", "sdma1": "SDMA1_HWID", "sdma2": "SDMA2_HWID",
           "sdma3": "SDMA3_HWID", "nbif": "NBIF_HWID", "umc": "UMC_HWID", "mp0": "MP0_HWID"}
  for k, n in names.items(): assert src(f"{AMD}/include/soc15_hw_ip.h", n) == F.HWID[k], n


def test_discovery_access(src):
  f = f"{AMD}/amdgpu/amdgpu_discovery.c"
  assert (src(f, "mmMM_INDEX"), src(f, "mmMM_INDEX_HI"), src(f, "mmMM_DATA")) == (F.MM_INDEX, F.MM_INDEX_HI, F.MM_DATA)
  assert src(f, "mmRCC_CONFIG_MEMSIZE") == F.RCC_CONFIG_MEMSIZE
  assert src(f"{AMD}/amdgpu/amdgpu_discovery.h", "DISCOVERY_TMR_OFFSET") == F.DISCOVERY_TMR_OFFSET
  assert src(f"{AMD}/amdgpu/amdgpu_discovery.h", "DISCOVERY_TMR_SIZE") == F.DISCOVERY_TMR_SIZE


def test_page_table_bits(src):
  h = f"{AMD}/amdgpu/amdgpu_vm.h"
  for n in ("AMDGPU_PTE_VALID", "AMDGPU_PTE_SYSTEM", "AMDGPU_PTE_SNOOPED", "AMDGPU_PTE_EXECUTABLE", "AMDGPU_PTE_READABLE",
            "AMDGPU_PTE_WRITEABLE", "AMDGPU_PDE_PTE", "AMDGPU_PDE_PTE_GFX12"): assert src(h, n) == getattr(F, n), n
  assert src(h, "AMDGPU_PTE_FRAG", x=1) == 1 << F.AMDGPU_PTE_FRAG_SHIFT
  assert src(h, "AMDGPU_PTE_MTYPE_NV10_SHIFT", mtype=1) == 1 << F.AMDGPU_PTE_MTYPE_NV10_SHIFT
  assert src(h, "AMDGPU_PTE_MTYPE_GFX12_SHIFT", mtype=1) == 1 << F.AMDGPU_PTE_MTYPE_GFX12_SHIFT
  assert src(h, "AMDGPU_PTE_MTYPE_VG10_SHIFT", mtype=1) == 1 << F.AMDGPU_PTE_MTYPE_VG10_SHIFT
  assert src(h, "AMDGPU_PTE_TF") == F.AMDGPU_PTE_TF and src(h, "AMDGPU_PDE_BFS", a=1) == 1 << F.AMDGPU_PDE_BFS_SHIFT
  assert src(f"{AMD}/include/soc21_enum.h", "MTYPE_UC") == F.MTYPE_UC == src(f"{AMD}/include/soc24_enum.h", "MTYPE_UC")
  assert src(f"{AMD}/include/vega10_enum.h", "MTYPE_UC") == F.MTYPE_UC


def test_doorbells_and_queues(src):
  h = f"{AMD}/amdgpu/amdgpu_doorbell.h"
  for n in ("AMDGPU_NAVI10_DOORBELL_KIQ", "AMDGPU_NAVI10_DOORBELL_MEC_RING0", "AMDGPU_NAVI10_DOORBELL_USERQUEUE_END",
            "AMDGPU_NAVI10_DOORBELL_sDMA_ENGINE0", "AMDGPU_NAVI10_DOORBELL_IH", "AMDGPU_DOORBELL_LAYOUT1_IH",
            "AMDGPU_DOORBELL_LAYOUT1_KIQ_START", "AMDGPU_DOORBELL_LAYOUT1_MEC_RING_START", "AMDGPU_DOORBELL_LAYOUT1_USERQUEUE_END",
            "AMDGPU_DOORBELL_LAYOUT1_XCC_RANGE", "AMDGPU_DOORBELL_LAYOUT1_sDMA_ENGINE_START"): assert src(h, n) == getattr(F, n), n
  assert src(f"{AMD}/amdgpu/gfx_v9_4_3.c", "GFX9_MEC_HPD_SIZE") == F.GFX9_MEC_HPD_SIZE
  for f in ("soc21.c", "soc24.c"): assert src(f"{AMD}/amdgpu/{f}", "adev->doorbell_index.sdma_doorbell_range") == F.SDMA_DOORBELL_RANGE
  assert src(f"{AMD}/amdgpu/gfx_v11_0.c", "GFX11_MEC_HPD_SIZE") == F.GFX11_MEC_HPD_SIZE
  assert src(f"{AMD}/amdkfd/kfd_priv.h", "KFD_QUEUE_DOORBELL_MIRROR_OFFSET") == F.KFD_QUEUE_DOORBELL_MIRROR_OFFSET
  assert src(f"{AMD}/amdgpu/amdgpu.h", "AMDGPU_MAX_USEC_TIMEOUT") == F.AMDGPU_MAX_USEC_TIMEOUT
  h = f"{AMD}/amdgpu/sdma_common.h"
  for kind in ("READ", "WRITE"):   # the DEFAULT enumerators name another one of their enum
    alias = re.search(rf"CACHE_{kind}_POLICY_L2__DEFAULT\s*=\s*(\w+)", _read(os.path.join(linux_root(), h))).group(1)
    assert src(h, alias) == getattr(F, f"CACHE_{kind}_POLICY_L2__DEFAULT"), kind
  for e in ("soc21_enum.h", "soc24_enum.h"):
    assert src(f"{AMD}/include/{e}", "SH_MEM_ADDRESS_MODE_64") == F.SH_MEM_ADDRESS_MODE_64
    assert src(f"{AMD}/include/{e}", "SH_MEM_ALIGNMENT_MODE_UNALIGNED") == F.SH_MEM_ALIGNMENT_MODE_UNALIGNED
  for g in ("gmc_v10_0.c", "gmc_v12_0.c"):
    assert src(f"{AMD}/amdgpu/{g}", "adev->gmc.shared_aperture_start") == F.SHARED_APERTURE_START
    assert src(f"{AMD}/amdgpu/{g}", "adev->gmc.private_aperture_start") == F.PRIVATE_APERTURE_START


def test_hdp_remap(src):
  for f in ("nbio_v4_3.c", "nbif_v6_3_1.c"): assert src(f"{AMD}/amdgpu/{f}", "MMIO_REG_HOLE_OFFSET") == F.MMIO_REG_HOLE_OFFSET
  assert src("include/uapi/linux/kfd_ioctl.h", "KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL") == F.KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL
  assert src("include/uapi/linux/kfd_ioctl.h", "KFD_MMIO_REMAP_HDP_REG_FLUSH_CNTL") == F.KFD_MMIO_REMAP_HDP_REG_FLUSH_CNTL


def test_mi300_interrupt_node_ids_and_xcc_register_ranges(src):
  """The die an IV entry names (amdgpu_irq.h), which AM decodes and the board's model posts; the two GC segments
  a packet's register offset is normalized to (gfx_v9_4_3.c), which the board's CP takes as its own XCC's."""
  from rawgpu.drivers.emu.amd.asic import ih_node_aid, ih_node_xcd
  from rawgpu.drivers.emu.amd.gfx import GFX
  h = f"{AMD}/amdgpu/amdgpu_irq.h"
  assert F.AID_NODEID == tuple(src(h, f"AID{a}_NODEID") for a in range(4)) == tuple(ih_node_aid(a) for a in range(4))
  assert F.XCD_NODEID == tuple(src(h, f"XCD{x}_NODEID") for x in range(8)) == tuple(ih_node_xcd(x) for x in range(8))
  c = f"{AMD}/amdgpu/gfx_v9_4_3.c"
  assert GFX.XCC_REG_RANGES == tuple((src(c, f"XCC_REG_RANGE_{i}_LOW"), src(c, f"XCC_REG_RANGE_{i}_HIGH")) for i in (0, 1))


def test_mi300_partition_modes(src):
  """amdgpu_gfx.h's compute partition modes, which NBIO reports and AM and the board use."""
  from rawgpu.drivers.emu.amd import psp
  h = f"{AMD}/amdgpu/amdgpu_gfx.h"
  assert (F.AMDGPU_SPX_PARTITION_MODE, F.AMDGPU_CPX_PARTITION_MODE) == (src(h, "AMDGPU_SPX_PARTITION_MODE"), src(h, "AMDGPU_CPX_PARTITION_MODE"))
  assert psp.PARTITION_MODE == {1: src(h, "AMDGPU_SPX_PARTITION_MODE"), 2: src(h, "AMDGPU_DPX_PARTITION_MODE"),
                                3: src(h, "AMDGPU_TPX_PARTITION_MODE"), 4: src(h, "AMDGPU_QPX_PARTITION_MODE")}
  assert psp.CPX_PARTITION_MODE == F.AMDGPU_CPX_PARTITION_MODE


def test_gc_9_4_3_golden_address_config(src):
  assert src(f"{AMD}/amdgpu/gfx_v9_4_3.c", "GOLDEN_GB_ADDR_CONFIG") == F.GOLDEN_GB_ADDR_CONFIG_GC_9_4_3
