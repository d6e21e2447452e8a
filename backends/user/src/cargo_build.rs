//! `ftrace record --cargo[=ARGS]`: builds the Rust crate in the current directory with the
//! instrumentation flags and traces the binary it makes, so a Rust user needs no incantation.
//!
//! The build is `cargo build --message-format=json-render-diagnostics ARGS` with
//! `-Zpatchable-function-entry=5` added to `RUSTFLAGS` (`RUSTC_BOOTSTRAP=1`: the flag is
//! unstable on stable rustc) in a target directory of its own, `<target dir>/ftrace`, so the
//! crate's normal builds (and the agent, which must never carry the flag) keep their artifacts
//! and are not rebuilt. Only the crate's own code and its dependencies get call sites; the
//! standard library is precompiled without them. The binary is the one executable artifact the
//! build reports: a crate with several binaries needs `--bin NAME` (or `--example NAME`) in
//! ARGS, as `cargo run` does.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The flag that puts a 5-byte NOP at every function entry.
const PATCHABLE: &str = "-Zpatchable-function-entry=5";

/// Builds the crate of `dir` with `cargo build ARGS` (ARGS split on whitespace) and the
/// instrumentation flags; returns the executable it made. The build's diagnostics go to the
/// tool's stderr as cargo renders them.
pub fn build(dir: &Path, args: &str) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = target_dir(&cargo, dir)?.join("ftrace");
    let rustflags = match std::env::var("RUSTFLAGS") {
        Ok(f) if !f.trim().is_empty() => format!("{f} {PATCHABLE}"),
        _ => PATCHABLE.to_string(),
    };
    let out = Command::new(&cargo)
        .current_dir(dir)
        .args(["build", "--message-format=json-render-diagnostics"])
        .args(args.split_whitespace())
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTFLAGS", rustflags)
        .env("CARGO_TARGET_DIR", &target)
        // `CARGO_ENCODED_RUSTFLAGS` would win over RUSTFLAGS.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("{} failed ({})", shown(args), out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut exes: Vec<PathBuf> = text.lines().filter_map(executable).collect();
    exes.dedup();
    match exes.len() {
        1 => Ok(exes.remove(0)),
        0 => Err(format!(
            "{} made no executable (a library crate? give --cargo='--bin NAME')",
            shown(args)
        )),
        _ => Err(format!(
            "{} made {} executables ({}): say which with --cargo='--bin NAME'",
            shown(args),
            exes.len(),
            exes.iter()
                .map(|e| e.file_name().unwrap_or_default().to_string_lossy())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The build command as the user would type it.
fn shown(args: &str) -> String {
    let args = args.split_whitespace().collect::<Vec<_>>().join(" ");
    if args.is_empty() {
        "cargo build".to_string()
    } else {
        format!("cargo build {args}")
    }
}

/// The crate's target directory (`cargo metadata`: honours `CARGO_TARGET_DIR` and config).
fn target_dir(cargo: &std::ffi::OsStr, dir: &Path) -> Result<PathBuf, String> {
    let out = Command::new(cargo)
        .current_dir(dir)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed ({}): is {} inside a cargo project?",
            out.status,
            dir.display()
        ));
    }
    json_string(&String::from_utf8_lossy(&out.stdout), "target_directory")
        .map(PathBuf::from)
        .ok_or_else(|| "cargo metadata gave no target_directory".to_string())
}

/// The `executable` of a `compiler-artifact` message, if it has one.
fn executable(line: &str) -> Option<PathBuf> {
    if json_string(line, "reason")? != "compiler-artifact" {
        return None;
    }
    json_string(line, "executable").map(PathBuf::from)
}

/// The string value of the first `"key":"..."` in a JSON text (`null` and other types: none),
/// with its escapes undone. Enough for cargo's messages, whose keys here are unique.
fn json_string(text: &str, key: &str) -> Option<String> {
    let pat = format!("\"{key}\":\"");
    let start = text.find(&pat)? + pat.len();
    let mut out = String::new();
    let mut chars = text[start..].chars();
    loop {
        match chars.next()? {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                c => out.push(c),
            },
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_executable_of_an_artifact_message() {
        let line = r#"{"reason":"compiler-artifact","package_id":"x","target":{"kind":["bin"]},"executable":"/t/ftrace/debug/my \"app\"","fresh":false}"#;
        assert_eq!(
            executable(line),
            Some(PathBuf::from("/t/ftrace/debug/my \"app\""))
        );
        let lib = r#"{"reason":"compiler-artifact","executable":null,"fresh":true}"#;
        assert_eq!(executable(lib), None);
        let done = r#"{"reason":"build-finished","success":true}"#;
        assert_eq!(executable(done), None);
    }

    #[test]
    fn json_strings_undo_escapes() {
        assert_eq!(
            json_string(r#"{"a":"x\\y\u0041\n"}"#, "a").as_deref(),
            Some("x\\yA\n")
        );
        assert_eq!(json_string(r#"{"a":1}"#, "a"), None);
    }
}
