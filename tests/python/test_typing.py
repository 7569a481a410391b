"""The installed package is typed: py.typed ships, mypy --strict passes on it
and on code that uses it (mypy: Debian's package, scripts/deps.sh)."""
import shutil
import subprocess

import pytest

from clientlib import codecage_pkg  # noqa: F401

USER_CODE = '''
import codecage
from codecage import SandboxSpec, ExecResult


async def a() -> int:
    async with codecage.SandboxClient() as c:
        h = await c.create(SandboxSpec("x", memory_mib=256))
        r: ExecResult = await h.exec("echo", ["a"], timeout=1.5)
        async for ev in h.shell_stream("echo"):
            print(ev.kind, ev.text)
        return r.exit_code or 0


def s() -> str:
    with codecage.sync.SandboxClient() as c:
        sess = c.handle("x").session({"llm_query": lambda p: p})
        return sess.run("1").stdout + c.run_python("1").stdout
'''


def test_mypy_strict(codecage_pkg, tmp_path):
    mypy = shutil.which("mypy")
    if mypy is None:
        pytest.fail("mypy is missing (scripts/deps.sh installs it)")
    from pathlib import Path
    site = Path(codecage_pkg.__file__).parent.parent
    (tmp_path / "user.py").write_text(USER_CODE)
    (tmp_path / "bad.py").write_text("import codecage\ncodecage.SandboxClient(url=3)\n")
    env = {"MYPYPATH": str(site), "PATH": "/usr/bin:/bin"}
    ok = subprocess.run([mypy, "--strict", "--no-incremental", "-p", "codecage"],
                        capture_output=True, text=True, env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    ok = subprocess.run([mypy, "--strict", "--no-incremental", "user.py"],
                        capture_output=True, text=True, env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = subprocess.run([mypy, "--no-incremental", "bad.py"], capture_output=True, text=True,
                         env=env, cwd=tmp_path)
    assert bad.returncode == 1 and "url" in bad.stdout, bad.stdout
