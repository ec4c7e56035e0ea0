# Shared by the strata-train failure tests. Sourced once $out holds the
# run's log and err; rank_pid needs $run, the driver's strata-run.
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

# rank_pid R: the pid of rank R among the children of the driver's
# strata-run (its environment names the rank). Read without a process per
# child: under load each one costs tens of ms.
rank_pid() {
  local p kv
  for p in $(pgrep -P "$run"); do
    while IFS= read -r -d '' kv; do
      [ "$kv" = "STRATA_RANK=$1" ] && { echo "$p"; return 0; }
    done 2>/dev/null <"/proc/$p/environ"
  done
  return 1
}
