/* The traced program of the ftracetest run (tests/ftracetest.rs): it defines functions named as
 * the kernel's that the selftests of tools/testing/selftests/ftrace filter on and grep for
 * (schedule, the lock functions, kernel_clone, sched_tick, ...), and two worker threads call
 * them (all but the fork and exec ones: below), about a thousand rounds a second each, until
 * stdin reaches end of file, or, given a command (`kernel_names CMD ARGS...`), until that
 * command, which it runs as its child (the suite, in the traced tree), has exited: it then
 * exits with the command's status. The bodies are trivial; what matters is that each is a
 * real, instrumented function that keeps being called while the suite runs. The names the
 * shells' own calls go through (kernel_names_lib.c) are defined here too, so that the tree's
 * filter files (resolved against this first process's sites) know them. It also declares the
 * kernel's events the suite enables and filters (sched_switch, sched_waking, sched_wakeup,
 * signal_generate: below). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ftrace/tracepoint.h>

#include "workers.h"

/* The kernel's events the suite enables and filters, with Linux 6.12's layouts and print
 * formats (include/trace/events/sched.h and signal.h on x86_64): the workers fire the sched
 * ones where a kernel would, around each block (worker()); signal_generate is declared for
 * the filters the suite writes to it (nothing here sends a signal). */
#define SCHED_SWITCH_FIELDS(F, S)                                                                  \
    S(prev_comm, 16) F(pid_t, prev_pid) F(int, prev_prio) F(long, prev_state) S(next_comm, 16)   \
    F(pid_t, next_pid) F(int, next_prio)
FTRACE_EVENT(sched, sched_switch, SCHED_SWITCH_FIELDS,
             (const char *prev_comm, pid_t prev_pid, int prev_prio, long prev_state,
              const char *next_comm, pid_t next_pid, int next_prio),
             FTRACE_PRINT("prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), "|", { 0x00000001, "S" }, { 0x00000002, "D" }, { 0x00000004, "T" }, { 0x00000008, "t" }, { 0x00000010, "X" }, { 0x00000020, "Z" }, { 0x00000040, "P" }, { 0x00000080, "I" }) : "R", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? "+" : "", REC->next_comm, REC->next_pid, REC->next_prio))

/* sched_waking and sched_wakeup share the kernel's sched_wakeup_template. */
#define SCHED_WAKEUP_FIELDS(F, S) S(comm, 16) F(pid_t, pid) F(int, prio) F(int, target_cpu)
FTRACE_EVENT(sched, sched_wakeup, SCHED_WAKEUP_FIELDS,
             (const char *comm, pid_t pid, int prio, int target_cpu),
             FTRACE_PRINT("comm=%s pid=%d prio=%d target_cpu=%03d", REC->comm, REC->pid,
                          REC->prio, REC->target_cpu))
FTRACE_EVENT(sched, sched_waking, SCHED_WAKEUP_FIELDS,
             (const char *comm, pid_t pid, int prio, int target_cpu),
             FTRACE_PRINT("comm=%s pid=%d prio=%d target_cpu=%03d", REC->comm, REC->pid,
                          REC->prio, REC->target_cpu))

#define SIGNAL_GENERATE_FIELDS(F, S)                                                               \
    F(int, sig) F(int, errno) F(int, code) S(comm, 16) F(pid_t, pid) F(int, group) F(int, result)
FTRACE_EVENT(signal, signal_generate, SIGNAL_GENERATE_FIELDS,
             (int sig, int errno, int code, const char *comm, pid_t pid, int group, int result),
             FTRACE_PRINT("sig=%d errno=%d code=%d comm=%s pid=%d grp=%d res=%d", REC->sig,
                          REC->errno, REC->code, REC->comm, REC->pid, REC->group, REC->result))

/* The task state a blocked worker leaves in: TASK_INTERRUPTIBLE ("S"). */
#define TASK_INTERRUPTIBLE 1
/* A task's default priority as the sched events print it (nice 0). */
#define DEFAULT_PRIO 120

static volatile long sink;

#define KFUNC(name) \
    __attribute__((noinline)) long name(long x) { sink += x; return x + 1; }

KFUNC(_raw_spin_lock)
KFUNC(_raw_spin_unlock)
KFUNC(_raw_spin_trylock)
KFUNC(_raw_spin_lock_irqsave)
KFUNC(_raw_spin_unlock_irqrestore)
KFUNC(mutex_lock)
KFUNC(mutex_unlock)
KFUNC(mutex_trylock)
KFUNC(down_read_trylock)
KFUNC(console_lock)
KFUNC(console_unlock)
KFUNC(rcu_read_unlock_strict)
KFUNC(sys_read)
KFUNC(sys_write)
KFUNC(vfs_read)
KFUNC(vfs_write)
KFUNC(ksys_write)
/* The fork and exec names: defined (the filter files resolve names against this process's
 * sites) but not called by the workers: the shells' real forks and execs call them through
 * kernel_names_lib.c. The pid filter tests count `grep $PID` over the trace of these, and
 * thousands of worker lines a second would hold a 4-digit pid in some timestamp by chance. */
KFUNC(do_execve)
KFUNC(do_execveat_common)
KFUNC(kernel_clone)
KFUNC(_do_fork)
KFUNC(sched_tick)
KFUNC(update_curr)
KFUNC(pick_next_task)

/* schedule() calls nothing traced-by-name besides what a filter on it would exclude. */
__attribute__((noinline)) long schedule(long x) { sink += x; return x + 1; }
__attribute__((noinline)) long preempt_schedule(long x) { return schedule(x) + 1; }
__attribute__((noinline)) long schedule_timeout(long x) { return schedule(x) + 1; }
__attribute__((noinline)) long io_schedule(long x) { return schedule(x) + 1; }

/* A write the way the kernel's proc_reg_write fails: -EIO. */
__attribute__((noinline)) long proc_reg_write(long x) { sink += x; return -5; }

__attribute__((noinline)) void round_of_calls(long id) {
    _raw_spin_lock(id);
    update_curr(id);
    _raw_spin_unlock(id);
    _raw_spin_trylock(id);
    _raw_spin_lock_irqsave(id);
    _raw_spin_unlock_irqrestore(id);
    mutex_lock(id);
    mutex_unlock(id);
    mutex_trylock(id);
    down_read_trylock(id);
    console_lock(id);
    console_unlock(id);
    rcu_read_unlock_strict(id);
    sys_read(id);
    vfs_read(id);
    sys_write(id);
    vfs_write(id);
    proc_reg_write(id);
    sched_tick(id);
    pick_next_task(id);
    schedule(id);
    preempt_schedule(id);
    schedule_timeout(id);
    io_schedule(id);
}

/* A worker blocks for a tick as a kernel task would: switched out (sched_switch to the CPU's
 * idle task), then woken (sched_waking in the waker's context, then sched_wakeup). */
static inline __attribute__((always_inline)) void block_for_a_tick(const char *comm, pid_t tid) {
    char idle[16];
    int cpu = sched_getcpu();
    snprintf(idle, sizeof idle, "swapper/%d", cpu < 0 ? 0 : cpu);
    trace_sched_switch(comm, tid, DEFAULT_PRIO, TASK_INTERRUPTIBLE, idle, 0, DEFAULT_PRIO);
    usleep(1000);
    trace_sched_waking(comm, tid, DEFAULT_PRIO, sched_getcpu());
    trace_sched_wakeup(comm, tid, DEFAULT_PRIO, sched_getcpu());
}

__attribute__((noinline)) void *worker(void *arg) {
    long id = (long)arg;
    char comm[16] = "";
    prctl(PR_GET_NAME, comm);
    pid_t tid = gettid();
    for (;;) {
        round_of_calls(id);
        block_for_a_tick(comm, tid);
    }
    return NULL;
}

int main(int argc, char **argv) {
    pthread_t t[2];
    if (argc < 2) {
        run_workers_until_eof(t, worker);
        return 0;
    }
    for (long i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    pid_t child = fork();
    if (child == 0) {
        execvp(argv[1], argv + 1);
        perror(argv[1]);
        _exit(127);
    }
    int st = 0;
    if (child < 0 || waitpid(child, &st, 0) < 0)
        return 127;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
