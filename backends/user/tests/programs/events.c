/* The traced program of the live-events test: declares two trace events with
 * ftrace/tracepoint.h and, for every line read on stdin, fires demo_value twenty times
 * (value 1..20, delta value - 10, label "v<value>") from a function of its own, then demo_round
 * once (the round number). Exits at end of file, printing how many rounds it ran. */
#include <stdio.h>

#include <ftrace/tracepoint.h>

#define DEMO_VALUE_FIELDS(F, S) F(unsigned long, value) F(int, delta) S(label, 16)
FTRACE_EVENT(demo, demo_value, DEMO_VALUE_FIELDS,
             (unsigned long value, int delta, const char *label),
             FTRACE_PRINT("value=%lu delta=%d label=%s", REC->value, REC->delta, REC->label))

#define DEMO_ROUND_FIELDS(F, S) F(int, round)
FTRACE_EVENT(demo, demo_round, DEMO_ROUND_FIELDS, (int round),
             FTRACE_PRINT("round=%d", REC->round))

__attribute__((noinline)) void fire_values(void) {
    char label[16];
    for (unsigned long v = 1; v <= 20; v++) {
        snprintf(label, sizeof label, "v%lu", v);
        trace_demo_value(v, (int)v - 10, label);
    }
}

int main(void) {
    char line[64];
    int rounds = 0;
    while (fgets(line, sizeof line, stdin)) {
        fire_values();
        trace_demo_round(++rounds);
    }
    printf("rounds %d\n", rounds);
    return 0;
}
