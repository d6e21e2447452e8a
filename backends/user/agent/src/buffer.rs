//! Per-thread event buffers: one file-backed ring per thread, the format the `ftrace` tool reads.
//!
//! Why not `ftrace-ringbuf` pages here: every event a userspace thread writes is one of three
//! fixed-size kinds, and the assembly fast paths (`tramp.rs`) must reserve and commit with a
//! couple of instructions and no call. A fixed-slot ring does that with one `xadd` and one
//! store; the kernel's page format (variable-length events, time deltas, page commits) is
//! written by the `ftrace` tool when it turns a recording into `trace_pipe_raw` pages or a
//! trace.dat, with `ftrace-ringbuf`'s writer. The contract this ring keeps is the ring buffer's:
//! writers of one buffer are strictly nested (one buffer per thread; a signal handler nests
//! inside the thread it interrupts), a writer never locks, allocates or blocks, and every lost
//! event is counted.
//!
//! How: a writer reserves its slot with ONE non-locked `xadd` on `head` (a signal can only land
//! before or after it, so nested writers get distinct slots), fills the slot, and writes the
//! slot's `kind` word last. `kind` carries the lap parity of the slot index, so a reader tells a
//! committed slot of the current lap from a stale one of the previous lap or an unfinished one
//! (a process killed mid-write). The buffer is a `MAP_SHARED` mapping of a file in the
//! recording directory, so committed events survive `_exit()`, a fatal signal or SIGKILL with
//! no flush. Lost events are exact: `head - capacity` when `head > capacity` (overwritten in
//! overwrite mode, dropped otherwise), plus slots a reader finds uncommitted.

use core::sync::atomic::{AtomicU64, Ordering, compiler_fence};

/// `"FTRACEUB"`: the first bytes of every buffer file.
pub const MAGIC: [u8; 8] = *b"FTRACEUB";
/// The buffer-file format version.
pub const VERSION: u32 = 1;
/// Bytes before the first slot (one page: the header).
pub const HEADER_SIZE: usize = 4096;
/// Bytes per slot.
pub const SLOT_SIZE: usize = 32;

/// A `function` event: `arg` is the parent ip.
pub const KIND_FUNC: u32 = 1;
/// A `funcgraph_entry` event: `arg` is the parent ip.
pub const KIND_GRAPH_ENT: u32 = 2;
/// A `funcgraph_exit` event: `arg` is the call time.
pub const KIND_GRAPH_RET: u32 = 3;
/// Bit of the kind word holding the lap parity.
pub const KIND_LAP_BIT: u32 = 1 << 7;
/// Mask of the kind in the kind word.
pub const KIND_MASK: u32 = 0x7f;

/// The header at the start of every buffer file.
#[derive(Debug)]
#[repr(C)]
pub struct BufHeader {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`VERSION`].
    pub version: u32,
    /// [`SLOT_SIZE`].
    pub slot_size: u32,
    /// Slots in the ring (a power of two).
    pub capacity: u64,
    /// Slots reserved so far (monotonic; reserved with a non-locked `xadd`).
    pub head: AtomicU64,
    /// 1: the oldest events are overwritten when full; 0: new events are dropped.
    pub overwrite: u32,
    /// The process id.
    pub pid: u32,
    /// The thread id.
    pub tid: u32,
    /// Reserved (0).
    pub reserved: u32,
    /// The thread's name when its buffer was created (NUL-padded).
    pub comm: [u8; 16],
}

/// One recorded event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Slot {
    /// Timestamp (raw TSC, or ns for the `mono` clock).
    pub ts: u64,
    /// The traced function (its entry address).
    pub ip: u64,
    /// Parent ip ([`KIND_FUNC`], [`KIND_GRAPH_ENT`]) or call time ([`KIND_GRAPH_RET`]).
    pub arg: u64,
    /// Kind (low 7 bits), lap parity (bit 7), depth (bits 8..32).
    pub kind: u32,
    /// The CPU the thread ran on (rseq `cpu_id_start`).
    pub cpu: u32,
}

const _: () = assert!(core::mem::size_of::<Slot>() == SLOT_SIZE);
const _: () = assert!(core::mem::size_of::<BufHeader>() <= HEADER_SIZE);

impl Slot {
    /// The event kind.
    pub fn kind(&self) -> u32 {
        self.kind & KIND_MASK
    }

    /// The call depth.
    pub fn depth(&self) -> u32 {
        self.kind >> 8
    }
}

/// The lap parity bit expected for slot number `index` of a ring of `1 << shift` slots.
#[inline(always)]
pub fn lap_bit(index: u64, shift: u32) -> u32 {
    (((index >> shift) & 1) as u32) << 7
}

/// A writer's view of one buffer (what a thread's state caches).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Writer {
    /// The header.
    pub header: *mut BufHeader,
    /// The first slot.
    pub slots: *mut Slot,
    /// `capacity - 1`.
    pub mask: u64,
    /// `log2(capacity)`.
    pub shift: u32,
    /// 1 in overwrite mode.
    pub overwrite: u32,
    /// The highest slot index that may be written: `u64::MAX` in overwrite mode, `mask`
    /// otherwise (one compare decides "dropped" on the fast paths).
    pub limit: u64,
}

impl Writer {
    /// Records one event. Signal-safe: may be interrupted by, and nest, another `write` on the
    /// same buffer.
    ///
    /// # Safety
    /// `self` must describe a live mapping laid out as this module says, written only by the
    /// current thread (and signal handlers running on it).
    #[inline(always)]
    pub unsafe fn write(&self, ts: u64, ip: u64, arg: u64, kind: u32, depth: u32, cpu: u32) {
        // SAFETY: the header is live (caller's contract); `head` is a plain u64 in memory
        // shared only with nested writers of this thread.
        let index = unsafe { reserve(&(*self.header).head) };
        if index > self.limit {
            return; // dropped: counted as head - capacity
        }
        // SAFETY: `index & mask` is below the capacity the mapping holds.
        let slot = unsafe { self.slots.add((index & self.mask) as usize) };
        // SAFETY: as above; the slot is ours alone until the next lap.
        unsafe {
            (*slot).ts = ts;
            (*slot).ip = ip;
            (*slot).arg = arg;
            (*slot).cpu = cpu;
            compiler_fence(Ordering::Release);
            core::ptr::write_volatile(
                &raw mut (*slot).kind,
                kind | lap_bit(index, self.shift) | (depth << 8),
            );
        }
    }
}

/// Reserves one slot: a single non-locked `xadd`, atomic with respect to signal handlers on the
/// same thread (the only other writers), and cheaper than a locked instruction.
#[inline(always)]
unsafe fn reserve(head: &AtomicU64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let mut v: u64 = 1;
        // SAFETY: `head` is a valid u64; xadd without lock is one instruction, so a signal
        // handler running on this thread sees the counter before or after it, never torn.
        unsafe {
            core::arch::asm!(
                "xadd qword ptr [{p}], {v}",
                p = in(reg) head.as_ptr(),
                v = inout(reg) v,
                options(nostack, preserves_flags)
            );
        }
        v
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        head.fetch_add(1, Ordering::Relaxed)
    }
}

/// What a reader gets from one buffer file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents {
    /// The process id.
    pub pid: u32,
    /// The thread id.
    pub tid: u32,
    /// The thread name.
    pub comm: String,
    /// Committed events, oldest first.
    pub events: Vec<Slot>,
    /// Events lost to overwriting (overwrite mode).
    pub overrun: u64,
    /// Events dropped because the buffer was full (no-overwrite mode), or found uncommitted.
    pub dropped: u64,
    /// Events reserved in total.
    pub entries_written: u64,
}

/// A malformed buffer file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError(pub &'static str);

impl core::fmt::Display for FormatError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "bad buffer file: {}", self.0)
    }
}

impl std::error::Error for FormatError {}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(b[off..off + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().unwrap())
}

/// Decodes a buffer file's bytes.
pub fn read(bytes: &[u8]) -> Result<Contents, FormatError> {
    if bytes.len() < HEADER_SIZE || bytes[..8] != MAGIC {
        return Err(FormatError("no header"));
    }
    if u32_at(bytes, 8) != VERSION || u32_at(bytes, 12) as usize != SLOT_SIZE {
        return Err(FormatError("version"));
    }
    let cap = u64_at(bytes, 16);
    if !cap.is_power_of_two() || (bytes.len() - HEADER_SIZE) / SLOT_SIZE < cap as usize {
        return Err(FormatError("capacity"));
    }
    let shift = cap.trailing_zeros();
    let head = u64_at(bytes, 24);
    let overwrite = u32_at(bytes, 32) != 0;
    let comm_raw = &bytes[48..64];
    let comm_len = comm_raw.iter().position(|&b| b == 0).unwrap_or(16);
    let mut c = Contents {
        pid: u32_at(bytes, 36),
        tid: u32_at(bytes, 40),
        comm: String::from_utf8_lossy(&comm_raw[..comm_len]).into_owned(),
        entries_written: head,
        ..Contents::default()
    };
    let (first, last) = if overwrite {
        c.overrun = head.saturating_sub(cap);
        (head.saturating_sub(cap), head)
    } else {
        c.dropped = head.saturating_sub(cap);
        (0, head.min(cap))
    };
    for index in first..last {
        let off = HEADER_SIZE + ((index & (cap - 1)) as usize) * SLOT_SIZE;
        let s = Slot {
            ts: u64_at(bytes, off),
            ip: u64_at(bytes, off + 8),
            arg: u64_at(bytes, off + 16),
            kind: u32_at(bytes, off + 24),
            cpu: u32_at(bytes, off + 28),
        };
        let valid = (s.kind & KIND_LAP_BIT) == lap_bit(index, shift)
            && matches!(s.kind(), KIND_FUNC | KIND_GRAPH_ENT | KIND_GRAPH_RET);
        if valid {
            c.events.push(s);
        } else {
            c.dropped += 1;
        }
    }
    Ok(c)
}

/// Initialises a freshly mapped buffer of `len` bytes and returns its writer and capacity.
///
/// # Safety
/// `base` must point to `len` writable, zero-filled bytes, `len >= HEADER_SIZE + SLOT_SIZE`.
pub unsafe fn init(
    base: *mut u8,
    len: usize,
    overwrite: bool,
    pid: u32,
    tid: u32,
    comm: &[u8],
) -> Writer {
    let slots = (len - HEADER_SIZE) / SLOT_SIZE;
    let cap = if slots.is_power_of_two() {
        slots
    } else {
        slots.next_power_of_two() / 2
    } as u64;
    let h = base.cast::<BufHeader>();
    // SAFETY: `base` is valid for the header (caller's contract) and suitably aligned (page).
    unsafe {
        (*h).version = VERSION;
        (*h).slot_size = SLOT_SIZE as u32;
        (*h).capacity = cap;
        (*h).overwrite = u32::from(overwrite);
        (*h).pid = pid;
        (*h).tid = tid;
        let n = comm.len().min(15);
        (&mut (*h).comm)[..n].copy_from_slice(&comm[..n]);
        compiler_fence(Ordering::Release);
        (*h).magic = MAGIC;
    }
    Writer {
        header: h,
        // SAFETY: HEADER_SIZE < len.
        slots: unsafe { base.add(HEADER_SIZE) }.cast(),
        mask: cap - 1,
        shift: cap.trailing_zeros(),
        overwrite: u32::from(overwrite),
        limit: if overwrite { u64::MAX } else { cap - 1 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(slots: usize, overwrite: bool) -> (Vec<u64>, Writer) {
        let len = HEADER_SIZE + slots * SLOT_SIZE;
        let mut mem = vec![0u64; len / 8];
        // SAFETY: `mem` is zeroed, 8-aligned and `len` bytes long.
        let w = unsafe { init(mem.as_mut_ptr().cast(), len, overwrite, 7, 8, b"worker") };
        (mem, w)
    }

    fn bytes(mem: &[u64]) -> Vec<u8> {
        mem.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    #[test]
    fn overwrite_keeps_newest_and_counts_overrun() {
        let (mem, w) = ring(8, true);
        for i in 0..21u64 {
            // SAFETY: `w` describes `mem`, alive for the loop.
            unsafe { w.write(100 + i, i, 0, KIND_FUNC, 0, 1) };
        }
        let c = read(&bytes(&mem)).unwrap();
        assert_eq!(c.pid, 7);
        assert_eq!(c.tid, 8);
        assert_eq!(c.comm, "worker");
        assert_eq!(c.overrun, 13);
        assert_eq!(c.dropped, 0);
        let ips: Vec<u64> = c.events.iter().map(|s| s.ip).collect();
        assert_eq!(ips, (13..21).collect::<Vec<_>>());
    }

    #[test]
    fn no_overwrite_drops_newest() {
        let (mem, w) = ring(8, false);
        for i in 0..11u64 {
            // SAFETY: as above.
            unsafe { w.write(i, i, 0, KIND_GRAPH_ENT, 3, 0) };
        }
        let c = read(&bytes(&mem)).unwrap();
        assert_eq!(c.dropped, 3);
        assert_eq!(c.events.len(), 8);
        assert_eq!(c.events[0].depth(), 3);
        assert_eq!(c.events[7].ip, 7);
    }

    #[test]
    fn uncommitted_slot_is_counted_not_read() {
        let (mut mem, w) = ring(8, true);
        for i in 0..10u64 {
            // SAFETY: as above.
            unsafe { w.write(i, i, 0, KIND_FUNC, 0, 0) };
        }
        // A writer killed after reserving slot 10 (lap 1): its slot still holds lap 0's event.
        // SAFETY: the header is live.
        unsafe { (*w.header).head.store(11, Ordering::Relaxed) };
        let c = read(&bytes(&mem)).unwrap();
        assert_eq!(c.overrun, 3);
        assert_eq!(c.dropped, 1);
        assert_eq!(c.events.len(), 7);
        mem[0] = 0;
        assert!(read(&bytes(&mem)).is_err());
    }

    #[test]
    fn nested_writer_gets_its_own_slot() {
        // A "signal handler" write between the outer writer's reservation and its commit.
        let (mem, w) = ring(8, true);
        // SAFETY: the header is live.
        let outer = unsafe { reserve(&(*w.header).head) };
        // SAFETY: as above.
        unsafe { w.write(5, 0xbb, 0, KIND_FUNC, 0, 0) };
        // SAFETY: the outer writer finishes its slot the way `write` does.
        unsafe {
            let s = w.slots.add(outer as usize);
            (*s).ts = 4;
            (*s).ip = 0xaa;
            (*s).kind = KIND_FUNC | lap_bit(outer, w.shift);
        }
        let c = read(&bytes(&mem)).unwrap();
        let ips: Vec<u64> = c.events.iter().map(|s| s.ip).collect();
        assert_eq!(ips, vec![0xaa, 0xbb]);
    }
}
