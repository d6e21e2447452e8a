/* A library the lifecycle example loads with dlopen: its sites appear after the program starts. */
static long calls;

__attribute__((noinline)) long plugin_work(long x) {
    calls++;
    return x * 2;
}

long plugin_calls(void) { return calls; }
