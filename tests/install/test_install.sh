#!/bin/sh
# meson install into a temporary DESTDIR, then use what was installed the way
# a user would: the installed gvmrun runs a program that the installed
# library serves, the manuals print, pkg-config builds a program against the
# header and library, and the Python module imports.
#   test_install.sh BUILD_DIR PROBE SIM_DIR VERSION CC
set -eu
build=$1 probe=$2 simdir=$3 version=$4 cc=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

DESTDIR=$tmp meson install -C "$build" --no-rebuild --quiet >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; fail "meson install"; }
gvmrun=$(find "$tmp" -path '*/bin/gvmrun' | head -1)
[ -x "$gvmrun" ] || fail "no executable bin/gvmrun installed"
bindir=$(dirname "$gvmrun")
[ -x "$bindir/gvm-config" ] || fail "gvm-config not installed beside gvmrun"
lib=$(find "$tmp" -name "libgvmshim.so.${version%%.*}" | head -1)
[ -n "$lib" ] || fail "libgvmshim.so.${version%%.*} not installed"
[ -f "$(dirname "$lib")/libgvmshim.so.$version" ] || fail "the versioned library is missing"
find "$tmp" -path '*/include/gvmshim.h' | grep -q . || fail "gvmshim.h not installed"

# The manuals.
"$gvmrun" --help | grep -q '^SYNOPSIS' || fail "gvmrun --help is not a manual"
"$bindir/gvm-config" --help | grep -q '^SYNOPSIS' || fail "gvm-config --help is not a manual"
"$bindir/gvmctl" --help | grep -q '^SYNOPSIS' || fail "gvmctl is not installed with a manual"
"$bindir/gvmplot" --help | grep -q '^SYNOPSIS' || fail "gvmplot is not installed with a manual"
"$gvmrun" --check-config >/dev/null || fail "gvmrun --check-config"

# A program run by the installed gvmrun is served by the installed library.
out=$(env -u GVM_LIB LD_PRELOAD= LD_LIBRARY_PATH="$simdir" "$gvmrun" -- "$probe") ||
    fail "the probe failed under the installed gvmrun"
case "$out" in
    "served by $tmp"/*) ;;
    *) fail "served by the wrong library: $out" ;;
esac
GVM_BLOCK_SIZE=3M "$gvmrun" -- true 2>/dev/null && fail "a bad configuration did not stop gvmrun"

# pkg-config builds a program against the installed header and library.
pc=$(find "$tmp" -name gvmshim.pc | head -1)
[ -n "$pc" ] || fail "gvmshim.pc not installed"
export PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$tmp"
[ "$(pkg-config --modversion gvmshim)" = "$version" ] || fail "pkg-config version"
# shellcheck disable=SC2046
"$cc" -o "$tmp/api_user" "$(dirname "$0")/api_user.c" $(pkg-config --cflags --libs gvmshim) ||
    fail "building against the installed library"
LD_LIBRARY_PATH="$(dirname "$lib")" "$tmp/api_user" | grep -q 'not inside an allocation' ||
    fail "the program linked against the installed library"

# The Python module.
py=$(find "$tmp" -name gvmshim.py | head -1)
if [ -n "$py" ]; then
    PYTHONPATH="$(dirname "$py")" python3 -c 'import gvmshim; assert gvmshim.available() is False' ||
        fail "the installed Python module"
    # gvmrun --tms puts the installed torch_memory_saver drop-in first.
    where=$(env -u GVM_LIB LD_PRELOAD= LD_LIBRARY_PATH="$simdir" PYTHONPATH= "$gvmrun" --tms -- \
        python3 -c 'import torch_memory_saver as t; print(t.__file__); t.torch_memory_saver.pause("x")') ||
        fail "the torch_memory_saver drop-in under gvmrun --tms"
    case "$where" in
        "$tmp"/*/gvmshim_tms/torch_memory_saver/__init__.py) ;;
        *) fail "gvmrun --tms imported $where" ;;
    esac
    # slime preloads the file of this name beside the package: gvmshim.
    preload="$(dirname "$(dirname "$where")")/torch_memory_saver_hook_mode_preload.abi3.so"
    [ "$(readlink -f "$preload")" = "$(readlink -f "$lib")" ] || fail "$preload is not the installed library"
fi
echo "1 passed, 0 failed"
