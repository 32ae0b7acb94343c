//! Shared by the targets (each includes it with `#[path]`).
#![allow(dead_code)]

use std::sync::Once;

/// libFuzzer's panic hook aborts on every panic, even one the host catches
/// on purpose: Plinth runs a few third-party parsers (CEL, WIT decoding)
/// under `catch_unwind` and answers a panic there as a refusal. This hook
/// lets a panic whose location is in one of `crates` (a path fragment such
/// as `/cel-0.`) pass on to that `catch_unwind`, and aborts on every other
/// one, as libFuzzer's does: a panic in Plinth's own code is always a
/// finding, caught or not. A panic nobody catches still aborts in
/// libfuzzer-sys's own `catch_unwind` around the target.
pub fn tolerate_caught_panics_in(crates: &'static [&'static str]) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let file = info.location().map(|l| l.file()).unwrap_or("");
            if crates.iter().any(|c| file.contains(c)) {
                return;
            }
            default(info);
            std::process::abort();
        }));
    });
}

/// What the `plinth` binary's `main` has and libFuzzer's does not: a
/// write to a connection its peer closed is an error, not SIGPIPE (Rust's
/// runtime ignores the signal before `main`; libFuzzer's `main` is C's).
pub fn ignore_sigpipe() {
    static ONCE: Once = Once::new();
    // SAFETY: setting a signal's disposition to SIG_IGN, once, before any
    // thread of ours writes to a socket.
    ONCE.call_once(|| unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    });
}

/// The tokio runtime the target's requests run on (one worker thread).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    ignore_sigpipe();
    RT.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap())
}
