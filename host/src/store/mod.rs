//! Durable state: the registry of tools and versions, and the component
//! bytes they point to.
//!
//! All SQL lives in this module. Component bytes are content-addressed blobs
//! ([`BlobStore`]); the registry rows ([`RegistryStore`]) map a tool's
//! versions to those hashes and to the signature locked with them. The
//! embedded default is SQLite in the data dir; a PostgreSQL implementation for
//! fleets plugs in behind the same trait.

mod blobs;
mod sqlite;

pub use blobs::BlobStore;
pub use sqlite::SqliteStore;

use crate::manifest::ToolManifest;
use crate::signature::Signature;
use uuid::Uuid;

/// A persistence failure. Messages name the data dir path, never contents.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused or failed an operation.
    #[error("registry database: {0}")]
    Database(#[from] rusqlite::Error),
    /// A blob could not be written or read.
    #[error("blob store: {0}")]
    Io(#[from] std::io::Error),
    /// A blob's bytes no longer match its hash.
    #[error("blob {0} is corrupt: its bytes do not match its sha256")]
    Corrupt(String),
    /// A stored row could not be decoded.
    #[error("registry row for {0} is unreadable: {1}")]
    Decode(String, serde_json::Error),
}

/// One version of one tool, as persisted.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredVersion {
    /// The tool's id, stable across versions.
    pub tool_id: Uuid,
    /// The tool's name.
    pub name: String,
    /// The version number (1, 2, …).
    pub version: u32,
    /// The sha256 of the component bytes.
    pub sha256: String,
    /// The signature locked to this version.
    pub signature: Signature,
    /// The sha256 of the signature's canonical JSON (its ETag).
    pub signature_sha256: String,
    /// The manifest it was packed with.
    pub manifest: ToolManifest,
    /// When it was deployed (Unix seconds).
    pub created_at: i64,
    /// When it was retired (Unix seconds), if it was.
    pub retired_at: Option<i64>,
}

/// The host's persistent rows: the registry of versions, and the secrets
/// operators store for tools.
pub trait RegistryStore: Send + Sync {
    /// Every stored version of every tool, oldest first.
    fn versions(&self) -> Result<Vec<StoredVersion>, StoreError>;
    /// Records a new version (and the tool, on its first version). A version
    /// that already exists is never overwritten.
    fn insert_version(&self, version: &StoredVersion) -> Result<(), StoreError>;
    /// Marks a version retired (its row and blob stay, for audit). Returns
    /// whether it was live until now.
    fn retire_version(&self, tool_id: Uuid, version: u32, at: i64) -> Result<bool, StoreError>;
    /// Every stored secret, `(id, value)`.
    fn secrets(&self) -> Result<Vec<(String, String)>, StoreError>;
    /// Sets a secret.
    fn put_secret(&self, id: &str, value: &str, at: i64) -> Result<(), StoreError>;
    /// Deletes a secret; returns whether it existed.
    fn delete_secret(&self, id: &str) -> Result<bool, StoreError>;
}
