//! End-to-end tests: the real `plinth` binary, real packed components built
//! from `plugins/` (by `make plugins`), real HTTP on 127.0.0.1.

mod a2t;
mod browser;
mod catalog;
mod catalog_browser;
mod cheq;
mod cheq_browser;
mod cheq_restart;
mod cli;
mod console;
mod container;
mod deploy;
mod fleet;
mod hardening_net;
mod hardening_oauth;
mod mcp;
mod mcp_conformance;
mod mcp_inspector;
mod mcp_python;
mod mcp_support;
mod oauth;
mod observability;
mod oci;
mod openapi;
mod otc;
mod polyglot;
mod sandbox;
mod scaffold;
mod security_doc;
mod soak;
mod storage;
mod support;
mod tenancy;
mod untrusted_input;
mod versions;
mod weather;
