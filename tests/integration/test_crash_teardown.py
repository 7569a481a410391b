"""kill -9 of the server in the middle of a teardown, at each of its steps.

The unsafe debug build stops for good at a named point when
CODECAGE_DEBUG_PAUSE names it (src/util/debug_pause.h); the test waits for
the server to say so, SIGKILLs it there, starts it again (the normal way) and
checks that nothing of the dead server is left: no process, no frozen
process, no cgroup, no held uid slot, and after a clean stop no mount and no
loop device. The point "cgroup-frozen" forces the v1 freeze-kill-thaw path
and stops between the freeze and the thaw: the dead server's group is frozen
with its SIGKILLs pending, which is what the start-up sweep must undo."""
import fcntl
import os
import threading

import pytest

from conftest import DEBUG_BUILD, wait_until
from serverlib import Server, cgroups_of_server, pids_of_server
from test_service import loops_backed_by, mounts_under

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's workspaces need root")

UID_SLOT_BASE = 0x60000000
UID_SLOT_FILE = "/run/codecage/uid-slots/locks"  # byte N locked: slot N held
FREEZER = "/sys/fs/cgroup/freezer/codecage"

# (pause point, what starts the teardown)
CASES = [
    ("cgroup-frozen", "remove"),
    ("cgroup-frozen", "exec-timeout"),
    ("box-killed", "remove"),
    ("box-cgroup-removed", "remove"),
    ("sandbox-stopped", "remove"),
    ("workspace-unmounted", "remove"),
]


def frozen_groups_of(server_pid):
    """v1 freezer groups of that server that are FROZEN (sub-groups too)."""
    found = []
    if not os.path.isdir(FREEZER):
        return found
    for root, _, files in os.walk(FREEZER):
        if f"/run-{server_pid}-" in root + "/" and "freezer.state" in files:
            with open(os.path.join(root, "freezer.state")) as f:
                if f.read().strip() != "THAWED":
                    found.append(root)
    return found


def uid_slots_of(pids):
    slots = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if uid >= UID_SLOT_BASE:
            slots.add(uid - UID_SLOT_BASE)
    return slots


def slot_is_free(slot):
    with open(UID_SLOT_FILE, "r+") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
        except OSError:  # EAGAIN/EACCES: a codecage process holds it
            return False
        fcntl.lockf(f, fcntl.LOCK_UN, 1, slot)
        return True


def start_teardown(server, how):
    """Starts the teardown on a thread: the server never answers it."""
    if how == "remove":
        call = ("DELETE", "/v1/sandboxes/s", None)
    else:
        call = ("POST", "/v1/sandboxes/s/exec", {"script": "sleep 1000", "timeout_s": 1})
    t = threading.Thread(target=lambda: _ignore_errors(server.request, *call, timeout=120),
                         daemon=True)
    t.start()
    return t


def _ignore_errors(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except OSError:
        pass


@pytest.mark.parametrize("point,how", CASES, ids=[f"{p}-{h}" for p, h in CASES])
def test_kill9_during_teardown_leaves_nothing(tmp_path, point, how):
    if point == "cgroup-frozen" and not os.path.isdir(FREEZER.rsplit("/", 1)[0]):
        # cgroup v2 kills with cgroup.kill: there is no freeze to stop in.
        pytest.skip("no cgroup v1 freezer: the freeze-kill-thaw path is v1's")
    env = dict(os.environ, CODECAGE_DEBUG_PAUSE=point)
    server = Server(tmp_path, extra={"pool_size": 0}, build=DEBUG_BUILD, env=env)
    second_pid = None
    try:
        server.ok("POST", "/v1/sandboxes", {"name": "s"})
        server.ok("POST", "/v1/sandboxes/s/exec", {"script": "echo precious > data.txt; sync"})
        server.ok("POST", "/v1/sandboxes/s/python", {"code": "x = 1"})
        dead_pid = server.proc.pid
        slots = uid_slots_of(pids_of_server(dead_pid))
        assert slots, "the sandbox runs as a uid slot of its own"
        start_teardown(server, how)
        marker = f"debug pause at {point}"
        assert wait_until(lambda: marker in server.log_text(), timeout=60), server.log_text()
        if point == "cgroup-frozen":
            assert frozen_groups_of(dead_pid), "the case needs a group left frozen"
        server.kill9()

        server.env = None
        server.start()
        second_pid = server.proc.pid
        assert wait_until(lambda: not pids_of_server(dead_pid), timeout=20), \
            f"processes of the dead server left: {pids_of_server(dead_pid)}"
        assert not frozen_groups_of(dead_pid), "frozen groups of the dead server left"
        assert not cgroups_of_server(dead_pid), "cgroups of the dead server left"
        assert all(slot_is_free(s) for s in slots), "a uid slot of the dead server is held"
        # The sandbox is gone or, if the remove had not got that far, intact.
        r = server.request("GET", "/v1/sandboxes/s")
        if r.status == 200:
            out = server.ok("POST", "/v1/sandboxes/s/exec", {"script": "cat data.txt"})
            assert out["stdout"] == "precious\n"
            server.ok("DELETE", "/v1/sandboxes/s")
        else:
            assert r.status == 404, (r.status, r.body)
    finally:
        server.stop()
    assert not mounts_under(tmp_path), "workspace mounts left on the host"
    assert not loops_backed_by(tmp_path), "loop devices left bound to workspace images"
    if second_pid:
        assert not cgroups_of_server(second_pid), "cgroups left after the server stopped"
