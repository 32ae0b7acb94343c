//! The threads tools run on.
//!
//! A call starts on the thread that received it (`ToolHost::invoke`): most
//! are done within microseconds, less than handing them to another thread
//! and back would cost. At its first pause — an epoch tick (every 2 ms; one
//! in the call's first 500 µs does not count, `runtime::FIRST_YIELD_AFTER`),
//! or a wait on an outbound request — the rest of the call moves to a pool
//! of tool threads of its own, so no tool holds a thread serving HTTP for
//! longer than a tick and a half millisecond.
//!
//! A tool whose recent calls computed longer than [`INLINE_LIMIT`] (an
//! average that follows the last few calls: one that computes for a
//! millisecond, a large component whose instantiation alone takes that
//! long) starts on the tool threads instead: on a 2-core machine, two such
//! calls held inline up to their first tick would hold every thread serving
//! HTTP. Its first calls run inline (of a tool that computes a
//! millisecond or more, the first three: no single call decides, see
//! [`Executors::ran`]). What counts is the time the call spent on a CPU
//! ([`OnCpu`]), not the time it took: a cheap call whose thread the kernel
//! preempted for milliseconds on a busy machine is still cheap (counted by
//! the clock, it made its tool look costly, whose next calls then queued
//! behind the truly costly ones at their low priority, took longer still,
//! and kept it there: echo's p99 beside a busy tool, bench arm 6, went
//! from 6.8× and 8.4× its calm value to 3.1× and 3.5× in alternating runs
//! when this changed). A call that sends requests to its backend also
//! counts their work (connecting, TLS, hyper's reading and writing),
//! which runs in tasks of their own that its CPU clock does not see, by
//! those tasks' polls for it (`outbound::BackendWork`) — not the time they
//! waited for the backend: a tool that waits is not a tool that computes.
//!
//! Three pools. A cheap tool's call that pauses moves to the first, at the
//! server's own CPU priority; once it has computed there for
//! [`COSTLY_AFTER`] (a tool with no history yet that spins, a cheap tool's
//! rare long call), the rest of it moves to the second. A costly tool's
//! calls run on the second from their start, 10 steps of nice below the
//! server ([`COSTLY_NICE`]) and, where the process may undo it, at
//! `SCHED_IDLE`, which a guard lifts when they are starved
//! ([`CostlyThreads`]): a tool that legitimately computes for
//! milliseconds, called at full concurrency, must not take the CPU from
//! the threads that serve HTTP and the cheap calls (bench arm 6: echo's
//! p99 beside it went from 3.0–3.5× its calm value at nice +10 alone to
//! 1.17–1.52× over six runs, with the HTTP threads pinned one per CPU,
//! `cpu_policy`). Apart, the rest
//! of a cheap call that happened to pause (a tick landed in it) never
//! waits behind costly calls, nor at their priority. A tool whose calls ran into
//! their deadline while computing, or into their memory limit, twice
//! within [`DEMOTION`] (once may be bad luck) is *demoted* for that long:
//! its calls then run only on the third pool, whose threads run at nice 19,
//! from their start. They still run and still
//! get their deadline, but a nice-19 thread weighs 15 against a normal
//! thread's 1024 — so a tool that spins or bombs its memory cannot take the
//! machine from the HTTP threads and the tools that behave, yet it is never
//! starved outright (Linux's `SCHED_IDLE` would starve it on a busy machine,
//! and every call would then time out). Each further offence restarts the
//! demotion.
//!
//! A thread below the server's priority is preempted whenever another
//! wants its CPU: one preempted while it holds a lock an HTTP thread waits
//! on stalls that thread until it runs again (a priority inversion,
//! milliseconds on a busy machine). So the places a call takes are counted
//! without a lock (`places`), and these threads take the instance pool's
//! slots from shards of their own (`wasmtime::mark_pooling_background_thread`,
//! vendor/wasmtime/PLINTH.md). One exception, rare and short: a call that
//! moved on from the normal threads gives its slot back, from a costly
//! thread, to the shard it was taken from, one the HTTP threads use.
//!
//! A demoted tool's calls also take turns ([`Executors::turn`]): one at a
//! time, and after a call that offends again the tool rests three times as
//! long as that call ran, twice that after the next offence, and so on (up
//! to [`DEMOTION`]): a tool that keeps spinning or bombing gets at most a
//! quarter of one core however many calls its callers send, and less and
//! less of it the longer it goes on. Kernel
//! work done for it — the zeroed pages of a memory bomb, the address-space
//! changes when they are handed back — no CPU priority reaches; the rests
//! bound that too. Calls that behave impose no rest. A call that gets no
//! turn within its deadline is refused as busy at its deadline.

use super::Uuid;
use crate::cpu_policy;
use crate::runtime::CallError;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::{Builder, Handle, Runtime};

/// How long a tool that misbehaved runs at low priority.
pub const DEMOTION: Duration = Duration::from_secs(30);

/// A tool whose recent calls computed (were on a CPU) longer than this on
/// average starts its calls on the tool threads, not on the thread that
/// received them: far above an echo's microseconds, far below the 2 ms
/// tick a call may hold its thread for.
const INLINE_LIMIT: Duration = Duration::from_micros(250);

/// After a demoted tool's call offends again, how many times that call's
/// running time the tool rests before its next call starts; each further
/// offence while demoted doubles it.
const REST_PER_OFFENCE: u32 = 3;

/// Offences while demoted after which the rest stops doubling (the rest is
/// capped at [`DEMOTION`] long before).
const MAX_DOUBLINGS: u32 = 16;

/// A tool that offended lately.
struct Demotion {
    /// When it last offended.
    offended: Instant,
    /// Demoted until then (not demoted if past).
    until: Instant,
    /// No call of the tool starts before this.
    rest_until: Instant,
    /// Offences since it was demoted: each doubles the next rest.
    repeated: u32,
    /// Held by the call that runs.
    turn: Arc<tokio::sync::Mutex<()>>,
}

/// The three pools and which tools are demoted.
pub(super) struct Executors {
    normal: Runtime,
    costly: Runtime,
    low: Runtime,
    /// Demoted tools.
    demoted: dashmap::DashMap<Uuid, Demotion>,
    /// Each tool's recent CPU time per call, in microseconds: an average
    /// weighting the last call a quarter, from zero, of calls counted at
    /// most twice [`INLINE_LIMIT`] (`ran`).
    recent: dashmap::DashMap<Uuid, u64>,
}

impl Executors {
    /// `threads` for cheap tools' calls at normal priority, as many for
    /// costly tools' at [`COSTLY_NICE`] (and `SCHED_IDLE` where it can be
    /// undone, [`CostlyThreads`]), and half as many (at least one) for
    /// demoted tools' at [`DEMOTED_NICE`].
    pub fn new(threads: usize) -> std::io::Result<Self> {
        let costly_threads = Arc::new(CostlyThreads::new());
        let pool = |name: &str, threads: usize, lowered_by: i32, costly: bool| {
            let started = costly_threads.clone();
            Builder::new_multi_thread()
                .worker_threads(threads.max(1))
                .thread_name(name)
                .on_thread_start(move || {
                    if lowered_by > 0 {
                        cpu_policy::lower_priority(lowered_by);
                        // Shards of the instance pool's own, whose locks no
                        // HTTP thread waits on (vendor/wasmtime/PLINTH.md).
                        wasmtime::mark_pooling_background_thread();
                    }
                    if costly {
                        started.joined();
                    }
                })
                .enable_all()
                .build()
        };
        let normal = pool("plinth-tool", threads, 0, false)?;
        let costly = pool("plinth-tool-costly", threads, COSTLY_NICE, true)?;
        let low = pool("plinth-tool-low", threads / 2, DEMOTED_NICE, false)?;
        if costly_threads.idle {
            normal.spawn(costly_threads.guard());
        }
        Ok(Executors { normal, costly, low, demoted: dashmap::DashMap::new(), recent: dashmap::DashMap::new() })
    }

    /// The pool the host's own periodic work runs on.
    pub fn normal(&self) -> &Handle {
        self.normal.handle()
    }

    /// The pool `tool`'s next call runs on.
    pub fn for_tool(&self, tool: Uuid) -> Pool<'_> {
        if self.demoted(tool).is_some() {
            return Pool::Low(self.low.handle());
        }
        let limit = INLINE_LIMIT.as_micros() as u64;
        if self.recent.get(&tool).is_some_and(|micros| *micros > limit) {
            return Pool::Costly(self.costly.handle());
        }
        Pool::Normal(self.normal.handle())
    }

    /// Looks at how a call of `tool` ended, which ran for `ran_for` and
    /// computed for `computed` of it (its CPU time, [`OnCpu`]): a second
    /// offence within [`DEMOTION`] demotes the tool, one while it is
    /// demoted makes it rest. The rest follows `ran_for`: the wall time is
    /// what bounds the share of a core an offender gets, its kernel work
    /// (a bomb's zeroed pages) included.
    pub fn ran(
        &self,
        tool: Uuid,
        name: &str,
        outcome: &Result<wasmtime::component::Val, CallError>,
        ran_for: Duration,
        computed: Duration,
    ) {
        // One call moves the average by at most half the limit: a cheap
        // call whose CPU time the kernel inflated (a page reclaimed in a
        // fault, a stolen virtual CPU) does not make its tool costly; two
        // in a row do, and a tool computing a millisecond a call is costly
        // from its fourth call.
        let micros = u64::try_from(computed.as_micros()).unwrap_or(u64::MAX).min(2 * INLINE_LIMIT.as_micros() as u64);
        let mut recent = self.recent.entry(tool).or_insert(0);
        *recent = (*recent / 4).saturating_mul(3).saturating_add(micros / 4);
        drop(recent);
        let offence = match outcome {
            Err(CallError::Timeout { computing: true, .. }) => "ran into its deadline while computing",
            Err(CallError::ResourceExhausted) => "ran out of memory",
            _ => return,
        };
        let now = Instant::now();
        match self.demoted.entry(tool) {
            // A first offence: remembered, not punished.
            dashmap::Entry::Vacant(entry) => {
                entry.insert(Demotion {
                    offended: now,
                    until: now,
                    rest_until: now,
                    repeated: 0,
                    turn: Default::default(),
                });
            }
            dashmap::Entry::Occupied(mut entry) => {
                let demotion = entry.get_mut();
                if demotion.until > now {
                    // Offending again while demoted: rest, longer each time.
                    demotion.rest_until = now + rest_after(ran_for, demotion.repeated);
                    demotion.repeated = demotion.repeated.saturating_add(1);
                    demotion.until = now + DEMOTION;
                } else if demotion.offended + DEMOTION > now {
                    demotion.until = now + DEMOTION;
                    demotion.repeated = 0;
                    tracing::warn!(
                        tool = name,
                        offence,
                        seconds = DEMOTION.as_secs(),
                        "the tool offended twice; its calls run at the lowest CPU priority, one at a time, for a while"
                    );
                }
                demotion.offended = now;
            }
        }
        // Forget tools that have not offended for a while, now and then, so
        // the map holds only recent offenders.
        if self.demoted.len() > 1024 {
            self.demoted.retain(|_, demotion| demotion.offended + DEMOTION > now);
        }
    }

    /// The turns of `tool`, while it is demoted.
    fn demoted(&self, tool: Uuid) -> Option<Arc<tokio::sync::Mutex<()>>> {
        let demotion = self.demoted.get(&tool)?;
        (demotion.until > Instant::now()).then(|| demotion.turn.clone())
    }

    /// Waits, for a demoted tool, until its previous call has ended and the
    /// tool has rested; the call runs while the returned turn is held.
    /// `Ok(None)`: the tool is not demoted. `Err`, after `wait`: no turn came
    /// within it.
    pub async fn turn(&self, tool: Uuid, wait: Duration) -> Result<Option<Turn>, NoTurn> {
        let Some(turn) = self.demoted(tool) else { return Ok(None) };
        let give_up = tokio::time::Instant::now() + wait;
        let held = tokio::time::timeout_at(give_up, turn.lock_owned()).await.map_err(|_| NoTurn)?;
        let rest_until = self.demoted.get(&tool).map_or_else(Instant::now, |demotion| demotion.rest_until);
        let start = tokio::time::Instant::from_std(rest_until.max(Instant::now()));
        // Refused at the deadline, not at once: a caller that retries at
        // once gets no more of the tool's time than one that waits.
        tokio::time::sleep_until(give_up.min(start)).await;
        if start > give_up {
            return Err(NoTurn);
        }
        Ok(Some(Turn(held)))
    }

    /// Runs `call` on `pool` and waits for its outcome. A call on the
    /// normal pool that has computed there for [`COSTLY_AFTER`] moves to the
    /// costly pool for the rest, at its next pause: a tool with no history
    /// yet (a first call that spins to its deadline) or a cheap tool's rare
    /// long call holds a thread at the server's priority for a few
    /// milliseconds, not for its whole deadline. The pool's task hands the
    /// call on itself, so a call whose caller is gone still runs to its end
    /// and is counted. `Err`: the call panicked, or its pool was shut down
    /// under it.
    pub async fn run<F>(&self, pool: Pool<'_>, call: F) -> Result<F::Output, tokio::task::JoinError>
    where
        F: Future + Unpin + Send + 'static,
        F::Output: Send + 'static,
    {
        match pool {
            Pool::Normal(handle) => {
                let costly = self.costly.handle().clone();
                let until_costly = UntilCostly { call: Some(call), in_poll: Duration::ZERO };
                let ran = handle.spawn(async move {
                    match until_costly.await {
                        Ran::Done(outcome) => Ok(outcome),
                        Ran::Costly(rest) => costly.spawn(rest).await,
                    }
                });
                ran.await.and_then(|moved| moved)
            }
            other => other.handle().spawn(call).await,
        }
    }

    /// Stops the pools without waiting for their threads (dropping a
    /// runtime from async code would panic).
    pub fn shutdown(self) {
        self.normal.shutdown_background();
        self.costly.shutdown_background();
        self.low.shutdown_background();
    }
}

/// How long a demoted tool rests after a call that ran for `ran_for` and
/// offended again, its `repeated`-th offence since it was demoted (0 for
/// the first): [`REST_PER_OFFENCE`] times the call, doubled at each further
/// offence, at most [`DEMOTION`].
fn rest_after(ran_for: Duration, repeated: u32) -> Duration {
    let factor = REST_PER_OFFENCE.saturating_mul(2u32.saturating_pow(repeated.min(MAX_DOUBLINGS)));
    ran_for.saturating_mul(factor).min(DEMOTION)
}

/// A demoted tool's call that is running; the next waits until it is
/// dropped.
pub(super) struct Turn(#[allow(dead_code)] tokio::sync::OwnedMutexGuard<()>);

/// A demoted tool's call found no turn within its deadline.
#[derive(Debug)]
pub(super) struct NoTurn;

/// Where a call runs.
pub(super) enum Pool<'a> {
    /// The tool threads at the server's priority, where a cheap tool's
    /// call goes on after its first pause.
    Normal(&'a Handle),
    /// Threads of their own, [`COSTLY_NICE`] steps below the server's
    /// priority, for a tool whose calls have computed long lately: from
    /// their start.
    Costly(&'a Handle),
    /// The low-priority threads of demoted tools.
    Low(&'a Handle),
}

impl Pool<'_> {
    /// The pool's runtime.
    pub fn handle(&self) -> &Handle {
        match self {
            Pool::Normal(handle) | Pool::Costly(handle) | Pool::Low(handle) => handle,
        }
    }

    /// Whether a call may start on the thread that received it (and move
    /// here at its first pause): not a costly tool's, nor a demoted tool's,
    /// which runs only at low priority.
    pub fn starts_inline(&self) -> bool {
        matches!(self, Pool::Normal(_))
    }
}

/// How long a call may compute on the normal tool threads before the rest
/// of it moves to the costly ones ([`Executors::run`]): two and a half
/// epoch ticks, far above any cheap call, and a thousandth of the default
/// deadline (5 s). Measured as time inside `poll`, so time the thread was
/// preempted there counts too; the move happens at the next pause.
const COSTLY_AFTER: Duration = Duration::from_millis(5);

/// A call on the normal pool, polled until it ends or has computed (been
/// inside `poll`) for [`COSTLY_AFTER`]; waits for a backend do not count.
struct UntilCostly<F> {
    call: Option<F>,
    /// Time inside `poll` so far (wall time: a preempted poll counts).
    in_poll: Duration,
}

/// How a call on the normal pool left it.
enum Ran<F: Future> {
    Done(F::Output),
    /// Still running, and costly: the rest of it, to go on elsewhere.
    Costly(F),
}

impl<F: Future + Unpin> Future for UntilCostly<F> {
    type Output = Ran<F>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Ran<F>> {
        use std::task::Poll;
        let call = self.call.as_mut().expect("a spawned task is not polled after it ends");
        let started = Instant::now();
        let polled = std::pin::Pin::new(call).poll(cx);
        self.in_poll += started.elapsed();
        match polled {
            Poll::Ready(outcome) => Poll::Ready(Ran::Done(outcome)),
            // The call's own wake (a tick's yield, a backend's answer) may
            // reach this finished task: the pool it moves to polls it anew.
            Poll::Pending if self.in_poll >= COSTLY_AFTER => Poll::Ready(Ran::Costly(self.call.take().expect("held"))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A future and the CPU time its polls have taken so far: the time its
/// threads were on a CPU while polling it, wherever it was polled, not the
/// time they were preempted or it waited between polls.
pub(super) struct OnCpu<F> {
    inner: F,
    spent: Duration,
}

impl<F> OnCpu<F> {
    pub fn new(inner: F) -> Self {
        OnCpu { inner, spent: Duration::ZERO }
    }

    /// CPU time taken so far.
    pub fn spent(&self) -> Duration {
        self.spent
    }
}

impl<F: Future + Unpin> Future for OnCpu<F> {
    type Output = F::Output;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        let (before, started) = (thread_cpu_time(), Instant::now());
        let polled = std::pin::Pin::new(&mut self.inner).poll(cx);
        self.spent += match (before, thread_cpu_time()) {
            (Some(before), Some(after)) => after.saturating_sub(before),
            // No CPU clock: the poll's wall time, an upper bound.
            _ => started.elapsed(),
        };
        polled
    }
}

/// The calling thread's CPU time (user and system), if the system tells. A
/// system call (about half a microsecond in a VM): two per poll, so ~1 µs
/// per cheap call.
fn thread_cpu_time() -> Option<Duration> {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes the calling thread's CPU clock into `now`, which it owns.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    (read == 0).then(|| Duration::new(u64::try_from(now.tv_sec).unwrap_or(0), u32::try_from(now.tv_nsec).unwrap_or(0)))
}

/// How far below the server's priority costly tools' threads run: a
/// nice-10 thread weighs 110 against a nice-0 one's 1024. Where this
/// process may take them back from `SCHED_IDLE`, they run there too, and
/// at nice +10 alone only while a guard lifts them ([`CostlyThreads`]).
const COSTLY_NICE: i32 = 10;

/// How often the guard of the costly tools' threads looks at them.
const GUARD_EVERY: Duration = Duration::from_millis(10);

/// The span of time over which the guard adds up what they ran and waited.
const GUARD_WINDOW: u32 = 10;

/// The CPU time the costly tools' threads get, at least, in each
/// [`GUARD_WINDOW`] of [`GUARD_EVERY`]s (100 ms) while they want the CPU,
/// however busy the server: a hundredth of one core, 6–7 calls a second
/// of a tool computing 1.5 ms. More costs the HTTP threads' tail (bench
/// arm 6, echo's p99 beside the tool ÷ calm: a floor of 1 ms 1.20× and
/// 1.19×, 2 ms 1.35–1.59×, 5 ms 1.55–1.80×, 15 ms 1.92× and 1.97×; the
/// tool got 1.8–2.0k, 2.4–2.7k, 4.1–4.3k and 10.1–10.2k calls done).
const COSTLY_FLOOR: Duration = Duration::from_millis(1);

/// The costly tools' threads, at `SCHED_IDLE` as well as [`COSTLY_NICE`]
/// where this process may take them back (`cpu_policy::idle_policy_usable`):
/// the kernel then runs them only on CPU time no thread at normal priority
/// wants, and preempts them the moment one does. Nice +10 alone still let
/// them take a tenth of each CPU they shared, and they were placed on CPUs
/// by weight, which left them a CPU of their own (bench/ANALYSIS.md).
///
/// A `SCHED_IDLE` thread gets almost nothing (a weight of 3 against a
/// normal thread's 1024) while normal threads keep every CPU busy: a busy
/// server would starve every costly tool's calls into their deadlines. So
/// a guard adds up, every [`GUARD_EVERY`], what they ran and waited to run
/// over the last [`GUARD_WINDOW`] of those, and what the HTTP threads ran
/// (`cpu_policy::http_workers`). When they wanted the CPU more than half
/// of that time, they run at nice +10 alone: for as long as the HTTP
/// threads ran less than half a core (other work keeps them off the CPU:
/// other processes, the normal tool threads; `SCHED_IDLE` yields to all of
/// it), or, while the HTTP threads are that busy, whenever they ran less
/// than [`COSTLY_FLOOR`], until they have run twice that. However busy the
/// server, they get a hundredth of one core, in bursts of a few
/// milliseconds, and whatever CPU time the normal threads leave.
struct CostlyThreads {
    /// Whether they run at `SCHED_IDLE` at all.
    idle: bool,
    state: std::sync::Mutex<CostlyState>,
}

#[derive(Default)]
struct CostlyState {
    /// The ids of the pool's threads that are running.
    threads: Vec<i32>,
    /// Whether they run at nice +10 alone, for now.
    lifted: bool,
}

impl CostlyThreads {
    fn new() -> Self {
        CostlyThreads { idle: cpu_policy::idle_policy_usable(COSTLY_NICE), state: Default::default() }
    }

    /// A thread of the pool started (on that thread). It is forgotten when
    /// it ends, however it ends (a panic skips the runtime's stop hook):
    /// its id, which the system may give to a new thread once it is gone,
    /// must not stay here.
    fn joined(self: &Arc<Self>) {
        if !self.idle {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let thread = cpu_policy::this_thread();
        cpu_policy::set_idle(thread, !state.lifted);
        state.threads.push(thread);
        drop(state);
        COSTLY_MEMBER.with(|member| *member.borrow_mut() = Some(Member(self.clone())));
    }

    /// A thread of the pool ends (on that thread).
    fn left(&self) {
        let thread = cpu_policy::this_thread();
        self.state.lock().unwrap_or_else(|p| p.into_inner()).threads.retain(|&t| t != thread);
    }

    /// Puts all of them at `SCHED_IDLE`, or takes them back to nice +10 alone.
    fn lift(&self, lifted: bool) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.lifted = lifted;
        for &thread in &state.threads {
            cpu_policy::set_idle(thread, !lifted);
        }
    }

    /// Looks at the threads every [`GUARD_EVERY`], for as long as the pool
    /// it runs on.
    async fn guard(self: Arc<Self>) {
        let (mut costly_seen, mut http_seen) = (Default::default(), Default::default());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        let mut window = std::collections::VecDeque::with_capacity(GUARD_WINDOW as usize);
        let mut lifted = false;
        let mut every = tokio::time::interval(GUARD_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let threads = self.state.lock().unwrap_or_else(|p| p.into_inner()).threads.clone();
            // The pool's, summed over its threads: one thread may wait
            // long on a CPU an HTTP thread keeps busy while the others
            // run on the CPU time left, as they should.
            let (ran, waited) = since_seen(&threads, &mut costly_seen);
            let (http_ran, _) = since_seen(&cpu_policy::http_workers(), &mut http_seen);
            if window.len() == GUARD_WINDOW as usize {
                window.pop_front();
            }
            window.push_back(Spent { ran, waited, http_ran });
            let spent = window.iter().fold(Spent::default(), |sum, tick| Spent {
                ran: sum.ran + tick.ran,
                waited: sum.waited + tick.waited,
                http_ran: sum.http_ran + tick.http_ran,
            });
            if lifted != lift(lifted, &spent, cpus) {
                lifted = !lifted;
                tracing::debug!(lifted, ?spent, "the costly tools' threads change priority");
                self.lift(lifted);
            }
        }
    }
}

/// What the costly threads ran and waited to run, and what the HTTP
/// threads ran, in all, over one tick of the guard or its window.
#[derive(Debug, Default, Clone, Copy)]
struct Spent {
    ran: Duration,
    waited: Duration,
    http_ran: Duration,
}

/// The threads the guard watches, by id: each one's `schedstat`, kept open,
/// and what it had run and waited to run at the last look.
type Seen = std::collections::HashMap<i32, (cpu_policy::Schedstat, Duration, Duration)>;

/// What `threads` ran and waited to run, in all, since `seen` (which
/// then holds what they had at this look; a thread seen first counts
/// from the next).
fn since_seen(threads: &[i32], seen: &mut Seen) -> (Duration, Duration) {
    let (mut ran, mut waited) = (Duration::ZERO, Duration::ZERO);
    let mut now_seen = Seen::with_capacity(threads.len());
    for &thread in threads {
        let (file, before) = match seen.remove(&thread) {
            Some((file, ran_before, waited_before)) => (file, Some((ran_before, waited_before))),
            None => match cpu_policy::Schedstat::open(thread) {
                Some(file) => (file, None),
                None => continue,
            },
        };
        // A thread that ended is forgotten (its id may come back as
        // another's, whose file is opened anew).
        let Some((ran_since_start, waited_since_start)) = file.read() else { continue };
        if let Some((ran_before, waited_before)) = before {
            ran += ran_since_start.saturating_sub(ran_before);
            waited += waited_since_start.saturating_sub(waited_before);
        }
        now_seen.insert(thread, (file, ran_since_start, waited_since_start));
    }
    *seen = now_seen;
    (ran, waited)
}

/// Whether the costly threads should run at nice +10 alone (`lifted`:
/// whether they do now), from what was `spent` over the guard's window on
/// `cpus` CPUs. Only when they wanted the CPU for more than half of it
/// (summed over the threads: several waiting on each other count too).
/// Then:
/// - while the HTTP threads ran less than half of it (half a core), and
///   the costly threads less than half the CPU time the HTTP threads left,
///   it is other work that keeps them off the CPU (other processes, the
///   normal tool threads, to which `SCHED_IDLE` yields too): lifted, for
///   as long as that lasts;
/// - while the HTTP threads are busier, they get their floor.
///
/// See [`CostlyThreads`].
fn lift(lifted: bool, spent: &Spent, cpus: u32) -> bool {
    let window = GUARD_EVERY * GUARD_WINDOW;
    if spent.waited <= window / 2 {
        return false;
    }
    if spent.http_ran < window / 2 {
        let left_by_http = (window * cpus.max(1)).saturating_sub(spent.http_ran);
        return spent.ran < left_by_http / 2;
    }
    if lifted { spent.ran < COSTLY_FLOOR * 2 } else { spent.ran < COSTLY_FLOOR }
}

/// A costly pool's thread, held by the thread: leaves the pool's list when
/// the thread ends.
struct Member(Arc<CostlyThreads>);

impl Drop for Member {
    fn drop(&mut self) {
        self.0.left();
    }
}

thread_local!(static COSTLY_MEMBER: std::cell::RefCell<Option<Member>> = const { std::cell::RefCell::new(None) });

/// How far below the server's priority demoted tools' threads run (to
/// nice 19, the lowest).
const DEMOTED_NICE: i32 = 19;

#[cfg(test)]
mod tests {
    use super::*;

    /// A call polled `polls` times: each poll computes for `computes`,
    /// then waits `waits` on a timer, or (without a wait) wakes itself, as
    /// an epoch tick's yield does. It ends with the names of the threads
    /// that polled it.
    struct Call {
        polls: usize,
        computes: Duration,
        waits: Option<Duration>,
        timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
        threads: Vec<String>,
    }

    impl Call {
        fn new(computes: Duration, waits: Option<Duration>) -> Call {
            Call { polls: 20, computes, waits, timer: None, threads: Vec::new() }
        }
    }

    impl Future for Call {
        type Output = Vec<String>;

        fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Vec<String>> {
            use std::task::Poll;
            if let Some(timer) = self.timer.as_mut() {
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.timer = None;
            }
            self.threads.push(std::thread::current().name().unwrap_or_default().to_string());
            if self.threads.len() == self.polls {
                return Poll::Ready(std::mem::take(&mut self.threads));
            }
            let until = Instant::now() + self.computes;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            match self.waits {
                // Pending on the timer, with this task's waker registered.
                Some(wait) => {
                    let mut timer = Box::pin(tokio::time::sleep(wait));
                    if timer.as_mut().poll(cx).is_ready() {
                        cx.waker().wake_by_ref();
                    }
                    self.timer = Some(timer);
                }
                None => cx.waker().wake_by_ref(),
            }
            Poll::Pending
        }
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_call_that_computes_long_on_the_normal_threads_moves_to_the_costly_ones_and_one_that_waits_does_not() {
        let executors = Executors::new(1).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let run = |call: Call| {
            let ran = executors.run(executors.for_tool(Uuid::new_v4()), call);
            runtime.block_on(async { tokio::time::timeout(Duration::from_secs(10), ran).await }).expect("ends").unwrap()
        };
        // 20 polls computing 1 ms each: on the normal threads until it has
        // computed 5 ms, on the costly ones after; the same when it waits
        // on a timer between (it moves while pending on it).
        for waits in [None, Some(MS)] {
            let threads = run(Call::new(MS, waits));
            let moved = threads.iter().position(|thread| thread == "plinth-tool-costly").expect("moved");
            assert!(threads[..moved].iter().all(|thread| thread == "plinth-tool"), "{threads:?}");
            assert!(threads[moved..].iter().all(|thread| thread == "plinth-tool-costly"), "{threads:?}");
            let limit = COSTLY_AFTER.as_millis() as usize;
            // Each poll computes at least 1 ms; a preempted one counts longer.
            assert!(moved <= limit, "moved after {moved} polls of 1 ms: {threads:?}");
        }
        // 20 waits of 1 ms, which cost next to nothing: it stays.
        let waiting = run(Call::new(Duration::ZERO, Some(MS)));
        assert!(waiting.iter().all(|thread| thread == "plinth-tool"), "{waiting:?}");
        executors.shutdown();
    }

    #[test]
    fn a_call_whose_caller_is_gone_still_runs_to_its_end_when_it_moves() {
        let executors = Executors::new(1).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (ended, end) = std::sync::mpsc::channel();
        let call = Box::pin(async move { ended.send(Call::new(MS, None).await).unwrap() });
        // The caller gives up after 2 ms, before the call has moved.
        let ran = executors.run(executors.for_tool(Uuid::new_v4()), call);
        assert!(runtime.block_on(async { tokio::time::timeout(2 * MS, ran).await }).is_err());
        let threads = end.recv_timeout(Duration::from_secs(10)).expect("the call ran to its end");
        assert_eq!(threads.last().map(String::as_str), Some("plinth-tool-costly"), "{threads:?}");
        executors.shutdown();
    }

    #[test]
    fn a_tool_whose_calls_computed_long_lately_starts_them_off_the_http_threads() {
        let executors = Executors::new(1).unwrap();
        let tool = Uuid::new_v4();
        let ok = Ok(wasmtime::component::Val::Bool(true));
        assert!(executors.for_tool(tool).starts_inline(), "an unknown tool starts inline");
        executors.ran(tool, "echo", &ok, Duration::from_micros(5), Duration::from_micros(5));
        assert!(executors.for_tool(tool).starts_inline(), "a cheap call");
        // A call that took 5 ms but computed only 50 µs of it (its thread
        // preempted, or waiting on its backend) is cheap.
        executors.ran(tool, "echo", &ok, 5 * MS, Duration::from_micros(50));
        assert!(executors.for_tool(tool).starts_inline(), "a cheap call that took long");
        // No single call decides, however long it computed (the kernel
        // may have inflated it); three computing 1.5 ms each move the next.
        let computing = Duration::from_micros(1500);
        executors.ran(tool, "compute", &ok, 200 * MS, 200 * MS);
        assert!(executors.for_tool(tool).starts_inline(), "one call");
        executors.ran(tool, "compute", &ok, computing, computing);
        executors.ran(tool, "compute", &ok, computing, computing);
        assert!(matches!(executors.for_tool(tool), Pool::Costly(_)));
        assert!(!executors.for_tool(tool).starts_inline());
        // What a pool's thread answers when asked `what`.
        fn ask<T: Send + 'static>(pool: Pool<'_>, what: fn() -> T) -> T {
            let (send, receive) = std::sync::mpsc::channel();
            pool.handle().spawn(async move { send.send(what()).unwrap() });
            receive.recv_timeout(Duration::from_secs(10)).unwrap()
        }
        let thread_name = || std::thread::current().name().map(String::from);
        // SAFETY: getpriority of the calling thread's own id.
        let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
        // On threads of its own, not those where cheap calls go on.
        assert_eq!(ask(executors.for_tool(tool), thread_name).as_deref(), Some("plinth-tool-costly"));
        assert_eq!(ask(executors.for_tool(Uuid::new_v4()), thread_name).as_deref(), Some("plinth-tool"));
        // Below the server's priority, unlike the threads cheap calls move
        // to (at `SCHED_IDLE` too, unless lifted: `CostlyThreads`' test).
        // SAFETY: the calling thread's own policy.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        assert_eq!(ask(executors.for_tool(tool), nice), (nice() + COSTLY_NICE).min(19));
        assert_eq!(ask(executors.for_tool(Uuid::new_v4()), nice), nice());
        assert_eq!(ask(executors.for_tool(Uuid::new_v4()), policy), libc::SCHED_OTHER);
        // A few cheap calls bring it back.
        for _ in 0..10 {
            executors.ran(tool, "compute", &ok, Duration::from_micros(5), Duration::from_micros(5));
        }
        assert!(executors.for_tool(tool).starts_inline(), "cheap again");
        executors.shutdown();
    }

    #[test]
    fn costly_threads_start_at_idle_priority_unless_lifted_and_follow_the_lifts() {
        let costly = Arc::new(CostlyThreads::new());
        if !costly.idle {
            println!(
                "SKIPPED: this process may not take a thread back from SCHED_IDLE (needs CAP_SYS_NICE or RLIMIT_NICE)"
            );
            return;
        }
        // SAFETY: the calling thread's own policy.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        // A thread of the pool that reports its policy when told, until told to stop.
        let start = |costly: Arc<CostlyThreads>| {
            let (ask, asked) = std::sync::mpsc::channel::<bool>();
            let (tell, told) = std::sync::mpsc::channel();
            let thread = std::thread::spawn(move || {
                costly.joined();
                while asked.recv() == Ok(true) {
                    tell.send(policy()).unwrap();
                }
                costly.left();
            });
            (ask, told, thread)
        };
        let policy_of = |(ask, told, _): &(std::sync::mpsc::Sender<bool>, std::sync::mpsc::Receiver<i32>, _)| {
            ask.send(true).unwrap();
            told.recv().unwrap()
        };
        let first = start(costly.clone());
        assert_eq!(policy_of(&first), libc::SCHED_IDLE);
        costly.lift(true);
        assert_eq!(policy_of(&first), libc::SCHED_OTHER);
        // One that starts while they are lifted starts lifted.
        let second = start(costly.clone());
        assert_eq!(policy_of(&second), libc::SCHED_OTHER);
        costly.lift(false);
        assert_eq!((policy_of(&first), policy_of(&second)), (libc::SCHED_IDLE, libc::SCHED_IDLE));
        // A thread that stops is forgotten.
        assert_eq!(costly.state.lock().unwrap().threads.len(), 2);
        let (ask, _, thread) = second;
        ask.send(false).unwrap();
        thread.join().unwrap();
        assert_eq!(costly.state.lock().unwrap().threads.len(), 1);
        drop(first);
    }

    #[test]
    fn the_costly_threads_are_lifted_while_they_run_less_than_their_floor_and_want_more() {
        let window = GUARD_EVERY * GUARD_WINDOW;
        let busy_http = window * 3 / 2;
        let spent = |ran, waited, http_ran| Spent { ran, waited, http_ran };
        // Beside echo at full load (bench arm 6): a third of a core.
        assert!(!lift(false, &spent(window / 3, window, busy_http), 2));
        // Starved while the HTTP threads keep the CPUs busy: their floor.
        assert!(lift(false, &spent(Duration::from_micros(300), window, busy_http), 2));
        // Lifted, they stay so until they have run twice the floor.
        assert!(lift(true, &spent(COSTLY_FLOOR, window, busy_http), 2));
        assert!(!lift(true, &spent(COSTLY_FLOOR * 2, window, busy_http), 2));
        // Starved by other work than the HTTP threads': lifted, for as
        // long as it lasts.
        assert!(lift(false, &spent(window / 10, window, window / 4), 2));
        assert!(lift(true, &spent(window / 2, window, Duration::ZERO), 2));
        // Waiting only on each other, the HTTP threads idle: they have the
        // CPUs, nothing to lift.
        assert!(!lift(false, &spent(window * 2, window * 2, Duration::ZERO), 2));
        // Nothing to run: nothing to lift.
        assert!(!lift(false, &spent(Duration::ZERO, Duration::ZERO, busy_http), 2));
        assert!(!lift(true, &spent(Duration::ZERO, Duration::ZERO, Duration::ZERO), 2), "nothing more to run");
    }

    /// Every CPU kept busy by four threads at the server's priority: a
    /// costly call at `SCHED_IDLE` alone would get 3/4099 of a CPU, and its
    /// 10 ms of computing would take 14 s or more (15 s measured without
    /// the guard). No HTTP thread is busy here, so it is other work that
    /// starves it: the guard lifts the costly threads, and it is done in a
    /// second or two.
    #[test]
    fn a_costly_call_on_a_machine_kept_busy_at_normal_priority_still_runs() {
        if !cpu_policy::idle_policy_usable(COSTLY_NICE) {
            println!(
                "SKIPPED: this process may not take a thread back from SCHED_IDLE (needs CAP_SYS_NICE or RLIMIT_NICE)"
            );
            return;
        }
        let executors = Executors::new(1).unwrap();
        let tool = Uuid::new_v4();
        let ok = Ok(wasmtime::component::Val::Bool(true));
        for _ in 0..4 {
            executors.ran(tool, "compute", &ok, Duration::from_millis(2), Duration::from_millis(2));
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let spinners: Vec<_> = (0..4 * cpus)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let started = Instant::now();
        let (send, receive) = std::sync::mpsc::channel();
        executors.for_tool(tool).handle().spawn(async move {
            let start = thread_cpu_time().unwrap_or_default();
            while thread_cpu_time().unwrap_or_default() < start + Duration::from_millis(10) {
                std::hint::spin_loop();
            }
            send.send(()).unwrap();
        });
        let ended_at = receive.recv_timeout(Duration::from_secs(30));
        let took = started.elapsed();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spinners.into_iter().for_each(|spinner| spinner.join().unwrap());
        executors.shutdown();
        assert!(ended_at.is_ok(), "the call never ended");
        assert!(took < Duration::from_secs(8), "10 ms of computing took {took:?}");
    }

    #[test]
    fn the_rest_is_three_times_the_call_doubled_at_each_further_offence_up_to_the_demotion() {
        let call = Duration::from_millis(100);
        assert_eq!(rest_after(call, 0), Duration::from_millis(300));
        assert_eq!(rest_after(call, 1), Duration::from_millis(600));
        assert_eq!(rest_after(call, 2), Duration::from_millis(1200));
        assert_eq!(rest_after(call, 6), Duration::from_millis(19_200));
        assert_eq!(rest_after(call, 7), DEMOTION, "capped");
        assert_eq!(rest_after(Duration::MAX, u32::MAX), DEMOTION, "no overflow");
    }
}
