"""What of the host a sandbox can see or touch: its processes (signals,
/proc), its environment, the supervisor's command line, and its network.
The pid namespace hides host processes (a kill() of a host pid is ESRCH,
/proc lists only the sandbox's pids); the environment is rebuilt from
nothing; the network namespace holds only lo.

Host processes targeted here are harmless sleepers the test starts itself.
Nothing is ever sent anywhere from the unprotected builds: the network test
only looks at the interface list."""
import json
import os
import socket
import subprocess
import uuid

import pytest

from seclib import (Target, expect, host_processes_with, last_json, pair, target,  # noqa: F401
                    wait_until)


@pytest.fixture
def host_sleeper():
    p = subprocess.Popen(["/bin/sleep", "300"])
    yield p
    p.kill()
    p.wait(timeout=10)


def signals_host_process(target, pid):
    """kill(hostpid, SIGTERM). The sleeper runs as root and the sandbox as
    an unprivileged host uid, so even a visible pid answers EPERM; what
    the pid namespace guarantees is that it is not found at all."""
    out, r = target.probe_json("kill-host", str(pid))
    return out["errname"] != "ESRCH", out


def skip_same_uid_without_pidns(target):
    """As root each sandbox has a host uid of its own, so even a visible
    pid answers EPERM. A user's sandboxes all run as that user: with the
    pid namespace switched off, the attack would really kill the caller's
    process, which is the user's own to kill anyway."""
    if not target.protected and os.geteuid() != 0:
        pytest.skip("as a user, a sandbox without its pid namespace shares the caller's uid")


@pair("pidns")
def test_host_pid_cannot_be_signalled(target, host_sleeper):
    skip_same_uid_without_pidns(target)
    ok, out = signals_host_process(target, host_sleeper.pid)
    expect(target, ok, out)
    assert host_sleeper.poll() is None, "the host sleeper was killed"


def test_pid_1_and_minus_1_reach_nothing_outside(cage, host_sleeper):
    """kill(-1) hits every process the sandbox may signal: only its own."""
    r = cage.probe_run("kill", "-1", "9")
    assert host_sleeper.poll() is None
    r = cage.sh("kill -9 1 2>&1; kill -TERM 1; echo alive")
    assert "alive" in r["stdout"], r  # init ignores signals from inside
    assert host_sleeper.poll() is None


def lists_host_processes(target, sleeper_pid):
    out, r = target.probe_json("ls", "/proc")
    pids = {int(e) for e in out["entries"] if e.isdigit()}
    return sleeper_pid in pids, sorted(pids)


@pair("pidns")
def test_proc_lists_only_sandbox_processes(target, host_sleeper):
    ok, pids = lists_host_processes(target, host_sleeper.pid)
    expect(target, ok, pids)
    if target.protected:
        assert pids == [1, 2], pids  # init and the probe


def sees_host_environment(target, secret):
    out, r = target.probe_json("environ", env={**os.environ, "CODECAGE_TEST_SECRET": secret})
    return any(secret in e for e in out["env"]), out["env"]


@pair("env")
def test_host_environment_is_invisible(target):
    secret = uuid.uuid4().hex
    ok, env = sees_host_environment(target, secret)
    expect(target, ok, env)
    if target.protected:
        names = {e.split("=", 1)[0] for e in env}
        assert names == {"PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR"}, env


# init is a clone of the supervisor, so /proc/1/environ would be codecage's
# environment; init is non-dumpable, which has no switch: protected only.
def test_supervisor_environment_is_unreadable_through_init(cage):
    secret = uuid.uuid4().hex
    r = cage.run(["/bin/sh", "-c", "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"],
                 env={**os.environ, "CODECAGE_TEST_SECRET": secret})
    assert secret not in r["stdout"], r


def test_env_pass_passes_only_the_named_variable(cage):
    a, b = uuid.uuid4().hex, uuid.uuid4().hex
    r = cage.run(["/usr/bin/env"], "--env-pass", "CODECAGE_A",
                 env={**os.environ, "CODECAGE_A": a, "CODECAGE_B": b})
    assert f"CODECAGE_A={a}" in r["stdout"] and b not in r["stdout"], r


# A process that embeds codecage (or wraps it) may carry secrets in its own
# command line; init, a clone of it, shows that command line as
# /proc/1/cmdline, which procfs lets anyone read (dumpability does not
# cover cmdline). No switch: protected only.
def test_supervisor_command_line_is_invisible(cage):
    secret = uuid.uuid4().hex
    argv0 = f"codecage-supervisor --api-key={secret}"
    cmd = [argv0, "run", "--json", "--", "/bin/sh", "-c",
           "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"]
    p = subprocess.run(cmd, executable=str(cage.binary), capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["status"] == "ok", r
    assert secret not in r["stdout"], r["stdout"]


def sees_host_interfaces(target):
    out, r = target.probe_json("read", "/proc/net/dev")
    names = {l.split(":")[0].strip() for l in out["content"].splitlines()[2:]}
    return names - {"lo"} != set(), sorted(names)


@pair("netns")
def test_only_loopback_interface(target):
    ok, names = sees_host_interfaces(target)
    expect(target, ok, names)
    if target.protected:
        assert names == ["lo"]


# Traffic is only ever attempted from the protected build.
@pytest.mark.parametrize("addr", ["1.1.1.1", "8.8.8.8", "169.254.169.254", "10.0.0.1",
                                  "192.168.0.1"])
def test_no_route_out(cage, addr):
    # ENETUNREACH at once (a route would give a connection or ETIMEDOUT).
    out = last_json(cage.probe_run("connect", addr, "80")["stdout"])
    assert out["ret"] == -1 and out["errname"] == "ENETUNREACH", out


def test_loopback_is_private(cage):
    """A listener on the host's loopback is not the sandbox's loopback."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        out = last_json(cage.probe_run("connect", "127.0.0.1", str(port))["stdout"])
        assert out["ret"] == -1 and out["errname"] == "ECONNREFUSED", out
    finally:
        srv.close()


def test_abstract_unix_socket_of_host_is_unreachable(cage):
    """Abstract unix sockets belong to the network namespace."""
    name = f"\0codecage-test-{uuid.uuid4().hex}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(name)
    srv.listen(1)
    try:
        script = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
                  f"try:\n s.connect({name!r}); print('CONNECTED')\n"
                  "except OSError as e: print(e.errno)")
        r = cage.run(["/usr/bin/python3", "-c", script])
        assert "CONNECTED" not in r["stdout"], r
    finally:
        srv.close()


# ---- other sandboxes ----

@pytest.fixture
def other_sandbox(cage):
    """A second sandbox, running: a secret in its /tmp, a marked sleeper.
    Yields (host pid of the sleeper, secret)."""
    marker, secret = f"codecage-other-{uuid.uuid4().hex}", uuid.uuid4().hex
    probe = "/opt/probe/cage-probe"
    cmd = Target(cage, None).command(
        ["/bin/sh", "-c", f"echo {secret} > /tmp/secret; exec {probe} sleep 60 {marker}"],
        "--ro", f"{cage.probe}:{probe}", "--timeout", "90")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    needle = f"sleep\0{60}\0{marker}"
    pids = wait_until(lambda: host_processes_with(needle), timeout=10)
    try:
        assert pids, "the other sandbox did not start"
        yield pids[0], secret
        assert host_processes_with(needle) == pids, "the other sandbox's process was killed"
    finally:
        for pid in host_processes_with(needle):
            os.kill(pid, 9)  # ends the program: codecage tears down normally
        proc.communicate(timeout=30)


def finds_other_sandbox(target, pid):
    out, r = target.probe_json("kill", str(pid), "9")
    return out["errname"] != "ESRCH", out


@pair("pidns")
def test_other_sandbox_is_invisible(target, other_sandbox):
    skip_same_uid_without_pidns(target)
    pid, _ = other_sandbox
    ok, out = finds_other_sandbox(target, pid)
    expect(target, ok, out)


# Each concurrent sandbox runs as a distinct host uid, so even without the
# pid namespace (B's processes visible) A may not enter B's root through
# /proc/PID/root nor signal it (checked by the fixture).
@pytest.mark.parametrize("disable", [None, "pidns"],
                         ids=["protected", "still-protected-without-pidns"])
def test_other_sandbox_files_are_unreachable(cage, unsafe_cage, other_sandbox, disable):
    pid, secret = other_sandbox
    t = Target(unsafe_cage, disable) if disable else Target(cage, None)
    out, r = t.probe_json("read", f"/proc/{pid}/root/tmp/secret")
    assert out["ret"] == -1 and out["errname"] in ("ENOENT", "EACCES"), out
    assert secret not in r["stdout"]
