"""`codecage run` end to end: the program's behaviour in plain mode, the
result contract with --json, limits, mounts, env, images and clear errors."""
import json
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import leftover_cgroups

PY = "/usr/bin/python3"


# ---- plain mode behaves like the program ----

def test_plain_mode_passes_output_and_exit_code(cage):
    p = cage.plain(["/bin/sh", "-c", "echo out; echo err >&2; exit 3"])
    assert p.stdout == b"out\n"
    assert p.stderr == b"err\n"
    assert p.returncode == 3


def test_plain_mode_binary_output_is_untouched_when_not_a_tty(cage):
    p = cage.plain([PY, "-c", "import sys; sys.stdout.buffer.write(bytes(range(256)))"])
    assert p.returncode == 0
    assert p.stdout == bytes(range(256))


def test_plain_mode_signal_is_128_plus_n(cage):
    p = cage.plain(["/bin/sh", "-c", "kill -TERM $$"])
    assert p.returncode == 128 + 15
    assert b"signal 15" in p.stderr


def test_plain_mode_timeout_code_and_reason(cage):
    p = cage.plain(["/bin/sleep", "30"], "--timeout", "0.5")
    assert p.returncode == 124
    assert b"timeout" in p.stderr


def test_plain_mode_stops_a_flood_by_default(cage):
    p = cage.plain(["/usr/bin/yes"], timeout=60)
    assert p.returncode == 121, p.stderr[-300:]
    assert b"output_limit" in p.stderr
    assert 64 << 20 <= len(p.stdout) < (64 << 20) + (4 << 20)


def test_plain_mode_output_stop_0_lifts_the_cap(cage):
    p = cage.plain(["/bin/sh", "-c", "head -c 70M /dev/zero"], "--output-stop", "0", timeout=60)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout) == 70 << 20


def test_plain_mode_not_found_is_127(cage):
    p = cage.plain(["no-such-program-xyz"])
    assert p.returncode == 127
    assert b"no-such-program-xyz" in p.stderr


def test_stdin_from_file_and_from_caller(cage, tmp_path):
    f = tmp_path / "in.txt"
    f.write_text("from file\n")
    assert cage.plain(["/bin/cat"], "--stdin", str(f)).stdout == b"from file\n"
    assert cage.plain(["/bin/cat"], "--stdin", "-", input=b"piped\n").stdout == b"piped\n"
    # Default stdin is /dev/null: cat ends at once.
    assert cage.plain(["/bin/cat"], timeout=10).stdout == b""


# ---- the result contract ----

CONTRACT_KEYS = {"status", "exit_code", "signal", "stdout", "stderr", "truncated", "duration_ms",
                 "cpu_ms", "peak_memory_bytes", "artifacts"}


def test_json_contract_ok(cage):
    r = cage.run([PY, "-c", "print('hello')"])
    assert CONTRACT_KEYS <= r.keys()
    assert r["status"] == "ok" and r["exit_code"] == 0 and r["signal"] is None
    assert r["stdout"] == "hello\n" and r["stderr"] == ""
    assert r["truncated"] is None
    assert r["duration_ms"] > 0
    assert r["peak_memory_bytes"] > 1024 * 1024


def test_json_error_exit(cage):
    r = cage.sh("echo bad >&2; exit 7")
    assert r["status"] == "error" and r["exit_code"] == 7 and r["stderr"] == "bad\n"


@pytest.mark.parametrize("code, status, exit_code, stdout, stderr", [
    ("print(1)", "ok", 0, "1\n", ""),
    ("1/0", "error", 1, "", "ZeroDivisionError: division by zero\n"),
    ("raise SystemExit(7)", "error", 7, "", ""),
])
def test_json_python_exit_code_is_the_process_s(cage, code, status, exit_code, stdout, stderr):
    """Python's exit code as the interpreter gives it: 0, 1 for an uncaught
    exception, n for SystemExit(n); clients decide success from it."""
    r = cage.run([PY, "-c", code])
    assert r["status"] == status and r["exit_code"] == exit_code and r["signal"] is None
    assert r["stdout"] == stdout and r["stderr"].endswith(stderr)


def test_json_signal(cage):
    r = cage.sh("kill -KILL $$")
    assert r["status"] == "error" and r["signal"] == 9 and r["exit_code"] is None


def test_cpu_ms_counts_work(cage):
    r = cage.run([PY, "-c", "x=0\nfor i in range(3_000_000): x+=i"])
    assert r["status"] == "ok"
    assert r["cpu_ms"] >= 50


def test_truncation_keeps_head_and_tail_with_marker(cage):
    r = cage.run([PY, "-c", "for i in range(100000): print(i)"], "--output-max", "1000")
    assert r["status"] == "ok"
    out = r["stdout"]
    total = sum(len(f"{i}\n") for i in range(100000))
    assert out.startswith("0\n1\n2\n")
    assert out.endswith("99998\n99999\n")
    t = r["truncated"]["stdout"]
    assert t["total"] == total and t["kept"] <= 1000
    assert f"[... {total - t['kept']} bytes truncated ...]" in out
    assert "stderr" not in r["truncated"]


def test_default_json_cap_is_64k_per_stream(cage):
    r = cage.run([PY, "-c", "import sys; sys.stdout.write('a'*200000); sys.stderr.write('b'*10)"])
    assert r["truncated"]["stdout"]["kept"] <= 65536
    assert r["truncated"]["stdout"]["total"] == 200000
    assert r["stderr"] == "b" * 10


def test_output_is_valid_utf8_and_escapes_neutralised(cage):
    r = cage.run([PY, "-c",
                  "import sys; sys.stdout.buffer.write(b'\\x1b[2J\\x1b]0;title\\x07ok \\xff\\xfe caf\\xc3\\xa9\\n')"])
    out = r["stdout"]
    assert "\x1b" not in out and "\x07" not in out
    assert "\u241b[2J" in out
    assert "\ufffd" in out and "café" in out


def test_output_flood_is_stopped(cage):
    # yes never ends: only the output limit can stop it before the timeout.
    r = cage.run(["/usr/bin/yes"], "--output-stop", "5000000", "--timeout", "20")
    assert r["status"] == "output_limit"
    assert r["truncated"]["stdout"]["total"] > 5000000


def test_wall_timeout_status(cage):
    r = cage.run(["/bin/sleep", "30"], "--timeout", "0.3")
    assert r["status"] == "timeout"
    assert r["duration_ms"] < 30000  # stopped before the program's own end
    assert "timeout" in r["reason"]


def test_cpu_time_limit_covers_the_whole_tree(cage):
    spin = "import os\nfor _ in range(3): os.fork()\nwhile True: pass"
    r = cage.run([PY, "-c", spin], "--cpu-time", "0.5", "--cpus", "2", "--timeout", "20")
    assert r["status"] == "timeout"
    assert "cpu time" in r["reason"]
    assert r["duration_ms"] < 20000  # before the wall-clock timeout


def test_oom_is_reported_as_oom(cage):
    r = cage.run([PY, "-c", "b = bytearray(400 * 1024 * 1024)"], "--memory", "64")
    assert r["status"] == "oom", r
    assert "memory" in r["reason"]


def test_peak_memory_reflects_allocation(cage):
    r = cage.run([PY, "-c", "b = bytearray(100 * 1024 * 1024)\nb[::4096] = b'x' * len(b[::4096])"])
    assert r["status"] == "ok"
    assert r["peak_memory_bytes"] >= 100 * 1024 * 1024


# ---- the environment inside ----

def test_env_is_rebuilt_from_the_spec(cage):
    env = dict(os.environ, CODECAGE_TEST_SECRET="s3cr3t", PASSME="yes")
    r = cage.run(["/usr/bin/env"], "--env", "FOO=bar", "--env-pass", "PASSME", env=env)
    lines = set(r["stdout"].splitlines())
    assert "FOO=bar" in lines and "PASSME=yes" in lines
    assert "s3cr3t" not in r["stdout"]
    assert "HOME=/workspace" in lines
    names = {l.split("=", 1)[0] for l in lines}
    assert names <= {"PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR", "FOO", "PASSME", "PWD"}


def test_env_override_of_default(cage):
    r = cage.run(["/usr/bin/env"], "--env", "HOME=/tmp")
    assert "HOME=/tmp" in r["stdout"].splitlines()
    assert "HOME=/workspace" not in r["stdout"]


def test_identity_and_layout(cage):
    r = cage.sh("id -u; id -g; hostname; pwd; ls /; ls /etc; test -d /workspace/output && echo out")
    lines = r["stdout"].splitlines()
    assert lines[0] == "1000" and lines[1] == "1000"
    assert lines[2] == "codecage"
    assert lines[3] == "/workspace"
    assert "root" not in lines and "home" not in lines
    assert "shadow" not in lines and "sudoers" not in lines
    assert lines[-1] == "out"


def test_workspace_tmp_writable_rootfs_readonly(cage):
    r = cage.sh("echo a > /workspace/a && echo b > /tmp/b && cat /workspace/a /tmp/b; "
                "touch /usr/x 2>/dev/null || echo usr-ro; touch /x 2>/dev/null || echo root-ro")
    assert r["stdout"].split() == ["a", "b", "usr-ro", "root-ro"]


def test_workdir_option_and_missing_workdir(cage):
    assert cage.run(["/bin/pwd"], "--workdir", "/tmp")["stdout"] == "/tmp\n"
    r = cage.run(["/bin/pwd"], "--workdir", "/nonexistent")
    assert r["status"] == "error" and "workdir" in r["stderr"]


def test_disk_limit(cage):
    r = cage.sh("dd if=/dev/zero of=/tmp/f bs=1M count=64 2>&1; echo rc=$?", "--disk", "16")
    assert "No space left" in r["stdout"]


def test_loopback_is_up_and_nothing_else(cage):
    code = ("import socket\ns=socket.socket(); s.bind(('127.0.0.1',0)); s.listen()\n"
            "c=socket.create_connection(s.getsockname()); print('lo-ok')\n"
            "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))")
    r = cage.run([PY, "-c", code])
    assert r["stdout"] == "lo-ok\n['lo']\n"


# ---- mounts and images ----

def test_ro_and_rw_mounts(cage, tmp_path):
    ro = tmp_path / "ro"
    rw = tmp_path / "rw"
    ro.mkdir()
    rw.mkdir()
    (ro / "in.txt").write_text("data")
    rw.chmod(0o777)
    r = cage.sh("cat /in/in.txt; echo; echo x > /in/new 2>/dev/null || echo ro-denied; echo hi > /out/f",
                "--ro", f"{ro}:/in", "--rw", f"{rw}:/out")
    assert r["stdout"].split() == ["data", "ro-denied"]
    assert (rw / "f").read_text() == "hi\n"
    assert not (ro / "new").exists()


def test_rw_bind_of_a_tmpfs_directory(cage):
    """As root a --rw bind is idmapped: the sandbox user owns what the host
    directory's owner owns. tmpfs allows that only from Linux 6.3 (Debian
    12 has 6.1, and many hosts a tmpfs /tmp): before it the bind is a plain
    one, the directory's own permissions apply, and the run still works."""
    if os.geteuid() != 0:
        pytest.skip("binds are idmapped only as root")
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    base = Path(tempfile.mkdtemp(prefix="codecage-tmpfs-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(base)],
                   check=True)
    try:
        rw = base / "rw"
        rw.mkdir(mode=0o755)  # root's, not writable by others
        r = cage.sh("stat -c %u /out; echo hi > /out/f 2>/dev/null && echo wrote",
                    "--rw", f"{rw}:/out")
        owner, *rest = r["stdout"].split()
        if (major, minor) >= (6, 3):
            assert owner == "1000" and rest == ["wrote"], r
            assert (rw / "f").read_text() == "hi\n" and (rw / "f").stat().st_uid == 0
        else:
            assert owner == "65534" and rest == [], r
            assert not (rw / "f").exists()
    finally:
        subprocess.run(["umount", "-l", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_mount_of_a_single_file(cage, tmp_path):
    f = tmp_path / "one.txt"
    f.write_text("single")
    r = cage.run(["/bin/cat", "/data/one.txt"], "--ro", f"{f}:/data/one.txt")
    assert r["stdout"] == "single"


def test_rw_workspace_mount_replaces_scratch(cage, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    ws.chmod(0o777)
    (ws / "keep.txt").write_text("kept")
    r = cage.sh("cat keep.txt; echo new > made.txt", "--rw", f"{ws}:/workspace")
    assert r["stdout"] == "kept"
    assert (ws / "made.txt").read_text() == "new\n"


def _tiny_rootfs(root: Path):
    """A rootfs folder with just /bin/sh and the libraries it needs."""
    sh = Path("/usr/bin/dash").resolve()
    libs = subprocess.run(["ldd", str(sh)], capture_output=True, text=True).stdout
    paths = [str(sh)] + [w for w in libs.split() if w.startswith("/")]
    for p in paths:
        dst = root / p.lstrip("/")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, dst)
    (root / "bin").mkdir(exist_ok=True)
    os.symlink("/usr/bin/dash", root / "bin" / "sh")
    (root / "marker").write_text("image-root")


def test_directory_image(cage, tmp_path):
    img = tmp_path / "img"
    img.mkdir()
    _tiny_rootfs(img)
    r = cage.run(["/bin/sh", "-c", "read x < /marker; echo $x; echo > /marker 2>/dev/null || echo ro"],
                 "--image", str(img))
    assert r["stdout"].split() == ["image-root", "ro"]
    # Host userland is not there.
    r = cage.run(["/usr/bin/python3", "-c", "1"], "--image", str(img))
    assert r["status"] == "error" and r["exit_code"] == 127


# ---- clear errors ----

@pytest.mark.parametrize("args, needle", [
    (["--memory", "4"], "--memory"),
    (["--memory", "lots"], "16..1048576"),
    (["--cpus", "0"], "--cpus"),
    (["--pids", "1"], "--pids"),
    (["--timeout", "-1"], "--timeout"),
    (["--output-max", "x"], "--output-max"),
    (["--ro", "relative:/x"], "absolute"),
    (["--rw", "/nonexistent-codecage:/x"], "mounts[0].source"),
    (["--ro", "/tmp:/proc/x"], "mounts[0].target"),
    (["--image", "/nonexistent-img"], "image"),
    (["--env", "=x"], "env[0]"),
    (["--env-pass", "CODECAGE_SURELY_UNSET"], "--env-pass"),
    (["--bogus"], "--bogus"),
    (["--debug-disable", "seccomp"], ""),
])
def test_invalid_options_are_clear_errors(cage, args, needle):
    p = subprocess.run([str(cage.binary), "run", *args, "--", "/bin/true"], capture_output=True,
                       timeout=30)
    assert p.returncode == 125
    assert needle.encode() in p.stderr
    assert p.stdout == b""


def test_no_command_is_an_error(cage):
    p = subprocess.run([str(cage.binary), "run"], capture_output=True, timeout=10)
    assert p.returncode == 125 and b"no command" in p.stderr


def test_launcher_failure_is_internal_error_naming_the_step(unsafe_cage):
    r = unsafe_cage.run(["/bin/true"], "--debug-fail-step", "pivot_root", check_json=False)
    assert r["status"] == "internal_error"
    assert "pivot_root" in r["reason"]
    assert r["exit_code"] is None


# ---- nothing left behind, concurrency ----

def _groups_of(pid):
    """The cgroups of the codecage process pid (other codecage processes may
    run on this machine at the same time: only this test's count)."""
    return [p for p in leftover_cgroups() if p.name.startswith(f"run-{pid}-")]


def test_nothing_left_behind(cage):
    for _ in range(3):
        proc = subprocess.Popen([str(cage.binary), "run", "--json", "--timeout", "0.5", "--",
                                 "/bin/sh", "-c", "sleep 100 & sleep 100 & echo started"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert json.loads(out)["status"] in ("ok", "timeout")
        assert _groups_of(proc.pid) == []


def test_concurrent_runs_are_independent(cage):
    def one(i):
        r = cage.run(["/bin/sh", "-c", f"echo {i} > /tmp/me; sleep 0.2; cat /tmp/me; id -u"])
        return i, r

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    for i, r in results:
        assert r["status"] == "ok"
        assert r["stdout"].split()[0] == str(i)


def test_unprivileged_caller_maps_its_own_uid(cage, tmp_path):
    """As a normal user codecage maps the caller's uid (bubblewrap-style) and,
    with no writable cgroup, says limits fell back to rlimits."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become nobody")
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is required")
    d = Path(tempfile.mkdtemp(prefix="codecage-nonroot-"))
    try:
        d.chmod(0o755)
        binary = d / "codecage"
        shutil.copy2(cage.binary, binary)
        binary.chmod(0o755)
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            str(binary), "run", "--json", "--",
                            "/bin/sh", "-c", "id -u; cat /proc/self/uid_map"],
                           capture_output=True, timeout=30, cwd=d)
        assert p.returncode == 0, p.stderr
        r = json.loads(p.stdout)
        assert r["status"] == "ok"
        lines = r["stdout"].split("\n")
        assert lines[0] == "1000"
        assert lines[1].split() == ["1000", "65534", "1"]
        assert r["limits_backend"] == "none"
        if cage.sanitized:
            return  # ASan's runtime cannot live under the RLIMIT_AS fallback
        oom = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              str(binary), "run", "--json", "--memory", "64", "--",
                              PY, "-c", "b = bytearray(512 << 20)"],
                             capture_output=True, timeout=30, cwd=d)
        assert "MemoryError" in json.loads(oom.stdout)["stderr"]
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _pids_with_marker(marker):
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if marker.encode() in (p / "cmdline").read_bytes():
                found.append(int(p.name))
        except OSError:
            pass
    return found


def test_killing_codecage_kills_the_sandbox(cage):
    """kill -9 of the supervisor: the parent-death signal takes pid 1 and so
    the whole pid namespace with it, background daemons included."""
    marker = f"codecage-marker-{os.getpid()}-{time.monotonic_ns()}"
    nap = f"/usr/bin/python3 -c 'import time; time.sleep(1000)' {marker}"
    script = f"({nap} &) ; setsid {nap} & exec {nap}"
    proc = subprocess.Popen([str(cage.binary), "run", "--", "/bin/sh", "-c", script],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Bounds for a hang only: three interpreters took more than 10 s to start
    # in the emulated VM on a loaded host.
    deadline = time.monotonic() + 60
    while len(_pids_with_marker(marker)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_pids_with_marker(marker)) >= 3
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30
    while _pids_with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _pids_with_marker(marker) == []
    # Its reaper removes its cgroups (tests/security/test_killed_supervisor.py).
    deadline = time.monotonic() + 30
    while _groups_of(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _groups_of(proc.pid) == []


# ---- the two binaries ----

def test_lean_binary_runs_alone_and_names_what_it_lacks(cage, tmp_path):
    """`codecage` runs sandboxes with nothing next to it; every other command
    needs codecage-full beside it, and says so when it is missing."""
    tmp_path.chmod(0o755)
    lean = tmp_path / "codecage"
    shutil.copy2(cage.binary, lean)
    p = subprocess.run([str(lean), "run", "--", "/bin/echo", "alone"], capture_output=True,
                       timeout=30)
    assert (p.returncode, p.stdout) == (0, b"alone\n"), p.stderr
    assert subprocess.run([str(lean), "--version"], capture_output=True).stdout.startswith(
        b"codecage ")
    for args in (["serve", "--help"], ["image", "ls"], ["run", "--image", "busybox:1", "--",
                                                       "/bin/true"]):
        p = subprocess.run([str(lean), *args], capture_output=True, timeout=30)
        assert p.returncode == 125, (args, p.stderr)
        assert b"codecage-full" in p.stderr, (args, p.stderr)


def test_lean_binary_hands_other_commands_to_the_full_one(cage):
    p = subprocess.run([str(cage.binary), "serve", "--help"], capture_output=True, timeout=30)
    assert p.returncode == 0 and b"serve" in p.stdout, p.stderr


# ---- cgroup v2 ----

def _v2_mount():
    for path in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        if os.path.exists(os.path.join(path, "cgroup.controllers")):
            return path
    return None


def test_v2_run_lives_in_its_own_group(cage):
    """On cgroup v2 the sandbox is cloned straight into its group
    (CLONE_INTO_CGROUP): from the host, the program's group is the run's."""
    if _v2_mount() is None:
        pytest.skip("no cgroup v2 mount on this host")
    marker = f"codecage-v2-{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "CODECAGE_CGROUP": "v2"}
    proc = subprocess.Popen([str(cage.binary), "run", "--json", "--", "/bin/sh", "-c",
                             f"exec /usr/bin/python3 -c 'import time; time.sleep(60)' {marker}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        def programs():
            return [p for p in _pids_with_marker(marker)
                    if Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"/usr/bin/python3")]
        deadline = time.monotonic() + 20
        while not programs() and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = programs()
        assert pids, "the program never started"
        lines = Path(f"/proc/{pids[0]}/cgroup").read_text().splitlines()
        unified = [l for l in lines if l.startswith("0::")]
        assert unified and f"/codecage/run-{proc.pid}-" in unified[0], lines
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while _pids_with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    # The next start sweeps the killed supervisor's (now empty) group away.
    assert cage.run(["/bin/true"], env=env)["limits_backend"] == "v2"
    left = [d for d in Path(_v2_mount()).rglob(f"run-{proc.pid}-*") if d.is_dir()]
    assert left == []


def test_v2_rootless_limits_are_the_delegated_groups(cage):
    """Without root, on cgroup v2 with a delegated group named by
    CODECAGE_CGROUP_PARENT (as systemd's Delegate=yes gives a user), the
    limits are cgroup limits: the run's group, under that parent, carries
    memory.max, pids.max and cpu.max, and a memory bomb ends as `oom` (with
    only rlimits it would be a failed allocation)."""
    parent = os.environ.get("CODECAGE_CGROUP_PARENT", "")
    mount = _v2_mount()
    if os.geteuid() == 0 or not parent.startswith("/") or mount is None:
        pytest.skip("needs a non-root user with a delegated cgroup v2 group "
                    "in CODECAGE_CGROUP_PARENT")
    marker = f"codecage-rootless-{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen([str(cage.binary), "run", "--json", "--memory", "64", "--pids", "50",
                             "--cpus", "0.5", "--", "/bin/sh", "-c",
                             f"exec /usr/bin/python3 -c 'import time; time.sleep(60)' {marker}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        pids = []
        while not pids and time.monotonic() < deadline:
            pids = [p for p in _pids_with_marker(marker)
                    if Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"/usr/bin/python3")]
            time.sleep(0.05)
        assert pids, "the program never started"
        unified = [l for l in Path(f"/proc/{pids[0]}/cgroup").read_text().splitlines()
                   if l.startswith("0::")]
        group = Path(mount + unified[0][3:])
        assert str(group).startswith(parent.rstrip("/") + "/run-"), (group, parent)
        assert (group / "memory.max").read_text().strip() == str(64 << 20)
        assert (group / "pids.max").read_text().strip() == "50"
        assert (group / "cpu.max").read_text().split() == ["50000", "100000"]
    finally:
        proc.kill()
        proc.wait()
    r = cage.run(["/usr/bin/python3", "-c", "b = bytearray(256 << 20)"], "--memory", "32")
    assert r["limits_backend"] == "v2", r
    assert r["status"] == "oom", r
