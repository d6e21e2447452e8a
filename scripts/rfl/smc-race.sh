#!/bin/bash
# Reproducer of the QEMU multi-threaded-TCG self-modifying-code race that made the rfl
# integration test die with "Oops: int3" now and then (backends/rfl/README.md). No module is
# involved: the guest only switches the kernel's own function tracer on and off, with the tick's
# update_process_times (run by both vCPUs all the time) in set_ftrace_filter, so every switch
# live-patches that call site with text_poke_bp (int3, tail, first byte).
#
#   scripts/rfl/smc-race.sh [TOGGLES] [ACCEL]      defaults: 2000, tcg (multi-threaded)
#
# Prints "smc-race: OOPS after N toggles" (the race hit) or "smc-race: clean, N toggles" and
# exits 1 / 0. Measured on this project's 2-core host (QEMU 7.2): with ACCEL=tcg the Oops came
# in 4 of 4 boots (after about 100, 350, 400 and 450 toggles); with ACCEL=tcg,thread=single,
# 4 of 4 boots ran 2000 toggles clean (which is why scripts/rfl-integration.sh uses
# single-threaded TCG).
# Uses the kernel that scripts/rfl/kernel.sh builds or has cached.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOGGLES="${1:-2000}"
ACCEL="${2:-tcg}"
. "$HERE/env.sh"
KDIR="$("$HERE/kernel.sh" | sed -n 's/^KDIR=//p' | tail -1)"
[ -n "$KDIR" ] || { echo "smc-race: no kernel"; exit 2; }
KOUT="$KDIR/kbuild"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT

cat > "$W/init" <<EOF
#!/bin/sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t tracefs tracefs /sys/kernel/tracing
T=/sys/kernel/tracing
echo "update_process_times run_timer_softirq" > \$T/set_ftrace_filter
n=0
while [ \$n -lt $TOGGLES ]; do
  echo function > \$T/current_tracer
  echo nop > \$T/current_tracer
  n=\$((n + 1))
  [ \$((n % 50)) = 0 ] && echo "SMC: toggles \$n"
done
echo "SMC: DONE \$n"
reboot -f
EOF
cat > "$W/list" <<EOF
dir /dev 0755 0 0
nod /dev/console 0600 0 0 c 5 1
dir /bin 0755 0 0
dir /proc 0755 0 0
dir /sys 0755 0 0
dir /sys/kernel 0755 0 0
dir /sys/kernel/tracing 0755 0 0
file /bin/busybox $(command -v busybox) 0755 0 0
slink /bin/sh busybox 0777 0 0
file /init $W/init 0755 0 0
EOF
"$KOUT/usr/gen_init_cpio" "$W/list" | gzip -1 > "$W/initramfs.cpio.gz"
timeout 1200 qemu-system-x86_64 -accel "$ACCEL" -m 256 -smp 2 -nographic -no-reboot \
  -kernel "$KOUT/arch/x86/boot/bzImage" -initrd "$W/initramfs.cpio.gz" \
  -append "console=ttyS0 panic=-1 quiet loglevel=4" </dev/null | tr -d '\r' > "$W/console.log"
last="$(grep -o 'SMC: toggles [0-9]*' "$W/console.log" | tail -1 | awk '{print $3}')"
if grep -q "Oops: int3" "$W/console.log"; then
  grep -m1 -A2 "Oops: int3" "$W/console.log"
  echo "smc-race: OOPS after ${last:-<50} toggles ($ACCEL)"
  exit 1
fi
if grep -q "SMC: DONE" "$W/console.log"; then
  echo "smc-race: clean, $TOGGLES toggles ($ACCEL)"
  exit 0
fi
tail -5 "$W/console.log"
echo "smc-race: guest did not finish ($ACCEL)"
exit 2
