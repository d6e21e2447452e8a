//! Tracepoints declared in Rust: [`tracepoint!`](crate::tracepoint!) and [`Tracepoint`].
//!
//! One declaration gives an event everything Linux derives from `TRACE_EVENT()`: the record
//! layout (a `#[repr(C)]` struct starting with [`TraceEntry`]), the `format` file's field
//! table and print format (a [`TraceEventFormat`] whose offsets and sizes come from the struct
//! by `offset_of!`/`size_of`, so the two cannot drift), the event id, and a call site
//! `trace_<name>(..)`. While the event is off the call site costs one relaxed load of its
//! [`StaticKey`]; the record is built and handed to the connected [`Probe`] in a separate
//! `#[cold]` function. Nothing on either path allocates.
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
use crate::static_key::StaticKey;
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
    pub fn connect(&self, probe: Probe) -> Result<(), Errno> {
        self.probe
            .compare_exchange(
                core::ptr::null_mut(),
                probe as *mut (),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .map_err(|_| Errno::EBUSY)?;
        self.key.inc(|_| {});
        Ok(())
    }

    /// `tracepoint_probe_unregister`: turns the call sites off and disconnects the probe. A
    /// record being delivered on another CPU may still reach it (a probe is a plain `fn`).
    pub fn disconnect(&self) {
        if self.probe.load(Ordering::Relaxed).is_null() {
            return;
        }
        self.key.dec(|_| {});
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
/// Field types are the integer types and fixed arrays of them ([`TracepointField`]); the C
/// type is what the `format` file states. See the [module docs](mod@crate::tracepoint) for an example.
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
                pub $field: $ty,
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
                        size: ::core::mem::size_of::<$ty>() as u32,
                        signed: <$ty as $crate::tracepoint::CType>::SIGNED,
                    },
                )*],
                print_fmt: $print,
            };
            FORMAT
        });

        $(#[$doc])*
        #[inline(always)]
        $vis fn $call($($field: $ty),*) {
            if $tp.is_enabled() {
                #[cold]
                #[inline(never)]
                fn slow($($field: $ty),*) {
                    let mut rec = ::core::mem::MaybeUninit::<$rec>::zeroed();
                    let p = rec.as_mut_ptr();
                    // SAFETY: `p` points to a zeroed `$rec`; each field is written in place,
                    // so the padding stays zero and every byte is initialised.
                    let bytes = unsafe {
                        ::core::ptr::addr_of_mut!((*p).ent.type_).write($id);
                        $(::core::ptr::addr_of_mut!((*p).$field).write($field);)*
                        ::core::slice::from_raw_parts_mut(
                            p.cast::<u8>(),
                            ::core::mem::size_of::<$rec>(),
                        )
                    };
                    $tp.deliver(bytes);
                }
                slow($($field),*);
            }
        }
    };
}

/// A type a tracepoint field can have: what the `format` file says of its shape.
pub trait TracepointField: CType {
    /// `Scalar`, or `Fixed(N)` for an array of `N`.
    const ARRAY: FieldArray;
}

macro_rules! scalar_field {
    ($($t:ty),*) => { $(impl TracepointField for $t { const ARRAY: FieldArray = FieldArray::Scalar; })* };
}
scalar_field!(u8, u16, u32, u64, i32, i64);

impl<T: CType, const N: usize> TracepointField for [T; N] {
    const ARRAY: FieldArray = FieldArray::Fixed(N as u32);
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
