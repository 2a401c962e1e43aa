"""Build of rocketstore's compiled modules (modelled on asyncpg's setup.py).

Environment switches:
  ROCKETSTORE_DEBUG=1     -O0 -g, RS_DEBUG, Cython line tracing and annotate HTML (cython -a)
  ROCKETSTORE_SANITIZE=1  ASan + UBSan
"""
import os
import re
import sys

from setuptools import Distribution, Extension, setup
from setuptools.command.build_ext import build_ext

try:
    import numpy
    from Cython.Build import cythonize
except ImportError as e:  # pragma: no cover - pip installs both from pyproject first
    sys.exit(f"building rocketstore needs Cython>=3 and numpy: {e}")

DEBUG = os.environ.get("ROCKETSTORE_DEBUG") == "1"
SANITIZE = os.environ.get("ROCKETSTORE_SANITIZE") == "1"

CFLAGS = ["-O0", "-g", "-UNDEBUG", "-DRS_DEBUG=1"] if DEBUG else ["-O2", "-DRS_DEBUG=0"]
CFLAGS += ["-Wall", "-Wno-unused-function", "-Wno-unreachable-code"]
LDFLAGS = []
if SANITIZE:
    CFLAGS += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    LDFLAGS += ["-fsanitize=address,undefined"]

C_SOURCES = ["csrc/rs_io.c", "csrc/rs_hash.c"]
MODULES = ["_mapped", "_codec", "_commitlog", "_scan", "_consumequeue", "_dispatch",
           "_reader", "_indexfile", "_verify", "_columns"]
# the remoting layer's byte work (the send path's properties, frames): rocketstore.remoting
REMOTING_MODULES = ["_wire"]
# every source must be there: a build that silently left a module out would install a
# package that cannot be imported (an sdist without its .pyx files did exactly that)
_PYX = ([f"rocketstore/store/{m}.pyx" for m in MODULES]
        + [f"rocketstore/remoting/{m}.pyx" for m in REMOTING_MODULES])


def _included(pyx):
    """The .pxi files ``pyx`` pulls in with ``include``: parts of its source."""
    if not os.path.exists(pyx):
        return []
    with open(pyx, encoding="utf-8") as f:
        names = re.findall(r'^include "([^"]+)"', f.read(), re.M)
    return [os.path.join(os.path.dirname(pyx), n) for n in names]


_missing = [p for p in C_SOURCES + _PYX + [i for x in _PYX for i in _included(x)]
            if not os.path.exists(p)]
if _missing:
    sys.exit(f"building rocketstore: source files missing: {', '.join(_missing)} "
             "(an incomplete sdist? see MANIFEST.in)")
if os.environ.get("ROCKETSTORE_MODULES"):     # development: rebuild only these
    _only = os.environ["ROCKETSTORE_MODULES"].split(",")
    MODULES = [m for m in MODULES if m in _only]
    REMOTING_MODULES = [m for m in REMOTING_MODULES if m in _only]


# The C sources every module uses, compiled once into a static library (build_clib, run by
# build_ext before the modules) that each module links. Listed as each module's own sources,
# they were compiled once per module into the same object path: with the parallel build
# below, one module linked a csrc/*.o another was still writing ("file not recognized").
C_LIBRARY = ("rocketstore_c", {"sources": C_SOURCES, "include_dirs": ["csrc"],
                               "cflags": CFLAGS})


def ext(name, package="store"):
    return Extension(
        f"rocketstore.{package}.{name}",
        [f"rocketstore/{package}/{name}.pyx"],
        include_dirs=["csrc", numpy.get_include()],
        # the static library before zlib, which it calls (an as-needed link drops a -lz
        # named before its first user)
        libraries=[C_LIBRARY[0], "z"],
        extra_compile_args=CFLAGS,
        extra_link_args=LDFLAGS,
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )


directives = {
    "language_level": 3,
    "embedsignature": True,
    "boundscheck": False,
    "wraparound": False,
    "cdivision": True,
    "initializedcheck": False,
}
if DEBUG:
    directives.update(linetrace=True, boundscheck=True, wraparound=True)

class BuildExt(build_ext):
    """build_ext that builds the shared C library first (``build`` does, but ``build_ext``
    alone -- ``--inplace``, editable installs -- only links against it)."""

    def run(self):
        if self.distribution.has_c_libraries():
            self.run_command("build_clib")
        super().run()


class BinaryDistribution(Distribution):
    """Compiled modules inside: the wheel is tagged cpXY-<platform>, never py3-none-any."""

    def has_ext_modules(self):
        return True


setup(
    distclass=BinaryDistribution,
    # pip and `python -m build` pass no -j: compile the modules on every core
    options={"build_ext": {"parallel": os.cpu_count() or 1}},
    libraries=[C_LIBRARY],
    cmdclass={"build_ext": BuildExt},
    ext_modules=cythonize(
        [ext(m) for m in MODULES] + [ext(m, "remoting") for m in REMOTING_MODULES],
        compiler_directives=directives,
        annotate=DEBUG,
        include_path=["."],
    ),
)
