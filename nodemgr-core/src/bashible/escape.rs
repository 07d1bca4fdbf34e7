//! Escaping of values printed by the bashible templates, chosen by the template's extension:
//! every `{{ value }}` in a `.sh` template is single-quoted for the shell, in a `.json` template
//! encoded as a JSON value, in a `.toml` template encoded as a TOML value; any other template
//! (systemd unit, environment or sysctl file, which have no reliable quoting) may print only
//! numbers and strings of a conservative character set ([`is_plain`]), anything else is an
//! error. A template opts out
//! only with an explicit `|safe`, which the templates use for text that was itself rendered and
//! escaped by another template (never for a manifest value).
//!
//! A NUL byte cannot be carried by a shell word, a JSON document read by the kubelet or a
//! TOML file, so a value holding one is refused instead of silently truncated.

use minijinja::value::{Value, ValueKind};
use minijinja::{AutoEscape, Error, ErrorKind, Output, State};

/// The auto-escape mode of `.sh` templates.
pub const SHELL: &str = "shell";
/// The auto-escape mode of `.json` templates.
pub const JSON: &str = "json";
/// The auto-escape mode of `.toml` templates.
pub const TOML: &str = "toml";
/// The auto-escape mode of every other template (systemd units, sysctl and env files).
pub const PLAIN: &str = "plain";

/// Quotes `text` as one shell word: `'...'`, each `'` written as `'\''`. The result means
/// exactly `text` to `sh` and `bash` whatever `text` holds (`$`, backticks, newlines, quotes),
/// except a NUL byte, which no shell word can carry; callers refuse those first.
pub fn shell_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// Encodes `text` as a TOML basic string (`"..."`), escaping what TOML requires: `"`, `\` and
/// the control characters (U+0000..U+001F except tab, and U+007F).
pub fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push('\t'),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\u{:04X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Encodes `text` as a JSON string (which YAML reads as the same string).
pub fn json_string(text: &str) -> String {
    // Serializing a &str to JSON cannot fail.
    serde_json::to_string(text).unwrap_or_else(|_| String::from("\"\""))
}

fn refuse(message: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, message)
}

/// The scalar text of a value (booleans as `true`/`false`, as JSON, TOML and the shell want
/// them), or an error for values a template must not print whole.
fn scalar_text(value: &Value) -> Result<String, Error> {
    match value.kind() {
        ValueKind::Bool => Ok(if value.is_true() { "true" } else { "false" }.to_owned()),
        ValueKind::String | ValueKind::Number => Ok(value.to_string()),
        ValueKind::Undefined | ValueKind::None => Err(refuse(
            "a template printed an undefined or empty value (template bug)".into(),
        )),
        other => Err(refuse(format!(
            "a template printed a whole {other} instead of a scalar (template bug)"
        ))),
    }
}

/// The formatter installed in the bashible environment: applies the escape of the template's
/// auto-escape mode to every printed value not marked `|safe`.
pub fn format_value(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    if value.is_safe() {
        return write!(out, "{value}").map_err(Error::from);
    }
    let text = scalar_text(value)?;
    if text.contains('\0') {
        return Err(refuse(format!(
            "value {text:?} holds a NUL byte, which a script or configuration file cannot carry"
        )));
    }
    let mode = match state.auto_escape() {
        AutoEscape::Custom(name) => name.as_ref(),
        _ => "",
    };
    let scalar = matches!(value.kind(), ValueKind::Number | ValueKind::Bool);
    let escaped = match mode {
        SHELL => shell_quote(&text),
        JSON if scalar => text,
        JSON => json_string(&text),
        TOML if scalar => text,
        TOML => toml_string(&text),
        PLAIN if is_plain(&text) => text,
        PLAIN => {
            return Err(refuse(format!(
                "value {text:?} cannot be written into a configuration file without quoting \
                 (only letters, digits and . _ : / , = @ + - are allowed there)"
            )));
        }
        other => {
            return Err(refuse(format!(
                "no escaping defined for auto-escape mode {other:?} (template bug)"
            )));
        }
    };
    out.write_str(&escaped).map_err(Error::from)
}

/// Whether `text` may stand unquoted in a plain configuration file (a systemd unit, an
/// environment file, a sysctl file): letters, digits and `. _ : / , = @ + -` only.
pub fn is_plain(text: &str) -> bool {
    text.bytes().all(|b| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'.' | b'_' | b':' | b'/' | b',' | b'=' | b'@' | b'+' | b'-'
            )
    })
}

/// The auto-escape mode of a template, from its name's extension: `.sh` shell, `.json` JSON,
/// `.toml` TOML, anything else plain (values must pass [`is_plain`]).
pub fn auto_escape_for(name: &str) -> AutoEscape {
    let mode = match name.rsplit('.').next() {
        Some("sh") => SHELL,
        Some("json") => JSON,
        Some("toml") => TOML,
        _ => PLAIN,
    };
    AutoEscape::Custom(mode.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// What bash makes of a quoted word: `printf %s <word>`.
    fn bash_echo(word: &str) -> String {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("printf %s {word}"))
            .output()
            .expect("bash runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn shell_quote_survives_hostile_text() {
        for text in [
            "",
            "plain",
            "it's",
            "'",
            "''",
            "$(touch /tmp/nodemgr-pwned)",
            "`id`",
            "a\nb",
            "x; rm -rf /",
            "\\'\"$HOME\"",
            "ünïcødé ✓",
        ] {
            assert_eq!(bash_echo(&shell_quote(text)), text, "{text:?}");
        }
    }

    #[test]
    fn toml_and_json_strings_escape_control_characters() {
        assert_eq!(
            toml_string("a\"b\\c\nd\u{7f}"),
            "\"a\\\"b\\\\c\\nd\\u007F\""
        );
        assert_eq!(json_string("a\"b\n"), "\"a\\\"b\\n\"");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        #[test]
        fn shell_quote_round_trips(text in "[^\u{0}]{0,40}") {
            proptest::prop_assert_eq!(bash_echo(&shell_quote(&text)), text);
        }
    }
}
