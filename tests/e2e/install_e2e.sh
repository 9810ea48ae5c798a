#!/usr/bin/env bash
# The installed package as a user meets it: `cmake --install` into a temporary prefix,
# examples/mlp configured there as an outside project (find_package(zerocpp)), run under
# mpirun -np 2, and its output compared with the in-tree train_mlp's: the same code and config on
# the same library print the same losses.
#   tests/e2e/install_e2e.sh BUILD_DIR SOURCE_DIR   (the build has zero, the apps and train_mlp)
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
say() { echo "$@"; }
bad() { echo "FAIL $*"; fail=1; }
prefix=$tmp/prefix

if out=$(cmake --install "$build" --prefix "$prefix" 2>&1); then
  say "ok   install"
else
  bad "install"$'\n'"$out"
  exit 1
fi

# Public headers only: each installed header is one of include/, and what it includes in quotes
# is installed too (an internal src/ or models/ header would be neither).
headers=$(cd "$prefix/include" && find . -type f -printf '%P\n')
bad_headers=0
for h in $headers; do
  [[ -f $src/include/$h ]] || { bad "installed header $h is not in include/"; bad_headers=1; }
  for inc in $(sed -n 's/^ *# *include "\(.*\)".*/\1/p' "$prefix/include/$h"); do
    [[ -f $prefix/include/$inc ]] || { bad "$h includes \"$inc\", which is not installed"; bad_headers=1; }
  done
done
if [[ ! -f $prefix/include/zero/zero.h ]]; then
  bad "public_headers: no zero/zero.h"
elif [[ $bad_headers -eq 0 ]]; then
  say "ok   public_headers ($(wc -w <<<"$headers"))"
fi

# The four apps are installed, and one runs from the prefix.
for app in zero-run zero-train zero-config zero-ckpt; do
  [[ -x $prefix/bin/$app ]] || bad "apps: no $prefix/bin/$app"
done
if out=$("$prefix/bin/zero-config" check "$src/examples/mlp/ds_config.json" --world-size 2 2>&1); then
  say "ok   apps"
else
  bad "apps: zero-config check"$'\n'"$out"
fi

# examples/mlp as a user's own project, against the prefix alone.
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix")
command -v ninja >/dev/null && cmake_args+=(-G Ninja)
command -v ccache >/dev/null && cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
start=$SECONDS
# CCACHE_BASEDIR: the prefix's paths written relative, so that the next run's new $tmp hits the cache.
if out=$(cmake -S "$src/examples/mlp" -B "$tmp/mlp" "${cmake_args[@]}" 2>&1 &&
         CCACHE_BASEDIR=$tmp cmake --build "$tmp/mlp" -j 1 2>&1); then
  # Note: the outside build must not reach into the source tree's headers or the build's libraries.
  found=$(sed -n 's/^zerocpp_DIR:PATH=//p' "$tmp/mlp/CMakeCache.txt")
  if [[ $found != "$prefix"/* ]]; then
    bad "outside_build: found zerocpp in $found, not in $prefix"
  elif grep -rqE "$src/(include|src)|$build/" "$tmp/mlp" --include=build.ninja --include='*.make' --include=link.txt; then
    bad "outside_build: compiles or links against the source or build tree"
  else
    say "ok   outside_build ($((SECONDS - start)) s)"
  fi
else
  bad "outside_build"$'\n'"$out"
  exit 1
fi

run_mlp() {  # run_mlp BINARY: rank 0's step and memory lines
  (cd "$tmp" && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
    mpirun --oversubscribe --bind-to none -np 2 "$1" "$src/examples/mlp/ds_config.json" 2>&1)
}
if ! installed=$(run_mlp "$tmp/mlp/train_mlp"); then
  bad "installed_run: exit status"$'\n'"$installed"
  exit 1
fi
losses=$(awk '/^step/ {print $4}' <<<"$installed")
first=$(head -1 <<<"$losses") last=$(tail -1 <<<"$losses")
if [[ $(wc -l <<<"$losses") -eq 10 ]] && awk -v a="$first" -v b="$last" 'BEGIN {exit !(b < a)}'; then
  say "ok   installed_run (loss $first -> $last)"
else
  bad "installed_run: losses $(tr '\n' ' ' <<<"$losses")"$'\n'"$installed"
fi

if [[ -x $build/examples/mlp/train_mlp ]]; then
  in_tree=$(run_mlp "$build/examples/mlp/train_mlp")
  if [[ $(grep -E '^(step|rank 0)' <<<"$installed") == "$(grep -E '^(step|rank 0)' <<<"$in_tree")" ]]; then
    say "ok   same_as_in_tree"
  else
    bad "same_as_in_tree:"$'\n'"$(diff <(echo "$in_tree") <(echo "$installed"))"
  fi
else
  bad "same_as_in_tree: no $build/examples/mlp/train_mlp"
fi
exit $fail
