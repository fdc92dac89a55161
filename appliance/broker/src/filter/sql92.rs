//! SQL92 property filters (`expressionType = "SQL92"`, features.md §i.2): a hand-written
//! tokenizer and recursive-descent parser into an AST, and its evaluation against a message's
//! property string with RocketMQ's semantics — three-valued logic where a missing property is
//! null and only TRUE matches, Java's type promotion between Integer/Long/Double/Boolean and
//! the property strings, and the parse-time operand checks the Java broker applies (so an
//! expression refused by a Java broker is refused here too, with SUBSCRIPTION_PARSE_FAILED).
//!
//! Owns: [`Sql92Filter`] (compile + evaluate), [`Sql92Error`] (typed parse error), and
//! [`compile_predicate`], the [`super::Sql92Compiler`] the pull and heartbeat paths
//! call, backed by a small cache of compiled expressions (pulls compile on every request).
//!
//! Bounds: expression text ≤ [`MAX_EXPRESSION_LEN_BYTES`], tree depth ≤ [`MAX_NESTING_DEPTH`],
//! IN lists ≤ [`MAX_IN_LIST_LEN`] entries, ≤ [`MAX_TOKENS`] tokens. Nothing here panics on
//! any input; evaluation is iterative over AND/OR chains and recursive only to the bounded
//! depth.

use std::cmp::Ordering;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use ringmq_remoting::message::properties;

use super::PropertyPredicate;

/// Longest expression text accepted. Upstream has no limit; subscriptions travel in every
/// heartbeat and pull, so a bound keeps a hostile client from pinning a core in the parser.
pub const MAX_EXPRESSION_LEN_BYTES: usize = 16 * 1024;
/// Deepest expression tree accepted (parentheses, NOT, unary signs, comparison chains).
pub const MAX_NESTING_DEPTH: usize = 64;
/// Most string literals in one `IN (...)` list.
pub const MAX_IN_LIST_LEN: usize = 4096;
/// Most tokens in one expression.
pub const MAX_TOKENS: usize = 8192;
/// Compiled expressions kept for reuse (upstream caches 100 too).
pub const COMPILED_CACHE_ENTRIES: usize = 100;

/// Why an expression does not compile. The pull / heartbeat path answers
/// SUBSCRIPTION_PARSE_FAILED (23) with [`Sql92Error`]'s text as the remark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sql92Error {
    /// Byte offset in the expression where the problem was found.
    pub position: usize,
    pub message: String,
}

impl fmt::Display for Sql92Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SQL92 expression invalid at byte {}: {}",
            self.position, self.message
        )
    }
}

impl std::error::Error for Sql92Error {}

fn err<T>(position: usize, message: impl Into<String>) -> Result<T, Sql92Error> {
    Err(Sql92Error {
        position,
        message: message.into(),
    })
}

// ------------------------------------------------------------------------------------------
// Tokens
// ------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Not,
    And,
    Or,
    Between,
    In,
    True,
    False,
    Null,
    Is,
    Contains,
    StartsWith,
    EndsWith,
    /// Decimal integer literal text (without an `L` suffix).
    Decimal(String),
    /// Floating-point literal text.
    Float(String),
    Str(String),
    Ident(String),
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    LParen,
    RParen,
    Comma,
    Plus,
    Minus,
}

fn keyword(word: &str) -> Option<Tok> {
    // Keywords are case-insensitive; identifiers keep their case (property names are
    // case-sensitive).
    let t = match word.to_ascii_uppercase().as_str() {
        "NOT" => Tok::Not,
        "AND" => Tok::And,
        "OR" => Tok::Or,
        "BETWEEN" => Tok::Between,
        "IN" => Tok::In,
        "TRUE" => Tok::True,
        "FALSE" => Tok::False,
        "NULL" => Tok::Null,
        "IS" => Tok::Is,
        "CONTAINS" => Tok::Contains,
        "STARTSWITH" => Tok::StartsWith,
        "ENDSWITH" => Tok::EndsWith,
        _ => return None,
    };
    Some(t)
}

fn tokenize(text: &str) -> Result<Vec<(Tok, usize)>, Sql92Error> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if out.len() >= MAX_TOKENS {
            return err(i, format!("more than {MAX_TOKENS} tokens"));
        }
        let c = b[i];
        let start = i;
        match c {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0c => i += 1,
            b'-' if b.get(i + 1) == Some(&b'-') => {
                // A line comment only counts when a line break ends it (as upstream's lexer
                // defines it); otherwise the dashes are minus signs.
                match b[i..].iter().position(|&x| x == b'\n' || x == b'\r') {
                    Some(end) => i += end + 1,
                    None => {
                        out.push((Tok::Minus, i));
                        i += 1;
                    }
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => match text[i + 2..].find("*/") {
                Some(end) => i += 2 + end + 2,
                None => return err(i, "unterminated /* comment"),
            },
            b'\'' => {
                let mut s = String::new();
                i += 1;
                loop {
                    let Some(rel) = text[i..].find('\'') else {
                        return err(start, "unterminated string literal");
                    };
                    s.push_str(&text[i..i + rel]);
                    i += rel + 1;
                    if b.get(i) == Some(&b'\'') {
                        s.push('\'');
                        i += 1;
                    } else {
                        break;
                    }
                }
                out.push((Tok::Str(s), start));
            }
            b'0'..=b'9' | b'.' => {
                let (tok, end) = number(text, i)?;
                out.push((tok, start));
                i = end;
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' | b'$' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$')
                {
                    i += 1;
                }
                let word = &text[start..i];
                out.push((
                    keyword(word).unwrap_or_else(|| Tok::Ident(word.to_string())),
                    start,
                ));
            }
            b'=' => {
                out.push((Tok::Eq, i));
                i += 1;
            }
            b'<' => match b.get(i + 1) {
                Some(b'>') => {
                    out.push((Tok::Ne, i));
                    i += 2;
                }
                Some(b'=') => {
                    out.push((Tok::Le, i));
                    i += 2;
                }
                _ => {
                    out.push((Tok::Lt, i));
                    i += 1;
                }
            },
            b'>' => {
                if b.get(i + 1) == Some(&b'=') {
                    out.push((Tok::Ge, i));
                    i += 2;
                } else {
                    out.push((Tok::Gt, i));
                    i += 1;
                }
            }
            b'(' | b')' | b',' | b'+' | b'-' => {
                let t = match c {
                    b'(' => Tok::LParen,
                    b')' => Tok::RParen,
                    b',' => Tok::Comma,
                    b'+' => Tok::Plus,
                    _ => Tok::Minus,
                };
                out.push((t, i));
                i += 1;
            }
            _ => {
                let ch = text[i..].chars().next().unwrap_or('?');
                return err(i, format!("unexpected character {ch:?}"));
            }
        }
    }
    Ok(out)
}

/// Lexes a numeric literal at `start` with upstream's rules: `0` or `[1-9][0-9]*[lL]?` is a
/// decimal; `digits.digits?exp?`, `.digits exp?` or `digits exp` is a float; the longest match
/// wins.
fn number(text: &str, start: usize) -> Result<(Tok, usize), Sql92Error> {
    let b = text.as_bytes();
    let digits = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    let exponent = |i: usize| -> Option<usize> {
        if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
            let mut j = i + 1;
            if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
                j += 1;
            }
            let k = digits(j);
            if k > j {
                return Some(k);
            }
        }
        None
    };
    let int_end = digits(start);
    // Float forms.
    if int_end < b.len() && b[int_end] == b'.' {
        let frac_end = digits(int_end + 1);
        if int_end == start && frac_end == int_end + 1 {
            return err(start, "a lone '.' is not a number");
        }
        let end = exponent(frac_end).unwrap_or(frac_end);
        return Ok((Tok::Float(text[start..end].to_string()), end));
    }
    if int_end > start {
        if let Some(end) = exponent(int_end) {
            return Ok((Tok::Float(text[start..end].to_string()), end));
        }
    }
    // Decimal: "0" alone, or a non-zero-led run with an optional L suffix.
    if b[start] == b'0' {
        return Ok((Tok::Decimal("0".to_string()), start + 1));
    }
    let mut end = int_end;
    let literal = text[start..int_end].to_string();
    if end < b.len() && (b[end] == b'l' || b[end] == b'L') {
        end += 1;
    }
    Ok((Tok::Decimal(literal), end))
}

// ------------------------------------------------------------------------------------------
// AST
// ------------------------------------------------------------------------------------------

/// A literal value, typed as upstream types it.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StrOp {
    Contains,
    StartsWith,
    EndsWith,
}

#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Const(Literal),
    Prop(String),
    /// A property used where a boolean is expected: TRUE only for a Boolean value, which a
    /// property string never is, so it yields FALSE (or null when absent).
    BoolCast(Box<Expr>),
    Negate(Box<Expr>),
    Not(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Equal(Box<Expr>, Box<Expr>),
    Compare(CmpOp, Box<Expr>, Box<Expr>),
    In {
        prop: String,
        list: Vec<String>,
        negated: bool,
    },
    Str {
        op: StrOp,
        operand: Box<Expr>,
        search: String,
        negated: bool,
    },
}

impl Expr {
    /// Whether upstream treats the node as a boolean expression.
    fn is_boolean(&self) -> bool {
        match self {
            Expr::Const(l) => matches!(l, Literal::Null | Literal::Bool(_)),
            Expr::Prop(_) | Expr::Negate(_) => false,
            _ => true,
        }
    }
}

/// A parsed node with its tree depth, so depth is bounded while building (a left-deep
/// comparison chain never recurses in the parser, but its evaluation would).
struct Node {
    expr: Expr,
    depth: usize,
}

struct Parser<'a> {
    tokens: &'a [(Tok, usize)],
    pos: usize,
    text_len: usize,
    /// Recursion depth of the descent itself.
    descent: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a Tok> {
        self.tokens.get(self.pos).map(|(t, _)| t)
    }
    fn peek2(&self) -> Option<&'a Tok> {
        self.tokens.get(self.pos + 1).map(|(t, _)| t)
    }
    fn offset(&self) -> usize {
        self.tokens.get(self.pos).map_or(self.text_len, |(_, o)| *o)
    }
    fn bump(&mut self) -> Option<&'a Tok> {
        let t = self.tokens.get(self.pos).map(|(t, _)| t);
        self.pos += 1;
        t
    }
    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == Some(t) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, t: &Tok, what: &str) -> Result<(), Sql92Error> {
        if self.eat(t) {
            Ok(())
        } else {
            err(
                self.offset(),
                format!("expected {what}, found {}", self.describe()),
            )
        }
    }
    fn describe(&self) -> String {
        match self.peek() {
            None => "end of expression".to_string(),
            Some(t) => format!("{t:?}"),
        }
    }

    fn node(&self, expr: Expr, depth: usize) -> Result<Node, Sql92Error> {
        if depth > MAX_NESTING_DEPTH {
            return err(
                self.offset(),
                format!("expression nests deeper than {MAX_NESTING_DEPTH} levels"),
            );
        }
        Ok(Node { expr, depth })
    }

    fn enter(&mut self) -> Result<(), Sql92Error> {
        self.descent += 1;
        if self.descent > MAX_NESTING_DEPTH {
            return err(
                self.offset(),
                format!("expression nests deeper than {MAX_NESTING_DEPTH} levels"),
            );
        }
        Ok(())
    }

    fn as_boolean(&self, n: Node, at: usize) -> Result<Node, Sql92Error> {
        match n.expr {
            e if e.is_boolean() => Ok(Node {
                expr: e,
                depth: n.depth,
            }),
            Expr::Prop(name) => self.node(Expr::BoolCast(Box::new(Expr::Prop(name))), n.depth + 1),
            _ => err(at, "expression will not result in a boolean value"),
        }
    }

    fn or_expr(&mut self) -> Result<Node, Sql92Error> {
        let at = self.offset();
        let first = self.and_expr()?;
        if self.peek() != Some(&Tok::Or) {
            return Ok(first);
        }
        let first = self.as_boolean(first, at)?;
        let mut depth = first.depth;
        let mut items = vec![first.expr];
        while self.eat(&Tok::Or) {
            let at = self.offset();
            let n = self.and_expr()?;
            let n = self.as_boolean(n, at)?;
            depth = depth.max(n.depth);
            items.push(n.expr);
        }
        self.node(Expr::Or(items), depth + 1)
    }

    fn and_expr(&mut self) -> Result<Node, Sql92Error> {
        let at = self.offset();
        let first = self.equality_expr()?;
        if self.peek() != Some(&Tok::And) {
            return Ok(first);
        }
        let first = self.as_boolean(first, at)?;
        let mut depth = first.depth;
        let mut items = vec![first.expr];
        while self.eat(&Tok::And) {
            let at = self.offset();
            let n = self.equality_expr()?;
            let n = self.as_boolean(n, at)?;
            depth = depth.max(n.depth);
            items.push(n.expr);
        }
        self.node(Expr::And(items), depth + 1)
    }

    fn equality_expr(&mut self) -> Result<Node, Sql92Error> {
        let mut left = self.comparison_expr()?;
        loop {
            let at = self.offset();
            match self.peek() {
                Some(Tok::Eq) | Some(Tok::Ne) => {
                    let negated = self.bump() == Some(&Tok::Ne);
                    let right = self.comparison_expr()?;
                    check_equal_operand(&left.expr, at)?;
                    check_equal_operand(&right.expr, at)?;
                    if let (Expr::Const(_), Expr::Const(_)) = (&left.expr, &right.expr) {
                        if left.expr.is_boolean() && !right.expr.is_boolean() {
                            return err(
                                at,
                                "a boolean literal cannot be compared with a non-boolean literal",
                            );
                        }
                    }
                    let depth = left.depth.max(right.depth) + 1;
                    let eq = Expr::Equal(Box::new(left.expr), Box::new(right.expr));
                    left = if negated {
                        self.node(Expr::Not(Box::new(eq)), depth + 1)?
                    } else {
                        self.node(eq, depth)?
                    };
                }
                Some(Tok::Is) => {
                    self.bump();
                    let negated = self.eat(&Tok::Not);
                    self.expect(&Tok::Null, "NULL after IS")?;
                    let depth = left.depth + 1;
                    let eq = Expr::Equal(Box::new(left.expr), Box::new(Expr::Const(Literal::Null)));
                    left = if negated {
                        self.node(Expr::Not(Box::new(eq)), depth + 1)?
                    } else {
                        self.node(eq, depth)?
                    };
                }
                _ => return Ok(left),
            }
        }
    }

    fn comparison_expr(&mut self) -> Result<Node, Sql92Error> {
        let mut left = self.unary_expr()?;
        loop {
            let at = self.offset();
            let (negated, tok) = match (self.peek(), self.peek2()) {
                (
                    Some(Tok::Not),
                    Some(
                        t @ (Tok::Contains
                        | Tok::StartsWith
                        | Tok::EndsWith
                        | Tok::Between
                        | Tok::In),
                    ),
                ) => (true, t),
                (Some(t), _) => (false, t),
                (None, _) => return Ok(left),
            };
            match tok {
                Tok::Gt | Tok::Ge | Tok::Lt | Tok::Le => {
                    self.bump();
                    let op = match tok {
                        Tok::Gt => CmpOp::Gt,
                        Tok::Ge => CmpOp::Ge,
                        Tok::Lt => CmpOp::Lt,
                        _ => CmpOp::Le,
                    };
                    let right = self.unary_expr()?;
                    check_less_than_operand(&left.expr, at)?;
                    check_less_than_operand(&right.expr, at)?;
                    let depth = left.depth.max(right.depth) + 1;
                    left = self.node(
                        Expr::Compare(op, Box::new(left.expr), Box::new(right.expr)),
                        depth,
                    )?;
                }
                Tok::Contains | Tok::StartsWith | Tok::EndsWith => {
                    self.pos += if negated { 2 } else { 1 };
                    let op = match tok {
                        Tok::Contains => StrOp::Contains,
                        Tok::StartsWith => StrOp::StartsWith,
                        _ => StrOp::EndsWith,
                    };
                    let search = self.string_literal()?;
                    let depth = left.depth + 1;
                    left = self.node(
                        Expr::Str {
                            op,
                            operand: Box::new(left.expr),
                            search,
                            negated,
                        },
                        depth,
                    )?;
                }
                Tok::Between => {
                    self.pos += if negated { 2 } else { 1 };
                    let low = self.unary_expr()?;
                    self.expect(&Tok::And, "AND in BETWEEN")?;
                    let high = self.unary_expr()?;
                    if let (Expr::Const(l), Expr::Const(h)) = (&low.expr, &high.expr) {
                        if matches!(l, Literal::Null) || matches!(h, Literal::Null) {
                            return err(at, "BETWEEN bounds cannot be NULL");
                        }
                        match java_compare(val_of(h), val_of(l)) {
                            Ok(Ordering::Less) => return err(
                                at,
                                "BETWEEN lower bound must be less than or equal to the upper bound",
                            ),
                            Ok(_) => {}
                            Err(e) => {
                                return err(at, format!("BETWEEN bounds are not comparable: {e}"))
                            }
                        }
                    }
                    for n in [&left.expr, &low.expr, &high.expr] {
                        check_less_than_operand(n, at)?;
                    }
                    let depth = left.depth.max(low.depth).max(high.depth) + 2;
                    let value = left.expr;
                    let (a, b) = if negated {
                        (CmpOp::Lt, CmpOp::Gt)
                    } else {
                        (CmpOp::Ge, CmpOp::Le)
                    };
                    let first = Expr::Compare(a, Box::new(value.clone()), Box::new(low.expr));
                    let second = Expr::Compare(b, Box::new(value), Box::new(high.expr));
                    let combined = if negated {
                        Expr::Or(vec![first, second])
                    } else {
                        Expr::And(vec![first, second])
                    };
                    left = self.node(combined, depth)?;
                }
                Tok::In => {
                    self.pos += if negated { 2 } else { 1 };
                    let Expr::Prop(prop) = left.expr else {
                        return err(at, "IN needs a property on its left");
                    };
                    self.expect(&Tok::LParen, "'(' after IN")?;
                    let mut list = vec![self.string_literal()?];
                    while self.eat(&Tok::Comma) {
                        if list.len() >= MAX_IN_LIST_LEN {
                            return err(
                                self.offset(),
                                format!("IN list longer than {MAX_IN_LIST_LEN} entries"),
                            );
                        }
                        list.push(self.string_literal()?);
                    }
                    self.expect(&Tok::RParen, "')' closing the IN list")?;
                    left = self.node(
                        Expr::In {
                            prop,
                            list,
                            negated,
                        },
                        1,
                    )?;
                }
                _ => return Ok(left),
            }
        }
    }

    fn string_literal(&mut self) -> Result<String, Sql92Error> {
        match self.peek() {
            Some(Tok::Str(s)) => {
                self.pos += 1;
                Ok(s.clone())
            }
            _ => err(
                self.offset(),
                format!("expected a string literal, found {}", self.describe()),
            ),
        }
    }

    fn unary_expr(&mut self) -> Result<Node, Sql92Error> {
        self.enter()?;
        let at = self.offset();
        let result = match self.peek() {
            Some(Tok::Plus) => {
                self.bump();
                self.unary_expr()
            }
            Some(Tok::Minus) => {
                self.bump();
                let n = self.unary_expr()?;
                self.node(Expr::Negate(Box::new(n.expr)), n.depth + 1)
            }
            Some(Tok::Not) => {
                self.bump();
                let n = self.unary_expr()?;
                let n = self.as_boolean(n, at)?;
                self.node(Expr::Not(Box::new(n.expr)), n.depth + 1)
            }
            _ => self.primary_expr(),
        };
        self.descent -= 1;
        result
    }

    fn primary_expr(&mut self) -> Result<Node, Sql92Error> {
        let at = self.offset();
        let Some(tok) = self.bump() else {
            return err(at, "unexpected end of expression");
        };
        let lit = match tok {
            Tok::Str(s) => Literal::Str(s.clone()),
            Tok::Decimal(d) => decimal_literal(d, at)?,
            Tok::Float(f) => float_literal(f, at)?,
            Tok::True => Literal::Bool(true),
            Tok::False => Literal::Bool(false),
            Tok::Null => Literal::Null,
            Tok::Ident(name) => return self.node(Expr::Prop(name.clone()), 1),
            Tok::LParen => {
                self.enter()?;
                let inner = self.or_expr()?;
                self.descent -= 1;
                self.expect(&Tok::RParen, "')'")?;
                return Ok(inner);
            }
            other => return err(at, format!("unexpected {other:?}")),
        };
        self.node(Expr::Const(lit), 1)
    }
}

/// Integer literal: Integer when it fits, else Long; beyond Long it does not compile.
fn decimal_literal(text: &str, at: usize) -> Result<Literal, Sql92Error> {
    match text.parse::<i64>() {
        Ok(v) => Ok(i32::try_from(v).map_or(Literal::Long(v), Literal::Int)),
        Err(_) => err(
            at,
            format!("integer literal {text} does not fit a 64-bit long"),
        ),
    }
}

/// Float literal. Upstream refuses values below `Double.MIN_VALUE` (so a literal `0.0`) and
/// infinities; kept so both brokers accept the same expressions.
fn float_literal(text: &str, at: usize) -> Result<Literal, Sql92Error> {
    let v: f64 = text.parse().map_err(|_| Sql92Error {
        position: at,
        message: format!("bad number {text}"),
    })?;
    if v.is_infinite() {
        return err(at, format!("{text} is greater than the largest double"));
    }
    if v < f64::from_bits(1) {
        return err(
            at,
            format!("{text} is less than the smallest positive double"),
        );
    }
    Ok(Literal::Double(v))
}

/// `=` / `<>` refuse a NULL literal operand (use IS NULL).
fn check_equal_operand(e: &Expr, at: usize) -> Result<(), Sql92Error> {
    if let Expr::Const(Literal::Null) = e {
        return err(at, "NULL cannot be compared with = or <>; use IS NULL");
    }
    Ok(())
}

/// `<`, `>`, `<=`, `>=` and BETWEEN accept numeric literals, properties and negations only.
fn check_less_than_operand(e: &Expr, at: usize) -> Result<(), Sql92Error> {
    match e {
        Expr::Const(Literal::Int(_) | Literal::Long(_) | Literal::Double(_)) => Ok(()),
        Expr::Const(_) => err(
            at,
            "only numbers can be compared with <, >, <=, >= or BETWEEN",
        ),
        e if e.is_boolean() => err(
            at,
            "a boolean expression cannot be compared with <, >, <=, >= or BETWEEN",
        ),
        _ => Ok(()),
    }
}

// ------------------------------------------------------------------------------------------
// Evaluation
// ------------------------------------------------------------------------------------------

/// A value during evaluation; strings borrow from the expression or the message.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Val<'a> {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(&'a str),
}

fn val_of(l: &Literal) -> Val<'_> {
    match l {
        Literal::Null => Val::Null,
        Literal::Bool(b) => Val::Bool(*b),
        Literal::Int(i) => Val::Int(*i),
        Literal::Long(i) => Val::Long(*i),
        Literal::Double(d) => Val::Double(*d),
        Literal::Str(s) => Val::Str(s),
    }
}

/// An evaluation failure (a conversion that throws upstream): the message does not match.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EvalError(String);

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn parse_java_int(s: &str) -> Result<i32, EvalError> {
    s.parse()
        .map_err(|_| EvalError(format!("{s:?} is not an int")))
}

fn parse_java_long(s: &str) -> Result<i64, EvalError> {
    s.parse()
        .map_err(|_| EvalError(format!("{s:?} is not a long")))
}

/// `Double.valueOf`: surrounding chars ≤ ' ' ignored, optional `d`/`f` suffix, `NaN`,
/// `Infinity`, decimal and exponent forms. (Hex floats are not accepted.)
fn parse_java_double(s: &str) -> Result<f64, EvalError> {
    let bad = || EvalError(format!("{s:?} is not a double"));
    let t = s.trim_matches(|c: char| c <= ' ');
    let (sign, body) = match t.as_bytes().first() {
        Some(b'+') => (1.0, &t[1..]),
        Some(b'-') => (-1.0, &t[1..]),
        _ => (1.0, t),
    };
    match body {
        "NaN" => return Ok(f64::NAN),
        "Infinity" => return Ok(sign * f64::INFINITY),
        _ => {}
    }
    let body = body.strip_suffix(['d', 'D', 'f', 'F']).unwrap_or(body);
    let bytes = body.as_bytes();
    let mut i = 0;
    let int_start = i;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = i - int_start;
    let mut frac_digits = 0;
    if i < bytes.len() && bytes[i] == b'.' {
        i += 1;
        let fs = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        frac_digits = i - fs;
    }
    if int_digits + frac_digits == 0 {
        return Err(bad());
    }
    if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
        i += 1;
        if i < bytes.len() && (bytes[i] == b'+' || bytes[i] == b'-') {
            i += 1;
        }
        let es = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == es {
            return Err(bad());
        }
    }
    if i != bytes.len() {
        return Err(bad());
    }
    body.parse::<f64>().map(|v| sign * v).map_err(|_| bad())
}

/// `Boolean.valueOf(String)`: true only for "true" in any case.
fn java_bool(s: &str) -> bool {
    s.eq_ignore_ascii_case("true")
}

/// `Double.compare`: -0.0 < 0.0, every NaN equal and above +Infinity.
fn double_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.total_cmp(&b),
    }
}

/// `String.compareTo`: UTF-16 code-unit order.
fn java_str_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Upstream's comparison with type promotion (string conversion on): numbers widen to the
/// other side's type, a property string is parsed as the other side's type (a failed parse
/// is an error), and pairs without a rule compare as "less".
fn java_compare(l: Val<'_>, r: Val<'_>) -> Result<Ordering, EvalError> {
    use Val::*;
    Ok(match (l, r) {
        (Bool(a), Bool(b)) => a.cmp(&b),
        (Int(a), Int(b)) => a.cmp(&b),
        (Long(a), Long(b)) => a.cmp(&b),
        (Double(a), Double(b)) => double_cmp(a, b),
        (Str(a), Str(b)) => java_str_cmp(a, b),
        // Upstream casts the Boolean to String here and throws.
        (Bool(_), Str(_)) => {
            return Err(EvalError(
                "a boolean cannot be converted from a string here".into(),
            ))
        }
        (Int(a), Long(b)) => i64::from(a).cmp(&b),
        (Int(a), Double(b)) => double_cmp(f64::from(a), b),
        (Int(a), Str(s)) => a.cmp(&parse_java_int(s)?),
        (Long(a), Int(b)) => a.cmp(&i64::from(b)),
        (Long(a), Double(b)) => double_cmp(a as f64, b),
        (Long(a), Str(s)) => a.cmp(&parse_java_long(s)?),
        (Double(a), Int(b)) => double_cmp(a, f64::from(b)),
        (Double(a), Long(b)) => double_cmp(a, b as f64),
        (Double(a), Str(s)) => double_cmp(a, parse_java_double(s)?),
        (Str(s), Bool(b)) => java_bool(s).cmp(&b),
        (Str(s), Int(b)) => parse_java_int(s)?.cmp(&b),
        (Str(s), Long(b)) => parse_java_long(s)?.cmp(&b),
        (Str(s), Double(b)) => double_cmp(parse_java_double(s)?, b),
        _ => Ordering::Less,
    })
}

/// `Object.equals` for the value types: same type and same value (Double by bit pattern,
/// so NaN equals NaN and 0.0 differs from -0.0).
fn java_equals(l: Val<'_>, r: Val<'_>) -> bool {
    match (l, r) {
        (Val::Double(a), Val::Double(b)) => {
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
        }
        _ => l == r,
    }
}

/// Looks a property up by name.
pub trait PropertySource {
    fn property(&self, name: &str) -> Option<&str>;
}

/// A raw property string (`name 0x01 value 0x02 …`); the last occurrence of a name wins.
pub struct RawProperties<'a>(pub &'a str);

impl PropertySource for RawProperties<'_> {
    fn property(&self, name: &str) -> Option<&str> {
        properties::find(self.0, name)
    }
}

impl PropertySource for HashMap<String, String> {
    fn property(&self, name: &str) -> Option<&str> {
        self.get(name).map(String::as_str)
    }
}

fn eval<'a>(e: &'a Expr, props: &'a dyn PropertySource) -> Result<Val<'a>, EvalError> {
    Ok(match e {
        Expr::Const(l) => val_of(l),
        Expr::Prop(name) => props.property(name).map_or(Val::Null, Val::Str),
        Expr::BoolCast(inner) => match eval(inner, props)? {
            Val::Null => Val::Null,
            Val::Bool(b) => Val::Bool(b),
            _ => Val::Bool(false),
        },
        Expr::Negate(inner) => match eval(inner, props)? {
            Val::Int(i) => Val::Int(i.wrapping_neg()),
            Val::Long(i) => Val::Long(i.wrapping_neg()),
            Val::Double(d) => Val::Double(-d),
            _ => Val::Null,
        },
        Expr::Not(inner) => match eval(inner, props)? {
            Val::Null => Val::Null,
            Val::Bool(b) => Val::Bool(!b),
            other => return Err(EvalError(format!("NOT applied to a non-boolean {other:?}"))),
        },
        Expr::And(items) => {
            let mut saw_null = false;
            for item in items {
                match eval(item, props)? {
                    Val::Bool(false) => return Ok(Val::Bool(false)),
                    Val::Bool(true) => {}
                    _ => saw_null = true,
                }
            }
            if saw_null {
                Val::Null
            } else {
                Val::Bool(true)
            }
        }
        Expr::Or(items) => {
            let mut saw_null = false;
            for item in items {
                match eval(item, props)? {
                    Val::Bool(true) => return Ok(Val::Bool(true)),
                    Val::Bool(false) => {}
                    _ => saw_null = true,
                }
            }
            if saw_null {
                Val::Null
            } else {
                Val::Bool(false)
            }
        }
        Expr::Equal(l, r) => {
            let lv = eval(l, props)?;
            let rv = eval(r, props)?;
            match (lv, rv) {
                (Val::Null, Val::Null) => Val::Bool(true),
                (Val::Null, _) => Val::Null,
                (_, Val::Null) => Val::Bool(false),
                _ if java_equals(lv, rv) => Val::Bool(true),
                _ => Val::Bool(java_compare(lv, rv)? == Ordering::Equal),
            }
        }
        Expr::Compare(op, l, r) => {
            let lv = eval(l, props)?;
            if lv == Val::Null {
                return Ok(Val::Null);
            }
            let rv = eval(r, props)?;
            if rv == Val::Null {
                return Ok(Val::Null);
            }
            let ord = match (lv, rv) {
                // Two strings are ordered as numbers or not at all.
                (Val::Str(a), Val::Str(b)) => {
                    double_cmp(parse_java_double(a)?, parse_java_double(b)?)
                }
                _ => java_compare(lv, rv)?,
            };
            Val::Bool(match op {
                CmpOp::Lt => ord == Ordering::Less,
                CmpOp::Le => ord != Ordering::Greater,
                CmpOp::Gt => ord == Ordering::Greater,
                CmpOp::Ge => ord != Ordering::Less,
            })
        }
        Expr::In {
            prop,
            list,
            negated,
        } => match props.property(prop) {
            None => Val::Null,
            Some(v) => Val::Bool(list.iter().any(|s| s == v) ^ negated),
        },
        Expr::Str {
            op,
            operand,
            search,
            negated,
        } => {
            if search.is_empty() {
                return Ok(Val::Bool(false));
            }
            match eval(operand, props)? {
                Val::Str(s) => {
                    let hit = match op {
                        StrOp::Contains => s.contains(search.as_str()),
                        StrOp::StartsWith => s.starts_with(search.as_str()),
                        StrOp::EndsWith => s.ends_with(search.as_str()),
                    };
                    Val::Bool(hit ^ negated)
                }
                // Null or not a string: FALSE (not null), for the negated forms too.
                _ => Val::Bool(false),
            }
        }
    })
}

/// A compiled SQL92 subscription expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Sql92Filter {
    source: String,
    root: Expr,
}

impl Sql92Filter {
    /// Parses `expression`; errors name the byte offset and the problem.
    pub fn compile(expression: &str) -> Result<Self, Sql92Error> {
        if expression.len() > MAX_EXPRESSION_LEN_BYTES {
            return err(
                MAX_EXPRESSION_LEN_BYTES,
                format!(
                    "expression is {} bytes, more than {MAX_EXPRESSION_LEN_BYTES}",
                    expression.len()
                ),
            );
        }
        let tokens = tokenize(expression)?;
        if tokens.is_empty() {
            return err(0, "empty expression");
        }
        let mut p = Parser {
            tokens: &tokens,
            pos: 0,
            text_len: expression.len(),
            descent: 0,
        };
        let root = p.or_expr()?;
        if p.pos < tokens.len() {
            return err(
                p.offset(),
                format!("unexpected {} after the expression", p.describe()),
            );
        }
        let root = p.as_boolean(root, 0)?;
        Ok(Self {
            source: expression.to_string(),
            root: root.expr,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Three-valued result: `Some(true)` / `Some(false)`, `None` for null (or an evaluation
    /// error, which upstream also treats as "not matched").
    pub fn evaluate(&self, props: &dyn PropertySource) -> Option<bool> {
        match eval(&self.root, props) {
            Ok(Val::Bool(b)) => Some(b),
            Ok(_) => None,
            Err(e) => {
                tracing::trace!(
                    expression = self.source,
                    "SQL92 evaluation error, message not matched: {e}"
                );
                None
            }
        }
    }

    /// Whether a message with these properties is delivered: only TRUE matches.
    pub fn matches(&self, props: &dyn PropertySource) -> bool {
        self.evaluate(props) == Some(true)
    }

    /// [`Self::matches`] over a raw property string.
    pub fn matches_properties(&self, properties: &str) -> bool {
        self.matches(&RawProperties(properties))
    }
}

impl PropertyPredicate for Sql92Filter {
    fn matches(&self, properties: &str) -> bool {
        self.matches_properties(properties)
    }
}

struct CompiledCache {
    map: HashMap<String, Result<Arc<Sql92Filter>, Sql92Error>>,
    order: VecDeque<String>,
}

fn cache() -> &'static Mutex<CompiledCache> {
    static CACHE: OnceLock<Mutex<CompiledCache>> = OnceLock::new();
    CACHE.get_or_init(|| {
        Mutex::new(CompiledCache {
            map: HashMap::new(),
            order: VecDeque::new(),
        })
    })
}

/// Compiles with a bounded cache of results (failures cached too, so a bad subscription
/// does not cost a parse per pull).
pub fn compile_cached(expression: &str) -> Result<Arc<Sql92Filter>, Sql92Error> {
    if let Ok(c) = cache().lock() {
        if let Some(hit) = c.map.get(expression) {
            return hit.clone();
        }
    }
    let result = Sql92Filter::compile(expression).map(Arc::new);
    if expression.len() <= MAX_EXPRESSION_LEN_BYTES {
        if let Ok(mut c) = cache().lock() {
            if !c.map.contains_key(expression) {
                while c.order.len() >= COMPILED_CACHE_ENTRIES {
                    if let Some(old) = c.order.pop_front() {
                        c.map.remove(&old);
                    }
                }
                c.order.push_back(expression.to_string());
                c.map.insert(expression.to_string(), result.clone());
            }
        }
    }
    result
}

/// The [`super::Sql92Compiler`]: `ctx.sql92 = Some(filter::sql92::compile_predicate)`.
/// The error text goes into the SUBSCRIPTION_PARSE_FAILED remark.
pub fn compile_predicate(expression: &str) -> Result<Arc<dyn PropertyPredicate>, String> {
    compile_cached(expression)
        .map(|f| f as Arc<dyn PropertyPredicate>)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> String {
        let mut s = String::new();
        for (k, v) in pairs {
            s.push_str(k);
            s.push('\u{1}');
            s.push_str(v);
            s.push('\u{2}');
        }
        s
    }

    fn check(expr: &str, pairs: &[(&str, &str)]) -> bool {
        Sql92Filter::compile(expr)
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
            .matches_properties(&props(pairs))
    }

    #[test]
    fn spec_table() {
        // (expression, properties, expected)
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);
        let cases: &[Case<'_>] = &[
            ("a = 1", &[("a", "1")], true),
            ("a = 1", &[("a", "2")], false),
            ("a = 1", &[], false),
            ("a <> 1", &[], false),
            ("NOT (a = 1)", &[], false),
            ("a IS NULL", &[], true),
            ("a IS NULL", &[("a", "x")], false),
            ("a IS NOT NULL", &[("a", "x")], true),
            ("a is not null", &[], false),
            ("a > 5", &[("a", "10")], true),
            ("a > 5", &[("a", "abc")], false),
            ("a > 5.5", &[("a", "5.6")], true),
            ("a >= 3 AND a <= 3", &[("a", "3")], true),
            ("a < -1", &[("a", "-2")], true),
            ("a = 3000000000", &[("a", "3000000000")], true),
            ("a = 5", &[("a", "3000000000")], false),
            ("a BETWEEN 1 AND 3", &[("a", "2")], true),
            ("a BETWEEN 1 AND 3", &[("a", "4")], false),
            ("a NOT BETWEEN 1 AND 3", &[("a", "4")], true),
            ("a NOT BETWEEN 1 AND 3", &[("a", "2")], false),
            ("a NOT BETWEEN 1 AND 3", &[], false),
            ("a IN ('x', 'y')", &[("a", "y")], true),
            ("a IN ('x', 'y')", &[("a", "z")], false),
            ("a NOT IN ('x', 'y')", &[("a", "z")], true),
            ("a NOT IN ('x', 'y')", &[], false),
            ("a = 'it''s'", &[("a", "it's")], true),
            ("a = 'x' OR b = 'y'", &[("b", "y")], true),
            ("a = 'x' AND b = 'y'", &[("b", "y")], false),
            ("a = 'x' OR b = 'y'", &[("a", "q")], false),
            ("TAGS = 'TagA'", &[("TAGS", "TagA")], true),
            ("a = TRUE", &[("a", "TRUE")], true),
            ("a = TRUE", &[("a", "yes")], false),
            ("a = FALSE", &[("a", "no")], true),
            ("TRUE", &[], true),
            ("FALSE OR TRUE", &[], true),
            ("a", &[("a", "true")], false),
            ("a CONTAINS 'bc'", &[("a", "abcd")], true),
            ("a NOT CONTAINS 'bc'", &[("a", "abcd")], false),
            ("a NOT CONTAINS 'zz'", &[], false),
            ("a STARTSWITH 'ab'", &[("a", "abcd")], true),
            ("a ENDSWITH 'cd'", &[("a", "abcd")], true),
            ("a NOT ENDSWITH 'cd'", &[("a", "abce")], true),
            ("a CONTAINS ''", &[("a", "abcd")], false),
            ("a = 1.0", &[("a", "1")], true),
            ("a = 1", &[("a", "1.0")], false),
            ("a > b", &[("a", "2"), ("b", "10")], false),
            ("a > b", &[("a", "20"), ("b", "10")], true),
            ("a = b", &[("a", "x"), ("b", "x")], true),
            ("-a = -5", &[("a", "5")], false),
            ("a = -5", &[("a", "-5")], true),
            ("a = +5", &[("a", "+5")], true),
            ("a > 1 -- comment\n AND a < 3", &[("a", "2")], true),
            ("/* c */ a = 'x'", &[("a", "x")], true),
            (
                "(a = 'x' OR a = 'y') AND NOT (b = 'z')",
                &[("a", "y"), ("b", "w")],
                true,
            ),
            ("a = 'x' and b = 'y' or c = 'z'", &[("c", "z")], true),
            ("a = 10L", &[("a", "10")], true),
            ("a > 1E1", &[("a", "11")], true),
            ("a > .5", &[("a", "0.75")], true),
            ("a = 'x' = TRUE", &[("a", "x")], true),
            ("NULL", &[], false),
            ("NOT a", &[("a", "x")], true),
        ];
        for (expr, pairs, expected) in cases {
            assert_eq!(check(expr, pairs), *expected, "{expr} with {pairs:?}");
        }
    }

    #[test]
    fn three_valued_logic() {
        let f = Sql92Filter::compile("a = 1 OR b = 1").unwrap();
        assert_eq!(f.evaluate(&RawProperties(&props(&[("a", "2")]))), None);
        assert_eq!(
            f.evaluate(&RawProperties(&props(&[("a", "2"), ("b", "2")]))),
            Some(false)
        );
        let f = Sql92Filter::compile("a = 1 AND b = 1").unwrap();
        assert_eq!(
            f.evaluate(&RawProperties(&props(&[("a", "2")]))),
            Some(false)
        );
        assert_eq!(f.evaluate(&RawProperties(&props(&[("a", "1")]))), None);
    }

    #[test]
    fn parse_errors_are_typed() {
        for bad in [
            "",
            "a =",
            "a = 'x",
            "a IN ()",
            "a IN (1, 2)",
            "'a' IN ('x')",
            "a = NULL",
            "a <> NULL",
            "a > 'x'",
            "a > TRUE",
            "TRUE = 5",
            "a BETWEEN 3 AND 1",
            "a BETWEEN 'a' AND 'b'",
            "(a = 1) > 2",
            "5",
            "'str'",
            "a = 1 b",
            "a ! b",
            "a = 99999999999999999999",
            "a = 0.0",
            "/* open",
            "a == 1",
            "a = 007",
            "(((a = 1)",
            "a CONTAINS b",
        ] {
            let e = Sql92Filter::compile(bad);
            assert!(e.is_err(), "{bad:?} should not compile, got {e:?}");
        }
        let e = Sql92Filter::compile("a = 'x' AND").unwrap_err();
        assert_eq!(e.position, 11);
        assert!(compile_predicate("a >")
            .unwrap_err()
            .contains("SQL92 expression invalid"));
    }

    #[test]
    fn bounds_are_enforced() {
        let deep = format!(
            "{}a = 1{}",
            "(".repeat(MAX_NESTING_DEPTH + 1),
            ")".repeat(MAX_NESTING_DEPTH + 1)
        );
        assert!(Sql92Filter::compile(&deep).is_err());
        let ok = format!("{}a = 1{}", "(".repeat(10), ")".repeat(10));
        assert!(Sql92Filter::compile(&ok).is_ok());
        let nots = format!("{}a = 1", "NOT ".repeat(MAX_NESTING_DEPTH + 2));
        assert!(Sql92Filter::compile(&nots).is_err());
        let chain = format!("TRUE{}", " = TRUE".repeat(MAX_NESTING_DEPTH + 2));
        assert!(Sql92Filter::compile(&chain).is_err());
        let long = format!("a = '{}'", "x".repeat(MAX_EXPRESSION_LEN_BYTES));
        assert!(Sql92Filter::compile(&long).is_err());
        let list: Vec<String> = (0..=MAX_IN_LIST_LEN).map(|i| format!("'{i}'")).collect();
        assert!(Sql92Filter::compile(&format!("a IN ({})", list.join(","))).is_err());
        // A long OR chain is flat, not deep.
        let ors: Vec<String> = (0..500).map(|i| format!("a = '{i}'")).collect();
        let f = Sql92Filter::compile(&ors.join(" OR ")).unwrap();
        assert!(f.matches_properties(&props(&[("a", "499")])));
    }

    #[test]
    fn java_number_parsing() {
        assert_eq!(parse_java_double(" 1.5d "), Ok(1.5));
        assert_eq!(parse_java_double("-Infinity"), Ok(f64::NEG_INFINITY));
        assert!(parse_java_double("inf").is_err());
        assert!(parse_java_double("1e").is_err());
        assert!(parse_java_double(".").is_err());
        assert_eq!(parse_java_int("+7"), Ok(7));
        assert!(parse_java_int(" 7").is_err());
        assert_eq!(
            java_compare(Val::Str("b"), Val::Str("a")),
            Ok(Ordering::Greater)
        );
        assert_eq!(
            java_compare(Val::Int(1), Val::Bool(true)),
            Ok(Ordering::Less)
        );
    }

    #[test]
    fn cache_returns_same_compilation() {
        let a = compile_cached("cachedProp = 'v'").unwrap();
        let b = compile_cached("cachedProp = 'v'").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(compile_cached("cachedProp =").is_err());
        assert!(compile_cached("cachedProp =").is_err());
        let p = compile_predicate("cachedProp = 'v'").unwrap();
        assert!(p.matches(&props(&[("cachedProp", "v")])));
    }

    /// xorshift64*: deterministic pseudo-random input without a dev-dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn random_expressions_never_panic() {
        const PIECES: &[&str] = &[
            "a",
            "b",
            "TAGS",
            "(",
            ")",
            "NOT",
            "AND",
            "OR",
            "=",
            "<>",
            "<",
            "<=",
            ">",
            ">=",
            "IS",
            "NULL",
            "BETWEEN",
            "IN",
            "CONTAINS",
            "STARTSWITH",
            "ENDSWITH",
            "TRUE",
            "FALSE",
            "'x'",
            "'1'",
            "''",
            "1",
            "0",
            "-",
            "+",
            "2.5",
            "1E3",
            "9999999999",
            ",",
            "--",
            "\n",
            "/*",
            "*/",
            "'",
            ".",
            "$v",
            "5L",
            "é",
        ];
        let values = [
            "1",
            "x",
            "true",
            "2.5",
            "-3",
            "",
            "NaN",
            "1e400",
            "9999999999999999999",
        ];
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..20_000 {
            let n = 1 + rng.below(14);
            let text: Vec<&str> = (0..n).map(|_| PIECES[rng.below(PIECES.len())]).collect();
            let text = text.join(" ");
            if let Ok(f) = Sql92Filter::compile(&text) {
                let p = props(&[
                    ("a", values[rng.below(values.len())]),
                    ("b", values[rng.below(values.len())]),
                ]);
                let _ = f.matches_properties(&p);
                let _ = f.matches_properties("");
            }
        }
        // Raw bytes too (as lossy UTF-8).
        for _ in 0..5_000 {
            let len = rng.below(40);
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let text = String::from_utf8_lossy(&bytes);
            if let Ok(f) = Sql92Filter::compile(&text) {
                let _ = f.matches_properties("a\u{1}1\u{2}");
            }
        }
    }

    #[test]
    fn well_formed_random_comparisons_agree_with_a_model() {
        // a <op> n over integer-valued properties must agree with plain integer comparison.
        let mut rng = Rng(42);
        for _ in 0..2_000 {
            let v = rng.below(21) as i64 - 10;
            let n = rng.below(21) as i64 - 10;
            let (op, want) = match rng.below(6) {
                0 => ("=", v == n),
                1 => ("<>", v != n),
                2 => ("<", v < n),
                3 => ("<=", v <= n),
                4 => (">", v > n),
                _ => (">=", v >= n),
            };
            let expr = format!("a {op} {n}");
            assert_eq!(
                check(&expr, &[("a", &v.to_string())]),
                want,
                "{expr} with a={v}"
            );
        }
    }
}
