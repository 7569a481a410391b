"""An image reference as an E2B templateID (docs/E2B.md): the sandbox runs in
that image (imported into the store offline: a busybox image built from
Debian's busybox-static, tests/imagelib.py), its files and commands are the
image's, and the info and list of the control plane name the reference.
Templates `images.allow` does not admit are refused, and one the store does
not hold is "not found" with pull_policy never. Driven over the E2B HTTP API
directly (tests/e2blib.py): the SDKs run every command with /bin/bash, which
a busybox image has not."""
import os
import subprocess

import pytest

from conftest import BUILD
from e2blib import E2B
from imagelib import busybox_layer, d, docker_save, f, image_config, tar_bytes
from serverlib import Server, free_port

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's sandboxes need root")

KEY = "e2b_" + "3d" * 20
IMAGE = "codecage-test/busybox-e2b:1"
MARK = b"made for the e2b template test\n"


@pytest.fixture
def server(tmp_path):
    port = free_port()
    extra = {"e2b": {"listen": f"127.0.0.1:{port}"}, "pool_size": 0,
             "images": {"allow": ["docker.io/codecage-test/busybox-e2b*"],
                        "pull_policy": "never"}}
    base = busybox_layer()
    mark = tar_bytes([d("etc"), f("etc/e2b-template", MARK)])
    cfg = image_config([base, mark], env=["PATH=/bin", "FROM_IMAGE=yes"])
    docker_save(tmp_path / "image.tar", [base, mark], tags=(IMAGE,), config=cfg)
    s = Server(tmp_path, tenants={"alice": KEY}, extra=extra)
    try:
        p = subprocess.run([str(BUILD / "codecage"), "image", "import", str(tmp_path / "image.tar"),
                            "--config", str(s.config_path)], capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr
        s.e2b = E2B(port, KEY)
        yield s
    finally:
        s.stop()


def test_an_image_reference_as_the_template(server):
    e2b = server.e2b
    sbx = e2b.create(templateID=IMAGE, envVars={"FROM_CREATE": "too"})
    assert sbx["templateID"] == IMAGE, sbx
    status, out = e2b.run(sbx, 'cat /etc/e2b-template; echo "$FROM_IMAGE $FROM_CREATE"; '
                               'test -e /bin/bash && echo bash || echo no-bash', shell="/bin/sh")
    assert status == 200 and out == MARK.decode() + "yes too\nno-bash\n", (status, out)
    # The host's files are not there: the image is the root.
    status, out = e2b.run(sbx, "test -e /usr/bin/python3 && echo host || echo image",
                          shell="/bin/sh")
    assert (status, out) == (200, "image\n")
    # Files through /files land in the image sandbox's workspace.
    status, body = e2b.write(sbx, "in.txt", b"uploaded")
    assert status == 200, (status, body)
    status, out = e2b.run(sbx, "cat /workspace/in.txt", shell="/bin/sh")
    assert (status, out) == (200, "uploaded")
    assert e2b.read(sbx, "in.txt") == (200, b"uploaded")
    status, info = e2b.control("GET", f"/sandboxes/{sbx['sandboxID']}")
    assert status == 200 and info["templateID"] == IMAGE, (status, info)
    status, listed = e2b.control("GET", "/v2/sandboxes?template=" + IMAGE)
    assert status == 200 and [s["sandboxID"] for s in listed] == [sbx["sandboxID"]], listed
    host = e2b.create()
    status, listed = e2b.control("GET", "/v2/sandboxes?template=base")
    assert [s["sandboxID"] for s in listed] == [host["sandboxID"]], listed
    # codecage's own API shows the image in the sandbox's spec.
    r = server.request("GET", f"/v1/sandboxes/{sbx['sandboxID']}", token=KEY)
    assert r.status == 200 and IMAGE in r.json["spec"]["image"], r.body


def test_templates_the_policy_or_the_store_refuse(server):
    e2b = server.e2b
    status, body = e2b.control("POST", "/v2/sandboxes", {"templateID": "codecage-test/other:1"})
    assert status == 403 and body["code"] == 403 and "images.allow" in body["message"], body
    status, body = e2b.control("POST", "/v2/sandboxes",
                               {"templateID": "codecage-test/busybox-e2b:absent"})
    assert status == 404 and body["code"] == 404 and "pull_policy" in body["message"], body
    status, body = e2b.control("POST", "/v2/sandboxes", {"templateID": "Not A Ref!"})
    assert status == 400 and body["code"] == 400, body
    status, listed = e2b.control("GET", "/v2/sandboxes")
    assert status == 200 and listed == [], listed
