//! A small subset of CEL for CRD `x-kubernetes-validations` rules: literals (int, double,
//! string, bool, null, lists), `self` and `oldSelf`, field selection and indexing, `has()`,
//! `!`, `-`, `&&`, `||`, `? :`, comparisons, `in`, `+ - * / %`, and the functions `size`,
//! `int`, `double`, `string`, `duration`, `startsWith`, `endsWith`, `contains`, `matches`,
//! `all`, `exists`, `exists_one`, `filter`, `map`. That covers the rules CRDs usually carry
//! (`self == oldSelf`, `self.min <= self.max`, `duration(self.a) < duration(self.b)`,
//! `self.all(t, t.key != '')`). A rule outside the subset does not parse and is skipped by the
//! caller (`crate::structural`); see `docs/api-emulator.md`.

use serde_json::{Map, Value};

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A literal.
    Literal(Value),
    /// A list literal.
    List(Vec<Expr>),
    /// `self`, `oldSelf` or a macro variable.
    Ident(String),
    /// `e.field`.
    Select(Box<Expr>, String),
    /// `e[i]`.
    Index(Box<Expr>, Box<Expr>),
    /// `f(args)` or `target.f(args)`.
    Call(Option<Box<Expr>>, String, Vec<Expr>),
    /// `!e` or `-e`.
    Unary(char, Box<Expr>),
    /// `a op b`.
    Binary(String, Box<Expr>, Box<Expr>),
    /// `c ? a : b`.
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Int(i64),
    Double(f64),
    Str(String),
    Punct(&'static str),
}

const PUNCTS: &[&str] = &[
    "&&", "||", "==", "!=", "<=", ">=", "(", ")", "[", "]", ".", ",", "?", ":", "!", "-", "+", "*",
    "/", "%", "<", ">",
];

fn lex(text: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_digit() || chars[i] == '.' || chars[i] == 'e')
            {
                i += 1;
            }
            let literal: String = chars[start..i].iter().collect();
            if i < chars.len() && chars[i] == 'u' {
                i += 1;
            }
            if literal.contains(['.', 'e']) {
                tokens.push(Token::Double(
                    literal
                        .parse()
                        .map_err(|_| format!("bad number {literal}"))?,
                ));
            } else {
                tokens.push(Token::Int(
                    literal
                        .parse()
                        .map_err(|_| format!("bad number {literal}"))?,
                ));
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c == '"' || c == '\'' {
            let mut value = String::new();
            i += 1;
            loop {
                let Some(&d) = chars.get(i) else {
                    return Err("unterminated string".to_owned());
                };
                i += 1;
                if d == c {
                    break;
                }
                if d == '\\' {
                    let Some(&e) = chars.get(i) else {
                        return Err("unterminated escape".to_owned());
                    };
                    i += 1;
                    value.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                } else {
                    value.push(d);
                }
            }
            tokens.push(Token::Str(value));
        } else {
            let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
            let punct = PUNCTS
                .iter()
                .find(|p| rest.starts_with(**p))
                .ok_or_else(|| format!("unexpected character {c:?}"))?;
            i += punct.chars().count();
            tokens.push(Token::Punct(punct));
        }
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn eat(&mut self, punct: &str) -> bool {
        if matches!(self.peek(), Some(Token::Punct(p)) if *p == punct) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, punct: &str) -> Result<(), String> {
        if self.eat(punct) {
            Ok(())
        } else {
            Err(format!("expected {punct:?}"))
        }
    }

    fn expression(&mut self) -> Result<Expr, String> {
        let condition = self.binary(0)?;
        if self.eat("?") {
            let then = self.expression()?;
            self.expect(":")?;
            let otherwise = self.expression()?;
            return Ok(Expr::Cond(
                Box::new(condition),
                Box::new(then),
                Box::new(otherwise),
            ));
        }
        Ok(condition)
    }

    fn operator(&self) -> Option<(String, u8)> {
        let op = match self.peek()? {
            Token::Punct(p) => (*p).to_owned(),
            Token::Ident(i) if i == "in" => "in".to_owned(),
            _ => return None,
        };
        let precedence = match op.as_str() {
            "||" => 1,
            "&&" => 2,
            "==" | "!=" | "<" | "<=" | ">" | ">=" | "in" => 3,
            "+" | "-" => 4,
            "*" | "/" | "%" => 5,
            _ => return None,
        };
        Some((op, precedence))
    }

    /// Precedence climbing; operators of one level associate to the left.
    fn binary(&mut self, min: u8) -> Result<Expr, String> {
        let mut left = self.unary()?;
        while let Some((op, precedence)) = self.operator() {
            if precedence <= min {
                break;
            }
            self.at += 1;
            let right = self.binary(precedence)?;
            left = Expr::Binary(op, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.eat("!") {
            return Ok(Expr::Unary('!', Box::new(self.unary()?)));
        }
        if self.eat("-") {
            return Ok(Expr::Unary('-', Box::new(self.unary()?)));
        }
        self.member()
    }

    fn arguments(&mut self) -> Result<Vec<Expr>, String> {
        let mut args = Vec::new();
        if self.eat(")") {
            return Ok(args);
        }
        loop {
            args.push(self.expression()?);
            if self.eat(")") {
                return Ok(args);
            }
            self.expect(",")?;
        }
    }

    fn member(&mut self) -> Result<Expr, String> {
        let mut expr = self.primary()?;
        loop {
            if self.eat(".") {
                let Some(Token::Ident(name)) = self.peek().cloned() else {
                    return Err("expected a field name after '.'".to_owned());
                };
                self.at += 1;
                if self.eat("(") {
                    let args = self.arguments()?;
                    expr = Expr::Call(Some(Box::new(expr)), name, args);
                } else {
                    expr = Expr::Select(Box::new(expr), name);
                }
            } else if self.eat("[") {
                let index = self.expression()?;
                self.expect("]")?;
                expr = Expr::Index(Box::new(expr), Box::new(index));
            } else {
                return Ok(expr);
            }
        }
    }

    fn primary(&mut self) -> Result<Expr, String> {
        let token = self.peek().cloned().ok_or("unexpected end of the rule")?;
        self.at += 1;
        match token {
            Token::Int(n) => Ok(Expr::Literal(Value::from(n))),
            Token::Double(d) => Ok(Expr::Literal(Value::from(d))),
            Token::Str(s) => Ok(Expr::Literal(Value::String(s))),
            Token::Ident(name) => match name.as_str() {
                "true" => Ok(Expr::Literal(Value::Bool(true))),
                "false" => Ok(Expr::Literal(Value::Bool(false))),
                "null" => Ok(Expr::Literal(Value::Null)),
                _ if self.eat("(") => Ok(Expr::Call(None, name, self.arguments()?)),
                _ => Ok(Expr::Ident(name)),
            },
            Token::Punct("(") => {
                let inner = self.expression()?;
                self.expect(")")?;
                Ok(inner)
            }
            Token::Punct("[") => {
                let mut items = Vec::new();
                if !self.eat("]") {
                    loop {
                        items.push(self.expression()?);
                        if self.eat("]") {
                            break;
                        }
                        self.expect(",")?;
                    }
                }
                Ok(Expr::List(items))
            }
            Token::Punct(p) => Err(format!("unexpected {p:?}")),
        }
    }
}

/// Parses a rule.
///
/// # Errors
/// Syntax outside the subset.
pub fn parse(rule: &str) -> Result<Expr, String> {
    let mut parser = Parser {
        tokens: lex(rule)?,
        at: 0,
    };
    let expr = parser.expression()?;
    if parser.at != parser.tokens.len() {
        return Err(format!("unexpected {:?}", parser.tokens[parser.at]));
    }
    Ok(expr)
}

/// Whether an expression mentions `oldSelf` (a transition rule).
pub fn mentions_old_self(expr: &Expr) -> bool {
    match expr {
        Expr::Ident(name) => name == "oldSelf",
        Expr::Literal(_) => false,
        Expr::List(items) => items.iter().any(mentions_old_self),
        Expr::Select(e, _) | Expr::Unary(_, e) => mentions_old_self(e),
        Expr::Index(a, b) | Expr::Binary(_, a, b) => mentions_old_self(a) || mentions_old_self(b),
        Expr::Call(target, _, args) => {
            target.as_deref().is_some_and(mentions_old_self) || args.iter().any(mentions_old_self)
        }
        Expr::Cond(a, b, c) => mentions_old_self(a) || mentions_old_self(b) || mentions_old_self(c),
    }
}

/// A value during evaluation: JSON, or a duration (seconds).
#[derive(Debug, Clone, PartialEq)]
enum Val {
    Json(Value),
    Duration(f64),
}

fn json(v: Value) -> Val {
    Val::Json(v)
}

fn as_json(v: &Val) -> Result<&Value, String> {
    match v {
        Val::Json(j) => Ok(j),
        Val::Duration(_) => Err("a duration is not a JSON value".to_owned()),
    }
}

fn truthy(v: &Val) -> Result<bool, String> {
    as_json(v)?
        .as_bool()
        .ok_or_else(|| "no matching overload: expected a bool".to_owned())
}

/// Parses a Go duration (`1h30m`, `500ms`, `10s`) into seconds.
fn go_duration(text: &str) -> Result<f64, String> {
    let bad = || format!("invalid duration {text:?}");
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    if rest == "0" {
        return Ok(0.0);
    }
    let mut total = 0.0;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return Err(bad()),
        };
        total += number * scale;
        rest = &rest[unit_end..];
    }
    Ok(if negative { -total } else { total })
}

fn number(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn compare(op: &str, a: &Val, b: &Val) -> Result<bool, String> {
    let ordering = match (a, b) {
        (Val::Duration(x), Val::Duration(y)) => x.partial_cmp(y),
        (Val::Json(Value::String(x)), Val::Json(Value::String(y))) => Some(x.cmp(y)),
        (Val::Json(x), Val::Json(y)) if x.is_number() && y.is_number() => number(x)
            .zip(number(y))
            .and_then(|(x, y)| x.partial_cmp(&y)),
        (Val::Json(Value::Bool(x)), Val::Json(Value::Bool(y))) => Some(x.cmp(y)),
        _ => None,
    };
    let ordering = ordering.ok_or_else(|| format!("no matching overload for '{op}'"))?;
    Ok(match op {
        "<" => ordering.is_lt(),
        "<=" => ordering.is_le(),
        ">" => ordering.is_gt(),
        _ => ordering.is_ge(),
    })
}

fn equal(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::Json(x), Val::Json(y)) if x.is_number() && y.is_number() => number(x) == number(y),
        _ => a == b,
    }
}

struct Scope<'a> {
    vars: Vec<(String, Val)>,
    self_value: &'a Value,
    old_self: Option<&'a Value>,
}

impl Scope<'_> {
    fn lookup(&self, name: &str) -> Result<Val, String> {
        if let Some((_, v)) = self.vars.iter().rev().find(|(n, _)| n == name) {
            return Ok(v.clone());
        }
        match name {
            "self" => Ok(json(self.self_value.clone())),
            "oldSelf" => self
                .old_self
                .map(|o| json(o.clone()))
                .ok_or_else(|| "oldSelf is not available".to_owned()),
            other => Err(format!("undeclared reference to '{other}'")),
        }
    }
}

fn select(value: &Val, field: &str) -> Result<Val, String> {
    match as_json(value)? {
        Value::Object(map) => map
            .get(field)
            .cloned()
            .map(json)
            .ok_or_else(|| format!("no such key: {field}")),
        _ => Err(format!("no such key: {field}")),
    }
}

fn items(value: &Val) -> Result<Vec<Value>, String> {
    match as_json(value)? {
        Value::Array(a) => Ok(a.clone()),
        Value::Object(m) => Ok(m.keys().map(|k| Value::String(k.clone())).collect()),
        _ => Err("no matching overload: expected a list or map".to_owned()),
    }
}

fn eval(expr: &Expr, scope: &mut Scope<'_>) -> Result<Val, String> {
    match expr {
        Expr::Literal(v) => Ok(json(v.clone())),
        Expr::List(list) => {
            let mut out = Vec::new();
            for item in list {
                out.push(as_json(&eval(item, scope)?)?.clone());
            }
            Ok(json(Value::Array(out)))
        }
        Expr::Ident(name) => scope.lookup(name),
        Expr::Select(target, field) => select(&eval(target, scope)?, field),
        Expr::Index(target, index) => {
            let target = eval(target, scope)?;
            let index = eval(index, scope)?;
            match (as_json(&target)?, as_json(&index)?) {
                (Value::Array(a), Value::Number(n)) => n
                    .as_u64()
                    .and_then(|i| usize::try_from(i).ok())
                    .and_then(|i| a.get(i))
                    .cloned()
                    .map(json)
                    .ok_or_else(|| format!("index out of range: {n}")),
                (Value::Object(_), Value::String(k)) => select(&target, k),
                _ => Err("no matching overload for '[]'".to_owned()),
            }
        }
        Expr::Unary('!', e) => Ok(json(Value::Bool(!truthy(&eval(e, scope)?)?))),
        Expr::Unary(_, e) => match eval(e, scope)? {
            Val::Json(Value::Number(n)) => match n.as_i64() {
                Some(i) => Ok(json(Value::from(
                    i.checked_neg().ok_or("integer overflow")?,
                ))),
                None => Ok(json(Value::from(-n.as_f64().unwrap_or(0.0)))),
            },
            Val::Duration(d) => Ok(Val::Duration(-d)),
            _ => Err("no matching overload for '-'".to_owned()),
        },
        Expr::Cond(c, a, b) => {
            if truthy(&eval(c, scope)?)? {
                eval(a, scope)
            } else {
                eval(b, scope)
            }
        }
        Expr::Binary(op, a, b) => binary(op, a, b, scope),
        Expr::Call(target, name, args) => call(target.as_deref(), name, args, scope),
    }
}

fn binary(op: &str, a: &Expr, b: &Expr, scope: &mut Scope<'_>) -> Result<Val, String> {
    if op == "&&" || op == "||" {
        // CEL's commutative logic: an error on one side is absorbed when the other decides.
        let decisive = op == "||";
        let left = eval(a, scope).and_then(|v| truthy(&v));
        if left == Ok(decisive) {
            return Ok(json(Value::Bool(decisive)));
        }
        let right = eval(b, scope).and_then(|v| truthy(&v));
        return match (left, right) {
            (_, Ok(r)) if r == decisive => Ok(json(Value::Bool(decisive))),
            (Ok(_), Ok(_)) => Ok(json(Value::Bool(!decisive))),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
    }
    let left = eval(a, scope)?;
    let right = eval(b, scope)?;
    match op {
        "==" => Ok(json(Value::Bool(equal(&left, &right)))),
        "!=" => Ok(json(Value::Bool(!equal(&left, &right)))),
        "<" | "<=" | ">" | ">=" => Ok(json(Value::Bool(compare(op, &left, &right)?))),
        "in" => {
            let found = match as_json(&right)? {
                Value::Array(a) => a.iter().any(|x| equal(&json(x.clone()), &left)),
                Value::Object(m) => as_json(&left)?.as_str().is_some_and(|k| m.contains_key(k)),
                _ => return Err("no matching overload for 'in'".to_owned()),
            };
            Ok(json(Value::Bool(found)))
        }
        _ => arithmetic(op, &left, &right),
    }
}

fn arithmetic(op: &str, left: &Val, right: &Val) -> Result<Val, String> {
    match (left, right) {
        (Val::Duration(x), Val::Duration(y)) => match op {
            "+" => Ok(Val::Duration(x + y)),
            "-" => Ok(Val::Duration(x - y)),
            _ => Err(format!("no matching overload for '{op}'")),
        },
        (Val::Json(Value::String(x)), Val::Json(Value::String(y))) if op == "+" => {
            Ok(json(Value::String(format!("{x}{y}"))))
        }
        (Val::Json(Value::Array(x)), Val::Json(Value::Array(y))) if op == "+" => {
            Ok(json(Value::Array([x.clone(), y.clone()].concat())))
        }
        (Val::Json(Value::Number(x)), Val::Json(Value::Number(y))) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                let result = match op {
                    "+" => x.checked_add(y),
                    "-" => x.checked_sub(y),
                    "*" => x.checked_mul(y),
                    "/" => x.checked_div(y),
                    _ => x.checked_rem(y),
                };
                return result
                    .map(|r| json(Value::from(r)))
                    .ok_or_else(|| "integer overflow or division by zero".to_owned());
            }
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            let result = match op {
                "+" => x + y,
                "-" => x - y,
                "*" => x * y,
                "/" => x / y,
                _ => return Err("no matching overload for '%'".to_owned()),
            };
            Ok(json(Value::from(result)))
        }
        _ => Err(format!("no matching overload for '{op}'")),
    }
}

fn string_arg(args: &[Val], i: usize) -> Result<String, String> {
    args.get(i)
        .and_then(|a| as_json(a).ok())
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| "no matching overload: expected a string argument".to_owned())
}

fn call(
    target: Option<&Expr>,
    name: &str,
    args: &[Expr],
    scope: &mut Scope<'_>,
) -> Result<Val, String> {
    // Macros bind a variable and take the expression unevaluated.
    if let (
        Some(target),
        "all" | "exists" | "exists_one" | "filter" | "map",
        [Expr::Ident(var), body],
    ) = (target, name, args)
    {
        let collection = items(&eval(target, scope)?)?;
        let mut matched = 0usize;
        let mut out = Vec::new();
        for item in collection {
            scope.vars.push((var.clone(), json(item.clone())));
            let result = eval(body, scope);
            scope.vars.pop();
            let result = result?;
            if name == "map" {
                out.push(as_json(&result)?.clone());
            } else if truthy(&result)? {
                matched += 1;
                out.push(item);
            } else if name == "all" {
                return Ok(json(Value::Bool(false)));
            }
        }
        return Ok(json(match name {
            "all" => Value::Bool(true),
            "exists" => Value::Bool(matched > 0),
            "exists_one" => Value::Bool(matched == 1),
            _ => Value::Array(out),
        }));
    }
    if target.is_none() && name == "has" {
        let [Expr::Select(inner, field)] = args else {
            return Err("has() needs a field selection".to_owned());
        };
        let inner = eval(inner, scope)?;
        return Ok(json(Value::Bool(
            as_json(&inner)?
                .as_object()
                .is_some_and(|m: &Map<String, Value>| m.contains_key(field)),
        )));
    }
    let mut values = Vec::new();
    if let Some(t) = target {
        values.push(eval(t, scope)?);
    }
    for a in args {
        values.push(eval(a, scope)?);
    }
    let first = values
        .first()
        .cloned()
        .ok_or_else(|| format!("{name}() needs an argument"))?;
    match name {
        "size" => {
            let n = match as_json(&first)? {
                Value::String(s) => s.chars().count(),
                Value::Array(a) => a.len(),
                Value::Object(m) => m.len(),
                _ => return Err("no matching overload for size()".to_owned()),
            };
            Ok(json(Value::from(u64::try_from(n).unwrap_or(u64::MAX))))
        }
        "duration" => Ok(Val::Duration(go_duration(&string_arg(&values, 0)?)?)),
        "int" => match as_json(&first)? {
            Value::Number(n) => Ok(json(Value::from(n.as_f64().unwrap_or(0.0).trunc() as i64))),
            Value::String(s) => s
                .parse::<i64>()
                .map(|i| json(Value::from(i)))
                .map_err(|e| e.to_string()),
            _ => Err("no matching overload for int()".to_owned()),
        },
        "double" => match as_json(&first)? {
            Value::Number(n) => Ok(json(Value::from(n.as_f64().unwrap_or(0.0)))),
            Value::String(s) => s
                .parse::<f64>()
                .map(|d| json(Value::from(d)))
                .map_err(|e| e.to_string()),
            _ => Err("no matching overload for double()".to_owned()),
        },
        "string" => match as_json(&first)? {
            Value::String(s) => Ok(json(Value::String(s.clone()))),
            other => Ok(json(Value::String(other.to_string()))),
        },
        "startsWith" | "endsWith" | "contains" | "matches" => {
            let subject = string_arg(&values, 0)?;
            let argument = string_arg(&values, 1)?;
            let result = match name {
                "startsWith" => subject.starts_with(&argument),
                "endsWith" => subject.ends_with(&argument),
                "contains" => subject.contains(&argument),
                _ => regex::Regex::new(&argument)
                    .map_err(|e| e.to_string())?
                    .is_match(&subject),
            };
            Ok(json(Value::Bool(result)))
        }
        other => Err(format!(
            "function {other}() is not in the emulator's CEL subset"
        )),
    }
}

/// Evaluates a rule with `self` (and `oldSelf` for transition rules).
///
/// # Errors
/// A runtime error (`no such key: x`), as CEL reports it.
pub fn evaluate(expr: &Expr, self_value: &Value, old_self: Option<&Value>) -> Result<bool, String> {
    let mut scope = Scope {
        vars: Vec::new(),
        self_value,
        old_self,
    };
    truthy(&eval(expr, &mut scope)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn check(rule: &str, value: Value, old: Option<Value>) -> Result<bool, String> {
        evaluate(&parse(rule)?, &value, old.as_ref())
    }

    #[test]
    fn rules_crds_carry() {
        let spec = json!({"min": 1, "max": 3, "probeTimeout": "5s", "probeInterval": "10s",
            "taints": [{"key": "a"}, {"key": "b"}], "name": "web-1"});
        assert_eq!(check("self.min <= self.max", spec.clone(), None), Ok(true));
        assert_eq!(
            check(
                "duration(self.probeTimeout) < duration(self.probeInterval)",
                spec.clone(),
                None
            ),
            Ok(true)
        );
        assert_eq!(
            check("self.taints.all(t, t.key != '')", spec.clone(), None),
            Ok(true)
        );
        assert_eq!(
            check(
                "self.taints.exists(t, t.key == 'b') && size(self.taints) == 2",
                spec.clone(),
                None
            ),
            Ok(true)
        );
        assert_eq!(
            check(
                "self.name.startsWith('web') && self.name.matches('^[a-z]+-[0-9]$')",
                spec.clone(),
                None
            ),
            Ok(true)
        );
        assert_eq!(
            check("!has(self.other) || self.other > 0", spec.clone(), None),
            Ok(true)
        );
        assert_eq!(
            check(
                "has(self.min) ? self.min + 1 == 2 : false",
                spec.clone(),
                None
            ),
            Ok(true)
        );
        assert_eq!(
            check("'a' in ['a', 'b'] && 'min' in self", spec.clone(), None),
            Ok(true)
        );
        assert_eq!(
            check("self.missing == 1", spec.clone(), None),
            Err("no such key: missing".to_owned())
        );
        // CEL absorbs an error when the other side decides.
        assert_eq!(
            check("self.missing == 1 || true", spec.clone(), None),
            Ok(true)
        );
        assert_eq!(
            check("1 + 2 * 3 == 7 && 10 - 4 - 3 == 3", spec, None),
            Ok(true)
        );
    }

    #[test]
    fn transition_rules_compare_with_the_old_value() {
        let selector = json!({"matchLabels": {"role": "db"}});
        let rule = parse("self == oldSelf").unwrap();
        assert!(mentions_old_self(&rule));
        assert_eq!(evaluate(&rule, &selector, Some(&selector)), Ok(true));
        assert_eq!(
            evaluate(
                &rule,
                &json!({"matchLabels": {"role": "web"}}),
                Some(&selector)
            ),
            Ok(false)
        );
        assert!(!mentions_old_self(&parse("self.a == 1").unwrap()));
    }

    #[test]
    fn syntax_outside_the_subset_does_not_parse() {
        assert!(parse("self.x.@y").is_err());
        assert!(parse("{'a': 1}").is_err());
        assert!(parse("self.a ==").is_err());
    }

    proptest! {
        /// Integer comparison and arithmetic agree with Rust's.
        #[test]
        fn integers_agree_with_rust(a in -1000i64..1000, b in -1000i64..1000) {
            let v = json!({"a": a, "b": b});
            prop_assert_eq!(check("self.a < self.b", v.clone(), None), Ok(a < b));
            prop_assert_eq!(check("self.a + self.b == self.b + self.a", v.clone(), None), Ok(true));
            prop_assert_eq!(check(&format!("self.a - self.b == {}", a - b), v, None), Ok(true));
        }

        /// Parsing never panics.
        #[test]
        fn parsing_never_panics(text in ".{0,24}") {
            let _ = parse(&text);
        }
    }
}
