//! Chat prompts: a model's own chat template (the Jinja source its GGUF file carries) rendered
//! with minijinja, the way Hugging Face's `apply_chat_template` renders it; and the reading of
//! tool calls back out of generated text.

use minijinja::{Environment, Error, ErrorKind, Value as Jinja};
use serde_json::{json, Map, Value};

use crate::error::EngineError;

/// ChatML, for models whose file carries no template.
const CHATML: &str = "{%- for message in messages %}<|im_start|>{{ message.role }}\n\
{{ message.content }}<|im_end|>\n{% endfor %}\
{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    tools: bool,
    bos: String,
    eos: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("tools", &self.tools)
            .finish()
    }
}

fn raise_exception(message: String) -> Result<Jinja, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// Today's UTC date in the strftime `format` templates use for a date line (`%d`, `%m`, `%Y`,
/// `%b`, `%B`; other directives are left as written).
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, m, d) = civil_date((secs / 86_400) as i64);
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
    let month = MONTHS[(m - 1) as usize];
    format
        .replace("%d", &format!("{d:02}"))
        .replace("%m", &format!("{m:02}"))
        .replace("%Y", &y.to_string())
        .replace("%B", month)
        .replace("%b", &month[..3])
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_date(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

impl ChatTemplate {
    /// Compile `source` (or ChatML when the model has none).
    pub fn new(
        source: Option<String>,
        bos: String,
        eos: String,
    ) -> Result<ChatTemplate, EngineError> {
        let source = source.unwrap_or_else(|| CHATML.to_string());
        let tools = source.contains("tools");
        let mut env = Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned("chat", source)
            .map_err(|e| EngineError::Template(e.to_string()))?;
        Ok(ChatTemplate {
            env,
            tools,
            bos,
            eos,
        })
    }

    /// Whether the template renders a `tools` list itself.
    pub fn renders_tools(&self) -> bool {
        self.tools
    }

    /// Render a conversation. `messages` are OpenAI chat messages (content already flattened to
    /// text); `tools` the request's tool definitions; `kwargs` extra template variables (e.g.
    /// `enable_thinking`), which a template that does not read them ignores.
    pub fn render(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        kwargs: &Map<String, Value>,
    ) -> Result<String, EngineError> {
        let mut messages: Vec<Value> = messages.to_vec();
        if let Some(tools) = tools.filter(|t| !t.is_empty() && !self.tools) {
            // The template cannot show tools: describe them in a system message.
            let note = tool_note(tools);
            match messages.first_mut() {
                Some(m) if m["role"] == "system" => {
                    let text = m["content"].as_str().unwrap_or_default().to_string();
                    m["content"] = json!(format!("{text}\n\n{note}"));
                }
                _ => messages.insert(0, json!({"role": "system", "content": note})),
            }
        }
        let mut ctx = kwargs.clone();
        ctx.insert("messages".into(), Value::Array(messages));
        if let Some(t) = tools.filter(|t| !t.is_empty() && self.tools) {
            ctx.insert("tools".into(), Value::Array(t.to_vec()));
        }
        ctx.insert("add_generation_prompt".into(), json!(true));
        ctx.insert("bos_token".into(), json!(self.bos));
        ctx.insert("eos_token".into(), json!(self.eos));
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| EngineError::Template(e.to_string()))?;
        template
            .render(Jinja::from_serialize(Value::Object(ctx)))
            .map_err(|e| EngineError::Template(e.to_string()))
    }
}

/// How tools are described to a model whose template has no place for them: the Hermes
/// convention most small instruction models know.
fn tool_note(tools: &[Value]) -> String {
    let listed: Vec<String> = tools.iter().map(|t| t.to_string()).collect();
    format!(
        "You may call functions. Their signatures:\n<tools>\n{}\n</tools>\n\
         To call one, answer with <tool_call>{{\"name\": <function name>, \"arguments\": \
         <arguments object>}}</tool_call>.",
        listed.join("\n")
    )
}

/// A tool call read from generated text.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments as a JSON text.
    pub arguments: String,
}

fn call_of(v: &Value) -> Option<ToolCall> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = v
        .get("arguments")
        .or_else(|| v.get("parameters"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let arguments = match args {
        Value::String(s) => s,
        other => other.to_string(),
    };
    Some(ToolCall { name, arguments })
}

/// Tool calls in a generated text: `<tool_call>{…}</tool_call>` blocks, or (when the output
/// was constrained to a call) the whole text as one JSON call or a list of calls. Returns the
/// calls and the text outside them.
pub fn read_tool_calls(text: &str, whole: bool) -> (Vec<ToolCall>, String) {
    if whole {
        let calls = match serde_json::from_str::<Value>(text.trim()) {
            Ok(Value::Array(items)) => items.iter().filter_map(call_of).collect(),
            Ok(v) => call_of(&v).into_iter().collect(),
            Err(_) => Vec::new(),
        };
        if !calls.is_empty() {
            return (calls, String::new());
        }
    }
    let mut calls = Vec::new();
    let mut rest = String::new();
    let mut s = text;
    while let Some(a) = s.find("<tool_call>") {
        let after = &s[a + "<tool_call>".len()..];
        let Some(b) = after.find("</tool_call>") else {
            break;
        };
        match serde_json::from_str::<Value>(after[..b].trim())
            .ok()
            .as_ref()
            .and_then(call_of)
        {
            Some(c) => {
                rest.push_str(&s[..a]);
                calls.push(c);
            }
            None => rest.push_str(&s[..a + "<tool_call>".len() + b + "</tool_call>".len()]),
        }
        s = &after[b + "</tool_call>".len()..];
    }
    rest.push_str(s);
    (calls, rest.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_renders_a_conversation_with_the_generation_prompt() {
        let t = ChatTemplate::new(None, String::new(), String::new()).unwrap();
        let out = t
            .render(
                &[json!({"role": "user", "content": "Hi"})],
                None,
                &Map::new(),
            )
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn tools_go_into_a_system_message_when_the_template_has_no_place_for_them() {
        let t = ChatTemplate::new(None, String::new(), String::new()).unwrap();
        let tool = json!({"type": "function", "function": {"name": "get_weather"}});
        let out = t
            .render(
                &[json!({"role": "user", "content": "Weather?"})],
                Some(&[tool]),
                &Map::new(),
            )
            .unwrap();
        assert!(out.starts_with("<|im_start|>system\nYou may call functions"));
        assert!(out.contains("get_weather"));
    }

    #[test]
    fn template_errors_and_python_methods() {
        let src = "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}\
                   {% endif %}{{ messages[0].content.strip() | upper }}"
            .to_string();
        let t = ChatTemplate::new(Some(src), String::new(), String::new()).unwrap();
        let err = t
            .render(
                &[json!({"role": "system", "content": "x"})],
                None,
                &Map::new(),
            )
            .unwrap_err();
        assert!(err.to_string().contains("first must be user"));
        let ok = t
            .render(
                &[json!({"role": "user", "content": " hi "})],
                None,
                &Map::new(),
            )
            .unwrap();
        assert_eq!(ok, "HI");
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(20_787), (2026, 11, 30));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
    }

    #[test]
    fn tool_calls_are_read_from_tags_or_a_whole_json_answer() {
        let (calls, rest) = read_tool_calls(
            "Sure. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>",
            false,
        );
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].arguments, "{\"city\":\"Oslo\"}");
        assert_eq!(rest, "Sure.");
        let (calls, rest) = read_tool_calls("{\"name\": \"f\", \"arguments\": {\"x\": 1}}", true);
        assert_eq!((calls.len(), rest.as_str()), (1, ""));
        let (calls, rest) = read_tool_calls("no call here", true);
        assert!(calls.is_empty());
        assert_eq!(rest, "no call here");
        // A broken block stays text.
        let (calls, rest) = read_tool_calls("<tool_call>{oops</tool_call>", false);
        assert!(calls.is_empty());
        assert_eq!(rest, "<tool_call>{oops</tool_call>");
    }
}
