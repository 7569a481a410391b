#!/bin/sh
# Writes an assembler file that carries the binary $1 as read-only bytes
# between the symbols $3 and $3_end; output to $2.
set -eu
bin=$(realpath "$1")
cat >"$2" <<ASM
	.section .rodata
	.global $3
	.global $3_end
	.balign 16
$3:
	.incbin "$bin"
$3_end:
	.section .note.GNU-stack,"",@progbits
ASM
