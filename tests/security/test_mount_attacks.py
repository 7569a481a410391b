"""Attacks through host mounts (--ro / --rw). As root, user mounts are
idmapped: the directory's owner appears as the sandbox user. That must not
let the sandbox plant setuid files on the host, escape the mounted tree, or
write through a read-only mount."""
import os
import stat

import pytest


@pytest.fixture
def root_dir(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o755)  # owned by root, not writable by anyone else
    (d / "data.txt").write_text("host data\n")
    return d


def test_rw_mount_of_root_owned_dir_is_writable_and_owned_by_owner(cage, root_dir):
    r = cage.sh("echo made > /mnt/new.txt && cat /mnt/data.txt && stat -c %u /mnt/data.txt",
                "--rw", f"{root_dir}:/mnt")
    assert r["status"] == "ok", r
    assert r["stdout"].split("\n")[:2] == ["host data", "1000"]
    st = (root_dir / "new.txt").stat()
    assert st.st_uid == os.stat(root_dir).st_uid  # lands owned by the directory's owner


SETUID_ATTEMPTS = {
    "chmod": "cp /bin/true /mnt/x && chmod 4755 /mnt/x",
    "chmod-setgid": "cp /bin/true /mnt/x && chmod 2755 /mnt/x",
    "python-open-mode": "/usr/bin/python3 -c \"import os; os.close(os.open('/mnt/x', os.O_CREAT|os.O_WRONLY, 0o4755))\"",
    "python-fchmod": "/usr/bin/python3 -c \"import os; f=os.open('/mnt/x', os.O_CREAT|os.O_WRONLY, 0o755); os.fchmod(f, 0o4755)\"",
}


def _setuid_planted(cage, root_dir, script, disable=None):
    for p in root_dir.glob("x"):
        p.unlink()
    opts = ["--rw", f"{root_dir}:/mnt"]
    if disable:
        opts += ["--debug-disable", disable]
    cage.sh(script + " 2>/dev/null; true", *opts)
    x = root_dir / "x"
    return x.exists() and bool(x.stat().st_mode & (stat.S_ISUID | stat.S_ISGID))


@pytest.mark.parametrize("how", sorted(SETUID_ATTEMPTS))
def test_cannot_plant_setuid_file_on_host(cage, root_dir, how):
    assert not _setuid_planted(cage, root_dir, SETUID_ATTEMPTS[how])


@pytest.mark.parametrize("how", sorted(SETUID_ATTEMPTS))
def test_setuid_plant_succeeds_without_seccomp(unsafe_cage, root_dir, how):
    """Shows the seccomp mode rules are what stops it."""
    assert _setuid_planted(unsafe_cage, root_dir, SETUID_ATTEMPTS[how], disable="seccomp")


def test_ro_mount_cannot_be_written_or_remounted(cage, root_dir):
    r = cage.sh("{ echo x > /mnt/data.txt; } 2>&1; mount -o remount,rw /mnt 2>&1; "
                "{ echo y >> /mnt/data.txt; } 2>&1; cat /mnt/data.txt", "--ro", f"{root_dir}:/mnt")
    assert (root_dir / "data.txt").read_text() == "host data\n"
    assert "Read-only file system" in r["stdout"]


def test_symlink_in_mount_does_not_reach_outside(cage, root_dir, host_canary):
    canary, secret = host_canary
    os.symlink(str(canary), root_dir / "link")
    r = cage.sh("cat /mnt/link 2>&1; true", "--rw", f"{root_dir}:/mnt")
    assert secret not in r["stdout"]


def test_mounting_a_file_does_not_expose_its_directory(cage, root_dir):
    r = cage.sh("ls /opt/one; ls /opt/one/.. 2>&1", "--ro", f"{root_dir / 'data.txt'}:/opt/one/data.txt")
    assert "data.txt" in r["stdout"]
    assert "new.txt" not in r["stdout"]
