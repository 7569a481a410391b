"""Mounts and device nodes from inside the sandbox (host mounts given with
--ro/--rw are covered by test_mount_attacks.py).

The sandbox user holds no capability, so the kernel alone refuses mount(2)
in the sandbox's mount namespace; the way to a mount is a nested user +
mount namespace, where the program is root. The filter closes that (unshare,
clone flags and the whole mount API). Mounts inherited into such a nested
namespace are locked by the kernel: even there the read-only root cannot be
made writable nor the /proc masks removed."""
import json

import pytest

from seclib import expect, pair, target  # noqa: F401 (fixture)

NESTED = "unshare -U -r -m /bin/sh -c '{}' 2>&1"


def mounts_a_filesystem(target):
    r = target.sh(NESTED.format("mount -t tmpfs none /tmp && grep -c \" /tmp tmpfs\" "
                                "/proc/self/mounts && echo MOUNTED"))
    return "MOUNTED" in r["stdout"], r


@pair("seccomp,userns-owner")
def test_mount_new_filesystem(target):
    ok, r = mounts_a_filesystem(target)
    expect(target, ok, r)


def bind_mounts_over_etc(target):
    """Shadowing /etc/passwd with a file of our own (private to the nested
    namespace, but the mount API is reachable)."""
    r = target.sh(NESTED.format("echo evil:x:0:0::/:/bin/sh > /tmp/p && "
                                "mount --bind /tmp/p /etc/passwd && grep -q ^evil /etc/passwd "
                                "&& echo BOUND"))
    return "BOUND" in r["stdout"], r


@pair("seccomp,userns-owner")
def test_bind_mount_over_etc(target):
    ok, r = bind_mounts_over_etc(target)
    expect(target, ok, r)


def uses_new_mount_api(target):
    """fsopen + fsmount + move_mount (through the probe's syscall cases,
    which enter a nested namespace first)."""
    results = [target.probe_json("syscall", n)[0] for n in ("fsopen", "fsmount", "move_mount",
                                                            "open_tree", "mount_setattr")]
    return all(o["errno"] != o["filter_errno"] for o in results), results


@pair("seccomp,userns-owner")
def test_new_mount_api(target):
    ok, results = uses_new_mount_api(target)
    expect(target, ok, results)


# In the sandbox's own mount namespace mount(2) needs CAP_SYS_ADMIN, which
# the sandbox never holds after exec (no switch gives it back: a non-root
# exec clears the permitted set), so these fail with or without the filter.
@pytest.mark.parametrize("disable", [None, "seccomp"],
                         ids=["protected", "still-protected-without-seccomp"])
@pytest.mark.parametrize("script", [
    "mount -o remount,rw /", "mount -o remount,rw /usr", "umount /proc", "umount -l /usr",
    "mount -t proc proc /tmp", "mount --bind /tmp /etc",
])
def test_sandbox_mounts_cannot_be_changed(cage, unsafe_cage, disable, script):
    c = unsafe_cage if disable else cage
    r = c.sh(f"{script} 2>&1; echo rc=$?; touch /x 2>&1",
             *(["--debug-disable", disable] if disable else []))
    assert "rc=0" not in r["stdout"], r
    assert "Read-only file system" in r["stdout"], r


# Locked mounts: in a nested namespace (filter off) the program is root,
# yet the kernel refuses to make the inherited read-only root writable or
# to uncover what the /proc masks hide. A kernel-side guarantee, checked
# with the filter off (the filter refuses the nested namespace earlier).
@pytest.mark.parametrize("script", [
    "mount -o remount,rw / && echo BROKE",
    "mount -o remount,rw,bind /usr && echo BROKE",
    "umount /proc/config.gz && echo BROKE",
    "umount -l /proc/sys && echo BROKE",
])
def test_inherited_mounts_are_locked_in_nested_namespace(unsafe_cage, script):
    r = unsafe_cage.sh(NESTED.format(script) + "; touch /x 2>&1", "--debug-disable", "seccomp")
    assert "BROKE" not in r["stdout"], r
    assert "Read-only file system" in r["stdout"], r


ALLOWED_DEV = {"null", "zero", "full", "random", "urandom", "tty", "fd", "stdin", "stdout",
               "stderr", "ptmx", "pts", "shm"}


# /dev is always built fresh (the rootfs switch leaves it alone), and
# creating device nodes needs CAP_MKNOD in the host's user namespace: no
# switch can make these succeed, so protected build only.
def test_dev_holds_only_the_minimal_nodes(cage):
    out = cage.probe_run("ls", "/dev")
    entries = set(json.loads(out["stdout"])["entries"])
    assert entries <= ALLOWED_DEV, entries - ALLOWED_DEV
    r = cage.sh("ls /dev/pts")
    assert r["stdout"].split() == ["ptmx"], r  # a private devpts instance


@pytest.mark.parametrize("path", ["/dev/sda", "/dev/vda", "/dev/mem", "/dev/kmem", "/dev/port",
                                  "/dev/kmsg", "/dev/vsock", "/dev/fuse", "/dev/kvm",
                                  "/dev/console", "/dev/tty0", "/dev/ttyS0", "/dev/net/tun"])
def test_host_devices_are_absent(cage, path):
    out = json.loads(cage.probe_run("read", path)["stdout"])
    assert out["ret"] == -1 and out["errname"] == "ENOENT", out


@pytest.mark.parametrize("path,major,minor", [("/tmp/sda", 8, 0), ("/tmp/mem", 1, 1),
                                              ("/dev/shm/kmsg", 1, 11),
                                              ("/workspace/vda", 254, 0)])
def test_mknod_device_fails(cage, path, major, minor):
    out = json.loads(cage.probe_run("mknod", path, str(major), str(minor))["stdout"])
    assert out["ret"] == -1 and out["errname"] == "EPERM", out


def test_scratch_and_dev_are_nodev_nosuid(cage):
    """Even a device node smuggled in could not be opened: the scratch
    tmpfs is nodev, and nothing writable is suid or exec-able as suid."""
    r = cage.sh("cat /proc/self/mountinfo")
    for line in r["stdout"].splitlines():
        fields = line.split()
        mnt, opts = fields[4], fields[5].split(",")
        if mnt in ("/tmp", "/workspace", "/dev/shm"):
            assert "nodev" in opts and "nosuid" in opts, line
        if mnt == "/" or mnt.startswith(("/usr", "/etc", "/bin", "/lib", "/sbin")):
            assert "ro" in opts and "nosuid" in opts, line
