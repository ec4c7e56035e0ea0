#!/usr/bin/env bash
# usage: run_consumer_test.sh BUILD_DIR CONSUMER_SRC_DIR CC
set -euo pipefail
build=$1 src=$2 cc=$3
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null

echo "== pkg-config"
pc=$(dirname "$(find "$prefix" -name strata.pc | head -1)")
flags=$(PKG_CONFIG_PATH=$pc pkg-config --cflags --libs strata)
libdir=$(PKG_CONFIG_PATH=$pc pkg-config --variable=libdir strata)
"$cc" -std=c11 -Wall -Werror "$src/consumer.c" $flags -Wl,-rpath,"$libdir" -o "$work/consumer_pc"
"$work/consumer_pc"
static_flags=$(PKG_CONFIG_PATH=$pc pkg-config --static --cflags --libs strata)
"$cc" -std=c11 -Wall -Werror "$src/consumer.c" "$libdir/libstrata.a" $static_flags -o "$work/consumer_pc_static"
"$work/consumer_pc_static"

echo "== find_package"
cmake -S "$src" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_RPATH="$libdir" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/consumer"
"$work/cmake-build/consumer_static"
echo "== python"
pkg=$(dirname "$(dirname "$(find "$prefix" -path '*/strata/_paths.py' | head -1)")")
PYTHONPATH=$pkg PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -c "
import os, strata, strata._lib as lib
assert os.path.realpath(lib.path).startswith(os.path.realpath('$prefix')), lib.path
print('strata', strata.version(), 'from', lib.path)"
echo "consumer built and ran against the installed package"
