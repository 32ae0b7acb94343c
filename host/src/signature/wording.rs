//! A designer's words for a tool (docs/toolsets.md, "The designer's
//! words"): the description of the tool and of its parameters, as one
//! toolset serves them in place of the vendor's.
//!
//! Only natural language changes. [`Wording::apply`] replaces texts and
//! nothing else — names, types, constraints, private markings stay the
//! version's — so a reworded signature has the shape of the vendor's, and
//! every door's view of it ([`super::a2t`], [`super::schema`]) is built by
//! the same functions.

use super::{MAX_DESCRIPTION_CHARS, MAX_TOOL_DESCRIPTION_CHARS, Signature};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Characters of all the words of one toolset version together: about
/// 8,000 tokens, more than a model should be made to read about its tools,
/// and a bound on what a toolset version keeps in the store.
pub const MAX_WORDING_CHARS_PER_TOOLSET: usize = 32_000;

/// The designer's words for one tool of a toolset. Absent texts are the
/// vendor's.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Wording {
    /// The tool's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Inputs' descriptions, by the input's name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub input_descriptions: BTreeMap<String, String>,
    /// Outputs' descriptions, by the output's name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub output_descriptions: BTreeMap<String, String>,
    /// The tool version the words were checked against when the toolset
    /// version was written (set by the host, not the designer): a followed
    /// tool's later versions are compared with it ([`Wording::review`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words_for: Option<u32>,
}

/// Words refused for a tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct WordingError {
    /// The parameter the refusal is about, if one.
    pub parameter: Option<String>,
    /// Why, in words.
    pub message: String,
}

/// What a designer should look at again: the served version's parameters
/// the words were not written for, and words naming parameters it lacks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Review {
    /// Inputs the served version has, the version the words were written
    /// for did not, and the words do not cover (served with the vendor's
    /// text).
    pub new_inputs: Vec<String>,
    /// The same for outputs.
    pub new_outputs: Vec<String>,
    /// Worded inputs the served version does not have (shown, not served).
    pub stale_inputs: Vec<String>,
    /// The same for outputs.
    pub stale_outputs: Vec<String>,
}

impl Review {
    /// Whether a parameter is new to the words: the designer has words to
    /// write or to accept.
    pub fn has_new(&self) -> bool {
        !self.new_inputs.is_empty() || !self.new_outputs.is_empty()
    }
}

/// Checks one text: not blank, within `max` characters, no control
/// characters but newlines and tabs.
fn check_text(what: &str, parameter: Option<&str>, text: &str, max: usize) -> Result<usize, WordingError> {
    let refuse = |message: String| WordingError { parameter: parameter.map(str::to_string), message };
    let chars = text.chars().count();
    if text.trim().is_empty() {
        return Err(refuse(format!("{what} is empty: leave it out to serve the vendor's words")));
    }
    if chars > max {
        return Err(refuse(format!("{what} is {chars} characters; at most {max}")));
    }
    if text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(refuse(format!("{what} holds a control character")));
    }
    Ok(chars)
}

/// A name from a request, cut for an error message (it may be anything).
fn quoted(name: &str) -> String {
    let cut: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
    if cut.len() < name.len() { format!("{cut}…") } else { cut }
}

impl Wording {
    /// Whether there are no words: the vendor's are served.
    pub fn is_empty(&self) -> bool {
        self.description.is_none() && self.input_descriptions.is_empty() && self.output_descriptions.is_empty()
    }

    /// The words' characters.
    pub fn chars(&self) -> usize {
        let count = |s: &String| s.chars().count();
        self.description.iter().map(count).sum::<usize>()
            + self.input_descriptions.values().map(count).sum::<usize>()
            + self.output_descriptions.values().map(count).sum::<usize>()
    }

    /// Checks the words against the version they are for: every text
    /// within A2T's bounds, every parameter named one of the version's, no
    /// private input (the model is never shown one).
    pub fn check(&self, tool: &str, signature: &Signature) -> Result<(), WordingError> {
        if let Some(text) = &self.description {
            check_text(&format!("the description of `{tool}`"), None, text, MAX_TOOL_DESCRIPTION_CHARS)?;
        }
        for (name, text) in &self.input_descriptions {
            let refuse = |message: String| WordingError { parameter: Some(name.clone()), message };
            match signature.input(name) {
                None => {
                    return Err(refuse(format!(
                        "`{tool}` has no input `{}`: words describe only the version's own parameters",
                        quoted(name)
                    )));
                }
                Some(input) if input.private => {
                    return Err(refuse(format!(
                        "input `{name}` of `{tool}` is private: the end user enters it and the model is never \
                         shown it, so it has no words for the model"
                    )));
                }
                Some(_) => {}
            }
            check_text(&format!("the description of input `{name}`"), Some(name), text, MAX_DESCRIPTION_CHARS)?;
        }
        for (name, text) in &self.output_descriptions {
            if !signature.outputs.iter().any(|o| &o.name == name) {
                return Err(WordingError {
                    parameter: Some(name.clone()),
                    message: format!(
                        "`{tool}` has no output `{}`: words describe only the version's own parameters",
                        quoted(name)
                    ),
                });
            }
            check_text(&format!("the description of output `{name}`"), Some(name), text, MAX_DESCRIPTION_CHARS)?;
        }
        Ok(())
    }

    /// `signature` with these words in place of the vendor's: the tool's
    /// description and its parameters' (a private input's never; a
    /// parameter the version lacks is skipped). Nothing else changes.
    pub fn apply(&self, signature: &Signature) -> Signature {
        let mut reworded = signature.clone();
        if let Some(text) = &self.description {
            reworded.description = text.clone();
        }
        for input in reworded.inputs.iter_mut().filter(|p| !p.private) {
            if let Some(text) = self.input_descriptions.get(&input.name) {
                input.description = text.clone();
            }
        }
        for output in &mut reworded.outputs {
            if let Some(text) = self.output_descriptions.get(&output.name) {
                output.description = text.clone();
            }
        }
        reworded
    }

    /// What the designer should review now that `served` is the version
    /// served, the words having been written for `written_for` (`None`
    /// when that version is gone: then nothing is called new).
    pub fn review(&self, served: &Signature, written_for: Option<&Signature>) -> Review {
        let offered = served.inputs.iter().filter(|p| !p.private);
        let new_inputs = match written_for {
            Some(old) => offered
                .filter(|p| old.input(&p.name).is_none() && !self.input_descriptions.contains_key(&p.name))
                .map(|p| p.name.clone())
                .collect(),
            None => Vec::new(),
        };
        let new_outputs = match written_for {
            Some(old) => served
                .outputs
                .iter()
                .filter(|p| {
                    !old.outputs.iter().any(|o| o.name == p.name) && !self.output_descriptions.contains_key(&p.name)
                })
                .map(|p| p.name.clone())
                .collect(),
            None => Vec::new(),
        };
        let stale_inputs = self
            .input_descriptions
            .keys()
            .filter(|name| served.input(name).is_none_or(|p| p.private))
            .cloned()
            .collect();
        let stale_outputs = self
            .output_descriptions
            .keys()
            .filter(|name| !served.outputs.iter().any(|o| &o.name == *name))
            .cloned()
            .collect();
        Review { new_inputs, new_outputs, stale_inputs, stale_outputs }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn echo(extra_input: bool) -> Signature {
        let mut inputs = vec![json!({"id": "text", "name": "text", "field": "text", "description": "The text.",
            "required": true, "type": {"kind": "string", "max_length": 10}})];
        if extra_input {
            inputs.push(json!({"id": "shout", "name": "shout", "field": "shout", "description": "Loud.",
                "required": false, "type": {"kind": "boolean"}}));
        }
        inputs.push(json!({"id": "pin", "name": "pin", "field": "pin", "description": "The PIN.",
            "required": true, "private": true, "type": {"kind": "string"}}));
        serde_json::from_value(json!({
            "name": "echo", "description": "Says it back.", "tags": [],
            "inputs": inputs,
            "outputs": [{"id": "text", "name": "text", "field": "text", "description": "Said.", "type": {"kind": "string"}}]
        }))
        .unwrap()
    }

    fn words(inputs: &[(&str, &str)]) -> Wording {
        Wording {
            description: Some("Repeats.".into()),
            input_descriptions: inputs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            output_descriptions: [("text".to_string(), "What came back.".to_string())].into(),
            words_for: None,
        }
    }

    /// Only texts change: the reworded signature is the vendor's with its
    /// descriptions replaced, field for field.
    #[test]
    fn applied_words_change_texts_and_nothing_else() {
        let vendor = echo(false);
        let reworded = words(&[("text", "What to repeat.")]).apply(&vendor);
        assert_eq!(reworded.description, "Repeats.");
        assert_eq!(reworded.inputs[0].description, "What to repeat.");
        assert_eq!(reworded.outputs[0].description, "What came back.");
        let mut back = reworded.clone();
        back.description = vendor.description.clone();
        back.inputs[0].description = vendor.inputs[0].description.clone();
        back.outputs[0].description = vendor.outputs[0].description.clone();
        assert_eq!(back, vendor);
    }

    #[test]
    fn words_for_a_missing_or_private_parameter_or_out_of_bounds_are_refused() {
        let vendor = echo(false);
        let refused = |w: Wording| w.check("echo", &vendor).unwrap_err();
        assert_eq!(refused(words(&[("txt", "x")])).parameter.as_deref(), Some("txt"));
        assert!(refused(words(&[("pin", "x")])).message.contains("private"));
        let mut no_output = words(&[]);
        no_output.output_descriptions = [("length".to_string(), "x".to_string())].into();
        assert_eq!(refused(no_output).parameter.as_deref(), Some("length"));
        assert!(refused(words(&[("text", "  ")])).message.contains("empty"));
        assert!(refused(words(&[("text", &"x".repeat(2001))])).message.contains("at most 2000"));
        let long = Wording { description: Some("x".repeat(2000)), ..Wording::default() };
        assert!(refused(long).message.contains("at most 1999"));
        assert!(refused(words(&[("text", "a\u{0}b")])).message.contains("control"));
        assert!(words(&[("text", "Line one.\nLine two.")]).check("echo", &vendor).is_ok());
    }

    /// A followed tool's new input is new to the words until they cover
    /// it; words for an input the served version lacks are stale.
    #[test]
    fn a_review_names_new_and_stale_parameters() {
        let (v1, v2) = (echo(false), echo(true));
        let review = words(&[("text", "x")]).review(&v2, Some(&v1));
        assert_eq!(review.new_inputs, ["shout"]);
        assert!(review.has_new());
        assert!(!words(&[("text", "x"), ("shout", "y")]).review(&v2, Some(&v1)).has_new());
        let stale = words(&[("shout", "y")]).review(&v1, Some(&v2));
        assert_eq!((stale.stale_inputs, stale.new_inputs), (vec!["shout".to_string()], vec![]));
        // A private input is never new to words: it has none.
        assert!(words(&[]).review(&v1, Some(&v1)).new_inputs.is_empty());
    }
}
