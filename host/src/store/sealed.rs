//! Secrets at rest: every stored secret value is sealed with
//! XChaCha20-Poly1305 under the data dir's secrets key, with a random nonce
//! per value and its `(tenant, id)` as associated data, so a copied database
//! file alone reveals nothing and a value cannot be moved to another row.
//!
//! The key is 32 random bytes: from `PLINTH_SECRETS_KEY` (base64), or else
//! from `DATA/secrets.key` (base64, 0600), created at first start. Keeping
//! the key in the environment (a secret manager) and out of the data dir is
//! what protects a copy of the whole data dir.

use super::StoreError;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use std::path::Path;

/// The file the secrets key is kept in when the environment gives none.
pub const KEY_FILE: &str = "secrets.key";

/// The prefix of a sealed value: the format's version.
const SEALED_PREFIX: &str = "xc1:";

/// The secrets key and the cipher built from it.
pub struct SecretsCipher {
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for SecretsCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretsCipher(..)")
    }
}

impl SecretsCipher {
    /// A cipher for a 32-byte key.
    pub fn new(key: &[u8; 32]) -> Self {
        SecretsCipher { cipher: XChaCha20Poly1305::new(Key::from_slice(key)) }
    }

    /// The key from `from_env` (base64 of 32 bytes) when given, else from
    /// `DATA/secrets.key`, which is created (0600) when missing.
    pub fn resolve(data_dir: &Path, from_env: Option<&str>) -> Result<Self, StoreError> {
        if let Some(text) = from_env {
            return Self::from_base64(text, "PLINTH_SECRETS_KEY");
        }
        let path = data_dir.join(KEY_FILE);
        match crate::private_files::read_or_create_key(&path, |key| format!("{}\n", STANDARD.encode(key)))? {
            crate::private_files::KeyFile::Read(text) => Self::from_base64(&text, &path.display().to_string()),
            crate::private_files::KeyFile::Created(key) => {
                tracing::info!(path = %path.display(), "created the key that encrypts stored secrets");
                Ok(Self::new(&key))
            }
        }
    }

    fn from_base64(text: &str, source: &str) -> Result<Self, StoreError> {
        let key = STANDARD
            .decode(text.trim())
            .ok()
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .ok_or_else(|| {
                StoreError::SecretsKey(format!(
                    "{source} is not a secrets key: it must be the base64 of 32 random bytes (e.g. `head -c32 /dev/urandom | base64`)"
                ))
            })?;
        Ok(Self::new(&key))
    }

    /// Seals `value`, bound to `(tenant, id)`.
    pub fn seal(&self, tenant: &str, id: &str, value: &str) -> Result<String, StoreError> {
        self.seal_with(&associated_data(tenant, id), value)
    }

    /// Opens a value sealed for `(tenant, id)`. Fails when the key is not
    /// the one it was sealed with, or the value was moved or altered.
    pub fn open(&self, tenant: &str, id: &str, sealed: &str) -> Result<String, StoreError> {
        self.open_with(&associated_data(tenant, id), sealed)
    }

    /// Seals `value` bound to a field of a row other than a secret's: the
    /// field's `kind` and the row's key `parts` (each length-prefixed), in
    /// associated data that no secret's can equal, so that neither a
    /// secret nor another row's value opens in its place.
    pub(crate) fn seal_field(&self, kind: &str, parts: &[&str], value: &str) -> Result<String, StoreError> {
        self.seal_with(&field_data(kind, parts), value)
    }

    /// Opens a value [`SecretsCipher::seal_field`] sealed for that field.
    pub(crate) fn open_field(&self, kind: &str, parts: &[&str], sealed: &str) -> Result<String, StoreError> {
        self.open_with(&field_data(kind, parts), sealed)
    }

    fn seal_with(&self, aad: &[u8], value: &str) -> Result<String, StoreError> {
        let mut nonce = [0u8; 24];
        getrandom::fill(&mut nonce).map_err(std::io::Error::other)?;
        let sealed = self
            .cipher
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: value.as_bytes(), aad })
            .map_err(|_| StoreError::SecretsKey("a secret could not be encrypted".into()))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(format!("{SEALED_PREFIX}{}", STANDARD.encode(out)))
    }

    fn open_with(&self, aad: &[u8], sealed: &str) -> Result<String, StoreError> {
        let wrong = || StoreError::WrongSecretsKey;
        let bytes = sealed.strip_prefix(SEALED_PREFIX).and_then(|b| STANDARD.decode(b).ok()).ok_or_else(wrong)?;
        if bytes.len() < 24 {
            return Err(wrong());
        }
        let (nonce, ciphertext) = bytes.split_at(24);
        let plain =
            self.cipher.decrypt(XNonce::from_slice(nonce), Payload { msg: ciphertext, aad }).map_err(|_| wrong())?;
        String::from_utf8(plain).map_err(|_| wrong())
    }
}

/// `(tenant, id)` without ambiguity: the tenant's length comes first.
fn associated_data(tenant: &str, id: &str) -> Vec<u8> {
    let mut aad = b"plinth-secret\0".to_vec();
    aad.extend_from_slice(&(tenant.len() as u64).to_be_bytes());
    aad.extend_from_slice(tenant.as_bytes());
    aad.extend_from_slice(id.as_bytes());
    aad
}

/// A field's kind and its row's key, each part after its length: a secret's
/// associated data starts `plinth-secret`, never `plinth-field`.
fn field_data(kind: &str, parts: &[&str]) -> Vec<u8> {
    let mut aad = b"plinth-field\0".to_vec();
    for part in std::iter::once(&kind).chain(parts) {
        aad.extend_from_slice(&(part.len() as u64).to_be_bytes());
        aad.extend_from_slice(part.as_bytes());
    }
    aad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_for_its_row_and_key() {
        let cipher = SecretsCipher::new(&[7; 32]);
        let sealed = cipher.seal("acme", "api-key", "sk-live-1").unwrap();
        assert!(!sealed.contains("sk-live-1"));
        assert_ne!(sealed, cipher.seal("acme", "api-key", "sk-live-1").unwrap(), "a fresh nonce each time");
        assert_eq!(cipher.open("acme", "api-key", &sealed).unwrap(), "sk-live-1");
        assert!(matches!(cipher.open("globex", "api-key", &sealed), Err(StoreError::WrongSecretsKey)));
        assert!(matches!(cipher.open("acme", "other", &sealed), Err(StoreError::WrongSecretsKey)));
        // "ac" + "meapi-key" must not be "acme" + "api-key".
        assert!(cipher.open("ac", "meapi-key", &sealed).is_err());
        let other = SecretsCipher::new(&[8; 32]);
        assert!(matches!(other.open("acme", "api-key", &sealed), Err(StoreError::WrongSecretsKey)));
        assert!(cipher.open("acme", "api-key", "sk-live-1").is_err(), "plaintext is not a sealed value");
    }

    #[test]
    fn a_sealed_field_opens_only_for_its_field_and_row() {
        let cipher = SecretsCipher::new(&[7; 32]);
        let sealed = cipher.seal_field("grant-access-token", &["acme", "alice", "github"], "gho_1").unwrap();
        assert_eq!(cipher.open_field("grant-access-token", &["acme", "alice", "github"], &sealed).unwrap(), "gho_1");
        for (kind, parts) in [
            ("grant-refresh-token", ["acme", "alice", "github"]),
            ("grant-access-token", ["acme", "bob", "github"]),
            ("grant-access-token", ["acme", "alice", "gitlab"]),
            // "alice" + "github" must not be "ali" + "cegithub".
            ("grant-access-token", ["acme", "ali", "cegithub"]),
        ] {
            assert!(matches!(cipher.open_field(kind, &parts, &sealed), Err(StoreError::WrongSecretsKey)), "{parts:?}");
        }
        // Neither a secret nor a field opens as the other.
        let secret = cipher.seal("acme", "api-key", "v").unwrap();
        assert!(cipher.open_field("api-key", &[], &secret).is_err());
        assert!(cipher.open_field("", &["acme", "api-key"], &secret).is_err());
        assert!(cipher.open("acme", "grant-access-token", &sealed).is_err());
    }

    #[test]
    fn the_key_comes_from_the_environment_or_a_private_file() {
        let dir = tempfile::tempdir().unwrap();
        let first = SecretsCipher::resolve(dir.path(), None).unwrap();
        let file = dir.path().join(KEY_FILE);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        let sealed = first.seal("t", "i", "v").unwrap();
        let again = SecretsCipher::resolve(dir.path(), None).unwrap();
        assert_eq!(again.open("t", "i", &sealed).unwrap(), "v", "the same key after a restart");
        let text = std::fs::read_to_string(&file).unwrap();
        let from_env = SecretsCipher::resolve(tempfile::tempdir().unwrap().path(), Some(text.trim())).unwrap();
        assert_eq!(from_env.open("t", "i", &sealed).unwrap(), "v");
        let err = SecretsCipher::resolve(dir.path(), Some("c2hvcnQ=")).unwrap_err().to_string();
        assert!(err.contains("base64 of 32 random bytes"), "{err}");
    }
}
