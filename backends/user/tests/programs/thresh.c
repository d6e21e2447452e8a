/* Calls of known lengths, for the tracing_thresh tests (tests/thresh.rs): `slow` sleeps 3 ms,
 * `fast` returns at once; `outer` calls both. `thresh N` runs N rounds (0: until killed). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile long sink;

__attribute__((noipa)) long fast(void) { sink++; return 1; }
__attribute__((noipa)) long slow(void) { usleep(3000); return 7; }
__attribute__((noipa)) long outer(void) { return fast() + slow() + fast(); }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1;
    long sum = 0;
    for (long i = 0; n == 0 || i < n; i++)
        sum += outer();
    printf("sum %ld\n", sum);
    return 0;
}
