// SPDX-License-Identifier: GPL-2.0
/*
 * ftrace_rs: C shim. Owns the struct ftrace_ops (its layout belongs to the kernel headers, not
 * to a Rust mirror), the module parameters and the debugfs files, and wraps the macros and
 * inline functions the Rust callback needs (CPU id, preemption, irq/softirq state, current).
 * The tracing logic itself is Rust: see ftrace_rs_main.rs.
 */
#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/ftrace.h>
#include <linux/gfp.h>
#include <linux/hardirq.h>
#include <linux/kallsyms.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/preempt.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/smp.h>
#include <linux/string.h>
#include <linux/topology.h>
#include <linux/vmalloc.h>
#include "ftrace_rs_shim.h"

static char *filter = "vfs_read";
module_param(filter, charp, 0444);
MODULE_PARM_DESC(filter, "comma-separated set_ftrace_filter patterns the module traces (default vfs_read)");

static unsigned int pages_per_cpu = 64;
module_param(pages_per_cpu, uint, 0444);
MODULE_PARM_DESC(pages_per_cpu, "ring-buffer pages per CPU (default 64)");

/*
 * No FTRACE_OPS_FL_RECURSION: ftrace calls the Rust function directly, and the ftrace-core
 * dispatcher behind it does the recursion protection (and preemption is disabled by the
 * callback itself, around the ring-buffer write).
 */
static struct ftrace_ops rfl_ops = {
	.func = rfl_rs_ftrace_callback,
	.flags = 0,
};

notrace int rfl_shim_register(void)
{
	char *buf, *cur, *word;
	int ret = 0, reset = 1;

	/* ftrace's parser writes into the buffer: hand it a private copy. */
	buf = kstrdup(filter, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	/* One ftrace_set_filter() per comma-separated pattern (a module parameter has no spaces). */
	cur = buf;
	while ((word = strsep(&cur, ",")) != NULL) {
		if (!*word)
			continue;
		ret = ftrace_set_filter(&rfl_ops, word, strlen(word), reset);
		if (ret)
			break;
		reset = 0;
	}
	kfree(buf);
	if (!ret)
		ret = register_ftrace_function(&rfl_ops);
	if (ret)
		ftrace_free_filter(&rfl_ops); /* the hash the patterns above allocated */
	return ret;
}

notrace int rfl_shim_unregister(void)
{
	int ret = unregister_ftrace_function(&rfl_ops);

	ftrace_free_filter(&rfl_ops);
	return ret;
}

notrace const char *rfl_shim_filter(void)
{
	return filter;
}

notrace unsigned int rfl_shim_pages_per_cpu(void)
{
	return pages_per_cpu;
}

notrace void rfl_shim_preempt_disable(void)
{
	preempt_disable_notrace();
}

notrace void rfl_shim_preempt_enable(void)
{
	preempt_enable_notrace();
}

notrace unsigned int rfl_shim_cpu(void)
{
	return raw_smp_processor_id();
}

notrace unsigned int rfl_shim_nr_cpu_ids(void)
{
	return nr_cpu_ids;
}

notrace void rfl_shim_ctx(struct rfl_shim_ctx *out)
{
	unsigned int pc = preempt_count();

	out->preempt_count = pc;
#ifdef CONFIG_SMP
	out->migrate_disable = current->migration_disabled;
#else
	out->migrate_disable = 0;
#endif
	out->irqs_disabled = irqs_disabled();
	out->in_nmi = !!(pc & NMI_MASK);
	out->in_hardirq = !!(pc & HARDIRQ_MASK);
	out->in_serving_softirq = !!in_serving_softirq();
	out->bh_disabled = !!(softirq_count() >> (SOFTIRQ_SHIFT + 1));
	out->need_resched = !!tif_need_resched();
	out->preempt_need_resched = !!test_preempt_need_resched();
	out->pad = 0;
}

notrace int rfl_shim_current_pid(void)
{
	return current->pid;
}

notrace void rfl_shim_current_comm(char out[16])
{
	BUILD_BUG_ON(TASK_COMM_LEN != 16);
	memcpy(out, current->comm, TASK_COMM_LEN);
}

notrace void *rfl_shim_alloc(size_t size, size_t align)
{
	if (align > PAGE_SIZE)
		return NULL;
	if (size <= PAGE_SIZE)
		return (void *)get_zeroed_page(GFP_KERNEL);
	return vzalloc(size); /* page aligned */
}

notrace void rfl_shim_free(void *ptr, size_t size)
{
	if (!ptr)
		return;
	if (size <= PAGE_SIZE)
		free_page((unsigned long)ptr);
	else
		vfree(ptr);
}

notrace void rfl_shim_synchronize(void)
{
	/* Waits for every callback in flight: they run with preemption disabled. */
	synchronize_rcu();
}

notrace void rfl_shim_sleep_us(unsigned int us)
{
	usleep_range(us, 2 * us);
}

notrace void rfl_shim_rcu_read_lock(void)
{
	rcu_read_lock();
}

notrace void rfl_shim_rcu_read_unlock(void)
{
	rcu_read_unlock();
}

notrace int rfl_shim_rcu_is_watching(void)
{
	return rcu_is_watching();
}

notrace int rfl_shim_sprint_symbol(char *buf, unsigned long addr)
{
	return sprint_symbol(buf, addr);
}

notrace unsigned int rfl_shim_ksym_symbol_len(void)
{
	return KSYM_SYMBOL_LEN;
}

notrace void rfl_shim_seq_write(struct seq_file *m, const void *data, size_t len)
{
	seq_write(m, data, len);
}

/*
 * debugfs: <debugfs>/ftrace_rs/trace and <debugfs>/ftrace_rs/stats. notrace like everything
 * else here: the module has no call site of its own for ftrace to patch (its Rust code has none
 * either: 6.12 builds Rust without -mfentry), so no tracer, ours or the kernel's, ever rewrites
 * the module's text, and rmmod never races with such a patch (the integration test checks that
 * the .ko has no __mcount_loc entries).
 */
static struct dentry *rfl_dir;

static notrace int rfl_trace_show(struct seq_file *m, void *v)
{
	rfl_rs_show_trace(m);
	return 0;
}

static notrace int rfl_trace_open(struct inode *inode, struct file *file)
{
	int ret = rfl_rs_trace_open();

	if (ret)
		return ret;
	/* The whole text at once, sized from the buffers so seq_file need not retry. */
	ret = single_open_size(file, rfl_trace_show, NULL, rfl_rs_trace_size_hint());
	if (ret)
		rfl_rs_trace_release();
	return ret;
}

static notrace int rfl_trace_release(struct inode *inode, struct file *file)
{
	int ret = single_release(inode, file);

	rfl_rs_trace_release();
	return ret;
}

static const struct file_operations rfl_trace_fops = {
	.owner = THIS_MODULE,
	.open = rfl_trace_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = rfl_trace_release,
};

static notrace int rfl_stats_show(struct seq_file *m, void *v)
{
	rfl_rs_show_stats(m);
	return 0;
}

static notrace int rfl_stats_open(struct inode *inode, struct file *file)
{
	return single_open(file, rfl_stats_show, NULL);
}

static const struct file_operations rfl_stats_fops = {
	.owner = THIS_MODULE,
	.open = rfl_stats_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = single_release,
};

notrace int rfl_shim_debugfs_create(void)
{
	rfl_dir = debugfs_create_dir("ftrace_rs", NULL);
	if (IS_ERR(rfl_dir))
		return PTR_ERR(rfl_dir);
	debugfs_create_file("trace", 0444, rfl_dir, NULL, &rfl_trace_fops);
	debugfs_create_file("stats", 0444, rfl_dir, NULL, &rfl_stats_fops);
	return 0;
}

notrace void rfl_shim_debugfs_remove(void)
{
	debugfs_remove(rfl_dir);
	rfl_dir = NULL;
}
