"""Starving the host: processes, memory, disk, output, CPU and fds. Each
bomb is bounded by the attack itself (at most 300 processes, 512 MiB of
memory, 200 MiB of disk, a few seconds of CPU), so that with the limits
switched off ("succeeded" = got past the limit) the 2-core test machine
stays fine. The `limits` switch drops the cgroup (memory, cpu, pids), the
rlimits and the tmpfs size at once. Output capping and the wall-clock
timeout live in the supervisor and have no switch: protected build only.
After every run nothing of the sandbox is left: no process, no cgroup."""
import json
import subprocess

import pytest

from seclib import (Target, cgroups_of, expect, host_processes_with, last_json, pair,
                    run_tracked, target)  # noqa: F401 (fixture)


def _probe_tracked(target, *args, options=(), timeout=60):
    """Probe run through Popen: (probe JSON, result, codecage pid)."""
    argv = [target.probe_target, *args]
    opts = ["--ro", f"{target.cage.probe}:{target.probe_target}", *options]
    r, pid = run_tracked(target, argv, *opts, timeout=timeout)
    return last_json(r["stdout"]), r, pid


def _assert_nothing_left(pid, marker):
    assert cgroups_of(pid) == [], "the run's cgroup is still there"
    assert host_processes_with(marker) == [], "sandbox processes survived the run"


# ---- fork bomb ----

def forks_past_the_limit(target):
    """--pids 64: 2000 live processes wanted (300 without limits, so the
    unprotected run stays harmless); past ~100 means the limit did not hold."""
    want = 2000 if target.protected else 300
    out, r, pid = _probe_tracked(target, "forkbomb", str(want), options=["--pids", "64"])
    _assert_nothing_left(pid, "cage-probe\0forkbomb\0")
    return out["created"] > 100, out


@pair("limits")
def test_fork_bomb_is_bounded(target):
    ok, out = forks_past_the_limit(target)
    expect(target, ok, out)
    if target.protected:
        assert out["created"] <= 64 and out["errname"] == "EAGAIN", out
    # The host still forks.
    subprocess.run(["/bin/true"], check=True, timeout=10)


def test_shell_fork_bomb_is_bounded(cage):
    """The classic shell bomb, under --pids 32 and a 3 s timeout."""
    r, pid = run_tracked(Target(cage, None), ["/bin/sh", "-c", "b() { b | b & }; b; sleep 10"],
                         "--pids", "32", "--timeout", "3", timeout=30)
    assert r["status"] == "timeout", r
    assert cgroups_of(pid) == []


# ---- memory ----

def touches_past_memory_limit(target):
    out, r, pid = _probe_tracked(target, "memory", "512", options=["--memory", "64"])
    _assert_nothing_left(pid, "cage-probe\0memory\0")
    return out is not None and out["touched_mib"] == 512, r


@pair("limits")
def test_memory_bomb_is_oom(target):
    ok, r = touches_past_memory_limit(target)
    expect(target, ok, r)
    if target.protected:
        assert r["status"] == "oom", r
        assert r["peak_memory_bytes"] <= 70 * 2**20, r


def test_memory_bomb_in_many_processes_is_oom(cage):
    """The limit is for the whole tree, not per process: 4 x 48 MiB > 64."""
    r = cage.run(["/bin/sh", "-c", "for i in 1 2 3 4; do /opt/probe/cage-probe memory 48 & done; "
                  "wait"], "--ro", f"{cage.probe}:/opt/probe/cage-probe", "--memory", "64")
    touched = [json.loads(l)["touched_mib"] for l in r["stdout"].splitlines() if l.startswith("{")]
    assert sum(touched) < 4 * 48, r
    assert r["peak_memory_bytes"] <= 70 * 2**20, r


# ---- disk ----

def fills_past_disk_limit(target, path):
    out, r = target.probe_json("disk", path, "200", options=["--disk", "16"])
    return out["written"] >= 200 * 2**20, out


@pair("limits")
@pytest.mark.parametrize("path", ["/tmp/fill", "/workspace/fill", "/dev/shm/fill"])
def test_disk_fill_is_bounded(target, path):
    ok, out = fills_past_disk_limit(target, path)
    expect(target, ok, out)
    if target.protected:
        assert out["errname"] == "ENOSPC" and out["written"] <= 16 * 2**20, out


def creates_files_past_inode_limit(target, directory):
    """Empty files cost no bytes, only inodes (kernel memory): 5000 of them
    in a 16 MiB scratch disk (2048 inodes), which /dev is a directory of."""
    r = target.sh(f"cd {directory} && i=0; while [ $i -lt 5000 ]; do : > f$i 2>/dev/null || "
                  "break; i=$((i+1)); done; echo $i", "--disk", "16")
    made = int(r["stdout"].strip() or 0)
    return made >= 5000, made


@pair("limits")
@pytest.mark.parametrize("directory", ["/tmp", "/workspace", "/dev"])
def test_inode_exhaustion_is_bounded(target, directory):
    ok, made = creates_files_past_inode_limit(target, directory)
    expect(target, ok, made)
    if target.protected:
        assert made <= 2048, made


def test_disk_limit_is_shared_by_all_scratch_dirs(cage):
    """/tmp, /workspace and /dev/shm share one --disk budget."""
    p = "/opt/probe/cage-probe"
    r = cage.run(["/bin/sh", "-c", f"{p} disk /tmp/a 200; {p} disk /workspace/b 200; "
                  f"{p} disk /dev/shm/c 200"], "--ro", f"{cage.probe}:{p}", "--disk", "16")
    written = [json.loads(l)["written"] for l in r["stdout"].splitlines()]
    assert len(written) == 3 and sum(written) <= 16 * 2**20, written


# ---- output flood (supervisor-side, no switch) ----

def test_output_flood_with_json_defaults_stops(cage):
    """--json defaults: 64 KiB kept per stream, the run stopped past 64 MiB."""
    r = cage.probe_run("flood", "200", timeout=60)
    assert r["status"] == "output_limit", {k: r[k] for k in ("status", "reason", "truncated")}
    assert r["truncated"]["stdout"]["kept"] <= 65536
    assert 64 * 2**20 <= r["truncated"]["stdout"]["total"] < 80 * 2**20, r["truncated"]
    assert len(r["stdout"].encode()) < 65536 + 200
    assert "bytes truncated" in r["stdout"]


def test_output_flood_with_small_output_stop(cage):
    r = cage.probe_run("flood", "200", options=["--output-stop", "1000000"], timeout=60)
    assert r["status"] == "output_limit", r["reason"]
    # Reading stops at the read (at most 64 KiB) that crossed the stop,
    # however fast the program writes.
    assert r["truncated"]["stdout"]["total"] <= 1000000 + 65536, r["truncated"]


def test_output_flood_plain_mode_is_truncated_with_marker(cage):
    p = "/opt/probe/cage-probe"
    proc = cage.plain([p, "flood", "50"], "--ro", f"{cage.probe}:{p}", "--output-max", "4096",
                      timeout=60)
    assert len(proc.stdout) < 4096 + 200, len(proc.stdout)
    assert b"bytes truncated ...]" in proc.stdout


def test_output_flood_on_stderr_and_stdout_counts_both(cage):
    r = cage.sh("/opt/probe/cage-probe flood 40 & /opt/probe/cage-probe flood 40 >&2; wait",
                "--ro", f"{cage.probe}:/opt/probe/cage-probe", "--output-stop", "4000000",
                timeout=60)
    assert r["status"] == "output_limit", r["reason"]
    total = sum(s["total"] for s in r["truncated"].values())
    assert total < 8 * 2**20


# ---- CPU ----

def test_wall_clock_timeout_stops_a_spin(cage):
    r = cage.probe_run("spin", "30", "2", options=["--timeout", "1"], timeout=60)
    assert r["status"] == "timeout", r
    assert r["duration_ms"] < 30000  # stopped before the spin's own end


def test_wall_clock_timeout_stops_a_sleeper_ignoring_signals(cage):
    # It never ends by itself: the run's return (within cage.sh's own
    # timeout) is the kill.
    r = cage.sh("trap '' TERM INT HUP; while :; do sleep 1; done", "--timeout", "1")
    assert r["status"] == "timeout", r


def burns_past_cpu_budget(target):
    """--cpu-time 1 for the whole tree: 3 processes x 0.8 s of CPU each, so
    no process alone reaches its 1 s RLIMIT_CPU; only the tree total does.
    The wall-clock timeout is far away: on a busy machine those CPU seconds
    take much longer than they would alone."""
    out, r = target.probe_json("spin", "0.8", "3", options=["--cpu-time", "1", "--timeout", "300"])
    return r["status"] == "ok", r


@pair("limits")
def test_cpu_time_limit_covers_the_whole_tree(target):
    ok, r = burns_past_cpu_budget(target)
    expect(target, ok, r)
    if target.protected:
        assert r["status"] == "timeout" and "cpu time" in r["reason"], r


# ---- fds ----

def opens_past_nofile(target):
    want = 1000 if target.protected else 500
    out, r = target.probe_json("files", str(want), options=["--nofile", "64"])
    return out["opened"] >= want, out


@pair("limits")
def test_fd_exhaustion_is_bounded(target):
    ok, out = opens_past_nofile(target)
    expect(target, ok, out)
    if target.protected:
        assert out["opened"] <= 64 and out["errname"] == "EMFILE", out


# ---- nothing left behind ----

CLEANUP_SCENARIOS = {
    "ok": (["/bin/true"], (), "ok"),
    "error": (["/bin/sh", "-c", "exit 3"], (), "error"),
    "not-found": (["/no/such/program"], (), "error"),
    "timeout": (["/bin/sleep", "30"], ("--timeout", "0.5"), "timeout"),
    "oom": (["/usr/bin/python3", "-c", "b = bytearray(256 << 20)"], ("--memory", "32"), "oom"),
    "output-limit": (["/bin/sh", "-c", "yes"], ("--output-stop", "100000"), "output_limit"),
    "background": (["/bin/sh", "-c", "sleep 30 & sleep 30 & exit 0"], (), "ok"),
}


@pytest.mark.parametrize("scenario", sorted(CLEANUP_SCENARIOS))
def test_no_cgroup_left_after_run(cage, scenario):
    argv, options, status = CLEANUP_SCENARIOS[scenario]
    r, pid = run_tracked(Target(cage, None), argv, *options, timeout=60)
    assert r["status"] == status, r
    assert r["limits_backend"] in ("v1", "v2"), "no cgroup backend: nothing to check"
    assert cgroups_of(pid) == []


def test_no_cgroup_left_after_launch_failure(unsafe_cage):
    """A launch step failing inside the child (fault injection of the
    unsafe build) still removes the cgroup."""
    t = Target(unsafe_cage, None)
    proc = subprocess.Popen(t.command(["/bin/true"], "--debug-fail-step", "install seccomp filter"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, _ = proc.communicate(timeout=30)
    assert json.loads(out)["status"] == "internal_error"
    assert cgroups_of(proc.pid) == []
