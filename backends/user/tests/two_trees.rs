//! Two traced trees at once, each with its tracefs mounted (`ftrace record --mount`), must not
//! interfere, and every process of each must be accounted for.
//!
//! Each tree is a shell that waits for its own mount, then, while a background job forks
//! short-lived processes (command substitutions, pipelines, `true`, and an instrumented
//! program, `tests/programs/stream_calls.c`, whose exec'd images wait for the tree's state),
//! writes `trace_marker` events of a sub-buffer's size (4080 to 32752 bytes at
//! `buffer_subbuf_size_kb` 4, 8, 16 and 32, as the kernel's `ringbuffer_subbuf_size.tc`) made
//! of its own letter, and reads each back whole from `trace`. Checked: every marker write is
//! taken and reads back (a foreign piece or a refused write fails it), no process of either
//! tree is refused at its tool's control socket, and every agent start of the tree (one
//! `<pid>.<n>` directory each in the recording) is counted once by its tool: registered, or
//! gone before it could be (exited, or exec'd and registered anew), with at least every
//! exec'd image of the instrumented program registered. Bounded: the trees' run is killed
//! after [`RUN_LIMIT`].

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the two trees may run before the test gives up on them.
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// Rounds of the four marker sizes per tree.
const ROUNDS: u32 = 2;

/// Iterations of the background job's forks per tree (each runs the instrumented program
/// once).
const FORKS: u32 = 30;

fn scratch() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ftrace-two-trees");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The tree's shell script: `sh tree.sh MNT PROG LETTER`.
const TREE_SH: &str = r#"
mnt=$1; prog=$2; letter=$3
while [ ! -e "$mnt/available_tracers" ]; do sleep 0.05; done
cd "$mnt" || exit 1
(
    i=0
    while [ $i -lt FORKS ]; do
        x=$(echo $i | sed s/1/2/)
        /bin/true
        "$prog" 1 10 1 > /dev/null || echo "forks: $prog failed" >&2
        i=$((i+1))
    done
) &
ok=0
for round in $(seq ROUNDS); do
    for kb in 4 8 16 32; do
        echo $kb > buffer_subbuf_size_kb || echo "buffer_subbuf_size_kb $kb: write failed" >&2
        size=$((kb*1024-16))
        str=`printf -- "$letter%.0s" $(seq $size)`
        echo > trace || echo "trace: clear failed" >&2
        if ! echo $str > trace_marker; then
            echo "trace_marker: write of $size bytes failed (round $round)" >&2
            continue
        fi
        back=`awk ' /tracing_mark_write:/ { sub(/^.*tracing_mark_write: /,""); printf "%s", $0; }' trace`
        if [ "$back" = "$str" ]; then
            ok=$((ok+1))
        else
            echo "trace: the $size-byte marker read back as ${#back} bytes (round $round)" >&2
        fi
    done
done
wait
# As ringbuffer_subbuf_size.tc leaves it (a capture of markers bigger than a 4 KiB page is
# not written yet: the tool's end-of-run capture has 4 KiB pages).
echo 4 > buffer_subbuf_size_kb
echo > trace
echo "markers read back: $ok"
"#;

/// One tree: its tool, running `sh tree.sh` with its mount.
struct Tree {
    letter: char,
    dir: PathBuf,
    tool: Child,
}

impl Tree {
    fn start(scratch: &Path, prog: &Path, letter: char) -> Tree {
        let dir = scratch.join(format!("tree-{letter}"));
        std::fs::create_dir_all(dir.join("mnt")).unwrap();
        let script = TREE_SH
            .replace("FORKS", &FORKS.to_string())
            .replace("ROUNDS", &ROUNDS.to_string());
        std::fs::write(dir.join("tree.sh"), script).unwrap();
        // Output to files: a pipe nobody reads could fill and stop the tool.
        let tool = Command::new(env!("CARGO_BIN_EXE_ftrace"))
            .current_dir(&dir)
            .args(["record", "-t", "function", "--mount"])
            .arg(dir.join("mnt"))
            .arg("-o")
            .arg(dir.join("rec"))
            .args(["--", "sh"])
            .arg(dir.join("tree.sh"))
            .arg(dir.join("mnt"))
            .arg(prog)
            .arg(letter.to_string())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("stdout")).unwrap())
            .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
            .spawn()
            .unwrap();
        Tree { letter, dir, tool }
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// The agent starts of the recording: one `<pid>.<n>` directory each, and how many of
    /// them ran `exe_name`.
    fn agent_starts(&self, exe_name: &str) -> (u64, u64) {
        let mut all = 0;
        let mut of_exe = 0;
        for e in std::fs::read_dir(self.dir.join("rec")).unwrap() {
            let p = e.unwrap().path();
            let Ok(meta) = std::fs::read_to_string(p.join("meta")) else {
                continue;
            };
            all += 1;
            let exe = meta
                .lines()
                .find_map(|l| l.strip_prefix("exe="))
                .unwrap_or_default();
            if Path::new(exe).file_name().is_some_and(|n| n == exe_name) {
                of_exe += 1;
            }
        }
        (all, of_exe)
    }
}

/// The tool's count of the tree's processes besides the first: (registered, gone first).
fn registrations(stderr: &str) -> (u64, u64) {
    let Some(line) = stderr
        .lines()
        .find(|l| l.contains("more processes of the tree registered;"))
    else {
        return (0, 0);
    };
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    (nums[0], nums[1])
}

#[test]
fn two_mounted_trees_at_once_neither_loses_a_marker_nor_refuses_a_process() {
    let scratch = scratch();
    let prog = common::build_stream_calls(&scratch);
    let mut trees = [
        Tree::start(&scratch, &prog, 'A'),
        Tree::start(&scratch, &prog, 'B'),
    ];
    let start = Instant::now();
    let mut status = [None, None];
    while status.iter().any(Option::is_none) {
        for (t, st) in trees.iter_mut().zip(&mut status) {
            if st.is_none() {
                *st = t.tool.try_wait().unwrap();
            }
        }
        if start.elapsed() > RUN_LIMIT {
            for t in &mut trees {
                // SAFETY: signalling our own child (it unmounts and passes the signal on).
                unsafe { libc::kill(t.tool.id() as libc::pid_t, libc::SIGTERM) };
                let _ = t.tool.wait();
            }
            panic!(
                "the trees did not finish within {RUN_LIMIT:?}: {}",
                scratch.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for (t, st) in trees.iter().zip(status) {
        let (out, err) = (t.read("stdout"), t.read("stderr"));
        let what = format!("tree {}: {st:?}\n{out}\n{err}", t.letter);
        assert!(st.unwrap().success(), "{what}");
        // Every marker taken and read back whole, in its own tree.
        assert_eq!(
            out.trim(),
            format!("markers read back: {}", 4 * ROUNDS),
            "{what}"
        );
        for bad in ["failed", "I/O error", "read back as", "refused"] {
            assert!(!err.contains(bad), "{bad:?}: {what}");
        }
        // Every agent start counted once: the first process, then the others, registered or
        // gone before they could be; every image of the instrumented program registered (it
        // waits for the tree's state before its main).
        let (registered, gone) = registrations(&err);
        let (starts, images) = t.agent_starts("stream_calls");
        assert_eq!(1 + registered + gone, starts, "{what}");
        assert_eq!(images, u64::from(FORKS), "{what}");
        assert!(registered >= images, "{what}");
    }
}
