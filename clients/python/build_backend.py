"""A PEP 517 build backend with only the standard library, so that
`pip install ./clients/python` works offline with any pip and setuptools
(older setuptools cannot build wheels without the separate `wheel` package).
It packs src/codecage/ into a pure-Python wheel."""
from __future__ import annotations

import base64
import hashlib
import os
import tarfile
import zipfile

NAME = "codecage"
VERSION = "0.1.0"
HERE = os.path.dirname(os.path.abspath(__file__))
DIST = f"{NAME}-{VERSION}"


def _metadata() -> str:
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n"
            "Summary: Python client for the codecage sandbox server\n"
            "License: Apache-2.0\nRequires-Python: >=3.9\n"
            "Description-Content-Type: text/markdown\n\n" + readme)


_WHEEL = "Wheel-Version: 1.0\nGenerator: codecage build_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _package_files():
    root = os.path.join(HERE, "src", NAME)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith((".py", ".typed")):
                full = os.path.join(dirpath, fn)
                yield full, os.path.relpath(full, os.path.join(HERE, "src")).replace(os.sep, "/")


def _record_line(arc: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arc},sha256={digest},{len(data)}"


def _write_dist_info(add) -> None:
    add(f"{DIST}.dist-info/METADATA", _metadata().encode())
    add(f"{DIST}.dist-info/WHEEL", _WHEEL.encode())
    add(f"{DIST}.dist-info/top_level.txt", f"{NAME}\n".encode())


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = f"{DIST}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        def add(arc: str, data: bytes) -> None:
            z.writestr(arc, data)
            records.append(_record_line(arc, data))
        for full, arc in _package_files():
            with open(full, "rb") as f:
                add(arc, f.read())
        _write_dist_info(add)
        record = f"{DIST}.dist-info/RECORD"
        z.writestr(record, "\n".join(records + [f"{record},,"]) + "\n")
    return name


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    def add(arc: str, data: bytes) -> None:
        path = os.path.join(metadata_directory, arc)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    _write_dist_info(add)
    return f"{DIST}.dist-info"


def build_sdist(sdist_directory, config_settings=None):
    name = f"{DIST}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ("pyproject.toml", "build_backend.py", "README.md"):
            t.add(os.path.join(HERE, rel), f"{DIST}/{rel}")
        for full, arc in _package_files():
            t.add(full, f"{DIST}/src/{arc}")
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []
