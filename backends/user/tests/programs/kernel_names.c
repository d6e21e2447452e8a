/* The traced program of the ftracetest run (tests/ftracetest.rs): it defines functions named as
 * the kernel's that the selftests of tools/testing/selftests/ftrace filter on and grep for
 * (schedule, the lock functions, kernel_clone, sched_tick, ...), and two worker threads call
 * them (all but the fork and exec ones: below), about a thousand rounds a second each, until
 * stdin reaches end of file, or, given a command (`kernel_names CMD ARGS...`), until that
 * command, which it runs as its child (the suite, in the traced tree), has exited: it then
 * exits with the command's status. The bodies are trivial; what matters is that each is a
 * real, instrumented function that keeps being called while the suite runs. The names the
 * shells' own calls go through (kernel_names_lib.c) are defined here too, so that the tree's
 * filter files (resolved against this first process's sites) know them. The kernel's events
 * the suite enables and filters (kernel_events.h) are defined in kernel_names_lib.c, which it
 * links (so every process of the tree, this one too, has them from the one library, under
 * the same ids); the workers fire the sched ones as they block (worker()) and signal_generate
 * as each signals the other. */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernel_events.h"
#include "workers.h"

/* The signal the workers send each other (blocked in this process, taken with sigtimedwait;
 * unblocked again in the suite's child). */
#define WORKER_SIGNAL SIGUSR1

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

/* The workers' threads and thread ids (signal_other). */
static pthread_t workers[2];
static volatile pid_t worker_tids[2];

/* A worker signals the other (a real signal, generated here: signal_generate, as the kernel's
 * tgkill records it), then takes the one the other sent it, if it came. */
static inline __attribute__((always_inline)) void signal_other(long id, const char *comm) {
    pid_t other = worker_tids[1 - id];
    if (other != 0) {
        trace_signal_generate(WORKER_SIGNAL, 0, SI_TKILL, comm, other, 0, TRACE_SIGNAL_DELIVERED);
        pthread_kill(workers[1 - id], WORKER_SIGNAL);
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, WORKER_SIGNAL);
    struct timespec now = {0, 0};
    sigtimedwait(&set, NULL, &now);
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
    worker_tids[id] = tid;
    for (;;) {
        round_of_calls(id);
        block_for_a_tick(comm, tid);
        signal_other(id, comm);
    }
    return NULL;
}

int main(int argc, char **argv) {
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, WORKER_SIGNAL);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    if (argc < 2) {
        run_workers_until_eof(workers, worker);
        return 0;
    }
    for (long i = 0; i < 2; i++)
        pthread_create(&workers[i], NULL, worker, (void *)i);
    pid_t child = fork();
    if (child == 0) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        execvp(argv[1], argv + 1);
        perror(argv[1]);
        _exit(127);
    }
    int st = 0;
    if (child < 0 || waitpid(child, &st, 0) < 0)
        return 127;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
