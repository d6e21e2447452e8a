//! `tracing_thresh`: the kernel's parsing (`tracing_nsecs_write`: `kstrtoul` base 10, one
//! trailing newline, microseconds stored as nanoseconds), read-back in microseconds, the
//! backend told in nanoseconds, bad writes refused with `EINVAL` (`ERANGE` past `u64`) changing nothing, and the file
//! only at the top level.

mod common;

use common::{cat, echo, tracefs};
use ftrace_core::Errno;
use ftrace_tracefs::WriteMode;

#[test]
fn thresh_parses_reads_back_and_reaches_the_backend() {
    let mut fs = tracefs();
    assert_eq!(cat(&mut fs, "tracing_thresh").unwrap(), "0\n");
    echo(&mut fs, "20", "tracing_thresh").unwrap();
    assert_eq!(cat(&mut fs, "tracing_thresh").unwrap(), "20\n");
    let params = fs.host().state(None).borrow().params.clone();
    assert!(
        params.contains(&"TracingThresh(20000)".to_owned()),
        "{params:?}"
    );
    // A leading '+' is kstrtoul's, and a write without the newline is as good.
    fs.write_all("tracing_thresh", b"+7", WriteMode::Truncate)
        .unwrap();
    assert_eq!(cat(&mut fs, "tracing_thresh").unwrap(), "7\n");
    for (bad, errno) in [
        ("abc", Errno::EINVAL),
        ("-1", Errno::EINVAL),
        (" 5", Errno::EINVAL),
        ("5 us", Errno::EINVAL),
        ("0x10", Errno::EINVAL),
        ("", Errno::EINVAL),
        // kstrtoul's overflow.
        ("18446744073709551616", Errno::ERANGE),
    ] {
        assert_eq!(echo(&mut fs, bad, "tracing_thresh"), Err(errno), "{bad:?}");
        assert_eq!(cat(&mut fs, "tracing_thresh").unwrap(), "7\n", "{bad:?}");
    }
    echo(&mut fs, "0", "tracing_thresh").unwrap();
    assert_eq!(cat(&mut fs, "tracing_thresh").unwrap(), "0\n");
}

#[test]
fn thresh_is_top_level_only() {
    let mut fs = tracefs();
    fs.mkdir("instances/foo").unwrap();
    assert!(cat(&mut fs, "instances/foo/tracing_thresh").is_err());
}
