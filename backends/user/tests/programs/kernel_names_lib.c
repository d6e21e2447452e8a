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
 * names, kernel_names.c, does not take them over). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#define KERNEL_FN __attribute__((noinline, visibility("hidden")))

/* procfs's f_type (statfs(2)). */
#define PROC_SUPER_MAGIC 0x9fa0

static long result(long r) { return r < 0 ? -errno : r; }

KERNEL_FN long kernel_clone(long unused) {
    (void)unused;
    pid_t (*real)(void) = (pid_t(*)(void))dlsym(RTLD_NEXT, "fork");
    return real ? result(real()) : -ENOSYS;
}

pid_t fork(void) {
    long r = kernel_clone(0);
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return (pid_t)r;
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
    return result(syscall(SYS_write, fd, buf, n));
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
