//! Chat templates, rendered the way `transformers` renders them.
//!
//! `transformers` compiles a template in a sandboxed Jinja2 environment with `trim_blocks=True`,
//! `lstrip_blocks=True` and the `loopcontrols` extension, replaces `tojson` with its own
//! (`json.dumps` with `ensure_ascii=False`, no HTML escaping) and adds the globals
//! `raise_exception` and `strftime_now`. Python's string, dict and list methods come from
//! minijinja-contrib's `pycompat`; `{{ value }}` prints booleans, `None`, lists and dicts as
//! Python's `str` does (`True`, `None`, `['a', 1]`).

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Output, State};

use super::{ChatMessage, TextError};

const NAME: &str = "chat_template";

/// A compiled chat template with the special tokens it is given.
#[derive(Clone, Debug)]
pub(crate) struct ChatTemplate {
    env: Environment<'static>,
}

/// The special tokens a template sees as `bos_token`, `eos_token`, `pad_token`, `unk_token`.
#[derive(Clone, Debug, Default)]
pub(crate) struct SpecialTokens {
    pub bos: Option<String>,
    pub eos: Option<String>,
    pub pad: Option<String>,
    pub unk: Option<String>,
}

impl ChatTemplate {
    /// Compiles `source`; a syntax error is a [`TextError::Template`].
    pub(crate) fn new(source: String) -> Result<Self, TextError> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TextError::Template(describe(&e)))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, source)
            .map_err(|e| TextError::Template(describe(&e)))?;
        Ok(Self { env })
    }

    /// Renders the chat with `add_generation_prompt` and the special tokens.
    pub(crate) fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        special: &SpecialTokens,
    ) -> Result<String, TextError> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                Value::from_pairs([
                    ("role", Value::from(m.role.as_str())),
                    ("content", Value::from(m.content.as_str())),
                ])
            })
            .collect();
        let mut ctx: Vec<(&str, Value)> = vec![
            ("messages", Value::from(messages)),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
            ("tools", Value::from(())),
            ("documents", Value::from(())),
        ];
        for (name, token) in [
            ("bos_token", &special.bos),
            ("eos_token", &special.eos),
            ("pad_token", &special.pad),
            ("unk_token", &special.unk),
        ] {
            if let Some(token) = token {
                ctx.push((name, Value::from(token.as_str())));
            }
        }
        let template = self
            .env
            .get_template(NAME)
            .map_err(|e| TextError::Template(describe(&e)))?;
        template
            .render(Value::from_pairs(ctx))
            .map_err(|e| TextError::Template(describe(&e)))
    }
}

/// The error with its causes (a template's `raise_exception` message is the detail).
fn describe(error: &Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

/// `raise_exception(msg)`: fails the render with `msg`.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `{{ value }}` as Jinja2 prints it: `str(value)` in Python.
fn python_formatter(out: &mut Output, _state: &mut State, value: &Value) -> Result<(), Error> {
    let mut text = String::new();
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::String => text.push_str(value.as_str().unwrap_or_default()),
        _ => python_repr(&mut text, value, 0),
    }
    out.write_str(&text)
        .map_err(|_| Error::new(ErrorKind::WriteFailure, "cannot write the output"))
}

/// Python's `repr` of a value (`str` for booleans, `None` and numbers is the same).
fn python_repr(out: &mut String, value: &Value, depth: usize) {
    match value.kind() {
        ValueKind::None | ValueKind::Undefined => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => {
            let mut json = String::new();
            write_number(&mut json, value);
            out.push_str(match json.as_str() {
                "NaN" => "nan",
                "Infinity" => "inf",
                "-Infinity" => "-inf",
                other => other,
            });
        }
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default();
            let quote = if s.contains('\'') && !s.contains('"') {
                '"'
            } else {
                '\''
            };
            out.push(quote);
            for c in s.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if c == quote => {
                        out.push('\\');
                        out.push(c);
                    }
                    c if (c as u32) < 0x20 || c == '\u{7f}' => {
                        let _ = write!(out, "\\x{:02x}", c as u32);
                    }
                    c => out.push(c),
                }
            }
            out.push(quote);
        }
        ValueKind::Seq | ValueKind::Map if depth < 64 => {
            let is_map = value.kind() == ValueKind::Map;
            out.push(if is_map { '{' } else { '[' });
            if let Ok(items) = value.try_iter() {
                for (i, item) in items.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    python_repr(out, &item, depth + 1);
                    if is_map {
                        out.push_str(": ");
                        let v = value.get_item(&item).unwrap_or_default();
                        python_repr(out, &v, depth + 1);
                    }
                }
            }
            out.push(if is_map { '}' } else { ']' });
        }
        _ => {
            let _ = write!(out, "{value}");
        }
    }
}

/// `strftime_now(format)`: the current time (UTC) formatted with Python's `strftime` codes.
fn strftime_now(format: String) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    strftime(&format, secs)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Python's `strftime` for the common codes (`%d %m %Y %y %b %B %a %A %H %I %M %S %p %j %%`) at
/// `secs` seconds after the Unix epoch, UTC; other codes are kept as written.
fn strftime(format: &str, secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (hour, minute, second) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let before: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = before[(month - 1) as usize] + day + i64::from(leap && month > 2);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday.
    let month_name = MONTHS[(month - 1) as usize];

    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let _ = match chars.next() {
            Some('d') => write!(out, "{day:02}"),
            Some('m') => write!(out, "{month:02}"),
            Some('Y') => write!(out, "{year}"),
            Some('y') => write!(out, "{:02}", year.rem_euclid(100)),
            Some('b') => write!(out, "{}", &month_name[..3]),
            Some('B') => write!(out, "{month_name}"),
            Some('a') => write!(out, "{}", &WEEKDAYS[weekday][..3]),
            Some('A') => write!(out, "{}", WEEKDAYS[weekday]),
            Some('H') => write!(out, "{hour:02}"),
            Some('I') => write!(out, "{:02}", (hour + 11) % 12 + 1),
            Some('M') => write!(out, "{minute:02}"),
            Some('S') => write!(out, "{second:02}"),
            Some('p') => write!(out, "{}", if hour < 12 { "AM" } else { "PM" }),
            Some('j') => write!(out, "{yday:03}"),
            Some('%') => write!(out, "%"),
            Some(other) => write!(out, "%{other}"),
            None => write!(out, "%"),
        };
    }
    out
}

/// `transformers`' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, keys in insertion order, nothing HTML-escaped.
fn tojson(value: &Value, ensure_ascii: Option<bool>, kwargs: Kwargs) -> Result<String, Error> {
    let ensure_ascii = match ensure_ascii {
        Some(flag) => flag,
        None => kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
    };
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => {
            if let Some(s) = v.as_str() {
                Some(s.to_string())
            } else if let Some(n) = v.as_i64() {
                Some(" ".repeat(n.max(0) as usize))
            } else {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be an integer or a string",
                ));
            }
        }
    };
    let separators = match kwargs.get::<Option<Vec<String>>>("separators")? {
        Some(pair) if pair.len() == 2 => (pair[0].clone(), pair[1].clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be a pair of strings",
            ));
        }
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    let options = JsonOptions {
        ensure_ascii,
        indent,
        item_sep: separators.0,
        key_sep: separators.1,
        sort_keys,
    };
    let mut out = String::new();
    write_json(&mut out, value, &options, 0)?;
    Ok(out)
}

struct JsonOptions {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

fn newline(out: &mut String, options: &JsonOptions, depth: usize) {
    if let Some(indent) = &options.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(indent);
        }
    }
}

fn write_json(
    out: &mut String,
    value: &Value,
    options: &JsonOptions,
    depth: usize,
) -> Result<(), Error> {
    if depth > 512 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson: nesting too deep",
        ));
    }
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, value),
        ValueKind::String => write_string(out, value.as_str().unwrap_or_default(), options),
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                let key = match key.as_str() {
                    Some(s) => s.to_string(),
                    None => {
                        // Python turns int, float, bool and None keys into their JSON text.
                        let mut text = String::new();
                        write_json(&mut text, &key, options, depth + 1)?;
                        text
                    }
                };
                entries.push((key, item));
            }
            if options.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            if entries.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (key, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(&options.item_sep);
                }
                newline(out, options, depth + 1);
                write_string(out, key, options);
                out.push_str(&options.key_sep);
                write_json(out, item, options, depth + 1)?;
            }
            newline(out, options, depth);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&options.item_sep);
                }
                newline(out, options, depth + 1);
                write_json(out, item, options, depth + 1)?;
            }
            newline(out, options, depth);
            out.push(']');
        }
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: object of type {kind} is not JSON serializable"),
            ));
        }
    }
    Ok(())
}

/// Python's `repr` of an int or a float (`1.0`, `1e+16`, `NaN`, `Infinity`).
fn write_number(out: &mut String, value: &Value) {
    if value.is_integer() {
        let _ = write!(out, "{value}");
        return;
    }
    let x = f64::try_from(value.clone()).unwrap_or(f64::NAN);
    if x.is_nan() {
        out.push_str("NaN");
    } else if x.is_infinite() {
        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
    } else if x == 0.0 || (1e-4..1e16).contains(&x.abs()) {
        let text = format!("{x}");
        out.push_str(&text);
        if !text.contains('.') {
            out.push_str(".0");
        }
    } else {
        // Rust writes `1e16` and `1.5e-5`; Python writes `1e+16` and `1.5e-05`.
        let text = format!("{x:e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let (sign, digits) = match exponent.strip_prefix('-') {
            Some(digits) => ('-', digits),
            None => ('+', exponent),
        };
        let _ = write!(out, "{mantissa}e{sign}{digits:0>2}");
    }
}

fn write_string(out: &mut String, s: &str, options: &JsonOptions) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (options.ensure_ascii && (c as u32) > 0x7e) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
