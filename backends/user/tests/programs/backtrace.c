/* backtrace(3) from two traced frames deep (tests/unwind.rs): the frames it prints must be
 * the untraced program's. */
#include <execinfo.h>
#include <stdio.h>
__attribute__((noipa)) int inner(void) { void *b[16]; int n = backtrace(b, 16); backtrace_symbols_fd(b, n, 1); return n; }
__attribute__((noipa)) int mid(void) { return inner() + 1; }
int main(void) { printf("n=%d\n", mid()); return 0; }
