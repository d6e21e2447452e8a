#!/bin/sh
# /init of the golden-capture guest (busybox-static; see capture-6.12.sh). Runs function_graph
# on a few functions with known return values under each option set below, saves `trace`,
# `trace_options`, `saved_cmdlines` and every CPU's raw pages (`per_cpu/cpuN/trace_pipe_raw`),
# and sends them, with the kernel's text symbols, as a base64 tar stream to the second serial
# port. Status lines on the console start with "GOLDEN: ".
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tracefs tracefs /sys/kernel/tracing
T=/sys/kernel/tracing
O=/tmp/out
mkdir -p $O
echo "GOLDEN: kernel $(uname -r) cpus $(grep -c ^processor /proc/cpuinfo)"

echo 0 > $T/tracing_on
# Functions whose return values are known from the workload: a failing open (-ENOENT from
# do_sys_openat2 and, as ERR_PTR, do_filp_open; a pointer from getname), a failing stat (int
# -ENOENT from vfs_fstatat and filename_lookup), reads (byte counts, 0 at EOF, -EISDIR).
for f in do_sys_openat2 getname do_filp_open vfs_fstatat filename_lookup ksys_read vfs_read; do
  if echo "$f" >> $T/set_ftrace_filter 2>/dev/null; then :; else echo "GOLDEN: no $f"; fi
done
cp $T/set_ftrace_filter $O/set_ftrace_filter
echo "GOLDEN: filter $(tr '\n' ' ' < $T/set_ftrace_filter)"

workload() {
  cat /nonexistent 2>/dev/null
  ls /nonexistent 2>/dev/null
  dd if=/proc/version of=/dev/null bs=64 count=2 2>/dev/null
  dd if=/ of=/dev/null bs=64 count=1 2>/dev/null
  taskset 2 dd if=/proc/version of=/dev/null bs=4096 2>/dev/null
}

# capture NAME THRESH_US OPTION...: one run with those funcgraph options on (the others off).
capture() {
  name=$1
  thresh=$2
  shift 2
  d=$O/$name
  mkdir -p $d
  echo 0 > $T/tracing_on
  echo function_graph > $T/current_tracer
  for o in funcgraph-retval funcgraph-retval-hex funcgraph-tail; do
    echo 0 > $T/options/$o
  done
  for o in "$@"; do
    echo 1 > $T/options/$o
  done
  echo "$thresh" > $T/tracing_thresh
  echo > $T/trace
  echo 1 > $T/tracing_on
  workload
  echo 0 > $T/tracing_on
  cat $T/trace > $d/trace
  cat $T/trace_options > $d/trace_options
  cat $T/tracing_thresh > $d/tracing_thresh
  cat $T/saved_cmdlines > $d/saved_cmdlines
  for c in /sys/devices/system/cpu/cpu[0-9]*; do
    n=${c##*cpu}
    # Consuming reads of whole pages; the file blocks once empty, so the read is timed out.
    timeout 3 dd if=$T/per_cpu/cpu$n/trace_pipe_raw of=$d/cpu$n.raw bs=4096 2>/dev/null
    true
  done
  echo "GOLDEN: $name: $(grep -vc '^#' $d/trace) lines, raw $(cat $d/cpu*.raw | wc -c) bytes"
  echo 0 > $T/tracing_thresh
  echo nop > $T/current_tracer
}

capture retval 0 funcgraph-retval
capture retval-hex 0 funcgraph-retval funcgraph-retval-hex
capture retval-tail 0 funcgraph-retval funcgraph-tail
capture plain 0
capture thresh 20
capture thresh-retval 20 funcgraph-retval

# Text symbols (the host keeps only those the traces name).
grep -i ' t ' /proc/kallsyms > $O/kallsyms
uname -r > $O/uname-r

stty -F /dev/ttyS1 raw -echo 2>/dev/null
echo "GOLDEN-TAR-BEGIN" > /dev/ttyS1
tar cf - -C /tmp out | base64 > /dev/ttyS1
echo "GOLDEN-TAR-END" > /dev/ttyS1
sync
echo "GOLDEN: DONE"
reboot -f
