/* A call-heavy benchmark: recursive fib, timed around the calls only.
 *   fib_bench N REPS   prints "calls C ns_per_call X" (best of REPS runs) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) long fib(long n) {
    if (n < 2) return n;
    long a = fib(n - 1);
    __asm__ volatile("" : "+r"(a));
    long b = fib(n - 2);
    __asm__ volatile("" : "+r"(b));
    return a + b;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 30;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    long calls = 0, want = 0;
    { long a = 0, b = 1; for (long i = 0; i < n; i++) { long t = a + b; a = b; b = t; } want = a; }
    /* calls of fib(n) = 2 * fib(n + 1) - 1 */
    { long a = 0, b = 1; for (long i = 0; i < n + 1; i++) { long t = a + b; a = b; b = t; } calls = 2 * a - 1; }
    double best = 1e300;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        long v = fib(n);
        double t1 = now();
        if (v != want) { printf("result BAD\n"); return 1; }
        if (t1 - t0 < best) best = t1 - t0;
    }
    printf("calls %ld ns_per_call %.3f\n", calls, best / calls);
    return 0;
}
