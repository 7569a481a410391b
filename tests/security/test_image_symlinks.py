"""Symlinks met while the launcher builds the sandbox's root. Mount points
for --ro/--rw targets are created before pivot_root, while the host's
filesystem is still the launcher's root: a symlink in an --image directory
(whose contents may come from an untrusted build, or from an earlier
sandbox's --rw workspace) or one codecage mirrors itself (var/tmp -> /tmp)
must be resolved inside the new root, never on the host. No debug switch
is involved: protected build only."""
import os
import subprocess
import uuid
from pathlib import Path

import pytest


def launch(cage, *options):
    """Runs /bin/true with options; returns (exit code, stdout, stderr). A
    clear refusal (125, naming the mount) is as good as a contained run."""
    p = subprocess.run([str(cage.binary), "run", "--json", *options, "--", "/bin/true"],
                       capture_output=True, timeout=30)
    if p.returncode == 125:
        assert b"mounts[0].target" in p.stderr, p.stderr
    else:
        assert p.returncode == 0, p.stderr
    return p.returncode, p.stdout, p.stderr


@pytest.fixture
def image(tmp_path):
    d = tmp_path / "image"
    d.mkdir()
    d.chmod(0o755)
    return d


def test_image_symlink_does_not_make_the_launcher_write_to_the_host(cage, image):
    name = f"codecage-proof-{uuid.uuid4().hex}"
    planted = Path("/var/tmp") / name
    (image / "evil").symlink_to("/var/tmp")  # absolute: means the host only before pivot_root
    try:
        r = launch(cage, "--image", str(image), "--ro", f"/etc/hostname:/evil/{name}")
        assert not planted.exists(), (
            f"launching created {planted} on the host (owner uid {planted.stat().st_uid}): {r}")
    finally:
        if planted.exists() or planted.is_symlink():
            planted.unlink()


def test_image_symlink_to_a_host_directory_does_not_expose_it(cage, image, host_canary):
    """A mount through image/link -> HOSTDIR must not land in (or reveal)
    HOSTDIR, whatever the launch status."""
    canary, secret = host_canary
    (image / "link").symlink_to(str(canary.parent))
    src = image.parent / "src.txt"
    src.write_text("mounted\n")
    r = launch(cage, "--image", str(image), "--ro", f"{src}:/link/new.txt")
    assert not (canary.parent / "new.txt").exists(), r
    assert sorted(os.listdir(canary.parent)) == ["canary.txt"]


def test_mount_below_var_tmp_lands_at_var_tmp(cage, tmp_path):
    """The host image's /var/tmp is a symlink to /tmp: a mount asked for
    at /var/tmp/x must be at /var/tmp/x (= /tmp/x), not at /x."""
    src = tmp_path / "data.txt"
    src.write_text("payload\n")
    src.chmod(0o644)
    tmp_path.chmod(0o755)
    r = cage.sh("cat /var/tmp/x.txt; ls /", "--ro", f"{src}:/var/tmp/x.txt")
    assert r["status"] == "ok", r
    lines = r["stdout"].split("\n")
    assert lines[0] == "payload", r
    assert "x.txt" not in lines[1:], r


def sandbox_sh(cage, image, script):
    p = subprocess.run([str(cage.binary), "run", "--image", str(image), "--", "/bin/sh", "-c",
                        script], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


@pytest.fixture
def busybox_image(image):
    """A directory image with a shell, whose /etc has its own files."""
    (image / "bin").mkdir()
    (image / "bin" / "busybox").write_bytes(Path("/bin/busybox").read_bytes())
    (image / "bin" / "busybox").chmod(0o755)
    for name in ("sh", "cat", "readlink", "ls"):
        (image / "bin" / name).symlink_to("busybox")
    (image / "etc").mkdir()
    return image


@pytest.mark.skipif(not Path("/bin/busybox").exists(), reason="busybox-static is not installed")
def test_image_etc_files_are_covered_only_when_regular_files(cage, busybox_image, host_canary):
    """codecage binds its own hosts/resolv.conf/hostname over an image's. An
    image whose etc/hosts is a symlink to a host file must not make the
    launcher bind anything there (before pivot_root the link would resolve
    on the host): the link is left as it is, and the host file untouched."""
    canary, secret = host_canary
    etc = busybox_image / "etc"
    (etc / "hosts").symlink_to(str(canary))
    (etc / "hostname").write_text("image-name\n")
    rc, out, err = sandbox_sh(cage, busybox_image,
                              "readlink /etc/hosts; cat /etc/hostname; cat /etc/hosts")
    assert out.splitlines()[:2] == [str(canary), "codecage"], (rc, out, err)
    assert secret not in out
    assert canary.read_text() == secret


@pytest.mark.skipif(not Path("/bin/busybox").exists(), reason="busybox-static is not installed")
def test_image_etc_that_is_a_symlink_to_the_host_etc_is_not_covered(cage, busybox_image):
    """etc -> /etc: resolved inside the new root it is a loop, so nothing is
    covered and the host's /etc stays out of sight."""
    (busybox_image / "etc").rmdir()
    (busybox_image / "etc").symlink_to("/etc")
    rc, out, err = sandbox_sh(cage, busybox_image, "cat /etc/hostname; ls /etc/passwd")
    assert rc != 0 and "codecage" not in out, (rc, out, err)
    host_name = Path("/etc/hostname").read_text().strip() if Path("/etc/hostname").exists() else None
    assert not host_name or host_name not in out
