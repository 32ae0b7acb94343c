//! CHEQ (draft-rosenberg-cheq): a consequential call runs only after the
//! human it acts for approves a signed description of it.
//!
//! This module holds the parts every CHEQ flow needs, independent of HTTP:
//!
//! - [`ConfirmationPolicy`]: when a tool's calls need confirmation, declared
//!   in its `plinth.toml` (`required = true`, or a CEL condition `when` over
//!   its inputs), checked at pack and deploy time and evaluated per call;
//! - [`SigningKey`]: the server's Ed25519 key, kept in the data dir and
//!   published as a JWKS;
//! - [`sign`], [`countersign`] and [`verify`]: JWS (EdDSA) in the general
//!   JSON serialization over the RFC 8785 (JCS) form of a CHEQ object, so the
//!   resource server's and the confirmation server's signatures sit side by
//!   side over the same bytes.
//!
//! The transactions (a call waiting for its end user, the decision, the
//! confirmed run) are the core's (`host::confirmations`); each front door
//! answers a waiting call in its protocol's way (`docs/cheq.md`). A call that
//! needs confirmation never runs unconfirmed.

pub mod budget;
mod jws;

pub use jws::{
    CONFIRMATION_KEY_FILE, KEY_FILE, MAX_SIGNATURES, Signed, SigningKey, VerifyError, canonical, countersign,
    from_wire, jwks, sign, verify,
};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// When a tool's calls need the end user's confirmation (`[confirmation]`
/// in `plinth.toml`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConfirmationPolicy {
    /// Every call needs confirmation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// A call needs confirmation when this CEL expression over the inputs
    /// (by parameter name; an absent optional input is `null`) is true —
    /// or cannot be evaluated: a condition that fails, fails closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
}

impl ConfirmationPolicy {
    /// Whether the tool declared no confirmation at all.
    pub fn is_empty(&self) -> bool {
        !self.required && self.when.is_none()
    }

    /// Checks the policy against the tool's input names: the condition
    /// compiles, stays within the budget (see [`budget`]) and names only
    /// inputs.
    pub fn check(&self, inputs: &[&str]) -> Result<(), ConditionError> {
        let Some(when) = &self.when else { return Ok(()) };
        if self.required {
            return Err(ConditionError::Both);
        }
        let (_, variables) = compile(when)?;
        let unknown: Vec<&str> = variables.iter().map(String::as_str).filter(|v| !inputs.contains(v)).collect();
        if !unknown.is_empty() {
            return Err(ConditionError::UnknownInput(format!(
                "the `when` condition names {}, which {} not an input; the inputs are: {}",
                unknown.join(", "),
                if unknown.len() == 1 { "is" } else { "are" },
                inputs.join(", ")
            )));
        }
        Ok(())
    }

    /// The policy ready to evaluate, its condition compiled once (when a
    /// version is loaded). A condition that no longer compiles or no longer
    /// fits the budget — it was checked at deploy, but the budget may have
    /// been tightened since — asks for confirmation on every call.
    pub fn compile(&self) -> Confirmation {
        match &self.when {
            _ if self.required => Confirmation::Always,
            None => Confirmation::Never,
            Some(when) => match compile(when) {
                Ok((program, variables)) => Confirmation::When { expression: when.clone(), program, variables },
                Err(why) => {
                    tracing::warn!(condition = when, %why, "a stored confirmation condition does not compile");
                    Confirmation::Always
                }
            },
        }
    }
}

/// Why a `[confirmation]` policy was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    /// `required = true` and a `when` condition together.
    #[error("give `required = true` or a `when` condition, not both")]
    Both,
    /// The condition does not parse.
    #[error("the `when` condition is not valid CEL: {0}")]
    NotCel(String),
    /// The condition names something that is not an input.
    #[error("{0}")]
    UnknownInput(String),
    /// The condition exceeds a limit of the budget.
    #[error("the `when` condition could cost more than a condition may: {0}")]
    TooCostly(Limit),
}

/// The limit of the condition budget a condition exceeded, with what it
/// measured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Limit {
    /// Too long.
    #[error("it is {0} characters long; at most {max} are allowed (limit `max_chars`)", max = budget::MAX_CHARS)]
    Chars(usize),
    /// Brackets or parentheses nested too deep.
    #[error("it nests brackets or parentheses {0} deep; at most {max} are allowed (limit `max_nesting`)", max = budget::MAX_NESTING)]
    Nesting(usize),
    /// Too many nodes once compiled.
    #[error("it compiles to more than {max} nodes, macros expanded (limit `max_nodes`)", max = budget::MAX_NODES)]
    Nodes,
    /// A list or map literal with too many entries.
    #[error("a list or map literal has {0} entries; at most {max} are allowed (limit `max_literal_entries`)", max = budget::MAX_LITERAL_ENTRIES)]
    LiteralEntries(usize),
    /// A string or bytes literal too long.
    #[error("a string literal is {0} characters long; at most {max} are allowed (limit `max_string_literal_chars`)", max = budget::MAX_STRING_LITERAL_CHARS)]
    StringLiteral(usize),
    /// Comprehension macros nested too deep.
    #[error("it nests comprehension macros (all, exists, exists_one, map, filter) {0} deep; at most {max} are allowed (limit `max_comprehension_depth`)", max = budget::MAX_COMPREHENSION_DEPTH)]
    ComprehensionDepth(usize),
    /// A `matches` pattern whose compiled form is too large.
    #[error("its `matches` pattern compiles to more than {max} bytes (limit `max_regex_bytes`)", max = budget::MAX_REGEX_BYTES)]
    Regex,
    /// A function or operator whose cost is not bounded (or not known).
    #[error("it calls `{0}`, which a condition may not use; it may use {allowed} (limit `allowed_functions`)", allowed = budget::allowed_functions())]
    Function(String),
    /// Within every other limit, but its estimated worst case is too high.
    #[error("its worst case is estimated at {0} steps over inputs of {input} bytes; at most {max} are allowed (limit `max_cost`)", input = budget::MAX_INPUT_BYTES, max = budget::MAX_COST)]
    Cost(u64),
}

impl Limit {
    /// The limit's name, as the error answer carries it.
    pub fn name(&self) -> &'static str {
        match self {
            Limit::Chars(_) => "max_chars",
            Limit::Nesting(_) => "max_nesting",
            Limit::Nodes => "max_nodes",
            Limit::LiteralEntries(_) => "max_literal_entries",
            Limit::StringLiteral(_) => "max_string_literal_chars",
            Limit::ComprehensionDepth(_) => "max_comprehension_depth",
            Limit::Regex => "max_regex_bytes",
            Limit::Function(_) => "allowed_functions",
            Limit::Cost(_) => "max_cost",
        }
    }
}

/// A version's [`ConfirmationPolicy`], compiled.
#[derive(Debug)]
pub enum Confirmation {
    /// No call needs confirmation.
    Never,
    /// Every call does.
    Always,
    /// A call does when the condition holds for its inputs.
    When {
        /// The condition as written, for the logs.
        expression: String,
        /// The condition, compiled.
        program: cel::Program,
        /// The inputs it reads.
        variables: Vec<String>,
    },
}

impl Confirmation {
    /// Whether a call with `inputs` (the input record as JSON, by parameter
    /// name) needs confirmation. Bounded by the condition budget, but not
    /// free: call it where tools run, not on the threads serving HTTP.
    pub fn applies_to(&self, inputs: &Map<String, Value>) -> bool {
        let (expression, program, variables) = match self {
            Confirmation::Never => return false,
            Confirmation::Always => return true,
            Confirmation::When { expression, program, variables } => (expression, program, variables),
        };
        match evaluate(program, variables, inputs) {
            Ok(holds) => holds,
            Err(why) => {
                tracing::warn!(condition = expression, why, "a confirmation condition failed; asking for confirmation");
                true
            }
        }
    }
}

/// Parses `expression` and checks it against the budget. The parser is a
/// third party's, fed a publisher's text: a panic in it is a refusal, not a
/// crash.
/// Returns the program and the inputs it reads.
fn compile(expression: &str) -> Result<(cel::Program, Vec<String>), ConditionError> {
    budget::check_text(expression).map_err(ConditionError::TooCostly)?;
    // Rendering the parser's error can panic too (past column 65 535), so
    // it happens inside the guard.
    let parsed = std::panic::catch_unwind(|| cel::Program::compile(expression).map_err(|e| e.to_string()))
        .map_err(|_| ConditionError::NotCel("the parser could not read it".into()))?;
    let program = parsed.map_err(ConditionError::NotCel)?;
    let checked = budget::check_program(&program).map_err(ConditionError::TooCostly)?;
    Ok((program, checked.inputs))
}

fn evaluate(program: &cel::Program, variables: &[String], inputs: &Map<String, Value>) -> Result<bool, String> {
    let mut context = cel::Context::default();
    let mut read = 0usize;
    for name in variables {
        let value = inputs.get(name).cloned().unwrap_or(Value::Null);
        read = read.saturating_add(serde_json::to_string(&value).map_or(usize::MAX, |json| json.len()));
        if read > budget::MAX_INPUT_BYTES {
            return Err(format!(
                "the inputs it reads are larger than {} bytes, more than a condition may read",
                budget::MAX_INPUT_BYTES
            ));
        }
        context.add_variable(name.as_str(), value).map_err(|e| e.to_string())?;
    }
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| program.execute(&context)))
        .map_err(|_| "the evaluator panicked".to_string())?;
    match outcome {
        Ok(cel::Value::Bool(holds)) => Ok(holds),
        Ok(other) => Err(format!("the condition gave {other:?}, not a boolean")),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether `c` would be invisible on a confirmation page, or would change
/// how the text around it reads: format characters (Unicode category Cf:
/// bidirectional overrides, embeddings and isolates, zero-width spaces and
/// joiners, the BOM, the Arabic letter mark, tags), controls, line and
/// paragraph separators, spaces other than U+0020, variation selectors,
/// fillers that draw nothing, and unassigned, private-use or surrogate code
/// points. An end user must see exactly what the tool gets, so each is shown
/// as a visible marker instead (see [`marked`]).
pub fn is_hidden(c: char) -> bool {
    use unicode_general_category::{GeneralCategory as G, get_general_category};
    matches!(
        get_general_category(c),
        G::Format
            | G::Control
            | G::LineSeparator
            | G::ParagraphSeparator
            | G::Unassigned
            | G::PrivateUse
            | G::Surrogate
    ) || (c.is_whitespace() && c != ' ')
        || matches!(
            c,
            '\u{034F}'
                | '\u{115F}'
                | '\u{1160}'
                | '\u{17B4}'
                | '\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{2800}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FFA0}'
                | '\u{E0100}'..='\u{E01EF}'
        )
}

/// Whether `c` is a combining mark that draws over or around the character
/// before it (Unicode categories Mn and Me).
pub fn is_combining_mark(c: char) -> bool {
    use unicode_general_category::{GeneralCategory as G, get_general_category};
    matches!(get_general_category(c), G::NonspacingMark | G::EnclosingMark)
}

/// Whether the combining mark `mark`, drawn over `base` (the character
/// shown before it; `None` at the start of a value), would make text read
/// as other text: a stroke, slash or circle over a digit, a Latin letter,
/// punctuation or a symbol (U+0336 over the digits of an IBAN), any
/// enclosing mark, and a mark with nothing to combine with. Marks on the
/// letters of scripts written with them (Devanagari, Arabic, Hebrew, Thai…)
/// are how those scripts are written, and stay as they are.
fn mark_misleads(mark: char, base: Option<char>) -> bool {
    use unicode_general_category::{GeneralCategory as G, get_general_category};
    if get_general_category(mark) == G::EnclosingMark {
        return true;
    }
    let Some(base) = base else { return true };
    // Basic Latin up to Latin Extended-B: precomposed forms cover the
    // languages written with it.
    base < '\u{0250}'
        || matches!(
            get_general_category(base),
            G::DecimalNumber
                | G::LetterNumber
                | G::OtherNumber
                | G::ConnectorPunctuation
                | G::DashPunctuation
                | G::OpenPunctuation
                | G::ClosePunctuation
                | G::InitialPunctuation
                | G::FinalPunctuation
                | G::OtherPunctuation
                | G::MathSymbol
                | G::CurrencySymbol
                | G::ModifierSymbol
                | G::OtherSymbol
                | G::SpaceSeparator
        )
}

/// The marker a hidden character is shown as: `<U+202E>`.
pub fn marker(c: char) -> String {
    format!("<U+{:04X}>", u32::from(c))
}

/// A piece of text as an end user must see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown<'a> {
    /// Text shown as it is.
    Text(&'a str),
    /// A character shown as its [`marker`].
    Hidden(char),
}

/// `text` split into what can be shown as it is and the characters that
/// must be shown as markers: the [`is_hidden`] ones, and combining marks
/// that would draw over what is shown before them to make it read as
/// something else (a strike through a digit; see [`is_combining_mark`]).
pub fn shown(text: &str) -> Vec<Shown<'_>> {
    let mut pieces = Vec::new();
    let mut start = 0;
    // What a combining mark would draw over: the last character shown as
    // itself that is not a mark, or the `>` of the last marker.
    let mut base = None;
    for (at, c) in text.char_indices() {
        let combining = is_combining_mark(c);
        if is_hidden(c) || (combining && mark_misleads(c, base)) {
            if start < at {
                pieces.push(Shown::Text(&text[start..at]));
            }
            pieces.push(Shown::Hidden(c));
            start = at + c.len_utf8();
            base = Some('>');
        } else if !combining {
            base = Some(c);
        }
    }
    if start < text.len() {
        pieces.push(Shown::Text(&text[start..]));
    }
    pieces
}

/// Whether `text` has characters [`shown`] as markers.
pub fn has_hidden(text: &str) -> bool {
    shown(text).iter().any(|piece| matches!(piece, Shown::Hidden(_)))
}

/// `text` with every hidden character (and misleading combining mark)
/// replaced by its marker, or `None` when it has none.
pub fn marked(text: &str) -> Option<String> {
    let pieces = shown(text);
    if !pieces.iter().any(|piece| matches!(piece, Shown::Hidden(_))) {
        return None;
    }
    Some(
        pieces
            .into_iter()
            .map(|piece| match piece {
                Shown::Text(t) => t.to_string(),
                Shown::Hidden(c) => marker(c),
            })
            .collect(),
    )
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests;
