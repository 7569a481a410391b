"""Hostile images: layers and archives that try to write or link outside the
image, plant devices or setuid files, wipe the store through a whiteout,
exhaust the disk, or slip in content that does not match its digest.

Each attack is imported with `codecage image import` twice (the pair style
of seclib): by the normal build, where it must fail to do harm -- the host
and the store are left exactly as they were -- and by the unsafe debug
build with that protection switched off (CODECAGE_DEBUG_DISABLE naming it,
see src/images/images_private.h), where the harm must happen, so each test
shows that its protection is what stops it."""
import gzip
import json
import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

import imagelib as il
from conftest import BUILD, DEBUG_BUILD

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="device nodes and setuid files need root to be planted")


def pair(switch):
    return pytest.mark.parametrize("target", [None, switch], indirect=True,
                                   ids=["protected", switch])


@pytest.fixture
def target(request, tmp_path):
    """`codecage image` of the normal build (param None) or of the unsafe
    build with the named protections off."""
    switch = request.param
    env = dict(os.environ)
    if switch:
        env["CODECAGE_DEBUG_DISABLE"] = switch
    images = il.Images(DEBUG_BUILD if switch else BUILD, tmp_path, env=env)
    images.protected = switch is None
    images.ok("ls")  # the store exists before the first snapshot
    return images


@pytest.fixture
def outside(tmp_path):
    """A host directory no image may touch."""
    p = tmp_path / "outside"
    p.mkdir()
    return p


def import_layers(images, tmp_path, layers, name="evil"):
    archive = tmp_path / f"{name}.tar"
    il.docker_save(archive, layers, tags=[f"{name}:1"])
    return images.run("import", str(archive))


def base_image(images, tmp_path):
    """A good image already in the store, which an attack must not harm."""
    archive = tmp_path / "base.tar"
    il.docker_save(archive, [il.busybox_layer()], tags=["base:1"])
    images.ok("import", str(archive))
    return images.rootfs("base:1")


def expect_refused(images, proc, before):
    """The protected build refuses the import and changes nothing."""
    assert proc.returncode != 0, proc.stdout
    assert "codecage: image import:" in proc.stderr
    assert images.snapshot() == before


def import_refused_unless_off(target, tmp_path, layer, message):
    """Imports one layer: the protected build refuses it with message and
    changes nothing; with the protection off it imports."""
    before = target.snapshot()
    proc = import_layers(target, tmp_path, [layer])
    if target.protected:
        expect_refused(target, proc, before)
        assert message in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr


@pair("image-path,image-symlink")
def test_dotdot_path_writes_outside(target, tmp_path, outside):
    base_image(target, tmp_path)
    before = target.snapshot()
    ups = "../" * 40
    layer = il.tar_bytes([il.f(f"{ups}{str(outside)[1:]}/pwned", b"escaped")])
    proc = import_layers(target, tmp_path, [layer])
    if target.protected:
        expect_refused(target, proc, before)
        assert '".." refused' in proc.stderr
    assert (outside / "pwned").exists() != target.protected


@pair("image-path,image-symlink")
def test_absolute_path_writes_outside(target, tmp_path, outside):
    base_image(target, tmp_path)
    before = target.snapshot()
    layer = il.tar_bytes([il.f(f"{outside}/pwned", b"escaped")])
    proc = import_layers(target, tmp_path, [layer])
    if target.protected:
        expect_refused(target, proc, before)
        assert "absolute path refused" in proc.stderr
    assert (outside / "pwned").exists() != target.protected


@pair("image-symlink")
def test_write_through_a_symlink_in_the_same_layer(target, tmp_path, outside):
    base_image(target, tmp_path)
    before = target.snapshot()
    layer = il.tar_bytes([il.sym("escape", str(outside)), il.f("escape/pwned", b"escaped")])
    proc = import_layers(target, tmp_path, [layer])
    if target.protected:
        expect_refused(target, proc, before)
        assert "symbolic link" in proc.stderr
    assert (outside / "pwned").exists() != target.protected


@pair("image-symlink")
def test_write_through_a_symlink_of_a_lower_layer(target, tmp_path, outside):
    """The symlink comes in layer 1 (legal on its own), the write in layer 2."""
    before = target.snapshot()
    lower = il.tar_bytes([il.sym("escape", "../" * 40 + str(outside)[1:])])
    upper = il.tar_bytes([il.f("escape/pwned", b"escaped")])
    proc = import_layers(target, tmp_path, [lower, upper])
    if target.protected:
        expect_refused(target, proc, before)
    assert (outside / "pwned").exists() != target.protected


@pair("image-hardlink")
def test_hard_link_to_a_host_file(target, tmp_path, outside):
    secret = outside / "secret"
    secret.write_text("host secret\n")
    base_image(target, tmp_path)
    before = target.snapshot()
    layer = il.tar_bytes([il.hard("stolen", str(secret))])
    proc = import_layers(target, tmp_path, [layer])
    if target.protected:
        expect_refused(target, proc, before)
        assert "absolute path refused" in proc.stderr  # the link's target is an entry name
        assert secret.stat().st_nlink == 1
    else:
        assert proc.returncode == 0, proc.stderr
        assert os.path.samefile(target.rootfs("evil:1") / "stolen", secret)


@pair("image-hardlink")
def test_hard_link_to_a_lower_layer_file(target, tmp_path):
    """Hard links name files of their own layer only (a lower layer's file
    would be shared, inode and all, between the two names)."""
    before = target.snapshot()
    lower = il.tar_bytes([il.f("etc/shadow", b"root:x:\n", 0o600)])
    upper = il.tar_bytes([il.hard("copy", "etc/shadow")])
    proc = import_layers(target, tmp_path, [lower, upper])
    if target.protected:
        expect_refused(target, proc, before)
    else:
        assert proc.returncode == 0, proc.stderr
        root = target.rootfs("evil:1")
        assert os.path.samefile(root / "copy", root / "etc/shadow")


def find_nodes(root):
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            mode = os.lstat(os.path.join(dirpath, n)).st_mode
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode):
                found.append(n)
    return found


@pair("image-devices")
def test_device_nodes_and_fifos(target, tmp_path):
    layer = il.tar_bytes([
        il.d("dev"),
        {"name": "dev/mem", "type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 1, "mode": 0o666},
        {"name": "dev/sda", "type": tarfile.BLKTYPE, "devmajor": 8, "devminor": 0, "mode": 0o666},
        {"name": "pipe", "type": tarfile.FIFOTYPE, "mode": 0o666},
        il.f("ok", b"kept"),
    ])
    proc = import_layers(target, tmp_path, [layer])
    assert proc.returncode == 0, proc.stderr  # dropped, not refused
    root = target.rootfs("evil:1")
    assert (root / "ok").read_bytes() == b"kept"
    assert bool(find_nodes(target.store)) != target.protected


@pair("image-setuid")
def test_setuid_and_setgid_files(target, tmp_path):
    layer = il.tar_bytes([
        il.f("bin/rootshell", il.BUSYBOX.read_bytes(), 0o4755),
        il.f("bin/groupshell", b"x", 0o2755),
        il.d("shared", 0o3777),
    ])
    proc = import_layers(target, tmp_path, [layer])
    assert proc.returncode == 0, proc.stderr  # stripped, not refused
    root = target.rootfs("evil:1")
    modes = [os.lstat(root / p).st_mode for p in ("bin/rootshell", "bin/groupshell", "shared")]
    planted = any(m & (stat.S_ISUID | stat.S_ISGID) for m in modes)
    assert planted != target.protected
    assert os.lstat(root / "bin/rootshell").st_uid == 0
    assert modes[2] & stat.S_ISVTX  # the sticky bit is harmless and kept


def test_file_capabilities_are_never_restored(tmp_path):
    """A layer's security.capability xattr (a file capability: privilege
    without setuid) is not written; no extended attribute is. Normal build
    only: no switch restores xattrs, the unpacker never writes any."""
    images = il.Images(BUILD, tmp_path)
    archive = tmp_path / "caps.tar"
    info = {"name": "bin/capped", "data": b"x", "mode": 0o755}
    import io
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        ti = tarfile.TarInfo(info["name"])
        ti.size, ti.mode = 1, 0o755
        # cap_setuid+ep, as `setcap` stores it (VFS_CAP_REVISION_2)
        ti.pax_headers = {"SCHILY.xattr.security.capability":
                          "\x01\x00\x00\x02\x80\x00\x00\x00\x80\x00\x00\x00\x00\x00\x00\x00"
                          "\x00\x00\x00\x00"}
        tar.addfile(ti, io.BytesIO(b"x"))
    il.docker_save(archive, [buf.getvalue()], tags=["caps:1"])
    images.ok("import", str(archive))
    path = images.rootfs("caps:1") / "bin/capped"
    assert path.read_bytes() == b"x"
    assert os.listxattr(path, follow_symlinks=False) == []


@pair("image-whiteout")
def test_whiteout_of_dotdot_wipes_the_store(target, tmp_path):
    """`.wh...` names ".." of the image root: the store's roots directory,
    every other image."""
    base = base_image(target, tmp_path)
    before = target.snapshot()
    layer = il.tar_bytes([il.f(".wh...")])
    proc = import_layers(target, tmp_path, [layer])
    if target.protected:
        expect_refused(target, proc, before)
        assert "whiteout" in proc.stderr
    assert (base / "bin/busybox").exists() == target.protected


@pair("image-whiteout")
def test_whiteout_name_as_a_directory(target, tmp_path):
    """`etc/.wh.shadow/x`: its parents would be made on the way, leaving a
    directory named like a whiteout in the image (found by fuzzing)."""
    base_image(target, tmp_path)
    import_refused_unless_off(target, tmp_path, il.tar_bytes([il.f("etc/.wh.shadow/x", b"x")]),
                              "whiteout")
    if not target.protected:
        assert (target.rootfs("evil:1") / "etc/.wh.shadow/x").read_bytes() == b"x"


def test_aufs_bookkeeping_is_skipped(tmp_path):
    """Layers built on AUFS carry .wh..wh.plnk/ and .wh..wh.orph/ at their
    top: skipped as Docker skips them, the rest of the layer applied."""
    images = il.Images(BUILD, tmp_path)
    archive = tmp_path / "aufs.tar"
    layer = il.tar_bytes([il.d(".wh..wh.plnk"), il.f(".wh..wh.plnk/123.456", b"x"),
                          il.d(".wh..wh.orph"), il.f("etc/motd", b"hello")])
    il.docker_save(archive, [layer], tags=["aufs:1"])
    images.ok("import", str(archive))
    root = images.rootfs("aufs:1")
    assert (root / "etc/motd").read_bytes() == b"hello"
    assert not [p for p in os.listdir(root) if p.startswith(".wh.")]


@pair("image-bounds")
def test_huge_sparse_file(target, tmp_path):
    """200 GiB of holes in a few KiB of tar, beyond the 16 GiB default."""
    work = tmp_path / "sparse"
    work.mkdir()
    subprocess.run(["truncate", "-s", "200G", str(work / "big")], check=True)
    subprocess.run(["tar", "--sparse", "-C", str(work), "-cf", str(tmp_path / "layer.tar"), "big"],
                   check=True)
    (work / "big").unlink()
    layer = (tmp_path / "layer.tar").read_bytes()
    assert len(layer) < 1024 * 1024
    import_refused_unless_off(target, tmp_path, layer, "bytes of files")
    if not target.protected:
        assert (target.rootfs("evil:1") / "big").stat().st_size == 200 << 30


@pair("image-bounds")
def test_too_many_entries(target, tmp_path):
    """A layer of many tiny entries, with the entry bound set low."""
    target.write_config({"max_layer_entries": 1000})
    layer = il.tar_bytes([il.d("many")] + [il.f(f"many/{i}", b"") for i in range(1500)])
    import_refused_unless_off(target, tmp_path, layer, "more than 1000 entries")
    if not target.protected:
        assert len(os.listdir(target.rootfs("evil:1") / "many")) == 1500


@pair("image-bounds")
def test_layers_that_together_pass_the_image_bound(target, tmp_path):
    """Three layers, each within max_layer_mib, that unpack to more than
    max_image_mib together: a few MiB here, terabytes of disk from one
    pull with the default per-layer bound alone."""
    base_image(target, tmp_path)
    target.write_config({"max_layer_mib": 1, "max_image_mib": 2})
    before = target.snapshot()
    layers = [il.tar_bytes([il.f(f"part{i}", b"\0" * 900_000)]) for i in range(3)]
    proc = import_layers(target, tmp_path, layers)
    if target.protected:
        expect_refused(target, proc, before)
        assert "more than 2097152 bytes of files in all its layers" in proc.stderr
        assert sorted(os.listdir(target.store / "roots")) == [target.rootfs("base:1").name]
    else:
        assert proc.returncode == 0, proc.stderr
        assert (target.rootfs("evil:1") / "part2").stat().st_size == 900_000


@pair("image-digest")
def test_docker_layer_that_does_not_match_its_diff_id(target, tmp_path):
    good = il.busybox_layer()
    evil = il.tar_bytes([il.f("bin/busybox", b"#!/bin/sh\necho trojan\n", 0o755)])
    archive = tmp_path / "swapped.tar"
    il.docker_save(archive, [evil], tags=["swapped:1"], diff_ids=[il.sha(good)])
    before = target.snapshot()
    proc = target.run("import", str(archive))
    if target.protected:
        expect_refused(target, proc, before)
        assert "does not match" in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        assert b"trojan" in (target.rootfs("swapped:1") / "bin/busybox").read_bytes()


@pair("image-digest")
def test_oci_blob_that_does_not_match_its_name(target, tmp_path):
    good = il.busybox_layer()
    blobs, _ = il.oci_blobs([good])
    layer_digest = [k for k, v in blobs.items() if v[:2] == b"\x1f\x8b"][0]
    evil = __import__("gzip").compress(
        il.tar_bytes([il.f("bin/busybox", b"#!/bin/sh\necho trojan\n", 0o755)]), mtime=0)
    layout = tmp_path / "layout"
    il.oci_layout(layout, [good], ref_name="docker.io/library/swapped:1",
                  blobs_override={"blobs/sha256/" + layer_digest[7:]: evil})
    before = target.snapshot()
    proc = target.run("import", str(layout))
    if target.protected:
        expect_refused(target, proc, before)
    else:
        assert proc.returncode == 0, proc.stderr
        assert b"trojan" in (target.rootfs("swapped:1") / "bin/busybox").read_bytes()


@pair("image-digest")
def test_registry_blob_that_does_not_match_its_digest(target, tmp_path):
    """A registry (or a mirror, or someone on the path) serves other bytes
    for a layer than its manifest's digest names."""
    registry = il.Registry(tmp_path)
    try:
        good = il.busybox_layer()
        layout = tmp_path / "layout"
        il.oci_layout(layout, [good], ref_name="x")
        registry.push(f"oci:{layout}:x", "lib/bb:1")
        blobs, _ = il.oci_blobs([good])
        layer_digest = [k for k, v in blobs.items() if v[:2] == b"\x1f\x8b"][0]
        data = registry.blob_path(layer_digest)
        size = data.stat().st_size
        evil = il.tar_bytes([il.f("bin/busybox", b"#!/bin/sh\necho trojan\n", 0o755)])
        data.write_bytes(evil + b"\0" * (size - len(evil)))  # same length, other bytes
        target.write_config({"plain_http": [registry.host]})
        before = target.snapshot()
        ref = f"{registry.host}/lib/bb:1"
        proc = target.run("pull", ref)
        if target.protected:
            assert proc.returncode == 125
            assert "its content has digest" in proc.stderr
            assert target.snapshot() == before
        else:
            assert proc.returncode == 0, proc.stderr
            assert b"trojan" in (target.rootfs(ref) / "bin/busybox").read_bytes()
    finally:
        registry.stop()


@pair("image-digest")
def test_compressed_layer_that_does_not_match_its_diff_id(target, tmp_path):
    """The manifest's digest pins a layer's compressed bytes only: an image
    whose gzip layer unpacks to other content than its config's diff_id
    (what a registry or an OCI layout can serve consistently) is refused."""
    evil = il.tar_bytes([il.d("bin"), il.f("bin/busybox", b"#!/bin/sh\necho trojan\n", 0o755)])
    layout = tmp_path / "layout"
    il.oci_layout(layout, [evil], ref_name="docker.io/library/swapped:2",
                  config=il.image_config([il.busybox_layer()]))
    before = target.snapshot()
    proc = target.run("import", str(layout))
    if target.protected:
        expect_refused(target, proc, before)
        assert "diff_id" in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        assert b"trojan" in (target.rootfs("swapped:2") / "bin/busybox").read_bytes()


@pytest.mark.parametrize("magic", [b"\x89LZO\x00\r\n\x1a\n", b"LRZI\x00\x06"], ids=["lzop", "lrzip"])
def test_a_layer_is_never_handed_to_an_external_decompressor(tmp_path, magic):
    # libarchive decodes lzop and lrzip (and, on a build without their
    # libraries, others) by running a program found on PATH: a layer in
    # such a format would have been fed to that program as root, outside
    # every sandbox. Here each such program only leaves a mark. No debug
    # switch: the normal build only.
    bindir, mark = tmp_path / "bin", tmp_path / "ran"
    bindir.mkdir()
    for prog in ("lzop", "lrzip", "grzip", "lz4", "lzip", "lzma", "xz", "zstd", "gzip", "bzip2"):
        (bindir / prog).write_text(f"#!/bin/sh\necho {prog} >> {mark}\ncat > /dev/null\n")
        (bindir / prog).chmod(0o755)
    images = il.Images(BUILD, tmp_path, env=dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}"))
    layer = magic + os.urandom(4096)
    archive = tmp_path / "packed.tar"
    il.docker_save(archive, [layer], tags=["packed:1"], diff_ids=[il.sha(layer)])
    proc = images.run("import", str(archive))
    assert proc.returncode != 0, proc.stdout
    assert not mark.exists(), mark.read_text()


def nested_index_layout(path, depth):
    """An OCI layout (a .tgz) whose index.json names an index that names an
    index ... depth deep, the last naming a real image's manifest."""
    layer = il.tar_bytes([il.f("hello", b"hi\n")])
    blobs, manifest = il.oci_blobs([layer])
    media = "application/vnd.oci.image.index.v1+json"
    desc = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": il.sha(manifest), "size": len(manifest),
            "platform": {"os": "linux", "architecture": "amd64"}}
    for _ in range(depth):
        index = json.dumps({"schemaVersion": 2, "mediaType": media,
                            "manifests": [desc]}).encode()
        blobs[il.sha(index)] = index
        desc = {"mediaType": media, "digest": il.sha(index), "size": len(index),
                "platform": {"os": "linux", "architecture": "amd64"}}
    desc["annotations"] = {"org.opencontainers.image.ref.name": "docker.io/library/nest:1"}
    files = {"oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
             "index.json": json.dumps({"schemaVersion": 2, "manifests": [desc]}).encode()}
    files.update({"blobs/sha256/" + d[7:]: data for d, data in blobs.items()})
    path.write_bytes(gzip.compress(il.tar_bytes([il.f(n, data) for n, data in files.items()])))


def test_nested_indexes_are_refused(tmp_path):
    """5,000 indexes each inside the next (a 0.5 MB .tgz) crashed the
    importer, which followed them recursively without a bound. As for a
    pull, index.json may name an index, whose entries must be manifests:
    the chain is refused cleanly (no crash signal) and the store is left as
    it was; one level of index still imports."""
    images = il.Images(BUILD, tmp_path, images={"platform": "linux/amd64"})
    images.ok("ls")
    before = images.snapshot()
    nested_index_layout(tmp_path / "nest.tgz", 5000)
    proc = images.run("import", str(tmp_path / "nest.tgz"))
    assert proc.returncode > 0, (proc.returncode, proc.stderr[-500:])
    assert "an index inside an index" in proc.stderr
    assert images.snapshot() == before
    nested_index_layout(tmp_path / "one.tgz", 1)
    images.ok("import", str(tmp_path / "one.tgz"))
    assert images.json("inspect", "nest:1")["config"]


def tagged_archive(path, tags, data=b"hi\n"):
    layer = il.tar_bytes([il.f("hello", data)])
    il.docker_save(path, [layer], tags=tags)


def test_an_archive_with_too_many_repo_tags_is_refused(tmp_path):
    """Each reference is a key of index.json, which the store reads whole:
    one archive names an image at most 256 times. 300 RepoTags are refused
    before anything is stored; the store still works."""
    images = il.Images(BUILD, tmp_path)
    images.ok("ls")
    before = images.snapshot()
    tagged_archive(tmp_path / "tags.tar", [f"t:{i}" for i in range(300)])
    proc = images.run("import", str(tmp_path / "tags.tar"))
    assert proc.returncode > 0 and "300 RepoTags, more than 256" in proc.stderr
    assert images.snapshot() == before
    tagged_archive(tmp_path / "ok.tar", [f"t:{i}" for i in range(256)])
    images.ok("import", str(tmp_path / "ok.tar"))
    assert len(images.json("ls")) == 256


def test_references_are_capped_in_total(tmp_path):
    """A registry answering every tag with one small image grew index.json
    without bound until no command could read it. images.max_refs caps the
    references: a commit that would pass it is refused, before the image is
    built, and the store is as it was; re-pointing a known reference and
    naming after an rm still work."""
    images = il.Images(BUILD, tmp_path, images={"max_refs": 3})
    tagged_archive(tmp_path / "a.tar", ["a:1", "a:2"])
    images.ok("import", str(tmp_path / "a.tar"))
    before = images.snapshot()
    tagged_archive(tmp_path / "b.tar", ["b:1", "b:2"], b"other\n")
    proc = images.run("import", str(tmp_path / "b.tar"))
    assert proc.returncode > 0 and "images.max_refs (3)" in proc.stderr, proc.stderr
    assert images.snapshot() == before
    images.ok("import", str(tmp_path / "a.tar"))  # the same names again: none new
    images.ok("rm", "a:1")
    tagged_archive(tmp_path / "c.tar", ["c:1", "c:2"], b"third\n")
    images.ok("import", str(tmp_path / "c.tar"))
    assert sorted(e["ref"] for e in images.json("ls")) == [
        "docker.io/library/a:2", "docker.io/library/c:1", "docker.io/library/c:2"]


def test_an_index_over_its_read_bound_can_be_repaired(tmp_path):
    """A store whose index.json outgrew the 64 MiB every reader accepts
    (made before references were capped) is not stuck: `rm` reads up to
    four times more, so removing the image by id drops its references and
    the store works again."""
    images = il.Images(BUILD, tmp_path)
    tagged_archive(tmp_path / "a.tar", ["a:1"])
    images.ok("import", str(tmp_path / "a.tar"))
    image = images.json("inspect", "a:1")
    entry = {"id": image["id"], "manifest_digest": image["manifest_digest"]}
    refs = {f"docker.io/library/{'x' * 200}:{i}": entry for i in range(190_000)}
    index = json.dumps({"refs": refs}, separators=(",", ":"))
    assert len(index) > 64 * 1024 * 1024
    (images.store / "index.json").write_text(index)
    proc = images.run("ls")
    assert proc.returncode > 0 and "index.json: too large" in proc.stderr
    images.ok("rm", image["id"])
    assert images.json("ls") == []
