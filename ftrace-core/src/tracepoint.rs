//! Tracepoints declared in Rust: [`tracepoint!`](crate::tracepoint!) and [`Tracepoint`].
//!
//! One declaration gives an event everything Linux derives from `TRACE_EVENT()`: the record
//! layout (a `#[repr(C)]` struct starting with [`TraceEntry`]), the `format` file's field
//! table and print format (a [`TraceEventFormat`] whose offsets and sizes come from the struct
//! by `offset_of!`/`size_of`, so the two cannot drift), the event id, and a call site
//! `trace_<name>(..)`. While the event is off the call site costs one relaxed load of its
//! [`StaticKey`], or, under the feature `tracepoint-jump-label` on x86_64, a 5-byte NOP (a jump
//! label on the key, patched to `jmp` when a probe connects, through the platform's
//! `jump_label::set_patcher`); the record is built and handed to the connected [`Probe`] in a
//! separate `#[cold]` function. Nothing on either path allocates.
//!
//! Invariant: a record reaches the probe only while the key is on, with `common_type` set to
//! the event's id and every byte (padding included) initialised.
//!
//! ```
//! use ftrace_core::tracepoint;
//! use ftrace_core::tracepoint::Tracepoint;
//! use std::sync::atomic::{AtomicU64, Ordering};
//!
//! tracepoint! {
//!     /// `demo:demo_value`: a value and where it came from.
//!     pub fn trace_demo_value(value: u64 => "u64", cpu: u32 => "unsigned int");
//!     record DemoValue;
//!     static DEMO_VALUE = ("demo", "demo_value", 400,
//!         "\"value=%llu cpu=%u\", REC->value, REC->cpu");
//! }
//!
//! static SEEN: AtomicU64 = AtomicU64::new(0);
//! fn probe(_tp: &Tracepoint, rec: &mut [u8]) {
//!     let value = u64::from_le_bytes(rec[8..16].try_into().unwrap());
//!     SEEN.fetch_add(value, Ordering::Relaxed);
//! }
//!
//! trace_demo_value(1, 0); // off: nothing happens
//! DEMO_VALUE.connect(probe).unwrap();
//! trace_demo_value(41, 0);
//! DEMO_VALUE.disconnect();
//! trace_demo_value(1000, 0);
//! assert_eq!(SEEN.load(Ordering::Relaxed), 41);
//! assert_eq!(DEMO_VALUE.format().field("cpu").unwrap().offset, 16);
//! assert_eq!(DEMO_VALUE.format().record_size(), 20);
//! ```

use crate::errno::Errno;
use crate::format::TraceEventFormat;
use crate::static_key::{Branch, StaticKey};
use crate::sync::{AtomicPtr, Ordering, loom_const_fn};

#[doc(hidden)]
pub use crate::entry::TraceEntry;
#[doc(hidden)]
pub use crate::format::{CType, Field, FieldArray};

/// What a connected tracepoint calls with each record: the record's bytes, `common_type`
/// set, the other common fields zero for the probe to fill (flags, preempt count, pid).
pub type Probe = fn(&Tracepoint, &mut [u8]);

/// A declared event's runtime half: its format, its key and the connected probe.
#[derive(Debug)]
pub struct Tracepoint {
    format: &'static TraceEventFormat,
    key: StaticKey,
    probe: AtomicPtr<()>,
    /// Who the probe records for (the kernel's `tracepoint_func.data`): set once by
    /// [`Tracepoint::set_owner`], never cleared.
    owner: AtomicPtr<()>,
}

impl Tracepoint {
    loom_const_fn! {
        /// A tracepoint of `format`, off and with no probe.
        pub fn new(format: &'static TraceEventFormat) -> Tracepoint {
            Tracepoint {
                format,
                key: StaticKey::new(),
                probe: AtomicPtr::new(core::ptr::null_mut()),
                owner: AtomicPtr::new(core::ptr::null_mut()),
            }
        }
    }

    /// The event's format (system, name, id, fields, print format).
    pub fn format(&self) -> &'static TraceEventFormat {
        self.format
    }

    /// The key call sites test.
    pub fn key(&self) -> &StaticKey {
        &self.key
    }

    /// Whether a probe is connected and the call sites fire.
    #[inline(always)]
    pub fn is_enabled(&self) -> bool {
        self.key.is_enabled()
    }

    /// Binds the tracepoint to `owner` (the kernel's `tracepoint_func.data`), the consumer
    /// its probe records for, for the tracepoint's whole life: a probe reads it back with
    /// [`Tracepoint::owner`]. Binding the same owner again is a no-op; `EBUSY` if another
    /// owner holds it. Bind before [`Tracepoint::connect`]: the connect publishes the owner to
    /// every CPU that sees the probe.
    pub fn set_owner(&self, owner: *const ()) -> Result<(), Errno> {
        match self.owner.compare_exchange(
            core::ptr::null_mut(),
            owner.cast_mut(),
            Ordering::Release,
            Ordering::Acquire,
        ) {
            Ok(_) => Ok(()),
            Err(cur) if cur.cast_const() == owner => Ok(()),
            Err(_) => Err(Errno::EBUSY),
        }
    }

    /// The owner [`Tracepoint::set_owner`] bound (null: none). Inside a probe, the owner bound
    /// before the probe was connected.
    pub fn owner(&self) -> *const () {
        self.owner.load(Ordering::Acquire).cast_const()
    }

    /// `tracepoint_probe_register`: connects `probe` and turns the call sites on. `EBUSY` if
    /// a probe is already connected (one consumer per tracepoint: the tracing instance).
    /// Under the feature `tracepoint-jump-label` the sites are patched to `jmp` through the
    /// platform's `jump_label::set_patcher` before the key
    /// reads on; `ENODEV` if no patcher is installed (the sites could never fire).
    pub fn connect(&self, probe: Probe) -> Result<(), Errno> {
        let update = site_update()?;
        self.probe
            .compare_exchange(
                core::ptr::null_mut(),
                probe as *mut (),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .map_err(|_| Errno::EBUSY)?;
        self.key.inc(|b| update(&self.key, b));
        Ok(())
    }

    /// `tracepoint_probe_unregister`: turns the call sites off (back to their NOPs under
    /// `tracepoint-jump-label`) and disconnects the probe. A record being delivered on another
    /// CPU may still reach it (a probe is a plain `fn`).
    pub fn disconnect(&self) {
        if self.probe.load(Ordering::Relaxed).is_null() {
            return;
        }
        // A probe is connected, so `connect` found the update (a patcher is never removed).
        let update = site_update().unwrap_or(no_sites);
        self.key.dec(|b| update(&self.key, b));
        self.probe.store(core::ptr::null_mut(), Ordering::Release);
    }

    /// Hands a built record to the probe (the call site's slow path).
    #[doc(hidden)]
    pub fn deliver(&self, rec: &mut [u8]) {
        let p = self.probe.load(Ordering::Acquire);
        if p.is_null() {
            return;
        }
        // SAFETY: only `connect` stores a non-null pointer, and it stores a `Probe`.
        let probe: Probe = unsafe { core::mem::transmute::<*mut (), Probe>(p) };
        probe(self, rec);
    }
}

/// What a key transition does to the call sites: nothing for the relaxed-load form (the
/// sites read the key), the platform's patcher for jump-label sites.
type SiteUpdate = fn(&StaticKey, Branch);

fn no_sites(_: &StaticKey, _: Branch) {}

#[cfg(not(all(feature = "tracepoint-jump-label", target_arch = "x86_64", not(loom))))]
fn site_update() -> Result<SiteUpdate, Errno> {
    Ok(no_sites)
}

#[cfg(all(feature = "tracepoint-jump-label", target_arch = "x86_64", not(loom)))]
fn site_update() -> Result<SiteUpdate, Errno> {
    crate::jump_label::patcher().ok_or(Errno::ENODEV)
}

/// Where a [`Tracepoint`]'s key lies in it: the jump-label sites record the key's address as
/// the tracepoint's plus this.
#[doc(hidden)]
pub const KEY_OFFSET: usize = core::mem::offset_of!(Tracepoint, key);

/// The call site's test of tracepoint `$tp` (a `static`): a 5-byte NOP recorded as a jump
/// label on the tracepoint's key (feature `tracepoint-jump-label`, x86_64).
#[cfg(all(feature = "tracepoint-jump-label", target_arch = "x86_64", not(loom)))]
#[doc(hidden)]
#[macro_export]
macro_rules! __tracepoint_on {
    ($tp:path) => {{
        let mut on = false;
        // SAFETY: the asm is a NOP and a data record (the NOP, the "on" label, the key's
        // address: the tracepoint's plus `KEY_OFFSET`) in the jump table; it touches no
        // register or memory the compiler knows of, and may jump to the label, which only
        // sets a local.
        unsafe {
            ::core::arch::asm!(
                "2: .byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
                ".pushsection __ftrace_jump_table, \"awR\"",
                ".balign 8",
                ".quad 2b, {on}, {tp} + {off}",
                ".popsection",
                tp = sym $tp,
                off = const $crate::tracepoint::KEY_OFFSET,
                on = label { on = true; },
                options(nostack, preserves_flags),
            );
        }
        on
    }};
}

/// The call site's test of tracepoint `$tp`: one relaxed load of its key.
#[cfg(not(all(feature = "tracepoint-jump-label", target_arch = "x86_64", not(loom))))]
#[doc(hidden)]
#[macro_export]
macro_rules! __tracepoint_on {
    ($tp:path) => {
        $tp.is_enabled()
    };
}

/// Declares a tracepoint: its record struct, its format, its [`Tracepoint`] static and its
/// call site.
///
/// ```text
/// tracepoint! {
///     /// docs of the call site
///     pub fn trace_NAME(field: RustType => "C type", ...);
///     record RecordStruct;
///     static STATIC_NAME = ("system", "name", id, "print fmt text");
/// }
/// ```
///
/// Field types are the integer types, fixed arrays of them and `str` (a `__data_loc char[]`
/// whose bytes follow the record) ([`TracepointField`]); the C type is what the `format` file
/// states. See the [module docs](mod@crate::tracepoint) for an example.
#[macro_export]
macro_rules! tracepoint {
    (
        $(#[$doc:meta])*
        $vis:vis fn $call:ident($($field:ident : $ty:ty => $cty:literal),* $(,)?);
        record $rec:ident;
        static $tp:ident = ($system:literal, $name:literal, $id:expr, $print:literal $(,)?);
    ) => {
        #[doc = concat!("The record of `", $system, ":", $name, "` (its `format` file's layout).")]
        #[repr(C)]
        #[derive(Clone, Copy, Debug)]
        $vis struct $rec {
            /// The common fields.
            pub ent: $crate::tracepoint::TraceEntry,
            $(
                #[doc = concat!("`", stringify!($field), "`.")]
                pub $field: <$ty as $crate::tracepoint::TracepointField>::Stored,
            )*
        }

        #[doc = concat!("The tracepoint `", $system, ":", $name, "`.")]
        $vis static $tp: $crate::tracepoint::Tracepoint = $crate::tracepoint::Tracepoint::new(&{
            const FORMAT: $crate::format::TraceEventFormat = $crate::format::TraceEventFormat {
                system: $system,
                name: $name,
                id: $id,
                fields: &[$(
                    $crate::tracepoint::Field {
                        c_type: $cty,
                        name: stringify!($field),
                        array: <$ty as $crate::tracepoint::TracepointField>::ARRAY,
                        offset: ::core::mem::offset_of!($rec, $field) as u32,
                        size: ::core::mem::size_of::<
                            <$ty as $crate::tracepoint::TracepointField>::Stored,
                        >() as u32,
                        signed: <$ty as $crate::tracepoint::CType>::SIGNED,
                    },
                )*],
                print_fmt: $print,
            };
            FORMAT
        });

        $(#[$doc])*
        #[inline(always)]
        $vis fn $call($($field: <$ty as $crate::tracepoint::TracepointField>::Arg<'_>),*) {
            if $crate::__tracepoint_on!($tp) {
                #[cold]
                #[inline(never)]
                fn slow($($field: <$ty as $crate::tracepoint::TracepointField>::Arg<'_>),*) {
                    /// Room for the dynamic fields' bytes after the fixed record.
                    const TAIL: usize =
                        0 $(+ <$ty as $crate::tracepoint::TracepointField>::TAIL_MAX)*;
                    /// The fixed record, then the dynamic fields (`__data` in the kernel).
                    #[repr(C)]
                    struct Whole {
                        rec: $rec,
                        tail: [u8; TAIL],
                    }
                    let mut whole = ::core::mem::MaybeUninit::<Whole>::zeroed();
                    let p = whole.as_mut_ptr();
                    // SAFETY: `p` points to a zeroed `Whole`; each field is written in place
                    // and the tail only through `Tail`, so every byte stays initialised, and
                    // `tail` starts right after the record (`repr(C)`, byte array).
                    let bytes = unsafe {
                        let mut tail = $crate::tracepoint::Tail::new(
                            ::core::slice::from_raw_parts_mut(
                                ::core::ptr::addr_of_mut!((*p).tail).cast::<u8>(),
                                TAIL,
                            ),
                            ::core::mem::size_of::<$rec>(),
                        );
                        ::core::ptr::addr_of_mut!((*p).rec.ent.type_).write($id);
                        $(::core::ptr::addr_of_mut!((*p).rec.$field).write(
                            <$ty as $crate::tracepoint::TracepointField>::store($field, &mut tail),
                        );)*
                        let len = ::core::mem::size_of::<$rec>() + tail.used();
                        ::core::slice::from_raw_parts_mut(p.cast::<u8>(), len)
                    };
                    $tp.deliver(bytes);
                }
                slow($($field),*);
            }
        }
    };
}

/// A type a tracepoint field can have: what the call site takes, what the record stores and
/// what the `format` file says of its shape.
///
/// The integer types and fixed arrays of them are stored as they are. `str` is the kernel's
/// `__string()`: the call site takes a `&str`, the record stores its `__data_loc` (a `u32`:
/// length with the NUL in the high half, offset from the record's start in the low half) and
/// the bytes follow the fixed record; declare it with the C type `"__data_loc char[]"`. A
/// string longer than [`STR_MAX`]` - 1` bytes is cut there (the call site never allocates).
pub trait TracepointField: CType {
    /// `Scalar`, or `Fixed(N)` for an array of `N`.
    const ARRAY: FieldArray;
    /// How many bytes the field may add after the fixed record.
    const TAIL_MAX: usize;
    /// What the record holds in the field's place.
    type Stored: Copy;
    /// What the call site takes.
    type Arg<'a>;
    /// The value to store for `arg`, appending any dynamic bytes to `tail`.
    fn store(arg: Self::Arg<'_>, tail: &mut Tail<'_>) -> Self::Stored;
}

/// The most bytes a `str` field occupies after the record, its NUL included.
pub const STR_MAX: usize = 128;

macro_rules! scalar_field {
    ($($t:ty),*) => { $(
        impl TracepointField for $t {
            const ARRAY: FieldArray = FieldArray::Scalar;
            const TAIL_MAX: usize = 0;
            type Stored = $t;
            type Arg<'a> = $t;
            #[inline(always)]
            fn store(arg: $t, _: &mut Tail<'_>) -> $t {
                arg
            }
        }
    )* };
}
scalar_field!(u8, u16, u32, u64, i32, i64);

impl<T: CType + Copy, const N: usize> TracepointField for [T; N] {
    const ARRAY: FieldArray = FieldArray::Fixed(N as u32);
    const TAIL_MAX: usize = 0;
    type Stored = [T; N];
    type Arg<'a> = [T; N];
    #[inline(always)]
    fn store(arg: [T; N], _: &mut Tail<'_>) -> [T; N] {
        arg
    }
}

impl CType for str {
    const SIGNED: bool = false;
}

impl TracepointField for str {
    const ARRAY: FieldArray = FieldArray::Scalar;
    const TAIL_MAX: usize = STR_MAX;
    type Stored = u32;
    type Arg<'a> = &'a str;
    fn store(arg: &str, tail: &mut Tail<'_>) -> u32 {
        tail.push_str(arg)
    }
}

/// The dynamic part of a record being built: the bytes after the fixed fields.
#[derive(Debug)]
pub struct Tail<'a> {
    buf: &'a mut [u8],
    used: usize,
    /// Where `buf` starts in the record.
    base: usize,
}

impl<'a> Tail<'a> {
    /// An empty tail over `buf`, which starts `base` bytes into the record.
    pub fn new(buf: &'a mut [u8], base: usize) -> Tail<'a> {
        Tail { buf, used: 0, base }
    }

    /// How many bytes have been appended.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Appends `s` and its NUL (cut to fit [`STR_MAX`] and the room left) and returns its
    /// `__data_loc`: `(length << 16) | offset`, the length counting the NUL.
    pub fn push_str(&mut self, s: &str) -> u32 {
        let room = (self.buf.len() - self.used).min(STR_MAX);
        if room == 0 {
            return ((self.base + self.used) as u32) & 0xffff;
        }
        let n = s.len().min(room - 1);
        let at = self.used;
        self.buf[at..at + n].copy_from_slice(&s.as_bytes()[..n]);
        self.buf[at + n] = 0;
        self.used += n + 1;
        let len = (n + 1) as u32;
        (len << 16) | ((self.base + at) as u32 & 0xffff)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    extern crate std;
    use std::sync::Mutex;
    use std::vec::Vec;

    static GOT: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

    crate::tracepoint! {
        /// `test:three`.
        pub fn trace_three(a: u8 => "u8", b: u64 => "u64", name: [u8; 4] => "char");
        record Three;
        static THREE = ("test", "three", 401, "\"a=%u b=%llu\", REC->a, REC->b");
    }

    fn probe(_: &super::Tracepoint, rec: &mut [u8]) {
        GOT.lock().unwrap().push(rec.to_vec());
    }

    #[test]
    fn layout_format_and_record_agree() {
        let f = THREE.format();
        let offs: Vec<(&str, u32, u32)> = f
            .fields
            .iter()
            .map(|x| (x.name, x.offset, x.size))
            .collect();
        assert_eq!(offs, [("a", 8, 1), ("b", 16, 8), ("name", 24, 4)]);
        assert_eq!(f.fields[2].array, super::FieldArray::Fixed(4));
        assert_eq!(size_of::<Three>(), 32);
        let mut s = std::string::String::new();
        f.write_to(&mut s).unwrap();
        assert!(
            s.contains("\tfield:u64 b;\toffset:16;\tsize:8;\tsigned:0;\n"),
            "{s}"
        );
        assert!(
            s.contains("\tfield:char name[4];\toffset:24;\tsize:4;\tsigned:0;\n"),
            "{s}"
        );
        assert!(s.starts_with("name: three\nID: 401\n"));

        trace_three(1, 2, *b"off!");
        assert!(GOT.lock().unwrap().is_empty());
        THREE.connect(probe).unwrap();
        assert_eq!(THREE.connect(probe), Err(crate::Errno::EBUSY));
        trace_three(7, 0x1122, *b"abcd");
        THREE.disconnect();
        trace_three(1, 2, *b"off!");
        let got = GOT.lock().unwrap();
        assert_eq!(got.len(), 1);
        let mut want = [0u8; 32];
        want[..2].copy_from_slice(&401u16.to_le_bytes());
        want[8] = 7;
        want[16..24].copy_from_slice(&0x1122u64.to_le_bytes());
        want[24..28].copy_from_slice(b"abcd");
        assert_eq!(got[0], want);
    }

    crate::tracepoint! {
        /// `test:named`.
        pub fn trace_named(irq: i32 => "int", name: str => "__data_loc char[]", n: u16 => "u16");
        record Named;
        static NAMED = ("test", "named", 402, "\"irq=%d name=%s\", REC->irq, __get_str(name)");
    }

    static NAMED_GOT: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

    fn named_probe(_: &super::Tracepoint, rec: &mut [u8]) {
        NAMED_GOT.lock().unwrap().push(rec.to_vec());
    }

    #[test]
    fn str_fields_are_data_loc_after_the_record() {
        let f = NAMED.format();
        let name = f.field("name").unwrap();
        assert_eq!((name.offset, name.size, name.signed), (12, 4, false));
        let mut s = std::string::String::new();
        f.write_to(&mut s).unwrap();
        assert!(
            s.contains("\tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:0;\n"),
            "{s}"
        );
        NAMED.connect(named_probe).unwrap();
        trace_named(-3, "timer", 9);
        let long = "x".repeat(300);
        trace_named(1, &long, 0);
        NAMED.disconnect();
        let got = NAMED_GOT.lock().unwrap();
        assert_eq!(got.len(), 2);
        let r = &got[0];
        assert_eq!(size_of::<Named>(), 20);
        assert_eq!(r.len(), 20 + 6);
        assert_eq!(i32::from_le_bytes(r[8..12].try_into().unwrap()), -3);
        let loc = u32::from_le_bytes(r[12..16].try_into().unwrap());
        assert_eq!((loc >> 16, loc & 0xffff), (6, 20));
        assert_eq!(&r[20..26], b"timer\0");
        assert_eq!(u16::from_le_bytes(r[16..18].try_into().unwrap()), 9);
        let loc = u32::from_le_bytes(got[1][12..16].try_into().unwrap());
        assert_eq!(loc >> 16, super::STR_MAX as u32);
        assert_eq!(got[1].len(), 20 + super::STR_MAX);
        assert_eq!(got[1][20 + super::STR_MAX - 1], 0);
    }

    #[test]
    fn owner_is_bound_once() {
        let (a, b) = (1u8, 2u8);
        let (pa, pb) = (
            core::ptr::from_ref(&a).cast(),
            core::ptr::from_ref(&b).cast(),
        );
        assert!(THREE.owner().is_null());
        THREE.set_owner(pa).unwrap();
        THREE.set_owner(pa).unwrap();
        assert_eq!(THREE.set_owner(pb), Err(crate::Errno::EBUSY));
        assert_eq!(THREE.owner(), pa);
    }
}
