//! `my_inbox`: a tool that acts for a person. It lists the messages of
//! the person the agent acts for, at their own account of the inbox API
//! (`tests/fake-inbox` is the reference implementation):
//!
//! - `GET {inbox-url}/v1/messages[?unread=true]` →
//!   `{"messages": [{"id", "from", "subject", "received_at", "unread", "snippet"}]}`
//!
//! The request carries no credentials of the tool's: `plinth.toml`
//! declares an `[[authorization]]` for the inbox's host, and Plinth adds
//! the person's own `Authorization: Bearer …` after the request leaves the
//! sandbox (asking the person to connect their account first when they
//! have not). The token never enters the tool.

mod inbox;

use plinth_sdk::{config, http};

plinth_sdk::tool!("my-inbox");

struct MyInbox;

impl Guest for MyInbox {
    fn call(input: Input) -> Result<Output, ToolError> {
        let base = config::require("inbox-url")?;
        // No Authorization header here: Plinth attaches the person's.
        let response = http::get(&inbox::messages_url(&base, input.unread_only.unwrap_or(false)))?;
        let listed = inbox::messages(response.status, &response.body)?;
        let messages = listed
            .into_iter()
            .map(|m| Message {
                id: m.id,
                sender: m.from,
                subject: m.subject,
                received_at: m.received_at,
                unread: m.unread,
                snippet: m.snippet,
            })
            .collect();
        Ok(Output { messages })
    }
}

export!(MyInbox);
