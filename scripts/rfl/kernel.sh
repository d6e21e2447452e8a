#!/bin/bash
# Configures and builds the small test kernel (tinyconfig + scripts/rfl/kernel.config) with the
# Debian rustc-web, in a cache directory outside the clone, and prints the path of the finished
# build as the last line of stdout (`KDIR=<dir>`).
#
# The cache entry is keyed on: the linux-source-6.12 package version, the rustc-web version,
# the bindgen version, and the hash of kernel.config (+ KEY_REV below, bumped when the build
# steps change). A finished entry has a `.complete` stamp; anything else is rebuilt from scratch.
# A lock (flock) serialises concurrent runs on the same cache.
#
# Env: RFL_CACHE (default /var/cache/ftrace-rs/rfl), JOBS (default 2), RFL_REBUILD_KERNEL=1,
# RFL_KEEP_KERNELS (default 2: after a build, older entries beyond this many are deleted; each
# takes about 2 GB).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$HERE/env.sh"

KEY_REV=1
kver="$(dpkg-query -W -f='${Version}' linux-source-6.12)"
key_src="kernel=$kver rustc=$RUSTC_VERSION bindgen=$("$BINDGEN_BIN" --version | awk '{print $2}') rev=$KEY_REV config=$(sha256sum "$HERE/kernel.config" | cut -c1-64)"
key="$(printf '%s' "$key_src" | sha256sum | cut -c1-16)"
ENTRY="$RFL_CACHE/kernel-$key"
mkdir -p "$RFL_CACHE"

exec 9>"$RFL_CACHE/kernel.lock"
flock 9

if [ -f "$ENTRY/.complete" ] && [ -z "${RFL_REBUILD_KERNEL:-}" ]; then
  echo "kernel: cached build $ENTRY ($key_src)" >&2
  echo "KDIR=$ENTRY"
  exit 0
fi

echo "kernel: building $ENTRY ($key_src)" >&2
rm -rf "$ENTRY"
mkdir -p "$ENTRY"
printf '%s\n' "$key_src" > "$ENTRY/key.txt"
KSRC="$ENTRY/linux-source-6.12"
KOUT="$ENTRY/kbuild"
t0=$(date +%s)
tar xf /usr/src/linux-source-6.12.tar.xz -C "$ENTRY"
t1=$(date +%s); echo "TIME kernel extract: $((t1 - t0)) s" >&2

kmake() { nice -n 15 make -s -C "$KSRC" O="$KOUT" -j"$JOBS" "${KMAKE_VARS[@]}" "$@"; }
mkdir -p "$KOUT"
kmake rustavailable >&2
kmake tinyconfig >&2
cfg() { "$KSRC/scripts/config" --file "$KOUT/.config" "$@"; }
apply() {
  local line
  while read -r line; do
    case "$line" in
      +*) cfg --enable "${line#+}" ;;
      -*) cfg --disable "${line#-}" ;;
    esac
  done < "$HERE/kernel.config"
}
# Children only appear once their parents are set: apply, resolve, apply again, resolve.
apply; kmake olddefconfig >&2
apply; kmake olddefconfig >&2
bad=0
while read -r line; do
  case "$line" in
    +*) grep -q "^CONFIG_${line#+}=y" "$KOUT/.config" || { echo "kernel: CONFIG_${line#+} not =y" >&2; bad=1; } ;;
    -*) ! grep -q "^CONFIG_${line#-}=y" "$KOUT/.config" || { echo "kernel: CONFIG_${line#-} still =y" >&2; bad=1; } ;;
  esac
done < "$HERE/kernel.config"
[ $bad = 0 ] || exit 1
t2=$(date +%s); echo "TIME kernel config: $((t2 - t1)) s" >&2

kmake bzImage >&2
kmake modules_prepare >&2
kmake modules >&2
t3=$(date +%s); echo "TIME kernel build: $((t3 - t2)) s (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
touch "$ENTRY/.complete"
# Prune the oldest other entries (under the lock: no build is running; a run using an old
# entry would be one with different inputs, which this host has just moved away from).
ls -1dt "$RFL_CACHE"/kernel-*/ 2>/dev/null | tail -n +"$(( ${RFL_KEEP_KERNELS:-2} + 1 ))" |
  while read -r old; do
    [ "${old%/}" = "$ENTRY" ] && continue
    echo "kernel: pruning old cache entry $old" >&2
    rm -rf "$old"
  done
echo "KDIR=$ENTRY"
