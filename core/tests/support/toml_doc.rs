//! A generator of TOML-shaped documents for the config and topology fuzz targets.
//!
//! Random bytes almost never form TOML, let alone TOML with the keys a parser knows, so a
//! byte-level fuzzer would spend its whole budget in the TOML lexer. This builds documents out
//! of the keys, table names and values the caller names (plus arbitrary ones and raw text), so
//! the random inputs reach the validation behind the parser: generator sizes, capacities, node
//! names, durations, addresses. Shared by the fuzz targets of several crates (`#[path]`).

#![allow(dead_code, reason = "each fuzz target uses part of it")]

use std::fmt::Write;

use bolero::{TypeGenerator, produce};

/// Either one of the caller's known words or an arbitrary string.
#[derive(Debug, Clone, TypeGenerator)]
pub enum Pick {
    Known(u8),
    Raw(#[generator(produce::<String>().with().len(0usize..24))] String),
}

impl Pick {
    fn resolve<'a>(&'a self, known: &[&'a str]) -> &'a str {
        match self {
            Pick::Known(i) if !known.is_empty() => known[*i as usize % known.len()],
            Pick::Known(_) => "",
            Pick::Raw(s) => s,
        }
    }
}

/// Integers at the edges validation is about: zero, one, the generators' limits and past them,
/// type limits, negatives. Sizes that are valid but large (thousands of racks) are left out:
/// they are correct to build and would only spend the fuzzing budget building them.
const EDGE_INTS: &[i64] = &[
    0,
    1,
    2,
    3,
    6,
    10,
    63,
    64,
    65,
    255,
    65_537,
    16_000_000,
    u32::MAX as i64,
    u32::MAX as i64 + 1,
    i64::MAX,
    -1,
    i64::MIN,
];

#[derive(Debug, Clone, TypeGenerator)]
pub enum Value {
    Str(Pick),
    Int(i64),
    Edge(u8),
    Float(f64),
    Bool(bool),
    Array(#[generator(produce::<Vec<Pick>>().with().len(0usize..5))] Vec<Pick>),
    IntArray(#[generator(produce::<Vec<i64>>().with().len(0usize..5))] Vec<i64>),
    /// Inserted as is: may break the syntax, which the parser must report, not panic on.
    Raw(#[generator(produce::<String>().with().len(0usize..24))] String),
}

#[derive(Debug, Clone, TypeGenerator)]
pub struct Entry {
    pub key: Pick,
    pub value: Value,
}

#[derive(Debug, Clone, TypeGenerator)]
pub struct Table {
    /// `[[name]]` (an array of tables) rather than `[name]`.
    pub array: bool,
    pub name: Pick,
    #[generator(produce::<Vec<Entry>>().with().len(0usize..6))]
    pub entries: Vec<Entry>,
}

#[derive(Debug, Clone, TypeGenerator)]
pub struct Doc {
    #[generator(produce::<Vec<Entry>>().with().len(0usize..6))]
    pub top: Vec<Entry>,
    #[generator(produce::<Vec<Table>>().with().len(0usize..10))]
    pub tables: Vec<Table>,
}

/// The words a document is built from.
pub struct Vocabulary<'a> {
    pub tables: &'a [&'a str],
    pub keys: &'a [&'a str],
    pub strings: &'a [&'a str],
}

fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn key(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        s.to_string()
    } else {
        quote(s)
    }
}

fn float(f: f64) -> String {
    if f.is_nan() {
        "nan".into()
    } else if f.is_infinite() {
        if f > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        format!("{f:?}")
    }
}

impl Value {
    fn render(&self, v: &Vocabulary) -> String {
        match self {
            Value::Str(p) => quote(p.resolve(v.strings)),
            Value::Int(i) => i.to_string(),
            Value::Edge(i) => EDGE_INTS[*i as usize % EDGE_INTS.len()].to_string(),
            Value::Float(f) => float(*f),
            Value::Bool(b) => b.to_string(),
            Value::Array(a) => {
                let items: Vec<String> = a.iter().map(|p| quote(p.resolve(v.strings))).collect();
                format!("[{}]", items.join(", "))
            }
            Value::IntArray(a) => {
                let items: Vec<String> = a.iter().map(i64::to_string).collect();
                format!("[{}]", items.join(", "))
            }
            Value::Raw(s) => s.clone(),
        }
    }
}

impl Doc {
    /// The document as TOML text (not necessarily valid TOML).
    pub fn render(&self, v: &Vocabulary) -> String {
        let mut out = String::new();
        let entries = |out: &mut String, es: &[Entry]| {
            for e in es {
                let _ = writeln!(
                    out,
                    "{} = {}",
                    key(e.key.resolve(v.keys)),
                    e.value.render(v)
                );
            }
        };
        entries(&mut out, &self.top);
        for t in &self.tables {
            let name = key(t.name.resolve(v.tables));
            if t.array {
                let _ = writeln!(out, "[[{name}]]");
            } else {
                let _ = writeln!(out, "[{name}]");
            }
            entries(&mut out, &t.entries);
        }
        out
    }
}

/// One line-level change to a seed document (TOML is line-oriented: each line is a header or
/// `key = value`).
#[derive(Debug, Clone, TypeGenerator)]
pub enum Edit {
    SetValue { line: u8, value: Value },
    SetKey { line: u8, key: Pick },
    Delete { line: u8 },
    Duplicate { line: u8 },
    Insert { line: u8, entry: Entry },
    InsertTable { line: u8, array: bool, name: Pick },
}

/// A valid seed document with a few edits: most inputs stay close enough to valid to get past
/// the parser into the checks behind it, which a document built from scratch rarely does.
#[derive(Debug, Clone, TypeGenerator)]
pub struct Mutated {
    pub seed: u8,
    #[generator(produce::<Vec<Edit>>().with().len(0usize..4))]
    pub edits: Vec<Edit>,
}

impl Mutated {
    pub fn render(&self, seeds: &[&str], v: &Vocabulary) -> String {
        let Some(seed) = seeds.get(self.seed as usize % seeds.len().max(1)) else {
            return String::new();
        };
        let mut lines: Vec<String> = seed
            .lines()
            .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
            .map(str::to_string)
            .collect();
        for e in &self.edits {
            let at = |line: u8, n: usize| line as usize % n.max(1);
            let n = lines.len();
            match e {
                Edit::SetValue { line, value } if n > 0 => {
                    let l = &mut lines[at(*line, n)];
                    if let Some((k, _)) = l.split_once('=') {
                        *l = format!("{k}= {}", value.render(v));
                    }
                }
                Edit::SetKey { line, key: k } if n > 0 => {
                    let l = &mut lines[at(*line, n)];
                    if let Some((_, val)) = l.split_once('=') {
                        *l = format!("{} ={val}", key(k.resolve(v.keys)));
                    }
                }
                Edit::Delete { line } if n > 0 => {
                    lines.remove(at(*line, n));
                }
                Edit::Duplicate { line } if n > 0 => {
                    let l = lines[at(*line, n)].clone();
                    lines.insert(at(*line, n), l);
                }
                Edit::Insert { line, entry } => {
                    let l = format!(
                        "{} = {}",
                        key(entry.key.resolve(v.keys)),
                        entry.value.render(v)
                    );
                    lines.insert(at(*line, n + 1), l);
                }
                Edit::InsertTable { line, array, name } => {
                    let name = key(name.resolve(v.tables));
                    let l = if *array {
                        format!("[[{name}]]")
                    } else {
                        format!("[{name}]")
                    };
                    lines.insert(at(*line, n + 1), l);
                }
                _ => {}
            }
        }
        let mut out = lines.join("\n");
        out.push('\n');
        out
    }
}
