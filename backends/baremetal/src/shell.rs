//! A tiny command shell over the serial port that serves a tracefs tree: `ls [DIR]`,
//! `cat FILE...`, `xxd FILE` (plain hex), `mkdir DIR...`, `rmdir DIR...`, `echo [-n] WORDS... [> FILE | >> FILE]`, plus builtins the kernel supplies.
//!
//! The shell only parses and routes; the files are a [`FileTree`] (ftrace-tracefs's tree when it
//! lands). Messages follow busybox's `sh`, `cat` and `ls`, with the errno text glibc prints
//! (`sh: write error: Invalid argument`). Paths are relative to the tracefs root; a
//! `/sys/kernel/tracing/` prefix is accepted. Invariant: a rejected write changes nothing (the
//! tree's contract) and counts as a failed command in [`Shell::failures`].

use core::fmt::{self, Write};

use ftrace_core::Errno;
use ftrace_tracefs::WriteMode;

/// Where the kernel's tracefs tree would be mounted; accepted as a path prefix.
pub const TRACEFS_ROOT: &str = "/sys/kernel/tracing";

/// The prompt printed before each command.
pub const PROMPT: &str = "tracefs# ";

/// The file tree the shell serves.
pub trait FileTree {
    /// Lists the entries of directory `dir` ("" for the root), one per line.
    fn list(&self, dir: &str, out: &mut dyn Write) -> Result<(), Errno>;

    /// Writes the contents of `path` to `out`.
    fn read(&self, path: &str, out: &mut dyn Write) -> Result<(), Errno>;

    /// Writes `data` to `path`, opened as the redirection says (`>` or `>>`).
    fn write(&self, path: &str, data: &str, mode: WriteMode) -> Result<(), Errno>;

    /// `mkdir path` (tracefs: `instances/NAME`); by default no directory can be made.
    fn mkdir(&self, path: &str) -> Result<(), Errno> {
        let _ = path;
        Err(Errno::EPERM)
    }

    /// `rmdir path`; by default no directory can be removed.
    fn rmdir(&self, path: &str) -> Result<(), Errno> {
        let _ = path;
        Err(Errno::EPERM)
    }

    /// The bytes of `path` as read (binary files such as `trace_pipe_raw`); by default the
    /// text [`FileTree::read`] writes.
    fn read_bytes(&self, path: &str) -> Result<alloc::vec::Vec<u8>, Errno> {
        let mut s = alloc::string::String::new();
        self.read(path, &mut s)?;
        Ok(s.into_bytes())
    }
}

/// What a builtin did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The command succeeded.
    Ok,
    /// The command failed (it printed why).
    Failed,
}

/// Commands the embedding kernel adds (`workload`, `poweroff`...).
pub trait Builtins {
    /// Runs `argv` if it is a builtin; `None` if it is not one.
    fn run(&mut self, argv: &[&str], out: &mut dyn Write) -> Option<Outcome>;
}

/// Most words a command line may have.
pub const MAX_WORDS: usize = 32;

/// Splits a command line into words. Single and double quotes group (no escapes, no nesting);
/// `>` and `>>` are words of their own even when written against a file name.
pub fn split_words<'a>(
    line: &'a str,
    words: &mut [&'a str; MAX_WORDS],
) -> Result<usize, &'static str> {
    let b = line.as_bytes();
    let mut n = 0;
    let mut i = 0;
    let mut push = |w: &'a str, n: &mut usize| -> Result<(), &'static str> {
        if *n == MAX_WORDS {
            return Err("too many words");
        }
        words[*n] = w;
        *n += 1;
        Ok(())
    };
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' => i += 1,
            q @ (b'\'' | b'"') => {
                let end = line[i + 1..]
                    .find(q as char)
                    .ok_or("unterminated quoted string")?;
                push(&line[i + 1..i + 1 + end], &mut n)?;
                i += end + 2;
            }
            b'>' => {
                let len = if b.get(i + 1) == Some(&b'>') { 2 } else { 1 };
                push(&line[i..i + len], &mut n)?;
                i += len;
            }
            _ => {
                let start = i;
                while i < b.len() && !matches!(b[i], b' ' | b'\t' | b'>' | b'\'' | b'"') {
                    i += 1;
                }
                push(&line[start..i], &mut n)?;
            }
        }
    }
    Ok(n)
}

/// Strips the tracefs mount prefix and `./` from a path.
pub fn tracefs_path(path: &str) -> &str {
    let p = path.strip_prefix(TRACEFS_ROOT).unwrap_or(path);
    let p = p.trim_start_matches('/');
    let p = p.strip_prefix("./").unwrap_or(p);
    p.trim_end_matches('/')
}

/// An `echo` argument list joined into one buffer.
struct Joined {
    buf: [u8; 1024],
    len: usize,
}

impl Joined {
    fn push(&mut self, s: &str) -> Result<(), Errno> {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(Errno::E2BIG);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }

    fn as_str(&self) -> &str {
        // Only whole &strs were pushed.
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

/// The shell: a line editor plus the command interpreter.
pub struct Shell {
    line: [u8; 512],
    len: usize,
    last_cr: bool,
    /// Commands that failed since boot.
    pub failures: u32,
    /// Commands run since boot.
    pub commands: u32,
}

impl Default for Shell {
    fn default() -> Self {
        Self::new()
    }
}

impl Shell {
    /// A shell with an empty line.
    pub const fn new() -> Self {
        Self {
            line: [0; 512],
            len: 0,
            last_cr: false,
            failures: 0,
            commands: 0,
        }
    }

    /// Feeds one input byte (echoing it to `echo`); returns true when a line is complete, which
    /// [`Shell::take_line`] then hands out.
    pub fn feed(&mut self, b: u8, echo: &mut dyn Write) -> bool {
        let cr = self.last_cr;
        self.last_cr = b == b'\r';
        match b {
            b'\n' if cr => false, // the \n of a \r\n pair
            b'\r' | b'\n' => {
                let _ = echo.write_str("\n");
                true
            }
            0x08 | 0x7f => {
                if self.len > 0 {
                    self.len -= 1;
                    let _ = echo.write_str("\x08 \x08");
                }
                false
            }
            0x20..=0x7e => {
                if self.len < self.line.len() {
                    self.line[self.len] = b;
                    self.len += 1;
                    let _ = echo.write_char(b as char);
                }
                false
            }
            _ => false,
        }
    }

    /// The completed line (clears it for the next one).
    pub fn take_line(&mut self, into: &mut [u8; 512]) -> usize {
        let n = self.len;
        into[..n].copy_from_slice(&self.line[..n]);
        self.len = 0;
        n
    }

    /// Runs one command line, counting it and its failure.
    pub fn execute(
        &mut self,
        line: &str,
        tree: &dyn FileTree,
        builtins: &mut dyn Builtins,
        out: &mut dyn Write,
    ) -> Outcome {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return Outcome::Ok;
        }
        self.commands += 1;
        crate::events::trace_shell_command(line);
        let r = run(line, tree, builtins, out);
        if r == Outcome::Failed {
            self.failures += 1;
        }
        crate::events::trace_shell_command_exit(i32::from(r == Outcome::Failed));
        r
    }
}

fn run(
    line: &str,
    tree: &dyn FileTree,
    builtins: &mut dyn Builtins,
    out: &mut dyn Write,
) -> Outcome {
    let mut words = [""; MAX_WORDS];
    let n = match split_words(line, &mut words) {
        Ok(n) => n,
        Err(e) => return fail(out, format_args!("sh: syntax error: {e}")),
    };
    let argv = &words[..n];
    // A redirection: `... > file` or `... >> file`.
    let (argv, redirect) = match argv.iter().position(|w| *w == ">" || *w == ">>") {
        Some(i) => {
            if i + 2 != argv.len() {
                return fail(out, format_args!("sh: syntax error: bad redirection"));
            }
            let mode = if argv[i] == ">>" {
                WriteMode::Append
            } else {
                WriteMode::Truncate
            };
            (&argv[..i], Some((argv[i + 1], mode)))
        }
        None => (argv, None),
    };
    let Some(&cmd) = argv.first() else {
        return fail(out, format_args!("sh: syntax error: empty command"));
    };
    match cmd {
        "echo" => echo(&argv[1..], redirect, tree, out),
        "cat" if redirect.is_none() => cat(&argv[1..], tree, out),
        "ls" if redirect.is_none() => ls(&argv[1..], tree, out),
        "xxd" if redirect.is_none() => xxd(&argv[1..], tree, out),
        "mkdir" if redirect.is_none() => dirs(&argv[1..], out, |d| match tree.mkdir(d) {
            Ok(()) => Ok(()),
            Err(e) => Err(alloc::format!("mkdir: can't create directory '{d}': {e}")),
        }),
        "rmdir" if redirect.is_none() => dirs(&argv[1..], out, |d| match tree.rmdir(d) {
            Ok(()) => Ok(()),
            Err(e) => Err(alloc::format!("rmdir: '{d}': {e}")),
        }),
        _ if redirect.is_none() => match builtins.run(argv, out) {
            Some(o) => o,
            None => fail(out, format_args!("sh: {cmd}: not found")),
        },
        _ => fail(out, format_args!("sh: {cmd}: redirection not supported")),
    }
}

fn fail(out: &mut dyn Write, msg: fmt::Arguments<'_>) -> Outcome {
    let _ = out.write_fmt(msg);
    let _ = out.write_str("\n");
    Outcome::Failed
}

fn echo(
    args: &[&str],
    redirect: Option<(&str, WriteMode)>,
    tree: &dyn FileTree,
    out: &mut dyn Write,
) -> Outcome {
    let (newline, args) = match args.first() {
        Some(&"-n") => (false, &args[1..]),
        _ => (true, args),
    };
    let mut j = Joined {
        buf: [0; 1024],
        len: 0,
    };
    for (i, a) in args.iter().enumerate() {
        if i > 0 && j.push(" ").is_err() || j.push(a).is_err() {
            return fail(out, format_args!("sh: echo: argument list too long"));
        }
    }
    if newline && j.push("\n").is_err() {
        return fail(out, format_args!("sh: echo: argument list too long"));
    }
    match redirect {
        None => {
            let _ = out.write_str(j.as_str());
            Outcome::Ok
        }
        Some((file, mode)) => match tree.write(tracefs_path(file), j.as_str(), mode) {
            Ok(()) => Outcome::Ok,
            Err(Errno::ENOENT) => fail(
                out,
                format_args!("sh: can't create {file}: {}", Errno::EACCES),
            ),
            Err(e) => fail(out, format_args!("sh: write error: {e}")),
        },
    }
}

fn cat(files: &[&str], tree: &dyn FileTree, out: &mut dyn Write) -> Outcome {
    if files.is_empty() {
        return fail(
            out,
            format_args!("cat: reading standard input is not supported"),
        );
    }
    let mut outcome = Outcome::Ok;
    for f in files {
        match tree.read(tracefs_path(f), out) {
            Ok(()) => {}
            Err(Errno::ENOENT) => {
                outcome = fail(
                    out,
                    format_args!("cat: can't open '{f}': {}", Errno::ENOENT),
                )
            }
            Err(e) => outcome = fail(out, format_args!("cat: read error: {e}")),
        }
    }
    outcome
}

/// `mkdir DIR...` / `rmdir DIR...`: `op` on each directory, busybox's message on failure.
fn dirs(
    names: &[&str],
    out: &mut dyn Write,
    mut op: impl FnMut(&str) -> Result<(), alloc::string::String>,
) -> Outcome {
    if names.is_empty() {
        return fail(out, format_args!("usage: mkdir|rmdir DIR..."));
    }
    let mut outcome = Outcome::Ok;
    for d in names {
        if let Err(msg) = op(tracefs_path(d)) {
            outcome = fail(out, format_args!("{msg}"));
        }
    }
    outcome
}

/// `xxd -p FILE`: the file's bytes as plain hex, 32 bytes a line (for binary files).
fn xxd(files: &[&str], tree: &dyn FileTree, out: &mut dyn Write) -> Outcome {
    let [f] = files else {
        return fail(out, format_args!("usage: xxd FILE"));
    };
    match tree.read_bytes(tracefs_path(f)) {
        Ok(bytes) => {
            for line in bytes.chunks(32) {
                for b in line {
                    let _ = write!(out, "{b:02x}");
                }
                let _ = out.write_str("\n");
            }
            Outcome::Ok
        }
        Err(e) => fail(out, format_args!("xxd: {f}: {e}")),
    }
}

fn ls(dirs: &[&str], tree: &dyn FileTree, out: &mut dyn Write) -> Outcome {
    let dirs: &[&str] = if dirs.is_empty() { &[""] } else { dirs };
    let mut outcome = Outcome::Ok;
    for d in dirs {
        if let Err(e) = tree.list(tracefs_path(d), out) {
            outcome = fail(out, format_args!("ls: {d}: {e}"));
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::RefCell;
    use std::string::String;
    use std::vec::Vec;

    #[test]
    fn words_quotes_and_redirections() {
        let mut w = [""; MAX_WORDS];
        let n = split_words("echo 'bm_*'  bm_leaf>>set_ftrace_filter", &mut w).unwrap();
        assert_eq!(
            &w[..n],
            &["echo", "bm_*", "bm_leaf", ">>", "set_ftrace_filter"]
        );
        let n = split_words("echo \"a b\" > f", &mut w).unwrap();
        assert_eq!(&w[..n], &["echo", "a b", ">", "f"]);
        assert!(split_words("echo 'oops", &mut w).is_err());
        assert_eq!(tracefs_path("/sys/kernel/tracing/trace"), "trace");
        assert_eq!(tracefs_path("./options/"), "options");
    }

    /// A two-file tree: `current_tracer` (accepts nop/function) and `trace` (read-only).
    struct Tree {
        tracer: RefCell<String>,
        writes: RefCell<Vec<(String, WriteMode)>>,
    }

    impl FileTree for Tree {
        fn list(&self, dir: &str, out: &mut dyn Write) -> Result<(), Errno> {
            if !dir.is_empty() {
                return Err(Errno::ENOENT);
            }
            out.write_str("current_tracer\ntrace\n").unwrap();
            Ok(())
        }
        fn read(&self, path: &str, out: &mut dyn Write) -> Result<(), Errno> {
            match path {
                "current_tracer" => writeln!(out, "{}", self.tracer.borrow()).unwrap(),
                "trace" => out.write_str("# tracer: nop\n").unwrap(),
                _ => return Err(Errno::ENOENT),
            }
            Ok(())
        }
        fn write(&self, path: &str, data: &str, mode: WriteMode) -> Result<(), Errno> {
            self.writes.borrow_mut().push((data.into(), mode));
            match (path, data.trim()) {
                ("current_tracer", t @ ("nop" | "function")) => {
                    *self.tracer.borrow_mut() = t.into();
                    Ok(())
                }
                ("current_tracer", _) | ("trace", _) => Err(Errno::EINVAL),
                _ => Err(Errno::ENOENT),
            }
        }
    }

    struct NoBuiltins;
    impl Builtins for NoBuiltins {
        fn run(&mut self, argv: &[&str], out: &mut dyn Write) -> Option<Outcome> {
            (argv[0] == "hello").then(|| {
                out.write_str("hi\n").unwrap();
                Outcome::Ok
            })
        }
    }

    fn session(lines: &[&str]) -> (String, Shell, Tree) {
        let tree = Tree {
            tracer: RefCell::new("nop".into()),
            writes: RefCell::new(Vec::new()),
        };
        let mut sh = Shell::new();
        let mut out = String::new();
        for l in lines {
            sh.execute(l, &tree, &mut NoBuiltins, &mut out);
        }
        (out, sh, tree)
    }

    #[test]
    fn session_routes_commands_and_reports_errors_like_busybox() {
        let (out, sh, tree) = session(&[
            "ls",
            "cat current_tracer",
            "echo function > /sys/kernel/tracing/current_tracer",
            "cat current_tracer trace",
            "echo bogus > current_tracer",
            "echo -n x >> trace",
            "cat nothing",
            "frobnicate",
            "hello",
            "echo plain words",
        ]);
        assert_eq!(
            out,
            "current_tracer\ntrace\nnop\nfunction\n# tracer: nop\n\
             sh: write error: Invalid argument\nsh: write error: Invalid argument\n\
             cat: can't open 'nothing': No such file or directory\nsh: frobnicate: not found\n\
             hi\nplain words\n"
        );
        assert_eq!(sh.commands, 10);
        assert_eq!(sh.failures, 4);
        let writes = tree.writes.borrow();
        assert_eq!(writes[0], ("function\n".into(), WriteMode::Truncate));
        assert_eq!(writes[2], ("x".into(), WriteMode::Append));
    }

    #[test]
    fn line_editor_handles_crlf_and_backspace() {
        let mut sh = Shell::new();
        let mut echo = String::new();
        let mut done = Vec::new();
        for &b in b"cax\x7ft\r\nls\n" {
            if sh.feed(b, &mut echo) {
                let mut buf = [0; 512];
                let n = sh.take_line(&mut buf);
                done.push(String::from_utf8(buf[..n].to_vec()).unwrap());
            }
        }
        assert_eq!(done, ["cat", "ls"]);
        assert_eq!(echo, "cax\x08 \x08t\nls\n");
    }
}
