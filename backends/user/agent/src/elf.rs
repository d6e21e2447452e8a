//! Loaded objects, their call sites and their function symbols.
//!
//! Every object in the process (the executable, shared libraries, objects `dlopen`ed later) is
//! listed with `dl_iterate_phdr`; its file is parsed with the `object` crate for the
//! `__mcount_loc` (gcc `-pg -mfentry -mrecord-mcount [-mnop-mcount]`) and
//! `__patchable_function_entries` (gcc/clang `-fpatchable-function-entry=5`, rustc
//! `-Zpatchable-function-entry=5`) sections and for its symbol tables.
//!
//! Invariant: site addresses are read from the object's *loaded* image (`load bias + sh_addr`),
//! where the dynamic linker has already applied `R_X86_64_RELATIVE` relocations, so they are
//! runtime addresses for PIE, PIC and non-PIE objects alike; an entry that does not fall in one
//! of the object's executable segments (a discarded function's zero, garbage) is dropped.

use std::ffi::CStr;
use std::path::{Path, PathBuf};

use object::Object as _;
use object::read::elf::ElfFile64;
use object::read::elf::SectionHeader as _;

/// A function symbol with its runtime address and demangled name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Func {
    /// Runtime start address.
    pub addr: u64,
    /// Size in bytes (0 if unknown).
    pub size: u64,
    /// The name as the object's symbol table spells it (mangled: [`demangle`] gives the name
    /// a user reads; start-up does not pay for names no one reads).
    pub name: String,
}

/// A symbol's name as its object spells it, demangled the first time someone reads it (a
/// listing, a filter): ripgrep's 20 000 names took a tenth of its traced run when the agent
/// demangled them all at start.
#[derive(Clone, Debug, Default)]
pub struct SymbolName {
    raw: String,
    demangled: std::sync::OnceLock<String>,
}

impl SymbolName {
    /// The name `raw` (mangled or plain), not demangled yet.
    pub fn new(raw: String) -> SymbolName {
        SymbolName {
            raw,
            demangled: std::sync::OnceLock::new(),
        }
    }

    /// The name as the object spells it.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The name a user reads ([`demangle`]), computed once.
    pub fn demangled(&self) -> &str {
        self.demangled.get_or_init(|| demangle(&self.raw))
    }
}

/// One object as the dynamic linker reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedObject {
    /// The file it was loaded from (`/proc/self/exe` resolved for the executable).
    pub path: PathBuf,
    /// The name the dynamic linker gives (empty for the executable).
    pub name: String,
    /// The load bias (`dlpi_addr`).
    pub bias: u64,
    /// Executable segments, `[start, end)` runtime addresses.
    pub exec: Vec<(u64, u64)>,
}

impl LoadedObject {
    /// The lowest and highest executable address.
    pub fn text_span(&self) -> (u64, u64) {
        let lo = self.exec.iter().map(|r| r.0).min().unwrap_or(0);
        let hi = self.exec.iter().map(|r| r.1).max().unwrap_or(0);
        (lo, hi)
    }

    /// Whether `addr` is in an executable segment.
    pub fn is_exec(&self, addr: u64) -> bool {
        self.exec.iter().any(|&(lo, hi)| addr >= lo && addr < hi)
    }

    /// The short name used as a module name (`libc.so.6`).
    pub fn module(&self) -> String {
        self.path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// Which section a site came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiteSection {
    /// `__mcount_loc`.
    McountLoc,
    /// `__patchable_function_entries`.
    PatchableFunctionEntries,
}

/// What one object holds.
#[derive(Clone, Debug, Default)]
pub struct Scanned {
    /// Call-site addresses (runtime), sorted, deduplicated, each with its section.
    pub sites: Vec<(u64, SiteSection)>,
    /// Function symbols sorted by address.
    pub funcs: Vec<Func>,
}

impl Scanned {
    /// The function containing `addr`.
    pub fn func_at(&self, addr: u64) -> Option<&Func> {
        let i = self.funcs.partition_point(|f| f.addr <= addr);
        let f = self.funcs.get(i.checked_sub(1)?)?;
        (addr - f.addr < f.size.max(1)).then_some(f)
    }
}

/// Lists the objects loaded now.
pub fn loaded_objects() -> Vec<LoadedObject> {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the Vec passed below; `info` is valid during the callback.
        let (out, info) = unsafe { (&mut *data.cast::<Vec<LoadedObject>>(), &*info) };
        let name = if info.dlpi_name.is_null() {
            String::new()
        } else {
            // SAFETY: the dynamic linker gives a NUL-terminated name.
            unsafe { CStr::from_ptr(info.dlpi_name) }
                .to_string_lossy()
                .into_owned()
        };
        let mut exec = Vec::new();
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: `dlpi_phdr` has `dlpi_phnum` entries.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
                let lo = info.dlpi_addr.wrapping_add(ph.p_vaddr);
                exec.push((lo, lo + ph.p_memsz));
            }
        }
        let path = if name.is_empty() {
            // thread-self: /proc/self/exe is gone once the main thread exited (a zombie).
            std::fs::read_link("/proc/thread-self/exe").unwrap_or_default()
        } else {
            PathBuf::from(&name)
        };
        out.push(LoadedObject {
            path,
            name,
            bias: info.dlpi_addr,
            exec,
        });
        0
    }
    let mut out: Vec<LoadedObject> = Vec::new();
    // SAFETY: the callback only touches `out` and the info it is given.
    unsafe { libc::dl_iterate_phdr(Some(cb), (&raw mut out).cast()) };
    out
}

/// Demangles a Rust (legacy or v0) or C++ symbol name; other names come back unchanged.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(s) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return s;
            }
        }
    }
    name.to_string()
}

/// The length of [`demangle`]`(name)`, without demangling a name no demangler takes (a C
/// library's aliases: libc's functions share addresses by the hundred, and
/// [`one_per_address`], demangling each pair, took 210 of the 800 us the agent's start-up
/// scan of libc took).
fn demangled_len(name: &str) -> usize {
    // The prefixes `rustc_demangle` (legacy `_ZN`, `ZN`, `__ZN`; v0 `_R`, `R`, `__R`) and
    // `cpp_demangle` (`_Z`) start from; any other name comes back unchanged.
    let maybe_mangled = ["_Z", "ZN", "__ZN", "_R", "R", "__R"]
        .iter()
        .any(|p| name.starts_with(p));
    match maybe_mangled {
        true => demangle(name).len(),
        false => name.len(),
    }
}

/// An object's file mapped read-only: the parser reads the pages it looks at (headers, symbol
/// tables, the site sections) from the page cache, where a copy of the whole file would read
/// its debug information too (a Rust binary's file is mostly that: ripgrep's is 60 MB).
///
/// Invariant: the file is not truncated while it is mapped (it is a loaded object or a
/// program about to run; a file cut short under a mapping faults with `SIGBUS`, as the
/// program running it would).
#[derive(Debug)]
pub struct MappedFile {
    ptr: *const u8,
    len: usize,
    /// Its last modification, as `stat` gave it when mapped (seconds, nanoseconds).
    pub modified: (i64, i64),
}

impl MappedFile {
    /// Maps the regular file at `path` (an empty file maps to no bytes). Anything else (a
    /// FIFO, a device, a directory: a path read from a damaged file) is refused, without
    /// waiting for a writer to open a FIFO.
    pub fn open(path: &Path) -> std::io::Result<MappedFile> {
        use std::os::fd::AsRawFd as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?;
        let meta = f.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        let len = usize::try_from(meta.len())
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        let modified = {
            use std::os::unix::fs::MetadataExt as _;
            (meta.mtime(), meta.mtime_nsec())
        };
        if len == 0 {
            return Ok(MappedFile {
                ptr: core::ptr::NonNull::<u8>::dangling().as_ptr(),
                len,
                modified,
            });
        }
        // SAFETY: a fresh private read-only mapping of a file we opened; nothing else refers
        // to it; it is unmapped once, on drop.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(MappedFile {
            ptr: p.cast(),
            len,
            modified,
        })
    }
}

impl core::ops::Deref for MappedFile {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `len` readable bytes at `ptr` (our mapping, or none for an empty file),
        // alive as long as `self`.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: our own mapping, unmapped once; no slice of it outlives `self`.
            unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
        }
    }
}

/// Which function symbols [`scan`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Symbols {
    /// Every function symbol of the object.
    All,
    /// Only an object with sites has its function symbols read (to name the sites); an object
    /// without (most libraries) is named later, from its file, by whoever needs the names
    /// ([`file_function_symbols`]).
    IfSites,
}

/// Reads an object's sites and its function symbols as `symbols` says. `read_mem` reads the
/// loaded image (the caller's own memory for the live process).
pub fn scan(
    obj: &LoadedObject,
    file: &[u8],
    read_mem: impl Fn(u64, usize) -> Vec<u8>,
    symbols: Symbols,
) -> Scanned {
    let mut out = Scanned::default();
    let Ok(elf) = ElfFile64::<'_>::parse(file) else {
        return out;
    };
    let endian = elf.endian();
    for (name, kind) in [
        ("__mcount_loc", SiteSection::McountLoc),
        (
            "__patchable_function_entries",
            SiteSection::PatchableFunctionEntries,
        ),
    ] {
        for sec in sections_named(&elf, name) {
            let (addr, size) = (sec.sh_addr(endian), sec.sh_size(endian));
            if addr == 0 || size == 0 {
                continue;
            }
            let bytes = read_mem(obj.bias.wrapping_add(addr), size as usize);
            for chunk in bytes.chunks_exact(8) {
                let a = u64::from_ne_bytes(chunk.try_into().unwrap());
                if obj.is_exec(a) {
                    out.sites.push((a, kind));
                }
            }
        }
    }
    out.sites.sort_unstable_by_key(|s| s.0);
    out.sites.dedup_by_key(|s| s.0);
    if symbols == Symbols::All || !out.sites.is_empty() {
        out.funcs = function_symbols(&elf, obj);
    }
    out
}

/// The function symbols of the ELF file `file` at its link-time addresses (load bias 0), as
/// [`scan`] reads those of a loaded object: add an object's bias for its runtime addresses.
/// `None` if `file` is not a 64-bit ELF object.
pub fn file_function_symbols(file: &[u8]) -> Option<Vec<Func>> {
    let any = object::File::parse(file).ok()?;
    let obj = loaded_at_zero(&any, PathBuf::new());
    let object::File::Elf64(elf) = &any else {
        return None;
    };
    Some(function_symbols(elf, &obj))
}

/// The object of the file `path` (parsed: `elf`) as the dynamic linker would load it at bias
/// 0: its executable segments at their link-time addresses.
fn loaded_at_zero(elf: &object::File<'_>, path: PathBuf) -> LoadedObject {
    use object::{ObjectSegment as _, SegmentFlags};
    let exec = elf
        .segments()
        .filter(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & PF_X != 0))
        .map(|s| (s.address(), s.address().saturating_add(s.size())))
        .collect();
    LoadedObject {
        path,
        name: String::new(),
        bias: 0,
        exec,
    }
}

/// `obj`'s function symbols, sorted by runtime address, one per address, each with a size.
fn function_symbols(elf: &ElfFile64<'_>, obj: &LoadedObject) -> Vec<Func> {
    let mut funcs = one_per_address(text_symbols(elf, obj.bias));
    // A symbol without a size ends where the next one starts, or at the end of its segment:
    // never beyond the object.
    for i in 0..funcs.len() {
        if funcs[i].size == 0 {
            let a = funcs[i].addr;
            let seg_end = obj
                .exec
                .iter()
                .find(|r| a >= r.0 && a < r.1)
                .map_or(a + 1, |r| r.1);
            let next = funcs.get(i + 1).map_or(seg_end, |n| n.addr.min(seg_end));
            funcs[i].size = next.saturating_sub(a).max(1);
        }
    }
    funcs
        .into_iter()
        .map(|f| Func {
            addr: f.addr,
            size: f.size,
            name: f.name.to_string(),
        })
        .collect()
}

/// The NUL-terminated string at `offset` of a string table's bytes. Found byte by byte, not
/// through `object`'s string tables: their `memchr` runs std's CPU feature detection at its
/// first call, a dozen `cpuid`s, which take 6-7 us each on a VM (90 us of every traced
/// program's start, and of the tool's).
fn c_str_at(strings: &[u8], offset: u64) -> Option<&[u8]> {
    let rest = strings.get(usize::try_from(offset).ok()?..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    Some(&rest[..end])
}

/// The bytes of `elf`'s section `index` (none: no such section, or none in the file).
fn section_bytes<'a>(elf: &ElfFile64<'a>, index: object::SectionIndex) -> &'a [u8] {
    elf.elf_section_table()
        .section(index)
        .ok()
        .and_then(|s| s.data(elf.endian(), elf.data()).ok())
        .unwrap_or(&[])
}

/// The headers of `elf`'s sections named `name` (names compared as [`c_str_at`] reads them).
fn sections_named<'a>(
    elf: &ElfFile64<'a>,
    name: &str,
) -> Vec<&'a object::elf::SectionHeader64<object::Endianness>> {
    use object::read::elf::FileHeader as _;
    let endian = elf.endian();
    let Ok(names) = elf.elf_header().shstrndx(endian, elf.data()) else {
        return Vec::new();
    };
    let names = section_bytes(elf, object::SectionIndex(names as usize));
    elf.elf_section_table()
        .iter()
        .filter(|s| c_str_at(names, s.sh_name(endian).into()) == Some(name.as_bytes()))
        .collect()
}

/// The link-time address and size of each section named `name` of the ELF64 file `file`.
pub(crate) fn section_spans(file: &[u8], name: &str) -> Vec<(u64, u64)> {
    let Ok(elf) = ElfFile64::<'_>::parse(file) else {
        return Vec::new();
    };
    let endian = elf.endian();
    sections_named(&elf, name)
        .iter()
        .map(|s| (s.sh_addr(endian), s.sh_size(endian)))
        .collect()
}

/// Whether `elf` imports (has an undefined symbol named) one of `names`.
fn imports_any(elf: &ElfFile64<'_>, names: &[&str]) -> bool {
    use object::read::elf::Sym as _;
    let endian = elf.endian();
    [elf.elf_symbol_table(), elf.elf_dynamic_symbol_table()]
        .iter()
        .any(|table| {
            let strings = section_bytes(elf, table.string_section());
            table.symbols().iter().any(|sym| {
                sym.is_undefined(endian)
                    && c_str_at(strings, sym.st_name(endian).into())
                        .is_some_and(|n| names.iter().any(|w| w.as_bytes() == n))
            })
        })
}

/// A function symbol as [`text_symbols`] reads it: its name borrowed from the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TextSymbol<'a> {
    addr: u64,
    size: u64,
    name: &'a str,
}

/// The defined function symbols (`STT_FUNC`, `STT_GNU_IFUNC`; address not 0; a name, in
/// UTF-8) of `elf`'s `.symtab` then `.dynsym`, in table order, at load bias `bias`. Read
/// from the tables as they are, names borrowed, so that only the symbols kept get a `String`
/// (the agent reads libc's 3 000 at the start of every traced program; a symbol object and a
/// `String` for each was the rule).
fn text_symbols<'a>(elf: &ElfFile64<'a>, bias: u64) -> Vec<TextSymbol<'a>> {
    use object::elf::{STT_FUNC, STT_GNU_IFUNC};
    use object::read::elf::Sym as _;
    let endian = elf.endian();
    let mut out = Vec::new();
    for table in [elf.elf_symbol_table(), elf.elf_dynamic_symbol_table()] {
        let strings = section_bytes(elf, table.string_section());
        for sym in table.symbols() {
            let addr = sym.st_value(endian);
            if !matches!(sym.st_type(), STT_FUNC | STT_GNU_IFUNC)
                || addr == 0
                || sym.is_undefined(endian)
            {
                continue;
            }
            let Some(name) = c_str_at(strings, sym.st_name(endian).into())
                .and_then(|n| core::str::from_utf8(n).ok())
                .filter(|n| !n.is_empty())
            else {
                continue;
            };
            out.push(TextSymbol {
                addr: bias.wrapping_add(addr),
                size: sym.st_size(endian),
                name,
            });
        }
    }
    out
}

/// `funcs` sorted by address, one at each: the symbol with a size, then the shorter
/// (non-versioned) name as a user reads it (two functions folded into one keep the shorter
/// demangled name; of equal ones, the first in table order); only names that tie this way
/// are demangled.
fn one_per_address(mut funcs: Vec<TextSymbol<'_>>) -> Vec<TextSymbol<'_>> {
    funcs.sort_by(|a, b| a.addr.cmp(&b.addr).then(b.size.cmp(&a.size)));
    let mut kept: Vec<TextSymbol<'_>> = Vec::with_capacity(funcs.len());
    for f in funcs {
        match kept.last_mut() {
            Some(k) if k.addr == f.addr => {
                if k.size == f.size && demangled_len(f.name) < demangled_len(k.name) {
                    *k = f;
                }
            }
            _ => kept.push(f),
        }
    }
    kept
}

/// What an ELF file holds before it is loaded: its sites and symbols (addresses as the file
/// gives them, load bias 0), the libraries it asks for, and whether it calls a profiling hook.
#[derive(Clone, Debug, Default)]
pub struct FileScan {
    /// Sites and function symbols, as [`scan`] finds them in the loaded image (no symbols
    /// when there are no sites: nothing to name).
    pub scanned: Scanned,
    /// `DT_NEEDED`: the libraries it needs, as written.
    pub needed: Vec<String>,
    /// `DT_RPATH` directories (`:`-separated entries, unexpanded).
    pub rpath: Vec<String>,
    /// `DT_RUNPATH` directories (unexpanded).
    pub runpath: Vec<String>,
    /// Whether it imports `mcount` or `_mcount`: the mark of gcc's plain `-pg` calls (into
    /// glibc, or the preloaded agent), which leave no site list (the agent's `mcount` traces them,
    /// [`crate::mcount`]).
    pub calls_mcount: bool,
    /// Whether it imports `__fentry__`: gcc's `-pg -mfentry` calls, which without
    /// `-mrecord-mcount` leave no site list.
    pub calls_fentry: bool,
    /// Whether it imports one of libc's program starters ([`PROGRAM_STARTERS`]): a shell, a
    /// `make`, a launcher, whose children (the agent is inherited through `LD_PRELOAD`) may
    /// have call sites of their own.
    pub starts_programs: bool,
}

/// libc's functions that start another program image (`exec*`, `posix_spawn*`).
pub const PROGRAM_STARTERS: [&str; 11] = [
    "execve",
    "execveat",
    "fexecve",
    "execv",
    "execvp",
    "execvpe",
    "execl",
    "execlp",
    "execle",
    "posix_spawn",
    "posix_spawnp",
];

/// `R_X86_64_RELATIVE`: `*where = load bias + addend`.
const R_X86_64_RELATIVE: u32 = 8;
/// `PF_X`: an executable segment.
const PF_X: u32 = 1;

/// Scans an ELF file as it will be loaded (bias 0): the same sections and symbols [`scan`]
/// reads from a loaded image, with the image built from the file's `PT_LOAD` segments and its
/// `R_X86_64_RELATIVE` relocations applied (what the dynamic linker does before [`scan`] runs
/// in the program). `None` if `file` is not a 64-bit little-endian ELF object.
pub fn scan_file(path: &Path, file: &[u8]) -> Option<FileScan> {
    use object::{ObjectSegment as _, RelocationFlags};
    let elf = object::File::parse(file).ok()?;
    let object::File::Elf64(elf64) = &elf else {
        return None;
    };
    if !elf.is_little_endian() {
        return None;
    }
    let segments: Vec<(u64, u64, &[u8])> = elf
        .segments()
        .filter_map(|s| Some((s.address(), s.size(), s.data().ok()?)))
        .collect();
    let obj = loaded_at_zero(&elf, path.to_path_buf());
    let relative: Vec<(u64, u64)> = elf
        .dynamic_relocations()
        .into_iter()
        .flatten()
        .filter(|(_, r)| {
            matches!(r.flags(), RelocationFlags::Elf { r_type } if r_type == R_X86_64_RELATIVE)
        })
        .map(|(at, r)| (at, r.addend() as u64))
        .collect();
    let read_image = |addr: u64, len: usize| {
        let mut out = vec![0u8; len];
        let end = addr.saturating_add(len as u64);
        if let Some(&(lo, _, data)) = segments
            .iter()
            .find(|&&(lo, size, _)| addr >= lo && end <= lo.saturating_add(size))
        {
            // Bytes past the segment's file part are zero (`.bss`), as loaded.
            let from = (addr - lo) as usize;
            if from < data.len() {
                let n = (data.len() - from).min(len);
                out[..n].copy_from_slice(&data[from..from + n]);
            }
        }
        for &(at, value) in &relative {
            if at >= addr && at.saturating_add(8) <= end {
                let i = (at - addr) as usize;
                out[i..i + 8].copy_from_slice(&value.to_le_bytes());
            }
        }
        out
    };
    // Symbols only matter for naming sites: an object without sites (most libraries) is not
    // demangled.
    let has_sites = ["__mcount_loc", "__patchable_function_entries"]
        .iter()
        .flat_map(|name| sections_named(elf64, name))
        .any(|s| s.sh_addr(elf64.endian()) != 0 && s.sh_size(elf64.endian()) != 0);
    let mut out = FileScan {
        scanned: if has_sites {
            scan(&obj, file, read_image, Symbols::All)
        } else {
            Scanned::default()
        },
        ..FileScan::default()
    };
    out.calls_mcount = imports_any(elf64, &["mcount", "_mcount"]);
    out.calls_fentry = imports_any(elf64, &["__fentry__"]);
    out.starts_programs = imports_any(elf64, &PROGRAM_STARTERS);
    read_dynamic(elf64, &mut out);
    Some(out)
}

/// Reads `DT_NEEDED`, `DT_RPATH` and `DT_RUNPATH` from the `.dynamic` section.
fn read_dynamic(elf: &ElfFile64<'_>, out: &mut FileScan) {
    const DT_NEEDED: u64 = 1;
    const DT_RPATH: u64 = 15;
    const DT_RUNPATH: u64 = 29;
    let data = |name: &str| {
        sections_named(elf, name)
            .first()
            .and_then(|s| s.data(elf.endian(), elf.data()).ok())
            .unwrap_or(&[])
    };
    let (dynamic, strings) = (data(".dynamic"), data(".dynstr"));
    let string = |off: u64| {
        let rest = strings.get(usize::try_from(off).ok()?..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        Some(String::from_utf8_lossy(&rest[..end]).into_owned())
    };
    for entry in dynamic.chunks_exact(16) {
        let tag = u64::from_le_bytes(entry[..8].try_into().unwrap());
        let val = u64::from_le_bytes(entry[8..].try_into().unwrap());
        let Some(s) = matches!(tag, DT_NEEDED | DT_RPATH | DT_RUNPATH)
            .then(|| string(val))
            .flatten()
        else {
            continue;
        };
        let dirs = || s.split(':').filter(|d| !d.is_empty()).map(String::from);
        match tag {
            DT_NEEDED => out.needed.push(s.clone()),
            DT_RPATH => out.rpath.extend(dirs()),
            _ => out.runpath.extend(dirs()),
        }
    }
}

/// Reads `len` bytes of this process's memory at `addr`.
pub fn read_own_memory(addr: u64, len: usize) -> Vec<u8> {
    // SAFETY: callers pass ranges of loaded, readable sections of loaded objects.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::ObjectSymbol as _;

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(
            demangle("_ZN7example3fib17h0123456789abcdefE"),
            "example::fib"
        );
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("fib"), "fib");
        assert_eq!(demangle("_RNvCs1234_7example3fib"), "example::fib");
    }

    #[test]
    fn symbol_name_keeps_the_raw_name_and_demangles_on_read() {
        let n = SymbolName::new("_ZN7example3fib17h0123456789abcdefE".into());
        assert_eq!(n.raw(), "_ZN7example3fib17h0123456789abcdefE");
        assert_eq!(n.demangled(), "example::fib");
        assert_eq!(SymbolName::new("fib".into()).demangled(), "fib");
    }

    #[test]
    fn the_demangled_length_is_that_of_the_demangled_name() {
        for name in [
            "malloc",
            "__libc_malloc",
            "_IO_puts",
            "RAND_bytes",
            "ZNx",
            "_ZN4core3fmt5write17h0123456789abcdefE",
            "_ZN4core3fmt5write17h0123456789abcdefE.llvm.123ABC",
            "_RNvCs1234_7mycrate4main",
            "_Z3fooi",
            "getpid@@GLIBC_2.2.5",
            "x.llvm.123ABC",
        ] {
            assert_eq!(demangled_len(name), demangle(name).len(), "{name}");
        }
    }

    #[test]
    fn lists_this_process() {
        let objs = loaded_objects();
        assert!(objs[0].name.is_empty(), "the executable comes first");
        assert!(objs.iter().any(|o| o.module().starts_with("libc.so")));
        let me = demangles_rust_and_cpp as *const () as u64;
        assert!(objs.iter().any(|o| o.is_exec(me)));
    }

    #[test]
    fn folded_functions_keep_the_shorter_demangled_name() {
        let f = |addr, size, name| TextSymbol { addr, size, name };
        // Mangled, `OsString`'s name is the shorter; demangled, `Vec<u8>`'s is.
        // (ripgrep 14's two `hash_one`s that share one address.)
        let vec_u8 = "_RINvYNtNtNtCsjrHSEGnQ3l9_3std4hash6random11RandomStateNtNtCsgEmfK2I1SDS_\
                      4core4hash11BuildHasher8hash_oneRINtNtCslNYArtu3iFV_5alloc3vec3VechEE\
                      Cs3WgbDzNy2S8_2rg";
        let os_string = "_RINvYNtNtNtCsjrHSEGnQ3l9_3std4hash6random11RandomStateNtNtCsgEmfK2I1SDS_\
                         4core4hash11BuildHasher8hash_oneRNtNtNtB9_3ffi6os_str8OsStringE\
                         Cs3WgbDzNy2S8_2rg";
        assert!(os_string.len() < vec_u8.len());
        assert!(demangle(vec_u8).len() < demangle(os_string).len());
        let kept = one_per_address(vec![
            f(0x20, 0, "g"),
            f(0x10, 8, os_string),
            f(0x10, 8, vec_u8),
            f(0x20, 4, "g@@V1"),
            f(0x10, 4, "x"),
        ]);
        let names: Vec<(u64, &str)> = kept.iter().map(|f| (f.addr, f.name)).collect();
        assert_eq!(names, [(0x10, vec_u8), (0x20, "g@@V1")]);
    }

    /// The tables read as they are give the symbols the `object` crate's symbol objects give,
    /// in the same order, for every object of this process (the test binary has a `.symtab`,
    /// the system's libraries only a `.dynsym`).
    #[test]
    fn text_symbols_are_the_function_symbols_the_object_crate_lists() {
        use object::SymbolKind;
        let mut checked = 0;
        for obj in loaded_objects().iter().filter(|o| o.path.is_file()) {
            let file = MappedFile::open(&obj.path).unwrap();
            let Ok(any) = object::File::parse(&*file) else {
                continue;
            };
            let expected: Vec<(u64, u64, &str)> = any
                .symbols()
                .chain(any.dynamic_symbols())
                .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0 && !s.is_undefined())
                .filter_map(|s| {
                    let name = s.name().ok().filter(|n| !n.is_empty())?;
                    Some((obj.bias.wrapping_add(s.address()), s.size(), name))
                })
                .collect();
            let object::File::Elf64(elf) = &any else {
                panic!("{}: not ELF64", obj.path.display())
            };
            let got: Vec<(u64, u64, &str)> = text_symbols(elf, obj.bias)
                .iter()
                .map(|f| (f.addr, f.size, f.name))
                .collect();
            assert!(!expected.is_empty(), "{}", obj.path.display());
            assert_eq!(got, expected, "{}", obj.path.display());
            checked += 1;
        }
        // The test binary, libc and the dynamic linker at least.
        assert!(checked >= 3, "{checked} objects");
    }

    #[test]
    fn sections_and_imports_are_those_the_object_crate_reads() {
        use object::ObjectSection as _;
        let mut checked = 0;
        for obj in loaded_objects() {
            let Ok(file) = MappedFile::open(&obj.path) else {
                continue;
            };
            let Ok(elf) = ElfFile64::<'_>::parse(&*file) else {
                continue;
            };
            let any = object::File::parse(&*file).unwrap();
            for name in [
                ".dynamic",
                ".dynstr",
                ".text",
                ".symtab",
                "__mcount_loc",
                "nonexistent",
            ] {
                let ours: Vec<(u64, u64)> = sections_named(&elf, name)
                    .iter()
                    .map(|s| (s.sh_addr(elf.endian()), s.sh_size(elf.endian())))
                    .collect();
                let theirs: Vec<(u64, u64)> = any
                    .sections()
                    .filter(|s| s.name() == Ok(name))
                    .map(|s| (s.address(), s.size()))
                    .collect();
                assert_eq!(ours, theirs, "{} {name}", obj.path.display());
                assert_eq!(section_spans(&file, name), theirs);
            }
            for names in [
                &["malloc", "free"][..],
                &["__libc_start_main"],
                &["nonexistent"],
            ] {
                let theirs = any
                    .symbols()
                    .chain(any.dynamic_symbols())
                    .any(|s| s.is_undefined() && s.name().is_ok_and(|n| names.contains(&n)));
                assert_eq!(
                    imports_any(&elf, names),
                    theirs,
                    "{} {names:?}",
                    obj.path.display()
                );
            }
            checked += 1;
        }
        assert!(checked >= 3, "{checked} objects");
    }

    #[test]
    fn scans_own_symbols() {
        let objs = loaded_objects();
        let libc = objs
            .iter()
            .find(|o| o.module().starts_with("libc.so"))
            .unwrap();
        let file = MappedFile::open(&libc.path).unwrap();
        let s = scan(libc, &file, read_own_memory, Symbols::All);
        let getpid = libc::getpid as *const () as u64;
        assert_eq!(s.func_at(getpid).map(|f| f.name.as_str()), Some("getpid"));
        assert!(s.sites.is_empty(), "libc is not instrumented");
        // Without sites, no symbols unless asked for every one.
        let only = scan(libc, &file, read_own_memory, Symbols::IfSites);
        assert!(only.sites.is_empty() && only.funcs.is_empty());
        // Read from the file, at link-time addresses: the same symbols less the load bias.
        let from_file = file_function_symbols(&file).expect("an ELF64 file");
        let rebased: Vec<Func> = from_file
            .into_iter()
            .map(|f| Func {
                addr: f.addr + libc.bias,
                ..f
            })
            .collect();
        assert_eq!(rebased, s.funcs);
        assert!(file_function_symbols(b"#!/bin/sh\n").is_none());
    }

    #[test]
    fn scans_own_file_as_loaded() {
        let objs = loaded_objects();
        let exe = &objs[0];
        let file = MappedFile::open(&exe.path).unwrap();
        let s = scan_file(&exe.path, &file).expect("an ELF file");
        // Not instrumented: no sites, so no symbols read (the e2e tests scan programs with).
        assert!(s.scanned.sites.is_empty() && s.scanned.funcs.is_empty());
        assert!(
            s.needed.iter().any(|n| n.starts_with("libc.so")),
            "{:?}",
            s.needed
        );
        assert!(!s.calls_mcount);
        assert!(scan_file(&exe.path, b"#!/bin/sh\n").is_none());
    }

    #[test]
    fn a_shell_starts_programs() {
        let sh = std::path::Path::new("/bin/sh");
        let s = scan_file(sh, &MappedFile::open(sh).unwrap()).expect("an ELF file");
        assert!(s.starts_programs);
        // libc itself defines them, it does not import them.
        let objs = loaded_objects();
        let libc = objs
            .iter()
            .find(|o| o.module().starts_with("libc.so"))
            .unwrap();
        let l = scan_file(&libc.path, &MappedFile::open(&libc.path).unwrap()).unwrap();
        assert!(!l.starts_programs);
    }

    #[test]
    fn a_mapped_file_holds_the_files_bytes() {
        let dir = std::env::temp_dir().join(format!("ftrace-agent-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (full, empty) = (dir.join("full"), dir.join("empty"));
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        std::fs::write(&full, &bytes).unwrap();
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(&*MappedFile::open(&full).unwrap(), &bytes[..]);
        assert!(MappedFile::open(&empty).unwrap().is_empty());
        let missing = MappedFile::open(&dir.join("missing")).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
