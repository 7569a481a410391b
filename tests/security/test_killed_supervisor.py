"""A supervisor killed with SIGKILL (`codecage run`, `codecage serve`): its
sandboxes die with it (the parent-death signal of their pid 1), and its
cgroups go within about a second too — removed by its reaper, a small
process that waits for the supervisor to be gone — not only at the next
codecage start. With the reaper off (the unsafe build,
CODECAGE_DEBUG_DISABLE=reaper) the groups stay. As root, or as a user with
a delegated cgroup v2 group in CODECAGE_CGROUP_PARENT (the run's groups are
made under it, and its reaper removes them there); the server's sandboxes
need root."""
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BUILD, DEBUG_BUILD
from serverlib import Server

PARENT = os.environ.get("CODECAGE_CGROUP_PARENT", "")
DELEGATED = os.geteuid() != 0 and PARENT.startswith("/sys/fs/cgroup/")
pytestmark = pytest.mark.skipif(os.geteuid() != 0 and not DELEGATED,
                                reason="cgroups need root here, or a delegated cgroup v2 group "
                                "in CODECAGE_CGROUP_PARENT")

LEFT_AFTER_S = 3  # "about a second", with room for a busy machine


def groups_of(pid):
    if DELEGATED:
        return [str(p) for p in Path(PARENT).glob(f"run-{pid}-*")]
    return [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/codecage/run-{pid}-*")] + \
        [str(p) for p in Path("/sys/fs/cgroup").glob(f"codecage/run-{pid}-*")]


def kill_and_keep_zombie(proc):
    """SIGKILL, but not reaped yet: while the pid is a zombie no other
    codecage start counts its groups as stale, so only the reaper can have
    removed them (other tests may run codecage on this machine meanwhile)."""
    proc.kill()
    stat = Path(f"/proc/{proc.pid}/stat")
    deadline = time.monotonic() + 10
    while stat.read_text().split(")")[-1].split()[0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)


def wait_until_gone(pid):
    deadline = time.monotonic() + LEFT_AFTER_S
    while groups_of(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return groups_of(pid)


@pytest.fixture(params=["protected", "reaper"])
def build(request):
    if request.param == "protected":
        return BUILD, None
    return DEBUG_BUILD, dict(os.environ, CODECAGE_DEBUG_DISABLE="reaper")


def sweep_later(pid, build_dir):
    """The unsafe build left groups behind on purpose: the next start's sweep
    removes them (after the sandbox processes are gone)."""
    time.sleep(0.5)
    subprocess.run([str(build_dir / "codecage"), "run", "--", "/bin/true"], check=True,
                   capture_output=True, timeout=60)


def test_killed_run_leaves_no_cgroup(build):
    build_dir, env = build
    proc = subprocess.Popen([str(build_dir / "codecage"), "run", "--", "/bin/sleep", "60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 20
    while not groups_of(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert groups_of(proc.pid), "the run never made its cgroup"
    kill_and_keep_zombie(proc)
    left = wait_until_gone(proc.pid)
    proc.wait()
    if env is None:
        assert left == [], left
    else:
        assert left, "without the reaper the groups should outlive the supervisor"
        sweep_later(proc.pid, build_dir)
        assert groups_of(proc.pid) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")
def test_killed_server_leaves_no_cgroup(build, tmp_path):
    build_dir, env = build
    server = Server(tmp_path, build=build_dir, env=env, extra={"pool_size": 0})
    try:
        server.ok("POST", "/v1/sandboxes", {"name": "kept"})
        pid = server.proc.pid
        assert groups_of(pid), "the sandbox has no cgroup"
        kill_and_keep_zombie(server.proc)
        left = wait_until_gone(pid)
        server.proc.wait()
    finally:
        if server.proc.poll() is None:
            server.stop()
        server.log.close()
    if env is None:
        assert left == [], left
    else:
        assert left, "without the reaper the groups should outlive the server"
        sweep_later(pid, build_dir)
        assert groups_of(pid) == []
