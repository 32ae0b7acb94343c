//! A person's tokens on a tool's requests (docs/authorization.md): the host
//! attaches `Authorization: Bearer …` to each request whose host one of
//! the tool's `[[authorization]]` entries names, after the guest built the
//! request and the policy passed it, and takes the token out of whatever
//! those hosts answer (a backend that reflects request headers would hand
//! it to the tool). The tool never holds it: not through `secrets`, not
//! through its own request (a header it sets there is replaced), not
//! through an answer; other hosts never get it (every request is matched
//! on its own, a redirect included).

use super::AllowedHost;
use hyper::body::{Body, Bytes, Frame};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// One person's token for one `[[authorization]]` entry: the hosts it goes
/// to and the header it makes.
#[derive(Clone)]
pub struct PersonToken {
    pub(super) hosts: Vec<AllowedHost>,
    /// The only hosts it may go to, when its provider names them
    /// (`apiHosts`): a tool's declaration alone cannot send it elsewhere.
    pub(super) bound: Vec<AllowedHost>,
    header: http::HeaderValue,
    /// The token's bytes and the forms an answer may write it in (JSON's
    /// `\/`, percent-encoded), each taken out of what its hosts answer.
    raw: Arc<[Vec<u8>]>,
    /// The token's SHA-256: pooled connections that carried it go to no
    /// other token's requests.
    credential: [u8; 32],
}

impl std::fmt::Debug for PersonToken {
    /// Never the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersonToken").field("hosts", &self.hosts).finish_non_exhaustive()
    }
}

impl PersonToken {
    /// A token for requests to `hosts`; `None` when it cannot be a header
    /// value (a provider answered a token with control characters: it is
    /// never sent, and the call is refused like any request that could not
    /// be made).
    pub(super) fn new(hosts: Vec<AllowedHost>, bound: Vec<AllowedHost>, token: &str) -> Option<PersonToken> {
        let mut header = http::HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
        // Kept out of hyper's debug output and HPACK tables.
        header.set_sensitive(true);
        let credential = sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(token)).into();
        (!token.is_empty()).then(|| PersonToken { hosts, bound, header, raw: written_forms(token).into(), credential })
    }

    /// The token's digest: what keeps the connections that carried it apart.
    pub(super) fn credential(&self) -> [u8; 32] {
        self.credential
    }

    /// Puts the token on `request`, in place of any `Authorization` the
    /// tool set.
    pub(super) fn attach<B>(&self, request: &mut http::Request<B>) {
        let headers = request.headers_mut();
        headers.remove(http::header::AUTHORIZATION);
        headers.insert(http::header::AUTHORIZATION, self.header.clone());
        // An answer the scrubbing can read whole: not compressed (a
        // reflected token would pass compressed), not in pieces (each
        // shorter than the token).
        headers.insert(http::header::ACCEPT_ENCODING, http::HeaderValue::from_static("identity"));
        for name in [http::header::RANGE, http::header::IF_RANGE, http::header::TE] {
            headers.remove(name);
        }
    }

    /// `response` with the token taken out of its headers and body: each
    /// occurrence replaced by as many `*` (the body keeps its length, so
    /// its `Content-Length` still holds).
    pub(super) fn scrub<B>(&self, response: http::Response<B>) -> http::Response<Scrubbed<B>> {
        let (mut parts, body) = response.into_parts();
        // Compressed or partial despite the request: unreadable to the
        // scrubbing, so not given to the tool at all.
        let encoded = parts
            .headers
            .get(http::header::CONTENT_ENCODING)
            .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
        if encoded || parts.status == http::StatusCode::PARTIAL_CONTENT {
            parts.status = http::StatusCode::BAD_GATEWAY;
            parts.headers.clear();
            parts.headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from_static("0"));
            let body = Scrubbed { inner: body, token: self.raw.clone(), held: Vec::new(), done: true, withheld: true };
            return http::Response::from_parts(parts, body);
        }
        for value in parts.headers.values_mut() {
            if let Some(scrubbed) = scrubbed(value.as_bytes(), &self.raw) {
                // `*` keeps a valid header value valid.
                if let Ok(clean) = http::HeaderValue::from_bytes(&scrubbed) {
                    *value = clean;
                }
            }
        }
        http::Response::from_parts(
            parts,
            Scrubbed { inner: body, token: self.raw.clone(), held: Vec::new(), done: false, withheld: false },
        )
    }
}

/// `token` and the other forms an answer may write it in: JSON's escaped
/// `/` (`\/`), and percent-encoded (upper- and lower-case hex) when it has
/// characters a URL escapes.
fn written_forms(token: &str) -> Vec<Vec<u8>> {
    let mut forms = vec![token.as_bytes().to_vec(), token.replace('/', "\\/").into_bytes()];
    let hexes: [fn(u8) -> String; 2] = [|b| format!("%{b:02X}"), |b| format!("%{b:02x}")];
    for hex in hexes {
        let encoded: String = token
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { (b as char).to_string() } else { hex(b) })
            .collect();
        forms.push(encoded.into_bytes());
    }
    forms.sort();
    forms.dedup();
    forms
}

/// `text` with every occurrence of any of `forms` replaced by `*`s, or
/// `None` when it has none.
fn scrubbed(text: &[u8], forms: &[Vec<u8>]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    for token in forms {
        let mut at = 0;
        loop {
            let current = out.as_deref().unwrap_or(text);
            let Some(found) = find(&current[at..], token) else { break };
            let out = out.get_or_insert_with(|| text.to_vec());
            let start = at + found;
            out[start..start + token.len()].fill(b'*');
            at = start + token.len();
        }
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// A response body with a token taken out as it streams: a match split
/// across frames is caught by holding back, at the end of each frame, the
/// longest tail that could begin one (fewer bytes than the token).
pub struct Scrubbed<B> {
    inner: B,
    token: Arc<[Vec<u8>]>,
    held: Vec<u8>,
    done: bool,
    /// The answer is not given to the tool (`scrub`): no body at all.
    withheld: bool,
}

impl<B: Body<Data = Bytes> + Unpin> Body for Scrubbed<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(
                    (!this.held.is_empty()).then(|| Ok(Frame::data(Bytes::from(std::mem::take(&mut this.held))))),
                );
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => this.done = true,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let mut text = std::mem::take(&mut this.held);
                        text.extend_from_slice(&data);
                        if let Some(clean) = scrubbed(&text, &this.token) {
                            text = clean;
                        }
                        let keep = partial_match(&text, &this.token);
                        this.held = text.split_off(text.len() - keep);
                        if !text.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(text)))));
                        }
                    }
                    // Trailers: their values scrubbed like headers'.
                    Err(frame) => {
                        let frame = match frame.into_trailers() {
                            Ok(mut trailers) => {
                                for value in trailers.values_mut() {
                                    if let Some(clean) = scrubbed(value.as_bytes(), &this.token)
                                        .and_then(|s| http::HeaderValue::from_bytes(&s).ok())
                                    {
                                        *value = clean;
                                    }
                                }
                                Frame::trailers(trailers)
                            }
                            Err(other) => other,
                        };
                        return Poll::Ready(Some(Ok(frame)));
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.held.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        if self.withheld {
            return hyper::body::SizeHint::with_exact(0);
        }
        // The same length as what came in.
        let mut hint = self.inner.size_hint();
        let held = self.held.len() as u64;
        hint.set_lower(hint.lower().saturating_add(held));
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper.saturating_add(held));
        }
        hint
    }
}

/// The length of the longest tail of `text` that is a start of `token`
/// (shorter than the token: a whole one was replaced already).
fn partial_match(text: &[u8], forms: &[Vec<u8>]) -> usize {
    let of = |token: &[u8]| {
        let longest = token.len().saturating_sub(1).min(text.len());
        (1..=longest).rev().find(|&n| text[text.len() - n..] == token[..n]).unwrap_or(0)
    };
    forms.iter().map(|token| of(token)).max().unwrap_or(0)
}

/// The scrubbing of a response streamed in `frames`, without a runtime:
/// for the fuzzers (`fuzz/`), not an API.
#[doc(hidden)]
pub mod fuzzing {
    use super::*;

    /// The body `frames` make, with `token` taken out as the runtime takes
    /// it out while they stream (`None` if `token` cannot be a header value).
    pub fn scrub_frames(frames: &[&[u8]], token: &str) -> Option<Vec<u8>> {
        let token = PersonToken::new(Vec::new(), Vec::new(), token)?;
        let body = Frames(frames.iter().map(|f| Bytes::copy_from_slice(f)).collect());
        let mut body = std::pin::pin!(token.scrub(http::Response::new(body)).into_body());
        let mut context = Context::from_waker(std::task::Waker::noop());
        let mut out = Vec::new();
        while let Poll::Ready(Some(Ok(frame))) = body.as_mut().poll_frame(&mut context) {
            if let Ok(data) = frame.into_data() {
                out.extend_from_slice(&data);
            }
        }
        Some(out)
    }

    /// A body of the given frames, in order (the unit tests' too).
    pub(super) struct Frames(pub(super) std::collections::VecDeque<Bytes>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(|data| Ok(Frame::data(data))))
        }
    }

    /// The same, in one piece.
    pub fn scrub_whole(text: &[u8], token: &str) -> Vec<u8> {
        scrubbed(text, &written_forms(token)).unwrap_or_else(|| text.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn token() -> PersonToken {
        PersonToken::new(Vec::new(), Vec::new(), "tok_SECRET_123").unwrap()
    }

    use super::fuzzing::Frames;

    #[tokio::test]
    async fn an_answer_is_asked_for_whole_and_one_that_is_not_is_withheld() {
        let mut request = http::Request::get("http://h/")
            .header("accept-encoding", "gzip")
            .header("range", "bytes=0-3")
            .header("if-range", "x")
            .body(())
            .unwrap();
        token().attach(&mut request);
        assert_eq!(request.headers()["accept-encoding"], "identity");
        assert!(request.headers().get("range").is_none() && request.headers().get("if-range").is_none());
        for response in [
            http::Response::builder().header("content-encoding", "gzip").body(Frames(["tok_SECRET_123".into()].into())),
            http::Response::builder().status(206).body(Frames(["tok_SECRET_123".into()].into())),
        ] {
            let scrubbed = token().scrub(response.unwrap());
            assert_eq!(scrubbed.status(), 502);
            assert!(scrubbed.headers().get("content-encoding").is_none());
            let body = scrubbed.into_body().collect().await.unwrap().to_bytes();
            assert!(body.is_empty());
        }
    }

    #[test]
    fn the_tokens_escaped_and_percent_encoded_forms_are_taken_out_too() {
        let token = "ab/c+d=";
        for written in ["ab\\/c+d=", "ab%2Fc%2Bd%3D", "ab%2fc%2bd%3d", "ab/c+d="] {
            let text = format!("{{\"echo\": \"{written}\"}}");
            let scrubbed = fuzzing::scrub_whole(text.as_bytes(), token);
            assert!(
                !String::from_utf8_lossy(&scrubbed).contains(written),
                "{written}: {}",
                String::from_utf8_lossy(&scrubbed)
            );
            assert_eq!(scrubbed.len(), text.len());
        }
    }

    async fn collect(frames: Vec<String>, token: &PersonToken) -> String {
        let body = Frames(frames.into_iter().map(Bytes::from).collect());
        let response = token.scrub(http::Response::new(body));
        let body = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[test]
    fn a_token_split_across_frames_is_taken_out_and_the_length_kept() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let t = token();
            let whole = collect(vec!["{\"authorization\": \"Bearer tok_SECRET_123\"}".into()], &t).await;
            assert_eq!(whole, "{\"authorization\": \"Bearer **************\"}");
            for split in 1.."tok_SECRET_123".len() {
                let (a, b) = "tok_SECRET_123".split_at(split);
                let out = collect(vec![format!("x{a}"), format!("{b}y tok_"), "SECRET_123".into()], &t).await;
                assert_eq!(out, "x**************y **************", "split at {split}");
            }
            // Near misses pass through whole.
            let near = vec!["tok_SECRET_12".into(), String::new(), "4 tok_".into()];
            assert_eq!(collect(near, &t).await, "tok_SECRET_124 tok_");
        });
    }

    proptest::proptest! {
        /// However a response is cut into frames, what the tool reads is
        /// the whole response scrubbed at once: its length kept, no
        /// occurrence of the token left.
        #[test]
        fn any_framing_scrubs_as_the_whole_does(
            token in "[A-Za-z0-9._~+/-]{1,12}",
            pieces in proptest::collection::vec(proptest::collection::vec(
                proptest::prop_oneof![proptest::num::u8::ANY, proptest::sample::select(b"ab-._~+/xyz".to_vec())], 0..24), 0..12),
            sprinkled in proptest::collection::vec(0usize..12, 0..4),
        ) {
            // Copies of the token cut across the frames.
            let mut frames = pieces;
            for at in sprinkled {
                if let Some(frame) = frames.get_mut(at) {
                    frame.extend_from_slice(token.as_bytes());
                }
            }
            let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
            let streamed = fuzzing::scrub_frames(&refs, &token).unwrap();
            let whole = frames.concat();
            proptest::prop_assert_eq!(streamed.len(), whole.len());
            proptest::prop_assert_eq!(&streamed, &fuzzing::scrub_whole(&whole, &token));
            proptest::prop_assert!(!streamed.windows(token.len()).any(|w| w == token.as_bytes()));
        }
    }

    #[test]
    fn a_header_the_tool_set_is_replaced_and_one_reflected_is_taken_out() {
        let t = token();
        let mut request = http::Request::builder().header("authorization", "Bearer the-tools-own").body(()).unwrap();
        t.attach(&mut request);
        let values: Vec<_> = request.headers().get_all("authorization").iter().collect();
        assert_eq!(values, ["Bearer tok_SECRET_123"]);
        assert!(values[0].is_sensitive());
        let response = http::Response::builder().header("x-echo", "Bearer tok_SECRET_123").body(()).unwrap();
        let scrubbed = t.scrub(response);
        assert_eq!(scrubbed.headers()["x-echo"], "Bearer **************");
        assert!(PersonToken::new(Vec::new(), Vec::new(), "bad\ntoken").is_none());
        assert!(PersonToken::new(Vec::new(), Vec::new(), "").is_none());
        assert!(!format!("{t:?}").contains("SECRET"));
    }
}
