# Sourced by softroce-vm and softroce-2vm: what booting a soft-RoCE VM needs,
# in one place. The caller sets $vm_tool (its name, for messages) and $here
# (tests/softroce). Functions:
#   vm_skip MSG            exit 77 with "$vm_tool: SKIP: MSG"
#   vm_prepare             check the tools, find or download a Debian kernel
#                          with rdma_rxe, build the initramfs: sets vmlinuz,
#                          initrd
#   vm_run_script OUT NET  write OUT/run.sh (what the VM's init runs): the
#                          network set-up NET (shell lines), then the command
#                          ("$@") in the current directory, environment set
#   vm_start OUT NIC...    boot a VM whose out share is OUT, with the QEMU
#                          network options NIC, in the background: sets
#                          vm_pid
#   vm_status OUT          the command's exit status, or 124 if the VM ended
#                          without one
# vm_start's VMs share /, read-only, and every directory in $vm_rw_dirs
# (read-write) with the guest, like softroce-vm's --rw.
#
# The kernel is the Debian one (linux-image-amd64): the installed one when
# /boot and /lib/modules have it, otherwise the package is downloaded (not
# installed) into the cache, and its modules.dep made with depmod. QEMU runs
# in TCG: nested KVM fails on the machines this project is developed on.
# Cache: $SOFTROCE_CACHE (default ~/.cache/strata-softroce). Several runs may
# share it: whatever goes into it is made under a lock in a temporary
# directory and renamed into place once complete, so a run killed half-way
# leaves nothing another run would trust.

readonly FORMAT=3 # bump when the initramfs layout below changes

# The modules the VM loads explicitly; modules.dep supplies what they need.
# crc32_generic is used by rxe through the crypto API (no symbol dependency),
# virtio_pci and 9pnet_virtio carry the host's file systems into the VM,
# virtio_net is the link between two VMs (softroce-2vm).
readonly ROOT_MODULES="crc32_generic virtio_pci 9pnet_virtio 9p veth
virtio_net configfs rdma_rxe rdma_ucm"

vm_rw_dirs=()
vm_tmpfs_dirs=()

vm_skip() {
    echo "$vm_tool: SKIP: $*" >&2
    exit 77
}

vm_check_tools() {
    local tool
    [ "${SOFTROCE_VM:-0}" != 1 ] || vm_skip "already inside a soft-RoCE VM"
    "$here/../../scripts/install-deps.sh" >/dev/null 2>&1 ||
        echo "$vm_tool: scripts/install-deps.sh failed; trying with what is installed" >&2
    for tool in qemu-system-x86_64 busybox cpio rdma; do
        command -v "$tool" >/dev/null ||
            vm_skip "$tool is not installed (scripts/install-deps.sh installs it)"
    done
    ls /usr/lib/*/libibverbs/librxe-rdmav*.so >/dev/null 2>&1 ||
        vm_skip "the rxe provider of libibverbs is missing (package ibverbs-providers)"
}

# A kernel whose image and modules (with rdma_rxe) are present: sets
# vmlinuz, moddir and kver.
find_installed_kernel() {
    local v
    for v in $(ls /lib/modules 2>/dev/null | sort -rV); do
        if [ -r "/boot/vmlinuz-$v" ] && [ -r "/lib/modules/$v/modules.dep" ] &&
            grep -q '/rdma_rxe\.ko' "/lib/modules/$v/modules.dep"; then
            vmlinuz=/boot/vmlinuz-$v moddir=/lib/modules/$v kver=$v
            return
        fi
    done
}

# Download (without installing) Debian's current kernel package into the
# cache: sets vmlinuz, moddir and kver. The entry is complete when its stamp
# exists: one without (a run killed half-way, or made by a harness that had
# no depmod) is made again.
download_kernel() {
    local pkg dir tmp depmod old
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    [ -n "$pkg" ] || vm_skip "no kernel installed and apt-cache knows no linux-image-amd64"
    dir="$cache/$pkg"
    if [ ! -e "$dir/complete" ]; then
        depmod=$(PATH=$PATH:/usr/sbin:/sbin command -v depmod) ||
            vm_skip "depmod is not installed (package kmod; scripts/install-deps.sh installs it)"
        echo "$vm_tool: downloading $pkg into $cache" >&2
        tmp=$(mktemp -d "$cache/tmp.XXXXXX") && chmod 755 "$tmp"
        (cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1) ||
            vm_skip "cannot download $pkg (no network for apt?)"
        dpkg -x "$tmp"/*.deb "$tmp/root"
        rm -f "$tmp"/*.deb
        kver=$(ls "$tmp/root/lib/modules")
        # dpkg -x runs no maintainer scripts, and the package ships no
        # modules.dep: its postinst makes it, with depmod.
        "$depmod" -b "$tmp/root" "$kver"
        grep -q '/rdma_rxe\.ko' "$tmp/root/lib/modules/$kver/modules.dep" || {
            echo "$vm_tool: $pkg has no rdma_rxe module" >&2
            exit 1
        }
        echo "$kver" >"$tmp/complete"
        rm -rf "$dir"
        mv "$tmp" "$dir"
        # Earlier kernel packages are no longer used (400 MB each).
        for old in "$cache"/linux-image-*; do
            [ "$old" = "$dir" ] || rm -rf "$old"
        done
    fi
    kver=$(cat "$dir/complete")
    vmlinuz=$dir/root/boot/vmlinuz-$kver moddir=$dir/root/lib/modules/$kver
}

# Print the .ko paths (relative to MODDIR) of the root modules and of their
# dependencies, each after everything it depends on.
module_load_order() {
    local moddir=$1
    declare -A deps=() seen=()
    local line name
    while IFS= read -r line; do
        name=${line%%:*}
        deps[$name]=${line#*:}
    done <"$moddir/modules.dep"
    visit() {
        local m=$1 d
        [ -z "${seen[$m]:-}" ] || return 0
        seen[$m]=1
        for d in ${deps[$m]}; do visit "$d"; done
        echo "$m"
    }
    local root path
    for root in $ROOT_MODULES; do
        path=""
        for name in "${!deps[@]}"; do
            case "$name" in */"$root".ko | */"$root".ko.*) path=$name ;; esac
        done
        [ -n "$path" ] || vm_skip "module $root is not part of kernel $kver"
        visit "$path"
    done
}

build_initramfs() {
    local moddir=$1 out=$2 work m name
    work=$(mktemp -d)
    mkdir -p "$work"/{bin,proc,sys,dev,host,lib/modules}
    cp "$(command -v busybox)" "$work/bin/busybox"
    module_load_order "$moddir" >"$work/modules.list"
    for m in $(cat "$work/modules.list"); do
        name=$(basename "${m%%.ko*}").ko
        case "$m" in
        *.xz) xz -dc "$moddir/$m" >"$work/lib/modules/$name" ;;
        *.zst) zstd -qdc "$moddir/$m" >"$work/lib/modules/$name" ;;
        *) cp "$moddir/$m" "$work/lib/modules/$name" ;;
        esac
        echo "$name" >>"$work/lib/modules/order"
    done
    rm "$work/modules.list"
    cp "$here/vm-init" "$work/init"
    chmod +x "$work/init"
    (cd "$work" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$out.tmp"
    mv "$out.tmp" "$out"
    rm -rf "$work"
}

# The cache is filled under its lock; what a killed run left in temporary
# names is removed first. Once in place, an entry is never rewritten, so the
# VM reads it after the lock is released.
vm_prepare() {
    local lock_fd moddir="" kver=""
    vm_check_tools
    cache=${SOFTROCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/strata-softroce}
    mkdir -p "$cache"
    exec {lock_fd}>"$cache/lock"
    flock -w 900 "$lock_fd" || {
        echo "$vm_tool: $cache/lock still held after 900 s" >&2
        exit 1
    }
    rm -rf "$cache"/tmp.* "$cache"/*.gz.tmp
    vmlinuz=""
    find_installed_kernel
    [ -n "$vmlinuz" ] || download_kernel
    initrd="$cache/initrd-$kver-f$FORMAT-$(cksum <"$here/vm-init" | cut -d' ' -f1).gz"
    if [ ! -s "$initrd" ]; then
        echo "$vm_tool: building the initramfs for $kver in $cache" >&2
        build_initramfs "$moddir" "$initrd"
    fi
    exec {lock_fd}>&-
}

# vm_run_script OUT NET ENV CMD...: OUT/run.sh, which the VM's init runs in
# the chroot: the network set-up NET, the --tmpfs directories, then CMD with
# the environment ENV (VAR=value words) in the current directory.
vm_run_script() {
    local out=$1 net=$2 env=$3 d
    shift 3
    {
        echo "set -e"
        echo "ip link set lo up"
        echo "$net"
        for d in "${vm_tmpfs_dirs[@]}"; do
            printf 'mkdir -p %q && mount -t tmpfs tmpfs %q\n' "$d" "$d"
        done
        echo "set +e"
        printf 'export SOFTROCE_VM=1 SOFTROCE_OUT=/mnt SOFTROCE_DEV=rxe0 %s ' "$env"
        printf 'HOME=/tmp PATH=%q\n' "$PATH"
        printf 'cd %q || exit 98\n' "$PWD"
        printf '%q ' "$@"
        echo
    } >"$out/run.sh"
    printf '%s\n' "${vm_rw_dirs[@]}" >"$out/rw-dirs"
}

# The kernel's clock options. TCG's TSC is the host's (the same on every
# vCPU, at the host's rate), but the kernel measures its rate against
# emulated timers at boot, which a busy host disturbs: of two VMs booting
# together, one once ran its clock 4x fast (a 60 s timeout expired in 16).
# When the host knows its TSC rate, the guest is told it (tsc_early_khz);
# otherwise the guest keeps time by the HPET, slower to read but right.
# tsc=reliable, or the TSC sync check fails on a busy host and the clock
# falls back to the HPET, which every clock_gettime() then reads through a
# system call and the emulator's device lock.
vm_clock_options() {
    local khz
    if grep -qw tsc_known_freq /proc/cpuinfo; then
        khz=$(awk -F: '/^cpu MHz/ {printf "%d", $2 * 1000; exit}' /proc/cpuinfo)
        echo "tsc=reliable tsc_early_khz=$khz"
    else
        echo "clocksource=hpet"
    fi
}

# vm_start OUT SMP MEM QEMU-NETWORK-OPTIONS...: boots the VM in the
# background (vm_pid), its console on stdout with the firmware's noise
# removed. no_timer_check: on a busy host the boot-time IO-APIC timer check
# of an emulated CPU can miss its ticks and panic.
vm_start() {
    local out=$1 smp=$2 mem=$3 i
    shift 3
    local shares=(-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
        -virtfs "local,path=$out,mount_tag=out,security_model=none")
    for i in "${!vm_rw_dirs[@]}"; do
        shares+=(-virtfs "local,path=${vm_rw_dirs[$i]},mount_tag=rw$i,security_model=none")
    done
    timeout --kill-after=10 "$timeout_s" qemu-system-x86_64 -accel tcg -cpu max \
        -smp "$smp" -m "$mem" -kernel "$vmlinuz" -initrd "$initrd" \
        -append "console=ttyS0 quiet loglevel=3 panic=-1 no_timer_check $(vm_clock_options)" \
        -nographic -no-reboot "$@" "${shares[@]}" </dev/null \
        > >(sed -u -e 's/\x1b\[[0-9;?]*[a-zA-Z]//g' -e 's/\x1bc//g' \
            -e '/^SeaBIOS\|^Booting from ROM\|^iPXE\|^c$/d' "${vm_console_sed[@]}") &
    vm_pid=$!
}
vm_console_sed=()

vm_status() {
    if [ -s "$1/rc" ]; then
        cat "$1/rc"
    else
        echo 124
    fi
}
