//! The open `subscriptions/listen` streams, bounded server-wide, per
//! tenant and per key.

use super::rpc_error;
use rmcp::ErrorData;
use rmcp::model::ErrorCode;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// `subscriptions/listen` streams open at once, server-wide.
const MAX_LISTENERS: usize = 1_024;
/// Of those, streams of one tenant: a quarter, so that one tenant's
/// consumers cannot take every slot.
const MAX_LISTENERS_PER_TENANT: usize = MAX_LISTENERS / 4;
/// Streams of one key (or of one tenant's clients without a key): a
/// client needs one; a few allow for restarts and several windows.
const MAX_LISTENERS_PER_KEY: usize = 16;
/// The open `subscriptions/listen` streams, counted server-wide, by tenant
/// and by key, each under its cap.
#[derive(Default)]
pub(super) struct Listeners {
    /// Open streams by `tenant` and by `tenant/key id` (`tenant/` for
    /// clients without a key).
    open: std::sync::Mutex<HashMap<String, usize>>,
}

/// One open stream's place in [`Listeners`], given back when it ends.
pub(super) struct ListenerSlot {
    listeners: Arc<Listeners>,
    counted: [String; 3],
}

impl Listeners {
    const SERVER: &'static str = "";

    /// A place for a stream of `tenant`'s `key_id`, or which cap is full.
    pub(super) fn take(self: &Arc<Self>, tenant: &str, key_id: &str) -> Result<ListenerSlot, ErrorData> {
        let counted = [Self::SERVER.to_string(), tenant.to_string(), format!("{tenant}/{key_id}")];
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let caps = [
            (MAX_LISTENERS, "server", "too many clients are listening; list the tools instead"),
            (
                MAX_LISTENERS_PER_TENANT,
                "tenant",
                "too many of this tenant's clients are listening; list the tools instead",
            ),
            (
                MAX_LISTENERS_PER_KEY,
                "key",
                "this key has too many listening streams open; close one, or list the tools instead",
            ),
        ];
        for (name, (cap, scope, message)) in counted.iter().zip(caps) {
            if open.get(name).copied().unwrap_or(0) >= cap {
                let data =
                    Map::from_iter([("scope".to_string(), Value::from(scope)), ("limit".to_string(), cap.into())]);
                return Err(rpc_error(ErrorCode::INTERNAL_ERROR.0, message, "too_many_listeners", data));
            }
        }
        for name in &counted {
            *open.entry(name.clone()).or_default() += 1;
        }
        Ok(ListenerSlot { listeners: self.clone(), counted })
    }
}

impl Drop for ListenerSlot {
    fn drop(&mut self) {
        let mut open = self.listeners.open.lock().unwrap_or_else(|p| p.into_inner());
        for name in &self.counted {
            if let Some(n) = open.get_mut(name) {
                *n -= 1;
                if *n == 0 {
                    open.remove(name);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_streams_are_capped_per_key_and_per_tenant_and_given_back() {
        let listeners = Arc::new(Listeners::default());
        let refusal = |e: ErrorData| e.data.unwrap()["scope"].as_str().unwrap().to_string();
        // One key: 16 streams, then refused; another key of the tenant goes on.
        let mine: Vec<_> = (0..MAX_LISTENERS_PER_KEY).map(|_| listeners.take("acme", "k1").unwrap()).collect();
        assert_eq!(refusal(listeners.take("acme", "k1").err().unwrap()), "key");
        // The tenant's quarter of the server, then refused for every key of it,
        // while another tenant still listens.
        let mut rest = Vec::new();
        for i in 0.. {
            match listeners.take("acme", &format!("other{}", i / MAX_LISTENERS_PER_KEY)) {
                Ok(slot) => rest.push(slot),
                Err(e) => {
                    assert_eq!(refusal(e), "tenant");
                    break;
                }
            }
        }
        assert_eq!(mine.len() + rest.len(), MAX_LISTENERS_PER_TENANT);
        let theirs = listeners.take("globex", "k1").unwrap();
        // Streams that end give their places back.
        drop(mine);
        let again = listeners.take("acme", "k1").unwrap();
        drop((rest, theirs, again));
        assert!(listeners.open.lock().unwrap().is_empty(), "every count is given back");
    }
}
