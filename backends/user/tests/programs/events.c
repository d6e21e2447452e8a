/* The traced program of the live-events test: declares trace events with
 * ftrace/tracepoint.h and, for every line read on stdin, fires demo_value twenty times
 * (value 1..20, delta value - 10, label "v<value>") from a function of its own, then
 * sched_wakeup (declared with the kernel's layout: comm, pid, prio, target_cpu) for itself, then
 * demo_round once (the round number), then calls round_done (traced: its entry in trace says
 * the round's events have fired), after calls:demo_call (round_done's address, for
 * `.sym` hist keys). Exits at end of file, printing how many rounds it ran. */
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

#include <ftrace/tracepoint.h>

#define DEMO_VALUE_FIELDS(F, S) F(unsigned long, value) F(int, delta) S(label, 16)
FTRACE_EVENT(demo, demo_value, DEMO_VALUE_FIELDS,
             (unsigned long value, int delta, const char *label),
             FTRACE_PRINT("value=%lu delta=%d label=%s", REC->value, REC->delta, REC->label))

#define DEMO_ROUND_FIELDS(F, S) F(int, round)
FTRACE_EVENT(demo, demo_round, DEMO_ROUND_FIELDS, (int round),
             FTRACE_PRINT("round=%d", REC->round))

#define SCHED_WAKEUP_FIELDS(F, S) S(comm, 16) F(pid_t, pid) F(int, prio) F(int, target_cpu)
FTRACE_EVENT(sched, sched_wakeup, SCHED_WAKEUP_FIELDS,
             (const char *comm, pid_t pid, int prio, int target_cpu),
             FTRACE_PRINT("comm=%s pid=%d prio=%d target_cpu=%03d", REC->comm, REC->pid,
                          REC->prio, REC->target_cpu))

#define DEMO_CALL_FIELDS(F, S) F(unsigned long, fn)
FTRACE_EVENT(calls, demo_call, DEMO_CALL_FIELDS, (unsigned long fn),
             FTRACE_PRINT("fn=%lx", REC->fn))

__attribute__((noinline)) void fire_values(void) {
    char label[16];
    for (unsigned long v = 1; v <= 20; v++) {
        snprintf(label, sizeof label, "v%lu", v);
        trace_demo_value(v, (int)v - 10, label);
    }
}

__attribute__((noinline)) void round_done(int round) {
    __asm__ volatile("" : : "r"(round) : "memory");
}

int main(void) {
    char line[64];
    int rounds = 0;
    while (fgets(line, sizeof line, stdin)) {
        fire_values();
        trace_sched_wakeup("events", getpid(), 120, 0);
        trace_demo_round(++rounds);
        trace_demo_call((unsigned long)round_done);
        round_done(rounds);
    }
    printf("rounds %d\n", rounds);
    return 0;
}
