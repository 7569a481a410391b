"""`codecage sandbox ...` end to end: the CLI client against a real
`codecage serve` (started per module with a config in a temp dir), over
the Unix socket and over HTTP: create/ls/get, exec and shell with their
exit codes, logs, stop/start/kill/rm, cp both ways, and the errors an
operator sees (unknown sandbox, invalid name, duplicate, no server, bad
token)."""
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

import serverlib
from serverlib import free_port
from conftest import BUILD

BINARY = BUILD / "codecage"
TOKEN = "cli-test-token-" + uuid.uuid4().hex


class Server(serverlib.Server):
    """serverlib's server in a short directory: Unix socket paths are limited
    to 107 bytes."""

    def __init__(self, tenants=None):
        self.dir = Path(tempfile.mkdtemp(prefix="cc-cli-"))
        super().__init__(self.dir, tenants=tenants)
        self.socket = self.socket_path
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        try:
            super().stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def _binary_or_fail():
    if not BINARY.exists():
        pytest.fail(f"{BINARY} is missing: build first (scripts/test.sh does)")


@pytest.fixture(scope="module")
def server():
    _binary_or_fail()
    srv = Server()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def token_server():
    _binary_or_fail()
    srv = Server(tenants={"alice": TOKEN})
    try:
        yield srv
    finally:
        srv.stop()


class Cli:
    """Runs `codecage sandbox SUBCOMMAND ...` against one server. Over the
    socket the global option goes before the subcommand word, over HTTP
    after it, so both placements are exercised."""

    def __init__(self, srv, transport, token=None):
        self.srv = srv
        self.transport = transport
        self.token = token
        self.created = []

    def argv(self, sub, *args):
        if self.transport == "socket":
            return [str(BINARY), "sandbox", "--socket", self.srv.socket, sub, *args]
        return [str(BINARY), "sandbox", sub, "--url", self.srv.url, *args]

    def __call__(self, sub, *args, input=None, timeout=60, env=None):
        e = dict(os.environ)
        e.pop("CODECAGE_TOKEN", None)
        if self.token:
            e["CODECAGE_TOKEN"] = self.token
        e.update(env or {})
        return subprocess.run(self.argv(sub, *args), capture_output=True, input=input,
                              timeout=timeout, env=e)

    def ok(self, sub, *args, **kw):
        p = self(sub, *args, **kw)
        assert p.returncode == 0, f"{sub} {args}: exit {p.returncode}: {p.stderr!r}"
        return p

    def json(self, sub, *args, **kw):
        return json.loads(self.ok(sub, "--json", *args, **kw).stdout)

    def new_sandbox(self, *options):
        name = "t" + uuid.uuid4().hex[:12]
        assert self.ok("create", name, *options).stdout == f"{name}\n".encode()
        self.created.append(name)
        return name

    def cleanup(self):
        for name in self.created:
            self("rm", name)


@pytest.fixture(params=["socket", "url"])
def cli(request, server):
    c = Cli(server, request.param)
    yield c
    c.cleanup()


@pytest.fixture
def box(cli):
    return cli.new_sandbox()


# ---- create, ls, get ----

def test_create_ls_get(cli):
    name = cli.new_sandbox("--memory", "128", "--cpus", "0.5", "--label", "team=cli",
                           "--env", "GREETING=hello")
    table = cli.ok("ls").stdout.decode().splitlines()
    assert table[0].split() == ["NAME", "STATE", "IMAGE", "CREATED", "LAST-USED"]
    assert any(line.split()[0] == name for line in table[1:])

    listed = cli.json("ls", "--label", "team=cli")["sandboxes"]
    assert name in [s["name"] for s in listed]
    assert all(s["labels"].get("team") == "cli" for s in listed)
    assert name not in [s["name"] for s in cli.json("ls", "--label", "team=other")["sandboxes"]]

    info = cli.json("get", name)
    assert info["name"] == name and info["labels"] == {"team": "cli"}
    assert info["spec"]["memory_mib"] == 128 and info["spec"]["cpus"] == 0.5
    plain = cli.ok("get", name).stdout.decode()
    assert f"name       {name}" in plain

    r = cli("exec", name, "--", "/bin/sh", "-c", 'echo "$GREETING"')
    assert r.returncode == 0 and r.stdout == b"hello\n"


# ---- exec and shell ----

def test_exec_streams_and_exits_like_the_program(cli, box):
    p = cli("exec", box, "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3")
    assert p.stdout == b"out\n"
    assert p.stderr == b"err\n"
    assert p.returncode == 3


def test_exec_signal_is_128_plus_n(cli, box):
    p = cli("exec", box, "--", "/bin/sh", "-c", "kill -9 $$")
    assert p.returncode == 128 + 9
    assert b"signal 9" in p.stderr


def test_exec_timeout_is_124(cli, box):
    p = cli("exec", box, "--timeout", "0.5", "--", "/bin/sleep", "30")
    assert p.returncode == 124
    assert b"timeout" in p.stderr


def test_exec_json_prints_the_result_contract(cli, box):
    r = cli.json("exec", box, "--", "/bin/sh", "-c", "echo hi; exit 4")
    assert r["status"] == "error" and r["exit_code"] == 4 and r["stdout"] == "hi\n"
    assert {"signal", "stderr", "truncated", "duration_ms", "artifacts"} <= r.keys()


def test_exec_env_cwd_and_stdin(cli, box):
    cli.ok("shell", box, "mkdir -p sub")
    p = cli("exec", box, "--env", "A=1", "--cwd", "/workspace/sub", "--stdin", "--",
            "/bin/sh", "-c", 'echo "$A $(pwd)"; cat', input=b"piped text\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout == b"1 /workspace/sub\npiped text\n"


def test_exec_stdin_over_the_bound_is_refused(cli, box):
    p = cli("exec", box, "--stdin", "--", "/bin/cat", input=b"a" * (16 * 1024 * 1024 + 1))
    assert p.returncode == 125
    assert b"16 MiB" in p.stderr


def test_exec_usage_errors(cli, box):
    assert cli("exec", box).returncode == 125
    p = cli("exec", box, "ls", "-la")
    assert p.returncode == 125 and b"after --" in p.stderr


def test_shell_from_argument_and_from_stdin(cli, box):
    p = cli("shell", box, "echo from-arg; exit 5")
    assert p.stdout == b"from-arg\n" and p.returncode == 5
    p = cli("shell", box, input=b"x=41\necho $((x + 1))\n")
    assert p.stdout == b"42\n" and p.returncode == 0


# ---- logs, stop/start, kill, rm ----

def test_logs_tail(cli, box):
    cli.ok("shell", box, "for i in 1 2 3 4 5; do echo line-$i; done")
    lines = cli.ok("logs", box, "--tail", "2").stdout.decode().splitlines()
    assert len(lines) == 2
    assert "line-4" in lines[0] and "line-5" in lines[1]
    doc = cli.json("logs", box)
    assert any("line-1" in line for line in doc["lines"])
    assert doc["truncated"] is False


def test_stop_start_keeps_the_workspace(cli, box):
    cli.ok("shell", box, "echo kept > note.txt")
    assert cli.ok("stop", box).stdout == f"{box}\n".encode()
    assert cli.json("get", box)["state"] == "stopped"
    cli.ok("start", box)
    assert cli.json("get", box)["state"] == "running"
    assert cli.ok("shell", box, "cat note.txt").stdout == b"kept\n"


def test_kill(cli, box):
    cli.ok("shell", box, "echo x > f")
    info = cli.json("kill", box)
    assert info["name"] == box and info["state"] == "stopped"
    assert cli.ok("shell", box, "cat f").stdout == b"x\n"


def test_rm(cli):
    a, b = cli.new_sandbox(), cli.new_sandbox()
    assert cli.ok("rm", a, b).stdout == f"{a}\n{b}\n".encode()
    p = cli("get", a)
    assert p.returncode == 125 and a.encode() in p.stderr
    p = cli("rm", a)
    assert p.returncode == 125 and b"HTTP 404" in p.stderr


# ---- cp ----

def test_cp_round_trips_binary_content(cli, box, tmp_path):
    data = os.urandom(300_000) + bytes(range(256))
    src = tmp_path / "blob.bin"
    src.write_bytes(data)
    cli.ok("cp", str(src), f"{box}:data/blob.bin")
    p = cli.ok("exec", box, "--", "/usr/bin/wc", "-c", "data/blob.bin")
    assert p.stdout.split()[0] == str(len(data)).encode()

    dst = tmp_path / "back.bin"
    cli.ok("cp", f"{box}:data/blob.bin", str(dst))
    assert dst.read_bytes() == data
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".back.bin.")]

    # A directory as DST keeps the name; `-` is stdout; /workspace/ is accepted.
    out = tmp_path / "dir"
    out.mkdir()
    cli.ok("cp", f"{box}:/workspace/data/blob.bin", str(out))
    assert (out / "blob.bin").read_bytes() == data
    assert cli.ok("cp", f"{box}:data/blob.bin", "-").stdout == data

    # DST ending in / (or just NAME:) takes the local file's name.
    cli.ok("cp", str(src), f"{box}:")
    assert cli.ok("cp", f"{box}:blob.bin", "-").stdout == data


def test_cp_errors(cli, box, tmp_path):
    dst = tmp_path / "never.bin"
    p = cli("cp", f"{box}:no-such-file", str(dst))
    assert p.returncode == 125 and b"HTTP 404" in p.stderr
    assert not dst.exists() and list(tmp_path.iterdir()) == []
    assert cli("cp", str(tmp_path), f"{box}:x").returncode == 125  # not a regular file
    assert cli("cp", "a", "b").returncode == 125                    # no NAME:PATH side
    assert cli("cp", f"{box}:/etc/passwd", str(dst)).returncode == 125


# ---- errors ----

def test_unknown_sandbox_names_it(cli):
    p = cli("get", "no-such-sandbox")
    assert p.returncode == 125
    assert b"no-such-sandbox" in p.stderr and b"HTTP 404" in p.stderr
    assert p.stderr.startswith(b"codecage: ")
    p = cli("exec", "no-such-sandbox", "--", "/bin/true")
    assert p.returncode == 125 and b"HTTP 404" in p.stderr


def test_invalid_name_is_refused(cli):
    p = cli("create", "Not A Valid Name!")
    assert p.returncode == 125 and b"HTTP 400" in p.stderr


def test_duplicate_create_is_refused(cli, box):
    p = cli("create", box)
    assert p.returncode == 125 and b"HTTP 409" in p.stderr


def test_invalid_option_values_are_refused_before_any_request(cli):
    p = cli("create", "x", "--memory", "1")
    assert p.returncode == 125 and b"--memory" in p.stderr
    p = cli("create", "x", "--env", "NOEQUALS")
    assert p.returncode == 125 and b"--env" in p.stderr


def test_server_not_running(tmp_path):
    _binary_or_fail()
    for opts in (["--socket", str(tmp_path / "none.sock")],
                 ["--url", f"http://127.0.0.1:{free_port()}"]):
        p = subprocess.run([str(BINARY), "sandbox", *opts, "ls"], capture_output=True, timeout=30)
        assert p.returncode == 125
        assert b"cannot reach the codecage server" in p.stderr
        assert b"`codecage serve` running?" in p.stderr


def test_help_and_usage():
    _binary_or_fail()
    p = subprocess.run([str(BINARY), "sandbox", "--help"], capture_output=True)
    assert p.returncode == 0 and b"exec" in p.stdout and b"--socket" in p.stdout
    p = subprocess.run([str(BINARY), "sandbox", "exec", "--help"], capture_output=True)
    assert p.returncode == 0 and b"--stdin" in p.stdout
    assert subprocess.run([str(BINARY), "sandbox", "frobnicate"], capture_output=True).returncode == 125
    assert subprocess.run([str(BINARY), "sandbox"], capture_output=True).returncode == 125


# ---- tokens ----

@pytest.mark.parametrize("transport", ["socket", "url"])
def test_token_required_and_checked(token_server, transport):
    good = Cli(token_server, transport, token=TOKEN)
    try:
        name = good.new_sandbox()
        assert good.ok("shell", name, "echo ok").stdout == b"ok\n"
        # --token wins over the environment.
        p = good("get", name, "--token", "wrong-token-0123456789")
        assert p.returncode == 125 and b"HTTP 401" in p.stderr
        assert b"wrong-token" not in p.stderr and TOKEN.encode() not in p.stderr
        p = Cli(token_server, transport)("ls")
        assert p.returncode == 125 and b"HTTP 401" in p.stderr
    finally:
        good.cleanup()
