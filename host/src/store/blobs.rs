//! Content-addressed component bytes under `DATA/blobs/sha256/`.

use super::StoreError;
use crate::digest::sha256_hex;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Blobs named by the sha256 of their bytes; written once, never changed.
#[derive(Debug, Clone)]
pub struct BlobStore {
    dir: PathBuf,
}

impl BlobStore {
    /// Opens (creating) the blob folder under `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        crate::private_files::private_dir(&data_dir.join("blobs"))?;
        let dir = data_dir.join("blobs").join("sha256");
        crate::private_files::private_dir(&dir)?;
        Ok(BlobStore { dir })
    }

    fn path(&self, sha256: &str) -> PathBuf {
        self.dir.join(sha256)
    }

    /// Stores `bytes` and returns their hash. Writing is atomic (temp file,
    /// fsync, rename), so a crash or a full disk never leaves a partial blob
    /// under a valid name.
    pub fn put(&self, bytes: &[u8]) -> Result<String, StoreError> {
        let sha256 = sha256_hex(bytes);
        let path = self.path(&sha256);
        if path.exists() {
            return Ok(sha256);
        }
        // tempfile creates its files 0600.
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)?;
        tmp.write_all(bytes)?;
        tmp.as_file().sync_all()?;
        tmp.persist(&path).map_err(|e| e.error)?;
        // The rename is durable only once the directory entry is.
        std::fs::File::open(&self.dir)?.sync_all()?;
        Ok(sha256)
    }

    /// Deletes blobs no version refers to (left by a deploy that crashed
    /// before its registry row committed) and temporary files of unfinished
    /// writes. Returns how many files were removed.
    pub fn sweep(&self, referenced: &std::collections::HashSet<String>) -> Result<usize, StoreError> {
        let mut removed = 0;
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !referenced.contains(&name) {
                std::fs::remove_file(entry.path())?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Reads a blob, checking that its bytes still match its name.
    pub fn get(&self, sha256: &str) -> Result<Vec<u8>, StoreError> {
        let bytes = std::fs::read(self.path(sha256))?;
        if sha256_hex(&bytes) != sha256 {
            return Err(StoreError::Corrupt(sha256.to_string()));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_by_hash_and_detects_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::open(dir.path()).unwrap();
        let sha = blobs.put(b"component").unwrap();
        assert_eq!(sha, sha256_hex(b"component"));
        assert_eq!(blobs.put(b"component").unwrap(), sha);
        assert_eq!(blobs.get(&sha).unwrap(), b"component");
        let orphan = blobs.put(b"orphan").unwrap();
        std::fs::write(blobs.dir.join(".tmpXYZ"), b"half a write").unwrap();
        let keep = std::collections::HashSet::from([sha.clone()]);
        assert_eq!(blobs.sweep(&keep).unwrap(), 2);
        assert!(blobs.get(&orphan).is_err());
        assert_eq!(blobs.get(&sha).unwrap(), b"component");

        std::fs::write(blobs.path(&sha), b"tampered").unwrap();
        assert!(matches!(blobs.get(&sha), Err(StoreError::Corrupt(_))));
    }
}
