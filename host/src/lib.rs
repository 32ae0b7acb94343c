//! Plinth: a host for AI-agent tools.
//!
//! A tool is a WebAssembly component whose signature is declared in WIT.
//! Plinth derives the tool's A2T signature from the component once, when it
//! is loaded, runs each invocation in a fresh sandboxed instance, and serves
//! the tools over HTTP. See `ARCHITECTURE.md` for the map.

pub mod api;
pub mod build;
pub mod cheq;
pub mod client_address;
pub mod cpu_policy;
pub mod digest;
pub mod door;
pub mod egress;
pub mod heap;
pub mod host;
pub mod idempotency;
pub mod invocation;
pub mod keyed_rate;
pub mod manifest;
pub mod metrics;
pub mod package;
pub mod private_files;
pub mod registry;
pub mod runtime;
pub mod scaffold;
pub mod signature;
pub mod store;
pub mod supply;
pub mod telemetry;
pub mod tenancy;
#[doc(hidden)]
pub mod testing;
pub mod tool_ids;
