#!/usr/bin/env bash
# kmod-build: build the software NIC kernel module (kmod/zcnic) for one of the kernel lab's kernels.
#
#   scripts/kmod-build.sh [--kernel 7.2|6.18] [-q]
#   scripts/kmod-build.sh --list
#
# Downloads (once; cached beside scripts/kernel-lab.sh's kernels, under $ZCNET_KERNEL_LAB_CACHE,
# else ${XDG_CACHE_HOME:-~/.cache}/zcnet-kernel-lab) Debian's linux-headers and linux-kbuild
# packages of the pinned kernel and sid's libc6 (whose loader runs kbuild's host programs, built
# against a newer glibc than bookworm's), and builds the module with this machine's gcc-12 into
# target/kmod/<uname -r>/zcnic.ko. See docs/design.md, "Software NIC (kmod/zcnic)".
#
# Exit status: 0 built (the .ko's path is printed on stdout); 1 the module did not compile (the
# compiler's output is shown); 2 bad usage or a missing tool; 3 Debian's archive could not be
# reached or no longer has a pinned package. Every failure prints one line on stderr
# (`kmod-build: ...`) naming the cause and the fix.
set -uo pipefail

# ---- pinned kernels: the same releases as scripts/kernel-lab.sh (bump them together) ----
# short  release (uname -r)    suite             version          headers, common, kbuild package names
PINS=(
  "7.2   7.2.13+deb14-amd64    sid               7.2.13-1         linux-headers-7.2.13+deb14-amd64 linux-headers-7.2.13+deb14-common linux-kbuild-7.2.13+deb14"
  "6.18  6.18.15+deb13-amd64   trixie-backports  6.18.15-1~bpo13+1 linux-headers-6.18.15+deb13-amd64 linux-headers-6.18.15+deb13-common linux-kbuild-6.18.15+deb13"
)
MIRROR=${ZCNET_KERNEL_LAB_MIRROR:-http://deb.debian.org/debian}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/lib/apt.sh"
SRC=$ROOT/kmod/zcnic

me='kmod-build'
die() { # one line naming the cause and the fix
  local rc=$1
  shift
  echo "$me: $*" >&2
  exit "$rc"
}
say() { [ "$quiet" = 1 ] || echo "$me: $*" >&2; }

kernel=7.2 quiet=0 list=0
while [ $# -gt 0 ]; do
  case $1 in
    --kernel) [ $# -ge 2 ] || die 2 "--kernel wants a value: $0 [--kernel 7.2|6.18] [-q]"; kernel=$2; shift 2 ;;
    --kernel=*) kernel=${1#*=}; shift ;;
    -q | --quiet) quiet=1; shift ;;
    --list) list=1; shift ;;
    -h | --help) sed -n '4,5s/^#  *//p' "$0" >&2; exit 2 ;;
    *) die 2 "unknown argument '$1': usage: $0 [--kernel 7.2|6.18] [-q] (or --list)" ;;
  esac
done

if [ "$list" = 1 ]; then
  for p in "${PINS[@]}"; do
    read -r short release suite ver _ <<<"$p"
    printf '%-5s %-22s %-17s %s\n' "$short" "$release" "$suite" "$ver"
  done
  exit 0
fi

pin=
for p in "${PINS[@]}"; do
  read -r short _ <<<"$p"
  [ "$short" = "$kernel" ] && pin=$p
done
[ -n "$pin" ] || die 2 "no pinned kernel '$kernel': use 7.2 or 6.18 (--list shows the exact versions)"
read -r _ release suite ver pkgs <<<"$pin"

# ---- tools ----
for t in apt-get dpkg-deb flock make curl; do
  command -v $t >/dev/null 2>&1 || die 2 "$t not found: kmod-build needs apt-get, dpkg-deb, flock, make and curl (a Debian host; apt-get install make curl)"
done
[ -r "$KEYRING" ] || die 2 "$KEYRING not found: apt-get install debian-archive-keyring"
GCC=$(command -v gcc-12 2>/dev/null)
if [ -z "$GCC" ]; then
  say "gcc-12 not found: installing it (apt-get install gcc-12)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc-12 >/dev/null 2>&1
  GCC=$(command -v gcc-12 2>/dev/null)
  [ -n "$GCC" ] || die 2 "gcc-12 not found and apt-get install gcc-12 failed: install gcc-12 (Debian bookworm has it) as root"
fi
[ -f "$SRC/Makefile" ] || die 2 "$SRC/Makefile not found: run this script from a zcnet checkout"

# ---- download and unpack (once, under the kernel lab's lock) ----
cache=${ZCNET_KERNEL_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zcnet-kernel-lab}
hdir=$cache/kmod/$release
ldir=$cache/kmod/libc6
mkdir -p "$cache/kmod" || die 2 "cannot create $cache/kmod: set ZCNET_KERNEL_LAB_CACHE to a writable directory"
exec 9>"$cache/lock" || die 2 "cannot write $cache/lock: set ZCNET_KERNEL_LAB_CACHE to a writable directory"
flock 9

# A private apt (like scripts/kernel-lab.sh): its own sources, lists and cache through
# APT_CONFIG; the system's /etc/apt is not touched, Debian's keyring checks the index.
apt_setup() { # SUITE
  apt=$cache/kmod/apt-$1
  apt_private "$apt" "deb [signed-by=$KEYRING] $MIRROR $1 main" || die 2 "cannot write $cache"
  log=$apt/apt.log
  # apt-get update exits 0 when the archive cannot be reached: the index it leaves tells.
  APT_CONFIG=$apt/apt.conf apt-get -q update >"$log" 2>&1
  if ! compgen -G "$apt/lists/*_Packages*" >/dev/null; then
    why=$(grep -m1 -A1 -E '^Err:' "$log" | tail -n1 | sed 's/^ *//' | cut -c1-160)
    die 3 "cannot fetch Debian's $1 index from $MIRROR (${why:-see $log}): check the network, or set ZCNET_KERNEL_LAB_MIRROR to a reachable Debian mirror"
  fi
}

# PKG=VER through the index; a version the index no longer lists (6.18.15's headers left
# trixie-backports' index) is fetched from the pool by its exact file name.
fetch_deb() { # PKG VER
  (cd "$apt/archives" && APT_CONFIG=$apt/apt.conf apt-get -q download "$1=$2") >>"$log" 2>&1 && return 0
  local v=${2#*:} a url
  for a in amd64 all; do
    url="$MIRROR/pool/main/l/linux/${1}_${v}_${a}.deb"
    url=${url//+/%2b}
    url=${url//\~/%7e}
    if curl -fsS --retry 1 --max-time 300 -o "$apt/archives/${1}_${v}_${a}.deb" "$url" 2>>"$log"; then
      echo "fetched $url by name (not in the $suite index)" >>"$log"
      return 0
    fi
  done
  die 3 "downloading $1=$2 from $MIRROR failed (neither in the $suite index nor in the pool by name): if Debian dropped that version, update PINS in $0 and scripts/kernel-lab.sh together; log: $log"
}

if [ ! -e "$ldir/.complete" ]; then
  say "downloading sid's libc6 (its loader runs kbuild's host programs) into $ldir"
  apt_setup sid
  (cd "$apt/archives" && APT_CONFIG=$apt/apt.conf apt-get -q download libc6) >>"$log" 2>&1 ||
    die 3 "downloading libc6 from $MIRROR sid failed ($(grep -m1 -E '^E:' "$log" | cut -c1-160)); log: $log"
  rm -rf "$ldir"
  mkdir -p "$ldir"
  dpkg-deb -x "$apt"/archives/libc6_*.deb "$ldir" || die 3 "unpacking libc6 failed: remove $ldir and retry"
  rm -rf "$apt"
  touch "$ldir/.complete"
fi
loader=$(ls "$ldir"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$ldir"/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 2>/dev/null | head -n1)
[ -n "$loader" ] || die 3 "no ld-linux-x86-64.so.2 in $ldir: remove $ldir and retry"
libdir=$(dirname "$loader")

if [ ! -e "$hdir/.complete" ]; then
  say "downloading Linux $release headers and kbuild from $MIRROR $suite into $hdir"
  apt_setup "$suite"
  for p in $pkgs; do fetch_deb "$p" "$ver"; done
  rm -rf "$hdir"
  mkdir -p "$hdir/root"
  for deb in "$apt"/archives/*.deb; do
    dpkg-deb -x "$deb" "$hdir/root" || die 3 "unpacking $deb failed: remove $hdir and retry"
  done
  rm -rf "$apt"
  kb=$hdir/root/usr/src/linux-headers-$release
  [ -f "$kb/Makefile" ] || die 3 "no linux-headers-$release in the downloaded packages: update PINS in $0"
  # The headers' Makefiles name /usr/src/...: point them at where they are unpacked.
  for mk in "$kb/Makefile" "$hdir"/root/usr/src/linux-headers-*-common/Makefile; do
    sed -i "s|/usr/src/|$hdir/root/usr/src/|g" "$mk"
  done
  # kbuild's host programs (modpost, objtool, ...) are linked against glibc 2.38+, newer than
  # bookworm's: each one that does not run here becomes a script that runs it through sid's
  # loader and libraries.
  for f in $(find "$hdir"/root/usr/lib/linux-kbuild-* -type f -perm -u+x); do
    [ "$(head -c4 "$f" | tr -d '\177')" = ELF ] || continue
    why=$("$f" --version </dev/null 2>&1)
    if [[ $why == *"version \`GLIBC_2"* ]]; then
      mv "$f" "$f.bin"
      printf '#!/bin/sh\nexec %s --library-path %s:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu %s "$@"\n' \
        "$loader" "$libdir" "$f.bin" >"$f"
      chmod +x "$f"
    fi
  done
  touch "$hdir/.complete"
  say "headers for $release ready"
fi
flock -u 9
kb=$hdir/root/usr/src/linux-headers-$release

# ---- the compiler: gcc-12 under the name Debian's Makefile asks for ----
# Debian builds 7.2 with gcc-16 and 6.18 with gcc-14; gcc-12 lacks -fmin-function-alignment=N,
# for which -falign-functions=N is the older spelling.
out=$ROOT/target/kmod/$release
mkdir -p "$out/build" || die 2 "cannot write $out: check permissions of $ROOT/target"
cc=$out/cc
cat >"$cc" <<EOF
#!/bin/sh
# written by $0: gcc-12 standing in for the compiler Debian built Linux $release with
for a do
  shift
  case \$a in
    -fmin-function-alignment=*) set -- "\$@" "-falign-functions=\${a#*=}" ;;
    *) set -- "\$@" "\$a" ;;
  esac
done
exec $GCC "\$@"
EOF
chmod +x "$cc"

# Build in a copy under target/ so the source folder stays clean.
rm -rf "$out/build"
mkdir -p "$out/build"
cp "$SRC"/*.c "$SRC"/*.h "$SRC"/Makefile "$out/build/" 2>/dev/null
say "building zcnic for $release with $GCC"
if ! make -C "$kb" M="$out/build" CC="$cc" HOSTCC="$GCC" CONFIG_DEBUG_INFO_BTF_MODULES= \
  KBUILD_MODPOST_WARN= -j2 modules >"$out/build.log" 2>&1; then
  grep -E 'error|warning|Error' "$out/build.log" | grep -v -e counted_by -e 'pahole version' | head -n 40 >&2
  die 1 "building zcnic for $release failed (the compiler's messages are above; full log: $out/build.log): fix kmod/zcnic and rerun"
fi
# Warnings from the module's own files (gcc-12 warns about attributes in the kernel's headers
# that it does not know, such as counted_by: those are not shown).
if grep -E '^[A-Za-z0-9_./-]+\.[ch]:[0-9]+:[0-9]+: warning:|^WARNING: modpost' "$out/build.log" >&2; then
  say "the build had warnings (above)"
fi
cp "$out/build/zcnic.ko" "$out/zcnic.ko" || die 1 "no zcnic.ko in $out/build: see $out/build.log"
say "built"
echo "$out/zcnic.ko"
