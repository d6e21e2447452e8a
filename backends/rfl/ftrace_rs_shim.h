/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C half of the ftrace_rs module: what Rust cannot do by itself on 6.12 (the kernel crate
 * has no ftrace, per-CPU, seq_file or debugfs API, and these are macros or inline functions).
 * Every function here is notrace: the Rust ftrace callback calls them, and they must never
 * re-enter it.
 *
 * The Rust side (ftrace_rs_main.rs, rs/shim.rs) declares the same functions in an extern "C"
 * block; keep both in sync.
 */
#ifndef FTRACE_RS_SHIM_H
#define FTRACE_RS_SHIM_H

#include <linux/types.h>

struct seq_file;
struct ftrace_ops;
struct ftrace_regs;

/* The raw context of the current CPU, read by the callback once per event. */
struct rfl_shim_ctx {
	u32 preempt_count;        /* preempt_count(), the whole word                     */
	u32 migrate_disable;      /* current->migration_disabled                         */
	u8 irqs_disabled;         /* irqs_disabled()                                     */
	u8 in_nmi;                /* preempt_count() & NMI_MASK                          */
	u8 in_hardirq;            /* preempt_count() & HARDIRQ_MASK                      */
	u8 in_serving_softirq;    /* in_serving_softirq()                                */
	u8 bh_disabled;           /* softirq_count() >> (SOFTIRQ_SHIFT + 1)              */
	u8 need_resched;          /* tif_need_resched()                                  */
	u8 preempt_need_resched;  /* test_preempt_need_resched()                         */
	u8 pad;
};

/* Registration (ftrace_ops owned by the shim). */
int rfl_shim_register(void);
int rfl_shim_unregister(void);
const char *rfl_shim_filter(void);
unsigned int rfl_shim_pages_per_cpu(void);

/* Per-event context. */
void rfl_shim_preempt_disable(void);
void rfl_shim_preempt_enable(void);
unsigned int rfl_shim_cpu(void);
unsigned int rfl_shim_nr_cpu_ids(void);
void rfl_shim_ctx(struct rfl_shim_ctx *out);
int rfl_shim_current_pid(void);
void rfl_shim_current_comm(char out[16]);

/*
 * Memory for the ring buffer (its PageProvider) and the reader's snapshot: zeroed blocks of
 * @size bytes aligned to @align; a page from the page allocator when it fits one, vzalloc()
 * above that. Free with the same size.
 */
void *rfl_shim_alloc(size_t size, size_t align);
void rfl_shim_free(void *ptr, size_t size);
void rfl_shim_synchronize(void);
void rfl_shim_sleep_us(unsigned int us); /* process context: usleep_range(us, 2 * us) */
void rfl_shim_rcu_read_lock(void);
void rfl_shim_rcu_read_unlock(void);
int rfl_shim_rcu_is_watching(void);

/* Symbols: "name+0xoff/0xsize [module]" into buf (KSYM_SYMBOL_LEN bytes). */
int rfl_shim_sprint_symbol(char *buf, unsigned long addr);
unsigned int rfl_shim_ksym_symbol_len(void);

/* Output: debugfs <debugfs>/ftrace_rs/{trace,stats}, served by the rfl_rs_show_* below. */
int rfl_shim_debugfs_create(void);
void rfl_shim_debugfs_remove(void);
void rfl_shim_seq_write(struct seq_file *m, const void *data, size_t len);

/* Defined in Rust. */
void rfl_rs_ftrace_callback(unsigned long ip, unsigned long parent_ip, struct ftrace_ops *op,
			    struct ftrace_regs *fregs);
int rfl_rs_trace_open(void);
void rfl_rs_trace_release(void);
void rfl_rs_show_trace(struct seq_file *m);
void rfl_rs_show_stats(struct seq_file *m);
size_t rfl_rs_trace_size_hint(void);

#endif
