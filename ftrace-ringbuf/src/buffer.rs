//! The whole ring buffer ([`RingBuffer`]): one [`CpuBuffer`] per CPU, created from one page
//! provider, with buffer-wide switches (mode, recording on/off, per-CPU enable, resize,
//! reset).
//!
//! Nothing here is on the hot path: a writer picks its CPU's buffer once with
//! [`RingBuffer::cpu`] and talks to it directly.

use core::alloc::Layout;
use core::fmt;
use core::ptr::NonNull;

use crate::cpu::{BufferError, CpuBuffer, Mode};
use crate::provider::PageProvider;

/// Per-CPU ring buffers sharing one geometry and provider.
pub struct RingBuffer<P: PageProvider + Clone> {
    cpus: NonNull<CpuBuffer<P>>,
    nr_cpus: usize,
    provider: P,
}

// SAFETY: owns its CPU buffers, which are Send/Sync under the same bounds.
unsafe impl<P: PageProvider + Clone + Send> Send for RingBuffer<P> {}
// SAFETY: as above.
unsafe impl<P: PageProvider + Clone + Sync> Sync for RingBuffer<P> {}

impl<P: PageProvider + Clone> RingBuffer<P> {
    /// `nr_cpus` buffers of `pages_per_cpu` pages of `page_size` bytes each.
    pub fn new(
        provider: P,
        nr_cpus: usize,
        pages_per_cpu: usize,
        page_size: usize,
    ) -> Result<Self, BufferError> {
        let layout = Layout::array::<CpuBuffer<P>>(nr_cpus).map_err(|_| BufferError::NoMemory)?;
        let cpus = provider
            .alloc(layout)
            .ok_or(BufferError::NoMemory)?
            .cast::<CpuBuffer<P>>();
        for i in 0..nr_cpus {
            match CpuBuffer::new(provider.clone(), pages_per_cpu, page_size) {
                // SAFETY: `i < nr_cpus`: inside the array just allocated.
                Ok(b) => unsafe { cpus.as_ptr().add(i).write(b) },
                Err(e) => {
                    // SAFETY: buffers 0..i were written above; the array is ours.
                    unsafe {
                        for j in 0..i {
                            core::ptr::drop_in_place(cpus.as_ptr().add(j));
                        }
                        provider.dealloc(cpus.cast(), layout);
                    }
                    return Err(e);
                }
            }
        }
        Ok(RingBuffer {
            cpus,
            nr_cpus,
            provider,
        })
    }

    /// The number of CPU buffers.
    pub fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    /// All CPU buffers, by CPU index.
    pub fn cpus(&self) -> &[CpuBuffer<P>] {
        // SAFETY: `nr_cpus` initialised buffers live as long as `self`.
        unsafe { core::slice::from_raw_parts(self.cpus.as_ptr(), self.nr_cpus) }
    }

    fn cpus_mut(&mut self) -> &mut [CpuBuffer<P>] {
        // SAFETY: as in `cpus`, and `&mut self` is exclusive.
        unsafe { core::slice::from_raw_parts_mut(self.cpus.as_ptr(), self.nr_cpus) }
    }

    /// CPU `cpu`'s buffer.
    #[inline(always)]
    pub fn cpu(&self, cpu: usize) -> Option<&CpuBuffer<P>> {
        self.cpus().get(cpu)
    }

    /// CPU `cpu`'s buffer, to resize alone (`buffer_size_kb` of one CPU) before the
    /// whole ring is published.
    pub fn cpu_mut(&mut self, cpu: usize) -> Option<&mut CpuBuffer<P>> {
        self.cpus_mut().get_mut(cpu)
    }

    /// Sets overwrite or producer/consumer mode on every CPU.
    pub fn set_mode(&self, mode: Mode) {
        self.cpus().iter().for_each(|c| c.set_mode(mode));
    }

    /// Turns recording off or on on every CPU (`tracing_on`).
    pub fn set_record_on(&self, on: bool) {
        self.cpus().iter().for_each(|c| c.set_record_on(on));
    }

    /// Includes or excludes CPU `cpu` (`tracing_cpumask`).
    pub fn set_cpu_enabled(&self, cpu: usize, enabled: bool) {
        if let Some(c) = self.cpu(cpu) {
            c.set_cpu_enabled(enabled);
        }
    }

    /// Resizes every CPU buffer to `pages_per_cpu` pages (emptying them).
    pub fn resize(&mut self, pages_per_cpu: usize) -> Result<(), BufferError> {
        self.cpus_mut()
            .iter_mut()
            .try_for_each(|c| c.resize(pages_per_cpu))
    }

    /// Empties every CPU buffer.
    pub fn reset(&mut self) {
        self.cpus_mut().iter_mut().for_each(CpuBuffer::reset);
    }

    /// Events in all buffers and events written in total: the `entries-in-buffer/
    /// entries-written` pair of the `trace` header (written counts overruns too).
    pub fn entries_and_written(&self) -> (u64, u64) {
        self.cpus().iter().fold((0, 0), |(e, w), c| {
            let s = c.stats(0);
            (e + s.entries, w + s.entries + s.overrun)
        })
    }
}

impl<P: PageProvider + Clone> Drop for RingBuffer<P> {
    fn drop(&mut self) {
        let layout = Layout::array::<CpuBuffer<P>>(self.nr_cpus).expect("layout was valid");
        // SAFETY: every buffer was initialised in `new`; drop each once, then free the array
        // with the layout it was allocated with.
        unsafe {
            for i in 0..self.nr_cpus {
                core::ptr::drop_in_place(self.cpus.as_ptr().add(i));
            }
            self.provider.dealloc(self.cpus.cast(), layout);
        }
    }
}

impl<P: PageProvider + Clone> fmt::Debug for RingBuffer<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingBuffer")
            .field("nr_cpus", &self.nr_cpus)
            .finish_non_exhaustive()
    }
}
