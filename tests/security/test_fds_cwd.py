"""What codecage's caller hands down without meaning to: inheritable file
descriptors (a host directory and a host file) and its working directory.
The sandbox starts with fds 0-2 only and in /workspace. With `fds` switched
off the leaked descriptors work: the file is read, the directory opens its
files, and fchdir() to it walks out of the sandbox root to the host's /."""
import json
import os
import subprocess

import pytest

from seclib import Target, expect, last_json, pair, target  # noqa: F401 (fixture)


@pytest.fixture
def leaked(host_canary):
    """Inheritable fds on the canary's directory and on the canary."""
    canary, secret = host_canary
    d = os.open(canary.parent, os.O_RDONLY | os.O_DIRECTORY)
    f = os.open(canary, os.O_RDONLY)
    yield d, f, canary, secret
    os.close(d)
    os.close(f)


def _probe_with_fds(target, fds, *args, cwd=None):
    p = subprocess.run(target.probe_command(*args), capture_output=True, pass_fds=fds,
                       cwd=cwd, timeout=30)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["status"] != "internal_error", r
    return last_json(r["stdout"]), r


def sees_leaked_fds(target, leaked):
    d, f, canary, _ = leaked
    out, r = _probe_with_fds(target, (d, f), "fds")
    targets = [e["target"] for e in out["fds"]]
    return any(str(canary.parent) in t for t in targets), out


@pair("fds")
def test_only_stdio_is_inherited(target, leaked):
    ok, out = sees_leaked_fds(target, leaked)
    expect(target, ok, out)
    if target.protected:
        assert [e["fd"] for e in out["fds"]] == [0, 1, 2], out


def reads_through_leaked_file_fd(target, leaked):
    d, f, _, secret = leaked
    out, r = _probe_with_fds(target, (d, f), "fd-read", str(f))
    return secret in out.get("content", ""), out


@pair("fds")
def test_leaked_file_fd_is_unusable(target, leaked):
    ok, out = reads_through_leaked_file_fd(target, leaked)
    expect(target, ok, out)


def opens_beneath_leaked_dir_fd(target, leaked):
    d, f, canary, secret = leaked
    out, r = _probe_with_fds(target, (d, f), "fd-read", str(d), canary.name)
    return secret in out.get("content", ""), out


@pair("fds")
def test_leaked_dir_fd_is_unusable(target, leaked):
    ok, out = opens_beneath_leaked_dir_fd(target, leaked)
    expect(target, ok, out)


def escapes_through_leaked_dir_fd(target, leaked):
    """fchdir(leaked dir) then ".." x 64: the cwd is outside the sandbox
    root, so ".." never meets it and ends at the host's /."""
    d, f, _, _ = leaked
    out, r = _probe_with_fds(target, (d, f), "fd-escape", str(d))
    host_root = set(os.listdir("/"))
    entries = set(out.get("entries", []))
    return out["ret"] == 0 and entries == host_root, out


@pair("fds")
def test_fchdir_escape_through_leaked_fd(target, leaked):
    ok, out = escapes_through_leaked_dir_fd(target, leaked)
    expect(target, ok, out)


# The working directory is always reset (pivot_root, then chdir to the
# workdir): no debug switch keeps the caller's, so protected build only.
def test_callers_cwd_is_not_inherited(cage, host_canary):
    canary, secret = host_canary
    t = Target(cage, None)
    out, r = _probe_with_fds(t, (), "cwd", cwd=canary.parent)
    assert out["cwd"] == "/workspace" and out["link"] == "/workspace", out
    assert canary.name not in out["entries"], out
    p = subprocess.run(t.command(["/bin/sh", "-c", "cat canary.txt ./canary.txt 2>&1; pwd"]),
                       cwd=canary.parent, capture_output=True, timeout=30)
    r = json.loads(p.stdout)
    assert secret not in r["stdout"] and r["stdout"].endswith("/workspace\n"), r
