// A C++ exception thrown through three traced frames and caught (tests/unwind.rs): `thrower`
// throws, `level3`..`level1` are unwound (`level2` runs a destructor on the way, a cleanup
// landing pad), `catcher` catches, sleeps and calls `after_catch`. Every call stays a real call
// (`noipa` for gcc; clang knows only `noinline`).
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <unistd.h>

#ifdef __clang__
#define KEEP __attribute__((noinline))
#else
#define KEEP __attribute__((noipa))
#endif

static volatile long work;

KEEP void dtor_work() { work++; }
struct Noisy {
    ~Noisy() { dtor_work(); }
};

KEEP long thrower(long x) {
    if (x >= 0)
        throw std::runtime_error("boom");
    return x;
}
KEEP long level3(long x) { return thrower(x) + 1; }
KEEP long level2(long x) {
    Noisy n;
    return level3(x) * 2;
}
KEEP long level1(long x) { return level2(x) + 3; }
KEEP long after_catch(long x) { return x + 5; }
KEEP long catcher(long x) {
    try {
        return level1(x);
    } catch (const std::runtime_error &e) {
        // 100 ms in the catch before any traced call: the skipped frames' exits are stamped
        // at the catch, so their durations do not hold it.
        usleep(100000);
        return 100 + after_catch(x);
    }
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1;
    long sum = 0;
    for (long i = 0; i < n; i++)
        sum += catcher(i);
    printf("sum %ld dtors %ld\n", sum, work);
    return 0;
}
