/* How a traced program may end or split, for ftrace-rs's end-to-end tests. `work` is the traced
 * function; each process image prints "work calls N" (flushed) before it ends.
 *
 *   lifecycle fork     parent and child both call work; both exit normally
 *   lifecycle exec     calls work, then execs itself ("exec-child") which calls work again
 *   lifecycle _exit    calls work, then _exit(0) (no atexit, no destructors)
 *   lifecycle signal   calls work, then dies of SIGSEGV (default action)
 *   lifecycle kill     calls work, then SIGKILLs itself
 *   lifecycle handler  work is also called from a signal handler interrupting work
 *   lifecycle sigtrap  the program's own SIGTRAP handler sees its own int3s (chained)
 *   lifecycle longjmp  longjmp out of traced frames (function_graph hooks skipped)
 *   lifecycle dlopen   work is also called in a library loaded later with dlopen (argv[2]) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long calls;
static volatile long sink;

__attribute__((noinline)) long work(long x) {
    calls++;
    for (int i = 0; i < 10; i++) sink += x * i;
    return sink;
}

static void on_usr1(int sig) { (void)sig; work(7); }

static volatile int traps;
static void on_trap(int sig) { (void)sig; traps++; }

static jmp_buf env;
__attribute__((noinline)) void jump_out(int depth) {
    work(depth);
    if (depth == 0) longjmp(env, 1);
    jump_out(depth - 1);
    __asm__ volatile("" ::: "memory");
}

static void report(void) { printf("work calls %ld\n", (long)calls); fflush(stdout); }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "fork";
    for (int i = 0; i < 100; i++) work(i);
    if (!strcmp(mode, "fork")) {
        pid_t p = fork();
        if (p == 0) { calls = 0; for (int i = 0; i < 30; i++) work(i); report(); exit(0); }
        int st; waitpid(p, &st, 0);
        for (int i = 0; i < 20; i++) work(i);
        report();
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
    }
    if (!strcmp(mode, "exec")) {
        report();
        char *args[] = { argv[0], "exec-child", NULL };
        execv("/proc/self/exe", args);
        perror("execv");
        return 1;
    }
    if (!strcmp(mode, "exec-child")) { for (int i = 0; i < 40; i++) work(i); report(); return 0; }
    if (!strcmp(mode, "_exit")) { report(); _exit(0); }
    if (!strcmp(mode, "signal")) { report(); signal(SIGSEGV, SIG_DFL); raise(SIGSEGV); return 1; }
    if (!strcmp(mode, "kill")) { report(); kill(getpid(), SIGKILL); return 1; }
    if (!strcmp(mode, "handler")) {
        signal(SIGUSR1, on_usr1);
        for (int i = 0; i < 50; i++) { raise(SIGUSR1); work(i); }
        report();
        return 0;
    }
    if (!strcmp(mode, "sigtrap")) {
        signal(SIGTRAP, on_trap);
        struct sigaction now;
        sigaction(SIGTRAP, NULL, &now);
        printf("handler read back %s\n", now.sa_handler == on_trap ? "ok" : "WRONG");
        for (int i = 0; i < 3; i++) { __asm__ volatile("int3"); work(i); }
        printf("traps %d\n", traps);
        report();
        return traps == 3 ? 0 : 1;
    }
    if (!strcmp(mode, "longjmp")) {
        for (int i = 0; i < 10; i++)
            if (!setjmp(env)) jump_out(5);
        for (int i = 0; i < 10; i++) work(i);
        report();
        return 0;
    }
    if (!strcmp(mode, "dlopen")) {
        void *h = dlopen(argc > 2 ? argv[2] : "./libplugin.so", RTLD_NOW);
        if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
        long (*plugin_work)(long) = (long (*)(long))dlsym(h, "plugin_work");
        long (*plugin_calls)(void) = (long (*)(void))dlsym(h, "plugin_calls");
        for (int i = 0; i < 25; i++) plugin_work(i);
        printf("plugin_work calls %ld\n", plugin_calls());
        report();
        return 0;
    }
    return 2;
}
