"""A full data_dir (a small tmpfs here): every request that needs room gets
a clear 507, nothing half-written becomes visible (a file upload, a run's
artifacts, a sandbox's record), the store stays sound, /readyz says why,
and the server keeps serving -- and recovers once there is room again."""
import os
import sqlite3
import subprocess

import pytest

from serverlib import Server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs; sandboxes need root")


@pytest.fixture
def small_data_dir(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", str(data)],
                   check=True)
    yield data
    subprocess.run(["umount", "-l", str(data)], check=False)


def fill(path):
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError:
            pass


def test_a_full_data_dir_fails_requests_cleanly(tmp_path, small_data_dir):
    s = Server(tmp_path, extra={"pool_size": 0})
    try:
        s.ok("POST", "/v1/sandboxes", {"name": "a", "disk_mib": 256})
        s.ok("PUT", "/v1/sandboxes/a/files/before.txt", b"kept")
        filler = small_data_dir / "filler"
        fill(filler)

        r = s.request("POST", "/v1/sandboxes", {"name": "b"})
        assert r.status == 507 and "data_dir is full" in r.json["error"]["message"], r.body
        names = [x["name"] for x in s.ok("GET", "/v1/sandboxes")["sandboxes"]]
        assert names == ["a"]

        r = s.request("PUT", "/v1/sandboxes/a/files/big.bin", b"y" * (12 << 20))
        assert r.status == 507 and "data_dir is full" in r.json["error"]["message"], r.body
        listed = [e["name"] for e in s.ok("GET", "/v1/sandboxes/a/files")["entries"]]
        assert "big.bin" not in listed and not any(n.startswith(".codecage-tmp") for n in listed)

        res = s.ok("POST", "/v1/run", {"command": "mkdir -p output; "
                                       "head -c 2000000 /dev/urandom > output/a.bin; echo ok"})
        assert res["status"] == "ok" and "data_dir is full" in res["artifacts_error"]
        assert s.request("GET", f"/v1/runs/{res['run_id']}/files/a.bin").status == 404

        r = s.request("GET", "/readyz")
        assert r.status == 503 and "disk" in " ".join(r.json["reasons"])
        assert s.request("GET", "/healthz").status == 200

        os.unlink(filler)
        s.ok("POST", "/v1/sandboxes", {"name": "c"})
        s.ok("PUT", "/v1/sandboxes/a/files/big.bin", b"y" * (12 << 20))
        assert s.request("GET", "/v1/sandboxes/a/files/before.txt").body == b"kept"
        assert s.request("GET", "/readyz").status == 200
        names = sorted(x["name"] for x in s.ok("GET", "/v1/sandboxes")["sandboxes"])
        assert names == ["a", "c"]
    finally:
        s.stop()
    # The store is sound after all that.
    db = sqlite3.connect(str(small_data_dir / "sandboxes.db"))
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert sorted(n for (n,) in db.execute("SELECT name FROM sandboxes")) == ["a", "c"]
    db.close()
