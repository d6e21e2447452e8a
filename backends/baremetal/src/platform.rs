//! The bare-metal binding of ftrace-tracefs's [`TraceArray`]: [`BareMetal`] as its
//! [`Platform`], [`KernelText`] as its [`CallSiteText`], the trampolines' hooks, and the one
//! instance ([`TRACE`]) the kernel serves on its serial shell ([`SerialTracefs`]).
//!
//! Everything platform-independent (dispatcher, tracers, ring buffer, call-site records,
//! filters, the tracefs files) is the instance's; what is here is only what a kernel knows:
//! the TSC clock, the CPU id from the GS base, interrupt state from RFLAGS, the kallsyms
//! table and the `__patchable_function_entries` sites found at boot, the heap as the ring's
//! page allocator, text writes with IPIs and the `#BP` handler's slot.
//!
//! Invariant: the hooks are registered before any site is patched ([`install`]) and stay so;
//! they run with the CPU fixed (no tasks, no migration: an interrupt nests inside what it
//! interrupted and finishes first), which is [`Platform`]'s contract.

use alloc::string::String;
use core::fmt::Write;

use ftrace_core::Errno;
use ftrace_core::event::TraceCtx;
use ftrace_core::platform::{CpuId, ExecContext, TaskContext, TraceClock};
use ftrace_core::symbols::{SortedSymbols, Symbol, SymbolTable};
use ftrace_core::tracepoint::Tracepoint;
use ftrace_patch::{FixedTargets, FtraceBug};
use ftrace_tracefs::array::{ArrayHost, CallSiteText, HeapPages, Platform, TraceArray};
use ftrace_tracefs::{Tracefs, WriteMode};

use crate::cpu::{BareMetal, MAX_CPUS, this_cpu};
use crate::shell::FileTree;
use crate::sites::SiteTable;
use crate::sync::{AtomicPtr, Ordering, SpinLock};
use crate::text::KernelText;
use crate::trampoline;

/// The kernel's tracing instance.
pub static TRACE: TraceArray<BareMetal, MAX_CPUS> = TraceArray::new(BareMetal);

/// The per-CPU buffer tracing starts with: 32 sub-buffers of 4080 data bytes.
const TRACE_BUF_SIZE: u64 = 32 * 4080;

/// The kallsyms table and the call sites, set once at boot by [`install`].
static SYMBOLS: AtomicPtr<SortedSymbols> = AtomicPtr::new(core::ptr::null_mut());
static SITES: AtomicPtr<SiteTable> = AtomicPtr::new(core::ptr::null_mut());

/// The kernel's symbols as the instance reads them (none before [`install`]).
struct KernelSymbols;

impl KernelSymbols {
    fn get(&self) -> Option<&'static SortedSymbols> {
        // SAFETY: set once from a leaked `&'static`, never freed.
        unsafe { SYMBOLS.load(Ordering::Acquire).as_ref() }
    }
}

impl SymbolTable for KernelSymbols {
    fn lookup(&self, addr: u64) -> Option<Symbol<'_>> {
        self.get()?.lookup(addr)
    }
    fn for_each(&self, f: &mut dyn FnMut(Symbol<'_>)) {
        if let Some(s) = self.get() {
            s.for_each(f)
        }
    }
}

impl CallSiteText for KernelText {
    fn call_sites(&self) -> Option<&[u64]> {
        // SAFETY: set once from a leaked `&'static`, never freed.
        let sites = unsafe { SITES.load(Ordering::Acquire).as_ref() };
        Some(sites.map_or(&[], SiteTable::sites))
    }
    fn targets(&self) -> FixedTargets {
        FixedTargets {
            caller: trampoline::caller_addr(),
            regs_caller: trampoline::caller_addr(),
            list_ops: 0,
            nop_ops: 0,
        }
    }
}

// SAFETY: `current_cpu` is the GS-base per-CPU index, which never changes under a caller (no
// tasks, no migration), and what runs on one CPU nests (interrupts finish before what they
// interrupted resumes).
unsafe impl Platform for BareMetal {
    type Pages = HeapPages;
    type Text = KernelText;
    fn now_ns(&self) -> u64 {
        TraceClock::now_ns(self)
    }
    fn current_cpu(&self) -> u32 {
        CpuId::current_cpu(self)
    }
    fn possible_cpus(&self) -> u32 {
        CpuId::possible_cpus(self)
    }
    fn current_pid(&self) -> i32 {
        0
    }
    fn exec_context(&self) -> ExecContext {
        TaskContext::exec_context(self)
    }
    fn trace_ctx(&self) -> TraceCtx {
        TaskContext::trace_ctx(self)
    }
    fn symbols(&self) -> &'static (dyn SymbolTable + Sync) {
        &KernelSymbols
    }
    fn return_handler(&self) -> usize {
        trampoline::return_to_handler_addr() as usize
    }
    fn marker_ip(&self) -> u64 {
        tracing_mark_write as *const () as u64
    }
    fn trace_buf_size(&self) -> u64 {
        TRACE_BUF_SIZE
    }
    fn ftrace_bug(&self, bug: &FtraceBug) {
        // Unlocked: the shell holds the console lock while it runs the write that patches.
        let mut out = crate::serial::Com1::force();
        let _ = bug.write_report(&mut out, &KernelSymbols);
        let _ = writeln!(out);
    }
}

/// Named as Linux's `trace_marker` writer, so that marker entries, which carry its address,
/// print `tracing_mark_write: ...` as the kernel's do. (Never called; its body is unique so
/// that no identical function is merged with it.)
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn tracing_mark_write() -> u64 {
    u64::from_be_bytes(*b"trcmark!")
}

/// Recursion bits of the hooks (the allocator counts allocations made while one is held).
const RECURSION_ENTRY: u32 = 0;
const RECURSION_RETURN: u32 = 1;

extern "C" fn entry_hook(ip: u64, parent_ip: u64, parent_slot: *mut u64) {
    let me = this_cpu();
    if !me.try_enter(RECURSION_ENTRY) {
        return;
    }
    // SAFETY: the trampoline passes the address of the traced function's return slot, which
    // lives until that function returns.
    let slot = unsafe { &mut *parent_slot.cast::<usize>() };
    TRACE.on_entry(ip as usize, parent_ip as usize, slot);
    me.leave(RECURSION_ENTRY);
}

extern "C" fn return_hook() -> u64 {
    let me = this_cpu();
    // Not a guard: the bit only marks this CPU as in a hook (nothing here is instrumented).
    let _ = me.try_enter(RECURSION_RETURN);
    let ret = TRACE.on_return();
    me.leave(RECURSION_RETURN);
    ret as u64
}

/// Hands the instance the kernel's symbols and call sites, registers the trampolines' hooks,
/// this crate's trace events ([`events::EVENTS`](crate::events::EVENTS)) and the caller's
/// `events`, and builds the tree (one call-site record per site: a site that is not a NOP is
/// reported and disabled; sites stay NOPs until a tracer or a function command wants them).
pub fn install(
    sites: &'static SiteTable,
    symbols: &'static SortedSymbols,
    events: &[&'static Tracepoint],
) -> Result<SerialTracefs, Errno> {
    SYMBOLS.store(core::ptr::from_ref(symbols).cast_mut(), Ordering::Release);
    SITES.store(core::ptr::from_ref(sites).cast_mut(), Ordering::Release);
    #[cfg(feature = "jump-label")]
    ftrace_core::jump_label::set_patcher(patch_jump_labels);
    for tp in crate::events::EVENTS.iter().chain(events) {
        TRACE.register_tracepoint(tp)?;
    }
    trampoline::set_return_hook(return_hook);
    trampoline::set_entry_hook(Some(entry_hook));
    Ok(SerialTracefs {
        tree: SpinLock::new(TRACE.tracefs()?),
    })
}

/// The instance's tree, served by the serial shell.
pub struct SerialTracefs {
    tree: SpinLock<Tracefs<ArrayHost<BareMetal, MAX_CPUS>>>,
}

impl FileTree for SerialTracefs {
    fn list(&self, dir: &str, out: &mut dyn Write) -> Result<(), Errno> {
        for e in self.tree.lock().read_dir(dir)? {
            writeln!(out, "{}", e.name).map_err(|_| Errno::EIO)?;
        }
        Ok(())
    }
    fn read(&self, path: &str, out: &mut dyn Write) -> Result<(), Errno> {
        let bytes = self.tree.lock().read_to_end(path)?;
        out.write_str(&String::from_utf8_lossy(&bytes))
            .map_err(|_| Errno::EIO)
    }
    fn write(&self, path: &str, data: &str, mode: WriteMode) -> Result<(), Errno> {
        self.tree.lock().write_all(path, data.as_bytes(), mode)
    }
    fn read_bytes(&self, path: &str) -> Result<alloc::vec::Vec<u8>, Errno> {
        self.tree.lock().read_to_end(path)
    }
    fn mkdir(&self, path: &str) -> Result<(), Errno> {
        self.tree.lock().mkdir(path)
    }
    fn rmdir(&self, path: &str) -> Result<(), Errno> {
        self.tree.lock().rmdir(path)
    }
}

/// The jump-label patcher (feature `jump-label`): the kernel's tracepoint sites rewritten
/// through [`KernelText`] with ftrace-patch's protocols, as call sites are.
#[cfg(feature = "jump-label")]
fn patch_jump_labels(key: &ftrace_core::static_key::StaticKey, b: ftrace_core::static_key::Branch) {
    let st = ftrace_patch::jump_label::update_key(&mut KernelText, key, b);
    if st.failed + st.out_of_range != 0 {
        crate::println!("jump label: key {key:p}: {st:?} (sites not rewritten)");
    }
}
