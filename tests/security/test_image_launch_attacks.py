"""Images attacking the launch rather than the store: an image's User is
resolved in the image's own /etc/passwd, which the image controls. A
symlink there to a host file must not make codecage read the host's file
(it would learn, and run as, the ids the host file lists): the accounts
are read inside the image's root.

Pair style: `codecage run --image` of the normal build must refuse the
image (its User is not in its own passwd); the unsafe build with
CODECAGE_DEBUG_DISABLE=image-accounts follows the link and runs as the
host file's ids, which shows the protection is what stops it."""
import json
import os
import subprocess

import pytest

import imagelib as il
from conftest import BUILD, DEBUG_BUILD

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the image store needs root")

REF = "codecage-test/accounts-link:1"


@pytest.fixture
def image_with_linked_passwd(tmp_path):
    """A host file shaped like passwd, and an image whose etc/passwd is an
    absolute symlink to it, with User naming the account only it has."""
    host = tmp_path / "host-accounts"
    host.write_text("hostonly:x:4242:4343::/:/bin/sh\n")
    host.chmod(0o644)
    base = il.busybox_layer()
    link = il.tar_bytes([il.d("etc"), il.sym("etc/passwd", str(host))])
    archive = tmp_path / "image.tar"
    il.docker_save(archive, [base, link], tags=(REF,),
                   config=il.image_config([base, link], user="hostonly"))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"data_dir": str(tmp_path / "data")}))
    p = subprocess.run([str(BUILD / "codecage"), "image", "import", str(archive), "--config",
                        str(config)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return config


@pytest.mark.parametrize("switch", [None, "image-accounts"], ids=["protected", "image-accounts"])
def test_user_lookup_stays_inside_the_image(image_with_linked_passwd, switch):
    env = dict(os.environ)
    if switch:
        env["CODECAGE_DEBUG_DISABLE"] = switch
    build = DEBUG_BUILD if switch else BUILD
    p = subprocess.run([str(build / "codecage"), "run", "--config", str(image_with_linked_passwd),
                        "--image", REF, "--", "/bin/id", "-u"], capture_output=True, text=True,
                       timeout=60, env=env)
    used_host_file = p.returncode == 0 and p.stdout.strip() == "4242"
    if switch:
        assert used_host_file, (p.returncode, p.stdout, p.stderr)
    else:
        assert not used_host_file, p.stdout
        assert p.returncode == 125 and "not in its /etc/passwd" in p.stderr, p.stderr
