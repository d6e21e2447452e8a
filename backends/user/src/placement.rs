//! Where a drainer thread runs while it is losing the race with a writer: on the writer's CPU.
//!
//! Left to the scheduler, the drainers of a program with as many busy threads as CPUs can
//! end up together on one CPU beside one writer while the other writer has a CPU to itself,
//! for 100 ms and more (seen in scheduler samples of the stream-check program's recordings
//! that lost events): the lone writer then fills the largest ring the tool allows before its
//! drainer, a third of a CPU, empties it. A drainer on its writer's CPU gets half of it, and a
//! drainer reads, encodes and writes an event in less CPU time than a call-dense writer takes
//! to make one (9.7 ns against 11.7 for the stream-check program's, on the machine measured:
//! a small margin), so that sharing the writer's CPU it keeps up whatever the other CPUs do.
//! (Not on every machine: on an AMD EPYC VM a drainer sharing its writer's CPU took 21 ns an
//! event to the writer's 14, and keeps up only with the larger share of that CPU that
//! [`crate::precedence`] gives it.)
//! So a drainer that finds a ring at its maximum size a quarter full moves itself to the CPU
//! the ring's newest event was written on ([`Placement::follow`]), and goes back to every CPU
//! it may use once its rings are less than an eighth full (`crate::drain`'s thresholds): a
//! program whose drainers keep up (a single busy thread and an idle CPU) never has them moved.
//!
//! Measured (one machine, one session, the stream-check program's 100 M calls while its two
//! threads still shared a cache line, 20 interleaved recordings each while it ran fast, 1.5 s a
//! recording): events lost in 4 without, in none with; over all the session's batches of that
//! program, 4 of 130 against 0 of 130. Pinning every drainer for good (tried before) made a
//! one-thread program's recording much slower: a drainer held to a CPU cannot take the idle
//! one; here none is moved unless it is losing.
//!
//! Invariant: a drainer only ever runs on CPUs of the affinity it started with; failing to
//! move (a CPU it may not use, a kernel that says no) leaves it where it was.

/// A drainer thread's affinity: the CPUs it started with, and the one it is held to.
#[derive(Debug)]
pub struct Placement {
    /// The affinity the thread started with (`None`: it could not be read; the thread is
    /// never moved).
    allowed: Option<libc::cpu_set_t>,
    /// The CPU the thread is held to, if any.
    held: Option<u32>,
}

/// What a drainer's pass found, for [`Placement::follow`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Race {
    /// The CPU of the newest event of a ring that cannot grow and is far behind after its
    /// turn (the most behind such ring).
    pub losing_on: Option<u32>,
    /// A ring was still behind after its turn (a drainer held to a CPU stays there).
    pub behind: bool,
}

impl Placement {
    /// The calling thread's placement: its affinity as it is now.
    pub fn of_this_thread() -> Placement {
        // SAFETY: `cpu_set_t` is plain data; the call writes at most its size.
        let allowed = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            (libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) == 0).then_some(set)
        };
        Placement {
            allowed,
            held: None,
        }
    }

    /// After a pass: holds the thread to `race.losing_on`'s CPU, or lets it go back to all of
    /// its CPUs once no ring is `behind`.
    pub fn follow(&mut self, race: Race) {
        let Some(allowed) = self.allowed else {
            return;
        };
        match race.losing_on {
            Some(cpu) if self.held != Some(cpu) => {
                // SAFETY: reads a set of ours.
                let may = (cpu as usize) < libc::CPU_SETSIZE as usize
                    && unsafe { libc::CPU_ISSET(cpu as usize, &allowed) };
                if may {
                    // SAFETY: `cpu_set_t` is plain data, written by `CPU_SET`.
                    let ok = unsafe {
                        let mut one: libc::cpu_set_t = std::mem::zeroed();
                        libc::CPU_SET(cpu as usize, &mut one);
                        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &one) == 0
                    };
                    if ok {
                        self.held = Some(cpu);
                    }
                }
            }
            None if self.held.is_some() && !race.behind => {
                // SAFETY: the set read at the start.
                unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &allowed) };
                self.held = None;
            }
            _ => {}
        }
    }

    /// The CPU the thread is held to, if any.
    pub fn held(&self) -> Option<u32> {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's affinity.
    fn affinity() -> libc::cpu_set_t {
        // SAFETY: `cpu_set_t` is plain data; the call writes at most its size.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(
                libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set),
                0
            );
            set
        }
    }

    fn cpus(set: &libc::cpu_set_t) -> Vec<u32> {
        (0..libc::CPU_SETSIZE as u32)
            // SAFETY: reads a set of ours.
            .filter(|c| unsafe { libc::CPU_ISSET(*c as usize, set) })
            .collect()
    }

    /// A drainer losing the race is held to its writer's CPU, stays there while a ring is
    /// still behind, and gets every CPU it had back once none is.
    #[test]
    fn a_losing_drainer_follows_its_writer_and_lets_go_once_caught_up() {
        std::thread::spawn(|| {
            let start = cpus(&affinity());
            let writer = *start.last().unwrap();
            let mut p = Placement::of_this_thread();
            p.follow(Race {
                losing_on: Some(writer),
                behind: true,
            });
            assert_eq!(p.held(), Some(writer));
            assert_eq!(cpus(&affinity()), [writer]);
            p.follow(Race {
                losing_on: None,
                behind: true,
            });
            assert_eq!(cpus(&affinity()), [writer], "let go while still behind");
            p.follow(Race {
                losing_on: None,
                behind: false,
            });
            assert_eq!(p.held(), None);
            assert_eq!(cpus(&affinity()), start);
        })
        .join()
        .unwrap();
    }

    /// A CPU the thread may not use (outside its affinity, or past any set) moves nothing.
    #[test]
    fn a_cpu_outside_the_affinity_is_not_followed() {
        std::thread::spawn(|| {
            let start = cpus(&affinity());
            let mut p = Placement::of_this_thread();
            let outside = (0..libc::CPU_SETSIZE as u32)
                .find(|c| !start.contains(c))
                .unwrap();
            for cpu in [outside, u32::MAX] {
                p.follow(Race {
                    losing_on: Some(cpu),
                    behind: true,
                });
                assert_eq!(p.held(), None);
                assert_eq!(cpus(&affinity()), start);
            }
        })
        .join()
        .unwrap();
    }
}
