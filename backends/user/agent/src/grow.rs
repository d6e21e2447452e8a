//! Rings that grow while the program runs: the tool offers, the thread moves when the tool
//! falls behind.
//!
//! A streamed recording's drainer makes, for each thread's ring, a ring file four times the
//! size beside it, `grow-<tid>.<bytes>` ([`crate::buffer::grow_file_name`]: sized, not
//! reserved: its pages are allocated as the thread first writes them, so the tool makes them
//! only while their file system has ample room, a page it cannot allocate being a `SIGBUS`),
//! and offers it in the ring's header (its `grow` word,
//! [`ftrace_ringbuf::slot::SlotRing::offer_to_grow`], holding the new file's size). The
//! thread takes it when it finds the tool behind (less than a quarter of the ring left ahead of
//! it, [`ftrace_ringbuf::slot::SlotRing::behind`]): a tool that does not run for a while (its
//! CPU taken, a page fault, a slow write) cannot notice that itself, and the ring would be
//! full before it does. The thread looks where it reads the consumer's words anyway:
//!
//! - the assembly fast paths, when they find their copy of the limit passed (out of line; at
//!   least every eighth of the ring, so that they look while there is room): they set the
//!   thread's state to [`GROW`] (only from the plain registered state), so that its next
//!   event takes the handlers' path;
//! - the handlers, on every event (`asked`).
//!
//! The handler (`take`, with the thread's guard held) renames the file to the thread's next
//! `buf-<tid>.<n>`, maps it, writes there from then on, and answers in the old ring's `grow`
//! word ([`GROWN`]). The old ring keeps what was written before (and what a fast path
//! interrupted by the move still commits there), and the tool drains it, then finishes it
//! (frees its pages, removes the file); as after a resize ([`crate::resize`]), the readers
//! merge a thread's files by time. Nothing is dropped for a move, and the thread never waits
//! for the tool: a file that is not there (or not of the size offered) leaves the thread in
//! its ring.
//!
//! The old ring stays mapped, as after a resize: a fast path interrupted by a signal handler
//! that moves the thread may still be writing its event into it.

use core::sync::atomic::Ordering;

use ftrace_ringbuf::slot::GROWN;

use crate::handler::{INSTANCE, ThreadState};

/// The thread state a fast path sets when the tool offers a larger ring and is behind:
/// registered, and to move at its next handler.
pub const GROW: u32 = 4;

/// Bytes of the ring file offered to a ring of `capacity` slots that may grow to rings of
/// `max` bytes: four times the slots, at most what `max` holds, a power of two (the agent's
/// rings hold one); `None` when that is no larger (the tool's offers and the thread's own
/// are of this size).
pub fn offer_bytes(capacity: u64, max: u64) -> Option<u64> {
    use crate::buffer::{HEADER_SIZE, SLOT_SIZE};
    let (header, slot) = (HEADER_SIZE as u64, SLOT_SIZE as u64);
    let slots = capacity
        .saturating_mul(4)
        .min(max.saturating_sub(header) / slot);
    // The largest power of two that fits.
    let slots = if slots.is_power_of_two() {
        slots
    } else {
        slots.next_power_of_two() / 2
    };
    (slots > capacity).then_some(header + slots * slot)
}

/// Whether the calling (registered) thread is to move to the larger ring the tool offers: a
/// fast path said so, or the tool offers one and is behind
/// ([`ftrace_ringbuf::slot::SlotRing::behind`]).
#[inline]
pub(crate) fn asked(st: &ThreadState) -> bool {
    if st.state == GROW {
        return true;
    }
    // SAFETY: registered: the header is mapped for the life of the process.
    let header = unsafe { &(*st.writer.header).ring };
    let word = header.growth_offered();
    word != 0 && word != GROWN && header.behind()
}

/// Moves the calling (registered) thread to the larger ring the tool made for it, if it offers
/// one (`asked` said the thread is to move); the thread is in the plain registered state
/// afterwards. Called by the handlers with the thread's guard held.
#[cold]
#[inline(never)]
pub(crate) fn take(st: &mut ThreadState) {
    if st.state == GROW {
        st.state = 1;
    }
    // SAFETY: registered: the ring is mapped for the life of the process.
    let ring = unsafe { st.writer.ring() };
    let bytes = ring.growth_offered();
    if bytes == 0 || bytes == GROWN {
        return;
    }
    // Answered, whatever comes of it (0: not moved; the tool offers again after a while).
    ring.offer_to_grow(0);
    let inst = INSTANCE.load(Ordering::Acquire);
    let Ok(len) = usize::try_from(bytes) else {
        return;
    };
    if inst.is_null() || len < crate::buffer::HEADER_SIZE + crate::buffer::SLOT_SIZE {
        return;
    }
    // SAFETY: instances are leaked, never freed.
    let inst = unsafe { &*inst };
    if inst.overwrite {
        return;
    }
    let from = crate::buffer::grow_file_name(st.tid, bytes);
    // SAFETY: a file the tool made for this thread; the writer returned maps it.
    if let Some(w) = unsafe { crate::handler::adopt_ring_file(inst, &from, len) } {
        st.writer = w;
        // The next size offered at once, as the first ring's was.
        if let Ok(dir) = inst.ring_dir.to_str() {
            crate::handler::offer_itself(inst, dir, st.tid, &w);
        }
        // The tool may finish the old ring once drained.
        ring.grown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::{self, HEADER_SIZE, KIND_FUNC, SLOT_SIZE};
    use crate::handler;

    fn read_ring(path: &std::path::Path) -> buffer::Contents {
        buffer::read(&std::fs::read(path).unwrap()).unwrap()
    }

    /// A registered thread offered a larger ring takes it once the tool is behind: it moves
    /// to the file the tool made at its next handler, answers in the old ring, and writes the
    /// new one from then on; an offer whose file is missing or of another size leaves it in
    /// its ring, answered 0.
    #[test]
    fn a_thread_offered_a_larger_ring_moves_to_it_when_the_tool_is_behind() {
        // The instance is process-wide (see handler::PROCESS_SWITCHES).
        let _switches = handler::PROCESS_SWITCHES
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let dir = handler::install_test_instance("grow", 8, 0);
        // SAFETY: every field of a thread state is valid zeroed (integers, null pointers, an
        // atomic): what a thread's TLS block holds before it registers.
        let mut st: ThreadState = unsafe { core::mem::MaybeUninit::zeroed().assume_init() };
        assert!(handler::register(&mut st));
        let tid = st.tid;
        let write = |st: &ThreadState, from: u64, to: u64| {
            for i in from..to {
                // SAFETY: registered: the writer maps its ring.
                unsafe { st.writer.write(i, 0x1000 + i, 0, KIND_FUNC, 0, 0) };
            }
        };
        write(&st, 0, 2);
        assert!(!asked(&st));

        let big = HEADER_SIZE + 32 * SLOT_SIZE;
        // SAFETY: registered.
        unsafe { st.writer.ring() }.offer_to_grow(big as u64);
        assert!(!asked(&st), "6 of 8 slots ahead: the tool is not behind");
        write(&st, 2, 6);
        assert!(
            asked(&st),
            "2 of 8 slots ahead, less than a quarter: behind"
        );
        // No file yet: answered 0, the thread stays.
        let old = st.writer.header;
        take(&mut st);
        assert_eq!(st.writer.header, old);
        // SAFETY: as above.
        assert_eq!(unsafe { st.writer.ring() }.growth_offered(), 0);
        // A file of another size: removed, answered 0.
        let grow_file = dir.join(buffer::grow_file_name(tid, big as u64));
        std::fs::write(&grow_file, vec![0u8; big / 2]).unwrap();
        // SAFETY: as above.
        unsafe { st.writer.ring() }.offer_to_grow(big as u64);
        take(&mut st);
        assert_eq!(st.writer.header, old);
        assert!(!grow_file.exists() && !dir.join(format!("buf-{tid}.1")).exists());
        // A file offered for another ring (the thread's own next, four times larger) is not
        // this offer's: answered 0, and the file stays.
        let next_file = dir.join(buffer::grow_file_name(tid, 4 * big as u64));
        std::fs::write(&next_file, vec![0u8; 4 * big]).unwrap();
        // SAFETY: as above.
        unsafe { st.writer.ring() }.offer_to_grow(big as u64);
        take(&mut st);
        assert_eq!(st.writer.header, old);
        assert_eq!(std::fs::metadata(&next_file).unwrap().len(), 4 * big as u64);
        std::fs::remove_file(&next_file).unwrap();

        // The tool's file: the thread moves, by a handler or (state GROW, set by a fast path)
        // by `register`.
        std::fs::write(&grow_file, vec![0u8; big]).unwrap();
        // SAFETY: as above.
        let old_ring = unsafe { st.writer.ring() };
        old_ring.offer_to_grow(big as u64);
        st.state = GROW;
        assert!(asked(&st));
        assert!(handler::register(&mut st));
        assert_eq!(st.state, 1);
        assert_ne!(st.writer.header, old);
        assert_eq!(old_ring.growth_offered(), GROWN, "answered in the old ring");
        assert!(!asked(&st));
        write(&st, 6, 46);
        let before = read_ring(&dir.join(format!("buf-{tid}")));
        let after = read_ring(&dir.join(format!("buf-{tid}.1")));
        let ts = |c: &buffer::Contents| c.events.iter().map(|e| e.ts).collect::<Vec<_>>();
        assert_eq!(ts(&before), (0..6).collect::<Vec<_>>());
        // 32 slots: 40 events, 8 dropped and counted.
        assert_eq!(ts(&after), (6..38).collect::<Vec<_>>());
        assert_eq!(after.dropped, 8);
        assert_eq!((after.tid, after.pid), (before.tid, before.pid));

        INSTANCE.store(core::ptr::null_mut(), Ordering::Release);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// With rings that may grow (the instance's `grow_max`), a thread's first ring comes with
    /// its own offer (`grow-<tid>.<bytes>`, four times the slots), the ring it moves to with
    /// the next (four times again, at most the maximum), and the ring at the maximum with
    /// none.
    #[test]
    fn a_thread_offers_itself_each_next_ring() {
        // The instance is process-wide (see handler::PROCESS_SWITCHES).
        let _switches = handler::PROCESS_SWITCHES
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let max = HEADER_SIZE + 128 * SLOT_SIZE;
        let dir = handler::install_test_instance("grow-itself", 8, max as u64);
        // SAFETY: a zeroed thread state is what a thread's TLS block holds before it
        // registers (see the test above).
        let mut st: ThreadState = unsafe { core::mem::MaybeUninit::zeroed().assume_init() };
        assert!(handler::register(&mut st));
        // The offer word, and the files offered: (name, bytes).
        let offered = |st: &ThreadState| {
            // SAFETY: registered: the writer maps its ring.
            let word = unsafe { st.writer.ring() }.growth_offered();
            (word, handler::offered_files(&dir))
        };
        let tid = st.tid;
        let offer = |bytes: u64| vec![(buffer::grow_file_name(tid, bytes), bytes)];
        let write = |st: &ThreadState, n: u64| {
            for i in 0..n {
                // SAFETY: registered: the writer maps its ring.
                unsafe { st.writer.write(i, 0x1000 + i, 0, KIND_FUNC, 0, 0) };
            }
        };
        let ring_32 = (HEADER_SIZE + 32 * SLOT_SIZE) as u64;
        assert_eq!(
            offered(&st),
            (ring_32, offer(ring_32)),
            "the first ring's offer"
        );
        // 6 of 8 written: behind; the thread moves, and offers itself the next.
        write(&st, 6);
        assert!(asked(&st));
        take(&mut st);
        assert_eq!(st.writer.mask + 1, 32);
        assert_eq!(
            offered(&st),
            (max as u64, offer(max as u64)),
            "the next, at the maximum"
        );
        // 24 of 32 written: behind; the thread moves to the largest ring, which offers none.
        write(&st, 24);
        assert!(asked(&st));
        take(&mut st);
        assert_eq!(st.writer.mask + 1, 128);
        assert_eq!(offered(&st), (0, vec![]));
        INSTANCE.store(core::ptr::null_mut(), Ordering::Release);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
