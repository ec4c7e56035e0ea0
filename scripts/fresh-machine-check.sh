#!/usr/bin/env bash
# fresh-machine-check: run README.md's two set-up commands, exactly as
# written there, on a freshly installed Debian 12 made for the purpose, and
# fail unless both succeed and the installation leaves no daemon running.
#
#   scripts/fresh-machine-check.sh        (as root)
#
# The fresh machine is a `debootstrap --variant=minbase bookworm` root, from
# the mirror this machine's apt uses (its sources name it), with the same
# bookworm suites as apt sources. The files git tracks, as they are in the
# working tree (uncommitted changes included, untracked files not), are
# copied to /root/strata in it. /proc, /sys, /dev, /dev/pts, a fresh
# /dev/shm and /run are mounted, and each command runs there in a chroot
# with a clean environment (root's PATH, HOME=/root, LANG=C.UTF-8), from
# /root/strata.
# The soft-RoCE VM of the test suite runs inside too, on the root's files:
# the check fails if softroce_verbs did not run the verbs tests.
#
# Work directory: $STRATA_FRESH_DIR (default /var/tmp/strata-fresh). It keeps
# the minbase root as a tarball, so that later runs skip debootstrap, and
# the downloaded .deb files (the packages are still installed afresh); the
# root and the logs of the last run are kept there when it fails. Mounts
# left by an interrupted run are removed before starting.
set -euo pipefail

die() {
    echo "fresh-machine-check: $*" >&2
    exit 1
}
[ "$(id -u)" -eq 0 ] ||
    die "must run as root (debootstrap, mount and chroot need it)"

src=$(cd "$(dirname "$0")/.." && pwd)
work=${STRATA_FRESH_DIR:-/var/tmp/strata-fresh}
root=$work/root
logs=$work/logs
readonly CHROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
readonly SUITES="bookworm bookworm-updates bookworm-security"
mkdir -p "$work"

# One run at a time: $work/pid names the running one. (A lock held for the
# whole run would be inherited by every command it starts, and one that
# outlived a killed run would keep the next from cleaning up.)
other_run() {
    local pid
    pid=$(cat "$work/pid" 2>/dev/null) || return 1
    [ "$pid" != $$ ] && grep -qs fresh-machine-check "/proc/$pid/cmdline" &&
        echo "$pid"
}
exec {lock_fd}>"$work/lock"
flock -w 10 "$lock_fd" || die "$work/lock is held"
if pid=$(other_run); then
    die "another run (pid $pid) is using $work"
fi
echo $$ >"$work/pid"
exec {lock_fd}>&-

start=$SECONDS
step_start=$SECONDS
times=()
step() {
    printf '\n==== %s (at %ds)\n' "$*" $((SECONDS - start))
    step_start=$SECONDS
}
took() {
    times+=("$(printf '%5ds  %s' $((SECONDS - step_start)) "$1")")
    printf '==== %s: %ds\n' "$1" $((SECONDS - step_start))
}

# Print "URI SUITE COMPONENT..." for every enabled binary source of apt,
# from the one-line (.list) and the deb822 (.sources) formats.
apt_sources() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
            awk '$1 == "deb" {$1 = ""; sub(/^ /, ""); print}'
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        awk '
            function flush(  i, j, n, u, s) {
                if (f["types"] ~ /(^| )deb( |$)/ && f["enabled"] !~ /^ *no *$/) {
                    n = split(f["uris"], u, " ")
                    split(f["suites"], s, " ")
                    for (i = 1; i <= n; i++)
                        for (j = 1; j in s; j++)
                            print u[i], s[j], f["components"]
                }
                delete f
            }
            /^#/ {next}
            /^[ \t]*$/ {flush(); next}
            /^[ \t]/ {f[key] = f[key] " " $0; next}
            {
                key = tolower(substr($0, 1, index($0, ":") - 1))
                f[key] = substr($0, index($0, ":") + 1)
            }
            END {flush()}' "$f" | awk '{$1 = $1; print}'
    done
}

# The root's mount points, deepest first.
mounts_under() {
    awk -v r="$root" '$2 == r || index($2, r "/") == 1 {print $2}' \
        /proc/mounts | sort -r
}

# The processes whose root is the root, one pid a line. One find, not a
# readlink per process: that took 20-45 s at load 23.
root_pids() {
    # A process that ends meanwhile is an error to find.
    { find /proc -mindepth 2 -maxdepth 2 -name root -lname "$root" \
        -printf '%h\n' 2>/dev/null || true; } |
        sed -n 's|^/proc/\([0-9][0-9]*\)$|\1|p'
}

alive() {
    local p
    for p; do kill -0 "$p" 2>/dev/null && return 0; done
    return 1
}

# Stop processes $@: TERM, then KILL those still there after 10 s.
stop_pids() {
    [ $# -gt 0 ] || return 0
    kill -TERM "$@" 2>/dev/null || true
    for _ in $(seq 10); do
        alive "$@" || return 0
        sleep 1
    done
    kill -KILL "$@" 2>/dev/null || true
}

# Stop what still runs in the root (a test's leftover process), then
# unmount everything under it.
release_root() {
    local m
    # shellcheck disable=SC2046 # one pid a word
    stop_pids $(root_pids)
    for m in $(mounts_under); do
        umount "$m" 2>/dev/null || umount -l "$m" ||
            echo "fresh-machine-check: cannot unmount $m" >&2
    done
    [ -z "$(mounts_under)" ]
}
trap 'release_root || true; rm -f "$work/pid"' EXIT
trap 'echo "fresh-machine-check: interrupted" >&2; exit 130' INT
trap 'echo "fresh-machine-check: terminated" >&2; exit 143' TERM
trap 'echo "fresh-machine-check: hung up" >&2; exit 129' HUP

# Run a command in the root, in /root/strata, with a clean environment.
in_root() {
    chroot "$root" /usr/bin/env -i -C /root/strata PATH="$CHROOT_PATH" \
        HOME=/root LANG=C.UTF-8 USER=root LOGNAME=root SHELL=/bin/bash \
        /bin/bash -c "$1"
}

# Run README command NAME in the root, its output also in logs/NAME.log.
run_readme_command() {
    local name=$1 cmd rc
    cmd=$("$src/scripts/readme-command.sh" "$name")
    step "README $name command"
    echo "+ $cmd"
    # In the background, so that a signal to this script runs its trap at
    # once; pipefail gives the command's status.
    in_root "$cmd" 2>&1 | tee "$logs/$name.log" &
    rc=0
    wait $! || rc=$?
    took "README $name command (exit $rc)"
    return "$rc"
}

step "clean up a previous run"
release_root || die "$root is still mounted or in use; unmount it by hand"
rm -rf --one-file-system "$root" "$logs"
mkdir -p "$root" "$logs" "$work/debs/partial"
took "clean-up"

step "fresh Debian 12 root"
command -v debootstrap >/dev/null || "$src/scripts/install-deps.sh"
sources=$(apt_sources | awk -v suites=" $SUITES " 'index(suites, " " $2 " ")')
mirror=$(awk '$2 == "bookworm" {print $1; exit}' <<<"$sources")
[ -n "$mirror" ] ||
    die "this machine's apt has no source for bookworm: no mirror to install from"
tarball=$work/bookworm-minbase-$(cksum <<<"$mirror" | cut -d' ' -f1).tar.gz
if [ -s "$tarball" ]; then
    echo "the minbase root debootstrap made earlier, from $tarball"
    tar -C "$root" --numeric-owner -xpzf "$tarball"
else
    echo "debootstrap --variant=minbase bookworm from $mirror"
    include=()
    case "$mirror" in https:*) include=(--include=ca-certificates) ;; esac
    debootstrap --variant=minbase "${include[@]}" bookworm "$root" "$mirror" \
        >"$logs/debootstrap.log" 2>&1 ||
        die "debootstrap failed; see $logs/debootstrap.log"
    tar -C "$root" --numeric-owner -cpzf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
fi
sed 's/^/deb /' <<<"$sources" | sort -u >"$root/etc/apt/sources.list"
cp /etc/resolv.conf /etc/hosts "$root/etc/"
took "fresh root"

step "export of the working tree"
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 ||
    die "$src is not a git working tree: nothing says which files to export"
changed=$(git -C "$src" status --porcelain --untracked-files=no | wc -l)
echo "the tracked files of $src as they are now: commit" \
    "$(git -C "$src" rev-parse --short HEAD) with $changed files changed since" \
    "(untracked files left out)"
mkdir -p "$root/root/strata"
(cd "$src" && git ls-files -z | while IFS= read -r -d '' f; do
    [ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f" # not if deleted
done | tar --null -T - -cf -) | tar -C "$root/root/strata" -xf -
took "export"

# The root a mount point, as / is (network namespaces need it), and /run a
# tmpfs, as on a real machine.
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
mount -t tmpfs -o mode=755 tmpfs "$root/run"
install -d -m 1777 "$root/run/lock" # /var/lock points there; boot makes it
mount --bind "$work/debs" "$root/var/cache/apt/archives"

# What a command started ends with it: a process still running in the root
# 10 s after it ended is named and stopped, so that the next command starts
# clean. After the main command, which installs the packages, that is a
# daemon a package started (munged, slurmctld, slurmd: install-deps.sh
# forbids it), and a failure.
left_running() {
    local name=$1 pids t p
    for ((t = 0; t < 20; t++)); do
        pids=$(root_pids)
        [ -n "$pids" ] || return 0
        sleep 0.5
    done
    echo "fresh-machine-check: the README $name command left processes" \
        "running in the root:" >&2
    for p in $pids; do
        echo "  $p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" >&2
    done
    # shellcheck disable=SC2086 # one pid a word
    stop_pids $pids
    return 1
}

failed=()
run_readme_command main || failed+=(main)
left_running main || failed+=("main (left processes running)")
run_readme_command test || failed+=(test)
# Named, not yet failed: no run has shown what tests leave here (the
# Slurm daemons, munged, VMs, mpirun's daemons end with their tests).
left_running test || true

step "summary"
grep -E -e '^[0-9]+% tests passed' -e '^Total Test time' "$logs/test.log" || true
sed -n '/^The following tests FAILED:/,/^[^ \t]/p' "$logs/test.log"
grep -E 'Test +#[0-9]+: .*\*\*\*Skipped' "$logs/test.log" || true
vm=$(grep -E 'Test +#[0-9]+: softroce_verbs ' "$logs/test.log" || true)
echo "${vm:-softroce_verbs: not run}"
inner=$(awk '/^[0-9]+\/[0-9]+ Test: softroce_verbs$/ {on = 1}
             on && /tests passed, .* out of/ {print; exit}' \
    "$root/root/strata/build/Testing/Temporary/LastTest.log" 2>/dev/null || true)
echo "in the soft-RoCE VM: ${inner:-no verbs tests ran}"
case "$vm" in *" Passed "*) [ -n "$inner" ] || failed+=(softroce_verbs) ;;
*) failed+=(softroce_verbs) ;; esac
if [ ${#failed[@]} -eq 0 ]; then
    step_start=$SECONDS
    release_root
    rm -rf --one-file-system "$root"
    took "removing the root"
fi
printf '\n==== times\n'
printf '%s\n' "${times[@]}"
printf '%5ds  total\n' $((SECONDS - start))
if [ ${#failed[@]} -gt 0 ]; then
    echo "fresh-machine-check: FAILED: ${failed[*]} (root and logs kept in $work)" >&2
    exit 1
fi
echo "fresh-machine-check: both README commands passed on a fresh Debian 12"
