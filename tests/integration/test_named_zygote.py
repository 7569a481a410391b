"""Named sandboxes forked from their image's zygote (src/services/zygotes.c):
`GET /v1/pool`'s `sandbox_zygotes` counts the forks of each image's
template; a stopped and started sandbox is forked again with its workspace
kept; its execs get its environment; and with `fork_sandboxes: false`
sandboxes start as before and work the same. The attacks on forked named
sandboxes are in tests/security/test_named_zygote_attacks.py."""
import os
import uuid

import pytest

from conftest import wait_until
from serverlib import Server, pids_of_server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's workspaces need root")

IMAGE = "host"  # the image a spec without one gets


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path)
    yield s
    s.stop()


def forks(server):
    for z in server.ok("GET", "/v1/pool")["sandbox_zygotes"]:
        if z["image"] == IMAGE:
            return z["forks"]
    return 0


def python(server, name, code):
    r = server.ok("POST", f"/v1/sandboxes/{name}/python", {"code": code})
    assert r["status"] == "ok", r
    return r


def sh(server, name, script):
    r = server.ok("POST", f"/v1/sandboxes/{name}/exec", {"script": script})
    assert r["status"] == "ok", r
    return r


def test_stop_and_start_forks_again_and_keeps_the_workspace(server):
    name = "s" + uuid.uuid4().hex[:8]
    server.ok("POST", "/v1/sandboxes", {"name": name})
    assert forks(server) == 1
    stamp = uuid.uuid4().hex
    python(server, name, f"open('/workspace/kept.txt', 'w').write({stamp!r})\nx = 1")

    assert server.ok("POST", f"/v1/sandboxes/{name}/stop")["state"] == "stopped"
    assert server.ok("POST", f"/v1/sandboxes/{name}/start")["state"] == "running"
    assert forks(server) == 2  # started again: a new fork

    # A new session (its variables gone), the same workspace.
    r = python(server, name, "open('/workspace/kept.txt').read(), 'x' in globals()")
    assert r["return_value"] == [stamp, False], r
    assert sh(server, name, "cat /workspace/kept.txt")["stdout"] == stamp
    got = server.request("GET", f"/v1/sandboxes/{name}/files/kept.txt")
    assert got.status == 200 and got.body == stamp.encode(), (got.status, got.body)


def test_execs_of_a_forked_sandbox_get_its_environment(server):
    name = "s" + uuid.uuid4().hex[:8]
    value = uuid.uuid4().hex
    server.ok("POST", "/v1/sandboxes", {"name": name, "env": {"MODE": value}})
    assert forks(server) == 1
    assert sh(server, name, 'printf %s "$MODE"')["stdout"] == value
    assert python(server, name, "import os\nos.environ['MODE']")["return_value"] == value
    # The exec's own env comes on top of the sandbox's.
    r = server.ok("POST", f"/v1/sandboxes/{name}/exec",
                  {"script": 'printf "%s %s" "$MODE" "$EXTRA"', "env": {"EXTRA": "x"}})
    assert r["stdout"] == f"{value} x", r


def test_with_fork_sandboxes_false_sandboxes_start_as_before(tmp_path):
    server = Server(tmp_path, extra={"fork_sandboxes": False})
    try:
        name = "s" + uuid.uuid4().hex[:8]
        value = uuid.uuid4().hex
        server.ok("POST", "/v1/sandboxes", {"name": name, "env": {"MODE": value}})
        r = python(server, name, "import os\n6 * 7, os.environ['MODE'], os.getuid()")
        assert r["return_value"] == [42, value, 1000], r
        out = sh(server, name, 'cat /proc/1/comm; printf %s "$MODE"')["stdout"]
        assert out == f"codecage-init\n{value}", out
        assert forks(server) == 0, server.ok("GET", "/v1/pool")["sandbox_zygotes"]
    finally:
        server.stop()


def test_a_replaced_template_keeps_the_sandboxes_it_forked(tmp_path):
    """The sandboxes a template forked live in its pid namespace: when the
    image's tag moves to another image, the next sandbox gets a new
    template, and the old one (with the sandbox it forked) lives on."""
    from imagelib import docker_save, f, image_config, tar_bytes
    from test_image_sandboxes import DEBIAN, debian_rootfs_tar, import_image

    base = debian_rootfs_tar().read_bytes()
    s = Server(tmp_path, extra={"pool_size": 0})
    try:
        for version in (b"1", b"2"):
            extra = tar_bytes([f("version.txt", version)])
            docker_save(tmp_path / "img.tar", [base, extra], tags=(DEBIAN,),
                        config=image_config([base, extra]))
            import_image(s.config_path, tmp_path / "img.tar")
            name = "v" + version.decode()
            s.ok("POST", "/v1/sandboxes", {"name": name, "image": DEBIAN})
            python(s, name, "x = open('/version.txt').read()")
        templates = [z for z in s.ok("GET", "/v1/pool")["sandbox_zygotes"]
                     if z["image"].endswith(DEBIAN)]
        assert len(templates) == 1 and templates[0]["forks"] == 2, templates
        # v2 saw the new image, so a new template forked it; v1, forked from
        # the replaced template, kept its session.
        r = python(s, "v1", "x")
        assert r["return_value"] == "1" and not r["restarted"], r
        assert python(s, "v2", "x")["return_value"] == "2"
    finally:
        s.stop()


def ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def templates(server):
    """Pids of the server's zygote templates: interpreters whose init is the
    server's child (the sandboxes' drivers run the same program one level
    down, beneath their own init)."""
    found = set()
    for pid in pids_of_server(server.proc.pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"codecage's zygote" not in f.read():
                    continue
            if ppid(ppid(pid)) == server.proc.pid:
                found.add(pid)
        except (OSError, ValueError, IndexError):
            continue
    return found


def stats(server):
    return next(z for z in server.ok("GET", "/v1/pool")["sandbox_zygotes"] if z["image"] == IMAGE)


def sandboxes_with_x(server, prefix, n):
    """n sandboxes, the i-th with x = i in its session; their names."""
    names = [f"{prefix}{i}" for i in range(n)]
    for i, name in enumerate(names):
        server.ok("POST", "/v1/sandboxes", {"name": name})
        python(server, name, f"x = {i}")
    return names


def test_a_template_retires_after_its_generation_and_ends_with_its_last_sandbox(tmp_path):
    """After `sandboxes_per_template` forks a fresh template takes over; the
    retired one keeps serving its sandboxes' sessions (they live in its pid
    namespace) and is freed once they are all gone."""
    server = Server(tmp_path, extra={"sandboxes_per_template": 2, "pool_size": 0})
    try:
        names = sandboxes_with_x(server, "g", 5)
        z = stats(server)
        assert (z["forks"], z["retired"]) == (5, 2), z
        assert len(templates(server)) == 3
        for i, name in enumerate(names):
            r = python(server, name, "x")
            assert r["return_value"] == i and not r["restarted"], r

        first = templates(server)
        for name in names[:2]:  # the first template's two sandboxes
            server.ok("DELETE", f"/v1/sandboxes/{name}")
        assert wait_until(lambda: stats(server)["retired"] == 1, timeout=30), stats(server)
        assert wait_until(lambda: len(templates(server)) == 2, timeout=30), templates(server)
        assert templates(server) < first
        for i, name in enumerate(names[2:], 2):
            assert python(server, name, "x")["return_value"] == i
    finally:
        server.stop()


def test_retired_templates_are_bounded(tmp_path):
    """Sandboxes that outlive their template's generation pin it; past 8
    retired templates per image the current one goes on forking, so they
    cannot pin templates without end."""
    server = Server(tmp_path, extra={"sandboxes_per_template": 1, "pool_size": 0})
    try:
        names = sandboxes_with_x(server, "b", 12)
        z = stats(server)
        assert (z["forks"], z["retired"]) == (12, 8), z
        assert len(templates(server)) == 9
        for i, name in enumerate(names):
            assert python(server, name, "x")["return_value"] == i
    finally:
        server.stop()


def children_of(pid):
    out = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out |= {int(p) for p in f.read().split()}
    return out


def state_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None  # gone: reaped


def test_a_removed_sandbox_leaves_no_zombie_in_its_template(tmp_path):
    """A forked sandbox's pid 1 is a child of its template, which reaps it
    when it ends (its SIGCHLD wakes the template), not at the next spawn."""
    server = Server(tmp_path, extra={"pool_size": 0})
    try:
        sandboxes_with_x(server, "z", 2)
        (template,) = templates(server)
        before = children_of(template)
        assert len(before) == 2, before
        server.ok("DELETE", "/v1/sandboxes/z0")
        assert wait_until(lambda: len(children_of(template)) == 1, timeout=30), \
            children_of(template)
        gone = before - children_of(template)
        assert len(gone) == 1 and state_of(gone.pop()) is None
        assert python(server, "z1", "x")["return_value"] == 1
    finally:
        server.stop()
