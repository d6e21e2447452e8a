/* The traced program of the FUSE tracefs test: two worker threads call tick_alpha(), which
 * calls tick_beta(), about a thousand times a second each, checking the result, until stdin
 * reaches end of file. Then it prints the number of calls and of wrong results, and exits.
 * The test controls when it ends by closing its stdin.
 *
 * gcc -O2 calls tick_beta with rsp 8 off 16 (-fipa-stack-alignment: it knows tick_beta needs
 * no more), so the agent's full-save trampolines (set_graph_function, filters) must align. */
#define TICK_PAUSE_US 1000
#include "ticks.h"

int main(void) { return run_ticks(); }
