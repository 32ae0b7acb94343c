//! Files only their owner may read: the data dir's folders, key files and
//! other secrets. A leaf: the store, the runtime's compiled-code cache and
//! the signing keys all keep files this way.

/// Creates `dir` (and its parents) readable by its owner only, and tightens
/// an existing one that others could read, saying so: the data dir holds
/// secrets, key hashes and evidence.
pub fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(dir = %dir.display(), mode = format!("{mode:o}"), "others could read this directory of the data dir; it is now 0700");
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(())
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir)
}

/// Makes an existing file readable and writable by its owner only.
pub fn private_file(path: &std::path::Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        match std::fs::metadata(path) {
            Ok(meta) if meta.permissions().mode() & 0o077 != 0 => {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            }
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

/// A 32-byte key kept in a file of its own.
#[derive(Debug)]
pub enum KeyFile {
    /// The file's text, for its owner to decode.
    Read(String),
    /// There was no file: a new random key, now written to it.
    Created([u8; 32]),
}

/// Reads the key in `path`, or, when there is none, makes a random one and
/// writes it there as `encode` spells it (see [`write_private_file`]).
pub fn read_or_create_key(
    path: &std::path::Path,
    encode: impl FnOnce(&[u8; 32]) -> String,
) -> std::io::Result<KeyFile> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(KeyFile::Read(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut key = [0u8; 32];
            getrandom::fill(&mut key).map_err(std::io::Error::other)?;
            write_private_file(path, &encode(&key))?;
            Ok(KeyFile::Created(key))
        }
        Err(e) => Err(e),
    }
}

/// A 32-byte key kept in `path` as 64 hex digits, created (readable by its
/// owner only) on first use. `what` names it in the error for a file that
/// holds something else.
pub fn read_or_create_hex_key(path: &std::path::Path, what: &str) -> std::io::Result<[u8; 32]> {
    match read_or_create_key(path, |key| hex::encode(key))? {
        KeyFile::Created(key) => Ok(key),
        KeyFile::Read(text) => hex::decode(text.trim())
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| std::io::Error::other(format!("{} is not {what} (64 hex digits)", path.display()))),
    }
}

/// Writes `text` to `path`, readable and writable by its owner only (keys
/// and other secrets), atomically: a temporary file (0600) in the same
/// directory is written and fsynced, renamed over `path`, and the directory
/// fsynced. A crash leaves either no file or the whole one, never a part.
pub fn write_private_file(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => std::path::Path::new("."),
    };
    // tempfile creates its files 0600 on unix.
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    #[cfg(unix)]
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // The rename is durable only once the directory entry is.
    std::fs::File::open(dir)?.sync_all()
}
