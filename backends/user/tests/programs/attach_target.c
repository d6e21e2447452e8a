/* The program the attach test attaches to: started normally (no agent), the tick program of
 * ticks.h (two worker threads calling tick_alpha() and tick_beta() until stdin reaches end of
 * file); the main thread waits in read(2) meanwhile (or, with an argument, a thread of its
 * own, the main thread having exited). Then it prints the number of calls and of
 * wrong results, and exits.
 *
 * It allows any process of its user to ptrace it (PR_SET_PTRACER_ANY), so that the test's
 * `ftrace`, which is not its parent, may attach under kernel.yama.ptrace_scope=1. */
#include <stdlib.h>
#include <sys/prctl.h>

#define TICK_PAUSE_US 200
#include "ticks.h"

__attribute__((noinline)) void *runner(void *arg) {
    (void)arg;
    exit(run_ticks());
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
    return run_ticks();
}
