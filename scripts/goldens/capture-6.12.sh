#!/bin/bash
# Captures the function_graph return-value and tracing_thresh goldens from a real Linux 6.12:
# the small kernel of the Rust-for-Linux test (scripts/rfl/kernel.sh, config
# scripts/rfl/kernel.config, which has CONFIG_FUNCTION_GRAPH_RETVAL), booted under QEMU (TCG,
# 2 CPUs) with a busybox /init (graph-retval-init.sh beside this script) that runs the captures.
# Writes tests/goldens/linux-6.12/graph-retval/ (or $GOLDEN_OUT): one directory per run with
# `trace`, `trace_options`, `tracing_thresh`, `saved_cmdlines` and `cpuN.raw` (the raw pages of
# `per_cpu/cpuN/trace_pipe_raw`), plus `kallsyms` (the text symbols the traces name, with
# sizes), `set_ftrace_filter`, `uname-r` and `kernel.config`.
#
# Env: RFL_CACHE (the kernel cache, default /var/cache/ftrace-rs/rfl), JOBS, GOLDEN_OUT,
# GOLDEN_QEMU_TIMEOUT (default 300 s).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="${GOLDEN_OUT:-$ROOT/tests/goldens/linux-6.12/graph-retval}"
export RFL_CACHE="${RFL_CACHE:-/var/cache/ftrace-rs/rfl}"

KDIR="$(bash "$ROOT/scripts/rfl/kernel.sh" | sed -n 's/^KDIR=//p')"
KOUT="$KDIR/kbuild"
grep -q '^CONFIG_FUNCTION_GRAPH_RETVAL=y' "$KOUT/.config" ||
  { echo "capture: $KOUT has no CONFIG_FUNCTION_GRAPH_RETVAL" >&2; exit 1; }

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
file /init $HERE/graph-retval-init.sh 0755 0 0
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
# Keep only the text symbols the traces name, each with its size (the distance to the next
# text symbol), as "address size name".
python3 - "$OUT" <<'PY'
import os, re, sys
out = sys.argv[1]
names = set()
for d in os.listdir(out):
    t = os.path.join(out, d, "trace")
    if os.path.isfile(t):
        names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", open(t).read()))
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
ls -l "$OUT" "$OUT"/*/
