#!/bin/sh
# PID 1 of the test VM's root filesystem (installed as /sbin/codecage-vm-init
# when the image is built): mounts the work disk (/dev/vdb) at the path
# named by codecage.root= on the kernel command line and runs the guest
# script it carries, so the cached image never has to change with the code.
# Powers off whatever happens, unless the guest script hands PID 1 on: a
# shell script /run/codecage-vm/next-init it leaves is exec'd (as an
# initramfs execs the real init) once the work disk is unmounted (/run is
# noexec: run by the shell).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
root=$(sed -n 's/.*codecage\.root=\([^ ]*\).*/\1/p' /proc/cmdline)
mkdir -p "$root"
if mount -t ext4 /dev/vdb "$root"; then
        "$root/tests/vm/guest.sh" "$root"
        echo "codecage-vm: guest script exited with $?"
        sync
        umount "$root" 2>/dev/null || mount -o remount,ro "$root"
else
        echo "codecage-vm: cannot mount the work disk"
fi
[ -f /run/codecage-vm/next-init ] && exec /bin/sh /run/codecage-vm/next-init
echo o >/proc/sysrq-trigger
sleep 10
