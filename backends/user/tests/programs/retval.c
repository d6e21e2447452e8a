/* Functions with known return values, for the funcgraph-retval tests (tests/retval.rs).
 * `noipa`: the callers use each value from rax, as a separate compilation would. */
#include <stdio.h>
#include <stdlib.h>

volatile long sink;

__attribute__((noipa)) long ret_three(void) { sink++; return 3; }
__attribute__((noipa)) int ret_einval(void) { sink++; return -22; }
__attribute__((noipa)) long ret_eio(void) { sink++; return -5; }
__attribute__((noipa)) unsigned long ret_big(void) { sink++; return 0x12345678abcdUL; }
__attribute__((noipa)) long ret_zero(void) { sink++; return 0; }
/* 3 - 5 + x */
__attribute__((noipa)) long outer(long x) { return ret_three() + ret_eio() + x; }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1;
    unsigned long sum = 0;
    for (long i = 0; i < n; i++) {
        sum += (unsigned long)ret_three();
        sum += (unsigned long)(long)ret_einval();
        sum += (unsigned long)ret_eio();
        sum += ret_big();
        sum += (unsigned long)ret_zero();
        sum += (unsigned long)outer(12);
    }
    unsigned long want = (unsigned long)n * (3UL - 22 - 5 + 0x12345678abcdUL + 0 + 10);
    printf("sum %lu\n", sum);
    printf(sum == want ? "result ok\n" : "result WRONG\n");
    return 0;
}
