//! What changed between two versions of a tool, and whether it breaks callers.
//!
//! A2T (draft sections 5.4 and 6.1): a new version may only add optional
//! inputs or add outputs. Plinth reads that as: whatever a caller of the old
//! version sent must still be accepted, and whatever it read must still be
//! there with the same type. Parameters are matched by `id`, which is what
//! ties versions together.

use super::{InputParam, InputType, OutputType, Signature};
use serde::Serialize;

/// One difference between two signatures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// A stable snake_case code (`input_removed`, `output_added`, …).
    pub code: &'static str,
    /// Whether a caller of the old version could fail with the new one.
    pub breaking: bool,
    /// The parameter concerned (its id), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameter: Option<String>,
    /// What changed, in words.
    pub message: String,
}

/// The changes from one signature to the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SignatureDiff {
    /// Every change, breaking or not, in a stable order.
    pub changes: Vec<Change>,
}

impl SignatureDiff {
    /// Compares `old` with `new`.
    pub fn between(old: &Signature, new: &Signature) -> Self {
        let mut changes = Vec::new();
        let mut push = |code, breaking, parameter: Option<&str>, message: String| {
            changes.push(Change { code, breaking, parameter: parameter.map(str::to_string), message })
        };

        if old.name != new.name {
            push("name_changed", true, None, format!("the tool's name changed from `{}` to `{}`", old.name, new.name));
        }
        if old.description != new.description {
            push("description_changed", false, None, "the tool's description changed".into());
        }
        if old.tags != new.tags || old.img != new.img {
            push("metadata_changed", false, None, "the tool's tags or image changed".into());
        }

        for before in &old.inputs {
            let id = Some(before.id.as_str());
            let Some(after) = new.inputs.iter().find(|p| p.id == before.id) else {
                push("input_removed", true, id, format!("input `{}` was removed", before.id));
                continue;
            };
            if after.name != before.name {
                push(
                    "input_renamed",
                    true,
                    id,
                    format!("input `{}` is now called `{}`; callers send the old name", before.id, after.name),
                );
            }
            if before.required != after.required {
                let (code, breaking, what) = if after.required {
                    ("input_now_required", true, "required")
                } else {
                    ("input_now_optional", false, "optional")
                };
                push(code, breaking, id, format!("input `{}` became {what}", before.id));
            }
            // A private input is the end user's to type on the confirmation
            // page: becoming one takes it from the agent and makes every call
            // wait for its end user; ceasing to be one asks the agent for it.
            if before.private != after.private {
                let (code, breaking, what) = if after.private {
                    (
                        "input_now_private",
                        true,
                        "private: the agent may no longer send it, and every call needs its end user's confirmation",
                    )
                } else {
                    ("input_no_longer_private", after.required, "no longer private: the agent sends it")
                };
                push(code, breaking, id, format!("input `{}` became {what}", before.id));
            }
            compare_input_types(before, after, &mut push);
            if before.description != after.description {
                push(
                    "input_description_changed",
                    false,
                    id,
                    format!("the description of input `{}` changed", before.id),
                );
            }
        }
        for added in new.inputs.iter().filter(|p| !old.inputs.iter().any(|o| o.id == p.id)) {
            let id = Some(added.id.as_str());
            if added.private {
                push(
                    "private_input_added",
                    true,
                    id,
                    format!("private input `{}` was added: every call now needs its end user's confirmation", added.id),
                );
            } else if added.required {
                push(
                    "required_input_added",
                    true,
                    id,
                    format!("required input `{}` was added; callers do not send it", added.id),
                );
            } else {
                push("optional_input_added", false, id, format!("optional input `{}` was added", added.id));
            }
        }

        for before in &old.outputs {
            let id = Some(before.id.as_str());
            let Some(after) = new.outputs.iter().find(|p| p.id == before.id) else {
                push("output_removed", true, id, format!("output `{}` was removed", before.id));
                continue;
            };
            if after.name != before.name {
                push("output_renamed", true, id, format!("output `{}` is now called `{}`", before.id, after.name));
            }
            if before.ty.a2t_name() != after.ty.a2t_name() {
                push(
                    "output_type_changed",
                    true,
                    id,
                    format!(
                        "output `{}` changed type from {} to {}",
                        before.id,
                        before.ty.a2t_name(),
                        after.ty.a2t_name()
                    ),
                );
            } else if let (OutputType::Enum { values: a }, OutputType::Enum { values: b }) = (&before.ty, &after.ty)
                && a.iter().map(|v| &v.name).ne(b.iter().map(|v| &v.name))
            {
                push("output_enum_changed", false, id, format!("the values of output `{}` changed", before.id));
            }
            if before.description != after.description {
                push(
                    "output_description_changed",
                    false,
                    id,
                    format!("the description of output `{}` changed", before.id),
                );
            }
        }
        for added in new.outputs.iter().filter(|p| !old.outputs.iter().any(|o| o.id == p.id)) {
            push("output_added", false, Some(&added.id), format!("output `{}` was added", added.id));
        }

        SignatureDiff { changes }
    }

    /// The breaking changes only.
    pub fn breaking(&self) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(|c| c.breaking)
    }

    /// Whether the new version keeps every caller of the old one working.
    pub fn is_compatible(&self) -> bool {
        self.breaking().next().is_none()
    }
}

fn compare_input_types(
    before: &InputParam,
    after: &InputParam,
    push: &mut impl FnMut(&'static str, bool, Option<&str>, String),
) {
    let id = Some(before.id.as_str());
    let p = &before.id;
    match (&before.ty, &after.ty) {
        (InputType::String { max_length: a }, InputType::String { max_length: b }) => {
            // `None` is unbounded.
            let narrower = match (a, b) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(a), Some(b)) => b < a,
            };
            if narrower {
                push(
                    "max_length_narrowed",
                    true,
                    id,
                    format!("input `{p}` accepts shorter strings than before ({a:?} → {b:?})"),
                );
            } else if a != b {
                push("max_length_widened", false, id, format!("input `{p}` accepts longer strings than before"));
            }
        }
        (InputType::Int { min: a_min, max: a_max, .. }, InputType::Int { min: b_min, max: b_max, .. }) => {
            if b_min > a_min || b_max < a_max {
                push(
                    "range_narrowed",
                    true,
                    id,
                    format!("input `{p}` accepts a narrower range than before ({a_min}..={a_max} → {b_min}..={b_max})"),
                );
            } else if b_min != a_min || b_max != a_max {
                push("range_widened", false, id, format!("input `{p}` accepts a wider range than before"));
            }
        }
        (InputType::Enum { values: a }, InputType::Enum { values: b }) => {
            let removed: Vec<&str> =
                a.iter().filter(|v| !b.iter().any(|w| w.name == v.name)).map(|v| v.name.as_str()).collect();
            if !removed.is_empty() {
                push("enum_values_removed", true, id, format!("input `{p}` no longer accepts {}", removed.join(", ")));
            } else if b.len() > a.len() {
                push("enum_values_added", false, id, format!("input `{p}` accepts new values"));
            }
            if a.iter().any(|v| b.iter().any(|w| w.name == v.name && w.description != v.description)) {
                push("enum_description_changed", false, id, format!("descriptions of values of input `{p}` changed"));
            }
        }
        (InputType::Boolean, InputType::Boolean) => {}
        (a, b) => push(
            "input_type_changed",
            true,
            id,
            format!("input `{p}` changed type from {} to {}", a.a2t_name(), b.a2t_name()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::{EnumValue, IntKind, OutputParam};

    fn value(name: &str) -> EnumValue {
        EnumValue { name: name.into(), case: name.to_lowercase(), description: format!("{name}.") }
    }

    fn input(id: &str, required: bool, ty: InputType) -> InputParam {
        InputParam {
            id: id.into(),
            name: id.into(),
            field: id.into(),
            description: format!("The {id}."),
            required,
            ty,
            private: false,
        }
    }

    fn output(id: &str, ty: OutputType) -> OutputParam {
        OutputParam { id: id.into(), name: id.into(), field: id.into(), description: format!("The {id}."), ty }
    }

    fn v1() -> Signature {
        Signature {
            name: "book_flight".into(),
            description: "Books.".into(),
            img: None,
            tags: vec!["travel".into()],
            inputs: vec![
                input("flight", true, InputType::String { max_length: Some(6) }),
                input("seats", true, InputType::Int { wit: IntKind::U8, min: 1, max: 9 }),
                input("cabin", true, InputType::Enum { values: vec![value("ECONOMY"), value("FIRST")] }),
                input("window", false, InputType::Boolean),
            ],
            outputs: vec![output("code", OutputType::String), output("price", OutputType::Int)],
        }
    }

    /// The codes of the changes from v1 to `edit(v1)`, and whether it is compatible.
    fn diff(edit: impl FnOnce(&mut Signature)) -> (Vec<&'static str>, bool) {
        let mut v2 = v1();
        edit(&mut v2);
        let d = SignatureDiff::between(&v1(), &v2);
        (d.changes.iter().map(|c| c.code).collect(), d.is_compatible())
    }

    #[test]
    fn an_input_becoming_private_or_a_private_one_added_is_breaking() {
        let old = v1();
        let mut new = v1();
        new.inputs[0].private = true;
        let diff = SignatureDiff::between(&old, &new);
        assert!(diff.breaking().any(|c| c.code == "input_now_private"), "{diff:?}");
        // Back to public: the agent must now send a required input.
        let back = SignatureDiff::between(&new, &old);
        assert_eq!(back.is_compatible(), !old.inputs[0].required, "{back:?}");
        let mut added = v1();
        added.inputs.push(InputParam { private: true, ..input("pin", true, InputType::String { max_length: None }) });
        let diff = SignatureDiff::between(&old, &added);
        assert!(diff.breaking().any(|c| c.code == "private_input_added"), "{diff:?}");
    }

    #[test]
    fn identical_signatures_have_no_changes() {
        assert_eq!(diff(|_| {}), (vec![], true));
    }

    // Breaking changes, one test each.

    #[test]
    fn removing_an_input_breaks() {
        assert_eq!(diff(|s| drop(s.inputs.remove(3))), (vec!["input_removed"], false));
    }

    #[test]
    fn adding_a_required_input_breaks() {
        assert_eq!(
            diff(|s| s.inputs.push(input("meal", true, InputType::Boolean))),
            (vec!["required_input_added"], false)
        );
    }

    #[test]
    fn making_an_optional_input_required_breaks() {
        assert_eq!(diff(|s| s.inputs[3].required = true), (vec!["input_now_required"], false));
    }

    #[test]
    fn changing_an_input_type_breaks() {
        assert_eq!(
            diff(|s| s.inputs[3].ty = InputType::String { max_length: None }),
            (vec!["input_type_changed"], false)
        );
    }

    #[test]
    fn narrowing_a_range_breaks() {
        let (codes, ok) = diff(|s| s.inputs[1].ty = InputType::Int { wit: IntKind::U8, min: 1, max: 8 });
        assert_eq!((codes, ok), (vec!["range_narrowed"], false));
        let (codes, ok) = diff(|s| s.inputs[1].ty = InputType::Int { wit: IntKind::U8, min: 2, max: 9 });
        assert_eq!((codes, ok), (vec!["range_narrowed"], false));
    }

    #[test]
    fn narrowing_a_max_length_breaks() {
        assert_eq!(
            diff(|s| s.inputs[0].ty = InputType::String { max_length: Some(5) }),
            (vec!["max_length_narrowed"], false)
        );
        let mut unbounded = v1();
        unbounded.inputs[0].ty = InputType::String { max_length: None };
        let d = SignatureDiff::between(&unbounded, &v1());
        assert!(!d.is_compatible(), "adding a max length where there was none narrows");
    }

    #[test]
    fn narrowing_an_enum_breaks() {
        assert_eq!(
            diff(|s| s.inputs[2].ty = InputType::Enum { values: vec![value("ECONOMY")] }),
            (vec!["enum_values_removed"], false)
        );
    }

    #[test]
    fn removing_an_output_breaks() {
        assert_eq!(diff(|s| drop(s.outputs.remove(1))), (vec!["output_removed"], false));
    }

    #[test]
    fn changing_an_output_type_breaks() {
        assert_eq!(diff(|s| s.outputs[1].ty = OutputType::Json { schema: None }), (vec!["output_type_changed"], false));
    }

    #[test]
    fn renaming_a_parameter_breaks() {
        assert_eq!(diff(|s| s.inputs[0].name = "flight_number".into()), (vec!["input_renamed"], false));
        assert_eq!(diff(|s| s.outputs[0].name = "confirmation".into()), (vec!["output_renamed"], false));
        // A new id is a different parameter: the old one is gone.
        let (codes, ok) = diff(|s| {
            s.inputs[0].id = "flight_number".into();
            s.inputs[0].name = "flight_number".into();
        });
        assert_eq!((codes, ok), (vec!["input_removed", "required_input_added"], false));
    }

    // Allowed changes, one test each.

    #[test]
    fn adding_an_optional_input_is_allowed() {
        assert_eq!(
            diff(|s| s.inputs.push(input("meal", false, InputType::Boolean))),
            (vec!["optional_input_added"], true)
        );
    }

    #[test]
    fn adding_an_output_is_allowed() {
        assert_eq!(diff(|s| s.outputs.push(output("gate", OutputType::String))), (vec!["output_added"], true));
    }

    #[test]
    fn widening_a_range_is_allowed() {
        assert_eq!(
            diff(|s| s.inputs[1].ty = InputType::Int { wit: IntKind::U16, min: 0, max: 500 }),
            (vec!["range_widened"], true)
        );
    }

    #[test]
    fn widening_a_max_length_is_allowed() {
        assert_eq!(
            diff(|s| s.inputs[0].ty = InputType::String { max_length: Some(8) }),
            (vec!["max_length_widened"], true)
        );
        assert_eq!(
            diff(|s| s.inputs[0].ty = InputType::String { max_length: None }),
            (vec!["max_length_widened"], true)
        );
    }

    #[test]
    fn widening_an_enum_is_allowed() {
        assert_eq!(
            diff(|s| s.inputs[2].ty =
                InputType::Enum { values: vec![value("ECONOMY"), value("FIRST"), value("BUSINESS")] }),
            (vec!["enum_values_added"], true)
        );
    }

    #[test]
    fn making_a_required_input_optional_is_allowed() {
        assert_eq!(diff(|s| s.inputs[0].required = false), (vec!["input_now_optional"], true));
    }

    #[test]
    fn description_edits_are_allowed() {
        let (codes, ok) = diff(|s| {
            s.description = "Books a flight.".into();
            s.inputs[0].description = "The flight number.".into();
            s.outputs[0].description = "The booking code.".into();
            s.tags.push("bookings".into());
        });
        assert!(ok);
        assert_eq!(
            codes,
            ["description_changed", "metadata_changed", "input_description_changed", "output_description_changed"]
        );
    }

    #[test]
    fn every_breaking_change_is_listed() {
        let mut v2 = v1();
        v2.inputs.remove(0);
        v2.outputs.remove(0);
        v2.inputs[0].required = false;
        let d = SignatureDiff::between(&v1(), &v2);
        let breaking: Vec<_> = d.breaking().map(|c| (c.code, c.parameter.clone().unwrap())).collect();
        assert_eq!(breaking, [("input_removed", "flight".to_string()), ("output_removed", "code".to_string())]);
    }
}
