#!/usr/bin/env python3
"""Pull + unpack of an image from a local registry: `codecage image pull`
against the reference tools, `skopeo copy docker://... oci:...` followed by
`umoci unpack`, on the same image, each into an empty store. Prints the
medians and the ratio (below 1 means codecage is faster). Not a test.

The image is made here: busybox plus a layer holding the host's Python
standard library (thousands of files, tens of MB), pushed with skopeo to
Debian's docker-registry on 127.0.0.1. Usage: bench/images.py [BUILD_DIR] [RUNS]"""
import io
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import imagelib as il  # noqa: E402


def stdlib_layer():
    buf = io.BytesIO()
    src = Path(sysconfig.get_paths()["stdlib"])
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(src, arcname="usr/lib/" + src.name,
                filter=lambda ti: None if "__pycache__" in ti.name else ti)
    return buf.getvalue()


def timed(fn):
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def main():
    build = ROOT / (sys.argv[1] if len(sys.argv) > 1 else "build")
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        registry = il.Registry(tmp)
        try:
            layers = [il.busybox_layer(), stdlib_layer()]
            il.oci_layout(tmp / "layout", layers, ref_name="x")
            registry.push(f"oci:{tmp / 'layout'}:x", "bench/py:1")
            ref = f"{registry.host}/bench/py:1"
            size = sum(len(l) for l in layers)
            ours, theirs = [], []
            for i in range(runs):
                (tmp / f"ours{i}").mkdir()
                images = il.Images(build, tmp / f"ours{i}", images={"plain_http": [registry.host]})
                ours.append(timed(lambda: images.ok("pull", ref)))
                shutil.rmtree(images.data_dir)
                oci, bundle = tmp / f"oci{i}", tmp / f"bundle{i}"

                def baseline():
                    subprocess.run(["skopeo", "copy", "--quiet", "--src-tls-verify=false",
                                    "--insecure-policy", f"docker://{ref}", f"oci:{oci}:x"],
                                   check=True, capture_output=True)
                    subprocess.run(["umoci", "unpack", "--image", f"{oci}:x", str(bundle)],
                                   check=True, capture_output=True)
                theirs.append(timed(baseline))
                shutil.rmtree(oci)
                shutil.rmtree(bundle)
        finally:
            registry.stop()
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"image: busybox + Python stdlib, {size / 1e6:.1f} MB uncompressed, 2 layers")
    print(f"codecage image pull (pull + unpack):   {a * 1000:8.1f} ms (median of {runs})")
    print(f"skopeo copy + umoci unpack:            {b * 1000:8.1f} ms (median of {runs})")
    print(f"ratio codecage / (skopeo + umoci):     {a / b:8.2f}")


if __name__ == "__main__":
    main()
