"""Build of decentlearn._core: one extension from csrc/*.c, OpenMP, per-file ISA flags.

Every file is compiled with portable flags (-O3, no -march=native, no -ffast-math). Files named
*_avx2.c / *_avx512.c get their own -m flags on x86-64 only; the code in them runs only after the
run-time dispatch in csrc/dispatch.c has checked the CPU. OpenMP is used when the compiler accepts
-fopenmp, otherwise the kernels build single-threaded.
"""

import os
import platform
import sys
import tempfile
from glob import glob

import numpy as np
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

X86 = platform.machine().lower() in {"x86_64", "amd64"}
BASE_FLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-fno-strict-aliasing"]
ISA_FLAGS = {
    "_avx2.c": ["-mavx2", "-mfma", "-ffp-contract=fast"],
    "_avx512.c": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mavx2", "-ffp-contract=fast",
                  "-mprefer-vector-width=512"],
    "_avx512vnni.c": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni", "-mfma",
                      "-mavx2", "-ffp-contract=fast", "-mprefer-vector-width=512"],
}


def _compiler_accepts(compiler, flags: list[str], link_flags: list[str]) -> bool:
    """Compiles and links a tiny OpenMP program with the given flags."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as f:
            f.write("#include <omp.h>\nint main(void) { return omp_get_max_threads() < 1; }\n")
        try:
            objs = compiler.compile([src], output_dir=tmp, extra_postargs=flags)
            compiler.link_executable(objs, "probe", output_dir=tmp, extra_postargs=link_flags)
        except Exception:  # any compile or link failure means "not supported"
            return False
    return True


class BuildExt(build_ext):
    """Compiles ISA-specific sources with their own flags, then links everything together."""

    def build_extension(self, ext):
        openmp = os.environ.get("DECENTLEARN_NO_OPENMP", "") == "" and _compiler_accepts(
            self.compiler, ["-fopenmp"], ["-fopenmp"])
        if not openmp:
            sys.stderr.write("decentlearn: compiler lacks OpenMP; building single-threaded kernels\n")
        omp = ["-fopenmp"] if openmp else []
        generic, objects = [], []
        for src in ext.sources:
            isa = next((flags for suffix, flags in sorted(ISA_FLAGS.items(), key=lambda kv: -len(kv[0]))
                        if src.endswith(suffix)), None)
            if isa is None:
                generic.append(src)
                continue
            flags = BASE_FLAGS + omp + (isa if X86 else [])
            objects += self.compiler.compile([src], output_dir=self.build_temp,
                                             include_dirs=ext.include_dirs, extra_postargs=flags,
                                             depends=ext.depends)
        ext.sources = generic
        ext.extra_objects = objects
        ext.extra_compile_args = BASE_FLAGS + omp
        ext.extra_link_args = omp
        super().build_extension(ext)


setup(
    ext_modules=[
        Extension(
            "decentlearn._core",
            sources=sorted(glob("csrc/*.c")),
            include_dirs=["csrc", np.get_include()],
            depends=sorted(glob("csrc/*.h")),
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")],
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
