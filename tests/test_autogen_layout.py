"""Every generated binding against its layout manifest: sizes, offsets, bitfield positions and values that gcc
computed from the original headers (autogen/gen/verify.py). Runs anywhere: no headers or compiler needed."""
import importlib
import json
import pathlib

import pytest

from rawgpu.autogen.gen import check

AUTOGEN = pathlib.Path(__file__).resolve().parent.parent / "autogen"
MANIFESTS = sorted(AUTOGEN.rglob("*.layout.json"))
IDS = [str(p.relative_to(AUTOGEN)) for p in MANIFESTS]


def load(path: pathlib.Path):
  man = json.loads(path.read_text())
  return man, importlib.import_module(man["module"])


def test_manifests_exist():
  assert MANIFESTS, "no layout manifests under autogen/"
  for p in MANIFESTS: assert p.with_name(p.name.replace(".layout.json", ".py")).exists(), p


@pytest.mark.parametrize("path", MANIFESTS, ids=IDS)
def test_struct_layouts(path):
  bad = check.structs(*reversed(load(path)))
  assert not bad, "\n".join(bad[:20])


@pytest.mark.parametrize("path", MANIFESTS, ids=IDS)
def test_constants_and_macros(path):
  bad = check.values(*reversed(load(path)))
  assert not bad, "\n".join(bad[:20])


@pytest.mark.parametrize("path", MANIFESTS, ids=IDS)
def test_every_constant_checked(path):
  bad = check.coverage(*reversed(load(path)))
  assert not bad, "\n".join(bad[:20])


def test_every_recipe_has_a_committed_module_and_nothing_else():
  from rawgpu.autogen.gen.recipes import RECIPES
  want = {r.path.with_suffix(".layout.json").resolve() for r in RECIPES}
  assert want == {p.resolve() for p in MANIFESTS}
