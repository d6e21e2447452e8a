//! What the trampolines call: the function and function_graph handlers, and each thread's state.
//!
//! Invariants: a handler never calls instrumented code and never re-enters itself (the
//! per-thread `guard`; a signal handler interrupting a handler records nothing until it
//! returns); the shadow stack is pushed by reserving the slot first (so a signal handler nesting
//! in the middle pushes above it) and popped by matching the stack slot the return address was
//! taken from (frames skipped by `longjmp` are discarded, never returned to).

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::ffi::CString;

use crate::buffer::{self, KIND_GRAPH_ENT, KIND_GRAPH_RET, Writer};
use crate::clock;
use crate::tramp;

/// 0: inert, 1: function, 2: function_graph.
pub static TRACER: AtomicU8 = AtomicU8::new(0);
/// Events are recorded (`tracing_on`).
pub static TRACING_ON: AtomicBool = AtomicBool::new(false);
/// Timestamps are TSC reads (else CLOCK_MONOTONIC).
pub static CLOCK_TSC: AtomicBool = AtomicBool::new(true);
/// `max_graph_depth` (0: unlimited).
pub static MAX_DEPTH: AtomicU32 = AtomicU32::new(0);
/// `set_graph_function` is set: only calls below a root are recorded.
pub static GRAPH_FILTERED: AtomicBool = AtomicBool::new(false);
/// Non-zero when the function tracer's assembly fast path may run (function tracer, TSC clock,
/// tracing on); kept by [`update_fast_path`].
pub static FAST_OK: AtomicU8 = AtomicU8::new(0);

/// Held by the unit tests that set the process-wide tracer switches ([`FAST_OK`], the tracer,
/// `tracing_on`, the instance): tests run in parallel threads of one process.
#[cfg(test)]
pub(crate) static PROCESS_SWITCHES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// For unit tests (holding [`PROCESS_SWITCHES`]): installs a drained instance whose rings
/// (`slots` slots each, offering themselves larger ones up to `grow_max` bytes,
/// [`Instance::grow_max`]) go to a fresh directory of the temporary directory named after
/// `tag`, and returns the directory.
#[cfg(test)]
pub(crate) fn install_test_instance(tag: &str, slots: usize, grow_max: u64) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ftrace-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let inst = Instance {
        ring_dir: CString::new(dir.to_str().unwrap()).unwrap(),
        spare: None,
        buffer_bytes: buffer::HEADER_SIZE + slots * buffer::SLOT_SIZE,
        overwrite: false,
        rseq_offset: None,
        grow_max,
    };
    INSTANCE.store(Box::into_raw(Box::new(inst)), Ordering::Release);
    dir
}

/// For unit tests: the ring files offered in `dir` ([`buffer::grow_file_name`]), as (name,
/// bytes), by name.
#[cfg(test)]
pub(crate) fn offered_files(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut files = Vec::new();
    for f in std::fs::read_dir(dir).unwrap() {
        let f = f.unwrap();
        let name = f.file_name().into_string().unwrap();
        if name.starts_with(buffer::GROW_FILE_PREFIX) {
            files.push((name, f.metadata().unwrap().len()));
        }
    }
    files.sort();
    files
}

/// `funcgraph-retval`: function_graph exits carry the function's return value (`rax`), as a
/// [`buffer::KIND_GRAPH_RETVAL`] event written before the exit. Recorded by the full-save
/// return path only, so while it is set the function_graph fast paths stay off.
pub static RETVAL: AtomicBool = AtomicBool::new(false);

/// Non-zero when the function_graph assembly fast paths may run (function_graph, TSC clock,
/// tracing on, no `set_graph_function`, no `max_graph_depth`, no `funcgraph-retval`, no
/// `tracing_thresh`); kept by [`update_fast_path`].
pub static GRAPH_OK: AtomicU8 = AtomicU8::new(0);

/// A pid filter ([`crate::pids`]) or a cpumask ([`crate::cpumask`]) is set: the full-save
/// entry path checks them; kept by [`update_fast_path`].
pub static TASK_FILTERS: AtomicBool = AtomicBool::new(false);

/// `func_stack_trace`: the function tracer records the traced call's stack after each of its
/// events (the kernel's function tracer option), on the full-save path.
pub static FUNC_STACK: AtomicBool = AtomicBool::new(false);

/// Recomputes [`TASK_FILTERS`], [`FAST_OK`] and [`GRAPH_OK`] after a change of tracer, clock, filters, pid
/// filters or `tracing_on`.
pub fn update_fast_path() {
    let tsc_on = CLOCK_TSC.load(Ordering::Relaxed) && TRACING_ON.load(Ordering::Relaxed);
    // A pending resize takes every event through the handlers, where threads switch rings.
    let tsc_on = tsc_on && !crate::resize::PENDING.load(Ordering::Relaxed);
    let tracer = TRACER.load(Ordering::Relaxed);
    // Pid-filtered or cpu-masked tracing takes the full-save path, where they are checked.
    let task_filters = crate::pids::PID_FILTERED.load(Ordering::Relaxed)
        || crate::cpumask::CPU_FILTERED.load(Ordering::Relaxed);
    TASK_FILTERS.store(task_filters, Ordering::Relaxed);
    // The profiler counts in the Rust handlers ([`crate::profile`]).
    let tsc_on = tsc_on && !task_filters && !crate::profile::PROFILING.load(Ordering::Relaxed);
    // A stack after each call is walked on the full-save path, which has the call's frame.
    let func_fast = tracer == 1 && !FUNC_STACK.load(Ordering::Relaxed);
    FAST_OK.store(u8::from(tsc_on && func_fast), Ordering::Relaxed);
    let recording = (TRACING_ON.load(Ordering::Relaxed) && tracer != 0)
        || crate::profile::PROFILING.load(Ordering::Relaxed);
    crate::mcount::MCOUNT_ON.store(u8::from(recording), Ordering::Relaxed);
    let graph = tsc_on
        && tracer == 2
        && !GRAPH_FILTERED.load(Ordering::Relaxed)
        && MAX_DEPTH.load(Ordering::Relaxed) == 0
        && !RETVAL.load(Ordering::Relaxed)
        && crate::thresh::THRESH.load(Ordering::Relaxed) == 0;
    GRAPH_OK.store(u8::from(graph), Ordering::Relaxed);
}

/// Threads whose buffer could not be created.
pub static FAILED_THREADS: AtomicU64 = AtomicU64::new(0);
/// Calls not recorded because the shadow stack was full.
pub static SHADOW_OVERRUNS: AtomicU64 = AtomicU64::new(0);

/// Where threads create their buffers.
pub struct Instance {
    /// Where this instance's ring files go (NUL-terminated path): the instance directory, or
    /// its namesake under the configuration's `ring_dir`.
    pub ring_dir: CString,
    /// A spare buffer file the tool may have made ([`buffer::SPARE_FILE`]; streamed
    /// recordings only).
    pub spare: Option<CString>,
    /// Bytes per buffer file.
    pub buffer_bytes: usize,
    /// Overwrite mode.
    pub overwrite: bool,
    /// `__rseq_offset` from the thread pointer, if glibc registered rseq.
    pub rseq_offset: Option<isize>,
    /// The largest ring file a drained thread offers itself with each ring it makes or moves
    /// to (0: none; [`crate::config::ENV_GROW_MAX_BYTES`]).
    pub grow_max: u64,
}

/// The instance in force (replaced in a forked child; old ones are leaked).
pub static INSTANCE: AtomicPtr<Instance> = AtomicPtr::new(core::ptr::null_mut());

/// Shadow-stack frames per thread.
pub const SHADOW_FRAMES: u64 = 4096;

/// One shadow-stack frame.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct Frame {
    /// The original return address.
    pub ret: u64,
    /// The traced function.
    pub ip: u64,
    /// Entry timestamp.
    pub calltime: u64,
    /// Address of the stack slot holding the return address; bit 0 set for a `-G` root.
    pub slot: u64,
}

/// A thread's tracing state, in its static TLS block.
#[derive(Debug)]
#[repr(C)]
pub struct ThreadState {
    /// The thread's buffer (valid when `state == 1`).
    pub writer: Writer,
    /// 0: no buffer yet, 1: registered, 2: registration failed, [`crate::unwind::UNWOUND`]:
    /// registered, return addresses restored for an unwinder, [`crate::grow::GROW`]:
    /// registered, to move to the larger ring offered (set by a fast path; the next handler
    /// moves it).
    pub state: u32,
    /// Non-zero while a handler runs on this thread. Follows `state`, so the fast paths test
    /// "registered and not nested" with one 64-bit compare against 1.
    pub guard: u32,
    /// Where the current CPU number is read (rseq `cpu_id_start`, or `fallback_cpu`).
    pub cpu: *const u32,
    /// The CPU at registration, when rseq is not available.
    pub fallback_cpu: u32,
    /// The thread id (set at registration; 0 before): what the pid filters ([`crate::pids`])
    /// match.
    pub tid: u32,
    /// The shadow stack (function_graph).
    pub shadow: *mut Frame,
    /// Frames on the shadow stack.
    pub depth: u64,
    /// `-G` roots active on the shadow stack.
    pub graph_active: u64,
    /// The dispatcher's recursion word for this thread.
    pub recursion: ftrace_core::recursion::TraceRecursion,
    /// The stack pointer of the unwinder call that restored the return addresses (state
    /// [`crate::unwind::UNWOUND`]).
    pub unwinder_sp: u64,
    /// The ring generation `writer` belongs to ([`crate::resize`]).
    pub ring_gen: u32,
}

const _: () = assert!(core::mem::size_of::<ThreadState>() <= tramp::TLS_BYTES);

/// The calling thread's state.
pub fn current() -> *mut ThreadState {
    tramp::tls_block().cast()
}

/// The current trace-clock reading (raw TSC, or CLOCK_MONOTONIC ns).
#[inline(always)]
pub fn now() -> u64 {
    if CLOCK_TSC.load(Ordering::Relaxed) {
        clock::rdtsc()
    } else {
        clock::mono_ns()
    }
}

/// Entry handler. `ret` is the address after the site, `slot` the stack slot holding the
/// traced function's return address (`parent`), `root` whether the site is a `-G` root.
///
/// # Safety
/// Called only by the entry trampoline with the current thread's state block.
pub unsafe extern "C" fn on_entry(
    ret: u64,
    parent: u64,
    slot: *mut u64,
    st: *mut ThreadState,
    root: u32,
) {
    // SAFETY: the trampoline passes this thread's block.
    let st = unsafe { &mut *st };
    if st.guard != 0 {
        return;
    }
    if st.state == crate::unwind::UNWOUND && slot as u64 > st.unwinder_sp {
        // The unwinder is done with this thread (a landing pad or a catch runs): the frames
        // at or below this call's slot are dead.
        crate::unwind::reconcile(st, slot as u64 + 1);
    }
    if crate::profile::PROFILING.load(Ordering::Relaxed) {
        // Counted whatever `tracing_on` and the tracer are.
        crate::profile::hit(ret - 5, current_cpu(st));
    }
    // The function commands first (they run whatever `tracing_on` and the tracer are); a
    // site only probed records nothing.
    st.guard = 1;
    let probed_only = crate::probe::run(ret - 5, parent, slot, st);
    st.guard = 0;
    if probed_only || !TRACING_ON.load(Ordering::Relaxed) {
        return;
    }
    let tracer = TRACER.load(Ordering::Relaxed);
    if tracer == 0 {
        return;
    }
    st.guard = 1;
    if st.state != 1 && st.state != crate::unwind::UNWOUND && !register(st) {
        st.guard = 0;
        return;
    }
    if crate::resize::stale(st) {
        crate::resize::take(st);
    }
    if crate::grow::asked(st) {
        crate::grow::take(st);
    }
    if TASK_FILTERS.load(Ordering::Relaxed) && !task_admitted(st) {
        st.guard = 0;
        return;
    }
    let ip = ret - 5;
    if tracer == 1 {
        crate::dispatch::DISPATCHER.call(ip, parent, None);
        if FUNC_STACK.load(Ordering::Relaxed) && matches!(st.state, 1 | crate::grow::GROW) {
            // `func_stack_trace`: the call's stack after its event, as the `stacktrace`
            // command records it.
            crate::stack::record(st, ret, slot);
        }
    } else {
        // SAFETY: `slot` is the live return-address slot of the traced frame.
        unsafe { graph_entry(st, ip, parent, slot, root != 0) };
    }
    st.guard = 0;
}

/// The CPU the thread runs on: its rseq word once registered, else asked.
#[inline]
fn current_cpu(st: &ThreadState) -> u32 {
    if matches!(st.state, 1 | crate::unwind::UNWOUND | crate::grow::GROW) {
        // SAFETY: registered: `cpu` is live.
        unsafe { *st.cpu }
    } else {
        // SAFETY: no preconditions.
        unsafe { libc::sched_getcpu() }.max(0) as u32
    }
}

/// Whether the pid filters and the cpumask let this registered thread record now.
#[cold]
#[inline(never)]
pub(crate) fn task_admitted(st: &ThreadState) -> bool {
    // SAFETY: registered: `cpu` is live.
    crate::pids::admits(st.tid) && crate::cpumask::admits(unsafe { *st.cpu })
}

#[inline(always)]
unsafe fn graph_entry(st: &mut ThreadState, ip: u64, parent: u64, slot: *mut u64, root: bool) {
    if GRAPH_FILTERED.load(Ordering::Relaxed) && !root && st.graph_active == 0 {
        return;
    }
    let depth = st.depth;
    let max = MAX_DEPTH.load(Ordering::Relaxed);
    if max != 0 && depth >= u64::from(max) {
        return;
    }
    if st.shadow.is_null() && !alloc_shadow(st) {
        return;
    }
    if depth >= SHADOW_FRAMES {
        SHADOW_OVERRUNS.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let ts = now();
    // Under `tracing_thresh` only exits are recorded ([`crate::thresh`]).
    if crate::thresh::THRESH.load(Ordering::Relaxed) == 0 {
        // SAFETY: registered buffer, live cpu pointer.
        unsafe {
            st.writer
                .write(ts, ip, parent, KIND_GRAPH_ENT, depth as u32, *st.cpu)
        };
    }
    st.depth = depth + 1;
    // SAFETY: `depth < SHADOW_FRAMES`, the stack holds that many frames; `slot` is live.
    unsafe {
        *st.shadow.add(depth as usize) = Frame {
            // SAFETY: `slot` is the traced frame's return-address slot.
            ret: *slot,
            ip,
            calltime: ts,
            slot: slot as u64 | u64::from(root),
        };
        *slot = tramp::return_trampoline();
    }
    if root {
        st.graph_active += 1;
    }
}

/// Return handler: records the exit of the frame whose return address sat at `sp - 8` (with
/// `retval`, the function's `rax`, under [`RETVAL`]) and returns where that function must
/// really return.
///
/// # Safety
/// Called only by the return trampoline with the current thread's state block.
pub unsafe extern "C" fn on_return(st: *mut ThreadState, sp: u64, retval: u64) -> u64 {
    // SAFETY: the trampoline passes this thread's block.
    let st = unsafe { &mut *st };
    let slot = sp - 8;
    loop {
        let depth = st.depth;
        if depth == 0 || st.shadow.is_null() {
            lost_return();
        }
        // SAFETY: `depth - 1 < SHADOW_FRAMES`.
        let f = unsafe { *st.shadow.add(depth as usize - 1) };
        st.depth = depth - 1;
        let fslot = f.slot & !1;
        let root = f.slot & 1 != 0;
        if root && fslot == slot {
            st.graph_active = st.graph_active.saturating_sub(1);
        }
        if fslot == slot {
            let ts = now();
            if crate::profile::PROFILING.load(Ordering::Relaxed) {
                crate::profile::add_time(f.ip, current_cpu(st), ts.wrapping_sub(f.calltime));
            }
            if !crate::thresh::lasted(f.calltime, ts) {
                return f.ret;
            }
            // The value first, then its exit, with the guard held between them so that a
            // signal handler's events cannot come in between ([`buffer::retval_of`]).
            let guard = st.guard;
            st.guard = 1;
            if guard == 0 && crate::resize::stale(st) {
                crate::resize::take(st);
            }
            if guard == 0 && crate::grow::asked(st) {
                crate::grow::take(st);
            }
            if RETVAL.load(Ordering::Relaxed) {
                // SAFETY: a frame was pushed, so the buffer is registered.
                unsafe {
                    st.writer.write(
                        ts,
                        f.ip,
                        retval,
                        buffer::KIND_GRAPH_RETVAL,
                        depth as u32 - 1,
                        *st.cpu,
                    )
                };
            }
            // SAFETY: a frame was pushed, so the buffer is registered.
            unsafe {
                st.writer.write(
                    ts,
                    f.ip,
                    f.calltime,
                    KIND_GRAPH_RET,
                    depth as u32 - 1,
                    *st.cpu,
                )
            };
            st.guard = guard;
            return f.ret;
        }
        if fslot > slot {
            lost_return();
        }
        // Below `slot`: a frame skipped by `longjmp` (or an unwinder that was not seen):
        // closed now.
        crate::unwind::close(st, depth - 1);
    }
}

#[cold]
fn lost_return() -> ! {
    let msg = b"ftrace-agent: function_graph shadow stack does not match the stack; aborting\n";
    // SAFETY: writing a static buffer to stderr.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort()
    }
}

#[cold]
#[inline(never)]
pub(crate) fn alloc_shadow(st: &mut ThreadState) -> bool {
    let len = SHADOW_FRAMES as usize * core::mem::size_of::<Frame>();
    // SAFETY: anonymous private mapping.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return false;
    }
    st.shadow = p.cast();
    true
}

fn thread_pointer() -> u64 {
    let p: u64;
    // SAFETY: reads the TCB self-pointer at %fs:0 (x86_64 glibc).
    unsafe {
        core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) p, options(nostack, readonly, preserves_flags))
    };
    p
}

/// Creates the calling thread's buffer file and maps it.
#[cold]
#[inline(never)]
pub(crate) fn register(st: &mut ThreadState) -> bool {
    if st.state == crate::grow::GROW {
        // Registered, and to move to the larger ring offered (a fast path said so).
        crate::grow::take(st);
        return true;
    }
    if st.state == 2 {
        return false;
    }
    let generation = crate::resize::current_gen();
    let inst = INSTANCE.load(Ordering::Acquire);
    if inst.is_null() {
        return false;
    }
    // SAFETY: instances are leaked, never freed.
    let inst = unsafe { &*inst };
    // The shadow stack exists whenever the thread is registered (the function_graph fast path
    // relies on it); a forked child keeps its parent's, whose frames it still returns through.
    if st.shadow.is_null() && !alloc_shadow(st) {
        st.state = 2;
        FAILED_THREADS.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    match create_buffer(inst) {
        Some(w) => {
            st.writer = w;
            // SAFETY: no preconditions.
            st.tid = unsafe { libc::gettid() } as u32;
            match inst.rseq_offset {
                Some(off) => st.cpu = (thread_pointer() as i64 + off as i64) as *const u32,
                None => {
                    // SAFETY: no preconditions.
                    st.fallback_cpu = unsafe { libc::sched_getcpu() }.max(0) as u32;
                    st.cpu = &st.fallback_cpu;
                }
            }
            st.ring_gen = generation;
            crate::resize::note(st.tid, generation);
            st.state = 1;
            true
        }
        None => {
            st.state = 2;
            FAILED_THREADS.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// Sets up the freshly mapped ring file at `p` (`len` bytes) as the calling thread's
/// ([`buffer::init`] with this process, thread `tid` and the thread's name).
///
/// # Safety
/// As [`buffer::init`]'s.
unsafe fn init_thread_ring(p: *mut u8, len: usize, mode: buffer::SlotMode, tid: u32) -> Writer {
    let mut comm = [0u8; 16];
    let mut n = 0;
    if let Ok(c) = std::fs::read("/proc/thread-self/comm") {
        let c = c.strip_suffix(b"\n").unwrap_or(&c);
        n = c.len().min(15);
        comm[..n].copy_from_slice(&c[..n]);
    }
    // SAFETY: the caller's contract.
    unsafe { buffer::init(p, len, mode, libc::getpid() as u32, tid, &comm[..n]) }
}

/// Opens the ring file `path` just taken by a rename, read-write, if it is `len` bytes; else
/// removes it.
///
/// # Safety
/// Plain syscalls; the descriptor returned is the caller's.
unsafe fn open_taken(path: &CString, len: usize) -> Option<libc::c_int> {
    // SAFETY: a valid path; a zeroed stat is a valid out-parameter.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        let mut st: libc::stat = core::mem::zeroed();
        if fd >= 0 && libc::fstat(fd, &mut st) == 0 && st.st_size as usize == len {
            return Some(fd);
        }
        if fd >= 0 {
            libc::close(fd);
        }
        libc::unlink(path.as_ptr());
        None
    }
}

/// Takes the ring file `from` the tool made in the instance's ring directory for the calling
/// thread (a drained ring of `len` bytes) as its next `buf-<tid>.<n>`,
/// maps it and sets it up: `None` (and `from` removed) when it is missing, of another size,
/// or cannot be mapped.
///
/// # Safety
/// Plain syscalls; the writer returned describes a new shared mapping.
pub(crate) unsafe fn adopt_ring_file(inst: &Instance, from: &str, len: usize) -> Option<Writer> {
    // SAFETY: no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    let dir = inst.ring_dir.to_str().ok()?;
    let from = CString::new(format!("{dir}/{from}")).ok()?;
    let at = libc::AT_FDCWD;
    let mut to = None;
    for n in 1..1000 {
        let c = CString::new(format!("{dir}/buf-{tid}.{n}")).ok()?;
        // SAFETY: valid paths; the rename is atomic and replaces nothing.
        if unsafe { libc::renameat2(at, from.as_ptr(), at, c.as_ptr(), libc::RENAME_NOREPLACE) }
            == 0
        {
            to = Some(c);
            break;
        }
        // SAFETY: errno is thread-local.
        if unsafe { *libc::__errno_location() } != libc::EEXIST {
            return None;
        }
    }
    let to = to?;
    // SAFETY: plain syscalls on a path we own now; the descriptor is closed here; the
    // mapping is a fresh zero-filled ring file of `len` bytes.
    unsafe {
        let fd = open_taken(&to, len)?;
        let mode = buffer::SlotMode::ProducerConsumer;
        let p = map_sized_ring_file(fd, len, mode);
        libc::close(fd);
        let Some(p) = p else {
            libc::unlink(to.as_ptr());
            return None;
        };
        Some(init_thread_ring(p.cast(), len, mode, tid))
    }
}

pub(crate) fn create_buffer(inst: &Instance) -> Option<Writer> {
    // SAFETY: no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    let dir = inst.ring_dir.to_str().ok()?;
    let len = inst.buffer_bytes;
    // SAFETY: the spare's path and `buf-<tid>` are valid paths; a file taken is ours.
    if let Some(fd) = unsafe { take_spare(inst, &format!("{dir}/buf-{tid}"), len) } {
        // SAFETY: `fd` is ours, a zero-filled buffer file of `len` bytes.
        let w = unsafe {
            let mode = buffer::SlotMode::ProducerConsumer;
            let p = map_sized_ring_file(fd, len, mode);
            libc::close(fd);
            init_thread_ring(p?.cast(), len, mode, tid)
        };
        offer_itself(inst, dir, tid, &w);
        return Some(w);
    }
    let mut fd = -1;
    for n in 0..1000 {
        let path = if n == 0 {
            format!("{dir}/buf-{tid}")
        } else {
            format!("{dir}/buf-{tid}.{n}")
        };
        let c = CString::new(path).ok()?;
        // SAFETY: `c` is a valid path.
        fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o644,
            )
        };
        // SAFETY: errno is thread-local.
        if fd >= 0 || unsafe { *libc::__errno_location() } != libc::EEXIST {
            break;
        }
    }
    if fd < 0 {
        return None;
    }
    let mode = if inst.overwrite {
        buffer::SlotMode::Overwrite
    } else {
        buffer::SlotMode::ProducerConsumer
    };
    // SAFETY: `fd` is ours; the mapping is checked before use and the fd closed after.
    let w = unsafe {
        let p = map_ring_file(fd, len, mode);
        libc::close(fd);
        init_thread_ring(p?.cast(), len, mode, tid)
    };
    offer_itself(inst, dir, tid, &w);
    Some(w)
}

/// A drained thread's own offer ([`Instance::grow_max`]): the ring file four times the size
/// of its new ring `w` ([`crate::grow::offer_bytes`]), `grow-<tid>.<bytes>`
/// ([`buffer::grow_file_name`]), made beside it as the
/// tool makes one (sized, not reserved; only while its file system has four times its size
/// free) and offered in the ring's header as the tool offers it ([`crate::grow`]). The tool
/// offers at its first pass over a ring; a drainer that shares its CPU with the program's
/// other threads may come to a new ring only after the thread has filled it, and the thread
/// then drops events where it could have moved. Best effort: no file, no offer (the tool's
/// comes later).
pub(crate) fn offer_itself(inst: &Instance, dir: &str, tid: u32, w: &Writer) {
    let Some(len) = crate::grow::offer_bytes(w.mask + 1, inst.grow_max) else {
        return;
    };
    if inst.overwrite {
        return;
    }
    let Ok(path) = CString::new(format!("{dir}/{}", buffer::grow_file_name(tid, len))) else {
        return;
    };
    let Ok(len) = usize::try_from(len) else {
        return;
    };
    // SAFETY: plain syscalls on a path of ours; the descriptor is closed here; the header
    // is mapped for the life of the process.
    unsafe {
        let fd = libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o644,
        );
        if fd < 0 {
            return;
        }
        let made = !reserve_ahead(fd, len) && libc::ftruncate(fd, len as libc::off_t) == 0;
        libc::close(fd);
        if !made {
            libc::unlink(path.as_ptr());
            return;
        }
        w.ring().offer_to_grow(len as u64);
    }
}

/// Bytes of a drained ring (after its header page) mapped before the thread's first event:
/// its first 64 pages. The rest is faulted in by the writer on the ring's first lap, page by
/// page as it is reached: a short-lived thread pays for the pages it uses, not for the whole
/// ring (about 4 us per 4 KiB page in a VM; 8.6 ms for 8 MiB; 0.9 us on a page the file
/// already has, as the tool's spare's, whose pages the tool makes while the program starts).
pub const PREFAULT_BYTES: usize = 256 << 10;

/// Takes the tool's spare buffer file (streamed recordings: [`Instance::spare`]) as `path`,
/// opened read-write, waiting up to [`buffer::spare_wait_ms`] for one the tool is still
/// making: `None` when there is none (another thread took it, or the tool made none), when
/// `path` exists, or when it is not `len` bytes (then it is removed).
///
/// # Safety
/// Plain syscalls; the descriptor returned is the caller's.
unsafe fn take_spare(inst: &Instance, path: &str, len: usize) -> Option<libc::c_int> {
    if inst.overwrite {
        return None;
    }
    let spare = inst.spare.as_ref()?;
    let to = CString::new(path).ok()?;
    // The tool may still be making it (it starts before the program): waiting for the rest
    // of its work costs the program less than doing all of it again.
    let in_progress =
        std::path::Path::new(spare.to_str().ok()?).with_file_name(buffer::SPARE_IN_PROGRESS);
    let in_progress = CString::new(in_progress.to_str()?).ok()?;
    let give_up =
        std::time::Instant::now() + std::time::Duration::from_millis(buffer::spare_wait_ms(len));
    // SAFETY: valid paths; the rename is atomic, so one thread at most gets the spare.
    unsafe {
        let at = libc::AT_FDCWD;
        while libc::renameat2(at, spare.as_ptr(), at, to.as_ptr(), libc::RENAME_NOREPLACE) != 0 {
            let making = *libc::__errno_location() == libc::ENOENT
                && libc::access(in_progress.as_ptr(), libc::F_OK) == 0;
            if !making || std::time::Instant::now() >= give_up {
                return None;
            }
            libc::usleep(100);
        }
        open_taken(&to, len)
    }
}

/// Whether the ring file `fd` of `len` bytes is to be reserved ahead
/// ([`buffer::reserve_ahead`], from its file system's free bytes).
///
/// # Safety
/// `fd` must be an open descriptor.
unsafe fn reserve_ahead(fd: libc::c_int, len: usize) -> bool {
    // SAFETY: a zeroed statvfs is a valid out-parameter; `fd` is open (caller's contract).
    let free = unsafe {
        let mut st: libc::statvfs = core::mem::zeroed();
        (libc::fstatvfs(fd, &mut st) == 0).then(|| st.f_bavail.saturating_mul(st.f_frsize))
    };
    buffer::reserve_ahead(free, len as u64)
}

/// Sizes the fresh ring file `fd` to `len` bytes and maps it shared, read-write. A flight
/// recorder's ring (`Overwrite`, small, rewritten at once) is mapped whole before use; a
/// drained ring's space is reserved whole when its file system is short of room
/// ([`buffer::reserve_ahead`]; no space is a thread left untraced and counted), and only its
/// header and first [`PREFAULT_BYTES`] are mapped before use.
///
/// # Safety
/// `fd` must be a freshly created regular file opened read-write, not used by anyone else.
unsafe fn map_ring_file(fd: libc::c_int, len: usize, mode: buffer::SlotMode) -> Option<*mut u8> {
    // SAFETY: plain syscalls on the caller's descriptor.
    unsafe {
        if libc::ftruncate(fd, len as libc::off_t) != 0 {
            return None;
        }
        // Reserved only on a file system short of room (a file system that cannot reserve,
        // no `fallocate`, allocates as the writer goes).
        if mode == buffer::SlotMode::ProducerConsumer
            && reserve_ahead(fd, len)
            && libc::fallocate(fd, 0, 0, len as libc::off_t) != 0
            && *libc::__errno_location() != libc::EOPNOTSUPP
        {
            return None;
        }
        map_sized_ring_file(fd, len, mode)
    }
}

/// Maps the ring file `fd`, already `len` bytes (and reserved, for a drained ring), shared and
/// read-write, as [`map_ring_file`] says.
///
/// # Safety
/// `fd` must be a regular file of `len` bytes opened read-write, not used by anyone else.
unsafe fn map_sized_ring_file(
    fd: libc::c_int,
    len: usize,
    mode: buffer::SlotMode,
) -> Option<*mut u8> {
    let populate = match mode {
        buffer::SlotMode::Overwrite => libc::MAP_POPULATE,
        buffer::SlotMode::ProducerConsumer => 0,
    };
    // SAFETY: a plain mapping of the caller's descriptor.
    unsafe {
        let p = libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | populate,
            fd,
            0,
        );
        if p == libc::MAP_FAILED {
            return None;
        }
        if populate == 0 {
            // Best effort (Linux 5.14+): a page it leaves out is faulted in when written.
            let first = len.min(buffer::HEADER_SIZE + PREFAULT_BYTES);
            libc::madvise(p, first, libc::MADV_POPULATE_WRITE);
        }
        Some(p.cast())
    }
}

/// Forgets the calling thread's buffer (in a forked child: the buffer is the parent's).
pub fn reset_current_thread() {
    // SAFETY: this thread's own block.
    let st = unsafe { &mut *current() };
    st.state = 0;
    st.guard = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new file at `path`, opened read-write.
    fn new_file(path: &std::path::Path) -> std::fs::File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .unwrap()
    }

    /// A drained ring's space is reserved whole when it is mapped on a file system short of
    /// room (a page reached later cannot fail), and every byte of it is writable; a flight
    /// recorder's ring is mapped whole.
    #[test]
    fn ring_files_are_reserved_whole_and_writable() {
        use std::os::fd::AsRawFd as _;
        use std::os::unix::fs::MetadataExt as _;
        let dir = tempfile_dir("reserved");
        let len = buffer::HEADER_SIZE + 2 * PREFAULT_BYTES;
        for (i, mode) in [
            buffer::SlotMode::ProducerConsumer,
            buffer::SlotMode::Overwrite,
        ]
        .into_iter()
        .enumerate()
        {
            let path = dir.join(format!("buf-{i}"));
            let f = new_file(&path);
            // SAFETY: a file just created, ours alone.
            let p = unsafe { map_ring_file(f.as_raw_fd(), len, mode) }.expect("mapped");
            let meta = std::fs::metadata(&path).unwrap();
            assert_eq!(meta.len(), len as u64);
            if mode == buffer::SlotMode::ProducerConsumer {
                // SAFETY: `f` is open.
                let reserve = unsafe { reserve_ahead(f.as_raw_fd(), len) };
                let reserved = meta.blocks() * 512 >= len as u64;
                assert_eq!(reserved, reserve, "{mode:?}: {meta:?}");
            }
            // SAFETY: `len` writable bytes at `p`, ours.
            unsafe {
                for at in (0..len).step_by(4096) {
                    p.add(at).write_volatile(at as u8 | 1);
                }
                p.add(len - 1).write_volatile(7);
                libc::munmap(p.cast(), len);
            }
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes[4096], 1);
            assert_eq!(bytes[len - 1], 7);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A streamed recording's thread takes the tool's spare buffer file when it has the
    /// size the instance expects (renamed to the thread's name: one thread gets it), and
    /// removes one of another size; without a spare, or in overwrite mode, it takes nothing;
    /// one the tool is still making it waits for, a while.
    #[test]
    fn a_thread_takes_the_tools_spare_buffer_file_of_its_size() {
        let dir = tempfile_dir("spare");
        std::fs::create_dir_all(&dir).unwrap();
        let spare = dir.join(buffer::SPARE_FILE);
        let len = buffer::HEADER_SIZE + 64 * buffer::SLOT_SIZE;
        let c = |p: &std::path::Path| CString::new(p.to_str().unwrap()).unwrap();
        let inst = |overwrite| Instance {
            ring_dir: c(&dir),
            spare: Some(c(&spare)),
            buffer_bytes: len,
            overwrite,
            rseq_offset: None,
            grow_max: 0,
        };
        let take = |overwrite: bool, to: &str| {
            // SAFETY: plain paths in a directory of this test's own; a descriptor taken is
            // closed here.
            unsafe {
                let fd = take_spare(&inst(overwrite), to, len)?;
                libc::close(fd);
                Some(())
            }
        };
        let to = dir.join("buf-1");
        let to = to.to_str().unwrap();
        assert_eq!(take(false, to), None, "no spare");
        std::fs::write(&spare, vec![0u8; len]).unwrap();
        assert_eq!(take(true, to), None, "overwrite");
        assert_eq!(take(false, to), Some(()), "taken");
        assert!(!spare.exists(), "renamed");
        assert_eq!(std::fs::metadata(to).unwrap().len(), len as u64);
        assert_eq!(take(false, to), None, "taken once");
        std::fs::write(&spare, vec![0u8; len / 2]).unwrap();
        let other = dir.join("buf-2");
        let other = other.to_str().unwrap();
        assert_eq!(take(false, other), None, "wrong size");
        assert!(!spare.exists() && !std::path::Path::new(other).exists());
        // A spare the tool is still making is waited for...
        let making = dir.join(buffer::SPARE_IN_PROGRESS);
        std::fs::write(&making, vec![0u8; len]).unwrap();
        let finisher = {
            let (making, spare) = (making.clone(), spare.clone());
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(5));
                std::fs::rename(making, spare).unwrap();
            })
        };
        let third = dir.join("buf-3");
        assert_eq!(take(false, third.to_str().unwrap()), Some(()), "waited for");
        finisher.join().unwrap();
        // ... for a while: one never finished is given up.
        std::fs::write(&making, vec![0u8; len]).unwrap();
        let t = std::time::Instant::now();
        assert_eq!(take(false, dir.join("buf-4").to_str().unwrap()), None);
        assert!(t.elapsed() >= std::time::Duration::from_millis(buffer::spare_wait_ms(len)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A drained thread whose rings may grow offers itself the next size with the ring it
    /// makes: `grow-<tid>.<bytes>`, four times the slots (at most what `grow_max` holds),
    /// sized beside it and offered in its header, as the tool offers one; none when the ring
    /// is at the maximum already or rings keep their size, none in overwrite mode.
    #[test]
    fn a_drained_thread_offers_itself_the_next_ring() {
        let dir = tempfile_dir("offer");
        let (header, slot) = (buffer::HEADER_SIZE, buffer::SLOT_SIZE);
        let len = header + 64 * slot;
        let ring_dir = CString::new(dir.to_str().unwrap()).unwrap();
        let inst = |overwrite, grow_max: usize| Instance {
            ring_dir: ring_dir.clone(),
            spare: None,
            buffer_bytes: len,
            overwrite,
            rseq_offset: None,
            grow_max: grow_max as u64,
        };
        // SAFETY: no preconditions.
        let tid = unsafe { libc::gettid() };
        for (what, overwrite, grow_max, offered) in [
            (
                "four times",
                false,
                header + 1024 * slot,
                header + 256 * slot,
            ),
            (
                "at most the maximum",
                false,
                header + 128 * slot,
                header + 128 * slot,
            ),
            ("at the maximum", false, len, 0),
            ("rings keep their size", false, 0, 0),
            ("overwrite", true, header + 1024 * slot, 0),
        ] {
            let w = create_buffer(&inst(overwrite, grow_max)).expect(what);
            // SAFETY: the header is mapped (leaked by the test).
            let word = unsafe { w.ring() }.growth_offered();
            assert_eq!(word, offered as u64, "{what}");
            match offered {
                0 => assert_eq!(offered_files(&dir), [], "{what}"),
                _ => {
                    let name = buffer::grow_file_name(tid as u32, offered as u64);
                    assert_eq!(
                        offered_files(&dir),
                        [(name.clone(), offered as u64)],
                        "{what}"
                    );
                    std::fs::remove_file(dir.join(name)).unwrap();
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A directory of test `name`'s own (tests run in parallel and remove theirs).
    fn tempfile_dir(name: &str) -> std::path::PathBuf {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            std::path::PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!(
            "ftrace-agent-ring-test-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
