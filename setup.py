# The repository root is the `rawgpu` package and its top-level folders are the subpackages;
# setuptools cannot prefix discovered packages in pyproject.toml, so list them here.
from setuptools import find_packages, setup

SUBPACKAGES = ["autogen", "drivers", "hcq", "kernels", "tools"]
found = find_packages(include=[f"{p}*" for p in SUBPACKAGES])
setup(packages=["rawgpu"] + [f"rawgpu.{p}" for p in found], package_dir={"rawgpu": "."})
