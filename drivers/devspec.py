"""Device selection: DEV=[IFACE[:indices]+]VENDOR[:RENDERER[:ARCH]] (tinygrad's grammar), parsed once."""
from __future__ import annotations
import os
from dataclasses import dataclass
from rawgpu.errors import DeviceSpecError

# Interfaces per vendor. The real ones are tried in this order when DEV names none; emulated ones only when named.
REAL_IFACES = {"AMD": ("KFD", "PCI", "USB"), "NV": ("NVK", "PCI")}
EMULATED_IFACES = {"AMD": ("MOCKPCI", "MOCKKFD", "MOCKUSB"), "NV": ()}
RENDERERS = {"AMD": ("LLVM",), "NV": ("PTX", "NVRTC")}
ARCHS = {"AMD": ("gfx1100", "gfx1101", "gfx1102", "gfx1200", "gfx1201", "gfx942"), "NV": ("sm_86", "sm_89", "sm_90")}
EMULATED_ARCHS = ("gfx1100", "gfx1201")
# boards MOCKPCI also emulates whose AM support is in progress (AM opens them with RAWGPU_AM_IN_PROGRESS=1)
IN_PROGRESS_ARCHS = {"MOCKPCI": ("gfx942",), "MOCKKFD": ("gfx942",)}


@dataclass(frozen=True)
class DevSpec:
  vendor: str
  iface: str | None = None            # None: try the real interfaces in REAL_IFACES order
  indices: tuple[int, ...] | None = None
  renderer: str | None = None
  arch: str | None = None

  @property
  def emulated(self) -> bool: return self.iface is not None and self.iface.startswith("MOCK")

  def __str__(self) -> str:
    s = self.vendor if self.iface is None else f"{self.iface}{':' + ','.join(map(str, self.indices)) if self.indices else ''}+{self.vendor}"
    if self.renderer or self.arch: s += f":{self.renderer or ''}" + (f":{self.arch}" if self.arch else "")
    return s


def _indices(text: str, spec: str) -> tuple[int, ...]:
  out: list[int] = []
  for part in text.split(","):
    lo, sep, hi = part.partition("-")
    if not lo.isdigit() or (sep and not hi.isdigit()):
      raise DeviceSpecError(f"DEV={spec!r}: bad device index {part!r}; use N, N-M or N,M (e.g. PCI:0-3+AMD)")
    a, b = int(lo), int(hi) if sep else int(lo)
    if b < a: raise DeviceSpecError(f"DEV={spec!r}: index range {part!r} runs backwards")
    out.extend(range(a, b + 1))
  if len(set(out)) != len(out): raise DeviceSpecError(f"DEV={spec!r}: a device index is repeated")
  return tuple(out)


def parse_dev(spec: str) -> DevSpec:
  text = spec.strip()
  if not text: raise DeviceSpecError("DEV is empty; examples: AMD, PCI+AMD, KFD+AMD, MOCKPCI+AMD, MOCKPCI+AMD::gfx1201, NVK+NV")
  iface_part, plus, rest = text.rpartition("+") if "+" in text else ("", "", text)
  if plus and not iface_part: raise DeviceSpecError(f"DEV={spec!r}: nothing before '+'; expected an interface such as PCI or KFD")
  vendor, _, tail = rest.partition(":")
  vendor = vendor.upper()
  if vendor not in REAL_IFACES: raise DeviceSpecError(f"DEV={spec!r}: unknown vendor {vendor!r}; valid: {', '.join(REAL_IFACES)}")
  renderer, _, arch = tail.partition(":")
  if ":" in arch: raise DeviceSpecError(f"DEV={spec!r}: too many ':' after the vendor; the form is VENDOR[:RENDERER[:ARCH]]")
  if renderer and renderer.upper() not in RENDERERS[vendor]:
    hint = f" ({renderer} is an arch: VENDOR::ARCH, with two colons, e.g. {vendor}::{renderer})" if renderer in ARCHS[vendor] else ""
    raise DeviceSpecError(f"DEV={spec!r}: unknown renderer {renderer!r} for {vendor}; valid: {', '.join(RENDERERS[vendor])}{hint}")
  if arch and arch not in ARCHS[vendor]: raise DeviceSpecError(f"DEV={spec!r}: unknown arch {arch!r} for {vendor}; valid: {', '.join(ARCHS[vendor])}")
  iface, indices = None, None
  if plus:
    name, colon, idx = iface_part.partition(":")
    name = name.upper()
    valid = REAL_IFACES[vendor] + EMULATED_IFACES[vendor]
    if name not in valid: raise DeviceSpecError(f"DEV={spec!r}: unknown interface {name!r} for {vendor}; valid: {', '.join(valid)}")
    if colon: indices = _indices(idx, spec)
    iface = name
    if name.startswith("MOCK") and arch and arch not in EMULATED_ARCHS + IN_PROGRESS_ARCHS.get(name, ()):
      more = "".join(f" ({', '.join(a)}: in progress, with RAWGPU_AM_IN_PROGRESS=1)" for a in [IN_PROGRESS_ARCHS.get(name, ())] if a)
      raise DeviceSpecError(f"DEV={spec!r}: the emulated {name} board models {', '.join(EMULATED_ARCHS)}{more}, not {arch}")
  return DevSpec(vendor, iface, indices, renderer.upper() or None, arch or None)


def dev_from_env(default: str | None = None) -> DevSpec | None:
  """The DEV environment variable parsed, or `default` parsed, or None."""
  text = os.environ.get("DEV", default)
  return None if text is None else parse_dev(text)
