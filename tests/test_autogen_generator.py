"""The generator on a header written to hit its hard cases (precedence, casts, signed division, bitfields that
straddle units, packed structs, anonymous members, flexible arrays, signed bitfields, ioctls), checked against gcc
through the same manifest the committed modules use. Needs libclang and gcc; skips with the reason otherwise."""
import importlib.util
import json
import shutil
import sys

import pytest

from rawgpu.autogen.gen import check

MISSING = ("libclang not installed (pip install libclang==18.1.1)" if importlib.util.find_spec("clang") is None
           else "gcc not installed" if shutil.which("gcc") is None else "")
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING)

HEADER = r"""
#include <stdint.h>
#include <linux/ioctl.h>
#define A 5
#define B (A << 3 | 1)
#define PREC(a, b, c) ((a) & (b) == (c))
#define PREC2(a, b) ((a) + (b) << 2 & 0xff)
#define TERN(x) ((x) > 3 ? (x) * 2 : -(x))
#define CASTU8(x) ((uint8_t)(x))
#define CASTS8(x) ((int8_t)(x))
#define DIVNEG(x) ((-(int)(x)) / 3)
#define MODNEG(x) ((-(int)(x)) % 3)
#define NOTX(x) (!(x))
#define LOGIC(a, b) ((a) && (b) || !(a))
#define BIG 0xFFFFFFFFFFFFFFFFull
#define NEG (-1)
#define TOP (1 << 31)
#define SHL(x) (1u << ((x) & 31))
#define CHARC 'A'
#define SZ (sizeof(struct mixed))
#define NESTED(x) (SHL(x) | B)
#define MASKED(x) (((x) & SYN_FIELD_MASK) << SYN_FIELD_SHIFT)
#define SYN_FIELD_MASK 0x3f
#define SYN_FIELD_SHIFT 20
enum e { E0 = -2, E1, E2 = 0x7fffffff };
struct mixed { uint8_t a; uint32_t b : 3, c : 7; uint16_t d; uint64_t e : 40; uint8_t f[3]; };
struct __attribute__((packed)) straddle { uint8_t a; uint32_t b : 20; uint32_t c : 20; uint8_t d; };
union u { uint32_t w; struct { uint16_t lo, hi; }; struct { uint32_t x : 4, y : 28; } bits; };
struct flex { uint32_t n; union u items[]; };
struct signedbf { int32_t s : 5; int32_t t : 27; enum e v : 8; };
struct withenum { enum e v; char name[5]; double d; };
struct nested { struct { int x; struct { short y; uint8_t z : 2; }; }; struct mixed m[2]; struct { int q; } arr[3]; };
typedef struct { uint64_t addr; uint32_t len; } anon_td_t;
#define SYN_IOC_GET _IOR('S', 1, struct mixed)
#define SYN_IOC_SET _IOWR('S', 2, anon_td_t)
#define SYN_IOC_RAW _IO('S', 3)
"""


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
  from rawgpu.autogen.gen.recipes import UAPI, Recipe
  from rawgpu.autogen.gen.run import generate
  root = tmp_path_factory.mktemp("hdr")
  (root / "synth.h").write_text(HEADER)
  out = tmp_path_factory.mktemp("out")
  r = Recipe("synth", "linux", ("synth.h",), prelude=UAPI, doc="synthetic")
  dest, dropped = generate(r, out, root=root)
  assert not dropped, dropped
  spec = importlib.util.spec_from_file_location("rawgpu.autogen.synth", dest)
  mod = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = mod
  spec.loader.exec_module(mod)
  yield mod, json.loads(dest.with_suffix(".layout.json").read_text()), dest
  del sys.modules[spec.name]


def test_layouts_match_gcc(synth):
  mod, man, _ = synth
  assert {"mixed", "straddle", "u", "flex", "signedbf", "withenum", "nested", "anon_td_t"} <= set(man["structs"])
  assert not check.structs(mod, man)


def test_values_match_gcc(synth):
  mod, man, _ = synth
  for name in ("B", "BIG", "NEG", "TOP", "CHARC", "SZ", "E0", "E1", "E2", "SYN_IOC_GET", "SYN_IOC_SET", "SYN_IOC_RAW"):
    assert name in man["consts"], name
  for fn in ("PREC", "PREC2", "TERN", "CASTU8", "CASTS8", "DIVNEG", "MODNEG", "NOTX", "LOGIC", "SHL", "NESTED", "MASKED"):
    assert any(k.startswith(fn + "(") for k in man["consts"]), fn
  assert not check.values(mod, man)
  assert not check.coverage(mod, man)


def test_accessors_behave_like_c(synth):
  mod, _, _ = synth
  s = mod.signedbf(s=-3, t=5)
  assert (s.s, s.t) == (-3, 5)
  with pytest.raises(ValueError):
    s.s = -17
  n = mod.nested(x=7, y=-2, z=3)  # fields of anonymous members, bitfield included, reached from the parent
  assert (n.x, n.y, n.z) == (7, -2, 3)
  assert mod.SYN_IOC_GET.struct is mod.mixed and mod.SYN_IOC_SET.struct is mod.anon_td_t
  assert mod.SYN_IOC_RAW.struct is None


def test_output_is_deterministic(synth, tmp_path):
  from rawgpu.autogen.gen.recipes import UAPI, Recipe
  from rawgpu.autogen.gen.run import generate
  _, _, first = synth
  (tmp_path / "synth.h").write_text(HEADER)
  dest, _ = generate(Recipe("synth", "linux", ("synth.h",), prelude=UAPI, doc="synthetic"), tmp_path / "o", root=tmp_path)
  assert dest.read_bytes() == first.read_bytes()
  assert dest.with_suffix(".layout.json").read_bytes() == first.with_suffix(".layout.json").read_bytes()
