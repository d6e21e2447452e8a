//! The function names of a process image, in two files of its directory.
//!
//! - `symbols`: a line per function symbol of each object with call sites (the names its sites
//!   are known by), `addr\tsize\tmodule\tname`: runtime address and size in lowercase hex, the
//!   object's file name, the name as the object spells it (the reader demangles).
//! - `objects` ([`OBJECTS`]): a line per library whose symbols the agent did not read (no
//!   sites: libc, the dynamic linker; never the executable, rebuilt more often than those),
//!   `bias\tmodule\tsize\tmtime_s\tmtime_ns\tpath`: its load bias in hex, its file name, its
//!   file's size and last modification (decimal) and its file. The reader names their
//!   functions from the files ([`read_object_symbols`]), as `perf report` names a recording's
//!   libraries: reading thousands of names the program never needs cost every traced
//!   program half a millisecond of its start-up (libc alone: 2 200 symbols), and the tool
//!   reading them instead cost as much (two CPUs: the program starting on one, the tool and
//!   its drainers on the other).
//!
//! Invariant: the lines [`read_object_symbols`] gives for an object are those the agent would
//! have written to `symbols` for it ([`crate::elf::file_function_symbols`] plus the bias), or
//! none when its file is not the one the program loaded (another size or modification time,
//! gone): never names from another build.

use std::path::{Path, PathBuf};

use crate::elf::{Func, LoadedObject, MappedFile};

/// The objects whose symbols the agent left to the reader.
pub const OBJECTS: &str = "objects";

/// An object listed in [`OBJECTS`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedObject {
    /// Its load bias.
    pub bias: u64,
    /// Its module name (the `symbols` lines' third field).
    pub module: String,
    /// Its file's size when loaded.
    pub size: u64,
    /// Its file's last modification when loaded (seconds, nanoseconds).
    pub modified: (i64, i64),
    /// Its file.
    pub path: PathBuf,
}

/// Appends the line of [`OBJECTS`] of `obj`, loaded from `file`; `false` (nothing appended)
/// for a path the line cannot hold (a tab or a newline in it): its symbols are then to be
/// read now.
pub fn push_object_line(out: &mut String, obj: &LoadedObject, file: &MappedFile) -> bool {
    let Some(path) = obj.path.to_str() else {
        return false;
    };
    let module = obj.module();
    if path.contains(['\t', '\n']) || module.contains(['\t', '\n']) {
        return false;
    }
    push_hex(out, obj.bias);
    out.push('\t');
    out.push_str(&module);
    let (s, ns) = file.modified;
    out.push_str(&format!("\t{}\t{s}\t{ns}\t", file.len()));
    out.push_str(path);
    out.push('\n');
    true
}

/// The objects of an [`OBJECTS`] text, in order; a malformed line (a torn last line, damage)
/// is skipped.
pub fn parse_objects(text: &str) -> Vec<ListedObject> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.splitn(6, '\t');
            let mut next = || it.next();
            let (bias, module, size, s, ns, path) =
                (next()?, next()?, next()?, next()?, next()?, next()?);
            Some(ListedObject {
                bias: u64::from_str_radix(bias, 16).ok()?,
                module: module.to_string(),
                size: size.parse().ok()?,
                modified: (s.parse().ok()?, ns.parse().ok()?),
                path: PathBuf::from(path),
            })
        })
        .collect()
}

/// The `symbols` lines of the objects `objs`, read from their files, and the files that are
/// not the ones the program loaded (gone, another size or modification time, not ELF): their
/// functions are not named.
pub fn read_object_symbols(objs: &[ListedObject]) -> (String, Vec<PathBuf>) {
    let mut out = String::new();
    let mut unnamed = Vec::new();
    for obj in objs {
        match file_symbols(obj) {
            Some(funcs) => push_symbol_lines(&mut out, &funcs, obj.bias, &obj.module),
            None => unnamed.push(obj.path.clone()),
        }
    }
    (out, unnamed)
}

/// The function symbols (link-time addresses) of `obj`'s file, if it is the one loaded.
fn file_symbols(obj: &ListedObject) -> Option<Vec<Func>> {
    let file = MappedFile::open(&obj.path).ok()?;
    if file.len() as u64 != obj.size || file.modified != obj.modified {
        return None;
    }
    crate::elf::file_function_symbols(&file)
}

/// Appends the `symbols` lines of the functions `funcs` of the object `module` loaded at
/// `bias` (0 for runtime addresses already; an object's load bias for the link-time ones
/// [`crate::elf::file_function_symbols`] gives). Written by hand, not by `writeln!`: libc's
/// 2 200 lines took a third of the agent's start-up scan of it so.
pub fn push_symbol_lines(out: &mut String, funcs: &[Func], bias: u64, module: &str) {
    out.reserve(funcs.len() * (module.len() + 48));
    for f in funcs {
        push_hex(out, f.addr.wrapping_add(bias));
        out.push('\t');
        push_hex(out, f.size);
        out.push('\t');
        out.push_str(module);
        out.push('\t');
        out.push_str(&f.name);
        out.push('\n');
    }
}

/// Appends `v` in lowercase hex, as `{:x}` writes it.
fn push_hex(out: &mut String, v: u64) {
    let mut digits = [0u8; 16];
    let digits = crate::signal_line::hex_digits(v, &mut digits);
    out.push_str(core::str::from_utf8(digits).expect("hex digits are ASCII"));
}

/// The whole `symbols` text of the process image directory `dir`: its `symbols` file and the
/// lines of the objects its `objects` file lists ([`read_object_symbols`]), and the files of
/// those whose functions are not named.
pub fn image_symbols(dir: &Path) -> (String, Vec<PathBuf>) {
    let mut text = std::fs::read_to_string(dir.join("symbols")).unwrap_or_default();
    let listed = std::fs::read_to_string(dir.join(OBJECTS)).unwrap_or_default();
    let (lines, unnamed) = read_object_symbols(&parse_objects(&listed));
    text.push_str(&lines);
    (text, unnamed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn libc() -> LoadedObject {
        crate::elf::loaded_objects()
            .into_iter()
            .find(|o| o.module().starts_with("libc.so"))
            .unwrap()
    }

    #[test]
    fn an_object_line_reads_back() {
        let obj = libc();
        let file = MappedFile::open(&obj.path).unwrap();
        let mut text = String::new();
        assert!(push_object_line(&mut text, &obj, &file));
        let (s, ns) = file.modified;
        assert_eq!(
            text,
            format!(
                "{:x}\tlibc.so.6\t{}\t{s}\t{ns}\t{}\n",
                obj.bias,
                file.len(),
                obj.path.display()
            )
        );
        // A torn last line is skipped.
        text.push_str("7f00\tlib");
        assert_eq!(
            parse_objects(&text),
            [ListedObject {
                bias: obj.bias,
                module: "libc.so.6".to_string(),
                size: file.len() as u64,
                modified: file.modified,
                path: obj.path.clone(),
            }]
        );
        let tab = LoadedObject {
            path: PathBuf::from("/tmp/a\tb.so"),
            ..obj
        };
        let mut none = String::new();
        assert!(!push_object_line(&mut none, &tab, &file) && none.is_empty());
    }

    #[test]
    fn a_listed_object_is_named_as_the_agent_would_have_named_it() {
        let obj = libc();
        let file = MappedFile::open(&obj.path).unwrap();
        let scanned = crate::elf::scan(
            &obj,
            &file,
            crate::elf::read_own_memory,
            crate::elf::Symbols::All,
        );
        let mut direct = String::new();
        push_symbol_lines(&mut direct, &scanned.funcs, 0, &obj.module());
        assert!(direct.lines().count() > 1000, "{}", direct.len());
        let mut line = String::new();
        assert!(push_object_line(&mut line, &obj, &file));
        let listed = parse_objects(&line);
        assert_eq!(read_object_symbols(&listed), (direct.clone(), Vec::new()));

        // In an image directory, after the agent's own names.
        let dir = tempfile_dir("image");
        std::fs::write(dir.join("symbols"), "1000\t10\tprog\tmain\n").unwrap();
        std::fs::write(dir.join(OBJECTS), &line).unwrap();
        let (text, unnamed) = image_symbols(&dir);
        assert_eq!(text, format!("1000\t10\tprog\tmain\n{direct}"));
        assert!(unnamed.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_that_is_not_the_one_loaded_names_nothing() {
        let obj = libc();
        let file = MappedFile::open(&obj.path).unwrap();
        let mut line = String::new();
        assert!(push_object_line(&mut line, &obj, &file));
        let listed = parse_objects(&line).remove(0);
        let dir = tempfile_dir("stale");
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a plain syscall with a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let others = [
            ListedObject {
                size: listed.size + 1,
                ..listed.clone()
            },
            ListedObject {
                modified: (listed.modified.0 - 1, listed.modified.1),
                ..listed.clone()
            },
            ListedObject {
                path: PathBuf::from("/nonexistent/libc.so.6"),
                ..listed.clone()
            },
            // Neither waited for a writer nor read.
            ListedObject {
                path: fifo,
                ..listed.clone()
            },
            ListedObject {
                path: PathBuf::from("/"),
                ..listed.clone()
            },
        ];
        for o in others {
            assert_eq!(
                read_object_symbols(std::slice::from_ref(&o)),
                (String::new(), vec![o.path.clone()])
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_symbol_line_is_what_writeln_writes() {
        for (addr, size) in [
            (0, 0),
            (1, 0xf),
            (0x10, 0x1234),
            (0x7f12_3456_789a, u64::MAX),
        ] {
            let f = Func {
                addr,
                size,
                name: "_ZN4core3fmt5write17h0123456789abcdefE".to_string(),
            };
            let mut line = String::new();
            push_symbol_lines(&mut line, std::slice::from_ref(&f), 0, "libc.so.6");
            assert_eq!(
                line,
                format!("{addr:x}\t{size:x}\tlibc.so.6\t{}\n", f.name),
                "{addr:#x} {size:#x}"
            );
        }
    }

    fn tempfile_dir(what: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ftrace-symbol-files-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
