//! Linux error numbers, as tracefs returns them.
//!
//! Every rejected write in ftrace-rs answers with one of these and changes no state. The values
//! are the kernel's (`include/uapi/asm-generic/errno-base.h`, `errno.h`), so a FUSE or
//! kernel-module backend passes them straight through; [`Errno::description`] gives the glibc
//! `strerror` text a shell prints (`sh: write error: Invalid argument`).

use core::fmt;

/// A Linux `errno` value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Errno(pub i32);

macro_rules! errnos {
    ($($name:ident = $val:literal, $text:literal;)*) => {
        impl Errno {
            $(
                #[doc = concat!("`", stringify!($name), "`: ", $text, ".")]
                pub const $name: Errno = Errno($val);
            )*

            /// The symbolic name (`"EINVAL"`), or `None` for a value this crate does not name.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($val => Some(stringify!($name)),)*
                    _ => None,
                }
            }

            /// The glibc `strerror` text (`"Invalid argument"`), or `None` if unnamed.
            pub const fn description(self) -> Option<&'static str> {
                match self.0 {
                    $($val => Some($text),)*
                    _ => None,
                }
            }
        }
    };
}

errnos! {
    EPERM = 1, "Operation not permitted";
    ENOENT = 2, "No such file or directory";
    ESRCH = 3, "No such process";
    EINTR = 4, "Interrupted system call";
    EIO = 5, "Input/output error";
    ENXIO = 6, "No such device or address";
    E2BIG = 7, "Argument list too long";
    EBADF = 9, "Bad file descriptor";
    EAGAIN = 11, "Resource temporarily unavailable";
    ENOMEM = 12, "Cannot allocate memory";
    EACCES = 13, "Permission denied";
    EFAULT = 14, "Bad address";
    EBUSY = 16, "Device or resource busy";
    EEXIST = 17, "File exists";
    ENODEV = 19, "No such device";
    ENOTDIR = 20, "Not a directory";
    EISDIR = 21, "Is a directory";
    EINVAL = 22, "Invalid argument";
    ENFILE = 23, "Too many open files in system";
    EMFILE = 24, "Too many open files";
    EFBIG = 27, "File too large";
    ENOSPC = 28, "No space left on device";
    ESPIPE = 29, "Illegal seek";
    EROFS = 30, "Read-only file system";
    EDOM = 33, "Numerical argument out of domain";
    ERANGE = 34, "Numerical result out of range";
    ENAMETOOLONG = 36, "File name too long";
    ENOSYS = 38, "Function not implemented";
    ENOTEMPTY = 39, "Directory not empty";
    ENODATA = 61, "No data available";
    EOVERFLOW = 75, "Value too large for defined data type";
    EOPNOTSUPP = 95, "Operation not supported";
}

impl Errno {
    /// The raw value (positive, as in `errno`).
    #[inline]
    pub const fn raw(self) -> i32 {
        self.0
    }

    /// The value a kernel function returns for this error (`-EINVAL`).
    #[inline]
    pub const fn to_kernel_return(self) -> i32 {
        -self.0
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "Errno({})", self.0),
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.description() {
            Some(text) => f.write_str(text),
            None => write!(f, "Unknown error {}", self.0),
        }
    }
}

impl core::error::Error for Errno {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_values_and_texts() {
        assert_eq!(Errno::EINVAL.raw(), 22);
        assert_eq!(Errno::ENOMEM.raw(), 12);
        assert_eq!(Errno::EINVAL.name(), Some("EINVAL"));
        assert_eq!(Errno::ENOMEM.description(), Some("Cannot allocate memory"));
        assert_eq!(Errno::EINVAL.to_kernel_return(), -22);
        assert_eq!(Errno(4095).name(), None);
    }
}
