//! How Linux schedules the server's threads: the HTTP threads one per CPU
//! with short time slices, the costly tools' threads at `SCHED_IDLE` while
//! a guard sees that they are not starved (`host::executors`).
//!
//! Why (bench arm 6, a tool computing 1.5 ms per call at full concurrency
//! beside echo; bench/ANALYSIS.md): its threads at nice +10 still took
//! about a core, as nice's weights hold only within one CPU's run queue,
//! and an off-CPU profile of the HTTP threads showed them waiting on the
//! run queue behind each other (both on one CPU) and behind the tool's
//! threads, up to 6 ms at a time. With the HTTP threads pinned, given
//! EEVDF's shortest slice, and the tool's threads at `SCHED_IDLE` under
//! the guard, echo's p99 beside the tool went from 3.0–3.5× its calm p99
//! to 1.17–1.52× (six runs); each part alone, or nice +19 instead of
//! `SCHED_IDLE`, left it at 1.3–2.7×.
//!
//! Every change here is best effort: where the system refuses one, the
//! thread runs as it was, and the server works as before.

use std::time::Duration;

/// The time slice the HTTP threads ask for: the shortest EEVDF allows
/// (Linux 6.12+; earlier kernels ignore it), so that, woken by a request,
/// one preempts a thread with a longer slice at once.
const HTTP_SLICE: Duration = Duration::from_micros(100);

/// Settles the calling thread as a thread serving HTTP, once: pins it to a
/// CPU of its own (the n-th thread to the n-th CPU the process may use;
/// threads beyond those stay free) and asks for short time slices.
/// Called by the HTTP runtime each time a worker parks: only its workers
/// park, not its blocking threads (the store's work), which stay free.
pub fn settle_http_worker() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    thread_local!(static SETTLED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    if SETTLED.replace(true) {
        return;
    }
    let index = NEXT.fetch_add(1, Ordering::Relaxed);
    if let Some(&cpu) = allowed_cpus().get(index) {
        pin_to(cpu);
    }
    ask_for_slice(HTTP_SLICE);
    HTTP_WORKERS.lock().unwrap_or_else(|p| p.into_inner()).push(this_thread());
}

/// The threads serving HTTP, as they settled: the guard of the costly
/// tools' threads reads how busy they are (`host::executors`).
static HTTP_WORKERS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// The ids of the threads serving HTTP that have settled.
pub fn http_workers() -> Vec<i32> {
    HTTP_WORKERS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The CPUs the process may run on, read once (by the first thread to
/// ask, before it pinned itself).
fn allowed_cpus() -> &'static [usize] {
    static ALLOWED: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    ALLOWED.get_or_init(|| {
        #[cfg(target_os = "linux")]
        // SAFETY: reads the calling thread's affinity into a set it owns.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
                return (0..libc::CPU_SETSIZE as usize).filter(|&cpu| libc::CPU_ISSET(cpu, &set)).collect();
            }
        }
        Vec::new()
    })
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: sets the calling thread's affinity from a set it owns.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            tracing::debug!(cpu, "could not pin an HTTP thread");
        }
    }
}

/// `struct sched_attr` as `sched_setattr(2)` reads it (its first version).
#[cfg(target_os = "linux")]
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    /// For `SCHED_OTHER`, the time slice asked for (Linux 6.12+).
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Asks for time slices of `slice` for the calling thread, at its nice.
fn ask_for_slice(slice: Duration) {
    #[cfg(target_os = "linux")]
    // SAFETY: the calling thread's own priority, and a `sched_attr` it owns.
    unsafe {
        let thread = libc::gettid();
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            policy: libc::SCHED_OTHER as u32,
            flags: 0,
            nice: libc::getpriority(libc::PRIO_PROCESS, thread as libc::id_t),
            priority: 0,
            runtime: slice.as_nanos() as u64,
            deadline: 0,
            period: 0,
        };
        if libc::syscall(libc::SYS_sched_setattr, thread, &attr as *const SchedAttr, 0) != 0 {
            tracing::debug!("could not ask for short time slices for an HTTP thread");
        }
    }
}

/// Whether a thread of this process may be put at `SCHED_IDLE` and taken
/// back to `SCHED_OTHER` (leaving `SCHED_IDLE` takes `CAP_SYS_NICE`, or an
/// `RLIMIT_NICE` that allows the thread's nice), and the kernel tells how
/// long a thread waited to run (`schedstat`), which the guard reads. Tried
/// once, on a thread of its own `lowered_by` steps of nice below the
/// server (the first caller's steps decide).
pub fn idle_policy_usable(lowered_by: i32) -> bool {
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(|| {
        std::thread::spawn(move || {
            lower_priority(lowered_by);
            let thread = this_thread();
            set_idle(thread, true) && set_idle(thread, false) && schedstat(thread).is_some()
        })
        .join()
        .unwrap_or(false)
    })
}

/// Lowers the calling thread's CPU priority by `steps` of nice below the
/// one it was started with (the server's), to 19 at most: never above the
/// server's, however the operator started it. Failing is harmless: the
/// thread runs at the server's priority.
pub fn lower_priority(steps: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: getpriority and setpriority of the calling thread's own id.
    unsafe {
        let thread = libc::gettid() as libc::id_t;
        let own = libc::getpriority(libc::PRIO_PROCESS, thread);
        if libc::setpriority(libc::PRIO_PROCESS, thread, own.saturating_add(steps).min(19)) != 0 {
            tracing::debug!(steps, "could not lower a tool thread's priority");
        }
    }
}

/// The calling thread's id.
pub fn this_thread() -> i32 {
    #[cfg(target_os = "linux")]
    // SAFETY: no arguments.
    return unsafe { libc::gettid() };
    #[cfg(not(target_os = "linux"))]
    0
}

/// Puts `thread` (of this process) at `SCHED_IDLE`, or back at
/// `SCHED_OTHER`, its nice kept. Whether it worked.
pub fn set_idle(thread: i32, idle: bool) -> bool {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        let policy = if idle { libc::SCHED_IDLE } else { libc::SCHED_OTHER };
        // SAFETY: a thread of this process, and a parameter it owns.
        unsafe { libc::sched_setscheduler(thread, policy, &param) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (thread, idle);
        false
    }
}

/// How long `thread` (of this process) has run, and waited to run while
/// runnable, since it started (`/proc/self/task/TID/schedstat`).
pub fn schedstat(thread: i32) -> Option<(Duration, Duration)> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{thread}/schedstat")).ok()?;
    let mut fields = text.split_ascii_whitespace().map(|field| field.parse::<u64>().ok());
    Some((Duration::from_nanos(fields.next()??), Duration::from_nanos(fields.next()??)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_workers_are_pinned_one_per_cpu_and_ask_for_short_slices() {
        let cpus = allowed_cpus().to_vec();
        assert!(!cpus.is_empty(), "the process may run on some CPU");
        // As many workers as CPUs, and one more, which stays free; each
        // settles twice (it parks again): the second changes nothing.
        let workers: Vec<_> = (0..=cpus.len())
            .map(|_| {
                std::thread::spawn(|| {
                    settle_http_worker();
                    settle_http_worker();
                    // SAFETY: reads the calling thread's affinity and attributes into values it owns.
                    unsafe {
                        let mut set: libc::cpu_set_t = std::mem::zeroed();
                        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
                        let on: Vec<usize> =
                            (0..libc::CPU_SETSIZE as usize).filter(|&cpu| libc::CPU_ISSET(cpu, &set)).collect();
                        let mut attr: SchedAttr = std::mem::zeroed();
                        let size = std::mem::size_of::<SchedAttr>() as u32;
                        libc::syscall(libc::SYS_sched_getattr, libc::gettid(), &mut attr as *mut SchedAttr, size, 0);
                        (on, attr.runtime)
                    }
                })
            })
            .collect();
        let settled: Vec<(Vec<usize>, u64)> = workers.into_iter().map(|worker| worker.join().unwrap()).collect();
        if cpus.len() > 1 {
            let mut pinned: Vec<usize> = settled.iter().filter(|(on, _)| on.len() == 1).map(|(on, _)| on[0]).collect();
            pinned.sort_unstable();
            assert_eq!(pinned, cpus, "one worker on each CPU");
            assert_eq!(settled.iter().filter(|(on, _)| *on == cpus).count(), 1, "the one more stays free");
        }
        for (_, slice) in settled {
            // 0: a kernel before 6.12, which has no slice to ask for.
            assert!(slice == 0 || slice == HTTP_SLICE.as_nanos() as u64, "slice {slice} ns");
        }
    }

    #[test]
    fn a_thread_put_at_idle_priority_and_back_keeps_its_nice() {
        if !idle_policy_usable(10) {
            println!(
                "SKIPPED: this process may not take a thread back from SCHED_IDLE (needs CAP_SYS_NICE or RLIMIT_NICE)"
            );
            return;
        }
        std::thread::spawn(|| {
            lower_priority(10);
            // SAFETY: reads the calling thread's nice and policy.
            let state = || unsafe {
                (libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t), libc::sched_getscheduler(0))
            };
            let lowered = state().0;
            assert!(set_idle(this_thread(), true));
            assert_eq!(state(), (lowered, libc::SCHED_IDLE));
            assert!(set_idle(this_thread(), false));
            assert_eq!(state(), (lowered, libc::SCHED_OTHER));
            let (ran, _waited) = schedstat(this_thread()).expect("schedstat is read when the idle policy is usable");
            assert!(ran > Duration::ZERO);
        })
        .join()
        .unwrap();
    }
}
