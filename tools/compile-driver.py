#!/usr/bin/env python3
"""Writes the session driver's bytecode: the interpreter's MAGIC_NUMBER,
12 zero bytes (a .pyc header's shape) and marshal.dumps() of the driver
compiled as `python3 -c` compiles it (file name "<string>").

Usage: compile-driver.py SOURCE OUTPUT. A sandbox whose python3 has another
MAGIC_NUMBER compiles the source instead (src/services/session.c)."""
import importlib.util
import marshal
import sys

with open(sys.argv[1], "rb") as f:
    source = f.read()
code = compile(source, "<string>", "exec", dont_inherit=True, optimize=0)
with open(sys.argv[2], "wb") as f:
    f.write(importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code))
