#!/bin/bash
# Runs inside the test VM (started by /sbin/codecage-vm-init, see
# tests/vm/init.sh) with the work disk mounted at $1, the same path as the
# tree on the host. Sets the machine up the way systemd would on a
# cgroup v2 host: cgroup2 alone on /sys/fs/cgroup, init in init.scope, the
# controllers cpuset, cpu, io, memory and pids enabled from the root down,
# and user 1000 ("cage") given a delegated subtree as Delegate=yes does
# (directory and its cgroup.procs, cgroup.subtree_control, cgroup.threads
# owned by the user). Then runs the stages as root and as that user, each
# between "codecage-vm: stage NAME begins" and "... exited with RC" lines
# that tests/vm/run.sh counts; last prepares the systemd stage
# (tests/vm/systemd/), which runs after this script.
set -u
root=$1
cd "$root" || exit 1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root
export PYTHONDONTWRITEBYTECODE=1

mnt() { mountpoint -q "$2" || mount -t "$1" "${@:3}" "$1" "$2"; }
mnt tmpfs /run -o mode=0755
{ read -r only; read -r pytest_args; read -r tmp; } <tests/vm/.selection 2>/dev/null ||
        { only=all; pytest_args=; tmp=disk; }
# /tmp stays on the root filesystem, as on Debian 12, unless asked for a
# tmpfs (Debian 13, Fedora).
[ "$tmp" = tmpfs ] && mnt tmpfs /tmp -o mode=1777
mkdir -p /dev/pts /dev/shm
mnt devpts /dev/pts -o newinstance,ptmxmode=0666,mode=0620,gid=5
mnt tmpfs /dev/shm -o mode=1777
[ -e /dev/ptmx ] || ln -s pts/ptmx /dev/ptmx
mnt cgroup2 /sys/fs/cgroup -o nsdelegate,memory_recursiveprot
ip link set lo up
# One interface besides loopback, as every host has: without a network
# namespace a sandbox would see it (tests/security/test_host_visibility.py).
modprobe -q dummy && ip link add codecage-vm0 type dummy && ip link set codecage-vm0 up
modprobe -q loop
modprobe -q overlay
hostname codecage-vm

CG=/sys/fs/cgroup
ALL="+cpuset +cpu +io +memory +pids"
mkdir -p $CG/init.scope
echo 1 >$CG/init.scope/cgroup.procs
echo $$ >$CG/init.scope/cgroup.procs
echo "$ALL" >$CG/cgroup.subtree_control

# Root's tests run in a service's group, as under systemd.
mkdir -p $CG/system.slice/codecage-tests.service
echo "$ALL" >$CG/system.slice/cgroup.subtree_control

# The user's delegated subtree: user@1000.service, its processes in
# app.slice/codecage-tests.scope, codecage's sandboxes under codecage/.
USER_CG=$CG/user.slice/user-1000.slice/user@1000.service
mkdir -p $USER_CG
echo "$ALL" >$CG/user.slice/cgroup.subtree_control
echo "$ALL" >$CG/user.slice/user-1000.slice/cgroup.subtree_control
chown cage:cage $USER_CG $USER_CG/cgroup.procs $USER_CG/cgroup.subtree_control $USER_CG/cgroup.threads
echo "+cpu +memory +pids" >$USER_CG/cgroup.subtree_control

echo "codecage-vm: kernel $(uname -r), $(nproc) CPU, $(($(sed -n 's/MemTotal: *\([0-9]*\).*/\1/p' /proc/meminfo) / 1024)) MiB"
echo "codecage-vm: cgroup mounts: $(awk '$3 ~ /^cgroup/ {printf "%s(%s) ", $2, $3}' /proc/mounts)"
echo "codecage-vm: root controllers: $(cat $CG/cgroup.controllers)"
echo "codecage-vm: /tmp is $(stat -f -c %T /tmp)"


# The chosen subset (see docs/TESTING.md): everything that touches limits,
# OOM, timeouts, kill, teardown, sessions, the pool and its zygote, doctor,
# and the whole security suite.
ROOT_TESTS="tests/integration/test_run.py tests/integration/test_oom.py
        tests/integration/test_cli_sandbox.py tests/integration/test_crash_teardown.py
        tests/integration/test_doctor.py tests/integration/test_service.py
        tests/integration/test_tenancy.py tests/integration/test_zygote.py
        tests/integration/test_api_python.py tests/security"
USER_TESTS="tests/integration/test_run.py tests/integration/test_cli_sandbox.py
        tests/integration/test_doctor.py tests/security"
PYTEST="python3 -m pytest -q -p no:cacheprovider -c tests/pytest.ini --rootdir tests"
# meson's per-test timeouts (60-120 s) are for a native machine; emulation
# runs some ten times slower, more on a busy host.
MESON_TEST=(meson test -C build --no-rebuild --timeout-multiplier 10 --print-errorlogs)

stage() {
        local name=$1
        shift
        echo "codecage-vm: stage $name begins"
        local t0=$SECONDS
        "$@" 2>&1 | cat # not a terminal: no progress bars on the console
        local rc=${PIPESTATUS[0]}
        echo "codecage-vm: stage $name exited with $rc ($((SECONDS - t0)) s)"
}

as_user() {
        # Into the user's scope first (root may move it there), then drop
        # to the user with a clean environment.
        (echo $BASHPID >$USER_CG/app.slice/codecage-tests.scope/cgroup.procs &&
                exec setpriv --reuid=cage --regid=cage --init-groups --reset-env \
                        env HOME=/home/cage PATH="$PATH" LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 \
                        CODECAGE_CGROUP_PARENT=$USER_CG/codecage "$@")
}

if [ "$only" = all ] || [ "$only" = root ]; then
        echo $$ >$CG/system.slice/codecage-tests.service/cgroup.procs
        if [ -z "$pytest_args" ]; then
                stage root-unit "${MESON_TEST[@]}" --suite unit
        fi
        # shellcheck disable=SC2086
        stage root-pytest env CODECAGE_BUILD=build $PYTEST ${pytest_args:-$ROOT_TESTS}
fi

if [ "$only" = all ] || [ "$only" = user ]; then
        # The user's own groups, made by the user inside its subtree.
        setpriv --reuid=cage --regid=cage --init-groups \
                mkdir -p $USER_CG/app.slice/codecage-tests.scope $USER_CG/codecage
        chmod 1777 build/meson-logs 2>/dev/null || { mkdir -p build/meson-logs && chmod 1777 build/meson-logs; }
        if [ -z "$pytest_args" ]; then
                # The unit tests that create cgroups and sandboxes; the rest
                # do not depend on who runs them.
                stage user-unit as_user "${MESON_TEST[@]}" --suite unit --logbase testlog-user \
                        cgroup box session workspace
        fi
        # shellcheck disable=SC2086
        stage user-pytest as_user env CODECAGE_BUILD=build $PYTEST ${pytest_args:-$USER_TESTS}
fi
# Last, codecage.service under systemd as PID 1: init hands over after this
# script (tests/vm/systemd/prepare.sh).
if [ "$only" = all ] || [ "$only" = systemd ]; then
        tests/vm/systemd/prepare.sh "$root"
fi
echo "codecage-vm: all stages done"
