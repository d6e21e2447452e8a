//! Trace events a C program declares with `ftrace/tracepoint.h` (backends/user/include): how
//! the agent finds them, turns them on and off, and records them into the thread's slot ring.
//!
//! Each declaration is a [`EventDesc`] in the program's data, listed by a pointer in the
//! object's `ftrace_events` section (relocated by the dynamic linker, read from the loaded
//! image like `__patchable_function_entries`). The agent gives every event found an id
//! ([`FIRST_ID`] on, in discovery order) and lists them to the tool (the control channel's
//! `EVENTS`). An event is on exactly while its descriptor's `probe` word holds
//! [`record_event`](crate::event_record::record_event): the call site `trace_<name>()` loads
//! that word and branches over the record when it is NULL (one load and a not-taken branch
//! while off; no jump label: the C side would need `asm goto` sites in a section of its own
//! and the agent's patch protocol for them, which the one load does not). What runs then
//! (filter, triggers, the write) is [`crate::event_record`].
//!
//! A record is the kernel's: `struct trace_entry` (8 bytes, filled by the reader from the
//! thread: type = the id, pid = the thread id) then the fields. It is written as one span of
//! slots ([`ftrace_ringbuf::slot::SlotRing::write_span`]): a [`KIND_EVENT`] head (`ip`: the
//! id and the payload length, `arg`: the first 8 payload bytes) then [`KIND_EVENT_DATA`]
//! slots of [`DATA_PER_SLOT`] payload bytes each (`ts`, `ip`, `arg` and `cpu` carry them),
//! numbered in their kind word's upper bits. Invariant: a reader assembles a record only from
//! a head and exactly the data slots that follow it with the numbers 1, 2, ...
//! ([`assemble`]); anything else is a lost event, never a wrong record.

use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::ffi::{CStr, c_char};
use std::sync::Mutex;

use ftrace_core::format::{Field, FieldArray, TraceEventFormat};
use ftrace_ringbuf::slot::SlotEvent;

use crate::elf::LoadedObject;

/// A trace event record's head slot: `ip` = id | payload length << 16, `arg` = the first
/// payload bytes, the number of data slots that follow in the kind word's bits 8...
pub const KIND_EVENT: u32 = 5;
/// A data slot of the record whose head precedes it; its number (1..) in bits 8...
pub const KIND_EVENT_DATA: u32 = 6;
/// Payload bytes carried by each data slot (`ts`, `ip`, `arg`, `cpu`).
pub const DATA_PER_SLOT: usize = 28;
/// Payload bytes carried by the head slot (`arg`).
pub const HEAD_BYTES: usize = 8;
/// The longest payload recorded (after the 8-byte common header); a longer record is dropped
/// and counted.
pub const MAX_PAYLOAD: usize = HEAD_BYTES + 63 * DATA_PER_SLOT;
/// The id of the first event found.
pub const FIRST_ID: u16 = 1024;
/// `struct ftrace_event`'s layout version this agent reads (`FTRACE_EVENT_ABI`).
pub const ABI: u32 = 1;
/// The ELF section listing the declarations.
pub const SECTION: &str = "ftrace_events";

/// `struct ftrace_event_field` (the header's layout).
#[derive(Debug)]
#[repr(C)]
pub struct FieldDesc {
    /// The C type.
    pub c_type: *const c_char,
    /// The field name.
    pub name: *const c_char,
    /// Byte offset in the record.
    pub offset: u32,
    /// Byte size.
    pub size: u32,
    /// Non-zero for a signed type.
    pub is_signed: u32,
    /// 0: scalar; n: `char name[n]`.
    pub array_len: u32,
}

/// What the call site calls while the event is on.
pub type ProbeFn = unsafe extern "C" fn(*const EventDesc, *const u8, u32);

/// `struct ftrace_event` (the header's layout).
#[derive(Debug)]
#[repr(C)]
pub struct EventDesc {
    /// NULL while off; [`record_event`](crate::event_record::record_event) while on.
    pub probe: AtomicPtr<()>,
    /// [`ABI`].
    pub abi: u32,
    /// Entries the field table has.
    pub nr_fields: u32,
    /// The subsystem.
    pub system: *const c_char,
    /// The event name.
    pub name: *const c_char,
    /// The print format, as the `format` file shows it.
    pub print_fmt: *const c_char,
    /// Returns the field table.
    pub fields: Option<unsafe extern "C" fn() -> *const FieldDesc>,
    /// `sizeof` the record.
    pub rec_size: u32,
    /// The id the agent gave it.
    pub id: AtomicU32,
}

/// One field as the agent lists it to the tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldInfo {
    /// The C type.
    pub c_type: String,
    /// The name.
    pub name: String,
    /// Byte offset in the record.
    pub offset: u32,
    /// Byte size.
    pub size: u32,
    /// Signed type.
    pub signed: bool,
    /// 0: scalar; n: `char name[n]`.
    pub array_len: u32,
}

/// One event found in the program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventInfo {
    /// The id given.
    pub id: u16,
    /// The subsystem.
    pub system: String,
    /// The name.
    pub name: String,
    /// The print format.
    pub print_fmt: String,
    /// The fields, in declaration order.
    pub fields: Vec<FieldInfo>,
    /// Record size in bytes.
    pub rec_size: u32,
}

impl EventInfo {
    /// A `demo:demo_value` event with an `unsigned long value` and a `char label[16]`, as the
    /// agent lists it: a fixture for tests and examples.
    ///
    /// ```
    /// use ftrace_agent::event::EventInfo;
    /// let e = EventInfo::demo_value();
    /// assert_eq!(EventInfo::parse_line(&e.to_line()), Some(e));
    /// ```
    pub fn demo_value() -> EventInfo {
        EventInfo {
            id: 1024,
            system: "demo".into(),
            name: "demo_value".into(),
            print_fmt: "\"value=%lu label=%s\", REC->value, REC->label".into(),
            fields: vec![
                FieldInfo {
                    c_type: "unsigned long".into(),
                    name: "value".into(),
                    offset: 8,
                    size: 8,
                    signed: false,
                    array_len: 0,
                },
                FieldInfo {
                    c_type: "char".into(),
                    name: "label".into(),
                    offset: 16,
                    size: 16,
                    signed: false,
                    array_len: 16,
                },
            ],
            rec_size: 32,
        }
    }

    /// One `EVENTS` line (no newline): `id\tsystem\tname\trec_size\tfields\tprint_fmt`, the
    /// fields `type:name:offset:size:signed:array_len` joined by `;`.
    pub fn to_line(&self) -> String {
        let fields: Vec<String> = self
            .fields
            .iter()
            .map(|f| {
                format!(
                    "{}:{}:{}:{}:{}:{}",
                    f.c_type,
                    f.name,
                    f.offset,
                    f.size,
                    u8::from(f.signed),
                    f.array_len
                )
            })
            .collect();
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}",
            self.id,
            self.system,
            self.name,
            self.rec_size,
            fields.join(";"),
            self.print_fmt
        )
    }

    /// The event's format (its strings and field table leaked: an event is described once
    /// per program, or once per change of its filter or triggers).
    pub fn format(&self) -> TraceEventFormat {
        fn leak(s: &str) -> &'static str {
            Box::leak(s.to_string().into_boxed_str())
        }
        let fields: Vec<Field> = self
            .fields
            .iter()
            .map(|f| Field {
                c_type: leak(&f.c_type),
                name: leak(&f.name),
                array: match f.array_len {
                    0 => FieldArray::Scalar,
                    n => FieldArray::Fixed(n),
                },
                offset: f.offset,
                size: f.size,
                signed: f.signed,
            })
            .collect();
        TraceEventFormat {
            system: leak(&self.system),
            name: leak(&self.name),
            id: self.id,
            fields: Box::leak(fields.into_boxed_slice()),
            print_fmt: leak(&self.print_fmt),
        }
    }

    /// Parses [`EventInfo::to_line`]'s form.
    pub fn parse_line(line: &str) -> Option<EventInfo> {
        let mut p = line.splitn(6, '\t');
        let id = p.next()?.parse().ok()?;
        let system = p.next()?.to_string();
        let name = p.next()?.to_string();
        let rec_size = p.next()?.parse().ok()?;
        let fields_text = p.next()?;
        let print_fmt = p.next()?.to_string();
        let mut fields = Vec::new();
        for f in fields_text.split(';').filter(|f| !f.is_empty()) {
            let mut q = f.split(':');
            fields.push(FieldInfo {
                c_type: q.next()?.to_string(),
                name: q.next()?.to_string(),
                offset: q.next()?.parse().ok()?,
                size: q.next()?.parse().ok()?,
                signed: q.next()? == "1",
                array_len: q.next()?.parse().ok()?,
            });
        }
        Some(EventInfo {
            id,
            system,
            name,
            print_fmt,
            fields,
            rec_size,
        })
    }
}

/// The events found so far: each descriptor's address (never freed: program data) and what
/// was read from it.
static EVENTS: Mutex<Vec<(usize, EventInfo)>> = Mutex::new(Vec::new());

fn lock() -> std::sync::MutexGuard<'static, Vec<(usize, EventInfo)>> {
    EVENTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A C string of the program's constant data, if it is one we can list (no tab, newline).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that stays alive.
unsafe fn text(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: caller's contract.
    let s = unsafe { CStr::from_ptr(p) }.to_str().ok()?;
    (!s.contains(['\t', '\n'])).then(|| s.to_string())
}

/// Reads one descriptor.
///
/// # Safety
/// `d` is a live `struct ftrace_event` of the header's layout.
unsafe fn read_desc(d: &EventDesc, id: u16) -> Option<EventInfo> {
    if d.abi != ABI || d.nr_fields > 64 {
        return None;
    }
    // SAFETY: the header's strings are string literals (caller's contract).
    let (system, name, print_fmt) = unsafe { (text(d.system)?, text(d.name)?, text(d.print_fmt)?) };
    let ok = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
    if !ok(&system) || !ok(&name) {
        return None;
    }
    // SAFETY: the table function returns a static array of `nr_fields` entries (header).
    let table = unsafe { (d.fields?)() };
    let mut fields = Vec::new();
    for i in 0..d.nr_fields as usize {
        // SAFETY: as above.
        let f = unsafe { &*table.add(i) };
        let field = FieldInfo {
            // SAFETY: the header's strings are string literals.
            c_type: unsafe { text(f.c_type)? },
            // SAFETY: as above.
            name: unsafe { text(f.name)? },
            offset: f.offset,
            size: f.size,
            signed: f.is_signed != 0,
            array_len: f.array_len,
        };
        if field.offset < 8 || field.offset + field.size > d.rec_size || field.c_type.contains(':')
        {
            return None;
        }
        fields.push(field);
    }
    if d.rec_size < 8 || d.rec_size as usize - 8 > MAX_PAYLOAD {
        return None;
    }
    Some(EventInfo {
        id,
        system,
        name,
        print_fmt,
        fields,
        rec_size: d.rec_size,
    })
}

/// Finds the declarations of one loaded object (`file`: its ELF file) and adds them, off,
/// to the events listed. `read_mem` reads the loaded image. Returns how many were added.
pub fn discover(
    obj: &LoadedObject,
    file: &[u8],
    read_mem: impl Fn(u64, usize) -> Vec<u8>,
) -> usize {
    let mut added = 0;
    for (addr, size) in crate::elf::section_spans(file, SECTION) {
        if addr == 0 || size == 0 || size > 1 << 20 {
            continue;
        }
        let bytes = read_mem(obj.bias.wrapping_add(addr), size as usize);
        for chunk in bytes.chunks_exact(8) {
            let addr = u64::from_ne_bytes(chunk.try_into().unwrap()) as usize;
            let mut all = lock();
            if addr == 0 || addr % 8 != 0 || all.iter().any(|(a, _)| *a == addr) {
                continue;
            }
            let id = FIRST_ID + all.len() as u16;
            // SAFETY: the section lists descriptors of the header's layout, in the object's
            // data, alive while the object is loaded (objects are not unloaded under us: the
            // agent keeps what it scanned).
            let d = unsafe { &*(addr as *const EventDesc) };
            // SAFETY: as above.
            match unsafe { read_desc(d, id) } {
                Some(info) => {
                    if all
                        .iter()
                        .any(|(_, e)| e.system == info.system && e.name == info.name)
                    {
                        crate::warn(&format!(
                            "event {}:{} declared twice; the second is ignored",
                            info.system, info.name
                        ));
                        continue;
                    }
                    d.id.store(u32::from(id), Ordering::Relaxed);
                    all.push((addr, info));
                    added += 1;
                }
                None => crate::warn(&format!("event descriptor at {addr:#x} not readable")),
            }
        }
    }
    added
}

/// The events found so far.
pub fn list() -> Vec<EventInfo> {
    lock().iter().map(|(_, e)| e.clone()).collect()
}

/// The file of a process directory listing the events its image declares, one
/// [`EventInfo::to_line`] line each: a recording's reader prints their records with it, without
/// the program.
pub const LISTING: &str = "events";

/// Writes [`LISTING`] into the process directory `dir` (nothing when no event is declared).
pub fn write_listing(dir: &std::path::Path) -> std::io::Result<()> {
    let all = list();
    if all.is_empty() {
        return Ok(());
    }
    let mut text = String::new();
    for e in &all {
        text.push_str(&e.to_line());
        text.push('\n');
    }
    std::fs::write(dir.join(LISTING), text)
}

/// Points each event's call site at the probe `armed` gives it (`None`: off).
pub(crate) fn arm(armed: impl Fn(u16) -> Option<ProbeFn>) {
    for (addr, e) in lock().iter() {
        // SAFETY: found by `discover`: a live descriptor.
        let d = unsafe { &*(*addr as *const EventDesc) };
        let p: *mut () = match armed(e.id) {
            Some(probe) => probe as *mut (),
            None => core::ptr::null_mut(),
        };
        // Release: the id stored by `discover` is seen by the probe it calls.
        d.probe.store(p, Ordering::Release);
    }
}

/// The event of `id`, if the program declares it.
pub fn find(id: u16) -> Option<EventInfo> {
    lock()
        .iter()
        .find(|(_, e)| e.id == id)
        .map(|(_, e)| e.clone())
}

/// How many data slots a payload of `len` bytes needs.
#[inline]
pub fn data_slots_for(len: usize) -> usize {
    len.saturating_sub(HEAD_BYTES).div_ceil(DATA_PER_SLOT)
}

/// Up to 8 bytes as a native-endian word, zero-padded (8 bytes, the common case: one load).
#[inline(always)]
fn word(b: &[u8]) -> u64 {
    match <[u8; 8]>::try_from(b) {
        Ok(a) => u64::from_ne_bytes(a),
        Err(_) => {
            let mut a = [0u8; 8];
            a[..b.len()].copy_from_slice(b);
            u64::from_ne_bytes(a)
        }
    }
}

/// The head slot of a record of `payload` (its first [`HEAD_BYTES`], the length and the
/// number of data slots that follow; the payload no longer than [`MAX_PAYLOAD`]). A payload
/// of at most [`HEAD_BYTES`] is the head alone: the whole record in one slot.
#[inline(always)]
pub fn head(ts: u64, cpu: u32, id: u16, payload: &[u8]) -> SlotEvent {
    let first = &payload[..payload.len().min(HEAD_BYTES)];
    SlotEvent {
        ts,
        ip: u64::from(id) | (payload.len() as u64) << 16,
        arg: word(first),
        kind: KIND_EVENT | (data_slots_for(payload.len()) as u32) << 8,
        cpu,
    }
}

/// The record's slots: the head and the data slots (`tail[..n]`, `n` returned); `None` if
/// the payload is longer than [`MAX_PAYLOAD`] or `tail` too short for it.
#[inline]
pub fn encode(
    ts: u64,
    cpu: u32,
    id: u16,
    payload: &[u8],
    tail: &mut [SlotEvent],
) -> Option<(SlotEvent, usize)> {
    if payload.len() > MAX_PAYLOAD || tail.len() < data_slots_for(payload.len()) {
        return None;
    }
    let rest = &payload[payload.len().min(HEAD_BYTES)..];
    let n = rest.len().div_ceil(DATA_PER_SLOT);
    let head = head(ts, cpu, id, payload);
    for (i, chunk) in rest.chunks(DATA_PER_SLOT).enumerate() {
        let part = |lo: usize, hi: usize| &chunk[lo.min(chunk.len())..hi.min(chunk.len())];
        let mut c = [0u8; 4];
        let tail4 = part(24, 28);
        c[..tail4.len()].copy_from_slice(tail4);
        tail[i] = SlotEvent {
            ts: word(part(0, 8)),
            ip: word(part(8, 16)),
            arg: word(part(16, 24)),
            kind: KIND_EVENT_DATA | ((i as u32 + 1) << 8),
            cpu: u32::from_ne_bytes(c),
        };
    }
    Some((head, n))
}

/// How many data slots follow `head` (a [`KIND_EVENT`] slot).
pub fn data_slots(head: &SlotEvent) -> usize {
    (head.kind >> 8) as usize
}

/// The whole record (`struct trace_entry` first: type = the id, pid = `tid`) of `head` and
/// the slots that followed it, or `None` if they are not exactly its data slots.
pub fn assemble(head: &SlotEvent, tail: &[SlotEvent], tid: u32) -> Option<Vec<u8>> {
    if head.kind() != KIND_EVENT || tail.len() != data_slots(head) {
        return None;
    }
    let id = (head.ip & 0xffff) as u16;
    let len = (head.ip >> 16) as usize;
    if len > MAX_PAYLOAD || len.saturating_sub(HEAD_BYTES).div_ceil(DATA_PER_SLOT) != tail.len() {
        return None;
    }
    let mut rec = Vec::with_capacity(8 + len);
    rec.extend_from_slice(&id.to_ne_bytes());
    rec.extend_from_slice(&[0, 0]);
    rec.extend_from_slice(&tid.to_ne_bytes());
    let mut payload = head.arg.to_ne_bytes().to_vec();
    for (i, s) in tail.iter().enumerate() {
        if s.kind() != KIND_EVENT_DATA || (s.kind >> 8) as usize != i + 1 {
            return None;
        }
        payload.extend_from_slice(&s.ts.to_ne_bytes());
        payload.extend_from_slice(&s.ip.to_ne_bytes());
        payload.extend_from_slice(&s.arg.to_ne_bytes());
        payload.extend_from_slice(&s.cpu.to_ne_bytes());
    }
    payload.truncate(len);
    rec.extend_from_slice(&payload);
    Some(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_slots_and_damage_is_refused() {
        for len in [0usize, 1, 8, 9, 36, 37, 64, MAX_PAYLOAD] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let mut tail = [SlotEvent::default(); 63];
            let (head, n) = encode(5, 1, 1030, &payload, &mut tail).unwrap();
            assert_eq!(
                n,
                len.saturating_sub(8).div_ceil(DATA_PER_SLOT),
                "len {len}"
            );
            let rec = assemble(&head, &tail[..n], 77).unwrap();
            assert_eq!(&rec[..2], &1030u16.to_ne_bytes());
            assert_eq!(&rec[4..8], &77u32.to_ne_bytes());
            assert_eq!(&rec[8..], &payload[..], "len {len}");
            if n > 0 {
                // a missing, extra or misnumbered data slot is no record
                assert_eq!(assemble(&head, &tail[..n - 1], 77), None);
                if n < 63 {
                    assert_eq!(assemble(&head, &tail[..n + 1], 77), None);
                }
                let mut t = tail;
                t[n - 1].kind = KIND_EVENT_DATA | ((n as u32 + 5) << 8);
                assert_eq!(assemble(&head, &t[..n], 77), None);
            }
        }
        let mut tail = [SlotEvent::default(); 63];
        assert!(encode(0, 0, 1, &[0; MAX_PAYLOAD + 1], &mut tail).is_none());
    }

    #[test]
    fn event_lines_round_trip() {
        let e = EventInfo::demo_value();
        assert_eq!(EventInfo::parse_line(&e.to_line()), Some(e));
        assert_eq!(EventInfo::parse_line("1024\tdemo"), None);
    }
}
