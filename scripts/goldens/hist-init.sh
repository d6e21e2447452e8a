#!/bin/sh
# /init of the hist golden-capture guest (busybox-static; see capture-6.12.sh, set `hist`).
# Puts the hist triggers listed below on a few events, records the same events in the ring
# buffer (plus the rename events a replay needs for `.execname`), runs a workload, and saves
# per event its `format`, the commands written, the kernel's `trigger` and `hist` files; then
# every CPU's raw pages (`per_cpu/cpuN/trace_pipe_raw`), `per_cpu/cpuN/stats`,
# `saved_cmdlines` and the text symbols (`kallsyms`).
# Triggers are added with `>>` (`>` would remove the event's hist triggers first), paused;
# every `:pause`, `:cont` and `:clear` is followed by a trace_marker line
# `hist-update <sys>/<event> <index> <pause|cont|clear>`. Status lines on the console start
# with "GOLDEN: ".
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
echo 4096 > $T/buffer_size_kb
# Only the workload is traced: a shell W (started below, and what it forks: options/event-fork)
# is the one pid in set_event_pid, so kernel threads and this shell (which does the setup,
# the trigger writes, the markers and the reads) are neither recorded nor seen by the
# triggers (the pid check comes first). W runs a workload when told and blocks on a FIFO
# otherwise, so nothing a trigger counts happens while this shell changes a trigger: every
# record a trigger counts is in the ring buffer, between that trigger's markers. Tracing
# stays on throughout (a hist trigger also counts records the ring buffer refuses, through
# the temporary buffer).
mkfifo /tmp/go /tmp/done
(
  while read -r cmd < /tmp/go; do
    [ "$cmd" = exit ] && exit 0
    sh -c "$cmd"
    echo ok > /tmp/done
  done
) &
W=$!
echo 1 > $T/options/event-fork
echo $W > $T/set_event_pid
# run CMD: W runs CMD (in a child shell) and this shell waits for it to finish.
run() {
  echo "$1" > /tmp/go
  read -r ok < /tmp/done
}

for e in kmem/kmalloc raw_syscalls/sys_enter sched/sched_switch sched/sched_wakeup \
         sched/sched_process_fork task/task_rename; do
  echo 1 > $T/events/$e/enable
done
echo > $T/trace
echo 1 > $T/tracing_on

# hist EVENT DEFINITION: adds a hist trigger, paused, and keeps the command as written (one
# per line, in order); the trigger starts counting at its `cont` marker.
hist() {
  d=$O/events/$1
  mkdir -p $d
  # The attribute goes before the ` if` filter.
  case "$2" in
    *" if "*) cmd="${2%% if *}:pause if ${2#* if }" ;;
    *) cmd="$2:pause" ;;
  esac
  if echo "$cmd" >> $T/events/$1/trigger; then
    echo "$cmd" >> $d/commands
  else
    echo "GOLDEN: rejected $1 $2"
    cat $T/error_log
  fi
}

hist kmem/kmalloc 'hist:keys=call_site.sym:vals=bytes_req,bytes_alloc:sort=bytes_alloc.descending'
hist kmem/kmalloc 'hist:keys=call_site.sym-offset:vals=bytes_req:sort=call_site'
hist kmem/kmalloc 'hist:keys=bytes_req.log2:vals=bytes_alloc:sort=bytes_req'
hist kmem/kmalloc 'hist:keys=bytes_alloc.buckets=64:sort=bytes_alloc'
hist kmem/kmalloc 'hist:keys=ptr.hex:vals=bytes_req.hex:size=128'
hist kmem/kmalloc 'hist:keys=common_pid.execname,gfp_flags.hex:vals=bytes_alloc.percent,bytes_req.graph:sort=common_pid,gfp_flags'
hist raw_syscalls/sys_enter 'hist:keys=id.syscall:sort=id'
hist raw_syscalls/sys_enter 'hist:keys=common_pid.execname,id.syscall:vals=hitcount:sort=common_pid,hitcount.descending'
hist raw_syscalls/sys_enter 'hist:keys=common_cpu,id:sort=common_cpu,id'
hist raw_syscalls/sys_enter 'hist:keys=common_pid,id:sort=common_pid,id:size=128'
hist kmem/kmalloc 'hist:keys=bytes_alloc:vals=bytes_req:sort=bytes_alloc.descending if bytes_req > 256'
hist sched/sched_switch 'hist:keys=next_comm:vals=prev_prio:sort=hitcount.descending,next_comm'
hist sched/sched_switch 'hist:keys=prev_pid,next_pid:vals=hitcount,next_prio.hex:sort=prev_pid,next_pid'
hist sched/sched_wakeup 'hist:keys=comm,target_cpu:vals=prio:sort=comm,target_cpu'
hist sched/sched_process_fork 'hist:keys=parent_comm,child_pid:sort=child_pid'
hist sched/sched_process_fork 'hist:keys=child_comm:vals=child_pid'

# update EVENT INDEX OP: `:OP` of the event's INDEXth trigger (0-based), then its marker.
update() {
  u=0
  while IFS= read -r line; do
    if [ $u = $2 ]; then
      case "$line" in
        *" if "*) head="${line%% if *}"; filter=" if ${line#* if }" ;;
        *) head="$line"; filter="" ;;
      esac
      echo "${head%:pause}:$3$filter" >> $T/events/$1/trigger
      echo "hist-update $1 $2 $3" > $T/trace_marker
    fi
    u=$((u + 1))
  done < $O/events/$1/commands
}
# all OP: `:OP` of every trigger.
all() {
  for d in $O/events/*/*; do
    e=${d#$O/events/}
    n=0
    while IFS= read -r line; do
      update $e $n $1
      n=$((n + 1))
    done < $d/commands
  done
}

WORKLOAD='ls / > /dev/null; cat /proc/version > /dev/null
  taskset 2 cat /proc/self/stat > /dev/null
  dd if=/dev/zero of=/dev/null bs=1024 count=4 2>/dev/null; true'

all cont
run "$WORKLOAD"
update sched/sched_process_fork 0 pause
run "$WORKLOAD"
update sched/sched_process_fork 1 clear
run "$WORKLOAD"
update sched/sched_process_fork 0 cont
run "taskset 1 sh -c 'ls /proc > /dev/null; echo x | cat > /dev/null'"
all pause
echo 0 > $T/tracing_on
echo exit > /tmp/go
wait
echo > $T/set_event_pid

for d in $O/events/*/*; do
  e=${d#$O/events/}
  cat $T/events/$e/format > $d/format
  cat $T/events/$e/trigger > $d/trigger
  cat $T/events/$e/hist > $d/hist
done
cat $T/events/task/task_rename/format > $O/task_rename.format
cat $T/events/ftrace/print/format > $O/print.format
cat $T/saved_cmdlines > $O/saved_cmdlines
for c in /sys/devices/system/cpu/cpu[0-9]*; do
  n=${c##*cpu}
  cat $T/per_cpu/cpu$n/stats > $O/cpu$n.stats
  # Consuming reads of whole pages; the file blocks once empty, so the read is timed out.
  timeout 5 dd if=$T/per_cpu/cpu$n/trace_pipe_raw of=$O/cpu$n.raw bs=4096 2>/dev/null
  true
done
echo "GOLDEN: hist: raw $(cat $O/cpu*.raw | wc -c) bytes, overruns $(grep -h overrun $O/cpu*.stats | tr '\n' ' ')"

grep -i ' t ' /proc/kallsyms > $O/kallsyms
uname -r > $O/uname-r

stty -F /dev/ttyS1 raw -echo 2>/dev/null
echo "GOLDEN-TAR-BEGIN" > /dev/ttyS1
tar cf - -C /tmp out | base64 > /dev/ttyS1
echo "GOLDEN-TAR-END" > /dev/ttyS1
sync
echo "GOLDEN: DONE"
reboot -f
