# Shared by the strata-train failure tests. Sourced once $out holds the
# run's log and err.
fail() { echo "FAIL: $*" >&2; cat "$out/log" "$out/err" >&2; exit 1; }

# within S CMD...: CMD must succeed within S seconds (a hang bound).
within() {
  local s=$1 t0=$SECONDS
  shift
  until "$@"; do
    [ $((SECONDS - t0)) -lt "$s" ] || return 1
    sleep 0.1
  done
}
