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
//! to 1.17–1.52× (seven `--arm 6` runs; 1.25× and 1.37× in two full
//! runs); each part alone, or nice +19 instead of `SCHED_IDLE`, left it
//! at 1.3–2.7×.
//!
//! Every change here is best effort: where the system refuses one, the
//! thread runs as it was, and the server works as before. And the
//! operator's choice of policy stands: a server started at `SCHED_BATCH`
//! keeps it on every thread (a costly thread lifted goes back to
//! `SCHED_BATCH`); one started at `SCHED_IDLE` or a real-time policy is
//! left as it is (no slices, no `SCHED_IDLE` of our own; see
//! [`fair_policy`]).

use std::time::Duration;

/// The time slice the HTTP threads ask for: the shortest EEVDF allows
/// (Linux 6.12+; earlier kernels ignore it), so that, woken by a request,
/// one preempts a thread with a longer slice at once.
const HTTP_SLICE: Duration = Duration::from_micros(100);

/// Called by the HTTP runtime on every thread it starts: a thread starts
/// free, on every CPU the process may use and with the default slice, even
/// when a pinned worker started it (Linux copies both to a new thread).
pub fn http_thread_started() {
    unpin();
    ask_for_slice(Duration::ZERO);
}

/// Settles the calling thread as a thread serving HTTP, once: pins it to a
/// CPU of its own (the first of the process's CPUs no other settled worker
/// holds; only while the runtime has a worker per CPU, see [`pins_workers`])
/// and asks for short time slices, unless the operator leaves them free
/// ([`leave_http_threads_free`]). Called by the HTTP runtime each time a
/// worker parks: only workers park. A worker that blocks on the store
/// (`store::off_the_workers`, tokio's `block_in_place`) hands its role to
/// another thread: it calls [`unsettle`] first, which frees its CPU for
/// the thread that takes over.
pub fn settle_http_worker() {
    if SETTLED.with(|settled| settled.borrow().is_some()) {
        return;
    }
    let thread = this_thread();
    let placed = !HTTP_THREADS_FREE.load(std::sync::atomic::Ordering::Relaxed);
    let cpu = {
        let mut workers = HTTP_WORKERS.lock().unwrap_or_else(|p| p.into_inner());
        let cpu = (placed && pins_workers())
            .then(|| (0..allowed_cpus().len()).find(|index| workers.iter().all(|(_, held)| *held != Some(*index))))
            .flatten();
        workers.push((thread, cpu));
        cpu
    };
    if let Some(index) = cpu {
        pin_to(allowed_cpus()[index]);
    }
    if placed {
        ask_for_slice(HTTP_SLICE);
    }
    SETTLED.with(|settled| *settled.borrow_mut() = Some(Settled));
}

/// Leaves the threads serving HTTP where the kernel puts them, at its
/// default slice (`--http-threads-free`): for a machine the server shares
/// with other busy processes, where a pinned worker could not flee a CPU
/// another process holds. They are still counted for the costly threads'
/// guard. Called once, before the HTTP runtime starts.
pub fn leave_http_threads_free() {
    HTTP_THREADS_FREE.store(true, std::sync::atomic::Ordering::Relaxed);
}

static HTTP_THREADS_FREE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Undoes [`settle_http_worker`] for the calling thread, if it settled: it
/// is about to stop serving HTTP (tokio's `block_in_place` gives its
/// worker role to another thread).
pub fn unsettle() {
    if SETTLED.with(|settled| settled.borrow_mut().take()).is_some() {
        http_thread_started();
    }
}

/// Whether the HTTP workers are pinned: only when the runtime has one per
/// CPU the process may use (tokio starts as many as
/// `available_parallelism`, which a cgroup's CPU quota lowers). With fewer,
/// every instance on the machine would crowd its workers onto the same
/// first CPUs.
fn pins_workers() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() == allowed_cpus().len())
}

/// Held by a settled worker: dropped when it unsettles or its thread
/// ends, it takes the thread off [`HTTP_WORKERS`] and frees its CPU.
struct Settled;

impl Drop for Settled {
    fn drop(&mut self) {
        let thread = this_thread();
        HTTP_WORKERS.lock().unwrap_or_else(|p| p.into_inner()).retain(|(settled, _)| *settled != thread);
    }
}

thread_local!(static SETTLED: std::cell::RefCell<Option<Settled>> = const { std::cell::RefCell::new(None) });

/// The threads serving HTTP now, and the CPU each holds (its index in
/// `allowed_cpus`, if pinned): the guard of the
/// costly tools' threads reads how busy they are (`host::executors`).
static HTTP_WORKERS: std::sync::Mutex<Vec<(i32, Option<usize>)>> = std::sync::Mutex::new(Vec::new());

/// The ids of the threads serving HTTP now.
pub fn http_workers() -> Vec<i32> {
    HTTP_WORKERS.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(thread, _)| *thread).collect()
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

/// Lets the calling thread run on every CPU the process may use.
fn unpin() {
    #[cfg(target_os = "linux")]
    // SAFETY: sets the calling thread's affinity from a set it owns.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in allowed_cpus() {
            libc::CPU_SET(cpu, &mut set);
        }
        if !allowed_cpus().is_empty() {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
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

/// Asks for time slices of `slice` for the calling thread, at its nice
/// and the server's policy (zero: the kernel's default). Nothing where the
/// server does not run at a policy of the fair class.
fn ask_for_slice(slice: Duration) {
    let Some(policy) = fair_policy() else { return };
    #[cfg(target_os = "linux")]
    // SAFETY: the calling thread's own priority, and a `sched_attr` it owns.
    unsafe {
        let thread = libc::gettid();
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            policy: policy as u32,
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
        if fair_policy().is_none() {
            return false;
        }
        std::thread::spawn(move || {
            lower_priority(lowered_by);
            let thread = this_thread();
            // Some CPU time of its own, which a kernel that keeps no
            // scheduler statistics would report as 0.
            let spun = std::time::Instant::now();
            while spun.elapsed() < Duration::from_millis(1) {
                std::hint::spin_loop();
            }
            set_idle(thread, true)
                && set_idle(thread, false)
                && schedstat(thread).is_some_and(|(ran, _)| ran > Duration::ZERO)
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

/// Puts `thread` (of this process) at `SCHED_IDLE`, or back at the
/// server's policy, its nice kept. Whether it worked (never, where the
/// server does not run at a policy of the fair class).
pub fn set_idle(thread: i32, idle: bool) -> bool {
    let Some(server) = fair_policy() else { return false };
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        let policy = if idle { libc::SCHED_IDLE } else { server };
        // SAFETY: a thread of this process, and a parameter it owns.
        unsafe { libc::sched_setscheduler(thread, policy, &param) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (thread, idle, server);
        false
    }
}

/// The policy the operator started the server at (its main thread's, which
/// nothing here changes), when it is one of the fair class whose threads
/// this module may tune: `SCHED_OTHER` or `SCHED_BATCH`. `None` for
/// `SCHED_IDLE` (slices or a lift would raise threads above the server)
/// and the real-time policies (asking for a slice would move a thread out
/// of them).
pub fn fair_policy() -> Option<i32> {
    #[cfg(target_os = "linux")]
    {
        static POLICY: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();
        *POLICY.get_or_init(|| {
            // SAFETY: reads the policy of this process's main thread (its id is the process id).
            let policy = unsafe { libc::sched_getscheduler(libc::getpid()) };
            [libc::SCHED_OTHER, libc::SCHED_BATCH].contains(&policy).then_some(policy)
        })
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// The policy `thread` (any process's) runs at and the time slice it asked
/// for (zero: the kernel's default, or a kernel before 6.12 that has no
/// slices to ask for), from `sched_getattr(2)`: what the settings here
/// leave, for tests and diagnostics.
pub fn scheduling_of(thread: i32) -> Option<(i32, Duration)> {
    #[cfg(target_os = "linux")]
    // SAFETY: reads a thread's attributes into a value we own, of the size we say.
    unsafe {
        let mut attr: SchedAttr = std::mem::zeroed();
        let size = std::mem::size_of::<SchedAttr>() as u32;
        if libc::syscall(libc::SYS_sched_getattr, thread, &mut attr as *mut SchedAttr, size, 0) == 0 {
            return Some((attr.policy as i32, Duration::from_nanos(attr.runtime)));
        }
    }
    let _ = thread;
    None
}

/// How long `thread` (of this process) has run, and waited to run while
/// runnable, since it started (`/proc/self/task/TID/schedstat`).
pub fn schedstat(thread: i32) -> Option<(Duration, Duration)> {
    Schedstat::open(thread)?.read()
}

/// A thread's `schedstat`, kept open to be read again: one system call a
/// look, where opening it anew takes four (open, stat, read, close). It
/// stays the file of the thread it was opened for: once that thread has
/// ended it reads nothing, even if the system gave its id to a new one.
pub struct Schedstat(std::fs::File);

impl Schedstat {
    /// `thread`'s (of this process), if it is running.
    pub fn open(thread: i32) -> Option<Schedstat> {
        std::fs::File::open(format!("/proc/self/task/{thread}/schedstat")).ok().map(Schedstat)
    }

    /// What the thread has run, and waited to run while runnable, since it
    /// started; `None` once it has ended.
    pub fn read(&self) -> Option<(Duration, Duration)> {
        #[cfg(unix)]
        use std::os::unix::fs::FileExt;
        // Three numbers of at most 20 digits each.
        let mut buffer = [0u8; 80];
        #[cfg(unix)]
        let read = self.0.read_at(&mut buffer, 0).ok()?;
        // (Only Linux has the file: elsewhere `open` found none.)
        #[cfg(not(unix))]
        let read = 0;
        let text = std::str::from_utf8(&buffer[..read]).ok()?;
        let mut fields = text.split_ascii_whitespace().map(|field| field.parse::<u64>().ok());
        Some((Duration::from_nanos(fields.next()??), Duration::from_nanos(fields.next()??)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPUs the calling thread may run on, and its slice (0: a kernel
    /// before 6.12, which has none to ask for).
    fn placement() -> (Vec<usize>, u64) {
        // SAFETY: reads the calling thread's affinity into a set it owns.
        let on = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
            (0..libc::CPU_SETSIZE as usize).filter(|&cpu| libc::CPU_ISSET(cpu, &set)).collect()
        };
        let (_, slice) = scheduling_of(this_thread()).expect("sched_getattr");
        (on, slice.as_nanos() as u64)
    }

    /// A worker thread: it settles (twice: it parks again) and reports
    /// where it runs, then, when told, unsettles and reports again.
    fn worker() -> (std::sync::mpsc::Receiver<(Vec<usize>, u64)>, std::sync::mpsc::Sender<()>) {
        let (report, reports) = std::sync::mpsc::channel();
        let (unsettle_now, told) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            settle_http_worker();
            settle_http_worker();
            report.send(placement()).unwrap();
            if told.recv().is_ok() {
                unsettle();
                report.send(placement()).unwrap();
            }
        });
        (reports, unsettle_now)
    }

    #[test]
    fn http_workers_are_pinned_one_per_cpu_and_hand_their_cpu_on_when_they_stop_serving() {
        let cpus = allowed_cpus().to_vec();
        assert!(!cpus.is_empty(), "the process may run on some CPU");
        let short = HTTP_SLICE.as_nanos() as u64;
        // As many workers as CPUs, and one more, which stays free.
        let workers: Vec<_> = (0..=cpus.len()).map(|_| worker()).collect();
        let placed: Vec<(Vec<usize>, u64)> = workers.iter().map(|(reports, _)| reports.recv().unwrap()).collect();
        assert!(placed.iter().all(|(_, slice)| [0, short].contains(slice)), "{placed:?}");
        assert_eq!(http_workers().len(), cpus.len() + 1);
        if !pins_workers() || cpus.len() == 1 {
            assert!(placed.iter().all(|(on, _)| *on == cpus), "no pinning with fewer workers than CPUs: {placed:?}");
            return;
        }
        let mut pinned: Vec<usize> = placed.iter().filter(|(on, _)| on.len() == 1).map(|(on, _)| on[0]).collect();
        pinned.sort_unstable();
        assert_eq!(pinned, cpus, "one worker on each CPU: {placed:?}");
        assert_eq!(placed.iter().filter(|(on, _)| *on == cpus).count(), 1, "the one more stays free");
        // A pinned worker that stops serving HTTP runs free again, with the
        // default slice, and the next worker to settle takes its CPU.
        let first = placed.iter().position(|(on, _)| on.len() == 1).unwrap();
        workers[first].1.send(()).unwrap();
        let (on, slice) = workers[first].0.recv().unwrap();
        assert_eq!(on, cpus);
        assert_ne!(slice, short);
        assert_eq!(http_workers().len(), cpus.len());
        let (reports, _keep) = worker();
        assert_eq!(reports.recv().unwrap().0, placed[first].0, "the freed CPU");
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
            assert_eq!(state(), (lowered, fair_policy().unwrap()), "back at the server's policy");
            let (ran, _waited) = schedstat(this_thread()).expect("schedstat is read when the idle policy is usable");
            assert!(ran > Duration::ZERO);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_kept_schedstat_reads_its_thread_anew_until_the_thread_ends() {
        let (id_tx, id_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (spun_tx, spun_rx) = std::sync::mpsc::channel::<()>();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            id_tx.send(this_thread()).unwrap();
            go_rx.recv().unwrap();
            let started = std::time::Instant::now();
            let mut spin = 0u64;
            while started.elapsed() < Duration::from_millis(20) {
                spin = std::hint::black_box(spin.wrapping_add(1));
            }
            spun_tx.send(()).unwrap();
            end_rx.recv().unwrap();
        });
        let id = id_rx.recv().unwrap();
        let file = Schedstat::open(id).expect("a running thread's schedstat");
        let (ran_before, _) = file.read().expect("read while it runs");
        go_tx.send(()).unwrap();
        spun_rx.recv().unwrap();
        // The same open file, read again, sees what the thread ran since.
        let (ran_after, _) = file.read().expect("read again while it runs");
        assert!(ran_after > ran_before, "{ran_before:?} then {ran_after:?}");
        end_tx.send(()).unwrap();
        thread.join().unwrap();
        // Ended: the kept file reads nothing, whatever thread gets its id.
        // (`join` returns before the kernel has quite let go of the
        // thread: its file may read once or twice more.)
        let ended = std::time::Instant::now();
        while file.read().is_some() {
            assert!(ended.elapsed() < Duration::from_secs(5), "a kept file of an ended thread still reads");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
