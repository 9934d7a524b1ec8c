"""AMDGPU target IDs: which processors have the xnack and sramecc features, and the ID a device runs code objects
for (both the interfaces, which learn the modes, and the loader, which checks them, need it)."""
from __future__ import annotations

# the target features each processor has (LLVM's AMDGPUUsage processor table; the test checks them against clang's
# target-ID parser); a device's target ID names the mode it runs each in, a code object's e_flags the one it needs
TARGET_FEATURES = {
  "gfx900": ("xnack",), "gfx906": ("sramecc", "xnack"), "gfx908": ("sramecc", "xnack"), "gfx90a": ("sramecc", "xnack"),
  "gfx940": ("sramecc", "xnack"), "gfx941": ("sramecc", "xnack"), "gfx942": ("sramecc", "xnack"),
}


def target_id(arch: str, **modes: bool | None) -> str:
  """The LLVM target ID of a device running arch with these feature modes (`xnack=False` -> "gfx942:xnack-"):
  features in alphabetical order, as LLVM writes them; a mode that is None (not known) or a feature the processor
  lacks is left out, and a code object then loads whatever it says about that feature."""
  if unknown := set(modes) - {"sramecc", "xnack"}: raise ValueError(f"unknown target features {sorted(unknown)}")
  return arch + "".join(f":{f}{'+' if modes[f] else '-'}" for f in TARGET_FEATURES.get(arch, ()) if modes.get(f) is not None)
