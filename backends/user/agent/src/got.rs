//! The unwinder and signal-mask interpositions ([`crate::unwind`], [`crate::sigmask`]) in a
//! process the agent was attached to.
//!
//! Preloaded, the agent is first in the symbol search order, so the program's and its
//! libraries' calls to `_Unwind_RaiseException` and the like reach it. `dlopen`ed into a
//! running process (`-p PID`) it is not: those calls are bound to libgcc_s, libstdc++ and
//! libc already. So at attach every loaded object's GOT entries for the interposed names
//! (`R_X86_64_JUMP_SLOT` and `R_X86_64_GLOB_DAT` relocations) are pointed at the agent's
//! functions ([`hook_loaded_objects`]) and given their old values back at detach
//! ([`unhook`]). Objects `dlopen`ed after the attach keep the real functions.
//!
//! Invariant: an entry is written only when it holds what the dynamic linker put there or
//! the agent's function (never a value some other hook library wrote meanwhile), each write
//! one aligned 8-byte store (a thread calling through it sees the old or the new function,
//! both of which work), with the page's protection put back after it.

use std::sync::Mutex;

/// One rewritten GOT entry: where, and what it held before.
struct Hooked {
    slot: usize,
    old: usize,
    new: usize,
}

/// The entries [`hook_loaded_objects`] rewrote (the control thread's; serialised by this lock).
static HOOKED: Mutex<Vec<Hooked>> = Mutex::new(Vec::new());

/// The interposed names.
const NAMES: [&core::ffi::CStr; 12] = [
    c"_Unwind_RaiseException",
    c"_Unwind_Resume",
    c"_Unwind_Resume_or_Rethrow",
    c"_Unwind_ForcedUnwind",
    c"_Unwind_Backtrace",
    c"_Unwind_SetIP",
    c"__cxa_begin_catch",
    c"backtrace",
    c"sigprocmask",
    c"pthread_sigmask",
    c"sigaction",
    c"signal",
];

/// The agent's own definitions of [`NAMES`] (0 where not found). Looked up through the
/// agent's own handle: a reference from inside the agent to one of its exported functions
/// is bound like any other, to the first definition in the global scope, which in an
/// attached process is libgcc_s's or libstdc++'s.
fn own_functions() -> [usize; NAMES.len()] {
    let mut out = [0; NAMES.len()];
    // SAFETY: dladdr fills `info` for an address of the agent; the name it gives is the
    // agent's path, NUL-terminated; RTLD_NOLOAD only returns the loaded agent's handle.
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(own_functions as *const () as *const libc::c_void, &mut info) == 0
            || info.dli_fname.is_null()
        {
            return out;
        }
        let h = libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if h.is_null() {
            return out;
        }
        for (o, n) in out.iter_mut().zip(NAMES) {
            let p = libc::dlsym(h, n.as_ptr()) as usize;
            if crate::in_own_text(p as u64) {
                *o = p;
            }
        }
        libc::dlclose(h);
    }
    out
}

/// One loaded object: its load bias and its dynamic section.
struct Object {
    bias: usize,
    dynamic: usize,
}

fn objects() -> Vec<Object> {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the Vec passed below; `info` is valid during the callback.
        let (out, info) = unsafe { (&mut *data.cast::<Vec<Object>>(), &*info) };
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: `dlpi_phdr` has `dlpi_phnum` entries.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_DYNAMIC {
                out.push(Object {
                    bias: info.dlpi_addr as usize,
                    dynamic: info.dlpi_addr as usize + ph.p_vaddr as usize,
                });
            }
        }
        0
    }
    let mut out = Vec::new();
    // SAFETY: the callback only touches `out` and the info it is given.
    unsafe { libc::dl_iterate_phdr(Some(cb), (&raw mut out).cast()) };
    out
}

/// The GOT entries of `o` that the dynamic linker bound for one of `names`: (entry, index
/// into `names`).
///
/// # Safety
/// `o` is a loaded object (its dynamic section and the tables it names are mapped).
unsafe fn entries(o: &Object, names: &[&[u8]]) -> Vec<(usize, usize)> {
    const DT_NULL: i64 = 0;
    const DT_PLTRELSZ: i64 = 2;
    const DT_STRTAB: i64 = 5;
    const DT_SYMTAB: i64 = 6;
    const DT_RELA: i64 = 7;
    const DT_RELASZ: i64 = 8;
    const DT_JMPREL: i64 = 23;
    const R_X86_64_GLOB_DAT: u64 = 6;
    const R_X86_64_JUMP_SLOT: u64 = 7;
    let (mut strtab, mut symtab) = (0usize, 0usize);
    let mut tables = [(0usize, 0usize); 2];
    /// `Elf64_Dyn`.
    #[repr(C)]
    struct Dyn {
        tag: i64,
        val: u64,
    }
    let mut d = o.dynamic as *const Dyn;
    // The dynamic linker relocates these pointers in place for a shared object; the
    // executable's are absolute (its bias 0) or, where not relocated, below the bias.
    let at = |p: u64| {
        let p = p as usize;
        if p < o.bias { p + o.bias } else { p }
    };
    // SAFETY: the dynamic section ends with DT_NULL (the caller's contract).
    unsafe {
        while (*d).tag != DT_NULL {
            let v = (*d).val;
            match (*d).tag {
                DT_STRTAB => strtab = at(v),
                DT_SYMTAB => symtab = at(v),
                DT_JMPREL => tables[0].0 = at(v),
                DT_PLTRELSZ => tables[0].1 = v as usize,
                DT_RELA => tables[1].0 = at(v),
                DT_RELASZ => tables[1].1 = v as usize,
                _ => {}
            }
            d = d.add(1);
        }
    }
    let mut out = Vec::new();
    if strtab == 0 || symtab == 0 {
        return out;
    }
    for (start, size) in tables {
        if start == 0 {
            continue;
        }
        let n = size / core::mem::size_of::<libc::Elf64_Rela>();
        for i in 0..n {
            // SAFETY: `n` relocations at `start` (the dynamic section's sizes).
            let r = unsafe { &*(start as *const libc::Elf64_Rela).add(i) };
            let kind = r.r_info & 0xffff_ffff;
            if kind != R_X86_64_JUMP_SLOT && kind != R_X86_64_GLOB_DAT {
                continue;
            }
            let sym = (r.r_info >> 32) as usize;
            // SAFETY: a relocation's symbol index is within the symbol table, whose names
            // are NUL-terminated strings in the string table.
            let name = unsafe {
                let s = &*(symtab as *const libc::Elf64_Sym).add(sym);
                core::ffi::CStr::from_ptr((strtab + s.st_name as usize) as *const libc::c_char)
            };
            if let Some(k) = names.iter().position(|n| *n == name.to_bytes()) {
                out.push((o.bias + r.r_offset as usize, k));
            }
        }
    }
    out
}

/// The protection of the page at `addr` (`/proc/self/maps`), as `mprotect` takes it.
fn protection(addr: usize) -> Option<libc::c_int> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|l| {
        let (range, rest) = l.split_once(' ')?;
        let (lo, hi) = range.split_once('-')?;
        let (lo, hi) = (
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        );
        (lo <= addr && addr < hi).then(|| {
            let p = rest.as_bytes();
            let mut prot = 0;
            if p.first() == Some(&b'r') {
                prot |= libc::PROT_READ;
            }
            if p.get(1) == Some(&b'w') {
                prot |= libc::PROT_WRITE;
            }
            if p.get(2) == Some(&b'x') {
                prot |= libc::PROT_EXEC;
            }
            prot
        })
    })
}

/// Stores `new` into the GOT entry at `slot` if it holds `expect`; whether it did.
///
/// # Safety
/// `slot` is a GOT entry of a loaded object.
unsafe fn store(slot: usize, expect: usize, new: usize) -> bool {
    let Some(prot) = protection(slot) else {
        return false;
    };
    let page = slot & !4095;
    // SAFETY: the entry's own page, made writable for the store and given its protection
    // back; an aligned 8-byte entry, stored with one atomic store.
    unsafe {
        if prot & libc::PROT_WRITE == 0
            && libc::mprotect(page as *mut _, 4096, prot | libc::PROT_WRITE) != 0
        {
            return false;
        }
        let cell = &*(slot as *const core::sync::atomic::AtomicUsize);
        let done = cell
            .compare_exchange(
                expect,
                new,
                core::sync::atomic::Ordering::SeqCst,
                core::sync::atomic::Ordering::SeqCst,
            )
            .is_ok();
        if prot & libc::PROT_WRITE == 0 {
            libc::mprotect(page as *mut _, 4096, prot);
        }
        done
    }
}

/// Points every loaded object's GOT entries for the interposed names at the agent's
/// functions (the agent's own entries aside); returns how many were rewritten.
pub fn hook_loaded_objects() -> usize {
    let hooks = own_functions();
    let names: Vec<&[u8]> = NAMES.iter().map(|n| n.to_bytes()).collect();
    let own = crate::own_object_bias();
    let mut hooked = HOOKED.lock().unwrap_or_else(|e| e.into_inner());
    let mut n = 0;
    for o in objects() {
        if Some(o.bias) == own {
            continue;
        }
        // SAFETY: an object dl_iterate_phdr listed, still loaded (the agent lock serialises
        // this with the program's dlclose only as far as the loader does: an object
        // unloaded meanwhile is not one the program calls through).
        for (slot, k) in unsafe { entries(&o, &names) } {
            let new = hooks[k];
            if new == 0 {
                continue;
            }
            // SAFETY: a GOT entry of a loaded object.
            let old = unsafe { *(slot as *const usize) };
            if old == new || hooked.iter().any(|h| h.slot == slot) {
                continue;
            }
            // SAFETY: as above.
            if unsafe { store(slot, old, new) } {
                hooked.push(Hooked { slot, old, new });
                n += 1;
            }
        }
    }
    n
}

/// Gives every entry [`hook_loaded_objects`] rewrote its old value back (where it still
/// holds the agent's function).
pub fn unhook() {
    let mut hooked = HOOKED.lock().unwrap_or_else(|e| e.into_inner());
    for h in hooked.drain(..) {
        // SAFETY: an entry hooked at attach; its object is still loaded unless the program
        // unloaded it, in which case its page is gone and `protection` finds nothing.
        unsafe { store(h.slot, h.new, h.old) };
    }
}
