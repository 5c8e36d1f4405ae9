"""pip install of hvd (hvd.torch, hvd.numpy, hvd.Executor, hvd.train, hvd.tune) and hvdrun into the Python
environment that runs pip.

    python3 -m venv --system-site-packages ~/venv          # or any venv / conda env with torch and numpy
    ~/venv/bin/pip install --no-build-isolation ./python    # from the repository; offline
    ~/venv/bin/hvdrun -np 2 -H localhost:2 ~/venv/bin/python train.py
    ~/venv/bin/pip uninstall hvd                            # removes all of it

The build configures the repository with CMake for the interpreter running pip (Release; no tests, examples or
benchmarks), builds it in <repository>/build-pip-<python version>, installs it into a staging folder there, and
packs: the `hvd` package (with `_core` and the `horovod` compatibility package) into site-packages, hvdrun,
hvd-proxy and hvd-rendezvous into <env>/bin, libhvd into <env>/lib (where `_core` and C/C++ programs find it).
HVD_PIP_BUILD_DIR names an existing, built build tree of this repository instead (configured for the same Python
version; a relative path is taken from the folder pip is started in): it is installed as it is, without a
rebuild; a folder that holds no build is refused with one line naming it. Errors (cmake missing, a failed build): the build's
own output, then pip's error.
"""

import os
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build import build

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VERSION_TAG = f"{sys.version_info[0]}.{sys.version_info[1]}"
DEFAULT_BUILD = os.path.join(ROOT, f"build-pip-{VERSION_TAG}")
STAGE = os.path.join(HERE, "build", "hvd-stage")
PYTHONDIR = f"lib/python{VERSION_TAG}/site-packages"  # the layout inside the stage (and the env)
BINARIES = ("hvdrun", "hvd-proxy", "hvd-rendezvous")


def _version() -> str:
    with open(os.path.join(HERE, "hvd", "__init__.py"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split("=", 1)[1].strip().strip("\"'")
    raise RuntimeError("hvd/__init__.py has no __version__")


def _run(cmd):
    print("hvd setup.py:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def given_build_dir(value: str, started_in: str) -> str:
    """HVD_PIP_BUILD_DIR as a folder: a relative path is taken from the folder pip was started in (started_in), not
    from python/, where pip runs this file. SystemExit with one line naming the value when it holds no build of
    this repository (no CMakeCache.txt or cmake_install.cmake), before anything runs."""
    folder = os.path.normpath(os.path.join(started_in, os.path.expanduser(value)))
    if not all(os.path.isfile(os.path.join(folder, f)) for f in ("CMakeCache.txt", "cmake_install.cmake")):
        raise SystemExit(f"hvd: HVD_PIP_BUILD_DIR={value!r} ({folder}) holds no build of this repository: build "
                         f"it first (packaging/build.sh), or unset HVD_PIP_BUILD_DIR to build here")
    return folder


def _started_in() -> str:
    """The folder pip was started in. pip runs the build in python/ (the working directory) but passes the
    environment on unchanged, so PWD is still what the shell that started pip set."""
    return os.environ.get("PWD") or os.getcwd()


def _build_and_stage():
    """The project built (unless HVD_PIP_BUILD_DIR) and installed into STAGE."""
    build_dir = DEFAULT_BUILD
    if os.environ.get("HVD_PIP_BUILD_DIR"):
        build_dir = given_build_dir(os.environ["HVD_PIP_BUILD_DIR"], _started_in())
    else:
        if not shutil.which("cmake"):
            raise RuntimeError("hvd: cmake is not installed (packaging/install-deps.sh installs what the build needs)")
        _run(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_TESTING=OFF",
              "-DHVD_BUILD_EXAMPLES=OFF", "-DHVD_BUILD_BENCH=OFF", f"-DHVD_PYTHON={sys.executable}",
              f"-DPYTHON_EXECUTABLE={sys.executable}", "-DCMAKE_INSTALL_LIBDIR=lib",
              f"-DHVD_INSTALL_PYTHONDIR={PYTHONDIR}"])
        _run(["cmake", "--build", build_dir, "--parallel", str(os.cpu_count() or 2)])
    shutil.rmtree(STAGE, ignore_errors=True)
    _run(["cmake", "--install", build_dir, "--prefix", STAGE])


def _staged_package_dir() -> str:
    """The hvd package inside STAGE (lib/python3.X/site-packages or dist-packages: a reused build's layout)."""
    for root, dirs, files in os.walk(os.path.join(STAGE, "lib")):
        if os.path.basename(root) == "hvd" and "__init__.py" in files and any(f.startswith("_core") for f in files):
            return root
    raise RuntimeError(f"hvd: the staged install in {STAGE} holds no hvd package with _core")


class BuildWithCMake(build):
    """Builds the project with CMake, then puts the hvd package of the staged install (with _core) into the
    build's library folder (the package has no Python modules of setuptools' own to build)."""

    def run(self):
        _build_and_stage()
        super().run()
        target = os.path.join(self.build_lib, "hvd")
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(_staged_package_dir(), target, ignore=shutil.ignore_patterns("__pycache__"))


class BinaryDistribution(Distribution):
    """The wheel holds native code: a platform wheel, not a pure one."""

    def has_ext_modules(self):
        return True


def _data_files():
    """hvdrun and its helpers into <env>/bin, libhvd into <env>/lib (STAGE is filled by the build step, which
    runs before the data files are installed)."""
    # The loader needs the soname only (libhvd.so.<major>); a copy, not links (wheels hold files).
    libs = [os.path.join("build", "hvd-stage", "lib", f"libhvd.so.{_version().split('.')[0]}")]
    return [("bin", [os.path.join("build", "hvd-stage", "bin", b) for b in BINARIES]),
            ("lib", libs)]


setup(
    name="hvd",
    version=_version(),
    description="hvdrun's Python face: Horovod's horovod.torch API on libhvd, hvd.numpy, hvd.Executor, hvd.train, "
                "hvd.tune, and the hvdrun launcher",
    packages=[],  # the package comes from the CMake install (BuildWithCMake)
    cmdclass={"build": BuildWithCMake},
    distclass=BinaryDistribution,
    data_files=_data_files(),
    python_requires=">=3.9",
    zip_safe=False,
)
