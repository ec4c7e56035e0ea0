# Shared by the multi-host tests. Sourced by a test script as
#   source "$(dirname "$0")/common.sh" HOSTS [nscluster options...] -- "$@"
# which re-runs the script inside a fresh nscluster of HOSTS hosts (skipping
# with 77 where emulated hosts cannot be made), then sets NSC and MHRUN.
# Tests put the build's bin directory on PATH (mhrun takes strata-agg there).
set -u
mh_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -z "${MH_CLUSTER:-}" ]; then
  mh_opts=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do mh_opts+=("$1"); shift; done
  shift
  exec "$mh_here/nscluster" --hosts "${mh_opts[@]}" -- "$0" "$@"
fi
while [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done
shift
NSC=$mh_here/nscluster
MHRUN=$mh_here/mhrun
for v in $(env | grep -o '^STRATA_[A-Z0-9_]*'); do unset "$v"; done
export STRATA_TIMEOUT_MS=${MH_TIMEOUT_MS:-20000}

fail() { echo "FAIL: $*" >&2; exit 1; }

# count PATTERN TEXT: lines of TEXT matching the extended regex PATTERN.
count() { grep -cE "$1" <<<"$2" || true; }

# expect_count N PATTERN TEXT WHAT: exactly N lines match, or fail.
expect_count() {
  local n
  n=$(count "$2" "$3")
  [ "$n" -eq "$1" ] || fail "$4: $n lines match /$2/, expected $1: $3"
}
