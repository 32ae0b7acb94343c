//! Redaction: secret values (and a call's private inputs) replaced wherever
//! a tool's text leaves the sandbox.

/// Replaces secret values with `[redacted]` wherever a tool's text leaves
/// the sandbox: log lines, errors, outputs.
#[derive(Debug, Clone, Default)]
pub struct Redactor(Vec<String>);

impl Redactor {
    /// Redacts these values (empty ones are ignored).
    pub fn new(values: impl IntoIterator<Item = String>) -> Self {
        let mut values: Vec<String> = values.into_iter().filter(|v| !v.is_empty()).collect();
        // Longest first, so a secret that contains another is redacted whole.
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        Redactor(values)
    }

    /// The length of the longest secret value (0 when there is none).
    pub(super) fn longest(&self) -> usize {
        self.0.first().map_or(0, String::len)
    }

    /// Where to cut `text` to keep at most `limit` bytes: at a character
    /// boundary, and never inside a secret value, so that redacting the kept
    /// part cannot leave a secret's beginning behind. `text` must extend at
    /// least [`Redactor::longest`] bytes past `limit` where it is longer.
    pub(super) fn cut(&self, text: &str, limit: usize) -> usize {
        if text.len() <= limit {
            return text.len();
        }
        let mut cut = text.floor_char_boundary(limit);
        // Moving the cut back to a secret's start may land it inside another
        // one: repeat until no value straddles it.
        while let Some(start) = self
            .0
            .iter()
            .filter_map(|value| {
                let from = cut.saturating_sub(value.len() - 1);
                (from..cut).find(|&i| text.is_char_boundary(i) && text[i..].starts_with(value.as_str()))
            })
            .min()
        {
            cut = start;
        }
        cut
    }

    /// The text with every secret value replaced.
    pub fn text(&self, text: &str) -> String {
        self.0.iter().fold(text.to_string(), |acc, v| acc.replace(v.as_str(), "[redacted]"))
    }

    /// Redacts every string in a JSON value.
    pub fn json(&self, value: &mut serde_json::Value) {
        if self.0.is_empty() {
            return;
        }
        match value {
            serde_json::Value::String(s) => *s = self.text(s),
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| self.json(v)),
            serde_json::Value::Object(map) => map.values_mut().for_each(|v| self.json(v)),
            _ => {}
        }
    }
}
