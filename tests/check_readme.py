#!/usr/bin/env python3
"""The README's option table must be what the option list generates.

    check_readme.py GVM_CONFIG_TOOL README.md

The table lies between "<!-- options:" and "<!-- end of options -->" in
README.md, or, should it move there, in one of the pages of docs/ beside
it; exactly one file may hold it."""
import glob
import os
import subprocess
import sys

START, END = "<!-- options:", "<!-- end of options -->"


def files_holding_the_table(readme):
    docs = sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(readme)), "docs", "*.md")))
    return [p for p in [readme] + docs if START in open(p, encoding="utf-8").read()]


def table_in(path):
    text = open(path, encoding="utf-8").read()
    start = text.index("\n", text.index(START)) + 1
    return text[start:text.index(END)]


def main():
    tool, readme = sys.argv[1], sys.argv[2]
    want = subprocess.run([tool, "--markdown"], check=True, capture_output=True, text=True).stdout
    holders = files_holding_the_table(readme)
    if len(holders) != 1:
        print("the option table (%s ... %s) must be in exactly one of README.md and docs/*.md; found in %d"
              % (START, END, len(holders)))
        print("0 passed, 1 failed")
        return 1
    if table_in(holders[0]) != want:
        print("%s's option table differs from `gvm-config --markdown`; regenerate it"
              % os.path.relpath(holders[0]))
        print("0 passed, 1 failed")
        return 1
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
