/* The program the attach test attaches to: started normally (no agent), two worker threads call
 * tick_alpha(), which calls tick_beta(), checking every result, until stdin reaches end of
 * file; the main thread waits in read(2) meanwhile (or, with an argument, a thread of its
 * own, the main thread having exited). Then it prints the number of calls and of
 * wrong results, and exits.
 *
 * It allows any process of its user to ptrace it (PR_SET_PTRACER_ANY), so that the test's
 * `ftrace`, which is not its parent, may attach under kernel.yama.ptrace_scope=1. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "workers.h"

static volatile int stop;
static volatile long sink;
static long calls[2];
static long wrong[2];

__attribute__((noinline)) long tick_beta(long x) { sink += x; return x * 3 + 1; }

__attribute__((noinline)) long tick_alpha(long x) { return tick_beta(x) + 1; }

__attribute__((noinline)) void *worker(void *arg) {
    long id = (long)arg;
    while (!stop) {
        if (tick_alpha(id) != id * 3 + 2)
            wrong[id]++;
        calls[id]++;
        usleep(200);
    }
    return NULL;
}

static int run(void) {
    pthread_t t[2];
    run_workers_until_eof(t, worker);
    stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("calls %ld %ld wrong %ld\n", calls[0], calls[1], wrong[0] + wrong[1]);
    return 0;
}

__attribute__((noinline)) void *runner(void *arg) {
    (void)arg;
    exit(run());
}

/* With an argument (`exit-main`), main starts the rest in a thread and exits with
 * pthread_exit: the process runs on with a zombie main thread. */
int main(int argc, char **argv) {
    (void)argv;
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    if (argc > 1) {
        pthread_t r;
        pthread_create(&r, NULL, runner, NULL);
        pthread_exit(NULL);
    }
    return run();
}
