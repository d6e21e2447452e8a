#!/bin/bash
# Captures goldens from a real Linux 6.12: the small kernel of the Rust-for-Linux test
# (scripts/rfl/kernel.sh, config scripts/rfl/kernel.config), booted under QEMU (TCG, 2 CPUs)
# with a busybox /init (`<set>-init.sh` beside this script) that runs the captures of one set:
#
#   capture-6.12.sh [graph-retval]   function_graph return values and tracing_thresh
#                                    (CONFIG_FUNCTION_GRAPH_RETVAL): one directory per run with
#                                    `trace`, `trace_options`, `tracing_thresh`,
#                                    `saved_cmdlines` and `cpuN.raw` (the raw pages of
#                                    `per_cpu/cpuN/trace_pipe_raw`), plus `set_ftrace_filter`
#   capture-6.12.sh hist             hist triggers (CONFIG_HIST_TRIGGERS, CONFIG_FTRACE_SYSCALLS):
#                                    `events/<sys>/<event>/{commands,format,trigger,hist}`, the
#                                    same events' raw pages `cpuN.raw` and `cpuN.stats`,
#                                    `saved_cmdlines`, `syscalls` (number and name of each
#                                    system call the build has metadata for)
#
# Writes tests/goldens/linux-6.12/<set>/ (or $GOLDEN_OUT), with `kallsyms` (the text symbols
# the outputs name, with sizes), `uname-r` and `kernel.config`.
#
# Env: RFL_CACHE (the kernel cache, default /var/cache/ftrace-rs/rfl), JOBS, GOLDEN_OUT,
# GOLDEN_QEMU_TIMEOUT (default 300 s).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
SET="${1:-graph-retval}"
case "$SET" in
  graph-retval) NEED=(FUNCTION_GRAPH_RETVAL) ;;
  hist) NEED=(HIST_TRIGGERS FTRACE_SYSCALLS) ;;
  *) echo "capture: unknown set $SET (graph-retval, hist)" >&2; exit 2 ;;
esac
OUT="${GOLDEN_OUT:-$ROOT/tests/goldens/linux-6.12/$SET}"
export RFL_CACHE="${RFL_CACHE:-/var/cache/ftrace-rs/rfl}"

KDIR="$(bash "$ROOT/scripts/rfl/kernel.sh" | sed -n 's/^KDIR=//p')"
KOUT="$KDIR/kbuild"
for c in "${NEED[@]}"; do
  grep -q "^CONFIG_$c=y" "$KOUT/.config" || { echo "capture: $KOUT has no CONFIG_$c" >&2; exit 1; }
done

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/initramfs.list" <<L
dir /dev 0755 0 0
nod /dev/console 0600 0 0 c 5 1
dir /bin 0755 0 0
dir /proc 0755 0 0
dir /sys 0755 0 0
dir /tmp 0755 0 0
file /bin/busybox $(command -v busybox) 0755 0 0
slink /bin/sh busybox 0777 0 0
file /init $HERE/$SET-init.sh 0755 0 0
L
"$KOUT/usr/gen_init_cpio" "$WORK/initramfs.list" | gzip -1 > "$WORK/initramfs.cpio.gz"
# Single-threaded TCG: see scripts/rfl-integration.sh for why not MTTCG.
timeout "${GOLDEN_QEMU_TIMEOUT:-300}" qemu-system-x86_64 -accel tcg,thread=single -m 512 -smp 2 \
  -nographic -no-reboot -kernel "$KOUT/arch/x86/boot/bzImage" -initrd "$WORK/initramfs.cpio.gz" \
  -serial mon:stdio -serial "file:$WORK/ttyS1.log" \
  -append "console=ttyS0 panic=-1 quiet loglevel=4" </dev/null | tr -d '\r' > "$WORK/console.log"
grep '^GOLDEN: ' "$WORK/console.log" || true
grep -q '^GOLDEN: DONE' "$WORK/console.log" || { echo "capture: the guest did not finish" >&2; exit 1; }

tr -d '\r' < "$WORK/ttyS1.log" | sed -n '/^GOLDEN-TAR-BEGIN$/,/^GOLDEN-TAR-END$/p' |
  sed '1d;$d' | base64 -d | tar xf - -C "$WORK"
rm -rf "$OUT"
mkdir -p "$OUT"
cp -r "$WORK/out/." "$OUT/"
cp "$ROOT/scripts/rfl/kernel.config" "$OUT/kernel.config"
if [ "$SET" = hist ]; then
  # `.syscall` names: the x86_64 table (number, entry) of this build, restricted to the
  # entries with syscall metadata (`__syscall_meta__<name>` in System.map; a syscall compiled
  # out has none and prints as unknown_syscall); the kernel prints `sys_<name>`.
  sed -n 's/.* __syscall_meta__\([a-z0-9_]*\)$/\1/p' "$KOUT/System.map" > "$WORK/meta"
  sed -n 's/^__SYSCALL\(_NORETURN\)\{0,1\}(\([0-9]*\), sys_\([a-z0-9_]*\))$/\2 \3/p' \
    "$KOUT/arch/x86/include/generated/asm/syscalls_64.h" |
    while read -r nr name; do
      if grep -qx "$name" "$WORK/meta"; then echo "$nr sys_$name"; fi
    done > "$OUT/syscalls"
fi
# Keep only the text symbols the traces name, each with its size (the distance to the next
# text symbol), as "address size name".
python3 - "$OUT" <<'PY'
import os, re, sys
out = sys.argv[1]
names = set()
for d, _, files in os.walk(out):
    for f in files:
        if f in ("trace", "hist"):
            names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", open(os.path.join(d, f)).read()))
syms = []
for line in open(os.path.join(out, "kallsyms")):
    a, _, n = line.split()[:3]
    syms.append((int(a, 16), n))
syms.sort()
keep = []
for i, (a, n) in enumerate(syms):
    if n in names or n in ("__irqentry_text_start", "__irqentry_text_end"):
        size = syms[i + 1][0] - a if i + 1 < len(syms) else 1
        keep.append(f"{a:016x} {size:x} {n}\n")
open(os.path.join(out, "kallsyms"), "w").writelines(keep)
PY
echo "capture: wrote $OUT"
ls -lR "$OUT" | head -60
