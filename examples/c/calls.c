/* A multi-threaded program for ftrace-rs's end-to-end tests: every traced function counts its
 * own calls, so a test can compare the trace with the program's own numbers.
 *
 *   calls THREADS ITERATIONS          run, print counters and results
 *   calls THREADS ITERATIONS toggle N also toggle tracing of all sites N times meanwhile
 *                                     (through the agent's ftrace_agent_set_tracing)
 *   calls ... toggle N masked         the workers run with every signal blocked (as a shell
 *                                     does around a fork: dash's sigblockall)
 *
 * Output lines: "calls <function> <count>" and "result ok" / "result BAD <n>". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_long n_fib, n_sum6, n_fadd, n_leaf, n_pair, n_worker, bad;
static atomic_int stop;

__attribute__((noinline)) long leaf(long x) { atomic_fetch_add_explicit(&n_leaf, 1, memory_order_relaxed); return x * 3 + 1; }
__attribute__((noinline)) long fib(long n) {
    atomic_fetch_add_explicit(&n_fib, 1, memory_order_relaxed);
    if (n < 2) return leaf(n) - 2 * n - 1; /* = n */
    /* The barriers keep both calls real calls: without them gcc turns one into a loop. */
    long a = fib(n - 1);
    __asm__ volatile("" : "+r"(a));
    long b = fib(n - 2);
    __asm__ volatile("" : "+r"(b));
    return a + b;
}
/* Keeps two registers and calls leaf with rsp 8 off a multiple of 16: gcc knows leaf needs no
 * aligned stack (-fipa-stack-alignment), so a tracer's trampoline must align for itself. */
__attribute__((noinline)) long pair(long x) {
    atomic_fetch_add_explicit(&n_pair, 1, memory_order_relaxed);
    long a = leaf(x);
    return a + leaf(x + 1);
}
__attribute__((noinline)) long sum6(long a, long b, long c, long d, long e, long f) {
    atomic_fetch_add_explicit(&n_sum6, 1, memory_order_relaxed);
    return a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f;
}
__attribute__((noinline)) double fadd(double a, double b, double c) {
    atomic_fetch_add_explicit(&n_fadd, 1, memory_order_relaxed);
    return a * 2.0 + b - c / 4.0;
}

struct job { long iters; int forever; int masked; };

__attribute__((noinline)) void *worker(void *arg) {
    struct job *j = arg;
    if (j->masked) {
        sigset_t all;
        sigfillset(&all);
        if (pthread_sigmask(SIG_SETMASK, &all, NULL) != 0) atomic_fetch_add(&bad, 1);
    }
    atomic_fetch_add(&n_worker, 1);
    for (long i = 0; j->forever ? !atomic_load(&stop) : i < j->iters; i++) {
        if (fib(10) != 55) atomic_fetch_add(&bad, 1);
        if (sum6(1, 2, 3, 4, 5, i) != 55 + 6 * i) atomic_fetch_add(&bad, 1);
        if (pair(i) != 6 * i + 5) atomic_fetch_add(&bad, 1);
        if (fadd(1.5, 2.25, (double)i) != 5.25 - (double)i / 4.0) atomic_fetch_add(&bad, 1);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    long iters = argc > 2 ? atol(argv[2]) : 1000;
    int toggles = argc > 4 && !strcmp(argv[3], "toggle") ? atoi(argv[4]) : 0;
    pthread_t th[64];
    int masked = argc > 5 && !strcmp(argv[5], "masked");
    struct job j = { iters, toggles > 0, masked };
    if (threads > 64) threads = 64;
    for (int t = 0; t < threads; t++) pthread_create(&th[t], NULL, worker, &j);
    if (toggles) {
        long (*set)(int) = (long (*)(int))dlsym(RTLD_DEFAULT, "ftrace_agent_set_tracing");
        if (!set) { fprintf(stderr, "calls: no agent\n"); return 2; }
        long changed = 0;
        for (int k = 0; k < toggles; k++) {
            long a = set(1), b = set(0);
            if (a < 0 || b < 0) { fprintf(stderr, "calls: toggle failed\n"); return 3; }
            changed += a + b;
        }
        printf("toggled %d changed %ld\n", toggles, changed);
        /* End with tracing on for a moment, so the workers are seen traced. */
        if (set(1) < 0) return 3;
        usleep(20000);
        atomic_store(&stop, 1);
    }
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
    printf("calls fib %ld\ncalls sum6 %ld\ncalls fadd %ld\ncalls leaf %ld\ncalls pair %ld\n"
           "calls worker %ld\n",
           (long)n_fib, (long)n_sum6, (long)n_fadd, (long)n_leaf, (long)n_pair, (long)n_worker);
    if (bad) printf("result BAD %ld\n", (long)bad); else printf("result ok\n");
    return bad != 0;
}
