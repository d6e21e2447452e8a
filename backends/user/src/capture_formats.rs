//! The trace events of a capture beside ftrace's own: one `events/<system>/<name>/format` file
//! per event of a system other than `ftrace` (a program's events, declared with
//! `ftrace/tracepoint.h`; a kernel capture's `sched`...), written from the field tables
//! ([`TraceEventFormat`]) and read back into them, so that a reader of the capture's pages
//! (`ftrace report`, the exporters) decodes and prints those records without the program.
//!
//! Invariant: reading gives back the table that was written (name, id, every field's type,
//! name, array, offset, size and sign, the print format), and a file that is not a format
//! (no `name:`/`ID:` line, a field line that does not parse) is an error naming the file and
//! line, never an event with a guessed layout. The tables read are leaked (a reader reads a
//! capture's formats once; their size is the files').

use std::path::{Path, PathBuf};

use ftrace_core::format::{Field, FieldArray, TraceEventFormat};

/// The system whose formats are ftrace's internal ones (`events/ftrace/`), not read here.
const FTRACE_SYSTEM: &str = "ftrace";

/// The largest number of event formats a capture may hold (each is a file of its own).
pub const MAX_FORMATS: usize = 65_536;

/// Writes `events/<system>/<name>/format` for each of `formats` into the capture at `dir`.
pub fn write(dir: &Path, formats: &[TraceEventFormat]) -> Result<(), String> {
    for f in formats {
        let d = dir.join("events").join(f.system).join(f.name);
        std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        let path = d.join("format");
        std::fs::write(&path, f.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Reads every `events/<system>/<name>/format` of the capture at `dir` whose system is not
/// `ftrace`, in path order (none when there is no `events/` directory).
pub fn read(dir: &Path) -> Result<Vec<TraceEventFormat>, String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let events = dir.join("events");
    let Ok(systems) = std::fs::read_dir(&events) else {
        return Ok(Vec::new());
    };
    let mut paths: Vec<(String, PathBuf)> = Vec::new();
    for sys in systems.flatten() {
        let Some(system) = sys.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if system == FTRACE_SYSTEM || !sys.path().is_dir() {
            continue;
        }
        for ev in std::fs::read_dir(sys.path())
            .map_err(|e| io(&sys.path(), e))?
            .flatten()
        {
            let path = ev.path().join("format");
            if path.is_file() {
                paths.push((system.clone(), path));
            }
            if paths.len() > MAX_FORMATS {
                return Err(format!(
                    "{}: more than {MAX_FORMATS} event formats",
                    events.display()
                ));
            }
        }
    }
    paths.sort();
    let mut out = Vec::with_capacity(paths.len());
    for (system, path) in paths {
        let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
        let f = parse(&system, &text)
            .map_err(|(line, why)| format!("{}: line {line}: {why}", path.display()))?;
        out.push(f);
    }
    Ok(out)
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

/// Parses one `format` file of `system` (the kernel's `f_show` text: name, ID, the common
/// fields, a blank line, the event's fields, a blank line, `print fmt:`); the error is the
/// 1-based line and what is wrong with it.
pub fn parse(system: &str, text: &str) -> Result<TraceEventFormat, (usize, &'static str)> {
    let mut name = None;
    let mut id = None;
    let mut print_fmt = None;
    let mut fields = Vec::new();
    // The common fields come first, up to the first blank line.
    let mut in_common = true;
    for (n, line) in text.lines().enumerate() {
        let at = n + 1;
        if let Some(v) = line.strip_prefix("name: ") {
            name = Some(v.trim());
        } else if let Some(v) = line.strip_prefix("ID: ") {
            id = Some(v.trim().parse::<u16>().map_err(|_| (at, "bad ID"))?);
        } else if let Some(v) = line.strip_prefix("print fmt: ") {
            print_fmt = Some(v);
        } else if line.trim().is_empty() {
            if name.is_some() {
                in_common = false;
            }
        } else if let Some(f) = line.trim_start().strip_prefix("field:") {
            let field = parse_field(f).ok_or((at, "not a field line"))?;
            if !in_common {
                fields.push(field);
            }
        } else if line != "format:" {
            return Err((at, "not a format line"));
        }
    }
    let name = name.ok_or((1, "no \"name:\" line"))?;
    let ok = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
    if !ok(name) {
        return Err((1, "not an event name"));
    }
    Ok(TraceEventFormat {
        system: leak(system),
        name: leak(name),
        id: id.ok_or((2, "no \"ID:\" line"))?,
        fields: Box::leak(fields.into_boxed_slice()),
        print_fmt: leak(print_fmt.unwrap_or("")),
    })
}

/// `<type> <name>[N];\toffset:O;\tsize:S;\tsigned:B;` (after `field:`).
fn parse_field(f: &str) -> Option<Field> {
    let mut parts = f.split(';').map(str::trim);
    let decl = parts.next()?;
    let mut num = |key: &str| -> Option<u32> { parts.next()?.strip_prefix(key)?.parse().ok() };
    let (offset, size, signed) = (num("offset:")?, num("size:")?, num("signed:")?);
    let (c_type, name) = decl.rsplit_once(' ')?;
    let (name, array) = match name.split_once('[') {
        Some((n, rest)) => match rest.strip_suffix(']')? {
            "" => (n, FieldArray::Dynamic),
            len => (n, FieldArray::Fixed(len.parse().ok()?)),
        },
        None => (name, FieldArray::Scalar),
    };
    // A field the records cannot hold (the largest record is a page).
    offset.checked_add(size).filter(|&end| end <= 1 << 20)?;
    Some(Field {
        c_type: leak(c_type.trim()),
        name: leak(name),
        array,
        offset,
        size,
        signed: match signed {
            0 => false,
            1 => true,
            _ => return None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIELDS: &[Field] = &[
        Field {
            c_type: "unsigned long",
            name: "value",
            array: FieldArray::Scalar,
            offset: 8,
            size: 8,
            signed: false,
        },
        Field {
            c_type: "int",
            name: "delta",
            array: FieldArray::Scalar,
            offset: 16,
            size: 4,
            signed: true,
        },
        Field {
            c_type: "char",
            name: "label",
            array: FieldArray::Fixed(16),
            offset: 20,
            size: 16,
            signed: false,
        },
    ];

    fn demo() -> TraceEventFormat {
        TraceEventFormat {
            system: "demo",
            name: "demo_value",
            id: 1024,
            fields: FIELDS,
            print_fmt: "\"value=%lu delta=%d label=%s\", REC->value, REC->delta, REC->label",
        }
    }

    #[test]
    fn written_formats_read_back_the_same() {
        let dir = std::env::temp_dir().join(format!("ftrace-capfmt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write(&dir, &[demo()]).unwrap();
        // ftrace's own formats are not this module's.
        let f = dir.join("events/ftrace/function");
        std::fs::create_dir_all(&f).unwrap();
        std::fs::write(f.join("format"), "name: function\nID: 1\n").unwrap();
        assert_eq!(read(&dir).unwrap(), vec![demo()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn damaged_formats_name_the_line() {
        let text = demo().to_string();
        assert_eq!(parse("demo", &text), Ok(demo()));
        let bad = text.replace("offset:16;", "offset:x;");
        assert_eq!(parse("demo", &bad), Err((10, "not a field line")));
        assert_eq!(
            parse("demo", &text.replace("ID: 1024", "ID: 70000")),
            Err((2, "bad ID"))
        );
        assert_eq!(parse("demo", "hello\n"), Err((1, "not a format line")));
        assert_eq!(
            parse("demo", &text.replace("name: demo_value\n", "")),
            Err((1, "no \"name:\" line"))
        );
        let huge = text.replace("size:16;", "size:4294967295;");
        assert!(parse("demo", &huge).is_err());
    }
}
