/* The traced program of the ftracetest run (tests/ftracetest.rs): it defines functions named as
 * the kernel's that the selftests of tools/testing/selftests/ftrace filter on and grep for
 * (schedule, the lock functions, kernel_clone, sched_tick, ...), and two worker threads call
 * them, about a thousand rounds a second each, until stdin reaches end of file, or, given a
 * command (`kernel_names CMD ARGS...`), until that command, which it runs as its child (the
 * suite, in the traced tree), has exited: it then exits with the command's status. The bodies
 * are trivial; what matters is that each is a real, instrumented function that keeps being
 * called while the suite runs. The names the shells' own calls go through
 * (kernel_names_lib.c) are defined here too, so that the tree's filter files (resolved against
 * this first process's sites) know them. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "workers.h"

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
    do_execve(id);
    kernel_clone(id);
    _do_fork(id);
    sched_tick(id);
    pick_next_task(id);
    schedule(id);
    preempt_schedule(id);
    schedule_timeout(id);
    io_schedule(id);
}

__attribute__((noinline)) void *worker(void *arg) {
    long id = (long)arg;
    for (;;) {
        round_of_calls(id);
        usleep(1000);
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
