"""Fixtures of the Python client suite (imported by its test files): the client package installed into a
fresh venv (pip, offline) and imported from there, and `codecage serve`
processes (tests/serverlib.py) reached over TCP with a token and over the
Unix socket."""
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/conftest.py and serverlib.py

from conftest import BUILD, ROOT  # noqa: E402
import serverlib  # noqa: E402

TOKEN = "tok-" + os.urandom(8).hex()


def _install_client(venv: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = venv / "bin" / "pip"
    # `pip install ./clients/python` as the docs say (build isolation on);
    # --no-index proves nothing is fetched
    subprocess.run([str(pip), "install", "-q", "--no-index", str(ROOT / "clients" / "python")],
                   check=True)
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


_SITE = []  # the venv's site-packages, once per test process


@pytest.fixture(scope="session", autouse=True)
def codecage_pkg(tmp_path_factory):
    """The installed package (not the source tree) is the one under test.
    Each test module imports this fixture; the venv is made once."""
    if not _SITE:
        _SITE.append(_install_client(tmp_path_factory.mktemp("venv") / "v"))
        sys.path.insert(0, str(_SITE[0]))
    import codecage
    assert Path(codecage.__file__).is_relative_to(_SITE[0]), codecage.__file__
    assert (_SITE[0] / "codecage" / "py.typed").exists()
    return codecage


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One server with a tenant (token) for the suite."""
    if not (BUILD / "codecage").exists():
        pytest.fail(f"{BUILD}/codecage is missing: build first")
    s = serverlib.Server(tmp_path_factory.mktemp("srv"), extra={
        "pool_size": 2, "tenants": [{"name": "t1", "token": TOKEN, "operator": True}]})
    yield s
    s.kill9()


@pytest.fixture(params=["tcp", "unix"])
def url(request, server):
    if request.param == "tcp":
        return f"http://127.0.0.1:{server.port}"
    return f"unix://{server.socket_path}"


@pytest.fixture
def aclient(codecage_pkg, url):
    return codecage_pkg.SandboxClient(url, TOKEN)


@pytest.fixture
def sclient(codecage_pkg, url):
    c = codecage_pkg.sync.SandboxClient(url, TOKEN)
    yield c
    c.close()


@pytest.fixture
def name():
    return "py-" + os.urandom(5).hex()
