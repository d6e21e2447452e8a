/* The kernel's events the ftracetest run (tests/ftracetest.rs) enables, filters and triggers
 * on, with Linux 6.12's layouts and print formats (include/trace/events/sched.h and signal.h
 * on x86_64: the sched_switch and sched_wakeup formats are checked against the 6.12 goldens).
 * kernel_names_lib.c defines them (KERNEL_EVENTS_DEFINE), in every process of the traced tree:
 * the suite's shells and the programs they start fire them where the kernel would (a fork, an
 * exit, a block); kernel_names.c, which links the library, declares them and its workers fire
 * the sched ones as they block and the signal one as they signal each other. */
#include <stddef.h>
#include <sys/types.h>

#include <ftrace/tracepoint.h>

#ifdef KERNEL_EVENTS_DEFINE
#define KERNEL_EVENT(system, name, FIELDS, proto, print) \
    FTRACE_EVENT(system, name, FIELDS, proto, print)
#else
#define KERNEL_EVENT(system, name, FIELDS, proto, print) \
    FTRACE_EVENT_EXTERN(system, name, FIELDS, proto)
#endif

#define SCHED_SWITCH_FIELDS(F, S)                                                                  \
    S(prev_comm, 16) F(pid_t, prev_pid) F(int, prev_prio) F(long, prev_state) S(next_comm, 16)   \
    F(pid_t, next_pid) F(int, next_prio)
KERNEL_EVENT(sched, sched_switch, SCHED_SWITCH_FIELDS,
             (const char *prev_comm, pid_t prev_pid, int prev_prio, long prev_state,
              const char *next_comm, pid_t next_pid, int next_prio),
             FTRACE_PRINT("prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), "|", { 0x00000001, "S" }, { 0x00000002, "D" }, { 0x00000004, "T" }, { 0x00000008, "t" }, { 0x00000010, "X" }, { 0x00000020, "Z" }, { 0x00000040, "P" }, { 0x00000080, "I" }) : "R", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? "+" : "", REC->next_comm, REC->next_pid, REC->next_prio))

/* sched_waking and sched_wakeup share the kernel's sched_wakeup_template. */
#define SCHED_WAKEUP_FIELDS(F, S) S(comm, 16) F(pid_t, pid) F(int, prio) F(int, target_cpu)
KERNEL_EVENT(sched, sched_wakeup, SCHED_WAKEUP_FIELDS,
             (const char *comm, pid_t pid, int prio, int target_cpu),
             FTRACE_PRINT("comm=%s pid=%d prio=%d target_cpu=%03d", REC->comm, REC->pid,
                          REC->prio, REC->target_cpu))
KERNEL_EVENT(sched, sched_waking, SCHED_WAKEUP_FIELDS,
             (const char *comm, pid_t pid, int prio, int target_cpu),
             FTRACE_PRINT("comm=%s pid=%d prio=%d target_cpu=%03d", REC->comm, REC->pid,
                          REC->prio, REC->target_cpu))

#define SCHED_PROCESS_FORK_FIELDS(F, S)                                                            \
    S(parent_comm, 16) F(pid_t, parent_pid) S(child_comm, 16) F(pid_t, child_pid)
KERNEL_EVENT(sched, sched_process_fork, SCHED_PROCESS_FORK_FIELDS,
             (const char *parent_comm, pid_t parent_pid, const char *child_comm,
              pid_t child_pid),
             FTRACE_PRINT("comm=%s pid=%d child_comm=%s child_pid=%d", REC->parent_comm,
                          REC->parent_pid, REC->child_comm, REC->child_pid))

/* The kernel's sched_process_template. */
#define SCHED_PROCESS_FIELDS(F, S) S(comm, 16) F(pid_t, pid) F(int, prio)
KERNEL_EVENT(sched, sched_process_exit, SCHED_PROCESS_FIELDS,
             (const char *comm, pid_t pid, int prio),
             FTRACE_PRINT("comm=%s pid=%d prio=%d", REC->comm, REC->pid, REC->prio))

#define SIGNAL_GENERATE_FIELDS(F, S)                                                               \
    F(int, sig) F(int, errno) F(int, code) S(comm, 16) F(pid_t, pid) F(int, group) F(int, result)
KERNEL_EVENT(signal, signal_generate, SIGNAL_GENERATE_FIELDS,
             (int sig, int errno, int code, const char *comm, pid_t pid, int group, int result),
             FTRACE_PRINT("sig=%d errno=%d code=%d comm=%s pid=%d grp=%d res=%d", REC->sig,
                          REC->errno, REC->code, REC->comm, REC->pid, REC->group, REC->result))

/* raw_syscalls:sys_exit (6.12: the system call's number and its return value). */
#define SYS_EXIT_FIELDS(F, S) F(long, id) F(long, ret)
KERNEL_EVENT(raw_syscalls, sys_exit, SYS_EXIT_FIELDS, (long id, long ret),
             FTRACE_PRINT("NR %ld = %ld", REC->id, REC->ret))

/* kmalloc's 6.12 fields; its print format is the kernel's but for show_gfp_flags, whose
 * table (the kernel build's macro expansion of every GFP_* name) is cut to the one value the
 * suite's allocations carry, GFP_KERNEL (__GFP_RECLAIM | __GFP_IO | __GFP_FS = 0xcc0), and
 * `accounted` tests __GFP_ACCOUNT (bit 22). */
#define KMALLOC_FIELDS(F, S)                                                                       \
    F(unsigned long, call_site) F(const void *, ptr) F(size_t, bytes_req)                         \
    F(size_t, bytes_alloc) F(unsigned long, gfp_flags) F(int, node)
KERNEL_EVENT(kmem, kmalloc, KMALLOC_FIELDS,
             (unsigned long call_site, const void *ptr, size_t bytes_req, size_t bytes_alloc,
              unsigned long gfp_flags, int node),
             FTRACE_PRINT("call_site=%pS ptr=%p bytes_req=%zu bytes_alloc=%zu gfp_flags=%s node=%d accounted=%s", (void *)REC->call_site, REC->ptr, REC->bytes_req, REC->bytes_alloc, (REC->gfp_flags) ? __print_flags(REC->gfp_flags, "|", { 0xcc0, "GFP_KERNEL" }) : "none", REC->node, (REC->gfp_flags & 0x400000) ? "true" : "false"))

/* GFP_KERNEL, as kmalloc's gfp_flags carry it. */
#define GFP_KERNEL 0xcc0
/* kmalloc's node: NUMA_NO_NODE. */
#define NUMA_NO_NODE (-1)

/* The task state a blocked task leaves in: TASK_INTERRUPTIBLE ("S"). */
#define TASK_INTERRUPTIBLE 1
/* A task's default priority as the sched events print it (nice 0). */
#define DEFAULT_PRIO 120
/* signal_generate's `result`: TRACE_SIGNAL_DELIVERED. */
#define TRACE_SIGNAL_DELIVERED 0
