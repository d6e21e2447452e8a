//! The tracefs tree served through FUSE (the `fuser` crate): `ftrace record --mount DIR`.
//!
//! [`TracefsFs`] turns FUSE requests into calls on one [`Tracefs`] behind a lock: paths get
//! inode numbers on first lookup, every file is opened `direct_io` (reads and writes reach the
//! tree as the program made them, at their offsets, with no page cache), `O_TRUNC` arrives with
//! the open (`atomic_o_trunc`), and errors are the tree's errno. A read of a consuming file
//! (`trace_pipe`, `trace_pipe_raw`) with nothing to read is parked, not answered: a waiter
//! thread retries it every [`POLL`] and answers when data arrives, or `EINTR` when the reader
//! has a signal pending (FUSE interrupts are not delivered by fuser, so the reader's pending
//! signals are read from `/proc`). `O_NONBLOCK` readers get `EAGAIN` at once.
//!
//! [`mount`] mounts with `fusermount3` (the `fuse3` package) and `auto_unmount`: the helper
//! stays beside the tool and unmounts if the tool dies by any means, so no stale mount
//! outlives it, even on SIGKILL. The file system type is `fuse.tracefs`, the source `tracefs`,
//! access is the mounting user's only (no `allow_other`), and modes are tracefs's owner bits
//! (`0640` files show `0600`, directories `0700`). Invariant: a [`Mount`] unmounts when
//! dropped, whatever path the tool takes out; readers still blocked then get end of file.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use ftrace_core::Errno;
use ftrace_tracefs::tree::Node;
use ftrace_tracefs::{Fh, Host, OpenFlags, Tracefs};
use fuser::{
    BackgroundSession, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, OpenFlags as FuseOpenFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, SessionACL,
    WriteFlags,
};

use crate::livefs::CALLER_PID;

/// How often parked reads are retried.
pub const POLL: Duration = Duration::from_millis(20);

const TTL: Duration = Duration::from_secs(0);

fn errno(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.0)
}

/// Path <-> inode numbers (1 is the root, path "").
#[derive(Default)]
struct Inodes {
    paths: Vec<String>,
    by_path: HashMap<String, u64>,
}

impl Inodes {
    fn new() -> Self {
        let mut i = Inodes::default();
        i.intern("");
        i
    }

    fn intern(&mut self, path: &str) -> u64 {
        if let Some(&n) = self.by_path.get(path) {
            return n;
        }
        self.paths.push(path.to_string());
        let n = self.paths.len() as u64;
        self.by_path.insert(path.to_string(), n);
        n
    }

    fn path(&self, ino: INodeNo) -> Option<&str> {
        self.paths
            .get((ino.0 as usize).checked_sub(1)?)
            .map(String::as_str)
    }
}

fn join(parent: &str, name: &OsStr) -> String {
    let name = name.to_string_lossy();
    if parent.is_empty() {
        name.into_owned()
    } else {
        format!("{parent}/{name}")
    }
}

struct Inner<H: Host> {
    tree: Tracefs<H>,
    inodes: Inodes,
}

/// A read waiting for data.
struct Parked {
    fh: Fh,
    offset: u64,
    size: u32,
    pid: u32,
    reply: ReplyData,
}

/// The FUSE file system over a tracefs tree.
pub struct TracefsFs<H: Host + Send + 'static> {
    inner: Arc<Mutex<Inner<H>>>,
    parked: Arc<Mutex<Vec<Parked>>>,
    closing: Arc<AtomicBool>,
    uid: u32,
    gid: u32,
    start: SystemTime,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `tid` has a signal pending that it does not block (its read must end).
fn signal_pending(tid: u32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return true; // gone
    };
    let field = |k: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    (field("SigPnd:") | field("ShdPnd:")) & !field("SigBlk:") != 0
}

impl<H: Host + Send + 'static> TracefsFs<H> {
    /// Serves `tree`; starts the thread that retries parked reads.
    pub fn new(tree: Tracefs<H>) -> Self {
        let fs = TracefsFs {
            inner: Arc::new(Mutex::new(Inner {
                tree,
                inodes: Inodes::new(),
            })),
            parked: Arc::new(Mutex::new(Vec::new())),
            closing: Arc::new(AtomicBool::new(false)),
            // SAFETY: no preconditions.
            uid: unsafe { libc::getuid() },
            // SAFETY: no preconditions.
            gid: unsafe { libc::getgid() },
            start: SystemTime::now(),
        };
        let inner = Arc::downgrade(&fs.inner);
        let parked = Arc::downgrade(&fs.parked);
        let closing = fs.closing.clone();
        std::thread::Builder::new()
            .name("tracefs-poll".into())
            .spawn(move || {
                while let (Some(inner), Some(parked)) = (inner.upgrade(), parked.upgrade()) {
                    retry_parked(&inner, &parked, closing.load(Ordering::Acquire));
                    drop((inner, parked));
                    std::thread::sleep(POLL);
                }
            })
            .expect("spawning the poll thread");
        fs
    }

    /// The tree (the tool reads the current tracer at exit).
    pub fn with_tree<R>(&self, f: impl FnOnce(&mut Tracefs<H>) -> R) -> R {
        f(&mut lock(&self.inner).tree)
    }

    fn attr(&self, ino: u64, node: Node, mode: u16) -> FileAttr {
        let (kind, nlink) = match node {
            Node::Dir(_) => (FileType::Directory, 2),
            Node::File(_) => (FileType::RegularFile, 1),
        };
        FileAttr {
            ino: INodeNo(ino),
            size: 0,
            blocks: 0,
            atime: self.start,
            mtime: self.start,
            ctime: self.start,
            crtime: self.start,
            kind,
            // tracefs's modes, owner bits only: the mount is the owner's alone.
            perm: mode & 0o700,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    fn entry(&self, path: &str, reply: ReplyEntry) {
        let mut g = lock(&self.inner);
        match g.tree.stat(path) {
            Ok(st) => {
                let ino = g.inodes.intern(path);
                drop(g);
                reply.entry(&TTL, &self.attr(ino, st.node, st.mode), Generation(0));
            }
            Err(e) => reply.error(errno(e)),
        }
    }
}

/// Retries the parked reads; `closing`: the program is gone, so what is not there now never
/// will be: an empty read is end of file.
fn retry_parked<H: Host>(inner: &Mutex<Inner<H>>, parked: &Mutex<Vec<Parked>>, closing: bool) {
    let waiting: Vec<Parked> = std::mem::take(&mut *lock(parked));
    if waiting.is_empty() {
        return;
    }
    let mut still = Vec::new();
    for p in waiting {
        let mut g = lock(inner);
        CALLER_PID.store(p.pid, Ordering::Relaxed);
        let mut buf = vec![0u8; p.size as usize];
        match g.tree.read(p.fh, p.offset, &mut buf) {
            Ok(n) => p.reply.data(&buf[..n]),
            Err(Errno::EAGAIN) => {
                drop(g);
                if closing {
                    p.reply.data(&[]);
                } else if signal_pending(p.pid) {
                    p.reply.error(fuser::Errno::EINTR);
                } else {
                    still.push(p);
                }
            }
            Err(e) => p.reply.error(errno(e)),
        }
    }
    lock(parked).extend(still);
}

impl<H: Host + Send + 'static> Filesystem for TracefsFs<H> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // `echo x > file` must reach the tree as one open with O_TRUNC.
        let _ = config.add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let path = match lock(&self.inner).inodes.path(parent) {
            Some(p) => join(p, name),
            None => return reply.error(fuser::Errno::ENOENT),
        };
        self.entry(&path, reply);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let g = lock(&self.inner);
        let Some(path) = g.inodes.path(ino) else {
            return reply.error(fuser::Errno::ENOENT);
        };
        match g.tree.stat(path) {
            Ok(st) => {
                drop(g);
                reply.attr(&TTL, &self.attr(ino.0, st.node, st.mode))
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if mode.is_some() || uid.is_some() || gid.is_some() {
            return reply.error(fuser::Errno::EPERM);
        }
        let mut g = lock(&self.inner);
        let Some(path) = g.inodes.path(ino).map(str::to_string) else {
            return reply.error(fuser::Errno::ENOENT);
        };
        if size.is_some() {
            if let Err(e) = g.tree.truncate(&path) {
                return reply.error(errno(e));
            }
        }
        match g.tree.stat(&path) {
            Ok(st) => {
                drop(g);
                reply.attr(&TTL, &self.attr(ino.0, st.node, st.mode))
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let mut g = lock(&self.inner);
        let Some(path) = g.inodes.path(parent).map(|p| join(p, name)) else {
            return reply.error(fuser::Errno::ENOENT);
        };
        CALLER_PID.store(req.pid(), Ordering::Relaxed);
        let r = g.tree.mkdir(&path);
        drop(g);
        match r {
            Ok(()) => self.entry(&path, reply),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut g = lock(&self.inner);
        let Some(path) = g.inodes.path(parent).map(|p| join(p, name)) else {
            return reply.error(fuser::Errno::ENOENT);
        };
        match g.tree.rmdir(&path) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        // tracefs creates nothing: the tree answers a missing name opened with O_CREAT.
        let mut g = lock(&self.inner);
        let Some(path) = g.inodes.path(parent).map(|p| join(p, name)) else {
            return reply.error(fuser::Errno::ENOENT);
        };
        match g
            .tree
            .open(&path, OpenFlags::from_linux(flags | libc::O_CREAT))
        {
            Ok(fh) => {
                let _ = g.tree.release(fh);
                reply.error(fuser::Errno::EEXIST)
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: FuseOpenFlags, reply: ReplyOpen) {
        let mut g = lock(&self.inner);
        let Some(path) = g.inodes.path(ino).map(str::to_string) else {
            return reply.error(fuser::Errno::ENOENT);
        };
        CALLER_PID.store(req.pid(), Ordering::Relaxed);
        match g.tree.open(&path, OpenFlags::from_linux(flags.0)) {
            Ok(fh) => {
                let consuming = g.tree.wait_key(fh).is_some();
                let mut f = FopenFlags::FOPEN_DIRECT_IO;
                if consuming {
                    f |= FopenFlags::FOPEN_NONSEEKABLE;
                }
                reply.opened(FileHandle(fh.0), f)
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: FuseOpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let fh = Fh(fh.0);
        let mut g = lock(&self.inner);
        CALLER_PID.store(req.pid(), Ordering::Relaxed);
        let mut buf = vec![0u8; size as usize];
        match g.tree.read(fh, offset, &mut buf) {
            Ok(n) => reply.data(&buf[..n]),
            Err(Errno::EAGAIN) => {
                let nonblock =
                    flags.0 & libc::O_NONBLOCK != 0 || g.tree.is_nonblocking(fh).unwrap_or(true);
                if nonblock {
                    reply.error(fuser::Errno::EAGAIN)
                } else if self.closing.load(Ordering::Acquire) {
                    reply.data(&[])
                } else {
                    drop(g);
                    lock(&self.parked).push(Parked {
                        fh,
                        offset,
                        size,
                        pid: req.pid(),
                        reply,
                    });
                }
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: FuseOpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut g = lock(&self.inner);
        CALLER_PID.store(req.pid(), Ordering::Relaxed);
        match g.tree.write(Fh(fh.0), offset, data) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: FuseOpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut g = lock(&self.inner);
        CALLER_PID.store(req.pid(), Ordering::Relaxed);
        // The close of a filter file publishes it; its error cannot reach close(2) through
        // FUSE (release is asynchronous), as with any FUSE file system.
        match g.tree.release(Fh(fh.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut g = lock(&self.inner);
        let Some(path) = g.inodes.path(ino).map(str::to_string) else {
            return reply.error(fuser::Errno::ENOENT);
        };
        let entries = match g.tree.read_dir(&path) {
            Ok(e) => e,
            Err(e) => return reply.error(errno(e)),
        };
        let mut all: Vec<(u64, FileType, String)> = vec![
            (ino.0, FileType::Directory, ".".into()),
            (ino.0, FileType::Directory, "..".into()),
        ];
        for e in entries {
            let p = if path.is_empty() {
                e.name.to_string()
            } else {
                format!("{path}/{}", e.name)
            };
            let kind = match e.node {
                Node::Dir(_) => FileType::Directory,
                Node::File(_) => FileType::RegularFile,
            };
            all.push((g.inodes.intern(&p), kind, e.name.into_owned()));
        }
        drop(g);
        for (i, (ino, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

/// Why FUSE cannot be used here, if it cannot.
pub fn fuse_unavailable() -> Option<String> {
    if std::fs::metadata("/dev/fuse").is_err() {
        return Some(
            "FUSE is not available: /dev/fuse does not exist (load the `fuse` kernel module; in a container, pass the device in)".into(),
        );
    }
    if fusermount().is_none() {
        return Some(
            "FUSE is not available: fusermount3 not found in PATH (install the `fuse3` package)"
                .into(),
        );
    }
    None
}

fn fusermount() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("fusermount3"))
        .find(|p| p.is_file())
}

/// Empties the calling thread's signal mask (in a child between fork and exec: the tool blocks
/// its stop signals, and a mask survives `exec`).
pub fn unblock_all_signals() {
    // SAFETY: sigemptyset/sigprocmask on a local set are async-signal-safe.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, core::ptr::null_mut());
    }
}

/// A mounted tree: unmounted when dropped.
pub struct Mount {
    dir: PathBuf,
    closing: Arc<AtomicBool>,
    helper: Option<Child>,
    commfd: Option<OwnedFd>,
    session: Option<BackgroundSession>,
}

/// Receives the `/dev/fuse` descriptor fusermount3 sends over `sock`.
fn receive_fd(sock: &OwnedFd) -> std::io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one descriptor's control message.
    let mut cbuf = [0u64; 8];
    // SAFETY: a zeroed msghdr is valid; the buffers outlive the call.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = core::mem::size_of_val(&cbuf);
    let n = loop {
        // SAFETY: `msg` describes valid buffers.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        break n;
    };
    if n <= 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "fusermount3 sent no descriptor",
        ));
    }
    // SAFETY: walking the control messages the kernel filled in.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if !c.is_null() && (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS
        {
            let fd = core::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
            return Ok(OwnedFd::from_raw_fd(fd));
        }
    }
    Err(std::io::Error::other("fusermount3 sent no descriptor"))
}

/// Why `dir` cannot take a tracefs mount now ([`fuse_unavailable`], or `dir` is not a
/// directory): [`mount`] checks it, and so does a run with `--mount` before it starts the program.
pub fn check_mount_point(dir: &Path) -> Result<(), String> {
    if let Some(why) = fuse_unavailable() {
        return Err(why);
    }
    if !dir.is_dir() {
        return Err(format!(
            "{}: not a directory (the mount point)",
            dir.display()
        ));
    }
    Ok(())
}

/// Mounts `fs` at `dir` (type `fuse.tracefs`, owner only, auto-unmounted if the tool dies).
pub fn mount<H: Host + Send + 'static>(fs: TracefsFs<H>, dir: &Path) -> Result<Mount, String> {
    check_mount_point(dir)?;
    let fm = fusermount().expect("checked");
    let closing = fs.closing.clone();
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the pair.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(format!("socketpair: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fresh descriptors, owned here.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let theirs_raw = theirs.as_raw_fd();
    let mut cmd = Command::new(&fm);
    cmd.arg("-q")
        .arg("-o")
        .arg("fsname=tracefs,subtype=tracefs,default_permissions,auto_unmount")
        .arg("--")
        .arg(dir)
        .env("_FUSE_COMMFD", theirs_raw.to_string())
        // Its own process group: the terminal's Ctrl-C is for the program and the tool.
        .process_group(0);
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            unblock_all_signals();
            let fl = libc::fcntl(theirs_raw, libc::F_GETFD);
            if fl < 0 || libc::fcntl(theirs_raw, libc::F_SETFD, fl & !libc::FD_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut helper = cmd.spawn().map_err(|e| format!("{}: {e}", fm.display()))?;
    drop(theirs);
    let dev = match receive_fd(&ours) {
        Ok(fd) => fd,
        Err(_) => {
            let st = helper.wait().map_err(|e| e.to_string())?;
            return Err(format!(
                "mounting {} with fusermount3 failed ({st}); see its message above",
                dir.display()
            ));
        }
    };
    let mut m = Mount {
        dir: dir.to_path_buf(),
        closing,
        helper: Some(helper),
        commfd: Some(ours),
        session: None,
    };
    let mut config = fuser::Config::default();
    config.acl = SessionACL::Owner;
    let session = fuser::Session::from_fd(fs, dev, SessionACL::Owner, config)
        .and_then(|s| s.spawn())
        .map_err(|e| format!("FUSE session at {}: {e}", dir.display()))?;
    m.session = Some(session);
    Ok(m)
}

impl Mount {
    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Unmounts (lazily: a process still inside keeps its files until it leaves) and waits for
    /// the session and the helper to end.
    pub fn unmount(mut self) {
        self.do_unmount();
    }

    fn do_unmount(&mut self) {
        if self.helper.is_none() {
            return;
        }
        // Blocked readers get end of file (their file stays usable until they close it: the
        // unmount is lazy for them).
        self.closing.store(true, Ordering::Release);
        // Closing our end makes the auto-unmount helper unmount and exit.
        drop(self.commfd.take());
        if let Some(mut h) = self.helper.take() {
            let _ = h.wait();
        }
        // Still there (the helper could not: busy, or it died): detach it lazily.
        if is_mounted(&self.dir) {
            if let Some(fm) = fusermount() {
                let _ = Command::new(fm)
                    .args(["-u", "-z", "-q", "--"])
                    .arg(&self.dir)
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status();
            }
        }
        // The session ends when the last file is closed; a process that keeps one open
        // (detached from the tree: nothing is mounted) does not hold the tool.
        if let Some(s) = self.session.take() {
            let t0 = std::time::Instant::now();
            while !s.guard.is_finished() && t0.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(10));
            }
            if s.guard.is_finished() {
                let _ = s.join();
            }
        }
    }
}

/// Whether a FUSE file system is mounted at `dir` (per `/proc/self/mountinfo`).
pub fn is_mounted(dir: &Path) -> bool {
    let Ok(dir) = dir.canonicalize() else {
        return false;
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    info.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let fstype = f.iter().position(|x| *x == "-").and_then(|i| f.get(i + 1));
        f.get(4).is_some_and(|m| Path::new(m) == dir)
            && fstype.is_some_and(|t| t.starts_with("fuse"))
    })
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.do_unmount();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inodes_are_stable_per_path() {
        let mut i = Inodes::new();
        assert_eq!(i.path(INodeNo(1)), Some(""));
        let a = i.intern("per_cpu/cpu0");
        let b = i.intern(&join("per_cpu", OsStr::new("cpu1")));
        assert_eq!(i.intern("per_cpu/cpu0"), a);
        assert_ne!(a, b);
        assert_eq!(i.path(INodeNo(b)), Some("per_cpu/cpu1"));
        assert_eq!(join("", OsStr::new("trace")), "trace");
        assert_eq!(i.path(INodeNo(0)), None);
        assert_eq!(i.path(INodeNo(99)), None);
    }

    #[test]
    fn pending_signals_are_read_from_proc() {
        // SAFETY: no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        assert!(!signal_pending(me));
        // A thread that does not exist has nothing left to wait for.
        assert!(signal_pending(u32::MAX >> 1));
        // A blocked pending signal does not end a read.
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: blocking SIGUSR2 in this thread only, then raising it at itself.
            unsafe {
                let mut set: libc::sigset_t = core::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGUSR2);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, core::ptr::null_mut());
                libc::syscall(
                    libc::SYS_tgkill,
                    libc::getpid(),
                    libc::gettid(),
                    libc::SIGUSR2,
                );
                tx.send(libc::gettid() as u32).unwrap();
                go_rx.recv().unwrap();
                let mut sig = 0;
                libc::sigwait(&set, &mut sig);
            }
        });
        let tid = rx.recv().unwrap();
        assert!(!signal_pending(tid), "blocked: not a reason to stop");
        go_tx.send(()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn nothing_fuse_is_mounted_at_the_root() {
        assert!(!is_mounted(Path::new("/")));
        assert!(!is_mounted(Path::new("/no/such/dir")));
    }
}
