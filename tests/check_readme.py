#!/usr/bin/env python3
"""The README's option table must be what the option list generates."""
import subprocess
import sys

tool, readme = sys.argv[1], sys.argv[2]
want = subprocess.run([tool, "--markdown"], check=True, capture_output=True, text=True).stdout
text = open(readme).read()
start = text.index("<!-- options:")
start = text.index("\n", start) + 1
end = text.index("<!-- end of options -->")
if text[start:end] != want:
    print("README.md's option table differs from `gvm-config --markdown`; regenerate it")
    print("0 passed, 1 failed")
    sys.exit(1)
print("1 passed, 0 failed")
