//! A tool's log: `plinth:tool/log` and its captured stdout/stderr, labelled,
//! redacted, rate-limited per tool ([`LogBudget`]) and bounded in bytes per
//! line and per call, and kept for the publisher's console.

use super::{Redactor, outbound};
use std::fmt::Write as _;
use std::sync::Arc;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

/// Bytes of one log line a tool may write; the rest is cut off, with a
/// marker saying how much.
const LOG_LINE_BYTES: usize = 4 * 1024;
/// Bytes of log one invocation may write (stdout and stderr included);
/// later lines are dropped and counted.
const LOG_CALL_BYTES: usize = 64 * 1024;

/// A token bucket of log lines per tool, so a chatty tool cannot flood the
/// host's logs: `RATE` lines a second, bursts of `BURST`.
pub struct LogBudget {
    state: std::sync::Mutex<(f64, std::time::Instant)>,
}

impl LogBudget {
    const RATE: f64 = 50.0;
    const BURST: f64 = 200.0;

    /// A full bucket.
    pub fn new() -> Self {
        LogBudget { state: std::sync::Mutex::new((Self::BURST, std::time::Instant::now())) }
    }

    /// Takes one line's worth; `false` when the line must be dropped.
    fn take(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        let refill = now.duration_since(state.1).as_secs_f64() * Self::RATE;
        *state = ((state.0 + refill).min(Self::BURST), now);
        if state.0 >= 1.0 {
            state.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

impl Default for LogBudget {
    fn default() -> Self {
        Self::new()
    }
}

/// What the host's logs say a tool line came from.
#[derive(Debug, Clone)]
pub struct LogLabels {
    /// The tool's name.
    pub tool: String,
    /// The version number.
    pub version: u32,
    /// The call id.
    pub call_id: String,
    /// Where the call's lines are also kept, as logged (redacted, cut,
    /// within the call's allowance), for its publisher's console.
    pub lines: Option<CallLines>,
}

/// A call's log lines, kept for its publisher's console (`host/console.rs`).
pub type CallLines = Arc<std::sync::Mutex<Vec<LogLine>>>;

/// One log line of a call, as logged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LogLine {
    /// `trace`, `debug`, `info`, `warn` or `error`.
    pub level: &'static str,
    /// The text, redacted and cut like the server's log line.
    pub text: String,
}

impl LogLabels {
    fn keep(&self, level: &'static str, text: &str) {
        if let Some(lines) = &self.lines {
            lines.lock().unwrap_or_else(|p| p.into_inner()).push(LogLine { level, text: text.to_string() });
        }
    }
}

/// Where a tool's log lines go: labelled, redacted, rate-limited and
/// bounded in bytes (per line and per call).
///
/// What a tool may not write is counted, not logged: one line at the end of
/// the call sums it up ([`ToolLog::finish`]).
pub(super) struct ToolLog {
    pub(super) labels: LogLabels,
    redactor: Redactor,
    budget: Arc<LogBudget>,
    /// Bytes of tool text logged so far in this call.
    written: usize,
    /// Lines dropped by the rate limit.
    dropped_rate: u64,
    /// Lines dropped because the call's byte allowance was spent.
    dropped_size: u64,
    /// Lines cut short (at [`LOG_LINE_BYTES`] or at the call's allowance).
    truncated: u64,
    /// Bytes not logged: dropped lines and the cut-off ends of long ones.
    dropped_bytes: u64,
}

/// Why a log line was dropped.
#[derive(Debug, Clone, Copy)]
pub(super) enum DroppedLine {
    /// The call's byte allowance is spent.
    OverSize,
    /// The tool's lines-per-second rate is spent.
    OverRate,
}

impl ToolLog {
    pub(super) fn new(labels: LogLabels, redactor: Redactor, budget: Arc<LogBudget>) -> Self {
        ToolLog {
            labels,
            redactor,
            budget,
            written: 0,
            dropped_rate: 0,
            dropped_size: 0,
            truncated: 0,
            dropped_bytes: 0,
        }
    }

    /// How much of a line [`ToolLog::write`] needs to see: a line's first
    /// [`LOG_LINE_BYTES`], and enough beyond to tell whether a secret
    /// straddles the cut.
    pub(super) fn needed(&self) -> usize {
        LOG_LINE_BYTES + self.redactor.longest()
    }

    /// Logs a line of `total` bytes, of which `text` holds (at least) the
    /// first [`ToolLog::needed`] bytes.
    fn write(&mut self, level: LogLevel, text: &str, total: usize) {
        match self.admit() {
            Ok(()) => self.write_admitted(level, text, total),
            Err(dropped) => self.drop_line(dropped, total),
        }
    }

    /// Whether the call may log one more line: its byte allowance and the
    /// tool's rate allow it. Asked before a line is copied out of the tool's
    /// memory, so a tool logging past its allowance costs no copies.
    pub(super) fn admit(&self) -> Result<(), DroppedLine> {
        if self.written >= LOG_CALL_BYTES {
            return Err(DroppedLine::OverSize);
        }
        if !self.budget.take() {
            return Err(DroppedLine::OverRate);
        }
        Ok(())
    }

    /// Counts a line [`ToolLog::admit`] refused, of `total` bytes.
    pub(super) fn drop_line(&mut self, why: DroppedLine, total: usize) {
        match why {
            DroppedLine::OverSize => self.dropped_size += 1,
            DroppedLine::OverRate => self.dropped_rate += 1,
        }
        self.dropped_bytes += total as u64;
    }

    /// Logs an admitted line (see [`ToolLog::write`]).
    pub(super) fn write_admitted(&mut self, level: LogLevel, text: &str, total: usize) {
        let cut = self.redactor.cut(text, LOG_LINE_BYTES.min(LOG_CALL_BYTES - self.written));
        self.written += cut;
        let mut message = self.redactor.text(&text[..cut]);
        if cut < total {
            self.truncated += 1;
            self.dropped_bytes += (total - cut) as u64;
            let _ = write!(message, " … [truncated: {} more bytes]", total - cut);
        }
        let (tool, version, call_id) = (&self.labels.tool, self.labels.version, &self.labels.call_id);
        let name = match level {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        };
        self.labels.keep(name, &message);
        match level {
            LogLevel::Trace => tracing::trace!(target: "plinth::tool", tool, version, call_id, "{message}"),
            LogLevel::Debug => tracing::debug!(target: "plinth::tool", tool, version, call_id, "{message}"),
            LogLevel::Info => tracing::info!(target: "plinth::tool", tool, version, call_id, "{message}"),
            LogLevel::Warn => tracing::warn!(target: "plinth::tool", tool, version, call_id, "{message}"),
            LogLevel::Error => tracing::error!(target: "plinth::tool", tool, version, call_id, "{message}"),
        }
    }

    /// Logs what the tool wrote to stdout/stderr, one event per line. The
    /// pipes keep at most [`CAPTURED_OUTPUT_BYTES`] each; the lines then pass
    /// the same limits as `plinth:tool/log`.
    pub(super) fn captured(&mut self, stream: &str, pipe: &MemoryOutputPipe) {
        let bytes = pipe.contents();
        for line in String::from_utf8_lossy(&bytes).lines().filter(|l| !l.trim().is_empty()) {
            let line = format!("[{stream}] {line}");
            self.write(LogLevel::Info, &line, line.len());
        }
    }

    /// One line for what the call was not allowed to log, and one for the
    /// outbound requests it was refused: a summary instead of a line each.
    pub(super) fn finish(&self, denials: &outbound::Denials) {
        let labels = &self.labels;
        let (tool, version, call_id) = (&labels.tool, labels.version, &labels.call_id);
        let dropped = self.dropped_rate + self.dropped_size;
        if dropped > 0 || self.truncated > 0 {
            labels.keep("warn", &format!(
                "{dropped} log lines dropped ({} over the rate limit, {} over the {LOG_CALL_BYTES} bytes a call may log), {} cut short",
                self.dropped_rate, self.dropped_size, self.truncated
            ));
            tracing::warn!(target: "plinth::tool", tool, version, call_id, dropped_lines = dropped,
                truncated_lines = self.truncated, dropped_bytes = self.dropped_bytes,
                "the tool logs more than it may: {dropped} log lines dropped ({} over the rate limit, {} over the \
                 {LOG_CALL_BYTES} bytes a call may log), {} cut short; {} bytes not logged",
                self.dropped_rate, self.dropped_size, self.truncated, self.dropped_bytes);
        }
        if let Some((count, first)) = denials.summary() {
            let first = self.redactor.text(&first);
            labels.keep("warn", &format!("{count} outbound requests refused (first: {first})"));
            tracing::warn!(target: "plinth::outbound", tool, version, call_id, refused = count,
                "{count} outbound requests refused (first: {first})");
        }
    }
}

/// The `level` enum of `plinth:tool/log`.
// Variants are built by lifting guest values, never in Rust code.
#[allow(dead_code)]
#[derive(wasmtime::component::ComponentType, wasmtime::component::Lift, Clone, Copy, Debug)]
#[component(enum)]
#[repr(u8)]
pub(super) enum LogLevel {
    #[component(name = "trace")]
    Trace,
    #[component(name = "debug")]
    Debug,
    #[component(name = "info")]
    Info,
    #[component(name = "warn")]
    Warn,
    #[component(name = "error")]
    Error,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_and_the_call_is_bounded() {
        let mut log = ToolLog::new(
            LogLabels { tool: "t".into(), version: 1, call_id: "c".into(), lines: None },
            Redactor::default(),
            Arc::new(LogBudget::new()),
        );
        let huge = "y".repeat(LOG_LINE_BYTES * 3);
        log.write(LogLevel::Info, &huge, huge.len());
        assert_eq!((log.written, log.truncated), (LOG_LINE_BYTES, 1));
        assert_eq!(log.dropped_bytes, 2 * LOG_LINE_BYTES as u64);
        for _ in 0..100 {
            log.write(LogLevel::Info, &huge[..1000], 1000);
        }
        assert_eq!(log.written, LOG_CALL_BYTES, "never more than a call's allowance");
        assert!(log.dropped_size > 0 && log.dropped_rate == 0);
        assert_eq!(log.truncated, 2, "the line that reached the allowance was cut");
    }
}
