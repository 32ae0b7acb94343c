//! The threads tools run on.
//!
//! A call starts on the thread that received it (`ToolHost::invoke`): most
//! are done within microseconds, less than handing them to another thread
//! and back would cost. At its first pause — the epoch tick that ends every
//! 2 ms of running, or a wait on an outbound request — the rest of the call
//! moves to a pool of tool threads of its own, so no tool holds a thread
//! serving HTTP for longer than one tick.
//!
//! Two pools. Calls move to the first, at the server's own CPU priority. A
//! tool whose call ran into its deadline while computing, or into its memory
//! limit, is *demoted* for [`DEMOTION`]: its calls then run only on the
//! second pool, whose threads have the lowest CPU priority the OS offers
//! (Linux's `SCHED_IDLE`, or nice 19 where that is refused), from their
//! start. They still run and still get their deadline, but only on CPU time
//! nothing else wants — so a tool that spins or bombs its memory cannot take
//! the machine from the HTTP threads and the tools that behave. Each further
//! offence restarts the demotion.

use super::Uuid;
use crate::runtime::CallError;
use std::time::{Duration, Instant};
use tokio::runtime::{Builder, Handle, Runtime};

/// How long a tool that misbehaved runs at low priority.
pub const DEMOTION: Duration = Duration::from_secs(30);

/// The two pools and which tools are demoted.
pub(super) struct Executors {
    normal: Runtime,
    low: Runtime,
    /// Demoted tools, until when.
    demoted: dashmap::DashMap<Uuid, Instant>,
}

impl Executors {
    /// `threads` at normal priority, and half as many (at least one) at low.
    pub fn new(threads: usize) -> std::io::Result<Self> {
        let normal = Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("plinth-tool")
            .enable_all()
            .build()?;
        let low = Builder::new_multi_thread()
            .worker_threads((threads / 2).max(1))
            .thread_name("plinth-tool-low")
            .on_thread_start(lower_priority)
            .enable_all()
            .build()?;
        Ok(Executors { normal, low, demoted: dashmap::DashMap::new() })
    }

    /// The pool the host's own periodic work runs on.
    pub fn normal(&self) -> &Handle {
        self.normal.handle()
    }

    /// The pool `tool`'s next call runs on.
    pub fn for_tool(&self, tool: Uuid) -> Pool<'_> {
        let demoted = self.demoted.get(&tool).is_some_and(|until| *until > Instant::now());
        if demoted { Pool::Low(self.low.handle()) } else { Pool::Normal(self.normal.handle()) }
    }

    /// Looks at how a call of `tool` ended and demotes it if it misbehaved.
    pub fn ran(&self, tool: Uuid, name: &str, outcome: &Result<wasmtime::component::Val, CallError>) {
        let offence = match outcome {
            Err(CallError::Timeout { computing: true, .. }) => "ran into its deadline while computing",
            Err(CallError::ResourceExhausted) => "ran out of memory",
            _ => return,
        };
        let was = self.demoted.insert(tool, Instant::now() + DEMOTION);
        if was.is_none_or(|until| until <= Instant::now()) {
            tracing::warn!(
                tool = name,
                offence,
                seconds = DEMOTION.as_secs(),
                "the tool's calls run at the lowest CPU priority for a while"
            );
        }
        // Forget tools whose demotion ended long ago, now and then, so the
        // map holds only recent offenders.
        if self.demoted.len() > 1024 {
            let now = Instant::now();
            self.demoted.retain(|_, until| *until > now);
        }
    }

    /// Stops both pools without waiting for their threads (dropping a
    /// runtime from async code would panic).
    pub fn shutdown(self) {
        self.normal.shutdown_background();
        self.low.shutdown_background();
    }
}

/// Where a call runs.
pub(super) enum Pool<'a> {
    /// The tool threads at the server's priority.
    Normal(&'a Handle),
    /// The low-priority threads of demoted tools.
    Low(&'a Handle),
}

impl Pool<'_> {
    /// The pool's runtime.
    pub fn handle(&self) -> &Handle {
        match self {
            Pool::Normal(handle) | Pool::Low(handle) => handle,
        }
    }

    /// Whether a call may start on the thread that received it (and move
    /// here at its first pause): not a demoted tool's, which runs only at
    /// low priority.
    pub fn starts_inline(&self) -> bool {
        matches!(self, Pool::Normal(_))
    }
}

/// Lowers the calling thread's CPU priority to the lowest there is: Linux's
/// `SCHED_IDLE` policy (it runs only when no other thread wants the core,
/// and any other thread that wakes preempts it), or nice 19 where that is
/// refused. Failing both is harmless: the thread runs at normal priority.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: scheduling calls on the calling thread's own id; `param` lives
    // across the call.
    unsafe {
        let tid = libc::gettid();
        let param = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) != 0
            && libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19) != 0
        {
            tracing::debug!("could not lower a low-priority tool thread's priority");
        }
    }
}
