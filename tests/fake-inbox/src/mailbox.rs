//! The people the inbox knows and their messages: a fixed few each, so
//! that a test can tell whose token reached the API by what it answered.

use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Mutex;

/// The people with a mailbox (the built-in provider signs in as one of
/// them). Anyone else a valid token names has an empty mailbox.
pub const USERS: [&str; 2] = ["alice", "bob"];

struct Message {
    id: &'static str,
    owner: &'static str,
    from: &'static str,
    subject: &'static str,
    received_at: &'static str,
    body: &'static str,
    /// Unread until someone marks it read.
    unread: bool,
}

/// Every message, newest first.
const MESSAGES: &[Message] = &[
    Message {
        id: "a-3",
        owner: "alice",
        from: "Sam Okafor <sam@example.com>",
        subject: "Lunch on Thursday?",
        received_at: "2026-12-01T11:45:00Z",
        body: "The new place on Elm Street opens at noon. Shall we try it on Thursday?",
        unread: true,
    },
    Message {
        id: "a-2",
        owner: "alice",
        from: "Dana Reyes <dana@example.org>",
        subject: "Quarterly planning: agenda",
        received_at: "2026-11-30T09:12:00Z",
        body: "Attached is the agenda for Monday. Please add your team's items by Friday.",
        unread: true,
    },
    Message {
        id: "b-2",
        owner: "bob",
        from: "Alice Martin <alice@example.com>",
        subject: "Draft contract for review",
        received_at: "2026-11-29T16:20:00Z",
        body: "Here is the draft. Section 4 is the one I am least sure about.",
        unread: true,
    },
    Message {
        id: "a-1",
        owner: "alice",
        from: "Fake Inbox <hello@fake-inbox.test>",
        subject: "Welcome to Fake Inbox",
        received_at: "2026-11-28T08:00:00Z",
        body: "Your inbox is ready. This is a stand-in service: nothing here is real mail.",
        unread: false,
    },
    Message {
        id: "b-1",
        owner: "bob",
        from: "Fake Inbox <hello@fake-inbox.test>",
        subject: "Welcome to Fake Inbox",
        received_at: "2026-11-28T08:00:00Z",
        body: "Your inbox is ready. This is a stand-in service: nothing here is real mail.",
        unread: false,
    },
];

/// The longest snippet of a body in a listing, in characters.
const SNIPPET_CHARS: usize = 40;

/// The mailboxes, with what has been read since the server started (at
/// most every message: the set is bounded by [`MESSAGES`]).
#[derive(Default)]
pub(crate) struct Mailbox {
    read: Mutex<HashSet<&'static str>>,
}

impl Mailbox {
    /// `user`'s messages (only those unread, if asked), newest first.
    pub(crate) fn list(&self, user: &str, unread_only: bool) -> Vec<Value> {
        MESSAGES
            .iter()
            .filter(|m| m.owner == user)
            .map(|m| self.summary(m))
            .filter(|m| !unread_only || m["unread"] == true)
            .collect()
    }

    /// `user`'s message `id` with its body; `None` when `user` has none by
    /// that id (another person's message included).
    pub(crate) fn get(&self, user: &str, id: &str) -> Option<Value> {
        let message = MESSAGES.iter().find(|m| m.owner == user && m.id == id)?;
        let mut full = self.summary(message);
        full["body"] = json!(message.body);
        Some(full)
    }

    /// Marks `user`'s message `id` read: the message, as [`Mailbox::get`].
    pub(crate) fn mark_read(&self, user: &str, id: &str) -> Option<Value> {
        let message = MESSAGES.iter().find(|m| m.owner == user && m.id == id)?;
        self.read.lock().unwrap_or_else(|p| p.into_inner()).insert(message.id);
        self.get(user, id)
    }

    fn summary(&self, m: &Message) -> Value {
        let read = self.read.lock().unwrap_or_else(|p| p.into_inner()).contains(m.id);
        let mut snippet: String = m.body.chars().take(SNIPPET_CHARS).collect();
        if snippet.len() < m.body.len() {
            snippet.push('…');
        }
        json!({
            "id": m.id,
            "from": m.from,
            "subject": m.subject,
            "received_at": m.received_at,
            "unread": m.unread && !read,
            "snippet": snippet,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_person_sees_their_own_messages_and_reading_one_changes_only_it() {
        let mailbox = Mailbox::default();
        let ids = |list: Vec<Value>| list.iter().map(|m| m["id"].as_str().unwrap().to_string()).collect::<Vec<_>>();
        assert_eq!(ids(mailbox.list("alice", false)), ["a-3", "a-2", "a-1"]);
        assert_eq!(ids(mailbox.list("bob", false)), ["b-2", "b-1"]);
        assert_eq!(ids(mailbox.list("carol", false)), Vec::<String>::new());
        assert_eq!(mailbox.get("alice", "b-2"), None);
        assert_eq!(mailbox.mark_read("alice", "b-2"), None);
        assert_eq!(mailbox.mark_read("alice", "a-3").unwrap()["unread"], false);
        assert_eq!(ids(mailbox.list("alice", true)), ["a-2"]);
        assert_eq!(ids(mailbox.list("bob", true)), ["b-2"]);
        assert_eq!(mailbox.get("alice", "a-2").unwrap()["body"].as_str().unwrap().len(), MESSAGES[1].body.len());
    }
}
