"""Build the optional C extensions; all metadata lives in pyproject.toml.

``torchscope.trace._scan`` makes loading Kineto JSON faster (the reader falls back to msgspec
without it); ``torchscope.trace._inflate`` inflates a large gzip trace without holding the GIL
(Python's zlib does it without; it needs zlib's header, which not every machine has, so it is
its own extension: its failing leaves the scanner built); ``torchscope.accuracy._fused`` makes live compare's metrics faster (torch ops do
the same without it). A failed compile (no compiler, an unusual platform) must not fail the
install.
"""

from __future__ import annotations

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


WARNINGS = ["-Wall", "-Wextra", "-Wno-missing-field-initializers"]
# per extension: _fused's sums may be reassociated (it needs no bit-exact order, only float64
# sums; NaN/Inf checks stay valid, unlike with -ffast-math), so that its loops vectorize
OPTIMISE = {
    "torchscope.trace._scan": ["-O2"],
    "torchscope.trace._inflate": ["-O2"],
    "torchscope.accuracy._fused": ["-O3", "-fno-signed-zeros", "-fno-trapping-math", "-fassociative-math"],
}


# _scan starts a POSIX thread (its Follower); glibc before 2.34 keeps those in libpthread
THREADS = {"torchscope.trace._scan": ["-pthread"]}


class BuildExt(build_ext):
    """Adds our warning and optimisation flags where the compiler understands them."""

    def build_extensions(self) -> None:
        if self.compiler.compiler_type == "unix":
            for ext in self.extensions:
                ext.extra_compile_args = OPTIMISE[ext.name] + WARNINGS + THREADS.get(ext.name, [])
                ext.extra_link_args = THREADS.get(ext.name, [])
        super().build_extensions()


setup(
    ext_modules=[
        Extension("torchscope.trace._scan", ["src/torchscope/trace/_scan.c"], optional=True),
        Extension("torchscope.trace._inflate", ["src/torchscope/trace/_inflate.c"], libraries=["z"], optional=True),
        Extension("torchscope.accuracy._fused", ["src/torchscope/accuracy/_fused.c"], optional=True),
    ],
    cmdclass={"build_ext": BuildExt},
)
