/* The traced program of the live-event cost bench (benches/live_events.rs): for every line
 * read on stdin, times LOOPS calls of a traced empty function and LOOPS firings of a trace
 * event with one u64 field, and prints both as nanoseconds per iteration (CLOCK_MONOTONIC,
 * the loop's own overhead included in both): "leaf <ns> event <ns>". The bench reads the
 * lines under different mount settings (function tracer on or off, the event on or off) and
 * subtracts. Exits at end of file. */
#include <stdio.h>
#include <time.h>

#include <ftrace/tracepoint.h>

#define BENCH_U64_FIELDS(F, S) F(unsigned long, value)
FTRACE_EVENT(bench, bench_u64, BENCH_U64_FIELDS, (unsigned long value),
             FTRACE_PRINT("value=%lu", REC->value))

#define LOOPS 200000UL

/* A traced function that does nothing but keep the loop from being folded away. */
__attribute__((noinline)) void cost_leaf(unsigned long v) {
    __asm__ volatile("" : : "r"(v) : "memory");
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

__attribute__((noinline)) double time_leaf(void) {
    double t0 = now_ns();
    for (unsigned long i = 0; i < LOOPS; i++) {
        cost_leaf(i);
    }
    return (now_ns() - t0) / (double)LOOPS;
}

__attribute__((noinline)) double time_event(void) {
    double t0 = now_ns();
    for (unsigned long i = 0; i < LOOPS; i++) {
        trace_bench_u64(i);
        __asm__ volatile("" : : : "memory");
    }
    return (now_ns() - t0) / (double)LOOPS;
}

int main(void) {
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        double leaf = time_leaf();
        double event = time_event();
        printf("leaf %.2f event %.2f\n", leaf, event);
        fflush(stdout);
    }
    return 0;
}
