//! The generated `events/ftrace/*/format`, `header_page` and `header_event` texts are
//! byte-identical to Linux 6.12.117's.

use ftrace_core::format::{self, FORMATS};
use ftrace_integration_tests::{reference_dir, reference_file};

fn text(f: impl FnOnce(&mut String) -> std::fmt::Result) -> String {
    let mut s = String::new();
    f(&mut s).unwrap();
    s
}

#[test]
fn every_ftrace_event_format_matches_the_kernel() {
    let dir = reference_dir().join("02-files");
    let mut golden: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("events__ftrace__") && n.ends_with("__format.txt"))
        .collect();
    golden.sort();
    assert_eq!(
        golden.len(),
        18,
        "the reference has 18 ftrace event formats"
    );
    let mut ours: Vec<&str> = FORMATS.iter().map(|f| f.name).collect();
    ours.sort();
    let theirs: Vec<&str> = golden
        .iter()
        .map(|n| &n["events__ftrace__".len()..n.len() - "__format.txt".len()])
        .collect();
    assert_eq!(ours, theirs, "the same set of events");
    for name in theirs {
        let expected = reference_file(&format!("02-files/events__ftrace__{name}__format.txt"));
        let fmt = format::by_name(name).unwrap();
        let got = text(|s| fmt.write_to(s));
        assert_eq!(
            got,
            String::from_utf8(expected).unwrap(),
            "format of {name}"
        );
    }
}

#[test]
fn header_page_matches_the_kernel() {
    let got = text(|s| format::write_header_page(s, 4096));
    assert_eq!(
        got.as_bytes(),
        reference_file("02-files/events__header_page.txt")
    );
    assert_eq!(
        got.as_bytes(),
        reference_file("06-raw-function/events__header_page.txt")
    );
}

#[test]
fn header_event_matches_the_kernel() {
    let got = text(format::write_header_event);
    assert_eq!(
        got.as_bytes(),
        reference_file("02-files/events__header_event.txt")
    );
}
