"""Per-user kernel counters. The kernel counts inotify instances and
watches, fanotify groups, namespaces (and more) per user, up every level of
user namespaces to the owner of each: a sandbox whose user namespace root
owned would spend root's allowance on the host (128 inotify instances by
default), leaving host root unable to create one. As root, codecage creates
each sandbox's user namespace as that sandbox's own host uid, so what it
holds is charged to that uid, and sets tight limits inside it
(/proc/sys/user/max_*). The attack holds every inotify instance it can get
and host root then asks for one; with the owner switched back to root
(`userns-owner`, the unsafe build) root is refused."""
import ctypes
import os
import subprocess
import time

import pytest

from seclib import expect, pair, target  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the per-sandbox uid needs root")

HOLD = """
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
held = []
while len(held) < 4096:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    held.append(fd)
print(len(held), ctypes.get_errno(), flush=True)
time.sleep(60)
"""

libc = ctypes.CDLL(None, use_errno=True)


def root_can_make_an_inotify_instance():
    fd = libc.inotify_init1(0o2000000)  # IN_CLOEXEC
    if fd < 0:
        return False, ctypes.get_errno()
    os.close(fd)
    return True, 0


def starves_host_root(target):
    """The sandbox holds all it can; (root refused, what the sandbox got)."""
    cmd = target.command(["/usr/bin/python3", "-c", HOLD], json_mode=False)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().split()
        assert line, proc.stderr.read()
        ok, err = root_can_make_an_inotify_instance()
        return not ok, {"sandbox held": int(line[0]), "root errno": err}
    finally:
        proc.kill()
        proc.wait()
        time.sleep(0.2)  # the sandbox's instances are released with it


@pair("userns-owner")
def test_inotify_instances_are_the_sandboxes_own(target):
    starved, detail = starves_host_root(target)
    expect(target, starved, detail)
    if target.protected:
        assert detail["sandbox held"] == 64, detail  # its own namespace's limit


def test_limits_inside_the_sandbox_user_namespace(cage):
    r = cage.sh("for f in max_inotify_instances max_inotify_watches max_user_namespaces; do "
                "printf '%s ' $(cat /proc/sys/user/$f); done")
    assert r["stdout"].split() == ["64", "16384", "0"], r


def test_two_sandboxes_at_their_limits_do_not_meet(cage):
    """Two sandboxes are different users on the host: each gets its own 64."""
    procs = [subprocess.Popen([str(cage.binary), "run", "--", "/usr/bin/python3", "-c", HOLD],
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        got = [int(p.stdout.readline().split()[0]) for p in procs]
        assert got == [64, 64], got
    finally:
        for p in procs:
            p.kill()
            p.wait()
