#!/usr/bin/env bash
# strata-bench-reduce: a tiny grid runs, prints its table and writes JSON of
# the documented shape; bad options and settings are errors. With "mpi" as
# second argument, the Open MPI baseline is checked instead.
set -u
tool=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
for v in $(env | grep -o '^STRATA_[A-Z0-9_]*'); do unset "$v"; done
json=$(mktemp); trap 'rm -f "$json"' EXIT

if [ "${2:-}" = mpi ]; then
  out=$("$tool" --dtypes fp32,bf16 --sources 3 --sizes 12K --reps 1 \
        --json "$json") || fail "MPI run exited $?: $out"
  grep -q '^MPI baseline: Open MPI' <<<"$out" || fail "no Open MPI in: $out"
  grep -q '"impl": "mpi-pairwise", "isa": "ompi", "dtype": "fp32"' "$json" ||
    fail "no fp32 mpi-pairwise result"
  grep -q '"mpi-pairwise", "isa": "ompi", "dtype": "bf16"' "$json" &&
    fail "mpi-pairwise claimed for bf16, which MPI has no type for"
  echo "strata-bench-reduce compares with Open MPI"
  exit 0
fi

out=$("$tool" --no-mpi --dtypes fp32,bf16 --sources 2,3 --sizes 12K \
      --reps 1 --threads 2 --json "$json") || fail "small grid exited $?: $out"
for dt in fp32 bf16; do
  for s in 2 3; do
    grep -Eq "^$dt +$s +12KiB " <<<"$out" || fail "no row $dt $s in: $out"
  done
done
grep -q '^roofline ' <<<"$out" || fail "no roofline line"
grep -q '^MPI baseline: disabled' <<<"$out" || fail "--no-mpi not reported"
grep -q '"roofline_gbps": [0-9]' "$json" || fail "no roofline_gbps in JSON"
for impl in strata scalar pairwise; do
  grep -q "\"impl\": \"$impl\"" "$json" || fail "no $impl result in JSON"
done
n=$(grep -c '"impl": "strata", "isa": "[^"]*", "dtype": "[a-z0-9]*", "sources": [0-9]*, "bytes": 12288, "gbps": [0-9.]*, "threads": 2' "$json")
[ "$n" -eq 4 ] || fail "expected 4 pooled strata results, got $n"
# the read-only kernel: its columns, a ratio against it in every result
for t in 1 2; do
  grep -Eq "read,${t}t .* xread${t}t" <<<"$out" || fail "no read,${t}t column"
done
grep -Eq '^fp32 +3 +12KiB( +[0-9.]+%?)+$' <<<"$out" || fail "bad fp32 row: $out"
n=$(grep -c '"impl"' "$json")
r=$(grep -c '"read_only_gbps": [0-9.]*[1-9][0-9.]*, "time_vs_read_only": [0-9.]*[1-9][0-9.]*}' "$json")
[ "$r" -eq "$n" ] || fail "$r of $n results against the read-only kernel"
grep -q "the read-only kernel's time" <<<"$out" || fail "no read-only summary"

err=$("$tool" --sources 65 2>&1); rc=$?
[ "$rc" -eq 2 ] || fail "--sources 65 exited $rc"
grep -q "bad value '65' for --sources" <<<"$err" || fail "bad message: $err"
"$tool" --bogus >/dev/null 2>&1 && fail "--bogus accepted"
err=$(STRATA_SIMD=avx9 "$tool" --no-mpi --sizes 4K 2>&1); rc=$?
[ "$rc" -eq 1 ] || fail "STRATA_SIMD=avx9 exited $rc"
grep -q 'STRATA_SIMD=avx9' <<<"$err" || fail "error does not name STRATA_SIMD: $err"
echo "strata-bench-reduce behaves"
