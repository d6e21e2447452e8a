/* The traced program of the FUSE tracefs test: two worker threads call tick_alpha(), which
 * calls tick_beta(), about a thousand times a second each, checking the result, until stdin
 * reaches end of file. Then it prints the number of calls and of wrong results, and exits.
 * The test controls when it ends by closing its stdin.
 *
 * gcc -O2 calls tick_beta with rsp 8 off 16 (-fipa-stack-alignment: it knows tick_beta needs
 * no more), so the agent's full-save trampolines (set_graph_function, filters) must align. */
#include <stdio.h>
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
        usleep(1000);
    }
    return NULL;
}

int main(void) {
    pthread_t t[2];
    run_workers_until_eof(t, worker);
    stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("calls %ld %ld wrong %ld\n", calls[0], calls[1], wrong[0] + wrong[1]);
    return 0;
}
