//! Content digests: a leaf. A version is pinned by the sha256 of its bytes,
//! blobs are stored under theirs, and secrets (tokens, sessions) are kept
//! only as theirs.

use sha2::{Digest, Sha256};

/// The lower-case hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
