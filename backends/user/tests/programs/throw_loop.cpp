// A C++ exception thrown through two traced frames every 2 ms until stdin ends
// (tests/unwind.rs attaches to it): `thrower` throws, `level1` is unwound, `catcher` catches.
// Prints how many rounds caught their exception.
#include <cstdio>
#include <poll.h>
#include <stdexcept>
#include <unistd.h>

__attribute__((noipa)) long thrower(long x) {
    if (x >= 0)
        throw std::runtime_error("boom");
    return x;
}
__attribute__((noipa)) long level1(long x) { return thrower(x) + 1; }
__attribute__((noipa)) long catcher(long x) {
    try {
        return level1(x);
    } catch (const std::runtime_error &) {
        return 7;
    }
}

int main() {
    long rounds = 0, caught = 0;
    char buf[64];
    for (;;) {
        caught += catcher(rounds) == 7;
        rounds++;
        struct pollfd p = {0, POLLIN, 0};
        if (poll(&p, 1, 2) > 0 && read(0, buf, sizeof buf) <= 0)
            break;
    }
    printf("caught %ld of %ld\n", caught, rounds);
    return 0;
}
