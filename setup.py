"""Declares the single C extension, rmqcore._core. No other logic: a failed
compile fails the install (there is no pure-Python fallback)."""
import os
from glob import glob

from Cython.Build import cythonize
from setuptools import Extension, setup

debug = os.environ.get("RMQ_DEBUG") == "1"
flags = ["-std=c11", "-Wall", "-Wextra", "-Wno-unused-function", "-Wno-sign-compare",
         "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
flags += ["-O0", "-g"] if debug else ["-O2"]

ext = Extension(
    "rmqcore._core",
    ["rmqcore/_core.pyx", *sorted(glob("csrc/*.c"))],
    include_dirs=["csrc"],
    libraries=["z"],
    define_macros=[("_GNU_SOURCE", None)],
    extra_compile_args=[*flags, "-pthread"],
    extra_link_args=["-pthread"],
    depends=sorted(glob("csrc/*.h") + glob("rmqcore/*.pyx") + glob("rmqcore/includes/*.pxd")),
)

setup(ext_modules=cythonize([ext], language_level=3,
                            compiler_directives={"linetrace": debug, "embedsignature": True}))
