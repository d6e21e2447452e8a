/* What the traced test programs share: two threads run the program's worker(id) (id 0 and 1)
 * while the main thread reads stdin until end of file; a test ends a program by closing its
 * stdin. Each program keeps its own noinline worker(), whose name the tests look for. */
#include <pthread.h>
#include <unistd.h>

/* Starts worker(0) and worker(1) as t[0] and t[1], then returns when stdin reaches end of
 * file. Always inlined, so it adds no function (and no call site) to the program. */
static inline __attribute__((always_inline)) void
run_workers_until_eof(pthread_t t[2], void *(*worker)(void *)) {
    char buf[64];
    for (long i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    while (read(0, buf, sizeof buf) > 0) {
    }
}
