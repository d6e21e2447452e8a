//! Jump labels in this process: a `static_branch_unlikely!` site is a NOP while its key is
//! off; turning the key on rewrites the NOP to `jmp` through the breakpoint protocol (the
//! process's own text, made writable with `mprotect`), and off restores the NOP.
#![cfg(target_arch = "x86_64")]

use ftrace_core::jump_label::entries_of;
use ftrace_core::static_branch_unlikely;
use ftrace_core::static_key::{Branch, StaticKey};
use ftrace_patch::jump_label::{JumpSite, JumpTo, KeyUpdate, update_key, update_sites};
use ftrace_patch::protocol::{PokeSite, StopFixup};
use ftrace_patch::{TextFault, TextPoke};

static KEY: StaticKey = StaticKey::new();
static OTHER: StaticKey = StaticKey::new();

#[inline(never)]
fn site(x: u64) -> u64 {
    if static_branch_unlikely!(KEY) {
        x * 3
    } else {
        x + 1
    }
}

#[inline(never)]
fn other_site() -> bool {
    static_branch_unlikely!(OTHER)
}

/// This process's text: pages made writable for each write (one thread: syncing is a no-op,
/// stopping the others is running the patch).
struct OwnText;

impl TextPoke for OwnText {
    fn read_text(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), TextFault> {
        // SAFETY: `addr` is a jump-label site of this image's text, mapped readable.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }
    fn write_text(&mut self, addr: u64, bytes: &[u8]) -> Result<(), TextFault> {
        let page = addr & !4095;
        let len = (addr + bytes.len() as u64 - page).next_multiple_of(4096) as usize;
        // SAFETY: the pages hold this image's text; they stay executable, and only the site's
        // bytes are written, while no other thread runs them.
        unsafe {
            let rwx = libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC;
            if libc::mprotect(page as *mut libc::c_void, len, rwx) != 0 {
                return Err(TextFault { addr });
            }
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len());
            libc::mprotect(
                page as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_EXEC,
            );
        }
        Ok(())
    }
    fn sync_cores(&mut self) {}
    fn stop_others(&mut self, _fixup: &StopFixup<'_>, patch: &mut dyn FnMut(&mut Self)) {
        patch(self)
    }
}

fn sites(key: &'static StaticKey) -> Vec<JumpSite> {
    entries_of(key)
        .map(|e| JumpSite {
            code: e.code,
            target: e.target,
        })
        .collect()
}

/// The patcher a platform installs: every site of `key` rewritten by `update_key`.
fn update(key: &'static StaticKey, b: Branch) {
    let st = update_key(&mut OwnText, key, b);
    let all = KeyUpdate {
        done: sites(key).len(),
        ..KeyUpdate::default()
    };
    assert_eq!(st, all);
}

fn bytes(addr: u64) -> [u8; 5] {
    let mut b = [0; 5];
    OwnText.read_text(addr, &mut b).unwrap();
    b
}

#[test]
fn keys_patch_their_own_sites() {
    let key_sites = sites(&KEY);
    assert_eq!(key_sites.len(), 1, "one site tests KEY");
    let code = key_sites[0].code;
    assert_eq!(bytes(code), [0x0f, 0x1f, 0x44, 0x00, 0x00]);
    assert_eq!(site(std::hint::black_box(10)), 11);

    KEY.inc(|b| update(&KEY, b));
    assert_eq!(bytes(code)[0], 0xe9);
    assert_eq!(site(std::hint::black_box(10)), 30);
    assert!(!other_site(), "another key's site is untouched");

    KEY.inc(|_| panic!("already on"));
    KEY.dec(|_| panic!("still one user"));
    assert_eq!(site(std::hint::black_box(10)), 30);
    KEY.dec(|b| update(&KEY, b));
    assert_eq!(bytes(code), [0x0f, 0x1f, 0x44, 0x00, 0x00]);
    assert_eq!(site(std::hint::black_box(10)), 11);

    // A site that holds neither form is not written over.
    let mut buf = [const { PokeSite::empty() }; 1];
    let wrong = [JumpSite {
        code,
        target: code + 0x40,
    }];
    let st = update_sites(&mut OwnText, &wrong, JumpTo::Nop, &mut buf).unwrap();
    assert_eq!((st.done, st.failed), (0, 1));
    assert_eq!(bytes(code), [0x0f, 0x1f, 0x44, 0x00, 0x00]);
}
