/* The tick program the mount and attach tests trace (mount_target.c, attach_target.c): two
 * worker threads call tick_alpha(), which calls tick_beta(), checking every result and pausing
 * TICK_PAUSE_US microseconds between calls, until stdin reaches end of file. Then run_ticks()
 * prints the number of calls of each worker and of wrong results. The tests look for these
 * names: each program defines them once, by including this header. */
#include <stdio.h>
#include <unistd.h>

#include "workers.h"

#ifndef TICK_PAUSE_US
#error "define TICK_PAUSE_US before including ticks.h"
#endif

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
        usleep(TICK_PAUSE_US);
    }
    return NULL;
}

/* Runs the workers until stdin ends, joins them and prints `calls A B wrong W`. */
static inline __attribute__((always_inline)) int run_ticks(void) {
    pthread_t t[2];
    run_workers_until_eof(t, worker);
    stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("calls %ld %ld wrong %ld\n", calls[0], calls[1], wrong[0] + wrong[1]);
    return 0;
}
