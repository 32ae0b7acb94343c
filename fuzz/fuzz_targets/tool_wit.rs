//! Tools' WIT worlds made of arbitrary types, their manifests' input
//! constraints, and values of their types (shared by the `invocation` and
//! `component` targets, which include it with `#[path]`).
#![allow(dead_code)]

use arbitrary::{Result, Unstructured};
use plinth::manifest::{InputConstraints, ToolManifest};
use plinth::signature;
use std::fmt::Write as _;
use wasmtime::component::Val;
use wit_parser::Resolve;

const TOOL_WIT: &str = include_str!("../../wit/tool.wit");
const WASI_CONFIG: &str = include_str!("../../wit/deps/config/store.wit");
const WASI_CONFIG_WORLD: &str = include_str!("../../wit/deps/config/world.wit");

/// A `Resolve` holding Plinth's `plinth:tool` package (and what it uses).
pub fn base() -> Resolve {
    thread_local! {
        static BASE: Resolve = {
            let mut resolve = Resolve::default();
            resolve.push_str("config.wit", &format!("{WASI_CONFIG_WORLD}\n{WASI_CONFIG}")).unwrap();
            resolve.push_str("tool.wit", TOOL_WIT).unwrap();
            resolve
        };
    }
    BASE.with(Clone::clone)
}

/// Words names are made of (with a suffix that keeps them unique and clear
/// of WIT's keywords); upper-case ones break the A2T naming rules.
pub const WORDS: &[&str] = &["text", "mood", "city", "count", "very-sad", "a", "x", "is-ok", "id", "URL", "max", "b2"];

#[derive(Clone, Debug)]
pub enum Ty {
    Bool,
    Int(&'static str),
    F32,
    F64,
    Char,
    Str,
    List(Box<Ty>),
    Option(Box<Ty>),
    Result(Option<Box<Ty>>, Option<Box<Ty>>),
    Tuple(Vec<Ty>),
    /// A named type defined in the world: an index into `Tool::defs`.
    Named(usize),
}

#[derive(Clone, Debug)]
pub enum Def {
    Record(Vec<Field>),
    Variant(Vec<(String, String, Option<Ty>)>),
    Enum(Vec<(String, String)>),
    Flags(Vec<String>),
}

#[derive(Clone, Debug)]
pub struct Field {
    pub name: String,
    pub doc: String,
    pub ty: Ty,
}

#[derive(Debug)]
pub struct Tool {
    pub name: String,
    pub doc: String,
    pub defs: Vec<(String, String, Def)>,
    pub inputs: Vec<Field>,
    pub outputs: Vec<Field>,
}

const INTS: &[&str] = &["u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64"];

fn name(u: &mut Unstructured, prefix: char, i: usize) -> Result<String> {
    Ok(format!("{}-{prefix}{i}", WORDS[u.choose_index(WORDS.len())?]))
}

fn doc(u: &mut Unstructured) -> Result<String> {
    let text: String = match u.int_in_range(0..=7)? {
        0 => String::new(),
        1 => "y".repeat(u.int_in_range(1990..=2010)?),
        _ => u.arbitrary()?,
    };
    Ok(text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect())
}

impl Tool {
    pub fn arbitrary(u: &mut Unstructured) -> Result<Tool> {
        let mut defs = Vec::new();
        for i in 0..u.int_in_range(0..=5)? {
            let def = match u.int_in_range(0..=3)? {
                0 => Def::Record(fields(u, 'f', i, |u| ty(u, i, 2), 0..=4)?),
                1 => {
                    let mut cases = Vec::new();
                    for c in 0..u.int_in_range(1..=4)? {
                        let payload = if u.arbitrary()? { Some(ty(u, i, 2)?) } else { None };
                        cases.push((name(u, 'c', c)?, doc(u)?, payload));
                    }
                    Def::Variant(cases)
                }
                2 => Def::Enum((0..u.int_in_range(1..=5)?).map(|c| Ok((name(u, 'e', c)?, doc(u)?))).collect::<Result<_>>()?),
                _ => Def::Flags((0..u.int_in_range(1..=5)?).map(|c| name(u, 'g', c)).collect::<Result<_>>()?),
            };
            defs.push((name(u, 't', i)?, doc(u)?, def));
        }
        let enums: Vec<usize> = defs.iter().enumerate().filter(|(_, d)| matches!(d.2, Def::Enum(_))).map(|(i, _)| i).collect();
        let n = defs.len();
        let inputs = fields(
            u,
            'i',
            0,
            |u| {
                let scalar = match u.int_in_range(0..=7)? {
                    0 if !enums.is_empty() => Ty::Named(enums[u.choose_index(enums.len())?]),
                    0 | 1 => Ty::Bool,
                    2 | 3 => Ty::Int(INTS[u.choose_index(INTS.len())?]),
                    4 => return ty(u, n, 2), // most are not inputs A2T allows
                    _ => Ty::Str,
                };
                Ok(if u.ratio(1, 3)? { Ty::Option(Box::new(scalar)) } else { scalar })
            },
            0..=6,
        )?;
        let outputs = fields(u, 'o', 0, |u| ty(u, n, 3), 0..=5)?;
        Ok(Tool { name: format!("{}-w", WORDS[u.choose_index(WORDS.len())?]), doc: doc(u)?, defs, inputs, outputs })
    }

    pub fn wit(&self) -> String {
        let mut w = String::from("package fuzz:tool;\n");
        doc_lines(&mut w, &self.doc);
        let _ = writeln!(w, "world {} {{\n  use plinth:tool/types@0.1.0.{{tool-error}};", self.name);
        for (name, doc, def) in &self.defs {
            doc_lines(&mut w, doc);
            match def {
                Def::Record(fields) => {
                    let _ = writeln!(w, "record {name} {{");
                    field_lines(&mut w, self, fields);
                    w.push_str("}\n");
                }
                Def::Variant(cases) => {
                    let _ = writeln!(w, "variant {name} {{");
                    for (case, doc, payload) in cases {
                        doc_lines(&mut w, doc);
                        match payload {
                            Some(t) => {
                                let _ = writeln!(w, "{case}({}),", self.spell(t));
                            }
                            None => {
                                let _ = writeln!(w, "{case},");
                            }
                        }
                    }
                    w.push_str("}\n");
                }
                Def::Enum(cases) => {
                    let _ = writeln!(w, "enum {name} {{");
                    for (case, doc) in cases {
                        doc_lines(&mut w, doc);
                        let _ = writeln!(w, "{case},");
                    }
                    w.push_str("}\n");
                }
                Def::Flags(flags) => {
                    let _ = writeln!(w, "flags {name} {{ {} }}", flags.join(", "));
                }
            }
        }
        w.push_str("record input {\n");
        field_lines(&mut w, self, &self.inputs);
        w.push_str("}\nrecord output {\n");
        field_lines(&mut w, self, &self.outputs);
        w.push_str("}\nexport call: func(input: input) -> result<output, tool-error>;\n}\n");
        w
    }

    pub fn spell(&self, t: &Ty) -> String {
        match t {
            Ty::Bool => "bool".into(),
            Ty::Int(i) => (*i).into(),
            Ty::F32 => "f32".into(),
            Ty::F64 => "f64".into(),
            Ty::Char => "char".into(),
            Ty::Str => "string".into(),
            Ty::List(t) => format!("list<{}>", self.spell(t)),
            Ty::Option(t) => format!("option<{}>", self.spell(t)),
            Ty::Result(None, None) => "result".into(),
            Ty::Result(Some(t), None) => format!("result<{}>", self.spell(t)),
            Ty::Result(None, Some(e)) => format!("result<_, {}>", self.spell(e)),
            Ty::Result(Some(t), Some(e)) => format!("result<{}, {}>", self.spell(t), self.spell(e)),
            Ty::Tuple(ts) => format!("tuple<{}>", ts.iter().map(|t| self.spell(t)).collect::<Vec<_>>().join(", ")),
            Ty::Named(i) => self.defs[*i].0.clone(),
        }
    }

    /// The manifest's input constraints, some fitting, some not.
    pub fn manifest(&self, u: &mut Unstructured) -> Result<ToolManifest> {
        let mut manifest = ToolManifest::default();
        for field in &self.inputs {
            if u.ratio(2, 3)? {
                continue;
            }
            let c = InputConstraints {
                max_length: if u.arbitrary()? { Some(u.int_in_range(0..=40)?) } else { None },
                min: if u.arbitrary()? { Some(small_or_any(u)?) } else { None },
                max: if u.arbitrary()? { Some(small_or_any(u)?) } else { None },
                private: u.ratio(1, 3)?,
            };
            manifest.inputs.insert(signature::snake(&field.name), c);
        }
        Ok(manifest)
    }

    /// A value of type `t`, as a component would return it.
    pub fn val(&self, u: &mut Unstructured, t: &Ty, depth: u32) -> Result<Val> {
        let many = |u: &mut Unstructured| u.int_in_range(0..=if depth > 2 { 1 } else { 3 });
        Ok(match t {
            Ty::Bool => Val::Bool(u.arbitrary()?),
            Ty::Int("u8") => Val::U8(u.arbitrary()?),
            Ty::Int("u16") => Val::U16(u.arbitrary()?),
            Ty::Int("u32") => Val::U32(u.arbitrary()?),
            Ty::Int("u64") => Val::U64(u.arbitrary()?),
            Ty::Int("s8") => Val::S8(u.arbitrary()?),
            Ty::Int("s16") => Val::S16(u.arbitrary()?),
            Ty::Int("s32") => Val::S32(u.arbitrary()?),
            Ty::Int(_) => Val::S64(u.arbitrary()?),
            Ty::F32 => Val::Float32(u.arbitrary()?),
            Ty::F64 => Val::Float64(u.arbitrary()?),
            Ty::Char => Val::Char(u.arbitrary()?),
            Ty::Str => Val::String(u.arbitrary()?),
            Ty::List(t) => Val::List((0..many(u)?).map(|_| self.val(u, t, depth + 1)).collect::<Result<_>>()?),
            Ty::Option(t) => {
                Val::Option(if u.arbitrary()? { Some(Box::new(self.val(u, t, depth + 1)?)) } else { None })
            }
            Ty::Result(ok, err) => {
                let side = |u: &mut Unstructured, t: &Option<Box<Ty>>| -> Result<Option<Box<Val>>> {
                    Ok(match t {
                        Some(t) => Some(Box::new(self.val(u, t, depth + 1)?)),
                        None => None,
                    })
                };
                Val::Result(if u.arbitrary()? { Ok(side(u, ok)?) } else { Err(side(u, err)?) })
            }
            Ty::Tuple(ts) => Val::Tuple(ts.iter().map(|t| self.val(u, t, depth + 1)).collect::<Result<_>>()?),
            Ty::Named(i) => match &self.defs[*i].2 {
                Def::Record(fields) => Val::Record(
                    fields.iter().map(|f| Ok((f.name.clone(), self.val(u, &f.ty, depth + 1)?))).collect::<Result<_>>()?,
                ),
                Def::Variant(cases) => {
                    let (case, _, payload) = &cases[u.choose_index(cases.len())?];
                    let payload = match payload {
                        Some(t) => Some(Box::new(self.val(u, t, depth + 1)?)),
                        None => None,
                    };
                    Val::Variant(case.clone(), payload)
                }
                Def::Enum(cases) => Val::Enum(cases[u.choose_index(cases.len())?].0.clone()),
                Def::Flags(flags) => {
                    let mut set = Vec::new();
                    for flag in flags {
                        if u.arbitrary()? {
                            set.push(flag.clone());
                        }
                    }
                    Val::Flags(set)
                }
            },
        })
    }
}

fn small_or_any(u: &mut Unstructured) -> Result<i64> {
    if u.arbitrary()? { u.int_in_range(-300..=300) } else { u.arbitrary() }
}

fn fields(
    u: &mut Unstructured,
    prefix: char,
    at: usize,
    mut ty: impl FnMut(&mut Unstructured) -> Result<Ty>,
    count: std::ops::RangeInclusive<usize>,
) -> Result<Vec<Field>> {
    let mut out = Vec::new();
    for i in 0..u.int_in_range(count)? {
        out.push(Field { name: name(u, prefix, at * 16 + i)?, doc: doc(u)?, ty: ty(u)? });
    }
    Ok(out)
}

/// A type that names only the first `defined` named types (WIT types do
/// not recurse).
fn ty(u: &mut Unstructured, defined: usize, depth: u32) -> Result<Ty> {
    let top = if depth == 0 { 6 } else { 12 };
    Ok(match u.int_in_range(0..=top)? {
        0 => Ty::Bool,
        1 => Ty::Int(INTS[u.choose_index(INTS.len())?]),
        2 => Ty::F32,
        3 => Ty::F64,
        4 => Ty::Char,
        5 | 6 => Ty::Str,
        7 => Ty::List(Box::new(ty(u, defined, depth - 1)?)),
        8 => Ty::Option(Box::new(ty(u, defined, depth - 1)?)),
        9 => {
            let ok = if u.arbitrary()? { Some(Box::new(ty(u, defined, depth - 1)?)) } else { None };
            let err = if u.arbitrary()? { Some(Box::new(ty(u, defined, depth - 1)?)) } else { None };
            Ty::Result(ok, err)
        }
        10 => Ty::Tuple((0..u.int_in_range(1..=3)?).map(|_| ty(u, defined, depth - 1)).collect::<Result<_>>()?),
        _ if defined > 0 => Ty::Named(u.int_in_range(0..=defined - 1)?),
        _ => Ty::Str,
    })
}

fn doc_lines(w: &mut String, doc: &str) {
    if !doc.is_empty() {
        let _ = writeln!(w, "/// {doc}");
    }
}

fn field_lines(w: &mut String, tool: &Tool, fields: &[Field]) {
    for f in fields {
        doc_lines(w, &f.doc);
        let _ = writeln!(w, "{}: {},", f.name, tool.spell(&f.ty));
    }
}
