// The `stacktrace` function command's target (tests/unwind.rs): `main` calls `top` -> `mid`
// -> `leaf` every 2 ms until its stdin reaches its end.
#include <poll.h>
#include <stdio.h>
#include <unistd.h>

static volatile int sink;

__attribute__((noipa)) int leaf(int x) { return x + 1; }
__attribute__((noipa)) int mid(int x) { return leaf(x) * 2; }
__attribute__((noipa)) int top(int x) { return mid(x) + 3; }

int main(void) {
    char buf[64];
    for (int i = 0;; i++) {
        sink += top(i);
        struct pollfd p = {.fd = 0, .events = POLLIN};
        if (poll(&p, 1, 2) > 0 && read(0, buf, sizeof buf) <= 0)
            break;
    }
    printf("done\n");
    return 0;
}
