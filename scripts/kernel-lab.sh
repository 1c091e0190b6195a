#!/usr/bin/env bash
# kernel-lab: run a command as root under another Linux kernel, with this machine's user space.
#
#   scripts/kernel-lab.sh [--kernel 7.2|6.18] [--timeout SECONDS] [--mem MIB] [--cpus N] [-q] -- CMD [ARGS...]
#   scripts/kernel-lab.sh --list
#
# Downloads a pinned Debian kernel (once; cached under $ZCNET_KERNEL_LAB_CACHE, else
# ${XDG_CACHE_HOME:-~/.cache}/zcnet-kernel-lab), boots it in QEMU (TCG: no KVM needed) with a
# busybox initramfs that mounts this machine's / read-only over 9p and chroots into it, runs CMD
# there as root in the current directory with the caller's environment, prints CMD's stdout and
# stderr as they come and exits with CMD's status. The guest has loopback only; /tmp, /run and
# /dev/shm are its own tmpfs (a current directory under /tmp is bound in, read-only); dummy,
# veth and ifb are loaded. See docs/design.md, "Kernel lab".
#
# Exit status: CMD's own; 2 when the lab could not start (bad arguments, unknown kernel, qemu or
# busybox missing, download failed: one line on stderr says why and how to fix it); 124 when
# --timeout ran out (the guest is killed); 125 when the guest ended without reporting CMD's
# status (it did not boot, or panicked: the console's last lines are printed).
set -uo pipefail

# ---- pinned kernels: exact Debian package versions (sid moves on: bump these together) ----
# short  release (uname -r)     suite             package=version ...
PINS=(
  "7.2   7.2.13+deb14-amd64     sid               linux-binary-7.2.13+deb14-amd64=7.2.13-1 linux-modules-7.2.13+deb14-amd64=7.2.13-1"
  "6.18  6.18.15+deb13-amd64    trixie-backports  linux-image-6.18.15+deb13-amd64=6.18.15-1~bpo13+1"
)
MIRROR=${ZCNET_KERNEL_LAB_MIRROR:-http://deb.debian.org/debian}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
. "$(dirname "$0")/lib/apt.sh"
# Modules the initramfs loads, in order: 9p to mount the host's /, then the virtual devices
# zcnet's tests create (the guest cannot autoload: this user space has no modprobe for it).
MODULES=(fs/netfs/netfs net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p
  drivers/net/dummy drivers/net/veth drivers/net/ifb)

me='kernel-lab'
die() { # one line naming the cause and the fix; exit 2
  echo "$me: $*" >&2
  exit 2
}
say() { [ "$quiet" = 1 ] || echo "$me: $*" >&2; }

usage() {
  sed -n '4,5s/^#  *//p' "$0" >&2
  exit 2
}

kernel=7.2 timeout_s=600 mem=2048 cpus=2 quiet=0 list=0
while [ $# -gt 0 ]; do
  case $1 in
    --kernel) [ $# -ge 2 ] || usage; kernel=$2; shift 2 ;;
    --kernel=*) kernel=${1#*=}; shift ;;
    --timeout) [ $# -ge 2 ] || usage; timeout_s=$2; shift 2 ;;
    --timeout=*) timeout_s=${1#*=}; shift ;;
    --mem) [ $# -ge 2 ] || usage; mem=$2; shift 2 ;;
    --cpus) [ $# -ge 2 ] || usage; cpus=$2; shift 2 ;;
    -q | --quiet) quiet=1; shift ;;
    --list) list=1; shift ;;
    -h | --help) usage ;;
    --) shift; break ;;
    *) die "unknown argument '$1': usage: $0 [--kernel VER] [--timeout S] -- CMD [ARGS...] (or --list)" ;;
  esac
done

if [ "$list" = 1 ]; then
  for p in "${PINS[@]}"; do
    read -r short release suite pkgs <<<"$p"
    printf '%-5s %-22s %-17s %s\n' "$short" "$release" "$suite" "$pkgs"
  done
  exit 0
fi

pin=
for p in "${PINS[@]}"; do
  read -r short _ <<<"$p"
  [ "$short" = "$kernel" ] && pin=$p
done
[ -n "$pin" ] || die "no pinned kernel '$kernel': use one of $(for p in "${PINS[@]}"; do read -r s _ <<<"$p"; printf '%s ' "$s"; done)(--list shows the exact versions)"
read -r _ release suite pkgs <<<"$pin"
[ $# -gt 0 ] || die "no command given: $0 --kernel $kernel -- CMD [ARGS...]"
[[ $timeout_s =~ ^[0-9]+$ && $timeout_s -gt 0 ]] || die "--timeout wants whole seconds > 0, not '$timeout_s'"
[[ $mem =~ ^[0-9]+$ && $mem -ge 256 ]] || die "--mem wants MiB >= 256, not '$mem'"
[[ $cpus =~ ^[0-9]+$ && $cpus -ge 1 ]] || die "--cpus wants a count >= 1, not '$cpus'"

# The guest's /tmp is its own tmpfs; a current directory under the host's /tmp (a CI clone
# there, say) is bound into it read-only, the top directory below /tmp whole (keep_tmp).
keep_tmp=
case $PWD/ in
  /run/* | /dev/shm/*) die "the current directory $PWD is not visible in the guest (its /run and /dev/shm are its own tmpfs): cd elsewhere first" ;;
  /tmp/*/*) keep_tmp=${PWD#/tmp/}; keep_tmp=${keep_tmp%%/*} ;;
esac

# ---- tools ----
command -v qemu-system-x86_64 >/dev/null 2>&1 || die "qemu-system-x86_64 not found: apt-get install qemu-system-x86"
busybox=$(command -v busybox 2>/dev/null)
[ -n "$busybox" ] || die "busybox not found: apt-get install busybox-static"
# The initramfs has no libraries: busybox must be static (Debian's busybox-static is).
if command -v ldd >/dev/null 2>&1 && ldd "$busybox" 2>/dev/null | grep -q '=>'; then
  die "$busybox is dynamically linked: apt-get install busybox-static"
fi
for t in apt-get dpkg-deb flock; do
  command -v $t >/dev/null 2>&1 || die "$t not found: kernel-lab downloads Debian's kernel packages with apt-get and dpkg-deb (a Debian host), and locks its cache with flock (util-linux)"
done
[ -r "$KEYRING" ] || die "$KEYRING not found: apt-get install debian-archive-keyring"

# ---- download and unpack (once, under a lock: parallel runs share the cache) ----
cache=${ZCNET_KERNEL_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zcnet-kernel-lab}
kdir=$cache/kernels/$release
mkdir -p "$cache" || die "cannot create the cache $cache: set ZCNET_KERNEL_LAB_CACHE to a writable directory"
exec 9>"$cache/lock" || die "cannot write $cache/lock: set ZCNET_KERNEL_LAB_CACHE to a writable directory"
flock 9
if [ ! -e "$kdir/.complete" ]; then
  apt=$cache/apt
  rm -rf "$kdir"
  mkdir -p "$kdir" || die "cannot write $cache"
  apt_private "$apt" "deb [signed-by=$KEYRING] $MIRROR $suite main" || die "cannot write $cache"
  say "downloading Linux $release from $MIRROR $suite ($pkgs) into $cache"
  t0=$SECONDS
  log=$apt/apt.log
  # apt-get update exits 0 when the archive cannot be reached (it only warns): the index it
  # leaves behind is what tells.
  APT_CONFIG=$apt/apt.conf apt-get -q update >"$log" 2>&1
  if ! compgen -G "$apt/lists/*_Packages*" >/dev/null; then
    why=$(grep -m1 -A1 -E '^Err:' "$log" | tail -n1 | sed 's/^ *//' | cut -c1-160)
    die "cannot fetch Debian's $suite index from $MIRROR (${why:-see $log}): check the network, or set ZCNET_KERNEL_LAB_MIRROR to a reachable Debian mirror"
  fi
  for pv in $pkgs; do
    (cd "$apt/archives" && APT_CONFIG=$apt/apt.conf apt-get -q download "$pv") >>"$log" 2>&1 ||
      die "downloading $pv from $MIRROR $suite failed ($(grep -m1 -E '^E:' "$log" | cut -c1-160)): if Debian dropped that version, update PINS in $0 (apt-cache policy ${pv%%=*}); log: $log"
  done
  say "unpacking ($((SECONDS - t0)) s so far)"
  for deb in "$apt"/archives/*.deb; do
    dpkg-deb -x "$deb" "$kdir/root" || die "unpacking $deb failed: remove $cache and retry"
  done
  mdir=$kdir/root/usr/lib/modules/$release
  [ -d "$mdir" ] || mdir=$kdir/root/lib/modules/$release
  vmlinuz=$mdir/vmlinuz
  [ -f "$vmlinuz" ] || vmlinuz=$kdir/root/boot/vmlinuz-$release
  [ -f "$vmlinuz" ] || die "no vmlinuz for $release in $pkgs: update PINS in $0"
  ln -sfn "${vmlinuz#"$kdir"/}" "$kdir/vmlinuz"
  ln -sfn "${mdir#"$kdir"/}" "$kdir/modules"
  rm -rf "$apt" # the unpacked tree is what is kept
  touch "$kdir/.complete"
  say "Linux $release ready in $((SECONDS - t0)) s"
fi
flock -u 9

# ---- the initramfs: busybox, the modules above, and /init ----
work=$(mktemp -d "${TMPDIR:-/tmp}/kernel-lab.XXXXXX") || die "mktemp failed: check ${TMPDIR:-/tmp}"
qpid='' tails=()
# shellcheck disable=SC2329 # invoked by the trap
cleanup() {
  # The guest is powered off on every way out: qemu is killed, then waited for.
  if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then
    kill -TERM "$qpid" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$qpid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$qpid" 2>/dev/null
    wait "$qpid" 2>/dev/null
  fi
  for t in "${tails[@]}"; do kill "$t" 2>/dev/null; wait "$t" 2>/dev/null; done
  [ -n "${ZCNET_KERNEL_LAB_CONSOLE:-}" ] && cp "$work/console.log" "$ZCNET_KERNEL_LAB_CONSOLE" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

ird=$work/initramfs share=$work/share
mkdir -p "$ird"/{bin,dev,proc,sys,newroot,modules} "$share"
cp "$busybox" "$ird/bin/busybox"
i=0
for m in "${MODULES[@]}"; do
  src=$kdir/modules/kernel/$m.ko
  i=$((i + 1))
  dst=$ird/modules/$(printf '%02d' $i)-${m##*/}.ko
  if [ -f "$src.xz" ]; then
    "$busybox" unxz -c "$src.xz" >"$dst" || die "decompressing $src.xz failed: remove $kdir and retry"
  elif [ -f "$src" ]; then
    cp "$src" "$dst"
  fi # absent: built in
done
cat >"$ird/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox mkdir -p /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "kernel-lab guest: init, loading modules" >/dev/console
for m in /modules/*.ko; do [ -e "$m" ] && insmod "$m"; done
fail() { echo "kernel-lab guest: $*"; poweroff -f; echo o >/proc/sysrq-trigger; }
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /newroot || fail "mounting the host's / failed"
R=/newroot
mkdir -p /hostview
mount -o bind $R /hostview
mount -t tmpfs -o mode=1777 tmp $R/tmp
if [ -s /keep_tmp ]; then
  k=$(cat /keep_tmp)
  mkdir -p "$R/tmp/$k" && mount -o bind "/hostview/tmp/$k" "$R/tmp/$k" || fail "binding the host's /tmp/$k failed"
fi
mount -t tmpfs -o mode=755 run $R/run
mkdir -p $R/run/kernel-lab
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 labshare $R/run/kernel-lab || fail "mounting the share failed"
mount -t proc proc $R/proc
mount -t sysfs sys $R/sys
mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts devpts $R/dev/pts
mount -t tmpfs -o mode=1777 shm $R/dev/shm
[ -d $R/sys/fs/bpf ] && mount -t bpf bpf $R/sys/fs/bpf
[ -d $R/sys/kernel/debug ] && mount -t debugfs debugfs $R/sys/kernel/debug 2>/dev/null
ip link set lo up
hostname kernel-lab
echo "kernel-lab guest: running the command" >/dev/console
chroot $R /bin/bash /run/kernel-lab/cmd.sh </dev/null >$R/run/kernel-lab/stdout 2>$R/run/kernel-lab/stderr
echo $? >$R/run/kernel-lab/status.tmp
mv $R/run/kernel-lab/status.tmp $R/run/kernel-lab/status
echo "kernel-lab guest: the command exited $(cat $R/run/kernel-lab/status), powering off" >/dev/console
sync
poweroff -f
echo o >/proc/sysrq-trigger
EOF
chmod +x "$ird/init"
printf '%s' "$keep_tmp" >"$ird/keep_tmp"
(cd "$ird" && find . | "$busybox" cpio -o -H newc >"$work/initramfs.cpio" 2>/dev/null) ||
  die "building the initramfs with busybox cpio failed: apt-get install busybox-static"

# ---- the command: run in the guest with this directory and environment ----
{
  echo "# written by $0"
  export -p | grep -v -E '^declare -x (BASHOPTS|BASH_VERSINFO|EUID|PPID|SHELLOPTS|UID)='
  echo 'export TMPDIR=/tmp' # the caller's may be on the read-only host tree
  printf 'cd -- %q || exit 126\n' "$PWD"
  printf 'exec'
  printf ' %q' "$@"
  printf '\n'
} >"$share/cmd.sh"
: >"$share/stdout"
: >"$share/stderr"

# A SIGKILLed script cannot run its trap: qemu then dies with it (parent-death signal).
pdeath=()
setpriv --help 2>/dev/null | grep -q -- --pdeathsig && pdeath=(setpriv --pdeathsig KILL --)

# A guest that dies or hangs before it starts CMD (seen: a TCG guest's kernel oopsing in the
# scheduler one second into boot) is booted once more; once CMD has started, never.
# A boot takes about 5 s; one that has not started CMD after this many seconds has hung
# (KERNEL_LAB_BOOT_LIMIT: the tests set 0 to exercise the second boot).
boot_limit=${KERNEL_LAB_BOOT_LIMIT:-120}
for attempt in 1 2; do
  say "booting Linux $release (QEMU TCG, $cpus CPUs, $mem MiB, timeout ${timeout_s} s)"
  : >"$work/console.log"
  t0=$SECONDS
  "${pdeath[@]}" qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m "$mem" -smp "$cpus" \
    -nodefaults -no-user-config -display none -monitor none -no-reboot \
    -serial "file:$work/console.log" \
    -kernel "$kdir/vmlinuz" -initrd "$work/initramfs.cpio" \
    -append "console=ttyS0 loglevel=5 panic=-1 rdinit=/init" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$share,mount_tag=labshare,security_model=none,multidevs=remap" \
    </dev/null >"$work/qemu.log" 2>&1 &
  qpid=$!
  # CMD's output as it comes (the share is a plain directory here); tail ends with qemu.
  tail -q -c +1 -s 0.2 --pid=$qpid -f "$share/stdout" &
  tails+=($!)
  tail -q -c +1 -s 0.2 --pid=$qpid -f "$share/stderr" >&2 &
  tails+=($!)

  timed_out=0 started=0
  while kill -0 "$qpid" 2>/dev/null; do
    if [ $((SECONDS - t0)) -gt "$timeout_s" ]; then
      timed_out=1
      break
    fi
    if [ "$started" = 0 ]; then
      if grep -q "kernel-lab guest: running the command" "$work/console.log" 2>/dev/null; then
        started=1
      elif [ $((SECONDS - t0)) -gt "$boot_limit" ] && [ "$attempt" = 1 ]; then
        timed_out=1
        break
      fi
    fi
    sleep 0.2
  done
  if [ "$timed_out" = 1 ]; then
    kill -KILL "$qpid" 2>/dev/null
  fi
  wait "$qpid" 2>/dev/null
  qrc=$?
  qpid=
  for t in "${tails[@]}"; do wait "$t" 2>/dev/null; done
  tails=()
  if grep -q "kernel-lab guest: running the command" "$work/console.log" 2>/dev/null ||
    [ -s "$share/status" ] || [ "$attempt" = 2 ]; then
    break
  fi
  echo "$me: the guest died before running CMD (qemu exit $qrc, timed out: $timed_out); booting it once more. Its last console lines:" >&2
  tail -n 6 "$work/console.log" >&2 2>/dev/null
  : >"$share/stdout"
  : >"$share/stderr"
done
if [ "$timed_out" = 1 ]; then
  echo "$me: timed out after ${timeout_s} s: the guest was killed (raise --timeout; TCG runs 50-100x slower than the host); its last console lines:" >&2
  tail -n 8 "$work/console.log" >&2
  exit 124
fi
if [ ! -s "$share/status" ]; then
  echo "$me: the guest ended without CMD's status (qemu exit $qrc); its last console lines:" >&2
  tail -n 15 "$work/console.log" "$work/qemu.log" >&2 2>/dev/null
  exit 125
fi
status=$(cat "$share/status")
say "Linux $release: CMD exited $status after $((SECONDS - t0)) s"
exit "$status"
