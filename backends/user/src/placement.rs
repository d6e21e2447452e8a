//! Where a drainer thread runs: on its writer's CPU while it is losing the race with it, off
//! its busy writers' CPUs while it keeps up.
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
//! And while it is not losing, a drainer keeps off the CPUs its busy writers run on, when it
//! may use another ([`Placement::follow`], `Race::writing_on`). A kernel that packs threads
//! onto few CPUs (the AMD EPYC VM's, booted with `sched_vcpu_pack`) woke a drainer on its
//! writer's CPU, beside it, each time it had slept between passes while the other CPU stayed
//! idle (the scheduler's switch events of fib(27) recordings: the drainer and the program
//! taking turns on CPU 0 for the first 4 ms, or for the whole run); the writer then got ahead
//! of the drainer and moved to a larger ring, whose first lap's page faults cost it 5-10 ms.
//! With it, the two run on two CPUs from the drainer's first busy pass on (switch events).
//! End to end the difference is within that machine's noise (fib(27), 10 interleaved
//! recordings each: function moved in 6 of 10 against 4, median 23.5 ms against 20.7;
//! function_graph 6 against 5, 31.8 against 29.9; later batches from no difference to 9 of
//! 12 against 6): a drainer about as fast as fib's writer still falls behind it later in
//! the run. A drainer whose writers run on every CPU it may use goes back to all of them (two
//! busy writers on two CPUs: 0 lost in 8 recordings of 100 M calls, as before). Tried, not
//! kept: starting the drainers off the program's CPU as well (the fresh-check of `711a278`,
//! its tests sharing two CPUs, once found a recording whose drainer had read nothing of a 3 ms
//! thread; the likely cause, drainers held to the CPU the program's second thread then took).
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
    /// The busy writers' CPUs the thread's affinity was last set for (sorted, each once;
    /// empty: none since it started or was last held).
    apart_from: Vec<u32>,
}

/// What a drainer's pass found, for [`Placement::follow`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Race {
    /// The CPU of the newest event of a ring that cannot grow and is far behind after its
    /// turn (the most behind such ring).
    pub losing_on: Option<u32>,
    /// A ring was still behind after its turn (a drainer held to a CPU stays there).
    pub behind: bool,
    /// The CPUs of the newest events of the rings that gave the pass many events (their
    /// writers are busy), sorted, each once.
    pub writing_on: Vec<u32>,
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
            apart_from: Vec::new(),
        }
    }

    /// After a pass: holds the thread to `race.losing_on`'s CPU, or lets it go back to all of
    /// its CPUs once no ring is `behind`; while it is not held, keeps it off the CPUs in
    /// `race.writing_on` if it may use another (see the module docs).
    pub fn follow(&mut self, race: &Race) {
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
                    let one = unsafe {
                        let mut one: libc::cpu_set_t = std::mem::zeroed();
                        libc::CPU_SET(cpu as usize, &mut one);
                        one
                    };
                    if set_affinity(&one) {
                        self.held = Some(cpu);
                        self.apart_from.clear();
                    }
                }
            }
            None if self.held.is_some() && !race.behind => {
                set_affinity(&allowed);
                self.held = None;
            }
            _ => {}
        }
        if self.held.is_none() {
            self.keep_apart(&allowed, &race.writing_on);
        }
    }

    /// Keeps the thread off `writers` (CPUs), on the rest of `allowed`; on all of `allowed`
    /// when that leaves none. Nothing when `writers` is empty (no busy writer: where the
    /// thread runs does not matter) or the same as last time.
    fn keep_apart(&mut self, allowed: &libc::cpu_set_t, writers: &[u32]) {
        if writers.is_empty() || writers == self.apart_from.as_slice() {
            return;
        }
        let mut rest = *allowed;
        for &cpu in writers {
            if (cpu as usize) < libc::CPU_SETSIZE as usize {
                // SAFETY: a set of ours, `cpu` within it.
                unsafe { libc::CPU_CLR(cpu as usize, &mut rest) };
            }
        }
        // SAFETY: reads a set of ours.
        let target = if unsafe { libc::CPU_COUNT(&rest) } == 0 {
            allowed
        } else {
            &rest
        };
        if set_affinity(target) {
            self.apart_from = writers.to_vec();
        }
    }

    /// The CPU the thread is held to, if any.
    pub fn held(&self) -> Option<u32> {
        self.held
    }
}

/// Sets the calling thread's affinity to `set`; whether the kernel took it.
fn set_affinity(set: &libc::cpu_set_t) -> bool {
    // SAFETY: a plain syscall on a set of ours, of its own size.
    unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), set) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a new thread, whose affinity the test may change without changing the
    /// test harness's.
    fn on_a_thread_of_its_own(f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(f).join().unwrap();
    }

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
        on_a_thread_of_its_own(|| {
            let start = cpus(&affinity());
            let writer = *start.last().unwrap();
            let mut p = Placement::of_this_thread();
            p.follow(&Race {
                losing_on: Some(writer),
                behind: true,
                ..Race::default()
            });
            assert_eq!(p.held(), Some(writer));
            assert_eq!(cpus(&affinity()), [writer]);
            p.follow(&Race {
                losing_on: None,
                behind: true,
                ..Race::default()
            });
            assert_eq!(cpus(&affinity()), [writer], "let go while still behind");
            p.follow(&Race {
                losing_on: None,
                behind: false,
                ..Race::default()
            });
            assert_eq!(p.held(), None);
            assert_eq!(cpus(&affinity()), start);
        });
    }

    /// A CPU the thread may not use (outside its affinity, or past any set) moves nothing.
    #[test]
    fn a_cpu_outside_the_affinity_is_not_followed() {
        on_a_thread_of_its_own(|| {
            let start = cpus(&affinity());
            let mut p = Placement::of_this_thread();
            let outside = (0..libc::CPU_SETSIZE as u32)
                .find(|c| !start.contains(c))
                .unwrap();
            for cpu in [outside, u32::MAX] {
                p.follow(&Race {
                    losing_on: Some(cpu),
                    behind: true,
                    ..Race::default()
                });
                assert_eq!(p.held(), None);
                assert_eq!(cpus(&affinity()), start);
            }
        });
    }

    /// A drainer keeps off the CPU its busy writer runs on while it may use another, keeps
    /// its place while no writer is busy, and goes back to all its CPUs when the writers run
    /// on every one; a drainer held to a losing writer's CPU is not moved off it.
    #[test]
    fn a_drainer_keeps_off_its_busy_writers_cpus_while_it_has_others() {
        on_a_thread_of_its_own(|| {
            let start = cpus(&affinity());
            let mut p = Placement::of_this_thread();
            let writer = start[0];
            let busy = |writing_on: Vec<u32>| Race {
                writing_on,
                ..Race::default()
            };
            p.follow(&busy(vec![writer]));
            let rest: Vec<u32> = start.iter().copied().filter(|&c| c != writer).collect();
            if rest.is_empty() {
                // One CPU: nowhere else to go.
                assert_eq!(cpus(&affinity()), start);
                return;
            }
            assert_eq!(cpus(&affinity()), rest);
            p.follow(&Race::default());
            assert_eq!(cpus(&affinity()), rest, "no busy writer: left where it is");
            p.follow(&busy(start.clone()));
            assert_eq!(
                cpus(&affinity()),
                start,
                "writers on every CPU: all of them"
            );
            p.follow(&Race {
                losing_on: Some(writer),
                behind: true,
                writing_on: vec![writer],
            });
            assert_eq!(p.held(), Some(writer));
            assert_eq!(cpus(&affinity()), [writer], "held: not kept apart");
        });
    }
}
