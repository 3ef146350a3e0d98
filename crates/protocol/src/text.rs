//! Rendering of structured text. The standard lets instructions, descriptions and the state be
//! strings, objects or arrays; the model reads them as faithful plain text: objects as
//! `key: value` lines, arrays as `- item` lines, nesting by indentation.

use serde_json::Value;

/// Render a JSON value as plain text for a prompt.
pub fn render(value: &Value) -> String {
    let mut out = String::new();
    render_into(value, 0, &mut out);
    out.trim_end_matches('\n').to_string()
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::Null => Some(String::new()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(s.clone()),
        Value::Array(a) if a.is_empty() => Some(String::new()),
        Value::Object(o) if o.is_empty() => Some(String::new()),
        _ => None,
    }
}

fn indent(depth: usize, out: &mut String) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

fn render_into(value: &Value, depth: usize, out: &mut String) {
    if let Some(s) = scalar(value) {
        if depth == 0 {
            out.push_str(&s);
        } else {
            indent(depth, out);
            out.push_str(&s);
            out.push('\n');
        }
        return;
    }
    match value {
        Value::Array(items) => {
            for item in items {
                indent(depth, out);
                out.push_str("- ");
                match scalar(item) {
                    Some(s) => {
                        out.push_str(&s);
                        out.push('\n');
                    }
                    None => {
                        out.push('\n');
                        render_into(item, depth + 1, out);
                    }
                }
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                indent(depth, out);
                out.push_str(k);
                out.push(':');
                match scalar(v) {
                    Some(s) if s.is_empty() => out.push('\n'),
                    Some(s) => {
                        out.push(' ');
                        out.push_str(&s);
                        out.push('\n');
                    }
                    None => {
                        out.push('\n');
                        render_into(v, depth + 1, out);
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_kept_byte_for_byte() {
        assert_eq!(render(&json!("환불 🙂 x")), "환불 🙂 x");
    }

    #[test]
    fn objects_and_arrays_become_lines() {
        let v = json!({"task": "Decide", "include": ["refunds", "chargebacks"], "n": 3});
        assert_eq!(
            render(&v),
            "task: Decide\ninclude:\n  - refunds\n  - chargebacks\nn: 3"
        );
        assert_eq!(render(&json!(["a", {"b": 1}])), "- a\n- \n  b: 1");
    }
}
