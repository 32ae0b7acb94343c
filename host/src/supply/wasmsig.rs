//! Signatures embedded in a component, in the WebAssembly tool-conventions
//! format that `wasmsign2` writes: a custom section named `signature`, first
//! after the preamble, holding Ed25519 signatures over the SHA-256 of every
//! byte after that section.
//!
//! Verified here with our own reader (ed25519-dalek, sha2) rather than the
//! `wasmsign2` crate, so that the interoperability tests, where the
//! `wasmsign2` tool signs and Plinth verifies, exercise two independent
//! implementations of the format. Only whole-component signatures count:
//! a signature over some sections only (`signature_delimiter`) does not
//! cover the component Plinth would run.

use super::TrustedKey;
use ed25519_dalek::{Signature, VerifyingKey};
use sha2::{Digest, Sha256};

/// The name of the section that holds the signatures.
const SECTION: &[u8] = b"signature";
/// Format constants: version 1, whole module/component, SHA-256.
const SPEC_VERSION: u64 = 1;
const CONTENT_TYPE: u64 = 1;
const HASH_SHA256: u64 = 1;
const ALG_ED25519: u8 = 1;
/// Bounds the format itself sets (wasmsign2's `MAX_HASHES`, `MAX_SIGNATURES`).
const MAX_HASHES: u64 = 64;
const MAX_SIGNATURES: u64 = 256;
/// Signatures checked per set, and sets checked, at most: what a real
/// component carries is one or two; the rest is not looked at, so a crafted
/// section cannot make a deploy check thousands of signatures.
const CHECKED_SIGNATURES: usize = 16;
const CHECKED_SETS: usize = 8;

/// What the component's embedded signature says about the trusted keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Embedded {
    /// No signature section.
    Unsigned,
    /// A signature section that is not in the format.
    Malformed(&'static str),
    /// Signed: which trusted keys (their index) signed exactly these bytes,
    /// and which signed other bytes (a signature section moved onto another
    /// component, or a component changed after signing).
    Signed { verified: Vec<usize>, other_bytes: Vec<usize> },
}

/// Reads the embedded signature of `component` and checks it against the
/// Ed25519 keys among `keys`.
pub fn check(component: &[u8], keys: &[TrustedKey]) -> Embedded {
    match read(component) {
        Ok(Some((sets, covered))) => check_sets(&sets, covered, keys),
        Ok(None) => Embedded::Unsigned,
        Err(why) => Embedded::Malformed(why),
    }
}

/// What the signature sets say about `covered` (the bytes after the section).
fn check_sets(sets: &[SignedHashes], covered: &[u8], keys: &[TrustedKey]) -> Embedded {
    let digest: [u8; 32] = Sha256::digest(covered).into();
    let (mut verified, mut other_bytes) = (Vec::new(), Vec::new());
    // A set covers these bytes only when its last hash is theirs: after
    // `wasmsign2 split` the earlier hashes cover prefixes, and a component
    // cut at a delimiter must not pass. One set that covers other bytes is
    // checked too, to say so.
    let covering = sets.iter().filter(|s| s.hashes.last() == Some(&digest)).take(CHECKED_SETS);
    let other = sets.iter().find(|s| s.hashes.last() != Some(&digest));
    for (set, covers) in covering.map(|s| (s, true)).chain(other.map(|s| (s, false))) {
        let mut message = b"wasmsig".to_vec();
        message.extend_from_slice(&[SPEC_VERSION as u8, CONTENT_TYPE as u8, HASH_SHA256 as u8]);
        set.hashes.iter().for_each(|h| message.extend_from_slice(h));
        for (index, key) in keys.iter().enumerate() {
            let Some(public) = key.ed25519().and_then(|k| VerifyingKey::from_bytes(&k).ok()) else { continue };
            let signed =
                set.signatures.iter().take(CHECKED_SIGNATURES).any(|s| public.verify_strict(&message, s).is_ok());
            if signed {
                if covers { verified.push(index) } else { other_bytes.push(index) }
            }
        }
    }
    verified.sort_unstable();
    verified.dedup();
    other_bytes.retain(|i| !verified.contains(i));
    other_bytes.sort_unstable();
    other_bytes.dedup();
    Embedded::Signed { verified, other_bytes }
}

/// One signed set: the hashes and the signatures over them.
struct SignedHashes {
    hashes: Vec<[u8; 32]>,
    signatures: Vec<Signature>,
}

/// A component's signature sets and the bytes they cover.
type Signed<'a> = (Vec<SignedHashes>, &'a [u8]);

/// The signature sets and the bytes they cover, or `None` when the first
/// section is not a signature section.
fn read(component: &[u8]) -> Result<Option<Signed<'_>>, &'static str> {
    if component.len() < 8 || &component[..4] != b"\0asm" {
        return Ok(None);
    }
    let mut r = Reader { bytes: component, at: 8 };
    if r.at >= component.len() || r.byte()? != 0 {
        return Ok(None);
    }
    let size = r.varint()? as usize;
    let end = r.at.checked_add(size).filter(|e| *e <= component.len()).ok_or("the signature section is cut short")?;
    let mut section = Reader { bytes: &component[..end], at: r.at };
    let name_len = section.varint()? as usize;
    if section.take(name_len)? != SECTION {
        return Ok(None);
    }
    if section.varint()? != SPEC_VERSION {
        return Err("the signature section's format version is not 1");
    }
    if section.varint()? != CONTENT_TYPE {
        return Err("the signature section signs something other than a whole component");
    }
    if section.varint()? != HASH_SHA256 {
        return Err("the signature section uses a hash other than SHA-256");
    }
    let count = section.varint()?;
    if count > MAX_HASHES {
        return Err("the signature section holds too many signature sets");
    }
    let mut sets = Vec::new();
    for _ in 0..count {
        let len = section.varint()? as usize;
        let mut set = Reader { bytes: section.take(len)?, at: 0 };
        let n_hashes = set.varint()?;
        if n_hashes > MAX_HASHES {
            return Err("a signature set holds too many hashes");
        }
        let mut hashes = Vec::new();
        for _ in 0..n_hashes {
            hashes.push(<[u8; 32]>::try_from(set.take(32)?).map_err(|_| "a hash is not 32 bytes")?);
        }
        let n_signatures = set.varint()?;
        if n_signatures > MAX_SIGNATURES {
            return Err("a signature set holds too many signatures");
        }
        let mut signatures = Vec::new();
        for _ in 0..n_signatures {
            let len = set.varint()? as usize;
            let mut entry = Reader { bytes: set.take(len)?, at: 0 };
            let key_id_len = entry.varint()? as usize;
            entry.take(key_id_len)?;
            // Other algorithms are skipped, as the reference reader does.
            if entry.byte()? != ALG_ED25519 {
                continue;
            }
            let sig_len = entry.varint()? as usize;
            if let Ok(bytes) = <[u8; 64]>::try_from(entry.take(sig_len)?) {
                signatures.push(Signature::from_bytes(&bytes));
            }
        }
        sets.push(SignedHashes { hashes, signatures });
    }
    Ok(Some((sets, &component[end..])))
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, &'static str> {
        let b = *self.bytes.get(self.at).ok_or("the signature section is cut short")?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        let end =
            self.at.checked_add(n).filter(|e| *e <= self.bytes.len()).ok_or("the signature section is cut short")?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// An unsigned LEB128 number of at most 64 bits.
    fn varint(&mut self) -> Result<u64, &'static str> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a number in the signature section is too long")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    /// Signs like wasmsign2 does (the interoperability tests use the real
    /// tool; this covers the reader's edges).
    pub(crate) fn sign(component: &[u8], key: &SigningKey) -> Vec<u8> {
        let rest = &component[8..];
        let hash: [u8; 32] = Sha256::digest(rest).into();
        let mut message = b"wasmsig\x01\x01\x01".to_vec();
        message.extend_from_slice(&hash);
        let signature = key.sign(&message).to_bytes();
        let mut entry = vec![0u8, ALG_ED25519, 64];
        entry.extend_from_slice(&signature);
        let mut set = vec![1u8];
        set.extend_from_slice(&hash);
        set.push(1);
        set.push(entry.len() as u8);
        set.extend_from_slice(&entry);
        let mut data = vec![9u8];
        data.extend_from_slice(SECTION);
        data.extend_from_slice(&[1, 1, 1, 1]);
        data.extend_from_slice(&encode(set.len()));
        data.extend_from_slice(&set);
        let mut out = component[..8].to_vec();
        out.push(0);
        out.extend_from_slice(&encode(data.len()));
        out.extend_from_slice(&data);
        out.extend_from_slice(rest);
        out
    }

    fn encode(mut n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    fn trusted(key: &SigningKey, name: &str) -> TrustedKey {
        TrustedKey::from_ed25519(name, key.verifying_key().to_bytes())
    }

    #[test]
    fn a_signature_verifies_only_for_its_key_and_its_bytes() {
        let component = b"\0asm\x0d\x00\x01\x00\x00\x04\x03abc".to_vec();
        let (alice, mallory) = (SigningKey::from_bytes(&[7; 32]), SigningKey::from_bytes(&[9; 32]));
        let keys = [trusted(&mallory, "mallory"), trusted(&alice, "alice")];
        let signed = sign(&component, &alice);
        assert_eq!(check(&signed, &keys), Embedded::Signed { verified: vec![1], other_bytes: vec![] });
        assert_eq!(check(&signed, &keys[..1]), Embedded::Signed { verified: vec![], other_bytes: vec![] });
        assert_eq!(check(&component, &keys), Embedded::Unsigned);

        // The signature section moved onto other bytes.
        let mut moved = signed.clone();
        *moved.last_mut().unwrap() = b'x';
        assert_eq!(check(&moved, &keys), Embedded::Signed { verified: vec![], other_bytes: vec![1] });

        // A set whose earlier hash is these bytes' (a prefix's, after
        // `wasmsign2 split`) but whose last is not: not these bytes.
        let hash: [u8; 32] = Sha256::digest(&component[8..]).into();
        let other: [u8; 32] = Sha256::digest(b"the rest").into();
        let mut message = b"wasmsig\x01\x01\x01".to_vec();
        message.extend_from_slice(&hash);
        message.extend_from_slice(&other);
        let set = SignedHashes { hashes: vec![hash, other], signatures: vec![alice.sign(&message)] };
        let public = alice.verifying_key();
        assert!(public.verify_strict(&message, &set.signatures[0]).is_ok());
        let prefix_only = Embedded::Signed { verified: vec![], other_bytes: vec![1] };
        assert_eq!(check_sets(&[set], &component[8..], &keys), prefix_only);

        // Cut short anywhere inside the section: malformed or unsigned, never verified.
        for cut in 9..signed.len() - 4 {
            assert!(
                !matches!(check(&signed[..cut], &keys), Embedded::Signed { verified, .. } if !verified.is_empty()),
                "cut at {cut}"
            );
        }
    }
}
