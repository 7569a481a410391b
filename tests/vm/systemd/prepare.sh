#!/bin/bash
# The systemd stage of the test VM, first half: run by tests/vm/guest.sh
# (work disk at $1) after the other stages. Installs codecage the way
# docs/OPERATIONS.md says — the binaries in /usr/local/bin, dist/codecage.service
# byte for byte as /etc/systemd/system/codecage.service, dist/config.json as
# /etc/codecage/config.json with a smaller warm pool — plus the checker
# (check.sh, codecage-vm-check.service, codecage-vm.target), and leaves
# /run/codecage-vm/next-init, which the VM's init execs once this script's
# caller is done: systemd then runs as PID 1 with codecage-vm.target as its
# default unit, starts codecage.service, and the checker reports the stage's
# end and powers off. All of it lands on the root filesystem's throw-away
# overlay (QEMU's snapshot=on), never in the cached image.
set -u
root=$1
here=$root/tests/vm/systemd
echo "codecage-vm: stage systemd begins"
fail() {
        echo "codecage-vm: systemd stage: $*"
        echo "codecage-vm: stage systemd exited with 1 (0 s)"
        exit 1
}
[ -x /lib/systemd/systemd ] || fail "/lib/systemd/systemd is missing from the image"
for f in build/codecage build/codecage-full dist/codecage.service dist/config.json; do
        [ -f "$root/$f" ] || fail "$f is missing from the work disk"
done

install -m 0755 "$root/build/codecage" "$root/build/codecage-full" /usr/local/bin/ || fail "install"
install -m 0644 "$root/dist/codecage.service" /etc/systemd/system/codecage.service || fail "install"
# The unit as shipped, to show it was not changed (check.sh compares).
install -D -m 0644 "$root/dist/codecage.service" /usr/local/share/codecage-vm/codecage.service.dist
mkdir -p /etc/codecage
# dist/config.json with one warm sandbox instead of the default two: each
# is a forked Python session, slow to make under emulation.
python3 - "$root/dist/config.json" /etc/codecage/config.json <<'PY' || fail "config"
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["pool_size"] = 1
with open(sys.argv[2], "w") as f:
    json.dump(cfg, f, indent=2)
PY
chmod 0600 /etc/codecage/config.json
install -D -m 0755 "$here/check.sh" /usr/local/libexec/codecage-vm-check || fail "install"
install -m 0644 "$here/codecage-vm-check.service" "$here/codecage-vm.target" /etc/systemd/system/ ||
        fail "install"
# A machine id, so systemd does not take this for a first boot (and run
# systemd-firstboot, which would prompt on the console).
systemd-machine-id-setup >/dev/null 2>&1 || fail "systemd-machine-id-setup"

mkdir -p /run/codecage-vm
date +%s >/run/codecage-vm/systemd-t0
cat >/run/codecage-vm/next-init <<'EOF'
#!/bin/sh
# Exec'd by the VM's init (PID 1) after the other stages: drops the cgroups
# they left (systemd makes its own), then becomes systemd.
find /sys/fs/cgroup -mindepth 1 -depth -type d ! -name init.scope -exec rmdir {} \; 2>/dev/null
exec /lib/systemd/systemd --unit=codecage-vm.target --show-status=false
EOF
chmod 0644 /run/codecage-vm/next-init
echo "codecage-vm: systemd stage: handing PID 1 to $(/lib/systemd/systemd --version | head -1)"
