//! OpenAI-compatible text generation on the wire: Chat Completions and Completions requests
//! as the official SDKs send them, their answers and stream chunks, and SIE's
//! `/v1/generate`. Unknown members are ignored, as OpenAI-compatible servers do; values out
//! of range are refused with the member's name as `param`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::error::{reason, ProtocolError};

/// Most stop sequences a request may give (OpenAI's limit).
pub const MAX_STOP: usize = 4;
/// Most alternatives per token `top_logprobs` may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: u32 = 20;

fn bad(param: &str, message: impl Into<String>) -> ProtocolError {
    ProtocolError::schema(&[param], message).with_reason(reason::PARAMETER_INVALID)
}

/// Text or a list of content parts.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// A part of a message's content. Only text parts are read.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

/// One message of a conversation.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default)]
    pub name: Option<String>,
    /// An assistant's earlier tool calls.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub tool_calls: Option<Vec<Value>>,
    /// The call a tool message answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

/// One stop sequence or several.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn list(&self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s.clone()],
            Stop::Many(v) => v.clone(),
        }
    }
}

/// Options of a streamed answer.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
pub struct StreamOptions {
    /// Send a last chunk with the usage of the whole request.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// A JSON schema the answer must follow.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct JsonSchemaFormat {
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub schema: Option<Value>,
    #[serde(default)]
    pub strict: Option<bool>,
}

/// The shape of the answer.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: JsonSchemaFormat },
}

/// A function the model may call.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct FunctionDef {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// The arguments' JSON schema.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Value>,
    #[serde(default)]
    pub strict: Option<bool>,
}

/// A tool: today only functions.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Tool {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionDef,
}

/// A function named by `tool_choice`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct NamedFunction {
    pub name: String,
}

/// `tool_choice` naming one function.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct NamedToolChoice {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: NamedFunction,
}

/// `none`, `auto`, `required`, or one named function.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum ToolChoice {
    Mode(String),
    Named(NamedToolChoice),
}

/// What a request asks of the tools.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolMode {
    /// No tools (none given, or `tool_choice: none`).
    None,
    /// The model may call one.
    Auto,
    /// The model must call one of these (all, or the named one).
    Required(Vec<usize>),
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ChatCompletionRequest {
    /// A served model id or alias; absent: the process's first model.
    #[serde(default)]
    pub model: Option<String>,
    #[schema(min_items = 1)]
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_completion_tokens: Option<u32>,
    /// 0 to 2; 0 picks the most likely token. Default 1.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f32>,
    /// In (0, 1]. Default 1.
    #[serde(default)]
    #[schema(exclusive_minimum = 0, maximum = 1)]
    pub top_p: Option<f32>,
    /// The same seed and request give the same text.
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Option<Stop>,
    /// Only 1.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1)]
    pub n: Option<u32>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    #[schema(maximum = 20)]
    pub top_logprobs: Option<u32>,
    #[serde(default)]
    pub response_format: Option<ResponseFormat>,
    #[serde(default)]
    pub tools: Option<Vec<Tool>>,
    #[serde(default)]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Honoured where the model's chat template reads it (as `reasoning_effort`).
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// Extra variables for the chat template (e.g. `enable_thinking`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    #[serde(default)]
    pub user: Option<String>,
}

/// Sampling settings shared by every generation request, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    pub max_tokens: Option<u32>,
    pub temperature: f32,
    pub top_p: f32,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
}

fn sampling(
    max_tokens: Option<u32>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    seed: Option<i64>,
    stop: Vec<String>,
) -> Result<SamplingParams, ProtocolError> {
    let temperature = temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(bad("temperature", "temperature must be between 0 and 2"));
    }
    let top_p = top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(bad("top_p", "top_p must be greater than 0 and at most 1"));
    }
    if max_tokens == Some(0) {
        return Err(bad("max_tokens", "max_tokens must be at least 1"));
    }
    if stop.len() > MAX_STOP {
        return Err(bad("stop", format!("at most {MAX_STOP} stop sequences")));
    }
    if stop.iter().any(String::is_empty) {
        return Err(bad("stop", "a stop sequence is empty"));
    }
    Ok(SamplingParams {
        max_tokens,
        temperature,
        top_p,
        seed: seed.map(|s| s as u64),
        stop,
    })
}

fn check_n(n: Option<u32>) -> Result<(), ProtocolError> {
    match n {
        None | Some(1) => Ok(()),
        Some(_) => Err(bad("n", "only n = 1 is served")),
    }
}

/// The text of a message's content.
pub fn content_text(content: &Option<Content>) -> Result<String, ProtocolError> {
    match content {
        None => Ok(String::new()),
        Some(Content::Text(t)) => Ok(t.clone()),
        Some(Content::Parts(parts)) => {
            let mut out = String::new();
            for p in parts {
                match (p.kind.as_str(), &p.text) {
                    ("text", Some(t)) => out.push_str(t),
                    ("text", None) => return Err(bad("messages", "a text part has no text")),
                    (other, _) => {
                        return Err(ProtocolError::schema(
                            &["messages"],
                            format!("content parts of type {other:?} are not served; send text"),
                        )
                        .with_reason(reason::MODALITY_UNSUPPORTED))
                    }
                }
            }
            Ok(out)
        }
    }
}

impl ChatCompletionRequest {
    /// Check the request; the sampling settings it gives.
    pub fn check(&self) -> Result<SamplingParams, ProtocolError> {
        if self.messages.is_empty() {
            return Err(bad("messages", "messages must not be empty"));
        }
        for m in &self.messages {
            if !matches!(
                m.role.as_str(),
                "system" | "developer" | "user" | "assistant" | "tool"
            ) {
                return Err(bad(
                    "messages",
                    format!(
                        "unknown role {:?}: use system, developer, user, assistant or tool",
                        m.role
                    ),
                ));
            }
            content_text(&m.content)?;
        }
        check_n(self.n)?;
        if let Some(k) = self.top_logprobs {
            if k > MAX_TOP_LOGPROBS {
                return Err(bad(
                    "top_logprobs",
                    format!("top_logprobs must be at most {MAX_TOP_LOGPROBS}"),
                ));
            }
        }
        if let Some(tools) = &self.tools {
            for t in tools {
                if t.kind != "function" {
                    return Err(bad(
                        "tools",
                        format!("tool type {:?} is not served", t.kind),
                    ));
                }
                if t.function.name.is_empty() {
                    return Err(bad("tools", "a function has no name"));
                }
            }
        }
        self.tool_mode()?;
        if let Some(ResponseFormat::JsonSchema { json_schema }) = &self.response_format {
            if !json_schema.schema.as_ref().is_none_or(Value::is_object) {
                return Err(bad(
                    "response_format",
                    "json_schema.schema must be an object",
                ));
            }
        }
        sampling(
            self.max_completion_tokens.or(self.max_tokens),
            self.temperature,
            self.top_p,
            self.seed,
            self.stop.as_ref().map(Stop::list).unwrap_or_default(),
        )
    }

    /// What the request asks of its tools.
    pub fn tool_mode(&self) -> Result<ToolMode, ProtocolError> {
        let tools = self.tools.as_deref().unwrap_or_default();
        let mode = match &self.tool_choice {
            None => "auto",
            Some(ToolChoice::Mode(m)) => m.as_str(),
            Some(ToolChoice::Named(n)) => {
                return match tools
                    .iter()
                    .position(|t| t.function.name == n.function.name)
                {
                    Some(i) => Ok(ToolMode::Required(vec![i])),
                    None => Err(bad(
                        "tool_choice",
                        format!(
                            "tool_choice names {:?}, which tools do not list",
                            n.function.name
                        ),
                    )),
                };
            }
        };
        match mode {
            _ if tools.is_empty() && mode != "required" => Ok(ToolMode::None),
            "none" => Ok(ToolMode::None),
            "auto" => Ok(ToolMode::Auto),
            "required" if !tools.is_empty() => Ok(ToolMode::Required((0..tools.len()).collect())),
            "required" => Err(bad(
                "tool_choice",
                "tool_choice is required but no tools are given",
            )),
            other => Err(bad(
                "tool_choice",
                format!("tool_choice {other:?}: use none, auto, required or a named function"),
            )),
        }
    }
}

/// A prompt: one text or several.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Prompt {
    One(String),
    Many(Vec<String>),
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct CompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub prompt: Prompt,
    /// Default 16, as OpenAI's.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default)]
    pub n: Option<u32>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// How many most likely tokens to report at each position (0 to 5).
    #[serde(default)]
    pub logprobs: Option<u32>,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub best_of: Option<u32>,
    #[serde(default)]
    pub user: Option<String>,
}

/// Most prompts one completions request may carry.
pub const MAX_PROMPTS: usize = 16;

impl CompletionRequest {
    pub fn prompts(&self) -> Vec<String> {
        match &self.prompt {
            Prompt::One(p) => vec![p.clone()],
            Prompt::Many(v) => v.clone(),
        }
    }

    pub fn check(&self) -> Result<SamplingParams, ProtocolError> {
        let n = self.prompts().len();
        if n == 0 || n > MAX_PROMPTS {
            return Err(bad("prompt", format!("give 1 to {MAX_PROMPTS} prompts")));
        }
        check_n(self.n)?;
        if self.best_of.is_some_and(|b| b != 1) {
            return Err(bad("best_of", "only best_of = 1 is served"));
        }
        if self.echo == Some(true) {
            return Err(bad("echo", "echo is not served"));
        }
        if self.logprobs.is_some_and(|k| k > 5) {
            return Err(bad("logprobs", "logprobs must be at most 5"));
        }
        sampling(
            Some(self.max_tokens.unwrap_or(16)),
            self.temperature,
            self.top_p,
            self.seed,
            self.stop.as_ref().map(Stop::list).unwrap_or_default(),
        )
    }
}

/// SIE `POST /v1/generate/:model`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct SieGenerateRequest {
    pub prompt: String,
    /// Hard cap on output tokens.
    pub max_new_tokens: u32,
    /// Default 1.0.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Default 1.0.
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub stop: Option<Vec<String>>,
    #[serde(default)]
    pub seed: Option<i64>,
    /// Server-Sent Events: `text_delta` events, then `done`.
    #[serde(default)]
    pub stream: Option<bool>,
}

impl SieGenerateRequest {
    pub fn check(&self) -> Result<SamplingParams, ProtocolError> {
        sampling(
            Some(self.max_new_tokens),
            self.temperature,
            self.top_p,
            self.seed,
            self.stop.clone().unwrap_or_default(),
        )
        .map_err(|e| {
            if e.loc.last().is_some_and(|l| l == "max_tokens") {
                bad("max_new_tokens", "max_new_tokens must be at least 1")
            } else {
                e
            }
        })
    }
}

/// Token counts of a request. (Named apart in the OpenAPI document: the decision
/// endpoints' `Usage` is another shape.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, ToSchema)]
#[schema(as = OpenAiUsage)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

impl Usage {
    pub fn new(prompt: u64, completion: u64) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
        }
    }
}

/// One alternative token and its log-probability.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// A generated token's log-probability, with the most likely alternatives.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

/// `logprobs` of a chat choice.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ChatLogprobs {
    pub content: Vec<TokenLogprob>,
}

/// The function of a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct FunctionCall {
    pub name: String,
    /// The arguments as a JSON text.
    pub arguments: String,
}

/// A tool call in an answer.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ToolCallOut {
    /// Its place among the message's calls (stream chunks only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

/// The assistant's answer.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct AssistantMessage {
    pub role: String,
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut>>,
}

/// One choice of a chat completion.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub logprobs: Option<ChatLogprobs>,
    /// `stop`, `length` or `tool_calls`.
    pub finish_reason: String,
}

/// The answer of `POST /v1/chat/completions`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ChatCompletion {
    pub id: String,
    /// `chat.completion`.
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
}

/// What a stream chunk adds to the answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct ChatDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut>>,
}

/// One choice of a stream chunk.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: ChatDelta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<String>,
}

/// A chunk of a streamed chat completion (`data: {…}` events).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ChatCompletionChunk {
    pub id: String,
    /// `chat.completion.chunk`.
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChunkChoice>,
    /// Only on the last chunk, with `stream_options.include_usage`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// `logprobs` of a completion choice (the legacy shape).
#[derive(Debug, Clone, Default, PartialEq, Serialize, ToSchema)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<std::collections::BTreeMap<String, f32>>,
    pub text_offset: Vec<u64>,
}

/// One choice of a completion.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    /// `stop` or `length` (null in stream chunks before the last).
    pub finish_reason: Option<String>,
}

/// The answer of `POST /v1/completions` (and each of its stream chunks).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Completion {
    pub id: String,
    /// `text_completion`.
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// The answer of SIE `POST /v1/generate/:model` (and its stream's `done` event).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct SieGenerateResponse {
    pub model: String,
    pub text: String,
    /// `stop` or `length`.
    pub finish_reason: String,
    pub usage: Usage,
    /// Milliseconds to the first token.
    pub ttft_ms: f64,
    /// Mean milliseconds per output token after the first.
    pub tpot_ms: f64,
}

/// The OpenAI error body.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OpenAiErrorDoc {
    pub error: OpenAiErrorDetailDoc,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OpenAiErrorDetailDoc {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(v: Value) -> ChatCompletionRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn sdk_shaped_requests_decode_and_check() {
        let r = chat(serde_json::json!({
            "model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "max_completion_tokens": 5, "stop": "x", "seed": 7, "stream": true,
            "stream_options": {"include_usage": true}, "unknown_extra": 1,
            "tools": [{"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object"}}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
        }));
        let s = r.check().unwrap();
        assert_eq!(s.max_tokens, Some(5));
        assert_eq!(s.stop, vec!["x".to_string()]);
        assert_eq!(r.tool_mode().unwrap(), ToolMode::Required(vec![0]));
    }

    #[test]
    fn out_of_range_values_name_their_parameter() {
        for (patch, param) in [
            (serde_json::json!({"temperature": 3.0}), "temperature"),
            (serde_json::json!({"top_p": 0.0}), "top_p"),
            (serde_json::json!({"n": 2}), "n"),
            (serde_json::json!({"top_logprobs": 21}), "top_logprobs"),
            (serde_json::json!({"messages": []}), "messages"),
            (
                serde_json::json!({"stop": ["a", "b", "c", "d", "e"]}),
                "stop",
            ),
            (
                serde_json::json!({"tool_choice": "required"}),
                "tool_choice",
            ),
            (
                serde_json::json!({"messages": [{"role": "robot", "content": "x"}]}),
                "messages",
            ),
        ] {
            let mut v = serde_json::json!({"messages": [{"role": "user", "content": "hi"}]});
            for (k, x) in patch.as_object().unwrap() {
                v[k] = x.clone();
            }
            let e = chat(v).check().unwrap_err();
            assert_eq!(e.loc.last().map(String::as_str), Some(param), "{patch}");
        }
    }

    #[test]
    fn images_are_refused_by_modality() {
        let r = chat(serde_json::json!({"messages": [{"role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}));
        assert_eq!(
            r.check().unwrap_err().reason,
            Some(reason::MODALITY_UNSUPPORTED)
        );
    }
}
