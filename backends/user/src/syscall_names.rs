//! The names Linux gives its x86_64 system calls, by number: what a hist trigger's `.syscall`
//! key prints (`id: sys_write [  1]`) for the program's `raw_syscalls` events on the live mount.
//!
//! The table is the one a real Linux 6.12 printed (`tests/goldens/linux-6.12/hist/syscalls`,
//! captured with the hist goldens by `scripts/goldens/capture-6.12.sh hist`): the kernel's own
//! names (`sys_newstat` for `stat`), one `NR NAME` line each. A number the captured kernel did
//! not build (its configuration is small) has no name, and prints as the kernel prints one
//! without metadata (`unknown_syscall`).

use std::sync::OnceLock;

/// `NR NAME` lines.
#[cfg(target_arch = "x86_64")]
const TABLE: &str = include_str!("../../../tests/goldens/linux-6.12/hist/syscalls");
#[cfg(not(target_arch = "x86_64"))]
const TABLE: &str = "";

/// The name of system call `nr` on this architecture, if the table has it.
pub fn name(nr: u64) -> Option<&'static str> {
    static BY_NR: OnceLock<Vec<Option<&'static str>>> = OnceLock::new();
    let by_nr = BY_NR.get_or_init(|| {
        let mut v: Vec<Option<&'static str>> = Vec::new();
        for (n, name) in TABLE.lines().filter_map(|l| {
            let (n, name) = l.split_once(' ')?;
            Some((n.parse::<usize>().ok().filter(|&n| n < 4096)?, name.trim()))
        }) {
            if v.len() <= n {
                v.resize(n + 1, None);
            }
            v[n] = Some(name);
        }
        v
    });
    by_nr.get(usize::try_from(nr).ok()?).copied().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_kernels_names_by_number() {
        assert_eq!(name(0), Some("sys_read"));
        assert_eq!(name(1), Some("sys_write"));
        assert_eq!(name(4), Some("sys_newstat"));
        assert_eq!(name(231), Some("sys_exit_group"));
        assert_eq!(name(100_000), None);
        assert_eq!(name(u64::MAX), None);
    }
}
