//! The process's allocator, chosen once from `WRIT_ALLOCATOR` before its first allocation:
//! the system's (glibc malloc, the default) or `mimalloc`.
//!
//! Measured on this repository's bench (docs/performance.md, "P5 … the allocator per process"):
//! an edge proxying upstream calls allocates per request on every thread at once and glibc's
//! arena lock shows in its profile — mimalloc's per-thread heaps cut its CPU per proxied call by
//! about a third; the nodes under P1 gained no CPU and grew their resident memory by 25–50 %
//! with it. So edges run with `WRIT_ALLOCATOR=mimalloc` (the deployment files set it) and nodes
//! with the default. The choice never changes once made, so every block is freed by the
//! allocator that gave it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

/// The environment variable naming the allocator: `mimalloc`, or anything else for the system's.
pub const ALLOCATOR_ENV: &std::ffi::CStr = c"WRIT_ALLOCATOR";

const UNDECIDED: u8 = 0;
const SYSTEM: u8 = 1;
const MIMALLOC: u8 = 2;

static MODE: AtomicU8 = AtomicU8::new(UNDECIDED);

extern "C" {
    /// libc's `getenv`: reads the environment without allocating (std's reader allocates).
    fn getenv(name: *const std::ffi::c_char) -> *const std::ffi::c_char;
}

/// The allocator of this process, decided at its first allocation (before any other thread
/// exists: the main thread allocates first).
fn mode() -> u8 {
    let m = MODE.load(Ordering::Relaxed);
    if m != UNDECIDED {
        return m;
    }
    // SAFETY: a NUL-terminated name; getenv returns null or a NUL-terminated value that stays
    // valid while the environment is not modified (it is read here once, before main runs code).
    let chosen = unsafe {
        let value = getenv(ALLOCATOR_ENV.as_ptr());
        if !value.is_null() && std::ffi::CStr::from_ptr(value).to_bytes() == b"mimalloc" {
            MIMALLOC
        } else {
            SYSTEM
        }
    };
    MODE.store(chosen, Ordering::Relaxed);
    chosen
}

/// The name of the allocator in use (for the startup log).
pub fn in_use() -> &'static str {
    if mode() == MIMALLOC {
        "mimalloc"
    } else {
        "system"
    }
}

/// The global allocator: the system's or mimalloc, per [`mode`].
pub struct Chosen;

// SAFETY: every call is passed to one allocator, the same for the whole life of the process.
unsafe impl GlobalAlloc for Chosen {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if mode() == MIMALLOC {
            mimalloc::MiMalloc.alloc(layout)
        } else {
            System.alloc(layout)
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if mode() == MIMALLOC {
            mimalloc::MiMalloc.alloc_zeroed(layout)
        } else {
            System.alloc_zeroed(layout)
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if mode() == MIMALLOC {
            mimalloc::MiMalloc.dealloc(ptr, layout)
        } else {
            System.dealloc(ptr, layout)
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if mode() == MIMALLOC {
            mimalloc::MiMalloc.realloc(ptr, layout, new_size)
        } else {
            System.realloc(ptr, layout, new_size)
        }
    }
}

/// How often a process on the system allocator hands its free memory back
/// ([`start_releasing_free_memory`]).
pub const RELEASE_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Hands the free memory the system allocator holds back to the operating system; whether it
/// did. glibc keeps a heap of up to 64 MiB per thread arena and gives back only what lies at a
/// heap's top, so after a burst — a million audited reads, a snapshot build — a node kept
/// 7 arenas of about 64 MB each, most of it free (resident 214 → 641 MB over 10,000,000 audited
/// reads). `malloc_trim` returns the free pages of every arena, inside a heap too. mimalloc
/// gives back its own.
pub fn release_free_memory() -> bool {
    mode() == SYSTEM && trim_system_allocator()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_system_allocator() -> bool {
    extern "C" {
        /// glibc's `malloc_trim`: 1 when memory was released.
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
    // SAFETY: no arguments but the padding to keep; glibc locks each arena it walks.
    unsafe { malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_system_allocator() -> bool {
    false
}

/// Starts the thread that calls [`release_free_memory`] every [`RELEASE_EVERY`] (once per
/// process; later calls do nothing). A walk of every arena costs milliseconds, so it runs on
/// its own thread, never on the async runtime.
pub fn start_releasing_free_memory() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    if mode() != SYSTEM {
        return;
    }
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new().name("writ-mem-release".into()).spawn(|| loop {
            std::thread::sleep(RELEASE_EVERY);
            if release_free_memory() {
                metrics::counter!("writ_memory_released_total").increment(1);
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no thread to release free memory");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident bytes of this process.
    fn resident() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        statm.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
    }

    /// Memory freed inside a thread arena's heap (where glibc cannot give it back by moving
    /// the heap's top) is resident until it is released, and not after.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn free_memory_inside_an_arena_is_given_back() {
        const BLOCK: usize = 4096;
        const BLOCKS: usize = 12_000; // 48 MB
        let (before, after) = std::thread::spawn(|| {
            let mut blocks: Vec<Vec<u8>> = (0..BLOCKS).map(|i| vec![i as u8; BLOCK]).collect();
            // Keep one block in 16: the free memory lies between live blocks, not at the top.
            let mut i = 0;
            blocks.retain(|_| {
                i += 1;
                i % 16 == 0
            });
            let before = resident();
            assert!(trim_system_allocator(), "nothing released");
            let after = resident();
            drop(blocks);
            (before, after)
        })
        .join()
        .unwrap();
        let freed = (BLOCK * BLOCKS) as u64 * 15 / 16;
        assert!(before.saturating_sub(after) > freed / 2, "resident {before} → {after} bytes; {freed} were free");
    }

    #[test]
    fn both_allocators_give_and_take_back_blocks() {
        let layout = Layout::from_size_align(64, 16).unwrap();
        for allocator in
            [&mimalloc::MiMalloc as &dyn GlobalAlloc, &System as &dyn GlobalAlloc, &Chosen as &dyn GlobalAlloc]
        {
            // SAFETY: a non-zero layout; the block is written within it and freed once.
            unsafe {
                let p = allocator.alloc_zeroed(layout);
                assert!(!p.is_null() && *p == 0);
                let p = allocator.realloc(p, layout, 4096);
                assert!(!p.is_null());
                allocator.dealloc(p, Layout::from_size_align(4096, 16).unwrap());
            }
        }
        // The choice follows the environment this test runs in.
        let asked = std::env::var("WRIT_ALLOCATOR").is_ok_and(|v| v == "mimalloc");
        assert_eq!(in_use(), if asked { "mimalloc" } else { "system" });
    }
}
