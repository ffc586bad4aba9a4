"""Builds the wheel with setuptools alone when the `wheel` package is missing.

setuptools before 70.1 (the one `python3 -m venv` installs on Python 3.11) needs the separate `wheel`
package for its `bdist_wheel` command, and `pip install --no-build-isolation --no-index` cannot fetch
it. Then this file supplies a `bdist_wheel` for this pure-Python, one-module project: setuptools'
own `build_py` and `egg_info` do the work, and the result is zipped in the wheel format (PEP 427).
Where `wheel` or a newer setuptools provides `bdist_wheel`, that one is used.
"""

import base64
import hashlib
import os
import shutil
import zipfile

from setuptools import Command, setup


def _has_bdist_wheel():
    try:
        import setuptools.command.bdist_wheel  # noqa: F401  (setuptools >= 70.1)
        return True
    except ImportError:
        pass
    try:
        import wheel.bdist_wheel  # noqa: F401
        return True
    except ImportError:
        return False


class bdist_wheel(Command):  # noqa: N801 (the command's name is fixed by setuptools)
    """A pure-Python wheel: the built modules plus a .dist-info folder."""

    description = "build a pure-Python wheel (fallback without the 'wheel' package)"
    user_options = [("dist-dir=", "d", "folder to put the wheel in")]

    def initialize_options(self):
        self.dist_dir = None

    def finalize_options(self):
        self.dist_dir = self.dist_dir or "dist"

    def _names(self):
        name = self.distribution.get_name().replace("-", "_")
        return name, self.distribution.get_version()

    def egg2dist(self, egg_info_dir, dist_info_dir):
        """What setuptools' dist_info command asks of bdist_wheel: the .dist-info folder from .egg-info."""
        os.makedirs(dist_info_dir, exist_ok=True)
        shutil.copyfile(os.path.join(egg_info_dir, "PKG-INFO"), os.path.join(dist_info_dir, "METADATA"))
        for extra in ("top_level.txt", "entry_points.txt"):
            source = os.path.join(egg_info_dir, extra)
            if os.path.exists(source):
                shutil.copyfile(source, os.path.join(dist_info_dir, extra))

    def run(self):
        self.run_command("build_py")
        build_lib = self.get_finalized_command("build_py").build_lib
        self.run_command("egg_info")
        egg_info_dir = self.get_finalized_command("egg_info").egg_info
        name, version = self._names()
        dist_info = f"{name}-{version}.dist-info"
        os.makedirs(self.dist_dir, exist_ok=True)
        wheel_path = os.path.join(self.dist_dir, f"{name}-{version}-py3-none-any.whl")
        records = []

        def add(archive, arcname, data):
            archive.writestr(arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{arcname},sha256={digest},{len(data)}")

        with zipfile.ZipFile(wheel_path, "w", zipfile.ZIP_DEFLATED) as archive:
            for folder, _, files in os.walk(build_lib):
                for file in sorted(files):
                    path = os.path.join(folder, file)
                    with open(path, "rb") as f:
                        add(archive, os.path.relpath(path, build_lib).replace(os.sep, "/"), f.read())
            with open(os.path.join(egg_info_dir, "PKG-INFO"), "rb") as f:
                add(archive, f"{dist_info}/METADATA", f.read())
            wheel = "Wheel-Version: 1.0\nGenerator: marina-client setup.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            add(archive, f"{dist_info}/WHEEL", wheel.encode())
            top_level = os.path.join(egg_info_dir, "top_level.txt")
            if os.path.exists(top_level):
                with open(top_level, "rb") as f:
                    add(archive, f"{dist_info}/top_level.txt", f.read())
            records.append(f"{dist_info}/RECORD,,")
            archive.writestr(f"{dist_info}/RECORD", "\n".join(records) + "\n")


setup(cmdclass={} if _has_bdist_wheel() else {"bdist_wheel": bdist_wheel})
