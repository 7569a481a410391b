#!/bin/bash
# Runs codecage's tests in a Debian 12 VM: cgroup v2 only and Debian 12's
# kernel (6.1), as root and as an unprivileged user with a delegated cgroup
# subtree. See docs/TESTING.md.
#
# The root filesystem (Debian 12 from its mirror, by mmdebstrap, with the
# kernel and an initrd) is cached under $CODECAGE_VM_CACHE (default
# /var/tmp/codecage-vm), keyed by its package list and tests/vm/init.sh; the
# host's build/ and build-unsafe/ (built on Debian 12, so they run on the
# guest's userland) and tests/ go in on a second disk made for each run.
# The VM runs tests/vm/guest.sh, which prints every stage to the console,
# shown here with a "vm| " prefix (so that only the closing line counts for
# scripts/test.sh's total); this script prints the closing line
# "N passed, M failed" and exits non-zero when anything failed or the VM
# did not finish. A failure before the VM runs (a missing tool or build, a
# Debian mirror out of reach while building the image) says why and closes
# with "0 passed, 1 failed": it never passes for a skip.
#
# Usage: tests/vm/run.sh [--smp N] [--mem MIB] [--kvm|--tcg] [--timeout SECONDS]
#        [--only root|user|systemd] [--tmpfs-tmp] [-- PYTEST-ARGS...]
# The accelerator is KVM when a probe boots a KVM guest here (kvm_probe),
# else TCG (emulation); --kvm and --tcg force one.
# PYTEST-ARGS replace the default selection of test files (guest.sh);
# --tmpfs-tmp mounts a tmpfs on the guest's /tmp (as Debian 13 and Fedora
# do) instead of leaving it on the root filesystem (as Debian 12 does).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

smp=${CODECAGE_VM_SMP:-2}
mem=${CODECAGE_VM_MEM:-2560}
timeout_s=${CODECAGE_VM_TIMEOUT:-4800}
accel=auto
only=all
tmp=disk
while (($#)); do
        case $1 in
        --smp) smp=$2; shift 2 ;;
        --mem) mem=$2; shift 2 ;;
        --timeout) timeout_s=$2; shift 2 ;;
        --kvm) accel=kvm; shift ;;
        --tcg) accel=tcg; shift ;;
        --only) only=$2; shift 2 ;;
        --tmpfs-tmp) tmp=tmpfs; shift ;;
        --) shift; break ;;
        *) echo "usage: $0 [--smp N] [--mem MIB] [--kvm|--tcg] [--timeout S] [--only root|user|systemd] [--tmpfs-tmp] [-- PYTEST-ARGS]" >&2
           exit 2 ;;
        esac
done
pytest_args="$*"

# What the guest needs: the runtime libraries of codecage's binaries, the
# tools the chosen tests drive, meson to run the unit tests, the kernel
# headers test_seccomp reads, systemd for the stage it runs as PID 1
# (tests/vm/systemd/).
PACKAGES=(linux-image-amd64 initramfs-tools kmod udev iproute2 procps util-linux
        python3 python3-pytest meson ninja-build
        libseccomp2 libjansson4 libsqlite3-0 libmicrohttpd12 libcurl4 libssl3 libmagic1
        libarchive13 busybox-static openssl e2fsprogs tar file curl linux-libc-dev
        docker-registry skopeo umoci systemd)
SUITE=bookworm
MIRRORS=("deb http://deb.debian.org/debian $SUITE main"
        "deb http://deb.debian.org/debian-security $SUITE-security main")
CACHE=${CODECAGE_VM_CACHE:-/var/tmp/codecage-vm}
# Building the image: mmdebstrap, bounded (apt retries a mirror that does
# not answer for minutes).
IMAGE_TIMEOUT=${CODECAGE_VM_IMAGE_TIMEOUT:-1800}
# The KVM probe's bound: a KVM guest reaches the probe's panic in well under
# a second of guest time, TCG in 2 to 4 s of guest time and 6 to 16 s of wall
# time on a busy 2-core host; a KVM guest that hangs (no usable nested
# virtualisation) costs this much.
KVM_PROBE_TIMEOUT=${CODECAGE_VM_KVM_PROBE_TIMEOUT:-5}
# The machine both the probe and the run boot, after -machine q35,accel=...
MACHINE=(-cpu max -smp "$smp")

# Ends the suite without running it: the reason, then the closing line.
give_up() {
        echo "codecage-vm: $*" >&2
        echo "0 passed, 1 failed"
        exit 1
}

for tool in qemu-system-x86_64 mmdebstrap mke2fs; do
        command -v "$tool" >/dev/null || give_up "$tool is missing (scripts/deps.sh installs it)"
done
for b in build build-unsafe; do
        [ -x "$b/codecage" ] || give_up "$b/codecage is missing: build first (scripts/test.sh does)"
done

key=$( (printf '%s\n' minbase "$SUITE" "${PACKAGES[@]}" "${MIRRORS[@]}"; cat tests/vm/init.sh) |
        sha256sum | cut -c1-16)
image=$CACHE/rootfs-$key
mkdir -p "$CACHE"

# The root filesystem: built once per key, in a scratch directory renamed
# into place only when complete.
build_image() {
        local tmp
        tmp=$(mktemp -d "$CACHE/build.XXXXXX")
        trap 'rm -rf "$tmp"' EXIT
        echo "codecage-vm: building the Debian 12 image ($image)" >&2
        local t0=$SECONDS
        timeout "$IMAGE_TIMEOUT" mmdebstrap --variant=minbase --quiet \
                --include="$(IFS=,; echo "${PACKAGES[*]}")" \
                --customize-hook="install -m 0755 '$ROOT/tests/vm/init.sh' \"\$1/sbin/codecage-vm-init\"" \
                --customize-hook='chroot "$1" useradd -m -u 1000 -s /bin/bash cage' \
                --customize-hook='echo codecage-vm >"$1/etc/hostname"' \
                "$SUITE" "$tmp/root" "${MIRRORS[@]}" ||
                give_up "mmdebstrap failed (exit status $?): cannot build the image without the" \
                        "Debian mirror (${MIRRORS[0]})"
        cp "$tmp"/root/boot/vmlinuz-* "$tmp/vmlinuz"
        cp "$tmp"/root/boot/initrd.img-* "$tmp/initrd"
        truncate -s 4G "$tmp/root.img"
        mke2fs -q -t ext4 -L codecage-vm-root -d "$tmp/root" "$tmp/root.img"
        rm -rf "$tmp/root"
        rm -rf "$image"
        mv "$tmp" "$image"
        trap - EXIT # $tmp is gone; outside this function the name means something else
        echo "codecage-vm: image built in $((SECONDS - t0)) s" >&2
        # Images of other keys are stale: 4 GiB each (sparse), never used again.
        find "$CACHE" -mindepth 1 -maxdepth 1 -name 'rootfs-*' ! -path "$image" \
                -exec rm -rf {} +
}
[ -f "$image/root.img" ] || build_image

# Whether a KVM guest boots here: /dev/kvm opens read-write, and the run's
# kernel on the run's machine (CPU model, vCPUs), given no root disk, reaches
# its "VFS: Unable to mount root fs" panic, which panic=-1 turns into a
# reboot and -no-reboot into QEMU's exit, within KVM_PROBE_TIMEOUT seconds.
# Sets probe_result to what it saw. A QEMU still running at the bound (or
# when this script exits) is killed.
probe_pid=
kill_probe() {
        [ -n "$probe_pid" ] || return 0
        kill -TERM "$probe_pid" 2>/dev/null || true
        local tries=10 # a second for it to go on SIGTERM
        while ((tries--)) && kill -0 "$probe_pid" 2>/dev/null; do
                sleep 0.1
        done
        kill -KILL "$probe_pid" 2>/dev/null || true
        wait "$probe_pid" 2>/dev/null || true
        probe_pid=
}
kvm_probe() {
        if ! (exec 3<>/dev/kvm) 2>/dev/null; then
                probe_result="/dev/kvm does not open read-write"
                return 1
        fi
        local plog t0 ms status=0 booted=1 marker="VFS: Unable to mount root fs"
        plog=$(mktemp)
        trap 'kill_probe; rm -f "$plog" "$plog.err"' EXIT
        t0=$(date +%s%N)
        qemu-system-x86_64 -machine q35,accel=kvm "${MACHINE[@]}" -m 256 -display none \
                -no-reboot -monitor none -serial file:"$plog" -nic none \
                -kernel "$image/vmlinuz" -append "console=ttyS0 quiet loglevel=3 panic=-1" \
                </dev/null >"$plog.err" 2>&1 &
        probe_pid=$!
        while kill -0 "$probe_pid" 2>/dev/null && ! grep -qa "$marker" "$plog" &&
                (($(date +%s%N) - t0 < KVM_PROBE_TIMEOUT * 1000000000)); do
                sleep 0.05
        done
        ms=$((($(date +%s%N) - t0) / 1000000))
        grep -qa "$marker" "$plog" || booted=0
        if ((booted)); then
                probe_result="a KVM guest reached its root-mount panic in $ms ms"
        elif kill -0 "$probe_pid" 2>/dev/null; then
                probe_result="a KVM guest did not reach its root-mount panic within $KVM_PROBE_TIMEOUT s (killed)"
        else
                wait "$probe_pid" 2>/dev/null || status=$?
                probe_pid=
                probe_result="QEMU with KVM exited with status $status after $ms ms: $(tail -n 2 "$plog.err" | paste -sd ' ')"
        fi
        kill_probe
        rm -f "$plog" "$plog.err"
        trap - EXIT
        ((booted))
}
case $accel in
auto)
        if kvm_probe 2>/dev/null; then # (not bash's notice of an aborted QEMU)
                accel=kvm
        else
                accel=tcg
        fi
        echo "codecage-vm: accelerator $accel: $probe_result" >&2
        ;;
*) echo "codecage-vm: accelerator $accel: forced by --$accel" >&2 ;;
esac

# The work disk: this tree's tests and builds, mounted at the same path in
# the guest (meson's build files hold absolute paths).
stage=$(mktemp -d /var/tmp/codecage-vm-work.XXXXXX)
trap 'rm -rf "$stage"' EXIT
tar -C "$ROOT" --exclude='./build*/*.p' --exclude='./build*/meson-logs' \
        -cf - tests build build-unsafe meson.build meson_options.txt dist |
        tar -C "$stage" -xf -
mkdir -p "$stage/tests/vm" && printf '%s\n' "$only" "$pytest_args" "$tmp" >"$stage/tests/vm/.selection"
size_mb=$(($(du -sm "$stage" | cut -f1) * 2 + 256))
truncate -s "${size_mb}M" "$stage.img"
mke2fs -q -t ext4 -d "$stage" "$stage.img"
trap 'rm -rf "$stage" "$stage.img"' EXIT

cmdline="root=/dev/vda rw console=ttyS0 quiet loglevel=3 panic=-1 init=/sbin/codecage-vm-init"
cmdline+=" cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 codecage.root=$ROOT"
log=$(mktemp)
trap 'rm -rf "$stage" "$stage.img" "$log"' EXIT
start=$(date +%s)
echo "codecage-vm: booting $(basename "$image"/vmlinuz) ($accel, $smp vCPU, $mem MiB)" >&2
set +e
timeout --foreground "$timeout_s" qemu-system-x86_64 -machine q35,accel="$accel" "${MACHINE[@]}" \
        -m "$mem" -nographic -no-reboot -monitor none -serial stdio \
        -kernel "$image/vmlinuz" -initrd "$image/initrd" -append "$cmdline" \
        -drive file="$image/root.img",if=virtio,format=raw,snapshot=on \
        -drive file="$stage.img",if=virtio,format=raw \
        -nic none </dev/null 2>&1 | tee "$log" | sed -u 's/^/vm| /'
qemu_status=${PIPESTATUS[0]}
set -e
echo "codecage-vm: QEMU exited with $qemu_status after $(($(date +%s) - start)) s" >&2

# The closing line, over every stage the guest ran.
/usr/bin/python3 - "$log" <<'PY'
import re, sys
text = open(sys.argv[1], errors="replace").read().replace("\r", "")


def counts(part):
    passed = failed = 0
    for m in re.finditer(r"^Ok:\s+(\d+)", part, re.M):
        passed += int(m.group(1))
    for m in re.finditer(r"^(?:Fail|Timeout):\s+(\d+)", part, re.M):
        failed += int(m.group(1))
    for line in re.findall(r"^=*\s*(\d+ (?:passed|failed).*?)(?: in [\d.]+s.*)?$", part, re.M):
        if re.fullmatch(r"\d+ passed, \d+ failed, \d+ skipped", line):
            continue  # a unit test's own closing line (its log), counted by meson
        p = re.search(r"(\d+) passed", line)
        f = re.search(r"(\d+) failed", line)
        e = re.search(r"(\d+) error", line)
        passed += int(p.group(1)) if p else 0
        failed += (int(f.group(1)) if f else 0) + (int(e.group(1)) if e else 0)
    return passed, failed


passed = failed = 0
# Each stage: its counts; a stage that failed without a failed test (a
# crash, a collection error) counts as one failure.
for name, body, rc in re.findall(
        r"^codecage-vm: stage (\S+) begins$(.*?)^codecage-vm: stage \1 exited with (\d+)\b",
        text, re.M | re.S):
    p, f = counts(body)
    if rc != "0" and f == 0:
        print(f"codecage-vm: stage {name} failed (exit status {rc})", file=sys.stderr)
        f = 1
    passed += p
    failed += f
# A stage that began and never ended (a hang, a PID 1 that died) fails.
for name in re.findall(r"^codecage-vm: stage (\S+) begins$", text, re.M):
    if not re.search(rf"^codecage-vm: stage {re.escape(name)} exited with \d+", text, re.M):
        print(f"codecage-vm: stage {name} did not end", file=sys.stderr)
        failed += 1
if "codecage-vm: all stages done" not in text:
    print("codecage-vm: the VM did not finish its stages", file=sys.stderr)
    failed += 1
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
