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

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ed25519_dalek::{Signer, Verifier};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::path::Path;

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

/// The budget of a confirmation condition: a publisher's condition runs on
/// every call of its tool, on the server all tenants share, so what it may
/// cost is bounded before it is accepted (at pack, deploy and override),
/// from its text and its compiled form alone. See `docs/cheq.md`.
///
/// The estimate counts steps: one per node evaluated, each node inside a
/// comprehension counted once per element it may iterate over (plus the
/// cost of binding its variables), an operation that walks collections
/// (`==`, `!=`, `in`, `+`) one more step per 8 elements of its arguments,
/// and one that scans strings (comparison, `size`, the string functions,
/// indexing) one more per 64. A collection the condition did not write
/// itself comes from the inputs, whose size at evaluation is bounded by
/// `MAX_INPUT_BYTES`: a larger call asks for confirmation without
/// evaluating the condition.
pub mod budget {
    use cel::common::ast::{EntryExpr, Expr, LiteralValue, operators};

    /// The longest condition, in characters.
    pub const MAX_CHARS: usize = 1_000;
    /// The deepest nesting of brackets and parentheses (checked before the
    /// parser, which recurses, sees the text).
    pub const MAX_NESTING: usize = 32;
    /// The most nodes of the compiled condition, macros expanded.
    pub const MAX_NODES: usize = 256;
    /// The most entries of one list or map literal.
    pub const MAX_LITERAL_ENTRIES: usize = 64;
    /// The longest string or bytes literal.
    pub const MAX_STRING_LITERAL_CHARS: usize = 256;
    /// The deepest nesting of comprehension macros, one in the body of
    /// another.
    pub const MAX_COMPREHENSION_DEPTH: usize = 2;
    /// The most bytes (as JSON) of the inputs a condition reads at a call;
    /// a call with more asks for confirmation without evaluating it.
    pub const MAX_INPUT_BYTES: usize = 4_096;
    /// The most steps a condition's worst case may be estimated at.
    pub const MAX_COST: u64 = 400_000;
    /// The largest compiled form of a `matches` pattern (cel compiles it at
    /// every call: this bounds that compilation). Unicode classes such as
    /// `\w` compile larger: ASCII ones (`[A-Za-z0-9_]`, `(?-u:\w)`) fit.
    pub const MAX_REGEX_BYTES: usize = 16 * 1024;
    /// What compiling a `matches` pattern costs, in steps (measured: 20 to
    /// 70 microseconds for patterns near [`MAX_REGEX_BYTES`]).
    const REGEX_COMPILE_STEPS: u64 = 10_000;

    /// The most elements of a collection in inputs of [`MAX_INPUT_BYTES`]
    /// (an element takes at least two bytes of JSON).
    const INPUT_ELEMENTS: u64 = (MAX_INPUT_BYTES / 2) as u64;
    /// Elements an operation that walks collections element by element
    /// (`==`, `!=`, `in`, `+`) visits per step charged.
    const ELEMENTS_PER_WALK_STEP: u64 = 8;
    /// Elements (bytes) an operation that scans a string visits per step.
    const ELEMENTS_PER_SCAN_STEP: u64 = 64;
    /// What one iteration of a comprehension costs beyond its body (binding
    /// the element and the accumulator), in steps: measured, an iteration
    /// over inputs costs as much as some 30 nodes.
    const ITERATION_STEPS: u64 = 30;

    /// Operators and functions of constant cost.
    const CONSTANT: &[&str] = &[
        operators::LOGICAL_AND,
        operators::LOGICAL_OR,
        operators::LOGICAL_NOT,
        operators::CONDITIONAL,
        operators::NEGATE,
        operators::SUBSTRACT,
        operators::MULTIPLY,
        operators::DIVIDE,
        operators::MODULO,
        operators::NOT_STRICTLY_FALSE,
        "int",
        "uint",
        "double",
        "bool",
        "type",
        "dyn",
    ];
    /// Operators linear in the size of their arguments, walking collections
    /// element by element.
    const WALKING: &[&str] = &[operators::EQUALS, operators::NOT_EQUALS, operators::IN, operators::ADD];
    /// Operators and functions linear in the size of their arguments,
    /// scanning strings (or constant on collections).
    const LINEAR: &[&str] = &[
        operators::EQUALS,
        operators::NOT_EQUALS,
        operators::LESS,
        operators::LESS_EQUALS,
        operators::GREATER,
        operators::GREATER_EQUALS,
        operators::IN,
        operators::ADD,
        operators::INDEX,
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "string",
    ];

    /// The functions a condition may call, for messages.
    pub fn allowed_functions() -> String {
        let named = CONSTANT.iter().chain(LINEAR).filter(|f| f.chars().all(|c| c.is_ascii_alphabetic()));
        let named: Vec<&str> = named.copied().collect();
        format!("the operators, the macros and {}", named.join(", "))
    }

    /// Checks the text before it is parsed: its length and how deep its
    /// brackets nest.
    pub(super) fn check_text(text: &str) -> Result<(), super::Limit> {
        let chars = text.chars().count();
        if chars > MAX_CHARS {
            return Err(super::Limit::Chars(chars));
        }
        let (mut depth, mut deepest) = (0usize, 0usize);
        for c in text.chars() {
            match c {
                '(' | '[' | '{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                ')' | ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        if deepest > MAX_NESTING {
            return Err(super::Limit::Nesting(deepest));
        }
        Ok(())
    }

    /// What the walk knows of an expression: the most elements its value
    /// may hold, and what evaluating it may cost.
    #[derive(Clone, Copy)]
    struct Bound {
        elements: u64,
        cost: u64,
    }

    /// A condition that passed the budget.
    pub(super) struct Checked {
        /// Its estimated worst-case cost, in steps.
        #[cfg_attr(not(test), allow(dead_code))]
        pub cost: u64,
        /// The inputs it reads: its free identifiers, in order of first use
        /// (a comprehension's own variables are not inputs).
        pub inputs: Vec<String>,
    }

    struct Walk {
        nodes: usize,
        inputs: Vec<String>,
        /// Comprehension variables in scope: name, element bound, and
        /// whether it is an accumulator.
        scope: Vec<(String, u64, bool)>,
        /// Comprehensions whose body the walk is in.
        depth: usize,
    }

    /// Checks the compiled condition against every limit, and returns its
    /// estimated worst-case cost in steps.
    pub(super) fn check_program(program: &cel::Program) -> Result<Checked, super::Limit> {
        let mut walk = Walk { nodes: 0, inputs: Vec::new(), scope: Vec::new(), depth: 0 };
        let bound = walk.expr(program.expression())?;
        if bound.cost > MAX_COST {
            return Err(super::Limit::Cost(bound.cost));
        }
        Ok(Checked { cost: bound.cost, inputs: walk.inputs })
    }

    impl Walk {
        fn expr(&mut self, e: &cel::IdedExpr) -> Result<Bound, super::Limit> {
            use super::Limit;
            self.nodes += 1;
            if self.nodes > MAX_NODES {
                return Err(Limit::Nodes);
            }
            let one = Bound { elements: 1, cost: 1 };
            Ok(match &e.expr {
                Expr::Literal(literal) => {
                    let chars = match literal {
                        LiteralValue::String(s) => s.inner().chars().count(),
                        LiteralValue::Bytes(b) => b.inner().len(),
                        _ => 0,
                    };
                    if chars > MAX_STRING_LITERAL_CHARS {
                        return Err(Limit::StringLiteral(chars));
                    }
                    one
                }
                Expr::Ident(name) => {
                    // A comprehension's variable, or an input.
                    let elements = match self.scope.iter().rev().find(|(n, _, _)| n == name) {
                        Some((_, bound, _)) => *bound,
                        None => {
                            if !self.inputs.contains(name) {
                                self.inputs.push(name.clone());
                            }
                            INPUT_ELEMENTS
                        }
                    };
                    Bound { elements, cost: 1 }
                }
                Expr::Select(select) => {
                    let operand = self.expr(&select.operand)?;
                    let elements = if select.test { 1 } else { operand.elements };
                    Bound { elements, cost: operand.cost.saturating_add(1) }
                }
                Expr::List(list) => {
                    if list.elements.len() > MAX_LITERAL_ENTRIES {
                        return Err(Limit::LiteralEntries(list.elements.len()));
                    }
                    let mut bound = one;
                    for element in &list.elements {
                        bound = sum(bound, self.expr(element)?);
                    }
                    bound
                }
                Expr::Map(map) => {
                    if map.entries.len() > MAX_LITERAL_ENTRIES {
                        return Err(Limit::LiteralEntries(map.entries.len()));
                    }
                    let mut bound = one;
                    for entry in &map.entries {
                        match &entry.expr {
                            EntryExpr::MapEntry(entry) => {
                                bound = sum(bound, self.expr(&entry.key)?);
                                bound = sum(bound, self.expr(&entry.value)?);
                            }
                            EntryExpr::StructField(_) => return Err(Limit::Function("a struct literal".into())),
                        }
                    }
                    bound
                }
                Expr::Call(call) => {
                    let name = call.func_name.as_str();
                    // `map` and `filter` append to their accumulator in place
                    // (cel's `AppendStep`): no copy to charge for.
                    let appends = name == operators::ADD
                        && call.target.is_none()
                        && call.args.first().is_some_and(|a| self.is_accumulator(a));
                    let linear = LINEAR.contains(&name) && !appends;
                    if !LINEAR.contains(&name) && !CONSTANT.contains(&name) {
                        return Err(Limit::Function(name.to_string()));
                    }
                    // Only a literal pattern: compiling a regex an input
                    // supplies is not bounded by anything the publisher wrote.
                    let compiles = name == "matches";
                    if compiles {
                        let pattern = match call.args.last().map(|a| &a.expr) {
                            Some(Expr::Literal(LiteralValue::String(pattern))) => pattern.inner(),
                            _ => {
                                return Err(Limit::Function(
                                    "matches with a pattern that is not a string literal".into(),
                                ));
                            }
                        };
                        // A pattern that does not compile fails the call (closed); one too large is refused.
                        if let Err(regex::Error::CompiledTooBig(_)) =
                            regex::RegexBuilder::new(pattern).size_limit(MAX_REGEX_BYTES).build()
                        {
                            return Err(Limit::Regex);
                        }
                    }
                    let mut args = Vec::with_capacity(call.args.len() + 1);
                    if let Some(target) = &call.target {
                        args.push(self.expr(target)?);
                    }
                    for arg in &call.args {
                        args.push(self.expr(arg)?);
                    }
                    let walked: u64 = args.iter().fold(0, |n, a| n.saturating_add(a.elements));
                    let cost = args.iter().fold(1u64, |n, a| n.saturating_add(a.cost));
                    let per_step =
                        if WALKING.contains(&name) { ELEMENTS_PER_WALK_STEP } else { ELEMENTS_PER_SCAN_STEP };
                    let cost = if linear { cost.saturating_add(walked / per_step) } else { cost };
                    let cost = if compiles { cost.saturating_add(REGEX_COMPILE_STEPS) } else { cost };
                    let elements = match name {
                        operators::ADD => walked,
                        operators::INDEX => args.first().map_or(1, |a| a.elements),
                        operators::CONDITIONAL => args.iter().skip(1).map(|a| a.elements).max().unwrap_or(1),
                        _ => 1,
                    };
                    Bound { elements, cost }
                }
                Expr::Comprehension(c) => {
                    let range = self.expr(&c.iter_range)?;
                    let init = self.expr(&c.accu_init)?;
                    let iterations = range.elements;
                    self.depth += 1;
                    if self.depth > MAX_COMPREHENSION_DEPTH {
                        return Err(Limit::ComprehensionDepth(self.depth));
                    }
                    let scoped = self.scope.len();
                    // The elements of a collection together hold no more than
                    // it does: over all iterations, work linear in the
                    // element's size adds up to the collection's, so one
                    // element counts as 1 per iteration. Not when a
                    // comprehension nests in the body (it may iterate over
                    // the element, in a body using it): then an element
                    // counts as the whole collection. The accumulator is
                    // only ever appended to or folded.
                    let nested = has_comprehension(&c.loop_step) || has_comprehension(&c.loop_cond);
                    let element = if nested { iterations } else { 1 };
                    self.scope.push((c.iter_var.clone(), element, false));
                    if let Some(second) = &c.iter_var2 {
                        self.scope.push((second.clone(), element, false));
                    }
                    self.scope.push((c.accu_var.clone(), 1, true));
                    let body = sum(self.expr(&c.loop_cond)?, self.expr(&c.loop_step)?);
                    self.depth -= 1;
                    let result = self.expr(&c.result)?;
                    self.scope.truncate(scoped);
                    let cost = range
                        .cost
                        .saturating_add(init.cost)
                        .saturating_add(iterations.saturating_mul(body.cost.saturating_add(ITERATION_STEPS)))
                        .saturating_add(result.cost);
                    Bound { elements: iterations.saturating_mul(body.elements).max(1), cost }
                }
                Expr::Struct(_) => return Err(Limit::Function("a struct literal".into())),
                Expr::Unspecified => return Err(Limit::Function("an unspecified expression".into())),
            })
        }
    }

    impl Walk {
        fn is_accumulator(&self, e: &cel::IdedExpr) -> bool {
            let Expr::Ident(name) = &e.expr else { return false };
            self.scope.iter().rev().find(|(n, _, _)| n == name).is_some_and(|(_, _, accu)| *accu)
        }
    }

    /// Whether `e` holds a comprehension.
    fn has_comprehension(e: &cel::IdedExpr) -> bool {
        match &e.expr {
            Expr::Comprehension(_) => true,
            Expr::Call(call) => {
                call.target.as_deref().is_some_and(has_comprehension) || call.args.iter().any(has_comprehension)
            }
            Expr::Select(select) => has_comprehension(&select.operand),
            Expr::List(list) => list.elements.iter().any(has_comprehension),
            Expr::Map(map) => map.entries.iter().any(|entry| match &entry.expr {
                EntryExpr::MapEntry(entry) => has_comprehension(&entry.key) || has_comprehension(&entry.value),
                EntryExpr::StructField(field) => has_comprehension(&field.value),
            }),
            Expr::Struct(_) | Expr::Literal(_) | Expr::Ident(_) | Expr::Unspecified => false,
        }
    }

    fn sum(a: Bound, b: Bound) -> Bound {
        Bound { elements: a.elements.saturating_add(b.elements), cost: a.cost.saturating_add(b.cost) }
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

/// An Ed25519 key that signs CHEQ objects, with its JWKS key id.
pub struct SigningKey {
    key: ed25519_dalek::SigningKey,
    kid: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("kid", &self.kid).finish_non_exhaustive()
    }
}

/// The file in the data dir that holds the key this server signs its CHEQ
/// objects with (as the resource server).
pub const KEY_FILE: &str = "cheq-signing.key";

/// The file in the data dir that holds the key of the built-in confirmation
/// server (it countersigns what end users accept on its page).
pub const CONFIRMATION_KEY_FILE: &str = "cheq-confirmation.key";

impl SigningKey {
    /// A key from its 32 secret bytes. The key id is the JWK thumbprint
    /// (RFC 7638) of its public half, so it names the key, not a file.
    pub fn from_bytes(secret: &[u8; 32]) -> SigningKey {
        let key = ed25519_dalek::SigningKey::from_bytes(secret);
        let x = B64.encode(key.verifying_key().as_bytes());
        let thumbprint = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
        let kid = B64.encode(<sha2::Sha256 as sha2::Digest>::digest(thumbprint.as_bytes()));
        SigningKey { key, kid }
    }

    /// A new random key.
    pub fn generate() -> std::io::Result<SigningKey> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(std::io::Error::other)?;
        Ok(SigningKey::from_bytes(&secret))
    }

    /// The key in `dir/file`, created (readable by its owner only) on
    /// first use.
    pub fn load_or_create(dir: &Path, file: &str) -> std::io::Result<SigningKey> {
        let secret = crate::private_files::read_or_create_hex_key(&dir.join(file), "a CHEQ signing key")?;
        Ok(SigningKey::from_bytes(&secret))
    }

    /// The key id (`kid`) under which the public key is published.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as a JWK.
    pub fn jwk(&self) -> Value {
        json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "alg": "EdDSA",
            "use": "sig",
            "kid": self.kid,
            "x": B64.encode(self.key.verifying_key().as_bytes()),
        })
    }
}

/// A JWKS of `keys`.
pub fn jwks(keys: &[&SigningKey]) -> Value {
    json!({ "keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>() })
}

/// The bytes every signature covers: the RFC 8785 form of `cheq`.
pub fn canonical(cheq: &Value) -> Vec<u8> {
    serde_json_canonicalizer::to_vec(cheq).unwrap_or_default()
}

/// `cheq` signed by `key`: a JWS in the general JSON serialization,
/// `{"payload", "signatures": [{"protected", "signature"}]}`. `claims` go
/// into the signature's protected header (a confirmation server puts the
/// end user and its decision there).
pub fn sign(cheq: &Value, key: &SigningKey, claims: Map<String, Value>) -> Value {
    let payload = B64.encode(canonical(cheq));
    json!({ "payload": payload, "signatures": [signature(&payload, key, claims)] })
}

/// Adds `key`'s signature over the payload of `jws`, beside the ones there.
pub fn countersign(jws: &mut Value, key: &SigningKey, claims: Map<String, Value>) -> Result<(), VerifyError> {
    let payload = jws["payload"].as_str().ok_or(VerifyError::Malformed("no `payload`"))?.to_string();
    let signatures = jws["signatures"].as_array_mut().ok_or(VerifyError::Malformed("no `signatures`"))?;
    signatures.push(signature(&payload, key, claims));
    Ok(())
}

fn signature(payload: &str, key: &SigningKey, claims: Map<String, Value>) -> Value {
    let mut header = claims;
    header.insert("alg".into(), "EdDSA".into());
    header.insert("kid".into(), key.kid.clone().into());
    let protected = B64.encode(Value::Object(header).to_string());
    let signed = key.key.sign(format!("{protected}.{payload}").as_bytes());
    json!({ "protected": protected, "signature": B64.encode(signed.to_bytes()) })
}

/// A signed CHEQ as it came over the wire, in the general JSON
/// serialization [`verify`] reads. The draft leaves the multi-signature
/// syntax open, so a confirmation server may send the CHEQ in any of
/// RFC 7515's serializations: the general JSON one (`{"payload",
/// "signatures"}`, as this server issues it), the flattened JSON one
/// (`{"payload", "protected", "signature"}`) or the compact one
/// (`protected.payload.signature`); the last two carry one signature. Only
/// the form changes here: nothing is verified, and a JSON object that is
/// neither JWS form is returned as it is, for [`verify`] to refuse.
pub fn from_wire(body: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(body).map_err(|_| "it is not UTF-8".to_string())?.trim();
    if text.starts_with('{') {
        let mut jws: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let flattened = jws.get("signatures").is_none() && jws.get("signature").is_some();
        if let (true, Some(object)) = (flattened, jws.as_object_mut()) {
            let mut entry = Map::new();
            for field in ["protected", "header", "signature"] {
                if let Some(value) = object.remove(field) {
                    entry.insert(field.into(), value);
                }
            }
            object.insert("signatures".into(), Value::Array(vec![Value::Object(entry)]));
        }
        return Ok(jws);
    }
    let base64url = |part: &&str| part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    match text.split('.').collect::<Vec<_>>()[..] {
        [protected, payload, signature] if [protected, payload, signature].iter().all(base64url) => {
            Ok(json!({ "payload": payload, "signatures": [{ "protected": protected, "signature": signature }] }))
        }
        _ => Err("it is neither JSON nor a compact JWS".into()),
    }
}

/// Why a signed CHEQ was not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    /// Not a JWS in the general JSON serialization.
    #[error("not a signed CHEQ (a JWS in the general JSON serialization): {0}")]
    Malformed(&'static str),
    /// A signature by a key none of the given key sets hold.
    #[error("a signature is by key `{0}`, which no trusted key set holds")]
    UnknownKey(String),
    /// A signature that does not verify.
    #[error("the signature by key `{0}` does not match the CHEQ: it was altered or forged")]
    BadSignature(String),
    /// An algorithm other than EdDSA.
    #[error("the signature by key `{0}` uses `{1}`; only EdDSA is accepted")]
    Algorithm(String, String),
    /// More than [`MAX_SIGNATURES`] signatures (how many there were).
    #[error(
        "not a signed CHEQ: it has {0} signatures, more than {max} signatures are refused; a CHEQ carries 2",
        max = MAX_SIGNATURES
    )]
    TooManySignatures(usize),
}

/// One verified signature: who signed, and its protected header.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The signing key's id.
    pub kid: String,
    /// The signature's protected header (its `alg`, `kid` and claims).
    pub header: Map<String, Value>,
}

/// Most signatures [`verify`] takes: a CHEQ carries the resource server's
/// and a confirmation server's.
pub const MAX_SIGNATURES: usize = 8;

/// Verifies every signature of `jws` against the JWK sets in `trusted`:
/// each must be by a known key and match. Returns the payload (the
/// canonical CHEQ bytes) and the signatures.
pub fn verify(jws: &Value, trusted: &[Value]) -> Result<(Vec<u8>, Vec<Signed>), VerifyError> {
    let payload_b64 = jws["payload"].as_str().ok_or(VerifyError::Malformed("no `payload`"))?;
    let payload = B64.decode(payload_b64).map_err(|_| VerifyError::Malformed("`payload` is not base64url"))?;
    let signatures = jws["signatures"].as_array().ok_or(VerifyError::Malformed("no `signatures`"))?;
    if signatures.is_empty() {
        return Err(VerifyError::Malformed("no signatures"));
    }
    // Each signature costs an Ed25519 verification: a body of copies of one
    // valid signature must not buy that work hundreds of times over.
    if signatures.len() > MAX_SIGNATURES {
        return Err(VerifyError::TooManySignatures(signatures.len()));
    }
    let mut signed = Vec::new();
    for entry in signatures {
        let protected = entry["protected"].as_str().ok_or(VerifyError::Malformed("a signature has no `protected`"))?;
        let header: Map<String, Value> = B64
            .decode(protected)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or(VerifyError::Malformed("a protected header is not base64url JSON"))?;
        let kid =
            header.get("kid").and_then(Value::as_str).ok_or(VerifyError::Malformed("a signature has no `kid`"))?;
        let alg = header.get("alg").and_then(Value::as_str).unwrap_or("");
        if alg != "EdDSA" {
            return Err(VerifyError::Algorithm(kid.into(), alg.into()));
        }
        let key = find_key(trusted, kid).ok_or_else(|| VerifyError::UnknownKey(kid.into()))?;
        let bytes = entry["signature"]
            .as_str()
            .and_then(|s| B64.decode(s).ok())
            .and_then(|b| <[u8; 64]>::try_from(b).ok())
            .ok_or(VerifyError::Malformed("a signature is not 64 base64url bytes"))?;
        let message = format!("{protected}.{payload_b64}");
        key.verify(message.as_bytes(), &ed25519_dalek::Signature::from_bytes(&bytes))
            .map_err(|_| VerifyError::BadSignature(kid.into()))?;
        signed.push(Signed { kid: kid.into(), header });
    }
    Ok((payload, signed))
}

/// The Ed25519 key `kid` in one of the JWK sets.
fn find_key(sets: &[Value], kid: &str) -> Option<ed25519_dalek::VerifyingKey> {
    let jwk = sets.iter().filter_map(|set| set["keys"].as_array()).flatten().find(|k| k["kid"] == kid)?;
    if jwk["kty"] != "OKP" || jwk["crv"] != "Ed25519" {
        return None;
    }
    let x = B64.decode(jwk["x"].as_str()?).ok()?;
    ed25519_dalek::VerifyingKey::from_bytes(&<[u8; 32]>::try_from(x).ok()?).ok()
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn a_condition_over_the_inputs_decides_and_fails_closed() {
        let policy = ConfirmationPolicy {
            when: Some("cabin_class in ['BUSINESS', 'FIRST'] || passengers > 4".into()),
            ..Default::default()
        };
        policy.check(&["cabin_class", "passengers", "date"]).unwrap();
        assert!(!policy.compile().applies_to(&inputs(json!({"cabin_class": "ECONOMY", "passengers": 2}))));
        assert!(policy.compile().applies_to(&inputs(json!({"cabin_class": "FIRST", "passengers": 1}))));
        assert!(policy.compile().applies_to(&inputs(json!({"cabin_class": "ECONOMY", "passengers": 5}))));
        // A type error cannot be settled: ask.
        assert!(policy.compile().applies_to(&inputs(json!({"cabin_class": "ECONOMY", "passengers": "many"}))));

        let unknown = policy.check(&["cabin_class"]).unwrap_err().to_string();
        assert!(unknown.contains("names passengers, which is not an input"), "{unknown}");
        let broken = ConfirmationPolicy { when: Some("passengers >".into()), ..Default::default() };
        assert!(broken.check(&["passengers"]).unwrap_err().to_string().contains("not valid CEL"));
        let both = ConfirmationPolicy { required: true, when: Some("true".into()) };
        assert!(both.check(&[]).is_err());
        assert!(ConfirmationPolicy { required: true, when: None }.compile().applies_to(&Map::new()));
        assert!(!ConfirmationPolicy::default().compile().applies_to(&Map::new()));
    }

    fn when(condition: &str) -> ConfirmationPolicy {
        ConfirmationPolicy { when: Some(condition.into()), ..Default::default() }
    }

    fn limit_of(condition: &str, inputs: &[&str]) -> Option<&'static str> {
        match when(condition).check(inputs) {
            Err(ConditionError::TooCostly(limit)) => Some(limit.name()),
            Err(other) => panic!("{condition}: refused for another reason: {other}"),
            Ok(()) => None,
        }
    }

    fn numbers(n: usize) -> String {
        format!("[{}]", (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(","))
    }

    #[test]
    fn a_condition_over_the_budget_is_refused_naming_the_limit() {
        // The reported attack: three nested comprehensions over 300-element literals.
        let list = numbers(300);
        let attack = format!("{list}.all(a,{list}.all(b,{list}.all(c,true)))");
        assert_eq!(limit_of(&attack, &[]), Some("max_chars"));
        let message = when(&attack).check(&[]).unwrap_err().to_string();
        assert!(message.contains("limit `max_chars`") && message.contains("at most 1000"), "{message}");
        // The same, short enough to be read.
        let list = numbers(10);
        assert_eq!(
            limit_of(&format!("{list}.all(a,{list}.all(b,{list}.all(c,true)))"), &[]),
            Some("max_comprehension_depth")
        );
        assert_eq!(limit_of(&numbers(65), &[]), Some("max_literal_entries"));
        assert_eq!(limit_of(&format!("'{}' == 'a'", "x".repeat(300)), &[]), Some("max_string_literal_chars"));
        assert_eq!(limit_of(&format!("{}1{}", "(".repeat(33), ")".repeat(33)), &[]), Some("max_nesting"));
        assert_eq!(limit_of(&vec!["a"; 300].join("+"), &["a"]), Some("max_nodes"));
        assert_eq!(limit_of("a.matches(b)", &["a", "b"]), Some("allowed_functions"));
        assert_eq!(limit_of("a.matches('\\\\w')", &["a"]), Some("max_regex_bytes"));
        assert_eq!(limit_of("l.all(i, i.matches('^[A-Z]{2}'))", &["l"]), Some("max_cost"));
        assert_eq!(limit_of("a.lowerAscii() == 'x'", &["a"]), Some("allowed_functions"));
        assert_eq!(limit_of("optional.of(a).hasValue()", &["a"]), Some("allowed_functions"));
        // Quadratic in the inputs: each comprehension over an input may run 2048 times.
        assert_eq!(limit_of("l.all(a, l.all(b, a == b))", &["l"]), Some("max_cost"));
        assert_eq!(limit_of("l.exists(a, a in l)", &["l"]), Some("max_cost"));
        assert_eq!(limit_of("l.all(a, a.all(b, a == b))", &["l"]), Some("max_cost"));
        assert_eq!(limit_of("l.map(a, l + l).size() > 2", &["l"]), Some("max_cost"));
        // What conditions are for stays well within it.
        for fine in [
            "cabin_class in ['BUSINESS', 'FIRST'] || passengers > 4",
            "items.exists(i, i.amount > 1000)",
            "size(items) > 10 || iban.startsWith('DE') || iban.matches('^[A-Z]{2}[0-9]{2}')",
            "items.filter(i, i.amount > 100).size() > 2",
        ] {
            assert_eq!(limit_of(fine, &["cabin_class", "passengers", "items", "iban"]), None, "{fine}");
        }
        let list = numbers(64);
        assert_eq!(limit_of(&format!("{list}.all(a, {list}.exists(b, a + b == 126))"), &[]), None);
    }

    #[test]
    fn inputs_larger_than_a_condition_may_read_ask_for_confirmation() {
        let policy = when("size(items) > 100");
        policy.check(&["items"]).unwrap();
        let compiled = policy.compile();
        assert!(!compiled.applies_to(&inputs(json!({"items": [1, 2, 3]}))));
        let big: Vec<u32> = (0..2000).collect();
        assert!(compiled.applies_to(&inputs(json!({"items": big}))), "too big to read: fails closed");
        // Inputs it does not read do not count.
        let policy = when("amount > 1000");
        assert!(!policy.compile().applies_to(&inputs(json!({"amount": 5, "memo": "x".repeat(100_000)}))));
    }

    #[test]
    fn a_stored_condition_over_the_budget_asks_every_time() {
        let list = numbers(10);
        let stored = when(&format!("{list}.all(a,{list}.all(b,{list}.all(c,false)))"));
        assert!(matches!(stored.compile(), Confirmation::Always));
    }

    /// A list of `element(0)`, `element(1)`, … as long as inputs may be:
    /// one element more and a condition could not read it.
    fn largest(element: impl Fn(usize) -> Value) -> Value {
        let mut list = Vec::new();
        loop {
            list.push(element(list.len()));
            if serde_json::to_string(&list).unwrap().len() > budget::MAX_INPUT_BYTES {
                list.pop();
                return Value::Array(list);
            }
        }
    }

    /// The heaviest conditions the budget accepts, evaluated over the
    /// largest inputs it lets them read: each is accepted, estimated within
    /// the budget (and not far below it), and the evaluator answers with the
    /// condition's value rather than an error (which would fail closed and
    /// hide an evaluation that did not happen). How fast is the benchmark's
    /// business (`make bench`), not a test's.
    #[test]
    fn the_heaviest_accepted_conditions_finish() {
        let list = numbers(64);
        let amounts = largest(|i| json!({ "amount": i }));
        let numbers = largest(|i| json!(i));
        let pairs = largest(|_| json!("ab"));
        let letters = largest(|_| json!("a"));
        for (condition, value, holds) in [
            (format!("{list}.all(a, {list}.all(b, a + b != 1000 && a * b != 5000))"), json!(null), true),
            (
                format!("{list}.all(a, {list}.all(b, a + b != 1000 && a * b != 5000)) || {list}.exists(x, x == 64)"),
                json!(null),
                true,
            ),
            ("items.all(i, i.amount >= 0)".to_string(), amounts, true),
            ("items.all(i, i >= 0)".to_string(), numbers, true),
            ("items.all(i, i != 'x') || items.exists(i, i == 'y')".to_string(), pairs, true),
            (
                "items.all(i, i != 'x' && i != 'y' && i != 'z') || items.exists(i, i == 'w')".to_string(),
                letters.clone(),
                true,
            ),
            ("items.exists(i, i == 'q') || string(size(items)).matches('^[a-z0-9]{8}[0-9a-f]{60}(x|y|z)+$') || 'x'.matches('[a-zA-Z0-9_.+-]+@[a-z0-9-]+(\\\\.[a-z0-9-]+)+')".to_string(), letters, false),
        ] {
            when(&condition).check(&["items"]).unwrap_or_else(|e| panic!("{condition}: {e}"));
            let (program, variables) = compile(&condition).unwrap();
            let cost = budget::check_program(&program).unwrap().cost;
            assert!(
                (budget::MAX_COST / 8..=budget::MAX_COST).contains(&cost),
                "{condition}: estimated at {cost} steps"
            );
            let inputs = inputs(json!({ "items": value }));
            assert_eq!(evaluate(&program, &variables, &inputs), Ok(holds), "{condition}");
        }
    }

    mod never_panics {
        use super::*;
        use proptest::prelude::*;

        /// Nested expressions in CEL's syntax, macros and literals included.
        fn expression() -> impl Strategy<Value = String> {
            let leaf = prop_oneof![
                Just("a".to_string()),
                Just("b".to_string()),
                any::<i64>().prop_map(|n| n.to_string()),
                "[a-z]{0,8}".prop_map(|s| format!("'{s}'")),
                Just("true".to_string()),
                Just("null".to_string()),
                Just("1.5e3".to_string()),
                Just("b'\\xff'".to_string()),
            ];
            leaf.prop_recursive(6, 64, 4, |inner| {
                let operators = prop_oneof![
                    (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("{x} + {y}")),
                    (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("({x} == {y})")),
                    (inner.clone(), inner.clone(), inner.clone()).prop_map(|(c, x, y)| format!("{c} ? {x} : {y}")),
                    (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("{x} in {y}")),
                    prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", "))),
                    (inner.clone(), inner.clone()).prop_map(|(k, v)| format!("{{{k}: {v}}}")),
                ];
                let macros = prop_oneof![
                    (inner.clone(), inner.clone()).prop_map(|(l, p)| format!("{l}.all(x, {p})")),
                    (inner.clone(), inner.clone()).prop_map(|(l, p)| format!("{l}.exists_one(x, {p})")),
                    (inner.clone(), inner.clone()).prop_map(|(l, p)| format!("{l}.map(x, {p})")),
                ];
                let unary = prop_oneof![
                    inner.clone().prop_map(|x| format!("!{x}")),
                    inner.clone().prop_map(|x| format!("-({x})")),
                    inner.clone().prop_map(|x| format!("size({x})")),
                    inner.clone().prop_map(|x| format!("{x}.f")),
                    inner.clone().prop_map(|x| format!("has({x}.f)")),
                    (inner.clone(), inner).prop_map(|(x, i)| format!("{x}[{i}]")),
                ];
                prop_oneof![operators, macros, unary]
            })
        }

        fn checked(text: &str) {
            let policy = when(text);
            // Either answer is fine; a panic or a hang is not.
            let _ = policy.check(&["a", "b"]);
            let compiled = policy.compile();
            let _ = compiled.applies_to(&inputs(json!({"a": [1, "x", {"f": 2}], "b": {"f": [true]}})));
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

            #[test]
            fn on_arbitrary_text(text in "\\PC{0,200}") {
                checked(&text);
            }

            #[test]
            fn on_arbitrary_bytes_as_text(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
                checked(&String::from_utf8_lossy(&bytes));
            }

            #[test]
            fn on_text_of_cel_tokens(tokens in prop::collection::vec(
                prop::sample::select(vec!["(", ")", "[", "]", "{", "}", "a", ".", ",", ":", "?", "!", "-", "+",
                    "==", "in", "all", "x", "1", "'s'", "\"", "\\", "||", "&&", " ", "has", "size", "u", "b'", "0x", "e"]),
                0..400,
            )) {
                checked(&tokens.concat());
            }

            #[test]
            fn on_nested_expressions(text in expression()) {
                checked(&text);
            }
        }
    }

    #[test]
    fn deep_text_is_refused_before_the_parser_recurses() {
        // On a thread with the stack of an HTTP worker (2 MiB).
        let worker = std::thread::Builder::new().stack_size(2 << 20).spawn(|| {
            for depth in [32usize, 33, 200, 499] {
                for (open, close) in [("(", ")"), ("[", "]"), ("{1:", "}"), ("!(", ")"), ("a[", "]")] {
                    let text = format!("{}1{}", open.repeat(depth), close.repeat(depth));
                    let checked = when(&text).check(&["a"]);
                    if depth > budget::MAX_NESTING && text.chars().count() <= budget::MAX_CHARS {
                        assert_eq!(checked, Err(ConditionError::TooCostly(Limit::Nesting(depth))), "{text}");
                    }
                }
            }
            let ternary = vec!["a ? 1"; 120].join(" : ") + " : 2";
            let _ = when(&ternary).check(&["a"]);
            let unary = format!("{}a", "!".repeat(990));
            let _ = when(&unary).check(&["a"]);
            let unary = format!("{}a", "-".repeat(990));
            let _ = when(&unary).check(&["a"]);
            let members = format!("a{}", ".b".repeat(490));
            let _ = when(&members).check(&["a"]);
            let calls = format!("a{}", ".size()".repeat(120));
            let _ = when(&calls).check(&["a"]);
        });
        worker.unwrap().join().unwrap();
    }

    #[test]
    fn hidden_characters_are_shown_as_markers() {
        // An IBAN whose tail is reversed on screen by RIGHT-TO-LEFT OVERRIDE.
        let spoofed = "DE89 3704 0044 \u{202E}3210 5130 02";
        assert_eq!(marked(spoofed).as_deref(), Some("DE89 3704 0044 <U+202E>3210 5130 02"));
        assert_eq!(
            shown(spoofed),
            [Shown::Text("DE89 3704 0044 "), Shown::Hidden('\u{202E}'), Shown::Text("3210 5130 02")]
        );
        for c in [
            '\u{200B}',
            '\u{200C}',
            '\u{200D}',
            '\u{200E}',
            '\u{200F}',
            '\u{202A}',
            '\u{202B}',
            '\u{202C}',
            '\u{202D}',
            '\u{2066}',
            '\u{2067}',
            '\u{2068}',
            '\u{2069}',
            '\u{061C}',
            '\u{FEFF}',
            '\u{00AD}',
            '\u{2060}',
            '\u{2061}',
            '\u{180E}',
            '\u{E0041}',
            '\u{2028}',
            '\u{2029}',
            '\u{00A0}',
            '\u{3000}',
            '\u{0000}',
            '\n',
            '\t',
            '\u{0085}',
            '\u{FE0F}',
            '\u{3164}',
            '\u{F8FF}',
        ] {
            assert!(is_hidden(c), "U+{:04X}", u32::from(c));
            assert_eq!(marked(&format!("a{c}b")), Some(format!("a{}b", marker(c))));
        }
        for c in ['a', ' ', 'é', 'ß', 'א', 'ب', '中', '€', '😀', '0'] {
            assert!(!is_hidden(c), "{c}");
        }
        assert_eq!(marked("DE89 3704 0044 0532 0130 00"), None);
        assert_eq!(shown(""), []);
        assert_eq!(shown("\u{202E}"), [Shown::Hidden('\u{202E}')]);
    }

    #[test]
    fn combining_marks_over_digits_and_latin_are_shown_as_markers() {
        // U+0336 (long stroke overlay) through two digits of an IBAN: on screen
        // `0532` reads as two struck-out digits the user may skip over.
        let struck = "DE89 3704 0044 05\u{0336}3\u{0336}2 0130 00";
        assert_eq!(marked(struck).as_deref(), Some("DE89 3704 0044 05<U+0336>3<U+0336>2 0130 00"));
        assert_eq!(
            shown(struck),
            [
                Shown::Text("DE89 3704 0044 05"),
                Shown::Hidden('\u{0336}'),
                Shown::Text("3"),
                Shown::Hidden('\u{0336}'),
                Shown::Text("2 0130 00"),
            ]
        );
        assert!(has_hidden(struck));
        // Slashes and circles over ASCII, stacked marks, marks after a marker
        // or with nothing before them, and every enclosing mark.
        assert_eq!(marked("1\u{0338}0").as_deref(), Some("1<U+0338>0"));
        assert_eq!(marked("7\u{20E5}").as_deref(), Some("7<U+20E5>"));
        assert_eq!(marked("9\u{0336}\u{0336}").as_deref(), Some("9<U+0336><U+0336>"));
        assert_eq!(marked("a\u{200B}\u{0301}").as_deref(), Some("a<U+200B><U+0301>"));
        assert_eq!(marked("\u{0301}x").as_deref(), Some("<U+0301>x"));
        assert_eq!(marked("\u{0410}\u{20DD}").as_deref(), Some("\u{0410}<U+20DD>"));
        assert_eq!(marked("e\u{0301} €\u{0338}").as_deref(), Some("e<U+0301> €<U+0338>"));
        assert!(is_combining_mark('\u{0336}') && is_combining_mark('\u{20DD}') && !is_combining_mark('0'));
        // Scripts written with combining marks read as they are.
        for text in ["हिन्दी", "עִבְרִית", "مَرْحَبًا", "ภาษาไทย", "Café"] {
            assert_eq!(marked(text), None, "{text}");
        }
    }

    #[test]
    fn signatures_sit_side_by_side_and_catch_every_change() {
        let server = SigningKey::generate().unwrap();
        let confirmer = SigningKey::generate().unwrap();
        let trusted = [jwks(&[&server]), jwks(&[&confirmer])];
        let cheq = json!({"version": 1.0, "operation name": "book_flight", "inputs": {"parameters": []}});

        let mut jws = sign(&cheq, &server, Map::new());
        let mut claims = Map::new();
        claims.insert("sub".into(), "alice".into());
        countersign(&mut jws, &confirmer, claims).unwrap();
        let (payload, signed) = verify(&jws, &trusted).unwrap();
        assert_eq!(payload, canonical(&cheq));
        assert_eq!(signed.len(), 2);
        assert_eq!((signed[1].kid.as_str(), &signed[1].header["sub"]), (confirmer.kid(), &json!("alice")));

        // The payload altered after signing.
        let mut altered = jws.clone();
        let other = json!({"version": 1.0, "operation name": "book_flight", "inputs": {"parameters": [1]}});
        altered["payload"] = B64.encode(canonical(&other)).into();
        assert_eq!(verify(&altered, &trusted).unwrap_err(), VerifyError::BadSignature(server.kid().into()));
        // A claim altered after signing.
        let mut header: Value =
            serde_json::from_slice(&B64.decode(jws["signatures"][1]["protected"].as_str().unwrap()).unwrap()).unwrap();
        header["sub"] = "mallory".into();
        let mut relabeled = jws.clone();
        relabeled["signatures"][1]["protected"] = B64.encode(header.to_string()).into();
        assert_eq!(verify(&relabeled, &trusted).unwrap_err(), VerifyError::BadSignature(confirmer.kid().into()));
        // A signature by a key nobody trusts.
        let forger = SigningKey::generate().unwrap();
        let mut forged = sign(&cheq, &server, Map::new());
        countersign(&mut forged, &forger, Map::new()).unwrap();
        assert_eq!(verify(&forged, &trusted).unwrap_err(), VerifyError::UnknownKey(forger.kid().into()));
        assert!(matches!(verify(&json!({"payload": "e30"}), &trusted), Err(VerifyError::Malformed(_))));
    }

    #[test]
    fn every_jws_serialization_reads_as_the_general_one() {
        let key = SigningKey::generate().unwrap();
        let claims = json!({ "sub": "alice" }).as_object().unwrap().clone();
        let general = sign(&json!({ "operation": "book" }), &key, claims);
        let (payload, s) = (general["payload"].as_str().unwrap(), &general["signatures"][0]);
        let (protected, signature) = (s["protected"].as_str().unwrap(), s["signature"].as_str().unwrap());
        let flattened = json!({ "payload": payload, "protected": protected, "signature": signature });
        let wire = [general.to_string(), format!(" {flattened}\n"), format!("{protected}.{payload}.{signature}\r\n")];
        for body in wire {
            let read = from_wire(body.as_bytes()).unwrap();
            assert_eq!(read, general, "{body}");
            assert!(verify(&read, &[jwks(&[&key])]).is_ok());
        }
        // JSON that is no JWS is left for `verify` to refuse; the rest is not a JWS at all.
        assert_eq!(from_wire(b"{\"payload\": \"e30\"}").unwrap(), json!({ "payload": "e30" }));
        for body in ["yes please", "a.b", "a.b.c.d", "a.b+.c", "{not json", ""] {
            assert!(from_wire(body.as_bytes()).is_err(), "{body}");
        }
    }

    #[test]
    fn the_key_survives_a_restart_and_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let first = SigningKey::load_or_create(dir.path(), KEY_FILE).unwrap();
        let again = SigningKey::load_or_create(dir.path(), KEY_FILE).unwrap();
        assert_eq!(first.kid(), again.kid());
        assert_eq!(first.jwk(), again.jwk());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(dir.path().join(KEY_FILE), "not a key").unwrap();
        assert!(SigningKey::load_or_create(dir.path(), KEY_FILE).is_err());
    }
}
