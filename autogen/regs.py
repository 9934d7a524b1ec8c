"""AMD register databases per IP version, generated from the kernel's asic_reg headers (see autogen/regs/README.md).

  gc = ip_regs("gc", 11, 0, 0)
  r = gc["regCP_HQD_ACTIVE"]      # or "CP_HQD_ACTIVE"
  r.offset, r.base_idx, r.encode(ACTIVE=1), r.decode(v)

Tables load lazily (one small zlib file per IP version) and are cached; importing this module reads nothing.
"""
from __future__ import annotations
import functools, json, zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from rawgpu.errors import RawGPUError

DATA_DIR = Path(__file__).resolve().parent / "regs"
FORMAT = 3
# Lookup order for a name given without prefix: MMIO (reg, older mm), then indirect (ix), then PCI config (cfg).
PREFIXES = ("reg", "mm", "ix", "cfg")
Version = tuple[int, int, int]


class UnknownRegister(RawGPUError, KeyError):
  """A register name that the table does not have; the message suggests close matches."""

  def __str__(self) -> str: return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Reg:
  name: str                  # with its header prefix, e.g. "regCP_HQD_ACTIVE"
  offset: int                # dword offset within the IP's base segment (or index/config offset for ix/cfg)
  base_idx: int | None       # segment index from *_BASE_IDX; None for ix/cfg registers, which have no segment
  fields: dict[str, tuple[int, int]] = field(repr=False, hash=False)  # field -> (shift, mask already shifted)
  ip: str = field(default="", repr=False)

  @property
  def bare(self) -> str: return _strip(self.name)

  def field_names(self) -> list[str]: return list(self.fields)

  def addr(self, bases: Sequence[int]) -> int:
    """Absolute dword address given the IP's segment bases (from IP discovery)."""
    if self.base_idx is None: raise RawGPUError(f"{self.ip} {self.name} is not an MMIO register (it has no base index)")
    return bases[self.base_idx] + self.offset

  def encode(self, **values: int) -> int:
    """The register value with the named fields set and all others zero."""
    return self.modify(0, **values)

  def modify(self, value: int, **values: int) -> int:
    """VALUE with the named fields replaced (read-modify-write helper)."""
    for name, v in values.items():
      f = self.fields.get(name)
      if f is None:
        import difflib  # only on the error path
        hint = difflib.get_close_matches(name, self.fields, n=3)
        raise RawGPUError(f"{self.ip} {self.name} has no field {name}" + (f"; did you mean {', '.join(hint)}?" if hint
                          else f"; fields: {', '.join(self.fields) or '(none)'}"))
      shift, mask = f
      if v < 0 or (v << shift) & ~mask:
        raise RawGPUError(f"{self.ip} {self.name}.{name} = {v:#x} does not fit the field ({(mask >> shift).bit_length()} bits)")
      value = (value & ~mask) | (v << shift)
    return value

  def decode(self, value: int) -> dict[str, int]:
    return {n: (value & m) >> s for n, (s, m) in self.fields.items()}


class RegTable:
  """All registers of one IP version. Lines are parsed into Reg objects on first access, which keeps loading fast."""

  def __init__(self, ip: str, version: Version, meta: dict, regs: dict[str, str], fields: dict[str, str]):
    self.ip, self.version, self.sources = ip, version, meta.get("sources", [])
    self._regs, self._fields = regs, fields  # name -> "offset base_idx"; bare name -> "field shift mask ..."
    self._cache: dict[str, Reg] = {}
    self._parsed: dict[str, dict[str, tuple[int, int]]] = {}

  def __repr__(self) -> str: return f"<RegTable {self.ip} {'.'.join(map(str, self.version))}: {len(self._regs)} registers>"

  def _resolve(self, name: str) -> str | None:
    if name in self._regs: return name
    for p in PREFIXES:  # a bare name: MMIO first, then ix, then cfg
      if p + name in self._regs: return p + name
    return None

  def __contains__(self, name: object) -> bool: return isinstance(name, str) and self._resolve(name) is not None

  def __getitem__(self, name: str) -> Reg:
    r = self._cache.get(name)
    if r is not None: return r
    full = self._resolve(name) if isinstance(name, str) else None
    if full is None:
      name = str(name)
      import difflib  # only on the error path
      bare = {_strip(n): n for n in reversed(self._regs)}
      hint = difflib.get_close_matches(_strip(name), bare, n=4, cutoff=0.7)
      raise UnknownRegister(f"{self.ip} {'.'.join(map(str, self.version))} has no register {name}" +
                            (f"; close matches: {', '.join(bare[h] for h in hint)}" if hint else ""))
    r = self._cache.get(full)
    if r is None:
      off, bidx = self._regs[full].split(" ")
      r = Reg(full, int(off, 16), None if bidx == "-" else int(bidx), self.fields_of(_strip(full)), self.ip)
      self._cache[full] = r
    self._cache[name] = r
    return r

  def get(self, name: str, default: Reg | None = None) -> Reg | None:
    return self[name] if name in self else default

  def names(self) -> list[str]: return list(self._regs)
  def __iter__(self) -> Iterator[str]: return iter(self._regs)
  def __len__(self) -> int: return len(self._regs)

  def fields_of(self, bare: str) -> dict[str, tuple[int, int]]:
    """Fields by bare register name; also covers registers that only sh_mask.h describes (no offset)."""
    f = self._parsed.get(bare)
    if f is None:
      t = self._fields.get(bare, "").split(" ")
      f = self._parsed[bare] = {t[i]: (int(t[i + 1]), int(t[i + 2], 16)) for i in range(0, len(t) - 2, 3)}
    return f

  def field_registers(self) -> list[str]:
    """Bare names of every register with fields, including those without an offset."""
    return list(self._fields)


def _prefix(name: str) -> str:
  for p in PREFIXES:
    if name.startswith(p): return p
  return ""


def _strip(name: str) -> str:
  """Name without its header prefix ("regFOO" -> "FOO"); a name without one is returned as is."""
  p = _prefix(name)
  rest = name[len(p):]
  return rest if p and rest[:1] and (rest[0].isupper() or rest[0].isdigit()) else name


@functools.cache
def available() -> dict[str, list[Version]]:
  """IP name -> sorted versions that have a generated table."""
  out: dict[str, list[Version]] = {}
  for p in DATA_DIR.glob("*.bin"):
    ip, *ver = p.stem.rsplit("_", 3)
    if len(ver) == 3 and all(v.isdigit() for v in ver): out.setdefault(ip, []).append(tuple(map(int, ver)))  # type: ignore[arg-type]
  return {k: sorted(v) for k, v in sorted(out.items())}


def resolve_version(ip: str, major: int, minor: int = 0, rev: int = 0) -> Version:
  """The exact version if generated, else the nearest lower one of the same major."""
  ip = ip.lower()
  have = available().get(ip)
  if not have: raise RawGPUError(f"no register tables for IP {ip!r}; available: {', '.join(available()) or '(none)'}")
  want = (major, minor, rev)
  cands = [v for v in have if v[0] == major and v <= want]
  if not cands:
    raise RawGPUError(f"no register table for {ip} {major}.{minor}.{rev} or a lower {ip} {major}.x version; "
                      f"available: {', '.join('.'.join(map(str, v)) for v in have)}")
  return max(cands)


@functools.cache
def _load(ip: str, version: Version) -> RegTable:
  path = DATA_DIR / f"{ip}_{version[0]}_{version[1]}_{version[2]}.bin"
  try:
    lines = zlib.decompress(path.read_bytes()).decode("ascii").split("\n")
    magic, fmt, meta = lines[0].split(" ", 2)
    if magic != "#rawgpu-regs" or int(fmt) != FORMAT: raise ValueError(f"format {fmt}, expected {FORMAT}")
    n, m = map(int, lines[1].split(" "))
    regs = dict(zip(lines[2].split(" "), lines[3:3 + n]))
    fields = dict(zip(lines[3 + n].split(" "), lines[4 + n:4 + n + m]))
    if len(regs) != n or len(fields) != m: raise ValueError("truncated")
    return RegTable(ip, version, json.loads(meta), regs, fields)
  except (OSError, zlib.error, ValueError, IndexError) as e:  # UnicodeDecodeError is a ValueError
    raise RawGPUError(f"register table {path} is unreadable ({e}); regenerate it with autogen/regs/gen.py") from e


def ip_regs(ip: str, major: int, minor: int = 0, rev: int = 0) -> RegTable:
  """The register table of IP (gc, mmhub, nbio, nbif, osssys, mp, hdp, athub, smuio) at the given version or the
  nearest lower one of the same major. Raises RawGPUError when there is none."""
  return _load(ip.lower(), resolve_version(ip, major, minor, rev))
