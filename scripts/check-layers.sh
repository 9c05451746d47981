#!/usr/bin/env bash
# Checks Loom's layering rule (docs/architecture.md): a lower layer never includes a higher one.
#
#   base <- comm <- memory <- protocols <- sync <- runtime/api, sim <- tools, bench, apps, tests
#
# Every file under src/<layer>/ may include headers of its own layer and of lower layers only.
# Includes are classified by their path: "base/...", "comm/...", ..., "runtime/...", "api/...";
# the public headers "loom/..." belong to the api level, except loom/status.h (Status/Result, the
# vocabulary every layer uses), which counts as base. Public headers in include/loom/ may include
# only other public headers. A quoted include that fits no layer, or a folder under src/ that is
# not a known layer, is an error too, so a new layer is added here (and to the docs) on purpose.
#
# usage: scripts/check-layers.sh [REPO_ROOT]     exit status 0: clean, 1: violations (listed)
set -uo pipefail
root=${1:-"$(dirname "$0")/.."}
cd "$root" || exit 2

# Layer levels, lowest first. runtime and api share a level: runtime implements the public API.
declare -A level=([base]=0 [comm]=1 [memory]=2 [protocols]=3 [sync]=4 [runtime]=5 [api]=5 [sim]=5
                  [tools]=6 [bench]=6 [apps]=6 [tests]=6)

# Prints the level of an include path, or nothing if it belongs to no layer.
level_of_include() {
  local path=$1
  case $path in
    loom/status.h) echo 0 ;;
    loom/*) echo 5 ;;
    */*) [[ -n ${level[${path%%/*}]:-} ]] && echo "${level[${path%%/*}]}" ;;
  esac
}

bad=0
report() { echo "check-layers: $*"; bad=1; }

sources() { find "$@" -type f \( -name '*.h' -o -name '*.hh' -o -name '*.hpp' -o -name '*.cc' \
                                 -o -name '*.cpp' -o -name '*.c' -o -name '*.inc' \) | sort; }

# The include lines of a file that can name a Loom header ("..." and <loom/...>), as
# "LINE<TAB>PATH".
includes_of() {
  grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*("|<loom/)' "$1" |
    sed -E 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*["<]([^">]+)[">].*/\1\t\2/'
}

for dir in src/*/; do
  layer=$(basename "$dir")
  if [[ -z ${level[$layer]:-} || ${level[$layer]} -gt 5 ]]; then
    report "src/$layer/ is not a known layer (add it to scripts/check-layers.sh and docs/architecture.md)"
    continue
  fi
  mine=${level[$layer]}
  while IFS= read -r file; do
    while IFS=$'\t' read -r line path; do
      [[ -z $path ]] && continue
      theirs=$(level_of_include "$path")
      if [[ -z $theirs ]]; then
        report "$file:$line: \"$path\" belongs to no layer (include headers as \"<layer>/...\")"
      elif ((theirs > mine)); then
        report "$file:$line: layer '$layer' includes \"$path\" from a higher layer"
      fi
    done < <(includes_of "$file")
  done < <(sources "$dir")
done

if [[ -d include/loom ]]; then
  while IFS= read -r file; do
    while IFS=$'\t' read -r line path; do
      [[ -z $path || $path == loom/* ]] && continue
      report "$file:$line: public header includes \"$path\" (public headers include only loom/...)"
    done < <(includes_of "$file")
  done < <(sources include/loom)
fi

if ((bad == 0)); then echo "check-layers: ok (no layer includes a higher one)"; fi
exit $bad
