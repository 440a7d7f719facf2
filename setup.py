"""Package discovery for the repository layout (metadata lives in pyproject.toml).

The top-level folders features/, predictor/, training/, serving/ and simulator/ install as
subpackages of ``kvcast``; every folder with an ``__init__.py`` below them is found here, so a
new subpackage needs no registration.
"""

from setuptools import find_packages, setup

ROOTS = {
    "kvcast": "kvcast",
    "kvcast.features": "features",
    "kvcast.predictor": "predictor",
    "kvcast.training": "training",
    "kvcast.serving": "serving",
    "kvcast.simulator": "simulator",
}

packages = []
for name, folder in ROOTS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]

setup(package_dir=ROOTS, packages=packages)
