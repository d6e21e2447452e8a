/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * ftrace/tracepoint.h: trace events for C programs traced by ftrace-rs's userspace agent.
 *
 * Declare an event once, at file scope, with its fields listed by a macro of your own:
 *
 *     #include <ftrace/tracepoint.h>
 *
 *     #define DEMO_VALUE_FIELDS(F, S) F(unsigned long, value) F(int, delta) S(label, 16)
 *     FTRACE_EVENT(demo, demo_value, DEMO_VALUE_FIELDS,
 *                  (unsigned long value, int delta, const char *label),
 *                  FTRACE_PRINT("value=%lu delta=%d label=%s", REC->value, REC->delta,
 *                               REC->label))
 *
 * and fire it anywhere with trace_demo_value(42, -1, "answer"). F(type, field) is an integer
 * field, S(field, n) a string kept in a char field[n] (cut to n - 1 bytes, NUL-terminated: the
 * kernel's __array(char, ...) form, as sched_switch's prev_comm). The parameters must have
 * the fields' names. The record is the kernel's: struct trace_entry (8 bytes, filled by the
 * agent), then the fields at their C offsets; the events/<system>/<name>/format file the
 * tool serves is generated from the table this macro builds, and trace prints each record
 * with the print format given here, as the kernel's format file shows it.
 *
 * While the event is off, trace_<name>() costs one load of the event's probe pointer and a
 * branch not taken: the agent stores its recording function there when the event is enabled
 * (events/<system>/<name>/enable) and NULL when it is disabled. Without the agent (the
 * program not traced) the pointer stays NULL forever. The record is built only when the
 * event is on.
 *
 * An event fired from several objects (a program and the library it links) is defined in one
 * of them with FTRACE_EVENT and declared in the others with FTRACE_EVENT_EXTERN(system, name,
 * FIELDS, proto), which gives the same trace_<name>() over the one definition (the kernel's
 * TRACE_EVENT with CREATE_TRACE_POINTS in one file): an event defined twice is two events of
 * the same name, and the agent keeps only the first it finds.
 *
 * The declarations reach the agent through the "ftrace_events" ELF section (one pointer per
 * event, relocated by the dynamic linker like __patchable_function_entries), which the agent
 * reads for every loaded object; no call is needed at start-up, and an event of a library
 * dlopen()ed later is found with the library's call sites.
 */
#ifndef FTRACE_TRACEPOINT_H
#define FTRACE_TRACEPOINT_H

#include <stddef.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The layout version of struct ftrace_event, checked by the agent. */
#define FTRACE_EVENT_ABI 1

/* One field of an event's record (a line of its format file). */
struct ftrace_event_field {
	const char *type;        /* the C type: "unsigned long", "char" */
	const char *name;        /* the field name */
	unsigned int offset;     /* byte offset in the record */
	unsigned int size;       /* byte size */
	unsigned int is_signed;  /* whether the type is signed */
	unsigned int array_len;  /* 0: a scalar; n: char name[n] */
};

struct ftrace_event;

/* What the agent stores in an enabled event: records `len` bytes at `rec`. */
typedef void (*ftrace_event_probe)(const struct ftrace_event *event, const void *rec,
				   unsigned int len);

/* One declared event. The agent writes `probe` (and `id`); the rest is constant. */
struct ftrace_event {
	ftrace_event_probe probe;                 /* NULL while the event is off */
	unsigned int abi;                         /* FTRACE_EVENT_ABI */
	unsigned int nr_fields;                   /* entries fields() returns */
	const char *system;
	const char *name;
	const char *print_fmt;                    /* the format file's "print fmt:" text */
	/* The field table (the agent calls it once, when it finds the event). */
	const struct ftrace_event_field *(*fields)(void);
	unsigned int rec_size;                    /* sizeof the record */
	unsigned int id;                          /* the event id the agent gave it */
};

/* struct trace_entry: the common fields every record starts with (filled by the agent). */
struct ftrace_trace_entry {
	unsigned short type;
	unsigned char flags;
	unsigned char preempt_count;
	int pid;
};

/* The print format's text, as the format file shows it: FTRACE_PRINT("a=%d", REC->a). */
#define FTRACE_PRINT(...) #__VA_ARGS__

#define FTRACE_REC_F_(type, field) type field;
#define FTRACE_REC_S_(field, n) char field[n];

#define FTRACE_TABLE_F_(type, field)                                                       \
	{#type, #field, (unsigned int)offsetof(ftrace_rec_t_, field),               \
	 (unsigned int)sizeof(type), (unsigned int)((type)(-1) < (type)1), 0},
#define FTRACE_TABLE_S_(field, n)                                                          \
	{"char", #field, (unsigned int)offsetof(ftrace_rec_t_, field), n, 0, n},

#define FTRACE_ASSIGN_F_(type, field) ftrace_rec_.field = field;
#define FTRACE_ASSIGN_S_(field, n)                                                         \
	if (field) {                                                                        \
		strncpy(ftrace_rec_.field, field, (n) - 1);                                  \
	}

#if defined(__has_attribute)
#if __has_attribute(patchable_function_entry)
#define FTRACE_NOTRACE_ __attribute__((no_instrument_function, patchable_function_entry(0, 0)))
#endif
#endif
#ifndef FTRACE_NOTRACE_
#define FTRACE_NOTRACE_ __attribute__((no_instrument_function))
#endif

#define FTRACE_ONE_F_(type, field) +1
#define FTRACE_ONE_S_(field, n) +1

/* The record type of event `name` and its call site trace_<name>(proto), over the event's
 * descriptor ftrace_event_<name> (defined by FTRACE_EVENT, here or in another object). */
#define FTRACE_EVENT_CALL_(name, FIELDS, proto)                                            \
	struct ftrace_rec_##name {                                                         \
		struct ftrace_trace_entry ent;                                             \
		FIELDS(FTRACE_REC_F_, FTRACE_REC_S_)                                        \
	};                                                                                 \
	extern struct ftrace_event ftrace_event_##name;                                   \
	static inline __attribute__((always_inline)) void trace_##name proto               \
	{                                                                                  \
		ftrace_event_probe p_ =                                                    \
			__atomic_load_n(&ftrace_event_##name.probe, __ATOMIC_RELAXED);     \
		if (__builtin_expect(p_ != 0, 0)) {                                        \
			struct ftrace_rec_##name ftrace_rec_;                              \
			memset(&ftrace_rec_, 0, sizeof(ftrace_rec_));                      \
			FIELDS(FTRACE_ASSIGN_F_, FTRACE_ASSIGN_S_)                          \
			p_(&ftrace_event_##name, &ftrace_rec_, sizeof(ftrace_rec_));       \
		}                                                                          \
	}

/* Declares event `system:name`, fired with trace_<name>(proto) here, defined in another
 * object of the program (with FTRACE_EVENT and the same fields). */
#define FTRACE_EVENT_EXTERN(system, name, FIELDS, proto) FTRACE_EVENT_CALL_(name, FIELDS, proto)

/* Defines event `system:name` and declares its call site trace_<name>(proto). */
#define FTRACE_EVENT(system, name, FIELDS, proto, print)                                   \
	FTRACE_EVENT_CALL_(name, FIELDS, proto)                                            \
	/* A function, so that the record type has a block-scope name for offsetof. */     \
	static FTRACE_NOTRACE_ const struct ftrace_event_field *ftrace_fields_##name(void) \
	{                                                                                  \
		typedef struct ftrace_rec_##name ftrace_rec_t_;                             \
		static const struct ftrace_event_field table[] = {                         \
			FIELDS(FTRACE_TABLE_F_, FTRACE_TABLE_S_)};                          \
		return table;                                                              \
	}                                                                                  \
	struct ftrace_event ftrace_event_##name = {                                       \
		0,                                                                         \
		FTRACE_EVENT_ABI,                                                          \
		0 FIELDS(FTRACE_ONE_F_, FTRACE_ONE_S_),                                     \
		#system,                                                                   \
		#name,                                                                     \
		print,                                                                     \
		ftrace_fields_##name,                                                      \
		sizeof(struct ftrace_rec_##name),                                          \
		0};                                                                        \
	static struct ftrace_event *const ftrace_event_ptr_##name                         \
		__attribute__((section("ftrace_events"), used, aligned(8))) =             \
			&ftrace_event_##name;

#ifdef __cplusplus
}
#endif

#endif /* FTRACE_TRACEPOINT_H */
