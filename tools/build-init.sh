#!/bin/sh
# Builds codecage-init (runtime/codecage-init.c) as a static PIE against
# musl (Debian's musl-tools): pid 1 of every long-lived sandbox must run in
# any image with no library, and glibc's static start-up probes the CPU
# (dozens of cpuid instructions, each a trap to the hypervisor in a VM:
# ~0.35 ms of every sandbox start). musl's start-up does none of that.
# musl-gcc's specs know no -static-pie, so the start files and the link
# flags of one are named here. Usage: build-init.sh SRC OUT DEPFILE [CFLAGS...]
set -eu
src=$1 out=$2 dep=$3
shift 3
lib=/usr/lib/$(gcc -dumpmachine | sed 's/-gnu$/-musl/')
if [ ! -f "$lib/rcrt1.o" ]; then
        echo "build-init.sh: no musl in $lib (install musl-tools)" >&2
        exit 1
fi
exec musl-gcc -std=gnu17 -O2 -g -fPIE -static-pie -nostartfiles \
        -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla \
        -Wno-unused-parameter -fstack-protector-strong -fstack-clash-protection \
        -fcf-protection -D_GNU_SOURCE -MD -MF "$dep" "$@" \
        "$lib/rcrt1.o" "$lib/crti.o" "$(gcc -print-file-name=crtbeginS.o)" "$src" \
        "$(gcc -print-file-name=crtendS.o)" "$lib/crtn.o" \
        -Wl,-static -Wl,-pie -Wl,--no-dynamic-linker -Wl,-z,text -Wl,-z,relro -Wl,-z,now \
        -Wl,-z,noexecstack -o "$out"
