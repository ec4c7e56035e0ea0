#!/usr/bin/env bash
# Print one of README.md's two set-up commands exactly as written there: the
# fenced block that follows the marker line "<!-- NAME-command". .ci/run and
# scripts/fresh-machine-check.sh take the commands they run from here, so
# that they run what a reader of the README types.
#
#   scripts/readme-command.sh main|test [README]
set -euo pipefail
name=${1:?usage: readme-command.sh main|test [README]}
readme=${2:-$(dirname "$0")/../README.md}
cmd=$(awk -v marker="<!-- $name-command" '
    index($0, marker) == 1 {armed = 1; next}
    armed && /^```/ {if (inside) exit; inside = 1; next}
    inside {print}' "$readme")
[ -n "$cmd" ] || {
    echo "readme-command: $readme has no fenced block after a line starting \"<!-- $name-command\"" >&2
    exit 1
}
printf '%s\n' "$cmd"
