"""The host's filesystem: the sandbox sees a minimal read-only image (the
host's /usr, a synthetic /etc with a handful of files, no /root, /home,
/var contents or /run), a fresh /proc with host-wide files masked, and it
cannot write anywhere but its scratch tmpfs.

The `rootfs` switch binds the whole host / (read-only) instead of the
image, which is what makes the host-file attacks succeed."""
import pytest

from seclib import Target, expect, last_json, pair, target  # noqa: F401 (fixture)

ALLOWED_ETC = {"passwd", "group", "hosts", "resolv.conf", "nsswitch.conf", "hostname",
               "ld.so.cache", "ssl", "alternatives", "localtime", "os-release"}


def reads_host_canary(target, canary, secret, path=None):
    out, r = target.probe_json("read", path or str(canary))
    return out["ret"] == 0 and secret in out.get("content", ""), out


@pair("rootfs")
def test_host_file_is_invisible(target, host_canary):
    canary, secret = host_canary
    ok, out = reads_host_canary(target, canary, secret)
    expect(target, ok, out)
    if target.protected:
        assert out["errname"] == "ENOENT", out


@pair("rootfs")
def test_host_file_via_proc_self_root_dotdot(target, host_canary):
    """/proc/self/root/../../PATH: ".." at the process root stays there."""
    canary, secret = host_canary
    ok, out = reads_host_canary(target, canary, secret,
                                path=f"/proc/self/root/../../..{canary}")
    expect(target, ok, out)


def lists_more_of_etc(target):
    out, r = target.probe_json("ls", "/etc")
    extra = set(out["entries"]) - ALLOWED_ETC
    return bool(extra), sorted(extra)[:20]


@pair("rootfs")
def test_etc_lists_only_the_allowed_files(target):
    ok, extra = lists_more_of_etc(target)
    expect(target, ok, extra)


def lists_host_top_level(target):
    out, r = target.probe_json("ls", "/")
    return bool({"root", "home", "boot", "srv", "mnt", "media"} & set(out["entries"])), out


@pair("rootfs")
def test_root_shows_only_the_image(target):
    ok, out = lists_host_top_level(target)
    expect(target, ok, out)


# Two layers, one not switchable: /etc/shadow and /root are absent from the
# image, and with the host root bound (--debug-disable rootfs) they are
# still unreadable because the sandbox user is an unprivileged host uid
# (no switch maps root). Tested in both, expecting failure in both.
@pytest.mark.parametrize("disable", [None, "rootfs"],
                         ids=["protected", "still-protected-without-rootfs"])
@pytest.mark.parametrize("op,path", [("read", "/etc/shadow"), ("read", "/etc/gshadow"),
                                     ("ls", "/root"), ("read", "/root/.bash_history")])
def test_privileged_host_files_are_unreadable(cage, unsafe_cage, disable, op, path):
    t = Target(unsafe_cage, disable) if disable else Target(cage, None)
    out, r = t.probe_json(op, path)
    assert out["ret"] == -1, out
    assert out["errname"] in ("ENOENT", "EACCES"), out


# /proc/1 is the sandbox's init, a clone of the supervisor: it keeps the
# supervisor's memory and host context (its exe is codecage's binary, its
# environ codecage's environment). It is non-dumpable, so the sandbox user
# may not follow its root/cwd/exe links or read its environ or memory. No
# debug switch makes it dumpable: protected build only.
@pytest.mark.parametrize("op,path", [
    ("ls", "/proc/1/root"), ("read", "/proc/1/root/etc/passwd"),
    ("read", "/proc/1/root/../../../etc/shadow"), ("ls", "/proc/1/cwd"),
    ("readlink", "/proc/1/exe"), ("read", "/proc/1/exe"), ("write", "/proc/1/exe"),
    ("read", "/proc/1/environ"), ("read", "/proc/1/mem"), ("read", "/proc/1/maps"),
    ("ls", "/proc/1/fd"),
])
def test_proc_1_links_are_closed(cage, op, path):
    out, _ = _probe(cage, op, path)
    assert out["ret"] == -1 and out["errname"] == "EACCES", out


def _probe(cage, *args):
    r = cage.probe_run(*args)
    return last_json(r["stdout"]), r


# The program's own binary: /proc/self/exe reopened for writing (the runc
# CVE-2019-5736 pattern) fails — the binary is a read-only bind, owned by a
# uid the sandbox does not map, and busy. No switch makes binds writable.
@pytest.mark.parametrize("path", ["/proc/self/exe", "/opt/probe/cage-probe"])
def test_own_binary_cannot_be_rewritten(cage, path):
    out, _ = _probe(cage, "write", path)
    assert out["ret"] == -1 and out["errname"] in ("EROFS", "ETXTBSY", "EACCES"), out
    out, _ = _probe(cage, "readlink", "/proc/self/exe")
    assert out["target"] == "/opt/probe/cage-probe", out


# The read-only root: the root tmpfs and /etc files belong to the sandbox
# user, so the read-only remount is the one layer — and it has no debug
# switch (nor does the read-only bind of /usr). Protected build only.
@pytest.mark.parametrize("path", ["/newfile", "/etc/passwd", "/etc/newfile", "/etc/ld.so.cache",
                                  "/usr/newfile", "/usr/bin/sh", "/bin/newfile", "/var/newfile",
                                  "/run/newfile", "/proc/newfile"])
def test_rootfs_is_read_only(cage, path):
    out, _ = _probe(cage, "write", path)
    assert out["ret"] == -1 and out["errname"] in ("EROFS", "EACCES", "ENOENT"), out
    if path.startswith(("/new", "/etc/", "/var/", "/run/")):
        # The sandbox user owns these: only the read-only mount refuses.
        assert out["errname"] == "EROFS", out


def test_scratch_is_writable(cage):
    """The counterpart: /tmp, /workspace and /dev/shm are writable."""
    r = cage.sh("for d in /tmp /workspace /workspace/output /dev/shm; do "
                "echo x > $d/f && echo ok; done")
    assert r["stdout"].split() == ["ok"] * 4, r


# (keys and key-users are masked too, but in a fresh user namespace they
# list nothing, so there is nothing to show either way.)
MASKED_PROC = ["config.gz", "zoneinfo", "buddyinfo", "kallsyms", "iomem"]


def reads_host_wide_proc(target, name):
    out, r = target.probe_json("read", f"/proc/{name}")
    if out["ret"] == -1 and out["errname"] == "ENOENT":
        pytest.skip(f"/proc/{name} does not exist on this kernel")
    if out["ret"] == -1 and out["errname"] == "EACCES":
        pytest.skip(f"/proc/{name} is not readable by unprivileged users here: nothing to mask")
    return out["ret"] == 0 and out["content"] != "", out


@pair("proc-mask")
@pytest.mark.parametrize("name", MASKED_PROC)
def test_host_wide_proc_files_are_masked(target, name):
    ok, out = reads_host_wide_proc(target, name)
    expect(target, ok, out)


# Writing /proc/sys/kernel/hostname needs root of the sandbox's user
# namespace, which the sandbox never is; the read-only bind of /proc/sys is
# the other layer. Both refuse, with or without the mask.
@pytest.mark.parametrize("disable", [None, "proc-mask"],
                         ids=["protected", "still-protected-without-proc-mask"])
@pytest.mark.parametrize("path", ["/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger",
                                  "/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches",
                                  "/proc/sys/kernel/modprobe"])
def test_host_kernel_knobs_are_not_writable(cage, unsafe_cage, disable, path):
    t = Target(unsafe_cage, disable) if disable else Target(cage, None)
    before = open(path).read() if path.startswith("/proc/sys/kernel/core") else None
    out, _ = t.probe_json("write", path)
    assert out["ret"] == -1 and out["errname"] in ("EROFS", "EACCES", "ENOENT", "EPERM"), out
    if before is not None:
        assert open(path).read() == before
