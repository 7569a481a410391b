"""Outliving the sandbox. A daemon that double-forks and calls setsid() is
re-parented to the sandbox's init and sits in a session of its own; it must
be gone when codecage returns — after a normal exit, a timeout, an OOM or
an output flood. Two layers end it: the pid namespace (init's exit kills
every process in it) and the cgroup kill. Only with both off (`pidns` and
`limits`, which drops the cgroup) does it survive; the survivors are found
on the host by a unique marker in their argv and killed by the test."""
import subprocess
import time
import uuid

import pytest

from seclib import (Target, expect, host_processes_with, kill_all, pair, target,  # noqa: F401
                    wait_until)

PROBE = "/opt/probe/cage-probe"


@pytest.fixture
def marker():
    m = f"codecage-survivor-{uuid.uuid4().hex}"
    yield m
    kill_all(host_processes_with(m))


def sleepers(marker):
    """Host pids of the probe's marked sleepers (not codecage itself, whose
    own command line holds the marker too while it runs)."""
    return host_processes_with(f"sleep\0{30}\0{marker}")


def survives(target, marker, script, *options):
    """Runs script (PROBE and MARKER substituted); True if a process with
    marker in its argv is alive on the host after codecage returned."""
    script = script.replace("PROBE", target.probe_target).replace("MARKER", marker)
    r = target.run(["/bin/sh", "-c", script], "--ro",
                   f"{target.cage.probe}:{target.probe_target}", *options, timeout=60)
    # Give a straggler the chance to show up (or a dying one to go).
    time.sleep(0.3)
    return bool(sleepers(marker)), r


SCENARIOS = {
    "exit": ("PROBE daemon 30 MARKER; exit 0", ()),
    "timeout": ("PROBE daemon 30 MARKER; exec sleep 60", ("--timeout", "1")),
    "oom": ("PROBE daemon 30 MARKER; PROBE memory 256", ("--memory", "32")),
    "output-flood": ("PROBE daemon 30 MARKER; PROBE flood 100", ("--output-stop", "100000")),
    "background-job": ("PROBE sleep 30 MARKER & exit 0", ()),
}


@pair("pidns,limits")
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_daemon_does_not_survive_the_run(target, marker, scenario):
    script, options = SCENARIOS[scenario]
    if scenario == "oom" and not target.protected:
        script = script.replace("memory 256", "memory 16")  # no memory cgroup: stay small
    ok, r = survives(target, marker, script, *options)
    expect(target, ok, r)


@pair("pidns,limits")
def test_many_daemons_do_not_survive(target, marker):
    ok, r = survives(target, marker,
                     "for i in 1 2 3 4 5 6 7 8; do PROBE daemon 30 MARKER; done; exit 0")
    expect(target, ok, r)
    if target.protected:
        assert r["status"] == "ok", r


def test_codecage_returns_promptly_despite_daemon(cage, marker):
    """The daemon's end is not waited for: the run takes no longer than
    the program (the daemon holds no output pipe; init's exit kills it)."""
    t0 = time.monotonic()
    survives_, r = survives(Target(cage, None), marker, "PROBE daemon 30 MARKER")
    assert not survives_
    assert time.monotonic() - t0 < 30  # the daemon's own life


# Each layer alone ends the daemon: the pid namespace (init's exit) without
# the cgroup, and the cgroup kill without the pid namespace.
@pytest.mark.parametrize("disable", ["pidns", "limits"],
                         ids=["still-protected-without-pidns", "still-protected-without-limits"])
def test_either_layer_alone_ends_the_daemon(unsafe_cage, marker, disable):
    ok, r = survives(Target(unsafe_cage, disable), marker, "PROBE daemon 30 MARKER; exit 0")
    assert not ok, r


def survives_supervisor_kill(target, marker):
    """codecage itself is SIGKILLed mid-run (no teardown runs): init dies by
    its parent-death signal, which ends its pid namespace. Without a pid
    namespace the daemon outlives it until a later codecage start sweeps
    the dead supervisor's cgroup; without the cgroup too, nothing ends it."""
    # Keep the program alive after starting the daemon, so the kill lands
    # while the run is in progress.
    script = f"{target.probe_target} daemon 30 {marker}; exec sleep 60"
    cmd = target.command(["/bin/sh", "-c", script], "--ro",
                         f"{target.cage.probe}:{target.probe_target}")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        started = wait_until(lambda: sleepers(marker) or proc.poll() is not None, timeout=10)
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the run ended before the kill: {out!r} {err!r}")
        assert started, "daemon never started"
        proc.kill()
        proc.wait(timeout=10)
        # Survivors, if any, after the kernel had time to tear the pid ns down.
        gone = wait_until(lambda: not sleepers(marker), timeout=3)
        return not gone
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pair("pidns,limits")
def test_daemon_dies_with_a_killed_supervisor(target, marker):
    ok = survives_supervisor_kill(target, marker)
    expect(target, ok, sleepers(marker))
