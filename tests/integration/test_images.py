"""`codecage image`: the image store (docs/IMAGES.md) driven through the
real binary. Every image is made here (tests/imagelib.py: a busybox image
from Debian's busybox-static, packed as a `docker save` archive and as an
OCI layout); the registry is Debian's docker-registry on 127.0.0.1, filled
with skopeo. Nothing is downloaded."""
import base64
import fcntl
import json
import os
import resource
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

import imagelib as il
from conftest import BUILD, SANITIZED


@pytest.fixture
def images(tmp_path):
    return il.Images(BUILD, tmp_path)


@pytest.fixture
def registry(tmp_path):
    r = il.Registry(tmp_path)
    yield r
    r.stop()


def two_layers():
    """busybox, then a layer with a whiteout, an opaque directory and new files."""
    base = il.busybox_layer()
    lower_extra = il.tar_bytes([il.d("opt"), il.d("opt/app"), il.f("opt/app/old", b"old"),
                                il.f("opt/keep", b"keep")])
    upper = il.tar_bytes([
        il.f("etc/.wh.motd"),
        il.d("opt/app"), il.f("opt/app/.wh..wh..opq"), il.f("opt/app/new", b"new\n", 0o640),
        il.f("opt/script.sh", b"#!/bin/sh\necho hi\n", 0o755),
        il.hard("opt/script-link.sh", "opt/script.sh"),
    ])
    return [base, lower_extra, upper]


def check_two_layers(root):
    assert (root / "bin/busybox").read_bytes() == il.BUSYBOX.read_bytes()
    assert os.readlink(root / "bin/sh") == "busybox"
    assert not (root / "etc/motd").exists()  # whited out
    assert sorted(os.listdir(root / "opt/app")) == ["new"]  # opaque: the old entry is gone
    assert (root / "opt/keep").read_bytes() == b"keep"
    assert stat.S_IMODE((root / "opt/app/new").stat().st_mode) == 0o640
    assert stat.S_IMODE((root / "tmp").stat().st_mode) == 0o1777
    assert os.path.samefile(root / "opt/script.sh", root / "opt/script-link.sh")
    assert int((root / "opt/keep").stat().st_mtime) == 1700000000
    assert not list(root.rglob(".wh.*"))


def test_import_docker_save_with_whiteouts(images, tmp_path):
    archive = tmp_path / "img.tar"
    layers = two_layers()
    config = il.image_config(layers, env=["PATH=/bin", "GREETING=hi"], cmd=["sh", "-c", "echo"],
                             entrypoint=["/bin/env"], workdir="/opt", user="1000:1000")
    image_id = il.docker_save(archive, layers, tags=["busybox:multi", "ghcr.io/o/r:v1"],
                              config=config)
    out = images.json("import", str(archive))
    assert {e["ref"] for e in out} == {"docker.io/library/busybox:multi", "ghcr.io/o/r:v1"}
    assert {e["id"] for e in out} == {image_id}
    info = images.json("inspect", "busybox:multi")
    assert info["id"] == image_id
    assert sorted(info["refs"]) == ["docker.io/library/busybox:multi", "ghcr.io/o/r:v1"]
    assert info["config"] == {"Env": ["PATH=/bin", "GREETING=hi"], "WorkingDir": "/opt",
                              "User": "1000:1000", "Cmd": ["sh", "-c", "echo"],
                              "Entrypoint": ["/bin/env"]}
    assert info["platform"] == "linux/amd64"
    assert len(info["layers"]) == 3
    check_two_layers(Path(info["rootfs"]))
    # the same image by its id, and in the plain listing
    assert images.json("inspect", image_id)["id"] == image_id
    table = images.ok("ls").stdout
    assert "docker.io/library/busybox:multi" in table and image_id[:19] in table


def import_two_layers(images, tmp_path, lower, upper):
    il.docker_save(tmp_path / "opq.tar", [il.tar_bytes(lower), il.tar_bytes(upper)],
                   tags=["opq:1"])
    images.ok("import", str(tmp_path / "opq.tar"))
    return images.rootfs("opq:1")


def tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_opaque_marker_after_entries_keeps_them_beneath_implicit_directories(images, tmp_path):
    """The marker comes after d/sub/new, whose d/sub/ the layer does not
    list: d/sub/new stays, lower layers' entries of d go."""
    root = import_two_layers(
        images, tmp_path,
        [il.d("d"), il.d("d/sub"), il.f("d/sub/old", b"old"), il.f("d/other", b"o")],
        [il.f("d/sub/new", b"new"), il.f("d/.wh..wh..opq")])
    assert tree(root / "d") == ["sub", "sub/new"]
    assert (root / "d/sub/new").read_bytes() == b"new"


def test_opaque_marker_after_entries_removes_lower_entries_beneath_them(images, tmp_path):
    """The marker comes after d/, d/keep/ and d/keep/new2: the lower
    layer's d/keep/lower2, which the image's author removed, goes too."""
    root = import_two_layers(
        images, tmp_path,
        [il.d("d"), il.d("d/keep"), il.f("d/keep/lower2", b"l"), il.f("d/x", b"x")],
        [il.d("d"), il.d("d/keep"), il.f("d/keep/new2", b"n"), il.f("d/.wh..wh..opq")])
    assert tree(root / "d") == ["keep", "keep/new2"]


@pytest.mark.parametrize("as_tar", [False, True], ids=["directory", "tar"])
def test_import_oci_layout(images, tmp_path, as_tar):
    layers = two_layers()
    path = tmp_path / ("layout.tar" if as_tar else "layout")
    il.oci_layout(path, layers, ref_name="docker.io/library/bb:oci", as_tar=as_tar)
    out = images.json("import", str(path))
    assert [e["ref"] for e in out] == ["docker.io/library/bb:oci"]
    check_two_layers(images.rootfs("bb:oci"))
    # a layout naming only a tag needs --tag; without it the image is unnamed
    bare = tmp_path / "bare"
    il.oci_layout(bare, [il.busybox_layer()], ref_name="latest")
    assert images.json("import", str(bare))[0]["ref"] is None
    assert images.json("import", str(bare), "--tag", "mine/bb:2")[0]["ref"] == \
        "docker.io/mine/bb:2"


def test_docker_and_oci_of_one_image_share_an_id_and_a_root(images, tmp_path):
    layers = [il.busybox_layer()]
    il.docker_save(tmp_path / "a.tar", layers, tags=["a:1"])
    il.oci_layout(tmp_path / "b", layers, ref_name="docker.io/library/b:1")
    images.ok("import", str(tmp_path / "a.tar"))
    images.ok("import", str(tmp_path / "b"))
    a, b = images.json("inspect", "a:1"), images.json("inspect", "b:1")
    assert a["id"] == b["id"] and a["rootfs"] == b["rootfs"]
    assert len(os.listdir(images.store / "roots")) == 1


def test_bad_inputs_are_refused_with_a_clear_error(images, tmp_path):
    (tmp_path / "empty").mkdir()
    p = images.run("import", str(tmp_path / "empty"))
    assert p.returncode == 125 and "neither a docker save archive" in p.stderr
    (tmp_path / "junk.tar").write_bytes(b"\0garbage" * 100)
    p = images.run("import", str(tmp_path / "junk.tar"))
    assert p.returncode == 125 and "codecage: image import:" in p.stderr
    p = images.run("inspect", "Not/A/Valid:Ref")
    assert p.returncode == 125 and "image reference" in p.stderr
    p = images.run("inspect", "nothere:1")
    assert p.returncode == 125 and "no image docker.io/library/nothere:1" in p.stderr
    il.docker_save(tmp_path / "two.tar", [il.busybox_layer()], tags=["x:1"])
    p = images.run("frobnicate")
    assert p.returncode == 125 and "unknown command" in p.stderr
    assert "codecage image" in images.ok("--help").stdout


def test_config_section_errors_name_the_key(images):
    images.write_config({"no_such_key": 1})
    p = images.run("ls")
    assert p.returncode == 125 and "images.no_such_key: unknown key" in p.stderr
    images.write_config({"platform": "amd64"})
    p = images.run("ls")
    assert p.returncode == 125 and "images.platform" in p.stderr
    images.write_config({"pull_policy": "always"})
    assert "images.pull_policy" in images.run("ls").stderr


def test_rm_keeps_an_image_until_its_last_reference(images, tmp_path):
    il.docker_save(tmp_path / "a.tar", [il.busybox_layer()], tags=["a:1", "a:2"])
    images.ok("import", str(tmp_path / "a.tar"))
    root = images.rootfs("a:1")
    blobs = list((images.store / "blobs/sha256").iterdir())
    assert images.ok("rm", "a:1").stdout.strip() == "a:1"
    assert root.exists() and images.json("inspect", "a:2")
    images.ok("rm", "a:2")
    assert not root.exists()
    assert images.json("ls") == []
    assert not any(b.exists() for b in blobs)  # blobs no image uses are collected
    p = images.run("rm", "a:2")
    assert p.returncode == 125 and "no image" in p.stderr


def children_cpu_s():
    """CPU seconds (user + system) of the waited-for children so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def test_a_big_config_and_many_tags_are_read_in_bounded_cpu(images, tmp_path):
    """The store reads index.json and meta/<id>.json whole, in one read()
    each, and an archive's RepoTags are named in one index update. A config
    near the 8 MiB cap (3,600 Env entries of 2 KB: a 7.4 MB meta) with 200
    tags, imported, inspected, listed and removed: the old code's one read()
    per byte took over 20 CPU seconds for this (5 s per inspect alone, and
    every tag re-read the index and re-parsed the config); whole reads need
    well under 1 s. The bound is 5 s (10 s sanitized): CPU time, not wall
    time, so a busy machine does not move it."""
    layer = il.tar_bytes([il.f("hello", b"hi\n")])
    env = [f"V{i}=" + "x" * 2000 for i in range(3600)]
    config = il.image_config([layer], env=env)
    assert 7_000_000 < len(config) < 8 * 1024 * 1024
    tags = [f"big:{i}" for i in range(200)]
    il.docker_save(tmp_path / "big.tar", [layer], tags=tags, config=config)
    before = children_cpu_s()
    images.ok("import", str(tmp_path / "big.tar"))
    assert len(images.json("inspect", "big:0")["config"]["Env"]) == 3600
    assert len(images.json("ls")) == 200
    images.ok("rm", "big:199")
    spent = children_cpu_s() - before
    assert spent < (10 if SANITIZED else 5), f"{spent:.1f} CPU seconds"


def lease(images, ref):
    """Holds an image the way a sandbox does: a shared flock on its lease."""
    image_id = images.json("inspect", ref)["id"]
    fd = os.open(images.store / "leases" / image_id[7:], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def test_an_image_in_use_is_never_removed_or_pruned(images, tmp_path):
    il.docker_save(tmp_path / "a.tar", [il.busybox_layer()], tags=["a:1"])
    images.ok("import", str(tmp_path / "a.tar"))
    fd = lease(images, "a:1")
    try:
        assert images.json("ls")[0]["in_use"] is True
        before = images.snapshot()
        p = images.run("rm", "a:1")
        assert p.returncode == 125 and "in use" in p.stderr
        assert images.snapshot() == before
        images.write_config({"max_store_mib": 0})
        images.ok("prune")
        assert images.snapshot() == before
    finally:
        os.close(fd)
    images.ok("rm", "a:1")
    assert images.json("ls") == []


def test_prune_removes_unnamed_images_then_lru_to_the_budget(images, tmp_path):
    bb = il.busybox_layer()
    for name in ("old", "new", "anon"):
        layers = [bb, il.tar_bytes([il.f(name, os.urandom(3 << 20))])]
        il.docker_save(tmp_path / f"{name}.tar", layers, tags=[] if name == "anon" else [f"{name}:1"])
        images.ok("import", str(tmp_path / f"{name}.tar"))
    assert len(images.json("ls")) == 3
    old_id = images.json("inspect", "old:1")["id"]
    past = time.time() - 3600
    lease_file = images.store / "leases" / old_id[7:]
    lease_file.touch()  # as a sandbox's use of the image an hour ago would leave it
    os.utime(lease_file, (past, past))
    images.ok("ls")
    assert images.json("inspect", "old:1")["last_used"] // 1000 == int(past)  # a look is no use
    report = images.json("prune")
    assert len(report["removed"]) == 1  # the unnamed one
    assert {e["ref"] for e in images.json("ls")} == {"docker.io/library/old:1",
                                                      "docker.io/library/new:1"}
    # a budget just under what the two use (each has 3 MB of its own):
    # the least recently used goes, the other stays
    budget = (report["size"] >> 20) - 1
    images.write_config({"max_store_mib": budget})
    report = images.json("prune")
    assert report["removed"] == [old_id]
    assert report["size"] <= budget << 20
    assert [e["ref"] for e in images.json("ls")] == ["docker.io/library/new:1"]
    assert images.json("inspect", "new:1")


def test_failed_import_leaves_no_work_behind(images, tmp_path):
    good = il.busybox_layer()
    bad = il.tar_bytes([il.f("a"), il.f("../b")])
    il.docker_save(tmp_path / "bad.tar", [good, bad], tags=["bad:1"])
    images.ok("ls")
    before = images.snapshot()
    assert images.run("import", str(tmp_path / "bad.tar")).returncode == 125
    assert images.snapshot() == before
    assert os.listdir(images.store / "roots") == []


# ---- the registry ----


def push_busybox(registry, tmp_path, repo, layers=None):
    layout = tmp_path / f"push-{repo.replace('/', '-').replace(':', '-')}"
    il.oci_layout(layout, layers or two_layers(), ref_name="x")
    registry.push(f"oci:{layout}:x", repo)
    return layout


def test_pull_anonymously_by_tag_and_by_digest(images, registry, tmp_path):
    push_busybox(registry, tmp_path, "lib/bb:1")
    images.write_config({"plain_http": [registry.host]})
    p = images.ok("pull", f"{registry.host}/lib/bb:1")
    ref, image_id = p.stdout.split()
    assert ref == f"{registry.host}/lib/bb:1"
    assert "pulling" in p.stderr and "unpacking layer 3/3" in p.stderr  # progress on stderr
    info = images.json("inspect", ref)
    check_two_layers(Path(info["rootfs"]))
    digest = info["manifest_digest"]
    # by digest, and name:tag@digest: the same image, nothing fetched twice
    by_digest = images.json("pull", f"{registry.host}/lib/bb@{digest}")
    assert by_digest["id"] == image_id
    assert images.json("inspect", f"{registry.host}/lib/bb@{digest}")["id"] == image_id
    assert images.json("pull", f"{registry.host}/lib/bb:1@{digest}")["id"] == image_id
    wrong = "sha256:" + "0" * 64
    p = images.run("pull", f"{registry.host}/lib/bb@{wrong}")
    assert p.returncode == 125 and "HTTP 404" in p.stderr
    p = images.run("pull", f"{registry.host}/lib/nothere:1")
    assert p.returncode == 125 and "HTTP 404" in p.stderr


def test_plain_http_only_when_listed(images, registry, tmp_path):
    push_busybox(registry, tmp_path, "lib/bb:1")
    p = images.run("pull", f"{registry.host}/lib/bb:1")
    assert p.returncode == 125 and "registry 127.0.0.1" in p.stderr  # tried https only
    assert images.json("ls") == []


def test_allow_patterns_and_pull_policy(images, registry, tmp_path):
    push_busybox(registry, tmp_path, "lib/bb:1")
    images.write_config({"plain_http": [registry.host], "allow": ["docker.io/library/*"]})
    p = images.run("pull", f"{registry.host}/lib/bb:1")
    assert p.returncode == 125 and "not allowed by images.allow" in p.stderr
    images.write_config({"plain_http": [registry.host], "allow": [f"{registry.host}/lib/*"]})
    images.ok("pull", f"{registry.host}/lib/bb:1")
    images.write_config({"plain_http": [registry.host], "pull_policy": "never"})
    p = images.run("pull", f"{registry.host}/lib/bb:1")
    assert p.returncode == 125 and "pull_policy" in p.stderr


def test_two_images_on_one_base_store_it_once(images, registry, tmp_path):
    base = il.busybox_layer()
    push_busybox(registry, tmp_path, "lib/one:1", [base, il.tar_bytes([il.f("one", b"1")])])
    push_busybox(registry, tmp_path, "lib/two:1", [base, il.tar_bytes([il.f("two", b"2")])])
    images.write_config({"plain_http": [registry.host]})
    images.ok("pull", f"{registry.host}/lib/one:1")
    n = len(os.listdir(images.store / "blobs/sha256"))
    images.ok("pull", f"{registry.host}/lib/two:1")
    # one more manifest, config and top layer; the busybox layer is shared
    assert len(os.listdir(images.store / "blobs/sha256")) == n + 3


def test_concurrent_pulls_of_one_image_happen_once(images, registry, tmp_path):
    push_busybox(registry, tmp_path, "lib/bb:1")
    images.write_config({"plain_http": [registry.host]})
    cmd = [str(images.binary), "image", "--config", str(images.config), "--json", "pull",
           f"{registry.host}/lib/bb:1"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    assert len({json.loads(o[0])["id"] for o in outs}) == 1
    assert len(os.listdir(images.store / "roots")) == 1
    assert not [n for n in os.listdir(images.store / "tmp") if not n.endswith(".lock")]


def test_a_pull_past_the_image_bound_is_refused_and_leaves_nothing(images, registry, tmp_path):
    """Small compressed layers that unpack to more than max_image_mib together
    (each within max_layer_mib): the pull fails naming the bound, and no
    root, meta, reference or blob of it stays."""
    zeros = [il.tar_bytes([il.f(f"zeros{i}", b"\0" * 900_000)]) for i in range(3)]
    push_busybox(registry, tmp_path, "lib/bomb:1", zeros)
    images.write_config({"plain_http": [registry.host], "max_layer_mib": 1, "max_image_mib": 2})
    images.ok("ls")
    before = images.snapshot()
    p = images.run("pull", f"{registry.host}/lib/bomb:1")
    assert p.returncode == 125
    assert "layer 3" in p.stderr and "bytes of files in all its layers" in p.stderr
    assert images.snapshot() == before
    assert os.listdir(images.store / "roots") == []
    assert images.json("ls") == []


def test_manifest_list_picks_the_configured_platform(images, registry, tmp_path):
    layout = tmp_path / "multi"
    il.oci_layout_multi(layout, {
        "linux/amd64": [il.busybox_layer(), il.tar_bytes([il.f("arch", b"amd64")])],
        "linux/arm64": [il.busybox_layer(), il.tar_bytes([il.f("arch", b"arm64")])],
    })
    registry.push_all(f"oci:{layout}:multi", "lib/multi:1")
    ref = f"{registry.host}/lib/multi:1"
    for platform, arch in [("linux/amd64", b"amd64"), ("linux/arm64", b"arm64")]:
        images.write_config({"plain_http": [registry.host], "platform": platform})
        info = images.json("pull", ref)
        assert (images.rootfs(ref) / "arch").read_bytes() == arch, platform
        assert images.json("inspect", info["id"])["platform"] == platform
    images.write_config({"plain_http": [registry.host], "platform": "linux/s390x"})
    p = images.run("pull", ref)
    assert p.returncode == 125 and "no manifest for linux/s390x" in p.stderr
    # the same index imported from the layout picks the same way
    images.write_config({"platform": "linux/arm64"})
    images.ok("import", str(layout), "--tag", "multi:local")
    assert (images.rootfs("multi:local") / "arch").read_bytes() == b"arm64"


@pytest.fixture
def auth_registry(tmp_path):
    pw = il.htpasswd_file(tmp_path / "htpasswd", "alice", "s3cret-pass")
    r = il.Registry(tmp_path, htpasswd=pw)
    yield r
    r.stop()


def test_pull_with_basic_auth(images, auth_registry, tmp_path):
    layout = tmp_path / "layout"
    il.oci_layout(layout, two_layers(), ref_name="x")
    auth_registry.push(f"oci:{layout}:x", "priv/bb:1", creds="alice:s3cret-pass")
    ref = f"{auth_registry.host}/priv/bb:1"
    images.write_config({"plain_http": [auth_registry.host]})
    p = images.run("pull", ref)
    assert p.returncode == 125 and "no credentials configured" in p.stderr
    images.write_config({"plain_http": [auth_registry.host], "credentials": {
        auth_registry.host: {"username": "alice", "password": "wrong"}}})
    p = images.run("pull", ref)
    assert p.returncode == 125 and "denied" in p.stderr and "wrong" not in p.stderr
    pwfile = tmp_path / "pw"
    pwfile.write_text("s3cret-pass\n")
    images.write_config({"plain_http": [auth_registry.host], "credentials": {
        auth_registry.host: {"username": "alice", "password_file": str(pwfile)}}})
    images.ok("pull", ref)
    check_two_layers(images.rootfs(ref))


def test_pull_with_a_docker_config_file(images, auth_registry, tmp_path):
    layout = tmp_path / "layout"
    il.oci_layout(layout, [il.busybox_layer()], ref_name="x")
    auth_registry.push(f"oci:{layout}:x", "priv/bb:1", creds="alice:s3cret-pass")
    docker_cfg = tmp_path / "docker-config.json"
    docker_cfg.write_text(json.dumps({"auths": {f"http://{auth_registry.host}": {
        "auth": base64.b64encode(b"alice:s3cret-pass").decode()}}}))
    images.write_config({"plain_http": [auth_registry.host], "docker_config": str(docker_cfg)})
    images.ok("pull", f"{auth_registry.host}/priv/bb:1")


@pytest.fixture
def token_registry(tmp_path):
    tokens = il.TokenServer(tmp_path, "alice", "s3cret-pass")
    r = il.Registry(tmp_path, token=tokens.registry_auth())
    r.tokens = tokens
    yield r
    r.stop()
    tokens.stop()


def test_pull_with_a_bearer_token(images, token_registry, tmp_path):
    layout = tmp_path / "layout"
    il.oci_layout(layout, two_layers(), ref_name="x")
    token_registry.push(f"oci:{layout}:x", "priv/bb:1", creds="alice:s3cret-pass")
    ref = f"{token_registry.host}/priv/bb:1"
    tokens = token_registry.tokens
    # the token realm is another plain-HTTP loopback host: it must be listed too
    plain = [token_registry.host, f"127.0.0.1:{tokens.port}"]
    images.write_config({"plain_http": [token_registry.host]})
    tokens.requests.clear()
    p = images.run("pull", ref)
    assert p.returncode != 0 and "plain_http" in p.stderr
    assert not tokens.requests
    # anonymous: the token service answers, but its token grants nothing
    images.write_config({"plain_http": plain})
    tokens.requests.clear()
    p = images.run("pull", ref)
    assert p.returncode == 125 and "denied" in p.stderr
    assert tokens.requests and not tokens.requests[-1]["authed"]
    assert tokens.requests[-1]["scope"] == "repository:priv/bb:pull"
    assert tokens.requests[-1]["service"] == "codecage-test-registry"
    # with credentials: they go to the token service, the token to the registry
    images.write_config({"plain_http": plain, "credentials": {
        token_registry.host: {"username": "alice", "password": "s3cret-pass"}}})
    tokens.requests.clear()
    images.ok("pull", ref)
    assert tokens.requests[0]["authed"]
    assert len(tokens.requests) == 1  # one token serves the whole pull
    check_two_layers(images.rootfs(ref))


def test_mirrors_are_tried_in_order_before_the_registry(images, registry, tmp_path):
    push_busybox(registry, tmp_path, "lib/bb:1")
    dead = f"127.0.0.1:{il.free_port()}"  # nothing listens there
    # the registry's own host is down: its mirror serves the image
    images.write_config({"plain_http": [registry.host, dead],
                         "mirrors": {dead: ["127.0.0.1:1", registry.host]}})
    images.ok("pull", f"{dead}/lib/bb:1")
    check_two_layers(images.rootfs(f"{dead}/lib/bb:1"))
    # every mirror down: the registry itself answers
    images.write_config({"plain_http": [registry.host, dead],
                         "mirrors": {registry.host: [dead]}})
    images.ok("pull", f"{registry.host}/lib/bb:1")
    # and when nothing answers, the error names the last one tried
    images.write_config({"plain_http": [dead], "mirrors": {dead: ["127.0.0.1:1"]}})
    p = images.run("pull", f"{dead}/lib/other:1")
    assert p.returncode == 125 and f"registry {dead}" in p.stderr
