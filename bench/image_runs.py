#!/usr/bin/python3
"""Running code in an image against running it on the host image, in one
process, interleaved so every variant sees the same machine:

  cold    `codecage run --image <debian-python> -- python3 -c 'print(1)'`
          against the same with the host image, bare python3, and
          `podman run --rm --network none` of the same image (when podman
          works here; said either way)
  pooled  one-shot `POST /v1/python {"code": "print(1)"}` served from a warm
          pool of that image against the host image's pool

The image is Debian 12 with python3, made with mmdebstrap (the tests'
cached copy when there is one). Prints medians and ratios. Not a test.
Usage: bench/image_runs.py [--build DIR] [--rounds N]"""
import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import imagelib as il  # noqa: E402

REF = "codecage-bench/debian-python:12"
PY = ["python3", "-c", "print(1)"]


def debian_rootfs():
    """The tests' builder (cached under /var/tmp), without pytest."""
    import pytest  # noqa: F401  (the builder reports failures through it)
    from test_image_sandboxes import debian_rootfs_tar
    return debian_rootfs_tar()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def median_ms(samples):
    return statistics.median(samples) * 1000


def run_timed(cmd):
    t = time.monotonic()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.monotonic() - t


class Unix(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=60)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.unix_path)


def post(sock, path, body):
    c = Unix(sock)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    doc = json.loads(c.getresponse().read())
    c.close()
    return doc


def get(sock, path):
    c = Unix(sock)
    c.request("GET", path)
    doc = json.loads(c.getresponse().read())
    c.close()
    return doc


def podman_works(tar):
    if not shutil.which("podman"):
        return False, "podman is not installed"
    p = subprocess.run(["podman", "load", "-i", str(tar)], capture_output=True, text=True)
    if p.returncode != 0:
        return False, "podman load failed: " + p.stderr.strip()[-200:]
    p = subprocess.run(["podman", "run", "--rm", "--network", "none", REF, *PY],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return False, "podman run failed: " + p.stderr.strip()[-200:]
    return True, ""


def cold(build, config, tar, rounds):
    cage = str(build / "codecage")
    cmds = {"bare python3": ["/usr/bin/python3", "-c", "print(1)"],
            "host image": [cage, "run", "--", *PY],
            "debian image": [cage, "run", "--config", str(config), "--image", REF, "--", *PY]}
    ok, why = podman_works(tar)
    if ok:
        cmds["podman"] = ["podman", "run", "--rm", "--network", "none", REF, *PY]
    times = {k: [] for k in cmds}
    for _ in range(rounds):
        for k, c in cmds.items():
            times[k].append(run_timed(c))
    print(f"cold start, {rounds} interleaved rounds, python3 -c 'print(1)'")
    for k, v in times.items():
        print(f"  {k:14} median {median_ms(v):8.2f} ms")
    img, host = median_ms(times["debian image"]), median_ms(times["host image"])
    print(f"  ratio debian image / host image  {img / host:.2f}x   (bar: <= 1.10x)")
    if ok:
        print(f"  ratio debian image / podman      {img / median_ms(times['podman']):.3f}x")
    else:
        print(f"  podman: not measured ({why})")


def pooled(build, tmp, rounds):
    sock = str(tmp / "api.sock")
    config = tmp / "serve.json"
    config.write_text(json.dumps({
        "data_dir": str(tmp / "data"), "listen": {"unix": sock, "http": f"127.0.0.1:{free_port()}"},
        "audit_log": str(tmp / "audit.jsonl"), "pool_size": 2,
        "pool": [{"image": REF, "size": 2}]}))
    proc = subprocess.Popen([str(build / "codecage"), "serve", "--config", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                shelves = get(sock, "/v1/pool")["images"]
                if all(s["ready"] == s["size"] for s in shelves):
                    break
            except OSError:
                pass
            time.sleep(0.2)
        times = {"host pool": [], "debian pool": [], "bare python3": []}
        for _ in range(rounds):
            for name, body in (("host pool", {"code": "print(1)"}),
                               ("debian pool", {"code": "print(1)", "image": REF})):
                t = time.monotonic()
                doc = post(sock, "/v1/python", body)
                times[name].append(time.monotonic() - t)
                assert doc.get("status") == "ok" and doc.get("pooled"), doc
                # Let both shelves refill between rounds: every run is a hit.
                while min(s["ready"] for s in get(sock, "/v1/pool")["images"]) < 1:
                    time.sleep(0.01)
            times["bare python3"].append(run_timed(["/usr/bin/python3", "-c", "print(1)"]))
        print(f"\npooled one-shot run_python('print(1)'), {rounds} rounds")
        bare = median_ms(times["bare python3"])
        for k, v in times.items():
            print(f"  {k:14} median {median_ms(v):8.2f} ms   {median_ms(v) / bare:.2f}x bare")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    build = Path(args.build).resolve()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        layer = debian_rootfs().read_bytes()
        tar = tmp / "debian.tar"
        il.docker_save(tar, [layer], tags=(REF,), config=il.image_config([layer]))
        config = tmp / "serve.json"
        config.write_text(json.dumps({"data_dir": str(tmp / "data")}))
        subprocess.run([str(build / "codecage"), "image", "import", str(tar), "--config",
                        str(config)], check=True, capture_output=True)
        cold(build, config, tar, args.rounds)
        pooled(build, tmp, args.rounds)


if __name__ == "__main__":
    main()
