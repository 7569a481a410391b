"""What an agent does, in an image: one-shot shell and Python runs, named
sandboxes with sessions, files and artifacts, over the HTTP API and MCP —
in a Debian 12 image with python3 that the tests build with mmdebstrap (from
Debian's archive, cached between runs on this machine) and in small busybox
images whose config sets Env, WorkingDir and User. Plus the refusals:
images the config does not allow, `dir:` from a client, an image without
python3 for Python, and an image in use that cannot be removed."""
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BUILD
from imagelib import busybox_layer, d, docker_save, f, image_config, tar_bytes
from serverlib import Server
from test_mcp import INIT, Stdio, rpc, write_config

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's workspaces need root")

DEBIAN = "codecage-test/debian-python:12"
DEBIAN_PACKAGES = ["python3-minimal", "libpython3.11-stdlib", "python3-pip"]
CACHE = Path("/var/tmp/codecage-test-images")
BUSYBOX_ENV = "codecage-test/busybox-env:1"
BUSYBOX_USER = "codecage-test/busybox-user:1"


def debian_rootfs_tar():
    """A Debian 12 root with python3 as a tar, built once per machine."""
    key = hashlib.sha256(json.dumps(["bookworm", "essential", DEBIAN_PACKAGES]).encode())
    path = CACHE / f"debian-python-{key.hexdigest()[:16]}.tar"
    if path.exists():
        return path
    if not shutil.which("mmdebstrap"):
        pytest.fail("mmdebstrap is missing: the test command installs it (scripts/deps.sh)")
    CACHE.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(".part")
    p = subprocess.run(["mmdebstrap", "--variant=essential",
                        "--include=" + ",".join(DEBIAN_PACKAGES), "--format=tar", "bookworm",
                        str(part)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    part.rename(path)
    return path


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """docker save archives of the Debian image and two busybox images."""
    tmp = tmp_path_factory.mktemp("images")
    layer = debian_rootfs_tar().read_bytes()
    docker_save(tmp / "debian.tar", [layer], tags=(DEBIAN,), config=image_config([layer]))
    base = busybox_layer()
    env_cfg = image_config([base], env=["PATH=/bin", "FROM_IMAGE=yes", "OVERRIDE=image"],
                           workdir="/etc")
    docker_save(tmp / "bb-env.tar", [base], tags=(BUSYBOX_ENV,), config=env_cfg)
    accounts = tar_bytes([d("etc"), f("etc/passwd", b"root:x:0:0::/:/bin/sh\n"
                                                    b"agent:x:4321:8765::/tmp:/bin/sh\n"),
                          f("etc/group", b"root:x:0:\nagents:x:8765:\n")])
    user_cfg = image_config([base, accounts], user="agent")
    docker_save(tmp / "bb-user.tar", [base, accounts], tags=(BUSYBOX_USER,), config=user_cfg)
    return tmp


def import_image(config_path, archive):
    p = subprocess.run([str(BUILD / "codecage"), "image", "import", str(archive), "--config",
                        str(config_path)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr


@pytest.fixture
def server(tmp_path, archives):
    s = Server(tmp_path, extra={"pool_size": 0})
    try:
        for name in ("debian.tar", "bb-env.tar", "bb-user.tar"):
            import_image(s.config_path, archives / name)
        yield s
    finally:
        s.stop()


def run(server, **req):
    return server.ok("POST", "/v1/run", req)


def python(server, **req):
    return server.ok("POST", "/v1/python", req)


def test_one_shot_runs_use_the_image(server):
    r = run(server, command="grep ^VERSION_CODENAME /etc/os-release; python3 -c 'print(6*7)'",
            image=DEBIAN)
    assert r["status"] == "ok" and r["stdout"] == "VERSION_CODENAME=bookworm\n42\n", r
    # The image has no hosts or hostname of its own: the sandbox still gets codecage's.
    r = run(server, command="cat /etc/hostname; grep -c 'localhost codecage' /etc/hosts",
            image=DEBIAN)
    assert r["stdout"] == "codecage\n1\n", r
    host = run(server, command="grep -c bookworm /etc/os-release || true")
    assert host["status"] == "ok"  # the host image is still the default
    p = python(server, image=DEBIAN,
               code="import os, sys\nos.makedirs('output', exist_ok=True)\n"
                    "open('output/result.txt', 'w').write('from the image')\n"
                    "sys.version_info[:2]")
    assert p["status"] == "ok" and p["return_value"] == [3, 11], p
    assert [a["path"] for a in p["artifacts"]] == ["output/result.txt"]
    got = server.request("GET", f"/v1/runs/{p['run_id']}/files/output/result.txt")
    assert got.status == 200 and got.body == b"from the image"


def test_a_named_sandbox_in_the_image_keeps_its_session_and_files(server):
    info = server.ok("POST", "/v1/sandboxes", {"name": "deb", "image": DEBIAN})
    assert info["image"] == "docker.io/" + DEBIAN and info["spec"]["image"] == info["image"]
    say = lambda code: server.ok("POST", "/v1/sandboxes/deb/python", {"code": code})
    assert say("import platform\nx = 41")["status"] == "ok"
    assert say("x + 1")["return_value"] == 42
    put = server.request("PUT", "/v1/sandboxes/deb/files/data/in.txt", b"payload",
                         headers={"Content-Type": "application/octet-stream"})
    assert put.status in (200, 201), put.body
    r = server.ok("POST", "/v1/sandboxes/deb/exec",
                  {"script": "cat data/in.txt; python3 -c 'import os; print(os.getcwd())'"})
    assert r["stdout"] == "payload/workspace\n", r
    server.ok("POST", "/v1/sandboxes/deb/stop")
    r = server.ok("POST", "/v1/sandboxes/deb/exec", {"script": "cat data/in.txt"})
    assert r["stdout"] == "payload" and r["restarted"] is True
    server.ok("DELETE", "/v1/sandboxes/deb")


def test_the_image_config_env_workdir_and_user_apply(server):
    r = run(server, image=BUSYBOX_ENV, env={"OVERRIDE": "request"},
            command="echo $FROM_IMAGE $OVERRIDE; pwd; id; echo $USER $LOGNAME")
    assert r["stdout"] == "yes request\n/etc\nuid=0 gid=0\nroot root\n", r
    r = run(server, image=BUSYBOX_USER,
            command="id -u; id -g; touch /tmp/x && echo writable; echo $USER $LOGNAME")
    assert r["stdout"] == "4321\n8765\nwritable\nagent agent\n", r


def test_a_warm_pool_per_image(tmp_path, archives):
    s = Server(tmp_path, extra={"pool_size": 0, "pool": [{"image": DEBIAN, "size": 1}]})
    try:
        import_image(s.config_path, archives / "debian.tar")
        ready = lambda: s.ok("GET", "/v1/pool")["images"][1]["ready"] == 1
        deadline = time.monotonic() + 120
        while not ready():
            assert time.monotonic() < deadline, s.ok("GET", "/v1/pool")
            time.sleep(0.2)
        r = python(s, code="import sys; sys.version_info[0]", image=DEBIAN)
        assert r["pooled"] is True and r["return_value"] == 3, r
        assert python(s, code="1")["pooled"] is False  # the host's shelf has size 0
        shelves = {x["image"]: x for x in s.ok("GET", "/v1/pool")["images"]}
        assert shelves["docker.io/" + DEBIAN]["hits"] == 1
        # Its sandboxes are forked from a zygote running the image's own python3
        # (the first start of which failed: the image was imported after the
        # server started; the shelf tries again as it refills).
        shelf = lambda: {x["image"]: x for x in s.ok("GET", "/v1/pool")["images"]}[
            "docker.io/" + DEBIAN]
        deadline = time.monotonic() + 60
        while not (shelf()["zygote"] and shelf()["ready"] == 1):
            assert time.monotonic() < deadline, shelf()
            python(s, code="1", image=DEBIAN)
            time.sleep(1)
        r = python(s, code="import sys\nsys.executable", image=DEBIAN)
        assert r["pooled"] is True and r["return_value"] == "/usr/bin/python3", r
        assert shelf()["zygote"] is True and "zygote_error" not in shelf(), shelf()
    finally:
        s.stop()


def test_python_in_an_image_without_python3_is_a_clear_error(server):
    r = server.request("POST", "/v1/python", {"code": "1", "image": BUSYBOX_ENV})
    assert r.status == 400, r.body
    assert "has no python3" in r.json["error"]["message"] and BUSYBOX_ENV in \
        r.json["error"]["message"]


def test_refusals(tmp_path, archives):
    s = Server(tmp_path, extra={"pool_size": 0,
                                "images": {"allow": ["docker.io/codecage-test/busybox-*"],
                                           "pull_policy": "never"}})
    try:
        r = s.request("POST", "/v1/run", {"command": "true", "image": DEBIAN})
        assert r.status == 403 and "images.allow" in r.json["error"]["message"], r.body
        r = s.request("POST", "/v1/run", {"command": "true", "image": "dir:/"})
        assert r.status == 403, r.body
        r = s.request("POST", "/v1/run", {"command": "true", "image": "Not A Ref!"})
        assert r.status == 400, r.body
        r = s.request("POST", "/v1/run", {"command": "true", "image": BUSYBOX_ENV})
        assert r.status == 404 and "pull_policy" in r.json["error"]["message"], r.body
    finally:
        s.stop()


def test_an_image_in_use_is_not_removed(server):
    server.ok("POST", "/v1/sandboxes", {"name": "keep", "image": BUSYBOX_ENV})
    rm = lambda: subprocess.run([str(BUILD / "codecage"), "image", "rm", BUSYBOX_ENV, "--config",
                                 str(server.config_path)], capture_output=True, text=True,
                                timeout=60)
    p = rm()
    assert p.returncode != 0 and "in use" in p.stderr, p.stderr
    assert server.ok("POST", "/v1/sandboxes/keep/exec", {"script": "echo $FROM_IMAGE"})[
        "stdout"] == "yes\n"
    server.ok("DELETE", "/v1/sandboxes/keep")
    assert rm().returncode == 0


def call(stdio, name, arguments, id):
    return stdio.call_tool(name, arguments, id)


def test_mcp_tools_take_an_image(tmp_path, archives):
    cfg = write_config(tmp_path, pool_size=0)
    import_image(cfg, archives / "debian.tar")
    s = Stdio(cfg)
    try:
        s.ask(rpc("initialize", INIT))
        s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools = {t["name"]: t for t in s.ask(rpc("tools/list", id=2))["result"]["tools"]}
        for name in ("run_python", "run_shell", "sandbox_create"):
            assert "image" in tools[name]["inputSchema"]["properties"], name
        r = call(s, "run_python", {"code": "import sys; sys.version_info[0]", "image": DEBIAN}, 3)
        assert r["structuredContent"]["return_value"] == 3, r
        call(s, "sandbox_create", {"name": "mcpdeb", "image": DEBIAN}, 4)
        call(s, "run_python", {"code": "y = 'kept'", "sandbox": "mcpdeb"}, 5)
        r = call(s, "run_python", {"code": "y", "sandbox": "mcpdeb"}, 6)
        assert r["structuredContent"]["return_value"] == "kept", r
        r = call(s, "run_shell", {"command": "true", "sandbox": "mcpdeb", "image": DEBIAN}, 7)
        assert r["isError"] is True and "image" in r["content"][0]["text"], r
        call(s, "sandbox_remove", {"name": "mcpdeb"}, 8)
    finally:
        s.close()


OPERATOR = "operator-token-" + "o" * 20
AGENT = "agent-token-" + "a" * 24


def test_images_api(tmp_path, archives):
    """/v1/images: everyone lists, inspects and pulls what images.allow
    admits; only operators import (a tenant could otherwise plant an image
    under a name every tenant uses) and remove. Imports and removals are
    audited with their digests."""
    s = Server(tmp_path, extra={"pool_size": 0, "tenants": [
        {"name": "ops", "token": OPERATOR, "operator": True},
        {"name": "agent", "token": AGENT}]})
    try:
        upload = (archives / "bb-env.tar").read_bytes()
        headers = {"Content-Type": "application/x-tar"}
        # (a short body: the refusal comes before the server reads an upload)
        r = s.request("POST", "/v1/images/import?tag=team/tool:1", upload[:512], token=AGENT,
                      headers=headers)
        assert r.status == 403, r.body
        r = s.request("POST", "/v1/images/import?tag=team/tool:1", upload, token=OPERATOR,
                      headers=headers)
        assert r.status == 201, r.body
        image_id = r.json["imported"][0]["id"]
        listed = s.ok("GET", "/v1/images", token=AGENT)["images"]
        assert [i["ref"] for i in listed] == ["docker.io/team/tool:1"]
        info = s.ok("GET", "/v1/images/docker.io/team/tool:1", token=AGENT)
        assert info["id"] == image_id and info["config"]["WorkingDir"] == "/etc", info
        r = s.request("GET", "/v1/images/docker.io/team/missing:1", token=AGENT)
        assert r.status == 404
        run = s.ok("POST", "/v1/run", {"command": "echo $FROM_IMAGE", "image": "team/tool:1"},
                   token=AGENT)
        assert run["stdout"] == "yes\n"
        r = s.request("DELETE", "/v1/images/team/tool:1", token=AGENT)
        assert r.status == 403, r.body
        # The run's sandbox is torn down in the background, and with it its
        # lease on the image: until then a removal is 409.
        deadline = time.monotonic() + 30
        r = s.request("DELETE", "/v1/images/team/tool:1", token=OPERATOR)
        while r.status == 409 and time.monotonic() < deadline:
            time.sleep(0.1)
            r = s.request("DELETE", "/v1/images/team/tool:1", token=OPERATOR)
        assert r.status == 200 and r.json["id"] == image_id, r.body
        assert s.ok("GET", "/v1/images", token=AGENT)["images"] == []
        events = [(e["event"], e.get("id") or e.get("images", [{}])[0].get("id"))
                  for e in s.audit_records() if e["event"].startswith("image.")]
        assert events == [("image.import", image_id), ("image.remove", image_id)], events
    finally:
        s.stop()


def test_network_egress_from_the_image(world, tmp_path, archives):
    """HTTP and HTTPS through codecage's proxy from the image's own Python
    (its urllib, its ssl), to the test world's origins on 127.0.0.x."""
    from netlib import CA_PATH, marker
    s = world.server(tmp_path)
    try:
        import_image(s.config_path, archives / "debian.tar")
        m = marker()
        code = f"""
import ssl, sys, urllib.request
ctx = ssl.create_default_context(cafile={CA_PATH!r})
a = urllib.request.urlopen({world.http.url("allowed.test", "/hello?" + m)!r}, timeout=10).read()
b = urllib.request.urlopen({world.https.url("allowed.test", "/hello?" + m)!r}, context=ctx,
                           timeout=10).read()
[a.decode(), b.decode(), sys.version_info[:2]]
"""
        r = s.ok("POST", "/v1/python", {
            "code": code, "image": DEBIAN, "timeout_s": 20, "files": [world.tls.file_entry()],
            "network": [f"allowed.test:{world.P}", f"allowed.test:{world.T}"]})
        assert r["status"] == "ok", r
        assert r["return_value"] == ["hello from http-origin", "hello from tls-origin", [3, 11]]
        assert len(world.http.matching(m)) == 1 and len(world.https.matching(m)) == 1
    finally:
        s.stop()


def test_requirements_install_with_the_images_pip(world, tmp_path, archives):
    """pip requirements in an image: installed by the image's own python3 -m
    pip from the test's local index, into a layer for that image only (the
    host image's run with the same set installs again)."""
    import netlib
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    index = netlib.SimpleIndex([netlib.build_wheel(wheels, "cageimg", "1.0")])
    (tmp_path / "server").mkdir()
    s = world.server(tmp_path / "server", allow=[*world.server_allow(), f"pypi.test:{index.port}"],
                     pip={"index_url": index.url("pypi.test"), "timeout_s": 120})
    try:
        import_image(s.config_path, archives / "debian.tar")
        run_ = lambda **kw: s.request("POST", "/v1/python", {
            "code": "import cageimg, sys\n[cageimg.VALUE, sys.executable]",
            "requirements": ["cageimg==1.0"], "timeout_s": 60, **kw}, timeout=120)
        r = run_(image=DEBIAN)
        assert r.status == 200 and r.json["status"] == "ok", r.body
        assert r.json["return_value"] == ["cageimg-1.0", "/usr/bin/python3"], r.json
        assert r.json["requirements"]["cached"] is False
        again = run_(image=DEBIAN).json
        assert again["requirements"]["cached"] is True and index.download_count("cageimg") == 1
        host = run_().json
        assert host["status"] == "ok" and host["requirements"]["cached"] is False, host
        assert index.download_count("cageimg") == 2
    finally:
        s.stop()
        index.close()


def test_a_run_pulls_its_image_on_first_use_and_says_so(tmp_path):
    """An image the server does not have yet is pulled when a run names it
    (from a registry on 127.0.0.1), audited, and a streamed run reports the
    pull as `status` events before its output."""
    import imagelib as il
    registry = il.Registry(tmp_path)
    try:
        layout = tmp_path / "layout"
        il.oci_layout(layout, [il.busybox_layer()], ref_name="x")
        registry.push(f"oci:{layout}:x", "lib/bb:1")
        ref = f"{registry.host}/lib/bb:1"
        (tmp_path / "srv").mkdir()
        s = Server(tmp_path / "srv",
                   extra={"pool_size": 0, "images": {"plain_http": [registry.host]}})
        try:
            r = s.request("POST", "/v1/run", {"command": "echo from-the-registry", "image": ref},
                          headers={"Accept": "text/event-stream"})
            assert r.status == 200, r.body
            events = [block.split("\n", 1) for block in r.body.decode().split("\n\n") if
                      block.startswith("event: ")]
            names = [e[0][len("event: "):] for e in events]
            assert names[0] == "status" and names[-1] == "result", names
            assert "pulling" in json.loads(events[0][1][len("data: "):])["message"]
            result = json.loads(events[-1][1][len("data: "):])
            assert result["status"] == "ok" and result["stdout"] == "from-the-registry\n"
            pulls = [a for a in s.audit_records() if a["event"] == "image.pull"]
            assert len(pulls) == 1 and pulls[0]["status"] == "ok" and pulls[0]["ref"] == ref
        finally:
            s.stop()
    finally:
        registry.stop()
