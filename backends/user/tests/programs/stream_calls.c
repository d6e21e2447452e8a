/* The traced program of the streamed-recording tests: THREADS threads (joined ROUNDS at a
 * time, so that short-lived threads come and go while others run) each call leaf() CALLS
 * times through mid() every other call, then print their own counts:
 * With PAUSE_US, each thread sleeps that long after every 320 calls.
 *   stream_calls THREADS CALLS ROUNDS [PAUSE_US]
 *   "thread N leaf L mid M" per thread, "total leaf L mid M" last. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long calls;
static int pause_us;
/* Each thread's own: shared, the line went back and forth between the CPUs at every call,
 * and the program ran 40 times slower on two CPUs than on one. */
static __thread volatile long sink;

__attribute__((noinline)) long leaf(long x) { sink += x; return x + 1; }

__attribute__((noinline)) long mid(long x) { return leaf(x) * 2; }

struct counts { long leaf, mid; } __attribute__((aligned(64)));

__attribute__((noinline)) void *worker(void *arg) {
    struct counts *c = arg;
    for (long i = 0; i < calls; i++) {
        if (i & 1) { mid(i); c->mid++; } else { leaf(i); }
        c->leaf++;
        if (pause_us && i % 320 == 319) usleep(pause_us);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    calls = argc > 2 ? atol(argv[2]) : 1000;
    int rounds = argc > 3 ? atoi(argv[3]) : 1;
    pause_us = argc > 4 ? atoi(argv[4]) : 0;
    struct counts *c = calloc(threads, sizeof *c);
    pthread_t *t = calloc(threads, sizeof *t);
    int per = (threads + rounds - 1) / rounds;
    for (int r = 0; r < threads; r += per) {
        for (int i = r; i < threads && i < r + per; i++) pthread_create(&t[i], 0, worker, &c[i]);
        for (int i = r; i < threads && i < r + per; i++) pthread_join(t[i], 0);
    }
    long leafs = 0, mids = 0;
    for (int i = 0; i < threads; i++) {
        printf("thread %d leaf %ld mid %ld\n", i, c[i].leaf, c[i].mid);
        leafs += c[i].leaf;
        mids += c[i].mid;
    }
    printf("total leaf %ld mid %ld\n", leafs, mids);
    return 0;
}
