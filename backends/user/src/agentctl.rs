//! The tool's end of the agent's live control channel ([`ftrace_agent::control`]): a unix
//! socket the tool listens on, which the agent connects to when the program starts.
//!
//! Invariant: every request gets exactly one answer or an error (the program exited, the agent
//! did not answer within [`ANSWER_TIMEOUT`]); after an unanswered request the link refuses
//! every later one (`ENODEV`), so that a late answer is never taken for another request's.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use ftrace_agent::control::Wanted;
use ftrace_core::Errno;

/// How long a request may take (a stop-the-world batch waits up to 10 s for threads).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// One call site as the agent lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteLine {
    /// The patched address.
    pub addr: u64,
    /// Whether it is enabled now.
    pub enabled: bool,
    /// The object it lies in.
    pub module: String,
    /// The function's name.
    pub name: String,
}

/// A counted function command's remaining count as the agent reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeLine {
    /// The probed site.
    pub addr: u64,
    /// The command's name (`traceoff`).
    pub cmd: String,
    /// What is left of its count.
    pub count: i64,
}

/// The process at the other end of a unix socket (`SO_PEERCRED`).
pub(crate) fn peer_pid(sock: &UnixStream) -> std::io::Result<u32> {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed ucred is valid; getsockopt fills it and its length.
    unsafe {
        let mut cred: libc::ucred = core::mem::zeroed();
        let mut len = core::mem::size_of::<libc::ucred>() as libc::socklen_t;
        if libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(cred.pid as u32)
    }
}

/// A connected agent.
pub struct AgentLink {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// A request went unanswered: a late answer would be taken for the next one's.
    broken: bool,
    /// The traced process.
    pub pid: u32,
    /// The thread that forked it, for a child that carries its parent's state (`None`: an
    /// image that started the agent itself).
    pub forked_by: Option<u32>,
    /// Its instance directory.
    pub dir: PathBuf,
}

impl AgentLink {
    /// Waits for the agent of `child` to connect to `listener` (and say hello). Fails when the
    /// program exits first or nothing connects within `timeout`.
    pub fn accept(
        listener: &UnixListener,
        child: &mut Child,
        timeout: Duration,
    ) -> Result<AgentLink, String> {
        let pid = child.id();
        Self::accept_from(listener, pid, timeout, || {
            child.try_wait().ok().flatten().map(|st| {
                format!(
                    "the program exited ({st}) before the agent started (is it built with call sites, and the agent loaded?)"
                )
            })
        })
    }

    /// Waits for the agent of process `pid` to connect to `listener` (and say hello); `gone`
    /// says why to stop waiting (the process exited), else `None`.
    pub fn accept_from(
        listener: &UnixListener,
        pid: u32,
        timeout: Duration,
        mut gone: impl FnMut() -> Option<String>,
    ) -> Result<AgentLink, String> {
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("control socket: {e}"))?;
        let start = Instant::now();
        let sock = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(format!("control socket: {e}")),
            }
            if let Some(why) = gone() {
                return Err(why);
            }
            if start.elapsed() > timeout {
                return Err("the agent did not connect to the control socket".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        // Only the program we started may drive it.
        let peer = peer_pid(&sock).map_err(|e| format!("control socket: {e}"))?;
        if peer != pid {
            return Err(format!(
                "control socket: a process other than the program ({peer}) connected"
            ));
        }
        Self::greeted(sock)
    }

    /// The link over `sock`, a connection the tool accepted, once its agent said hello.
    pub fn greeted(sock: UnixStream) -> Result<AgentLink, String> {
        sock.set_nonblocking(false)
            .and_then(|()| sock.set_read_timeout(Some(ANSWER_TIMEOUT)))
            .map_err(|e| format!("control socket: {e}"))?;
        let writer = sock
            .try_clone()
            .map_err(|e| format!("control socket: {e}"))?;
        let mut reader = BufReader::new(sock);
        let mut hello = String::new();
        reader
            .read_line(&mut hello)
            .map_err(|e| format!("control socket: {e}"))?;
        let mut it = hello.trim_end().splitn(4, ' ');
        let (Some("HELLO"), Some(pid), Some(parent), Some(dir)) =
            (it.next(), it.next(), it.next(), it.next())
        else {
            return Err(format!("control socket: unexpected greeting {hello:?}"));
        };
        let parent: u32 = parent
            .parse()
            .map_err(|_| format!("bad parent thread in {hello:?}"))?;
        Ok(AgentLink {
            reader,
            writer,
            broken: false,
            pid: pid.parse().map_err(|_| format!("bad pid in {hello:?}"))?,
            forked_by: (parent != 0).then_some(parent),
            dir: PathBuf::from(dir),
        })
    }

    /// Whether the link is gone (the process exited or exec'd, or a request went
    /// unanswered): every request is refused from then on.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    fn line(&mut self) -> Result<String, Errno> {
        let mut s = String::new();
        match self.reader.read_line(&mut s) {
            Ok(0) => {
                self.broken = true;
                Err(Errno::ENODEV)
            }
            Ok(_) => Ok(s.trim_end_matches('\n').to_string()),
            Err(_) => {
                self.broken = true;
                Err(Errno::EIO)
            }
        }
    }

    fn send(&mut self, req: &[u8]) -> Result<(), Errno> {
        if self.broken {
            return Err(Errno::ENODEV);
        }
        self.writer.write_all(req).map_err(|_| {
            self.broken = true;
            Errno::ENODEV
        })
    }

    /// Lists the call sites.
    pub fn sites(&mut self) -> Result<Vec<SiteLine>, Errno> {
        self.send(b"SITES\n")?;
        let mut v = Vec::new();
        loop {
            let l = self.line()?;
            if l == "." {
                return Ok(v);
            }
            let mut it = l.splitn(4, '\t');
            let (Some(a), Some(e), Some(m), Some(n)) = (it.next(), it.next(), it.next(), it.next())
            else {
                return Err(Errno::EIO);
            };
            v.push(SiteLine {
                addr: u64::from_str_radix(a, 16).map_err(|_| Errno::EIO)?,
                enabled: e == "1",
                module: m.to_string(),
                name: n.to_string(),
            });
        }
    }

    /// Reads back what the program's function commands changed: its `tracing_on` and the
    /// remaining count of every counted probe.
    pub fn probes(&mut self) -> Result<(bool, Vec<ProbeLine>), Errno> {
        self.send(b"PROBES\n")?;
        let first = self.line()?;
        let on = match first.strip_prefix("ON ") {
            Some(v) => v == "1",
            None => return Err(Errno::EIO),
        };
        let mut v = Vec::new();
        loop {
            let l = self.line()?;
            if l == "." {
                return Ok((on, v));
            }
            let mut it = l.splitn(3, '\t');
            let (Some(a), Some(c), Some(n)) = (it.next(), it.next(), it.next()) else {
                return Err(Errno::EIO);
            };
            v.push(ProbeLine {
                addr: u64::from_str_radix(a, 16).map_err(|_| Errno::EIO)?,
                cmd: c.to_string(),
                count: n.parse().map_err(|_| Errno::EIO)?,
            });
        }
    }

    /// Lists the trace events the program declares (`EVENTS`).
    pub fn events(&mut self) -> Result<Vec<ftrace_agent::event::EventInfo>, Errno> {
        self.send(b"EVENTS\n")?;
        let mut v = Vec::new();
        loop {
            let l = self.line()?;
            if l == "." {
                return Ok(v);
            }
            v.push(ftrace_agent::event::EventInfo::parse_line(&l).ok_or(Errno::EIO)?);
        }
    }

    /// Sets trace event `id`'s state in the program (`EVENT_SET`).
    pub fn set_event(
        &mut self,
        id: u16,
        config: &ftrace_agent::event_record::EventConfig,
    ) -> Result<(), Errno> {
        self.send(format!("EVENT_SET {id}\t{}\n", config.to_args()).as_bytes())?;
        self.answer().map(|_| ())
    }

    /// Trace event `id`'s hist tables as the program aggregates them (`EVENT_HIST`).
    pub fn event_hist(
        &mut self,
        id: u16,
    ) -> Result<Vec<ftrace_agent::event_record::HistDump>, Errno> {
        self.send(format!("EVENT_HIST {id}\n").as_bytes())?;
        let mut lines = Vec::new();
        loop {
            let l = self.line()?;
            if l == "." {
                break;
            }
            if lines.is_empty() && l.starts_with("ERR ") {
                return Err(Errno::ENODEV);
            }
            lines.push(l);
        }
        ftrace_agent::event_record::HistDump::parse_lines(lines.iter().map(String::as_str))
            .ok_or(Errno::EIO)
    }

    /// Empties hist table `n` of trace event `id` in the program (`EVENT_HIST_CLEAR`).
    pub fn clear_event_hist(&mut self, id: u16, n: usize) -> Result<(), Errno> {
        self.send(format!("EVENT_HIST_CLEAR {id} {n}\n").as_bytes())?;
        self.answer().map(|_| ())
    }

    /// The program's event pid lists and `event-fork` (`EVENT_PIDS`,
    /// [`ftrace_agent::event_pids`]).
    pub fn set_event_pids(
        &mut self,
        pids: &[u32],
        no_pids: &[u32],
        follow_fork: bool,
    ) -> Result<(), Errno> {
        let args = ftrace_agent::event_pids::to_args(pids, no_pids, follow_fork);
        self.send(format!("EVENT_PIDS {args}\n").as_bytes())?;
        self.answer().map(|_| ())
    }

    /// Trace event `id`'s soft-disabled bit and trigger counts in the program (`EVENT_GET`).
    pub fn event_state(&mut self, id: u16) -> Result<(bool, Vec<i64>), Errno> {
        self.send(format!("EVENT_GET {id}\n").as_bytes())?;
        let l = self.line()?;
        let Some(rest) = l.strip_prefix("OK ") else {
            return Err(Errno::ENODEV);
        };
        let (soft, counts) = rest.split_once(' ').ok_or(Errno::EIO)?;
        let counts = match counts {
            "-" => Vec::new(),
            c => c
                .split(',')
                .map(|n| n.parse().map_err(|_| Errno::EIO))
                .collect::<Result<_, _>>()?,
        };
        Ok((soft == "1", counts))
    }

    /// Asks every thread of the program to move to a ring file of `bytes` bytes
    /// (`ftrace_agent::resize`).
    pub fn resize(&mut self, bytes: u64) -> Result<(), Errno> {
        self.send(format!("RESIZE {bytes}\n").as_bytes())?;
        self.answer().map(|_| ())
    }

    /// Reads an `OK <n>` / `ERR <errno> <text>` answer.
    fn answer(&mut self) -> Result<usize, Errno> {
        let l = self.line()?;
        if let Some(n) = l.strip_prefix("OK ") {
            return n.trim().parse().map_err(|_| Errno::EIO);
        }
        let code = l
            .strip_prefix("ERR ")
            .and_then(|r| r.split(' ').next())
            .and_then(|c| c.parse::<i32>().ok())
            .unwrap_or(libc::EIO);
        Err(Errno(code))
    }

    /// Asks for the whole state `w`; returns the number of site writes.
    pub fn set_state(&mut self, w: &Wanted) -> Result<usize, Errno> {
        let mut req = w.to_request();
        req.push('\n');
        self.send(req.as_bytes())?;
        self.answer()
    }
}
