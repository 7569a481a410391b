"""Shared helpers of the security suite.

Every attack is a function `attack(target, ...) -> bool` ("did it work?")
run twice through the `target` fixture: against the normal build, where it
must fail, and against the unsafe debug build with the protection(s) that
stop it switched off (--debug-disable), where it must succeed. So each test
shows both that the protection holds and that it is the protection that
holds. Parametrise a test with `@pair("switch,list")` and take `target`:

    @pair("rootfs")
    def test_x(target):
        expect(target, attack_x(target))

Attacks no debug switch can make succeed (two layers of which one is not
switchable, or no switch exists) are tested against the normal build only,
with a comment that says why.
"""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PROBE_TARGET, last_json, leftover_cgroups, wait_until  # noqa: F401 (re-exported)

PY = "/usr/bin/python3"
# With the host root bound (--debug-disable rootfs) /opt is a read-only
# bind of the host's /opt, so the probe's mount point cannot be created
# there; /run is always an empty directory on the sandbox's own root.
ROOTFS_PROBE_TARGET = "/run/cage-probe"


class Target:
    """One side of a pair: `cage` (disable None) or `unsafe_cage` with the
    named protections switched off."""

    def __init__(self, cage, disable):
        self.cage = cage
        self.disable = disable

    @property
    def protected(self):
        return self.disable is None

    @property
    def probe_target(self):
        if self.disable and "rootfs" in self.disable.split(","):
            return ROOTFS_PROBE_TARGET
        return PROBE_TARGET

    def _opts(self, options):
        opts = list(options)
        if self.disable:
            opts += ["--debug-disable", self.disable]
        return opts

    def run(self, argv, *options, **kw):
        return self.cage.run(argv, *self._opts(options), **kw)

    def sh(self, script, *options, **kw):
        return self.run(["/bin/sh", "-c", script], *options, **kw)

    def probe(self, *args, options=(), **kw):
        """Runs the probe; returns the run's JSON result."""
        if self.probe_target == PROBE_TARGET:
            return self.cage.probe_run(*args, options=options, disable=self.disable, **kw)
        return self.run([self.probe_target, *args], "--ro",
                        f"{self.cage.probe}:{self.probe_target}", *options, **kw)

    def probe_json(self, *args, options=(), **kw):
        """Runs the probe; returns (its last JSON line or None, the run's result)."""
        r = self.probe(*args, options=options, **kw)
        return last_json(r["stdout"]), r

    def command(self, argv, *options, json_mode=True):
        """The full codecage command line, for callers that need Popen."""
        return [str(self.cage.binary), "run", *(["--json"] if json_mode else []),
                *self._opts(options), "--", *argv]

    def probe_command(self, *args, options=()):
        return self.command([self.probe_target, *args], "--ro",
                            f"{self.cage.probe}:{self.probe_target}", *options)

    def __repr__(self):
        return f"<{'protected' if self.protected else 'without ' + self.disable}>"


def pair(disable):
    """Parametrises a test over the protected build and the unsafe build
    with `disable` (a --debug-disable list) switched off."""
    return pytest.mark.parametrize("disable", [
        pytest.param(None, id="protected"),
        pytest.param(disable, id=f"without-{disable.replace(',', '+')}"),
    ])


@pytest.fixture
def target(request, disable):
    if disable is None:
        return Target(request.getfixturevalue("cage"), None)
    return Target(request.getfixturevalue("unsafe_cage"), disable)


def expect(target, succeeded, detail=""):
    """The verdict of one attack run."""
    if target.protected:
        assert not succeeded, f"attack succeeded against the protected build: {detail}"
    else:
        assert succeeded, (f"attack failed even with {target.disable} switched off, so the "
                           f"test does not show that protection is what stops it: {detail}")


def host_processes_with(marker):
    """Host pids whose command line contains marker."""
    found = []
    needle = marker.encode()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            if needle in (p / "cmdline").read_bytes():
                found.append(int(p.name))
        except OSError:
            pass
    return found


def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_tracked(target, argv, *options, timeout=60, **kw):
    """Runs like Target.run but with Popen, so the caller learns codecage's
    pid (cgroups are named run-PID-N). Returns (result, pid)."""
    proc = subprocess.Popen(target.command(argv, *options), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, f"codecage failed ({proc.returncode}): {err!r}"
    result = json.loads(out)
    assert result["status"] != "internal_error", result
    return result, proc.pid


def cgroups_of(pid):
    return [p for p in leftover_cgroups() if p.name.startswith(f"run-{pid}-")]


