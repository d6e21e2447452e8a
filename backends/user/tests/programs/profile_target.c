/* The traced program of the live function profiler test: two worker threads wait; each line
 * read from stdin starts a burst in which each calls tick_alpha() (which calls tick_beta())
 * exactly BURST times. At end of file it prints "calls A B" (each thread's calls of
 * tick_alpha, counted by the program itself) and exits. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#define BURST 5000

static volatile long sink;
static volatile int bursts;
static volatile int stop;
static long calls[2];

__attribute__((noinline)) long tick_beta(long x) { sink += x; return x * 3 + 1; }

__attribute__((noinline)) long tick_alpha(long x) { return tick_beta(x) + 1; }

__attribute__((noinline)) void *worker(void *arg) {
    long id = (long)arg;
    int done = 0;
    while (!stop || done < bursts) {
        if (done == bursts) {
            usleep(1000);
            continue;
        }
        for (int i = 0; i < BURST; i++) {
            tick_alpha(id);
            calls[id]++;
        }
        done++;
    }
    return NULL;
}

int main(void) {
    pthread_t t[2];
    char c;
    for (long i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    while (read(0, &c, 1) > 0) {
        if (c == '\n')
            __atomic_add_fetch(&bursts, 1, __ATOMIC_SEQ_CST);
    }
    stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("calls %ld %ld\n", calls[0], calls[1]);
    return 0;
}
