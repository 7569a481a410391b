"""`codecage doctor` end to end: one verdict line per check with a fix for
anything not ok, the --json document, the cgroup backend this host really
has, the rlimit fallback warning, exit codes and usage errors."""
import glob
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CHECKS = [
    "kernel",
    "userns",
    "namespaces",
    "seccomp",
    "cgroup",
    "cgroup-controllers",
    "cgroup-delegation",
    "cgroup-moves",
    "overlayfs",
    "tmpfs",
    "pid-limits",
    "uid-slots",
    "python3",
    "workspaces",
]
TEXT_VERDICT = {"ok": "ok", "warn": "warn", "fail": "FAIL"}


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODECAGE_CGROUP")}
    env.update(extra)
    return env


def doctor(cage, *args, env=None, **kw):
    return subprocess.run([str(cage.binary), "doctor", *args], capture_output=True, text=True,
                          timeout=60, env=env if env is not None else clean_env(), **kw)


def lines_by_name(stdout):
    """The verdict lines of the text output, by check name."""
    found = {}
    for line in stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[0] in ("ok", "warn", "FAIL"):
            found[parts[1]] = (parts[0], line)
    return found


def doctor_json(cage, *args, env=None):
    p = doctor(cage, "--json", *args, env=env)
    return p, json.loads(p.stdout)


def mounted(path):
    """Filesystem type mounted exactly at path, from /proc/self/mounts."""
    fstype = None
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[1] == path:
                fstype = fields[2]
    return fstype


# ---- this host ----

def test_doctor_passes_on_this_host(cage):
    p = doctor(cage)
    assert p.returncode == 0, p.stdout + p.stderr
    found = lines_by_name(p.stdout)
    assert list(found) == CHECKS, p.stdout
    assert not any(v == "FAIL" for v, _ in found.values()), p.stdout
    assert "14 checks:" in p.stdout and "0 FAIL" in p.stdout


def test_cgroup_backend_is_the_one_this_host_has(cage):
    """Independently of doctor: a v2 mount at /sys/fs/cgroup means v2; v1
    memory and pids hierarchies (this test machine) mean v1 with both."""
    if os.geteuid() != 0:
        pytest.skip("as non-root, v1 hierarchies are not usable and v2 needs delegation")
    found = lines_by_name(doctor(cage).stdout)
    verdict, line = found["cgroup"]
    if mounted("/sys/fs/cgroup") == "cgroup2":
        assert verdict == "ok" and " v2, " in line, line
        return
    assert mounted("/sys/fs/cgroup/memory") == "cgroup", "expected a v1 or v2 host"
    assert mounted("/sys/fs/cgroup/pids") == "cgroup"
    assert verdict == "ok", line
    assert " v1, " in line and "/sys/fs/cgroup/<controller>/codecage" in line, line
    if mounted("/sys/fs/cgroup/unified") == "cgroup2":
        assert "hybrid host" in line and "/sys/fs/cgroup/unified" in line, line
    verdict, line = found["cgroup-controllers"]
    listed = line.split("v1:", 1)[1].split(";")[0]
    assert {"memory", "pids"} <= {c.strip() for c in listed.split(",")}, line
    assert found["cgroup-delegation"][0] == "ok"


def test_namespace_and_seccomp_probes_really_ran(cage):
    found = lines_by_name(doctor(cage).stdout)
    verdict, line = found["namespaces"]
    assert verdict == "ok" and "clone3" in line and " ms)" in line, line
    assert "pivot_root" in line and "seccomp" in line, line
    if os.geteuid() == 0:
        assert "idmapped mount" in line, line
    verdict, line = found["seccomp"]
    assert verdict == "ok" and "filters (" in line and "install and are in force" in line, line


def test_cgroup_moves_are_timed_and_leave_nothing(cage):
    """A move into a scratch group is timed; past 2 ms the check warns with
    the mount option that removes the wait."""
    p, doc = doctor_json(cage)
    c = {c["name"]: c for c in doc["checks"]}["cgroup-moves"]
    if c["detail"].startswith("no cgroup backend"):
        return
    m = re.search(r"takes (\d+\.\d+) ms", c["detail"])
    assert m, c
    assert (c["status"] == "warn") == (float(m.group(1)) >= 2.0), c
    if c["status"] == "warn":
        assert "favordynmods" in c["fix"], c
    # glob skips directories that vanish under it (other servers on the
    # machine make and remove their groups meanwhile); rglob does not.
    left = glob.glob("/sys/fs/cgroup/**/run-*-999999", recursive=True)
    assert left == [], left


# ---- --json ----

def test_json_has_every_check_and_matches_the_text(cage):
    p, doc = doctor_json(cage)
    assert p.returncode == 0, p.stderr
    assert set(doc) == {"ok", "checks"}
    assert doc["ok"] is True
    assert [c["name"] for c in doc["checks"]] == CHECKS
    for c in doc["checks"]:
        assert set(c) == {"name", "status", "detail", "fix"}, c
        assert c["status"] in ("ok", "warn", "fail"), c
        assert c["detail"], c
        # A fix exactly for what is not ok.
        assert (c["fix"] is None) == (c["status"] == "ok"), c
    text = lines_by_name(doctor(cage).stdout)
    assert {c["name"]: TEXT_VERDICT[c["status"]] for c in doc["checks"]} == \
        {name: v for name, (v, _) in text.items()}


def test_failure_exits_1_and_json_ok_is_false(cage):
    env = clean_env(CODECAGE_CGROUP="bogus")
    p = doctor(cage, env=env)
    assert p.returncode == 1, p.stdout
    verdict, line = lines_by_name(p.stdout)["cgroup"]
    assert verdict == "FAIL" and "CODECAGE_CGROUP=bogus" in line and "fix: " in line, line
    p, doc = doctor_json(cage, env=env)
    assert p.returncode == 1
    assert doc["ok"] is False
    cg = next(c for c in doc["checks"] if c["name"] == "cgroup")
    assert cg["status"] == "fail" and "CODECAGE_CGROUP" in cg["fix"], cg


# ---- the rlimit fallback ----

def test_cgroup_none_warns_that_limits_fall_back_to_rlimits(cage):
    env = clean_env(CODECAGE_CGROUP="none")
    p = doctor(cage, env=env)
    assert p.returncode == 0, p.stdout  # a warning is not a failure
    verdict, line = lines_by_name(p.stdout)["cgroup"]
    assert verdict == "warn", line
    assert "fall back to rlimits" in line and "CODECAGE_CGROUP=none" in line, line
    fix = line.split("; fix: ", 1)[1]
    assert "unset CODECAGE_CGROUP" in fix, line
    p, doc = doctor_json(cage, env=env)
    cg = next(c for c in doc["checks"] if c["name"] == "cgroup")
    assert cg["status"] == "warn" and "rlimits" in cg["detail"] and cg["fix"], cg
    assert doc["ok"] is True


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to become another user")
def test_as_an_unprivileged_user(cage):
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        str(cage.binary), "doctor", "--json"],
                       capture_output=True, text=True, timeout=60, env=clean_env(), cwd="/")
    doc = json.loads(p.stdout)
    by_name = {c["name"]: c for c in doc["checks"]}
    assert list(by_name) == CHECKS
    assert by_name["uid-slots"]["status"] == "ok"
    assert by_name["uid-slots"]["detail"].startswith("not root")
    cg = by_name["cgroup"]
    if cg["status"] != "ok":
        # No delegated cgroup for nobody: say so, and how to get one.
        assert "rlimits" in cg["detail"], cg
        assert "root" in cg["fix"] or "systemd-run" in cg["fix"], cg
    assert p.returncode == (0 if doc["ok"] else 1)


# ---- usage ----

def test_unknown_option_is_a_clear_error(cage):
    p = doctor(cage, "--bogus")
    assert p.returncode == 125
    assert p.stdout == ""
    assert "unknown option" in p.stderr and '"--bogus"' in p.stderr, p.stderr
    p = doctor(cage, "extra")
    assert p.returncode == 125
    assert 'unexpected argument "extra"' in p.stderr, p.stderr


def test_help_lists_every_check(cage):
    p = doctor(cage, "--help")
    assert p.returncode == 0
    assert p.stdout.startswith("usage: codecage doctor [--json]")
    for name in CHECKS:
        assert f"\n  {name} " in p.stdout, name


# ---- the namespaces check is the real launch ----

@pytest.mark.parametrize("step", ["pivot_root", "install seccomp filter"])
def test_a_failing_launch_step_fails_the_namespaces_check(unsafe_cage, step):
    """Each step fails only in the real launch (the unsafe build makes it fail
    on request): doctor must name it, not say ok."""
    p = doctor(unsafe_cage, env=clean_env(CODECAGE_DEBUG_FAIL_STEP=step))
    assert p.returncode == 1, p.stdout
    verdict, line = lines_by_name(p.stdout)["namespaces"]
    assert verdict == "FAIL" and f"{step} failed: EIO" in line and "; fix: " in line, line


# ---- cgroup v2 delegation ----

def test_v2_delegated_group_without_root(cage):
    """As a user given a delegated cgroup v2 group (CODECAGE_CGROUP_PARENT):
    doctor says v2 under it, with memory, pids and cpu, delegated."""
    parent = os.environ.get("CODECAGE_CGROUP_PARENT", "")
    if os.geteuid() == 0 or not parent or mounted("/sys/fs/cgroup") != "cgroup2":
        pytest.skip("needs a non-root user with a delegated cgroup v2 group "
                    "in CODECAGE_CGROUP_PARENT")
    p = doctor(cage, env=dict(os.environ))
    found = lines_by_name(p.stdout)
    verdict, line = found["cgroup"]
    assert verdict == "ok" and " v2, " in line and parent in line, line
    verdict, line = found["cgroup-controllers"]
    assert verdict == "ok" and "v2: memory, pids, cpu" in line, line
    verdict, line = found["cgroup-delegation"]
    assert verdict == "ok" and "delegated to you" in line, line


def test_v2_group_whose_ancestors_withhold_controllers(cage):
    """A user's CODECAGE_CGROUP_PARENT whose ancestors do not pass memory,
    pids and cpu down: doctor warns and its fix names each ancestor's
    subtree_control, top down; run as root, that fix makes the check pass."""
    root = Path("/sys/fs/cgroup")
    if os.geteuid() != 0 or mounted(str(root)) != "cgroup2" or not shutil.which("setpriv"):
        pytest.skip("needs root on a cgroup v2 host")
    if not {"memory", "pids", "cpu"} <= set((root / "cgroup.subtree_control").read_text().split()):
        pytest.skip("the root group does not pass memory, pids and cpu down")
    top = root / f"codecage-doctor-{os.getpid()}"
    mid = top / "mid"
    user = mid / "user"
    user.mkdir(parents=True)
    try:
        for f in ("", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"):
            os.chown(user / f, 65534, 65534)
        env = clean_env(CODECAGE_CGROUP_PARENT=str(user))

        def check():
            p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                str(cage.binary), "doctor", "--json"],
                               capture_output=True, text=True, timeout=60, env=env, cwd="/")
            return {c["name"]: c for c in json.loads(p.stdout)["checks"]}["cgroup-controllers"]

        c = check()
        assert c["status"] == "warn" and "no memory" in c["detail"], c
        want = (f"echo '+memory +pids +cpu' | sudo tee {top}/cgroup.subtree_control >/dev/null"
                f" && echo '+memory +pids +cpu' | sudo tee {mid}/cgroup.subtree_control"
                " >/dev/null")
        assert want in c["fix"], c
        assert "systemd" not in c["fix"], c
        subprocess.run(["sh", "-c", want.replace("sudo ", "")], check=True)
        c = check()
        assert c["status"] == "ok" and "v2: memory, pids, cpu" in c["detail"], c
    finally:
        for d in sorted((d for d in top.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
            d.rmdir()
        top.rmdir()


def test_kernel_check_names_newer_features_and_their_fallbacks(cage):
    """Each optional feature newer than the running kernel is named with
    what codecage does without it (as root: idmapped tmpfs from 6.3);
    those it has are listed."""
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    verdict, line = lines_by_name(doctor(cage).stdout)["kernel"]
    if (major, minor) >= (6, 3):
        assert verdict == "ok" and "idmapped tmpfs (6.3)" in line, line
    elif os.geteuid() == 0:
        assert verdict == "warn", line
        assert "idmapped tmpfs needs 6.3: --rw binds of tmpfs directories are plain" in line, line
        assert "fix: install a 6.3+ kernel for idmapped tmpfs" in line, line
    else:
        assert "idmapped tmpfs" not in line, line
