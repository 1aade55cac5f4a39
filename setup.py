"""Build of decentlearn._core: one extension from csrc/*.c (kernels) and csrc/glue/*.c (the
CPython/NumPy glue), OpenMP, per-file ISA flags.

Every file is compiled with portable flags (-O3, no -march=native, no -ffast-math). Files named
*_avx2.c / *_avx512.c / *_avx512vnni.c / *_amx.c get their own -m flags on x86-64 only; the code
in them runs only after the run-time dispatch in csrc/dispatch.c has checked the CPU (and, for
AMX, the OS). OpenMP is used when the compiler can compile and link an OpenMP program with the
same flags as the build (CFLAGS, LDFLAGS, sanitizer flags); otherwise the kernels build
single-threaded and the build prints a loud warning (DECENTLEARN_REQUIRE_OPENMP=1 makes it an
error). DECENTLEARN_SANITIZE=1 adds AddressSanitizer and
UndefinedBehaviorSanitizer to every compile and link (tools/sanitize.sh). Files compile in
parallel, one compiler process per CPU (build_ext -j N to choose).
"""

import os
import platform
import shlex
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from glob import glob

import numpy as np
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

X86 = platform.machine().lower() in {"x86_64", "amd64"}
# -fno-math-errno: sqrtf and friends need not set errno, so loops with them vectorize (the
# optimizers' Adam/LAMB steps); it changes no result (-ffast-math's value-changing options stay
# off, and -std=c11 keeps multiplies and adds uncontracted).
BASE_FLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra", "-fno-strict-aliasing", "-fno-math-errno"]
ISA_FLAGS = {
    "_avx2.c": ["-mavx2", "-mfma", "-ffp-contract=fast"],
    "_avx512.c": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mavx2", "-ffp-contract=fast",
                  "-mprefer-vector-width=512"],
    "_avx512vnni.c": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni", "-mfma",
                      "-mavx2", "-ffp-contract=fast", "-mprefer-vector-width=512"],
    # AMX tiles (int8 GEMMs, peak loop): the AVX-512 VNNI flags plus the tile instructions. A
    # compiler without them (GCC < 11) builds entry points that refuse (DL_E_ARG), and the
    # dispatch never picks amx.
    "_amx.c": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni", "-mfma",
               "-mavx2", "-ffp-contract=fast", "-mprefer-vector-width=512", "-mamx-tile",
               "-mamx-int8"],
}
AMX_FLAGS = ["-mamx-tile", "-mamx-int8"]


#: DECENTLEARN_SANITIZE=1 builds with AddressSanitizer + UndefinedBehaviorSanitizer (see
#: tools/sanitize.sh and docs/testing.md); the flags go to every compile, every link and the probe.
SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer",
                  "-fno-sanitize-recover=undefined", "-g"]
SANITIZE = os.environ.get("DECENTLEARN_SANITIZE", "") not in ("", "0")


def _env_flags(name: str) -> list[str]:
    return shlex.split(os.environ.get(name, ""))


_OMP_PROBE = "#include <omp.h>\nint main(void) { return omp_get_max_threads() < 1; }\n"
_AMX_PROBE = ("#include <immintrin.h>\nint main(void) { _tile_release(); return 0; }\n"
              "#if !defined(__AMX_TILE__) || !defined(__AMX_INT8__)\n#error no AMX\n#endif\n")


def _compiler_accepts(compiler, flags: list[str], link_flags: list[str],
                      source: str = _OMP_PROBE) -> bool:
    """Compiles and links a tiny program (default: OpenMP) with the given flags plus the build's
    own: CFLAGS and LDFLAGS from the environment (distutils adds them to shared-library links but
    not to link_executable, so a sanitizer build's probe would fail to link and silently drop
    OpenMP)."""
    extra = (SANITIZE_FLAGS if SANITIZE else [])
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as f:
            f.write(source)
        try:
            objs = compiler.compile([src], output_dir=tmp,
                                    extra_postargs=_env_flags("CFLAGS") + extra + flags)
            compiler.link_executable(objs, "probe", output_dir=tmp,
                                     extra_postargs=_env_flags("CFLAGS") + _env_flags("LDFLAGS")
                                     + extra + link_flags)
        except Exception:  # any compile or link failure means "not supported"
            return False
    return True


def _warn_no_openmp(reason: str) -> None:
    bar = "=" * 78
    sys.stderr.write(f"{bar}\nWARNING: decentlearn is built WITHOUT OpenMP ({reason}): every "
                     "kernel runs\nsingle-threaded. `python -m decentlearn info` shows "
                     "'openmp: False'.\nSet DECENTLEARN_REQUIRE_OPENMP=1 to make this an error."
                     f"\n{bar}\n")
    if os.environ.get("DECENTLEARN_REQUIRE_OPENMP", "") not in ("", "0"):
        raise SystemExit(f"decentlearn: OpenMP is required (DECENTLEARN_REQUIRE_OPENMP) but "
                         f"{reason}")


class BuildExt(build_ext):
    """Compiles ISA-specific sources with their own flags, then links everything together."""

    def build_extension(self, ext):
        if os.environ.get("DECENTLEARN_NO_OPENMP", "") != "":
            openmp = False
            _warn_no_openmp("DECENTLEARN_NO_OPENMP is set")
        else:
            openmp = _compiler_accepts(self.compiler, ["-fopenmp"], ["-fopenmp"])
            if not openmp:
                _warn_no_openmp("the compiler cannot compile and link an OpenMP program with "
                                "this build's CFLAGS/LDFLAGS")
        omp = ["-fopenmp"] if openmp else []
        san = SANITIZE_FLAGS if SANITIZE else []
        generic, isa_jobs = [], []
        macros = list(ext.define_macros) + [(name,) for name in ext.undef_macros]
        amx = X86 and _compiler_accepts(self.compiler, AMX_FLAGS, [], _AMX_PROBE)
        if X86 and not amx:
            sys.stderr.write("decentlearn: the compiler does not accept -mamx-tile -mamx-int8; "
                             "the amx path is left out of this build\n")
        for src in ext.sources:
            isa = next((flags for suffix, flags in sorted(ISA_FLAGS.items(), key=lambda kv: -len(kv[0]))
                        if src.endswith(suffix)), None)
            if isa is None:  # the glue and portable kernels: numpy's macros, as setuptools
                generic.append((src, macros, BASE_FLAGS + san + omp))
                continue
            if not amx:
                isa = [f for f in isa if f not in AMX_FLAGS]
            isa_jobs.append((src, [], BASE_FLAGS + san + omp + (isa if X86 else [])))
        target = self.get_ext_fullpath(ext.name)
        inputs = list(ext.sources) + list(ext.depends)
        if not self.force and os.path.exists(target) and \
                max(os.path.getmtime(f) for f in inputs) <= os.path.getmtime(target):
            return  # up to date

        def compile_one(job):
            src, job_macros, flags = job
            return self.compiler.compile([src], output_dir=self.build_temp, macros=job_macros,
                                         include_dirs=ext.include_dirs, extra_postargs=flags,
                                         debug=self.debug, depends=ext.depends)

        # Every file on its own thread (each a compiler process): -j N / --parallel N, else one
        # per CPU. The objects keep a serial build's order (the portable files sorted, as
        # setuptools sorts them, then the ISA files), so the library is the same byte for byte.
        workers = self.parallel if isinstance(self.parallel, int) and self.parallel > 0 else None
        with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
            objects = [o for objs in pool.map(compile_one, sorted(generic) + isa_jobs)
                       for o in objs]
        # every file is an object here, not a source: list them as dependencies, or a change to
        # one alone would not relink the extension
        ext.depends = list(ext.depends) + list(ext.sources)
        ext.sources = []
        ext.extra_objects = objects
        ext.extra_compile_args = BASE_FLAGS + san + omp
        ext.extra_link_args = san + omp
        super().build_extension(ext)


setup(
    ext_modules=[
        Extension(
            "decentlearn._core",
            # csrc/*.c: the kernels; csrc/glue/*.c: the CPython/NumPy glue (portable flags only).
            sources=sorted(glob("csrc/*.c")) + sorted(glob("csrc/glue/*.c")),
            include_dirs=["csrc", np.get_include()],
            depends=sorted(glob("csrc/*.h")) + sorted(glob("csrc/glue/*.h")),
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")],
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
