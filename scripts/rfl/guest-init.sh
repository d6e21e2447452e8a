#!/bin/sh
# /init of the rfl integration guest (busybox-static). Loads ftrace_rs.ko, runs a workload pinned
# to each CPU, dumps the module's debugfs files to the second serial port (/dev/ttyS1, a file on
# the host) and unloads the module. Status lines on the console start with "RFL: ".
# /rfl.conf (written by the host) sets FILTER, CFILTER, ROUNDS, FLOOD and STATS_READS.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing
. /rfl.conf
OUT=/dev/ttyS1
stty -F $OUT raw -echo 2>/dev/null
D=/sys/kernel/debug/ftrace_rs
echo "RFL: kernel $(uname -r) cpus $(grep -c ^processor /proc/cpuinfo)"

# A filter that matches nothing: ftrace_set_filter() fails, so init must fail cleanly (the filter
# hash freed, nothing registered, the debugfs files gone) and leave nothing patched.
if insmod /lib/modules/ftrace_rs.ko filter=no_such_function_rfl 2>/dev/null; then
  echo "RFL: bad-filter insmod accepted"
  rmmod ftrace_rs
else
  echo "RFL: bad-filter insmod refused"
fi
echo "RFL: bad-filter leftovers: $(cat /sys/kernel/tracing/enabled_functions | wc -l) patched, $(ls -d $D 2>/dev/null | wc -l) dirs"

if insmod /lib/modules/ftrace_rs.ko filter="$FILTER"; then
  echo "RFL: insmod ok"
else
  echo "RFL: insmod FAILED"
fi
echo "RFL: enabled_functions loaded: $(cat /sys/kernel/tracing/enabled_functions | tr '\n' ';')"
echo "RFL: uptime-before $(cut -d' ' -f1 /proc/uptime)"
# Each round: one dd per CPU, pinned there; `exec` keeps the pid the shell printed, and dd's
# read(2) calls go through vfs_read (busybox cat would use sendfile).
i=0
while [ $i -lt "$ROUNDS" ]; do
  for cpu in 0 1; do
    taskset $((1 << cpu)) sh -c 'echo "RFL: workload cpu='$cpu' pid=$$"; exec dd if=/proc/version of=/dev/null bs=4096 2>/dev/null'
  done
  i=$((i + 1))
done
echo "RFL: uptime-after $(cut -d' ' -f1 /proc/uptime)"

# Hold `trace` open (recording stops while it is) so that `stats` is read from the same
# stopped buffers the trace text comes from. In a subshell: a failed redirection must not end
# /init.
if (exec 3<$D/trace && {
      echo "RFL-FILE stats"; cat $D/stats; echo "RFL-END"
      echo "RFL-FILE trace"; cat <&3; echo "RFL-END"
    } > $OUT); then
  echo "RFL: read ok"
else
  echo "RFL: read FAILED"
fi
# A second open sees the same events (the trace file does not consume).
{ echo "RFL-FILE trace2"; cat $D/trace; echo "RFL-END"; } > $OUT 2>&1

if rmmod ftrace_rs; then echo "RFL: rmmod ok"; else echo "RFL: rmmod FAILED"; fi
[ -e $D ] && echo "RFL: debugfs dir still present" || echo "RFL: debugfs dir removed"
echo "RFL: enabled_functions unloaded: $(cat /sys/kernel/tracing/enabled_functions | wc -l) lines"

# Pass 2: a buffer of 2 pages per CPU that a flood of 1-byte reads overwrites many times.
if insmod /lib/modules/ftrace_rs.ko filter="$FILTER" pages_per_cpu=2; then
  echo "RFL: flood insmod ok"
else
  echo "RFL: flood insmod FAILED"
fi
flood() {
  taskset $((1 << $1)) sh -c 'echo "RFL: flood cpu='$1' pid=$$"; exec dd if=/dev/zero of=/dev/null bs=1 count='$FLOOD' 2>/dev/null'
}
# One flood per CPU, one after the other: each overwrites its CPU's buffer many times.
for cpu in 0 1; do flood $cpu; done
# Then both at once, with `trace` opened and read while they run: recording stops under the
# writers' feet (counted as `stopped`) and resumes.
for cpu in 0 1; do flood $cpu & done
for r in 1 2 3; do cat $D/trace > /dev/null || echo "RFL: flood concurrent read FAILED"; done
wait
if (exec 3<$D/trace && {
      echo "RFL-FILE flood-stats"; cat $D/stats; echo "RFL-END"
      echo "RFL-FILE flood-trace"; cat <&3; echo "RFL-END"
    } > $OUT); then
  echo "RFL: flood read ok"
else
  echo "RFL: flood read FAILED"
fi
if rmmod ftrace_rs; then echo "RFL: flood rmmod ok"; else echo "RFL: flood rmmod FAILED"; fi

# Pass 3: the kernel's own function tracer records alongside the module, with the same
# filter plus two functions that run in hard-irq and softirq context (the periodic tick).
T=/sys/kernel/tracing
if insmod /lib/modules/ftrace_rs.ko filter="$CFILTER"; then
  echo "RFL: compare insmod ok"
else
  echo "RFL: compare insmod FAILED"
fi
if echo "$CFILTER" | tr ',' ' ' > $T/set_ftrace_filter && echo function > $T/current_tracer; then
  echo "RFL: kernel function tracer on"
fi
i=0
while [ $i -lt 5 ]; do
  for cpu in 0 1; do
    taskset $((1 << cpu)) sh -c 'echo "RFL: compare cpu='$cpu' pid=$$"; exec dd if=/proc/version of=/dev/null bs=4096 2>/dev/null'
  done
  i=$((i + 1))
done
echo 0 > $T/tracing_on
if (exec 3<$D/trace && {
      echo "RFL-FILE compare-stats"; cat $D/stats; echo "RFL-END"
      echo "RFL-FILE compare-trace"; cat <&3; echo "RFL-END"
      echo "RFL-FILE kernel-trace"; cat $T/trace; echo "RFL-END"
    } > $OUT); then
  echo "RFL: compare read ok"
else
  echo "RFL: compare read FAILED"
fi
echo nop > $T/current_tracer   # (this also empties the kernel's buffer)
if rmmod ftrace_rs; then echo "RFL: compare rmmod ok"; else echo "RFL: compare rmmod FAILED"; fi

# Pass 4: `stats` read over and over while the traced functions keep running: the tick's on
# both CPUs, and vfs_read from a read loop pinned to each CPU. Every read must add up.
if insmod /lib/modules/ftrace_rs.ko filter="$CFILTER"; then
  echo "RFL: stress insmod ok"
else
  echo "RFL: stress insmod FAILED"
fi
: > /tmp/stress
for cpu in 0 1; do
  taskset $((1 << cpu)) sh -c 'while [ -e /tmp/stress ]; do dd if=/proc/version of=/dev/null bs=64 2>/dev/null; done' &
done
n=0
while [ $n -lt "$STATS_READS" ]; do
  { echo "RFL-FILE stress-stats-$n"; cat $D/stats; echo "RFL-END"; } > $OUT
  n=$((n + 1))
done
rm -f /tmp/stress
wait
echo "RFL: stress reads $n"
if rmmod ftrace_rs; then echo "RFL: stress rmmod ok"; else echo "RFL: stress rmmod FAILED"; fi
dmesg | grep -E "ftrace_rs|BUG|Oops|WARNING|Call Trace" | sed 's/^/RFL-DMESG: /'
echo "RFL: DONE"
reboot -f
