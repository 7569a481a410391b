"""Privileges: the program runs as uid 1000 (or an image's user, root
included) of its own user namespace with
no capability in any set (bounding set included, so no exec can regain
one), no_new_privs set, and the seccomp filter on — and setuid binaries
cannot raise its privileges."""
import json
import os
import shutil
import stat

import pytest

from seclib import expect, pair, target  # noqa: F401 (fixture)

CAP_SETS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


def holds_a_capability(target):
    out, r = target.probe_json("caps")
    assert out, r
    return any(int(out[k], 16) for k in CAP_SETS), out


@pair("caps")
def test_no_capability_in_any_set(target):
    ok, out = holds_a_capability(target)
    expect(target, ok, out)
    if target.protected:
        assert out["Uid"].split() == ["1000"] * 4 and out["Gid"].split() == ["1000"] * 4


@pair("caps")
def test_uid_0_inside_holds_no_capability_either(target):
    """An image may ask for root (its User): uid 0 of the sandbox's own
    namespace, mapped to an unprivileged host id, still with no capability
    in any set — exec as uid 0 regains none from an empty bounding set."""
    out, r = target.probe_json("caps", options=("--user", "0"))
    assert out, r
    ok = any(int(out[k], 16) for k in CAP_SETS)
    expect(target, ok, out)
    if target.protected:
        assert out["Uid"].split() == ["0"] * 4, out


def runs_without_no_new_privs(target):
    out, r = target.probe_json("caps")
    assert out, r
    return out["NoNewPrivs"] != "1", out


# no_new_privs cannot be switched off alone: the filter is installed after
# the capabilities are dropped, and the kernel installs a filter without
# no_new_privs only for a CAP_SYS_ADMIN holder (launch fails with EACCES).
@pair("nnp,seccomp")
def test_no_new_privs_is_set(target):
    ok, out = runs_without_no_new_privs(target)
    expect(target, ok, out)


def runs_unfiltered(target):
    out, r = target.probe_json("caps")
    assert out, r
    return out["Seccomp"] != "2", out


@pair("seccomp")
def test_seccomp_filter_is_on(target):
    ok, out = runs_unfiltered(target)
    expect(target, ok, out)


@pytest.fixture
def setuid_probe(cage, tmp_path):
    """A setuid-root copy of the probe on the host."""
    if os.geteuid() != 0:
        pytest.skip("only root can make a setuid-root file")
    d = tmp_path / "suid"
    d.mkdir()
    d.chmod(0o755)
    exe = d / "probe-suid"
    shutil.copy(cage.probe, exe)
    os.chown(exe, 0, 0)
    exe.chmod(0o4755)
    assert exe.stat().st_mode & stat.S_ISUID
    yield exe
    exe.unlink()


# Not pairable: every mount in the sandbox is nosuid, and a root-owned file
# belongs to a uid the sandbox's user namespace does not map (the kernel
# ignores such a setuid bit); no debug switch lifts either, and even with
# nnp, caps and seccomp all off the euid stays 1000 (checked below).
@pytest.mark.parametrize("disable", [None, "nnp,caps,seccomp"],
                         ids=["protected", "still-protected-without-nnp+caps+seccomp"])
def test_setuid_root_copy_does_not_raise_privileges(cage, unsafe_cage, setuid_probe, disable):
    c = unsafe_cage if disable else cage
    r = c.run(["/mnt/probe-suid", "ids"], "--ro", f"{setuid_probe.parent}:/mnt",
              *(["--debug-disable", disable] if disable else []))
    assert r["status"] == "ok", r
    ids = json.loads(r["stdout"])
    assert (ids["ruid"], ids["euid"], ids["suid"]) == (1000, 1000, 1000), ids
    assert int(ids["CapEff"], 16) == 0 and int(ids["CapPrm"], 16) == 0, ids


def test_setuid_system_binaries_do_not_give_root(cage):
    """/usr/bin/su and passwd are setuid root on the host: inside they run
    as the sandbox user (nosuid) and cannot become root."""
    r = cage.sh("ls -l /usr/bin/su /usr/bin/passwd >&2; "
                "su -c 'id -u' root </dev/null 2>&1; passwd -S 2>&1; "
                "echo; id -u; grep NoNewPrivs /proc/self/status")
    assert r["status"] == "ok", r
    lines = r["stdout"].split("\n")
    assert "0" not in [l.strip() for l in lines], r
    assert "1000" in lines and "NoNewPrivs:\t1" in lines, r
