//! The budget of a confirmation condition: a publisher's condition runs on
//! every call of its tool, on the server all tenants share, so what it may
//! cost is bounded before it is accepted (at pack, deploy and override),
//! from its text and its compiled form alone. See `docs/cheq.md`.
//!
//! The estimate counts steps: one per node evaluated, each node inside a
//! comprehension counted once per element it may iterate over (plus the
//! cost of binding its variables), an operation that walks collections
//! (`==`, `!=`, `in`, `+`) one more step per 8 elements of its arguments,
//! and one that scans strings (comparison, `size`, the string functions,
//! indexing) one more per 64. A collection the condition did not write
//! itself comes from the inputs, whose size at evaluation is bounded by
//! `MAX_INPUT_BYTES`: a larger call asks for confirmation without
//! evaluating the condition.

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
                            return Err(Limit::Function("matches with a pattern that is not a string literal".into()));
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
                let per_step = if WALKING.contains(&name) { ELEMENTS_PER_WALK_STEP } else { ELEMENTS_PER_SCAN_STEP };
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
