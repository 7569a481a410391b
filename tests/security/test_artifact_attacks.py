"""Attacks on the host disk through what the server keeps of one-shot runs:
output/ is copied into <data_dir>/runs/ and stays there for retention_s, so
a run that writes little but looks big, or many runs one after another,
must not be able to fill data_dir (where every tenant's workspaces live).

These run against the normal build only: the limits are plain arithmetic
on what is copied, with no debug switch to turn them off."""
import os
import subprocess

import pytest

from serverlib import Server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server's workspaces need root")

MIB = 1 << 20


def used_bytes(top):
    """Bytes really allocated beneath top (st_blocks), like du."""
    total = 0
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def run(server, command, disk_mib=8):
    return server.ok("POST", "/v1/run", {"command": f"mkdir -p output && {command}",
                                         "disk_mib": disk_mib})


def kept(server, res, name):
    return server.request("GET", f"/v1/runs/{res['run_id']}/files/{name}").status == 200


def test_a_sparse_artifact_costs_data_dir_what_it_holds(tmp_path):
    # 250 MiB that hold nothing: the run's 8 MiB disk stays empty, and so
    # must data_dir (it grew by the file's size when the copy went by st_size).
    server = Server(tmp_path)
    try:
        runs = server.data_dir / "runs"
        before = used_bytes(runs)
        res = run(server, "truncate -s 250M output/big && echo hi > output/small")
        assert res["status"] == "ok" and "artifacts_error" not in res, res
        assert kept(server, res, "small")
        assert used_bytes(runs) - before < 4 * MIB
        big = runs / res["run_id"] / "output" / "big"
        assert big.stat().st_size == 250 * MIB  # the hole is kept, not dropped
    finally:
        server.stop()


def test_a_tenants_kept_artifacts_are_capped_oldest_going_first(tmp_path):
    # Quotas count calls at once; runs one after another are bounded only by
    # artifacts_mib: past it the tenant's oldest kept runs go, and a run that
    # alone is over it keeps nothing and says so.
    server = Server(tmp_path, extra={"quotas": {"artifacts_mib": 1}})
    try:
        write_600k = "head -c 614400 /dev/urandom > output/blob"
        first = run(server, write_600k)
        assert kept(server, first, "blob"), first
        second = run(server, write_600k)
        assert kept(server, second, "blob"), second
        assert not kept(server, first, "blob")  # the oldest went to make room
        too_big = run(server, "head -c 2097152 /dev/urandom > output/blob")
        assert too_big["status"] == "ok"
        assert "artifacts_mib" in too_big.get("artifacts_error", ""), too_big
        assert not kept(server, too_big, "blob")
        assert kept(server, second, "blob")  # a refused run takes nothing away
        assert used_bytes(server.data_dir / "runs") < 2 * MIB
    finally:
        server.stop()


def test_artifacts_never_dip_into_data_dirs_reserve(tmp_path):
    # data_dir on a 64 MiB tmpfs (reserve: 5% of it), filled until 1 MiB is
    # left above the reserve: a run's 3 MiB would still fit on the disk, but
    # only by taking the reserve that keeps the workspaces writable.
    data = tmp_path / "data"
    data.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", str(data)], check=True)
    server = None
    try:
        server = Server(tmp_path)
        vfs = os.statvfs(data)
        reserve = vfs.f_blocks * vfs.f_frsize * 5 // 100
        fill = vfs.f_bavail * vfs.f_frsize - reserve - 1 * MIB
        with open(data / "filler", "wb") as f:
            f.write(b"\1" * fill)
        res = run(server, "head -c 3145728 /dev/urandom > output/blob")
        assert res["status"] == "ok"
        assert "data_dir" in res.get("artifacts_error", ""), res
        assert not kept(server, res, "blob")
        assert not (data / "runs" / res["run_id"]).exists()
    finally:
        if server:
            server.stop()
        subprocess.run(["umount", "-l", str(data)], check=True)
