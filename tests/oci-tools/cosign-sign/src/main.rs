//! Test tool: signs an OCI manifest with a cosign key, in cosign's legacy
//! format (tag `sha256-<hex>.sig` in the same repository, one
//! `application/vnd.dev.cosign.simplesigning.v1+json` layer whose annotation
//! `dev.cosignproject.cosign/signature` holds the signature), the way
//! `cosign sign --key` (v2) does. Debian has no cosign, and this needs no
//! Fulcio, Rekor or network beyond the registry. Replaces any `.sig` already
//! there. Prints the `.sig` reference.

use sigstore::cosign::constraint::{Constraint, PrivateKeySigner};
use sigstore::cosign::{ClientBuilder, CosignCapabilities, SignatureLayer};
use sigstore::crypto::SigningScheme;
use sigstore::registry::{Auth, ClientConfig, ClientProtocol, OciReference};
use zeroize::Zeroizing;

const USAGE: &str =
    "usage: cosign-sign --key cosign.key [--password PW] [--http] [--user U --pass P] REGISTRY/REPO:TAG_OR@DIGEST";

fn fail(msg: impl std::fmt::Display, code: i32) -> ! {
    eprintln!("cosign-sign: {msg}");
    std::process::exit(code)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (mut key, mut password, mut http, mut user, mut pass, mut image) =
        (None, String::new(), false, None, None, None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| fail(format!("{arg} needs a value\n{USAGE}"), 2));
        match arg.as_str() {
            "--key" => key = Some(value()),
            "--password" => password = value(),
            "--user" => user = Some(value()),
            "--pass" => pass = Some(value()),
            "--http" => http = true,
            "-h" | "--help" => return println!("{USAGE}"),
            _ if arg.starts_with('-') || image.is_some() => fail(format!("unexpected argument {arg}\n{USAGE}"), 2),
            _ => image = Some(arg),
        }
    }
    let (Some(key), Some(image)) = (key, image) else { fail(USAGE, 2) };
    let image: OciReference = image.parse().unwrap_or_else(|e| fail(e, 2));
    let auth = match (user, pass) {
        (Some(u), Some(p)) => Auth::Basic(u, p),
        (None, None) => Auth::Anonymous,
        _ => fail(format!("--user and --pass go together\n{USAGE}"), 2),
    };
    // Read the key first: a bad key fails before anything touches the registry.
    let key = Zeroizing::new(std::fs::read(&key).unwrap_or_else(|e| fail(format!("{key}: {e}"), 1)));
    let signer = PrivateKeySigner::new_with_raw(
        key,
        Zeroizing::new(password.into_bytes()),
        &SigningScheme::ECDSA_P256_SHA256_ASN1,
    )
    .unwrap_or_else(|e| fail(e, 1));

    let protocol = if http { ClientProtocol::Http } else { ClientProtocol::Https };
    let config = ClientConfig { protocol, ..Default::default() };
    let mut client = ClientBuilder::default().with_oci_client_config(config).build().unwrap_or_else(|e| fail(e, 1));
    let (sig_ref, digest) = client.triangulate(&image, &auth).await.unwrap_or_else(|e| fail(e, 1));
    let mut layer = SignatureLayer::new_unsigned(&image, &digest).unwrap_or_else(|e| fail(e, 1));
    signer.add_constraint(&mut layer).unwrap_or_else(|e| fail(e, 1));
    client.push_signature(None, &auth, &sig_ref, vec![layer]).await.unwrap_or_else(|e| fail(e, 1));
    println!("{sig_ref}");
}
