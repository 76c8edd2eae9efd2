"""Build the optional C scanner (torchscope.trace._scan); all metadata lives in pyproject.toml.

The extension only makes loading Kineto JSON faster: the reader falls back to msgspec when it is
missing, so a failed compile (no compiler, an unusual platform) must not fail the install.
"""

from __future__ import annotations

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExt(build_ext):
    """Adds our warning and optimisation flags where the compiler understands them."""

    def build_extensions(self) -> None:
        if self.compiler.compiler_type == "unix":
            for ext in self.extensions:
                ext.extra_compile_args = ["-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers"]
        super().build_extensions()


setup(
    ext_modules=[
        Extension("torchscope.trace._scan", ["src/torchscope/trace/_scan.c"], optional=True),
    ],
    cmdclass={"build_ext": BuildExt},
)
