/* Preloaded (after the agent) into the processes of the ftracetest run (tests/ftracetest.rs):
 * the suite's own shells and the programs they start. It interposes the libc calls a shell
 * makes and routes each through functions named like the kernel's, which do the real work and
 * return what the kernel's would (the result, or -errno):
 *
 *   fork   -> kernel_clone
 *   execve -> do_execve -> do_execveat_common
 *   write  -> ksys_write -> vfs_write (-> proc_reg_write for a file of /proc)
 *
 * so that `echo > /proc/interrupts` in the suite's shell calls proc_reg_write, which returns
 * -EIO (-5) as the real write fails, and the shell's forks and execs call kernel_clone and
 * do_execve*. Built with call sites (clang -fpatchable-function-entry=5: one 5-byte NOP each,
 * patched with the breakpoint protocol); the kernel-named functions
 * are hidden, so that calls between them stay inside this library (a program defining the same
 * names, kernel_names.c, does not take them over).
 *
 * It also defines the kernel's events of kernel_events.h and fires them where the kernel
 * would for the process it is in, so that the suite finds its own shell's events:
 *
 *   sched_process_fork   in the parent, once fork has made the child (kernel_clone)
 *   sched_process_exit   at exit (exit's handlers, or _exit), with signal_generate: the
 *                        SIGCHLD the exit sends the parent (CLD_EXITED, to the group)
 *   sched_switch         before a call blocks (a wait with no child ready, a sleep,
 *                        sigsuspend, pause): the caller switched out to the CPU's idle task,
 *                        then sched_waking and sched_wakeup once it returns
 *   signal_generate      at kill (the signal sent to that process, SI_USER)
 *   kmalloc              at malloc (the caller's return address as call_site, GFP_KERNEL)
 *   sys_exit             as each system call this library makes for its caller returns
 *                        (clone for fork, in parent and child; write, wait4, the sleeps,
 *                        sigsuspend, pause, kill): the kernel records every one, this the
 *                        ones it makes
 */
#define _GNU_SOURCE
/* First: the event record's `errno` field must not meet errno.h's macro. */
#define KERNEL_EVENTS_DEFINE
#include "kernel_events.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KERNEL_FN __attribute__((noinline, visibility("hidden")))

/* procfs's f_type (statfs(2)). */
#define PROC_SUPER_MAGIC 0x9fa0

static long result(long r) { return r < 0 ? -errno : r; }

/* System call `nr` returned `r` (-errno on failure): raw_syscalls:sys_exit. */
static long sys_exit(long nr, long r) {
    trace_sys_exit(nr, r);
    return r;
}

KERNEL_FN long kernel_clone(long unused) {
    (void)unused;
    pid_t (*real)(void) = (pid_t(*)(void))dlsym(RTLD_NEXT, "fork");
    return real ? sys_exit(SYS_clone, result(real())) : -ENOSYS;
}

/* The calling thread's comm. */
static void own_comm(char comm[16]) {
    comm[0] = 0;
    prctl(PR_GET_NAME, comm);
}

/* Process `pid`'s comm (empty if it cannot be read). */
static void comm_of(pid_t pid, char comm[16]) {
    char path[64];
    comm[0] = 0;
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    long n = syscall(SYS_read, fd, comm, 15);
    close(fd);
    comm[n > 0 ? n : 0] = 0;
    if (n > 0 && comm[n - 1] == '\n')
        comm[n - 1] = 0;
}

pid_t fork(void) {
    long r = kernel_clone(0);
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    if (r > 0) {
        /* The child is a copy of its parent: the parent's comm. */
        char comm[16];
        own_comm(comm);
        trace_sched_process_fork(comm, gettid(), comm, (pid_t)r);
    }
    return (pid_t)r;
}

/* The calling thread switches out (it is about to block): to the idle task of its CPU. */
static void switch_out(void) {
    char comm[16], idle[16];
    int cpu = sched_getcpu();
    own_comm(comm);
    snprintf(idle, sizeof idle, "swapper/%d", cpu < 0 ? 0 : cpu);
    trace_sched_switch(comm, gettid(), DEFAULT_PRIO, TASK_INTERRUPTIBLE, idle, 0, DEFAULT_PRIO);
}

/* The calling thread was woken (its blocking call returned). */
static void woken(void) {
    char comm[16];
    own_comm(comm);
    trace_sched_waking(comm, gettid(), DEFAULT_PRIO, sched_getcpu());
    trace_sched_wakeup(comm, gettid(), DEFAULT_PRIO, sched_getcpu());
}

/* Whether a wait for `idtype`/`id` with `options` would block now: no WNOHANG and no child
 * of those ready (asked without reaping it). */
static int wait_blocks(idtype_t idtype, id_t id, int options) {
    if (options & WNOHANG)
        return 0;
    siginfo_t si;
    si.si_pid = 0;
    int flags = WEXITED | WNOHANG | WNOWAIT | (options & (WUNTRACED | WCONTINUED));
    if (options & WUNTRACED)
        flags |= WSTOPPED;
    if (syscall(SYS_waitid, idtype, id, &si, flags, NULL) < 0)
        return 0;
    return si.si_pid == 0;
}

/* waitpid's pid as waitid's id type and id. */
static idtype_t wait_target(pid_t pid, id_t *id) {
    if (pid < -1) {
        *id = (id_t)-pid;
        return P_PGID;
    }
    if (pid == 0) {
        *id = 0;
        return P_PGID;
    }
    *id = pid > 0 ? (id_t)pid : 0;
    return pid > 0 ? P_PID : P_ALL;
}

#define REAL(name, type) ((type)dlsym(RTLD_NEXT, name))

pid_t wait4(pid_t pid, int *status, int options, struct rusage *ru) {
    id_t id;
    idtype_t t = wait_target(pid, &id);
    int blocks = wait_blocks(t, id, options);
    if (blocks)
        switch_out();
    pid_t r = REAL("wait4", pid_t(*)(pid_t, int *, int, struct rusage *))(pid, status, options,
                                                                        ru);
    int e = errno;
    if (blocks)
        woken();
    sys_exit(SYS_wait4, result(r));
    errno = e;
    return r;
}

pid_t wait3(int *status, int options, struct rusage *ru) {
    return wait4(-1, status, options, ru);
}

pid_t waitpid(pid_t pid, int *status, int options) { return wait4(pid, status, options, NULL); }

pid_t wait(int *status) { return wait4(-1, status, 0, NULL); }

int nanosleep(const struct timespec *req, struct timespec *rem) {
    switch_out();
    int r = REAL("nanosleep", int (*)(const struct timespec *, struct timespec *))(req, rem);
    int e = errno;
    woken();
    sys_exit(SYS_nanosleep, result(r));
    errno = e;
    return r;
}

int clock_nanosleep(clockid_t clock, int flags, const struct timespec *req,
                    struct timespec *rem) {
    switch_out();
    int r = REAL("clock_nanosleep",
                 int (*)(clockid_t, int, const struct timespec *, struct timespec *))(
        clock, flags, req, rem);
    woken();
    sys_exit(SYS_clock_nanosleep, -r); /* it returns the error number */
    return r;
}

int sigsuspend(const sigset_t *mask) {
    switch_out();
    int r = REAL("sigsuspend", int (*)(const sigset_t *))(mask);
    int e = errno;
    woken();
    sys_exit(SYS_rt_sigsuspend, result(r));
    errno = e;
    return r;
}

int pause(void) {
    switch_out();
    int r = REAL("pause", int (*)(void))();
    int e = errno;
    woken();
    sys_exit(SYS_pause, result(r));
    errno = e;
    return r;
}

/* kill: the signal each target process is sent (one event for a process; for a group or
 * every process, one naming the group's pid: the kernel sends one per member). */
int kill(pid_t pid, int sig) {
    int r = REAL("kill", int (*)(pid_t, int))(pid, sig);
    int e = errno;
    sys_exit(SYS_kill, result(r));
    errno = e;
    if (r == 0 && sig > 0) {
        char comm[16];
        comm_of(pid > 0 ? pid : getpid(), comm);
        trace_signal_generate(sig, 0, SI_USER, comm, pid > 0 ? pid : -pid, 1,
                              TRACE_SIGNAL_DELIVERED);
    }
    return r;
}

/* glibc's allocator, under its own name (malloc here is the interposer). */
extern void *__libc_malloc(size_t n);

void *malloc(size_t n) {
    void *p = __libc_malloc(n);
    trace_kmalloc((unsigned long)__builtin_return_address(0), p, n,
                  p ? malloc_usable_size(p) : 0, GFP_KERNEL, NUMA_NO_NODE);
    return p;
}

/* The process exits: sched_process_exit, then the SIGCHLD its parent is sent. */
static void exiting(void) {
    char comm[16], parent[16];
    pid_t ppid = getppid();
    own_comm(comm);
    comm_of(ppid, parent);
    trace_sched_process_exit(comm, gettid(), DEFAULT_PRIO);
    trace_signal_generate(SIGCHLD, 0, CLD_EXITED, parent, ppid, 1, TRACE_SIGNAL_DELIVERED);
}

/* Registered at start (and inherited by a forked child): exit's handlers run it. */
__attribute__((constructor)) static void exit_events_at_exit(void) { atexit(exiting); }

void _exit(int status) {
    exiting();
    REAL("_exit", void (*)(int))(status);
    __builtin_unreachable();
}

KERNEL_FN long do_execveat_common(int fd, const char *path, char *const argv[],
                                  char *const envp[], int flags) {
    (void)fd;
    (void)flags;
    int (*real)(const char *, char *const[], char *const[]) =
        (int (*)(const char *, char *const[], char *const[]))dlsym(RTLD_NEXT, "execve");
    return real ? result(real(path, argv, envp)) : -ENOSYS;
}

KERNEL_FN long do_execve(const char *path, char *const argv[], char *const envp[]) {
    return do_execveat_common(AT_FDCWD, path, argv, envp, 0);
}

int execve(const char *path, char *const argv[], char *const envp[]) {
    errno = (int)-do_execve(path, argv, envp);
    return -1;
}

static long raw_write(int fd, const void *buf, size_t n) {
    return sys_exit(SYS_write, result(syscall(SYS_write, fd, buf, n)));
}

KERNEL_FN long proc_reg_write(int fd, const void *buf, size_t n) { return raw_write(fd, buf, n); }

KERNEL_FN long vfs_write(int fd, const void *buf, size_t n) {
    struct statfs fs;
    if (fstatfs(fd, &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC)
        return proc_reg_write(fd, buf, n);
    return raw_write(fd, buf, n);
}

KERNEL_FN long ksys_write(int fd, const void *buf, size_t n) { return vfs_write(fd, buf, n); }

ssize_t write(int fd, const void *buf, size_t n) {
    long r = ksys_write(fd, buf, n);
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return r;
}
