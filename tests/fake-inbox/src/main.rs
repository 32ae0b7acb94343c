//! `fake-inbox [ADDR] [flags]`: serves the stand-in inbox API (default
//! 127.0.0.1:8091), and with `--provider` its own OAuth authorization
//! server, for the quickstart. `fake-inbox --help` lists the flags.

use clap::Parser;
use std::time::Duration;

/// A stand-in for a per-person inbox API, and optionally the OAuth 2.1
/// authorization server that issues its tokens.
#[derive(Parser)]
#[command(name = "fake-inbox")]
struct Args {
    /// The address to listen on.
    #[arg(default_value = "127.0.0.1:8091", env = "FAKE_INBOX_ADDR")]
    addr: String,
    /// The URL clients reach the server at (its issuer, with --provider):
    /// http://ADDR when not given.
    #[arg(long, env = "FAKE_INBOX_PUBLIC_URL")]
    public_url: Option<String>,
    /// The audience (resource URL) access tokens must be for: the public
    /// URL when not given.
    #[arg(long, env = "FAKE_INBOX_AUDIENCE")]
    audience: Option<String>,
    /// Accepts the JWT access tokens of this issuer (found through its
    /// OpenID discovery document).
    #[arg(long, env = "FAKE_INBOX_ISSUER")]
    issuer: Option<String>,
    /// Also serves the built-in OAuth authorization server (its metadata at
    /// /.well-known/oauth-authorization-server) for one client.
    #[arg(long, env = "FAKE_INBOX_PROVIDER")]
    provider: bool,
    /// The built-in provider's client id.
    #[arg(long, default_value = "plinth", env = "FAKE_INBOX_CLIENT_ID")]
    client_id: String,
    /// The built-in provider's client secret.
    #[arg(long, default_value = "fake-inbox-secret", env = "FAKE_INBOX_CLIENT_SECRET")]
    client_secret: String,
    /// A redirect URI of the client (exact match); repeat for more.
    /// Required with --provider.
    #[arg(long = "redirect-uri", env = "FAKE_INBOX_REDIRECT_URI", value_delimiter = ',')]
    redirect_uris: Vec<String>,
    /// How long the built-in provider's access tokens live, in seconds.
    #[arg(long, default_value_t = 300, env = "FAKE_INBOX_ACCESS_TOKEN_TTL")]
    access_token_ttl: u64,
    /// How long its refresh tokens live, in seconds.
    #[arg(long, default_value_t = 86400, env = "FAKE_INBOX_REFRESH_TOKEN_TTL")]
    refresh_token_ttl: u64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(&args.addr).await?;
    let public_url = args.public_url.unwrap_or_else(|| format!("http://{}", args.addr));
    let provider = args.provider.then(|| fake_inbox::ProviderOptions {
        client_id: args.client_id,
        client_secret: args.client_secret,
        redirect_uris: args.redirect_uris,
        access_token_ttl: Duration::from_secs(args.access_token_ttl),
        refresh_token_ttl: Duration::from_secs(args.refresh_token_ttl),
    });
    let with_provider = provider.is_some();
    let options =
        fake_inbox::Options { public_url: public_url.clone(), audience: args.audience, issuer: args.issuer, provider };
    let inbox = fake_inbox::Inbox::new(options)?;
    println!("fake inbox listening on {public_url} (audience {})", inbox.audience());
    if with_provider {
        println!("its OAuth authorization server: {public_url}/.well-known/oauth-authorization-server");
    }
    fake_inbox::serve(listener, inbox).await?;
    Ok(())
}
