//! The process's allocator, chosen once from `WRIT_ALLOCATOR` before its first allocation:
//! the system's (glibc malloc, the default) or `mimalloc`.
//!
//! Measured on this repository's bench (docs/performance.md, "P5 … the allocator per process"):
//! an edge proxying upstream calls allocates per request on every thread at once and glibc's
//! arena lock shows in its profile — mimalloc's per-thread heaps cut its CPU per proxied call by
//! about a third; the nodes under P1 gained no CPU and grew their resident memory by 25–50 %
//! with it. Against glibc limited to one arena per core ([`limit_arenas`]) an edge still spent
//! 35–42 % more CPU per proxied call at 16 connections. So edges run with
//! `WRIT_ALLOCATOR=mimalloc` (the deployment files set it) and nodes with the default. The choice never changes once made, so every block is freed by the
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

/// Tunes the chosen allocator once, before the process starts its threads: glibc to one arena
/// per core ([`limit_arenas`]), mimalloc to the kernel's small pages ([`small_pages_only`]).
pub fn prepare() {
    if mode() == MIMALLOC {
        small_pages_only();
    } else {
        limit_arenas();
    }
}

/// Keeps this process on the kernel's small pages. mimalloc asks for transparent huge pages for
/// its arenas, and a 2 MiB page stays resident while any block of it is in use: under P5 an edge
/// on mimalloc held 15 MB more with them, for the same CPU per call (docs/performance.md,
/// "Transparent huge pages on the edges"). What `MIMALLOC_ALLOW_THP=0` does, without the
/// environment.
fn small_pages_only() {
    #[cfg(target_os = "linux")]
    {
        extern "C" {
            /// libc's `prctl`.
            fn prctl(option: std::ffi::c_int, ...) -> std::ffi::c_int;
        }
        /// Linux's `PR_SET_THP_DISABLE`: no transparent huge page for this process, whatever
        /// it asks with `madvise`.
        const PR_SET_THP_DISABLE: std::ffi::c_int = 41;
        let (on, unused): (std::ffi::c_ulong, std::ffi::c_ulong) = (1, 0);
        // SAFETY: a documented option with its documented arguments; it only sets a flag of
        // this process.
        unsafe { prctl(PR_SET_THP_DISABLE, on, unused, unused, unused) };
    }
}

/// Limits the system allocator to one arena per core (glibc's default is eight per core), once,
/// before the process starts its threads. A thread arena keeps its own heaps, and free pieces
/// left between live blocks in each cannot be given back; over an hour's operations a node's
/// resident size kept growing while what it had in use did not (docs/performance.md, "Memory
/// the allocator keeps"). mimalloc manages its own.
pub fn limit_arenas() {
    if mode() != SYSTEM {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    set_arena_max(cores);
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_arena_max(arenas: usize) {
    extern "C" {
        /// glibc's `mallopt`: 1 when the parameter was set.
        fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
    }
    /// glibc's `M_ARENA_MAX`.
    const M_ARENA_MAX: std::ffi::c_int = -8;
    let arenas = std::ffi::c_int::try_from(arenas).unwrap_or(std::ffi::c_int::MAX);
    // SAFETY: a documented parameter and a positive value; glibc takes its lock to set it.
    unsafe { mallopt(M_ARENA_MAX, arenas) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_arena_max(_arenas: usize) {}

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

/// What the system allocator holds: bytes handed to the program and bytes free inside its
/// arenas (resident or not). Beside the resident size this tells memory the program keeps from
/// memory the allocator keeps: free pieces between live blocks cannot be given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub in_use: u64,
    pub free: u64,
}

/// [`Held`] of the system allocator (`None` with mimalloc, or without glibc).
pub fn system_allocator_held() -> Option<Held> {
    if mode() != SYSTEM {
        return None;
    }
    glibc_held()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn glibc_held() -> Option<Held> {
    /// glibc's `struct mallinfo2` (every field a `size_t`).
    #[repr(C)]
    struct MallInfo2 {
        arena: usize,
        ordblks: usize,
        smblks: usize,
        hblks: usize,
        hblkhd: usize,
        usmblks: usize,
        fsmblks: usize,
        uordblks: usize,
        fordblks: usize,
        keepcost: usize,
    }
    extern "C" {
        /// glibc's `mallinfo2` (2.33 and later): totals over every arena.
        fn mallinfo2() -> MallInfo2;
    }
    // SAFETY: no arguments; glibc locks each arena it sums.
    let m = unsafe { mallinfo2() };
    // In use: blocks in the arenas and blocks mapped on their own; free: what the arenas keep.
    Some(Held { in_use: (m.uordblks + m.hblkhd) as u64, free: m.fordblks as u64 })
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn glibc_held() -> Option<Held> {
    None
}

/// Starts the thread that calls [`release_free_memory`] every [`RELEASE_EVERY`] and sets the
/// `writ_allocator_bytes` gauges from [`system_allocator_held`] (once per process; later calls
/// do nothing). A walk of every arena costs milliseconds, so it runs on its own thread, never
/// on the async runtime.
pub fn start_releasing_free_memory() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    if mode() != SYSTEM {
        return;
    }
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new().name("writ-mem-release".into()).spawn(|| loop {
            if let Some(held) = system_allocator_held() {
                metrics::gauge!("writ_allocator_bytes", "part" => "in_use").set(held.in_use as f64);
                metrics::gauge!("writ_allocator_bytes", "part" => "free").set(held.free as f64);
            }
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

    /// Held by the tests that measure the whole process's memory, one at a time.
    static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
        let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
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

    /// A block handed out counts as in use until it is freed.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn the_system_allocator_counts_what_it_hands_out() {
        const BYTES: usize = 32 << 20;
        let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
        let before = glibc_held().unwrap();
        let block = vec![1u8; BYTES];
        let holding = glibc_held().unwrap();
        drop(block);
        let after = glibc_held().unwrap();
        assert!(holding.in_use >= before.in_use + BYTES as u64 / 2, "{before:?} → {holding:?}");
        assert!(after.in_use + BYTES as u64 / 2 <= holding.in_use, "{holding:?} → {after:?}");
    }

    /// The arenas glibc has made so far (`malloc_info`'s `<heap nr=…>` elements).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn arenas() -> usize {
        extern "C" {
            fn open_memstream(buf: *mut *mut std::ffi::c_char, size: *mut usize) -> *mut std::ffi::c_void;
            fn malloc_info(options: std::ffi::c_int, stream: *mut std::ffi::c_void) -> std::ffi::c_int;
            fn fclose(stream: *mut std::ffi::c_void) -> std::ffi::c_int;
            fn free(ptr: *mut std::ffi::c_void);
        }
        let (mut buf, mut size) = (std::ptr::null_mut(), 0usize);
        // SAFETY: the stream writes into a buffer glibc allocates; it is read after the stream
        // is closed (which sets buf and size) and freed with glibc's free.
        let xml = unsafe {
            let stream = open_memstream(&mut buf, &mut size);
            assert!(!stream.is_null());
            assert_eq!(malloc_info(0, stream), 0);
            assert_eq!(fclose(stream), 0);
            let xml = std::slice::from_raw_parts(buf as *const u8, size).to_vec();
            free(buf.cast());
            xml
        };
        String::from_utf8(xml).unwrap().matches("<heap nr=").count()
    }

    /// Threads that start after the limit share the arenas there are (up to one per core)
    /// instead of taking one each.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn threads_share_at_most_one_arena_per_core() {
        const THREADS: usize = 8;
        let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
        limit_arenas();
        let before = arenas();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let all_hold = std::sync::Arc::new(std::sync::Barrier::new(THREADS + 1));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let all_hold = all_hold.clone();
                std::thread::spawn(move || {
                    let block = std::hint::black_box(vec![1u8; 4096]);
                    all_hold.wait(); // every thread holds a block
                    all_hold.wait(); // the arenas are counted
                    drop(block);
                })
            })
            .collect();
        all_hold.wait();
        let during = arenas();
        all_hold.wait();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert!(during <= before.max(cores), "{before} arenas before {THREADS} threads, {during} with them");
    }

    /// After it, the kernel gives this process no transparent huge page.
    #[cfg(target_os = "linux")]
    #[test]
    fn small_pages_only_turns_transparent_huge_pages_off() {
        let thp = || {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            status.lines().find_map(|l| l.strip_prefix("THP_enabled:").map(|v| v.trim().to_string()))
        };
        if thp().is_none() {
            return; // a kernel older than 6.1 does not say
        }
        small_pages_only();
        assert_eq!(thp().as_deref(), Some("0"));
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
