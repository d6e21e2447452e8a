//! [`CallSiteText`]: the platform's text with its call sites (dynamic ftrace), and
//! [`NoCallSites`] for a platform whose traced functions always call the trampoline.

use ftrace_patch::{FixedTargets, InitKind, Protocol, StopFixup, TextFault, TextPoke};

/// The text that holds a platform's call sites and how it is rewritten: the kernel's
/// `CONFIG_DYNAMIC_FTRACE` (`__mcount_loc` / `__patchable_function_entries`, `text_poke`,
/// `text_poke_sync`, `stop_machine`).
///
/// The instance takes one at first use (`Default`), turns every site into a call-site record
/// (ftrace-patch's `init_records`: a site holding unexpected bytes is reported through
/// [`Platform::ftrace_bug`](super::Platform::ftrace_bug) and never touched again), and from
/// then on rewrites the sites through ftrace-patch's protocols on this [`TextPoke`]: a site
/// calls [`CallSiteText::targets`]' trampoline exactly while some registered ops of the instance
/// admits its function.
pub trait CallSiteText: TextPoke + Default + Send + 'static {
    /// The address of every call site, in any order (`None`: no call-site records; every
    /// traced function always reaches the trampoline, as in a kernel without
    /// `CONFIG_DYNAMIC_FTRACE`, and the filter files act in the dispatcher only).
    fn call_sites(&self) -> Option<&[u64]>;
    /// The trampolines an enabled site calls.
    fn targets(&self) -> FixedTargets;
    /// How a site is recognised at start (x86_64 by default).
    fn init_kind(&self) -> InitKind {
        InitKind::X86
    }
    /// How live text is rewritten (by default the kernel's choice per site).
    fn protocol(&self) -> Protocol {
        Protocol::Auto
    }
}

/// A platform without call-site records: every traced function always calls the trampoline
/// (the host example, a kernel built without `CONFIG_DYNAMIC_FTRACE`). There is no
/// `available_filter_functions`; the filter files resolve against the platform's symbols and
/// act in the dispatcher.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCallSites;

impl TextPoke for NoCallSites {
    fn read_text(&mut self, addr: u64, _buf: &mut [u8]) -> Result<(), TextFault> {
        Err(TextFault { addr })
    }
    fn write_text(&mut self, addr: u64, _bytes: &[u8]) -> Result<(), TextFault> {
        Err(TextFault { addr })
    }
    fn sync_cores(&mut self) {}
    fn stop_others(&mut self, _fixup: &StopFixup<'_>, patch: &mut dyn FnMut(&mut Self)) {
        patch(self)
    }
}

impl CallSiteText for NoCallSites {
    fn call_sites(&self) -> Option<&[u64]> {
        None
    }
    fn targets(&self) -> FixedTargets {
        FixedTargets {
            caller: 0,
            regs_caller: 0,
            list_ops: 0,
            nop_ops: 0,
        }
    }
}
